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
    SetAdminRequest, TakeMicRequest, UnlockMicRequest, peer_command::Request as PeerRequest,
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

/// Every gateway write command, registered once: its `RoomService` method,
/// request message, `PeerCommand` variant (named like the room-core command)
/// and validator. From this table come the RPC methods, the name a refused
/// request is logged under ([`WriteRequest`]), the `PeerCommand` variant it
/// is forwarded in ([`validate::Forwardable`]), and the holder's dispatch of
/// a forwarded request to the same validator ([`forwarded`], [`subject`]).
macro_rules! gateway_commands {
    ($($method:ident($request:ident) => $variant:ident, $validator:path;)*) => {
        $(
            impl WriteRequest for $request {
                const COMMAND: &'static str = stringify!($variant);
                fn meta(&self) -> Option<&CommandMeta> {
                    self.meta.as_ref()
                }
                fn room_id(&self) -> &str {
                    &self.room_id
                }
            }

            impl validate::Forwardable for $request {
                fn into_peer(self) -> PeerRequest {
                    PeerRequest::$variant(self)
                }
            }
        )*

        /// The command a forwarded `request` asks for, validated exactly as
        /// at its entry: the gateway's request by the public API's checks, a
        /// treasure wake-up by the consumer's. The forwarding instance's word
        /// counts for nothing but its certificate: ids, sizes, charset and
        /// the idempotency fingerprint are all computed here again.
        pub(crate) fn forwarded(
            request: &PeerRequest,
            context: RequestContext<'_>,
        ) -> Result<CommandRequest, Error> {
            match request {
                $(PeerRequest::$variant(request) => $validator(request, context),)*
                PeerRequest::OpenTreasure(request) => {
                    let mut command = validate::open_treasure(request, context.default_app_code)?;
                    command.traceparent = context.traceparent.to_owned();
                    Ok(command)
                }
            }
        }

        /// The room and command ids a forwarded `request` names, unvalidated:
        /// what a refusal's `ErrorInfo` reports (it bounds them itself).
        pub(crate) fn subject(request: &PeerRequest) -> (&str, &str) {
            match request {
                $(PeerRequest::$variant(request) => (
                    request.room_id(),
                    request.meta().map_or("", |meta| meta.command_id.as_str()),
                ),)*
                PeerRequest::OpenTreasure(request) => (&request.room_id, &request.command_id),
            }
        }

        #[tonic::async_trait]
        impl RoomService for GrpcRoomService {
            $(
                async fn $method(
                    &self,
                    request: Request<$request>,
                ) -> Result<Response<CommandReply>, Status> {
                    self.command(request, $validator).await
                }
            )*

            async fn heartbeat(
                &self,
                request: Request<HeartbeatRequest>,
            ) -> Result<Response<HeartbeatReply>, Status> {
                self.heartbeat_read(request).await
            }

            async fn get_room(
                &self,
                request: Request<GetRoomRequest>,
            ) -> Result<Response<RoomSnapshot>, Status> {
                self.get_room_read(request).await
            }

            async fn list_rooms(
                &self,
                request: Request<ListRoomsRequest>,
            ) -> Result<Response<ListRoomsReply>, Status> {
                self.list_rooms_read(request).await
            }
        }
    };
}

gateway_commands! {
    create_room(CreateRoomRequest) => CreateRoom, validate::create_room;
    close_room(CloseRoomRequest) => CloseRoom, validate::close_room;
    join_room(JoinRoomRequest) => JoinRoom, validate::join_room;
    leave_room(LeaveRoomRequest) => LeaveRoom, validate::leave_room;
    kick_user(KickUserRequest) => KickUser, validate::kick_user;
    set_admin(SetAdminRequest) => SetAdmin, validate::set_admin;
    take_mic(TakeMicRequest) => TakeMic, validate::take_mic;
    leave_mic(LeaveMicRequest) => LeaveMic, validate::leave_mic;
    lock_mic(LockMicRequest) => LockMic, validate::lock_mic;
    unlock_mic(UnlockMicRequest) => UnlockMic, validate::unlock_mic;
    send_gift(SendGiftRequest) => SendGift, validate::send_gift;
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

impl GrpcRoomService {
    /// `Heartbeat`: the caller may act for the member it keeps present.
    async fn heartbeat_read(
        &self,
        request: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatReply>, Status> {
        let message = request.get_ref();
        self.admit_read(&request, &message.room_id, Some(&message.user_id))?;
        let call = CallContext::from_request(request.metadata(), Instant::now());
        reads::heartbeat(&self.rooms, request.get_ref(), &call).await
    }

    /// `GetRoom`.
    async fn get_room_read(
        &self,
        request: Request<GetRoomRequest>,
    ) -> Result<Response<RoomSnapshot>, Status> {
        self.admit_read(&request, &request.get_ref().room_id, None)?;
        let call = CallContext::from_request(request.metadata(), Instant::now());
        reads::get_room(&self.rooms, request.get_ref(), &call).await
    }

    /// `ListRooms`.
    async fn list_rooms_read(
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
    fn refused_room_and_member_requests_are_named_like_their_commands() {
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
    }

    #[test]
    fn refused_seat_and_gift_requests_are_named_like_their_commands() {
        let room_id = String::from("r1");
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

    fn forwarded_join(user_id: &str) -> PeerRequest {
        PeerRequest::JoinRoom(JoinRoomRequest {
            meta: Some(CommandMeta {
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
        let gateway = validate::join_room(
            match &forwarded_join("u-1") {
                PeerRequest::JoinRoom(request) => request,
                _ => unreachable!(),
            },
            context(),
        )
        .unwrap();
        let holder = forwarded(&forwarded_join("u-1"), context()).unwrap();
        assert_eq!(holder.fingerprint, gateway.fingerprint);
        assert_eq!(holder.command, gateway.command);
        for hostile in ["a/b".to_owned(), "u".repeat(5_000), String::new()] {
            let error = forwarded(&forwarded_join(&hostile), context()).unwrap_err();
            assert!(
                matches!(&error, Error::InvalidArgument(message) if message.starts_with("user_id")),
                "{error}"
            );
        }
        assert_eq!(subject(&forwarded_join("u-1")), ("room-1", "c-1"));
    }
}
