//! The documentation holds together: every relative link or image in a
//! Markdown file names a file of the repository and, into a Markdown file, a
//! heading it has (GitHub-style anchors); README.md stays a newcomer's page
//! (at most 250 lines, opening with `cargo xtask demo` and `cargo xtask
//! test`); and each picture drawn by Graphviz under docs/ shows the nodes and
//! edges of the `.dot` source beside it. The `*_is_caught` tests feed each
//! check a wrong input and expect it named.

mod markdown;

use markdown::{anchors, root, text_files};
use std::collections::{BTreeMap, BTreeSet};

// ------------------------------------------------------------ Markdown links

/// The text of `line` outside inline code spans (`` `…` ``), where a
/// bracket is an example, not a link.
fn outside_code_spans(line: &str) -> String {
    line.split('`')
        .enumerate()
        .filter(|(index, _)| index % 2 == 0)
        .map(|(_, text)| text)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `(line, target)` of every relative link or image (`](target)`) of a
/// Markdown text, outside fenced code blocks and inline code; a target with a
/// scheme (`https:`, `mailto:`) is not a file of the repository.
fn relative_links(markdown: &str) -> Vec<(usize, String)> {
    let mut links = Vec::new();
    let mut in_fence = false;
    for (index, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let text = outside_code_spans(line);
        for (start, marker) in text.match_indices("](") {
            let rest = &text[start + marker.len()..];
            let Some(end) = rest.find(')') else {
                continue;
            };
            let target = rest[..end].split_whitespace().next().unwrap_or_default();
            let has_scheme = target
                .split_once(':')
                .is_some_and(|(scheme, _)| scheme.chars().all(|c| c.is_ascii_alphabetic()));
            if !target.is_empty() && !has_scheme {
                links.push((index + 1, target.to_string()));
            }
        }
    }
    links
}

/// `target` of a link in the file `from`, as a path from the workspace root
/// (`..` resolved); `None` when it leaves the repository.
fn resolve(from: &str, target: &str) -> Option<String> {
    let mut parts: Vec<&str> = from.split('/').collect();
    parts.pop();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    Some(parts.join("/"))
}

/// `path:line: target (why)` for each relative link of the Markdown file
/// `path` that names a file `exists` denies, or an `#anchor` that is not a
/// heading of the Markdown file it points into (`anchors_of`: that file's
/// anchors, `None` for a file that is not Markdown).
fn broken_relative_links(
    path: &str,
    text: &str,
    exists: impl Fn(&str) -> bool,
    anchors_of: impl Fn(&str) -> Option<BTreeSet<String>>,
) -> Vec<String> {
    let mut broken = Vec::new();
    for (line, target) in relative_links(text) {
        let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
        let resolved = if file.is_empty() {
            Some(path.to_string())
        } else {
            resolve(path, file)
        };
        let Some(resolved) = resolved.filter(|resolved| exists(resolved)) else {
            broken.push(format!("{path}:{line}: {target} (no such file)"));
            continue;
        };
        if anchor.is_empty() {
            continue;
        }
        if let Some(known) = anchors_of(&resolved)
            && !known.contains(anchor)
        {
            broken.push(format!("{path}:{line}: {target} (no such heading)"));
        }
    }
    broken
}

#[test]
fn every_markdown_link_names_an_existing_file_and_heading() {
    let root = root();
    let files = text_files("");
    let markdown: BTreeMap<&str, &str> = files
        .iter()
        .filter(|(path, _)| path.ends_with(".md"))
        .map(|(path, text)| (path.as_str(), text.as_str()))
        .collect();
    let links: usize = markdown
        .values()
        .map(|text| relative_links(text).len())
        .sum();
    assert!(
        links > 0,
        "no relative Markdown links found: is the scan empty?"
    );
    let broken: Vec<String> = markdown
        .iter()
        .flat_map(|(path, text)| {
            broken_relative_links(
                path,
                text,
                |file| root.join(file).exists(),
                |file| markdown.get(file).map(|text| anchors(text)),
            )
        })
        .collect();
    assert!(
        broken.is_empty(),
        "Markdown links to files or headings that do not exist:\n  {}",
        broken.join("\n  ")
    );
}

#[test]
fn broken_markdown_links_are_caught() {
    let docs = BTreeMap::from([
        ("README.md", "# Room\n\n## Prerequisites\n"),
        ("docs/operations.md", "# Operations\n\n## Trust boundary\n"),
    ]);
    let exists = |file: &str| docs.contains_key(file) || file == "docs/pipeline.svg";
    let anchors_of = |file: &str| docs.get(file).map(|text| anchors(text));
    let text = "[ok](operations.md#trust-boundary) [ok](../README.md) ![p](pipeline.svg)\n\
                [gone](../README.md#trust-boundary) [moved](configuration.md)\n\
                [self](#trust-boundary) [self](#local-stack) [web](https://example.com/x.md)\n\
                `[example](nowhere.md)`\n\
                ```\n[fenced](nowhere.md)\n```\n\
                [out](../../outside.md)\n";
    assert_eq!(
        broken_relative_links("docs/operations.md", text, exists, anchors_of),
        [
            "docs/operations.md:2: ../README.md#trust-boundary (no such heading)",
            "docs/operations.md:2: configuration.md (no such file)",
            "docs/operations.md:3: #local-stack (no such heading)",
            "docs/operations.md:8: ../../outside.md (no such file)",
        ]
    );
}

// ------------------------------------------------------------------ README

/// The README a newcomer reads in two minutes: at most this many lines.
const README_MAX_LINES: usize = 250;

/// What keeps README.md a newcomer's page: short, and opening (before its
/// first section) with the two commands a fresh machine runs.
fn readme_problems(readme: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let lines = readme.lines().count();
    if lines > README_MAX_LINES {
        problems.push(format!(
            "README.md has {lines} lines, more than {README_MAX_LINES}: reference belongs in docs/"
        ));
    }
    let opening = readme.split("\n## ").next().unwrap_or_default();
    let first_block = opening.split("```").nth(1).unwrap_or_default();
    for command in ["cargo xtask demo", "cargo xtask test"] {
        if !first_block.contains(command) {
            problems.push(format!(
                "README.md must open with `{command}` in its first code block, before any section"
            ));
        }
    }
    problems
}

#[test]
fn the_readme_is_short_and_opens_with_the_two_commands() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let problems = readme_problems(&readme);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_long_readme_or_a_missing_command_is_caught() {
    let good = "# Room\n\n```bash\ncargo xtask demo\ncargo xtask test\n```\n\n## What it is\n";
    assert!(readme_problems(good).is_empty());
    let long = format!("{good}{}", "line\n".repeat(README_MAX_LINES));
    assert!(readme_problems(&long)[0].contains("more than 250"));
    let late = "# Room\n\n## What it is\n\n```bash\ncargo xtask demo\ncargo xtask test\n```\n";
    assert_eq!(readme_problems(late).len(), 2);
    let one = good.replace("cargo xtask test\n", "");
    let problems = readme_problems(&one);
    assert!(
        problems.len() == 1 && problems[0].contains("`cargo xtask test`"),
        "{problems:?}"
    );
}

// ------------------------------------------------------- pictures and sources

/// `(picture, source)` pairs: each SVG under docs/ drawn by Graphviz from
/// the `.dot` file beside it (the command is at the top of the source).
const DRAWN_PICTURES: &[(&str, &str)] = &[("docs/pipeline.svg", "docs/pipeline.dot")];

/// The node and edge names of a Graphviz source: `a [..]` declares node
/// `a`, `a -> b` an edge `a->b` (attribute statements excluded).
fn dot_names(dot: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in dot.lines() {
        let statement = line.trim();
        if statement.starts_with("//") {
            continue;
        }
        let head = statement
            .split(['[', ';'])
            .next()
            .unwrap_or_default()
            .trim();
        if let Some((from, to)) = head.split_once("->") {
            names.insert(format!("{}->{}", from.trim(), to.trim()));
        } else if statement.contains('[')
            && !head.is_empty()
            && head.chars().all(|c| c.is_alphanumeric() || c == '_')
            && !["graph", "node", "edge"].contains(&head)
        {
            names.insert(head.to_string());
        }
    }
    names
}

/// The node and edge names Graphviz wrote into an SVG (`<title>` of each
/// `node` and `edge` group), unescaped.
fn svg_names(svg: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut in_item = false;
    for line in svg.lines() {
        if line.starts_with("<g id=") {
            in_item = line.contains("class=\"node\"") || line.contains("class=\"edge\"");
            continue;
        }
        if let Some(title) = line
            .strip_prefix("<title>")
            .and_then(|rest| rest.strip_suffix("</title>"))
            && in_item
        {
            names.insert(title.replace("&#45;", "-").replace("&gt;", ">"));
            in_item = false;
        }
    }
    names
}

#[test]
fn every_drawn_picture_shows_its_source() {
    for (picture, source) in DRAWN_PICTURES {
        let svg = std::fs::read_to_string(root().join(picture)).unwrap();
        let dot = std::fs::read_to_string(root().join(source)).unwrap();
        let (drawn, written) = (svg_names(&svg), dot_names(&dot));
        assert!(!written.is_empty(), "{source}: no nodes found");
        assert_eq!(
            drawn, written,
            "{picture} is not drawn from the current {source}: regenerate it with the command at the top of {source}"
        );
    }
}

#[test]
fn a_picture_behind_its_source_is_caught() {
    let dot = "digraph g {\n  node [shape=box];\n  a [label=\"A\"];\n  b [label=\"B\"];\n  a -> b [label=\"x\"];\n}\n";
    assert_eq!(
        dot_names(dot),
        BTreeSet::from(["a".to_string(), "b".to_string(), "a->b".to_string()])
    );
    let svg = "<g id=\"graph0\" class=\"graph\">\n<title>g</title>\n\
               <g id=\"node1\" class=\"node\">\n<title>a</title>\n</g>\n\
               <g id=\"edge1\" class=\"edge\">\n<title>a&#45;&gt;b</title>\n</g>\n";
    let drawn = svg_names(svg);
    assert_eq!(drawn, BTreeSet::from(["a".to_string(), "a->b".to_string()]));
    assert_ne!(
        drawn,
        dot_names(dot),
        "a node missing from the picture must show"
    );
}
