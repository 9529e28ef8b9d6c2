//! Processes a test stops, resumes or kills as a fault: a private Redis
//! (plain TCP, nothing on disk) that a test may pause with SIGSTOP to
//! stall every client at once, and [`signal`] for any child process — a
//! room-service binary killed with -9 or paused mid-flight. The shared test
//! servers are never signalled: other tests run against them.

use crate::tls_servers::{ServerProcess, binary, free_port, fresh_dir};
use std::process::Command;

/// A private Redis on a free port of 127.0.0.1; dropping it kills the
/// server and removes its directory.
#[derive(Debug)]
pub struct PrivateRedis {
    /// TCP port on 127.0.0.1.
    pub port: u16,
    server: ServerProcess,
}

impl PrivateRedis {
    /// Starts the server.
    ///
    /// # Panics
    /// When `redis-server` is not installed or does not start.
    pub async fn start() -> Self {
        let dir = fresh_dir("hyapp-redis-");
        let port = free_port();
        let mut command = Command::new(binary("redis-server", "redis-server"));
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir);
        let server = ServerProcess::start(command, "redis-server", dir, port).await;
        Self { port, server }
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.server.pid()
    }
}

/// Sends `signal` (`STOP`, `CONT`, `KILL`, …) to process `pid` with the
/// system's `kill`.
///
/// # Panics
/// When `kill` fails (no such process): the fault the test relies on did
/// not happen.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .status()
        .unwrap_or_else(|error| panic!("cannot run kill: {error}"));
    assert!(status.success(), "kill -s {signal} {pid} failed: {status}");
}
