//! Direct-mode sinks (`direct`/`dual`, docs/design.md#publish-modes): the
//! activity service's gRPC entry and Tencent IM. The row's envelope is decoded
//! once and handed to each sink; a row is delivered only when every
//! configured sink succeeded.
//!
//! The IM sink runs [`room_im::RoomIm`], the same code im-bridge runs for the
//! topic, with the same `im_bridge` settings, so direct mode and the MQ
//! consumer can never disagree about what an event means in IM. Its dedup
//! records go to `consumer_dedup` under [`DIRECT_IM_GROUP`].

use crate::{config::DirectConfig, failure::PublishFailure, store::OutboxRow};
use hyapp_api::activity::{
    ConsumeRoomEventRequest, activity_service_client::ActivityServiceClient,
};
use room_im::{ApplyError, RoomIm};
use std::{sync::Arc, time::Duration};
use tonic::transport::Channel;

/// Dedup group of the direct IM sink's sent messages.
pub const DIRECT_IM_GROUP: &str = "hyapp-room-outbox-direct-im";

/// The direct sinks of this relay.
#[derive(Debug, Clone, Default)]
pub struct DirectSinks {
    /// activity-service `ConsumeRoomEvent`.
    pub activity: Option<ActivityServiceClient<Channel>>,
    /// Tencent IM, as im-bridge drives it.
    pub im: Option<Arc<RoomIm>>,
}

/// Refuses a direct configuration without any sink (checked before connecting anything).
pub fn check_config(config: &DirectConfig) -> Result<(), crate::Error> {
    if !config.tencent_im.enabled && config.activity_endpoint.is_empty() {
        return Err(crate::Error::Config(
            "outbox_worker.publish_mode direct/dual needs a direct sink: enable tencent_im or set the activity endpoint"
                .into(),
        ));
    }
    if config.tencent_im.enabled {
        config
            .tencent_im
            .validate()
            .map_err(|error| crate::Error::Config(error.to_string()))?;
    }
    Ok(())
}

impl DirectSinks {
    /// Connects lazily to the configured sinks (an empty endpoint disables a
    /// sink). Direct mode with no sink at all is refused: it would mark every
    /// event delivered while delivering nothing.
    pub fn new(config: &DirectConfig, pool: &sqlx::MySqlPool) -> Result<Self, crate::Error> {
        check_config(config)?;
        let im = if config.tencent_im.enabled {
            let client = config
                .tencent_im
                .client()
                .map_err(|error| crate::Error::Config(error.to_string()))?;
            Some(Arc::new(RoomIm::new(
                client,
                pool.clone(),
                DIRECT_IM_GROUP.to_string(),
                config.tencent_im.group_id_template.clone(),
                config.im_bridge.clone(),
            )))
        } else {
            None
        };
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
        Ok(Self { activity, im })
    }

    /// Delivers one room event to every sink.
    pub async fn publish(&self, row: &OutboxRow, timeout: Duration) -> Result<(), PublishFailure> {
        let event = outbox_schema::decode_envelope(&row.payload).map_err(|error| {
            PublishFailure::permanent(format!("undecodable outbox payload: {error}"))
        })?;
        if event.is_unknown_type() {
            // Written by a newer room-service: no sink of this build knows
            // it, and holding the room's chain for it would stop the room.
            tracing::info!(
                event_id = %event.event_id,
                room_id = %event.room_id,
                event_type = %event.event_type,
                "event type unknown to this relay's direct sinks, delivered as ignored"
            );
            return Ok(());
        }
        if let Some(im) = &self.im {
            let trace = service_kit::trace::context_from_traceparent(&row.traceparent);
            im.apply(&[(&event, trace)])
                .await
                .map_err(|error| match error {
                    ApplyError::Dedup(error) => {
                        PublishFailure::transient(format!("tencent im dedup: {error}"))
                    }
                    ApplyError::Im { error, .. } if error.is_retryable() => {
                        PublishFailure::transient(error.summary())
                    }
                    ApplyError::Im { error, .. } => PublishFailure::permanent(error.summary()),
                })?;
        }
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
