//! Shorthands shared by the unit tests of the apply handlers.

use super::{Applied, apply};
use crate::command::{Command, LeaveReason};
use crate::event::EventKind;
use crate::rejection::Rejection;
use crate::rules::{DAY_MS, RoomRules};
use crate::state::RoomState;

/// 2023-11-14T22:13:20Z — an arbitrary instant well inside a UTC day
/// (about 80 000 s after midnight, so adding minutes stays on the same day).
pub const T0: i64 = 1_700_000_000_000;

/// Start of the UTC day after `T0`.
pub const NEXT_DAY: i64 = (T0 / DAY_MS + 1) * DAY_MS;

pub fn ok(state: &RoomState, command: &Command, now_ms: i64) -> Applied {
    match apply(state, command, now_ms) {
        Ok(applied) => applied,
        Err(rejection) => panic!("{} rejected: {rejection}", command.name()),
    }
}

pub fn err(state: &RoomState, command: &Command, now_ms: i64) -> Rejection {
    match apply(state, command, now_ms) {
        Ok(applied) => panic!("{} accepted: {:?}", command.name(), applied.events),
        Err(rejection) => rejection,
    }
}

pub fn kinds(applied: &Applied) -> Vec<EventKind> {
    applied.events.iter().map(|e| e.kind.clone()).collect()
}

/// An open room "r1" owned by "owner" with 8 seats, created at `T0`.
pub fn open_room() -> RoomState {
    open_room_with(RoomRules::default())
}

pub fn open_room_with(rules: RoomRules) -> RoomState {
    let vacant = RoomState::vacant("r1", rules);
    ok(&vacant, &create_cmd("owner", "Chill", 8), T0).state
}

/// `open_room()` plus the given users joined.
pub fn room_with(users: &[&str]) -> RoomState {
    let mut state = open_room();
    for user in users {
        state = ok(&state, &join_cmd(user), T0).state;
    }
    state
}

pub fn create_cmd(owner: &str, title: &str, seats: u32) -> Command {
    Command::CreateRoom {
        owner_id: owner.into(),
        title: title.into(),
        mic_seat_count: seats,
    }
}

pub fn close_cmd(actor: &str) -> Command {
    Command::CloseRoom {
        actor_id: actor.into(),
    }
}

pub fn join_cmd(user: &str) -> Command {
    Command::JoinRoom {
        user_id: user.into(),
    }
}

pub fn leave_cmd(user: &str, reason: LeaveReason) -> Command {
    Command::LeaveRoom {
        user_id: user.into(),
        reason,
    }
}

pub fn kick_cmd(actor: &str, target: &str, ban_until_ms: i64) -> Command {
    Command::KickUser {
        actor_id: actor.into(),
        target_id: target.into(),
        ban_until_ms,
    }
}

pub fn admin_cmd(actor: &str, target: &str, admin: bool) -> Command {
    Command::SetAdmin {
        actor_id: actor.into(),
        target_id: target.into(),
        admin,
    }
}

pub fn take_cmd(user: &str, seat_index: u32) -> Command {
    Command::TakeMic {
        user_id: user.into(),
        seat_index,
    }
}

pub fn leave_mic_cmd(user: &str) -> Command {
    Command::LeaveMic {
        user_id: user.into(),
    }
}

pub fn lock_cmd(actor: &str, seat_index: u32) -> Command {
    Command::LockMic {
        actor_id: actor.into(),
        seat_index,
    }
}

pub fn unlock_cmd(actor: &str, seat_index: u32) -> Command {
    Command::UnlockMic {
        actor_id: actor.into(),
        seat_index,
    }
}

pub fn gift_cmd(sender: &str, receiver: &str, count: u32, unit_value: u64) -> Command {
    Command::SendGift {
        sender_id: sender.into(),
        receiver_id: receiver.into(),
        gift_id: "rose".into(),
        count,
        unit_value,
    }
}

pub fn open_cmd(box_id: &str, level: u32) -> Command {
    Command::OpenTreasure {
        box_id: box_id.into(),
        level,
    }
}
