//! Purge: deletes delivered rows older than the retention window, oldest
//! first, in chunks of [`PURGE_BATCH`] ids — short statements, no long locks
//! — and audit rows older than [`AUDIT_RETENTION_MS`]. Open and failed rows
//! are never touched.
//!
//! Each chunk is a primary-key range, and purge stops at the first row (in
//! commit order) younger than the cutoff: ids follow commit time to within a
//! commit batch, so everything after it is young too, and a purge with
//! nothing to delete reads one row instead of the whole table. Old failed
//! rows are stepped over, one chunk at a time.
//!
//! The purge's audit row is written with its first chunk, and every chunk
//! adds its deletions to it in the chunk's own transaction, so the recorded
//! count is exactly what was deleted even if the purge stops half-way.

use super::audit::{self, Entry};
use super::queries::{AUDIT_ADD_COUNT_SQL, AUDIT_PURGE_SQL, PURGE_CHUNK_SQL, PURGE_NEXT_ROW_SQL};
use crate::Error;
use serde::Serialize;
use service_kit::operator::{OperatorName, ReasonRule};
use service_kit::time::now_ms;
use sqlx::{MySqlPool, Row};

/// Ids per purge chunk (and audit rows per delete).
pub const PURGE_BATCH: u64 = 1_000;
/// How long the operator audit trail is kept: 90 days.
pub const AUDIT_RETENTION_MS: i64 = 90 * 86_400_000;

/// What a purge deleted.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PurgeReport {
    /// Delivered rows deleted.
    pub deleted: u64,
    /// The window kept, ms.
    pub retention_ms: i64,
    /// Audit rows past [`AUDIT_RETENTION_MS`] deleted.
    pub audit_rows_deleted: u64,
    /// The purge's own audit row.
    pub audit_id: u64,
}

/// Deletes delivered rows committed more than `retention_ms` ago.
pub async fn purge_delivered(
    pool: &MySqlPool,
    retention_ms: i64,
    operator: &OperatorName,
    reason: Option<&str>,
) -> Result<PurgeReport, Error> {
    let reason = audit::checked_reason(reason, ReasonRule::Optional)?;
    let retention_ms = retention_ms.max(0);
    let now = now_ms();
    let cutoff = now - retention_ms;
    let entry = |row_count| Entry {
        operator,
        action: "purge",
        room_id: "",
        event_id: "",
        row_count,
        reason: &reason,
        detail: format!("retention_ms={retention_ms} cutoff_ms={cutoff}"),
    };
    let mut audit_id = None;
    let mut deleted = 0;
    let mut cursor: u64 = 0;
    loop {
        let next = sqlx::query(PURGE_NEXT_ROW_SQL)
            .bind(cursor)
            .fetch_optional(pool)
            .await?;
        let Some(next) = next else { break };
        if next.try_get::<i64, _>("created_at_ms")? >= cutoff {
            break;
        }
        let from: u64 = next.try_get("id")?;
        let to = from.saturating_add(PURGE_BATCH);
        let mut tx = pool.begin().await?;
        let chunk = sqlx::query(PURGE_CHUNK_SQL)
            .bind(from)
            .bind(to)
            .bind(cutoff)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        match audit_id {
            None => audit_id = Some(audit::record(&mut tx, &entry(chunk), now).await?),
            Some(id) => {
                sqlx::query(AUDIT_ADD_COUNT_SQL)
                    .bind(chunk)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        deleted += chunk;
        cursor = to;
    }
    let audit_id = match audit_id {
        Some(id) => id,
        None => {
            let mut tx = pool.begin().await?;
            let id = audit::record(&mut tx, &entry(0), now).await?;
            tx.commit().await?;
            id
        }
    };
    let mut audit_rows_deleted = 0;
    loop {
        let batch = sqlx::query(AUDIT_PURGE_SQL)
            .bind(now - AUDIT_RETENTION_MS)
            .bind(PURGE_BATCH)
            .execute(pool)
            .await?
            .rows_affected();
        audit_rows_deleted += batch;
        if batch < PURGE_BATCH {
            break;
        }
    }
    tracing::info!(
        deleted,
        audit_rows_deleted,
        operator = operator.as_str(),
        "outbox purged"
    );
    Ok(PurgeReport {
        deleted,
        retention_ms,
        audit_rows_deleted,
        audit_id,
    })
}
