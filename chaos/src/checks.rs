//! The checker's rules: pure functions from the ledger and one observation
//! to pass/fail verdicts with the offending ids. The committed truth is the
//! database's `room_command_log` and `room_outbox` (written in one
//! transaction); every consumer effect is compared against the outbox events.

use crate::ledger::{CommandRecord, Outcome};
use crate::observe::Observation;
use outbox_schema::pb::room_outbox_event::Payload;
use std::collections::{BTreeMap, HashMap, HashSet};

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

fn verdict(name: &'static str, summary: String, offenders: Vec<String>) -> Check {
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
        writes_are_atomic(seen),
        outbox_delivered(seen),
        activity_exactly_once(seen, expect),
        im_bridge_exactly_once(seen, expect),
        notices_exactly_once(seen),
        per_room_order(seen, expect),
        money_conserved(seen),
        dead_letters(seen),
        im_record_complete(seen),
    ]
}

/// The IM checks read every message back from the fake: if it forgot some,
/// a missing message proves nothing, so the run cannot pass.
fn im_record_complete(seen: &Observation) -> Check {
    let mut offenders = Vec::new();
    if seen.im_forgotten > 0 {
        offenders.push(format!(
            "the fake IM forgot its {} oldest messages (record limit reached): raise its \
             --max-recorded-messages; the IM checks above are unreliable",
            seen.im_forgotten
        ));
    }
    verdict(
        "the fake IM kept every message it recorded",
        format!(
            "{} messages held, {} forgotten",
            seen.im_messages.len(),
            seen.im_forgotten
        ),
        offenders,
    )
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
    verdict(
        "every acknowledged command is in the command log exactly once",
        format!(
            "{} acknowledged, {} log rows (command_id is unique)",
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
    verdict(
        "a rejected command wrote nothing",
        format!("{} rejected", rejected.len()),
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
        if let Some(gap) = gap_in(versions.remove(room.as_str()).unwrap_or_default(), *version) {
            offenders.push(format!("room {room} command log versions: {gap}"));
        }
        if let Some(gap) = gap_in(seqs.remove(room.as_str()).unwrap_or_default(), *event_seq) {
            offenders.push(format!("room {room} outbox event seqs: {gap}"));
        }
    }
    for room in versions.keys().chain(seqs.keys()) {
        offenders.push(format!("rows for room {room}, which has no rooms row"));
    }
    verdict(
        "no partial writes (log, outbox and room row agree)",
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
        "every committed event was published",
        format!("{delivered} of {} outbox rows delivered", seen.outbox.len()),
        offenders,
    )
}

/// Committed gift events with their value and item count.
fn gifts(seen: &Observation) -> impl Iterator<Item = (&crate::observe::OutboxEvent, u64)> {
    gift_items(seen).map(|(event, value, _)| (event, value))
}

fn gift_items(
    seen: &Observation,
) -> impl Iterator<Item = (&crate::observe::OutboxEvent, u64, u64)> {
    seen.outbox.iter().filter_map(|e| match &e.payload {
        Some(Payload::RoomGiftSent(gift)) => {
            Some((e, gift.total_value, u64::from(gift.count.max(1))))
        }
        _ => None,
    })
}

fn activity_exactly_once(seen: &Observation, expect: &Expectations) -> Check {
    let mut expected: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    // activity_room_contribution counts gift items (`count` of each gift).
    for (event, value, items) in gift_items(seen) {
        let entry = expected.entry(event.room_id.as_str()).or_default();
        entry.0 += value;
        entry.1 += items;
    }
    let mut offenders = Vec::new();
    for (room, want) in &expected {
        let got = seen.contributions.get(*room).copied().unwrap_or_default();
        if got != *want {
            offenders.push(format!(
                "room {room}: credited {}/{} gifts, committed {}/{}",
                got.0, got.1, want.0, want.1
            ));
        }
    }
    for room in seen
        .contributions
        .keys()
        .filter(|room| !expected.contains_key(room.as_str()))
    {
        offenders.push(format!("room {room} credited without a committed gift"));
    }
    let big: HashSet<&str> = gifts(seen)
        .filter(|(_, value)| *value >= expect.big_gift_threshold)
        .map(|(e, _)| e.event_id.as_str())
        .collect();
    let broadcast_rows: HashMap<&str, &str> = seen
        .broadcasts
        .iter()
        .map(|(id, status)| (id.as_str(), status.as_str()))
        .collect();
    let announced = count_by(
        seen.im_messages
            .iter()
            .filter(|m| m.group_id.as_deref() == Some(&expect.broadcast_group)),
    );
    for event_id in &big {
        match broadcast_rows.get(event_id) {
            Some(&"delivered") => {}
            Some(status) => offenders.push(format!("big gift {event_id}: broadcast {status}")),
            None => offenders.push(format!("big gift {event_id}: no broadcast row")),
        }
        let times = announced.get(*event_id).copied().unwrap_or(0);
        if times != 1 {
            offenders.push(format!("big gift {event_id} announced {times} times"));
        }
    }
    for event_id in broadcast_rows.keys().filter(|id| !big.contains(**id)) {
        offenders.push(format!("broadcast {event_id} is not a committed big gift"));
    }
    let total: u64 = expected.values().map(|(value, _)| value).sum();
    verdict(
        "activity: each gift credited exactly once, each big gift announced once",
        format!(
            "{} gifts worth {total} in {} rooms; {} big gifts",
            gifts(seen).count(),
            expected.len(),
            big.len()
        ),
        offenders,
    )
}

/// Messages per event id.
fn count_by<'a>(
    messages: impl Iterator<Item = &'a crate::observe::ImRecord>,
) -> HashMap<&'a str, usize> {
    let mut counts = HashMap::new();
    for message in messages {
        if let Some(id) = message.event_id.as_deref() {
            *counts.entry(id).or_insert(0) += 1;
        }
    }
    counts
}

fn im_bridge_exactly_once(seen: &Observation, expect: &Expectations) -> Check {
    let in_room_groups = seen.im_messages.iter().filter(|m| {
        m.group_id
            .as_deref()
            .is_some_and(|g| g.starts_with(&expect.room_group_prefix))
    });
    let counts = count_by(in_room_groups);
    let mut offenders = Vec::new();
    let mut expected = 0;
    let committed: HashSet<&str> = seen.outbox.iter().map(|e| e.event_id.as_str()).collect();
    for event in seen
        .outbox
        .iter()
        .filter(|e| e.lane == 0 && !expect.im_silent.contains(&e.event_type))
        // RoomCreated / RoomClosed create / destroy the group; they send no message.
        .filter(|e| {
            !matches!(
                e.payload,
                Some(Payload::RoomCreated(_) | Payload::RoomClosed(_))
            )
        })
    {
        expected += 1;
        let times = counts.get(event.event_id.as_str()).copied().unwrap_or(0);
        if times != 1 {
            offenders.push(format!(
                "{} ({}) sent {times} times",
                event.event_id, event.event_type
            ));
        }
    }
    for event_id in counts.keys().filter(|id| !committed.contains(**id)) {
        offenders.push(format!("IM message for uncommitted event {event_id}"));
    }
    verdict(
        "im-bridge: each room event in its IM group exactly once",
        format!(
            "{expected} expected, {} accepted, {} resends absorbed by Random",
            counts.values().sum::<usize>(),
            seen.im_deduplicated
        ),
        offenders,
    )
}

fn notices_exactly_once(seen: &Observation) -> Check {
    let mut expected: Vec<(String, String)> = Vec::new();
    for event in &seen.outbox {
        match &event.payload {
            Some(Payload::RoomUserKicked(kicked)) => {
                expected.push((event.event_id.clone(), kicked.target_id.clone()))
            }
            Some(Payload::RoomTreasureOpened(opened)) => expected.extend(
                opened
                    .rewarded_user_ids
                    .iter()
                    .map(|user| (event.event_id.clone(), user.clone())),
            ),
            _ => {}
        }
    }
    let mut sent: HashMap<(&str, &str), usize> = HashMap::new();
    for message in &seen.im_messages {
        if let (Some(to), Some(id)) = (message.to_account.as_deref(), message.event_id.as_deref()) {
            *sent.entry((id, to)).or_insert(0) += 1;
        }
    }
    let mut offenders = Vec::new();
    for (event_id, user) in &expected {
        let times = sent
            .get(&(event_id.as_str(), user.as_str()))
            .copied()
            .unwrap_or(0);
        if times != 1 {
            offenders.push(format!("notice {event_id} → {user} sent {times} times"));
        }
    }
    for (event_id, user, _, status) in &seen.notices {
        if status != "delivered" {
            offenders.push(format!("notice {event_id} → {user} is {status}"));
        }
    }
    if seen.notices.len() != expected.len() {
        offenders.push(format!(
            "{} notice rows for {} expected notices",
            seen.notices.len(),
            expected.len()
        ));
    }
    verdict(
        "notices: one per kick and per treasure reward",
        format!(
            "{} expected, {} delivered",
            expected.len(),
            seen.notices.iter().filter(|n| n.3 == "delivered").count()
        ),
        offenders,
    )
}

fn per_room_order(seen: &Observation, expect: &Expectations) -> Check {
    let position: HashMap<&str, (&str, u64)> = seen
        .outbox
        .iter()
        .filter(|e| e.lane == 0)
        .map(|e| (e.event_id.as_str(), (e.room_id.as_str(), e.seq)))
        .collect();
    let mut offenders = Vec::new();
    let mut observed = 0usize;
    // Each stream: (observer, event ids in the order that observer applied them).
    let mut streams: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (group, event_id) in &seen.dedup {
        if expect.dedup_groups.contains(group) {
            streams
                .entry(format!("{group} (consumer_dedup)"))
                .or_default()
                .push(event_id);
        }
    }
    for message in &seen.im_messages {
        if let (Some(group), Some(id)) = (message.group_id.as_deref(), message.event_id.as_deref())
            && group.starts_with(&expect.room_group_prefix)
        {
            streams
                .entry("im-bridge (fake IM groups)".into())
                .or_default()
                .push(id);
        }
    }
    for (event_id, ..) in &seen.notices {
        streams
            .entry("notice-consumer (notice rows)".into())
            .or_default()
            .push(event_id);
    }
    for (observer, events) in &streams {
        let mut last: HashMap<&str, u64> = HashMap::new();
        for event_id in events {
            let Some((room, seq)) = position.get(event_id) else {
                continue;
            };
            observed += 1;
            if let Some(previous) = last.insert(room, *seq)
                && *seq < previous
            {
                offenders.push(format!(
                    "{observer}: room {room} seq {seq} after {previous}"
                ));
            }
        }
    }
    verdict(
        "per-room order as observed by each consumer never goes backwards",
        format!("{observed} observations over {} observers", streams.len()),
        offenders,
    )
}

fn money_conserved(seen: &Observation) -> Check {
    let committed: u64 = gifts(seen).map(|(_, value)| value).sum();
    let net = seen.wallet.debited - seen.wallet.refunded;
    let mut offenders = Vec::new();
    if net != committed as i64 {
        offenders.push(format!(
            "wallet net {net} (debited {} − refunded {}) ≠ committed gifts {committed}",
            seen.wallet.debited, seen.wallet.refunded
        ));
    }
    for (command_id, status, amount) in &seen.sagas {
        if status != "committed" && status != "compensated" {
            offenders.push(format!("saga {command_id} left {status} ({amount})"));
        }
    }
    let saga_committed: u64 = seen
        .sagas
        .iter()
        .filter(|s| s.1 == "committed")
        .map(|s| s.2)
        .sum();
    if saga_committed != committed {
        offenders.push(format!(
            "committed sagas {saga_committed} ≠ committed gifts {committed}"
        ));
    }
    verdict(
        "money: wallet debits − refunds = committed gifts; no saga in between",
        format!(
            "debited {} − refunded {} = {net}; committed gifts {committed}; {} sagas",
            seen.wallet.debited,
            seen.wallet.refunded,
            seen.sagas.len()
        ),
        offenders,
    )
}

fn dead_letters(seen: &Observation) -> Check {
    let mut offenders: Vec<String> = seen
        .outbox
        .iter()
        .filter(|e| e.status == "failed")
        .map(|e| format!("relay dead letter {} ({})", e.event_id, e.event_type))
        .collect();
    for (topic, count) in &seen.dead_letter_topics {
        if *count > 0 {
            offenders.push(format!("{topic}: {count} messages"));
        }
    }
    verdict(
        "no dead letters (every injected fault is transient)",
        format!(
            "{} dead-letter topics checked",
            seen.dead_letter_topics.len()
        ),
        offenders,
    )
}

#[cfg(test)]
mod tests;
