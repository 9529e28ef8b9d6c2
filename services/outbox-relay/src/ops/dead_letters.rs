//! Dead letters (`failed` rows): listing, and replay — back to `pending` with
//! a fresh retry budget, keeping their `event_id` and commit position, so
//! consumers still deduplicate them. A replay and its audit row are one
//! transaction.

use super::audit::{self, Entry};
use super::queries::{DEAD_LETTER_BY_EVENT_SQL, DEAD_LETTERS_OF_ROOM_SQL, DEAD_LETTERS_SQL};
use crate::Error;
use serde::{Deserialize, Serialize};
use service_kit::db::IdText;
use service_kit::operator::{OperatorName, ReasonRule};
use service_kit::time::now_ms;
use sqlx::{MySql, MySqlPool, QueryBuilder, Row};

/// The replay UPDATE up to its due time; then [`REPLAY_WHERE_SQL`] and the
/// bound id list. A primary-key range (`tests/operator_explain.rs`).
pub const REPLAY_SET_SQL: &str = "UPDATE room_outbox SET status = 'pending', retry_count = 0, \
     last_error = '', lock_until_ms = 0, next_retry_at_ms = ";
/// The replay's guard: only rows still dead letters, by id.
pub const REPLAY_WHERE_SQL: &str = " WHERE failing_status = 'failed' AND id IN (";

/// Which dead letters an action applies to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeadLetterFilter {
    /// Only this event.
    pub event_id: Option<String>,
    /// Only this room.
    pub room_id: Option<String>,
    /// Only this event type.
    pub event_type: Option<String>,
    /// Committed within this window ending now, e.g. `"2h"`.
    pub since: Option<String>,
    /// Committed at or after (ms).
    pub since_ms: Option<i64>,
    /// Committed before (ms).
    pub until_ms: Option<i64>,
    /// At most this many (default 100, max 10,000).
    pub limit: Option<u64>,
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

/// Lists dead letters matching `filter`, in commit order.
pub async fn list_dead_letters(
    pool: &MySqlPool,
    filter: &DeadLetterFilter,
) -> Result<Vec<DeadLetter>, Error> {
    let event_type = filter.event_type.as_deref().unwrap_or_default();
    if event_type.len() > 64 {
        return Err(Error::InvalidInput(format!(
            "event_type has {} bytes, more than 64",
            event_type.len()
        )));
    }
    let mut since = filter.since_ms.unwrap_or(0);
    if let Some(window) = &filter.since {
        since = since.max(super::since_ms("since", window)?);
    }
    let until = filter.until_ms.unwrap_or(i64::MAX);
    // One statement per access path, each naming its index.
    let query = match (&filter.event_id, &filter.room_id) {
        (Some(event), _) => {
            sqlx::query(DEAD_LETTER_BY_EVENT_SQL).bind(super::checked_event_id(event)?)
        }
        (None, Some(room)) => {
            sqlx::query(DEAD_LETTERS_OF_ROOM_SQL).bind(super::checked_room_id(room)?)
        }
        (None, None) => sqlx::query(DEAD_LETTERS_SQL),
    };
    let rows = query
        .bind(event_type)
        .bind(event_type)
        .bind(since)
        .bind(until)
        .bind(super::limit(filter.limit))
        .fetch_all(pool)
        .await?;
    let letters: Vec<DeadLetter> = rows
        .iter()
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
        .collect::<Result<_, sqlx::Error>>()?;
    // With both an event and a room, the event must be the room's.
    Ok(match (&filter.event_id, &filter.room_id) {
        (Some(_), Some(room)) => letters
            .into_iter()
            .filter(|letter| &letter.room_id == room)
            .collect(),
        _ => letters,
    })
}

/// Puts matching dead letters back to `pending` with a fresh retry budget,
/// keeping their `event_id` and commit position. With `dry_run`, only lists
/// what would be replayed (no operator needed, nothing recorded). Otherwise
/// the update and its audit row are one transaction; a row replayed by
/// someone else meanwhile is not counted twice. Returns the dead letters
/// selected.
pub async fn replay_dead_letters(
    pool: &MySqlPool,
    filter: &DeadLetterFilter,
    dry_run: bool,
    operator: Option<&OperatorName>,
    reason: Option<&str>,
) -> Result<Vec<DeadLetter>, Error> {
    let reason = audit::checked_reason(reason, ReasonRule::Optional)?;
    let operator = match (dry_run, operator) {
        (true, _) => None,
        (false, Some(operator)) => Some(operator),
        (false, None) => return Err(audit::missing_operator()),
    };
    let selected = list_dead_letters(pool, filter).await?;
    let Some(operator) = operator else {
        return Ok(selected);
    };
    if selected.is_empty() {
        return Ok(selected);
    }
    let now = now_ms();
    let mut tx = pool.begin().await?;
    // Due at once.
    let mut builder = QueryBuilder::<MySql>::new(REPLAY_SET_SQL);
    builder.push_bind(now).push(REPLAY_WHERE_SQL);
    let mut separated = builder.separated(", ");
    for letter in &selected {
        separated.push_bind(letter.id);
    }
    separated.push_unseparated(")");
    let replayed = builder.build().execute(&mut *tx).await?.rows_affected();
    let ids: Vec<u64> = selected.iter().map(|letter| letter.id).collect();
    audit::record(
        &mut tx,
        &Entry {
            operator,
            action: "replay",
            room_id: filter.room_id.as_deref().unwrap_or_default(),
            event_id: filter.event_id.as_deref().unwrap_or_default(),
            row_count: replayed,
            reason: &reason,
            detail: format!("filter={filter:?} ids={ids:?}"),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    tracing::info!(
        replayed,
        operator = operator.as_str(),
        "dead letters replayed"
    );
    Ok(selected)
}
