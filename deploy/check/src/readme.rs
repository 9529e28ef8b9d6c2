//! The configuration reference (docs/configuration.md) against the services'
//! real key trees.
//!
//! The reference is the section under a `Configuration reference` heading (a
//! `#` title in docs/configuration.md; any level is accepted) up to the next
//! heading of the same or a higher level; its subsections are the headings
//! one level deeper. A subsection with key tables names the services it
//! applies to on a line `Used by: room-service, outbox-relay (as
//! `direct.tencent_im.*`)`; "as `P.*`" mounts the table's keys under `P` for
//! that service (the first path segment is replaced). A key table's header
//! starts with `Key`; each row is `` | `full.key.path` | default | meaning | ``.
//! A default cell that starts with a code span is checked against the
//! serialized built-in default ([`render_default`]); prose defaults
//! (`required`, `one rule, …`) are not. The environment table (header
//! `Service | Prefix | … | Comma-separated lists …`) gives each service's
//! variable prefix and the keys that take a comma-separated list from the
//! environment.
//!
//! Key trees come from [`config_paths`]: the dotted leaf paths of a config
//! value, arrays of scalars and empty (open) maps being leaves, arrays of maps
//! both a key and `key[].field` keys.

use std::collections::{BTreeMap, BTreeSet};

/// The title of the heading the reference lives under (without its `#`s).
pub const HEADING: &str = "Configuration reference";

/// The file the reference lives in, relative to the workspace root.
pub const PATH: &str = "docs/configuration.md";

/// One documented key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRow {
    /// Full key path as the service sees it (after any `as` mount).
    pub path: String,
    /// The default cell's leading code span, when it has one.
    pub default: Option<String>,
    /// The `###` subsection it is documented in.
    pub section: String,
}

/// One row of the environment table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvRow {
    /// Prefix without the trailing `__` (`ROOM`).
    pub prefix: String,
    /// Keys documented as taking a comma-separated list from the environment.
    pub list_keys: BTreeSet<String>,
}

/// The parsed reference.
#[derive(Debug, Clone, Default)]
pub struct Reference {
    /// Documented keys by service.
    pub keys: BTreeMap<String, Vec<KeyRow>>,
    /// The environment table by service.
    pub env: BTreeMap<String, EnvRow>,
}

impl Reference {
    /// The documented key paths of `service`.
    pub fn paths(&self, service: &str) -> BTreeSet<String> {
        self.keys
            .get(service)
            .map(|rows| rows.iter().map(|row| row.path.clone()).collect())
            .unwrap_or_default()
    }
}

/// The text of every code span (`` `x` ``) in `text`, in order.
pub fn code_spans(text: &str) -> Vec<String> {
    text.split('`')
        .enumerate()
        .filter(|(index, _)| index % 2 == 1)
        .map(|(_, span)| span.to_string())
        .collect()
}

fn cells(line: &str) -> Option<Vec<String>> {
    let line = line.trim();
    let inner = line.strip_prefix('|')?.strip_suffix('|')?;
    Some(
        inner
            .split('|')
            .map(|cell| cell.trim().to_string())
            .collect(),
    )
}

fn is_separator(cells: &[String]) -> bool {
    cells
        .iter()
        .all(|cell| !cell.is_empty() && cell.chars().all(|ch| matches!(ch, '-' | ':' | ' ')))
}

/// A Markdown heading's level and title (`## Title` → `(2, "Title")`).
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.chars().take_while(|ch| *ch == '#').count();
    let title = line[level..].strip_prefix(' ')?;
    (1..=6).contains(&level).then_some((level, title.trim()))
}

/// The reference's level and its lines: from below its heading up to the next
/// heading of the same or a higher level.
fn reference_body(document: &str) -> Option<(usize, Vec<&str>)> {
    let mut lines = document.lines();
    let level = lines
        .by_ref()
        .find_map(|line| match heading(line.trim_end()) {
            Some((level, title)) if title == HEADING => Some(level),
            _ => None,
        })?;
    let body = lines
        .take_while(|line| !heading(line.trim_end()).is_some_and(|(other, _)| other <= level))
        .collect();
    Some((level, body))
}

/// Parses the reference out of the whole document. `services` are the valid
/// service names; anything else on a `Used by:` line or in the environment
/// table is a problem, as is a key table without a `Used by:` line, a key row
/// without a key, or a key documented twice for one service.
pub fn parse(document: &str, services: &[&str]) -> Result<Reference, Vec<String>> {
    let mut problems = Vec::new();
    let Some((level, body)) = reference_body(document) else {
        return Err(vec![format!("{PATH} has no `{HEADING}` heading")]);
    };

    let mut reference = Reference::default();
    let mut section = String::from("(intro)");
    // service → mount prefix (None: keys as written).
    let mut used_by: Option<Vec<(String, Option<String>)>> = None;
    let mut header: Option<Vec<String>> = None;
    for line in body {
        let trimmed = line.trim();
        if let Some((sub_level, title)) = heading(trimmed)
            && sub_level == level + 1
        {
            section = title.to_string();
            used_by = None;
            header = None;
            continue;
        }
        if let Some(list) = trimmed
            .strip_prefix("Used by:")
            .or_else(|| trimmed.strip_prefix("**Used by:**"))
        {
            let entries = used_by_entries(list, &section, services, &mut problems);
            used_by = Some(entries);
            continue;
        }
        let Some(row) = cells(trimmed) else {
            header = None;
            continue;
        };
        if is_separator(&row) {
            continue;
        }
        let Some(columns) = &header else {
            header = Some(row);
            continue;
        };
        match columns.first().map(String::as_str) {
            Some("Key") => match &used_by {
                Some(entries) => {
                    key_rows(
                        trimmed,
                        &row,
                        entries,
                        &section,
                        &mut reference,
                        &mut problems,
                    );
                }
                None => problems.push(format!(
                    "{section}: key table without a `Used by:` line (row `{trimmed}`)"
                )),
            },
            Some("Service") if columns.get(1).is_some_and(|column| column == "Prefix") => {
                env_row(&row, columns, services, &mut reference, &mut problems);
            }
            _ => {}
        }
    }
    if problems.is_empty() {
        Ok(reference)
    } else {
        Err(problems)
    }
}

/// The entries of a `Used by:` line: each service and the prefix its keys
/// are mounted under (`service (as `prefix.*`)`), problems noted.
fn used_by_entries(
    list: &str,
    section: &str,
    services: &[&str],
    problems: &mut Vec<String>,
) -> Vec<(String, Option<String>)> {
    let mut entries = Vec::new();
    for item in list.trim().trim_end_matches('.').split(',') {
        let item = item.trim();
        let (name, mount) = match item.split_once('(') {
            Some((name, rest)) => {
                let mount = code_spans(rest)
                    .first()
                    .map(|span| span.trim_end_matches(".*").to_string());
                if mount.is_none() || !rest.trim_start().starts_with("as ") {
                    problems.push(format!(
                        "{section}: `Used by` entry `{item}` is not `service (as `prefix.*`)`"
                    ));
                }
                (name.trim(), mount)
            }
            None => (item, None),
        };
        if !services.contains(&name) {
            problems.push(format!(
                "{section}: `Used by` names `{name}`, which is not one of {services:?}"
            ));
            continue;
        }
        entries.push((name.to_string(), mount));
    }
    entries
}

/// One row of a key table, recorded for each service of its `Used by:`
/// line under its mount prefix; a key documented twice is a problem.
fn key_rows(
    line: &str,
    row: &[String],
    entries: &[(String, Option<String>)],
    section: &str,
    reference: &mut Reference,
    problems: &mut Vec<String>,
) {
    let Some(path) = code_spans(&row[0]).into_iter().next() else {
        problems.push(format!("{section}: row without a `key`: {line}"));
        return;
    };
    let default = row
        .get(1)
        .filter(|cell| cell.starts_with('`'))
        .and_then(|cell| code_spans(cell).into_iter().next());
    for (service, mount) in entries {
        let path = match mount {
            Some(mount) => match path.split_once('.') {
                Some((_, rest)) => format!("{mount}.{rest}"),
                None => mount.clone(),
            },
            None => path.clone(),
        };
        let rows = reference.keys.entry(service.clone()).or_default();
        if let Some(earlier) = rows.iter().find(|row| row.path == path) {
            problems.push(format!(
                "{service}: `{path}` is documented twice ({} and {section})",
                earlier.section
            ));
        }
        rows.push(KeyRow {
            path,
            default: default.clone(),
            section: section.to_string(),
        });
    }
}

/// One row of the environment table: the service's prefix and its list keys.
fn env_row(
    row: &[String],
    columns: &[String],
    services: &[&str],
    reference: &mut Reference,
    problems: &mut Vec<String>,
) {
    let name = row[0].trim_matches('`');
    if !services.contains(&name) {
        problems.push(format!(
            "environment table names `{name}`, which is not one of {services:?}"
        ));
        return;
    }
    let prefix = row
        .get(1)
        .and_then(|cell| code_spans(cell).into_iter().next())
        .unwrap_or_default();
    let list_column = columns
        .iter()
        .position(|column| column.to_ascii_lowercase().contains("list"));
    let list_keys = list_column
        .and_then(|index| row.get(index))
        .map(|cell| code_spans(cell).into_iter().collect())
        .unwrap_or_default();
    reference.env.insert(
        name.to_string(),
        EnvRow {
            prefix: prefix.trim_end_matches("__").to_string(),
            list_keys,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const README: &str = "# X\n\n## Configuration reference\n\n\
| Service | Prefix | Default file | Comma-separated lists |\n|---|---|---|---|\n\
| a | `A__` | `configs/a.yaml` | `l` |\n\n\
### `s`\n\nUsed by: a, b (as `m.s.*`).\n\n| Key | Default | Meaning |\n|---|---|---|\n\
| `s.x` | `1` | x |\n| `s.y` | required | y |\n\n## Next\n\n| Key | Default | M |\n|---|---|---|\n| `z` | `0` | outside |\n";

    #[test]
    fn parses_mounts_defaults_and_env() {
        let reference = parse(README, &["a", "b"]).unwrap();
        assert_eq!(
            reference.paths("a"),
            BTreeSet::from(["s.x".to_string(), "s.y".to_string()])
        );
        assert_eq!(
            reference.paths("b"),
            BTreeSet::from(["m.s.x".to_string(), "m.s.y".to_string()])
        );
        assert_eq!(reference.keys["a"][0].default.as_deref(), Some("1"));
        assert_eq!(reference.keys["a"][1].default, None);
        assert_eq!(reference.env["a"].prefix, "A");
        assert!(reference.env["a"].list_keys.contains("l"));
    }

    #[test]
    fn a_title_reference_ends_at_the_next_title() {
        // docs/configuration.md's form: the reference is the `#` title, its
        // sections `##`; a `###` inside a section is not a section of its own.
        let document = README
            .replace(
                "# X\n\n## Configuration reference",
                "# Configuration reference",
            )
            .replace("### `s`", "## `s`\n\n### Detail")
            .replace("## Next", "# Next");
        let reference = parse(&document, &["a", "b"]).unwrap();
        assert_eq!(
            reference.paths("a"),
            BTreeSet::from(["s.x".to_string(), "s.y".to_string()])
        );
        assert_eq!(reference.keys["a"][0].section, "`s`");
        let problems = parse("# Configuration\n\n| Key | x |\n", &["a"]).unwrap_err();
        assert!(
            problems[0].contains("no `Configuration reference` heading"),
            "{problems:?}"
        );
    }

    #[test]
    fn unknown_services_and_orphan_tables_are_problems() {
        let problems = parse(&README.replace("a, b (", "a, c ("), &["a", "b"]).unwrap_err();
        assert!(
            problems.iter().any(|problem| problem.contains("`c`")),
            "{problems:?}"
        );
        let problems = parse(
            &README.replace("Used by: a, b (as `m.s.*`).", ""),
            &["a", "b"],
        )
        .unwrap_err();
        assert!(
            problems
                .iter()
                .any(|problem| problem.contains("without a `Used by:`"))
        );
    }
}
