//! `cargo xtask test`: the README's test command and what CI runs.
//!
//! From nothing to a full run: check MariaDB and Redis, compile the tests
//! while the broker (`tools/local-broker`) builds beside them, install promtool (the alert
//! tests' rule evaluator) and Chromium with its WebDriver (the console's
//! browser test) if missing, start a broker on a free port, drop databases
//! left over by earlier runs, run every workspace test (cargo-nextest when installed, else
//! `cargo test`), stop the broker. A full run (no `-p`) then runs the CI
//! subset of the reliability suite: `cargo xtask chaos` with a fixed seed,
//! a short workload and every fault kind, including a crash of each process
//! kind and a broker outage; and finally starts `cargo xtask up` (docs/operations.md),
//! waits for every documented port and stops it as Ctrl-C would.

use crate::infra::{self, BrokerStorage};
use std::process::Command;

/// Runs the whole suite; extra args are passed to the test runner.
pub fn run(extra: &[String]) -> Result<(), String> {
    infra::check_databases()?;
    drop_leftover_databases();
    // Whole workspace unless the caller picked packages.
    let picked_packages = extra
        .iter()
        .any(|arg| arg == "-p" || arg == "--package" || arg.starts_with("--package="));
    let nextest = has_nextest();
    let root = infra::workspace_root();
    // The tests compile while the broker builds (a fresh machine's first run),
    // then run against a broker.
    let (tansu, ()) = infra::with_broker_built(
        &root.join("target/broker-build.log"),
        infra::run_checked,
        || infra::run_checked(&mut test_command(nextest, extra, picked_packages, true)),
    )?;
    let promtool = crate::promtool::ensure_promtool(infra::run_checked)?;
    crate::chromium::ensure_chromium(infra::run_checked)?;
    let port = infra::free_port()?;
    let log_dir = root.join("target/tansu");
    let broker = infra::start_broker(&tansu, port, &BrokerStorage::Memory, &log_dir)?;
    eprintln!("xtask: broker {} started for this run", broker.bootstrap);

    let mut command = test_command(nextest, extra, picked_packages, false);
    command
        .env("HYAPP_TEST_KAFKA_BOOTSTRAP", &broker.bootstrap)
        .env("HYAPP_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306")
        .env("HYAPP_TEST_REDIS_URL", "redis://127.0.0.1:6379")
        .env("HYAPP_TEST_TANSU", &tansu)
        .env("HYAPP_TEST_PROMTOOL", &promtool);
    let result = infra::run_checked(&mut command);
    drop(broker);
    result?;
    if picked_packages {
        return Ok(());
    }
    eprintln!(
        "xtask: reliability subset (cargo xtask chaos {})",
        CHAOS_SUBSET.join(" ")
    );
    let args: Vec<String> = CHAOS_SUBSET.iter().map(|arg| arg.to_string()).collect();
    crate::chaos::run(&args, &crate::interrupt::StopFlag::never())?;
    crate::up_check::run()
}

/// The test runner's command (cargo-nextest when `nextest`, else `cargo
/// test`) over the workspace or the packages `extra` picks; `compile_only`
/// builds the tests without running them.
fn test_command(
    nextest: bool,
    extra: &[String],
    picked_packages: bool,
    compile_only: bool,
) -> Command {
    let mut command = infra::cargo_command();
    if nextest {
        command.args(["nextest", "run"]);
    } else {
        command.arg("test");
    }
    command.arg(if compile_only {
        "--no-run"
    } else {
        "--no-fail-fast"
    });
    if !picked_packages {
        command.arg("--workspace");
    }
    command.args(extra).current_dir(infra::workspace_root());
    command
}

/// The reliability subset of a full test run: fixed seed, 75 s of
/// workload; the schedule's coverage round adds every fault kind. The
/// round's last room-service kill falls at about 59 s: with a 60 s workload
/// the rooms asked about just after it had no later call to answer, and the
/// recovery rule counted them as never answered.
const CHAOS_SUBSET: &[&str] = &["--seed", "20261130", "--duration", "75s", "--rooms", "16"];

fn has_nextest() -> bool {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["nextest", "--version"])
        .output()
        .map(|output| output.status.success())
        .unwrap_or(false)
}

/// Test databases younger than this are left alone.
const STALE_AFTER_SECS: u64 = 3 * 3600;

/// Each test makes its own database (`hyapp_t_*`); a test that fails keeps
/// its database for inspection until the next run, which removes it here.
fn drop_leftover_databases() {
    let list = Command::new("mysql")
        .args([
            "-uroot",
            "-h127.0.0.1",
            "-N",
            "-e",
            "SHOW DATABASES LIKE 'hyapp\\_t\\_%'",
        ])
        .output();
    let Ok(output) = list else {
        eprintln!("xtask: mysql client not found; leftover test databases are not cleaned");
        return;
    };
    let names = String::from_utf8_lossy(&output.stdout);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0);
    // Names are hyapp_t_<unix secs>_<random>; younger ones may belong to a concurrent run.
    let is_stale = |name: &&str| {
        name.strip_prefix("hyapp_t_")
            .and_then(|rest| rest.split('_').next())
            .and_then(|secs| secs.parse::<u64>().ok())
            .is_none_or(|created| now.saturating_sub(created) > STALE_AFTER_SECS)
    };
    let statements: String = names
        .lines()
        .filter(|name| !name.is_empty())
        .filter(is_stale)
        .map(|name| format!("DROP DATABASE `{name}`;"))
        .collect();
    if !statements.is_empty() {
        let _ = Command::new("mysql")
            .args(["-uroot", "-h127.0.0.1", "-e", &statements])
            .status();
    }
}
