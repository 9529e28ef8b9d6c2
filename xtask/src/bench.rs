//! `cargo xtask bench [--smoke] [BENCH ARGS...]`: starts a broker and runs the
//! `bench` package against it (release build; the smoke run uses the dev build
//! the tests already made, so CI pays seconds, not a second compile).

use crate::infra::{self, BrokerStorage};
use std::process::Command;

/// Runs the benchmarks; args go to the bench binary (`--only relay-drain`, …).
pub fn run(args: &[String]) -> Result<(), String> {
    infra::check_databases()?;
    let tansu = infra::ensure_tansu()?;
    let port = infra::free_port()?;
    let root = infra::workspace_root();
    let broker = infra::start_broker(
        &tansu,
        port,
        &BrokerStorage::Memory,
        &root.join("target/tansu"),
    )?;
    let smoke = args.iter().any(|arg| arg == "--smoke");
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.args(["run", "--quiet", "-p", "bench"]);
    if !smoke {
        command.arg("--release");
    }
    command
        .arg("--")
        .args(["--bootstrap", &broker.bootstrap])
        .args([
            "--out-dir",
            &root.join("target/bench").display().to_string(),
        ])
        .args(args)
        .current_dir(&root);
    let result = infra::run_checked(&mut command);
    drop(broker);
    result
}
