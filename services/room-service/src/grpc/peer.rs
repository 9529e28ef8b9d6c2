//! [`GrpcRoomPeer`], the `RoomPeer` service other instances forward to
//! because this instance holds the room: calls are served here and never
//! forwarded again. A forwarded command is decoded strictly and its ids are
//! checked again (the peer port is reachable by whoever reaches the gateway
//! port); reads are measured here, where they execute.

use std::time::Instant;

use hyapp_api::room::room_peer_server::RoomPeer;
use hyapp_api::room::{
    CommandReply, GetRoomRequest, HeartbeatReply, HeartbeatRequest, PeerCommand, RoomSnapshot,
};
use tonic::{Request, Response, Status};

use super::{reads, served};
use crate::Error;
use crate::command_span;
use crate::error::Subject;
use crate::forward::CallContext;
use crate::service::Rooms;
use crate::validate::{self, CommandRequest, MAX_COMMAND_ID_LEN, MAX_ROOM_ID_LEN};

/// Largest `command_json` of a forwarded command; real commands are a few
/// hundred bytes.
const MAX_PEER_COMMAND_BYTES: usize = 64 * 1024;

/// The `RoomPeer` service: calls other instances forward here because this
/// instance holds the room. They are served here and never forwarded again.
#[derive(Debug, Clone)]
pub struct GrpcRoomPeer {
    rooms: Rooms,
}

impl GrpcRoomPeer {
    /// Serves `rooms` to the other instances.
    pub fn new(rooms: Rooms) -> Self {
        Self { rooms }
    }
}

/// The context of a forwarded call: its deadline and metadata, never forwarded on.
fn peer_call(metadata: &tonic::metadata::MetadataMap) -> CallContext {
    CallContext {
        may_forward: false,
        ..CallContext::from_request(metadata, Instant::now())
    }
}

/// Decodes a forwarded command, checking what the forwarding instance
/// validated again: the peer port is reachable by whoever reaches the
/// gateway port.
fn peer_request(message: PeerCommand) -> Result<CommandRequest, Error> {
    validate::check_id("room_id", &message.room_id, MAX_ROOM_ID_LEN)?;
    validate::check_id("command_id", &message.command_id, MAX_COMMAND_ID_LEN)?;
    validate::check_id("app_code", &message.app_code, validate::MAX_APP_CODE_LEN)?;
    if message.command_json.len() > MAX_PEER_COMMAND_BYTES {
        return Err(Error::InvalidArgument(format!(
            "command_json must be at most {MAX_PEER_COMMAND_BYTES} bytes, got {}",
            message.command_json.len()
        )));
    }
    let fingerprint = <[u8; 32]>::try_from(message.fingerprint.as_slice()).map_err(|_| {
        Error::InvalidArgument(format!(
            "fingerprint must be 32 bytes, got {}",
            message.fingerprint.len()
        ))
    })?;
    let command = serde_json::from_slice(&message.command_json)
        .map_err(|error| Error::InvalidArgument(format!("command_json: {error}")))?;
    Ok(CommandRequest {
        room_id: message.room_id,
        command_id: message.command_id,
        app_code: message.app_code,
        request_id: message.request_id,
        traceparent: message.traceparent,
        command,
        fingerprint,
    })
}

#[tonic::async_trait]
impl RoomPeer for GrpcRoomPeer {
    async fn execute(
        &self,
        request: Request<PeerCommand>,
    ) -> Result<Response<CommandReply>, Status> {
        let call = peer_call(request.metadata());
        let message = request.into_inner();
        let (room_id, command_id) = (message.room_id.clone(), message.command_id.clone());
        let span = command_span::peer(&message.traceparent, &message.room_id);
        let traceparent = span.traceparent();
        let executed = command_span::run(span, async {
            let mut command = peer_request(message)?;
            // The holder's rows carry the holder's span, itself a child of
            // the forwarding instance's command span.
            command.traceparent = traceparent;
            self.rooms.execute_call(command, &call).await
        })
        .await;
        executed.map(served).map_err(|error| {
            error.into_status(Subject {
                room_id: &room_id,
                command_id: &command_id,
            })
        })
    }

    async fn get_room(
        &self,
        request: Request<GetRoomRequest>,
    ) -> Result<Response<RoomSnapshot>, Status> {
        let call = peer_call(request.metadata());
        reads::get_room(&self.rooms, request.get_ref(), &call).await
    }

    async fn heartbeat(
        &self,
        request: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatReply>, Status> {
        let call = peer_call(request.metadata());
        reads::heartbeat(&self.rooms, request.get_ref(), &call).await
    }
}
