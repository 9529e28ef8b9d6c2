//! What the faults of `cargo xtask chaos` act on besides the service
//! processes: the private MariaDB and Redis ([`Backends`]), started on free
//! ports under the run's directory and crashed or restarted by the faults,
//! and the failure sets the fakes of other teams' systems (Tencent IM, the
//! wallet) are told to inject through their admin endpoints.
//!
//! The run (`chaos`) starts them and hands them to the fault schedule
//! (`faults`), which the run drives: owning them here, in a leaf that knows
//! neither, keeps `faults` from importing `chaos` back.

use crate::infra;
use crate::localdb;
use crate::proxy::Proxy;
use crate::replication;
use crate::sentinel::Sentinels;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Instant;

/// Private MariaDB and Redis the faults can stop and restart.
pub struct Backends {
    /// Port of the MariaDB primary (after a failover: the promoted server).
    pub mysql_port: u16,
    /// Redis port.
    pub redis_port: u16,
    mariadbd: PathBuf,
    redis_server: PathBuf,
    dir: PathBuf,
    /// The primary's data directory and the options it restarts with.
    mysql_dir: PathBuf,
    mysql_options: Vec<String>,
    mysql: Option<Child>,
    /// The replica, when the run replicates and no failover used it up.
    replica: Option<Replica>,
    redis: Option<Child>,
    /// Redis behind Sentinel instead of the single `redis` (see
    /// [`Backends::start_sentinels`]), and the port of its second node.
    sentinels: Option<Sentinels>,
    /// The port the second Redis node gets when Sentinel runs.
    pub redis_replica_port: Option<u16>,
}

/// The MariaDB replica of a replicated run.
struct Replica {
    port: u16,
    dir: PathBuf,
    options: Vec<String>,
    child: Child,
}

impl Backends {
    /// Starts both on free ports, their files under `dir`; with
    /// `replication`, MariaDB runs as a primary and a replica (see
    /// [`crate::replication`]).
    /// With `sentinel`, Redis is not started here but by
    /// [`Backends::start_sentinels`], once the proxies it announces exist.
    pub fn start(
        dir: &Path,
        replication: Option<replication::Mode>,
        sentinel: bool,
    ) -> Result<Self, String> {
        let missing = |name: &str| {
            format!(
                "`{name}` is needed for private instances (apt-get install mariadb-server redis-server)"
            )
        };
        let mariadbd = localdb::find_mariadbd().ok_or_else(|| missing("mariadbd"))?;
        let redis_server =
            localdb::find_binary("redis-server").ok_or_else(|| missing("redis-server"))?;
        let mysql_port = infra::free_port()?;
        let redis_port = infra::free_port()?;
        crate::step(&format!(
            "starting a private MariaDB on 127.0.0.1:{mysql_port} and Redis on {redis_port}"
        ));
        let mysql_dir = dir.join("mariadb");
        let mysql_options = replication
            .map(|mode| replication::server_options(mode, 1, true))
            .unwrap_or_default();
        let mysql = start_mariadb(&mariadbd, &mysql_dir, mysql_port, true, &mysql_options)?;
        let redis = if sentinel {
            None
        } else {
            Some(localdb::start_redis(
                &redis_server,
                &dir.join("redis"),
                redis_port,
            )?)
        };
        let redis_replica_port = if sentinel {
            Some(infra::free_port()?)
        } else {
            None
        };
        let mut backends = Self {
            mysql_port,
            redis_port,
            mariadbd,
            redis_server,
            dir: dir.to_path_buf(),
            mysql_dir,
            mysql_options,
            mysql: Some(mysql),
            replica: None,
            redis,
            sentinels: None,
            redis_replica_port,
        };
        if let Some(mode) = replication {
            backends.start_replica(mode)?;
        }
        Ok(backends)
    }

    /// Starts a fresh replica of the primary and waits until it follows.
    fn start_replica(&mut self, mode: replication::Mode) -> Result<(), String> {
        let port = infra::free_port()?;
        let dir = self.dir.join("mariadb-replica");
        let options = replication::server_options(mode, 2, false);
        crate::detail(&format!(
            "MariaDB replica on 127.0.0.1:{port} ({} replication, GTID)",
            mode.name()
        ));
        let child = start_mariadb(&self.mariadbd, &dir, port, true, &options)?;
        self.replica = Some(Replica {
            port,
            dir,
            options,
            child,
        });
        replication::attach(port, self.mysql_port)?;
        if mode == replication::Mode::SemiSync {
            // The primary waits for this replica from its first transaction.
            localdb::mysql_exec_at(self.mysql_port, "DO 1")?;
            if !replication::semi_sync_active(self.mysql_port)? {
                return Err("the primary is not in semi-synchronous mode".into());
            }
        }
        Ok(())
    }

    /// True while a replica is there to promote.
    pub fn has_replica(&self) -> bool {
        self.replica.is_some()
    }

    /// Holds the replica back (`replication::hold_back`) before a failover.
    pub fn hold_replica_back(&self) -> Result<(), String> {
        let replica = self.replica.as_ref().ok_or("no replica to hold back")?;
        replication::hold_back(replica.port)
    }

    /// SIGKILLs MariaDB (a crash; InnoDB recovers on restart).
    pub fn kill_mysql(&mut self) {
        kill(self.mysql.take());
    }

    /// Starts MariaDB again on its data directory.
    pub fn restart_mysql(&mut self) -> Result<(), String> {
        self.mysql = Some(start_mariadb(
            &self.mariadbd,
            &self.mysql_dir,
            self.mysql_port,
            false,
            &self.mysql_options,
        )?);
        Ok(())
    }

    /// The failover: SIGKILLs the primary, promotes the replica once it has
    /// applied all it received, and moves the stable address (`proxy`) to
    /// it. The killed primary stays down; the rest of the run uses the
    /// promoted server alone. Returns what happened, for the fault log.
    pub fn fail_over_mysql(&mut self, proxy: &Proxy) -> Result<String, String> {
        let replica = self.replica.take().ok_or("no replica to promote")?;
        let killed_at = Instant::now();
        kill(self.mysql.take());
        let position = replication::promote(replica.port)?;
        proxy.set_upstream(SocketAddr::from(([127, 0, 0, 1], replica.port)));
        let detail = format!(
            "primary {} killed, replica {} promoted at GTID {position} in {}ms; address moved",
            self.mysql_port,
            replica.port,
            killed_at.elapsed().as_millis()
        );
        self.mysql_port = replica.port;
        self.mysql_dir = replica.dir;
        self.mysql_options = replica.options;
        self.mysql = Some(replica.child);
        Ok(detail)
    }

    /// Starts Redis as a master and a replica behind three sentinels, each
    /// node announced as its proxy's port (`announced`: the master's, then
    /// the replica's).
    pub fn start_sentinels(&mut self, announced: [u16; 2]) -> Result<(), String> {
        let replica = self
            .redis_replica_port
            .ok_or("Sentinel needs the second node's port")?;
        self.sentinels = Some(Sentinels::start(
            &self.redis_server,
            &self.dir,
            [self.redis_port, replica],
            announced,
        )?);
        Ok(())
    }

    /// The URL the services use to find the Redis master through the
    /// sentinels, when Sentinel runs.
    pub fn sentinel_url(&self) -> Option<String> {
        self.sentinels.as_ref().map(Sentinels::url)
    }

    /// The Redis failover: the master SIGKILLed, the sentinels promote its
    /// replica. `Err` when Sentinel does not run.
    pub fn fail_over_redis(&mut self) -> Result<String, String> {
        self.sentinels
            .as_mut()
            .ok_or("Redis runs without Sentinel")?
            .fail_over()
    }

    /// SIGKILLs Redis and starts it again, empty (it runs without
    /// persistence); behind Sentinel, the master, back before the sentinels
    /// notice.
    pub fn restart_redis(&mut self) -> Result<(), String> {
        if let Some(sentinels) = &mut self.sentinels {
            return sentinels.restart_master();
        }
        kill(self.redis.take());
        self.redis = Some(localdb::start_redis(
            &self.redis_server,
            &self.dir.join("redis"),
            self.redis_port,
        )?);
        Ok(())
    }
}

fn start_mariadb(
    mariadbd: &Path,
    dir: &Path,
    port: u16,
    install: bool,
    options: &[String],
) -> Result<Child, String> {
    let options: Vec<&str> = options.iter().map(String::as_str).collect();
    localdb::start_mariadb_with(mariadbd, dir, port, install, &options)
}

fn kill(child: Option<Child>) {
    if let Some(mut child) = child {
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Backends {
    fn drop(&mut self) {
        kill(self.mysql.take());
        kill(self.replica.take().map(|replica| replica.child));
        drop(self.sentinels.take());
        kill(self.redis.take());
    }
}

/// The fake IM failure sets: `(description, JSON rules)`.
pub fn fake_im_failures(variant: u8) -> (&'static str, &'static str) {
    match variant % 4 {
        0 => (
            "next 40 calls answer HTTP 429",
            r#"[{"api":"*","http_status":429,"times":40}]"#,
        ),
        1 => (
            "next 40 calls answer HTTP 503",
            r#"[{"api":"*","http_status":503,"times":40}]"#,
        ),
        2 => (
            "next 40 calls answer ErrorCode 60007 (REST frequency limit)",
            r#"[{"api":"*","error_code":60007,"error_info":"REST API frequency limit","times":40}]"#,
        ),
        _ => (
            "next 40 calls take 1.5s",
            r#"[{"api":"*","latency_ms":1500,"times":40}]"#,
        ),
    }
}

/// The fake wallet failures: `(description, path, JSON body)`.
pub fn fake_wallet_failure(variant: u8) -> (&'static str, &'static str, &'static str) {
    match variant % 4 {
        0 => (
            "next 8 debits UNAVAILABLE",
            "/admin/faults",
            r#"{"method":"debit","count":8,"code":"unavailable"}"#,
        ),
        1 => (
            "next 8 debits applied but answered DEADLINE_EXCEEDED (lost replies)",
            "/admin/faults",
            r#"{"method":"debit","count":8,"code":"deadline_exceeded","after_apply":true}"#,
        ),
        2 => (
            "next 4 refunds INTERNAL",
            "/admin/faults",
            r#"{"method":"refund","count":4,"code":"internal"}"#,
        ),
        _ => (
            "every call takes 2.5s for 4s (past room-service's 2s timeout)",
            "/admin/latency",
            r#"{"millis":2500}"#,
        ),
    }
}

/// `METHOD` of a fake's admin endpoint; `Err` unless it answered 2xx.
pub fn admin_call(port: u16, method: &str, path: &str, body: &str) -> Result<(), String> {
    match crate::probe::http_request(port, method, path, Some(body)) {
        Some(status) if (200..300).contains(&status) => Ok(()),
        other => Err(format!(
            "{method} 127.0.0.1:{port}{path} answered {other:?}"
        )),
    }
}
