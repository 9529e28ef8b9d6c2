//! Per-room tunables ([`RoomRules`]) and the UTC day arithmetic the daily
//! heat/treasure reset is built on.

use serde::{Deserialize, Serialize};

/// Milliseconds in one UTC day; heat, contributions and treasure reset when
/// `now_ms` crosses a multiple of this.
pub const DAY_MS: i64 = 86_400_000;

/// Upper bound on seats no matter what `RoomRules::max_mic_seats` says.
///
/// Rules travel inside snapshots, so a corrupted or hostile snapshot could ask
/// for `u32::MAX` seats; this cap keeps `CreateRoom` from trying to allocate
/// billions of seats (apply must never panic or abort).
pub const SEAT_HARD_LIMIT: u32 = 1_000;

/// UTC day index of a Unix-epoch-millisecond timestamp.
///
/// `div_euclid` (not `/`) so that timestamps before 1970 still map to the day
/// that contains them instead of rounding toward zero.
#[must_use]
pub fn utc_day(now_ms: i64) -> i64 {
    now_ms.div_euclid(DAY_MS)
}

/// Tunables of one room; stored in [`crate::RoomState`] so that replaying the
/// command log reproduces the same results even if defaults change later.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomRules {
    /// How many senders the contribution rank keeps.
    pub rank_size: usize,
    /// Cumulative daily heat needed for treasure level 1, 2, 3, ...
    pub treasure_thresholds: Vec<u64>,
    /// Delay between a treasure box appearing and it becoming openable.
    pub treasure_countdown_ms: i64,
    /// Largest `mic_seat_count` accepted by `CreateRoom`.
    pub max_mic_seats: u32,
    /// Largest `count` accepted by `SendGift`.
    pub max_gift_count: u32,
    /// Largest `unit_value` accepted by `SendGift`.
    pub max_gift_unit_value: u64,
}

impl Default for RoomRules {
    fn default() -> Self {
        Self {
            rank_size: 10,
            treasure_thresholds: vec![1_000, 5_000, 20_000],
            treasure_countdown_ms: 60_000,
            max_mic_seats: 20,
            max_gift_count: 9_999,
            max_gift_unit_value: 1_000_000,
        }
    }
}

impl RoomRules {
    /// Seat limit actually enforced: the configured one, capped by
    /// [`SEAT_HARD_LIMIT`].
    #[must_use]
    pub fn effective_max_mic_seats(&self) -> u32 {
        self.max_mic_seats.min(SEAT_HARD_LIMIT)
    }

    /// Heat needed to unlock treasure `level` (1-based), if such a level exists.
    #[must_use]
    pub fn threshold_for_level(&self, level: u32) -> Option<u64> {
        let index = usize::try_from(level.checked_sub(1)?).ok()?;
        self.treasure_thresholds.get(index).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_day_floors_toward_negative_infinity() {
        assert_eq!(utc_day(0), 0);
        assert_eq!(utc_day(DAY_MS - 1), 0);
        assert_eq!(utc_day(DAY_MS), 1);
        assert_eq!(utc_day(-1), -1);
        assert_eq!(utc_day(i64::MIN), i64::MIN.div_euclid(DAY_MS));
    }

    #[test]
    fn defaults_match_the_product_spec() {
        let rules = RoomRules::default();
        assert_eq!(rules.rank_size, 10);
        assert_eq!(rules.treasure_thresholds, vec![1_000, 5_000, 20_000]);
        assert_eq!(rules.treasure_countdown_ms, 60_000);
        assert_eq!(rules.max_mic_seats, 20);
        assert_eq!(rules.max_gift_count, 9_999);
        assert_eq!(rules.max_gift_unit_value, 1_000_000);
    }

    #[test]
    fn thresholds_are_one_based_and_bounded() {
        let rules = RoomRules::default();
        assert_eq!(rules.threshold_for_level(0), None);
        assert_eq!(rules.threshold_for_level(1), Some(1_000));
        assert_eq!(rules.threshold_for_level(3), Some(20_000));
        assert_eq!(rules.threshold_for_level(4), None);
        assert_eq!(rules.threshold_for_level(u32::MAX), None);
    }

    #[test]
    fn seat_limit_is_capped() {
        let rules = RoomRules {
            max_mic_seats: u32::MAX,
            ..RoomRules::default()
        };
        assert_eq!(rules.effective_max_mic_seats(), SEAT_HARD_LIMIT);
        assert_eq!(RoomRules::default().effective_max_mic_seats(), 20);
    }
}
