//! The demo's security checks, each a line of the report:
//! - no secret in use (passed by xtask as `--secret NAME=VALUE`) appears in
//!   any log file of the run or in the demo's own output;
//! - the relay's admin endpoint refuses a missing or wrong token and accepts
//!   the configured one;
//! - the listeners check xtask ran on the live processes (`--listeners`).
//!
//! A secret found is reported by name and file, never by value.

use crate::checks::{Check, named};
use std::path::Path;

/// Greps every `*.log` under `logs` and `own_output` for each secret value.
pub fn secrets_check(secrets: &[String], logs: Option<&str>, own_output: &str) -> Check {
    const NAME: &str = "no secret in any service log or the demo output";
    let secrets: Vec<(&str, &str)> = secrets
        .iter()
        .filter_map(|pair| pair.split_once('='))
        .filter(|(_, value)| !value.is_empty())
        .collect();
    let Some(logs) = logs else {
        return named(NAME, false, "no --logs directory: cannot check");
    };
    if secrets.is_empty() {
        return named(NAME, false, "no --secret given: nothing to look for");
    }
    let mut files = match std::fs::read_dir(Path::new(logs)) {
        Ok(entries) => entries
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
            .collect::<Vec<_>>(),
        Err(error) => return named(NAME, false, format!("cannot read {logs}: {error}")),
    };
    files.sort();
    let mut sources: Vec<(String, String)> = vec![("demo output".into(), own_output.to_string())];
    for file in &files {
        let text = String::from_utf8_lossy(&std::fs::read(file).unwrap_or_default()).into_owned();
        let name = file.file_name().map_or_else(
            || file.display().to_string(),
            |name| name.to_string_lossy().into_owned(),
        );
        sources.push((name, text));
    }
    let leaks: Vec<String> = secrets
        .iter()
        .flat_map(|(name, value)| {
            sources
                .iter()
                .filter(move |(_, text)| text.contains(value))
                .map(move |(source, _)| format!("{name} in {source}"))
        })
        .collect();
    let names: Vec<&str> = secrets.iter().map(|(name, _)| *name).collect();
    if !leaks.is_empty() {
        return named(NAME, false, format!("LEAKED: {}", leaks.join(", ")));
    }
    if files.is_empty() {
        return named(NAME, false, format!("no *.log files in {logs}"));
    }
    named(
        NAME,
        true,
        format!(
            "{} not found in {} log files ({} bytes) nor the demo output",
            names.join(", "),
            files.len(),
            sources
                .iter()
                .skip(1)
                .map(|(_, text)| text.len())
                .sum::<usize>()
        ),
    )
}

/// The relay's `/admin/status`: 401 without a token and with a wrong one,
/// 200 with the configured one.
pub async fn admin_check(http: &reqwest::Client, base: &str, token: Option<&str>) -> Check {
    const NAME: &str = "outbox-relay admin refuses a missing or wrong token";
    let Some(token) = token else {
        return named(NAME, false, "no admin token given: cannot check");
    };
    let url = format!("{base}/admin/status");
    let mut seen = Vec::new();
    for (what, header, expected) in [
        ("missing", None, 401),
        ("wrong", Some("Bearer wrong-token".to_string()), 401),
        ("configured", Some(format!("Bearer {token}")), 200),
    ] {
        let mut request = http.get(&url);
        if let Some(header) = header {
            request = request.header("authorization", header);
        }
        match request.send().await {
            Ok(response) => seen.push((what, response.status().as_u16(), expected)),
            Err(error) => return named(NAME, false, format!("{url}: {error}")),
        }
    }
    let ok = seen.iter().all(|(_, status, expected)| status == expected);
    named(
        NAME,
        ok,
        seen.iter()
            .map(|(what, status, expected)| format!("{what} token → {status} (want {expected})"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// xtask's `ok:<summary>` / `fail:<problems>` as a check.
pub fn listeners_check(result: Option<&str>) -> Check {
    const NAME: &str = "services listen only on their configured addresses";
    match result.and_then(|text| text.split_once(':')) {
        Some(("ok", summary)) => named(NAME, true, summary),
        Some((_, problems)) => named(NAME, false, problems),
        None => named(NAME, false, "not checked (no --listeners from xtask)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_in_a_log_or_the_output_fails_the_check() {
        let dir = std::env::temp_dir().join(format!("demo-secrets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("svc.log"), "started\n").unwrap();
        let logs = dir.to_str();
        let secrets = vec!["im key=s3cr3t-value".to_string()];
        assert!(secrets_check(&secrets, logs, "report").ok);
        let leaked = secrets_check(&secrets, logs, "report s3cr3t-value");
        assert!(!leaked.ok);
        assert!(!leaked.detail.contains("s3cr3t-value"), "{}", leaked.detail);
        std::fs::write(dir.join("other.log"), "key=s3cr3t-value\n").unwrap();
        let leaked = secrets_check(&secrets, logs, "report");
        assert_eq!(leaked.detail, "LEAKED: im key in other.log");
        assert!(
            !secrets_check(&[], logs, "").ok,
            "nothing to look for is not a pass"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
