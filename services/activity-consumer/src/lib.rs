//! Activity consumer: consumes room facts from `hyapp_room_outbox` in group
//! `hyapp-activity-room-outbox` and advances activity state in its own tables
//! with exactly-once effect (dedup row and effect in one transaction):
//! daily UTC gift leaderboards per activity, per-room contribution totals,
//! and one global IM broadcast per big gift. The same code path serves the
//! `activity.v1` gRPC entry the relay calls in direct mode.

pub mod broadcast;
pub mod config;
pub mod grpc;
pub mod processor;
pub mod validate;

use broadcast::Broadcaster;
use config::Config;
use consumer_runtime::{Consumer, ConsumerMetrics, DedupPurge};
use hyapp_api::activity::activity_service_server::ActivityServiceServer;
use outbox_schema::pb;
use processor::ActivityProcessor;
use prometheus_client::registry::Registry;
use service_kit::admin_http::{self, Readiness};
use sqlx::MySqlPool;
use std::{net::SocketAddr, sync::Arc};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Errors of the activity consumer.
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
    /// The gRPC server failed.
    #[error("grpc server: {0}")]
    Grpc(#[from] tonic::transport::Error),
}

/// The activity-consumer service: Kafka consumer, gRPC entry, broadcast
/// sweeper, dedup purge and admin HTTP.
#[derive(Debug)]
pub struct App {
    consumer: Consumer<pb::RoomOutboxEvent, ActivityProcessor>,
    processor: Arc<ActivityProcessor>,
    pool: MySqlPool,
    consumer_group: String,
    dedup_purge: DedupPurge,
    readiness: Arc<Readiness>,
    registry: Arc<Registry>,
    admin: TcpListener,
    grpc: TcpListener,
}

impl App {
    /// Connects MySQL, builds the IM client, the consumer and the listeners.
    pub async fn build(config: Config) -> Result<Self, Error> {
        let settings = config.consumer_settings()?;
        let pool = config.mysql.connect().await?;
        let im = config
            .tencent_im
            .client()
            .map_err(|error| Error::Config(error.to_string()))?;
        let mut registry = Registry::default();
        let metrics = ConsumerMetrics::register(&mut registry);
        let broadcaster = Broadcaster::new(
            im,
            pool.clone(),
            config.activity.broadcast_group_id.clone(),
            config.activity.broadcast.clone(),
        );
        let processor = Arc::new(ActivityProcessor::new(
            pool.clone(),
            settings.consumer_group.clone(),
            config.activity.clone(),
            broadcaster,
        ));
        let consumer_group = settings.consumer_group.clone();
        let dedup_purge = settings.dedup_purge;
        let consumer = Consumer::new(settings, processor.clone(), &metrics)?;
        let admin = admin_http::bind(&config.http_listen).await?;
        let grpc = admin_http::bind(&config.grpc_listen).await?;
        Ok(Self {
            consumer,
            processor,
            pool,
            consumer_group,
            dedup_purge,
            readiness: Arc::new(Readiness::default()),
            registry: Arc::new(registry),
            admin,
            grpc,
        })
    }

    /// The admin HTTP address.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.local_addr().ok()
    }

    /// The gRPC address.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc.local_addr().ok()
    }

    /// Serves until `shutdown`; drains the consumer, then stops gRPC, the
    /// sweeper and the admin server, then closes MySQL.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), Error> {
        let background = CancellationToken::new();
        let admin = tokio::spawn(admin_http::serve(
            self.admin,
            admin_http::router(self.readiness.clone(), self.registry.clone()),
            background.clone(),
        ));
        let grpc = tokio::spawn({
            let stop = shutdown.clone();
            tonic::transport::Server::builder()
                .add_service(ActivityServiceServer::new(grpc::ActivityGrpc::new(
                    self.processor.clone(),
                )))
                .serve_with_incoming_shutdown(
                    // Concurrent replies must not wait for delayed ACKs (Nagle).
                    tonic::transport::server::TcpIncoming::from(self.grpc).with_nodelay(Some(true)),
                    async move { stop.cancelled().await },
                )
        });
        let sweeper = tokio::spawn({
            let processor = self.processor.clone();
            let stop = background.clone();
            async move { processor.broadcaster().run_sweeper(stop).await }
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
        let consumed = self.consumer.run(shutdown.clone()).await;
        shutdown.cancel();
        let served = grpc.await.unwrap_or(Ok(()));
        draining.abort();
        background.cancel();
        let _ = tokio::join!(sweeper, purger, admin);
        self.pool.close().await;
        consumed?;
        served?;
        Ok(())
    }
}
