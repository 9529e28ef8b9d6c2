//! Notice consumer: consumes room facts from `hyapp_room_outbox` in group
//! `hyapp-notice-room-outbox`, turns private-notice facts into rows of
//! `notice_delivery_events` (exactly once, with the dedup claim in the same
//! transaction) and delivers each row as one C2C IM message, retrying failed
//! deliveries from the table (see [`notices`]).

pub mod config;
pub mod notices;

use config::Config;
use consumer_runtime::{Consumer, ConsumerMetrics, DedupPurge};
use notices::NoticeProcessor;
use outbox_schema::pb;
use prometheus_client::registry::Registry;
use service_kit::admin_http::{self, Readiness};
use sqlx::MySqlPool;
use std::{net::SocketAddr, sync::Arc};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Errors of the notice consumer.
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

/// The notice-consumer service: Kafka consumer, delivery sweeper, dedup
/// purge and admin HTTP.
#[derive(Debug)]
pub struct App {
    consumer: Consumer<pb::RoomOutboxEvent, NoticeProcessor>,
    processor: Arc<NoticeProcessor>,
    pool: MySqlPool,
    consumer_group: String,
    dedup_purge: DedupPurge,
    readiness: Arc<Readiness>,
    registry: Arc<Registry>,
    admin: TcpListener,
}

impl App {
    /// Connects MySQL, builds the IM client, the consumer and the admin listener.
    pub async fn build(config: Config) -> Result<Self, Error> {
        let settings = config.consumer_settings()?;
        let pool = config.mysql.connect().await?;
        let im = config
            .tencent_im
            .client()
            .map_err(|error| Error::Config(error.to_string()))?;
        let mut registry = Registry::default();
        let metrics = ConsumerMetrics::register(&mut registry);
        let processor = Arc::new(NoticeProcessor::new(
            pool.clone(),
            im,
            settings.consumer_group.clone(),
            config.notice.delivery.clone(),
        ));
        let consumer_group = settings.consumer_group.clone();
        let dedup_purge = settings.dedup_purge;
        let consumer = Consumer::new(settings, processor.clone(), &metrics)?;
        let admin = admin_http::bind(&config.http_listen).await?;
        Ok(Self {
            consumer,
            processor,
            pool,
            consumer_group,
            dedup_purge,
            readiness: Arc::new(Readiness::default()),
            registry: Arc::new(registry),
            admin,
        })
    }

    /// The admin HTTP address.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.local_addr().ok()
    }

    /// Serves until `shutdown`; drains the consumer, then stops the sweeper
    /// and the admin server, then closes MySQL.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), Error> {
        let background = CancellationToken::new();
        let admin = tokio::spawn(admin_http::serve(
            self.admin,
            admin_http::router(self.readiness.clone(), self.registry.clone()),
            background.clone(),
        ));
        let sweeper = tokio::spawn({
            let processor = self.processor.clone();
            let stop = background.clone();
            async move { processor.run_sweeper(stop).await }
        });
        let purger = tokio::spawn(consumer_runtime::purge::run_purger(
            self.pool.clone(),
            self.consumer_group.clone(),
            self.dedup_purge,
            background.clone(),
        ));
        self.readiness.set_ready();
        let draining = tokio::spawn({
            let readiness = self.readiness.clone();
            let shutdown = shutdown.clone();
            async move {
                shutdown.cancelled().await;
                readiness.set_draining();
            }
        });
        let consumed = self.consumer.run(shutdown).await;
        draining.abort();
        background.cancel();
        let _ = tokio::join!(sweeper, purger, admin);
        self.pool.close().await;
        Ok(consumed?)
    }
}
