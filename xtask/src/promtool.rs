//! `promtool`, Prometheus' rule checker, which the alert tests
//! (`deploy/check/tests/alert_scenarios.rs`) run to evaluate every alert of
//! `deploy/prometheus/alerts.yml` against scrapes of the running services.
//!
//! Like Chromium (`crate::chromium`), installed when missing and found
//! again afterwards: Debian's `prometheus` package ships it as
//! `/usr/bin/promtool`. Idempotent: with a working promtool nothing runs.

use std::path::PathBuf;
use std::process::Command;

/// Path of a working `promtool`, installing Debian's `prometheus` package
/// (through `install`) when none is found.
pub fn ensure_promtool(
    install: impl Fn(&mut Command) -> Result<(), String>,
) -> Result<PathBuf, String> {
    if let Some(found) = find() {
        return Ok(found);
    }
    eprintln!("xtask: installing promtool (Debian package prometheus, without recommends)");
    crate::debian::apt_install(&["prometheus"], &install)?;
    find().ok_or_else(|| "the prometheus package was installed but promtool does not run".into())
}

fn find() -> Option<PathBuf> {
    ["promtool", "/usr/bin/promtool"]
        .into_iter()
        .map(PathBuf::from)
        .find(|path| {
            Command::new(path)
                .arg("--version")
                .output()
                .is_ok_and(|output| output.status.success())
        })
}
