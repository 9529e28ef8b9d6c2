//! Docs live inside the repository (docs/style.md, "Docs live inside the
//! repository"). Every text file the repository holds (from `git ls-files`,
//! tracked and not-ignored new files; a plain tree walk skipping `target/` and
//! `.git/` when git is unavailable) is scanned for:
//! - references to the design documents this project started from, which are
//!   not part of the repository (`seed 001`, `seeds 000/001`, a `seeds/`
//!   path, the brief's `shared/DESIGN.md`, `../shared/`) — the reasoning they
//!   held is in docs/design.md now, and comments link to its sections;
//! - links to `design.md#anchor` whose anchor is not a heading of
//!   docs/design.md (GitHub-style anchors), so a renamed section cannot leave
//!   dangling links behind.
//!
//! Random seeds (`--seed 42`, "seeded schedule") are not references and are
//! not flagged. This file is the one file not scanned: it has to spell the
//! patterns it looks for. A reference that cannot be changed is listed in
//! [`ALLOWED`] with its reason; the list is checked for staleness, so an
//! entry cannot outlive its reason. The scanners are std-only and text-based; the
//! `*_is_caught` tests below show each one catches what it forbids. Links
//! between the Markdown files, the README's length and the pictures drawn
//! from sources are checked by `doc_links.rs`.

mod markdown;

use markdown::{anchors, github_anchor, root, text_files};
use std::collections::BTreeSet;

/// This file, relative to the workspace root (it contains the patterns).
const SELF_PATH: &str = "deploy/check/tests/doc_references.rs";

/// The design document anchors are checked against.
const DESIGN_PATH: &str = "docs/design.md";

/// `(path, snippet of the line, reason)` of references that must stay. Empty:
/// even a released migration's comments can change, through
/// `service_kit::db::COMMENT_ONLY_EDITS`.
const ALLOWED: &[(&str, &str, &str)] = &[];

// ------------------------------------------------------- external references

/// Why `line` refers to a document outside the repository, if it does.
fn external_reference(line: &str) -> Option<&'static str> {
    let lower = line.to_lowercase();
    if lower.contains("shared/design.md") {
        return Some("the shared design brief");
    }
    if lower.contains("../shared/") {
        return Some("a path outside the repository (../shared/)");
    }
    if lower.contains("seeds/") {
        return Some("the seed documents' directory");
    }
    if seed_number(&lower) {
        return Some("a seed document by number");
    }
    if seed_file_name(&lower) {
        return Some("a seed document by file name");
    }
    None
}

/// `seed 001`, `seeds 000/001`, `seed 0` + digit: the word "seed" (or
/// "seeds"), whitespace, then `0` and another digit. `--seed 42` does not match.
fn seed_number(lower: &str) -> bool {
    lower.match_indices("seed").any(|(start, _)| {
        let word_start = start == 0
            || !lower[..start]
                .chars()
                .next_back()
                .is_some_and(char::is_alphanumeric);
        let rest = lower[start + "seed".len()..]
            .strip_prefix('s')
            .unwrap_or(&lower[start + "seed".len()..]);
        let digits = rest.trim_start();
        word_start && digits.len() < rest.len() && starts_with_zero_digit(digits)
    })
}

fn starts_with_zero_digit(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next() == Some('0') && chars.next().is_some_and(|c| c.is_ascii_digit())
}

/// The seed documents' file names: `NNN_<16 hex digits>.txt`.
fn seed_file_name(lower: &str) -> bool {
    lower.match_indices(".txt").any(|(end, _)| {
        let before = &lower.as_bytes()[..end];
        before.len() >= 20 && {
            let stem = &before[before.len() - 20..];
            stem[..3].iter().all(u8::is_ascii_digit)
                && stem[3] == b'_'
                && stem[4..].iter().all(u8::is_ascii_hexdigit)
        }
    })
}

/// A reference split over two lines: one line ends with "seed"/"seeds", the
/// next (after its comment marker) starts with `0` + digit, as in
/// `(seed` / `//! 000/001 acceptance rows)`.
fn split_seed_number(line: &str, next: &str) -> bool {
    let lower = line.trim_end().to_lowercase();
    let ends_with_seed = ["seed", "seeds"].iter().any(|word| {
        lower.strip_suffix(word).is_some_and(|before| {
            !before
                .chars()
                .next_back()
                .is_some_and(char::is_alphanumeric)
        })
    });
    ends_with_seed && starts_with_zero_digit(strip_comment_marker(next))
}

fn strip_comment_marker(line: &str) -> &str {
    let line = line.trim_start();
    ["//!", "///", "//", "#", "--", "*"]
        .iter()
        .find_map(|marker| line.strip_prefix(marker))
        .unwrap_or(line)
        .trim_start()
}

/// An external reference found in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reference {
    path: String,
    line: usize,
    text: String,
    why: &'static str,
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: {} ({})",
            self.path, self.line, self.text, self.why
        )
    }
}

/// Every external reference in `text`.
fn external_references(path: &str, text: &str) -> Vec<Reference> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let why = external_reference(line).or_else(|| {
            lines
                .get(index + 1)
                .filter(|next| split_seed_number(line, next))
                .map(|_| "a seed document by number, split over two lines")
        });
        if let Some(why) = why {
            found.push(Reference {
                path: path.to_string(),
                line: index + 1,
                text: line.trim().to_string(),
                why,
            });
        }
    }
    found
}

/// Splits `found` into references no [`ALLOWED`] entry covers, and
/// [`ALLOWED`] entries that cover nothing (stale).
fn apply_allowed<'a>(
    found: Vec<Reference>,
    allowed: &'a [(&'a str, &'a str, &'a str)],
) -> (Vec<Reference>, Vec<&'a str>) {
    let covers = |entry: &(&str, &str, &str), reference: &Reference| {
        reference.path == entry.0 && reference.text.contains(entry.1)
    };
    let stale = allowed
        .iter()
        .filter(|entry| !found.iter().any(|reference| covers(entry, reference)))
        .map(|entry| entry.0)
        .collect();
    let remaining = found
        .into_iter()
        .filter(|reference| !allowed.iter().any(|entry| covers(entry, reference)))
        .collect();
    (remaining, stale)
}

#[test]
fn nothing_points_at_a_document_outside_the_repository() {
    let files = text_files(SELF_PATH);
    assert!(
        files.iter().any(|(path, _)| path == "README.md"),
        "the file list should include README.md; got {} files",
        files.len()
    );
    let found: Vec<Reference> = files
        .iter()
        .flat_map(|(path, text)| external_references(path, text))
        .collect();
    let (found, stale) = apply_allowed(found, ALLOWED);
    let found: Vec<String> = found.iter().map(Reference::to_string).collect();
    assert!(
        found.is_empty(),
        "references to documents outside the repository (link a section of {DESIGN_PATH} instead):\n  {}",
        found.join("\n  ")
    );
    assert!(
        stale.is_empty(),
        "ALLOWED entries that no longer match anything (remove them): {stale:?}"
    );
}

#[test]
fn external_references_are_caught() {
    for line in [
        "see seed 001 §3",
        "// Seed 000 order: workers start first.",
        "The section names of seeds 000 and 001 are kept",
        "--   (seed 004): written before the debit",
        "brief: /work/shared/DESIGN.md",
        "cat ../shared/notes.txt",
        "the documents in seeds/ (Chinese)",
        "see 001_309ce303ec9a9921.txt",
    ] {
        assert!(external_reference(line).is_some(), "not caught: {line}");
    }
    assert!(split_seed_number(
        "//! The relay against the fake (seed",
        "//! 000/001 acceptance rows): EnsureGroup",
    ));
    let found = external_references("x.rs", "a\n/// fake (seed\n/// 001 rows)\n");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].to_string().starts_with("x.rs:2:"), "{found:?}");
}

#[test]
fn allowed_entries_cover_only_their_line_and_go_stale() {
    let allowed = [("a.sql", "(seed 004)", "released")];
    let found = external_references("a.sql", "-- table (seed 004)\n-- see seed 001\n");
    let (remaining, stale) = apply_allowed(found, &allowed);
    assert_eq!(remaining.len(), 1, "{remaining:?}");
    assert_eq!(remaining[0].line, 2);
    assert!(stale.is_empty());
    let (remaining, stale) = apply_allowed(Vec::new(), &allowed);
    assert!(remaining.is_empty());
    assert_eq!(stale, ["a.sql"]);
}

#[test]
fn random_seeds_are_not_references() {
    for line in [
        "cargo xtask chaos --seed 42 --duration 10m",
        "Every full run ends with the subset `cargo xtask chaos --seed",
        "the seeded fault schedule",
        "files under target/chaos/seed-7/",
        "fn parses_seed_spellings() {",
        "let mut rng = StdRng::seed_from_u64(0);",
        "reproducible: the same seed 7 gives the same schedule",
        "Kafka broker at 127.0.0.1:9092; see docs/design.md#gift-saga",
    ] {
        assert_eq!(external_reference(line), None, "wrongly flagged: {line}");
    }
    assert!(!split_seed_number(
        "cargo xtask chaos --seed",
        "42 --duration 10m"
    ));
    assert!(!split_seed_number(
        "the same seed",
        "7 gives the same schedule"
    ));
}

// ------------------------------------------------------------- design anchors

/// The anchors `text` links to in the design document: every
/// `design.md#anchor` (as `docs/design.md#…` or, inside docs/, `design.md#…`),
/// plus, in the design document itself, its `](#anchor)` links.
fn design_links(path: &str, text: &str) -> Vec<(usize, String)> {
    let anchor_of = |rest: &str| -> String {
        rest.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '-' || *c == '_')
            .collect()
    };
    let mut links = Vec::new();
    for (index, line) in text.lines().enumerate() {
        for (start, marker) in line.match_indices("design.md#") {
            links.push((index + 1, anchor_of(&line[start + marker.len()..])));
        }
        if path == DESIGN_PATH {
            for (start, marker) in line.match_indices("](#") {
                links.push((index + 1, anchor_of(&line[start + marker.len()..])));
            }
        }
    }
    links
}

/// `path:line: #anchor` for every link whose anchor is not in `known`.
fn broken_links(path: &str, text: &str, known: &BTreeSet<String>) -> Vec<String> {
    design_links(path, text)
        .into_iter()
        .filter(|(_, anchor)| !known.contains(anchor))
        .map(|(line, anchor)| format!("{path}:{line}: #{anchor}"))
        .collect()
}

#[test]
fn every_design_link_names_an_existing_heading() {
    let design = std::fs::read_to_string(root().join(DESIGN_PATH))
        .unwrap_or_else(|error| panic!("{DESIGN_PATH} must exist: {error}"));
    let known = anchors(&design);
    let files = text_files(SELF_PATH);
    let links: usize = files
        .iter()
        .map(|(path, text)| design_links(path, text).len())
        .sum();
    assert!(
        links > 0,
        "no design.md#anchor links found: is the scan empty?"
    );
    let broken: Vec<String> = files
        .iter()
        .flat_map(|(path, text)| broken_links(path, text, &known))
        .collect();
    assert!(
        broken.is_empty(),
        "links to headings {DESIGN_PATH} does not have (its anchors: {known:?}):\n  {}",
        broken.join("\n  ")
    );
}

#[test]
fn anchors_follow_github() {
    assert_eq!(
        github_anchor("Lifecycle: start-up and drain order"),
        "lifecycle-start-up-and-drain-order"
    );
    assert_eq!(github_anchor("IM-silent events"), "im-silent-events");
    assert_eq!(
        github_anchor("Topics, groups and message conventions"),
        "topics-groups-and-message-conventions"
    );
    assert_eq!(
        github_anchor("`rocketmq` (original names, mapped onto Kafka)"),
        "rocketmq-original-names-mapped-onto-kafka"
    );
    assert_eq!(github_anchor("snake_case keys"), "snake_case-keys");
    let known =
        anchors("# Design\n\n## Gift saga\n\n```text\n# not a heading\n```\n## Gift saga\n");
    assert_eq!(
        known,
        BTreeSet::from([
            String::from("design"),
            String::from("gift-saga"),
            String::from("gift-saga-1"),
        ])
    );
}

#[test]
fn broken_design_links_are_caught() {
    let known = anchors("# Design\n\n## Gift saga\n\n## Presence\n");
    let text = "// docs/design.md#gift-saga\n\
                // see docs/design.md#no-such-heading and [p](docs/design.md#presence)\n\
                [design](design.md#gift_saga)\n";
    assert_eq!(
        broken_links("src/lib.rs", text, &known),
        ["src/lib.rs:2: #no-such-heading", "src/lib.rs:3: #gift_saga"]
    );
    // Inside the design document, its own `(#anchor)` links count too.
    assert_eq!(
        broken_links(DESIGN_PATH, "[a](#gift-saga) [b](#gone)\n", &known),
        [format!("{DESIGN_PATH}:1: #gone")]
    );
    assert!(broken_links("README.md", "no links here\n", &known).is_empty());
}
