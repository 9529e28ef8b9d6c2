//! One validator per gateway write RPC: field checks that do not depend on
//! room state, then the room_core command with its fingerprint. User ids are
//! Tencent IM accounts, so they are bounded by its limit (`MAX_USER_ID_LEN`);
//! gift ids only by their column.

use hyapp_api::room as api;
use room_core::{Command, LeaveReason};

use super::{
    CommandRequest, MAX_ID_LEN, MAX_TITLE_CHARS, MAX_USER_ID_LEN, RequestContext, build, check_id,
};
use crate::Error;

/// A closure clearing `meta.request_id` (tracing only, so not part of the fingerprint).
macro_rules! clear_request_id {
    () => {
        |message| {
            if let Some(meta) = message.meta.as_mut() {
                meta.request_id.clear();
            }
        }
    };
}

/// `CreateRoom`.
pub fn create_room(
    request: &api::CreateRoomRequest,
    context: RequestContext<'_>,
) -> Result<CommandRequest, Error> {
    check_id("owner_id", &request.owner_id, MAX_USER_ID_LEN)?;
    if request.title.trim().is_empty() {
        return Err(Error::InvalidArgument("title must not be empty".into()));
    }
    let title_chars = request.title.chars().count();
    if title_chars > MAX_TITLE_CHARS {
        return Err(Error::InvalidArgument(format!(
            "title must be at most {MAX_TITLE_CHARS} characters, got {title_chars}"
        )));
    }
    // Titles are shown to users and sent through IM: no control characters.
    if let Some(position) = request.title.chars().position(char::is_control) {
        return Err(Error::InvalidArgument(format!(
            "title contains a control character at position {position}"
        )));
    }
    if request.mic_seat_count == 0 {
        return Err(Error::InvalidArgument(
            "mic_seat_count must be at least 1".into(),
        ));
    }
    let command = Command::CreateRoom {
        owner_id: request.owner_id.clone(),
        title: request.title.clone(),
        mic_seat_count: request.mic_seat_count,
    };
    build(
        "CreateRoom",
        request.meta.as_ref(),
        &request.room_id,
        request,
        clear_request_id!(),
        context,
        command,
    )
}

/// `CloseRoom`.
pub fn close_room(
    request: &api::CloseRoomRequest,
    context: RequestContext<'_>,
) -> Result<CommandRequest, Error> {
    check_id("actor_id", &request.actor_id, MAX_USER_ID_LEN)?;
    let command = Command::CloseRoom {
        actor_id: request.actor_id.clone(),
    };
    build(
        "CloseRoom",
        request.meta.as_ref(),
        &request.room_id,
        request,
        clear_request_id!(),
        context,
        command,
    )
}

/// `JoinRoom`.
pub fn join_room(
    request: &api::JoinRoomRequest,
    context: RequestContext<'_>,
) -> Result<CommandRequest, Error> {
    check_id("user_id", &request.user_id, MAX_USER_ID_LEN)?;
    let command = Command::JoinRoom {
        user_id: request.user_id.clone(),
    };
    build(
        "JoinRoom",
        request.meta.as_ref(),
        &request.room_id,
        request,
        clear_request_id!(),
        context,
        command,
    )
}

/// `LeaveRoom` (voluntary).
pub fn leave_room(
    request: &api::LeaveRoomRequest,
    context: RequestContext<'_>,
) -> Result<CommandRequest, Error> {
    check_id("user_id", &request.user_id, MAX_USER_ID_LEN)?;
    let command = Command::LeaveRoom {
        user_id: request.user_id.clone(),
        reason: LeaveReason::Voluntary,
    };
    build(
        "LeaveRoom",
        request.meta.as_ref(),
        &request.room_id,
        request,
        clear_request_id!(),
        context,
        command,
    )
}

/// `KickUser`; the ban duration becomes an absolute time so replay is deterministic.
pub fn kick_user(
    request: &api::KickUserRequest,
    context: RequestContext<'_>,
) -> Result<CommandRequest, Error> {
    check_id("actor_id", &request.actor_id, MAX_USER_ID_LEN)?;
    check_id("target_id", &request.target_id, MAX_USER_ID_LEN)?;
    let ban_until_ms = if request.ban_seconds == 0 {
        0
    } else {
        context
            .now_ms
            .saturating_add(i64::from(request.ban_seconds).saturating_mul(1_000))
    };
    let command = Command::KickUser {
        actor_id: request.actor_id.clone(),
        target_id: request.target_id.clone(),
        ban_until_ms,
    };
    build(
        "KickUser",
        request.meta.as_ref(),
        &request.room_id,
        request,
        clear_request_id!(),
        context,
        command,
    )
}

/// `SetAdmin`.
pub fn set_admin(
    request: &api::SetAdminRequest,
    context: RequestContext<'_>,
) -> Result<CommandRequest, Error> {
    check_id("actor_id", &request.actor_id, MAX_USER_ID_LEN)?;
    check_id("target_id", &request.target_id, MAX_USER_ID_LEN)?;
    let command = Command::SetAdmin {
        actor_id: request.actor_id.clone(),
        target_id: request.target_id.clone(),
        admin: request.admin,
    };
    build(
        "SetAdmin",
        request.meta.as_ref(),
        &request.room_id,
        request,
        clear_request_id!(),
        context,
        command,
    )
}

/// `TakeMic`.
pub fn take_mic(
    request: &api::TakeMicRequest,
    context: RequestContext<'_>,
) -> Result<CommandRequest, Error> {
    check_id("user_id", &request.user_id, MAX_USER_ID_LEN)?;
    let command = Command::TakeMic {
        user_id: request.user_id.clone(),
        seat_index: request.seat_index,
    };
    build(
        "TakeMic",
        request.meta.as_ref(),
        &request.room_id,
        request,
        clear_request_id!(),
        context,
        command,
    )
}

/// `LeaveMic`.
pub fn leave_mic(
    request: &api::LeaveMicRequest,
    context: RequestContext<'_>,
) -> Result<CommandRequest, Error> {
    check_id("user_id", &request.user_id, MAX_USER_ID_LEN)?;
    let command = Command::LeaveMic {
        user_id: request.user_id.clone(),
    };
    build(
        "LeaveMic",
        request.meta.as_ref(),
        &request.room_id,
        request,
        clear_request_id!(),
        context,
        command,
    )
}

/// `LockMic`.
pub fn lock_mic(
    request: &api::LockMicRequest,
    context: RequestContext<'_>,
) -> Result<CommandRequest, Error> {
    check_id("actor_id", &request.actor_id, MAX_USER_ID_LEN)?;
    let command = Command::LockMic {
        actor_id: request.actor_id.clone(),
        seat_index: request.seat_index,
    };
    build(
        "LockMic",
        request.meta.as_ref(),
        &request.room_id,
        request,
        clear_request_id!(),
        context,
        command,
    )
}

/// `UnlockMic`.
pub fn unlock_mic(
    request: &api::UnlockMicRequest,
    context: RequestContext<'_>,
) -> Result<CommandRequest, Error> {
    check_id("actor_id", &request.actor_id, MAX_USER_ID_LEN)?;
    let command = Command::UnlockMic {
        actor_id: request.actor_id.clone(),
        seat_index: request.seat_index,
    };
    build(
        "UnlockMic",
        request.meta.as_ref(),
        &request.room_id,
        request,
        clear_request_id!(),
        context,
        command,
    )
}

/// `SendGift`: signed wire amounts must be positive and fit room_core's types;
/// room_core then checks them against the room's limits.
pub fn send_gift(
    request: &api::SendGiftRequest,
    context: RequestContext<'_>,
) -> Result<CommandRequest, Error> {
    check_id("sender_id", &request.sender_id, MAX_USER_ID_LEN)?;
    check_id("receiver_id", &request.receiver_id, MAX_USER_ID_LEN)?;
    check_id("gift_id", &request.gift_id, MAX_ID_LEN)?;
    if request.count <= 0 {
        return Err(Error::InvalidArgument(format!(
            "count must be positive, got {}",
            request.count
        )));
    }
    let count = u32::try_from(request.count).map_err(|_| {
        Error::InvalidArgument(format!(
            "count {} overflows (at most {})",
            request.count,
            u32::MAX
        ))
    })?;
    if request.unit_value <= 0 {
        return Err(Error::InvalidArgument(format!(
            "unit_value must be positive, got {}",
            request.unit_value
        )));
    }
    let unit_value = request.unit_value.unsigned_abs();
    // Refused here, before any I/O, when no room's rules could take it;
    // the total itself is room-core's (`RoomGiftSent.total_value`).
    if room_core::gift_total(count, unit_value).is_none() {
        return Err(Error::InvalidArgument(format!(
            "count × unit_value ({count} × {unit_value}) overflows"
        )));
    }
    let command = Command::SendGift {
        sender_id: request.sender_id.clone(),
        receiver_id: request.receiver_id.clone(),
        gift_id: request.gift_id.clone(),
        count,
        unit_value,
    };
    build(
        "SendGift",
        request.meta.as_ref(),
        &request.room_id,
        request,
        clear_request_id!(),
        context,
        command,
    )
}
