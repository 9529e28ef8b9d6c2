//! Redis behind Sentinel for the reliability run's Redis failover fault: a
//! master and a replica (no persistence, like the single Redis of the
//! other runs) watched by three sentinels, and the failover itself —
//! SIGKILL the master, wait until the sentinels announce the promoted
//! replica, bring the killed node back empty as the new master's replica.
//!
//! The services find the master through the sentinels
//! (`redis-sentinel://…?sentinelServiceName=chaos`, see
//! `service_kit::redis`). Each data node announces the port of its own
//! proxy (`crate::network`), so the services and the sentinels reach the
//! nodes through the proxies and the run's network faults reach Redis too.
//! A Redis network fault longer than [`DOWN_AFTER_MS`] makes the sentinels
//! fail over on their own, as a partition does in production.

use crate::localdb;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The master's name at the sentinels.
pub const SERVICE: &str = "chaos";

/// How long a sentinel waits for a master's answer before it thinks it
/// down: longer than any network fault the schedule holds (5 s), so only
/// a kill makes them fail over.
const DOWN_AFTER_MS: u64 = 5_000;

/// One Redis data node: its own port and the port it is announced under.
#[derive(Debug)]
struct Node {
    port: u16,
    announced: u16,
    dir: PathBuf,
    child: Option<Child>,
}

/// Two data nodes and three sentinels.
#[derive(Debug)]
pub struct Sentinels {
    redis_server: PathBuf,
    nodes: [Node; 2],
    sentinels: Vec<(u16, Child)>,
}

impl Sentinels {
    /// Starts the master on `ports[0]` (announced as `announced[0]`), its
    /// replica on `ports[1]` and three sentinels on free ports, under `dir`.
    pub fn start(
        redis_server: &Path,
        dir: &Path,
        ports: [u16; 2],
        announced: [u16; 2],
    ) -> Result<Self, String> {
        let node = |i: usize| Node {
            port: ports[i],
            announced: announced[i],
            dir: dir.join(format!("redis-{}", i + 1)),
            child: None,
        };
        let mut sentinels = Self {
            redis_server: redis_server.to_path_buf(),
            nodes: [node(0), node(1)],
            sentinels: Vec::new(),
        };
        sentinels.start_node(0, None)?;
        sentinels.start_node(1, Some(announced[0]))?;
        for i in 1..=3 {
            let port = crate::infra::free_port()?;
            let child = start_sentinel(
                redis_server,
                &dir.join(format!("sentinel-{i}")),
                port,
                announced[0],
            )?;
            sentinels.sentinels.push((port, child));
        }
        crate::detail(&format!(
            "Redis master {} and replica {} behind sentinels {}",
            ports[0],
            ports[1],
            sentinels.ports().join(",")
        ));
        Ok(sentinels)
    }

    /// The sentinels' `127.0.0.1:port`s.
    fn ports(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|(port, _)| format!("127.0.0.1:{port}"))
            .collect()
    }

    /// The URL the services use: every sentinel, the master's name.
    pub fn url(&self) -> String {
        let ports = self.ports();
        let nodes: String = ports[1..]
            .iter()
            .map(|node| format!("&node={node}"))
            .collect();
        format!(
            "redis-sentinel://{}?sentinelServiceName={SERVICE}{nodes}",
            ports[0]
        )
    }

    /// Starts data node `i` empty, as a replica of the node announced on
    /// `master` when given.
    fn start_node(&mut self, i: usize, master: Option<u16>) -> Result<(), String> {
        let node = &self.nodes[i];
        let mut extra = vec![
            "--replica-announce-ip".to_string(),
            "127.0.0.1".to_string(),
            "--replica-announce-port".to_string(),
            node.announced.to_string(),
        ];
        if let Some(master) = master {
            extra.extend(["--replicaof".into(), "127.0.0.1".into(), master.to_string()]);
        }
        let child = localdb::start_redis_with(&self.redis_server, &node.dir, node.port, &extra)?;
        self.nodes[i].child = Some(child);
        Ok(())
    }

    /// The announced port of the master the sentinels name now.
    pub fn master(&self) -> Result<u16, String> {
        let mut last = String::new();
        for (port, _) in &self.sentinels {
            match command(*port, &["SENTINEL", "get-master-addr-by-name", SERVICE]) {
                Ok(reply) if reply.len() == 2 => {
                    return reply[1]
                        .parse()
                        .map_err(|_| format!("sentinel {port}: bad port {:?}", reply[1]));
                }
                Ok(reply) => last = format!("sentinel {port}: {reply:?}"),
                Err(error) => last = error,
            }
        }
        Err(format!("no sentinel names the master: {last}"))
    }

    fn node_announced_as(&self, announced: u16) -> Result<usize, String> {
        self.nodes
            .iter()
            .position(|node| node.announced == announced)
            .ok_or_else(|| format!("the sentinels name an unknown master on {announced}"))
    }

    /// SIGKILLs the master, waits until the sentinels promote the replica,
    /// then starts the killed node again, empty, as the new master's
    /// replica. Returns what happened.
    pub fn fail_over(&mut self) -> Result<String, String> {
        let before = self.master()?;
        let killed = self.node_announced_as(before)?;
        let began = Instant::now();
        kill(self.nodes[killed].child.take());
        let deadline = began + Duration::from_secs(60);
        let after = loop {
            match self.master() {
                Ok(now) if now != before => break now,
                _ if Instant::now() > deadline => {
                    return Err("the sentinels did not promote the replica within 60s".into());
                }
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        let promoted_in = began.elapsed();
        self.start_node(killed, Some(after))?;
        Ok(format!(
            "master {} killed, sentinels promoted {} in {}ms; old master back as replica",
            self.nodes[killed].port,
            self.nodes[1 - killed].port,
            promoted_in.as_millis()
        ))
    }

    /// SIGKILLs the master and starts it again at once, empty, as master:
    /// faster than the sentinels notice, so its replica resynchronises from
    /// nothing and every key is gone, as with a single Redis restarted.
    pub fn restart_master(&mut self) -> Result<(), String> {
        let master = self.node_announced_as(self.master()?)?;
        kill(self.nodes[master].child.take());
        self.start_node(master, None)
    }
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        for (_, mut child) in self.sentinels.drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
        for node in &mut self.nodes {
            kill(node.child.take());
        }
    }
}

fn kill(child: Option<Child>) {
    if let Some(mut child) = child {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Starts a sentinel on `port` watching the master announced on `master`;
/// its config file (which it rewrites) lives under `dir`.
fn start_sentinel(
    redis_server: &Path,
    dir: &Path,
    port: u16,
    master: u16,
) -> Result<Child, String> {
    std::fs::create_dir_all(dir).map_err(|error| format!("create {}: {error}", dir.display()))?;
    let config = dir.join("sentinel.conf");
    let text = format!(
        "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {}\n\
         sentinel monitor {SERVICE} 127.0.0.1 {master} 2\n\
         sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n\
         sentinel failover-timeout {SERVICE} 10000\n\
         sentinel parallel-syncs {SERVICE} 1\n",
        dir.display()
    );
    std::fs::write(&config, text)
        .map_err(|error| format!("write {}: {error}", config.display()))?;
    let log = std::fs::File::create(dir.join("sentinel.log")).map_err(|error| error.to_string())?;
    let log_err = log.try_clone().map_err(|error| error.to_string())?;
    let mut child = Command::new(redis_server)
        .arg(&config)
        .arg("--sentinel")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .map_err(|error| format!("cannot start a sentinel: {error}"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while command(port, &["PING"]).is_err() {
        if Instant::now() > deadline || matches!(child.try_wait(), Ok(Some(_))) {
            let _ = child.kill();
            return Err(format!(
                "the sentinel on {port} did not start; see {}",
                dir.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(child)
}

/// Sends one command to the Redis (or sentinel) on `port`; the reply's
/// strings (a status, a bulk string, or an array of bulk strings).
fn command(port: u16, args: &[&str]) -> Result<Vec<String>, String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|error| format!("{addr}: {error}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|error| error.to_string())?;
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream
        .write_all(request.as_bytes())
        .map_err(|error| format!("{addr}: {error}"))?;
    let mut reader = BufReader::new(stream);
    let mut line = || -> Result<String, String> {
        let mut text = String::new();
        reader
            .read_line(&mut text)
            .map_err(|error| format!("{addr}: {error}"))?;
        Ok(text.trim_end().to_string())
    };
    let head = line()?;
    match head.split_at_checked(1) {
        Some(("+" | ":", rest)) => Ok(vec![rest.to_string()]),
        Some(("-", rest)) => Err(format!("{addr}: {rest}")),
        Some(("$", "-1")) | Some(("*", "-1")) => Ok(Vec::new()),
        Some(("$", _)) => Ok(vec![line()?]),
        Some(("*", count)) => {
            let count: usize = count.parse().map_err(|_| format!("{addr}: {head:?}"))?;
            let mut items = Vec::new();
            for _ in 0..count {
                let _length = line()?;
                items.push(line()?);
            }
            Ok(items)
        }
        _ => Err(format!("{addr}: unexpected reply {head:?}")),
    }
}
