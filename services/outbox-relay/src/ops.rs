//! Operator actions on `room_outbox`, shared by the CLI subcommands and the
//! admin HTTP endpoints: status counts, dead-letter listing, replay (keeping
//! the original `event_id`, so consumers still deduplicate), and purge of old
//! delivered rows in bounded batches (short statements, no long locks).

use crate::Error;
use serde::Serialize;
use service_kit::db::IdText;
use service_kit::time::now_ms;
use sqlx::{MySql, MySqlPool, QueryBuilder, Row};

/// Commit time of the oldest open row of the ordered chain (delayed wake-ups
/// are in the future on purpose and would distort the age). Both lookups
/// are index range reads of the backlog.
pub const OLDEST_OPEN_SQL: &str = "SELECT MIN(created_at_ms) AS oldest FROM room_outbox WHERE id = \
     (SELECT MIN(id) FROM room_outbox FORCE INDEX (idx_claim) WHERE lane = 0 AND open_flag = 1)";

/// Count of open rows (both lanes), by index range.
pub const OPEN_COUNT_SQL: &str = "SELECT COUNT(*) FROM room_outbox FORCE INDEX (idx_claim) WHERE lane IN (0, 1) AND open_flag = 1";

/// Rows per purge statement.
pub const PURGE_BATCH: u64 = 1_000;

/// Counts per status and the age of the oldest undelivered row.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StatusReport {
    /// `(status, count)`, legacy `published` included as stored.
    pub counts: Vec<(String, i64)>,
    /// Age of the oldest open row, ms (0 when none).
    pub oldest_pending_age_ms: i64,
}

/// Status counts and backlog age.
pub async fn status(pool: &MySqlPool) -> Result<StatusReport, Error> {
    let rows = sqlx::query(
        "SELECT status, COUNT(*) AS n FROM room_outbox GROUP BY status ORDER BY status",
    )
    .fetch_all(pool)
    .await?;
    let counts = rows
        .iter()
        .map(|row| {
            Ok((
                row.try_get::<String, _>("status")?,
                row.try_get::<i64, _>("n")?,
            ))
        })
        .collect::<Result<_, sqlx::Error>>()?;
    let oldest: Option<i64> = sqlx::query(OLDEST_OPEN_SQL)
        .fetch_one(pool)
        .await?
        .try_get("oldest")?;
    Ok(StatusReport {
        counts,
        oldest_pending_age_ms: oldest.map_or(0, |oldest| (now_ms() - oldest).max(0)),
    })
}

/// Which dead letters an action applies to.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct DeadLetterFilter {
    /// Only this event.
    pub event_id: Option<String>,
    /// Only this room.
    pub room_id: Option<String>,
    /// Only this event type.
    pub event_type: Option<String>,
    /// Committed at or after (ms).
    pub since_ms: Option<i64>,
    /// Committed before (ms).
    pub until_ms: Option<i64>,
    /// At most this many (default 100, max 10,000).
    pub limit: Option<u64>,
}

impl DeadLetterFilter {
    fn push_where(&self, builder: &mut QueryBuilder<'_, MySql>) {
        builder.push(" WHERE status = 'failed'");
        if let Some(event_id) = &self.event_id {
            builder.push(" AND event_id = ").push_bind(event_id.clone());
        }
        if let Some(room_id) = &self.room_id {
            builder.push(" AND room_id = ").push_bind(room_id.clone());
        }
        if let Some(event_type) = &self.event_type {
            builder
                .push(" AND event_type = ")
                .push_bind(event_type.clone());
        }
        if let Some(since) = self.since_ms {
            builder.push(" AND created_at_ms >= ").push_bind(since);
        }
        if let Some(until) = self.until_ms {
            builder.push(" AND created_at_ms < ").push_bind(until);
        }
        // Commit order: a room's dead letters replay in the order they were written.
        builder
            .push(" ORDER BY id LIMIT ")
            .push_bind(self.limit.unwrap_or(100).clamp(1, 10_000));
    }
}

/// One dead letter as operators see it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DeadLetter {
    /// Row id (commit order).
    pub id: u64,
    /// Event id (kept on replay).
    pub event_id: String,
    /// Room.
    pub room_id: String,
    /// Event type.
    pub event_type: String,
    /// Attempts made.
    pub retry_count: u32,
    /// Last failure, short.
    pub last_error: String,
    /// Commit time.
    pub created_at_ms: i64,
}

/// Lists dead letters matching `filter`.
pub async fn list_dead_letters(
    pool: &MySqlPool,
    filter: &DeadLetterFilter,
) -> Result<Vec<DeadLetter>, Error> {
    let mut builder = QueryBuilder::new(
        "SELECT id, event_id, room_id, event_type, retry_count, last_error, created_at_ms FROM room_outbox",
    );
    filter.push_where(&mut builder);
    let rows = builder.build().fetch_all(pool).await?;
    rows.iter()
        .map(|row| {
            Ok(DeadLetter {
                id: row.try_get("id")?,
                event_id: row.try_get::<IdText, _>("event_id")?.into(),
                room_id: row.try_get::<IdText, _>("room_id")?.into(),
                event_type: row.try_get("event_type")?,
                retry_count: row.try_get("retry_count")?,
                last_error: row.try_get("last_error")?,
                created_at_ms: row.try_get("created_at_ms")?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(Error::from)
}

/// Puts matching dead letters back to `pending` with a fresh retry budget,
/// keeping their `event_id` and commit position. With `dry_run`, only lists
/// what would be replayed. Returns the affected dead letters.
pub async fn replay_dead_letters(
    pool: &MySqlPool,
    filter: &DeadLetterFilter,
    dry_run: bool,
) -> Result<Vec<DeadLetter>, Error> {
    let selected = list_dead_letters(pool, filter).await?;
    if dry_run || selected.is_empty() {
        return Ok(selected);
    }
    let mut builder = QueryBuilder::new(
        "UPDATE room_outbox SET status = 'pending', retry_count = 0, last_error = '', lock_until_ms = 0, \
         next_retry_at_ms = ",
    );
    builder
        .push_bind(now_ms())
        .push(" WHERE status = 'failed' AND id IN (");
    let mut separated = builder.separated(", ");
    for letter in &selected {
        separated.push_bind(letter.id);
    }
    separated.push_unseparated(")");
    builder.build().execute(pool).await?;
    tracing::info!(replayed = selected.len(), "dead letters replayed");
    Ok(selected)
}

/// Deletes delivered rows committed more than `retention_ms` ago, in batches
/// of [`PURGE_BATCH`]; open and failed rows are never touched. Returns rows deleted.
pub async fn purge_delivered(pool: &MySqlPool, retention_ms: i64) -> Result<u64, Error> {
    let cutoff = now_ms() - retention_ms.max(0);
    let mut total = 0;
    loop {
        let deleted = sqlx::query(
            // Oldest first along the primary key: old rows sit at its start.
            "DELETE FROM room_outbox WHERE open_flag = 0 AND status IN ('delivered', 'published') \
             AND created_at_ms < ? ORDER BY id LIMIT ?",
        )
        .bind(cutoff)
        .bind(PURGE_BATCH)
        .execute(pool)
        .await?
        .rows_affected();
        total += deleted;
        if deleted < PURGE_BATCH {
            return Ok(total);
        }
    }
}
