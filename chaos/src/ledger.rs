//! What the workload did and what the fault schedule did, as files the
//! checker reads: one JSON object per line for commands (`commands.jsonl`),
//! and tab-separated lines for faults (`faults.tsv`, written by xtask, which
//! stays std-only). Both carry Unix-epoch milliseconds, so the checker can
//! lay commands and faults on one timeline (the workload and the fault
//! schedule are separate processes on one machine).

use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::Path;

/// How a command ended, as the client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// room-service answered with a reply: the command is committed.
    Acked,
    /// room-service refused it with a business error: nothing may be written.
    Rejected,
    /// No definite answer within the retry budget: either fully written or not at all.
    Unknown,
}

/// One command of the workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandRecord {
    /// The idempotency key sent (same on every retry).
    pub command_id: String,
    /// Target room.
    pub room_id: String,
    /// `create`, `join`, `leave`, `take_mic`, `leave_mic`, `gift`, `kick`.
    pub kind: String,
    /// Final outcome.
    pub outcome: Outcome,
    /// gRPC code and message of the last failure, empty when acked.
    pub detail: String,
    /// Calls made (1 + retries).
    pub attempts: u32,
    /// `count × unit_value` of a gift, else 0.
    pub gift_value: u64,
    /// Event ids of the reply (acked only).
    pub event_ids: Vec<String>,
    /// The room-service instance each call went to, in order (one per attempt).
    #[serde(default)]
    pub sent_to: Vec<String>,
    /// The instance that executed the final answer (its `x-room-served-by`
    /// header); empty when the answer carried none (a transport failure).
    #[serde(default)]
    pub served_by: String,
    /// The room version in the reply (acked only, else 0): the version the
    /// command's log row must have.
    #[serde(default)]
    pub reply_version: u64,
    /// Unix ms when the first call was sent (0 in ledgers written before
    /// timestamps were recorded).
    #[serde(default)]
    pub started_ms: u64,
    /// Unix ms when the final answer arrived, or the retry budget ran out.
    #[serde(default)]
    pub answered_ms: u64,
    /// Retries that waited the delay of the refusal's `google.rpc.RetryInfo`
    /// (the others waited the workload's own backoff).
    #[serde(default)]
    pub retry_info_waits: u32,
}

/// Writes `records` as JSON lines.
pub fn write_commands(path: &Path, records: &[CommandRecord]) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for record in records {
        serde_json::to_writer(&mut out, record)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// Reads the JSON lines written by [`write_commands`].
pub fn read_commands(path: &Path) -> anyhow::Result<Vec<CommandRecord>> {
    let file = std::fs::File::open(path)
        .map_err(|error| anyhow::anyhow!("open {}: {error}", path.display()))?;
    std::io::BufReader::new(file)
        .lines()
        .enumerate()
        .filter(|(_, line)| !matches!(line, Ok(text) if text.trim().is_empty()))
        .map(|(index, line)| {
            let line = line?;
            serde_json::from_str(&line)
                .map_err(|error| anyhow::anyhow!("{}:{}: {error}", path.display(), index + 1))
        })
        .collect()
}

/// One injected fault:
/// `at_ms \t kind \t target \t started_ms \t ended_ms \t detail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRecord {
    /// Milliseconds since the run started.
    pub at_ms: u64,
    /// `kill`, `graceful-restart`, `broker-outage`, `redis-restart`,
    /// `mysql-restart`, `im-fault`, `wallet-fault`, or `unexpected-exit` (a
    /// process died on its own).
    pub kind: String,
    /// The process (instance name, e.g. `room-service-2`) or system affected.
    pub target: String,
    /// Unix ms when the fault was applied (a kill: the SIGKILL).
    pub started_ms: u64,
    /// Unix ms when the system was whole again (a killed process restarted
    /// and ready, MariaDB back, the broker thawed); `started_ms` for an
    /// instantaneous record.
    pub ended_ms: u64,
    /// Free text (durations, codes).
    pub detail: String,
}

/// Reads `faults.tsv`; a missing file means no faults.
pub fn read_faults(path: &Path) -> anyhow::Result<Vec<FaultRecord>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => anyhow::bail!("read {}: {error}", path.display()),
    };
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .enumerate()
        .map(|(index, line)| {
            parse_fault(line).ok_or_else(|| {
                anyhow::anyhow!("{}:{}: bad line {line:?}", path.display(), index + 1)
            })
        })
        .collect()
}

/// One `faults.tsv` line; `None` when a time does not parse.
fn parse_fault(line: &str) -> Option<FaultRecord> {
    let mut fields = line.splitn(6, '\t');
    let mut next = || fields.next().unwrap_or_default().to_string();
    let (at_ms, kind, target, started_ms, ended_ms, detail) =
        (next(), next(), next(), next(), next(), next());
    Some(FaultRecord {
        at_ms: at_ms.parse().ok()?,
        kind,
        target,
        started_ms: started_ms.parse().ok()?,
        ended_ms: ended_ms.parse().ok()?,
        detail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip_and_faults_parse() {
        let dir = std::env::temp_dir().join(format!("chaos-ledger-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let records = vec![CommandRecord {
            command_id: "c1".into(),
            room_id: "r1".into(),
            kind: "gift".into(),
            outcome: Outcome::Unknown,
            detail: "Unavailable: down".into(),
            attempts: 3,
            gift_value: 200,
            event_ids: vec![],
            sent_to: vec!["room-service-2".into(), "room-service".into()],
            served_by: "room-service-3".into(),
            reply_version: 0,
            started_ms: 1_700_000_000_000,
            answered_ms: 1_700_000_002_500,
            retry_info_waits: 2,
        }];
        let path = dir.join("commands.jsonl");
        write_commands(&path, &records).unwrap();
        assert_eq!(read_commands(&path).unwrap(), records);
        // A ledger written before scale-out still reads.
        std::fs::write(
            &path,
            r#"{"command_id":"c0","room_id":"r1","kind":"join","outcome":"acked","detail":"","attempts":1,"gift_value":0,"event_ids":[]}"#,
        )
        .unwrap();
        let old = read_commands(&path).unwrap();
        assert!(old[0].sent_to.is_empty() && old[0].served_by.is_empty());

        let faults = dir.join("faults.tsv");
        std::fs::write(
            &faults,
            "10\tkill\troom-service\t1000\t4000\t\n\
             2500\tbroker-outage\ttansu\t3500\t23500\t20s\n",
        )
        .unwrap();
        let read = read_faults(&faults).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[1].kind, "broker-outage");
        assert_eq!((read[1].started_ms, read[1].ended_ms), (3_500, 23_500));
        assert_eq!(read[1].detail, "20s");
        std::fs::write(&faults, "soon\tkill\tx\t1\t2\t\n").unwrap();
        assert!(read_faults(&faults).is_err());
        std::fs::write(&faults, "10\tkill\tx\t\t\t\n").unwrap();
        assert!(read_faults(&faults).is_err());
        assert!(read_faults(&dir.join("absent.tsv")).unwrap().is_empty());
    }
}
