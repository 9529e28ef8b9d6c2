//! What the workload did and what the fault schedule did, as files the
//! checker reads: one JSON object per line for commands (`commands.jsonl`),
//! and tab-separated lines for faults (`faults.tsv`, written by xtask, which
//! stays std-only).

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

/// One injected fault: `at_ms \t kind \t target \t detail`.
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
            let mut fields = line.splitn(4, '\t');
            let at_ms = fields.next().unwrap_or_default().parse().map_err(|_| {
                anyhow::anyhow!("{}:{}: bad time in {line:?}", path.display(), index + 1)
            })?;
            let mut next = || fields.next().unwrap_or_default().to_string();
            Ok(FaultRecord {
                at_ms,
                kind: next(),
                target: next(),
                detail: next(),
            })
        })
        .collect()
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
            "10\tkill\troom-service\t\n2500\tbroker-outage\ttansu\t20s\n",
        )
        .unwrap();
        let read = read_faults(&faults).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[1].kind, "broker-outage");
        assert_eq!(read[1].detail, "20s");
        std::fs::write(&faults, "soon\tkill\tx\t\n").unwrap();
        assert!(read_faults(&faults).is_err());
        assert!(read_faults(&dir.join("absent.tsv")).unwrap().is_empty());
    }
}
