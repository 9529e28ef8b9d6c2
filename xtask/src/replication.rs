//! MariaDB replication for the reliability run's failover fault: a primary
//! and a replica with GTID, in one of two modes ([`Mode`]), and the
//! promotion of the replica after the primary was killed.
//!
//! **Lossless semi-synchronous** (the default, docs/reliability.md): the
//! primary writes a transaction to its binlog, waits until the replica has
//! it in its relay log (`rpl_semi_sync_master_wait_point=AFTER_SYNC`) and
//! only then commits it in InnoDB and answers the client. Whatever a client
//! was told is committed is on the replica, so promoting it loses no
//! acknowledged command. The timeout before the primary gives up waiting
//! and silently degrades to asynchronous is set far beyond any fault of the
//! run, so the run never measures the degraded mode by accident.
//!
//! **Asynchronous** (`--mysql-replication async`): the primary answers as
//! soon as it committed; the replica follows when it can. Kept to show
//! what a failover loses without the lossless mode.
//!
//! The failover fault first holds the replica back ([`hold_back`]) for a
//! moment, so the window the two modes differ in is there to be measured
//! on loopback too (there, a replica otherwise receives each transaction
//! within a fraction of a millisecond and asynchronous replication would
//! look lossless).
//!
//! Promotion waits until the replica has applied everything it received
//! (`MASTER_GTID_WAIT` on its IO position), then stops replication for good
//! and opens the server for writes; the harness then moves the stable
//! address (`crate::network`) to it. The old primary does not come back:
//! the rest of the run uses the promoted server alone (see
//! `crate::backends::Backends::fail_over_mysql`).

use crate::localdb;
use std::time::{Duration, Instant};

/// How the replica follows the primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Lossless semi-synchronous (`AFTER_SYNC`).
    SemiSync,
    /// Plain asynchronous.
    Async,
}

impl Mode {
    /// `semi-sync` or `async`, as `--mysql-replication` spells it.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "semi-sync" => Ok(Mode::SemiSync),
            "async" => Ok(Mode::Async),
            other => Err(format!(
                "--mysql-replication: `{other}` is neither `semi-sync` nor `async`"
            )),
        }
    }

    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Mode::SemiSync => "semi-sync",
            Mode::Async => "async",
        }
    }
}

/// How long a semi-synchronous primary waits for the replica's
/// acknowledgement before it degrades to asynchronous: longer than any
/// fault of the run, so it never degrades silently during one.
const SEMI_SYNC_TIMEOUT_MS: u64 = 600_000;

/// Server options of a member of the pair: binlog and GTID on both (either
/// may become the primary); semi-sync waiting on the primary, semi-sync
/// acknowledgement on the replica.
pub fn server_options(mode: Mode, server_id: u32, primary: bool) -> Vec<String> {
    let mut options = vec![
        format!("--server-id={server_id}"),
        "--log-bin=mariadb-bin".to_string(),
        "--binlog-format=ROW".to_string(),
        "--log-slave-updates=ON".to_string(),
    ];
    if mode == Mode::SemiSync {
        options.push("--rpl-semi-sync-slave-enabled=ON".to_string());
        if primary {
            options.extend([
                "--rpl-semi-sync-master-enabled=ON".to_string(),
                "--rpl-semi-sync-master-wait-point=AFTER_SYNC".to_string(),
                format!("--rpl-semi-sync-master-timeout={SEMI_SYNC_TIMEOUT_MS}"),
            ]);
        }
    }
    options
}

/// Makes the server on `replica_port` replicate from `primary_port` with
/// GTID, reconnecting every second while the primary is away.
pub fn attach(replica_port: u16, primary_port: u16) -> Result<(), String> {
    // The port is a number: nothing else reaches the statement text.
    localdb::mysql_exec_at(
        replica_port,
        &format!(
            "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary_port}, \
             MASTER_USER='root', MASTER_CONNECT_RETRY=1, MASTER_USE_GTID=slave_pos; \
             START SLAVE;"
        ),
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = slave_status(replica_port)?;
        if status.get("Slave_IO_Running").map(String::as_str) == Some("Yes") {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the replica on {replica_port} did not connect to {primary_port}: {}",
                status.get("Last_IO_Error").cloned().unwrap_or_default()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// True when the primary on `port` waits for a replica's acknowledgement
/// now (`Rpl_semi_sync_master_status` ON): it has not degraded.
pub fn semi_sync_active(port: u16) -> Result<bool, String> {
    let out = localdb::mysql_query_at(
        port,
        "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_status'",
    )?;
    Ok(out.split_whitespace().last() == Some("ON"))
}

/// Stops the replica on `port` fetching from its primary (its IO thread),
/// as a replica cut off or lagging in another zone: from now on it falls
/// behind. A semi-synchronous primary then holds every commit unanswered
/// (nothing reaches the replica to acknowledge it); an asynchronous one
/// answers commits the replica will never have.
pub fn hold_back(port: u16) -> Result<(), String> {
    localdb::mysql_exec_at(port, "STOP SLAVE IO_THREAD;")
}

/// Promotes the replica on `port` once its primary is gone: applies every
/// transaction it received, stops replicating for good, and reports the
/// GTID position it stands at.
pub fn promote(port: u16) -> Result<String, String> {
    let received = slave_status(port)?
        .get("Gtid_IO_Pos")
        .cloned()
        .unwrap_or_default();
    if received
        .chars()
        .any(|c| !(c.is_ascii_digit() || c == '-' || c == ','))
    {
        return Err(format!("unexpected Gtid_IO_Pos {received:?} on {port}"));
    }
    if !received.is_empty() {
        // Checked above to be digits, dashes and commas only.
        let waited =
            localdb::mysql_query_at(port, &format!("SELECT MASTER_GTID_WAIT('{received}', 60)"))?;
        if waited.trim() != "0" {
            return Err(format!(
                "the replica on {port} did not apply {received} within 60s"
            ));
        }
    }
    localdb::mysql_exec_at(
        port,
        "STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = 0;",
    )?;
    Ok(received)
}

/// `SHOW SLAVE STATUS` of the server on `port` as field → value.
fn slave_status(port: u16) -> Result<std::collections::HashMap<String, String>, String> {
    let out = localdb::mysql_query_with_header_at(port, "SHOW SLAVE STATUS")?;
    let mut lines = out.lines();
    let (Some(header), Some(row)) = (lines.next(), lines.next()) else {
        return Ok(Default::default());
    };
    Ok(header
        .split('\t')
        .zip(row.split('\t'))
        .map(|(field, value)| (field.to_string(), value.to_string()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lossless_mode_waits_after_sync_and_async_waits_for_nothing() {
        let primary = server_options(Mode::SemiSync, 1, true);
        assert!(primary.contains(&"--rpl-semi-sync-master-wait-point=AFTER_SYNC".to_string()));
        assert!(primary.contains(&"--rpl-semi-sync-master-enabled=ON".to_string()));
        let replica = server_options(Mode::SemiSync, 2, false);
        assert!(!replica.iter().any(|o| o.contains("master-enabled")));
        assert!(replica.contains(&"--rpl-semi-sync-slave-enabled=ON".to_string()));
        let plain = server_options(Mode::Async, 1, true);
        assert!(!plain.iter().any(|o| o.contains("semi-sync")), "{plain:?}");
        assert_eq!(Mode::parse("async").unwrap(), Mode::Async);
        assert!(Mode::parse("sync").unwrap_err().contains("sync"));
    }
}
