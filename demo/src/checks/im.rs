//! The expected effects in the room's IM group: every room event represented
//! exactly once, alone or as a row of a gift batch (silent ones not at all);
//! the gift storm merged into at least one batch carrying only gifts; and the
//! fake IM's own count of the group's busiest second and of the messages it
//! refused by the per-group limit.

use super::{Check, GIFT_BATCHES, GROUP_RATE, ROOM_MESSAGES, Script, check, per_event};
use crate::im_messages::{GIFT_BATCH_DESC, ImMessage};
use crate::observe::Observed;
use std::collections::BTreeSet;

/// Room events (lane 0) im-bridge sends as group messages: all but the
/// group control events (RoomCreated, RoomClosed) and the silent types.
/// Returns `(messaged, silent)` event ids.
fn im_events<'o>(observed: &'o Observed, silent: &[String]) -> (Vec<&'o str>, Vec<&'o str>) {
    let (quiet, loud): (Vec<_>, Vec<_>) = observed
        .outbox
        .iter()
        .filter(|row| {
            row.lane == 0 && row.event_type != "RoomCreated" && row.event_type != "RoomClosed"
        })
        .partition(|row| silent.contains(&row.event_type));
    let ids = |rows: Vec<&'o crate::observe::OutboxRow>| -> Vec<&'o str> {
        rows.into_iter().map(|row| row.event_id.as_str()).collect()
    };
    (ids(loud), ids(quiet))
}

pub(super) fn room_messages(script: &Script<'_>, observed: &Observed) -> Check {
    let (wanted, silent) = im_events(observed, script.im_silent);
    let counts = per_event(observed.room_messages.iter());
    let times = |id: &str| counts.get(id).copied().unwrap_or(0);
    let mut wrong: Vec<String> = wanted
        .iter()
        .filter(|id| times(id) != 1)
        .map(|id| format!("{id} ×{}", times(id)))
        .collect();
    let leaked = silent.iter().filter(|id| times(id) > 0).count();
    let known: BTreeSet<&str> = observed
        .outbox
        .iter()
        .map(|row| row.event_id.as_str())
        .collect();
    wrong.extend(
        counts
            .keys()
            .filter(|id| !known.contains(*id))
            .map(|id| format!("{id} is not an event of this room")),
    );
    let once = wanted.len() - wanted.iter().filter(|id| times(id) != 1).count();
    check(
        ROOM_MESSAGES,
        !wanted.is_empty() && wrong.is_empty() && leaked == 0 && observed.room_group_exists,
        format!(
            "{once}/{} events exactly once in the IM group, singles and batches alike{}; {leaked}/{} silent events ({}) messaged; group exists: {}",
            wanted.len(),
            if wrong.is_empty() {
                String::new()
            } else {
                format!(" (wrong: {})", wrong.join(", "))
            },
            silent.len(),
            script.im_silent.join(", "),
            observed.room_group_exists
        ),
    )
}

/// At least one gift batch in the room's group, each readable and carrying
/// only gifts. (Whether every gift is represented once, and only this
/// room's, is [`ROOM_MESSAGES`]'s to say.)
pub(super) fn gift_batches(script: &Script<'_>, observed: &Observed) -> Check {
    let gifts: BTreeSet<&str> = observed
        .outbox
        .iter()
        .filter(|row| row.event_type == "RoomGiftSent")
        .map(|row| row.event_id.as_str())
        .collect();
    let room_events: BTreeSet<&str> = observed
        .outbox
        .iter()
        .map(|row| row.event_id.as_str())
        .collect();
    let batches: Vec<&ImMessage> = observed
        .room_messages
        .iter()
        .filter(|message| message.kind == GIFT_BATCH_DESC)
        .collect();
    let mut wrong = Vec::new();
    for batch in &batches {
        if batch.gift_batch.is_none() {
            wrong.push(format!(
                "msg_seq {}: a batch that cannot be read",
                batch.msg_seq
            ));
        }
        wrong.extend(
            batch
                .event_ids
                .iter()
                .filter(|id| room_events.contains(id.as_str()) && !gifts.contains(id.as_str()))
                .map(|id| format!("msg_seq {}: {id} is not a gift", batch.msg_seq)),
        );
    }
    let storm: BTreeSet<&str> = script.storm.event_ids.iter().map(String::as_str).collect();
    let carried: Vec<&str> = batches
        .iter()
        .flat_map(|batch| batch.event_ids.iter().map(String::as_str))
        .collect();
    let merged_storm = carried.iter().filter(|id| storm.contains(*id)).count();
    check(
        GIFT_BATCHES,
        !batches.is_empty() && wrong.is_empty(),
        format!(
            "{} {GIFT_BATCH_DESC} message(s) carrying {} gifts, {merged_storm} of the {} storm gifts (the rest went alone){}",
            batches.len(),
            carried.len(),
            storm.len(),
            if wrong.is_empty() {
                String::new()
            } else {
                format!(" (wrong: {})", wrong.join("; "))
            }
        ),
    )
}

/// The fake IM's own count for the room's group: its busiest second and the
/// messages it refused by the per-group limit (which pacing should prevent).
pub(super) fn group_rate(script: &Script<'_>, observed: &Observed) -> Check {
    let limit = script.im_group_limit;
    let Some(stats) = observed.room_group_stats else {
        return check(
            GROUP_RATE,
            false,
            "the fake IM's counters for the room group are unreadable (see the notes)",
        );
    };
    check(
        GROUP_RATE,
        stats.peak_per_second <= limit && stats.freq_dropped == 0,
        format!(
            "busiest second {} messages (limit {limit}); {} refused by the limit (MsgFreqCtrl); {} delivered",
            stats.peak_per_second, stats.freq_dropped, stats.delivered
        ),
    )
}
