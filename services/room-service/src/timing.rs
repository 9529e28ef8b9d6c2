//! The `room_command_timing` log line (docs/design.md#command-timing-log): one
//! per write command, with the time spent in each pipeline stage, so a slow
//! command can be attributed
//! (gifts: `wallet_debit_ms`; others: `save_mutation_ms`, `snapshot_ms`,
//! `projection_ms`). Commands committed together in one group commit share
//! the batch's stage times. A command refused by validation, before it
//! reached the pipeline, logs the line too, with zero stages.

use std::time::Duration;

use outbox_schema::ids::{MAX_COMMAND_ID_LEN, MAX_ID_LEN, check_id};

use crate::Error;

/// Stage durations and async-outbox flags of one command.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageTimings {
    /// Idempotency check (recent-reply cache, lookups after a duplicate key).
    pub idempotency: Duration,
    /// Redis lease and Room Cell load (zero when the cell was already loaded).
    pub lease: Duration,
    /// Saga row (through a commit lane when shared commits are on) + wallet
    /// debit (gifts only).
    pub wallet_debit: Duration,
    /// The SaveMutation transaction, including the wait for a free commit
    /// lane when shared commits are on.
    pub save_mutation: Duration,
    /// Periodic snapshot write (zero when none was due).
    pub snapshot: Duration,
    /// Redis projections and the relay nudge.
    pub projection: Duration,
    /// Synchronous Tencent IM call (CreateRoom's group creation).
    pub tencent_im: Duration,
    /// The command wrote outbox rows that activity consumes.
    pub activity_async_outbox: bool,
    /// The command wrote outbox rows that become IM messages or group operations.
    pub tencent_im_async_outbox: bool,
}

fn millis(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1_000_000.0).round() / 1_000.0
}

/// What to log besides the stages.
#[derive(Debug, Clone, Copy)]
pub struct CommandIdentity<'a> {
    /// Command name.
    pub command: &'a str,
    /// Room.
    pub room_id: &'a str,
    /// Idempotency key.
    pub command_id: &'a str,
    /// `ok`, `replayed`, or the error's code label ([`crate::error::ErrorCode::label`]).
    pub outcome: &'a str,
    /// The error's stable reason (the `x-error-reason` of [`Error::reason`]);
    /// empty when the command succeeded.
    pub reason: &'a str,
}

/// Emits the `room_command_timing` line.
pub fn log(identity: CommandIdentity<'_>, stages: &StageTimings, total: Duration) {
    tracing::info!(
        target: "room_command_timing",
        command = identity.command,
        room_id = identity.room_id,
        command_id = identity.command_id,
        outcome = identity.outcome,
        reason = identity.reason,
        idempotency_ms = millis(stages.idempotency),
        lease_ms = millis(stages.lease),
        wallet_debit_ms = millis(stages.wallet_debit),
        save_mutation_ms = millis(stages.save_mutation),
        snapshot_ms = millis(stages.snapshot),
        projection_ms = millis(stages.projection),
        // No synchronous activity call exists on the request path
        // (docs/design.md#command-timing-log).
        activity_ms = 0.0,
        tencent_im_ms = millis(stages.tencent_im),
        activity_async_outbox = stages.activity_async_outbox,
        tencent_im_async_outbox = stages.tencent_im_async_outbox,
        total_ms = millis(total),
        "room_command_timing"
    );
}

/// Emits the line of a write command refused before it reached the room
/// pipeline (a validation error): no stage ran, so every stage is zero.
/// `room_id` and `command_id` come from the unvalidated request and are
/// logged only when they are well-formed ids; otherwise they are empty, so a
/// malformed request cannot put arbitrary text into the log.
pub fn log_refused(command: &str, room_id: &str, command_id: &str, error: &Error, total: Duration) {
    fn readable(value: &str, max: usize) -> &str {
        if check_id(value, max).is_ok() {
            value
        } else {
            ""
        }
    }
    log(
        CommandIdentity {
            command,
            room_id: readable(room_id, MAX_ID_LEN),
            command_id: readable(command_id, MAX_COMMAND_ID_LEN),
            outcome: error.code().label(),
            reason: error.reason(),
        },
        &StageTimings::default(),
        total,
    );
}

/// Whether an event type becomes a Tencent IM message or group operation
/// by default (docs/design.md#im-silent-events).
pub fn is_im_event(event_type: &str) -> bool {
    !outbox_schema::names::IM_SILENT_EVENT_TYPES.contains(&event_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_keep_microsecond_precision() {
        assert_eq!(millis(Duration::from_micros(1_234)), 1.234);
        assert_eq!(millis(Duration::ZERO), 0.0);
    }

    #[test]
    fn heat_and_rank_are_not_im_events() {
        assert!(is_im_event("RoomUserJoined"));
        assert!(!is_im_event("RoomHeatChanged"));
        assert!(!is_im_event("RoomRankChanged"));
    }
}
