//! The `outbox-relay` service: the relay engine (`relay_engine`) composed
//! with what a standalone relay process adds — its config file, admin HTTP
//! (`/healthz`, `/readyz`, `/metrics`, `/admin/*`, optionally over TLS), the
//! operator console, and the operator commands of `ops` (CLI, admin and
//! console run the same functions). room-service embeds the engine, not this.

pub mod access;
pub mod admin;
pub mod admin_port;
pub mod admin_tls;
pub mod app;
pub mod config;
pub mod console;
pub mod metrics;
pub mod ops;

pub use relay_engine::{Relay, RelaySettings};

/// Errors of the relay service: the engine's, and the operator commands'.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Invalid configuration; the message names the key.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A MySQL statement failed.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// The Kafka client could not be created.
    #[error("broker client: {0}")]
    Mq(String),
    /// An operator command's input is not acceptable; the message names the
    /// field and the rule. Nothing was written.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// An operator command names a room or event the outbox does not hold.
    #[error("not found: {0}")]
    NotFound(String),
    /// An operator command does not apply to the row's current state (e.g.
    /// retry-now of a delivered row, skip of a row a relay holds); the
    /// message says what the row is. Nothing was written.
    #[error("refused: {0}")]
    Refused(String),
    /// The operating system refused a thread or a socket operation.
    #[error("{0}")]
    Io(String),
}

impl From<relay_engine::Error> for Error {
    fn from(error: relay_engine::Error) -> Self {
        match error {
            relay_engine::Error::Config(message) => Error::Config(message),
            relay_engine::Error::Database(error) => Error::Database(error),
            relay_engine::Error::Mq(message) => Error::Mq(message),
        }
    }
}

impl From<service_kit::Error> for Error {
    fn from(error: service_kit::Error) -> Self {
        match error {
            service_kit::Error::Database(error) => Error::Database(error),
            // The message alone: both errors print "invalid configuration: ".
            service_kit::Error::Config(message) => Error::Config(message),
            other => Error::Config(other.to_string()),
        }
    }
}
