//! Operator commands on `room_outbox`, one implementation shared by the CLI
//! subcommands (`main.rs`) and the admin HTTP endpoints (`admin.rs`):
//!
//! - reads: [`status`], [`dead_letters`] listing, the per-room view
//!   ([`room`]), shard leases ([`leases`]), the audit trail ([`audit`]);
//! - mutations: dead-letter replay, [`intervene`]'s retry-now and skip, and
//!   [`purge`] — each records who did it in `relay_operator_audit` in the same
//!   transaction as the change (docs/design.md#operator-commands).
//!
//! Every statement is a constant of [`queries`], each reading an index
//! (`tests/operator_explain.rs`). Mutations never bypass the relay's claim
//! fencing: they change a row only in a guarded UPDATE that requires the
//! status it expects, so a row a relay claimed meanwhile is left alone.
//! [`render`] turns each report into the CLI's human-readable table.

pub mod audit;
pub mod dead_letters;
pub mod intervene;
pub mod leases;
pub mod purge;
pub mod queries;
pub mod render;
pub mod room;
pub mod status;
pub mod timeline;

pub use audit::{AuditFilter, AuditRecord};
pub use dead_letters::{
    DeadLetter, DeadLetterFilter, Replay, ReplayGuard, TooOld, list_dead_letters,
    replay_dead_letters,
};
pub use intervene::{Intervention, retry_now, skip};
pub use leases::{LeaseReport, leases};
pub use purge::{PURGE_BATCH, purge_delivered};
pub use queries::{FAILED_COUNT_SQL, OLDEST_OPEN_SQL, OPEN_COUNT_SQL, OPERATOR_QUERIES};
pub use room::{RoomView, RowView, room};
pub use service_kit::operator::OperatorName;
pub use status::{StatusReport, status};

use crate::Error;
use outbox_schema::ids::{self, IdProblem};
use service_kit::{duration::ConfigDuration, time::now_ms};

/// What retry-now and skip act on: a room's head, or one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The room's head: its first open row of the ordered chain.
    RoomHead(String),
    /// One row by `event_id` (a chain head, or a delayed wake-up).
    Event(String),
}

impl Target {
    /// The target from exactly one of a room id and an event id, each checked.
    pub fn from_parts(room_id: Option<&str>, event_id: Option<&str>) -> Result<Self, Error> {
        match (room_id, event_id) {
            (Some(room), None) => Ok(Target::RoomHead(checked_room_id(room)?.to_owned())),
            (None, Some(event)) => Ok(Target::Event(checked_event_id(event)?.to_owned())),
            _ => Err(Error::InvalidInput(
                "give exactly one of room_id (the room's head) and event_id".into(),
            )),
        }
    }
}

/// A room id as the outbox stores it, or a precise refusal. The column's
/// bound (64), not the IM bound: rows may predate it.
pub fn checked_room_id(room_id: &str) -> Result<&str, Error> {
    check(room_id, "room_id", ids::MAX_ID_LEN)
}

/// An event id as the outbox stores it, or a precise refusal.
pub fn checked_event_id(event_id: &str) -> Result<&str, Error> {
    check(event_id, "event_id", ids::MAX_EVENT_ID_LEN)
}

fn check<'a>(value: &'a str, field: &str, max: usize) -> Result<&'a str, Error> {
    ids::check_id(value, max).map_err(|problem| {
        Error::InvalidInput(match problem {
            IdProblem::Empty => format!("{field} is empty"),
            IdProblem::TooLong { length, max } => {
                format!("{field} has {length} characters, more than {max}")
            }
            IdProblem::Forbidden {
                position,
                character,
            } => format!(
                "{field} has {:?} at position {position}; ids are [A-Za-z0-9_.:-]",
                character
            ),
        })
    })?;
    Ok(value)
}

/// A positive duration in ms from `"2h"`-style text (`service_kit`'s
/// duration syntax, the one config files use); the error names `field`.
pub fn parse_duration(field: &str, text: &str) -> Result<i64, Error> {
    let duration = ConfigDuration::parse(text)
        .map_err(|problem| Error::InvalidInput(format!("{field}: {problem}")))?;
    if !duration.is_positive() {
        return Err(Error::InvalidInput(format!(
            "{field}: `{}` is not a positive duration",
            text.escape_debug()
        )));
    }
    Ok(duration.as_millis())
}

/// Start of a window ending now, from `"2h"`-style text.
pub fn since_ms(field: &str, text: &str) -> Result<i64, Error> {
    Ok(now_ms().saturating_sub(parse_duration(field, text)?))
}

/// Rows a listing returns unless asked otherwise, and the most it returns.
pub const DEFAULT_LIMIT: u64 = 100;
/// The most rows one listing returns.
pub const MAX_LIMIT: u64 = 10_000;

/// A listing's limit, bounded.
pub fn limit(requested: Option<u64>) -> u64 {
    requested.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_is_spelled_as_in_config_and_must_be_positive() {
        assert_eq!(parse_duration("retention", "2h").unwrap(), 7_200_000);
        // A bare number is milliseconds, as in every config file.
        for text in ["250", "90", "1500"] {
            let config = ConfigDuration::parse(text).unwrap().as_millis();
            assert_eq!(parse_duration("retention", text).unwrap(), config, "{text}");
        }
        for text in ["0", "-1s", "0ms", "2 weeks", "1.5h"] {
            let error = parse_duration("--retention", text).unwrap_err().to_string();
            assert!(error.contains("--retention"), "{text}: {error}");
        }
    }
}
