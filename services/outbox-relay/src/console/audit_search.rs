//! Finding audit rows: by action, room, operator, event id and time range,
//! newest first, one page at a time with a keyset cursor on `(at_ms, id)`
//! (`before` = the last row shown), stable while operators act.
//!
//! Bounded as the outbox listings are (`search`): a window of at most
//! [`WINDOW`] index entries — a room's range of idx_audit_room when a room
//! is given, else the time range of idx_audit_at, both read newest first
//! from the cursor — and the other filters applied to those rows only.

use super::optional;
use super::search::WINDOW;
use crate::Error;
use crate::ops::{self, AuditRecord};
use service_kit::db::IdText;
use sqlx::{MySqlPool, Row, mysql::MySqlRow};

/// A page of the whole trail: a window of idx_audit_at before the cursor,
/// then its rows filtered. Binds: from ms, until ms, cursor at, cursor at,
/// cursor id, window, action twice, operator twice, event id twice, page + 1.
pub const AUDIT_PAGE_SQL: &str = "SELECT a.id, a.at_ms, a.operator, a.action, a.room_id, a.event_id, a.row_count, \
     a.reason, a.detail FROM (SELECT id FROM relay_operator_audit FORCE INDEX (idx_audit_at) \
     WHERE at_ms >= ? AND at_ms < ? AND (at_ms < ? OR (at_ms = ? AND id < ?)) \
     ORDER BY at_ms DESC, id DESC LIMIT ?) AS w JOIN relay_operator_audit a ON a.id = w.id \
     WHERE (? = '' OR a.action = ?) AND (? = '' OR a.operator = ?) AND (? = '' OR a.event_id = ?) \
     ORDER BY a.at_ms DESC, a.id DESC LIMIT ?";

/// A page of one room's trail: a window of idx_audit_room. Binds: room,
/// from ms, until ms, cursor at, cursor at, cursor id, window, action twice,
/// operator twice, event id twice, page + 1.
pub const AUDIT_ROOM_PAGE_SQL: &str = "SELECT a.id, a.at_ms, a.operator, a.action, a.room_id, a.event_id, \
     a.row_count, a.reason, a.detail FROM (SELECT id FROM relay_operator_audit FORCE INDEX (idx_audit_room) \
     WHERE room_id = ? AND at_ms >= ? AND at_ms < ? AND (at_ms < ? OR (at_ms = ? AND id < ?)) \
     ORDER BY at_ms DESC, id DESC LIMIT ?) AS w JOIN relay_operator_audit a ON a.id = w.id \
     WHERE (? = '' OR a.action = ?) AND (? = '' OR a.operator = ?) AND (? = '' OR a.event_id = ?) \
     ORDER BY a.at_ms DESC, a.id DESC LIMIT ?";

/// The oldest row of a whole-trail window and its size. Binds: from ms,
/// until ms, cursor at, cursor at, cursor id, window.
pub const AUDIT_WINDOW_SQL: &str = "SELECT COUNT(*) OVER () AS scanned, w.at_ms, w.id FROM (SELECT id, at_ms \
     FROM relay_operator_audit FORCE INDEX (idx_audit_at) WHERE at_ms >= ? AND at_ms < ? \
     AND (at_ms < ? OR (at_ms = ? AND id < ?)) ORDER BY at_ms DESC, id DESC LIMIT ?) AS w \
     ORDER BY w.at_ms, w.id LIMIT 1";

/// The oldest row of a room window and its size. Binds: room, from ms,
/// until ms, cursor at, cursor at, cursor id, window.
pub const AUDIT_ROOM_WINDOW_SQL: &str = "SELECT COUNT(*) OVER () AS scanned, w.at_ms, w.id FROM (SELECT id, at_ms \
     FROM relay_operator_audit FORCE INDEX (idx_audit_room) WHERE room_id = ? AND at_ms >= ? AND at_ms < ? \
     AND (at_ms < ? OR (at_ms = ? AND id < ?)) ORDER BY at_ms DESC, id DESC LIMIT ?) AS w \
     ORDER BY w.at_ms, w.id LIMIT 1";

/// The audit statements, named, for the EXPLAIN test.
pub const AUDIT_QUERIES: &[(&str, &str)] = &[
    ("audit_page", AUDIT_PAGE_SQL),
    ("audit_room_page", AUDIT_ROOM_PAGE_SQL),
    ("audit_window", AUDIT_WINDOW_SQL),
    ("audit_room_window", AUDIT_ROOM_WINDOW_SQL),
];

/// The audit search as its form carries it (empty = any).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct AuditForm {
    /// One of `ops::audit::ACTIONS`.
    pub action: String,
    /// Room acted on.
    pub room_id: String,
    /// Who acted.
    pub operator: String,
    /// Event acted on.
    pub event_id: String,
    /// At or after: a UTC time or a duration ago (`since` is its old name).
    pub from: String,
    /// The old form of `from` (`2h`), kept for links that use it.
    pub since: String,
    /// Before.
    pub to: String,
    /// The cursor: `at_ms.id` of the last row shown.
    pub before: String,
}

/// A checked audit search.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AuditSearch {
    action: String,
    room_id: String,
    operator: String,
    event_id: String,
    from_ms: i64,
    until_ms: i64,
    before: (i64, u64),
}

impl AuditForm {
    fn checked(&self) -> Result<AuditSearch, Error> {
        let action = self.action.trim();
        if !action.is_empty() && !ops::audit::ACTIONS.contains(&action) {
            return Err(Error::InvalidInput(format!(
                "action `{}` is not one of {}",
                action.escape_debug(),
                ops::audit::ACTIONS.join(", ")
            )));
        }
        let id = |text: &str, check: fn(&str) -> Result<&str, Error>| {
            optional(text)
                .map(|value| check(&value).map(str::to_owned))
                .transpose()
                .map(Option::unwrap_or_default)
        };
        let operator = optional(&self.operator)
            .map(|name| {
                ops::audit::operator_name(&name, "operator").map(|name| name.as_str().to_owned())
            })
            .transpose()?
            .unwrap_or_default();
        let from = optional(&self.from).or_else(|| optional(&self.since));
        let from_ms = from
            .map(|text| super::when::parse_time("from", &text))
            .transpose()?
            .unwrap_or(0);
        let until_ms = optional(&self.to)
            .map(|text| super::when::parse_time("to", &text))
            .transpose()?
            .unwrap_or(i64::MAX);
        let before = match optional(&self.before) {
            None => (i64::MAX, u64::MAX),
            Some(text) => cursor(&text).ok_or_else(|| {
                Error::InvalidInput(format!(
                    "before `{}` is not an audit cursor (at_ms.id)",
                    text.escape_debug()
                ))
            })?,
        };
        Ok(AuditSearch {
            action: action.to_owned(),
            room_id: id(&self.room_id, ops::checked_room_id)?,
            operator,
            event_id: id(&self.event_id, ops::checked_event_id)?,
            from_ms,
            until_ms,
            before,
        })
    }
}

fn cursor(text: &str) -> Option<(i64, u64)> {
    let (at, id) = text.split_once('.')?;
    Some((at.parse().ok()?, id.parse().ok()?))
}

/// One page of the audit trail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPage {
    /// The rows, newest first.
    pub records: Vec<AuditRecord>,
    /// The cursor of the next page, if any may follow.
    pub next_before: Option<String>,
    /// The window ended before a page of matches.
    pub window_ended: bool,
}

/// One page of the trail matching `form`, at most `page` rows.
pub async fn page(pool: &MySqlPool, form: &AuditForm, page: usize) -> Result<AuditPage, Error> {
    let search = form.checked()?;
    let room = !search.room_id.is_empty();
    // One-shot statements: MariaDB re-executes a cached prepared statement
    // over a derived table with a bound LIMIT up to ~100× slower (`counts`).
    let (page_query, window_query) = if room {
        (
            sqlx::query(AUDIT_ROOM_PAGE_SQL).persistent(false),
            sqlx::query(AUDIT_ROOM_WINDOW_SQL).persistent(false),
        )
    } else {
        (
            sqlx::query(AUDIT_PAGE_SQL).persistent(false),
            sqlx::query(AUDIT_WINDOW_SQL).persistent(false),
        )
    };
    let range = |query: sqlx::query::Query<'static, sqlx::MySql, sqlx::mysql::MySqlArguments>| {
        let query = if room {
            query.bind(search.room_id.clone())
        } else {
            query
        };
        query
            .bind(search.from_ms)
            .bind(search.until_ms)
            .bind(search.before.0)
            .bind(search.before.0)
            .bind(search.before.1)
            .bind(WINDOW)
    };
    let rows = range(page_query)
        .bind(search.action.clone())
        .bind(search.action.clone())
        .bind(search.operator.clone())
        .bind(search.operator.clone())
        .bind(search.event_id.clone())
        .bind(search.event_id.clone())
        .bind(page as u64 + 1)
        .fetch_all(pool)
        .await?;
    let mut records = rows.iter().map(record).collect::<Result<Vec<_>, _>>()?;
    if records.len() > page {
        records.truncate(page);
        let next_before = records
            .last()
            .map(|last| format!("{}.{}", last.at_ms, last.id));
        return Ok(AuditPage {
            records,
            next_before,
            window_ended: false,
        });
    }
    let oldest = range(window_query).fetch_optional(pool).await?;
    let next_before = match oldest {
        Some(row) if u64::try_from(row.try_get::<i64, _>("scanned")?).unwrap_or(0) >= WINDOW => {
            let at: i64 = row.try_get("at_ms")?;
            let id: u64 = row.try_get("id")?;
            Some(format!("{at}.{id}"))
        }
        _ => None,
    };
    Ok(AuditPage {
        records,
        window_ended: next_before.is_some(),
        next_before,
    })
}

fn record(row: &MySqlRow) -> Result<AuditRecord, sqlx::Error> {
    Ok(AuditRecord {
        id: row.try_get("id")?,
        at_ms: row.try_get("at_ms")?,
        operator: row.try_get::<IdText, _>("operator")?.into(),
        action: row.try_get("action")?,
        room_id: row.try_get::<IdText, _>("room_id")?.into(),
        event_id: row.try_get::<IdText, _>("event_id")?.into(),
        row_count: row.try_get("row_count")?,
        reason: row.try_get("reason")?,
        detail: row.try_get("detail")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_audit_search_names_its_bad_field() {
        let bad = |form: AuditForm| form.checked().unwrap_err().to_string();
        let action = bad(AuditForm {
            action: "delete".into(),
            ..AuditForm::default()
        });
        assert!(
            action.contains("action `delete` is not one of replay"),
            "{action}"
        );
        let before = bad(AuditForm {
            before: "12".into(),
            ..AuditForm::default()
        });
        assert!(
            before.contains("before `12` is not an audit cursor"),
            "{before}"
        );
        let since = AuditForm {
            since: "2h".into(),
            ..AuditForm::default()
        };
        assert!(
            since.checked().unwrap().from_ms > 0,
            "since is from's old name"
        );
        assert_eq!(cursor("1700000000000.42"), Some((1_700_000_000_000, 42)));
    }
}
