//! The tonic `hyapp.room.v1.RoomService` over [`Rooms`]: runs each write
//! command in its span (`command_span`, continuing the `traceparent`
//! metadata; the span's context goes on the outbox envelopes), validates
//! each request (INVALID_ARGUMENT naming the field, before any I/O), takes the caller's
//! deadline and metadata along if the call is forwarded, names the instance
//! that served it in `x-room-served-by` and its address in
//! `x-room-served-by-address` (the routing hint), and maps [`crate::Error`]
//! to a status through its one conversion, naming the call's room and
//! command in the refusal's `ErrorInfo` (docs/gateway.md). The reads live in
//! `reads`, measured where they execute; `peer` is [`GrpcRoomPeer`], the
//! `RoomPeer` service other instances forward to. A write request refused by
//! validation still logs its `room_command_timing` line
//! (docs/design.md#command-timing-log).

mod peer;
mod reads;

pub use peer::GrpcRoomPeer;
pub use reads::{GET_ROOM, HEARTBEAT, LIST_ROOMS};

use hyapp_api::room::room_service_server::RoomService;
use std::sync::Arc;
use std::time::Instant;

use hyapp_api::room::{
    CloseRoomRequest, CommandMeta, CommandReply, CreateRoomRequest, GetRoomRequest, HeartbeatReply,
    HeartbeatRequest, JoinRoomRequest, KickUserRequest, LeaveMicRequest, LeaveRoomRequest,
    ListRoomsReply, ListRoomsRequest, LockMicRequest, RoomSnapshot, SendGiftRequest,
    SetAdminRequest, TakeMicRequest, UnlockMicRequest,
};
use tonic::{Request, Response, Status};

use crate::Error;
use crate::auth::CallerAuth;
use crate::command_span;
use crate::error::Subject;
use crate::forward::{CallContext, SERVED_BY, SERVED_BY_ADDRESS, Served};
use crate::service::Rooms;
use crate::timing;
use crate::validate::{self, CommandRequest, RequestContext};

/// Longest accepted `traceparent` (the W3C format is 55 characters).
const MAX_TRACEPARENT_LEN: usize = 64;

/// The call's `traceparent` metadata, "" when absent or longer than a W3C
/// one can be.
fn traceparent_of(metadata: &tonic::metadata::MetadataMap) -> &str {
    metadata
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .filter(|value| value.len() <= MAX_TRACEPARENT_LEN)
        .unwrap_or_default()
}

/// A gateway write request: what the timing line of a request refused by
/// validation can still read from it.
trait WriteRequest {
    /// The command's name, as `room_core::Command::name` gives it.
    const COMMAND: &'static str;
    /// The unvalidated `meta`.
    fn meta(&self) -> Option<&CommandMeta>;
    /// The unvalidated `room_id`.
    fn room_id(&self) -> &str;
}

macro_rules! write_requests {
    ($($request:ty => $command:literal),* $(,)?) => {$(
        impl WriteRequest for $request {
            const COMMAND: &'static str = $command;
            fn meta(&self) -> Option<&CommandMeta> {
                self.meta.as_ref()
            }
            fn room_id(&self) -> &str {
                &self.room_id
            }
        }
    )*};
}

write_requests! {
    CreateRoomRequest => "CreateRoom",
    CloseRoomRequest => "CloseRoom",
    JoinRoomRequest => "JoinRoom",
    LeaveRoomRequest => "LeaveRoom",
    KickUserRequest => "KickUser",
    SetAdminRequest => "SetAdmin",
    TakeMicRequest => "TakeMic",
    LeaveMicRequest => "LeaveMic",
    LockMicRequest => "LockMic",
    UnlockMicRequest => "UnlockMic",
    SendGiftRequest => "SendGift",
}

/// The gRPC service.
#[derive(Debug, Clone)]
pub struct GrpcRoomService {
    rooms: Rooms,
    auth: Arc<CallerAuth>,
}

impl GrpcRoomService {
    /// Serves `rooms` to the callers `auth` admits.
    pub fn new(rooms: Rooms, auth: Arc<CallerAuth>) -> Self {
        Self { rooms, auth }
    }

    /// Admits a read's caller, and its assertion for `acting` (the user a
    /// heartbeat keeps present), or the refusal as a status.
    fn admit_read<T>(
        &self,
        request: &Request<T>,
        room_id: &str,
        acting: Option<&str>,
    ) -> Result<(), Status> {
        self.auth
            .gateway(request)
            .and_then(|caller| caller.may_act_as(acting))
            .map_err(|error| {
                error.into_status(Subject {
                    room_id,
                    command_id: "",
                })
            })
    }

    /// Validates with `validate_fn` and runs the command inside its span
    /// (`command_span::gateway`); a refusal is logged as the command's
    /// timing line (the pipeline logs the others).
    async fn command<M: WriteRequest>(
        &self,
        request: Request<M>,
        validate_fn: fn(&M, RequestContext<'_>) -> Result<CommandRequest, Error>,
    ) -> Result<Response<CommandReply>, Status> {
        let started = Instant::now();
        let call = CallContext::from_request(request.metadata(), started);
        let gateway_traceparent = traceparent_of(request.metadata());
        let message = request.get_ref();
        let span = command_span::gateway(M::COMMAND, gateway_traceparent, message.room_id());
        // The outbox rows carry the command's span, not the gateway's: the
        // relay's publish span is then a child of the command.
        let traceparent = span.traceparent();
        let executed = command_span::run(span, async {
            // Who calls and for whom, before anything else is looked at.
            let admitted = self.auth.gateway(&request).and_then(|caller| {
                let command = validate_fn(message, self.rooms.context(&traceparent))?;
                caller.may_act_as(command.command.acting_user())?;
                Ok(command)
            });
            let command = match admitted {
                Ok(command) => command,
                Err(error) => {
                    let command_id = message.meta().map_or("", |meta| meta.command_id.as_str());
                    timing::log_refused(
                        M::COMMAND,
                        message.room_id(),
                        command_id,
                        &error,
                        started.elapsed(),
                    );
                    return Err(error);
                }
            };
            self.rooms.execute_call(command, &call).await
        })
        .await;
        executed.map(served).map_err(|error| {
            error.into_status(Subject {
                room_id: message.room_id(),
                command_id: message.meta().map_or("", |meta| meta.command_id.as_str()),
            })
        })
    }
}

/// The response, with the instance that executed the call named: its node
/// id and its advertised address, where the room's next calls can go
/// straight.
fn served<T>(served: Served<T>) -> Response<T> {
    let mut response = Response::new(served.value);
    if let Ok(value) = served.node_id.parse() {
        response.metadata_mut().insert(SERVED_BY, value);
    }
    if !served.address.is_empty()
        && let Ok(value) = served.address.parse()
    {
        response.metadata_mut().insert(SERVED_BY_ADDRESS, value);
    }
    response
}

#[tonic::async_trait]
impl RoomService for GrpcRoomService {
    async fn create_room(
        &self,
        request: Request<CreateRoomRequest>,
    ) -> Result<Response<CommandReply>, Status> {
        self.command(request, validate::create_room).await
    }

    async fn close_room(
        &self,
        request: Request<CloseRoomRequest>,
    ) -> Result<Response<CommandReply>, Status> {
        self.command(request, validate::close_room).await
    }

    async fn join_room(
        &self,
        request: Request<JoinRoomRequest>,
    ) -> Result<Response<CommandReply>, Status> {
        self.command(request, validate::join_room).await
    }

    async fn leave_room(
        &self,
        request: Request<LeaveRoomRequest>,
    ) -> Result<Response<CommandReply>, Status> {
        self.command(request, validate::leave_room).await
    }

    async fn kick_user(
        &self,
        request: Request<KickUserRequest>,
    ) -> Result<Response<CommandReply>, Status> {
        self.command(request, validate::kick_user).await
    }

    async fn set_admin(
        &self,
        request: Request<SetAdminRequest>,
    ) -> Result<Response<CommandReply>, Status> {
        self.command(request, validate::set_admin).await
    }

    async fn take_mic(
        &self,
        request: Request<TakeMicRequest>,
    ) -> Result<Response<CommandReply>, Status> {
        self.command(request, validate::take_mic).await
    }

    async fn leave_mic(
        &self,
        request: Request<LeaveMicRequest>,
    ) -> Result<Response<CommandReply>, Status> {
        self.command(request, validate::leave_mic).await
    }

    async fn lock_mic(
        &self,
        request: Request<LockMicRequest>,
    ) -> Result<Response<CommandReply>, Status> {
        self.command(request, validate::lock_mic).await
    }

    async fn unlock_mic(
        &self,
        request: Request<UnlockMicRequest>,
    ) -> Result<Response<CommandReply>, Status> {
        self.command(request, validate::unlock_mic).await
    }

    async fn send_gift(
        &self,
        request: Request<SendGiftRequest>,
    ) -> Result<Response<CommandReply>, Status> {
        self.command(request, validate::send_gift).await
    }

    async fn heartbeat(
        &self,
        request: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatReply>, Status> {
        let message = request.get_ref();
        self.admit_read(&request, &message.room_id, Some(&message.user_id))?;
        let call = CallContext::from_request(request.metadata(), Instant::now());
        reads::heartbeat(&self.rooms, request.get_ref(), &call).await
    }

    async fn get_room(
        &self,
        request: Request<GetRoomRequest>,
    ) -> Result<Response<RoomSnapshot>, Status> {
        self.admit_read(&request, &request.get_ref().room_id, None)?;
        let call = CallContext::from_request(request.metadata(), Instant::now());
        reads::get_room(&self.rooms, request.get_ref(), &call).await
    }

    async fn list_rooms(
        &self,
        request: Request<ListRoomsRequest>,
    ) -> Result<Response<ListRoomsReply>, Status> {
        self.admit_read(&request, "", None)?;
        reads::list_rooms(&self.rooms, request.get_ref()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::validate::tests::context;

    fn meta() -> Option<CommandMeta> {
        Some(CommandMeta {
            command_id: "c1".into(),
            ..CommandMeta::default()
        })
    }

    /// The name a refused request is logged under is the name its accepted
    /// command is logged under.
    fn assert_named<M: WriteRequest>(
        request: &M,
        validate_fn: fn(&M, RequestContext<'_>) -> Result<CommandRequest, Error>,
    ) {
        let command = validate_fn(request, context()).expect("valid request");
        assert_eq!(M::COMMAND, command.command.name());
        assert_eq!(request.room_id(), command.room_id);
        assert_eq!(
            request.meta().map(|meta| meta.command_id.as_str()),
            Some(command.command_id.as_str())
        );
    }

    #[test]
    fn refused_requests_are_named_like_their_commands() {
        let room_id = String::from("r1");
        assert_named(
            &CreateRoomRequest {
                meta: meta(),
                room_id: room_id.clone(),
                owner_id: "o".into(),
                title: "t".into(),
                mic_seat_count: 1,
            },
            validate::create_room,
        );
        assert_named(
            &CloseRoomRequest {
                meta: meta(),
                room_id: room_id.clone(),
                actor_id: "o".into(),
            },
            validate::close_room,
        );
        assert_named(
            &JoinRoomRequest {
                meta: meta(),
                room_id: room_id.clone(),
                user_id: "u".into(),
            },
            validate::join_room,
        );
        assert_named(
            &LeaveRoomRequest {
                meta: meta(),
                room_id: room_id.clone(),
                user_id: "u".into(),
            },
            validate::leave_room,
        );
        assert_named(
            &KickUserRequest {
                meta: meta(),
                room_id: room_id.clone(),
                actor_id: "o".into(),
                target_id: "u".into(),
                ..KickUserRequest::default()
            },
            validate::kick_user,
        );
        assert_named(
            &SetAdminRequest {
                meta: meta(),
                room_id: room_id.clone(),
                actor_id: "o".into(),
                target_id: "u".into(),
                ..SetAdminRequest::default()
            },
            validate::set_admin,
        );
        assert_named(
            &TakeMicRequest {
                meta: meta(),
                room_id: room_id.clone(),
                user_id: "u".into(),
                ..TakeMicRequest::default()
            },
            validate::take_mic,
        );
        assert_named(
            &LeaveMicRequest {
                meta: meta(),
                room_id: room_id.clone(),
                user_id: "u".into(),
            },
            validate::leave_mic,
        );
        assert_named(
            &LockMicRequest {
                meta: meta(),
                room_id: room_id.clone(),
                actor_id: "o".into(),
                ..LockMicRequest::default()
            },
            validate::lock_mic,
        );
        assert_named(
            &UnlockMicRequest {
                meta: meta(),
                room_id: room_id.clone(),
                actor_id: "o".into(),
                ..UnlockMicRequest::default()
            },
            validate::unlock_mic,
        );
        assert_named(
            &SendGiftRequest {
                meta: meta(),
                room_id,
                sender_id: "s".into(),
                receiver_id: "r".into(),
                gift_id: "g".into(),
                count: 1,
                unit_value: 1,
            },
            validate::send_gift,
        );
    }
}
