//! [`Host`]: one consumer service as a process — MySQL pool, consumer with
//! its metrics, admin HTTP with readiness, the dedup purge, the group's lag
//! read from the broker (`crate::lag`), the console's operator requests
//! (`super::requests`), the service's
//! background tasks and extra servers — and the order they stop in.
//!
//! Shutdown order (the consumers' shape of
//! docs/design.md#lifecycle-start-up-and-drain-order): readiness turns to
//! draining and the extra servers stop taking requests as soon as shutdown
//! starts; the consumer drains its in-flight messages and commits; then the
//! background tasks (sweepers, purge) and the admin server stop; MySQL closes
//! last, because everything before it may still write.

use super::{ConsumerService, Error, ServiceConfig, error::BoxError};
use crate::{Consumer, ConsumerMetrics, DedupPurge, lag::LagMonitor, purge};
use prometheus_client::registry::Registry;
use service_kit::admin_http::{self, Readiness};
use service_kit::db::statement::BoundedPool;
use sqlx::MySqlPool;
use std::{future::Future, net::SocketAddr, pin::Pin, sync::Arc};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type BackgroundTask = Box<dyn FnOnce(CancellationToken) -> BoxFuture<()> + Send>;
type ServeFn =
    Box<dyn FnOnce(TcpListener, CancellationToken) -> BoxFuture<Result<(), BoxError>> + Send>;

/// An extra server a service registered, bound at build time.
struct ExtraServer {
    name: &'static str,
    listener: TcpListener,
    serve: ServeFn,
}

/// The servers' names, for `Debug`.
fn server_names(servers: &[ExtraServer]) -> Vec<&'static str> {
    servers.iter().map(|server| server.name).collect()
}

/// What a service's [`ConsumerService::build`] gets: the shared resources,
/// and where it registers the work the host runs beside the consumer.
pub struct Builder {
    /// The pool with `mysql.statement_timeout`.
    db: BoundedPool,
    consumer_group: String,
    metrics: ConsumerMetrics,
    background: Vec<(&'static str, BackgroundTask)>,
    servers: Vec<ExtraServer>,
    /// The process's metrics registry, where a service registers its own.
    registry: Registry,
    /// False when only the handler is wanted (an operator command replaying
    /// dead letters beside the running service): extra servers are not
    /// bound, so their ports stay the service's.
    serving: bool,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("consumer_group", &self.consumer_group)
            .field(
                "background",
                &self
                    .background
                    .iter()
                    .map(|(name, _)| name)
                    .collect::<Vec<_>>(),
            )
            .field("servers", &server_names(&self.servers))
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// A builder whose registrations are never run: for building the handler
    /// alone, in an operator command.
    pub(super) fn for_operator(db: BoundedPool, consumer_group: String) -> Self {
        Self {
            db,
            consumer_group,
            // Nothing scrapes an operator command: its metrics go nowhere.
            metrics: ConsumerMetrics::unregistered(),
            background: Vec::new(),
            servers: Vec::new(),
            registry: Registry::default(),
            serving: false,
        }
    }

    /// The service's MySQL pool (closed by the host after everything stopped).
    pub fn pool(&self) -> &MySqlPool {
        self.db.pool()
    }

    /// The same pool with its `mysql.statement_timeout`: a handler runs its
    /// dedup claim and effect transaction through
    /// [`BoundedPool::run`], and a [`crate::sweeper::Sweeper`] built from it
    /// bounds its statements by the configured deadline, so a stalled
    /// database fails the message (retried, then redelivered and
    /// deduplicated) instead of holding its lane until TCP gives up.
    pub fn bounded_pool(&self) -> &BoundedPool {
        &self.db
    }

    /// The consumer group the service consumes in (its dedup group).
    pub fn consumer_group(&self) -> &str {
        &self.consumer_group
    }

    /// The process's consumer metrics (a sweeper exports its failed rows there).
    pub fn metrics(&self) -> &ConsumerMetrics {
        &self.metrics
    }

    /// The registry `/metrics` serves, for the service's own metrics
    /// (im-bridge's IM counters, say).
    pub fn registry(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Registers a background task (a delivery sweeper, say), started by
    /// [`Host::run`] and told to stop through its token once the consumer
    /// has drained; the host waits for it before closing MySQL.
    pub fn background<F, Fut>(&mut self, name: &'static str, task: F)
    where
        F: FnOnce(CancellationToken) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.background
            .push((name, Box::new(move |stop| Box::pin(task(stop)))));
    }

    /// Binds `listen` (the value of config key `key`, for the error) for an
    /// extra server named `name`, served by `serve` from [`Host::run`] until
    /// its token is cancelled — when shutdown starts, so it takes no new
    /// work while the consumer drains. Its failure fails `run` as
    /// [`Error::Server`].
    pub async fn server<F, Fut, E>(
        &mut self,
        name: &'static str,
        listen: &str,
        serve: F,
    ) -> Result<(), Error>
    where
        F: FnOnce(TcpListener, CancellationToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        if !self.serving {
            return Ok(());
        }
        let listener = admin_http::bind(listen).await?;
        self.servers.push(ExtraServer {
            name,
            listener,
            serve: Box::new(move |listener, stop| {
                let served = serve(listener, stop);
                Box::pin(async move { served.await.map_err(BoxError::from) })
            }),
        });
        Ok(())
    }
}

/// A consumer service, built and ready to [`Host::run`].
pub struct Host<S: ConsumerService> {
    consumer: Consumer<S::Message, S::Handler>,
    db: BoundedPool,
    consumer_group: String,
    dedup_purge: DedupPurge,
    lag_monitor: LagMonitor,
    readiness: Arc<Readiness>,
    registry: Arc<Registry>,
    admin: TcpListener,
    background: Vec<(&'static str, BackgroundTask)>,
    servers: Vec<ExtraServer>,
}

impl<S: ConsumerService> std::fmt::Debug for Host<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("service", &S::Config::SERVICE)
            .field("consumer", &self.consumer)
            .field("admin", &self.admin_addr())
            .field("servers", &server_names(&self.servers))
            .finish_non_exhaustive()
    }
}

impl<S: ConsumerService> Host<S> {
    /// Connects MySQL, builds the service's handler (and whatever it
    /// registers), creates the consumer and binds the admin port. Nothing
    /// runs until [`Host::run`].
    pub async fn build(config: S::Config) -> Result<Self, Error> {
        let config = Arc::new(config);
        let settings = config.consumer_settings()?;
        let shared = config.shared();
        let db = shared.mysql.connect_bounded().await?;
        let bounded = db.clone();
        let mut registry = Registry::default();
        let metrics = ConsumerMetrics::register(&mut registry);
        let mut builder = Builder {
            db,
            consumer_group: settings.consumer_group.clone(),
            metrics: metrics.clone(),
            background: Vec::new(),
            servers: Vec::new(),
            registry,
            serving: true,
        };
        let handler = S::build(&config, &mut builder).await?;
        builder.background("operator requests", {
            let (config, settings, db) = (config.clone(), settings.clone(), bounded.clone());
            move |stop| super::requests::run::<S>(config, settings, db, stop)
        });
        let registry = std::mem::take(&mut builder.registry);
        let consumer_group = settings.consumer_group.clone();
        let dedup_purge = settings.dedup_purge;
        let lag_monitor = LagMonitor::new(&settings, &metrics);
        let consumer = Consumer::new(settings, handler, &metrics)?;
        let admin = admin_http::bind(shared.http_listen).await?;
        Ok(Self {
            consumer,
            db: bounded,
            consumer_group,
            dedup_purge,
            lag_monitor,
            readiness: Arc::new(Readiness::default()),
            registry: Arc::new(registry),
            admin,
            background: builder.background,
            servers: builder.servers,
        })
    }

    /// The admin HTTP address (useful with port 0).
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.local_addr().ok()
    }

    /// The address of the extra server registered as `name` (useful with port 0).
    pub fn server_addr(&self, name: &str) -> Option<SocketAddr> {
        self.servers
            .iter()
            .find(|server| server.name == name)
            .and_then(|server| server.listener.local_addr().ok())
    }

    /// Serves until `shutdown`, then stops in order: the consumer drains
    /// first; then the extra servers are awaited, the background tasks and
    /// the admin server stop; MySQL closes last.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), Error> {
        let background = CancellationToken::new();
        let admin = tokio::spawn(admin_http::serve(
            self.admin,
            admin_http::router(self.readiness.clone(), self.registry.clone()),
            background.clone(),
        ));
        // A child token: the servers also stop when the consumer ends on its
        // own (an error), without cancelling the caller's token.
        let servers_stop = shutdown.child_token();
        let servers: Vec<_> = self
            .servers
            .into_iter()
            .map(|server| {
                let serving = (server.serve)(server.listener, servers_stop.clone());
                (server.name, tokio::spawn(serving))
            })
            .collect();
        let mut tasks: Vec<_> = self
            .background
            .into_iter()
            .map(|(_, task)| tokio::spawn(task(background.clone())))
            .collect();
        tasks.push(tokio::spawn(purge::run_purger(
            self.db.clone(),
            self.consumer_group,
            self.dedup_purge,
            background.clone(),
        )));
        tasks.push(tokio::spawn(self.lag_monitor.run(background.clone())));
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
        servers_stop.cancel();
        let mut served = Ok(());
        for (name, server) in servers {
            // A panicked server task is not an error of the service's run.
            if let Ok(Err(source)) = server.await
                && served.is_ok()
            {
                served = Err(Error::Server { name, source });
            }
        }
        draining.abort();
        background.cancel();
        for task in tasks {
            let _ = task.await;
        }
        let _ = admin.await;
        self.db.pool().close().await;
        consumed?;
        served
    }
}
