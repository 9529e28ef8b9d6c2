//! The workspace binaries `up`, `demo` and `chaos` run, built once in the
//! dev profile with the test build's features, so a run after `cargo xtask
//! test` (or a test run after `demo`) compiles no crate again.
//!
//! Why `--workspace --bins --examples`: cargo resolves the features of a
//! plain `cargo build --bins` without the dev-dependencies, while every test
//! build unifies them in (tokio's `test-util`, opentelemetry_sdk's `testing`,
//! proptest's `getrandom` features). A different feature set is a different
//! build of tokio, uuid, sqlx and every crate above them. Naming the
//! examples (the workspace has none, so none is built) makes cargo resolve
//! features as a test build does, over the whole workspace as `cargo xtask
//! test` builds it; the binaries are then the very artifacts the tests use.

use crate::infra;
use crate::interrupt::{self, StopFlag};
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Directory cargo builds into.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| infra::workspace_root().join("target"))
}

/// Binaries that built (names), from `cargo build --bins --keep-going`.
pub type Built = std::collections::BTreeSet<String>;

/// The build's arguments after `cargo` (see the module doc for why the
/// examples are named).
pub const BUILD_ARGS: &[&str] = &[
    "build",
    "--workspace",
    "--bins",
    "--examples",
    "--keep-going",
];

/// Builds every workspace binary in the dev profile. A package that does not
/// compile does not stop the others (`--keep-going`); the caller decides
/// whether its absence is fatal. Cargo's diagnostics go to the terminal.
pub fn build_binaries(stop: &StopFlag) -> Result<Built, String> {
    crate::step(
        "building the binaries (cargo build --bins; dev profile and features shared with the tests)",
    );
    let mut command = infra::cargo_command();
    command
        .args(BUILD_ARGS)
        .arg("--message-format=json-render-diagnostics")
        .current_dir(infra::workspace_root())
        .stdout(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|error| format!("cannot run cargo build: {error}"))?;
    let stdout = child.stdout.take().ok_or("cargo build has no stdout")?;
    // Artifact messages name each executable, fresh or rebuilt.
    let reader = std::thread::spawn(move || {
        let mut built = Built::new();
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
            if let Some(name) = executable_name(&line) {
                built.insert(name);
            }
        }
        built
    });
    let status = interrupt::wait_child(&mut child, stop)?;
    let built = reader.join().unwrap_or_default();
    match status {
        None => Err("interrupted".into()),
        Some(status) if !status.success() => {
            crate::detail(&format!(
                "cargo build failed for some packages ({status}); continuing with what built: {}",
                built.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
            Ok(built)
        }
        Some(_) => Ok(built),
    }
}

/// The file name of `"executable":"…"` in a cargo JSON message.
fn executable_name(line: &str) -> Option<String> {
    let start = line.find("\"executable\":\"")? + "\"executable\":\"".len();
    let path = &line[start..start + line[start..].find('"')?];
    Path::new(path)
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executables_are_read_from_cargo_messages() {
        let line = r#"{"reason":"compiler-artifact","executable":"/w/target/debug/room-service","fresh":true}"#;
        assert_eq!(executable_name(line).as_deref(), Some("room-service"));
        assert_eq!(executable_name(r#"{"executable":null}"#), None);
    }

    /// The whole workspace with the test build's feature resolution: a
    /// package subset or a build without a dev-dependency target resolves
    /// other features and rebuilds what the tests built.
    #[test]
    fn the_build_resolves_features_as_the_test_build() {
        assert!(BUILD_ARGS.contains(&"--workspace"));
        assert!(BUILD_ARGS.contains(&"--examples"));
        assert!(
            !BUILD_ARGS
                .iter()
                .any(|arg| *arg == "-p" || *arg == "--release")
        );
    }
}
