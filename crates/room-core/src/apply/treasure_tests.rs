//! Unit tests for opening treasure boxes.

use super::super::test_support::*;
use crate::event::EventKind;
use crate::rejection::Rejection;
use crate::rules::utc_day;
use crate::state::RoomState;

const DUE: i64 = T0 + 60_000;

/// Room with u1..u5; u1 and u2 seated; gifts by u3 > u4 > u5 > u1 push heat
/// to 1 100 at `T0`, so box "r1-<day>-1" (level 1) opens at `DUE`.
fn hot_room() -> (RoomState, String) {
    let mut room = room_with(&["u1", "u2", "u3", "u4", "u5"]);
    for command in [
        take_cmd("u1", 0),
        take_cmd("u2", 1),
        gift_cmd("u3", "owner", 1, 400),
        gift_cmd("u4", "owner", 1, 300),
        gift_cmd("u5", "owner", 1, 200),
    ] {
        room = ok(&room, &command, T0 - 1).state;
    }
    room = ok(&room, &gift_cmd("u1", "owner", 1, 200), T0).state;
    let box_id = format!("r1-{}-1", utc_day(T0));
    assert_eq!(
        room.treasure.current.as_ref().map(|b| b.box_id.as_str()),
        Some(box_id.as_str())
    );
    (room, box_id)
}

#[test]
fn open_rewards_seated_users_and_rank_leaders() {
    let (room, box_id) = hot_room();
    let applied = ok(&room, &open_cmd(&box_id, 1), DUE);
    assert_eq!(applied.state.treasure.current, None);
    assert_eq!(applied.state.treasure.level_reached, 1);
    assert_eq!(
        kinds(&applied),
        vec![EventKind::RoomTreasureOpened {
            box_id,
            level: 1,
            opened_at_ms: DUE,
            // Seated u1, u2 + top 3 u3, u4, u1 (u1 ties u5 at 200 and wins on id).
            rewarded_user_ids: vec!["u1".into(), "u2".into(), "u3".into(), "u4".into()],
        }]
    );
}

#[test]
fn open_rejections() {
    let (room, box_id) = hot_room();
    assert_eq!(
        err(&room, &open_cmd("other", 1), DUE),
        Rejection::TreasureMismatch
    );
    assert_eq!(
        err(&room, &open_cmd(&box_id, 2), DUE),
        Rejection::TreasureMismatch
    );
    assert_eq!(
        err(&room, &open_cmd(&box_id, 1), DUE - 1),
        Rejection::TreasureNotDue { open_at_ms: DUE }
    );
    assert_eq!(
        err(&room, &open_cmd(&box_id, 1), NEXT_DAY),
        Rejection::TreasureExpired
    );
    assert_eq!(
        err(&open_room(), &open_cmd(&box_id, 1), DUE),
        Rejection::NoTreasureBox
    );
}

#[test]
fn duplicate_wake_up_is_rejected() {
    let (room, box_id) = hot_room();
    let opened = ok(&room, &open_cmd(&box_id, 1), DUE).state;
    assert_eq!(
        err(&opened, &open_cmd(&box_id, 1), DUE + 1),
        Rejection::NoTreasureBox
    );
}

#[test]
fn box_expired_by_daily_reset_is_gone_after_next_gift() {
    let (room, box_id) = hot_room();
    let next_day = ok(&room, &gift_cmd("u2", "owner", 1, 1), NEXT_DAY).state;
    assert_eq!(
        err(&next_day, &open_cmd(&box_id, 1), NEXT_DAY),
        Rejection::NoTreasureBox
    );
}

#[test]
fn opening_starts_next_level_if_heat_already_passed_it() {
    let (room, box_id) = hot_room();
    let room = ok(&room, &gift_cmd("u3", "owner", 5, 1_000), T0 + 1).state;
    assert_eq!(room.treasure.level_reached, 1, "level 2 waits for box 1");
    let applied = ok(&room, &open_cmd(&box_id, 1), DUE);
    let next_id = format!("r1-{}-2", utc_day(T0));
    assert_eq!(
        kinds(&applied).last(),
        Some(&EventKind::RoomTreasureCountdownStarted {
            box_id: next_id,
            level: 2,
            open_at_ms: DUE + 60_000,
        })
    );
    assert_eq!(applied.state.treasure.level_reached, 2);
}

#[test]
fn no_boxes_beyond_the_last_threshold() {
    let mut room = room_with(&["u1"]);
    let mut opened_levels = Vec::new();
    let mut now = T0;
    room = ok(&room, &gift_cmd("u1", "owner", 30, 1_000), now).state;
    while let Some(current) = room.treasure.current.clone() {
        now = current.open_at_ms;
        room = ok(&room, &open_cmd(&current.box_id, current.level), now).state;
        opened_levels.push(current.level);
    }
    assert_eq!(opened_levels, vec![1, 2, 3]);
    let applied = ok(&room, &gift_cmd("u1", "owner", 1, 1_000), now);
    assert_eq!(applied.state.treasure.current, None);
    assert_eq!(applied.state.treasure.level_reached, 3);
}
