//! Shared service plumbing used by every binary of the platform, written once:
//! layered configuration, durations and secrets in config, telemetry,
//! shutdown signals, the admin HTTP surface (`/healthz`, `/readyz`, `/metrics`),
//! gRPC TLS, the MySQL pool with the embedded migrations, and the rules for
//! an audited operator's name and reason.

pub mod adjusted;
pub mod admin_http;
mod allocator;
pub mod backoff;
pub mod broker_lag;
pub mod config;
pub mod db;
pub mod duration;
pub mod grpc_tls;
pub mod low_priority;
pub mod mq;
pub mod operator;
pub mod redis;
pub mod secret;
pub mod shutdown;
pub mod telemetry;
pub mod time;
pub mod trace;

pub use secret::Secret;

/// Errors of the shared plumbing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Configuration could not be read or is invalid; the message names the key.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A database operation failed.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// Running the migrations failed.
    #[error("migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A broker read failed (metadata, offsets, watermarks), or the topic
    /// asked about does not exist.
    #[error("broker: {0}")]
    Broker(String),
    /// Binding a listener failed.
    #[error("bind {addr}: {source}")]
    Bind {
        /// The address that could not be bound.
        addr: String,
        /// The underlying I/O error.
        source: std::io::Error,
    },
}
