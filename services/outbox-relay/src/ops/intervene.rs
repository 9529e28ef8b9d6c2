//! retry-now and skip: an operator unblocks a room whose head is failing
//! (docs/design.md#operator-commands).
//!
//! - **retry-now** makes a `retryable` row due now: only `next_retry_at_ms`,
//!   the column the relay already reads as the row's schedule, moves. The
//!   relay then claims it through its usual fenced claim; its retry budget is
//!   unchanged.
//! - **skip** dead-letters a failing head with the operator's reason, so the
//!   rows behind it flow; the row stays replayable. Only a `retryable` row,
//!   or a `pending` row that has failed before, qualifies — never a
//!   `delivering` row (a relay holds it mid-publish), never a row that was
//!   not attempted, and for the ordered chain only the room's head.
//!
//! Both are one guarded UPDATE that requires the status checked before, in
//! the same transaction as the audit row: when a relay claims the row between
//! the check and the UPDATE, the UPDATE matches nothing, the transaction rolls
//! back, and the operator is told what the row is now.

use super::Target;
use super::audit::{self, Entry};
use super::queries::{
    RETRY_NOW_SQL, ROOM_EXISTS_SQL, ROOM_OPEN_ROWS_SQL, ROW_BY_EVENT_SQL, SKIP_SQL,
};
use super::room::{RowView, row_view};
use crate::Error;
use outbox_schema::row::LANE_CHAIN;
use serde::Serialize;
use service_kit::operator::{OperatorName, ReasonRule};
use service_kit::time::now_ms;
use sqlx::MySqlPool;

/// What an intervention did.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Intervention {
    /// `retry_now` or `skip`.
    pub action: &'static str,
    /// Who.
    pub operator: String,
    /// Why.
    pub reason: String,
    /// The row before the change.
    pub before: RowView,
    /// The row after it.
    pub after: RowView,
    /// The audit row written with it.
    pub audit_id: u64,
}

/// Makes `target` (a `retryable` row) due now.
pub async fn retry_now(
    pool: &MySqlPool,
    target: &Target,
    operator: &OperatorName,
    reason: Option<&str>,
) -> Result<Intervention, Error> {
    let reason = audit::checked_reason(reason, ReasonRule::Optional)?;
    let row = resolve(pool, target).await?;
    let now = now_ms();
    if row.status != "retryable" {
        return Err(Error::Refused(format!(
            "{} is {}; retry-now applies only to a retryable row{}",
            describe(&row),
            row.status,
            hint(&row.status)
        )));
    }
    if row.next_retry_at_ms <= now {
        return Err(Error::Refused(format!(
            "{} is already due (since {}); the relay claims it on its next batch",
            describe(&row),
            row.next_retry_at_ms
        )));
    }
    let detail = format!("next_retry_at_ms was {}", row.next_retry_at_ms);
    let mut tx = pool.begin().await?;
    let changed = sqlx::query(RETRY_NOW_SQL)
        .bind(now)
        .bind(row.id)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    finish(
        pool,
        tx,
        changed,
        row,
        operator,
        "retry_now",
        reason,
        detail,
        now,
    )
    .await
}

/// Dead-letters `target`, a failing head, with `reason` (required).
pub async fn skip(
    pool: &MySqlPool,
    target: &Target,
    operator: &OperatorName,
    reason: Option<&str>,
) -> Result<Intervention, Error> {
    let reason = audit::checked_reason(reason, ReasonRule::Required)?;
    let row = resolve(pool, target).await?;
    let failing = row.status == "retryable" || (row.status == "pending" && row.attempts > 0);
    if !failing {
        let why = match row.status.as_str() {
            "pending" => " that has failed; this one was never attempted".to_owned(),
            "delivering" => format!(
                " that no relay holds; {} holds this one mid-publish until {}",
                row.claimed_by, row.lock_until_ms
            ),
            other => hint(other).to_owned(),
        };
        return Err(Error::Refused(format!(
            "{} is {}; skip applies only to a failing head{why}",
            describe(&row),
            row.status
        )));
    }
    if row.lane == LANE_CHAIN {
        let head = room_head(pool, &row.room_id).await?;
        if head.as_ref().map(|head| head.id) != Some(row.id) {
            let head = head.map_or_else(|| "none".to_owned(), |head| describe(&head));
            return Err(Error::Refused(format!(
                "{} is not its room's head (the head is {head}); skip the head first",
                describe(&row)
            )));
        }
    }
    let last_error =
        relay_engine::store::truncate_error(&format!("skipped by {}: {reason}", operator.as_str()));
    let detail = format!(
        "status was {}, attempts {}, last_error was {:?}",
        row.status, row.attempts, row.last_error
    );
    let mut tx = pool.begin().await?;
    let changed = sqlx::query(SKIP_SQL)
        .bind(last_error)
        .bind(row.id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    finish(
        pool,
        tx,
        changed,
        row,
        operator,
        "skip",
        reason,
        detail,
        now_ms(),
    )
    .await
}

#[allow(
    clippy::too_many_arguments,
    reason = "one call site per action; a struct would only rename them"
)]
async fn finish(
    pool: &MySqlPool,
    mut tx: sqlx::Transaction<'_, sqlx::MySql>,
    changed: u64,
    before: RowView,
    operator: &OperatorName,
    action: &'static str,
    reason: String,
    detail: String,
    now: i64,
) -> Result<Intervention, Error> {
    if changed != 1 {
        tx.rollback().await?;
        let now_row = row_by_event(pool, &before.event_id).await?;
        return Err(Error::Refused(format!(
            "{} changed meanwhile (a relay claimed or marked it): it is now {}; nothing was written",
            describe(&before),
            now_row.map_or_else(|| "gone".to_owned(), |row| row.status)
        )));
    }
    let audit_id = audit::record(
        &mut tx,
        &Entry {
            operator,
            action,
            room_id: &before.room_id,
            event_id: &before.event_id,
            row_count: 1,
            reason: &reason,
            detail,
        },
        now,
    )
    .await?;
    tx.commit().await?;
    tracing::warn!(
        action,
        operator = operator.as_str(),
        room_id = %before.room_id,
        event_id = %before.event_id,
        reason = %reason,
        "operator intervened on an outbox row"
    );
    let after = row_by_event(pool, &before.event_id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("event `{}` vanished", before.event_id)))?;
    Ok(Intervention {
        action,
        operator: operator.as_str().to_owned(),
        reason,
        before,
        after,
        audit_id,
    })
}

/// The row a target names: the room's head, or the event's row.
async fn resolve(pool: &MySqlPool, target: &Target) -> Result<RowView, Error> {
    match target {
        Target::Event(event_id) => {
            let event_id = super::checked_event_id(event_id)?;
            row_by_event(pool, event_id)
                .await?
                .ok_or_else(|| Error::NotFound(format!("event `{event_id}` is not in room_outbox")))
        }
        Target::RoomHead(room_id) => {
            let room_id = super::checked_room_id(room_id)?;
            if let Some(head) = room_head(pool, room_id).await? {
                return Ok(head);
            }
            let exists = sqlx::query(ROOM_EXISTS_SQL)
                .bind(room_id)
                .fetch_optional(pool)
                .await?;
            Err(match exists {
                Some(_) => Error::Refused(format!(
                    "room `{room_id}` has no open chain row: every row is delivered or dead-lettered"
                )),
                None => Error::NotFound(format!("room `{room_id}` has no rows in room_outbox")),
            })
        }
    }
}

async fn room_head(pool: &MySqlPool, room_id: &str) -> Result<Option<RowView>, Error> {
    let row = sqlx::query(ROOM_OPEN_ROWS_SQL)
        .bind(room_id)
        .bind(LANE_CHAIN)
        .bind(1_u64)
        .fetch_optional(pool)
        .await?;
    Ok(row.map(|row| row_view(&row, now_ms())).transpose()?)
}

async fn row_by_event(pool: &MySqlPool, event_id: &str) -> Result<Option<RowView>, Error> {
    let row = sqlx::query(ROW_BY_EVENT_SQL)
        .bind(event_id)
        .fetch_optional(pool)
        .await?;
    Ok(row.map(|row| row_view(&row, now_ms())).transpose()?)
}

fn describe(row: &RowView) -> String {
    format!(
        "event `{}` ({} seq {} of room `{}`)",
        row.event_id, row.event_type, row.room_event_seq, row.room_id
    )
}

fn hint(status: &str) -> &'static str {
    match status {
        "failed" => " (a dead letter: use dead-letters replay)",
        "delivered" | "published" => " (it was delivered; nothing to do)",
        "delivering" => " (a relay holds it mid-publish; wait for its outcome)",
        "pending" => {
            " (a pending chain row is due at commit; a wake-up waits for its open time on purpose)"
        }
        _ => "",
    }
}
