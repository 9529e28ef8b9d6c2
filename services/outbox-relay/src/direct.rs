//! Direct-mode sinks (seed 001 `direct`/`dual`): the activity service's gRPC
//! entry and Tencent IM. The row's envelope is decoded once and handed to each
//! sink; a row is delivered only when every configured sink succeeded.

use crate::{publish::PublishFailure, store::OutboxRow};
use hyapp_api::activity::{
    ConsumeRoomEventRequest, activity_service_client::ActivityServiceClient,
};
use std::time::Duration;
use tonic::transport::Channel;

/// The direct sinks of this relay.
#[derive(Debug, Clone, Default)]
pub struct DirectSinks {
    /// activity-service `ConsumeRoomEvent`.
    pub activity: Option<ActivityServiceClient<Channel>>,
}

impl DirectSinks {
    /// Connects lazily to the configured sinks (an empty endpoint disables a sink).
    pub fn new(config: &crate::config::DirectConfig) -> Result<Self, crate::Error> {
        let activity_endpoint = config.activity_endpoint.as_str();
        let activity = if activity_endpoint.is_empty() {
            None
        } else {
            let channel = tonic::transport::Endpoint::from_shared(activity_endpoint.to_string())
                .map_err(|error| {
                    crate::Error::Config(format!("direct.activity_endpoint: {error}"))
                })?
                .connect_timeout(Duration::from_secs(3))
                .connect_lazy();
            Some(ActivityServiceClient::new(channel))
        };
        Ok(Self { activity })
    }

    /// Delivers one room event to every sink.
    pub async fn publish(&self, row: &OutboxRow, timeout: Duration) -> Result<(), PublishFailure> {
        let event = outbox_schema::decode_envelope(&row.payload).map_err(|error| {
            PublishFailure::permanent(format!("undecodable outbox payload: {error}"))
        })?;
        if let Some(activity) = &self.activity {
            let mut request = tonic::Request::new(ConsumeRoomEventRequest { event: Some(event) });
            request.set_timeout(timeout);
            activity
                .clone()
                .consume_room_event(request)
                .await
                .map_err(|status| {
                    let message = format!("activity: {:?} {}", status.code(), status.message());
                    match status.code() {
                        tonic::Code::InvalidArgument => PublishFailure::permanent(message),
                        _ => PublishFailure::transient(message),
                    }
                })?;
        }
        Ok(())
    }
}
