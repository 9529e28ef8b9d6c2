//! Activity consumer: consumes room facts from `hyapp_room_outbox` in group
//! `hyapp-activity-room-outbox` and advances activity state in its own tables
//! with exactly-once effect (dedup row and effect in one transaction):
//! daily UTC gift leaderboards per activity, per-room contribution totals,
//! and one global IM broadcast per big gift. The same code path serves the
//! `activity.v1` gRPC entry the relay calls in direct mode.
//!
//! [`App`] is the consumer host ([`consumer_runtime::host`]) running
//! [`Service`]: the [`processor::ActivityProcessor`] as handler, the
//! broadcast sweeper as a background task and the gRPC entry as an extra
//! server (named [`GRPC_SERVER`]).

pub mod auth;
pub mod broadcast;
pub mod config;
pub mod grpc;
pub mod processor;
pub mod validate;

use broadcast::{Broadcaster, Broadcasts};
use config::Config;
use consumer_runtime::host::{self, ConsumerService, FailedDeliveries};
use hyapp_api::activity::activity_service_server::ActivityServiceServer;
use outbox_schema::pb;
use processor::ActivityProcessor;
use std::sync::Arc;
use tonic::transport::server::TcpIncoming;

/// Errors of the activity consumer (the consumer services' one error type).
pub use consumer_runtime::host::Error;

/// The activity-consumer service: Kafka consumer, gRPC entry, broadcast
/// sweeper, dedup purge and admin HTTP.
pub type App = host::Host<Service>;

/// The name of the `activity.v1` gRPC server: `App::server_addr(GRPC_SERVER)`
/// is its address, and its failure reads `grpc server: …`.
pub const GRPC_SERVER: &str = "grpc";

/// The activity consumer as a consumer service.
#[derive(Debug)]
pub struct Service;

impl ConsumerService for Service {
    type Config = Config;
    type Message = pb::RoomOutboxEvent;
    type Handler = ActivityProcessor;
    const ABOUT: &str = "Consumes room facts into activity leaderboards, totals and broadcasts";

    async fn build(
        config: &Config,
        host: &mut host::Builder,
    ) -> Result<Arc<ActivityProcessor>, Error> {
        let im = config.tencent_im.client().map_err(Error::config)?;
        let broadcaster = Broadcaster::new(
            Broadcasts::new(im, config.activity.broadcast_group_id.clone()),
            host.bounded_pool().clone(),
            config.activity.broadcast.clone(),
            host.metrics(),
        );
        let processor = Arc::new(ActivityProcessor::new(
            host.bounded_pool().clone(),
            host.consumer_group().to_string(),
            config.activity.clone(),
            broadcaster,
        ));
        host.background("broadcast sweeper", {
            let processor = processor.clone();
            move |stop| async move { processor.broadcaster().run(stop).await }
        });
        let mut server = tonic::transport::Server::builder();
        if let Some(tls) = config.grpc_tls.load("grpc_tls")? {
            server = server
                .tls_config(tls)
                .map_err(|error| Error::Config(format!("grpc_tls: {error}")))?;
        }
        let token = auth::BearerToken::new(&config.grpc_auth_token)?;
        host.server(GRPC_SERVER, &config.grpc_listen, {
            let processor = processor.clone();
            move |listener, stop| {
                let mut server = server;
                server
                    .add_service(ActivityServiceServer::with_interceptor(
                        grpc::ActivityGrpc::new(processor),
                        token,
                    ))
                    .serve_with_incoming_shutdown(
                        // Concurrent replies must not wait for delayed ACKs (Nagle).
                        TcpIncoming::from(listener).with_nodelay(Some(true)),
                        async move { stop.cancelled().await },
                    )
            }
        })
        .await?;
        Ok(processor)
    }

    fn failed_deliveries() -> Option<FailedDeliveries> {
        Some(FailedDeliveries::of::<Broadcasts>())
    }
}
