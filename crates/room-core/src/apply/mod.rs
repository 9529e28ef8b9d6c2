//! [`apply`]: the single entry point of the Room Cell.
//!
//! It checks the room lifecycle, hands the command to the handler of its area
//! (one module each) working on a *clone* of the state, and finally stamps the
//! version and event sequence numbers. Handlers may bail out half-way with a
//! [`Rejection`]: the clone is then dropped, so a rejection never changes state.

mod gift;
mod lifecycle;
mod members;
mod mic;
#[cfg(test)]
mod test_support;
mod treasure;

pub use gift::gift_total;

use serde::{Deserialize, Serialize};

use crate::command::Command;
use crate::event::{EventKind, RoomEvent};
use crate::rejection::Rejection;
use crate::state::{RoomState, RoomStatus};

/// Result of an accepted command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The state after the command (`version` bumped by one).
    pub state: RoomState,
    /// Events produced, in order, with contiguous `seq`s.
    pub events: Vec<RoomEvent>,
}

/// Applies `command` to `state` at time `now_ms` (Unix epoch milliseconds).
///
/// Pure and deterministic: same inputs, same output. Never panics.
///
/// # Errors
/// Returns a [`Rejection`] when the command is not allowed in this state;
/// the caller's `state` is untouched either way.
pub fn apply(state: &RoomState, command: &Command, now_ms: i64) -> Result<Applied, Rejection> {
    check_lifecycle(state.status, command)?;
    let mut next = state.clone();
    let kinds = dispatch(&mut next, command, now_ms)?;
    seal(next, kinds)
}

/// Vacant rooms only accept `CreateRoom`; closed rooms accept nothing.
fn check_lifecycle(status: RoomStatus, command: &Command) -> Result<(), Rejection> {
    let is_create = matches!(command, Command::CreateRoom { .. });
    match status {
        RoomStatus::Vacant if is_create => Ok(()),
        RoomStatus::Vacant => Err(Rejection::RoomNotFound),
        RoomStatus::Closed => Err(Rejection::RoomClosed),
        RoomStatus::Open if is_create => Err(Rejection::RoomAlreadyExists),
        RoomStatus::Open => Ok(()),
    }
}

fn dispatch(
    state: &mut RoomState,
    command: &Command,
    now_ms: i64,
) -> Result<Vec<EventKind>, Rejection> {
    match command {
        Command::CreateRoom {
            owner_id,
            title,
            mic_seat_count,
        } => lifecycle::create_room(state, owner_id, title, *mic_seat_count, now_ms),
        Command::CloseRoom { actor_id } => lifecycle::close_room(state, actor_id),
        Command::JoinRoom { user_id } => members::join(state, user_id, now_ms),
        Command::LeaveRoom { user_id, reason } => members::leave(state, user_id, *reason),
        Command::KickUser {
            actor_id,
            target_id,
            ban_until_ms,
        } => members::kick(state, actor_id, target_id, *ban_until_ms, now_ms),
        Command::SetAdmin {
            actor_id,
            target_id,
            admin,
        } => members::set_admin(state, actor_id, target_id, *admin),
        Command::TakeMic {
            user_id,
            seat_index,
        } => mic::take(state, user_id, *seat_index),
        Command::LeaveMic { user_id } => mic::leave(state, user_id),
        Command::LockMic {
            actor_id,
            seat_index,
        } => mic::lock(state, actor_id, *seat_index),
        Command::UnlockMic {
            actor_id,
            seat_index,
        } => mic::unlock(state, actor_id, *seat_index),
        Command::SendGift {
            sender_id,
            receiver_id,
            gift_id,
            count,
            unit_value,
        } => gift::send(
            state,
            &gift::Gift {
                sender_id,
                receiver_id,
                gift_id,
                count: *count,
                unit_value: *unit_value,
            },
            now_ms,
        ),
        Command::OpenTreasure { box_id, level } => treasure::open(state, box_id, *level, now_ms),
    }
}

/// Bumps `version` once and numbers the events after the room's last `event_seq`.
fn seal(mut state: RoomState, kinds: Vec<EventKind>) -> Result<Applied, Rejection> {
    state.version = state
        .version
        .checked_add(1)
        .ok_or(Rejection::SequenceExhausted)?;
    let mut events = Vec::with_capacity(kinds.len());
    for kind in kinds {
        state.event_seq = state
            .event_seq
            .checked_add(1)
            .ok_or(Rejection::SequenceExhausted)?;
        events.push(RoomEvent {
            seq: state.event_seq,
            kind,
        });
    }
    Ok(Applied { state, events })
}

/// Seat position as carried on the wire. Seat vectors are bounded by
/// `SEAT_HARD_LIMIT` at creation, so saturation only matters for a corrupt
/// snapshot, where a wrong number beats a panic.
fn seat_number(index: usize) -> u32 {
    u32::try_from(index).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use crate::rules::RoomRules;

    #[test]
    fn vacant_room_rejects_everything_but_create() {
        let vacant = RoomState::vacant("r1", RoomRules::default());
        assert_eq!(
            apply(&vacant, &join_cmd("u1"), T0),
            Err(Rejection::RoomNotFound)
        );
        assert_eq!(
            apply(&vacant, &open_cmd("b", 1), T0),
            Err(Rejection::RoomNotFound)
        );
        assert!(apply(&vacant, &create_cmd("owner", "t", 4), T0).is_ok());
    }

    #[test]
    fn open_room_rejects_second_create() {
        let room = open_room();
        assert_eq!(
            apply(&room, &create_cmd("owner", "t", 4), T0),
            Err(Rejection::RoomAlreadyExists)
        );
    }

    #[test]
    fn closed_room_rejects_everything() {
        let room = ok(&open_room(), &close_cmd("owner"), T0).state;
        assert_eq!(
            apply(&room, &join_cmd("u1"), T0),
            Err(Rejection::RoomClosed)
        );
        assert_eq!(
            apply(&room, &create_cmd("owner", "t", 4), T0),
            Err(Rejection::RoomClosed)
        );
    }

    #[test]
    fn version_and_seq_advance_per_command_and_event() {
        let room = open_room();
        assert_eq!(room.version, 1);
        assert_eq!(room.event_seq, 1);
        let applied = ok(&room, &join_cmd("u1"), T0);
        assert_eq!(applied.state.version, 2);
        assert_eq!(applied.events.len(), 1);
        assert_eq!(applied.events[0].seq, 2);
        assert_eq!(applied.state.event_seq, 2);
    }

    #[test]
    fn rejection_leaves_state_untouched() {
        let room = open_room();
        let before = room.clone();
        assert!(apply(&room, &join_cmd("owner"), T0).is_err());
        assert_eq!(room, before);
    }

    #[test]
    fn exhausted_counters_reject_instead_of_wrapping() {
        let mut room = open_room();
        room.version = u64::MAX;
        assert_eq!(
            apply(&room, &join_cmd("u1"), T0),
            Err(Rejection::SequenceExhausted)
        );
        let mut room = open_room();
        room.event_seq = u64::MAX;
        assert_eq!(
            apply(&room, &join_cmd("u1"), T0),
            Err(Rejection::SequenceExhausted)
        );
    }
}
