//! The `activity.v1` direct entry, called by the outbox relay in `direct` and
//! `dual` publish mode. It runs the consumer's code path, in the consumer's
//! dedup group, so an event that arrives both ways is applied once.
//!
//! Callers are authenticated by mutual TLS (`grpc_tls.client_ca_file`, in the
//! TLS layer) and/or a bearer token ([`crate::auth::BearerToken`],
//! `grpc_auth_token`); each one configured is required.

use crate::processor::ActivityProcessor;
use consumer_runtime::{HandlerError, Outcome};
use hyapp_api::activity::{
    ConsumeRoomEventReply, ConsumeRoomEventRequest, activity_service_server::ActivityService,
};
use prost::Message;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The gRPC service over the shared [`ActivityProcessor`].
#[derive(Debug, Clone)]
pub struct ActivityGrpc {
    processor: Arc<ActivityProcessor>,
}

impl ActivityGrpc {
    /// Serves `processor`.
    pub fn new(processor: Arc<ActivityProcessor>) -> Self {
        Self { processor }
    }
}

#[tonic::async_trait]
impl ActivityService for ActivityGrpc {
    async fn consume_room_event(
        &self,
        request: Request<ConsumeRoomEventRequest>,
    ) -> Result<Response<ConsumeRoomEventReply>, Status> {
        let event = request
            .into_inner()
            .event
            .ok_or_else(|| Status::invalid_argument("event is required"))?;
        // The same validation a message from the topic gets.
        let event = outbox_schema::decode_envelope(&event.encode_to_vec())
            .map_err(|error| Status::invalid_argument(error.to_string()))?;
        match self.processor.apply(&[&event]).await {
            Ok(outcomes) => {
                let duplicate = outcomes.first() == Some(&Outcome::Duplicate);
                tracing::debug!(event_id = %event.event_id, room_id = %event.room_id, duplicate, "room event consumed over grpc");
                Ok(Response::new(ConsumeRoomEventReply { duplicate }))
            }
            Err(HandlerError::Permanent(message)) => Err(Status::invalid_argument(message)),
            Err(HandlerError::Retryable(message)) => Err(Status::unavailable(message)),
        }
    }
}
