//! IM bridge: consumes room events from `hyapp_room_outbox` in group
//! `hyapp-room-im-bridge` and drives the rooms' Tencent IM groups (see
//! [`handler`] for what each event does).
//!
//! Two ways to run it:
//! - **standalone**: [`App`] (the `im-bridge` binary), the consumer host
//!   ([`consumer_runtime::host`]) running [`Service`];
//! - **in-process in room-service** (`rocketmq.room_outbox.tencent_im_consumer_enabled`):
//!   build the consumer settings with [`config::settings`] from room-service's
//!   own `rocketmq` section, then [`ImBridge::build`] with room-service's IM
//!   client, MySQL pool and metrics, and [`ImBridge::run`] until shutdown
//!   (stop it before closing the pool).

pub mod config;
pub mod handler;

use config::{BridgeConfig, Config};
use consumer_runtime::{
    ConsumerMetrics, ConsumerSettings,
    host::{self, ConsumerService, EmbeddedConsumer},
};
use handler::ImBridgeHandler;
use outbox_schema::pb;
use sqlx::MySqlPool;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Errors of the IM bridge (the consumer services' one error type).
pub use consumer_runtime::host::Error;

/// The standalone im-bridge service.
pub type App = host::Host<Service>;

/// The im-bridge as a consumer service: [`ImBridgeHandler`] over `room_im`.
#[derive(Debug)]
pub struct Service;

impl ConsumerService for Service {
    type Config = Config;
    type Message = pb::RoomOutboxEvent;
    type Handler = ImBridgeHandler;
    const ABOUT: &str = "Consumes room events and drives Tencent IM groups";

    async fn build(
        config: &Config,
        host: &mut host::Builder,
    ) -> Result<Arc<ImBridgeHandler>, Error> {
        let im = config.tencent_im.client().map_err(Error::config)?;
        let handler = bridge_handler(
            config.im_bridge.clone(),
            config.tencent_im.group_id_template.clone(),
            im,
            host.pool().clone(),
            host.consumer_group(),
        )?;
        handler.register_metrics(host.registry());
        Ok(Arc::new(handler))
    }
}

/// The handler, dedup'ing in `consumer_group`; refuses a group id template
/// that cannot name a room's group.
fn bridge_handler(
    bridge: BridgeConfig,
    group_id_template: String,
    im: tencent_im::Client,
    pool: MySqlPool,
    consumer_group: &str,
) -> Result<ImBridgeHandler, Error> {
    if !group_id_template.contains("{room_id}") {
        return Err(Error::Config(
            "tencent_im.group_id_template must contain {room_id}".into(),
        ));
    }
    Ok(ImBridgeHandler::new(room_im::RoomIm::new(
        im,
        pool,
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
        pool: MySqlPool,
        metrics: &ConsumerMetrics,
    ) -> Result<Self, Error> {
        let handler = bridge_handler(
            bridge,
            group_id_template,
            im,
            pool.clone(),
            &settings.consumer_group,
        )?;
        let handler = Arc::new(handler);
        Ok(Self {
            consumer: EmbeddedConsumer::new(settings, handler.clone(), pool, metrics)?,
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
