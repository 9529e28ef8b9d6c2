//! A command another instance forwarded (`RoomPeer.Execute`), validated by
//! the validator of its own entry: the gateway's request by the public API's
//! checks, a treasure wake-up by the consumer's. The forwarding instance's
//! word counts for nothing but its certificate: ids, sizes, charset and the
//! idempotency fingerprint are all computed here again.

use hyapp_api::room::peer_command::Request;

use super::{CommandRequest, RequestContext, open_treasure, requests};
use crate::Error;

/// The command `request` asks for, validated exactly as at its entry.
pub fn forwarded(request: &Request, context: RequestContext<'_>) -> Result<CommandRequest, Error> {
    match request {
        Request::CreateRoom(request) => requests::create_room(request, context),
        Request::CloseRoom(request) => requests::close_room(request, context),
        Request::JoinRoom(request) => requests::join_room(request, context),
        Request::LeaveRoom(request) => requests::leave_room(request, context),
        Request::KickUser(request) => requests::kick_user(request, context),
        Request::SetAdmin(request) => requests::set_admin(request, context),
        Request::TakeMic(request) => requests::take_mic(request, context),
        Request::LeaveMic(request) => requests::leave_mic(request, context),
        Request::LockMic(request) => requests::lock_mic(request, context),
        Request::UnlockMic(request) => requests::unlock_mic(request, context),
        Request::SendGift(request) => requests::send_gift(request, context),
        Request::OpenTreasure(request) => {
            let mut command = open_treasure(request, context.default_app_code)?;
            command.traceparent = context.traceparent.to_owned();
            Ok(command)
        }
    }
}

/// The room and command ids `request` names, unvalidated: what a refusal's
/// `ErrorInfo` reports (it bounds them itself).
pub fn subject(request: &Request) -> (&str, &str) {
    fn meta(meta: &Option<hyapp_api::room::CommandMeta>) -> &str {
        meta.as_ref().map_or("", |meta| meta.command_id.as_str())
    }
    match request {
        Request::CreateRoom(r) => (&r.room_id, meta(&r.meta)),
        Request::CloseRoom(r) => (&r.room_id, meta(&r.meta)),
        Request::JoinRoom(r) => (&r.room_id, meta(&r.meta)),
        Request::LeaveRoom(r) => (&r.room_id, meta(&r.meta)),
        Request::KickUser(r) => (&r.room_id, meta(&r.meta)),
        Request::SetAdmin(r) => (&r.room_id, meta(&r.meta)),
        Request::TakeMic(r) => (&r.room_id, meta(&r.meta)),
        Request::LeaveMic(r) => (&r.room_id, meta(&r.meta)),
        Request::LockMic(r) => (&r.room_id, meta(&r.meta)),
        Request::UnlockMic(r) => (&r.room_id, meta(&r.meta)),
        Request::SendGift(r) => (&r.room_id, meta(&r.meta)),
        Request::OpenTreasure(r) => (&r.room_id, &r.command_id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::tests::context;
    use hyapp_api::room as api;

    fn join(user_id: &str) -> Request {
        Request::JoinRoom(api::JoinRoomRequest {
            meta: Some(api::CommandMeta {
                command_id: "c-1".into(),
                request_id: "r".into(),
                app_code: String::new(),
            }),
            room_id: "room-1".into(),
            user_id: user_id.into(),
        })
    }

    #[test]
    fn a_forwarded_request_meets_the_public_checks_and_is_fingerprinted_here() {
        let gateway = requests::join_room(
            match &join("u-1") {
                Request::JoinRoom(request) => request,
                _ => unreachable!(),
            },
            context(),
        )
        .unwrap();
        let holder = forwarded(&join("u-1"), context()).unwrap();
        assert_eq!(holder.fingerprint, gateway.fingerprint);
        assert_eq!(holder.command, gateway.command);
        for hostile in ["a/b".to_owned(), "u".repeat(5_000), String::new()] {
            let error = forwarded(&join(&hostile), context()).unwrap_err();
            assert!(
                matches!(&error, Error::InvalidArgument(message) if message.starts_with("user_id")),
                "{error}"
            );
        }
        assert_eq!(subject(&join("u-1")), ("room-1", "c-1"));
    }
}
