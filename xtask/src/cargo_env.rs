//! The variables cargo sets for a program it runs (`CARGO_MANIFEST_DIR`,
//! `CARGO_PKG_*`, … under `cargo run` or a test), and a nested cargo started
//! without them. Build scripts such as ring's declare `rerun-if-env-changed`
//! on those names, and cargo compares them with its own environment: a build
//! started from xtask or from a test would otherwise see them change against
//! one started from a shell, and rebuild ring, rustls, sqlx, tonic and every
//! crate above them each time. Dependency-free, so deploy-check's
//! configuration-reference test compiles this very file in instead of
//! keeping a copy.

use std::process::Command;

/// Whether `key` is one of the variables cargo sets for the program it runs.
pub fn set_by_cargo(key: &str) -> bool {
    key.starts_with("CARGO_PKG_")
        || key.starts_with("CARGO_MANIFEST_")
        || matches!(
            key,
            "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE" | "CARGO_TARGET_TMPDIR"
        )
}

/// Removes from `command`'s environment every variable of this process
/// that [`set_by_cargo`] names.
pub fn remove_cargo_run_env(command: &mut Command) {
    for (key, _) in std::env::vars_os() {
        if let Some(key) = key.to_str().filter(|key| set_by_cargo(key)) {
            command.env_remove(key);
        }
    }
}
