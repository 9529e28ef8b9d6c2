//! The expected effects of the scripted session, evaluated against what was
//! observed. The demo polls until all hold or a deadline passes; the report
//! prints each with the evidence (or what is missing and where to look).

use crate::observe::Observed;
use crate::script::{GiftSent, Step};
use outbox_schema::pb::LeaveReason;
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
    let mut checks = Vec::new();
    let unexpected: Vec<&str> = script
        .steps
        .iter()
        .filter(|step| !step.as_expected())
        .map(|step| step.label.as_str())
        .collect();
    checks.push(check(
        "room-service answered every command as expected",
        unexpected.is_empty(),
        if unexpected.is_empty() {
            format!("{} commands", script.steps.len())
        } else {
            format!("unexpected outcome: {}", unexpected.join("; "))
        },
    ));

    let room_rows = observed.outbox.iter().filter(|row| row.lane == 0).count();
    let delivered = observed
        .outbox
        .iter()
        .filter(|row| row.lane == 0 && row.status == "delivered")
        .count();
    checks.push(check(
        "outbox-relay published every room event",
        room_rows > 0 && delivered == room_rows,
        format!("{delivered}/{room_rows} room_outbox rows delivered to hyapp_room_outbox"),
    ));

    let (wanted, silent) = im_events(observed, script.im_silent);
    let seen: BTreeSet<&str> = observed
        .room_messages
        .iter()
        .filter_map(|message| message.event_id.as_deref())
        .collect();
    let got = wanted.iter().filter(|id| seen.contains(*id)).count();
    let leaked = silent.iter().filter(|id| seen.contains(*id)).count();
    checks.push(check(
        "im-bridge: one room group message per event",
        !wanted.is_empty() && got == wanted.len() && leaked == 0 && observed.room_group_exists,
        format!(
            "{got}/{} events in the IM group; {leaked}/{} silent events ({}) messaged; group exists: {}",
            wanted.len(),
            silent.len(),
            script.im_silent.join(", "),
            observed.room_group_exists
        ),
    ));
    let removed = observed
        .removed_members
        .iter()
        .any(|member| member == script.kicked);
    checks.push(check(
        "im-bridge: kicked user removed from the IM group",
        removed,
        format!("removed_members = {:?}", observed.removed_members),
    ));

    let expected = expected_sender_totals(script.gifts);
    let board: BTreeMap<String, u64> = observed
        .leaderboard
        .iter()
        .filter(|(activity, _, _)| activity == script.sender_board)
        .map(|(_, user, score)| (user.clone(), *score))
        .collect();
    checks.push(check(
        "activity-consumer: leaderboard equals the gifts sent",
        !expected.is_empty() && board == expected,
        format!(
            "{}: expected {expected:?}, found {board:?}",
            script.sender_board
        ),
    ));

    let big: Vec<&GiftSent> = script
        .gifts
        .iter()
        .filter(|gift| gift.total_value >= script.big_gift_threshold)
        .collect();
    let broadcast_rows = big
        .iter()
        .filter(|gift| {
            observed
                .broadcasts
                .iter()
                .any(|(event_id, _, _, status, _)| {
                    Some(event_id) == gift.event_id.as_ref() && status == "delivered"
                })
        })
        .count();
    let broadcast_messages = observed.broadcast_messages.len();
    checks.push(check(
        "activity-consumer: big gift broadcast to the global group",
        !big.is_empty() && broadcast_rows == big.len() && broadcast_messages >= big.len(),
        format!(
            "{} big gift(s) ≥ {}; {broadcast_rows} delivered activity_broadcasts row(s); {broadcast_messages} global group message(s)",
            big.len(),
            script.big_gift_threshold
        ),
    ));

    let notice_rows = observed
        .notices
        .iter()
        .filter(|(_, recipient, _, _, _)| recipient == script.kicked)
        .count();
    let c2c = observed
        .c2c_messages
        .iter()
        .filter(|message| message.to_account.as_deref() == Some(script.kicked))
        .count();
    checks.push(check(
        "notice-consumer: kicked user gets a private notice",
        notice_rows > 0 && c2c > 0,
        format!(
            "{notice_rows} notice_delivery_events row(s) and {c2c} C2C message(s) for {}",
            script.kicked
        ),
    ));

    let wakeup = observed.outbox.iter().find(|row| row.lane == 1);
    let opened = observed
        .outbox
        .iter()
        .any(|row| row.event_type == "RoomTreasureOpened");
    checks.push(check(
        "treasure box opened after its countdown",
        opened && script.treasure_cleared,
        format!(
            "wake-up row: {}; RoomTreasureOpened in outbox: {opened}; GetRoom box cleared: {}",
            wakeup.map_or("none".to_string(), |row| row.status.clone()),
            script.treasure_cleared
        ),
    ));

    let expired = observed.outbox.iter().any(|row| {
        row.user_left().is_some_and(|left| {
            left.user_id == script.expired && left.reason == LeaveReason::PresenceExpired as i32
        })
    });
    checks.push(check(
        "presence: silent user left with PresenceExpired",
        expired,
        format!(
            "RoomUserLeft{{{}, PresenceExpired}} in outbox: {expired}",
            script.expired
        ),
    ));
    checks
}
