//! YAML reading without a YAML dependency of our own: the workspace's `config`
//! crate (yaml feature) parses one document into a `serde_json::Value`. Files
//! with several documents (`---`) are split first; YAML merge keys (`<<`),
//! which the parser leaves as ordinary keys, are resolved afterwards.

use serde_json::{Map, Value};

/// Parses every document of `text`; documents holding only comments are skipped.
pub fn parse_documents(text: &str) -> Result<Vec<Value>, String> {
    let mut documents = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        if line.trim_end() == "---" {
            documents.push(std::mem::take(&mut current));
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    documents.push(current);
    documents
        .iter()
        .filter(|document| {
            document.lines().any(|line| {
                let line = line.trim();
                !line.is_empty() && !line.starts_with('#')
            })
        })
        .map(|document| parse_one(document))
        .collect()
}

/// Parses a single-document YAML text.
pub fn parse_one(text: &str) -> Result<Value, String> {
    let value: Value = config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Yaml))
        .build()
        .and_then(config::Config::try_deserialize)
        .map_err(|error| format!("invalid YAML: {error}"))?;
    Ok(resolve_merge_keys(value))
}

fn resolve_merge_keys(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut merged = Map::new();
            if let Some(base) = map.get("<<") {
                let bases = match base {
                    Value::Array(items) => items.clone(),
                    other => vec![other.clone()],
                };
                for base in bases {
                    if let Value::Object(base) = resolve_merge_keys(base) {
                        merged.extend(base);
                    }
                }
            }
            for (key, item) in map {
                if key != "<<" {
                    merged.insert(key, resolve_merge_keys(item));
                }
            }
            Value::Object(merged)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(resolve_merge_keys).collect()),
        other => other,
    }
}

/// The leaf key paths of a config value (`outbox_worker.batch_size`); arrays
/// and scalars are leaves, and so are empty maps (open maps such as
/// `consumer.client_properties`, marked with a trailing `.*`).
pub fn key_paths(value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(value, String::new(), &mut out);
    out
}

fn walk(value: &Value, prefix: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) if map.is_empty() && !prefix.is_empty() => {
            out.push(format!("{prefix}.*"))
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
        _ => out.push(prefix),
    }
}

/// Reads `a.b.c` from a value.
pub fn get<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(value, |value, key| value.as_object()?.get(key))
}

/// Sets `a.b.c` in a value, creating maps on the way (an environment override).
pub fn set(value: &mut Value, path: &str, item: Value) {
    let mut current = value;
    let keys: Vec<&str> = path.split('.').collect();
    for (index, key) in keys.iter().enumerate() {
        if !current.is_object() {
            *current = Value::Object(Map::new());
        }
        let Value::Object(map) = current else {
            return;
        };
        if index + 1 == keys.len() {
            map.insert((*key).to_string(), item);
            return;
        }
        current = map
            .entry((*key).to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// Overlays `top` on `base`, maps merged key by key (defaults → file).
pub fn overlay(base: &mut Value, top: &Value) {
    match (base, top) {
        (Value::Object(base), Value::Object(top)) => {
            for (key, item) in top {
                match base.get_mut(key) {
                    Some(existing) => overlay(existing, item),
                    None => {
                        base.insert(key.clone(), item.clone());
                    }
                }
            }
        }
        (base, top) => *base = top.clone(),
    }
}

/// A scalar as text (`"7101"`, `"true"`), `None` for maps, arrays and null.
pub fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_anchors_and_merge_keys() {
        let docs = parse_documents(
            "# comment only\n---\nbase: &b\n  image: x\n  n: 1\nsvc:\n  <<: *b\n  n: 2\n---\nk: [1, 2]\n",
        )
        .unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(get(&docs[0], "svc.image").unwrap(), "x");
        assert_eq!(get(&docs[0], "svc.n").unwrap(), 2);
        assert!(get(&docs[0], "svc.<<").is_none());
        assert_eq!(key_paths(&docs[1]), vec!["k".to_string()]);
    }

    #[test]
    fn set_and_overlay() {
        let mut value = serde_json::json!({"a": {"b": 1, "c": {}}});
        set(&mut value, "a.d.e", Value::from("x"));
        overlay(&mut value, &serde_json::json!({"a": {"b": 2}}));
        let mut paths = key_paths(&value);
        paths.sort();
        assert_eq!(paths, ["a.b", "a.c.*", "a.d.e"]);
    }
}
