//! `status`: how much is open, retrying and dead-lettered, how old the
//! backlog is, and which rows are retrying now (each holds its room back).
//! Every number is an index read: the open count ranges over idx_claim, the
//! retrying and dead counts over idx_failing. Delivered rows are history and
//! are not counted (a count would read the whole table; purge bounds them).

use super::queries::{OLDEST_FAILING_SQL, OLDEST_OPEN_SQL, RETRYING_ROWS_SQL, STATUS_COUNTS_SQL};
use super::room::{RowView, row_view};
use crate::Error;
use serde::Serialize;
use service_kit::time::now_ms;
use sqlx::{MySqlPool, Row};

/// Retrying rows `status` shows, oldest first.
pub const RETRYING_SHOWN: u64 = 20;

/// The outbox at a glance.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StatusReport {
    /// Rows the relay still has to publish (pending, delivering, retryable; both lanes).
    pub open: i64,
    /// Of those, rows waiting out a retry backoff.
    pub retryable: i64,
    /// Dead letters (`failed`), waiting for an operator.
    pub failed: i64,
    /// Age of the oldest open row of the ordered chain, ms (0 when none).
    pub oldest_pending_age_ms: i64,
    /// The oldest retrying rows (at most [`RETRYING_SHOWN`]): a chain row
    /// here is its room's head and holds every later row of the room.
    pub retrying: Vec<RowView>,
}

/// The status report.
pub async fn status(pool: &MySqlPool) -> Result<StatusReport, Error> {
    // One-shot statements, as the relay's backlog gauges
    // (relay_engine::relay::backlog_counts says why).
    let counts = sqlx::query(STATUS_COUNTS_SQL)
        .persistent(false)
        .fetch_one(pool)
        .await?;
    let oldest: Option<i64> = sqlx::query(OLDEST_OPEN_SQL)
        .persistent(false)
        .fetch_one(pool)
        .await?
        .try_get("oldest")?;
    let now = now_ms();
    let retrying = retrying(pool).await?;
    Ok(StatusReport {
        open: counts.try_get("open_rows")?,
        retryable: counts.try_get("retryable_rows")?,
        failed: counts.try_get("failed_rows")?,
        oldest_pending_age_ms: oldest.map_or(0, |oldest| (now - oldest).max(0)),
        retrying,
    })
}

/// The oldest retrying rows (at most [`RETRYING_SHOWN`]) without the
/// counts: what the console's stuck-rooms page lists, one range of
/// idx_failing (the counts read the whole backlog's index).
pub async fn retrying(pool: &MySqlPool) -> Result<Vec<RowView>, Error> {
    let now = now_ms();
    Ok(sqlx::query(RETRYING_ROWS_SQL)
        .bind(RETRYING_SHOWN)
        .fetch_all(pool)
        .await?
        .iter()
        .map(|row| row_view(row, now))
        .collect::<Result<_, _>>()?)
}

/// Age of the oldest row in `failing_status` (`retryable` or `failed`), ms;
/// 0 when there is none. An index range of idx_failing.
pub async fn oldest_failing_age_ms(pool: &MySqlPool, failing_status: &str) -> Result<i64, Error> {
    let oldest: Option<i64> = sqlx::query(OLDEST_FAILING_SQL)
        .bind(failing_status)
        .fetch_one(pool)
        .await?
        .try_get("oldest")?;
    Ok(oldest.map_or(0, |oldest| (now_ms() - oldest).max(0)))
}
