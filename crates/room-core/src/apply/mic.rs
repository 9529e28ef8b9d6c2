//! Mic seats: `TakeMic`, `LeaveMic`, `LockMic`, `UnlockMic`, plus the helper
//! other areas use to free a departing user's seat.

use super::seat_number;
use crate::event::EventKind;
use crate::rejection::Rejection;
use crate::state::{RoomState, Seat};

/// The seat at `seat_index`, or `SeatOutOfRange`.
fn seat_mut(seats: &mut [Seat], seat_index: u32) -> Result<&mut Seat, Rejection> {
    let count = seat_number(seats.len());
    usize::try_from(seat_index)
        .ok()
        .and_then(|index| seats.get_mut(index))
        .ok_or(Rejection::SeatOutOfRange {
            seat_index,
            seats: count,
        })
}

/// Frees whatever seat `user_id` holds and returns the matching
/// `RoomMicLeft`, or `None` if they were not seated.
pub(super) fn vacate(state: &mut RoomState, user_id: &str) -> Option<EventKind> {
    let index = state.seat_of(user_id)?;
    let seat = state.seats.get_mut(index)?;
    let user_id = seat.user_id.take()?;
    Some(EventKind::RoomMicLeft {
        user_id,
        seat_index: seat_number(index),
    })
}

pub(super) fn take(
    state: &mut RoomState,
    user_id: &str,
    seat_index: u32,
) -> Result<Vec<EventKind>, Rejection> {
    if !state.is_member(user_id) {
        return Err(Rejection::not_a_member(user_id));
    }
    let current = state.seat_of(user_id);
    let seat = seat_mut(&mut state.seats, seat_index)?;
    // One seat per user: moving seats is LeaveMic + TakeMic, so every seat
    // change is visible as a pair of events.
    if let Some(current) = current {
        return Err(Rejection::AlreadySeated {
            seat_index: seat_number(current),
        });
    }
    if seat.locked {
        return Err(Rejection::SeatLocked);
    }
    if seat.user_id.is_some() {
        return Err(Rejection::SeatTaken);
    }
    seat.user_id = Some(user_id.to_owned());
    Ok(vec![EventKind::RoomMicTaken {
        user_id: user_id.to_owned(),
        seat_index,
    }])
}

pub(super) fn leave(state: &mut RoomState, user_id: &str) -> Result<Vec<EventKind>, Rejection> {
    let left = vacate(state, user_id).ok_or(Rejection::NotSeated)?;
    Ok(vec![left])
}

/// Locks a seat; whoever sat there is taken off the mic first.
pub(super) fn lock(
    state: &mut RoomState,
    actor_id: &str,
    seat_index: u32,
) -> Result<Vec<EventKind>, Rejection> {
    if !state.can_manage(actor_id) {
        return Err(Rejection::permission_denied(actor_id));
    }
    let seat = seat_mut(&mut state.seats, seat_index)?;
    if seat.locked {
        return Err(Rejection::SeatAlreadyLocked);
    }
    seat.locked = true;
    let mut events = Vec::with_capacity(2);
    if let Some(user_id) = seat.user_id.take() {
        events.push(EventKind::RoomMicLeft {
            user_id,
            seat_index,
        });
    }
    events.push(EventKind::RoomMicLocked {
        actor_id: actor_id.to_owned(),
        seat_index,
    });
    Ok(events)
}

pub(super) fn unlock(
    state: &mut RoomState,
    actor_id: &str,
    seat_index: u32,
) -> Result<Vec<EventKind>, Rejection> {
    if !state.can_manage(actor_id) {
        return Err(Rejection::permission_denied(actor_id));
    }
    let seat = seat_mut(&mut state.seats, seat_index)?;
    if !seat.locked {
        return Err(Rejection::SeatNotLocked);
    }
    seat.locked = false;
    Ok(vec![EventKind::RoomMicUnlocked {
        actor_id: actor_id.to_owned(),
        seat_index,
    }])
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::event::EventKind;
    use crate::rejection::Rejection;

    #[test]
    fn member_takes_free_seat() {
        let applied = ok(&room_with(&["u1"]), &take_cmd("u1", 3), T0);
        assert_eq!(applied.state.seats[3].user_id.as_deref(), Some("u1"));
        assert_eq!(
            kinds(&applied),
            vec![EventKind::RoomMicTaken {
                user_id: "u1".into(),
                seat_index: 3
            }]
        );
    }

    #[test]
    fn take_rejections() {
        let room = ok(&room_with(&["u1", "u2"]), &take_cmd("u1", 0), T0).state;
        assert_eq!(
            err(&room, &take_cmd("stranger", 1), T0),
            Rejection::NotAMember {
                user_id: "stranger".into()
            }
        );
        assert_eq!(
            err(&room, &take_cmd("u2", 8), T0),
            Rejection::SeatOutOfRange {
                seat_index: 8,
                seats: 8
            }
        );
        assert_eq!(
            err(&room, &take_cmd("u2", u32::MAX), T0),
            Rejection::SeatOutOfRange {
                seat_index: u32::MAX,
                seats: 8
            }
        );
        assert_eq!(err(&room, &take_cmd("u2", 0), T0), Rejection::SeatTaken);
        assert_eq!(
            err(&room, &take_cmd("u1", 1), T0),
            Rejection::AlreadySeated { seat_index: 0 }
        );
        assert_eq!(
            err(&room, &take_cmd("u1", 0), T0),
            Rejection::AlreadySeated { seat_index: 0 }
        );
        let locked = ok(&room, &lock_cmd("owner", 2), T0).state;
        assert_eq!(err(&locked, &take_cmd("u2", 2), T0), Rejection::SeatLocked);
    }

    #[test]
    fn leave_mic_frees_seat() {
        let room = ok(&room_with(&["u1"]), &take_cmd("u1", 5), T0).state;
        let applied = ok(&room, &leave_mic_cmd("u1"), T0);
        assert_eq!(applied.state.seats[5].user_id, None);
        assert_eq!(
            kinds(&applied),
            vec![EventKind::RoomMicLeft {
                user_id: "u1".into(),
                seat_index: 5
            }]
        );
        assert_eq!(
            err(&applied.state, &leave_mic_cmd("u1"), T0),
            Rejection::NotSeated
        );
        assert_eq!(
            err(&applied.state, &leave_mic_cmd("stranger"), T0),
            Rejection::NotSeated
        );
    }

    #[test]
    fn lock_free_seat_then_unlock() {
        let room = open_room();
        let locked = ok(&room, &lock_cmd("owner", 1), T0);
        assert!(locked.state.seats[1].locked);
        assert_eq!(
            kinds(&locked),
            vec![EventKind::RoomMicLocked {
                actor_id: "owner".into(),
                seat_index: 1
            }]
        );
        let unlocked = ok(&locked.state, &unlock_cmd("owner", 1), T0);
        assert!(!unlocked.state.seats[1].locked);
        assert_eq!(
            kinds(&unlocked),
            vec![EventKind::RoomMicUnlocked {
                actor_id: "owner".into(),
                seat_index: 1
            }]
        );
    }

    #[test]
    fn locking_occupied_seat_removes_holder_first() {
        let room = ok(&room_with(&["u1"]), &take_cmd("u1", 2), T0).state;
        let applied = ok(&room, &lock_cmd("owner", 2), T0);
        assert_eq!(applied.state.seats[2].user_id, None);
        assert!(applied.state.seats[2].locked);
        assert!(applied.state.is_member("u1"));
        assert_eq!(
            kinds(&applied),
            vec![
                EventKind::RoomMicLeft {
                    user_id: "u1".into(),
                    seat_index: 2
                },
                EventKind::RoomMicLocked {
                    actor_id: "owner".into(),
                    seat_index: 2
                },
            ]
        );
    }

    #[test]
    fn lock_and_unlock_rejections() {
        let room = ok(&room_with(&["u1"]), &lock_cmd("owner", 0), T0).state;
        assert_eq!(
            err(&room, &lock_cmd("owner", 0), T0),
            Rejection::SeatAlreadyLocked
        );
        assert_eq!(
            err(&room, &unlock_cmd("owner", 1), T0),
            Rejection::SeatNotLocked
        );
        assert_eq!(
            err(&room, &lock_cmd("owner", 99), T0),
            Rejection::SeatOutOfRange {
                seat_index: 99,
                seats: 8
            }
        );
        assert_eq!(
            err(&room, &unlock_cmd("owner", 99), T0),
            Rejection::SeatOutOfRange {
                seat_index: 99,
                seats: 8
            }
        );
        for command in [lock_cmd("u1", 1), unlock_cmd("u1", 0)] {
            assert_eq!(
                err(&room, &command, T0),
                Rejection::PermissionDenied {
                    actor_id: "u1".into()
                }
            );
        }
    }

    #[test]
    fn present_admin_may_lock() {
        let room = ok(&room_with(&["adm"]), &admin_cmd("owner", "adm", true), T0).state;
        assert!(ok(&room, &lock_cmd("adm", 0), T0).state.seats[0].locked);
    }
}
