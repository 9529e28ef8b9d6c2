//! The infrastructure the tests and the local stack need: reachability checks
//! for MariaDB and Redis, the Kafka-protocol broker (Tansu's broker library
//! behind `tools/local-broker`, built with cargo into cargo's home), free
//! ports, and child-process hygiene.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The broker release the project is tested with (see docs/design.md):
/// `tools/local-broker` builds Tansu's broker library of this version.
pub const TANSU_VERSION: &str = "0.6.0";
/// The broker's own workspace (not a member of ours: Tansu's dependency
/// tree must not unify its features into the services').
const BROKER_MANIFEST: &str = "tools/local-broker/Cargo.toml";
/// Its binary's name.
const BROKER_BIN: &str = "local-broker";
/// The profile the tests, the demo and the chaos suite use: Tansu's crates
/// at opt-level 1, the rest at 0 (`tools/local-broker/Cargo.toml`), because
/// its build is most of a fresh machine's first run.
const BROKER_PROFILE: &str = "local";
/// The benchmarks' profile, opt-level 3 throughout: on two cores the broker
/// shares the CPU with MariaDB and the relay.
const BENCH_BROKER_PROFILE: &str = "release";

/// Root of the workspace (xtask's parent directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Fails with a precise message when MariaDB or Redis is not reachable.
pub fn check_databases() -> Result<(), String> {
    let mysql: SocketAddr = "127.0.0.1:3306".parse().map_err(|_| "bad address")?;
    TcpStream::connect_timeout(&mysql, Duration::from_secs(3)).map_err(|error| {
        format!(
            "MariaDB is not reachable on 127.0.0.1:3306 ({error}). Start it (e.g. \
             `start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd`) \
             or install it with `apt-get install mariadb-server`; user root, empty password."
        )
    })?;
    redis_ping().map_err(|error| {
        format!(
            "Redis is not reachable on 127.0.0.1:6379 ({error}). Start it with \
             `redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save \"\"` \
             or install it with `apt-get install redis-server`."
        )
    })
}

/// Sends `PING` to Redis on 127.0.0.1:6379 and expects `+PONG`.
pub fn redis_ping() -> Result<(), String> {
    redis_ping_at(6379)
}

/// Sends `PING` to Redis on 127.0.0.1:`port` and expects `+PONG`.
pub fn redis_ping_at(port: u16) -> Result<(), String> {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
        .map_err(|error| error.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .map_err(|error| error.to_string())?;
    stream
        .write_all(b"PING\r\n")
        .map_err(|error| error.to_string())?;
    let mut reply = [0u8; 7];
    stream
        .read_exact(&mut reply)
        .map_err(|error| error.to_string())?;
    if &reply == b"+PONG\r\n" {
        Ok(())
    } else {
        Err(format!("unexpected reply {reply:?}"))
    }
}

/// Path of the tests' broker, built (or found fresh) first.
pub fn ensure_broker() -> Result<PathBuf, String> {
    ensure_broker_with(run_checked)
}

/// The benchmarks' broker (opt-level 3), built (or found fresh) first.
pub fn ensure_bench_broker() -> Result<PathBuf, String> {
    eprintln!("xtask: building the benchmarks' broker ({BROKER_MANIFEST}, opt-level 3)");
    run_checked(&mut broker_build(BENCH_BROKER_PROFILE))?;
    built_broker(BENCH_BROKER_PROFILE)
}

/// Where the broker builds: in cargo's home, so a fresh clone on the same
/// machine (CI) finds its dependencies built, as it found an installed tool.
fn broker_target_dir() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("local-broker-target")
}

/// The broker binary of `profile` once built.
fn built_broker(profile: &str) -> Result<PathBuf, String> {
    let binary = broker_target_dir().join(profile).join(BROKER_BIN);
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(format!(
            "the broker was built but {} is missing",
            binary.display()
        ))
    }
}

/// Like [`ensure_broker`], running the build through `build` (the local
/// stack makes it interruptible). Cargo decides what is stale: a fresh
/// binary costs a second, a fresh machine several minutes once.
pub fn ensure_broker_with(
    build: impl FnOnce(&mut Command) -> Result<(), String>,
) -> Result<PathBuf, String> {
    eprintln!(
        "xtask: building the broker ({BROKER_MANIFEST}: Tansu {TANSU_VERSION}; several minutes \
         the first time on a machine, cached in {})",
        broker_target_dir().display()
    );
    build(&mut broker_build(BROKER_PROFILE))
        .map_err(|error| format!("building the broker failed: {error}"))?;
    built_broker(BROKER_PROFILE)
}

/// `cargo build` of the broker's workspace in `profile`, locked to its
/// Cargo.lock (the dependency versions it was tested with).
fn broker_build(profile: &str) -> Command {
    let mut command = cargo_command();
    command
        .args(["build", "--locked", "--profile", profile, "--manifest-path"])
        .arg(workspace_root().join(BROKER_MANIFEST))
        .arg("--target-dir")
        .arg(broker_target_dir());
    command
}

/// Runs `work` (typically the workspace build) while the broker builds
/// beside it, and returns both results. On two cores the two builds share
/// the machine well: much of the broker's build is a serial chain of large
/// crates that keeps one core busy, and the workspace fills the other. The
/// broker build's output goes to `log` (it would interleave with the
/// workspace build's); its tail is printed when it fails.
pub fn with_broker_built<T>(
    log: &Path,
    build: impl FnOnce(&mut Command) -> Result<(), String> + Send,
    work: impl FnOnce() -> Result<T, String>,
) -> Result<(PathBuf, T), String> {
    if let Some(parent) = log.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|error| format!("cannot create {}: {error}", parent.display()))?;
    }
    let (stdout, stderr) = std::fs::File::create(log)
        .and_then(|file| Ok((file.try_clone()?, file)))
        .map_err(|error| format!("cannot create {}: {error}", log.display()))?;
    eprintln!(
        "xtask: the broker builds in the background beside the workspace (log: {})",
        log.display()
    );
    let (tansu, worked) = beside(
        move || ensure_broker_with(|command| build(command.stdout(stdout).stderr(stderr))),
        work,
    );
    let tansu = tansu.map_err(|error| format!("{error}\n{}", log_tail(log)))?;
    Ok((tansu, worked?))
}

/// Runs `background` on a thread of its own while `work` runs on this one,
/// and returns both results once both have finished.
fn beside<A: Send, T>(
    background: impl FnOnce() -> Result<A, String> + Send,
    work: impl FnOnce() -> Result<T, String>,
) -> (Result<A, String>, Result<T, String>) {
    std::thread::scope(|scope| {
        let background = scope.spawn(background);
        let worked = work();
        let background = background
            .join()
            .unwrap_or_else(|_| Err("the background thread panicked".into()));
        (background, worked)
    })
}

/// The last lines of a log, for an error message.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(20)..].join("\n");
    format!("last lines of {}:\n{tail}", log.display())
}

pub fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// A `cargo` command without the variables `cargo run` set for xtask itself
/// (`crate::cargo_env` says why).
pub fn cargo_command() -> Command {
    let mut command = Command::new(cargo());
    crate::cargo_env::remove_cargo_run_env(&mut command);
    command
}

/// A free loopback port (bound then released; the caller binds it next).
pub fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|error| format!("cannot find a free port: {error}"))
}

/// A child process killed when dropped, so an early return or panic never
/// leaves a broker or service running.
#[derive(Debug)]
pub struct Guarded {
    child: Child,
}

impl Guarded {
    /// Stops the process (SIGKILL; brokers and services are crash-safe by design).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends `signal` (e.g. `STOP`, `CONT`) with kill(1).
    pub fn signal(&self, signal: &str) -> Result<(), String> {
        run_checked(
            Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(self.child.id().to_string()),
        )
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A running broker.
#[derive(Debug)]
pub struct Broker {
    /// `127.0.0.1:PORT`.
    pub bootstrap: String,
    /// The broker process.
    pub process: Guarded,
}

/// Where a broker keeps its data.
#[derive(Debug, Clone)]
pub enum BrokerStorage {
    /// In memory: fastest, gone when the broker stops.
    Memory,
    /// SQLite file, survives a restart or kill -9.
    Sqlite(PathBuf),
}

/// Starts Tansu on `port` and waits until it accepts connections.
pub fn start_broker(
    tansu: &Path,
    port: u16,
    storage: &BrokerStorage,
    log_dir: &Path,
) -> Result<Broker, String> {
    start_broker_advertised(tansu, port, port, storage, log_dir)
}

/// [`start_broker`] telling clients to connect to `advertised` (a proxy in
/// front of `port`) once they have bootstrapped.
pub fn start_broker_advertised(
    tansu: &Path,
    port: u16,
    advertised: u16,
    storage: &BrokerStorage,
    log_dir: &Path,
) -> Result<Broker, String> {
    std::fs::create_dir_all(log_dir)
        .map_err(|error| format!("create {}: {error}", log_dir.display()))?;
    let log_path = log_dir.join(format!("tansu-{port}.log"));
    // Appended: a restarted broker keeps the log of the one before it.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|error| format!("open broker log: {error}"))?;
    let log_err = log.try_clone().map_err(|error| error.to_string())?;
    let url = format!("tcp://127.0.0.1:{port}");
    let advertised_url = format!("tcp://127.0.0.1:{advertised}");
    // Tansu reads the path of a `sqlite://` URL relative to its working
    // directory, so it runs in the file's directory and is given the name.
    let (storage_url, work_dir) = match storage {
        BrokerStorage::Memory => ("memory://tansu/".to_string(), log_dir.to_path_buf()),
        BrokerStorage::Sqlite(path) => {
            let name = path
                .file_name()
                .ok_or_else(|| format!("{} is not a file path", path.display()))?;
            let dir = path
                .parent()
                .filter(|dir| !dir.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            (
                format!("sqlite://{}", name.to_string_lossy()),
                dir.to_path_buf(),
            )
        }
    };
    let child = Command::new(tansu)
        .args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &advertised_url,
        ])
        .args(["--storage-engine", &storage_url])
        .current_dir(&work_dir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        // Own process group: a terminal Ctrl-C must not stop the broker before
        // the services that use it (`cargo xtask up` stops it last).
        .process_group(0)
        .spawn()
        .map_err(|error| format!("cannot start tansu: {error}"))?;
    let mut process = Guarded { child };
    let addr: SocketAddr = format!("127.0.0.1:{port}")
        .parse()
        .map_err(|_| "bad address")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(Broker {
                bootstrap: format!("127.0.0.1:{port}"),
                process,
            });
        }
        if !process.is_running() {
            return Err(format!(
                "tansu exited during start-up; see {}",
                log_path.display()
            ));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "tansu did not listen on {addr} within 30s; see {}",
                log_path.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `cargo xtask broker [--sqlite FILE]`: a broker on 127.0.0.1:9092 until Ctrl-C.
pub fn run_broker_foreground(args: &[String]) -> Result<(), String> {
    let storage = match args {
        [] => BrokerStorage::Memory,
        [flag, file] if flag == "--sqlite" => BrokerStorage::Sqlite(PathBuf::from(file)),
        _ => return Err("usage: cargo xtask broker [--sqlite FILE]".into()),
    };
    let tansu = ensure_broker()?;
    let log_dir = workspace_root().join("target/tansu");
    let mut broker = start_broker(&tansu, 9092, &storage, &log_dir)?;
    println!("broker listening on {} (Ctrl-C to stop)", broker.bootstrap);
    while broker.process.is_running() {
        std::thread::sleep(Duration::from_millis(500));
    }
    Err("broker exited".into())
}

/// Runs `command`, failing with its name when it cannot start or exits non-zero.
pub fn run_checked(command: &mut Command) -> Result<(), String> {
    let description = format!("{command:?}");
    let status = command
        .status()
        .map_err(|error| format!("cannot run {description}: {error}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{description} failed ({status})"))
    }
}

#[cfg(test)]
mod tests {
    use super::{beside, cargo_command};
    use crate::cargo_env::set_by_cargo;
    use std::sync::mpsc;
    use std::time::Duration;

    /// The broker build and the workspace build overlap: the background task
    /// only finishes once the foreground work has run, which a sequential
    /// run (background first) never lets happen.
    #[test]
    fn cargo_runs_without_the_variables_of_xtasks_own_run() {
        for key in [
            "CARGO_MANIFEST_DIR",
            "CARGO_PKG_NAME",
            "CARGO_PRIMARY_PACKAGE",
        ] {
            assert!(set_by_cargo(key), "{key}");
        }
        // What configures cargo itself stays.
        for key in ["CARGO_HOME", "CARGO_TARGET_DIR", "CARGO"] {
            assert!(!set_by_cargo(key), "{key}");
        }
        let command = cargo_command();
        let removed: Vec<String> = command
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(key, _)| key.to_string_lossy().into_owned())
            .collect();
        assert!(removed.iter().all(|key| set_by_cargo(key)), "{removed:?}");
    }

    #[test]
    fn the_background_task_runs_while_the_work_does() {
        let (sender, receiver) = mpsc::channel();
        let (background, worked) = beside(
            move || {
                receiver
                    .recv_timeout(Duration::from_secs(60))
                    .map_err(|error| format!("the work never ran alongside: {error}"))
            },
            move || sender.send("built").map_err(|error| error.to_string()),
        );
        assert_eq!(background, Ok("built"));
        assert_eq!(worked, Ok(()));
    }

    #[test]
    fn both_failures_are_reported() {
        let (background, worked): (Result<(), String>, Result<(), String>) = beside(
            || Err("broker build failed".into()),
            || Err("build failed".into()),
        );
        assert_eq!(background, Err("broker build failed".into()));
        assert_eq!(worked, Err("build failed".into()));
    }
}
