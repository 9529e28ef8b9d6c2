//! IM bridge: consumes room events from `hyapp_room_outbox` in group
//! `hyapp-room-im-bridge` and drives the rooms' Tencent IM groups (see
//! [`handler`] for what each event does).
//!
//! Two ways to run it:
//! - **standalone**: [`App`] (the `im-bridge` binary) — config, MySQL,
//!   admin HTTP, then [`ImBridge::run`];
//! - **in-process in room-service** (`rocketmq.room_outbox.tencent_im_consumer_enabled`):
//!   build the consumer settings with [`config::settings`] from room-service's
//!   own `rocketmq` section, then [`ImBridge::build`] with room-service's IM
//!   client, MySQL pool and metrics, and [`ImBridge::run`] until shutdown
//!   (stop it before closing the pool).

pub mod config;
pub mod handler;

use config::{BridgeConfig, Config};
use consumer_runtime::{Consumer, ConsumerMetrics, ConsumerSettings, DedupPurge};
use handler::ImBridgeHandler;
use outbox_schema::pb;
use prometheus_client::registry::Registry;
use service_kit::admin_http::{self, Readiness};
use sqlx::MySqlPool;
use std::{net::SocketAddr, sync::Arc};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Errors of the IM bridge.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration cannot work; the message names the key.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The consumer runtime failed.
    #[error(transparent)]
    Runtime(#[from] consumer_runtime::Error),
    /// Shared plumbing (config loading, MySQL, listeners) failed.
    #[error(transparent)]
    Service(#[from] service_kit::Error),
}

/// The bridge's consumer plus its dedup purge, embeddable anywhere.
#[derive(Debug)]
pub struct ImBridge {
    consumer: Consumer<pb::RoomOutboxEvent, ImBridgeHandler>,
    pool: MySqlPool,
    consumer_group: String,
    dedup_purge: DedupPurge,
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
        if !group_id_template.contains("{room_id}") {
            return Err(Error::Config(
                "tencent_im.group_id_template must contain {room_id}".into(),
            ));
        }
        let consumer_group = settings.consumer_group.clone();
        let dedup_purge = settings.dedup_purge;
        let handler = ImBridgeHandler::new(room_im::RoomIm::new(
            im,
            pool.clone(),
            consumer_group.clone(),
            group_id_template,
            bridge,
        ));
        let consumer = Consumer::new(settings, Arc::new(handler), metrics)?;
        Ok(Self {
            consumer,
            pool,
            consumer_group,
            dedup_purge,
        })
    }

    /// Consumes until `shutdown`, then drains and commits.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), Error> {
        let purger = tokio::spawn(consumer_runtime::purge::run_purger(
            self.pool.clone(),
            self.consumer_group.clone(),
            self.dedup_purge,
            shutdown.child_token(),
        ));
        let result = self.consumer.run(shutdown).await;
        purger.abort();
        Ok(result?)
    }
}

/// The standalone im-bridge service.
#[derive(Debug)]
pub struct App {
    bridge: ImBridge,
    pool: MySqlPool,
    readiness: Arc<Readiness>,
    registry: Arc<Registry>,
    admin: TcpListener,
}

impl App {
    /// Connects MySQL, builds the IM client and the consumer, binds the admin port.
    pub async fn build(config: Config) -> Result<Self, Error> {
        let pool = config.mysql.connect().await?;
        let im = config
            .tencent_im
            .client()
            .map_err(|error| Error::Config(error.to_string()))?;
        let mut registry = Registry::default();
        let metrics = ConsumerMetrics::register(&mut registry);
        let bridge = ImBridge::build(
            config.consumer_settings()?,
            config.im_bridge.clone(),
            config.tencent_im.group_id_template.clone(),
            im,
            pool.clone(),
            &metrics,
        )?;
        let admin = admin_http::bind(&config.http_listen).await?;
        Ok(Self {
            bridge,
            pool,
            readiness: Arc::new(Readiness::default()),
            registry: Arc::new(registry),
            admin,
        })
    }

    /// The admin HTTP address (useful with port 0).
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.local_addr().ok()
    }

    /// Serves until `shutdown`: drains the consumer first, then stops the
    /// admin server and closes MySQL.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), Error> {
        let admin_stop = CancellationToken::new();
        let admin = tokio::spawn(admin_http::serve(
            self.admin,
            admin_http::router(self.readiness.clone(), self.registry.clone()),
            admin_stop.clone(),
        ));
        self.readiness.set_ready();
        let drained = {
            let readiness = self.readiness.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                shutdown.cancelled().await;
                readiness.set_draining();
            })
        };
        let result = self.bridge.run(shutdown).await;
        drained.abort();
        admin_stop.cancel();
        let _ = admin.await;
        self.pool.close().await;
        result
    }
}
