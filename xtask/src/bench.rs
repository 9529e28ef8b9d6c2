//! `cargo xtask bench [--smoke] [BENCH ARGS...]`: starts a broker and runs the
//! `bench` package against it (release build; the smoke run uses the dev build
//! the tests already made, so CI pays seconds, not a second compile). A full
//! run uses the broker built at opt-level 3 (`infra::ensure_bench_broker`),
//! a smoke run the tests' broker.

use crate::infra::{self, BrokerStorage};
use std::process::Command;

/// Runs the benchmarks; args go to the bench binary (`--only relay-drain`, …).
pub fn run(args: &[String]) -> Result<(), String> {
    infra::check_databases()?;
    let root = infra::workspace_root();
    let smoke = args.iter().any(|arg| arg == "--smoke");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    if !smoke {
        // The memory scenario measures the real service binaries, each its own process.
        let mut build = Command::new(&cargo);
        build.args(["build", "--quiet", "--release", "--bins"]);
        for service in [
            "room-service",
            "outbox-relay",
            "activity-consumer",
            "notice-consumer",
            "im-bridge",
        ] {
            build.args(["-p", service]);
        }
        build.current_dir(&root);
        infra::run_checked(&mut build)?;
    }
    // A smoke run only proves the harness works: the tests' broker will do.
    let tansu = if smoke {
        infra::ensure_broker()?
    } else {
        infra::ensure_bench_broker()?
    };
    let port = infra::free_port()?;
    let broker = infra::start_broker(
        &tansu,
        port,
        &BrokerStorage::Memory,
        &root.join("target/tansu"),
    )?;
    let mut command = Command::new(&cargo);
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
