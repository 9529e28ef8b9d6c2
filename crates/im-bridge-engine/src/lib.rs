//! The IM bridge engine: consumes room events from `hyapp_room_outbox` in
//! group `hyapp-room-im-bridge` and drives the rooms' Tencent IM groups (see
//! [`handler`] for what each event does, `room_im` for what an event means
//! in IM).
//!
//! Two compositions run it:
//! - the standalone `im-bridge` service (the consumer host running
//!   [`bridge_handler`]'s handler);
//! - room-service, in-process (`rocketmq.room_outbox.tencent_im_consumer_enabled`):
//!   consumer [`settings`] from its own `rocketmq` section, then
//!   [`ImBridge::build`] with its IM client, MySQL pool and metrics, and
//!   [`ImBridge::run`] until shutdown (stop it before closing the pool).

pub mod handler;

use consumer_runtime::{ConsumerConfig, ConsumerMetrics, ConsumerSettings, host::EmbeddedConsumer};
use handler::ImBridgeHandler;
use outbox_schema::pb;
use service_kit::db::statement::BoundedPool;
use service_kit::mq::MqConfig;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The `im_bridge` section (defined once in room-im: the relay's direct mode reads it too).
pub use room_im::BridgeConfig;

/// Errors of the IM bridge (the consumer services' one error type).
pub use consumer_runtime::host::Error;

/// The bridge's consumer settings from the original keys
/// (docs/design.md#configuration-names); room-service calls
/// this too when it hosts the bridge (`tencent_im_consumer_enabled`).
pub fn settings(mq: &MqConfig, consumer: &ConsumerConfig) -> Result<ConsumerSettings, Error> {
    let room_outbox = &mq.room_outbox;
    Ok(ConsumerSettings::room_outbox(
        mq,
        consumer,
        &room_outbox.tencent_im_consumer_group,
    )?)
}

/// The handler, dedup'ing in `consumer_group` (its statements under the
/// pool's `mysql.statement_timeout`, the default for a bare pool); refuses a
/// group id template that cannot name a room's group.
pub fn bridge_handler(
    bridge: BridgeConfig,
    group_id_template: String,
    im: tencent_im::Client,
    db: impl Into<BoundedPool>,
    consumer_group: &str,
) -> Result<ImBridgeHandler, Error> {
    if !group_id_template.contains("{room_id}") {
        return Err(Error::Config(
            "tencent_im.group_id_template must contain {room_id}".into(),
        ));
    }
    Ok(ImBridgeHandler::new(room_im::RoomIm::new(
        im,
        db,
        consumer_group.to_string(),
        group_id_template,
        bridge,
    )))
}

/// The bridge's consumer plus its dedup purge, embeddable anywhere.
#[derive(Debug)]
pub struct ImBridge {
    consumer: EmbeddedConsumer<pb::RoomOutboxEvent, ImBridgeHandler>,
    handler: Arc<ImBridgeHandler>,
}

impl ImBridge {
    /// Creates the consumer (subscribed, not yet consuming).
    pub fn build(
        settings: ConsumerSettings,
        bridge: BridgeConfig,
        group_id_template: String,
        im: tencent_im::Client,
        db: impl Into<BoundedPool>,
        metrics: &ConsumerMetrics,
    ) -> Result<Self, Error> {
        let db = db.into();
        let handler = bridge_handler(
            bridge,
            group_id_template,
            im,
            db.clone(),
            &settings.consumer_group,
        )?;
        let handler = Arc::new(handler);
        Ok(Self {
            consumer: EmbeddedConsumer::new(settings, handler.clone(), db, metrics)?,
            handler,
        })
    }

    /// Registers the metrics of its IM sends in the host's registry.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.handler.register_metrics(registry);
    }

    /// Consumes until `shutdown`, then drains and commits.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), Error> {
        self.consumer.run(shutdown).await
    }
}
