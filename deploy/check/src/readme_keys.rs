//! The other side of the configuration reference check: the dotted key
//! paths of a service's real config (its serialized `Default` or its
//! `--dump-config`), how a default is rendered for comparison, and the two
//! comparisons with what docs/configuration.md documents ([`crate::readme`]
//! parses that).

use crate::readme::{KeyRow, PATH};
use serde_json::Value;
use std::collections::BTreeSet;

/// The dotted key paths of a config value (see the module docs).
pub fn config_paths(value: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    walk(value, String::new(), &mut out);
    out
}

fn walk(value: &Value, prefix: String, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) if map.is_empty() && !prefix.is_empty() => {
            out.insert(prefix);
        }
        Value::Object(map) => {
            for (key, item) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                walk(item, path, out);
            }
        }
        Value::Array(items) if items.iter().any(Value::is_object) => {
            for item in items {
                walk(item, format!("{prefix}[]"), out);
            }
            out.insert(prefix);
        }
        _ => {
            out.insert(prefix);
        }
    }
}

/// Paths whose value in `defaults` is an empty map: open maps, whose entries
/// (present in a dump when a file sets some) are not keys of their own.
pub fn open_maps(defaults: &Value) -> BTreeSet<String> {
    config_paths(defaults)
        .into_iter()
        .filter(|path| {
            values_at(defaults, path)
                .iter()
                .all(|value| value == &&Value::Object(Default::default()))
        })
        .filter(|path| !values_at(defaults, path).is_empty())
        .collect()
}

/// `paths` with entries of the open maps folded into the map's own path.
pub fn fold_open_maps(paths: BTreeSet<String>, open: &BTreeSet<String>) -> BTreeSet<String> {
    paths
        .into_iter()
        .map(|path| {
            open.iter()
                .find(|map| path.starts_with(&format!("{map}.")))
                .cloned()
                .unwrap_or(path)
        })
        .collect()
}

/// Every value at `path` (`a.list[].b` visits each element of `a.list`).
pub fn values_at<'a>(value: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut current = vec![value];
    for segment in path.split('.') {
        let (key, each) = match segment.strip_suffix("[]") {
            Some(key) => (key, true),
            None => (segment, false),
        };
        current = current
            .into_iter()
            .filter_map(|value| value.as_object()?.get(key))
            .flat_map(|value| match (each, value) {
                (true, Value::Array(items)) => items.iter().collect(),
                (true, _) => Vec::new(),
                (false, value) => vec![value],
            })
            .collect();
    }
    current
}

/// A default as the reference writes it: strings bare (`""` when empty),
/// numbers and booleans as text, lists as `[a, b]`, an empty map as `{}`.
pub fn render_default(value: &Value) -> String {
    match value {
        Value::String(text) if text.is_empty() => "\"\"".into(),
        Value::String(text) => text.clone(),
        Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(render_default)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Object(map) if map.is_empty() => "{}".into(),
        other => other.to_string(),
    }
}

/// Both directions: every key of the service is documented for it, and every
/// key documented for it exists. Problems name the keys.
pub fn check_keys(
    service: &str,
    documented: &BTreeSet<String>,
    actual: &BTreeSet<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let missing: Vec<&str> = actual.difference(documented).map(String::as_str).collect();
    if !missing.is_empty() {
        problems.push(format!(
            "{service}: keys not documented in the configuration reference ({PATH}): {}",
            missing.join(", ")
        ));
    }
    let unknown: Vec<&str> = documented.difference(actual).map(String::as_str).collect();
    if !unknown.is_empty() {
        problems.push(format!(
            "{service}: {PATH} documents keys the service does not have: {}",
            unknown.join(", ")
        ));
    }
    problems
}

/// Documented defaults (leading code spans) against the built-in defaults.
pub fn check_defaults(service: &str, rows: &[KeyRow], defaults: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for row in rows {
        let Some(documented) = &row.default else {
            continue;
        };
        for value in values_at(defaults, &row.path) {
            let actual = render_default(value);
            if &actual != documented {
                problems.push(format!(
                    "{service}: `{}` ({}) is documented with default `{documented}`, the built-in default is `{actual}`",
                    row.path, row.section
                ));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_fold_and_render() {
        let value = json!({"a": {"b": 1, "m": {}}, "l": [{"id": "x", "n": [1, 2]}], "s": ["p"]});
        let paths = config_paths(&value);
        assert_eq!(
            paths.iter().map(String::as_str).collect::<Vec<_>>(),
            ["a.b", "a.m", "l", "l[].id", "l[].n", "s"]
        );
        let open = open_maps(&value);
        assert_eq!(open, BTreeSet::from(["a.m".to_string()]));
        let dumped = BTreeSet::from(["a.m.k".to_string(), "a.b".to_string()]);
        assert_eq!(
            fold_open_maps(dumped, &open),
            BTreeSet::from(["a.m".to_string(), "a.b".to_string()])
        );
        assert_eq!(render_default(&json!([1, 2])), "[1, 2]");
        assert_eq!(render_default(&json!("")), "\"\"");
        assert_eq!(render_default(&json!({})), "{}");
        assert_eq!(values_at(&value, "l[].id"), [&json!("x")]);
    }

    #[test]
    fn both_directions_are_named() {
        let documented = BTreeSet::from(["a".to_string(), "gone".to_string()]);
        let actual = BTreeSet::from(["a".to_string(), "new".to_string()]);
        let problems = check_keys("svc", &documented, &actual);
        assert!(
            problems[0].contains("new") && problems[1].contains("gone"),
            "{problems:?}"
        );
    }
}
