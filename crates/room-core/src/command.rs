//! [`Command`]: the requests the Room Cell accepts.
//!
//! Commands carry already-authenticated ids (the service validates id length
//! and charset); the cell checks everything that depends on room state, plus
//! gift amounts, which it must bound to keep heat arithmetic safe.

use serde::{Deserialize, Serialize};

/// Why a user left the room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaveReason {
    /// The user left on their own.
    Voluntary,
    /// A manager removed the user (only produced by `KickUser`).
    Kicked,
    /// The user's presence heartbeat expired.
    PresenceExpired,
}

/// A request to change a room.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Command {
    CreateRoom {
        owner_id: String,
        title: String,
        mic_seat_count: u32,
    },
    CloseRoom {
        actor_id: String,
    },
    JoinRoom {
        user_id: String,
    },
    LeaveRoom {
        user_id: String,
        reason: LeaveReason,
    },
    KickUser {
        actor_id: String,
        target_id: String,
        /// Ban the target until this time; a value at or before "now" means no ban.
        ban_until_ms: i64,
    },
    SetAdmin {
        actor_id: String,
        target_id: String,
        admin: bool,
    },
    TakeMic {
        user_id: String,
        seat_index: u32,
    },
    LeaveMic {
        user_id: String,
    },
    LockMic {
        actor_id: String,
        seat_index: u32,
    },
    UnlockMic {
        actor_id: String,
        seat_index: u32,
    },
    SendGift {
        sender_id: String,
        receiver_id: String,
        gift_id: String,
        count: u32,
        unit_value: u64,
    },
    /// Sent by the delayed treasure wake-up, not by a user.
    OpenTreasure {
        box_id: String,
        level: u32,
    },
}

impl Command {
    /// Stable name of the command (the variant name), for logs and metrics.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Command::CreateRoom { .. } => "CreateRoom",
            Command::CloseRoom { .. } => "CloseRoom",
            Command::JoinRoom { .. } => "JoinRoom",
            Command::LeaveRoom { .. } => "LeaveRoom",
            Command::KickUser { .. } => "KickUser",
            Command::SetAdmin { .. } => "SetAdmin",
            Command::TakeMic { .. } => "TakeMic",
            Command::LeaveMic { .. } => "LeaveMic",
            Command::LockMic { .. } => "LockMic",
            Command::UnlockMic { .. } => "UnlockMic",
            Command::SendGift { .. } => "SendGift",
            Command::OpenTreasure { .. } => "OpenTreasure",
        }
    }

    /// The user on whose behalf the command acts (whose wallet pays, whose
    /// rights are checked); `None` for a command no user sends. An end-user
    /// assertion must name this user.
    #[must_use]
    pub fn acting_user(&self) -> Option<&str> {
        match self {
            Command::CreateRoom { owner_id, .. } => Some(owner_id),
            Command::CloseRoom { actor_id }
            | Command::KickUser { actor_id, .. }
            | Command::SetAdmin { actor_id, .. }
            | Command::LockMic { actor_id, .. }
            | Command::UnlockMic { actor_id, .. } => Some(actor_id),
            Command::JoinRoom { user_id }
            | Command::LeaveRoom { user_id, .. }
            | Command::TakeMic { user_id, .. }
            | Command::LeaveMic { user_id } => Some(user_id),
            Command::SendGift { sender_id, .. } => Some(sender_id),
            Command::OpenTreasure { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_matches_serde_tag() {
        let commands = [
            Command::CreateRoom {
                owner_id: "o".into(),
                title: "t".into(),
                mic_seat_count: 1,
            },
            Command::CloseRoom {
                actor_id: "o".into(),
            },
            Command::JoinRoom {
                user_id: "u".into(),
            },
            Command::LeaveRoom {
                user_id: "u".into(),
                reason: LeaveReason::Voluntary,
            },
            Command::KickUser {
                actor_id: "o".into(),
                target_id: "u".into(),
                ban_until_ms: 0,
            },
            Command::SetAdmin {
                actor_id: "o".into(),
                target_id: "u".into(),
                admin: true,
            },
            Command::TakeMic {
                user_id: "u".into(),
                seat_index: 0,
            },
            Command::LeaveMic {
                user_id: "u".into(),
            },
            Command::LockMic {
                actor_id: "o".into(),
                seat_index: 0,
            },
            Command::UnlockMic {
                actor_id: "o".into(),
                seat_index: 0,
            },
            Command::SendGift {
                sender_id: "u".into(),
                receiver_id: "o".into(),
                gift_id: "g".into(),
                count: 1,
                unit_value: 1,
            },
            Command::OpenTreasure {
                box_id: "b".into(),
                level: 1,
            },
        ];
        for command in commands {
            let json = serde_json::to_value(&command).expect("serialize");
            assert_eq!(json["type"], command.name());
            let back: Command = serde_json::from_value(json).expect("deserialize");
            assert_eq!(back, command);
        }
    }
}
