//! How long the rooms of a killed room-service instance stayed unavailable.
//!
//! **Which rooms.** For each SIGKILL of a room-service instance (a `kill`
//! record of `faults.tsv`, timed at the signal), the rooms it held are those
//! whose last acknowledged command before the kill it executed (the reply's
//! `x-room-served-by`).
//!
//! **How long.** A room is unavailable from the kill to its first definite
//! answer after it: an acknowledgement not from the killed instance before
//! it was back, or a refusal by the room's rules (`FAILED_PRECONDITION`
//! and the like, final refusals that only the room's holder, with the room
//! loaded, can give) of a command first sent after the kill, so no reply
//! the killed instance had on its way counts. The clock starts at the kill when a call for
//! the room was in flight then, else at the first call sent for it after the
//! kill: the workload picks rooms at random, and the time before anybody
//! asked is not unavailability. A room nobody asked about after the kill is
//! not measured; one asked about but never answered again is unrecovered,
//! and counts until the last answer of the run. Retry waits are part of it,
//! as a gateway following the contract sees it.
//!
//! **Overlapping faults.** Other faults make rooms unavailable on their
//! own: MariaDB and Redis restarts, the broker freeze, wallet faults, and
//! crashes, graceful restarts or unexpected exits of room-service instances.
//! The part of a room's unavailability that one of them covers — from its
//! start until [`LINGER_MS`] after the system was whole again, while clients
//! reconnect and rooms reload — is *excused*; the bound holds the rest (see
//! `checks::recovery`). Faults of consumers, relays and the fake IM are off
//! the command path and excuse nothing. With a single room-service
//! instance nobody can take its rooms over, so the kill's own downtime (and
//! the linger after it) is excused as well: what counts is how long the
//! rooms took once the instance was back.

use crate::ledger::{CommandRecord, FaultRecord, Outcome};
use std::collections::{BTreeMap, BTreeSet};

/// How long after another fault ended its effects may still hold a room up.
pub const LINGER_MS: u64 = 2_000;

/// The rooms of one killed instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KillOutage {
    /// When, in ms since the run started (for the report).
    pub at_ms: u64,
    /// The instance killed.
    pub target: String,
    /// Whether the kill fell within the workload (commands before and after it).
    pub during_workload: bool,
    /// Rooms it held (its last acknowledged command before the kill).
    pub held: usize,
    /// Those of them asked about after the kill.
    pub rooms: Vec<RoomOutage>,
}

/// One room's unavailability after a kill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomOutage {
    /// The room.
    pub room_id: String,
    /// From the kill (or the first call after it) to the first definite answer.
    pub unavailable_ms: u64,
    /// The part of it other faults cover.
    pub excused_ms: u64,
    /// The other faults covering part of it (`kind target`).
    pub excused_by: BTreeSet<String>,
    /// False when no call for the room was answered definitely after the kill.
    pub recovered: bool,
}

impl RoomOutage {
    /// What the bound holds: the unavailability other faults do not cover.
    pub fn counted_ms(&self) -> u64 {
        self.unavailable_ms.saturating_sub(self.excused_ms)
    }
}

/// Measures every room-service kill of `faults` against the ledger of a run
/// with `room_services` instances.
pub fn measure(
    commands: &[CommandRecord],
    faults: &[FaultRecord],
    room_services: usize,
) -> Vec<KillOutage> {
    let sole = room_services <= 1;
    let timed: Vec<&CommandRecord> = commands.iter().filter(|c| c.started_ms > 0).collect();
    let mut by_room: BTreeMap<&str, Vec<&CommandRecord>> = BTreeMap::new();
    for command in &timed {
        by_room.entry(&command.room_id).or_default().push(command);
    }
    let first = timed.iter().map(|c| c.started_ms).min().unwrap_or(0);
    let last = timed.iter().map(|c| c.answered_ms).max().unwrap_or(0);
    faults
        .iter()
        .enumerate()
        .filter(|(_, fault)| fault.kind == "kill" && is_room_service(&fault.target))
        .map(|(index, kill)| {
            let others: Vec<&FaultRecord> = faults
                .iter()
                .enumerate()
                .filter(|(other, fault)| (*other != index || sole) && disturbs_rooms(fault))
                .map(|(_, fault)| fault)
                .collect();
            measure_kill(kill, &by_room, &others, (first, last))
        })
        .collect()
}

fn measure_kill(
    kill: &FaultRecord,
    by_room: &BTreeMap<&str, Vec<&CommandRecord>>,
    others: &[&FaultRecord],
    (first, last): (u64, u64),
) -> KillOutage {
    let at = kill.started_ms;
    let held: Vec<(&str, &Vec<&CommandRecord>)> = by_room
        .iter()
        .filter(|(_, commands)| holder_before(commands, at) == Some(kill.target.as_str()))
        .map(|(room, commands)| (*room, commands))
        .collect();
    let rooms = held
        .iter()
        .filter_map(|(room, commands)| {
            let (from, to, recovered) = window(commands, kill, last)?;
            let (excused_ms, excused_by) = excused(from, to, others);
            Some(RoomOutage {
                room_id: room.to_string(),
                unavailable_ms: to - from,
                excused_ms,
                excused_by,
                recovered,
            })
        })
        .collect();
    KillOutage {
        at_ms: kill.at_ms,
        target: kill.target.clone(),
        during_workload: first < at && at < last,
        held: held.len(),
        rooms,
    }
}

/// The instance that executed the room's last acknowledged command answered by `at`.
fn holder_before<'a>(commands: &[&'a CommandRecord], at: u64) -> Option<&'a str> {
    commands
        .iter()
        .filter(|c| c.outcome == Outcome::Acked && c.answered_ms <= at && !c.served_by.is_empty())
        .max_by_key(|c| c.answered_ms)
        .map(|c| c.served_by.as_str())
}

/// `(from, to, recovered)`: from the kill, or the first call after it, to
/// the first definite answer after it (else `last`, unrecovered). `None`
/// when no call for the room was in flight at or sent after the kill.
fn window(commands: &[&CommandRecord], kill: &FaultRecord, last: u64) -> Option<(u64, u64, bool)> {
    let at = kill.started_ms;
    let after: Vec<&&CommandRecord> = commands.iter().filter(|c| c.answered_ms > at).collect();
    let from = after.iter().map(|c| c.started_ms.max(at)).min()?;
    let answered = after
        .iter()
        .filter(|c| answered_by_a_live_holder(c, kill))
        .map(|c| c.answered_ms)
        .min();
    Some(match answered {
        Some(to) => (from, to.max(from), true),
        None => (from, last.max(from), false),
    })
}

/// Whether `command`'s answer shows its room served by a live holder after
/// `kill`. An acknowledgement the killed instance sent before it was back
/// had been executed before the signal landed and was still on its way; a
/// rule refusal carries no `x-room-served-by`, so only one of a command
/// first sent after the kill counts.
fn answered_by_a_live_holder(command: &CommandRecord, kill: &FaultRecord) -> bool {
    match command.outcome {
        Outcome::Acked => command.served_by != kill.target || command.answered_ms >= kill.ended_ms,
        Outcome::Rejected => command.started_ms >= kill.started_ms,
        Outcome::Unknown => false,
    }
}

/// How much of `[from, to]` the other faults cover, each from its start to
/// [`LINGER_MS`] after its end, and which of them do.
fn excused(from: u64, to: u64, others: &[&FaultRecord]) -> (u64, BTreeSet<String>) {
    let mut spans: Vec<(u64, u64)> = Vec::new();
    let mut names = BTreeSet::new();
    for fault in others {
        let (start, end) = (
            fault.started_ms.max(from),
            (fault.ended_ms + LINGER_MS).min(to),
        );
        if start < end {
            spans.push((start, end));
            names.insert(format!("{} {}", fault.kind, fault.target));
        }
    }
    (union_length(spans), names)
}

/// Total length of the union of `spans`.
fn union_length(mut spans: Vec<(u64, u64)>) -> u64 {
    spans.sort_unstable();
    let mut total = 0;
    let mut reached = 0;
    for (start, end) in spans {
        let start = start.max(reached);
        if end > start {
            total += end - start;
            reached = end;
        }
    }
    total
}

fn is_room_service(target: &str) -> bool {
    target == "room-service" || target.starts_with("room-service-")
}

/// Whether `fault` can hold up room commands by itself.
fn disturbs_rooms(fault: &FaultRecord) -> bool {
    match fault.kind.as_str() {
        "kill" | "graceful-restart" | "unexpected-exit" => is_room_service(&fault.target),
        "im-fault" => false,
        _ => true,
    }
}

/// The `percentile`th value of `values` (nearest rank), 0 when empty.
pub fn percentile(values: &mut [u64], percentile: u64) -> u64 {
    values.sort_unstable();
    let rank = (values.len() as u64 * percentile).div_ceil(100).max(1);
    values.get(rank as usize - 1).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests;
