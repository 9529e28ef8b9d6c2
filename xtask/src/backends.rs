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
use std::path::{Path, PathBuf};
use std::process::Child;

/// Private MariaDB and Redis the faults can stop and restart.
pub struct Backends {
    /// MariaDB port.
    pub mysql_port: u16,
    /// Redis port.
    pub redis_port: u16,
    mariadbd: PathBuf,
    redis_server: PathBuf,
    dir: PathBuf,
    mysql: Option<Child>,
    redis: Option<Child>,
}

impl Backends {
    /// Starts both on free ports, their files under `dir`.
    pub fn start(dir: &Path) -> Result<Self, String> {
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
        let mysql = localdb::start_mariadb(&mariadbd, &dir.join("mariadb"), mysql_port, true)?;
        let redis = localdb::start_redis(&redis_server, &dir.join("redis"), redis_port)?;
        Ok(Self {
            mysql_port,
            redis_port,
            mariadbd,
            redis_server,
            dir: dir.to_path_buf(),
            mysql: Some(mysql),
            redis: Some(redis),
        })
    }

    /// SIGKILLs MariaDB (a crash; InnoDB recovers on restart).
    pub fn kill_mysql(&mut self) {
        kill(self.mysql.take());
    }

    /// Starts MariaDB again on its data directory.
    pub fn restart_mysql(&mut self) -> Result<(), String> {
        self.mysql = Some(localdb::start_mariadb(
            &self.mariadbd,
            &self.dir.join("mariadb"),
            self.mysql_port,
            false,
        )?);
        Ok(())
    }

    /// SIGKILLs Redis and starts it again, empty (it runs without persistence).
    pub fn restart_redis(&mut self) -> Result<(), String> {
        kill(self.redis.take());
        self.redis = Some(localdb::start_redis(
            &self.redis_server,
            &self.dir.join("redis"),
            self.redis_port,
        )?);
        Ok(())
    }
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
