//! Private MariaDB and Redis servers that speak TLS with a [`TestPki`]'s
//! server certificate, for the tests of the clients' TLS settings. Each test
//! starts its own on a free port (the shared test servers stay plain), with
//! its data in a temporary directory; dropping the handle kills the server
//! and removes the directory.
//!
//! The MariaDB is set up like xtask's private one (`xtask/src/localdb.rs`:
//! `mariadb-install-db`, then `mariadbd --no-defaults`), but keeps the grant
//! tables: `require_secure_transport` is an account check, and
//! `--skip-grant-tables` would skip it.

use crate::pki::TestPki;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a private server may take to accept connections. It bounds the
/// wait; readiness itself is polled.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// A private MariaDB requiring TLS (`require_secure_transport=ON`) with the
/// PKI's server certificate; the account is `root` with no password.
#[derive(Debug)]
pub struct TlsMariaDb {
    /// TCP port on 127.0.0.1.
    pub port: u16,
    server: ServerProcess,
}

impl TlsMariaDb {
    /// Installs a fresh data directory and starts the server.
    ///
    /// # Panics
    /// When MariaDB is not installed or does not start: the test cannot run.
    pub async fn start(pki: &TestPki) -> Self {
        let dir = fresh_dir("hyapp-tls-mariadb-");
        let data = dir.join("data");
        // A private tmpdir: the install's bootstrap server creates and
        // deletes temporary tables there, and in the shared /tmp another
        // process's clean-up could remove them underneath it.
        let tmp = dir.join("tmp");
        std::fs::create_dir_all(&tmp).expect("create the MariaDB tmpdir");
        let mut install = Command::new(binary("mariadb-install-db", "mysql_install_db"));
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            // `normal`: root@localhost gets an empty password instead of
            // unix-socket authentication, so the test connects over TCP.
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
        if running_as_root() {
            install.arg("--user=root");
        }
        let output = install.output().expect("run mariadb-install-db");
        assert!(
            output.status.success(),
            "mariadb-install-db failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let port = free_port();
        let mut command = Command::new(binary("mariadbd", "mysqld"));
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .arg(format!("--socket={}", dir.join("mysqld.sock").display()))
            .arg(format!("--pid-file={}", dir.join("mysqld.pid").display()))
            .arg(format!("--port={port}"))
            // No --skip-name-resolve: MariaDB then sees a loopback client as
            // `localhost`, so the installed root@localhost account matches TCP.
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--ssl-cert={}", pki.server_cert.display()))
            .arg(format!("--ssl-key={}", pki.server_key.display()))
            .arg(format!("--ssl-ca={}", pki.ca.display()))
            .arg("--require-secure-transport=ON")
            // A small footprint: tests start several of these on a small machine.
            .args(["--innodb-buffer-pool-size=16M", "--skip-log-bin"]);
        if running_as_root() {
            command.arg("--user=root");
        }
        let server = ServerProcess::start(command, "mariadbd", dir, port).await;
        Self { port, server }
    }

    /// `mysql://root@<host>:<port>/mysql`; `host` is `127.0.0.1` or
    /// `localhost` (both are in a certificate from
    /// `TestPki::generate(&["localhost", "127.0.0.1"])`).
    pub fn url(&self, host: &str) -> String {
        format!("mysql://root@{host}:{}/mysql", self.port)
    }

    /// Where the server logs (for a failing test's message).
    pub fn log(&self) -> PathBuf {
        self.server.log()
    }
}

/// A private Redis that listens on TLS only (`--port 0`), with the PKI's
/// server certificate and no client certificate required.
#[derive(Debug)]
pub struct TlsRedis {
    /// TLS port on 127.0.0.1.
    pub port: u16,
    server: ServerProcess,
}

impl TlsRedis {
    /// Starts the server.
    ///
    /// # Panics
    /// When `redis-server` is not installed, was built without TLS, or does
    /// not start: the test cannot run.
    pub async fn start(pki: &TestPki) -> Self {
        let dir = fresh_dir("hyapp-tls-redis-");
        let port = free_port();
        let mut command = Command::new(binary("redis-server", "redis-server"));
        command
            .args(["--port", "0", "--tls-port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--tls-cert-file")
            .arg(&pki.server_cert)
            .arg("--tls-key-file")
            .arg(&pki.server_key)
            .arg("--tls-ca-cert-file")
            .arg(&pki.ca)
            .args(["--tls-auth-clients", "no"])
            .arg("--dir")
            .arg(&dir);
        let server = ServerProcess::start(command, "redis-server", dir, port).await;
        Self { port, server }
    }

    /// `rediss://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }

    /// Where the server logs (for a failing test's message).
    pub fn log(&self) -> PathBuf {
        self.server.log()
    }
}

/// A started server process, killed (and its directory removed) on drop.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    child: Child,
    dir: PathBuf,
}

impl ServerProcess {
    /// Spawns `command` logging to `dir/server.log` and waits until `port`
    /// accepts TCP connections (the TLS handshake is the tests' business).
    pub(crate) async fn start(mut command: Command, name: &str, dir: PathBuf, port: u16) -> Self {
        let log = std::fs::File::create(dir.join("server.log")).expect("create server log");
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {name}: {error}"));
        let mut server = Self { child, dir };
        let deadline = Instant::now() + START_DEADLINE;
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!(
                    "{name} exited during start-up ({status}): {}",
                    std::fs::read_to_string(server.log()).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{name} did not listen on {port} within {START_DEADLINE:?}; see {}",
                server.log().display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server
    }

    pub(crate) fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// The server's process id (to pause it with [`crate::processes::signal`]).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(crate) fn fresh_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(crate::unique(prefix));
    std::fs::create_dir_all(&dir).expect("create server dir");
    dir
}

/// A port nothing listened on a moment ago (the usual bind-to-0 probe; the
/// server binds it right after).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("probe a free port")
        .port()
}

/// `name` (or its older `alternative`) in PATH or the sbin directories,
/// where Debian installs the servers.
pub(crate) fn binary(name: &str, alternative: &str) -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    [name, alternative]
        .iter()
        .flat_map(|binary| {
            path.split(':')
                .chain(["/usr/sbin", "/usr/local/sbin", "/usr/bin"])
                .map(move |dir| Path::new(dir).join(binary))
        })
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| panic!("`{name}` is not installed"))
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).trim() == "0")
        .unwrap_or(false)
}
