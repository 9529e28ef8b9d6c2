//! Treasure boxes: starting a countdown when daily heat crosses the next
//! level's threshold, and `OpenTreasure`, sent by the delayed wake-up that the
//! outbox publishes at `open_at_ms`.
//!
//! At most one box counts down at a time; levels are unlocked one by one, and
//! a box is only openable on the UTC day it belongs to (the daily reset wipes
//! treasure progress). A box whose countdown runs past midnight therefore
//! expires unopened — the price of a strict daily reset.

use std::collections::BTreeSet;

use crate::event::EventKind;
use crate::rejection::Rejection;
use crate::rules::utc_day;
use crate::state::{RoomState, TreasureBox};

/// How many of the rank's leaders are rewarded besides the seated users.
const REWARDED_RANK_LEADERS: usize = 3;

/// Starts the next level's countdown if no box is pending and today's heat
/// has reached that level's threshold.
pub(super) fn maybe_start_countdown(state: &mut RoomState, now_ms: i64) -> Option<EventKind> {
    if state.treasure.current.is_some() {
        return None;
    }
    let level = state.treasure.level_reached.checked_add(1)?;
    let threshold = state.rules.threshold_for_level(level)?;
    if state.heat < threshold {
        return None;
    }
    let seq = state.treasure.next_box_seq;
    // Day and per-room sequence make the id unique and reproducible on replay.
    let box_id = format!("{}-{}-{seq}", state.room_id, state.heat_day);
    let open_at_ms = now_ms.saturating_add(state.rules.treasure_countdown_ms);
    state.treasure.next_box_seq = seq.checked_add(1)?;
    state.treasure.level_reached = level;
    state.treasure.current = Some(TreasureBox {
        box_id: box_id.clone(),
        level,
        open_at_ms,
        day: state.heat_day,
    });
    Some(EventKind::RoomTreasureCountdownStarted {
        box_id,
        level,
        open_at_ms,
    })
}

pub(super) fn open(
    state: &mut RoomState,
    box_id: &str,
    level: u32,
    now_ms: i64,
) -> Result<Vec<EventKind>, Rejection> {
    let current = state
        .treasure
        .current
        .as_ref()
        .ok_or(Rejection::NoTreasureBox)?;
    if current.box_id != box_id || current.level != level {
        // A stale or duplicated wake-up for an earlier box.
        return Err(Rejection::TreasureMismatch);
    }
    if now_ms < current.open_at_ms {
        return Err(Rejection::TreasureNotDue {
            open_at_ms: current.open_at_ms,
        });
    }
    if utc_day(now_ms) != current.day {
        return Err(Rejection::TreasureExpired);
    }

    let rewarded: BTreeSet<&str> = state
        .seated_users()
        .chain(
            state
                .rank
                .iter()
                .take(REWARDED_RANK_LEADERS)
                .map(|entry| entry.user_id.as_str()),
        )
        .collect();
    let opened = EventKind::RoomTreasureOpened {
        box_id: box_id.to_owned(),
        level,
        opened_at_ms: now_ms,
        rewarded_user_ids: rewarded.into_iter().map(str::to_owned).collect(),
    };
    state.treasure.current = None;
    let mut events = vec![opened];
    // Heat may already have passed the next threshold while this box counted
    // down; start that level right away rather than waiting for another gift.
    events.extend(maybe_start_countdown(state, now_ms));
    Ok(events)
}

#[cfg(test)]
#[path = "treasure_tests.rs"]
mod tests;
