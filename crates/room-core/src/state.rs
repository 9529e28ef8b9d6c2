//! [`RoomState`]: everything the Room Cell knows about one room.
//!
//! Only ordered collections (`BTreeMap`, `BTreeSet`, `Vec`) are used so that
//! iteration order — and therefore event order and JSON snapshots — is the
//! same on every node that replays the command log.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::rules::RoomRules;

/// Lifecycle of a room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RoomStatus {
    /// Not created yet (or unknown); only `CreateRoom` is accepted.
    Vacant,
    /// Created and accepting commands.
    Open,
    /// Closed for good; every command is rejected.
    Closed,
}

/// A user currently in the room.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub joined_at_ms: i64,
}

/// One mic seat.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seat {
    /// Who sits here, if anyone.
    pub user_id: Option<String>,
    /// A locked seat cannot be taken.
    pub locked: bool,
}

/// One line of the daily contribution rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankEntry {
    pub user_id: String,
    pub score: u64,
}

/// A treasure box counting down to its opening.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreasureBox {
    pub box_id: String,
    pub level: u32,
    pub open_at_ms: i64,
    /// UTC day the box belongs to; it can only be opened on that day.
    pub day: i64,
}

/// Daily treasure progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreasureState {
    /// Highest level whose box has been started today (0 = none).
    pub level_reached: u32,
    /// Sequence number used in the next box id; never reset, so box ids stay
    /// unique per room across days.
    pub next_box_seq: u64,
    /// The box counting down, if any (at most one at a time).
    pub current: Option<TreasureBox>,
}

/// The authoritative state of one room.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomState {
    pub room_id: String,
    pub status: RoomStatus,
    pub owner_id: String,
    pub title: String,
    /// Users allowed to manage the room besides the owner. The role survives
    /// leaving and rejoining (it belongs to the room, not to the visit).
    pub admins: BTreeSet<String>,
    pub members: BTreeMap<String, Member>,
    /// Banned user -> banned until (ms). Entries at or before "now" are dead
    /// and are pruned when that user joins again.
    pub bans: BTreeMap<String, i64>,
    pub seats: Vec<Seat>,
    /// Today's heat (sum of gift values since the last UTC midnight).
    pub heat: u64,
    /// UTC day index of the last heat change.
    pub heat_day: i64,
    /// Today's gift value per sender.
    pub contributions: BTreeMap<String, u64>,
    /// Top `rules.rank_size` of `contributions`: score desc, then user id asc.
    pub rank: Vec<RankEntry>,
    pub treasure: TreasureState,
    /// Number of commands applied to this room.
    pub version: u64,
    /// Sequence number of the last event emitted by this room.
    pub event_seq: u64,
    pub rules: RoomRules,
}

impl RoomState {
    /// The state of a room that has not been created yet.
    pub fn vacant(room_id: impl Into<String>, rules: RoomRules) -> RoomState {
        RoomState {
            room_id: room_id.into(),
            status: RoomStatus::Vacant,
            owner_id: String::new(),
            title: String::new(),
            admins: BTreeSet::new(),
            members: BTreeMap::new(),
            bans: BTreeMap::new(),
            seats: Vec::new(),
            heat: 0,
            heat_day: 0,
            contributions: BTreeMap::new(),
            rank: Vec::new(),
            treasure: TreasureState {
                level_reached: 0,
                // Start at 1 so the first box of a room reads "...-1".
                next_box_seq: 1,
                current: None,
            },
            version: 0,
            event_seq: 0,
            rules,
        }
    }

    /// Whether `user_id` is currently in the room.
    #[must_use]
    pub fn is_member(&self, user_id: &str) -> bool {
        self.members.contains_key(user_id)
    }

    /// Whether `user_id` may manage the room (kick, lock seats, close).
    ///
    /// The owner always may. An admin may only while present in the room:
    /// the admin role outlives a visit, and without this check a kicked and
    /// banned admin could keep managing the room from outside.
    #[must_use]
    pub fn can_manage(&self, user_id: &str) -> bool {
        self.owner_id == user_id || (self.admins.contains(user_id) && self.is_member(user_id))
    }

    /// Index of the seat `user_id` holds, if any.
    #[must_use]
    pub fn seat_of(&self, user_id: &str) -> Option<usize> {
        self.seats
            .iter()
            .position(|seat| seat.user_id.as_deref() == Some(user_id))
    }

    /// Users currently seated, in seat order.
    pub fn seated_users(&self) -> impl Iterator<Item = &str> {
        self.seats.iter().filter_map(|seat| seat.user_id.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vacant_room_is_empty() {
        let state = RoomState::vacant("r1", RoomRules::default());
        assert_eq!(state.room_id, "r1");
        assert_eq!(state.status, RoomStatus::Vacant);
        assert!(state.members.is_empty());
        assert!(state.seats.is_empty());
        assert_eq!(state.version, 0);
        assert_eq!(state.event_seq, 0);
        assert_eq!(state.treasure.current, None);
    }

    #[test]
    fn absent_admin_cannot_manage() {
        let mut state = RoomState::vacant("r1", RoomRules::default());
        state.owner_id = "owner".into();
        state.admins.insert("adm".into());
        assert!(state.can_manage("owner"));
        assert!(!state.can_manage("adm"));
        state
            .members
            .insert("adm".into(), Member { joined_at_ms: 0 });
        assert!(state.can_manage("adm"));
        assert!(!state.can_manage("nobody"));
    }
}
