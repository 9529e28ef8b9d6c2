//! The consumers' effects compared with the committed outbox events, per
//! event wherever the effect is observable per event:
//!
//! - activity-consumer keeps only aggregates (`activity_room_contribution`
//!   per room, `activity_gift_leaderboard` per activity, day and user); the
//!   one per-event record of a credit is its `consumer_dedup` row, claimed in
//!   the same transaction as the credit. So each committed gift must have
//!   exactly one dedup row in the activity group, that group must hold no
//!   other rows, and the per-room totals must match: a lost credit shows as a
//!   missing row even when a duplicate credit of the same value elsewhere in
//!   the room keeps the totals right. (A duplicate credit that bypassed its
//!   dedup claim is visible only in the totals.)
//! - im-bridge: each event is matched by event id and by its own room's
//!   group, whether it went alone or as a row of a gift batch (a hot room's
//!   gifts merged, docs/design.md#hot-rooms): represented once, never twice,
//!   never elsewhere; big-gift broadcasts and notices by event id (and
//!   recipient).
//! - per-room order, from `consumer_dedup.applied_seq` and the IM record. In
//!   IM a batch's gifts stand at the batch's place, in row order. A room's
//!   control events (membership, mic, kick, treasure) go ahead of its gifts
//!   when its budget is short, so a kick may legitimately arrive before a
//!   gift of lower seq: the IM order is checked among gifts and among control
//!   events, never across the two.

use super::{
    ACTIVITY_PER_EVENT, ACTIVITY_TOTALS, Check, Expectations, IM_BRIDGE, IM_RECORD, NOTICES, ORDER,
    verdict,
};
use crate::im_messages::ImRecord;
use crate::observe::{Observation, OutboxEvent};
use outbox_schema::pb::room_outbox_event::Payload;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Committed gift events with their value and item count.
pub(super) fn gifts(seen: &Observation) -> impl Iterator<Item = (&OutboxEvent, u64)> {
    gift_items(seen).map(|(event, value, _)| (event, value))
}

fn gift_items(seen: &Observation) -> impl Iterator<Item = (&OutboxEvent, u64, u64)> {
    seen.outbox.iter().filter_map(|e| match &e.payload {
        Some(Payload::RoomGiftSent(gift)) => {
            Some((e, gift.total_value, u64::from(gift.count.max(1))))
        }
        _ => None,
    })
}

/// Each committed gift's event id applied exactly once by activity-consumer,
/// and nothing else applied (its dedup rows are exactly the committed gifts).
pub(super) fn activity_per_event(seen: &Observation, expect: &Expectations) -> Check {
    let mut applied: HashMap<&str, usize> = HashMap::new();
    for (group, event_id) in &seen.dedup {
        if *group == expect.activity_group {
            *applied.entry(event_id.as_str()).or_insert(0) += 1;
        }
    }
    let committed: HashSet<&str> = gifts(seen).map(|(e, _)| e.event_id.as_str()).collect();
    let mut offenders = Vec::new();
    for (event, value) in gifts(seen) {
        let times = applied.get(event.event_id.as_str()).copied().unwrap_or(0);
        if times != 1 {
            offenders.push(format!(
                "gift {} (room {}, {value}) applied {times} times",
                event.event_id, event.room_id
            ));
        }
    }
    let mut foreign: Vec<&str> = applied
        .keys()
        .copied()
        .filter(|id| !committed.contains(id))
        .collect();
    foreign.sort_unstable();
    for event_id in foreign {
        offenders.push(format!(
            "{event_id} applied by {} but not a committed gift",
            expect.activity_group
        ));
    }
    verdict(
        ACTIVITY_PER_EVENT,
        format!(
            "{} committed gifts, {} dedup rows of {}",
            committed.len(),
            applied.values().sum::<usize>(),
            expect.activity_group
        ),
        offenders,
    )
}

/// Per-room contribution totals equal the committed gifts; each big gift
/// has a delivered broadcast row and one announcement (matched by event id).
pub(super) fn activity_totals(seen: &Observation, expect: &Expectations) -> Check {
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
    for event_id in announced.keys().filter(|id| !big.contains(**id)) {
        offenders.push(format!(
            "announcement {event_id} is not a committed big gift"
        ));
    }
    let total: u64 = expected.values().map(|(value, _)| value).sum();
    verdict(
        ACTIVITY_TOTALS,
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
fn count_by<'a>(messages: impl Iterator<Item = &'a ImRecord>) -> HashMap<&'a str, usize> {
    let mut counts = HashMap::new();
    for message in messages {
        for id in &message.event_ids {
            *counts.entry(id.as_str()).or_insert(0) += 1;
        }
    }
    counts
}

/// Messages in room groups (the prefix), with their group.
fn room_group_messages<'a>(
    seen: &'a Observation,
    expect: &'a Expectations,
) -> impl Iterator<Item = (&'a str, &'a ImRecord)> {
    seen.im_messages.iter().filter_map(|message| {
        let group = message.group_id.as_deref()?;
        group
            .starts_with(&expect.room_group_prefix)
            .then_some((group, message))
    })
}

/// Whether im-bridge sends a group message for `event`: lane-0 events but
/// the group control events (RoomCreated / RoomClosed create / destroy the
/// group) and the configured silent types.
fn messaged(event: &OutboxEvent, expect: &Expectations) -> bool {
    event.lane == 0
        && !expect.im_silent.contains(&event.event_type)
        && !matches!(
            event.payload,
            Some(Payload::RoomCreated(_) | Payload::RoomClosed(_))
        )
}

pub(super) fn im_bridge_exactly_once(seen: &Observation, expect: &Expectations) -> Check {
    // Event id → the room groups of the messages representing it, once per
    // message: a single message or a gift batch's row alike.
    let mut groups: HashMap<&str, Vec<&str>> = HashMap::new();
    let (mut singles, mut batches, mut batched) = (0usize, 0usize, 0usize);
    for (group, message) in room_group_messages(seen, expect) {
        for id in &message.event_ids {
            groups.entry(id.as_str()).or_default().push(group);
        }
        if message.gift_batch {
            batches += 1;
            batched += message.event_ids.len();
        } else if !message.event_ids.is_empty() {
            singles += 1;
        }
    }
    let mut offenders = Vec::new();
    let mut expected = 0;
    let mut committed: HashMap<&str, &OutboxEvent> = HashMap::new();
    for event in &seen.outbox {
        committed.insert(event.event_id.as_str(), event);
        let sent = groups
            .get(event.event_id.as_str())
            .map(Vec::as_slice)
            .unwrap_or_default();
        if !messaged(event, expect) {
            if !sent.is_empty() {
                offenders.push(format!(
                    "{} ({}) needs no IM message but was sent to {sent:?}",
                    event.event_id, event.event_type
                ));
            }
            continue;
        }
        expected += 1;
        let own = format!("{}{}", expect.room_group_prefix, event.room_id);
        if sent != [own.as_str()] {
            offenders.push(format!(
                "{} ({}) represented in {sent:?}, expected once in {own}",
                event.event_id, event.event_type
            ));
        }
    }
    offenders.extend(non_gifts_in_batches(seen, expect, &committed));
    let mut uncommitted: Vec<&str> = groups
        .keys()
        .copied()
        .filter(|id| !committed.contains_key(id))
        .collect();
    uncommitted.sort_unstable();
    for event_id in uncommitted {
        offenders.push(format!("IM message for uncommitted event {event_id}"));
    }
    verdict(
        IM_BRIDGE,
        format!(
            "{expected} expected; {singles} single messages, {batches} gift batches carrying \
             {batched} gifts; {} resends absorbed by Random",
            seen.im_deduplicated
        ),
        offenders,
    )
}

/// A gift batch carries only `RoomGiftSent` events (docs/im-messages.md):
/// any other committed event in one is named.
fn non_gifts_in_batches(
    seen: &Observation,
    expect: &Expectations,
    committed: &HashMap<&str, &OutboxEvent>,
) -> Vec<String> {
    room_group_messages(seen, expect)
        .filter(|(_, message)| message.gift_batch)
        .flat_map(|(group, message)| {
            message.event_ids.iter().filter_map(move |id| {
                let event = committed.get(id.as_str())?;
                (!matches!(event.payload, Some(Payload::RoomGiftSent(_)))).then(|| {
                    format!(
                        "{id} ({}) carried by a gift batch in {group}",
                        event.event_type
                    )
                })
            })
        })
        .collect()
}

pub(super) fn notices_exactly_once(seen: &Observation) -> Check {
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
        if let Some(to) = message.to_account.as_deref() {
            for id in &message.event_ids {
                *sent.entry((id.as_str(), to)).or_insert(0) += 1;
            }
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
        NOTICES,
        format!(
            "{} expected, {} delivered",
            expected.len(),
            seen.notices.iter().filter(|n| n.3 == "delivered").count()
        ),
        offenders,
    )
}

pub(super) fn per_room_order(seen: &Observation, expect: &Expectations) -> Check {
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
    // Control events may overtake gifts in IM (the module doc): im-bridge's
    // streams are one per class, a batch's rows at the batch's place.
    let gift_ids: HashSet<&str> = gifts(seen).map(|(e, _)| e.event_id.as_str()).collect();
    let class = |id: &str| {
        if gift_ids.contains(id) {
            "gifts"
        } else {
            "control events"
        }
    };
    for (group, event_id) in &seen.dedup {
        if !expect.dedup_groups.contains(group) {
            continue;
        }
        let stream = if *group == expect.im_bridge_group {
            format!("{group} {} (consumer_dedup)", class(event_id))
        } else {
            format!("{group} (consumer_dedup)")
        };
        streams.entry(stream).or_default().push(event_id);
    }
    for (_, message) in room_group_messages(seen, expect) {
        for id in &message.event_ids {
            streams
                .entry(format!("im-bridge {} (fake IM groups)", class(id)))
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
        ORDER,
        format!("{observed} observations over {} observers", streams.len()),
        offenders,
    )
}

/// The IM checks read every message back from the fake: if it forgot some,
/// a missing message proves nothing, so the run cannot pass.
pub(super) fn im_record_complete(seen: &Observation) -> Check {
    let mut offenders = Vec::new();
    if seen.im_forgotten > 0 {
        offenders.push(format!(
            "the fake IM forgot its {} oldest messages (record limit reached): raise its \
             --max-recorded-messages; the IM checks above are unreliable",
            seen.im_forgotten
        ));
    }
    verdict(
        IM_RECORD,
        format!(
            "{} messages held, {} forgotten",
            seen.im_messages.len(),
            seen.im_forgotten
        ),
        offenders,
    )
}
