//! The wire and storage vocabulary shared by room-service, the relay and the
//! consumers: the protobuf event envelope (`pb`), its construction from
//! room-core events, the `room_outbox` row and status types, topic and
//! consumer-group names (docs/design.md#topics-groups-and-message-conventions),
//! and the Kafka key/header conventions.
//!
//! This crate does no I/O: it depends on neither sqlx nor rdkafka nor tokio.

pub mod envelope;
pub mod groups;
pub mod ids;
pub mod names;
pub mod row;
pub mod status;
pub mod wakeup;

pub use envelope::{EnvelopeContext, decode_envelope, envelope_for};
pub use row::{NewOutboxRow, OUTBOX_SHARDS, shard_of};
pub use status::OutboxStatus;
pub use wakeup::{decode_wakeup, treasure_open_command_id, wakeup_for};

/// Generated protobuf types of `proto/room/v1/outbox_event.proto`.
#[allow(missing_debug_implementations, reason = "generated code")]
#[allow(clippy::all, reason = "generated code")]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/hyapp.room.event.v1.rs"));
}

/// Errors of decoding or validating outbox messages. A malformed message is
/// always this error, never a panic.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The bytes are not a valid protobuf message of the expected type.
    #[error("undecodable {what}: {reason}")]
    Decode {
        /// Which message was expected.
        what: &'static str,
        /// The decoder's explanation.
        reason: String,
    },
    /// The message decoded but breaks an envelope rule.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// Which message was checked.
        what: &'static str,
        /// Which rule it broke.
        reason: String,
    },
    /// A status string in `room_outbox.status` that no version ever wrote.
    #[error("unknown outbox status `{0}`")]
    UnknownStatus(String),
}
