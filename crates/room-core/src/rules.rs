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

/// Default [`RoomRules::max_members`]. Every member lives in the room's
/// in-memory state, in each JSON snapshot and in every GetRoom reply, so the
/// cap bounds all three: 10 000 ids of at most 32 bytes keep a snapshot well
/// under a megabyte (the column is a 16 MB MEDIUMBLOB) while leaving a voice
/// room — a few seats and an audience — far more audience than it can use.
pub const DEFAULT_MAX_MEMBERS: usize = 10_000;

/// Default [`RoomRules::max_admins`]. Admins are the owner's appointed
/// moderators: a handful per room in practice, and every one of them may
/// kick and lock seats, so fifty is generous without making the role
/// meaningless.
pub const DEFAULT_MAX_ADMINS: usize = 50;

/// Default [`RoomRules::max_bans`]. Bans outlive the visit (a banned user is
/// no longer a member), so without a cap a room that kicks with bans for
/// months grows its state forever. Expired bans are pruned before counting,
/// so only bans still in force count; as many as the room has members.
pub const DEFAULT_MAX_BANS: usize = 10_000;

/// Default [`RoomRules::max_contributors`]: distinct senders in one UTC day.
/// The day's contribution map is kept whole (the rank is its top
/// `rank_size`), so it is bounded like the members: as many senders as the
/// room can hold members at once. Senders come and go over a day, so the cap
/// is reached only by a room whose audience turns over completely.
pub const DEFAULT_MAX_CONTRIBUTORS: usize = 10_000;

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
///
/// Rules travel inside stored snapshots, so a field added later carries a
/// `#[serde(default = …)]`: snapshots written before it existed still load,
/// with the default.
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
    /// Most members at once; a `JoinRoom` beyond it is refused (`RoomFull`).
    /// The owner may always come back to their own room.
    #[serde(default = "default_max_members")]
    pub max_members: usize,
    /// Most admins; granting one more is refused (`TooManyAdmins`).
    #[serde(default = "default_max_admins")]
    pub max_admins: usize,
    /// Most bans in force; a `KickUser` that would add one more is refused
    /// (`TooManyBans`).
    #[serde(default = "default_max_bans")]
    pub max_bans: usize,
    /// Most distinct senders in the day's contributions; a gift from one more
    /// is refused (`TooManyContributors`).
    #[serde(default = "default_max_contributors")]
    pub max_contributors: usize,
}

fn default_max_members() -> usize {
    DEFAULT_MAX_MEMBERS
}

fn default_max_admins() -> usize {
    DEFAULT_MAX_ADMINS
}

fn default_max_bans() -> usize {
    DEFAULT_MAX_BANS
}

fn default_max_contributors() -> usize {
    DEFAULT_MAX_CONTRIBUTORS
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
            max_members: DEFAULT_MAX_MEMBERS,
            max_admins: DEFAULT_MAX_ADMINS,
            max_bans: DEFAULT_MAX_BANS,
            max_contributors: DEFAULT_MAX_CONTRIBUTORS,
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
        assert_eq!(rules.max_members, 10_000);
        assert_eq!(rules.max_admins, 50);
        assert_eq!(rules.max_bans, 10_000);
        assert_eq!(rules.max_contributors, 10_000);
    }

    /// A snapshot written before the caps existed: its rules have none of
    /// the cap fields, and it must still load, with the defaults.
    #[test]
    fn rules_of_an_old_snapshot_load_with_default_caps() {
        let old = serde_json::json!({
            "rank_size": 3,
            "treasure_thresholds": [10, 20],
            "treasure_countdown_ms": 5_000,
            "max_mic_seats": 8,
            "max_gift_count": 99,
            "max_gift_unit_value": 1_000,
        });
        let rules: RoomRules = serde_json::from_value(old).expect("old rules load");
        assert_eq!(
            rules,
            RoomRules {
                rank_size: 3,
                treasure_thresholds: vec![10, 20],
                treasure_countdown_ms: 5_000,
                max_mic_seats: 8,
                max_gift_count: 99,
                max_gift_unit_value: 1_000,
                ..RoomRules::default()
            }
        );
        assert_eq!(rules.max_members, DEFAULT_MAX_MEMBERS);
        assert_eq!(rules.max_admins, DEFAULT_MAX_ADMINS);
        assert_eq!(rules.max_bans, DEFAULT_MAX_BANS);
        assert_eq!(rules.max_contributors, DEFAULT_MAX_CONTRIBUTORS);
        // And a current snapshot keeps its own caps.
        let custom = RoomRules {
            max_members: 7,
            ..RoomRules::default()
        };
        let back: RoomRules =
            serde_json::from_value(serde_json::to_value(&custom).unwrap()).unwrap();
        assert_eq!(back, custom);
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
