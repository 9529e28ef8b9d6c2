//! MariaDB and Redis for the local stack: the machine's own servers when they
//! answer on 127.0.0.1:3306 / :6379, else private throwaway instances under
//! `target/stack/` when `mariadbd` / `redis-server` are installed (stopped
//! with the stack, data discarded), else a message saying what to install.

use crate::infra;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Private database servers started for this run (empty when the machine's own are used).
#[derive(Debug, Default)]
pub struct LocalDatabases {
    /// `(name, process)` of each private server.
    pub servers: Vec<(&'static str, Child)>,
}

impl LocalDatabases {
    /// Stops the private servers (SIGTERM, then SIGKILL).
    pub fn stop(&mut self) {
        for (name, child) in self.servers.iter_mut().rev() {
            crate::interrupt::terminate(child, Duration::from_secs(10));
            crate::detail(&format!("private {name:<11} stopped"));
        }
        self.servers.clear();
    }
}

impl Drop for LocalDatabases {
    fn drop(&mut self) {
        self.stop();
    }
}

fn mysql_reachable() -> bool {
    mysql_reachable_at(3306)
}

/// True when something accepts connections on 127.0.0.1:`port`.
pub fn mysql_reachable_at(port: u16) -> bool {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
}

/// Finds `name` in PATH or the usual sbin directories.
pub fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/usr/local/sbin", "/usr/bin"])
        .map(|dir| Path::new(dir).join(name))
        .find(|candidate| candidate.is_file())
}

/// The MariaDB server binary (`mariadbd`, or `mysqld` where only the older
/// name is installed), for the private instances.
pub fn find_mariadbd() -> Option<PathBuf> {
    find_binary("mariadbd").or_else(|| find_binary("mysqld"))
}

/// Makes MariaDB and Redis reachable on their default ports, starting private
/// instances under `dir` when needed.
pub fn ensure(dir: &Path) -> Result<LocalDatabases, String> {
    let mut local = LocalDatabases::default();
    if !mysql_reachable() {
        let Some(mariadbd) = find_mariadbd() else {
            return Err(
                "MariaDB is not reachable on 127.0.0.1:3306 and `mariadbd` is not installed: \
                 `apt-get install mariadb-server` (or start your MariaDB/MySQL 8 with user root, \
                 empty password, on 127.0.0.1:3306)"
                    .into(),
            );
        };
        crate::step(
            "starting a private MariaDB on 127.0.0.1:3306 (data under target/stack/mariadb)",
        );
        let child = start_mariadb(&mariadbd, &dir.join("mariadb"), 3306, true)?;
        local.servers.push(("mariadb", child));
    }
    if infra::redis_ping().is_err() {
        let Some(redis) = find_binary("redis-server") else {
            return Err(
                "Redis is not reachable on 127.0.0.1:6379 and `redis-server` is not installed: \
                 `apt-get install redis-server`"
                    .into(),
            );
        };
        crate::step("starting a private Redis on 127.0.0.1:6379 (no persistence)");
        let child = start_redis(&redis, &dir.join("redis"), 6379)?;
        local.servers.push(("redis", child));
    }
    infra::check_databases()?;
    Ok(local)
}

fn log_file(dir: &Path, name: &str) -> Result<(std::fs::File, std::fs::File), String> {
    let path = dir.join(name);
    let file = std::fs::File::create(&path)
        .map_err(|error| format!("create {}: {error}", path.display()))?;
    let clone = file.try_clone().map_err(|error| error.to_string())?;
    Ok((file, clone))
}

fn fresh_dir(dir: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|error| format!("create {}: {error}", dir.display()))
}

/// Starts a throwaway MariaDB on `port` with its data under `dir`; `install`
/// creates a fresh data directory first, otherwise the existing one is reused
/// (a restart after a crash: InnoDB recovers it).
pub fn start_mariadb(
    mariadbd: &Path,
    dir: &Path,
    port: u16,
    install: bool,
) -> Result<Child, String> {
    start_mariadb_with(mariadbd, dir, port, install, &[])
}

/// [`start_mariadb`] with server options of its own (`--innodb-…=…`), after
/// the ones every private instance has.
pub fn start_mariadb_with(
    mariadbd: &Path,
    dir: &Path,
    port: u16,
    install: bool,
    options: &[&str],
) -> Result<Child, String> {
    let data = dir.join("data");
    if install {
        install_mariadb(dir, &data)?;
    }
    let (out, err) = log_file_append(dir, "mariadb.log")?;
    let mut command = Command::new(mariadbd);
    command
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--tmpdir={}", private_tmpdir(dir)?.display()))
        .arg(format!("--socket={}", dir.join("mysqld.sock").display()))
        .arg(format!("--pid-file={}", dir.join("mysqld.pid").display()))
        .arg(format!("--port={port}"))
        .args(["--bind-address=127.0.0.1", "--skip-name-resolve"])
        // Throwaway instance: anyone on loopback may connect as root without a password.
        .arg("--skip-grant-tables")
        .args(options)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    if running_as_root() {
        command.arg("--user=root");
    }
    spawn_and_wait(command, "mariadb", &dir.join("mariadb.log"), || {
        mysql_reachable_at(port)
    })
}

fn install_mariadb(dir: &Path, data: &Path) -> Result<(), String> {
    fresh_dir(dir)?;
    let install = find_binary("mariadb-install-db")
        .or_else(|| find_binary("mysql_install_db"))
        .ok_or("mariadb-install-db is missing (it ships with mariadb-server)")?;
    let (out, err) = log_file(dir, "install.log")?;
    let mut install_cmd = Command::new(install);
    install_cmd
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--tmpdir={}", private_tmpdir(dir)?.display()))
        .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
        .stdout(out)
        .stderr(err);
    if running_as_root() {
        install_cmd.arg("--user=root");
    }
    infra::run_checked(&mut install_cmd)
        .map_err(|error| format!("{error}; see {}", dir.join("install.log").display()))
}

/// `dir/tmp`, created if missing. MariaDB's temporary tables live there
/// rather than in the shared /tmp, where another process's clean-up could
/// delete them underneath the server (the install's bootstrap then aborts).
fn private_tmpdir(dir: &Path) -> Result<PathBuf, String> {
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).map_err(|error| format!("create {}: {error}", tmp.display()))?;
    Ok(tmp)
}

/// Appends to `dir/name` (a restarted server keeps the earlier log).
fn log_file_append(dir: &Path, name: &str) -> Result<(std::fs::File, std::fs::File), String> {
    let path = dir.join(name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|error| format!("open {}: {error}", path.display()))?;
    let clone = file.try_clone().map_err(|error| error.to_string())?;
    Ok((file, clone))
}

/// Starts a throwaway Redis (no persistence) on `port`, logging under `dir`.
pub fn start_redis(redis: &Path, dir: &Path, port: u16) -> Result<Child, String> {
    start_redis_with(redis, dir, port, &[])
}

/// [`start_redis`] with server options of its own (`--replicaof …`).
pub fn start_redis_with(
    redis: &Path,
    dir: &Path,
    port: u16,
    options: &[String],
) -> Result<Child, String> {
    std::fs::create_dir_all(dir).map_err(|error| format!("create {}: {error}", dir.display()))?;
    let (out, err) = log_file_append(dir, "redis.log")?;
    let mut command = Command::new(redis);
    let port_arg = port.to_string();
    command
        .args(["--port", &port_arg, "--bind", "127.0.0.1", "--save", ""])
        .args(["--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir)
        .args(options)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    spawn_and_wait(command, "redis", &dir.join("redis.log"), || {
        infra::redis_ping_at(port).is_ok()
    })
}

fn spawn_and_wait(
    mut command: Command,
    name: &str,
    log: &Path,
    ready: impl Fn() -> bool,
) -> Result<Child, String> {
    use std::os::unix::process::CommandExt;
    command.process_group(0);
    let mut child = command
        .spawn()
        .map_err(|error| format!("cannot start {name}: {error}"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "{name} exited during start-up ({status}); see {}",
                log.display()
            ));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(format!(
                "{name} did not start within 60s; see {}",
                log.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(child)
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Runs SQL through the `mysql` client as root on 127.0.0.1:3306.
pub fn mysql_exec(sql: &str) -> Result<(), String> {
    mysql_exec_at(3306, sql)
}

/// Runs SQL through the `mysql` client as root on 127.0.0.1:`port`.
pub fn mysql_exec_at(port: u16, sql: &str) -> Result<(), String> {
    let mut command = Command::new("mysql");
    command
        .args(["-uroot", "-h127.0.0.1"])
        .arg(format!("-P{port}"))
        .args(["-e", sql]);
    infra::run_checked(&mut command).map_err(|error| {
        if error.contains("cannot run") {
            format!("{error}: the `mysql` client is needed (`apt-get install mariadb-client`)")
        } else {
            error
        }
    })
}

/// Runs a query through the `mysql` client as root on 127.0.0.1:`port` and
/// returns its rows, tab-separated, without the header line.
pub fn mysql_query_at(port: u16, sql: &str) -> Result<String, String> {
    mysql_output(port, sql, true)
}

/// [`mysql_query_at`] with the column names as the first line.
pub fn mysql_query_with_header_at(port: u16, sql: &str) -> Result<String, String> {
    mysql_output(port, sql, false)
}

fn mysql_output(port: u16, sql: &str, skip_names: bool) -> Result<String, String> {
    let mut command = Command::new("mysql");
    command
        .args(["-uroot", "-h127.0.0.1", "-B", "--connect-timeout=5"])
        .arg(format!("-P{port}"));
    if skip_names {
        command.arg("-N");
    }
    let output = command
        .args(["-e", sql])
        .output()
        .map_err(|error| format!("cannot run mysql: {error}"))?;
    if !output.status.success() {
        return Err(format!(
            "mysql on {port}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
