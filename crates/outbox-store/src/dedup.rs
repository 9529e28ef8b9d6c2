//! Dedup by `event_id` per consumer group, in `consumer_dedup`.
//!
//! Two ways to use it:
//! - **DB effect**: claim the event ids inside the effect's transaction
//!   ([`try_claim_in_tx`], [`claim_many_in_tx`]); the claim and the effect
//!   commit or roll back together, so the effect happens exactly once.
//! - **External effect** (an IM call): skip ids already [`processed`], apply the
//!   effect, then [`record`] the ids. A crash between the effect and the record
//!   repeats the effect once, which the remote side must absorb (Tencent drops
//!   a repeated `Random`).
//!
//! Rows older than the dedup horizon are deleted in bounded batches by
//! [`purge_older_than`] (consumer-runtime schedules it per group).
//!
//! The functions that take a pool run each unit of work under its
//! `mysql.statement_timeout` ([`BoundedPool`]; a bare pool gets the default),
//! so a stalled database turns into an error, never a consumer that waits
//! until TCP gives up (docs/design.md#client-timeouts).

use crate::Error;
use service_kit::db::{IdText, statement::BoundedPool};
use sqlx::{MySqlConnection, QueryBuilder, Row};
use std::{collections::HashSet, time::Duration};

/// Width of `consumer_dedup.event_id`.
pub const MAX_EVENT_ID_BYTES: usize = 36;

pub(crate) fn check_event_id(event_id: &str) -> Result<(), Error> {
    if event_id.is_empty() || event_id.len() > MAX_EVENT_ID_BYTES {
        return Err(Error::InvalidEventId(event_id.to_string()));
    }
    Ok(())
}

/// Claims `event_id` for `group` inside the caller's transaction. True when
/// the id is new (apply the effect), false when it was claimed before.
pub async fn try_claim_in_tx(
    tx: &mut MySqlConnection,
    group: &str,
    event_id: &str,
    now_ms: i64,
) -> Result<bool, Error> {
    check_event_id(event_id)?;
    let inserted = sqlx::query(
        "INSERT IGNORE INTO consumer_dedup (consumer_group, event_id, processed_at_ms) \
         VALUES (?, ?, ?)",
    )
    .bind(group)
    .bind(event_id)
    .bind(now_ms)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    Ok(inserted == 1)
}

/// Claims several event ids in two round trips; returns the ids that were new.
/// An id repeated within `event_ids` is claimed once (its later copies are
/// duplicates). When another transaction claims one of the ids concurrently,
/// the insert count comes up short and this fails, so the caller rolls back
/// and retries.
pub async fn claim_many_in_tx(
    tx: &mut MySqlConnection,
    group: &str,
    event_ids: &[&str],
    now_ms: i64,
) -> Result<HashSet<String>, Error> {
    for event_id in event_ids {
        check_event_id(event_id)?;
    }
    let existing = select_existing(&mut *tx, group, event_ids).await?;
    let mut fresh: Vec<&str> = Vec::with_capacity(event_ids.len());
    let mut seen = HashSet::with_capacity(event_ids.len());
    for event_id in event_ids {
        if !existing.contains(*event_id) && seen.insert(*event_id) {
            fresh.push(event_id);
        }
    }
    if fresh.is_empty() {
        return Ok(HashSet::new());
    }
    let inserted = insert_ignore(&mut *tx, group, &fresh, now_ms).await?;
    if inserted != fresh.len() as u64 {
        return Err(Error::Database(sqlx::Error::Protocol(format!(
            "concurrent dedup claim in group {group}: inserted {inserted} of {}",
            fresh.len()
        ))));
    }
    Ok(fresh.into_iter().map(str::to_string).collect())
}

/// The ids among `event_ids` already handled by `group`.
pub async fn processed(
    db: impl Into<BoundedPool>,
    group: &str,
    event_ids: &[&str],
) -> Result<HashSet<String>, Error> {
    db.into()
        .run(|connection, _| Box::pin(select_existing(connection, group, event_ids)))
        .await
}

/// Records `event_ids` as handled by `group` (already-recorded ids are kept).
pub async fn record(
    db: impl Into<BoundedPool>,
    group: &str,
    event_ids: &[&str],
    now_ms: i64,
) -> Result<(), Error> {
    for event_id in event_ids {
        check_event_id(event_id)?;
    }
    if event_ids.is_empty() {
        return Ok(());
    }
    db.into()
        .run(|connection, _| Box::pin(insert_ignore(connection, group, event_ids, now_ms)))
        .await?;
    Ok(())
}

async fn select_existing(
    connection: &mut MySqlConnection,
    group: &str,
    event_ids: &[&str],
) -> Result<HashSet<String>, Error> {
    if event_ids.is_empty() {
        return Ok(HashSet::new());
    }
    let mut query =
        QueryBuilder::new("SELECT event_id FROM consumer_dedup WHERE consumer_group = ");
    query.push_bind(group).push(" AND event_id IN (");
    let mut ids = query.separated(", ");
    for event_id in event_ids {
        ids.push_bind(*event_id);
    }
    ids.push_unseparated(")");
    let rows = query.build().fetch_all(&mut *connection).await?;
    rows.iter()
        .map(|row| {
            row.try_get::<IdText, _>(0)
                .map(String::from)
                .map_err(Error::from)
        })
        .collect()
}

pub(crate) async fn insert_ignore(
    connection: &mut MySqlConnection,
    group: &str,
    event_ids: &[&str],
    now_ms: i64,
) -> Result<u64, Error> {
    let mut query = QueryBuilder::new(
        "INSERT IGNORE INTO consumer_dedup (consumer_group, event_id, processed_at_ms) ",
    );
    query.push_values(event_ids, |mut row, event_id| {
        row.push_bind(group).push_bind(*event_id).push_bind(now_ms);
    });
    Ok(query
        .build()
        .execute(&mut *connection)
        .await?
        .rows_affected())
}

/// Deletes up to `batch` rows of `group` processed before `cutoff_ms`;
/// returns how many went.
pub async fn purge_batch(
    db: &BoundedPool,
    group: &str,
    cutoff_ms: i64,
    batch: u32,
) -> Result<u64, Error> {
    db.run(|connection, _| {
        Box::pin(async move {
            Ok(sqlx::query(PURGE_BATCH_SQL)
                .bind(group)
                .bind(cutoff_ms)
                .bind(batch.max(1))
                .execute(connection)
                .await?
                .rows_affected())
        })
    })
    .await
}

const PURGE_BATCH_SQL: &str =
    "DELETE FROM consumer_dedup WHERE consumer_group = ? AND processed_at_ms < ? LIMIT ?";

/// Deletes every row of `group` older than `retention`, one bounded batch at
/// a time; returns the total.
pub async fn purge_older_than(
    db: impl Into<BoundedPool>,
    group: &str,
    retention: Duration,
    batch: u32,
) -> Result<u64, Error> {
    let db = db.into();
    let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    let cutoff_ms = service_kit::time::now_ms().saturating_sub(retention_ms);
    let mut total = 0;
    loop {
        let deleted = purge_batch(&db, group, cutoff_ms, batch).await?;
        total += deleted;
        if deleted < u64::from(batch.max(1)) {
            return Ok(total);
        }
        // Let other work at the table between batches.
        tokio::task::yield_now().await;
    }
}
