//! The SQL of the two tables that link the services (docs/design.md#overview):
//! - [`outbox`]: the one INSERT into `room_outbox`, which room-service runs
//!   inside each command's transaction (rows built by
//!   [`outbox_schema::NewOutboxRow`]'s constructors);
//! - [`dedup`]: `consumer_dedup`, the idempotency records every consumer
//!   group — and the relay's direct IM sink — keeps by `event_id`;
//! - [`im_batches`]: merged IM messages planned and not yet known sent
//!   (`im_pending_batches`), so a resend after a crash is the same message.
//!
//! outbox-schema stays free of sqlx; this crate is its storage half.

pub mod dedup;
pub mod im_batches;
pub mod outbox;

pub use outbox::insert_outbox_rows;

/// Errors of the shared tables.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A statement failed.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// An event id that cannot be a dedup key (empty or longer than the column).
    #[error("invalid event id `{0}`: must be 1..=36 bytes")]
    InvalidEventId(String),
}
