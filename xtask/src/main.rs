//! `cargo xtask` — project automation with no dependencies beyond std:
//!
//! - `test [ARGS...]`: the README's test command. Checks MariaDB and Redis,
//!   installs Tansu if missing, starts a broker on a free loopback port, runs
//!   the whole workspace's tests against it, and stops it again.
//! - `bench [--smoke] [--only NAME]`: the benchmark scenarios with same-run
//!   baselines, results under `target/bench/`.
//! - `broker [--sqlite FILE]`: starts a Tansu broker in the foreground (for manual work).

mod bench;
mod infra;
mod test;

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let command = args.next().unwrap_or_default();
    let rest: Vec<String> = args.collect();
    let result = match command.as_str() {
        "test" => test::run(&rest),
        "bench" => bench::run(&rest),
        "broker" => infra::run_broker_foreground(&rest),
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

fn print_help() {
    println!(
        "cargo xtask <command>\n\n\
         commands:\n  \
         test [ARGS...]  run every test against real MariaDB, Redis and a Tansu broker\n                  (ARGS go to cargo nextest, e.g. `-p outbox-relay`)\n  \
         bench [--smoke] [--only NAME]\n                  run the benchmarks (table + target/bench/results.json)\n  \
         broker [--sqlite FILE]\n                  run a Tansu broker on 127.0.0.1:9092 until Ctrl-C"
    );
}
