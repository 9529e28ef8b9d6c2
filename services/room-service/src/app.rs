//! [`App`]: builds room-service from its config and runs it until the shutdown
//! token fires, then drains in the order of
//! docs/design.md#lifecycle-start-up-and-drain-order:
//!
//! 1. mark draining (`/readyz` 503, gRPC health NOT_SERVING)
//! 2. cancel the workers (presence, saga sweep, embedded relay)
//! 3. wait for them, at most `shutdown_grace`; drop any still running then
//! 4. gRPC graceful stop (in-flight commands finish and persist)
//! 5. stop the room actors (leases released)
//! 6. close the wallet client, MySQL, Redis; then the admin HTTP server.
//!
//! A second SIGTERM/SIGINT exits at once (`service_kit::shutdown`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyapp_api::room::room_peer_server::RoomPeerServer;
use hyapp_api::room::room_service_server::RoomServiceServer;
use prometheus_client::registry::Registry;
use service_kit::admin_http::{self, Readiness};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic_reflection::server::{v1, v1alpha};

use crate::Error;
use crate::auth::CallerAuth;
use crate::cells::Cells;
use crate::config::{Config, PeerAddressPolicy};
use crate::deps::{Deps, PipelineSettings};
use crate::forward::Peers;
use crate::grpc::{GrpcRoomPeer, GrpcRoomService};
use crate::im::ImGroups;
use crate::liveness::Liveness;
use crate::metrics::Metrics;
use crate::redis::Redis;
use crate::service::Rooms;
use crate::store::{SharedCommits, Store};
use crate::sweeps;
use crate::wallet::Wallet;
use crate::workers::{self, Workers};

/// The shutdown steps, in the order they ran (for operators and tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Step names.
    pub steps: Vec<&'static str>,
}

/// A built, not yet running room-service.
#[derive(Debug)]
pub struct App {
    config: Config,
    deps: Arc<Deps>,
    cells: Arc<Cells>,
    rooms: Rooms,
    readiness: Arc<Readiness>,
    registry: Arc<Registry>,
    grpc_listener: TcpListener,
    /// The listener's TLS (`grpc_tls`), loaded at build so a bad file fails before anything runs.
    grpc_tls: Option<tonic::transport::ServerTlsConfig>,
    /// Who may call the gRPC port (`grpc_auth`), its JWKS loaded at build.
    auth: Arc<CallerAuth>,
    http_listener: TcpListener,
    grpc_addr: SocketAddr,
    http_addr: SocketAddr,
    workers: Workers,
    relay: Option<relay_engine::Relay>,
    consumers: std::sync::Mutex<crate::consumers::ConsumerTasks>,
}

impl App {
    /// Connects MySQL, Redis and the wallet client and binds both listeners.
    pub async fn build(config: Config) -> Result<Self, Error> {
        // Validation ran before telemetry: its replacements are logged now.
        config.warn_adjusted();
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let pool = config
            .mysql
            .connect()
            .await
            .map_err(|error| Error::Database(error.to_string()))?;
        // Built (and validated) before anything is served; it registers its
        // `room_outbox_*` metrics next to ours.
        let relay = crate::embedded_relay::build(&config, &pool, &mut registry)?;
        let bind = |addr: &str| {
            let addr = addr.to_owned();
            async move {
                admin_http::bind(&addr)
                    .await
                    .map_err(|error| Error::Server(error.to_string()))
            }
        };
        let grpc_listener = bind(&config.grpc_listen).await?;
        let http_listener = bind(&config.http_listen).await?;
        let local = |listener: &TcpListener| {
            listener
                .local_addr()
                .map_err(|error| Error::Server(error.to_string()))
        };
        let grpc_addr = local(&grpc_listener)?;
        // Known only now that the listener is bound (port 0 picks one).
        let advertised = config.advertised_url(grpc_addr);
        let redis = Redis::connect(&config.redis, &config.node_id, &advertised).await?;
        let wallet = Wallet::new(&config.wallet)?;
        let im = ImGroups::from_config(&config.tencent_im)?;
        let grpc_tls = config
            .grpc_tls
            .load("grpc_tls")
            .map_err(|error| Error::Config(error.to_string()))?;
        let auth = Arc::new(CallerAuth::from_config(&config)?);
        let peers = peers(&config, &advertised)?;
        let settings = pipeline_settings(&config);
        let store = store(&config, pool, &metrics)?;
        let liveness = Liveness::new(config.redis.liveness_ttl.as_std());
        if liveness.enabled() {
            // Held before anything is served, so the first lease we take is
            // confirmed under a live key.
            liveness.renew_once(&redis).await?;
        }
        let deps = Arc::new(Deps {
            store,
            redis,
            liveness,
            wallet,
            metrics,
            settings,
        });
        let cells = Cells::new(Arc::clone(&deps));
        let rooms = Rooms {
            cells: Arc::clone(&cells),
            deps: Arc::clone(&deps),
            im,
            default_app_code: config.app_code.clone(),
            peers: Arc::new(peers),
        };
        let consumer_metrics = consumer_runtime::ConsumerMetrics::register(&mut registry);
        let consumers = std::sync::Mutex::new(crate::consumers::build(
            &config,
            &rooms,
            deps.store.bounded_pool(),
            &consumer_metrics,
            &mut registry,
        )?);
        tracing::info!(node_id = %config.node_id, advertised = %advertised, "room leases name this instance");
        Ok(Self {
            grpc_addr,
            http_addr: local(&http_listener)?,
            config,
            deps,
            cells,
            rooms,
            readiness: Arc::new(Readiness::default()),
            consumers,
            registry: Arc::new(registry),
            relay,
            grpc_listener,
            grpc_tls,
            auth,
            http_listener,
            workers: Workers::default(),
        })
    }

    /// Bound gRPC address.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// Bound admin HTTP address.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// The room API (the treasure-open consumer calls [`Rooms::open_treasure`]).
    pub fn rooms(&self) -> Rooms {
        self.rooms.clone()
    }

    /// The worker slot: tasks spawned here are cancelled and awaited before the pools close.
    pub fn workers(&self) -> &Workers {
        &self.workers
    }

    /// Readiness as reported on `/readyz`.
    pub fn readiness(&self) -> Arc<Readiness> {
        Arc::clone(&self.readiness)
    }

    /// The MySQL pool.
    pub fn pool(&self) -> sqlx::MySqlPool {
        self.deps.store.pool().clone()
    }

    fn start_workers(&self) -> Result<(), Error> {
        let rooms = self.rooms.clone();
        let interval = self.config.room.presence_sweep_interval.as_std();
        self.workers.spawn("presence", move |token| async move {
            workers::every(interval, token, || async {
                if let Err(error) = sweeps::sweep_presence(&rooms).await {
                    tracing::warn!(%error, "presence sweep failed");
                }
            })
            .await;
        });
        let rooms = self.rooms.clone();
        let stuck_after = self.config.saga.stuck_after.as_millis();
        let max_refund_attempts = self.config.saga.max_refund_attempts;
        let interval = self.config.saga.sweep_interval.as_std();
        self.workers.spawn("saga_sweep", move |token| async move {
            workers::every(interval, token, || async {
                if let Err(error) =
                    sweeps::sweep_sagas(&rooms, stuck_after, max_refund_attempts).await
                {
                    tracing::warn!(%error, "saga sweep failed");
                }
            })
            .await;
        });
        crate::embedded_relay::start(self.relay.clone(), &self.workers);
        let consumers = std::mem::take(
            &mut *self
                .consumers
                .lock()
                .unwrap_or_else(|poison| poison.into_inner()),
        );
        for (name, task) in consumers.0 {
            self.workers.spawn(name, task);
        }
        Ok(())
    }

    /// The gRPC server, with the listener's TLS when `grpc_tls` is set.
    fn server_builder(&self) -> Result<tonic::transport::Server, Error> {
        let builder = tonic::transport::Server::builder();
        let Some(tls) = self.grpc_tls.clone() else {
            return Ok(builder);
        };
        builder
            .tls_config(tls)
            .map_err(|error| Error::Config(format!("grpc_tls: {error}")))
    }

    /// Serves until `shutdown` is cancelled, then drains in order.
    pub async fn run(self, shutdown: CancellationToken) -> Result<ShutdownReport, Error> {
        let steps = Mutex::new(Vec::new());
        let step = |name: &'static str| {
            tracing::info!(step = name, "shutdown step");
            lock(&steps).push(name);
        };
        let grace = self.config.shutdown_grace.as_std();
        // Before the workers start, so no error can leave them running.
        let mut builder = self.server_builder()?;
        // Workers start before the gRPC server serves
        // (docs/design.md#lifecycle-start-up-and-drain-order).
        self.start_workers()?;

        let http_stop = CancellationToken::new();
        let http_task = tokio::spawn(admin_http::serve(
            self.http_listener,
            admin_http::router(Arc::clone(&self.readiness), Arc::clone(&self.registry)),
            http_stop.clone(),
        ));

        let (health, health_service) = tonic_health::server::health_reporter();
        health
            .set_serving::<RoomServiceServer<GrpcRoomService>>()
            .await;
        let (reflection, reflection_alpha) = reflection_services(self.config.grpc_reflection)?;
        let grpc_stop = CancellationToken::new();
        let incoming = tonic::transport::server::TcpIncoming::from(self.grpc_listener)
            .with_nodelay(Some(true));
        let server = builder
            .add_service(health_service)
            .add_optional_service(reflection)
            .add_optional_service(reflection_alpha)
            .add_service(RoomServiceServer::new(GrpcRoomService::new(
                self.rooms.clone(),
                Arc::clone(&self.auth),
            )))
            .add_service(RoomPeerServer::new(GrpcRoomPeer::new(
                self.rooms.clone(),
                Arc::clone(&self.auth),
            )))
            .serve_with_incoming_shutdown(incoming, grpc_stop.clone().cancelled_owned());
        let mut grpc_task = tokio::spawn(server);
        let (liveness_stop, liveness_task) = spawn_liveness(&self.deps);

        self.readiness.set_ready();
        tracing::info!(grpc = %self.grpc_addr, http = %self.http_addr, node_id = %self.config.node_id, "room-service ready");

        let mut grpc_result = None;
        tokio::select! {
            () = shutdown.cancelled() => {}
            result = &mut grpc_task => grpc_result = Some(result),
        }

        self.readiness.set_draining();
        health
            .set_not_serving::<RoomServiceServer<GrpcRoomService>>()
            .await;
        step("draining");
        self.workers.cancel();
        step("workers_cancelled");
        // MySQL never closes under a running worker: one that outlives the
        // grace (the embedded relay waiting on a slow broker) is dropped.
        if !self.workers.stop_within(grace).await {
            step("workers_aborted");
        }
        step("workers_stopped");
        grpc_stop.cancel();
        let grpc_result = match grpc_result {
            Some(result) => Some(result),
            None => tokio::time::timeout(grace, &mut grpc_task).await.ok(),
        };
        step("grpc_stopped");
        if tokio::time::timeout(grace, self.cells.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("room actors did not stop within the grace period");
        }
        liveness_stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(2), liveness_task).await;
        step("cells_released");
        // The wallet channel closes when the last clone (held by the actors, now gone) drops.
        step("wallet_closed");
        self.deps.store.pool().close().await;
        step("mysql_closed");
        self.deps.redis.close().await;
        step("redis_closed");
        http_stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), http_task).await;
        step("http_stopped");

        let steps = lock(&steps).clone();
        served(grpc_result).map(|()| ShutdownReport { steps })
    }
}

/// How this instance forwards calls: its identity, the holder addresses it
/// will dial, and (behind a TLS listener) the client TLS it presents.
fn peers(config: &Config, advertised: &str) -> Result<Peers, Error> {
    let mut peers = Peers::new(
        &config.node_id,
        &advertised,
        config.forward_timeout.as_std(),
    )
    .with_address_policy(PeerAddressPolicy::new(&config.peer_addresses, &advertised)?);
    if config.grpc_tls.is_enabled() {
        // The other instances advertise https:// then (Config::check_grpc_tls).
        peers = peers.with_tls(
            config
                .peer_tls
                .load("peer_tls")
                .map_err(|error| Error::Config(error.to_string()))?,
        );
    }
    Ok(peers)
}

/// The room pipeline's settings from the `room` and `saga` sections.
fn pipeline_settings(config: &Config) -> PipelineSettings {
    let room = &config.room;
    PipelineSettings {
        snapshot_every_n: room.snapshot_every_n,
        group_commit: room.group_commit,
        max_batch: room.group_commit_max_batch,
        recent_per_room: room.recent_commands_per_room,
        presence_ttl_ms: room.presence_ttl.as_millis(),
        treasure_wakeups: config.rocketmq.treasure_open.enabled,
        rules: room.rules.to_rules(),
        idle_ttl: room.idle_ttl.as_std(),
        mailbox_capacity: room.mailbox_capacity,
        max_loaded_rooms: room.max_loaded_rooms,
        evict_idle_after: room.evict_idle_after.as_std(),
        max_refund_attempts: config.saga.max_refund_attempts,
    }
}

/// The store, its statements bounded by `mysql.statement_timeout`, with
/// shared commits when `room.shared_commit_lanes` asks for them.
fn store(config: &Config, pool: sqlx::MySqlPool, metrics: &Metrics) -> Result<Store, Error> {
    let room = &config.room;
    let limit = config
        .mysql
        .statement_timeout()
        .map_err(|error| Error::Config(error.to_string()))?;
    let pool = service_kit::db::statement::BoundedPool::new(pool, limit);
    let mut store = Store::new(pool.clone());
    if room.shared_commit_lanes > 0 {
        store = store.with_shared_commits(SharedCommits::start(
            pool,
            room.shared_commit_lanes,
            room.shared_commit_max_rooms,
            metrics.shared_commit_rooms.clone(),
        ));
    }
    Ok(store)
}

/// gRPC reflection's services, only when `grpc_reflection` asks for them
/// (development, debugging): reflection maps the whole API for whoever
/// reaches the port.
#[allow(
    clippy::type_complexity,
    reason = "the services' types are opaque (`impl`)"
)]
fn reflection_services(
    enabled: bool,
) -> Result<
    (
        Option<v1::ServerReflectionServer<impl v1::ServerReflection>>,
        Option<v1alpha::ServerReflectionServer<impl v1alpha::ServerReflection>>,
    ),
    Error,
> {
    if !enabled {
        return Ok((None, None));
    }
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(hyapp_api::FILE_DESCRIPTOR_SET)
    };
    let server_error = |error: tonic_reflection::server::Error| Error::Server(error.to_string());
    Ok((
        Some(reflection().build_v1().map_err(server_error)?),
        Some(reflection().build_v1alpha().map_err(server_error)?),
    ))
}

/// How the gRPC server ended: an error it returned or its task's panic.
fn served(
    result: Option<Result<Result<(), tonic::transport::Error>, tokio::task::JoinError>>,
) -> Result<(), Error> {
    match result {
        Some(Ok(Err(error))) => Err(Error::Server(error.to_string())),
        Some(Err(error)) => Err(Error::Server(error.to_string())),
        _ => Ok(()),
    }
}

type Steps = Vec<&'static str>;

/// The shutdown steps so far; a poisoned lock still holds them.
fn lock(steps: &Mutex<Steps>) -> std::sync::MutexGuard<'_, Steps> {
    steps.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// Renews this instance's liveness key until the returned token is
/// cancelled. Not a worker: the key must stay held until the actors have
/// released their leases, or other instances would take rooms over from
/// under the drain.
fn spawn_liveness(deps: &Deps) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let stop = CancellationToken::new();
    let task = tokio::spawn(Arc::clone(&deps.liveness).run(
        deps.redis.clone(),
        deps.metrics.clone(),
        stop.clone(),
    ));
    (stop, task)
}
