//! A private Redis primary with one replica and three sentinels watching it
//! (quorum 2, the primary judged down after 1 s), each a `redis-server` on a
//! free port of 127.0.0.1 with its files in a directory of its own, for the
//! tests of Sentinel failover. A test kills the primary with -9
//! ([`SentinelRedis::kill_primary`]) and waits until the sentinels have
//! promoted the replica ([`SentinelRedis::await_failover`]) — by polling
//! what the sentinels answer, never by sleeping a guessed time. The shared
//! test Redis is never touched. Dropping the handle kills every process.
//!
//! Every poll is one command on a fresh connection, bounded by
//! [`COMMAND_DEADLINE`] (no `redis-cli`, whose read has no deadline), and
//! every wait by [`SETTLE_DEADLINE`], so a server that stops answering
//! fails the test with what was asked last instead of hanging it.
//!
//! The replica accepts writes of its own (`replica-read-only no`), so a test
//! can make it lack what the primary has ([`SentinelRedis::on_replica_only`])
//! — what a crash does to the writes not yet copied when replication is
//! asynchronous, which on loopback (every write copied within microseconds)
//! cannot be provoked on demand. The replica's other data still comes from
//! the primary.
//!
//! A test's own client of the replica must reconnect and time out: the
//! promotion ends with the sentinel's `CLIENT KILL TYPE normal` on the
//! promoted server, which closes every client connection there so clients
//! ask the sentinels again.

use crate::processes::signal;
use crate::tls_servers::{ServerProcess, binary, free_port, fresh_dir};
use std::process::Command;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// The name the sentinels monitor the primary under
/// (`?sentinelServiceName=` of the URL).
pub const SERVICE_NAME: &str = "hyapp";

/// Bounds the waits for the set-up to settle and for a failover; the
/// sentinels decide when, this only turns a hang into a failure.
const SETTLE_DEADLINE: Duration = Duration::from_secs(60);

/// Bounds one poll: connecting, sending and reading the whole reply.
const COMMAND_DEADLINE: Duration = Duration::from_secs(2);

/// A primary, its replica and three sentinels; killed on drop.
#[derive(Debug)]
pub struct SentinelRedis {
    /// Port of the server that was primary at start.
    pub primary_port: u16,
    /// Port of the replica (the primary after a failover).
    pub replica_port: u16,
    /// Ports of the three sentinels.
    pub sentinel_ports: Vec<u16>,
    primary: Option<ServerProcess>,
    replica: ServerProcess,
    sentinels: Vec<ServerProcess>,
}

impl SentinelRedis {
    /// Starts the five processes and waits until the replica is in sync
    /// and every sentinel knows the replica and the two other sentinels —
    /// what a failover needs.
    ///
    /// # Panics
    /// When `redis-server` is not installed, a process does not start, or
    /// the set-up does not settle within a minute.
    pub async fn start() -> Self {
        let primary_port = free_port();
        let primary = data_server(primary_port, None).await;
        let replica_port = free_port();
        let replica = data_server(replica_port, Some(primary_port)).await;
        let mut sentinels = Vec::new();
        let mut sentinel_ports = Vec::new();
        for _ in 0..3 {
            let port = free_port();
            sentinels.push(sentinel(port, primary_port).await);
            sentinel_ports.push(port);
        }
        let redis = Self {
            primary_port,
            replica_port,
            sentinel_ports,
            primary: Some(primary),
            replica,
            sentinels,
        };
        redis.await_settled().await;
        redis
    }

    /// `redis-sentinel://127.0.0.1:<s1>/0?sentinelServiceName=hyapp&node=…`
    /// naming all three sentinels.
    pub fn url(&self) -> String {
        let mut url = format!(
            "redis-sentinel://127.0.0.1:{}/0?sentinelServiceName={SERVICE_NAME}",
            self.sentinel_ports[0]
        );
        for port in &self.sentinel_ports[1..] {
            url.push_str(&format!("&node=127.0.0.1:{port}"));
        }
        url
    }

    /// `redis://127.0.0.1:<port>` of the replica, to read it directly.
    pub fn replica_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.replica_port)
    }

    /// Runs one command on the replica alone (not through the primary):
    /// a `DEL` or `ZREM` there makes the promoted server lack what the
    /// crashed primary held, as a write lost with asynchronous replication
    /// would. The reply's values, one a line.
    ///
    /// # Panics
    /// When the replica refuses or does not answer.
    pub async fn on_replica_only(&self, args: &[&str]) -> Vec<String> {
        match tokio::time::timeout(COMMAND_DEADLINE, command(self.replica_port, args)).await {
            Ok(Ok(values)) => values,
            Ok(Err(error)) => panic!("{args:?} on the replica: {error}"),
            Err(_) => panic!("{args:?} on the replica: no reply within {COMMAND_DEADLINE:?}"),
        }
    }

    /// Kills the primary with -9 (a crash: no shutdown, no final sync).
    ///
    /// # Panics
    /// When it was killed already.
    pub fn kill_primary(&mut self) {
        let primary = self.primary.take().expect("the primary runs");
        signal(primary.pid(), "KILL");
        drop(primary);
    }

    /// Waits until a majority of the sentinels name the replica as the
    /// primary and the replica says it is one.
    ///
    /// # Panics
    /// When that does not happen within a minute, with what the sentinels
    /// answered last.
    pub async fn await_failover(&self) {
        let promoted = self.replica_port.to_string();
        let deadline = Instant::now() + SETTLE_DEADLINE;
        loop {
            let mut answers = Vec::new();
            for port in &self.sentinel_ports {
                answers.push(
                    ask(
                        *port,
                        &["SENTINEL", "get-master-addr-by-name", SERVICE_NAME],
                    )
                    .await,
                );
            }
            let named = answers
                .iter()
                .filter(|answer| answer.lines().nth(1) == Some(promoted.as_str()))
                .count();
            let role = ask(self.replica_port, &["ROLE"]).await;
            if named >= 2 && role.lines().next() == Some("master") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no failover to port {promoted} within {SETTLE_DEADLINE:?}: sentinels answered \
                 {answers:?}, the replica's ROLE {role:?}; logs {:?}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The replica's and the sentinels' log files, for a failure message.
    fn logs(&self) -> Vec<std::path::PathBuf> {
        std::iter::once(&self.replica)
            .chain(&self.sentinels)
            .map(ServerProcess::log)
            .collect()
    }

    async fn await_settled(&self) {
        let deadline = Instant::now() + SETTLE_DEADLINE;
        loop {
            let synced = ask(self.replica_port, &["INFO", "replication"])
                .await
                .contains("master_link_status:up");
            let mut known: Vec<(usize, usize)> = Vec::new();
            for port in &self.sentinel_ports {
                let replicas = ask(*port, &["SENTINEL", "replicas", SERVICE_NAME]).await;
                let sentinels = ask(*port, &["SENTINEL", "sentinels", SERVICE_NAME]).await;
                known.push((
                    replicas.lines().filter(|line| *line == "ip").count(),
                    sentinels.lines().filter(|line| *line == "ip").count(),
                ));
            }
            if synced
                && known
                    .iter()
                    .all(|&(replicas, others)| replicas == 1 && others == 2)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the sentinel set-up did not settle within {SETTLE_DEADLINE:?}: replica in sync \
                 {synced}, (replicas, other sentinels) known per sentinel {known:?}; logs {:?}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A primary (`replica_of` none) or a replica of the server on that port.
/// Started from a config file of its own, so the sentinels' CONFIG
/// REWRITE at a failover has a file to write.
async fn data_server(port: u16, replica_of: Option<u16>) -> ServerProcess {
    let dir = fresh_dir("hyapp-sentinel-data-");
    let config = dir.join("redis.conf");
    std::fs::write(&config, "").expect("write redis.conf");
    let mut command = Command::new(binary("redis-server", "redis-server"));
    command
        .arg(&config)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(&dir);
    if let Some(primary) = replica_of {
        command.args(["--replicaof", "127.0.0.1", &primary.to_string()]);
        command.args(["--replica-read-only", "no"]);
    }
    ServerProcess::start(command, "redis-server", dir, port).await
}

/// A sentinel on `port` monitoring the primary on `primary_port`: quorum 2,
/// down after 1 s without an answer, one failover attempt per 10 s.
async fn sentinel(port: u16, primary_port: u16) -> ServerProcess {
    let dir = fresh_dir("hyapp-sentinel-");
    let config = dir.join("sentinel.conf");
    let text = format!(
        "port {port}\nbind 127.0.0.1\ndir {dir}\n\
         sentinel monitor {SERVICE_NAME} 127.0.0.1 {primary_port} 2\n\
         sentinel down-after-milliseconds {SERVICE_NAME} 1000\n\
         sentinel failover-timeout {SERVICE_NAME} 10000\n\
         sentinel parallel-syncs {SERVICE_NAME} 1\n",
        dir = dir.display()
    );
    std::fs::write(&config, text).expect("write sentinel.conf");
    let mut command = Command::new(binary("redis-server", "redis-server"));
    command.arg(&config).arg("--sentinel");
    ServerProcess::start(command, "redis-sentinel", dir, port).await
}

/// `args` sent to the server on `port`, the reply's values one a line
/// (nested arrays flattened, a nil as an empty line), as `redis-cli` would
/// print them; the error or the missing answer as one line starting with
/// `(error)`, so a poll tries again and a failure message shows it.
async fn ask(port: u16, args: &[&str]) -> String {
    match tokio::time::timeout(COMMAND_DEADLINE, command(port, args)).await {
        Ok(Ok(values)) => values.join("\n"),
        Ok(Err(error)) => format!("(error) {error}"),
        Err(_) => format!("(error) no reply within {COMMAND_DEADLINE:?}"),
    }
}

/// One RESP exchange on a fresh connection: the reply's simple strings,
/// integers and bulk strings in order, however deeply nested.
async fn command(port: u16, args: &[&str]) -> Result<Vec<String>, String> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|error| format!("127.0.0.1:{port}: {error}"))?;
    let mut stream = BufReader::new(stream);
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream
        .get_mut()
        .write_all(request.as_bytes())
        .await
        .map_err(|error| error.to_string())?;
    let mut values = Vec::new();
    // Values still to read: an array's header adds its elements.
    let mut pending = 1_usize;
    while pending > 0 {
        pending -= 1;
        let mut line = String::new();
        if stream
            .read_line(&mut line)
            .await
            .map_err(|error| error.to_string())?
            == 0
        {
            return Err("the connection closed mid-reply".into());
        }
        let line = line.trim_end();
        let (kind, rest) = line.split_at_checked(1).unwrap_or(("", ""));
        match kind {
            "+" | ":" => values.push(rest.to_owned()),
            "-" => return Err(rest.to_owned()),
            "*" => pending += rest.parse::<usize>().unwrap_or(0), // `*-1`: nil
            "$" => match rest.parse::<usize>() {
                Ok(length) => {
                    let mut bulk = vec![0; length + 2];
                    stream
                        .read_exact(&mut bulk)
                        .await
                        .map_err(|error| error.to_string())?;
                    bulk.truncate(length);
                    values.push(String::from_utf8_lossy(&bulk).into_owned());
                }
                Err(_) => values.push(String::new()), // `$-1`: nil
            },
            _ => return Err(format!("unexpected reply line {line:?}")),
        }
    }
    Ok(values)
}
