//! Each rule passes on a consistent ledger, and each broken ledger trips
//! exactly the one rule whose promise it breaks (naming an offender): a rule
//! that became a no-op, or one that fires on what another rule guards, fails
//! here. The settle logic is tested the same way: a first all-pass snapshot
//! alone never settles.

use super::settle::{Next, SETTLED, Settler, fingerprint};
use super::*;
use crate::im_messages::ImRecord;
use crate::observe::{LogEntry, OutboxEvent, WalletTotals};
use outbox_schema::pb;
use outbox_schema::pb::room_outbox_event::Payload;
use std::time::{Duration, Instant};

fn expectations() -> Expectations {
    Expectations {
        im_silent: vec!["RoomHeatChanged".into()],
        room_group_prefix: "room_".into(),
        broadcast_group: "global".into(),
        big_gift_threshold: 1_000,
        dedup_groups: vec!["im".into(), "activity".into()],
        activity_group: "activity".into(),
        im_bridge_group: "im".into(),
        min_acked_per_room: 1,
        im_group_limit: 40,
    }
}

fn event(id: &str, room: &str, seq: u64, command: &str, payload: Payload) -> OutboxEvent {
    OutboxEvent {
        event_id: id.into(),
        room_id: room.into(),
        lane: 0,
        seq,
        event_type: match &payload {
            Payload::RoomGiftSent(_) => "RoomGiftSent",
            Payload::RoomUserKicked(_) => "RoomUserKicked",
            Payload::RoomHeatChanged(_) => "RoomHeatChanged",
            _ => "RoomUserJoined",
        }
        .into(),
        status: "delivered".into(),
        due_ms: 0,
        command_id: command.into(),
        payload: Some(payload),
    }
}

fn gift(value: u64, count: u32) -> Payload {
    Payload::RoomGiftSent(pb::RoomGiftSent {
        total_value: value,
        count,
        ..Default::default()
    })
}

fn group_message(id: &str, group: &str) -> ImRecord {
    ImRecord {
        group_id: Some(group.into()),
        to_account: None,
        event_ids: vec![id.into()],
        gift_batch: false,
        received_at_ms: 0,
    }
}

fn gift_batch(ids: &[&str], group: &str) -> ImRecord {
    ImRecord {
        event_ids: ids.iter().map(|id| id.to_string()).collect(),
        gift_batch: true,
        ..group_message("", group)
    }
}

/// r2's two gifts (e4, e5), sent alone in the consistent ledger, sent
/// instead as the messages `sent` (in its place, in its order).
fn r2_gifts_sent_as(seen: &mut Observation, sent: Vec<ImRecord>) {
    let first = seen
        .im_messages
        .iter()
        .position(|m| m.event_ids == ["e4"])
        .expect("e4's message");
    seen.im_messages.splice(first..first + 2, sent);
}

/// Messages in `group` that name no event, received at `times_ms`.
fn messages_at(group: &str, times_ms: impl Iterator<Item = i64>) -> Vec<ImRecord> {
    times_ms
        .map(|received_at_ms| ImRecord {
            event_ids: Vec::new(),
            received_at_ms,
            ..group_message("", group)
        })
        .collect()
}

/// Two rooms, every event delivered and applied:
/// - r1: a join (c1 → e1), a big gift (c2 → e2) and a kick (c3 → e3);
/// - r2: two small gifts of equal value (c5 → e4, c6 → e5) and a heat
///   change (c7 → e6, IM-silent).
fn consistent() -> (Vec<CommandRecord>, Observation) {
    let kick = Payload::RoomUserKicked(pb::RoomUserKicked {
        target_id: "bob".into(),
        ..Default::default()
    });
    let join = Payload::RoomUserJoined(pb::RoomUserJoined {
        user_id: "bob".into(),
    });
    let heat = Payload::RoomHeatChanged(pb::RoomHeatChanged::default());
    let mut seen = Observation {
        outbox: vec![
            event("e1", "r1", 1, "c1", join),
            event("e2", "r1", 2, "c2", gift(1_500, 3)),
            event("e3", "r1", 3, "c3", kick),
            event("e4", "r2", 1, "c5", gift(200, 1)),
            event("e5", "r2", 2, "c6", gift(200, 1)),
            event("e6", "r2", 3, "c7", heat),
        ],
        ..Observation::default()
    };
    for event in &seen.outbox {
        seen.log.insert(
            event.command_id.clone(),
            LogEntry {
                room_id: event.room_id.clone(),
                version: event.seq,
                event_ids: vec![event.event_id.clone()],
                reply_version: event.seq,
            },
        );
    }
    seen.rooms.insert("r1".into(), (3, 3));
    seen.rooms.insert("r2".into(), (3, 3));
    let dedup = |group: &str, id: &str| (group.to_string(), id.to_string());
    seen.dedup = vec![
        dedup("im", "e1"),
        dedup("activity", "e2"),
        dedup("im", "e2"),
        dedup("im", "e3"),
        dedup("activity", "e4"),
        dedup("im", "e4"),
        dedup("activity", "e5"),
        dedup("im", "e5"),
        dedup("im", "e6"),
    ];
    seen.contributions.insert("r1".into(), (1_500, 3));
    seen.contributions.insert("r2".into(), (400, 2));
    seen.broadcasts = vec![("e2".into(), "delivered".into())];
    seen.notices = vec![("e3".into(), "bob".into(), "r1".into(), "delivered".into())];
    seen.sagas = vec![
        ("c2".into(), "committed".into(), 1_500),
        ("c5".into(), "committed".into(), 200),
        ("c6".into(), "committed".into(), 200),
        ("c9".into(), "compensated".into(), 70),
    ];
    seen.im_messages = vec![
        group_message("e1", "room_r1"),
        group_message("e2", "room_r1"),
        group_message("e2", "global"),
        group_message("e3", "room_r1"),
        ImRecord {
            group_id: None,
            to_account: Some("bob".into()),
            ..group_message("e3", "")
        },
        group_message("e4", "room_r2"),
        group_message("e5", "room_r2"),
    ];
    seen.wallet = WalletTotals {
        debited: 1_970,
        refunded: 70,
        debit_replays: 0,
    };
    seen.dead_letter_topics = vec![("g.dlq".into(), 0)];
    (consistent_commands(), seen)
}

/// The workload's ledger of [`consistent`]: c1 and c5 acknowledged, c2 and
/// c6 unknown (both committed), c4 rejected.
fn consistent_commands() -> Vec<CommandRecord> {
    let record = |id: &str, room: &str, outcome| CommandRecord {
        command_id: id.into(),
        room_id: room.into(),
        kind: "join".into(),
        outcome,
        detail: String::new(),
        attempts: 1,
        gift_value: 0,
        event_ids: vec![],
        sent_to: vec!["room-service-2".into()],
        served_by: "room-service".into(),
        reply_version: 0,
        started_ms: 0,
        answered_ms: 0,
        retry_info_waits: 0,
    };
    // c1 and c5 are each their room's first command: version 1.
    vec![
        CommandRecord {
            reply_version: 1,
            ..record("c1", "r1", Outcome::Acked)
        },
        record("c2", "r1", Outcome::Unknown),
        record("c4", "r1", Outcome::Rejected),
        CommandRecord {
            reply_version: 1,
            ..record("c5", "r2", Outcome::Acked)
        },
        record("c6", "r2", Outcome::Unknown),
    ]
}

/// Names of the failed rules, each with at least one offender.
fn failed(commands: &[CommandRecord], seen: &Observation) -> Vec<&'static str> {
    run(commands, seen, &expectations())
        .into_iter()
        .filter(|check| !check.passed)
        .inspect(|check| {
            assert!(
                !check.offenders.is_empty(),
                "{} failed without naming an offender",
                check.name
            );
        })
        .map(|check| check.name)
        .collect()
}

#[test]
fn a_consistent_run_passes_every_rule() {
    let (commands, seen) = consistent();
    assert_eq!(failed(&commands, &seen), Vec::<&str>::new());
}

#[test]
fn events_represented_once_across_singles_and_batches_pass() {
    let (commands, mut seen) = consistent();
    r2_gifts_sent_as(
        &mut seen,
        vec![
            gift_batch(&["e4"], "room_r2"),
            gift_batch(&["e5"], "room_r2"),
        ],
    );
    assert_eq!(failed(&commands, &seen), Vec::<&str>::new(), "two batches");
    r2_gifts_sent_as(&mut seen, vec![gift_batch(&["e4", "e5"], "room_r2")]);
    // r1's big gift in a batch of its own beside r2's singles-turned-batch.
    let big = seen
        .im_messages
        .iter()
        .position(|m| m.event_ids == ["e2"] && m.group_id.as_deref() == Some("room_r1"));
    seen.im_messages[big.expect("e2's message")] = gift_batch(&["e2"], "room_r1");
    assert_eq!(
        failed(&commands, &seen),
        Vec::<&str>::new(),
        "a batch per room"
    );
}

#[test]
fn a_control_event_may_overtake_an_earlier_gift_in_im() {
    let (commands, mut seen) = consistent();
    // r1: join e1, kick e3 sent with priority, then the gift e2 (seq 2) in a batch.
    let in_r1 = |seen: &Observation, id: &str| {
        seen.im_messages
            .iter()
            .position(|m| m.event_ids == [id] && m.group_id.as_deref() == Some("room_r1"))
            .expect("r1's message")
    };
    let gift = in_r1(&seen, "e2");
    seen.im_messages.remove(gift);
    let kick = in_r1(&seen, "e3");
    seen.im_messages
        .insert(kick + 1, gift_batch(&["e2"], "room_r1"));
    assert_eq!(failed(&commands, &seen), Vec::<&str>::new());
}

#[test]
fn forty_messages_in_a_second_and_one_a_second_after_the_first_pass() {
    let (commands, mut seen) = consistent();
    let first = 10_000;
    seen.im_messages
        .extend(messages_at("room_r1", (0..40).map(|i| first + i * 10)));
    seen.im_messages
        .extend(messages_at("room_r1", [first + 1_000].into_iter()));
    assert_eq!(failed(&commands, &seen), Vec::<&str>::new());
}

/// Breaks one promise in a consistent observation or ledger.
type Breaker = Box<dyn Fn(&mut Observation, &mut Vec<CommandRecord>)>;

fn acked(id: &str, room: &str) -> CommandRecord {
    CommandRecord {
        command_id: id.into(),
        room_id: room.into(),
        kind: "join".into(),
        outcome: Outcome::Acked,
        detail: String::new(),
        attempts: 1,
        gift_value: 0,
        event_ids: vec![],
        sent_to: vec!["room-service".into()],
        served_by: "room-service".into(),
        reply_version: 4,
        started_ms: 0,
        answered_ms: 0,
        retry_info_waits: 0,
    }
}

/// `(label, the one rule that must fail, how the ledger is broken)`.
#[test]
fn im_bridge_may_record_a_control_event_before_an_earlier_gift() {
    let (commands, mut seen) = consistent();
    // r1: the kick e3 went out (and was recorded) before the gift e2.
    let position = |seen: &Observation, id: &str| {
        seen.dedup
            .iter()
            .position(|(group, event_id)| group == "im" && event_id == id)
            .expect("im-bridge's record")
    };
    let (gift, kick) = (position(&seen, "e2"), position(&seen, "e3"));
    seen.dedup.swap(gift, kick);
    assert_eq!(failed(&commands, &seen), Vec::<&str>::new());
}

/// Every broken promise with the rule that must catch it.
fn broken_cases() -> Vec<(&'static str, &'static str, Breaker)> {
    let mut cases = broken_ledger_cases();
    cases.extend(broken_effect_cases());
    cases.extend(broken_delivery_cases());
    cases
}

/// Commands, the log, rooms and the outbox.
fn broken_ledger_cases() -> Vec<(&'static str, &'static str, Breaker)> {
    vec![
        (
            "an acknowledged command that is not logged",
            ACKNOWLEDGED,
            Box::new(|_, commands| commands.push(acked("c8", "r1"))),
        ),
        (
            "an acknowledged command logged with other events",
            ACKNOWLEDGED,
            Box::new(|_, commands| commands[0].event_ids = vec!["e9".into()]),
        ),
        (
            "a rejected command that is logged",
            REJECTED,
            Box::new(|_, commands| commands[2].command_id = "c3".into()),
        ),
        (
            "a room where nothing was acknowledged",
            COMMITTED_ENOUGH,
            Box::new(|_, commands| commands[3].outcome = Outcome::Unknown),
        ),
        (
            "no commands at all",
            COMMITTED_ENOUGH,
            Box::new(|_, commands| commands.clear()),
        ),
        (
            "a logged event without its outbox row",
            ATOMIC,
            Box::new(|seen, _| {
                if let Some(entry) = seen.log.get_mut("c1") {
                    entry.event_ids.push("e99".into());
                }
            }),
        ),
        (
            "a room row ahead of its command log",
            ATOMIC,
            Box::new(|seen, _| {
                seen.rooms.insert("r2".into(), (4, 3));
            }),
        ),
        (
            // A stale owner's commit lost its compare-and-set, yet the client
            // was told it succeeded (at the version another instance wrote).
            "a compare-and-set conflict answered as a success",
            ONE_WRITER,
            Box::new(|_, commands| commands[0].reply_version = 2),
        ),
        (
            // Two instances each committed the room's version 1; version 2
            // never existed. (The newest version still matches the room row.)
            "two writers committed the same room version",
            ONE_WRITER,
            Box::new(|seen, _| {
                if let Some(entry) = seen.log.get_mut("c2") {
                    entry.version = 1;
                    entry.reply_version = 1;
                }
            }),
        ),
        (
            "a stored reply at another version than its log row",
            ONE_WRITER,
            Box::new(|seen, _| {
                if let Some(entry) = seen.log.get_mut("c3") {
                    entry.reply_version = 9;
                }
            }),
        ),
        (
            "an event not yet published",
            PUBLISHED,
            Box::new(|seen, _| seen.outbox[0].status = "retryable".into()),
        ),
    ]
}

/// Activity's credits and announcements.
fn broken_effect_cases() -> Vec<(&'static str, &'static str, Breaker)> {
    let mut cases: Vec<(&str, &str, Breaker)> = vec![
        (
            // The totals still match: a duplicate credit of e4 would cover it.
            "a gift lost while an equal one was credited twice",
            ACTIVITY_PER_EVENT,
            Box::new(|seen, _| {
                seen.dedup
                    .retain(|(g, id)| !(g == "activity" && id == "e5"))
            }),
        ),
        (
            "a non-gift event applied by activity",
            ACTIVITY_PER_EVENT,
            Box::new(|seen, _| seen.dedup.insert(0, ("activity".into(), "e1".into()))),
        ),
        (
            "room totals that differ from the gifts",
            ACTIVITY_TOTALS,
            Box::new(|seen, _| {
                seen.contributions.insert("r1".into(), (3_000, 2));
            }),
        ),
        (
            "a big gift announced twice",
            ACTIVITY_TOTALS,
            Box::new(|seen, _| seen.im_messages.insert(3, group_message("e2", "global"))),
        ),
    ];
    cases.extend(broken_im_cases());
    cases
}

/// The IM messages: single, batched, silent, ordered and paced.
fn broken_im_cases() -> Vec<(&'static str, &'static str, Breaker)> {
    vec![
        (
            // Right after the first, so per-room order still holds.
            "a room event sent twice",
            IM_BRIDGE,
            Box::new(|seen, _| seen.im_messages.insert(1, group_message("e1", "room_r1"))),
        ),
        (
            "a room event sent to another room's group",
            IM_BRIDGE,
            Box::new(|seen, _| seen.im_messages[5] = group_message("e4", "room_r1")),
        ),
        (
            "a room event also sent to another room's group",
            IM_BRIDGE,
            Box::new(|seen, _| seen.im_messages.insert(6, group_message("e4", "room_r1"))),
        ),
        (
            "an IM-silent event messaged",
            IM_BRIDGE,
            Box::new(|seen, _| seen.im_messages.push(group_message("e6", "room_r2"))),
        ),
        (
            "a gift carried by two batches",
            IM_BRIDGE,
            Box::new(|seen, _| {
                let twice = vec![
                    gift_batch(&["e4", "e5"], "room_r2"),
                    gift_batch(&["e5"], "room_r2"),
                ];
                r2_gifts_sent_as(seen, twice);
            }),
        ),
        (
            "a gift in no message, single or batch",
            IM_BRIDGE,
            Box::new(|seen, _| r2_gifts_sent_as(seen, vec![gift_batch(&["e4"], "room_r2")])),
        ),
        (
            "a gift carried by a batch and by a single message",
            IM_BRIDGE,
            Box::new(|seen, _| {
                let twice = vec![
                    gift_batch(&["e4", "e5"], "room_r2"),
                    group_message("e5", "room_r2"),
                ];
                r2_gifts_sent_as(seen, twice);
            }),
        ),
        (
            "a gift carried by a batch in another room's group",
            IM_BRIDGE,
            Box::new(|seen, _| {
                let elsewhere = vec![
                    group_message("e4", "room_r2"),
                    gift_batch(&["e5"], "room_r1"),
                ];
                r2_gifts_sent_as(seen, elsewhere);
            }),
        ),
        (
            "a kick carried by a gift batch",
            IM_BRIDGE,
            Box::new(|seen, _| seen.im_messages[3] = gift_batch(&["e3"], "room_r1")),
        ),
        (
            // Each once, but the later batch holds the earlier gift.
            "a room's gifts out of order across batches",
            ORDER,
            Box::new(|seen, _| {
                let reversed = vec![
                    gift_batch(&["e5"], "room_r2"),
                    gift_batch(&["e4"], "room_r2"),
                ];
                r2_gifts_sent_as(seen, reversed);
            }),
        ),
        (
            "41 messages of one group within one second",
            IM_GROUP_RATE,
            Box::new(|seen, _| {
                let crowded = messages_at("room_r1", (0..41).map(|i| 10_000 + i * 20));
                seen.im_messages.extend(crowded);
            }),
        ),
        (
            "messages refused by the fake's group limit",
            IM_GROUP_RATE,
            Box::new(|seen, _| {
                seen.im_freq_dropped = 2;
                seen.im_freq_dropped_by_group.insert("room_r2".into(), 2);
            }),
        ),
    ]
}

/// Notices, consumer order, sagas, dead letters and the fakes' records.
fn broken_delivery_cases() -> Vec<(&'static str, &'static str, Breaker)> {
    vec![
        (
            "a notice left pending",
            NOTICES,
            Box::new(|seen, _| seen.notices[0].3 = "pending".into()),
        ),
        (
            "a consumer that applied a room's events out of order",
            ORDER,
            Box::new(|seen, _| seen.dedup.swap(0, 3)),
        ),
        (
            "im-bridge recorded a room's gifts out of order",
            ORDER,
            // im e4 and im e5, both gifts of r2.
            Box::new(|seen, _| seen.dedup.swap(5, 7)),
        ),
        (
            "a refund the ledger does not explain",
            MONEY,
            Box::new(|seen, _| seen.wallet.refunded = 0),
        ),
        (
            "a saga left between debit and commit",
            MONEY,
            Box::new(|seen, _| seen.sagas[3].1 = "compensating".into()),
        ),
        (
            "a saga failed without its refund",
            MONEY,
            Box::new(|seen, _| seen.sagas[3].1 = "failed".into()),
        ),
        (
            "committed sagas that differ from the committed gifts",
            MONEY,
            Box::new(|seen, _| seen.sagas[1].2 = 150),
        ),
        (
            "messages in a dead-letter topic",
            DEAD_LETTERS,
            Box::new(|seen, _| seen.dead_letter_topics[0].1 = 2),
        ),
        (
            "an outbox row the relay gave up on",
            DEAD_LETTERS,
            Box::new(|seen, _| seen.outbox[0].status = "failed".into()),
        ),
        (
            "a fake IM that forgot messages",
            IM_RECORD,
            Box::new(|seen, _| seen.im_forgotten = 3),
        ),
    ]
}

#[test]
fn each_broken_promise_trips_exactly_its_rule() {
    let (commands, base) = consistent();
    for (label, rule, break_it) in broken_cases() {
        let mut seen = base.clone();
        let mut broken = commands.clone();
        break_it(&mut seen, &mut broken);
        assert_eq!(failed(&broken, &seen), vec![rule], "{label}");
    }
}

#[test]
fn every_rule_has_a_broken_case() {
    let (commands, seen) = consistent();
    let covered: Vec<&str> = broken_cases().iter().map(|(_, rule, _)| *rule).collect();
    for check in run(&commands, &seen, &expectations()) {
        assert!(
            covered.contains(&check.name),
            "no broken ledger trips `{}`",
            check.name
        );
    }
}

#[test]
fn more_acknowledged_commands_per_room_can_be_required() {
    let (commands, seen) = consistent();
    let expect = Expectations {
        min_acked_per_room: 2,
        ..expectations()
    };
    let failures: Vec<&str> = run(&commands, &seen, &expect)
        .into_iter()
        .filter(|check| !check.passed)
        .map(|check| check.name)
        .collect();
    assert_eq!(failures, vec![COMMITTED_ENOUGH]);
}

#[test]
fn gaps_are_described() {
    assert_eq!(gap_in(vec![1, 2, 3], 3), None);
    assert!(gap_in(vec![1, 3], 3).is_some());
    assert!(gap_in(vec![1, 2, 2], 2).is_some());
    assert!(gap_in(vec![1, 2], 3).is_some());
}

// ------------------------------------------------------------------ settling

const POLL: Duration = Duration::from_secs(3);
const QUIET: Duration = Duration::from_secs(10);

fn settled(next: Next) -> Check {
    match next {
        Next::Done(check) => {
            assert_eq!(check.name, SETTLED);
            check
        }
        other => panic!("expected a verdict, got {other:?}"),
    }
}

#[test]
fn a_first_all_pass_snapshot_is_confirmed_after_a_quiet_period() {
    let (_, seen) = consistent();
    let start = Instant::now();
    let mut settler = Settler::new(start + Duration::from_secs(60), POLL, QUIET);
    // A settler that stopped at the first pass would return a verdict here.
    assert!(matches!(
        settler.after(true, fingerprint(&seen), start),
        Next::Confirm(QUIET)
    ));
    let check = settled(settler.after(true, fingerprint(&seen), start + QUIET));
    assert!(check.passed, "{check:?}");
}

#[test]
fn a_confirmation_that_fails_resumes_polling_and_fails_at_the_deadline() {
    let (_, seen) = consistent();
    let start = Instant::now();
    let deadline = start + Duration::from_secs(30);
    let mut settler = Settler::new(deadline, POLL, QUIET);
    assert!(matches!(
        settler.after(true, fingerprint(&seen), start),
        Next::Confirm(_)
    ));
    // A late duplicate broke a rule during the quiet period.
    assert!(matches!(
        settler.after(false, fingerprint(&seen), start + QUIET),
        Next::Wait(POLL)
    ));
    let check = settled(settler.after(false, fingerprint(&seen), deadline));
    assert!(!check.passed);
    assert!(!check.offenders.is_empty());
}

#[test]
fn a_ledger_that_moved_during_the_quiet_period_is_confirmed_again() {
    let (_, seen) = consistent();
    let mut moved = seen.clone();
    moved.im_messages.push(group_message("e1", "room_r1"));
    let start = Instant::now();
    let deadline = start + Duration::from_secs(15);
    let mut settler = Settler::new(deadline, POLL, QUIET);
    assert!(matches!(
        settler.after(true, fingerprint(&seen), start),
        Next::Confirm(_)
    ));
    // Passing but different: not settled yet, another quiet period.
    assert!(matches!(
        settler.after(true, fingerprint(&moved), start + QUIET),
        Next::Confirm(QUIET)
    ));
    // Still moving when the deadline has passed: a violation.
    let check = settled(settler.after(true, fingerprint(&seen), deadline + QUIET));
    assert!(!check.passed);
    assert!(
        check.offenders[0].contains("IM messages 8 → 7"),
        "{:?}",
        check.offenders
    );
}

#[test]
fn a_pass_at_the_deadline_still_gets_its_quiet_period() {
    let (_, seen) = consistent();
    let start = Instant::now();
    let mut settler = Settler::new(start, POLL, QUIET);
    assert!(matches!(
        settler.after(true, fingerprint(&seen), start + POLL),
        Next::Confirm(QUIET)
    ));
    assert!(settled(settler.after(true, fingerprint(&seen), start + POLL + QUIET)).passed);
}
