//! Dead letters (`failed` rows): listing, and replay — back to `pending` with
//! a fresh retry budget, keeping their `event_id` and commit position, so
//! consumers still deduplicate them. A replay and its audit row are one
//! transaction.
//!
//! Consumers deduplicate only within `consumer.dedup_retention`, so a dead
//! letter committed longer ago than `ops.replay_max_age` ([`ReplayGuard`])
//! is refused — the whole replay, nothing changed — unless forced; a dry run
//! names each such row, and a forced replay says so in its audit row.

use super::audit::{self, Entry};
use super::queries::{DEAD_LETTER_BY_EVENT_SQL, DEAD_LETTERS_OF_ROOM_SQL, DEAD_LETTERS_SQL};
use crate::Error;
use serde::{Deserialize, Serialize};
use service_kit::db::IdText;
use service_kit::duration::ConfigDuration;
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

/// The replay's age limit: `ops.replay_max_age`, and whether the operator
/// forced a replay past it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayGuard {
    /// `ops.replay_max_age` in ms.
    pub max_age_ms: i64,
    /// Replay rows older than that anyway (`--force`, `force=true`).
    pub force: bool,
}

/// A selected dead letter older than the guard allows.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TooOld {
    /// Row id.
    pub id: u64,
    /// Event id.
    pub event_id: String,
    /// How long ago it was committed, ms.
    pub age_ms: i64,
    /// Why it is refused, naming the setting.
    pub why: String,
}

/// What a replay (or its dry run) selected.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Replay {
    /// The dead letters selected (replayed, unless a dry run).
    pub replayed: Vec<DeadLetter>,
    /// Those older than `ops.replay_max_age`: a dry run lists them, a replay
    /// refuses them unless forced.
    pub too_old: Vec<TooOld>,
    /// True when the replay was forced past the age limit.
    pub forced: bool,
}

/// The letters of `selected` older than `guard` allows at `now`.
pub fn too_old(selected: &[DeadLetter], guard: ReplayGuard, now: i64) -> Vec<TooOld> {
    let limit = ConfigDuration::from_millis(guard.max_age_ms);
    selected
        .iter()
        .filter(|letter| now.saturating_sub(letter.created_at_ms) > guard.max_age_ms)
        .map(|letter| {
            let age_ms = now.saturating_sub(letter.created_at_ms);
            TooOld {
                id: letter.id,
                event_id: letter.event_id.clone(),
                age_ms,
                why: format!(
                    "committed {} ago, more than ops.replay_max_age ({limit}): consumers may \
                     have forgotten applying it and apply it twice",
                    days_and_hours(age_ms)
                ),
            }
        })
        .collect()
}

/// An age for people: `8d 3h`.
fn days_and_hours(ms: i64) -> String {
    format!("{}d {}h", ms / 86_400_000, ms % 86_400_000 / 3_600_000)
}

fn refusal(too_old: &[TooOld], guard: ReplayGuard) -> Error {
    let ids: Vec<&str> = too_old.iter().map(|row| row.event_id.as_str()).collect();
    Error::Refused(format!(
        "{} dead letter(s) were committed more than ops.replay_max_age ({}) ago; consumers \
         deduplicate only within consumer.dedup_retention, so they could apply them twice. \
         Nothing was replayed. Narrow the filter, or force it (CLI --force, HTTP force=true, \
         the console's force box) if a second delivery is acceptable: {}",
        too_old.len(),
        ConfigDuration::from_millis(guard.max_age_ms),
        ids.join(", ")
    ))
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
/// what would be replayed and what `guard` would refuse (no operator
/// needed, nothing recorded). Otherwise a selection with rows older than the
/// guard allows is refused unless forced, and the update and its audit row
/// are one transaction; a row replayed by someone else meanwhile is not
/// counted twice.
pub async fn replay_dead_letters(
    pool: &MySqlPool,
    filter: &DeadLetterFilter,
    dry_run: bool,
    operator: Option<&OperatorName>,
    reason: Option<&str>,
    guard: ReplayGuard,
) -> Result<Replay, Error> {
    let reason = audit::checked_reason(reason, ReasonRule::Optional)?;
    let operator = match (dry_run, operator) {
        (true, _) => None,
        (false, Some(operator)) => Some(operator),
        (false, None) => return Err(audit::missing_operator()),
    };
    let selected = list_dead_letters(pool, filter).await?;
    let now = now_ms();
    let too_old = too_old(&selected, guard, now);
    let forced = guard.force && !too_old.is_empty();
    let report = |replayed| Replay {
        replayed,
        too_old: too_old.clone(),
        forced,
    };
    let Some(operator) = operator else {
        return Ok(report(selected));
    };
    if !too_old.is_empty() && !guard.force {
        return Err(refusal(&too_old, guard));
    }
    if selected.is_empty() {
        return Ok(report(selected));
    }
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
            detail: if forced {
                let old: Vec<u64> = too_old.iter().map(|row| row.id).collect();
                format!(
                    "forced past ops.replay_max_age={} (too old: {old:?}) filter={filter:?} ids={ids:?}",
                    ConfigDuration::from_millis(guard.max_age_ms)
                )
            } else {
                format!("filter={filter:?} ids={ids:?}")
            },
        },
        now,
    )
    .await?;
    tx.commit().await?;
    tracing::info!(
        replayed,
        operator = operator.as_str(),
        forced,
        "dead letters replayed"
    );
    Ok(report(selected))
}
