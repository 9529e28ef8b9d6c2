//! What the documentation tests share: the repository's text files (from
//! `git ls-files`, tracked and not-ignored new files; a plain tree walk
//! skipping `target/` and `.git/` when git is unavailable) and the anchors
//! GitHub gives a Markdown file's headings.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("workspace root")
        .to_path_buf()
}

/// Repository files, relative to `root`: tracked plus new, not-ignored files.
pub fn repository_files(root: &Path) -> Vec<PathBuf> {
    let listed = Command::new("git")
        .args([
            "ls-files",
            "--cached",
            "--others",
            "--exclude-standard",
            "-z",
        ])
        .current_dir(root)
        .output();
    match listed {
        Ok(output) if output.status.success() => output
            .stdout
            .split(|byte| *byte == 0)
            .filter(|name| !name.is_empty())
            .map(|name| PathBuf::from(String::from_utf8_lossy(name).into_owned()))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
        _ => {
            let mut files = Vec::new();
            walk(root, root, &mut files);
            files.sort();
            files
        }
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|name| name == "target" || name == ".git")
            {
                continue;
            }
            walk(root, &path, out);
        } else if let Ok(relative) = path.strip_prefix(root) {
            out.push(relative.to_path_buf());
        }
    }
}

/// `(relative path, text)` of every repository file but `skip`: UTF-8 text
/// only (binary files and files deleted from the working tree are skipped).
pub fn text_files(skip: &str) -> Vec<(String, String)> {
    let root = root();
    repository_files(&root)
        .into_iter()
        .filter_map(|relative| {
            let name = relative.to_string_lossy().replace('\\', "/");
            if name == skip {
                return None;
            }
            let bytes = std::fs::read(root.join(&relative)).ok()?;
            if bytes.contains(&0) {
                return None;
            }
            String::from_utf8(bytes).ok().map(|text| (name, text))
        })
        .collect()
}

/// GitHub's anchor of a heading: lowercase; letters, digits, `-` and `_`
/// kept; spaces become `-`; everything else (punctuation, backticks) dropped.
pub fn github_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// Anchors of every heading of a Markdown text, outside fenced code blocks;
/// a repeated heading gets `-1`, `-2`, … as on GitHub.
pub fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    let mut in_fence = false;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        let Some(title) = trimmed[hashes..].strip_prefix(' ') else {
            continue;
        };
        if !(1..=6).contains(&hashes) {
            continue;
        }
        let anchor = github_anchor(title.trim_end_matches('#'));
        let count = seen.entry(anchor.clone()).or_insert(0);
        anchors.insert(if *count == 0 {
            anchor.clone()
        } else {
            format!("{anchor}-{count}")
        });
        *count += 1;
    }
    anchors
}
