//! Every expected effect holds on a session where everything happened once,
//! and each broken observation fails exactly the check that guards it: a
//! duplicate, a count that belongs to another event, or a refusal for the
//! wrong reason must not pass. The gift storm's gifts count alike whether
//! they went alone or in a gift batch, but never twice and never not at all.

use super::*;
use crate::im_messages::{GIFT_BATCH_DESC, GiftBatch, GroupStats};
use crate::observe::OutboxRow;
use crate::script::{Expect, Refusal};
use hyapp_api::room::CommandReply;
use outbox_schema::pb;
use std::time::Duration;

const BANNED: Expect = Expect::Refused {
    code: tonic::Code::PermissionDenied,
    reason: "banned",
};

fn row(id: &str, lane: u8, payload: Option<Payload>) -> OutboxRow {
    let event_type = match &payload {
        Some(Payload::RoomCreated(_)) => "RoomCreated",
        Some(Payload::RoomUserJoined(_)) => "RoomUserJoined",
        Some(Payload::RoomGiftSent(_)) => "RoomGiftSent",
        Some(Payload::RoomHeatChanged(_)) => "RoomHeatChanged",
        Some(Payload::RoomUserKicked(_)) => "RoomUserKicked",
        Some(Payload::RoomTreasureOpened(_)) => "RoomTreasureOpened",
        Some(Payload::RoomUserLeft(_)) => "RoomUserLeft",
        _ => "TreasureOpenWakeup",
    };
    OutboxRow {
        event_id: id.into(),
        event_type: event_type.into(),
        lane,
        status: "delivered".into(),
        created_at_ms: 1,
        delivered_at_ms: Some(2),
        next_retry_at_ms: 0,
        envelope: (lane == 0).then(|| pb::RoomOutboxEvent {
            event_id: id.into(),
            event_type: event_type.into(),
            room_id: "demo".into(),
            payload,
            ..Default::default()
        }),
    }
}

fn message(id: &str, to: Option<&str>) -> ImMessage {
    ImMessage {
        to_account: to.map(str::to_string),
        received_at_ms: 3,
        msg_seq: 1,
        event_ids: vec![id.into()],
        gift_batch: None,
        kind: String::new(),
        summary: String::new(),
    }
}

/// A gift batch carrying `ids` (only its `event_id` column matters here).
fn batch(ids: &[&str]) -> ImMessage {
    let rows = ids
        .iter()
        .map(|id| vec![serde_json::Value::from(*id)])
        .collect();
    ImMessage {
        event_ids: ids.iter().map(|id| id.to_string()).collect(),
        gift_batch: Some(GiftBatch {
            fields: vec!["event_id".into()],
            rows,
        }),
        kind: GIFT_BATCH_DESC.into(),
        ..message("", None)
    }
}

/// What the session recorded: its steps, gifts and storm.
struct Session {
    steps: Vec<Step>,
    gifts: Vec<GiftSent>,
    silent: Vec<String>,
    storm: Storm,
}

impl Session {
    fn script(&self) -> Script<'_> {
        Script {
            steps: &self.steps,
            gifts: &self.gifts,
            big_gift_threshold: 1_000,
            kicked: "dave",
            expired: "carol",
            treasure_cleared: true,
            sender_board: "daily_gift_rank",
            im_silent: &self.silent,
            storm: &self.storm,
            im_group_limit: 40,
        }
    }
}

fn step(label: &str, expect: Expect, outcome: Result<CommandReply, Refusal>) -> Step {
    Step {
        label: label.into(),
        expect,
        outcome,
        latency: Duration::from_millis(1),
    }
}

fn refusal(code: tonic::Code, reason: &str) -> Refusal {
    Refusal {
        code,
        reason: reason.into(),
        message: "refused".into(),
    }
}

/// A room created, joined, given a small and a big gift (g1, g2), a heat
/// change (silent), a kick of dave (whose rejoin is refused as banned), a
/// treasure box opened, carol's presence expired and a storm of two small
/// gifts from alice (s1, s2) merged into one gift batch — every effect once.
fn consistent() -> (Session, Observed) {
    let session = Session {
        steps: vec![
            step("CreateRoom", Expect::Accepted, Ok(CommandReply::default())),
            step(
                "JoinRoom dave",
                BANNED,
                Err(refusal(tonic::Code::PermissionDenied, "banned")),
            ),
        ],
        gifts: vec![
            GiftSent {
                sender: "carol".into(),
                total_value: 100,
                event_id: Some("g1".into()),
            },
            GiftSent {
                sender: "carol".into(),
                total_value: 1_500,
                event_id: Some("g2".into()),
            },
            GiftSent {
                sender: "alice".into(),
                total_value: 10,
                event_id: Some("s1".into()),
            },
            GiftSent {
                sender: "alice".into(),
                total_value: 10,
                event_id: Some("s2".into()),
            },
        ],
        silent: vec!["RoomHeatChanged".into()],
        storm: Storm {
            sent: 2,
            concurrency: 2,
            unit_value: 10,
            event_ids: vec!["s1".into(), "s2".into()],
            ..Storm::default()
        },
    };
    let gift = |value| {
        Some(Payload::RoomGiftSent(pb::RoomGiftSent {
            total_value: value,
            ..Default::default()
        }))
    };
    let observed = Observed {
        outbox: vec![
            row(
                "c",
                0,
                Some(Payload::RoomCreated(pb::RoomCreated::default())),
            ),
            row(
                "j",
                0,
                Some(Payload::RoomUserJoined(pb::RoomUserJoined::default())),
            ),
            row("g1", 0, gift(100)),
            row("g2", 0, gift(1_500)),
            row(
                "h",
                0,
                Some(Payload::RoomHeatChanged(pb::RoomHeatChanged::default())),
            ),
            row(
                "k",
                0,
                Some(Payload::RoomUserKicked(pb::RoomUserKicked {
                    target_id: "dave".into(),
                    ..Default::default()
                })),
            ),
            row("w", 1, None),
            row(
                "t",
                0,
                Some(Payload::RoomTreasureOpened(
                    pb::RoomTreasureOpened::default(),
                )),
            ),
            row(
                "l",
                0,
                Some(Payload::RoomUserLeft(pb::RoomUserLeft {
                    user_id: "carol".into(),
                    reason: LeaveReason::PresenceExpired as i32,
                })),
            ),
            row("s1", 0, gift(10)),
            row("s2", 0, gift(10)),
        ],
        leaderboard: vec![
            ("daily_gift_rank".into(), "carol".into(), 1_600),
            ("daily_gift_rank".into(), "alice".into(), 20),
        ],
        broadcasts: vec![(
            "g2".into(),
            "carol".into(),
            1_500,
            "delivered".into(),
            Some(4),
        )],
        notices: vec![(
            "k".into(),
            "dave".into(),
            "room_kicked".into(),
            "delivered".into(),
            Some(4),
        )],
        room_messages: ["j", "g1", "g2", "k", "t", "l"]
            .iter()
            .map(|id| message(id, None))
            .chain([batch(&["s1", "s2"])])
            .collect(),
        broadcast_messages: vec![message("g2", None)],
        c2c_messages: vec![message("k", Some("dave"))],
        removed_members: vec!["dave".into()],
        room_group_exists: true,
        room_group_stats: Some(GroupStats {
            delivered: 7,
            freq_dropped: 0,
            peak_per_second: 7,
        }),
        ..Observed::default()
    };
    (session, observed)
}

fn failed(session: &Session, observed: &Observed) -> Vec<&'static str> {
    evaluate(&session.script(), observed)
        .into_iter()
        .filter(|check| !check.ok)
        .map(|check| check.name)
        .collect()
}

#[test]
fn a_session_where_everything_happened_once_passes() {
    let (session, observed) = consistent();
    assert_eq!(failed(&session, &observed), Vec::<&str>::new());
}

/// Breaks one effect of the consistent session.
type Breaker = Box<dyn Fn(&mut Session, &mut Observed)>;

#[test]
fn each_broken_effect_fails_exactly_its_check() {
    let cases: Vec<(&str, &str, Breaker)> = vec![
        (
            "the banned rejoin refused as UNAVAILABLE",
            COMMANDS,
            Box::new(|session, _| {
                session.steps[1].outcome = Err(refusal(tonic::Code::Unavailable, ""));
            }),
        ),
        (
            "the banned rejoin refused for another reason",
            COMMANDS,
            Box::new(|session, _| {
                session.steps[1].outcome =
                    Err(refusal(tonic::Code::PermissionDenied, "permission_denied"));
            }),
        ),
        (
            "the banned rejoin accepted",
            COMMANDS,
            Box::new(|session, _| session.steps[1].outcome = Ok(CommandReply::default())),
        ),
        (
            "an event not yet published",
            PUBLISHED,
            Box::new(|_, observed| observed.outbox[1].status = "retryable".into()),
        ),
        (
            "a room event messaged twice",
            ROOM_MESSAGES,
            Box::new(|_, observed| observed.room_messages.push(message("j", None))),
        ),
        (
            "a room event never messaged, another twice",
            ROOM_MESSAGES,
            Box::new(|_, observed| observed.room_messages[0] = message("g1", None)),
        ),
        (
            "a silent event messaged",
            ROOM_MESSAGES,
            Box::new(|_, observed| observed.room_messages.push(message("h", None))),
        ),
        (
            "a storm gift refused",
            COMMANDS,
            Box::new(|session, _| {
                session
                    .storm
                    .refusals
                    .push("SendGift alice → bob star 1×10 → Unavailable".into());
            }),
        ),
        (
            "a storm gift carried by two batches",
            ROOM_MESSAGES,
            Box::new(|_, observed| observed.room_messages.push(batch(&["s2"]))),
        ),
        (
            "a storm gift in a batch and sent alone",
            ROOM_MESSAGES,
            Box::new(|_, observed| observed.room_messages.push(message("s1", None))),
        ),
        (
            "a storm gift in no message",
            ROOM_MESSAGES,
            Box::new(|_, observed| {
                *observed.room_messages.last_mut().unwrap() = batch(&["s1"]);
            }),
        ),
        (
            "every storm gift sent alone, none merged",
            GIFT_BATCHES,
            Box::new(|_, observed| {
                observed.room_messages.pop();
                observed.room_messages.push(message("s1", None));
                observed.room_messages.push(message("s2", None));
            }),
        ),
        (
            "the kick carried by a gift batch",
            GIFT_BATCHES,
            Box::new(|_, observed| {
                observed.room_messages.retain(|m| m.event_ids != ["k"]);
                *observed.room_messages.last_mut().unwrap() = batch(&["s1", "s2", "k"]);
            }),
        ),
        (
            "a gift batch that cannot be read",
            GIFT_BATCHES,
            Box::new(|_, observed| {
                observed.room_messages.push(ImMessage {
                    event_ids: Vec::new(),
                    gift_batch: None,
                    ..batch(&[])
                });
            }),
        ),
        (
            "a second over the room group's limit",
            GROUP_RATE,
            Box::new(|_, observed| {
                if let Some(stats) = observed.room_group_stats.as_mut() {
                    stats.peak_per_second = 41;
                }
            }),
        ),
        (
            "a message refused by the group limit",
            GROUP_RATE,
            Box::new(|_, observed| {
                if let Some(stats) = observed.room_group_stats.as_mut() {
                    stats.freq_dropped = 1;
                }
            }),
        ),
        (
            "the fake IM's group counters unreadable",
            GROUP_RATE,
            Box::new(|_, observed| observed.room_group_stats = None),
        ),
        (
            "the kicked user still in the group",
            REMOVED,
            Box::new(|_, observed| observed.removed_members.clear()),
        ),
        (
            "a leaderboard that missed a gift",
            LEADERBOARD,
            Box::new(|_, observed| observed.leaderboard[0].2 = 1_500),
        ),
        (
            "the big gift announced twice",
            BROADCAST,
            Box::new(|_, observed| observed.broadcast_messages.push(message("g2", None))),
        ),
        (
            "an announcement of the small gift instead of the big one",
            BROADCAST,
            Box::new(|_, observed| observed.broadcast_messages[0] = message("g1", None)),
        ),
        (
            "the small gift announced too",
            BROADCAST,
            Box::new(|_, observed| observed.broadcast_messages.push(message("g1", None))),
        ),
        (
            "the big gift's broadcast row still pending",
            BROADCAST,
            Box::new(|_, observed| observed.broadcasts[0].3 = "pending".into()),
        ),
        (
            "a notice row for another event than the kick",
            NOTICE,
            Box::new(|_, observed| observed.notices[0].0 = "t".into()),
        ),
        (
            "a private message to the kicked user for another event",
            NOTICE,
            Box::new(|_, observed| observed.c2c_messages[0] = message("t", Some("dave"))),
        ),
        (
            "the kick notice sent twice",
            NOTICE,
            Box::new(|_, observed| observed.c2c_messages.push(message("k", Some("dave")))),
        ),
        (
            "the treasure box never opened",
            TREASURE,
            Box::new(|_, observed| {
                observed.outbox.retain(|row| row.event_id != "t");
                observed
                    .room_messages
                    .retain(|message| message.event_ids != ["t"]);
            }),
        ),
        (
            "carol left for another reason",
            PRESENCE,
            Box::new(|_, observed| {
                observed
                    .outbox
                    .iter_mut()
                    .find(|row| row.event_id == "l")
                    .unwrap()
                    .envelope
                    .as_mut()
                    .unwrap()
                    .payload = Some(Payload::RoomUserLeft(pb::RoomUserLeft {
                    user_id: "carol".into(),
                    reason: LeaveReason::Voluntary as i32,
                }));
            }),
        ),
    ];
    let names: Vec<&str> = cases.iter().map(|(_, name, _)| *name).collect();
    for (label, name, break_it) in cases {
        let (mut session, mut observed) = consistent();
        break_it(&mut session, &mut observed);
        assert_eq!(failed(&session, &observed), vec![name], "{label}");
    }
    let (session, observed) = consistent();
    for check in evaluate(&session.script(), &observed) {
        assert!(
            names.contains(&check.name),
            "no broken case for `{}`",
            check.name
        );
    }
}
