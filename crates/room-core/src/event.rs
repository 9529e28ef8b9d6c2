//! [`RoomEvent`] and [`EventKind`]: what the Room Cell reports after applying
//! a command. The service writes each event to the outbox; consumers react to
//! them, so variant and field names are a wire contract.

use serde::{Deserialize, Serialize};

use crate::command::LeaveReason;
use crate::state::RankEntry;

/// One event with its per-room sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomEvent {
    /// Per-room sequence, contiguous from 1; assigned by [`crate::apply`].
    pub seq: u64,
    pub kind: EventKind,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum EventKind {
    /// The room was created. The owner is a member from now on; no separate
    /// `RoomUserJoined` is emitted for them.
    RoomCreated {
        owner_id: String,
        title: String,
        mic_seat_count: u32,
    },
    /// The room was closed. Members and seats are dropped without individual
    /// `RoomUserLeft`/`RoomMicLeft` events: consumers treat this as "everyone left".
    RoomClosed {
        closed_by: String,
    },
    RoomUserJoined {
        user_id: String,
    },
    RoomUserLeft {
        user_id: String,
        reason: LeaveReason,
    },
    RoomUserKicked {
        actor_id: String,
        target_id: String,
        /// As requested; a value at or before the kick time means no ban was recorded.
        ban_until_ms: i64,
    },
    RoomAdminChanged {
        target_id: String,
        admin: bool,
    },
    RoomMicTaken {
        user_id: String,
        seat_index: u32,
    },
    RoomMicLeft {
        user_id: String,
        seat_index: u32,
    },
    RoomMicLocked {
        actor_id: String,
        seat_index: u32,
    },
    RoomMicUnlocked {
        actor_id: String,
        seat_index: u32,
    },
    RoomGiftSent {
        sender_id: String,
        receiver_id: String,
        gift_id: String,
        count: u32,
        unit_value: u64,
        total_value: u64,
    },
    /// Heat after the change. On the first gift of a UTC day the heat was
    /// reset first, so `heat` can be lower than before (then `heat == delta`).
    RoomHeatChanged {
        heat: u64,
        delta: u64,
    },
    RoomRankChanged {
        top: Vec<RankEntry>,
    },
    RoomTreasureCountdownStarted {
        box_id: String,
        level: u32,
        open_at_ms: i64,
    },
    RoomTreasureOpened {
        box_id: String,
        level: u32,
        opened_at_ms: i64,
        /// Seated users plus the top 3 of the rank, deduplicated and sorted.
        rewarded_user_ids: Vec<String>,
    },
}

impl EventKind {
    /// Stable event type name (the variant name), used as the outbox event type.
    #[must_use]
    pub fn event_type(&self) -> &'static str {
        match self {
            EventKind::RoomCreated { .. } => "RoomCreated",
            EventKind::RoomClosed { .. } => "RoomClosed",
            EventKind::RoomUserJoined { .. } => "RoomUserJoined",
            EventKind::RoomUserLeft { .. } => "RoomUserLeft",
            EventKind::RoomUserKicked { .. } => "RoomUserKicked",
            EventKind::RoomAdminChanged { .. } => "RoomAdminChanged",
            EventKind::RoomMicTaken { .. } => "RoomMicTaken",
            EventKind::RoomMicLeft { .. } => "RoomMicLeft",
            EventKind::RoomMicLocked { .. } => "RoomMicLocked",
            EventKind::RoomMicUnlocked { .. } => "RoomMicUnlocked",
            EventKind::RoomGiftSent { .. } => "RoomGiftSent",
            EventKind::RoomHeatChanged { .. } => "RoomHeatChanged",
            EventKind::RoomRankChanged { .. } => "RoomRankChanged",
            EventKind::RoomTreasureCountdownStarted { .. } => "RoomTreasureCountdownStarted",
            EventKind::RoomTreasureOpened { .. } => "RoomTreasureOpened",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_type_matches_serde_tag() {
        let kinds = [
            EventKind::RoomCreated {
                owner_id: "o".into(),
                title: "t".into(),
                mic_seat_count: 1,
            },
            EventKind::RoomClosed {
                closed_by: "o".into(),
            },
            EventKind::RoomUserJoined {
                user_id: "u".into(),
            },
            EventKind::RoomUserLeft {
                user_id: "u".into(),
                reason: LeaveReason::PresenceExpired,
            },
            EventKind::RoomUserKicked {
                actor_id: "o".into(),
                target_id: "u".into(),
                ban_until_ms: 5,
            },
            EventKind::RoomAdminChanged {
                target_id: "u".into(),
                admin: true,
            },
            EventKind::RoomMicTaken {
                user_id: "u".into(),
                seat_index: 1,
            },
            EventKind::RoomMicLeft {
                user_id: "u".into(),
                seat_index: 1,
            },
            EventKind::RoomMicLocked {
                actor_id: "o".into(),
                seat_index: 1,
            },
            EventKind::RoomMicUnlocked {
                actor_id: "o".into(),
                seat_index: 1,
            },
            EventKind::RoomGiftSent {
                sender_id: "u".into(),
                receiver_id: "o".into(),
                gift_id: "g".into(),
                count: 2,
                unit_value: 3,
                total_value: 6,
            },
            EventKind::RoomHeatChanged { heat: 6, delta: 6 },
            EventKind::RoomRankChanged {
                top: vec![RankEntry {
                    user_id: "u".into(),
                    score: 6,
                }],
            },
            EventKind::RoomTreasureCountdownStarted {
                box_id: "b".into(),
                level: 1,
                open_at_ms: 9,
            },
            EventKind::RoomTreasureOpened {
                box_id: "b".into(),
                level: 1,
                opened_at_ms: 9,
                rewarded_user_ids: vec!["u".into()],
            },
        ];
        for kind in kinds {
            let event = RoomEvent {
                seq: 7,
                kind: kind.clone(),
            };
            let json = serde_json::to_value(&event).expect("serialize");
            assert_eq!(json["kind"]["type"], kind.event_type());
            let back: RoomEvent = serde_json::from_value(json).expect("deserialize");
            assert_eq!(back, event);
        }
    }
}
