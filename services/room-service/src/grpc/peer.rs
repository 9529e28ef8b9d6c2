//! [`GrpcRoomPeer`], the `RoomPeer` service other instances forward to
//! because this instance holds the room: calls are served here and never
//! forwarded again. A forwarded command is the gateway's request itself and
//! goes through the public API's validator here (`super::forwarded`, from
//! the table of gateway commands),
//! fingerprint included; reads are measured here, where they execute.

use std::sync::Arc;
use std::time::Instant;

use hyapp_api::room::room_peer_server::RoomPeer;
use hyapp_api::room::{
    CommandReply, GetRoomRequest, HeartbeatReply, HeartbeatRequest, PeerCommand, RoomSnapshot,
};
use tonic::{Request, Response, Status};

use super::{forwarded, reads, served, subject};
use crate::Error;
use crate::auth::CallerAuth;
use crate::command_span;
use crate::error::Subject;
use crate::forward::CallContext;
use crate::service::Rooms;

/// The `RoomPeer` service: calls other instances forward here because this
/// instance holds the room. They are served here and never forwarded again.
#[derive(Debug, Clone)]
pub struct GrpcRoomPeer {
    rooms: Rooms,
    auth: Arc<CallerAuth>,
}

impl GrpcRoomPeer {
    /// Serves `rooms` to the other instances `auth` admits.
    pub fn new(rooms: Rooms, auth: Arc<CallerAuth>) -> Self {
        Self { rooms, auth }
    }

    /// Admits only another instance's certificate (with mutual TLS).
    fn admit<T>(&self, request: &Request<T>) -> Result<(), Status> {
        self.auth
            .peer(request)
            .map_err(|error| error.into_status(Subject::default()))
    }
}

/// The context of a forwarded call: its deadline and metadata, never forwarded on.
fn peer_call(metadata: &tonic::metadata::MetadataMap) -> CallContext {
    CallContext {
        may_forward: false,
        ..CallContext::from_request(metadata, Instant::now())
    }
}

#[tonic::async_trait]
impl RoomPeer for GrpcRoomPeer {
    async fn execute(
        &self,
        request: Request<PeerCommand>,
    ) -> Result<Response<CommandReply>, Status> {
        self.admit(&request)?;
        let call = peer_call(request.metadata());
        let caller_traceparent = super::traceparent_of(request.metadata()).to_owned();
        let Some(request) = request.into_inner().request else {
            return Err(
                Error::InvalidArgument("PeerCommand.request must be set".into())
                    .into_status(Subject::default()),
            );
        };
        let (room_id, command_id) = subject(&request);
        let span = command_span::peer(&caller_traceparent, room_id);
        let traceparent = span.traceparent();
        let executed = command_span::run(span, async {
            // Validated here as at its entry: nothing the forwarding
            // instance computed is trusted.
            let command = forwarded(&request, self.rooms.context(&traceparent))?;
            self.rooms.execute_call(command, &call).await
        })
        .await;
        executed.map(served).map_err(|error| {
            error.into_status(Subject {
                room_id,
                command_id,
            })
        })
    }

    async fn get_room(
        &self,
        request: Request<GetRoomRequest>,
    ) -> Result<Response<RoomSnapshot>, Status> {
        self.admit(&request)?;
        let call = peer_call(request.metadata());
        reads::get_room(&self.rooms, request.get_ref(), &call).await
    }

    async fn heartbeat(
        &self,
        request: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatReply>, Status> {
        self.admit(&request)?;
        let call = peer_call(request.metadata());
        reads::heartbeat(&self.rooms, request.get_ref(), &call).await
    }
}
