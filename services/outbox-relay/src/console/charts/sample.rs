//! The last hour of the whole fleet, read from the shared MySQL: publishes
//! per minute, commit → publish lag and each group's commit → applied lag.
//!
//! Why MySQL and not each relay's admin endpoint: every relay marks the
//! rows it publishes in `room_outbox` (`delivered_at_ms`) and every consumer
//! group records what it applied in `consumer_dedup` (`processed_at_ms`), so
//! the shared tables already hold the fleet's history, whichever instance
//! did the work — and the console needs no route to the other instances,
//! no list of them, and loses no history when one restarts.
//!
//! Why sampled by primary key: `room_outbox` has no index on
//! `delivered_at_ms` (a delivered mark touches one secondary index on
//! purpose, migrations/20261222000010), and an hour at full rate is millions
//! of rows. So the window's id range is found by a binary search over the
//! primary key (ids follow commit time: `created_at_ms` is written in the
//! inserting transaction), and at most [`SAMPLE_IDS`] evenly spaced ids of
//! that range are read by primary key, each standing for `step` ids. Up to
//! `SAMPLE_IDS` rows in the range the charts are exact; beyond, an unbiased
//! estimate whose cost does not grow with the rate. The groups' records of
//! the sampled events are primary-key lookups of `consumer_dedup`. Every
//! statement is EXPLAIN-checked in `tests/console_charts.rs`.

use crate::Error;
use crate::console::consumption::GroupColumn;
use service_kit::db::IdText;
use sqlx::{MySql, MySqlPool, QueryBuilder};

/// The window the charts show.
pub const WINDOW_MS: i64 = 3_600_000;
/// One point of a chart.
pub const BUCKET_MS: i64 = 60_000;
/// Points per chart.
pub const BUCKETS: usize = (WINDOW_MS / BUCKET_MS) as usize;
/// Rows created this long before the window are read too, so a row
/// committed a little earlier and published inside the window counts.
pub const SLACK_MS: i64 = 15 * 60_000;
/// Most `room_outbox` ids read per page.
pub const SAMPLE_IDS: u64 = 6_000;
/// Ids per `IN (…)` list, so no statement grows without bound.
const CHUNK: usize = 1_000;

/// The newest id (the primary key's last entry).
pub const MAX_ID_SQL: &str = "SELECT MAX(id) FROM room_outbox";
/// The first row at or after an id: one primary-key range step.
pub const ROW_AT_OR_AFTER_SQL: &str =
    "SELECT id, created_at_ms FROM room_outbox WHERE id >= ? ORDER BY id LIMIT 1";
/// The sampled rows (the `IN` list is pushed as bound values).
const SAMPLE_SQL_HEAD: &str = "SELECT id, event_id, lane, event_type, created_at_ms, \
     delivered_at_ms FROM room_outbox WHERE id IN (";
/// A group's records of the sampled events (primary key (group, event id)).
const APPLIED_SQL_HEAD: &str =
    "SELECT event_id, processed_at_ms FROM consumer_dedup WHERE consumer_group = ";

/// The statement reading the rows of `ids`, after `prefix` (`""`, or
/// `"EXPLAIN "` for the plan check).
pub fn sample_query<'a>(prefix: &'static str, ids: &'a [u64]) -> QueryBuilder<'a, MySql> {
    let mut query = QueryBuilder::<MySql>::new(prefix);
    query.push(SAMPLE_SQL_HEAD);
    let mut list = query.separated(", ");
    for id in ids {
        list.push_bind(*id);
    }
    query.push(")");
    query
}

/// The statement reading `group`'s records of `event_ids`, after `prefix`.
pub fn applied_query<'a>(
    prefix: &'static str,
    group: &'a str,
    event_ids: &[&'a str],
) -> QueryBuilder<'a, MySql> {
    let mut query = QueryBuilder::<MySql>::new(prefix);
    query.push(APPLIED_SQL_HEAD);
    query.push_bind(group);
    query.push(" AND event_id IN (");
    let mut list = query.separated(", ");
    for id in event_ids {
        list.push_bind(*id);
    }
    query.push(")");
    query
}

/// One sampled row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampledRow {
    /// The event.
    pub event_id: String,
    /// 0: the room's chain; 1: a delayed wake-up (published when due).
    pub lane: u8,
    /// Its type, for the groups' `handles`.
    pub event_type: String,
    /// Commit time, Unix ms.
    pub created_at_ms: i64,
    /// Publish time, Unix ms; 0 = not yet.
    pub delivered_at_ms: i64,
}

/// What the window's sample says, per minute.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// The first minute's start, Unix ms.
    pub start_ms: i64,
    /// Ids each sampled row stands for (1 = exact).
    pub step: u64,
    /// Rows read.
    pub sampled: usize,
    /// Publishes per second, per minute of publish.
    pub publishes_per_s: Vec<f64>,
    /// Commit → publish lag of the chain's rows, per minute of commit:
    /// (average ms, max ms), None when no row of that minute was published.
    pub publish_lag_ms: Vec<Option<(f64, f64)>>,
    /// Per group: its name, commit → applied lag per minute of commit
    /// (average ms, max ms), and how many sampled events it handles that it
    /// has not applied yet.
    pub groups: Vec<GroupLag>,
}

/// One group's line.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupLag {
    /// The group id.
    pub name: String,
    /// (average ms, max ms) per minute of commit.
    pub lag_ms: Vec<Option<(f64, f64)>>,
    /// Sampled events it handles and has not recorded (yet).
    pub not_applied: usize,
}

/// The hour ending at `now_ms`, for `columns` (the timeline's groups).
pub async fn window(
    pool: &MySqlPool,
    columns: &[GroupColumn],
    now_ms: i64,
) -> Result<Window, Error> {
    let start_ms = now_ms - WINDOW_MS;
    let (rows, step) = match id_range(pool, start_ms - SLACK_MS).await? {
        Some((low, high)) => {
            let step = (high - low) / SAMPLE_IDS + 1;
            let ids: Vec<u64> = (low..=high).step_by(step as usize).collect();
            (sampled_rows(pool, &ids).await?, step)
        }
        None => (Vec::new(), 1),
    };
    let mut groups = Vec::with_capacity(columns.len());
    for column in columns {
        groups.push(group_lag(pool, column, &rows, start_ms).await?);
    }
    Ok(Window {
        start_ms,
        step,
        sampled: rows.len(),
        publishes_per_s: publishes(&rows, start_ms, step),
        publish_lag_ms: lags(
            rows.iter()
                .filter(|row| row.lane == 0 && row.delivered_at_ms > 0)
                .map(|row| (row.created_at_ms, row.delivered_at_ms - row.created_at_ms)),
            start_ms,
        ),
        groups,
    })
}

/// The ids of rows created at or after `since_ms` (first, last), or None
/// when there are none: a binary search over the primary key, one range
/// step per probe (about 25 probes for 30 million ids).
pub async fn id_range(pool: &MySqlPool, since_ms: i64) -> Result<Option<(u64, u64)>, Error> {
    let Some(high) = sqlx::query_scalar::<_, Option<u64>>(MAX_ID_SQL)
        .fetch_one(pool)
        .await?
    else {
        return Ok(None);
    };
    let (mut low, mut end) = (0_u64, high + 1);
    while low < end {
        let probe = low + (end - low) / 2;
        let row: Option<(u64, i64)> = sqlx::query_as(ROW_AT_OR_AFTER_SQL)
            .bind(probe)
            .fetch_optional(pool)
            .await?;
        match row {
            Some((id, created_at_ms)) if created_at_ms < since_ms => low = id + 1,
            _ => end = probe,
        }
    }
    Ok((low <= high).then_some((low, high)))
}

async fn sampled_rows(pool: &MySqlPool, ids: &[u64]) -> Result<Vec<SampledRow>, Error> {
    let mut rows = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(CHUNK) {
        let mut query = sample_query("", chunk);
        let found: Vec<(u64, IdText, u8, IdText, i64, i64)> =
            query.build_query_as().fetch_all(pool).await?;
        rows.extend(found.into_iter().map(
            |(_, event_id, lane, event_type, created_at_ms, delivered_at_ms)| SampledRow {
                event_id: event_id.into(),
                lane,
                event_type: event_type.into(),
                created_at_ms,
                delivered_at_ms,
            },
        ));
    }
    Ok(rows)
}

async fn group_lag(
    pool: &MySqlPool,
    column: &GroupColumn,
    rows: &[SampledRow],
    start_ms: i64,
) -> Result<GroupLag, Error> {
    let handled: Vec<&SampledRow> = rows
        .iter()
        .filter(|row| row.lane == 0 && row.created_at_ms >= start_ms)
        .filter(|row| {
            column
                .handles
                .is_none_or(|handles| handles.handles(&row.event_type))
        })
        .collect();
    let mut applied = std::collections::HashMap::with_capacity(handled.len());
    for chunk in handled.chunks(CHUNK) {
        let ids: Vec<&str> = chunk.iter().map(|row| row.event_id.as_str()).collect();
        let mut query = applied_query("", &column.name, &ids);
        let found: Vec<(IdText, i64)> = query.build_query_as().fetch_all(pool).await?;
        applied.extend(found.into_iter().map(|(id, at)| (String::from(id), at)));
    }
    let not_applied = handled
        .iter()
        .filter(|row| !applied.contains_key(&row.event_id))
        .count();
    let lag_ms = lags(
        handled.iter().filter_map(|row| {
            let at = applied.get(&row.event_id)?;
            Some((row.created_at_ms, (at - row.created_at_ms).max(0)))
        }),
        start_ms,
    );
    Ok(GroupLag {
        name: column.name.clone(),
        lag_ms,
        not_applied,
    })
}

/// The minute of `at_ms` in the window, if inside it.
fn bucket(at_ms: i64, start_ms: i64) -> Option<usize> {
    // Before the window: integer division would round it into minute 0.
    let offset = at_ms.checked_sub(start_ms).filter(|offset| *offset >= 0)?;
    usize::try_from(offset / BUCKET_MS)
        .ok()
        .filter(|index| *index < BUCKETS)
}

/// Publishes per second per minute: each sampled row stands for `step` ids.
fn publishes(rows: &[SampledRow], start_ms: i64, step: u64) -> Vec<f64> {
    let mut counts = vec![0_u64; BUCKETS];
    for row in rows.iter().filter(|row| row.delivered_at_ms > 0) {
        if let Some(index) = bucket(row.delivered_at_ms, start_ms) {
            counts[index] += step;
        }
    }
    let seconds = (BUCKET_MS / 1_000) as f64;
    counts
        .into_iter()
        .map(|count| count as f64 / seconds)
        .collect()
}

/// (average, max) of `(commit time, lag)` per minute of commit.
fn lags(samples: impl Iterator<Item = (i64, i64)>, start_ms: i64) -> Vec<Option<(f64, f64)>> {
    let mut sums = vec![(0_i64, 0_u64, 0_i64); BUCKETS];
    for (committed_ms, lag_ms) in samples {
        if let Some(index) = bucket(committed_ms, start_ms) {
            let (sum, count, max) = &mut sums[index];
            *sum += lag_ms;
            *count += 1;
            *max = (*max).max(lag_ms);
        }
    }
    sums.into_iter()
        .map(|(sum, count, max)| (count > 0).then(|| (sum as f64 / count as f64, max as f64)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(created_at_ms: i64, delivered_at_ms: i64) -> SampledRow {
        SampledRow {
            event_id: "e".into(),
            lane: 0,
            event_type: "RoomGiftSent".into(),
            created_at_ms,
            delivered_at_ms,
        }
    }

    #[test]
    fn publishes_count_per_minute_of_publish_and_weigh_by_step() {
        let start = 1_000_000;
        let rows = [
            row(start - 5_000, start + 1_000),
            row(start + 10, start + 61_000),
            row(start + 20, 0),
            row(start + 30, start + WINDOW_MS + 1),
        ];
        let exact = publishes(&rows, start, 1);
        assert_eq!(exact[0], 1.0 / 60.0);
        assert_eq!(exact[1], 1.0 / 60.0);
        assert_eq!(
            exact.iter().sum::<f64>(),
            2.0 / 60.0,
            "unpublished and later rows"
        );
        let sampled = publishes(&rows, start, 30);
        assert_eq!(sampled[0], 0.5);
    }

    #[test]
    fn lags_are_average_and_max_per_minute_of_commit() {
        let start = 0;
        let lags = lags(
            [(10, 100), (20, 300), (60_000, 7), (-1, 999)].into_iter(),
            start,
        );
        assert_eq!(lags[0], Some((200.0, 300.0)));
        assert_eq!(lags[1], Some((7.0, 7.0)));
        assert_eq!(lags[2], None);
        assert_eq!(lags.len(), BUCKETS);
    }
}
