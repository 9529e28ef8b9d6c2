//! The overview's row counts, bounded: each count reads at most
//! [`COUNT_CAP`] + 1 index entries and says "more than 10,000" past that.
//!
//! Why a bounded query rather than the relays' gauges: the exact counts
//! (`ops::status`, the CLI's) walk the whole backlog's range of idx_claim —
//! a million-row backlog is ~400 ms of index reads on every refresh, every
//! operator, competing with the relays' claim scans on the same index. The
//! relays' `room_outbox_pending`/`room_outbox_failed` gauges cost nothing
//! to read, but only the process running a relay has them (a console
//! served beside a paused or stopped relay, or before the first gauge read,
//! would show zeros that look like an empty outbox). A capped count is
//! right wherever the console runs, costs a fixed amount (≤ 10,001 index
//! entries per count, a few ms) however large the backlog grows, and an
//! operator needs the exact figure only while it is small: past the cap
//! the question is "how fast does it drain", which the publishing table
//! and the oldest pending age answer. When this process runs a relay, its
//! gauge's exact figure is shown beside a capped count (`History::gauges`).
//!
//! What each of the overview's reads costs on the million-row outbox of
//! `tests/console_million.rs` (1 row in 10 open, 1 in 100 retryable, 1 in
//! 100 failed), and why each is bounded:
//! - the three capped counts: ≤ 10,001 entries of idx_claim or idx_failing
//!   each, index-only (a derived table with a LIMIT), 3–6 ms each;
//! - the oldest open, retryable and failed rows: one index dive each for
//!   the range's first id, then one primary-key read (2 rows read), < 1 ms;
//! - the oldest dead letters: the first 10 entries of idx_failing's
//!   `failed` range and their rows, < 1 ms; leases and instances: 64 rows
//!   and one per relay, < 1 ms.
//!
//! The counts run as one-shot statements (`persistent(false)`: prepared,
//! executed once, closed), not from the connection's statement cache:
//! MariaDB 10.11 re-executes a cached prepared statement of this shape (a
//! derived table with a bound LIMIT), when another statement ran on the
//! connection in between, 100–200× slower than a fresh one, with the same
//! rows read: the three counts in turn took 1.3 s from the cache against
//! 9 ms one-shot (debug build, printed by `tests/console_million.rs`),
//! which is what made the overview take ~1.3 s however few rows it read.
//! A fresh prepare costs one more round trip (~0.2 ms). The listings'
//! derived-table pages (`search`, `audit_search`) run one-shot too.

use crate::Error;
use crate::ops::queries::{OLDEST_FAILING_SQL, OLDEST_OPEN_SQL};
use service_kit::time::now_ms;
use sqlx::{MySqlPool, Row};

/// Rows counted at most; past it a count reads "more than".
pub const COUNT_CAP: i64 = 10_000;

/// Open rows (both lanes), at most the bound + 1: the backlog's range of
/// idx_claim, stopped by the derived table's LIMIT. Binds: cap + 1.
pub const OPEN_CAPPED_SQL: &str = "SELECT COUNT(*) FROM (SELECT id FROM room_outbox FORCE INDEX (idx_claim) \
     WHERE lane IN (0, 1) AND open_flag = 1 LIMIT ?) AS capped";

/// Rows of one failing status, at most the bound + 1: a range of
/// idx_failing. Binds: failing status, cap + 1.
pub const FAILING_CAPPED_SQL: &str = "SELECT COUNT(*) FROM (SELECT id FROM room_outbox FORCE INDEX (idx_failing) \
     WHERE failing_status = ? LIMIT ?) AS capped";

/// The console's statements, named, for its EXPLAIN test on a million rows.
pub const COUNT_QUERIES: &[(&str, &str)] = &[
    ("open_capped", OPEN_CAPPED_SQL),
    ("failing_capped", FAILING_CAPPED_SQL),
];

/// A count that stops at [`COUNT_CAP`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capped {
    /// Exactly this many.
    Exact(i64),
    /// More than [`COUNT_CAP`].
    MoreThan(i64),
}

impl Capped {
    fn of(counted: i64) -> Self {
        if counted > COUNT_CAP {
            Capped::MoreThan(COUNT_CAP)
        } else {
            Capped::Exact(counted)
        }
    }
}

impl std::fmt::Display for Capped {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Capped::Exact(count) => write!(formatter, "{count}"),
            Capped::MoreThan(cap) => write!(formatter, "more than {cap}"),
        }
    }
}

/// The overview's counts and ages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Open rows (pending, delivering, retryable; both lanes).
    pub open: Capped,
    /// Rows waiting out a retry backoff.
    pub retryable: Capped,
    /// Dead letters.
    pub failed: Capped,
    /// Age of the oldest open chain row, ms (0 when none).
    pub oldest_pending_age_ms: i64,
    /// Age of the oldest retryable row, ms (0 when none).
    pub oldest_retryable_age_ms: i64,
    /// Age of the oldest dead letter, ms (0 when none).
    pub oldest_failed_age_ms: i64,
}

/// The counts, each a bounded index range, and the ages, each one index lookup.
pub async fn counts(pool: &MySqlPool) -> Result<Counts, Error> {
    let open: i64 = sqlx::query_scalar(OPEN_CAPPED_SQL)
        .persistent(false)
        .bind(COUNT_CAP + 1)
        .fetch_one(pool)
        .await?;
    let failing = |status: &'static str| async move {
        sqlx::query_scalar::<_, i64>(FAILING_CAPPED_SQL)
            .persistent(false)
            .bind(status)
            .bind(COUNT_CAP + 1)
            .fetch_one(pool)
            .await
    };
    let retryable = failing("retryable").await?;
    let failed = failing("failed").await?;
    let oldest_open: Option<i64> = sqlx::query(OLDEST_OPEN_SQL)
        .fetch_one(pool)
        .await?
        .try_get("oldest")?;
    let oldest_failing = |status: &'static str| async move {
        sqlx::query(OLDEST_FAILING_SQL)
            .bind(status)
            .fetch_one(pool)
            .await?
            .try_get::<Option<i64>, _>("oldest")
    };
    let oldest_retryable = oldest_failing("retryable").await?;
    let oldest_failed = oldest_failing("failed").await?;
    let now = now_ms();
    let age = |oldest: Option<i64>| oldest.map_or(0, |oldest| (now - oldest).max(0));
    Ok(Counts {
        open: Capped::of(open),
        retryable: Capped::of(retryable),
        failed: Capped::of(failed),
        oldest_pending_age_ms: age(oldest_open),
        oldest_retryable_age_ms: age(oldest_retryable),
        oldest_failed_age_ms: age(oldest_failed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_past_the_cap_reads_more_than() {
        assert_eq!(Capped::of(0).to_string(), "0");
        assert_eq!(Capped::of(COUNT_CAP).to_string(), "10000");
        assert_eq!(Capped::of(COUNT_CAP + 1).to_string(), "more than 10000");
    }
}
