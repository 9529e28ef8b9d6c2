//! The outbox relay engine: claims `room_outbox` rows and publishes them — to
//! the `hyapp_room_outbox` topic (`mq`), directly to Tencent IM and activity
//! (`direct`), or both (`dual`) — in per-room commit order, fenced by shard
//! leases and claim tokens, with retries, backoff and dead letters.
//!
//! A library with no operator surface: the `outbox-relay` binary composes it
//! with its admin HTTP, console and CLI; room-service embeds the same
//! [`Relay`] when `outbox_worker.enabled`. Build one with [`build_relay`].

pub mod backlog;
mod build;
mod chain;
pub mod config;
mod db;
pub mod direct;
mod failure;
pub mod leases;
mod marks;
pub mod metrics;
pub mod nudge;
pub mod publish;
pub mod relay;
pub mod settings;
pub mod store;
pub mod trace;
pub mod worker;

pub use build::{build_relay, build_relay_with};
pub use relay::Relay;
pub use settings::RelaySettings;

/// Errors of the relay engine.
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
