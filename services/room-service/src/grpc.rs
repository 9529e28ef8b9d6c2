//! The tonic `hyapp.room.v1.RoomService` over [`Rooms`]: validates each
//! request (INVALID_ARGUMENT naming the field, before any I/O), reads the
//! `traceparent` metadata for the outbox envelopes, and maps [`crate::Error`]
//! to a status through its one conversion.

use hyapp_api::room::room_service_server::RoomService;
use hyapp_api::room::{
    CloseRoomRequest, CommandReply, CreateRoomRequest, GetRoomRequest, HeartbeatReply,
    HeartbeatRequest, JoinRoomRequest, KickUserRequest, LeaveMicRequest, LeaveRoomRequest,
    ListRoomsReply, ListRoomsRequest, LockMicRequest, RoomListEntry, RoomSnapshot, SendGiftRequest,
    SetAdminRequest, TakeMicRequest, UnlockMicRequest,
};
use tonic::{Request, Response, Status};

use crate::Error;
use crate::service::Rooms;
use crate::validate::{self, CommandRequest, RequestContext};

/// Longest accepted `traceparent` (the W3C format is 55 characters).
const MAX_TRACEPARENT_LEN: usize = 64;

/// The gRPC service.
#[derive(Debug, Clone)]
pub struct GrpcRoomService {
    rooms: Rooms,
}

impl GrpcRoomService {
    /// Serves `rooms`.
    pub fn new(rooms: Rooms) -> Self {
        Self { rooms }
    }

    /// Validates with `validate_fn` and runs the command.
    async fn command<M>(
        &self,
        request: Request<M>,
        validate_fn: fn(&M, RequestContext<'_>) -> Result<CommandRequest, Error>,
    ) -> Result<Response<CommandReply>, Status> {
        let traceparent = request
            .metadata()
            .get("traceparent")
            .and_then(|value| value.to_str().ok())
            .filter(|value| value.len() <= MAX_TRACEPARENT_LEN)
            .unwrap_or_default()
            .to_owned();
        let command = validate_fn(request.get_ref(), self.rooms.context(&traceparent))?;
        Ok(Response::new(self.rooms.execute(command).await?))
    }
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
        let request = request.into_inner();
        let expires_at_ms = self
            .rooms
            .heartbeat(&request.room_id, &request.user_id)
            .await?;
        Ok(Response::new(HeartbeatReply { expires_at_ms }))
    }

    async fn get_room(
        &self,
        request: Request<GetRoomRequest>,
    ) -> Result<Response<RoomSnapshot>, Status> {
        Ok(Response::new(
            self.rooms.get_room(&request.get_ref().room_id).await?,
        ))
    }

    async fn list_rooms(
        &self,
        request: Request<ListRoomsRequest>,
    ) -> Result<Response<ListRoomsReply>, Status> {
        let rooms = self.rooms.list_rooms(request.get_ref().limit).await?;
        Ok(Response::new(ListRoomsReply {
            rooms: rooms
                .into_iter()
                .map(|(room_id, heat)| RoomListEntry { room_id, heat })
                .collect(),
        }))
    }
}
