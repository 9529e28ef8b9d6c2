//! A room's timeline: its chain events in commit order — the latest closed
//! ones and the open ones behind the head — each with its outbox status and,
//! per consumer group, whether and when the group applied it (from
//! `consumer_dedup`, which every consumer writes as it applies an event).
//! Delayed wake-ups are outside the chain and listed by `room` instead.
//!
//! Bounded reads only: the room's chain in idx_room read backwards for the
//! closed rows (past at most its open ones), the chain's backlog in idx_claim
//! for the open rows, then primary-key lookups of `consumer_dedup` for exactly those
//! events and groups.

use super::queries::{DEDUP_EVENTS_SQL, DEDUP_GROUPS_SQL, TIMELINE_CLOSED_SQL, TIMELINE_OPEN_SQL};
use super::room::{RowView, row_view};
use crate::Error;
use serde::Serialize;
use service_kit::db::IdText;
use service_kit::time::now_ms;
use sqlx::{MySql, MySqlPool, QueryBuilder, Row};
use std::collections::HashMap;

/// Closed (history) events shown, newest ones.
pub const CLOSED_SHOWN: u64 = 100;
/// Open events shown, from the head.
pub const OPEN_SHOWN: u64 = 100;

/// One event of the timeline.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TimelineEvent {
    /// The outbox row.
    pub row: RowView,
    /// When the relay delivered it (0 = not delivered).
    pub delivered_at_ms: i64,
    /// Per consumer group (in the order asked), when it applied the event;
    /// None = not (yet) applied.
    pub consumed: Vec<(String, Option<i64>)>,
}

/// A room's timeline.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Timeline {
    /// The room.
    pub room_id: String,
    /// The consumer groups asked about.
    pub groups: Vec<String>,
    /// Events in commit order.
    pub events: Vec<TimelineEvent>,
}

/// The timeline of `room_id` with consumption by `groups`; `NotFound` when
/// the outbox holds no chain row of the room.
pub async fn timeline(
    pool: &MySqlPool,
    room_id: &str,
    groups: &[String],
) -> Result<Timeline, Error> {
    let room_id = super::checked_room_id(room_id)?;
    let now = now_ms();
    let closed = sqlx::query(TIMELINE_CLOSED_SQL)
        .bind(room_id)
        .bind(CLOSED_SHOWN)
        .fetch_all(pool)
        .await?;
    let open = sqlx::query(TIMELINE_OPEN_SQL)
        .bind(room_id)
        .bind(OPEN_SHOWN)
        .fetch_all(pool)
        .await?;
    // Closed rows came newest first; the timeline is in commit order.
    let rows = closed
        .iter()
        .rev()
        .chain(open.iter())
        .map(|row| {
            Ok((
                row_view(row, now)?,
                row.try_get::<i64, _>("delivered_at_ms")?,
            ))
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    if rows.is_empty() {
        return Err(Error::NotFound(format!(
            "room `{room_id}` has no chain rows in room_outbox (never written, or purged)"
        )));
    }
    let consumed = consumed(pool, groups, &rows).await?;
    let events = rows
        .into_iter()
        .map(|(row, delivered_at_ms)| TimelineEvent {
            consumed: groups
                .iter()
                .map(|group| {
                    let at = consumed
                        .get(&(group.clone(), row.event_id.clone()))
                        .copied();
                    (group.clone(), at)
                })
                .collect(),
            row,
            delivered_at_ms,
        })
        .collect();
    Ok(Timeline {
        room_id: room_id.to_owned(),
        groups: groups.to_vec(),
        events,
    })
}

/// When each (group, event) of these rows was applied.
async fn consumed(
    pool: &MySqlPool,
    groups: &[String],
    rows: &[(RowView, i64)],
) -> Result<HashMap<(String, String), i64>, Error> {
    if groups.is_empty() {
        return Ok(HashMap::new());
    }
    let mut builder = QueryBuilder::<MySql>::new(DEDUP_GROUPS_SQL);
    let mut separated = builder.separated(", ");
    for group in groups {
        separated.push_bind(group);
    }
    builder.push(DEDUP_EVENTS_SQL);
    let mut separated = builder.separated(", ");
    for (row, _) in rows {
        separated.push_bind(&row.event_id);
    }
    separated.push_unseparated(")");
    let found = builder.build().fetch_all(pool).await?;
    found
        .iter()
        .map(|row| {
            let group: String = row.try_get::<IdText, _>("consumer_group")?.into();
            let event: String = row.try_get::<IdText, _>("event_id")?.into();
            Ok(((group, event), row.try_get::<i64, _>("processed_at_ms")?))
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(Error::from)
}
