//! `cargo xtask` — project automation with no dependencies beyond std:
//!
//! - `up`: the whole platform on this machine on the documented ports
//!   (broker, fakes, room-service, outbox-relay, the consumers) until Ctrl-C.
//! - `up-check`: `up` started, probed on every port and stopped with SIGTERM
//!   (the last step of a full `test`).
//! - `demo [--keep]`: the stack on free ports plus a scripted room session
//!   through the gRPC API and a report of what every service did.
//! - `test [ARGS...]`: the README's test command. Checks MariaDB and Redis,
//!   builds the broker (`tools/local-broker`), installs promtool if missing,
//!   starts a broker on a free loopback port, runs the whole workspace's
//!   tests against it, and stops it again.
//! - `bench [--smoke] [--only NAME]`: the benchmark scenarios with same-run
//!   baselines, results under `target/bench/`.
//! - `chaos [--seed N] [--duration 10m] [--faults LIST] [--rooms N] [--min-acked-per-room N]
//!   [--room-services 1-3] [--consumer-instances 1-2]`: the reliability run (workload + seeded
//!   faults + ledger checker) against several room-service instances and twin consumers.
//! - `deny [--require-advisories]`: the supply-chain check of `deny.toml`
//!   (licences, bans, sources; advisories when the database is reachable).
//! - `broker [--sqlite FILE]`: starts a Tansu broker in the foreground (for manual work).

mod backends;
mod bench;
mod binaries;
mod cargo_env;
mod chaos;
mod chaos_options;
mod chromium;
mod debian;
mod demo;
mod deny;
mod faults;
// The consumer groups, declared once in outbox-schema as plain consts; xtask
// stays dependency-free by compiling that very file.
#[path = "../../crates/outbox-schema/src/groups.rs"]
#[allow(dead_code, reason = "xtask reads part of the shared list")]
mod groups;
mod infra;
mod interrupt;
mod localdb;
mod logs;
mod network;
mod probe;
mod promtool;
mod proxy;
mod replication;
mod schedule;
mod sentinel;
mod services;
mod stack;
mod test;
mod topology;
mod up;
mod up_check;

use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::Instant;

fn main() -> ExitCode {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let command = all.first().cloned().unwrap_or_default();
    let rest = all.get(1..).unwrap_or_default();
    let result = match command.as_str() {
        "up" => up::run(rest, &interrupt::supervise(&all)),
        "demo" => demo::run(rest, &interrupt::supervise(&all)),
        "chaos" => chaos::run(rest, &interrupt::supervise(&all)),
        "test" => test::run(rest),
        "up-check" => up_check::run(),
        "bench" => bench::run(rest),
        "deny" => deny::run(rest),
        "broker" => infra::run_broker_foreground(rest),
        "" | "help" | "--help" | "-h" => {
            print_help();
            Ok(())
        }
        other => Err(format!("unknown xtask `{other}`; run `cargo xtask help`")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

fn started() -> Instant {
    static STARTED: OnceLock<Instant> = OnceLock::new();
    *STARTED.get_or_init(Instant::now)
}

/// Prints a progress step with the time since xtask started.
pub fn step(message: &str) {
    println!("[{:>6.1}s] ▸ {message}", started().elapsed().as_secs_f64());
}

/// Prints a detail line under the current step.
pub fn detail(message: &str) {
    println!("           {message}");
}

fn print_help() {
    println!(
        "cargo xtask <command>\n\n\
         commands:\n  \
         up              run the whole stack on the documented ports until Ctrl-C\n                  (logs in target/stack/<service>.log)\n  \
         up-check        start `up`, wait for every documented port, stop it with SIGTERM\n                  (the last step of a full `test`)\n  \
         demo [--keep]   run the stack on free ports, drive a scripted room session and\n                  report every effect; exit 0 only if all were observed\n  \
         test [ARGS...]  run every test against real MariaDB, Redis and a Tansu broker\n                  (ARGS go to cargo nextest, e.g. `-p outbox-relay`)\n  \
         bench [--smoke] [--only NAME]\n                  run the benchmarks (table + target/bench/results.json)\n  \
         chaos [--seed N] [--duration 10m] [--faults kill,restart,broker,redis,mysql,im,wallet] [--rooms N] [--min-acked-per-room N] [--room-services 1-3] [--consumer-instances 1-2]\n                  crash/fault the running platform under load, then check the delivery ledger\n  \
         deny [--require-advisories]\n                  supply-chain check of deny.toml (licences, bans, sources; advisories when\n                  the RustSec database is reachable)\n  \
         broker [--sqlite FILE]\n                  run a Tansu broker on 127.0.0.1:9092 until Ctrl-C"
    );
}
