//! The private MariaDB and Redis of `cargo xtask chaos` ([`Backends`]):
//! started on free ports under the run's directory, and stopped, crashed or
//! restarted by the faults.
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
        let mariadbd = localdb::find_binary("mariadbd")
            .or_else(|| localdb::find_binary("mysqld"))
            .ok_or_else(|| missing("mariadbd"))?;
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
