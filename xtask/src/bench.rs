//! `cargo xtask bench [--smoke] [BENCH ARGS...]`: starts a broker and runs the
//! `bench` package against it (release build; the smoke run uses the dev build
//! the tests already made, so CI pays seconds, not a second compile). A full
//! run uses the broker built at opt-level 3 (`infra::ensure_bench_broker`),
//! a smoke run the tests' broker. Both measure a MariaDB of their own, sized
//! as a production server ([`BENCH_MARIADB_OPTIONS`]), unless `--mysql URL`
//! names one; Redis is the machine's.

use crate::infra::{self, BrokerStorage};
use crate::localdb::{self, LocalDatabases};
use std::process::Command;

/// The benchmarks' own MariaDB, sized as a production server would be rather
/// than as Debian's package ships (a 128 MiB buffer pool, a 96 MiB redo
/// log): with those defaults the bench's tables outgrow the pool, commits
/// wait for dirty pages to be written back, and the latency curve measured
/// the stalls (commit -> consumed p99 at half the gift capacity 455 ms with
/// the machine's server, 71 ms with this one, 48-49 ms at a tenth with
/// either; docs/performance.md, *Latency curve*).
const BENCH_MARIADB_OPTIONS: [&str; 3] = [
    "--innodb-buffer-pool-size=4G",
    "--innodb-log-file-size=2G",
    "--innodb-io-capacity=2000",
];

/// A smoke run's MariaDB: it proves the harness works and measures nothing,
/// so it keeps the package's small buffer pool and redo log rather than
/// writing a 2 GiB redo log to disk beside the tests' build.
const SMOKE_MARIADB_OPTIONS: [&str; 1] = ["--innodb-log-file-size=96M"];

/// Runs the benchmarks; args go to the bench binary (`--only relay-drain`, …).
pub fn run(args: &[String]) -> Result<(), String> {
    infra::check_databases()?;
    let root = infra::workspace_root();
    let smoke = args.iter().any(|arg| arg == "--smoke");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    if !smoke {
        // The memory scenario measures the real service binaries, each its own
        // process; `failover` and `presence` run three room-service processes
        // (a smoke run takes the dev binaries the tests built, or reports them
        // as not measured).
        let mut build = Command::new(&cargo);
        build.args(["build", "--quiet", "--release", "--bins"]);
        let consumers = crate::groups::CONSUMERS.iter().map(|group| group.service);
        for service in ["room-service", "outbox-relay"]
            .into_iter()
            .chain(consumers)
        {
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
    let (_mariadb, mysql_args) = if names_a_server(args) {
        (None, Vec::new())
    } else {
        let options: &[&str] = if smoke {
            &SMOKE_MARIADB_OPTIONS
        } else {
            &BENCH_MARIADB_OPTIONS
        };
        let (server, url) = BenchMariadb::start(&root.join("target/bench/mariadb"), options)?;
        (Some(server), vec!["--mysql".to_string(), url])
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
        .args(&mysql_args)
        .args(args)
        .current_dir(&root);
    let result = infra::run_checked(&mut command);
    drop(broker);
    result
}

/// True when the bench's arguments name a MariaDB to measure (`--mysql URL`
/// or `--mysql=URL`): the caller's server is used instead of one started here.
fn names_a_server(args: &[String]) -> bool {
    args.iter()
        .any(|arg| arg == "--mysql" || arg.starts_with("--mysql="))
}

/// The benchmarks' MariaDB ([`BENCH_MARIADB_OPTIONS`], or
/// [`SMOKE_MARIADB_OPTIONS`]): stopped when dropped, and its data directory
/// (a full run's 2 GiB redo log among it) deleted then;
/// its log stays beside it.
struct BenchMariadb {
    server: LocalDatabases,
    dir: std::path::PathBuf,
}

impl BenchMariadb {
    /// Starts it on a free port with a fresh data directory under `dir`;
    /// returns it and the URL the bench binary connects to.
    fn start(dir: &std::path::Path, options: &[&str]) -> Result<(Self, String), String> {
        let mariadbd = localdb::find_mariadbd().ok_or(
            "the benchmarks start their own MariaDB and `mariadbd` is not installed \
                 (apt-get install mariadb-server), or pass --mysql URL of a server to measure",
        )?;
        let port = infra::free_port()?;
        crate::step(&format!(
            "starting the benchmarks' MariaDB on 127.0.0.1:{port} ({}; data under {})",
            options.join(" "),
            dir.display()
        ));
        let child = localdb::start_mariadb_with(&mariadbd, dir, port, true, options)?;
        let mut server = LocalDatabases::default();
        server.servers.push(("mariadb", child));
        let started = Self {
            server,
            dir: dir.to_path_buf(),
        };
        Ok((started, format!("mysql://root@127.0.0.1:{port}")))
    }
}

impl Drop for BenchMariadb {
    fn drop(&mut self) {
        self.server.stop();
        let _ = std::fs::remove_dir_all(self.dir.join("data"));
    }
}

#[cfg(test)]
mod tests {
    use super::names_a_server;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|arg| arg.to_string()).collect()
    }

    #[test]
    fn a_server_named_on_the_command_line_replaces_the_benchmarks_own() {
        assert!(names_a_server(&args(&[
            "--only",
            "relay-drain",
            "--mysql",
            "mysql://db:3306"
        ])));
        assert!(names_a_server(&args(&["--mysql=mysql://db:3306"])));
        assert!(!names_a_server(&args(&["--only", "e2e-latency"])));
        // Another option that merely starts with the same letters is not it.
        assert!(!names_a_server(&args(&["--mysqlx"])));
        assert!(!names_a_server(&[]));
    }
}
