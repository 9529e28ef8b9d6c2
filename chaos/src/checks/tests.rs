//! Each rule passes on a consistent ledger and names the offender when one
//! promise is broken.

use super::*;
use crate::observe::{ImRecord, LogEntry, OutboxEvent, WalletTotals};
use outbox_schema::pb;

fn expectations() -> Expectations {
    Expectations {
        im_silent: vec!["RoomHeatChanged".into()],
        room_group_prefix: "room_".into(),
        broadcast_group: "global".into(),
        big_gift_threshold: 1_000,
        dedup_groups: vec!["activity".into()],
    }
}

fn event(id: &str, seq: u64, command: &str, payload: Payload) -> OutboxEvent {
    OutboxEvent {
        event_id: id.into(),
        room_id: "r1".into(),
        lane: 0,
        seq,
        event_type: match &payload {
            Payload::RoomGiftSent(_) => "RoomGiftSent",
            Payload::RoomUserKicked(_) => "RoomUserKicked",
            _ => "RoomUserJoined",
        }
        .into(),
        status: "delivered".into(),
        due_ms: 0,
        command_id: command.into(),
        payload: Some(payload),
    }
}

fn group_message(id: &str, group: &str) -> ImRecord {
    ImRecord {
        group_id: Some(group.into()),
        to_account: None,
        event_id: Some(id.into()),
    }
}

/// A room with a join (c1), a big gift (c2) and a kick (c3), all delivered.
fn consistent() -> (Vec<CommandRecord>, Observation) {
    let gift = Payload::RoomGiftSent(pb::RoomGiftSent {
        total_value: 1_500,
        count: 3,
        ..Default::default()
    });
    let kick = Payload::RoomUserKicked(pb::RoomUserKicked {
        target_id: "bob".into(),
        ..Default::default()
    });
    let join = Payload::RoomUserJoined(pb::RoomUserJoined {
        user_id: "bob".into(),
    });
    let outbox = vec![
        event("e1", 1, "c1", join),
        event("e2", 2, "c2", gift),
        event("e3", 3, "c3", kick),
    ];
    let mut seen = Observation::default();
    for (n, command) in ["c1", "c2", "c3"].iter().enumerate() {
        let events = vec![format!("e{}", n + 1)];
        seen.log.insert(
            command.to_string(),
            LogEntry {
                room_id: "r1".into(),
                version: n as u64 + 1,
                event_ids: events,
            },
        );
    }
    seen.rooms.insert("r1".into(), (3, 3));
    seen.outbox = outbox;
    seen.dedup = vec![
        ("activity".into(), "e1".into()),
        ("activity".into(), "e2".into()),
        ("activity".into(), "e3".into()),
    ];
    seen.contributions.insert("r1".into(), (1_500, 3));
    seen.broadcasts = vec![("e2".into(), "delivered".into())];
    seen.notices = vec![("e3".into(), "bob".into(), "r1".into(), "delivered".into())];
    seen.sagas = vec![
        ("c2".into(), "committed".into(), 1_500),
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
            event_id: Some("e3".into()),
        },
    ];
    seen.wallet = WalletTotals {
        debited: 1_570,
        refunded: 70,
        debit_replays: 0,
    };
    let record = |id: &str, outcome| CommandRecord {
        command_id: id.into(),
        room_id: "r1".into(),
        kind: "join".into(),
        outcome,
        detail: String::new(),
        attempts: 1,
        gift_value: 0,
        event_ids: vec![],
    };
    let commands = vec![
        record("c1", Outcome::Acked),
        record("c2", Outcome::Unknown),
        record("c4", Outcome::Rejected),
    ];
    (commands, seen)
}

fn failed(commands: &[CommandRecord], seen: &Observation) -> Vec<&'static str> {
    run(commands, seen, &expectations())
        .into_iter()
        .filter(|c| !c.passed)
        .map(|c| c.name)
        .collect()
}

#[test]
fn a_consistent_run_passes_every_rule() {
    let (commands, seen) = consistent();
    assert_eq!(failed(&commands, &seen), Vec::<&str>::new());
}

/// Breaks one promise in a consistent observation or ledger.
type Breaker = Box<dyn Fn(&mut Observation, &mut Vec<CommandRecord>)>;

#[test]
fn each_broken_promise_is_caught() {
    let (commands, base) = consistent();
    let cases: Vec<(&str, Breaker)> = vec![
        (
            "acknowledged",
            Box::new(|seen, _| {
                seen.log.remove("c1");
            }),
        ),
        (
            "rejected",
            Box::new(|_, commands| commands[2].command_id = "c3".into()),
        ),
        (
            "partial",
            Box::new(|seen, _| {
                seen.outbox.remove(1);
            }),
        ),
        (
            "published",
            Box::new(|seen, _| seen.outbox[0].status = "retryable".into()),
        ),
        (
            "activity",
            Box::new(|seen, _| {
                seen.contributions.insert("r1".into(), (3_000, 2));
            }),
        ),
        (
            "im-bridge",
            Box::new(|seen, _| seen.im_messages.push(group_message("e1", "room_r1"))),
        ),
        (
            "notices",
            Box::new(|seen, _| seen.notices[0].3 = "pending".into()),
        ),
        ("order", Box::new(|seen, _| seen.dedup.swap(0, 2))),
        ("money", Box::new(|seen, _| seen.wallet.refunded = 0)),
        (
            "dead",
            Box::new(|seen, _| seen.dead_letter_topics.push(("g.dlq".into(), 2))),
        ),
    ];
    for (label, break_it) in cases {
        let mut seen = base.clone();
        let mut broken = commands.clone();
        break_it(&mut seen, &mut broken);
        let failures = failed(&broken, &seen);
        assert!(!failures.is_empty(), "{label}: no rule failed");
        let offenders: Vec<String> = run(&broken, &seen, &expectations())
            .into_iter()
            .flat_map(|c| c.offenders)
            .collect();
        assert!(
            !offenders.is_empty(),
            "{label}: failed without naming an offender"
        );
    }
}

#[test]
fn gaps_are_described() {
    assert_eq!(gap_in(vec![1, 2, 3], 3), None);
    assert!(gap_in(vec![1, 3], 3).is_some());
    assert!(gap_in(vec![1, 2, 2], 2).is_some());
    assert!(gap_in(vec![1, 2], 3).is_some());
}
