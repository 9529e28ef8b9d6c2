//! The handler contract: what a consumer does with its messages, and how it
//! tells the runtime to retry, dead-letter, or move on.

use crate::message::{Decode, Delivery};
use std::future::Future;

/// What handling one message amounted to (for metrics and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The effect was applied now.
    Applied,
    /// The event id had been handled before; nothing was done.
    Duplicate,
    /// The message needs nothing from this consumer; acknowledged.
    Ignored,
    /// Not handled now (a batch handler whose budget is short): the runtime
    /// hands it back, before the messages queued after it, with the next
    /// batch. Its offset stays uncommitted until it is handled. A handler
    /// that defers must make progress with each batch it is given, or its
    /// lane spins on the same messages.
    Deferred,
}

/// Why handling failed, which decides what the runtime does next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// Worth another attempt (timeout, rate limit, database hiccup): retried
    /// with backoff until the budget is spent, then dead-lettered.
    #[error("{0}")]
    Retryable(String),
    /// Retrying cannot help (rejected by the remote side, invalid content):
    /// dead-lettered at once.
    #[error("{0}")]
    Permanent(String),
}

impl HandlerError {
    /// A retryable error from anything printable.
    pub fn retryable(error: impl std::fmt::Display) -> Self {
        HandlerError::Retryable(error.to_string())
    }

    /// A permanent error from anything printable.
    pub fn permanent(error: impl std::fmt::Display) -> Self {
        HandlerError::Permanent(error.to_string())
    }

    /// True for [`HandlerError::Permanent`].
    pub fn is_permanent(&self) -> bool {
        matches!(self, HandlerError::Permanent(_))
    }
}

impl From<sqlx::Error> for HandlerError {
    /// Database failures are worth retrying: connections drop, deadlocks
    /// resolve, and the transaction rolled back so nothing half-applied remains.
    fn from(error: sqlx::Error) -> Self {
        HandlerError::Retryable(format!("database: {error}"))
    }
}

impl From<crate::Error> for HandlerError {
    fn from(error: crate::Error) -> Self {
        match error {
            crate::Error::InvalidEventId(_) | crate::Error::Config(_) => {
                HandlerError::Permanent(error.to_string())
            }
            other => HandlerError::Retryable(other.to_string()),
        }
    }
}

/// How a batch failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// The batch failed as a whole (e.g. its transaction rolled back) and the
    /// culprit is unknown: the runtime handles the messages one by one.
    Whole(HandlerError),
    /// The first `done.len()` messages were handled (with these outcomes);
    /// the next one failed with `error`. The runtime retries or dead-letters
    /// that one and goes on with the rest.
    At {
        /// Outcomes of the handled prefix.
        done: Vec<Outcome>,
        /// The failure of message `done.len()`.
        error: HandlerError,
    },
}

impl From<outbox_store::Error> for HandlerError {
    fn from(error: outbox_store::Error) -> Self {
        crate::Error::from(error).into()
    }
}

impl From<HandlerError> for BatchError {
    fn from(error: HandlerError) -> Self {
        BatchError::Whole(error)
    }
}

impl From<sqlx::Error> for BatchError {
    fn from(error: sqlx::Error) -> Self {
        BatchError::Whole(error.into())
    }
}

impl From<outbox_store::Error> for BatchError {
    fn from(error: outbox_store::Error) -> Self {
        BatchError::Whole(error.into())
    }
}

impl From<crate::Error> for BatchError {
    fn from(error: crate::Error) -> Self {
        BatchError::Whole(error.into())
    }
}

/// A consumer's business logic. Every method must be idempotent by event id:
/// the runtime delivers at least once.
pub trait Handler<M: Decode>: Send + Sync + 'static {
    /// False (the default): a partition's messages are handled strictly in
    /// offset order, one at a time or in batches. True: each message key
    /// (the room id) gets a lane of its own, handled in order within the
    /// lane and concurrently with the partition's other lanes, so one room
    /// that waits never holds up the others (docs/design.md#hot-rooms);
    /// batches then hold one key's messages only, up to four times
    /// `consumer.max_batch` of them.
    const PER_KEY_LANES: bool = false;

    /// Handles one message. The runtime stores the offset only after this
    /// returns `Ok`.
    fn handle(
        &self,
        delivery: &Delivery<M>,
    ) -> impl Future<Output = Result<Outcome, HandlerError>> + Send;

    /// Handles consecutive messages of one partition, in order, returning one
    /// outcome per message. Override it to amortise a transaction or a query
    /// over the batch. The default calls [`Handler::handle`] in order and
    /// reports where it stopped.
    fn handle_batch<'a>(
        &'a self,
        batch: &'a [Delivery<M>],
    ) -> impl Future<Output = Result<Vec<Outcome>, BatchError>> + Send + 'a {
        async move {
            let mut done = Vec::with_capacity(batch.len());
            for delivery in batch {
                match self.handle(delivery).await {
                    Ok(outcome) => done.push(outcome),
                    Err(error) => return Err(BatchError::At { done, error }),
                }
            }
            Ok(done)
        }
    }
}
