//! The operator audit trail, `relay_operator_audit`: who changed what in
//! `room_outbox`, when and why. Every mutation writes its row through
//! [`record`] inside the mutation's own transaction, so a change and its
//! record commit or roll back together. [`list`] reads it back by time
//! window, action or room, each through its own index. The operator name
//! and reason obey the rule every audited service shares,
//! `service_kit::operator`; this module only names the relay's sources.

use super::queries::{AUDIT_BY_ACTION_SQL, AUDIT_BY_ROOM_SQL, AUDIT_INSERT_SQL, AUDIT_RECENT_SQL};
use crate::Error;
use serde::{Deserialize, Serialize};
use service_kit::db::IdText;
use service_kit::operator::{self, OperatorName, ReasonRule, Refusal};
use sqlx::{MySql, MySqlPool, Row, Transaction};

/// Longest detail, in characters (the column's width); longer text is cut.
const MAX_DETAIL_CHARS: usize = 4096;

/// The kinds of mutation the trail records.
pub const ACTIONS: [&str; 4] = ["replay", "retry_now", "skip", "purge"];

/// The operator name arrives as the CLI's `--operator` or the admin HTTP
/// `x-operator` header; `source` says which, for the refusal.
pub fn operator_name(name: &str, source: &str) -> Result<OperatorName, Error> {
    OperatorName::new(name).map_err(|refusal| Error::InvalidInput(refusal.naming(source)))
}

/// The refusal of a mutation without an operator, wherever it came from.
pub fn missing_operator() -> Error {
    Error::InvalidInput(format!(
        "{} (CLI --operator, HTTP x-operator)",
        Refusal::Missing.naming("operator")
    ))
}

/// Checks a reason by the shared rule (service_kit::operator); the ops
/// functions serve the CLI and HTTP alike, so the refusal names both.
pub fn checked_reason(reason: Option<&str>, rule: ReasonRule) -> Result<String, Error> {
    operator::checked_reason(reason, rule).map_err(|refusal| {
        Error::InvalidInput(format!(
            "{} (CLI --reason, HTTP reason=)",
            refusal.naming("reason")
        ))
    })
}

/// One mutation to record.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// Who.
    pub operator: &'a OperatorName,
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
    let detail = operator::fit_to_column(&entry.detail, MAX_DETAIL_CHARS);
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
    fn refusals_name_where_the_value_came_from() {
        let cli = operator_name("da ve", "--operator")
            .unwrap_err()
            .to_string();
        assert!(cli.contains("--operator has ' ' at position 2"), "{cli}");
        let http = operator_name("", "x-operator").unwrap_err().to_string();
        assert!(http.contains("x-operator is required"), "{http}");
        let missing = missing_operator().to_string();
        assert!(missing.contains("operator is required"), "{missing}");
        assert!(
            missing.contains("CLI --operator, HTTP x-operator"),
            "{missing}"
        );
        let reason = checked_reason(Some("   "), ReasonRule::Required)
            .unwrap_err()
            .to_string();
        assert!(reason.contains("reason is required"), "{reason}");
        assert!(reason.contains("CLI --reason, HTTP reason="), "{reason}");
        assert_eq!(
            checked_reason(Some(" ok "), ReasonRule::Optional).unwrap(),
            "ok"
        );
    }
}
