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
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

/// Dedup group of the direct IM sink's sent messages.
pub const DIRECT_IM_GROUP: &str = "hyapp-room-outbox-direct-im";

/// How often an HTTP/2 PING checks the activity entry's connection.
const ACTIVITY_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// The direct sinks of this relay.
#[derive(Debug, Clone, Default)]
pub struct DirectSinks {
    /// activity-service `ConsumeRoomEvent`.
    pub activity: Option<ActivityServiceClient<Channel>>,
    /// `authorization` value of every activity call (`Bearer <token>`), if a token is set.
    pub activity_authorization: Option<MetadataValue<tonic::metadata::Ascii>>,
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
    activity_endpoint(config)?;
    activity_authorization(config)?;
    Ok(())
}

/// The activity entry's endpoint (`None` when the sink is off): TLS with
/// `activity_tls` for `https://`, plaintext for `http://`.
fn activity_endpoint(
    config: &DirectConfig,
) -> Result<Option<tonic::transport::Endpoint>, crate::Error> {
    if config.activity_endpoint.is_empty() {
        return Ok(None);
    }
    config
        .activity_tls
        .endpoint(
            "direct.activity_tls",
            "direct.activity_endpoint",
            &config.activity_endpoint,
        )
        .map(Some)
        .map_err(|error| crate::Error::Config(error.to_string()))
}

/// `Bearer <token>` for the entry's token check, refused at start-up when
/// the token cannot be a header value.
fn activity_authorization(
    config: &DirectConfig,
) -> Result<Option<MetadataValue<tonic::metadata::Ascii>>, crate::Error> {
    if config.activity_auth_token.is_empty() {
        return Ok(None);
    }
    let mut value: MetadataValue<tonic::metadata::Ascii> =
        format!("Bearer {}", config.activity_auth_token.expose())
            .parse()
            .map_err(|_| {
                crate::Error::Config(
                    "direct.activity_auth_token must be visible ASCII (it travels as a header)"
                        .into(),
                )
            })?;
    // Debug then prints `Sensitive` instead of the token (DirectSinks is
    // Debug), and HTTP/2 header compression never indexes it.
    value.set_sensitive(true);
    Ok(Some(value))
}

impl DirectSinks {
    /// Connects lazily to the configured sinks (an empty endpoint disables a
    /// sink). Direct mode with no sink at all is refused: it would mark every
    /// event delivered while delivering nothing.
    pub fn new(
        config: &DirectConfig,
        pool: &service_kit::db::statement::BoundedPool,
    ) -> Result<Self, crate::Error> {
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
        let activity = activity_endpoint(config)?.map(|endpoint| {
            ActivityServiceClient::new(
                // Each call carries the publish timeout as its deadline; the
                // PINGs replace a connection that stalled or went half-open
                // between calls (docs/design.md#client-timeouts).
                endpoint
                    .connect_timeout(Duration::from_secs(3))
                    .http2_keep_alive_interval(ACTIVITY_KEEPALIVE_INTERVAL)
                    .keep_alive_timeout(Duration::from_secs(3))
                    .keep_alive_while_idle(true)
                    .connect_lazy(),
            )
        });
        Ok(Self {
            activity,
            activity_authorization: activity_authorization(config)?,
            im,
        })
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
            if let Some(authorization) = &self.activity_authorization {
                request
                    .metadata_mut()
                    .insert("authorization", authorization.clone());
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_activity_token_travels_as_a_bearer_header_that_never_prints() {
        let config = DirectConfig {
            activity_endpoint: "http://127.0.0.1:7301".into(),
            activity_auth_token: service_kit::Secret::new("t0ken"),
            ..DirectConfig::default()
        };
        let value = activity_authorization(&config).unwrap().unwrap();
        assert_eq!(value.to_str().unwrap(), "Bearer t0ken");
        assert!(!format!("{value:?}").contains("t0ken"), "{value:?}");
        let spaced = DirectConfig {
            activity_auth_token: service_kit::Secret::new("two\nlines"),
            ..config
        };
        assert!(check_config(&spaced).is_err());
    }
}
