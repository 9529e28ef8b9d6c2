//! The admin port — probes, `/metrics`, `/admin/*` and the console — served
//! on a thread of its own at a lower CPU priority (`admin_cpu_nice`) with a
//! MySQL pool of its own (`admin_max_connections`): an operator reloading
//! the console back to back takes neither CPU nor a database connection
//! from the relay (`service_kit::low_priority` says why the pool must be the
//! thread's own). The port is bound by the caller first, so its address is
//! known and a taken port refuses start-up.

use crate::Error;
use service_kit::low_priority::{self, Finished, Nice};
use sqlx::MySqlPool;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Builds the port's pool on its thread (lazily connecting, so it cannot
/// fail on a database that is briefly away).
pub type PoolSource = Box<dyn FnOnce() -> Result<MySqlPool, service_kit::Error> + Send>;
/// The port's routes over its pool.
pub type Routes = Box<dyn FnOnce(MySqlPool) -> axum::Router + Send>;

/// The admin port, bound, ready to be served.
pub struct AdminPort {
    /// The bound listener.
    pub listener: TcpListener,
    /// TLS of the listener (`admin_tls`), or None.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// How much lower the thread's CPU priority is.
    pub nice: Nice,
    /// The port's own pool.
    pub pool: PoolSource,
    /// The routes served.
    pub routes: Routes,
}

impl std::fmt::Debug for AdminPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminPort")
            .field("listener", &self.listener)
            .field("tls", &self.tls.is_some())
            .field("nice", &self.nice)
            .finish_non_exhaustive()
    }
}

impl AdminPort {
    /// Serves on the port's thread until `shutdown`; the returned
    /// [`Finished`] resolves once its connections are done and its pool
    /// closed.
    pub fn spawn(self, shutdown: CancellationToken) -> Result<Finished, Error> {
        let Self {
            listener,
            tls,
            nice,
            pool,
            routes,
        } = self;
        // Moved off this runtime's reactor onto the thread's own.
        let listener = listener.into_std().map_err(port_error)?;
        low_priority::spawn("relay-admin", nice, move || async move {
            let listener = match TcpListener::from_std(listener) {
                Ok(listener) => listener,
                Err(error) => return tracing::error!(%error, "admin port not served"),
            };
            let pool = match pool() {
                Ok(pool) => pool,
                Err(error) => return tracing::error!(%error, "admin port not served"),
            };
            crate::admin_tls::serve(listener, tls, routes(pool.clone()), shutdown).await;
            pool.close().await;
        })
        .map_err(port_error)
    }
}

fn port_error(error: std::io::Error) -> Error {
    Error::Io(format!("admin port thread: {error}"))
}
