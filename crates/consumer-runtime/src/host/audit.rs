//! The audit trail of operator mutations (`consumer_operator_audit`): who
//! (`--operator`), when, what, on which selection and why (`--reason`), and
//! what came of it. Every mutation writes its row before or with its effect,
//! so none goes unrecorded; the checks of the operator's words live here too.

use super::Error;
use sqlx::MySqlConnection;

/// Longest `--operator` (the column's width).
const MAX_OPERATOR_CHARS: usize = 64;
/// Longest `--reason` (the column's width).
const MAX_REASON_CHARS: usize = 512;
/// Longest target and outcome texts kept (the columns' widths).
const MAX_TARGET_CHARS: usize = 255;
const MAX_OUTCOME_CHARS: usize = 1024;

const INSERT_SQL: &str = "INSERT INTO consumer_operator_audit \
     (at_ms, operator, service, consumer_group, action, target, reason, outcome) \
     VALUES (?, ?, ?, ?, ?, ?, ?, ?)";
const OUTCOME_SQL: &str = "UPDATE consumer_operator_audit SET outcome = ? WHERE id = ?";

/// Who asks for a mutation and why, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accountable {
    operator: String,
    reason: String,
}

impl Accountable {
    /// Checks `--operator` and `--reason`: present, not blank, no control
    /// characters (they would forge lines in a terminal or a log), and
    /// within their columns.
    pub fn new(operator: Option<&str>, reason: Option<&str>) -> Result<Self, Error> {
        Ok(Self {
            operator: checked("--operator", operator, MAX_OPERATOR_CHARS)?,
            reason: checked("--reason", reason, MAX_REASON_CHARS)?,
        })
    }

    /// The operator.
    pub fn operator(&self) -> &str {
        &self.operator
    }
}

fn checked(flag: &str, value: Option<&str>, max_chars: usize) -> Result<String, Error> {
    let value = value.map(str::trim).unwrap_or_default();
    if value.is_empty() {
        return Err(Error::Operator(format!(
            "{flag} is required for a change: every replay and retry is audited with who and why"
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::Operator(format!(
            "{flag} must not contain control characters"
        )));
    }
    let chars = value.chars().count();
    if chars > max_chars {
        return Err(Error::Operator(format!(
            "{flag} is {chars} characters; at most {max_chars}"
        )));
    }
    Ok(value.to_string())
}

/// One audited action: where it ran and what it touched.
#[derive(Debug, Clone, Copy)]
pub struct Action<'a> {
    /// The service binary.
    pub service: &'a str,
    /// The consumer group acted for.
    pub consumer_group: &'a str,
    /// `dead-letters replay` or `deliveries retry`.
    pub action: &'a str,
    /// The selection, as given.
    pub target: &'a str,
}

/// Writes the audit row of `action` by `who` with `outcome`; returns its id.
pub async fn record(
    connection: &mut MySqlConnection,
    who: &Accountable,
    action: Action<'_>,
    outcome: &str,
) -> Result<u64, Error> {
    let inserted = sqlx::query(INSERT_SQL)
        .bind(service_kit::time::now_ms())
        .bind(&who.operator)
        .bind(action.service)
        .bind(action.consumer_group)
        .bind(action.action)
        .bind(cut(action.target, MAX_TARGET_CHARS))
        .bind(&who.reason)
        .bind(cut(outcome, MAX_OUTCOME_CHARS))
        .execute(&mut *connection)
        .await
        .map_err(audit_failed)?;
    Ok(inserted.last_insert_id())
}

/// Sets the outcome of audit row `id` (a replay's, once it ended).
pub async fn finish(connection: &mut MySqlConnection, id: u64, outcome: &str) -> Result<(), Error> {
    sqlx::query(OUTCOME_SQL)
        .bind(cut(outcome, MAX_OUTCOME_CHARS))
        .bind(id)
        .execute(&mut *connection)
        .await
        .map_err(audit_failed)?;
    Ok(())
}

fn audit_failed(error: sqlx::Error) -> Error {
    Error::Operator(format!(
        "audit row not written, so nothing was changed: {error}"
    ))
}

/// `text` cut to `max_chars` characters.
fn cut(text: &str, max_chars: usize) -> String {
    text.chars().take(max_chars).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_and_reason_are_required_clean_and_bounded() {
        let ok = Accountable::new(Some(" alice "), Some("IM outage INC-42")).unwrap();
        assert_eq!(ok.operator(), "alice");
        for (operator, reason, expected) in [
            (None, Some("r"), "--operator is required"),
            (Some("a"), None, "--reason is required"),
            (Some("   "), Some("r"), "--operator is required"),
            (
                Some("a\nFAKE LOG LINE"),
                Some("r"),
                "--operator must not contain control",
            ),
            (
                Some("a"),
                Some("r\u{1b}[2J"),
                "--reason must not contain control",
            ),
        ] {
            let error = Accountable::new(operator, reason).unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
        }
        let long = "x".repeat(65);
        let error = Accountable::new(Some(&long), Some("r")).unwrap_err();
        assert!(error.to_string().contains("at most 64"), "{error}");
    }
}
