//! Facts read from the workspace's source text: the binaries (workspace
//! members and their `[[bin]]` / `src/main.rs`), the metric names registered
//! with prometheus-client (the names it exposes, and whether each follows
//! Prometheus' naming conventions), the subcommands of a clap CLI, and the
//! flags of the fakes (`#[arg(long, env = "…", default_value = "…")]`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The binaries the workspace builds, by name.
pub fn workspace_binaries(root: &Path) -> Result<BTreeSet<String>, String> {
    let manifest = read(&root.join("Cargo.toml"))?;
    let mut binaries = BTreeSet::new();
    for member in workspace_members(&manifest) {
        let dir = root.join(&member);
        let text = read(&dir.join("Cargo.toml"))?;
        binaries.extend(package_binaries(&text, dir.join("src/main.rs").exists()));
    }
    Ok(binaries)
}

/// The `members = [...]` entries of a workspace manifest.
pub fn workspace_members(manifest: &str) -> Vec<String> {
    let Some(start) = manifest.find("members") else {
        return Vec::new();
    };
    let rest = &manifest[start..];
    let (Some(open), Some(close)) = (rest.find('['), rest.find(']')) else {
        return Vec::new();
    };
    rest[open + 1..close]
        .split(',')
        .map(|item| item.trim().trim_matches('"').to_string())
        .filter(|item| !item.is_empty() && !item.starts_with('#'))
        .collect()
}

/// The binaries of one package manifest: every `[[bin]]` name, or the package
/// name when `src/main.rs` exists and there is no `[[bin]]`.
pub fn package_binaries(manifest: &str, has_main_rs: bool) -> Vec<String> {
    let mut section = "";
    let mut package_name = None;
    let mut bins = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line;
            continue;
        }
        if let Some(value) = line.strip_prefix("name").map(str::trim)
            && let Some(value) = value.strip_prefix('=')
        {
            let value = value.trim().trim_matches('"').to_string();
            match section {
                "[package]" => package_name = Some(value),
                "[[bin]]" => bins.push(value),
                _ => {}
            }
        }
    }
    if bins.is_empty() && has_main_rs {
        bins.extend(package_name);
    }
    bins
}

/// The kind of a registered metric, which decides its exposed series names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Exposed as `<name>_total`.
    Counter,
    /// Exposed as `<name>`.
    Gauge,
    /// Exposed as `<name>_bucket`, `<name>_sum`, `<name>_count`.
    Histogram,
}

/// The `registry.register("name", "help", metrics.field.clone())` calls of one
/// source file (`self.field` inside the metrics type's own methods), with each
/// metric's kind taken from the field's declared type.
pub fn registered_metrics(source: &str) -> Result<Vec<(String, MetricKind)>, String> {
    let mut out = Vec::new();
    for (index, _) in source.match_indices("registry.register(") {
        let call = &source[index + "registry.register(".len()..];
        let call = &call[..call.find(");").unwrap_or(call.len())];
        let name = first_string_literal(call)
            .ok_or_else(|| format!("registry.register without a name literal: {call}"))?;
        let args = split_args(call);
        let field = args
            .get(2)
            .map(|arg| arg.trim())
            .and_then(|arg| {
                arg.strip_prefix("metrics.")
                    .or_else(|| arg.strip_prefix("self."))
            })
            .and_then(|arg| arg.split('.').next())
            .ok_or_else(|| {
                format!("metric {name}: third argument is not `metrics.<field>` or `self.<field>`")
            })?;
        let declared = field_type(source, field)
            .ok_or_else(|| format!("metric {name}: no declaration of field `{field}`"))?;
        let kind = if declared.contains("Histogram") {
            MetricKind::Histogram
        } else if declared.contains("Counter") {
            MetricKind::Counter
        } else if declared.contains("Gauge") {
            MetricKind::Gauge
        } else {
            return Err(format!("metric {name}: unknown type `{declared}`"));
        };
        out.push((name, kind));
    }
    Ok(out)
}

/// The series names prometheus-client exposes for a registered metric.
pub fn exposed_names(name: &str, kind: MetricKind) -> Vec<String> {
    match kind {
        MetricKind::Counter => vec![format!("{name}_total")],
        MetricKind::Gauge => vec![name.to_string()],
        MetricKind::Histogram => ["_bucket", "_sum", "_count"]
            .iter()
            .map(|suffix| format!("{name}{suffix}"))
            .collect(),
    }
}

/// Splits call arguments at commas outside string literals.
fn split_args(call: &str) -> Vec<String> {
    let mut args = vec![String::new()];
    let mut in_string = false;
    for ch in call.chars() {
        match ch {
            '"' => in_string = !in_string,
            ',' if !in_string => {
                args.push(String::new());
                continue;
            }
            _ => {}
        }
        if let Some(last) = args.last_mut() {
            last.push(ch);
        }
    }
    args
}

fn first_string_literal(text: &str) -> Option<String> {
    let start = text.find('"')? + 1;
    let end = start + text[start..].find('"')?;
    Some(text[start..end].to_string())
}

fn field_type(source: &str, field: &str) -> Option<String> {
    source.lines().find_map(|line| {
        let line = line.trim();
        let line = line.strip_prefix("pub ").unwrap_or(line);
        let declared = line.strip_prefix(field)?.trim_start().strip_prefix(':')?;
        Some(declared.trim().trim_end_matches(',').to_string())
    })
}

/// Every exposed metric series name registered anywhere under `dirs`.
pub fn exposed_metrics(dirs: &[&Path]) -> Result<BTreeSet<String>, String> {
    Ok(registrations(dirs)?
        .iter()
        .flat_map(|(name, kind)| exposed_names(name, *kind))
        .collect())
}

/// Every `(registered name, kind)` under `dirs`.
pub fn registrations(dirs: &[&Path]) -> Result<Vec<(String, MetricKind)>, String> {
    let mut out = Vec::new();
    for dir in dirs {
        for file in rust_files(dir)? {
            let text = read(&file)?;
            out.extend(
                registered_metrics(&text)
                    .map_err(|error| format!("{}: {error}", file.display()))?,
            );
        }
    }
    Ok(out)
}

/// Where a registered name breaks Prometheus' naming conventions: a unit
/// other than the base one (`_ms`, `_milliseconds`: durations are
/// `_seconds`), or `_total` on anything but a counter (prometheus-client
/// appends `_total` to counters itself, so a registered name never ends in it).
pub fn naming_problem(name: &str, kind: MetricKind) -> Option<String> {
    let words: Vec<&str> = name.split('_').collect();
    if words.iter().any(|word| {
        matches!(
            *word,
            "ms" | "milliseconds" | "millis" | "us" | "microseconds"
        )
    }) {
        return Some(format!(
            "metric {name}: durations are in seconds (`_seconds`), not a sub-unit"
        ));
    }
    if name.ends_with("_total") {
        return Some(match kind {
            MetricKind::Counter => format!(
                "metric {name}: a counter is registered without `_total` (prometheus-client appends it)"
            ),
            MetricKind::Gauge | MetricKind::Histogram => format!(
                "metric {name}: `_total` is for counters only; a gauge or histogram must not end in it"
            ),
        });
    }
    None
}

/// The subcommands of a clap CLI source, in the kebab case clap gives them:
/// the variants of every `#[derive(…Subcommand…)]` enum.
pub fn subcommands(source: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in source.match_indices("Subcommand)]") {
        let rest = &source[at..];
        let Some(open) = rest
            .find("enum ")
            .and_then(|enum_at| rest[enum_at..].find('{').map(|brace| enum_at + brace + 1))
        else {
            continue;
        };
        let mut depth = 1usize;
        let mut line_start = true;
        let body = &rest[open..];
        let mut index = 0;
        while index < body.len() && depth > 0 {
            let ch = body[index..].chars().next().unwrap_or(' ');
            match ch {
                '{' | '(' => depth += 1,
                '}' | ')' => depth = depth.saturating_sub(1),
                '\n' => line_start = true,
                _ if ch.is_whitespace() => {}
                _ if line_start && depth == 1 && ch.is_ascii_uppercase() => {
                    let word: String = body[index..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric())
                        .collect();
                    index += word.len();
                    out.insert(kebab_case(&word));
                    line_start = false;
                    continue;
                }
                _ => line_start = false,
            }
            index += ch.len_utf8();
        }
    }
    out
}

fn kebab_case(word: &str) -> String {
    let mut out = String::new();
    for (index, ch) in word.chars().enumerate() {
        if ch.is_ascii_uppercase() {
            if index > 0 {
                out.push('-');
            }
            out.push(ch.to_ascii_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}

fn rust_files(dir: &Path) -> Result<Vec<std::path::PathBuf>, String> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|error| format!("{}: {error}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|name| name != "target") {
                out.extend(rust_files(&path)?);
            }
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
    Ok(out)
}

/// A fake's clap flags: environment variable name → default value (empty when
/// the flag has none).
pub fn clap_env_flags(main_rs: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for chunk in main_rs.split("#[arg(").skip(1) {
        let attribute = &chunk[..chunk.find(")]").unwrap_or(chunk.len())];
        let Some(env) = attribute
            .find("env = ")
            .and_then(|at| first_string_literal(&attribute[at..]))
        else {
            continue;
        };
        let default = attribute
            .find("default_value = ")
            .and_then(|at| first_string_literal(&attribute[at..]))
            .unwrap_or_default();
        out.insert(env, default);
    }
    out
}

/// Reads a file, naming it in the error.
pub fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|error| format!("{}: {error}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_and_binaries() {
        let manifest = "[workspace]\nmembers = [\n    \"a\",\n    \"b/c\",\n]\n";
        assert_eq!(workspace_members(manifest), ["a", "b/c"]);
        assert_eq!(package_binaries("[package]\nname = \"x\"\n", true), ["x"]);
        assert!(package_binaries("[package]\nname = \"x\"\n", false).is_empty());
        assert_eq!(
            package_binaries("[package]\nname = \"x\"\n[[bin]]\nname = \"y\"\n", true),
            ["y"]
        );
    }

    #[test]
    fn registration_kinds_and_suffixes() {
        let source = r#"
            pub struct M { pub a: Counter, b: Family<L, Histogram>, pub c: Gauge, }
            pub a: Counter,
            b: Family<L, Histogram>,
            pub c: Gauge,
            registry.register("x_requests", "help, with a comma", metrics.a.clone());
            registry.register(
                "x_seconds",
                "help",
                metrics.b.clone(),
            );
            registry.register("x_pending_total", "help", self.c.clone());
        "#;
        let mut names = BTreeSet::new();
        for (name, kind) in registered_metrics(source).unwrap() {
            names.extend(exposed_names(&name, kind));
        }
        let expected: BTreeSet<String> = [
            "x_requests_total",
            "x_seconds_bucket",
            "x_seconds_sum",
            "x_seconds_count",
            "x_pending_total",
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(names, expected);
    }

    #[test]
    fn naming_conventions() {
        assert!(naming_problem("x_latency_ms", MetricKind::Histogram).is_some());
        assert!(naming_problem("x_age_ms", MetricKind::Gauge).is_some());
        assert!(naming_problem("x_pending_total", MetricKind::Gauge).is_some());
        assert!(naming_problem("x_requests_total", MetricKind::Counter).is_some());
        assert!(naming_problem("x_latency_seconds", MetricKind::Histogram).is_none());
        assert!(naming_problem("x_pending", MetricKind::Gauge).is_none());
        assert!(naming_problem("x_requests", MetricKind::Counter).is_none());
        // A word that merely contains the letters is fine.
        assert!(naming_problem("x_items_messages", MetricKind::Gauge).is_none());
    }

    #[test]
    fn clap_subcommands() {
        let source = r#"
            #[derive(Debug, Subcommand)]
            enum Command {
                /// Runs.
                Run,
                Status,
                #[command(subcommand)]
                DeadLetters(DeadLetterCommand),
                Purge {
                    #[arg(long)]
                    retention: Option<String>,
                },
            }
            #[derive(Debug, Subcommand)]
            enum HostCommand {
                ConsumerLag { group: Option<String> },
            }
        "#;
        let found: Vec<String> = subcommands(source).into_iter().collect();
        assert_eq!(
            found,
            ["consumer-lag", "dead-letters", "purge", "run", "status"]
        );
    }

    #[test]
    fn clap_flags() {
        let main_rs = r#"
            #[arg(long, env = "FAKE_LISTEN", default_value = "127.0.0.1:1")]
            listen: SocketAddr,
            #[arg(long, env = "FAKE_KEY", hide_env_values = true)]
            key: String,
        "#;
        let flags = clap_env_flags(main_rs);
        assert_eq!(flags["FAKE_LISTEN"], "127.0.0.1:1");
        assert_eq!(flags["FAKE_KEY"], "");
    }
}
