//! The Kafka consumer runtime shared by im-bridge, activity-consumer,
//! notice-consumer and room-service's treasure-open consumer.
//!
//! What it guarantees, whatever the handler:
//! - **Per-partition (or per-room) order, cross-partition parallelism.** One `StreamConsumer`
//!   dispatches each message to a worker task of its partition; a worker
//!   handles its messages strictly in offset order, or, for a handler with
//!   [`Handler::PER_KEY_LANES`], in offset order per key (room) with the
//!   partition's keys concurrent, committing the lowest offset still
//!   outstanding so no waiting room holds the others. While the queues hold
//!   `partition_queue_limit` messages per partition on average the
//!   dispatcher stops polling (librdkafka then stops fetching); a partition
//!   full for ten seconds meanwhile is paused so it cannot hold up the
//!   others for long.
//! - **Offsets only after the effect.** A worker stores an offset only once
//!   every message before it is done: the handler returned (or the message was dead-lettered); librdkafka
//!   commits stored offsets (`enable.auto.offset.store=false`), and shutdown
//!   and partition revocation commit what is done.
//! - **Bounded retries, then a dead letter.** A failing message is retried in
//!   place with exponential backoff up to `consumer_max_reconsume_times`, then
//!   produced to the group's dead-letter topic with the reason in headers. An
//!   undecodable message, or one larger than `consumer.max_message_bytes`,
//!   goes there at once. No message crashes the consumer
//!   or stalls its partition forever.
//! - **Dedup by `event_id`** helpers ([`dedup`]) for handlers: claim in the
//!   effect's transaction, or check-and-record around an external effect, plus
//!   the bounded purge of old dedup rows.
//!
//! The message type is generic ([`Decode`]): the room outbox envelope or a
//! treasure-open wake-up.

pub mod config;
mod consumer;
pub mod dead_letter;
pub mod delivery;
pub mod handler;
pub mod host;
mod kafka;
pub mod lag;
mod ledger;
pub mod message;
pub mod metrics;
mod offset_gap;
pub mod purge;
mod runner;
pub mod sweeper;
/// Helpers for consumers' tests, compiled only for tests: the `testing`
/// feature, which only dev-dependencies enable, so no production build
/// carries a stand-in producer or test settings.
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod trace;
mod worker;

pub use config::{ConsumerConfig, ConsumerSettings, DedupPurge, RetryPolicy};
pub use consumer::Consumer;
pub use handler::{BatchError, Handler, HandlerError, Outcome};
pub use message::{Decode, Delivery};
pub use metrics::{ConsumerMetrics, GroupMetrics};
/// `consumer_dedup` claims and records (owned by outbox-store, re-exported
/// because every handler uses them).
pub use outbox_store::dedup;

/// Errors of the consumer runtime.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration cannot work; the message names the key.
    #[error("invalid consumer configuration: {0}")]
    Config(String),
    /// A Kafka client operation failed.
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// A dedup table operation failed.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// An event id that cannot be a dedup key (empty or longer than the column).
    #[error("invalid event id `{0}`: must be 1..=36 bytes")]
    InvalidEventId(String),
}

impl From<outbox_store::Error> for Error {
    fn from(error: outbox_store::Error) -> Self {
        match error {
            outbox_store::Error::Database(error) => Error::Database(error),
            outbox_store::Error::InvalidEventId(id) => Error::InvalidEventId(id),
        }
    }
}

impl From<service_kit::Error> for Error {
    fn from(error: service_kit::Error) -> Self {
        Error::Config(error.to_string())
    }
}
