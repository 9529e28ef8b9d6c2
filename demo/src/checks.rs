//! The expected effects of the scripted session, evaluated against what was
//! observed. The demo polls until all hold or a deadline passes; the report
//! prints each with the evidence (or what is missing and where to look).
//!
//! Effects are matched by event id: each room event is represented exactly
//! once in the room's IM group, alone or in a gift batch ([`im`], with the
//! storm's batches and the group's per-second limit), each big gift has one
//! delivered broadcast row and one global-group message carrying its event
//! id, the kick one notice row and one private message carrying the kick's
//! event id; an expected refusal must carry exactly the expected gRPC code
//! and reason.

mod im;

use crate::im_messages::ImMessage;
use crate::observe::Observed;
use crate::script::{GiftSent, Step, Storm};
use outbox_schema::pb::LeaveReason;
use outbox_schema::pb::room_outbox_event::Payload;
use std::collections::{BTreeMap, BTreeSet};

/// Group names in `consumer_dedup`.
pub const GROUP_IM: &str = outbox_schema::names::GROUP_IM_BRIDGE;
/// The activity consumer's group.
pub const GROUP_ACTIVITY: &str = outbox_schema::names::GROUP_ACTIVITY;
/// The notice consumer's group.
pub const GROUP_NOTICE: &str = outbox_schema::names::GROUP_NOTICE;

/// What the script did, as far as expectations are concerned.
#[derive(Debug)]
pub struct Script<'a> {
    /// Commands and replies.
    pub steps: &'a [Step],
    /// Accepted gifts.
    pub gifts: &'a [GiftSent],
    /// Gifts at or above this total are broadcast.
    pub big_gift_threshold: u64,
    /// The kicked user.
    pub kicked: &'a str,
    /// The user whose heartbeat lapses.
    pub expired: &'a str,
    /// GetRoom showed the treasure box cleared after its countdown.
    pub treasure_cleared: bool,
    /// The activity whose board ranks senders over every gift.
    pub sender_board: &'a str,
    /// Event types im-bridge acknowledges without a group message.
    pub im_silent: &'a [String],
    /// The gift storm.
    pub storm: &'a Storm,
    /// Most messages the room's IM group may get in one second (Tencent's 40).
    pub im_group_limit: u64,
}

/// One expected effect.
#[derive(Debug, Clone)]
pub struct Check {
    /// Short name.
    pub name: &'static str,
    /// Observed?
    pub ok: bool,
    /// Evidence or what is missing.
    pub detail: String,
}

/// A check made outside [`evaluate`].
pub fn named(name: &'static str, ok: bool, detail: impl Into<String>) -> Check {
    check(name, ok, detail)
}

fn check(name: &'static str, ok: bool, detail: impl Into<String>) -> Check {
    Check {
        name,
        ok,
        detail: detail.into(),
    }
}

/// Expected per-sender totals of the sender board.
pub fn expected_sender_totals(gifts: &[GiftSent]) -> BTreeMap<String, u64> {
    let mut totals = BTreeMap::new();
    for gift in gifts {
        *totals.entry(gift.sender.clone()).or_insert(0) += gift.total_value;
    }
    totals
}

/// Evaluates every expectation.
pub fn evaluate(script: &Script<'_>, observed: &Observed) -> Vec<Check> {
    vec![
        commands(script),
        published(observed),
        im::room_messages(script, observed),
        im::gift_batches(script, observed),
        im::group_rate(script, observed),
        removed_from_group(script, observed),
        leaderboard(script, observed),
        broadcasts(script, observed),
        kick_notice(script, observed),
        treasure(script, observed),
        presence(script, observed),
    ]
}

/// Check names, for the tests.
pub const COMMANDS: &str = "room-service answered every command as expected";
/// See [`evaluate`].
pub const PUBLISHED: &str = "outbox-relay published every room event";
/// See [`evaluate`].
pub const ROOM_MESSAGES: &str =
    "im-bridge: each room event represented once in the room group (alone or in a gift batch)";
/// See [`evaluate`].
pub const GIFT_BATCHES: &str = "im-bridge: the gift storm's gifts were merged into gift batches";
/// See [`evaluate`].
pub const GROUP_RATE: &str =
    "fake IM: the room group stayed within its messages-per-second limit, none refused";
/// See [`evaluate`].
pub const REMOVED: &str = "im-bridge: kicked user removed from the IM group";
/// See [`evaluate`].
pub const LEADERBOARD: &str = "activity-consumer: leaderboard equals the gifts sent";
/// See [`evaluate`].
pub const BROADCAST: &str = "activity-consumer: big gift broadcast to the global group";
/// See [`evaluate`].
pub const NOTICE: &str = "notice-consumer: kicked user gets a private notice";
/// See [`evaluate`].
pub const TREASURE: &str = "treasure box opened after its countdown";
/// See [`evaluate`].
pub const PRESENCE: &str = "presence: silent user left with PresenceExpired";

fn commands(script: &Script<'_>) -> Check {
    let unexpected: Vec<String> = script
        .steps
        .iter()
        .filter(|step| !step.as_expected())
        .map(|step| match &step.outcome {
            Ok(_) => format!("{} → accepted", step.label),
            Err(refusal) => format!("{} → {refusal}", step.label),
        })
        .chain(script.storm.refusals.iter().cloned())
        .collect();
    check(
        COMMANDS,
        !script.steps.is_empty() && unexpected.is_empty(),
        if unexpected.is_empty() {
            format!(
                "{} commands and {} storm gifts",
                script.steps.len(),
                script.storm.sent
            )
        } else {
            format!("unexpected outcome: {}", unexpected.join("; "))
        },
    )
}

fn published(observed: &Observed) -> Check {
    let room_rows = observed.outbox.iter().filter(|row| row.lane == 0).count();
    let delivered = observed
        .outbox
        .iter()
        .filter(|row| row.lane == 0 && row.status == "delivered")
        .count();
    check(
        PUBLISHED,
        room_rows > 0 && delivered == room_rows,
        format!("{delivered}/{room_rows} room_outbox rows delivered to hyapp_room_outbox"),
    )
}

/// Messages per event id.
fn per_event<'m>(messages: impl Iterator<Item = &'m ImMessage>) -> BTreeMap<&'m str, usize> {
    let mut counts = BTreeMap::new();
    for message in messages {
        for id in &message.event_ids {
            *counts.entry(id.as_str()).or_insert(0) += 1;
        }
    }
    counts
}

fn removed_from_group(script: &Script<'_>, observed: &Observed) -> Check {
    let removed = observed
        .removed_members
        .iter()
        .any(|member| member == script.kicked);
    check(
        REMOVED,
        removed,
        format!("removed_members = {:?}", observed.removed_members),
    )
}

fn leaderboard(script: &Script<'_>, observed: &Observed) -> Check {
    let expected = expected_sender_totals(script.gifts);
    let board: BTreeMap<String, u64> = observed
        .leaderboard
        .iter()
        .filter(|(activity, _, _)| activity == script.sender_board)
        .map(|(_, user, score)| (user.clone(), *score))
        .collect();
    check(
        LEADERBOARD,
        !expected.is_empty() && board == expected,
        format!(
            "{}: expected {expected:?}, found {board:?}",
            script.sender_board
        ),
    )
}

/// Each big gift (by its event id): one delivered `activity_broadcasts` row
/// and one global-group message; no row or message for any other event of
/// the room.
fn broadcasts(script: &Script<'_>, observed: &Observed) -> Check {
    let big: Vec<&GiftSent> = script
        .gifts
        .iter()
        .filter(|gift| gift.total_value >= script.big_gift_threshold)
        .collect();
    let big_ids: BTreeSet<&str> = big
        .iter()
        .filter_map(|gift| gift.event_id.as_deref())
        .collect();
    let room_events: BTreeSet<&str> = observed
        .outbox
        .iter()
        .map(|row| row.event_id.as_str())
        .collect();
    // The global group is shared; only this room's events are ours.
    let messages = per_event(observed.broadcast_messages.iter().filter(|m| {
        m.event_ids
            .iter()
            .any(|id| room_events.contains(id.as_str()))
    }));
    let mut wrong = Vec::new();
    if big_ids.len() != big.len() {
        wrong.push(format!(
            "{} big gift(s) without an event id",
            big.len() - big_ids.len()
        ));
    }
    for id in &big_ids {
        let rows: Vec<&str> = observed
            .broadcasts
            .iter()
            .filter(|row| row.0 == *id)
            .map(|row| row.3.as_str())
            .collect();
        if rows != ["delivered"] {
            wrong.push(format!("{id}: rows {rows:?}"));
        }
        let times = messages.get(id).copied().unwrap_or(0);
        if times != 1 {
            wrong.push(format!("{id}: {times} messages"));
        }
    }
    for row in observed
        .broadcasts
        .iter()
        .filter(|row| !big_ids.contains(row.0.as_str()))
    {
        wrong.push(format!(
            "{}: broadcast row for a gift that is not big",
            row.0
        ));
    }
    for id in messages.keys().filter(|id| !big_ids.contains(*id)) {
        wrong.push(format!(
            "{id}: broadcast message for an event that is not a big gift"
        ));
    }
    check(
        BROADCAST,
        !big.is_empty() && wrong.is_empty(),
        format!(
            "{} big gift(s) ≥ {}; {} activity_broadcasts row(s); {} global group message(s) for this room{}",
            big.len(),
            script.big_gift_threshold,
            observed.broadcasts.len(),
            messages.values().sum::<usize>(),
            if wrong.is_empty() {
                String::new()
            } else {
                format!(" (wrong: {})", wrong.join("; "))
            }
        ),
    )
}

/// The kick's event (RoomUserKicked of the kicked user): one delivered
/// notice row and one private message to the kicked user, both carrying it.
fn kick_notice(script: &Script<'_>, observed: &Observed) -> Check {
    let kicks: Vec<&str> = observed
        .outbox
        .iter()
        .filter(|row| {
            matches!(
                row.envelope.as_ref().and_then(|e| e.payload.as_ref()),
                Some(Payload::RoomUserKicked(kicked)) if kicked.target_id == script.kicked
            )
        })
        .map(|row| row.event_id.as_str())
        .collect();
    let mut wrong = Vec::new();
    if kicks.len() != 1 {
        wrong.push(format!(
            "{} RoomUserKicked events in the outbox",
            kicks.len()
        ));
    }
    for kick in &kicks {
        let rows: Vec<&str> = observed
            .notices
            .iter()
            .filter(|row| row.0 == *kick && row.1 == script.kicked)
            .map(|row| row.3.as_str())
            .collect();
        if rows != ["delivered"] {
            wrong.push(format!("{kick}: notice rows {rows:?}"));
        }
        let c2c = observed
            .c2c_messages
            .iter()
            .filter(|message| {
                message.to_account.as_deref() == Some(script.kicked)
                    && message.event_ids.iter().any(|id| id == kick)
            })
            .count();
        if c2c != 1 {
            wrong.push(format!("{kick}: {c2c} private messages"));
        }
    }
    check(
        NOTICE,
        wrong.is_empty(),
        format!(
            "kick event {kicks:?} → {}: {}",
            script.kicked,
            if wrong.is_empty() {
                "one delivered notice row, one C2C message".to_string()
            } else {
                wrong.join("; ")
            }
        ),
    )
}

fn treasure(script: &Script<'_>, observed: &Observed) -> Check {
    let wakeup = observed.outbox.iter().find(|row| row.lane == 1);
    let opened = observed
        .outbox
        .iter()
        .any(|row| row.event_type == "RoomTreasureOpened");
    check(
        TREASURE,
        opened && script.treasure_cleared,
        format!(
            "wake-up row: {}; RoomTreasureOpened in outbox: {opened}; GetRoom box cleared: {}",
            wakeup.map_or("none".to_string(), |row| row.status.clone()),
            script.treasure_cleared
        ),
    )
}

fn presence(script: &Script<'_>, observed: &Observed) -> Check {
    let expired = observed.outbox.iter().any(|row| {
        row.user_left().is_some_and(|left| {
            left.user_id == script.expired && left.reason == LeaveReason::PresenceExpired as i32
        })
    });
    check(
        PRESENCE,
        expired,
        format!(
            "RoomUserLeft{{{}, PresenceExpired}} in outbox: {expired}",
            script.expired
        ),
    )
}

#[cfg(test)]
mod tests;
