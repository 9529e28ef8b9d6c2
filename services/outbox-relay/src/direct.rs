//! Direct-mode sinks (seed 001 `direct`/`dual`): the activity service's gRPC
//! entry and Tencent IM. The row's envelope is decoded once and handed to each
//! sink; a row is delivered only when every configured sink succeeded.
//!
//! The IM sink is im-bridge's handler itself (EnsureGroup for `RoomCreated`,
//! group messages with `Random` from `event_id`, member control for kicks,
//! no-op success for events that need no message), so direct mode and the MQ
//! consumer can never disagree about what an event means in IM. Its dedup
//! records go to `consumer_dedup` under [`DIRECT_IM_GROUP`].

use crate::{publish::PublishFailure, store::OutboxRow};
use consumer_runtime::{Delivery, Handler as _, HandlerError};
use hyapp_api::activity::{
    ConsumeRoomEventRequest, activity_service_client::ActivityServiceClient,
};
use im_bridge::handler::ImBridgeHandler;
use std::{sync::Arc, time::Duration};
use tonic::transport::Channel;

/// Dedup group of the direct IM sink's sent messages.
pub const DIRECT_IM_GROUP: &str = "hyapp-room-outbox-direct-im";

/// The direct sinks of this relay.
#[derive(Debug, Clone, Default)]
pub struct DirectSinks {
    /// activity-service `ConsumeRoomEvent`.
    pub activity: Option<ActivityServiceClient<Channel>>,
    /// Tencent IM through im-bridge's handler.
    pub im: Option<Arc<ImBridgeHandler>>,
}

/// Refuses a direct configuration without any sink (checked before connecting anything).
pub fn check_config(config: &crate::config::DirectConfig) -> Result<(), crate::Error> {
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
    pub fn new(
        config: &crate::config::DirectConfig,
        pool: &sqlx::MySqlPool,
    ) -> Result<Self, crate::Error> {
        check_config(config)?;
        let im = if config.tencent_im.enabled {
            let client = config
                .tencent_im
                .client()
                .map_err(|error| crate::Error::Config(error.to_string()))?;
            Some(Arc::new(ImBridgeHandler::new(
                client,
                pool.clone(),
                DIRECT_IM_GROUP.to_string(),
                config.tencent_im.group_id_template.clone(),
                im_bridge::config::BridgeConfig::default(),
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
        let event = Arc::new(event);
        if let Some(im) = &self.im {
            let delivery = Delivery {
                message: Arc::clone(&event),
                partition: -1,
                offset: -1,
                attempt: 1,
                traceparent: row.traceparent.clone(),
            };
            im.handle(&delivery).await.map_err(|error| match error {
                HandlerError::Retryable(message) => {
                    PublishFailure::transient(format!("tencent im: {message}"))
                }
                HandlerError::Permanent(message) => {
                    PublishFailure::permanent(format!("tencent im: {message}"))
                }
            })?;
        }
        if let Some(activity) = &self.activity {
            let mut request = tonic::Request::new(ConsumeRoomEventRequest {
                event: Some((*event).clone()),
            });
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
