//! The checker's rules: pure functions from the ledger and one observation
//! to pass/fail verdicts with the offending ids. The committed truth is the
//! database's `room_command_log` and `room_outbox` (written in one
//! transaction); every consumer effect is compared against the outbox events.
//!
//! This file holds the rules about the command log and the outbox, and
//! that the run committed anything at all; [`ownership`] that each room had
//! one writer at a time across the room-service instances; [`scale_out`]
//! that commands were forwarded and leases moved; [`recovery`] that the
//! rooms of a killed instance answered again in time; [`effects`] the
//! consumers' effects, [`im_rate`] Tencent's per-group message limit,
//! [`money`] the wallet and the dead letters, and
//! [`settle`] when a verdict counts (it must hold again after a quiet period).
//! The scale-out and recovery rules read only the ledger and the fault log,
//! so [`ledger_rules`] evaluates them once, apart from the settle loop. Every rule's
//! name is a constant here, so the tests can name the one rule a broken
//! ledger must trip.

mod effects;
mod im_rate;
mod money;
mod ownership;
mod recovery;
mod scale_out;
pub mod settle;

pub(crate) use recovery::seconds;

use crate::ledger::{CommandRecord, FaultRecord, Outcome};
use crate::observe::Observation;
use crate::outage::KillOutage;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

/// Rule: every acknowledged command is logged.
pub const ACKNOWLEDGED: &str = "every acknowledged command is in the command log exactly once";
/// Rule: a rejection wrote nothing.
pub const REJECTED: &str = "a rejected command wrote nothing";
/// Rule: the run committed something in every room it touched.
pub const COMMITTED_ENOUGH: &str = "every room the workload touched has acknowledged commands";
/// Rule: log, outbox and rooms row agree.
pub const ATOMIC: &str = "no partial writes (log, outbox and room row agree)";
/// Rule: one writer per room across the room-service instances.
pub const ONE_WRITER: &str =
    "one writer per room: log versions 1..n, each reply at its logged version";
/// Rule: scale-out was exercised.
pub const SCALE_OUT: &str =
    "scale-out exercised: commands forwarded to the holder, leases moved between instances";
/// Rule: rooms of a killed instance answered again in time.
pub const RECOVERY: &str =
    "rooms of a killed room-service instance answered again within the bound";
/// Rule: every outbox row was published.
pub const PUBLISHED: &str = "every committed event was published";
/// Rule: each gift applied once, by its own event id.
pub const ACTIVITY_PER_EVENT: &str =
    "activity: each committed gift applied exactly once (dedup rows)";
/// Rule: per-room totals and big-gift broadcasts.
pub const ACTIVITY_TOTALS: &str =
    "activity: room totals = committed gifts; each big gift announced once";
/// Rule: each room event represented once in its own room's group, whether
/// alone or as a row of a gift batch.
pub const IM_BRIDGE: &str = "im-bridge: each room event represented exactly once across single \
     messages and gift batches, in its own room's IM group";
/// Rule: Tencent's per-group message limit held, and nothing was refused by it.
pub const IM_GROUP_RATE: &str = "no IM group received more than its limit of messages in any \
     one-second window, none refused by the limit";
/// Rule: notices.
pub const NOTICES: &str = "notices: one per kick and per treasure reward";
/// Rule: per-room order.
pub const ORDER: &str = "per-room order as observed by each consumer never goes backwards";
/// Rule: money.
pub const MONEY: &str = "money: wallet debits − refunds = committed gifts; no saga in between";
/// Rule: no dead letters.
pub const DEAD_LETTERS: &str = "no dead letters (every injected fault is transient)";
/// Rule: the fake IM's record is complete.
pub const IM_RECORD: &str = "the fake IM kept every message it recorded";

/// What the stack was configured with, so expectations match it.
#[derive(Debug, Clone)]
pub struct Expectations {
    /// Event types im-bridge acknowledges without a group message.
    pub im_silent: Vec<String>,
    /// `room_{room_id}` style IM group of a room: the prefix before the room id.
    pub room_group_prefix: String,
    /// Global group big gifts are announced in.
    pub broadcast_group: String,
    /// Gifts worth at least this are announced.
    pub big_gift_threshold: u64,
    /// Consumer groups that record `consumer_dedup` rows.
    pub dedup_groups: Vec<String>,
    /// activity-consumer's group: its `consumer_dedup` rows are the per-event
    /// record of which gifts it credited (claimed in the crediting transaction).
    pub activity_group: String,
    /// im-bridge's group: its `consumer_dedup` order is checked per class
    /// (gifts, control events), as its IM messages are.
    pub im_bridge_group: String,
    /// Fewest acknowledged commands each room the workload touched must have
    /// (at least 1: a run that committed nothing proves nothing).
    pub min_acked_per_room: usize,
    /// Most messages one IM group may receive in any one-second window
    /// (Tencent's limit, 40).
    pub im_group_limit: usize,
}

/// What the rules reading only the ledger and the fault log expect.
#[derive(Debug, Clone)]
pub struct LedgerExpectations {
    /// room-service instances the run started (1 cannot forward).
    pub room_services: usize,
    /// Longest a killed instance's room may stay unavailable, other faults'
    /// time excused.
    pub max_unavailable: Duration,
}

/// One verdict.
#[derive(Debug, Clone)]
pub struct Check {
    /// What is promised.
    pub name: &'static str,
    /// Held or not.
    pub passed: bool,
    /// Figures behind the verdict.
    pub summary: String,
    /// Offending ids, when it failed (first few).
    pub offenders: Vec<String>,
}

/// How many offenders a failed check lists.
const SHOWN: usize = 12;

pub(crate) fn verdict(name: &'static str, summary: String, offenders: Vec<String>) -> Check {
    Check {
        name,
        passed: offenders.is_empty(),
        summary,
        offenders: offenders.into_iter().take(SHOWN).collect(),
    }
}

const OPEN: [&str; 3] = ["pending", "delivering", "retryable"];
/// A delayed wake-up this far past due and still open is late, not merely waiting.
const WAKEUP_GRACE_MS: i64 = 30_000;

/// Runs every rule.
pub fn run(commands: &[CommandRecord], seen: &Observation, expect: &Expectations) -> Vec<Check> {
    vec![
        acknowledged_are_logged(commands, seen),
        rejected_wrote_nothing(commands, seen),
        committed_enough(commands, expect),
        writes_are_atomic(seen),
        ownership::one_writer_per_room(commands, seen),
        outbox_delivered(seen),
        effects::activity_per_event(seen, expect),
        effects::activity_totals(seen, expect),
        effects::im_bridge_exactly_once(seen, expect),
        im_rate::group_rate_within_limit(seen, expect),
        effects::notices_exactly_once(seen),
        effects::per_room_order(seen, expect),
        money::money_conserved(seen),
        money::dead_letters(seen),
        effects::im_record_complete(seen),
    ]
}

/// The rules that read only the ledger and the fault log: they cannot
/// change while the system settles, so they are evaluated once.
pub fn ledger_rules(
    commands: &[CommandRecord],
    faults: &[FaultRecord],
    kills: &[KillOutage],
    expect: &LedgerExpectations,
) -> Vec<Check> {
    vec![
        scale_out::exercised(commands, faults, expect.room_services),
        recovery::rooms_recovered(kills, expect.max_unavailable),
    ]
}

fn acknowledged_are_logged(commands: &[CommandRecord], seen: &Observation) -> Check {
    let acked: Vec<&CommandRecord> = commands
        .iter()
        .filter(|c| c.outcome == Outcome::Acked)
        .collect();
    let mut offenders = Vec::new();
    for command in &acked {
        match seen.log.get(&command.command_id) {
            None => offenders.push(format!(
                "{} acknowledged but not in room_command_log",
                command.command_id
            )),
            Some(entry) if entry.room_id != command.room_id => offenders.push(format!(
                "{} logged for room {}",
                command.command_id, entry.room_id
            )),
            Some(entry)
                if !command
                    .event_ids
                    .iter()
                    .all(|id| entry.event_ids.contains(id)) =>
            {
                offenders.push(format!(
                    "{} reply events differ from the logged reply",
                    command.command_id
                ))
            }
            Some(_) => {}
        }
    }
    let lost = acked
        .iter()
        .filter(|command| !seen.log.contains_key(&command.command_id))
        .count();
    let lost_gifts: u64 = acked
        .iter()
        .filter(|command| !seen.log.contains_key(&command.command_id))
        .map(|command| command.gift_value)
        .sum();
    verdict(
        ACKNOWLEDGED,
        format!(
            "{} acknowledged, {} log rows (command_id is unique); {lost} acknowledged lost \
             (gifts worth {lost_gifts})",
            acked.len(),
            seen.log.len()
        ),
        offenders,
    )
}

fn rejected_wrote_nothing(commands: &[CommandRecord], seen: &Observation) -> Check {
    let rejected: Vec<&CommandRecord> = commands
        .iter()
        .filter(|c| c.outcome == Outcome::Rejected)
        .collect();
    let offenders = rejected
        .iter()
        .filter(|c| seen.log.contains_key(&c.command_id))
        .map(|c| format!("{} rejected ({}) but logged", c.command_id, c.detail))
        .collect();
    verdict(REJECTED, format!("{} rejected", rejected.len()), offenders)
}

/// A run that committed nothing passes every other rule vacuously, so each
/// room the workload touched (sent any command to) must have at least
/// `min_acked_per_room` acknowledged commands, and there must be commands.
fn committed_enough(commands: &[CommandRecord], expect: &Expectations) -> Check {
    let mut acked: BTreeMap<&str, usize> = BTreeMap::new();
    for command in commands {
        let count = acked.entry(command.room_id.as_str()).or_default();
        if command.outcome == Outcome::Acked {
            *count += 1;
        }
    }
    let mut offenders = Vec::new();
    if commands.is_empty() {
        offenders.push("the workload recorded no commands".to_string());
    }
    for (room, count) in &acked {
        if *count < expect.min_acked_per_room {
            offenders.push(format!(
                "room {room}: {count} acknowledged, at least {} required",
                expect.min_acked_per_room
            ));
        }
    }
    verdict(
        COMMITTED_ENOUGH,
        format!(
            "{} rooms touched, fewest acknowledged in one room {} (at least {} required)",
            acked.len(),
            acked.values().min().copied().unwrap_or(0),
            expect.min_acked_per_room
        ),
        offenders,
    )
}

fn writes_are_atomic(seen: &Observation) -> Check {
    let mut offenders = Vec::new();
    let event_ids: HashSet<&str> = seen.outbox.iter().map(|e| e.event_id.as_str()).collect();
    for (command_id, entry) in &seen.log {
        for event_id in &entry.event_ids {
            if !event_ids.contains(event_id.as_str()) {
                offenders.push(format!(
                    "{command_id}: logged event {event_id} has no outbox row"
                ));
            }
        }
    }
    for event in seen.outbox.iter().filter(|e| e.lane == 0) {
        if !seen.log.contains_key(&event.command_id) {
            offenders.push(format!(
                "outbox event {} of unlogged command {:?}",
                event.event_id, event.command_id
            ));
        }
    }
    let mut versions: HashMap<&str, Vec<u64>> = HashMap::new();
    for entry in seen.log.values() {
        versions
            .entry(entry.room_id.as_str())
            .or_default()
            .push(entry.version);
    }
    let mut seqs: HashMap<&str, Vec<u64>> = HashMap::new();
    for event in seen.outbox.iter().filter(|e| e.lane == 0) {
        seqs.entry(event.room_id.as_str())
            .or_default()
            .push(event.seq);
    }
    for (room, (version, event_seq)) in &seen.rooms {
        // How the log's versions run (no gap, no repeat) is the one-writer
        // rule's; here the room row must stand at the log's newest version.
        let newest = versions
            .remove(room.as_str())
            .and_then(|logged| logged.into_iter().max())
            .unwrap_or(0);
        if newest != *version {
            offenders.push(format!(
                "room {room} row at version {version}, its command log ends at {newest}"
            ));
        }
        if let Some(gap) = gap_in(seqs.remove(room.as_str()).unwrap_or_default(), *event_seq) {
            offenders.push(format!("room {room} outbox event seqs: {gap}"));
        }
    }
    for room in versions.keys().chain(seqs.keys()) {
        offenders.push(format!("rows for room {room}, which has no rooms row"));
    }
    verdict(
        ATOMIC,
        format!(
            "{} commands, {} outbox rows, {} rooms",
            seen.log.len(),
            seen.outbox.len(),
            seen.rooms.len()
        ),
        offenders,
    )
}

/// Describes how `values` differs from a gap-free run ending at `last`.
fn gap_in(mut values: Vec<u64>, last: u64) -> Option<String> {
    values.sort_unstable();
    let first = *values.first()?;
    let expected = (last + 1).saturating_sub(first) as usize;
    let distinct = {
        let mut distinct = values.clone();
        distinct.dedup();
        distinct.len()
    };
    (values.last() != Some(&last) || distinct != values.len() || values.len() != expected).then(
        || {
            format!(
                "{} values from {first} to {}, expected a gap-free run to {last}",
                values.len(),
                values.last().copied().unwrap_or_default()
            )
        },
    )
}

fn outbox_delivered(seen: &Observation) -> Check {
    let offenders = seen
        .outbox
        .iter()
        .filter(|e| OPEN.contains(&e.status.as_str()))
        .filter(|e| e.lane == 0 || e.due_ms + WAKEUP_GRACE_MS < seen.now_ms)
        .map(|e| {
            format!(
                "{} ({}, lane {}) still {}",
                e.event_id, e.event_type, e.lane, e.status
            )
        })
        .collect();
    let delivered = seen
        .outbox
        .iter()
        .filter(|e| e.status == "delivered")
        .count();
    verdict(
        PUBLISHED,
        format!("{delivered} of {} outbox rows delivered", seen.outbox.len()),
        offenders,
    )
}

#[cfg(test)]
mod tests;
