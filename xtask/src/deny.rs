//! `cargo xtask deny [--require-advisories]`: the supply-chain check of
//! `deny.toml` — licences, banned crates and sources always; known
//! vulnerabilities (the RustSec advisory database) whenever the database can
//! be fetched. Installs cargo-deny once (cached in cargo's bin directory).
//!
//! The advisory database is a git repository on GitHub. A machine that
//! cannot reach it cannot check advisories at all; rather than fail every
//! build there, the run says loudly that advisories were NOT checked, and
//! `--require-advisories` turns that into a failure for machines that can.

use crate::infra::{cargo, run_checked};
use std::process::Command;

/// The cargo-deny release `deny.toml` is written for.
const CARGO_DENY_VERSION: &str = "0.20.2";

pub fn run(args: &[String]) -> Result<(), String> {
    let require_advisories = match args {
        [] => false,
        [flag] if flag == "--require-advisories" => true,
        other => return Err(format!("xtask deny: unexpected arguments {other:?}")),
    };
    ensure_cargo_deny()?;
    let workspace = crate::infra::workspace_root();
    run_checked(Command::new(cargo()).current_dir(&workspace).args([
        "deny",
        "check",
        "--hide-inclusion-graph",
        "bans",
        "licenses",
        "sources",
    ]))?;
    let fetched = Command::new(cargo())
        .current_dir(&workspace)
        .args(["deny", "fetch", "db"])
        .status()
        .is_ok_and(|status| status.success());
    if fetched {
        return run_checked(Command::new(cargo()).current_dir(&workspace).args([
            "deny",
            "check",
            "--disable-fetch",
            "advisories",
        ]));
    }
    let message = "the RustSec advisory database could not be fetched, so known \
                   vulnerabilities were NOT checked (licences, bans and sources were)";
    if require_advisories {
        return Err(message.into());
    }
    eprintln!("xtask deny: WARNING: {message}");
    Ok(())
}

fn ensure_cargo_deny() -> Result<(), String> {
    let installed = Command::new(cargo())
        .args(["deny", "--version"])
        .output()
        .is_ok_and(|output| String::from_utf8_lossy(&output.stdout).contains(CARGO_DENY_VERSION));
    if installed {
        return Ok(());
    }
    eprintln!(
        "xtask: installing cargo-deny {CARGO_DENY_VERSION} (once; cached in cargo's bin directory)"
    );
    run_checked(Command::new(cargo()).args([
        "install",
        "cargo-deny",
        "--version",
        CARGO_DENY_VERSION,
        "--locked",
    ]))
}
