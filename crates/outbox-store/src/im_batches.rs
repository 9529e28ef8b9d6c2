//! Merged IM messages between "planned" and "sent" (`im_pending_batches`,
//! docs/design.md#hot-rooms).
//!
//! A merged message carries several events, and which events it carries
//! depends on timing, so a redelivery after a crash would merge them
//! differently and Tencent could not recognise the resend. The batch is
//! therefore written down before it is sent ([`plan`]) and, once Tencent
//! answered, its events are recorded in `consumer_dedup` and the batch
//! deleted in one transaction ([`settle`]). Events redelivered in between
//! find their batch ([`pending_for`]) and the stored message is sent again,
//! byte for byte with the same `Random`.
//!
//! Each function is one unit of work under `mysql.statement_timeout`
//! ([`BoundedPool`]; a bare pool gets the default): a transaction cut off by
//! it never commits.

use crate::{Error, dedup};
use service_kit::db::{IdText, statement::BoundedPool};
use sqlx::{Connection, MySqlConnection, QueryBuilder, Row};
use std::collections::BTreeMap;

/// A merged message planned for one IM group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingBatch {
    /// The event id of its first event.
    pub batch_id: String,
    /// The IM group it goes to.
    pub group_id: String,
    /// Its `Random`.
    pub msg_random: u32,
    /// Its `MsgBody` as JSON, exactly as sent.
    pub msg_body: String,
    /// The events it carries, in order.
    pub event_ids: Vec<String>,
}

/// Writes `batches` down, in one transaction, before they are sent. Fails
/// (a duplicate-key error, worth a retry) when one of their events already
/// belongs to a pending batch: two consumers briefly holding one room during
/// a rebalance must not merge the same gift twice; the retry finds the other
/// batch and resends that one instead.
pub async fn plan(
    db: impl Into<BoundedPool>,
    group: &str,
    batches: &[PendingBatch],
    now_ms: i64,
) -> Result<(), Error> {
    if batches.is_empty() {
        return Ok(());
    }
    for event_id in batches.iter().flat_map(|batch| &batch.event_ids) {
        dedup::check_event_id(event_id)?;
    }
    db.into()
        .run(|connection, _| Box::pin(plan_in(connection, group, batches, now_ms)))
        .await
}

async fn plan_in(
    connection: &mut MySqlConnection,
    group: &str,
    batches: &[PendingBatch],
    now_ms: i64,
) -> Result<(), Error> {
    let mut tx = connection.begin().await?;
    let mut rows = QueryBuilder::new(
        "INSERT INTO im_pending_batches (consumer_group, batch_id, group_id, msg_random, msg_body, \
         created_at_ms) ",
    );
    rows.push_values(batches, |mut row, batch| {
        row.push_bind(group)
            .push_bind(&batch.batch_id)
            .push_bind(&batch.group_id)
            .push_bind(batch.msg_random)
            .push_bind(&batch.msg_body)
            .push_bind(now_ms);
    });
    rows.build().execute(&mut *tx).await?;
    let members: Vec<(&str, &str)> = batches
        .iter()
        .flat_map(|batch| {
            batch
                .event_ids
                .iter()
                .map(|event_id| (event_id.as_str(), batch.batch_id.as_str()))
        })
        .collect();
    let mut insert = QueryBuilder::new(
        "INSERT INTO im_pending_batch_events (consumer_group, event_id, batch_id) ",
    );
    insert.push_values(&members, |mut row, (event_id, batch_id)| {
        row.push_bind(group)
            .push_bind(*event_id)
            .push_bind(*batch_id);
    });
    insert.build().execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(())
}

/// The pending batches of `group` that carry any of `event_ids`, each with
/// all its events (also those not among `event_ids`).
pub async fn pending_for(
    db: impl Into<BoundedPool>,
    group: &str,
    event_ids: &[&str],
) -> Result<Vec<PendingBatch>, Error> {
    if event_ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut query = QueryBuilder::new(
        "SELECT b.batch_id, b.group_id, b.msg_random, b.msg_body, m.event_id \
         FROM im_pending_batches b JOIN im_pending_batch_events m \
         ON m.consumer_group = b.consumer_group AND m.batch_id = b.batch_id \
         WHERE b.consumer_group = ",
    );
    query.push_bind(group).push(
        " AND b.batch_id IN (SELECT batch_id FROM im_pending_batch_events \
         WHERE consumer_group = ",
    );
    query.push_bind(group).push(" AND event_id IN (");
    let mut ids = query.separated(", ");
    for event_id in event_ids {
        ids.push_bind(*event_id);
    }
    ids.push_unseparated(")) ORDER BY b.batch_id");
    let rows = db
        .into()
        .run(|connection, _| Box::pin(async move { query.build().fetch_all(connection).await }))
        .await?;
    let mut batches: BTreeMap<String, PendingBatch> = BTreeMap::new();
    for row in rows {
        let batch_id: String = row.try_get::<IdText, _>(0)?.into();
        let event_id: String = row.try_get::<IdText, _>(4)?.into();
        let batch = match batches.get_mut(&batch_id) {
            Some(batch) => batch,
            None => batches.entry(batch_id.clone()).or_insert(PendingBatch {
                batch_id,
                group_id: row.try_get::<IdText, _>(1)?.into(),
                msg_random: row.try_get(2)?,
                msg_body: row.try_get(3)?,
                event_ids: Vec::new(),
            }),
        };
        batch.event_ids.push(event_id);
    }
    Ok(batches.into_values().collect())
}

/// Records the events of sent `batches` in `consumer_dedup` and deletes the
/// batches, in one transaction.
pub async fn settle(
    db: impl Into<BoundedPool>,
    group: &str,
    batches: &[PendingBatch],
    now_ms: i64,
) -> Result<(), Error> {
    if batches.is_empty() {
        return Ok(());
    }
    db.into()
        .run(|connection, _| Box::pin(settle_in(connection, group, batches, now_ms)))
        .await
}

async fn settle_in(
    connection: &mut MySqlConnection,
    group: &str,
    batches: &[PendingBatch],
    now_ms: i64,
) -> Result<(), Error> {
    let ids: Vec<&str> = batches
        .iter()
        .flat_map(|batch| batch.event_ids.iter().map(String::as_str))
        .collect();
    let mut tx = connection.begin().await?;
    if !ids.is_empty() {
        dedup::insert_ignore(&mut tx, group, &ids, now_ms).await?;
    }
    for mut delete in [
        QueryBuilder::new("DELETE FROM im_pending_batch_events WHERE consumer_group = "),
        QueryBuilder::new("DELETE FROM im_pending_batches WHERE consumer_group = "),
    ] {
        delete.push_bind(group).push(" AND batch_id IN (");
        let mut listed = delete.separated(", ");
        for batch in batches {
            listed.push_bind(&batch.batch_id);
        }
        listed.push_unseparated(")");
        delete.build().execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Deletes the batches of `group` planned more than `retention` ago (a
/// batch whose resend was dead-lettered; the consumers' dedup purge runs it
/// with the same retention).
pub async fn purge_older_than(
    db: impl Into<BoundedPool>,
    group: &str,
    retention: std::time::Duration,
) -> Result<u64, Error> {
    let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    let cutoff_ms = service_kit::time::now_ms().saturating_sub(retention_ms);
    db.into()
        .run(|connection, _| Box::pin(purge_in(connection, group, cutoff_ms)))
        .await
}

const PURGE_EVENTS_SQL: &str = "DELETE m FROM im_pending_batch_events m JOIN im_pending_batches b \
     ON m.consumer_group = b.consumer_group AND m.batch_id = b.batch_id \
     WHERE b.consumer_group = ? AND b.created_at_ms < ?";
const PURGE_BATCHES_SQL: &str =
    "DELETE FROM im_pending_batches WHERE consumer_group = ? AND created_at_ms < ?";

async fn purge_in(
    connection: &mut MySqlConnection,
    group: &str,
    cutoff_ms: i64,
) -> Result<u64, Error> {
    let mut tx = connection.begin().await?;
    sqlx::query(PURGE_EVENTS_SQL)
        .bind(group)
        .bind(cutoff_ms)
        .execute(&mut *tx)
        .await?;
    let deleted = sqlx::query(PURGE_BATCHES_SQL)
        .bind(group)
        .bind(cutoff_ms)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(deleted)
}
