//! Room lifecycle: `CreateRoom` and `CloseRoom`.

use std::collections::BTreeMap;

use crate::event::EventKind;
use crate::rejection::Rejection;
use crate::rules::utc_day;
use crate::state::{Member, RoomState, RoomStatus, Seat};

/// Opens a vacant room; the owner becomes its first member.
pub(super) fn create_room(
    state: &mut RoomState,
    owner_id: &str,
    title: &str,
    mic_seat_count: u32,
    now_ms: i64,
) -> Result<Vec<EventKind>, Rejection> {
    if title.trim().is_empty() {
        return Err(Rejection::invalid_argument("title must not be empty"));
    }
    let max_seats = state.rules.effective_max_mic_seats();
    if mic_seat_count == 0 || mic_seat_count > max_seats {
        return Err(Rejection::invalid_argument(format!(
            "mic_seat_count must be in 1..={max_seats}, got {mic_seat_count}"
        )));
    }
    let seat_count = usize::try_from(mic_seat_count)
        .map_err(|_| Rejection::invalid_argument("mic_seat_count does not fit this platform"))?;

    state.status = RoomStatus::Open;
    state.owner_id = owner_id.to_owned();
    state.title = title.to_owned();
    state.members.insert(
        owner_id.to_owned(),
        Member {
            joined_at_ms: now_ms,
        },
    );
    state.seats = vec![Seat::default(); seat_count];
    state.heat_day = utc_day(now_ms);
    Ok(vec![EventKind::RoomCreated {
        owner_id: owner_id.to_owned(),
        title: title.to_owned(),
        mic_seat_count,
    }])
}

/// Closes the room for good.
///
/// Members and seats are cleared without per-member `RoomUserLeft` /
/// `RoomMicLeft` events: `RoomClosed` already tells every consumer that
/// everyone left, and fanning out one event per member would make closing a
/// crowded room needlessly expensive. Admins, bans, heat and rank are kept as
/// the room's final record.
pub(super) fn close_room(
    state: &mut RoomState,
    actor_id: &str,
) -> Result<Vec<EventKind>, Rejection> {
    if !state.can_manage(actor_id) {
        return Err(Rejection::permission_denied(actor_id));
    }
    state.status = RoomStatus::Closed;
    state.members = BTreeMap::new();
    state.seats = Vec::new();
    Ok(vec![EventKind::RoomClosed {
        closed_by: actor_id.to_owned(),
    }])
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::event::EventKind;
    use crate::rejection::Rejection;
    use crate::rules::{RoomRules, SEAT_HARD_LIMIT, utc_day};
    use crate::state::{RoomState, RoomStatus};

    #[test]
    fn create_opens_room_with_owner_and_seats() {
        let vacant = RoomState::vacant("r1", RoomRules::default());
        let applied = ok(&vacant, &create_cmd("owner", "Chill", 8), T0);
        let state = &applied.state;
        assert_eq!(state.status, RoomStatus::Open);
        assert_eq!(state.owner_id, "owner");
        assert_eq!(state.title, "Chill");
        assert_eq!(state.members.len(), 1);
        assert_eq!(state.members["owner"].joined_at_ms, T0);
        assert_eq!(state.seats.len(), 8);
        assert!(state.seats.iter().all(|s| s.user_id.is_none() && !s.locked));
        assert_eq!(state.heat_day, utc_day(T0));
        assert_eq!(
            kinds(&applied),
            vec![EventKind::RoomCreated {
                owner_id: "owner".into(),
                title: "Chill".into(),
                mic_seat_count: 8,
            }]
        );
        assert_eq!(applied.events[0].seq, 1);
    }

    #[test]
    fn create_rejects_empty_title() {
        let vacant = RoomState::vacant("r1", RoomRules::default());
        for title in ["", "   "] {
            assert!(matches!(
                err(&vacant, &create_cmd("owner", title, 8), T0),
                Rejection::InvalidArgument { .. }
            ));
        }
    }

    #[test]
    fn create_rejects_bad_seat_counts() {
        let vacant = RoomState::vacant("r1", RoomRules::default());
        for seats in [0, 21, u32::MAX] {
            assert!(matches!(
                err(&vacant, &create_cmd("owner", "t", seats), T0),
                Rejection::InvalidArgument { .. }
            ));
        }
        assert_eq!(
            ok(&vacant, &create_cmd("o", "t", 20), T0).state.seats.len(),
            20
        );
    }

    #[test]
    fn create_caps_seats_even_with_absurd_rules() {
        let rules = RoomRules {
            max_mic_seats: u32::MAX,
            ..RoomRules::default()
        };
        let vacant = RoomState::vacant("r1", rules);
        assert!(matches!(
            err(&vacant, &create_cmd("owner", "t", SEAT_HARD_LIMIT + 1), T0),
            Rejection::InvalidArgument { .. }
        ));
    }

    #[test]
    fn owner_closes_room_and_everyone_is_gone() {
        let room = ok(&room_with(&["u1"]), &take_cmd("u1", 0), T0).state;
        let applied = ok(&room, &close_cmd("owner"), T0);
        assert_eq!(applied.state.status, RoomStatus::Closed);
        assert!(applied.state.members.is_empty());
        assert!(applied.state.seats.is_empty());
        assert_eq!(
            kinds(&applied),
            vec![EventKind::RoomClosed {
                closed_by: "owner".into()
            }]
        );
    }

    #[test]
    fn present_admin_may_close_room() {
        let room = ok(&room_with(&["adm"]), &admin_cmd("owner", "adm", true), T0).state;
        assert_eq!(
            ok(&room, &close_cmd("adm"), T0).state.status,
            RoomStatus::Closed
        );
    }

    #[test]
    fn plain_member_or_stranger_cannot_close() {
        let room = room_with(&["u1"]);
        for actor in ["u1", "stranger"] {
            assert_eq!(
                err(&room, &close_cmd(actor), T0),
                Rejection::PermissionDenied {
                    actor_id: actor.into()
                }
            );
        }
    }
}
