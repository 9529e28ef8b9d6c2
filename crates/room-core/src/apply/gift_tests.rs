//! Unit tests for gifts, daily heat, rank and countdown start.

use super::super::test_support::*;
use crate::event::EventKind;
use crate::rejection::Rejection;
use crate::rules::{RoomRules, utc_day};
use crate::state::{RankEntry, TreasureBox};

fn entry(user_id: &str, score: u64) -> RankEntry {
    RankEntry {
        user_id: user_id.into(),
        score,
    }
}

#[test]
fn gift_raises_heat_contribution_and_rank() {
    let room = room_with(&["u1", "u2"]);
    let applied = ok(&room, &gift_cmd("u1", "u2", 3, 50), T0);
    let state = &applied.state;
    assert_eq!(state.heat, 150);
    assert_eq!(state.contributions.get("u1"), Some(&150));
    assert_eq!(state.rank, vec![entry("u1", 150)]);
    assert_eq!(
        kinds(&applied),
        vec![
            EventKind::RoomGiftSent {
                sender_id: "u1".into(),
                receiver_id: "u2".into(),
                gift_id: "rose".into(),
                count: 3,
                unit_value: 50,
                total_value: 150,
            },
            EventKind::RoomHeatChanged {
                heat: 150,
                delta: 150
            },
            EventKind::RoomRankChanged {
                top: vec![entry("u1", 150)]
            },
        ]
    );
}

#[test]
fn self_gift_is_refused() {
    let room = room_with(&["u1"]);
    for user in ["u1", "owner"] {
        assert_eq!(
            err(&room, &gift_cmd(user, user, 1, 1), T0),
            Rejection::SelfGift {
                user_id: user.into()
            }
        );
    }
    // Ids are byte-exact: a differently cased receiver is someone else.
    let room = ok(&room, &join_cmd("U1"), T0).state;
    assert_eq!(ok(&room, &gift_cmd("u1", "U1", 1, 1), T0).state.heat, 1);
}

#[test]
fn contributors_are_capped_per_day_but_known_senders_keep_giving() {
    let rules = RoomRules {
        max_contributors: 2,
        ..RoomRules::default()
    };
    let mut room = open_room_with(rules);
    for user in ["a", "b", "c"] {
        room = ok(&room, &join_cmd(user), T0).state;
    }
    room = ok(&room, &gift_cmd("a", "owner", 1, 10), T0).state;
    room = ok(&room, &gift_cmd("b", "owner", 1, 10), T0).state;
    assert_eq!(
        err(&room, &gift_cmd("c", "owner", 1, 10), T0),
        Rejection::TooManyContributors {
            max_contributors: 2
        }
    );
    // Today's contributors are not refused.
    let again = ok(&room, &gift_cmd("a", "owner", 1, 5), T0).state;
    assert_eq!(again.contributions.get("a"), Some(&15));
    // A new day starts an empty contribution map: the newcomer gets in.
    let tomorrow = ok(&room, &gift_cmd("c", "owner", 1, 10), NEXT_DAY + 1).state;
    assert_eq!(tomorrow.contributions.len(), 1);
    assert_eq!(tomorrow.contributions.get("c"), Some(&10));
}

#[test]
fn a_gift_refused_by_the_contributor_cap_changes_nothing() {
    let rules = RoomRules {
        max_contributors: 1,
        ..RoomRules::default()
    };
    let room = ok(&open_room_with(rules), &join_cmd("u1"), T0).state;
    let room = ok(&room, &gift_cmd("owner", "u1", 1, 7), T0).state;
    let before = room.clone();
    assert_eq!(
        err(&room, &gift_cmd("u1", "owner", 1, 7), T0),
        Rejection::TooManyContributors {
            max_contributors: 1
        }
    );
    assert_eq!(room, before);
}

#[test]
fn rank_orders_by_score_then_user_id_and_truncates() {
    let rules = RoomRules {
        rank_size: 2,
        ..RoomRules::default()
    };
    let mut room = open_room_with(rules);
    for user in ["a", "b", "c"] {
        room = ok(&room, &join_cmd(user), T0).state;
    }
    room = ok(&room, &gift_cmd("c", "owner", 1, 10), T0).state;
    room = ok(&room, &gift_cmd("b", "owner", 1, 10), T0).state;
    assert_eq!(room.rank, vec![entry("b", 10), entry("c", 10)]);
    room = ok(&room, &gift_cmd("a", "owner", 1, 5), T0).state;
    assert_eq!(room.rank, vec![entry("b", 10), entry("c", 10)]);
    room = ok(&room, &gift_cmd("a", "owner", 1, 6), T0).state;
    assert_eq!(room.rank, vec![entry("a", 11), entry("b", 10)]);
    assert_eq!(room.contributions.len(), 3);
}

#[test]
fn unchanged_rank_emits_no_rank_event() {
    let rules = RoomRules {
        rank_size: 1,
        ..RoomRules::default()
    };
    let room = ok(&open_room_with(rules), &join_cmd("u1"), T0).state;
    let room = ok(&room, &gift_cmd("owner", "u1", 1, 500), T0).state;
    let applied = ok(&room, &gift_cmd("u1", "owner", 1, 10), T0);
    assert_eq!(applied.state.rank, vec![entry("owner", 500)]);
    assert!(
        !kinds(&applied)
            .iter()
            .any(|k| matches!(k, EventKind::RoomRankChanged { .. }))
    );
}

#[test]
fn amount_rejections() {
    let room = room_with(&["u1"]);
    for (count, unit_value) in [(0, 1), (10_000, 1), (u32::MAX, 1), (1, 0), (1, 1_000_001)] {
        assert!(
            matches!(
                err(&room, &gift_cmd("u1", "owner", count, unit_value), T0),
                Rejection::InvalidAmount { .. }
            ),
            "count={count} unit_value={unit_value}"
        );
    }
    assert!(matches!(
        err(&room, &gift_cmd("u1", "owner", 1, u64::MAX), T0),
        Rejection::InvalidAmount { .. }
    ));
    // Limits at the edge are fine.
    assert_eq!(
        ok(&room, &gift_cmd("u1", "owner", 9_999, 1_000_000), T0)
            .state
            .heat,
        9_999_000_000
    );
}

#[test]
fn product_overflow_is_rejected() {
    let rules = RoomRules {
        max_gift_count: u32::MAX,
        max_gift_unit_value: u64::MAX,
        ..RoomRules::default()
    };
    let room = ok(&open_room_with(rules), &join_cmd("u1"), T0).state;
    assert_eq!(
        err(&room, &gift_cmd("u1", "owner", 2, u64::MAX), T0),
        Rejection::AmountOverflow
    );
    assert_eq!(
        err(&room, &gift_cmd("u1", "owner", u32::MAX, u64::MAX), T0),
        Rejection::AmountOverflow
    );
    // Past the wallet's signed range, though within u64.
    let beyond_money = u64::try_from(i64::MAX).unwrap() + 1;
    assert_eq!(
        err(&room, &gift_cmd("u1", "owner", 1, beyond_money), T0),
        Rejection::AmountOverflow
    );
}

#[test]
fn the_gift_total_stays_in_the_wallet_money_range() {
    assert_eq!(crate::gift_total(3, 10), Some(30));
    let max = u64::try_from(i64::MAX).unwrap();
    assert_eq!(crate::gift_total(1, max), Some(max));
    assert_eq!(
        crate::gift_total(1, max + 1),
        None,
        "beyond the signed range"
    );
    assert_eq!(crate::gift_total(u32::MAX, u64::MAX), None, "u64 overflow");
}

#[test]
fn heat_overflow_is_rejected() {
    let mut room = room_with(&["u1"]);
    room.heat = u64::MAX;
    room.heat_day = utc_day(T0);
    assert_eq!(
        err(&room, &gift_cmd("u1", "owner", 1, 1), T0),
        Rejection::AmountOverflow
    );
}

#[test]
fn sender_and_receiver_must_be_members() {
    let room = room_with(&["u1"]);
    assert_eq!(
        err(&room, &gift_cmd("ghost", "u1", 1, 1), T0),
        Rejection::NotAMember {
            user_id: "ghost".into()
        }
    );
    assert_eq!(
        err(&room, &gift_cmd("u1", "ghost", 1, 1), T0),
        Rejection::NotAMember {
            user_id: "ghost".into()
        }
    );
}

#[test]
fn crossing_a_threshold_starts_a_countdown() {
    let room = room_with(&["u1"]);
    let room = ok(&room, &gift_cmd("u1", "owner", 1, 999), T0).state;
    assert_eq!(room.treasure.current, None);
    let applied = ok(&room, &gift_cmd("u1", "owner", 1, 1), T0 + 10);
    let day = utc_day(T0);
    let box_id = format!("r1-{day}-1");
    assert_eq!(
        kinds(&applied).last(),
        Some(&EventKind::RoomTreasureCountdownStarted {
            box_id: box_id.clone(),
            level: 1,
            open_at_ms: T0 + 10 + 60_000,
        })
    );
    assert_eq!(applied.state.treasure.level_reached, 1);
    assert_eq!(applied.state.treasure.next_box_seq, 2);
    assert_eq!(
        applied.state.treasure.current,
        Some(TreasureBox {
            box_id,
            level: 1,
            open_at_ms: T0 + 10 + 60_000,
            day,
        })
    );
}

#[test]
fn only_one_box_counts_down_at_a_time() {
    let room = room_with(&["u1"]);
    // One big gift passes all three thresholds but unlocks level 1 only.
    let applied = ok(&room, &gift_cmd("u1", "owner", 25, 1_000), T0);
    assert_eq!(applied.state.treasure.level_reached, 1);
    let again = ok(&applied.state, &gift_cmd("u1", "owner", 1, 1_000), T0);
    assert_eq!(again.state.treasure.level_reached, 1);
    assert!(
        !kinds(&again)
            .iter()
            .any(|k| matches!(k, EventKind::RoomTreasureCountdownStarted { .. }))
    );
}

#[test]
fn first_gift_of_a_new_day_resets_daily_progress() {
    let room = room_with(&["u1", "u2"]);
    let room = ok(&room, &gift_cmd("u1", "owner", 2, 1_000), T0).state;
    assert!(room.treasure.current.is_some());
    let applied = ok(&room, &gift_cmd("u2", "owner", 1, 7), NEXT_DAY + 5);
    let state = &applied.state;
    assert_eq!(state.heat, 7);
    assert_eq!(state.heat_day, utc_day(NEXT_DAY));
    assert_eq!(state.contributions.len(), 1);
    assert_eq!(state.rank, vec![entry("u2", 7)]);
    assert_eq!(state.treasure.level_reached, 0);
    assert_eq!(state.treasure.current, None);
    // Box ids keep counting across days.
    assert_eq!(state.treasure.next_box_seq, 2);
    let events = kinds(&applied);
    assert_eq!(events[1], EventKind::RoomHeatChanged { heat: 7, delta: 7 });
    assert_eq!(
        events[2],
        EventKind::RoomRankChanged {
            top: vec![entry("u2", 7)]
        }
    );
}

#[test]
fn clock_stepping_back_across_midnight_does_not_reset() {
    let room = room_with(&["u1"]);
    let room = ok(&room, &gift_cmd("u1", "owner", 1, 100), NEXT_DAY + 5).state;
    let applied = ok(&room, &gift_cmd("u1", "owner", 1, 100), NEXT_DAY - 5);
    assert_eq!(applied.state.heat, 200);
    assert_eq!(applied.state.heat_day, utc_day(NEXT_DAY));
}

#[test]
fn rank_size_zero_keeps_no_rank() {
    let rules = RoomRules {
        rank_size: 0,
        ..RoomRules::default()
    };
    let room = ok(&open_room_with(rules), &join_cmd("u1"), T0).state;
    let applied = ok(&room, &gift_cmd("u1", "owner", 1, 5), T0);
    assert!(applied.state.rank.is_empty());
    assert_eq!(applied.events.len(), 2);
}
