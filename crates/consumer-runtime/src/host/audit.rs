//! The audit trail of operator mutations (`consumer_operator_audit`): who
//! (`--operator`), when, what, on which selection and why (`--reason`), and
//! what came of it. Every mutation writes its row before or with its effect,
//! so none goes unrecorded. The operator's name and reason are checked by
//! the rule every audited service shares (`service_kit::operator`).

use super::Error;
use service_kit::operator::{OperatorName, ReasonRule, Refusal, checked_reason, fit_to_column};
use sqlx::MySqlConnection;

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
    operator: OperatorName,
    reason: String,
}

impl Accountable {
    /// Checks `--operator` and `--reason` by the rule every audited service
    /// shares (`service_kit::operator`); both are required here, as every
    /// consumer mutation is a replay or a retry someone must answer for.
    pub fn new(operator: Option<&str>, reason: Option<&str>) -> Result<Self, Error> {
        let refused =
            |flag: &'static str| move |refusal: Refusal| Error::Operator(refusal.naming(flag));
        Ok(Self {
            operator: OperatorName::new(operator.unwrap_or_default())
                .map_err(refused("--operator"))?,
            reason: checked_reason(reason, ReasonRule::Required).map_err(refused("--reason"))?,
        })
    }

    /// The operator.
    pub fn operator(&self) -> &str {
        self.operator.as_str()
    }
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
        .bind(who.operator.as_str())
        .bind(action.service)
        .bind(action.consumer_group)
        .bind(action.action)
        .bind(fit_to_column(action.target, MAX_TARGET_CHARS))
        .bind(&who.reason)
        .bind(fit_to_column(outcome, MAX_OUTCOME_CHARS))
        .execute(&mut *connection)
        .await
        .map_err(audit_failed)?;
    Ok(inserted.last_insert_id())
}

/// Sets the outcome of audit row `id` (a replay's, once it ended).
pub async fn finish(connection: &mut MySqlConnection, id: u64, outcome: &str) -> Result<(), Error> {
    sqlx::query(OUTCOME_SQL)
        .bind(fit_to_column(outcome, MAX_OUTCOME_CHARS))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_and_reason_are_required_and_refusals_name_the_flag() {
        let ok = Accountable::new(Some(" alice "), Some("IM outage INC-42")).unwrap();
        assert_eq!(ok.operator(), "alice");
        for (operator, reason, expected) in [
            (None, Some("r"), "--operator is required"),
            (Some("a"), None, "--reason is required"),
            (Some("   "), Some("r"), "--operator is required"),
            (
                Some("a\nFAKE LOG LINE"),
                Some("r"),
                "--operator has '\\n' at position 1",
            ),
            (
                Some("a"),
                Some("r\u{1b}[2J"),
                "--reason has the unprintable character",
            ),
            (
                Some(&"x".repeat(65)),
                Some("r"),
                "--operator has 65 characters, more than 64",
            ),
        ] {
            let error = Accountable::new(operator, reason).unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
        }
    }
}
