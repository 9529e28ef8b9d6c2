//! Finding rows on the console's outbox listings (stuck rooms, dead
//! letters, a room's timeline): by event id, room, event type, status and
//! time range, one page at a time with a keyset cursor (`after` = the last
//! id shown), so a page is stable while rows are inserted and no page ever
//! skips over the ones before it (no OFFSET).
//!
//! Every page is bounded twice. The index range it walks is the listing's
//! own — the failing rows' range of idx_failing (stuck: `retryable`, dead
//! letters: `failed`; the room filtered in the index), or one room's chain
//! in idx_room — read from the cursor on for at most [`WINDOW`] entries
//! (a derived table with a LIMIT); the other filters (event type, status,
//! time) are applied to those rows only. When a window holds fewer matches
//! than a page, the next page starts after the window's last row and the
//! page says how far it searched: a rare event type costs the operator a
//! click per [`WINDOW`] rows, never the database a walk of the table. An
//! event id is one lookup of its unique key. The statements are EXPLAINed
//! and their rows read counted on a million rows
//! (`tests/console_search.rs`).

use super::optional;
use crate::Error;
use crate::ops::{self, RowView, room::row_view};
use service_kit::time::now_ms;
use sqlx::{MySqlPool, Row, mysql::MySqlRow};

/// Index entries one page reads at most.
pub const WINDOW: u64 = 2_000;
/// Rows a page shows.
pub const PAGE: usize = 50;

/// One page of a failing status: a window of idx_failing after the cursor
/// (the room filtered in the index), then its rows filtered. Binds: failing
/// status, after id, room twice ('' = any), window, event type twice,
/// status twice, from ms, until ms, page + 1.
pub const FAILING_PAGE_SQL: &str = "SELECT o.id, o.event_id, o.room_id, o.lane, o.room_event_seq, o.event_type, \
     o.status, o.retry_count, o.next_retry_at_ms, o.lock_until_ms, o.claimed_by, o.last_error, o.created_at_ms, \
     o.payload, o.delivered_at_ms, o.traceparent \
     FROM (SELECT id FROM room_outbox FORCE INDEX (idx_failing) WHERE failing_status = ? AND id > ? \
     AND (? = '' OR room_id = ?) ORDER BY id LIMIT ?) AS w JOIN room_outbox o ON o.id = w.id \
     WHERE (? = '' OR o.event_type = ?) AND (? = '' OR o.status = ?) AND o.created_at_ms >= ? \
     AND o.created_at_ms < ? ORDER BY o.id LIMIT ?";

/// How far a failing window reached: its size and last id. Binds: failing
/// status, after id, room twice, window.
pub const FAILING_WINDOW_SQL: &str = "SELECT COUNT(*) AS scanned, MAX(id) AS last_id \
     FROM (SELECT id FROM room_outbox FORCE INDEX (idx_failing) WHERE failing_status = ? AND id > ? \
     AND (? = '' OR room_id = ?) ORDER BY id LIMIT ?) AS w";

/// One page of a room's chain, newest first (a timeline is read from its
/// latest events back): a window of idx_room before the cursor, then its
/// rows filtered. Binds: room, before id, window, event type twice, status
/// twice, from ms, until ms, page + 1.
pub const ROOM_PAGE_SQL: &str = "SELECT o.id, o.event_id, o.room_id, o.lane, o.room_event_seq, o.event_type, \
     o.status, o.retry_count, o.next_retry_at_ms, o.lock_until_ms, o.claimed_by, o.last_error, o.created_at_ms, \
     o.payload, o.delivered_at_ms, o.traceparent \
     FROM (SELECT id FROM room_outbox FORCE INDEX (idx_room) WHERE room_id = ? AND lane = 0 AND id < ? \
     ORDER BY id DESC LIMIT ?) AS w JOIN room_outbox o ON o.id = w.id \
     WHERE (? = '' OR o.event_type = ?) AND (? = '' OR o.status = ?) AND o.created_at_ms >= ? \
     AND o.created_at_ms < ? ORDER BY o.id DESC LIMIT ?";

/// How far a room window reached: its size and oldest id. Binds: room,
/// before id, window.
pub const ROOM_WINDOW_SQL: &str = "SELECT COUNT(*) AS scanned, MIN(id) AS last_id \
     FROM (SELECT id FROM room_outbox FORCE INDEX (idx_room) WHERE room_id = ? AND lane = 0 AND id < ? \
     ORDER BY id DESC LIMIT ?) AS w";

/// One row by event id (the unique key). Binds: event id.
pub const BY_EVENT_SQL: &str = "SELECT o.id, o.event_id, o.room_id, o.lane, o.room_event_seq, o.event_type, \
     o.status, o.retry_count, o.next_retry_at_ms, o.lock_until_ms, o.claimed_by, o.last_error, o.created_at_ms, \
     o.payload, o.delivered_at_ms, o.traceparent FROM room_outbox o FORCE INDEX (uk_event_id) WHERE o.event_id = ?";

/// The search statements, named, for the EXPLAIN test.
pub const SEARCH_QUERIES: &[(&str, &str)] = &[
    ("failing_page", FAILING_PAGE_SQL),
    ("failing_window", FAILING_WINDOW_SQL),
    ("room_page", ROOM_PAGE_SQL),
    ("room_window", ROOM_WINDOW_SQL),
    ("by_event", BY_EVENT_SQL),
];

/// The statuses a row can have.
pub const STATUSES: [&str; 6] = [
    "pending",
    "delivering",
    "retryable",
    "failed",
    "delivered",
    "published",
];

/// A listing's search as its form carries it (empty = any).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct SearchForm {
    /// Event id (exact).
    pub event_id: String,
    /// Room id (exact).
    pub room_id: String,
    /// Event type (exact).
    pub event_type: String,
    /// Status (one of [`STATUSES`]).
    pub status: String,
    /// Committed at or after: `YYYY-MM-DD HH:MM[:SS]` UTC, or `2h` (ago);
    /// `since` is its older name (links that use it keep working).
    #[serde(alias = "since")]
    pub from: String,
    /// Committed before: as `from`.
    pub to: String,
    /// The cursor: the listing goes on past this id, in its order (commit
    /// order for the failing rows, newest first for a room's timeline).
    pub after: String,
}

/// A search, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    /// Event id, or "" = any.
    pub event_id: String,
    /// Room id, or "" = any.
    pub room_id: String,
    /// Event type, or "" = any.
    pub event_type: String,
    /// Status, or "" = any.
    pub status: String,
    /// Committed at or after (ms).
    pub from_ms: i64,
    /// Committed before (ms).
    pub until_ms: i64,
    /// The cursor: past this id in the listing's order (None = from the start).
    pub after: Option<u64>,
}

impl SearchForm {
    /// Whether anything beyond the listing itself was asked.
    pub fn is_empty(&self) -> bool {
        *self == SearchForm::default()
    }

    /// The search, or a refusal naming the field and its rule.
    pub fn checked(&self) -> Result<Search, Error> {
        let event_id = optional(&self.event_id)
            .map(|id| ops::checked_event_id(&id).map(str::to_owned))
            .transpose()?;
        let room_id = optional(&self.room_id)
            .map(|id| ops::checked_room_id(&id).map(str::to_owned))
            .transpose()?;
        let event_type = self.event_type.trim();
        if event_type.len() > 64 {
            return Err(Error::InvalidInput(format!(
                "event_type has {} bytes, more than 64",
                event_type.len()
            )));
        }
        let status = self.status.trim();
        if !status.is_empty() && !STATUSES.contains(&status) {
            return Err(Error::InvalidInput(format!(
                "status `{}` is not one of {}",
                status.escape_debug(),
                STATUSES.join(", ")
            )));
        }
        let from_ms = optional(&self.from)
            .map(|text| super::when::parse_time("from", &text))
            .transpose()?
            .unwrap_or(0);
        let until_ms = optional(&self.to)
            .map(|text| super::when::parse_time("to", &text))
            .transpose()?
            .unwrap_or(i64::MAX);
        let after = optional(&self.after)
            .map(|text| {
                text.parse::<u64>().map_err(|_| {
                    Error::InvalidInput(format!("after `{}` is not a row id", text.escape_debug()))
                })
            })
            .transpose()?;
        Ok(Search {
            event_id: event_id.unwrap_or_default(),
            room_id: room_id.unwrap_or_default(),
            event_type: event_type.to_owned(),
            status: status.to_owned(),
            from_ms,
            until_ms,
            after,
        })
    }
}

/// A row found, with what the timeline adds to a [`RowView`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The row.
    pub row: RowView,
    /// When the relay delivered it (0 = not yet).
    pub delivered_at_ms: i64,
    /// Its W3C trace context ("" when none).
    pub traceparent: String,
}

/// One page of results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The rows, in the listing's order.
    pub rows: Vec<Found>,
    /// Where the next page starts (past this id), if any may follow.
    pub next_after: Option<u64>,
    /// The window ended before a page of matches: the last id searched.
    pub searched_to: Option<u64>,
}

/// Which listing: its index range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Rows of a failing status (`retryable`: stuck rooms; `failed`: dead letters).
    Failing(&'static str),
    /// One room's chain, newest first.
    Room(&'a str),
}

impl Scope<'_> {
    /// The cursor of the first page: before every id, or after none.
    fn start(self) -> u64 {
        match self {
            Scope::Failing(_) => 0,
            Scope::Room(_) => u64::MAX,
        }
    }
}

/// One page of `scope` matching `search`, at most `page` rows.
pub async fn page(
    pool: &MySqlPool,
    scope: Scope<'_>,
    search: &Search,
    page: usize,
) -> Result<Page, Error> {
    let now = now_ms();
    if !search.event_id.is_empty() {
        let row = sqlx::query(BY_EVENT_SQL)
            .bind(&search.event_id)
            .fetch_optional(pool)
            .await?;
        let found = row.map(|row| found(&row, now)).transpose()?;
        let rows = found
            .into_iter()
            .filter(|found| matches(found, scope, search))
            .collect();
        return Ok(Page {
            rows,
            next_after: None,
            searched_to: None,
        });
    }
    let after = search.after.unwrap_or(scope.start());
    // One-shot statements: MariaDB re-executes a cached prepared statement
    // over a derived table with a bound LIMIT up to ~100× slower (`counts`).
    let rows = match scope {
        Scope::Failing(status) => sqlx::query(FAILING_PAGE_SQL)
            .persistent(false)
            .bind(status)
            .bind(after)
            .bind(&search.room_id)
            .bind(&search.room_id)
            .bind(WINDOW),
        Scope::Room(room) => sqlx::query(ROOM_PAGE_SQL)
            .persistent(false)
            .bind(room)
            .bind(after)
            .bind(WINDOW),
    }
    .bind(&search.event_type)
    .bind(&search.event_type)
    .bind(&search.status)
    .bind(&search.status)
    .bind(search.from_ms)
    .bind(search.until_ms)
    .bind(page as u64 + 1)
    .fetch_all(pool)
    .await?;
    let mut rows = rows
        .iter()
        .map(|row| found(row, now))
        .collect::<Result<Vec<_>, _>>()?;
    if rows.len() > page {
        rows.truncate(page);
        let next_after = rows.last().map(|found| found.row.id);
        return Ok(Page {
            rows,
            next_after,
            searched_to: None,
        });
    }
    // Fewer matches than a page: did the window end the search, or the range?
    let window = match scope {
        Scope::Failing(status) => sqlx::query(FAILING_WINDOW_SQL)
            .persistent(false)
            .bind(status)
            .bind(after)
            .bind(&search.room_id)
            .bind(&search.room_id),
        Scope::Room(room) => sqlx::query(ROOM_WINDOW_SQL)
            .persistent(false)
            .bind(room)
            .bind(after),
    }
    .bind(WINDOW)
    .fetch_one(pool)
    .await?;
    let scanned: i64 = window.try_get("scanned")?;
    let last_id: Option<u64> = window.try_get("last_id")?;
    let full = u64::try_from(scanned).unwrap_or(0) >= WINDOW;
    let searched_to = if full { last_id } else { None };
    Ok(Page {
        rows,
        next_after: searched_to,
        searched_to,
    })
}

/// Whether a row found by event id belongs to the listing and the search.
fn matches(found: &Found, scope: Scope<'_>, search: &Search) -> bool {
    let row = &found.row;
    let in_scope = match scope {
        Scope::Failing(status) => row.status == status,
        Scope::Room(room) => row.room_id == room,
    };
    in_scope
        && (search.room_id.is_empty() || row.room_id == search.room_id)
        && (search.event_type.is_empty() || row.event_type == search.event_type)
        && (search.status.is_empty() || row.status == search.status)
        && row.created_at_ms >= search.from_ms
        && row.created_at_ms < search.until_ms
}

fn found(row: &MySqlRow, now: i64) -> Result<Found, sqlx::Error> {
    Ok(Found {
        row: row_view(row, now)?,
        delivered_at_ms: row.try_get("delivered_at_ms")?,
        traceparent: row.try_get("traceparent")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_names_its_bad_field() {
        let bad = |form: SearchForm| form.checked().unwrap_err().to_string();
        let status = bad(SearchForm {
            status: "lost".into(),
            ..SearchForm::default()
        });
        assert!(
            status.contains("status `lost` is not one of pending"),
            "{status}"
        );
        let after = bad(SearchForm {
            after: "-1".into(),
            ..SearchForm::default()
        });
        assert!(after.contains("after `-1` is not a row id"), "{after}");
        let room = bad(SearchForm {
            room_id: "a b".into(),
            ..SearchForm::default()
        });
        assert!(room.contains("room_id has ' '"), "{room}");
        let from = bad(SearchForm {
            from: "yesterday".into(),
            ..SearchForm::default()
        });
        assert!(from.contains("from"), "{from}");
        let everything = SearchForm::default().checked().unwrap();
        assert_eq!((everything.from_ms, everything.until_ms), (0, i64::MAX));
    }
}
