//! The operator audit trail, `relay_operator_audit`: who changed what in
//! `room_outbox`, when and why. Every mutation writes its row through
//! [`record`] inside the mutation's own transaction, so a change and its
//! record commit or roll back together. [`list`] reads it back by time
//! window, action or room, each through its own index.

use super::queries::{AUDIT_BY_ACTION_SQL, AUDIT_BY_ROOM_SQL, AUDIT_INSERT_SQL, AUDIT_RECENT_SQL};
use crate::Error;
use serde::{Deserialize, Serialize};
use service_kit::db::IdText;
use sqlx::{MySql, MySqlPool, Row, Transaction};

/// Longest operator name (the column's length).
pub const MAX_OPERATOR_LEN: usize = 64;
/// Longest reason (the column's length).
pub const MAX_REASON_LEN: usize = 512;
/// Longest detail; longer text is cut on a character boundary.
const MAX_DETAIL_LEN: usize = 4096;

/// The kinds of mutation the trail records.
pub const ACTIONS: [&str; 4] = ["replay", "retry_now", "skip", "purge"];

/// Who performs a mutation: a name without spaces or control characters
/// (`alice`, `alice@example.com`, `oncall:bob`), at most 64 characters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Operator(String);

impl Operator {
    /// Checks `name`; the error names the rule it breaks.
    pub fn new(name: &str) -> Result<Self, Error> {
        let refuse = |why: String| Err(Error::InvalidInput(format!("operator {why}")));
        if name.is_empty() {
            return refuse("is required for a mutation (CLI --operator, HTTP x-operator)".into());
        }
        let length = name.chars().count();
        if length > MAX_OPERATOR_LEN {
            return refuse(format!(
                "has {length} characters, more than {MAX_OPERATOR_LEN}"
            ));
        }
        if let Some((position, character)) = name
            .chars()
            .enumerate()
            .find(|(_, c)| !(c.is_ascii_alphanumeric() || "_.:@-".contains(*c)))
        {
            return refuse(format!(
                "has {character:?} at position {position}; names are [A-Za-z0-9_.:@-]"
            ));
        }
        Ok(Self(name.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Checks an operator's reason: trimmed, at most 512 characters, no control
/// characters (it is printed in tables and logs); `required` refuses an
/// empty one.
pub fn checked_reason(reason: Option<&str>, required: bool) -> Result<String, Error> {
    let reason = reason.unwrap_or_default().trim();
    if reason.is_empty() && required {
        return Err(Error::InvalidInput(
            "reason is required (CLI --reason, HTTP reason=)".into(),
        ));
    }
    let length = reason.chars().count();
    if length > MAX_REASON_LEN {
        return Err(Error::InvalidInput(format!(
            "reason has {length} characters, more than {MAX_REASON_LEN}"
        )));
    }
    if let Some(position) = reason.chars().position(char::is_control) {
        return Err(Error::InvalidInput(format!(
            "reason has a control character at position {position}"
        )));
    }
    Ok(reason.to_owned())
}

/// One mutation to record.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// Who.
    pub operator: &'a Operator,
    /// One of [`ACTIONS`].
    pub action: &'static str,
    /// The room acted on, or "".
    pub room_id: &'a str,
    /// The event acted on, or "".
    pub event_id: &'a str,
    /// Rows changed.
    pub row_count: u64,
    /// Why (checked by [`checked_reason`]).
    pub reason: &'a str,
    /// What else identifies the change.
    pub detail: String,
}

/// Writes `entry` in `tx`, the mutation's own transaction; returns its id.
pub async fn record(
    tx: &mut Transaction<'_, MySql>,
    entry: &Entry<'_>,
    at_ms: i64,
) -> Result<u64, Error> {
    let mut end = entry.detail.len().min(MAX_DETAIL_LEN);
    while !entry.detail.is_char_boundary(end) {
        end -= 1;
    }
    let detail = &entry.detail[..end];
    let result = sqlx::query(AUDIT_INSERT_SQL)
        .bind(at_ms)
        .bind(entry.operator.as_str())
        .bind(entry.action)
        .bind(entry.room_id)
        .bind(entry.event_id)
        .bind(entry.row_count)
        .bind(entry.reason)
        .bind(detail)
        .execute(&mut **tx)
        .await?;
    Ok(result.last_insert_id())
}

/// Which audit rows to list; every field optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditFilter {
    /// Only the last window, e.g. `"2h"` (default: all time).
    pub since: Option<String>,
    /// Only this action.
    pub action: Option<String>,
    /// Only this room.
    pub room_id: Option<String>,
    /// At most this many (default 100, max 10,000).
    pub limit: Option<u64>,
}

/// One audit row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditRecord {
    /// Row id.
    pub id: u64,
    /// When.
    pub at_ms: i64,
    /// Who.
    pub operator: String,
    /// What.
    pub action: String,
    /// Room acted on, or "".
    pub room_id: String,
    /// Event acted on, or "".
    pub event_id: String,
    /// Rows changed.
    pub row_count: u64,
    /// Why.
    pub reason: String,
    /// What else identifies the change.
    pub detail: String,
}

/// Audit rows matching `filter`, newest first.
pub async fn list(pool: &MySqlPool, filter: &AuditFilter) -> Result<Vec<AuditRecord>, Error> {
    let since = match &filter.since {
        Some(text) => super::since_ms("since", text)?,
        None => 0,
    };
    let limit = super::limit(filter.limit);
    let action = match filter.action.as_deref() {
        Some(action) if ACTIONS.contains(&action) => action,
        Some(other) => {
            return Err(Error::InvalidInput(format!(
                "action `{}` is not one of {}",
                other.escape_debug(),
                ACTIONS.join(", ")
            )));
        }
        None => "",
    };
    let rows = match filter.room_id.as_deref() {
        Some(room) => {
            sqlx::query(AUDIT_BY_ROOM_SQL)
                .bind(super::checked_room_id(room)?)
                .bind(since)
                .bind(action)
                .bind(action)
                .bind(limit)
                .fetch_all(pool)
                .await?
        }
        None if !action.is_empty() => {
            sqlx::query(AUDIT_BY_ACTION_SQL)
                .bind(action)
                .bind(since)
                .bind(limit)
                .fetch_all(pool)
                .await?
        }
        None => {
            sqlx::query(AUDIT_RECENT_SQL)
                .bind(since)
                .bind(limit)
                .fetch_all(pool)
                .await?
        }
    };
    rows.iter()
        .map(|row| {
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
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_names_are_checked() {
        for good in ["alice", "alice@example.com", "oncall:bob-2", "a.b_c"] {
            assert_eq!(Operator::new(good).unwrap().as_str(), good);
        }
        for (bad, names) in [
            ("", "required"),
            ("al ice", "position 2"),
            ("bob\n", "position 3"),
            ("ünïcode", "position 0"),
            (&"x".repeat(65), "65 characters"),
        ] {
            let error = Operator::new(bad).unwrap_err().to_string();
            assert!(error.contains(names), "{bad:?}: {error}");
        }
    }

    #[test]
    fn reasons_are_trimmed_bounded_and_printable() {
        assert_eq!(
            checked_reason(Some("  im down  "), true).unwrap(),
            "im down"
        );
        assert_eq!(checked_reason(None, false).unwrap(), "");
        assert!(
            checked_reason(Some("   "), true)
                .unwrap_err()
                .to_string()
                .contains("required")
        );
        assert!(
            checked_reason(Some(&"r".repeat(513)), false)
                .unwrap_err()
                .to_string()
                .contains("513")
        );
        assert!(
            checked_reason(Some("a\u{1b}[31m"), false)
                .unwrap_err()
                .to_string()
                .contains("control")
        );
    }
}
