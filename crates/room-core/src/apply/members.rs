//! Membership and roles: `JoinRoom`, `LeaveRoom`, `KickUser`, `SetAdmin`.

use super::mic;
use crate::command::LeaveReason;
use crate::event::EventKind;
use crate::rejection::Rejection;
use crate::state::{Member, RoomState};

pub(super) fn join(
    state: &mut RoomState,
    user_id: &str,
    now_ms: i64,
) -> Result<Vec<EventKind>, Rejection> {
    if state.is_member(user_id) {
        // Not an idempotent no-op: retries are deduplicated by the service's
        // command_id, so a second join here is a client bug worth surfacing.
        return Err(Rejection::AlreadyMember);
    }
    if let Some(&until_ms) = state.bans.get(user_id) {
        if until_ms > now_ms {
            return Err(Rejection::Banned { until_ms });
        }
        // Expired: drop it so the ban map does not grow forever.
        state.bans.remove(user_id);
    }
    // The owner may always come back to their own room: without them a full
    // room could not be managed or closed by its owner. So members stay at
    // most `max_members`, plus the owner returning to a full room.
    let max_members = state.rules.max_members;
    if state.members.len() >= max_members && user_id != state.owner_id {
        return Err(Rejection::RoomFull { max_members });
    }
    state.members.insert(
        user_id.to_owned(),
        Member {
            joined_at_ms: now_ms,
        },
    );
    Ok(vec![EventKind::RoomUserJoined {
        user_id: user_id.to_owned(),
    }])
}

pub(super) fn leave(
    state: &mut RoomState,
    user_id: &str,
    reason: LeaveReason,
) -> Result<Vec<EventKind>, Rejection> {
    if reason == LeaveReason::Kicked {
        // Kicks need an actor, permission checks and maybe a ban: KickUser.
        return Err(Rejection::invalid_argument(
            "LeaveRoom cannot use reason Kicked; use KickUser",
        ));
    }
    if state.members.remove(user_id).is_none() {
        return Err(Rejection::not_a_member(user_id));
    }
    let mut events = Vec::with_capacity(2);
    events.extend(mic::vacate(state, user_id));
    events.push(EventKind::RoomUserLeft {
        user_id: user_id.to_owned(),
        reason,
    });
    Ok(events)
}

/// Removes a member, optionally banning them.
///
/// Kicking an admin (only the owner may) also revokes the admin role and says
/// so with a trailing `RoomAdminChanged`: otherwise a banned ex-admin would
/// regain management rights the moment the ban expires and they rejoin.
pub(super) fn kick(
    state: &mut RoomState,
    actor_id: &str,
    target_id: &str,
    ban_until_ms: i64,
    now_ms: i64,
) -> Result<Vec<EventKind>, Rejection> {
    if !state.can_manage(actor_id) {
        return Err(Rejection::permission_denied(actor_id));
    }
    if target_id == state.owner_id {
        return Err(Rejection::CannotKickOwner);
    }
    let target_is_admin = state.admins.contains(target_id);
    if target_is_admin && actor_id != state.owner_id {
        return Err(Rejection::permission_denied(actor_id));
    }
    if state.members.remove(target_id).is_none() {
        return Err(Rejection::not_a_member(target_id));
    }
    if ban_until_ms > now_ms {
        make_room_for_a_ban(state, target_id, now_ms)?;
        state.bans.insert(target_id.to_owned(), ban_until_ms);
    }
    let mut events = Vec::with_capacity(4);
    events.extend(mic::vacate(state, target_id));
    events.push(EventKind::RoomUserKicked {
        actor_id: actor_id.to_owned(),
        target_id: target_id.to_owned(),
        ban_until_ms,
    });
    events.push(EventKind::RoomUserLeft {
        user_id: target_id.to_owned(),
        reason: LeaveReason::Kicked,
    });
    if target_is_admin {
        state.admins.remove(target_id);
        events.push(EventKind::RoomAdminChanged {
            target_id: target_id.to_owned(),
            admin: false,
        });
    }
    Ok(events)
}

/// Refuses a new ban beyond `max_bans`. Only bans in force count: expired
/// ones (normally pruned when their user rejoins) are pruned here first, so a
/// room is never refused over bans that no longer bind anyone. Replacing the
/// ban of a user who already has one adds no entry and is never refused.
fn make_room_for_a_ban(
    state: &mut RoomState,
    target_id: &str,
    now_ms: i64,
) -> Result<(), Rejection> {
    let max_bans = state.rules.max_bans;
    if state.bans.len() < max_bans || state.bans.contains_key(target_id) {
        return Ok(());
    }
    state.bans.retain(|_, until_ms| *until_ms > now_ms);
    if state.bans.len() >= max_bans {
        return Err(Rejection::TooManyBans { max_bans });
    }
    Ok(())
}

/// Grants or revokes the admin role (owner only).
///
/// Granting requires the target to be present. Revoking does not: the role
/// outlives a visit, and an absent admin must still be demotable.
pub(super) fn set_admin(
    state: &mut RoomState,
    actor_id: &str,
    target_id: &str,
    admin: bool,
) -> Result<Vec<EventKind>, Rejection> {
    if actor_id != state.owner_id {
        return Err(Rejection::permission_denied(actor_id));
    }
    if target_id == state.owner_id {
        return Err(Rejection::invalid_argument(
            "the owner's role cannot be changed",
        ));
    }
    let is_admin = state.admins.contains(target_id);
    let revoking_an_admin = !admin && is_admin;
    if !state.is_member(target_id) && !revoking_an_admin {
        return Err(Rejection::not_a_member(target_id));
    }
    if is_admin == admin {
        return Err(Rejection::AdminUnchanged {
            target_id: target_id.to_owned(),
            admin,
        });
    }
    if admin {
        // Revoking is never refused, so a room over its cap (a lowered rule)
        // can always shrink back under it.
        let max_admins = state.rules.max_admins;
        if state.admins.len() >= max_admins {
            return Err(Rejection::TooManyAdmins { max_admins });
        }
        state.admins.insert(target_id.to_owned());
    } else {
        state.admins.remove(target_id);
    }
    Ok(vec![EventKind::RoomAdminChanged {
        target_id: target_id.to_owned(),
        admin,
    }])
}

#[cfg(test)]
#[path = "members_tests.rs"]
mod tests;
