//! `SendGift`: amount validation, daily heat and contributions, the rank, and
//! kicking off treasure countdowns.
//!
//! Heat, contributions, rank and treasure progress are *daily* (UTC). The
//! reset happens lazily on the first gift of a new day rather than at
//! midnight, because the cell has no timer: time only arrives with commands.
//! No separate "reset" event is emitted; the gift's `RoomHeatChanged` carries
//! the new day's heat (so it may be lower than the previous one, with
//! `heat == delta`), and `RoomRankChanged` shows the fresh rank.

use super::treasure;
use crate::event::EventKind;
use crate::rejection::Rejection;
use crate::rules::{RoomRules, utc_day};
use crate::state::{RankEntry, RoomState};

/// The fields of a `SendGift` command, borrowed.
pub(super) struct Gift<'a> {
    pub sender_id: &'a str,
    pub receiver_id: &'a str,
    pub gift_id: &'a str,
    pub count: u32,
    pub unit_value: u64,
}

pub(super) fn send(
    state: &mut RoomState,
    gift: &Gift<'_>,
    now_ms: i64,
) -> Result<Vec<EventKind>, Rejection> {
    let total = total_value(&state.rules, gift.count, gift.unit_value)?;
    if gift.sender_id == gift.receiver_id {
        // A gift to oneself would buy heat, rank and treasure with one's own
        // money and no audience. Refused here, in the cell, so no path into
        // the room can skip it — and before any wallet call, since the
        // service applies the command before it debits (docs/design.md#gift-saga).
        return Err(Rejection::SelfGift {
            user_id: gift.sender_id.to_owned(),
        });
    }
    for user_id in [gift.sender_id, gift.receiver_id] {
        if !state.is_member(user_id) {
            return Err(Rejection::not_a_member(user_id));
        }
    }

    // Compare against what consumers last saw, i.e. before any daily reset.
    let previous_top = state.rank.clone();
    roll_day(state, utc_day(now_ms));
    // Counted after the day rolled: yesterday's senders no longer count.
    let max_contributors = state.rules.max_contributors;
    if state.contributions.len() >= max_contributors
        && !state.contributions.contains_key(gift.sender_id)
    {
        return Err(Rejection::TooManyContributors { max_contributors });
    }

    let heat = state
        .heat
        .checked_add(total)
        .ok_or(Rejection::AmountOverflow)?;
    let contribution = state
        .contributions
        .get(gift.sender_id)
        .copied()
        .unwrap_or(0)
        .checked_add(total)
        .ok_or(Rejection::AmountOverflow)?;
    state.heat = heat;
    state
        .contributions
        .insert(gift.sender_id.to_owned(), contribution);
    update_rank(
        &mut state.rank,
        state.rules.rank_size,
        gift.sender_id,
        contribution,
    );

    let mut events = vec![
        EventKind::RoomGiftSent {
            sender_id: gift.sender_id.to_owned(),
            receiver_id: gift.receiver_id.to_owned(),
            gift_id: gift.gift_id.to_owned(),
            count: gift.count,
            unit_value: gift.unit_value,
            total_value: total,
        },
        EventKind::RoomHeatChanged { heat, delta: total },
    ];
    if state.rank != previous_top {
        events.push(EventKind::RoomRankChanged {
            top: state.rank.clone(),
        });
    }
    events.extend(treasure::maybe_start_countdown(state, now_ms));
    Ok(events)
}

/// Checks the amounts against the room's limits and multiplies them safely.
fn total_value(rules: &RoomRules, count: u32, unit_value: u64) -> Result<u64, Rejection> {
    if count == 0 || count > rules.max_gift_count {
        return Err(Rejection::invalid_amount(format!(
            "count must be in 1..={}, got {count}",
            rules.max_gift_count
        )));
    }
    if unit_value == 0 || unit_value > rules.max_gift_unit_value {
        return Err(Rejection::invalid_amount(format!(
            "unit_value must be in 1..={}, got {unit_value}",
            rules.max_gift_unit_value
        )));
    }
    // Default limits cannot overflow, but rules are per room and may be raised.
    gift_total(count, unit_value).ok_or(Rejection::AmountOverflow)
}

/// The value of a gift, `count × unit_value`: the one place it is computed.
/// `None` when it leaves the money range, `0..=i64::MAX` — the wallet's
/// signed amount — so every later hop (saga row, wallet debit, outbox event,
/// activity totals) holds it as the same `u64` without a lossy conversion.
pub fn gift_total(count: u32, unit_value: u64) -> Option<u64> {
    u64::from(count)
        .checked_mul(unit_value)
        .filter(|total| i64::try_from(*total).is_ok())
}

/// Starts a new heat day if `today` is later than the last heat change.
///
/// An earlier `today` (a clock stepping back across midnight after a node
/// failover) keeps counting into the newer day instead of wiping it.
fn roll_day(state: &mut RoomState, today: i64) {
    if today <= state.heat_day {
        return;
    }
    state.heat_day = today;
    state.heat = 0;
    state.contributions.clear();
    state.rank.clear();
    state.treasure.level_reached = 0;
    // A box from yesterday can no longer be opened (TreasureExpired), so drop it.
    state.treasure.current = None;
}

/// Updates the rank after `user_id`'s daily score rose to `score`.
///
/// Incremental on purpose (O(rank_size) instead of sorting every sender of the
/// day on each gift). It is exact because scores only grow within a day: if
/// `rank` was the top N before, the only user who can newly enter it is the
/// one whose score just grew.
fn update_rank(rank: &mut Vec<RankEntry>, rank_size: usize, user_id: &str, score: u64) {
    rank.retain(|entry| entry.user_id != user_id);
    let position = rank.partition_point(|entry| {
        entry.score > score || (entry.score == score && entry.user_id.as_str() < user_id)
    });
    rank.insert(
        position,
        RankEntry {
            user_id: user_id.to_owned(),
            score,
        },
    );
    rank.truncate(rank_size);
}

#[cfg(test)]
#[path = "gift_tests.rs"]
mod tests;
