//! Every statement the operator commands run, as literal constants, and
//! [`OPERATOR_QUERIES`], the list of them that `tests/operator_explain.rs`
//! EXPLAINs against a million-row outbox: a query added here without an
//! index to read fails that test instead of scanning production's table.
//!
//! Each read names its index (`FORCE INDEX`), so the plan cannot drift to a
//! walk of the primary key as the table's statistics change — the trap of
//! `ORDER BY id LIMIT n` over a large table. Optional filters are bound as
//! values (`? = ''`, an open time range) instead of changing the statement,
//! so one statement — and one plan — serves every combination.

/// The backlog gauges' statements belong to the engine, which runs them on
/// a timer; the operator commands read them from there.
pub use relay_engine::backlog::{FAILED_COUNT_SQL, OLDEST_OPEN_SQL, OPEN_COUNT_SQL};

/// Open, retrying and dead-lettered rows in one statement (one read view, so
/// the three agree): index-only counts of idx_claim and idx_failing.
pub const STATUS_COUNTS_SQL: &str = "SELECT \
     (SELECT COUNT(*) FROM room_outbox FORCE INDEX (idx_claim) WHERE lane IN (0, 1) AND open_flag = 1) AS open_rows, \
     (SELECT COUNT(*) FROM room_outbox FORCE INDEX (idx_failing) WHERE failing_status = 'retryable') AS retryable_rows, \
     (SELECT COUNT(*) FROM room_outbox FORCE INDEX (idx_failing) WHERE failing_status = 'failed') AS failed_rows";

/// The oldest retrying rows (each is its room's head, or a wake-up): what
/// holds rooms back right now. Binds: limit.
pub const RETRYING_ROWS_SQL: &str = "SELECT id, event_id, room_id, lane, room_event_seq, event_type, \
     status, retry_count, next_retry_at_ms, lock_until_ms, claimed_by, last_error, created_at_ms, payload \
     FROM room_outbox FORCE INDEX (idx_failing) WHERE failing_status = 'retryable' ORDER BY id LIMIT ?";

/// Dead letters in commit order. Binds: event type twice ('' = any), since
/// ms, until ms, limit.
pub const DEAD_LETTERS_SQL: &str = "SELECT id, event_id, room_id, event_type, retry_count, last_error, created_at_ms \
     FROM room_outbox FORCE INDEX (idx_failing) WHERE failing_status = 'failed' \
     AND (? = '' OR event_type = ?) AND created_at_ms >= ? AND created_at_ms < ? ORDER BY id LIMIT ?";

/// One room's dead letters in commit order: the dead letters' range of
/// idx_failing, the room filtered in the index (bounded by the dead letters,
/// never by the room's delivered history). Binds: room id, event type twice,
/// since, until, limit.
pub const DEAD_LETTERS_OF_ROOM_SQL: &str = "SELECT id, event_id, room_id, event_type, retry_count, last_error, created_at_ms \
     FROM room_outbox FORCE INDEX (idx_failing) WHERE room_id = ? \
     AND failing_status = 'failed' AND (? = '' OR event_type = ?) AND created_at_ms >= ? AND created_at_ms < ? \
     ORDER BY id LIMIT ?";

/// One dead letter by event id (the unique key). Binds: event id, event type
/// twice, since, until, limit.
pub const DEAD_LETTER_BY_EVENT_SQL: &str = "SELECT id, event_id, room_id, event_type, retry_count, last_error, created_at_ms \
     FROM room_outbox FORCE INDEX (uk_event_id) WHERE event_id = ? AND failing_status = 'failed' \
     AND (? = '' OR event_type = ?) AND created_at_ms >= ? AND created_at_ms < ? ORDER BY id LIMIT ?";

/// Does the room have any row at all (tells an unknown room from a quiet
/// one)? Binds: room id.
pub const ROOM_EXISTS_SQL: &str = "SELECT id FROM \
     room_outbox FORCE INDEX (idx_room) WHERE room_id = ? LIMIT 1";

/// A room's open rows of one lane in commit order: the head first, then what
/// queues behind it. The lane's backlog range of idx_claim, the room filtered
/// in the index (idx_room has no `open_flag`, so a delivered mark does not
/// move its entry). Binds: room id, lane, limit.
pub const ROOM_OPEN_ROWS_SQL: &str = "SELECT id, event_id, room_id, lane, room_event_seq, event_type, \
     status, retry_count, next_retry_at_ms, lock_until_ms, claimed_by, last_error, created_at_ms, payload \
     FROM room_outbox FORCE INDEX (idx_claim) WHERE room_id = ? AND open_flag = 1 AND lane = ? \
     ORDER BY id LIMIT ?";

/// How many open rows a room has in one lane (index-only: the lane's backlog
/// range of idx_claim). Binds: room id, lane.
pub const ROOM_OPEN_COUNT_SQL: &str = "SELECT COUNT(*) FROM room_outbox FORCE INDEX (idx_claim) \
     WHERE room_id = ? AND open_flag = 1 AND lane = ?";

/// One row by event id, with everything the views show. Binds: event id.
pub const ROW_BY_EVENT_SQL: &str = "SELECT id, event_id, room_id, lane, room_event_seq, event_type, \
     status, retry_count, next_retry_at_ms, lock_until_ms, claimed_by, last_error, created_at_ms, payload \
     FROM room_outbox FORCE INDEX (uk_event_id) WHERE event_id = ?";

/// retry-now: a `retryable` row becomes due now. Only the schedule column
/// moves, and only while the row is still `retryable` and not yet due, so a
/// claim that won the race is never touched. Binds: now, id, now.
pub const RETRY_NOW_SQL: &str = "UPDATE room_outbox SET next_retry_at_ms = ? \
     WHERE id = ? AND status = 'retryable' AND next_retry_at_ms > ?";

/// skip: a failing head becomes a dead letter. Only `retryable` rows and
/// `pending` rows with attempts (never claimed, never in flight) qualify;
/// the guard is in the statement, so a claim that won the race wins.
/// Binds: last_error, id.
pub const SKIP_SQL: &str = "UPDATE room_outbox SET status = 'failed', lock_until_ms = 0, last_error = ? \
     WHERE id = ? AND (status = 'retryable' OR (status = 'pending' AND retry_count > 0))";

/// First row at or after an id: where purge's next chunk starts, and whether
/// it is still old enough. Binds: id.
pub const PURGE_NEXT_ROW_SQL: &str = "SELECT id, created_at_ms \
     FROM room_outbox WHERE id >= ? ORDER BY id LIMIT 1";

/// One purge chunk: delivered rows in an id range (a primary key range, never
/// a walk past it). Binds: from id, to id (exclusive), cutoff ms.
pub const PURGE_CHUNK_SQL: &str = "DELETE FROM room_outbox WHERE id >= ? AND id < ? \
     AND open_flag = 0 AND status IN ('delivered', 'published') AND created_at_ms < ?";

/// Old audit rows, oldest first, bounded. Binds: cutoff ms, limit.
pub const AUDIT_PURGE_SQL: &str = "DELETE FROM relay_operator_audit \
     WHERE at_ms < ? ORDER BY at_ms LIMIT ?";

/// Records one operator mutation (an insert: nothing to read, so not in
/// [`OPERATOR_QUERIES`]).
pub const AUDIT_INSERT_SQL: &str = "INSERT INTO relay_operator_audit \
     (at_ms, operator, action, room_id, event_id, row_count, reason, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)";

/// Adds a purge chunk's deletions to its audit row. Binds: rows, audit id.
pub const AUDIT_ADD_COUNT_SQL: &str = "UPDATE relay_operator_audit SET \
     row_count = row_count + ? WHERE id = ?";

/// Audit rows in a time window, newest first. Binds: since ms, limit.
pub const AUDIT_RECENT_SQL: &str = "SELECT id, at_ms, operator, action, room_id, event_id, row_count, reason, detail \
     FROM relay_operator_audit FORCE INDEX (idx_audit_at) WHERE at_ms >= ? ORDER BY at_ms DESC, id DESC LIMIT ?";

/// Audit rows of one action in a time window, newest first. Binds: action,
/// since ms, limit.
pub const AUDIT_BY_ACTION_SQL: &str = "SELECT id, at_ms, operator, action, room_id, event_id, row_count, reason, detail \
     FROM relay_operator_audit FORCE INDEX (idx_audit_action) WHERE action = ? AND at_ms >= ? \
     ORDER BY at_ms DESC, id DESC LIMIT ?";

/// Audit rows of one room in a time window, newest first, optionally of one
/// action. Binds: room id, since ms, action twice ('' = any), limit.
pub const AUDIT_BY_ROOM_SQL: &str = "SELECT id, at_ms, operator, action, room_id, event_id, row_count, reason, detail \
     FROM relay_operator_audit FORCE INDEX (idx_audit_room) WHERE room_id = ? AND at_ms >= ? \
     AND (? = '' OR action = ?) ORDER BY at_ms DESC, id DESC LIMIT ?";

/// Every shard lease (64 rows: reading them all is the point).
pub const LEASES_SQL: &str = "SELECT shard, owner, \
     epoch, lease_until_ms FROM relay_shard_leases ORDER BY shard";

/// Every relay instance that heartbeats or once did.
pub const INSTANCES_SQL: &str = "SELECT instance_id, heartbeat_at_ms, started_at_ms FROM relay_instances \
     ORDER BY instance_id";

/// Commit time of the oldest row with a failing status (`retryable` or
/// `failed`): the age of the oldest retry or dead letter, by index range.
/// Binds: failing status.
pub const OLDEST_FAILING_SQL: &str = "SELECT MIN(created_at_ms) AS oldest FROM room_outbox WHERE id = \
     (SELECT MIN(id) FROM room_outbox FORCE INDEX (idx_failing) WHERE failing_status = ?)";

/// One row's lane and payload, to decode it in full (the views keep a short
/// summary). Binds: event id.
pub const EVENT_PAYLOAD_SQL: &str = "SELECT lane, payload FROM room_outbox FORCE INDEX (uk_event_id) \
     WHERE event_id = ?";

/// A room's latest closed chain rows (delivered or dead letters), newest
/// first: idx_room's range of the room's chain read backwards, past the
/// room's open rows (at most its backlog), never the rest of its history.
/// Binds: room id, limit.
pub const TIMELINE_CLOSED_SQL: &str = "SELECT id, event_id, room_id, lane, room_event_seq, event_type, \
     status, retry_count, next_retry_at_ms, lock_until_ms, claimed_by, last_error, created_at_ms, payload, \
     delivered_at_ms FROM room_outbox FORCE INDEX (idx_room) WHERE room_id = ? AND open_flag = 0 AND lane = 0 \
     ORDER BY id DESC LIMIT ?";

/// A room's first open chain rows, oldest first (the head, then its queue),
/// with the delivery time column the timeline shows: the chain's backlog
/// range of idx_claim, the room filtered in the index. Binds: room id, limit.
pub const TIMELINE_OPEN_SQL: &str = "SELECT id, event_id, room_id, lane, room_event_seq, event_type, \
     status, retry_count, next_retry_at_ms, lock_until_ms, claimed_by, last_error, created_at_ms, payload, \
     delivered_at_ms FROM room_outbox FORCE INDEX (idx_claim) WHERE room_id = ? AND open_flag = 1 AND lane = 0 \
     ORDER BY id LIMIT ?";

/// Start of the consumed-events lookup: then the bound group list,
/// [`DEDUP_EVENTS_SQL`] and the bound event ids, then `)`. Primary-key
/// lookups of `consumer_dedup` (group, event id).
pub const DEDUP_GROUPS_SQL: &str = "SELECT consumer_group, event_id, processed_at_ms \
     FROM consumer_dedup WHERE consumer_group IN (";
/// The middle of the consumed-events lookup (see [`DEDUP_GROUPS_SQL`]).
pub const DEDUP_EVENTS_SQL: &str = ") AND event_id IN (";

/// Tables whose operator reads are whole-table on purpose: they hold one row
/// per shard or per relay instance, never a row per event.
pub const SMALL_TABLES: [&str; 2] = ["relay_shard_leases", "relay_instances"];

/// Every statement above, named, for the EXPLAIN test. The replay UPDATE is
/// built per call (its id list) and is a primary-key range by construction;
/// the test EXPLAINs it with a sample list (`dead_letters::REPLAY_SQL_PREFIX`),
/// and the timeline's consumed-events lookup likewise (`DEDUP_GROUPS_SQL`).
pub const OPERATOR_QUERIES: &[(&str, &str)] = &[
    ("oldest_open", OLDEST_OPEN_SQL),
    ("open_count", OPEN_COUNT_SQL),
    ("failed_count", FAILED_COUNT_SQL),
    ("status_counts", STATUS_COUNTS_SQL),
    ("retrying_rows", RETRYING_ROWS_SQL),
    ("dead_letters", DEAD_LETTERS_SQL),
    ("dead_letters_of_room", DEAD_LETTERS_OF_ROOM_SQL),
    ("dead_letter_by_event", DEAD_LETTER_BY_EVENT_SQL),
    ("room_exists", ROOM_EXISTS_SQL),
    ("room_open_rows", ROOM_OPEN_ROWS_SQL),
    ("room_open_count", ROOM_OPEN_COUNT_SQL),
    ("row_by_event", ROW_BY_EVENT_SQL),
    ("retry_now", RETRY_NOW_SQL),
    ("skip", SKIP_SQL),
    ("purge_next_row", PURGE_NEXT_ROW_SQL),
    ("purge_chunk", PURGE_CHUNK_SQL),
    ("audit_purge", AUDIT_PURGE_SQL),
    ("audit_add_count", AUDIT_ADD_COUNT_SQL),
    ("audit_recent", AUDIT_RECENT_SQL),
    ("audit_by_action", AUDIT_BY_ACTION_SQL),
    ("audit_by_room", AUDIT_BY_ROOM_SQL),
    ("oldest_failing", OLDEST_FAILING_SQL),
    ("event_payload", EVENT_PAYLOAD_SQL),
    ("timeline_closed", TIMELINE_CLOSED_SQL),
    ("timeline_open", TIMELINE_OPEN_SQL),
    ("leases", LEASES_SQL),
    ("instances", INSTANCES_SQL),
];
