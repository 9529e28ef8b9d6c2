//! The backlog's size, as the relay's gauges read it every few seconds
//! (`room_outbox_pending`, `room_outbox_oldest_pending_age_seconds`,
//! `room_outbox_failed`). The operator commands reuse the same statements,
//! and their EXPLAIN test covers them.

/// Commit time of the oldest open row of the ordered chain (delayed wake-ups
/// are in the future on purpose and would distort the age). Both lookups
/// are index range reads of the backlog.
pub const OLDEST_OPEN_SQL: &str = "SELECT MIN(created_at_ms) AS oldest FROM room_outbox WHERE id = \
     (SELECT MIN(id) FROM room_outbox FORCE INDEX (idx_claim) WHERE lane = 0 AND open_flag = 1)";

/// Count of open rows (both lanes), by index range.
pub const OPEN_COUNT_SQL: &str = "SELECT COUNT(*) FROM room_outbox FORCE INDEX (idx_claim) WHERE lane IN (0, 1) AND open_flag = 1";

/// Rows in `failed` (dead letters not yet replayed), for the relay's
/// `room_outbox_failed` gauge: a range of `idx_failing`, which only failing
/// rows ever enter.
pub const FAILED_COUNT_SQL: &str =
    "SELECT COUNT(*) FROM room_outbox FORCE INDEX (idx_failing) WHERE failing_status = 'failed'";
