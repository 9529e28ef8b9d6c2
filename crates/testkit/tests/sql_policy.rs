//! Source policy: SQL is built from literals and bound parameters only. Every
//! `.rs` file under `services/`, `crates/` and `fakes/` is scanned for
//! - `sqlx::query*` / `sqlx::raw_sql` / `QueryBuilder::new` whose SQL is not a
//!   string literal (a `format!` with interpolations, or a variable),
//! - `QueryBuilder` / `Separated` `.push(…)` of anything but a literal (values
//!   go through `push_bind`),
//! - `push_str(…)` of a non-literal in files that talk to sqlx.
//!
//! A whole statement held in a `const NAME: &str = "…"` (a literal, so it
//! cannot carry a value) counts as a literal wherever it is used.
//! Interpolating a compile-time constant (a fixed column list) is allowed only
//! for the constants named in [`ALLOWED_CONSTANTS`]; anything else must be
//! listed in [`ALLOWED_SITES`] with the reason it cannot carry a value. Both
//! lists are checked for staleness, so an entry cannot outlive its reason.
//! The scanner is text-based (std only); its own tests below show it catches
//! each pattern.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use testkit::source_tree::{rust_files, workspace_root};

/// Constants that may be interpolated into SQL: fixed identifiers, never values.
const ALLOWED_CONSTANTS: &[(&str, &str)] = &[(
    "ROW_COLUMNS",
    "outbox-relay's fixed `room_outbox` column list, a `const &str` of identifiers",
)];

/// `(path suffix, snippet of the offending text, reason)`.
const ALLOWED_SITES: &[(&str, &str, &str)] = &[
    (
        "crates/testkit/src/lib.rs",
        "CREATE DATABASE `{name}`",
        "DDL cannot bind identifiers; the name is `hyapp_t_<secs>_<uuid>` made by `unique`",
    ),
    (
        "services/room-service/tests/common/mod.rs",
        "FROM {table} WHERE {column} = ?",
        "test helper: table and column are literals at every call site; the value is bound",
    ),
    (
        "services/notice-consumer/tests/notices.rs",
        "&explain",
        "test: EXPLAIN of the table's own const statements (`EXPLAIN {statement}`); values are bound",
    ),
    (
        "services/activity-consumer/tests/bad_input.rs",
        "SELECT COUNT(*) FROM {table}",
        "test: table names come from the file's TABLES constant",
    ),
    (
        "services/outbox-relay/tests/console_search.rs",
        "*sql",
        "test: EXPLAINs the console's named statements (literal constants), their values bound after",
    ),
    (
        "services/outbox-relay/tests/operator_explain.rs",
        "EXPLAIN {sql}",
        "test: EXPLAINs the relay's operator statements (literal constants) with fixed sample literals in their placeholders, since EXPLAIN takes no bound parameters",
    ),
];

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Violation {
    path: String,
    line: usize,
    rule: &'static str,
    text: String,
}

/// The source with `//` comments blanked (same length, so offsets map to lines).
fn strip_comments(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    for line in source.split_inclusive('\n') {
        let cut = comment_start(line).unwrap_or(line.len());
        out.push_str(&line[..cut]);
        out.extend(
            line[cut..]
                .chars()
                .map(|c| if c == '\n' { '\n' } else { ' ' }),
        );
    }
    out
}

/// Where a `//` comment starts outside a string literal, if any.
fn comment_start(line: &str) -> Option<usize> {
    let bytes = line.as_bytes();
    let mut in_string = false;
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'\\' if in_string => index += 1,
            b'"' => in_string = !in_string,
            b'/' if !in_string && bytes.get(index + 1) == Some(&b'/') => return Some(index),
            _ => {}
        }
        index += 1;
    }
    None
}

fn line_of(source: &str, offset: usize) -> usize {
    source[..offset].matches('\n').count() + 1
}

/// The text of the call's argument list starting at `open` (the `(`), up to
/// its matching `)`, skipping string contents.
fn arguments(source: &str, open: usize) -> &str {
    let bytes = source.as_bytes();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut index = open;
    while index < bytes.len() {
        match bytes[index] {
            b'\\' if in_string => index += 1,
            b'"' => in_string = !in_string,
            b'(' | b'[' | b'{' if !in_string => depth += 1,
            b')' | b']' | b'}' if !in_string => {
                depth -= 1;
                if depth == 0 {
                    return &source[open + 1..index];
                }
            }
            _ => {}
        }
        index += 1;
    }
    &source[open + 1..]
}

fn is_literal(argument: &str) -> bool {
    let argument = argument.trim_start();
    argument.starts_with('"') || argument.starts_with("r\"") || argument.starts_with("r#\"")
}

/// `format!` interpolations that are not allowed constants, or `None` when
/// the argument is not a `format!`.
fn bad_interpolations(argument: &str) -> Option<Vec<String>> {
    let argument = argument.trim_start().trim_start_matches('&');
    let rest = argument.strip_prefix("format!(")?;
    let literal_end = rest[1..].find('"').map_or(rest.len(), |end| end + 1);
    let literal = &rest[..literal_end];
    let mut bad = Vec::new();
    let mut chars = literal.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if c != '{' {
            continue;
        }
        if chars.peek().is_some_and(|(_, next)| *next == '{') {
            chars.next();
            continue;
        }
        let end = literal[start..]
            .find('}')
            .map_or(literal.len(), |end| start + end);
        let name = literal[start + 1..end]
            .split(':')
            .next()
            .unwrap_or_default();
        if !ALLOWED_CONSTANTS
            .iter()
            .any(|(constant, _)| *constant == name)
        {
            bad.push(format!("{{{name}}}"));
        }
    }
    // Arguments after the literal (`format!("… {}", value)`) are values too.
    if rest[literal_end..]
        .trim_start_matches(['"', ' ', '\n'])
        .starts_with(',')
    {
        bad.push("positional argument".into());
    }
    Some(bad)
}

/// The SQL argument of an entry point is fine when it is a literal, a
/// constant defined as a literal, or a `format!` of allowed constants only.
fn sql_argument_ok(argument: &str, literal_consts: &BTreeSet<String>) -> bool {
    let path = argument.trim();
    let name = path.rsplit("::").next().unwrap_or(path);
    is_literal(argument)
        || (path
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == ':')
            && literal_consts.contains(name))
        || bad_interpolations(argument).is_some_and(|bad| bad.is_empty())
}

/// Names of `const NAME: &str = "…"` definitions in `source`.
fn literal_consts(source: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (offset, _) in source.match_indices("const ") {
        let rest = &source[offset + "const ".len()..];
        let name = identifier(rest);
        // rustfmt moves a long literal to the next line: `= "…"` may wrap.
        let literal = rest[name.len()..]
            .trim_start()
            .strip_prefix(": &str =")
            .is_some_and(|value| value.trim_start().starts_with('"'));
        if literal && !name.is_empty() {
            names.insert(name);
        }
    }
    names
}

const ENTRY_POINTS: &[&str] = &[
    "sqlx::query(",
    "sqlx::query_as(",
    "sqlx::query_scalar(",
    "sqlx::raw_sql(",
    "QueryBuilder::new(",
];

/// Names bound to a `QueryBuilder` or its `Separated` in `source`.
fn builder_names(source: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in source.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("let mut ")
            && (line.contains("QueryBuilder::new(") || line.contains(".separated("))
        {
            names.insert(identifier(rest));
        }
        // Parameters: `builder: &mut QueryBuilder<…>`, closures of `push_values`.
        for marker in [": &mut QueryBuilder", ": &mut sqlx::QueryBuilder"] {
            if let Some(at) = line.find(marker) {
                let before = &line[..at];
                let start = before
                    .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .map_or(0, |i| i + 1);
                names.insert(before[start..].to_string());
            }
        }
        if let Some(at) = line.find("push_values(")
            && let Some(bar) = line[at..].find("|mut ")
        {
            names.insert(identifier(&line[at + bar + 5..]));
        }
    }
    names
}

fn identifier(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The receiver of the method call whose `.` is at `dot`: the identifier just
/// before it, or for a chain (`x.a(…)\n.push(…)`) the identifier starting the
/// statement.
fn receiver(source: &str, dot: usize) -> String {
    let before = source[..dot].trim_end();
    if before.ends_with(')') {
        let start = before.rfind([';', '{', '}']).map_or(0, |index| index + 1);
        return identifier(before[start..].trim_start());
    }
    let start = before
        .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
        .map_or(0, |index| index + 1);
    before[start..].to_string()
}

fn scan(path: &str, original: &str, literal_consts: &BTreeSet<String>) -> Vec<Violation> {
    let source = strip_comments(original);
    let mut found = Vec::new();
    let mut report = |offset: usize, rule: &'static str, text: &str| {
        found.push(Violation {
            path: path.to_string(),
            line: line_of(&source, offset),
            rule,
            text: text.trim().chars().take(160).collect(),
        });
    };
    for entry in ENTRY_POINTS {
        for (offset, _) in source.match_indices(entry) {
            let open = offset + entry.len() - 1;
            let argument = arguments(&source, open);
            if !sql_argument_ok(argument, literal_consts) {
                report(offset, "SQL not a literal", argument);
            }
        }
    }
    // Turbofish forms: `sqlx::query_as::<_, T>(…)`.
    for prefix in ["sqlx::query_as::<", "sqlx::query_scalar::<"] {
        for (offset, _) in source.match_indices(prefix) {
            let Some(open) = source[offset..].find(">(").map(|at| offset + at + 1) else {
                continue;
            };
            let argument = arguments(&source, open);
            if !sql_argument_ok(argument, literal_consts) {
                report(offset, "SQL not a literal", argument);
            }
        }
    }
    if !source.contains("sqlx") && !source.contains("QueryBuilder") {
        return found;
    }
    let builders = builder_names(&source);
    for (offset, _) in source.match_indices(".push(") {
        let argument = arguments(&source, offset + ".push(".len() - 1);
        if sql_argument_ok(argument, literal_consts) {
            continue;
        }
        if builders.contains(&receiver(&source, offset)) {
            report(offset, "builder push of a non-literal", argument);
        }
    }
    for (offset, _) in source.match_indices(".push_str(") {
        let argument = arguments(&source, offset + ".push_str(".len() - 1);
        if !sql_argument_ok(argument, literal_consts) {
            report(offset, "push_str of a non-literal in a sqlx file", argument);
        }
    }
    found
}

fn allowed(violation: &Violation, used: &mut BTreeSet<usize>) -> bool {
    for (index, (path, snippet, _reason)) in ALLOWED_SITES.iter().enumerate() {
        if violation.path.ends_with(path) && violation.text.contains(snippet) {
            used.insert(index);
            return true;
        }
    }
    false
}

#[test]
fn sql_is_built_from_literals_and_bound_parameters_only() {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in ["services", "crates", "fakes"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 50, "found only {} files", files.len());
    let this_file = Path::new(file!()).file_name().expect("file name");
    let mut violations = Vec::new();
    let mut used_sites = BTreeSet::new();
    let mut constants_seen = BTreeSet::new();
    let mut entry_points = 0;
    let sources: Vec<(PathBuf, String)> = files
        .into_iter()
        .filter(|file| file.file_name() != Some(this_file)) // its snippets are violations on purpose
        .map(|file| {
            let text = std::fs::read_to_string(&file).expect("read source");
            (file, text)
        })
        .collect();
    let consts: BTreeSet<String> = sources
        .iter()
        .flat_map(|(_, text)| literal_consts(&strip_comments(text)))
        .collect();
    for (file, text) in &sources {
        let relative = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        entry_points += ENTRY_POINTS
            .iter()
            .map(|entry| text.matches(entry).count())
            .sum::<usize>();
        for (constant, _) in ALLOWED_CONSTANTS {
            if text.contains(&format!("{{{constant}}}")) {
                constants_seen.insert(*constant);
            }
        }
        for violation in scan(&relative, text, &consts) {
            if !allowed(&violation, &mut used_sites) {
                violations.push(violation);
            }
        }
    }
    assert!(
        entry_points > 20,
        "the scan saw only {entry_points} SQL entry points"
    );
    assert!(
        violations.is_empty(),
        "SQL built from values (bind them with `.bind` / `push_bind`, or allow a fixed identifier with a reason):\n{}",
        violations
            .iter()
            .map(|v| format!("  {}:{} {}: {}", v.path, v.line, v.rule, v.text))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let stale_sites: Vec<_> = ALLOWED_SITES
        .iter()
        .enumerate()
        .filter(|(index, _)| !used_sites.contains(index))
        .map(|(_, site)| site.0)
        .collect();
    assert!(
        stale_sites.is_empty(),
        "stale ALLOWED_SITES: {stale_sites:?}"
    );
    let stale_constants: Vec<_> = ALLOWED_CONSTANTS
        .iter()
        .filter(|(constant, _)| !constants_seen.contains(constant))
        .collect();
    assert!(
        stale_constants.is_empty(),
        "stale ALLOWED_CONSTANTS: {stale_constants:?}"
    );
}

#[test]
fn the_scanner_catches_each_pattern() {
    let rules = |source: &str| -> Vec<&'static str> {
        scan("x.rs", source, &literal_consts(source))
            .into_iter()
            .map(|v| v.rule)
            .collect()
    };
    // Fine: literals, binds, allowed constants, a Vec push, an escaped brace.
    let clean = r#"
        sqlx::query("SELECT 1 FROM t WHERE id = ?").bind(id);
        sqlx::query_as::<_, (i64,)>("SELECT {{x}}");
        let mut builder = sqlx::QueryBuilder::new(format!("SELECT {ROW_COLUMNS} FROM t WHERE a = "));
        builder.push_bind(value).push(" AND b = ").push_bind(other);
        let mut rows = Vec::new();
        rows.push(value);
        const COUNT_SQL: &str = "SELECT COUNT(*) FROM t";
        sqlx::query(COUNT_SQL);
    "#;
    assert_eq!(rules(clean), Vec::<&str>::new());
    // Each of these builds SQL from a value.
    let cases = [
        (
            r#"sqlx::query(&format!("SELECT * FROM t WHERE id = '{id}'"))"#,
            "SQL not a literal",
        ),
        (
            r#"sqlx::query(&format!("DELETE FROM t WHERE id = {}", id))"#,
            "SQL not a literal",
        ),
        ("let sql = make(); sqlx::query(&sql)", "SQL not a literal"),
        (
            "static SQL: String = x(); sqlx::query(SQL)",
            "SQL not a literal",
        ),
        (
            r#"sqlx::query_scalar::<_, i64>(&format!("SELECT {x}"))"#,
            "SQL not a literal",
        ),
        (
            "let mut builder = QueryBuilder::new(\"SELECT \");\nbuilder.push(name);",
            "builder push of a non-literal",
        ),
        (
            "let mut builder = QueryBuilder::new(\"SELECT \");\nbuilder\n  .push_bind(a)\n  .push(format!(\"{b}\"));",
            "builder push of a non-literal",
        ),
        (
            "fn f(builder: &mut QueryBuilder<'_, MySql>) { builder.push(value); }",
            "builder push of a non-literal",
        ),
        (
            "use sqlx; let mut sql = String::new(); sql.push_str(&user);",
            "push_str of a non-literal in a sqlx file",
        ),
    ];
    for (source, rule) in cases {
        assert_eq!(rules(source), vec![rule], "{source}");
    }
    // Comments are not code.
    assert_eq!(
        rules("// sqlx::query(&format!(\"{x}\"))"),
        Vec::<&str>::new()
    );
}
