//! The outbox relay: claims `room_outbox` rows and publishes them — to the
//! `hyapp_room_outbox` topic (`mq`), directly to Tencent IM and activity
//! (`direct`), or both (`dual`) — in per-room commit order, fenced by shard
//! leases and claim tokens, with retries, backoff and dead letters. A library
//! with a thin binary; room-service embeds the same [`Relay`].

pub mod access;
pub mod admin;
pub mod admin_tls;
pub mod app;
mod chain;
pub mod config;
pub mod console;
pub mod direct;
mod failure;
pub mod leases;
mod marks;
pub mod metrics;
pub mod nudge;
pub mod ops;
pub mod publish;
pub mod relay;
pub mod settings;
pub mod store;
pub mod trace;
pub mod worker;

pub use relay::Relay;
pub use settings::RelaySettings;

/// Errors of the relay library.
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
