//! Both operator audit tables (`relay_operator_audit` of the relay,
//! `consumer_operator_audit` of the consumer services) store names and
//! reasons checked by one rule, `service_kit::operator`
//! (docs/design.md#operator-identity-and-reason); their columns must be
//! exactly as wide as its limits, so a value the rule accepts always fits
//! and neither table can quietly drift from the other.

use service_kit::db::IdText;
use service_kit::operator::{MAX_OPERATOR_CHARS, MAX_REASON_CHARS};
use sqlx::Row;

/// The width in characters of `table.column` in the test database.
async fn width(pool: &sqlx::MySqlPool, table: &str, column: &str) -> u64 {
    let row = sqlx::query(
        "SELECT column_name AS c, character_maximum_length AS w FROM information_schema.columns \
         WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?",
    )
    .bind(table)
    .bind(column)
    .fetch_one(pool)
    .await
    .unwrap_or_else(|error| panic!("{table}.{column} not found: {error}"));
    let name: String = row.try_get::<IdText, _>("c").unwrap().into();
    assert_eq!(name, column);
    row.try_get("w").unwrap()
}

#[tokio::test]
async fn both_audit_tables_are_as_wide_as_the_shared_operator_limits() {
    let db = testkit::TestDb::new().await;
    for table in ["relay_operator_audit", "consumer_operator_audit"] {
        assert_eq!(
            width(&db.pool, table, "operator").await,
            MAX_OPERATOR_CHARS as u64,
            "{table}.operator"
        );
        assert_eq!(
            width(&db.pool, table, "reason").await,
            MAX_REASON_CHARS as u64,
            "{table}.reason"
        );
    }
}
