//! The environment layer of [`super::ConfigSources`]: `PREFIX__A__B=value`
//! sets key `a.b`. Every value arrives as the exact text given and takes its
//! type from the field it lands in (`config`'s deserializer parses a string
//! into a number, bool or duration when the field asks for one), so a
//! password `007123` stays `007123` instead of becoming the number 7123.
//! Keys listed as lists split on `,`. A key listed as a secret may instead be
//! given as `PREFIX__A__B_FILE=/run/secrets/b` (Kubernetes secret files): the
//! file's content, trailing newlines trimmed, becomes the value; giving both
//! forms, or a file that cannot be read, is refused naming the key.

use crate::Error;
use config::{Map, Source, Value, ValueKind};
use std::collections::BTreeMap;

/// Where environment values say they came from, in `config`'s error messages.
const ORIGIN: &str = "the environment";

/// The resolved environment layer, ready to be added as the last source.
#[derive(Debug, Clone)]
pub(super) struct EnvLayer(Map<String, Value>);

/// One value of the layer and the variable that set it (for error messages).
struct Entry {
    variable: String,
    kind: ValueKind,
}

impl EnvLayer {
    /// Reads the variables under `prefix` from `vars`; `list_keys` split on
    /// `,`, `secret_keys` accept the `_FILE` form. All keys are dotted
    /// lowercase paths (`mysql.password`).
    pub(super) fn resolve(
        prefix: &str,
        list_keys: &[&str],
        secret_keys: &[&str],
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, Error> {
        let prefix = format!("{prefix}__").to_lowercase();
        // Sorted so that which of two conflicting variables is reported first
        // does not depend on the environment's order.
        let vars: BTreeMap<String, String> = vars.into_iter().collect();
        let mut direct: BTreeMap<String, Entry> = BTreeMap::new();
        // Secret key → (variable, path); read only once no conflict is found.
        let mut files: BTreeMap<String, (String, String)> = BTreeMap::new();
        for (variable, value) in vars {
            let Some(path) = variable
                .to_lowercase()
                .strip_prefix(&prefix)
                .map(str::to_owned)
            else {
                continue;
            };
            let key = path.replace("__", ".");
            if let Some(secret) = key.strip_suffix("_file")
                && secret_keys.contains(&secret)
            {
                files.insert(secret.to_owned(), (variable, value));
                continue;
            }
            let kind = if list_keys.contains(&key.as_str()) {
                list(&value)
            } else {
                ValueKind::String(value)
            };
            direct.insert(key, Entry { variable, kind });
        }
        for (key, (file_variable, _)) in &files {
            if let Some(value) = direct.get(key) {
                return Err(Error::Config(format!(
                    "{key} is set by both {} and {file_variable}; set only one",
                    value.variable
                )));
            }
        }
        for (key, (variable, path)) in files {
            let kind = ValueKind::String(read_secret_file(&key, &variable, &path)?);
            direct.insert(key, Entry { variable, kind });
        }
        let origin = ORIGIN.to_owned();
        let map = direct
            .into_iter()
            .map(|(key, entry)| (key, Value::new(Some(&origin), entry.kind)))
            .collect();
        Ok(Self(map))
    }
}

/// A comma-separated list; an empty value is the empty list, not one empty item.
fn list(value: &str) -> ValueKind {
    let origin = ORIGIN.to_owned();
    let items = if value.is_empty() {
        Vec::new()
    } else {
        value
            .split(',')
            .map(|item| Value::new(Some(&origin), ValueKind::String(item.to_owned())))
            .collect()
    };
    ValueKind::Array(items)
}

/// The secret in `path`, without the trailing newline(s) `echo` and editors
/// add: a secret never ends in a newline, a file almost always does.
fn read_secret_file(key: &str, variable: &str, path: &str) -> Result<String, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| Error::Config(format!("{key}: cannot read {variable}={path}: {error}")))?;
    Ok(text.trim_end_matches(['\n', '\r']).to_owned())
}

impl Source for EnvLayer {
    fn clone_into_box(&self) -> Box<dyn Source + Send + Sync> {
        Box::new(self.clone())
    }

    fn collect(&self) -> Result<Map<String, Value>, config::ConfigError> {
        Ok(self.0.clone())
    }
}
