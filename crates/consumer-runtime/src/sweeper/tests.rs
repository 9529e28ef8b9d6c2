//! The sweeper's unit tests: a scripted delivery table against a real database
//! shows backoff, giving up and the inline attempt's lease.

use super::*;
use sqlx::MySqlPool;
use std::{collections::VecDeque, sync::Mutex};

/// A send failure the script decides the class of.
#[derive(Debug)]
struct Failure {
    retryable: bool,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "scripted failure (retryable: {})", self.retryable)
    }
}

#[derive(Debug, sqlx::FromRow)]
struct Row {
    #[sqlx(try_from = "service_kit::db::IdText")]
    event_id: String,
    #[sqlx(try_from = "service_kit::db::IdText")]
    recipient_id: String,
    attempts: u32,
}

/// `notice_delivery_events` with sends answered from a script.
#[derive(Debug, Default)]
struct Scripted {
    script: Mutex<VecDeque<Result<(), Failure>>>,
}

impl Scripted {
    fn answering(results: impl IntoIterator<Item = Result<(), Failure>>) -> Self {
        Self {
            script: Mutex::new(results.into_iter().collect()),
        }
    }
}

impl DeliveryTable for Scripted {
    const KIND: &str = "test";
    const TABLE: &str = "notice_delivery_events";
    const DUE_SQL: &str = "SELECT id, next_attempt_at_ms FROM notice_delivery_events \
         WHERE status = 'pending' AND next_attempt_at_ms <= ? \
         ORDER BY next_attempt_at_ms LIMIT ?";
    const CLAIM_SQL: &str = "UPDATE notice_delivery_events SET next_attempt_at_ms = ? \
         WHERE id = ? AND status = 'pending' AND next_attempt_at_ms = ?";
    const ROW_SQL: &str =
        "SELECT event_id, recipient_id, attempts FROM notice_delivery_events WHERE id = ?";
    const DELIVERED_SQL: &str = "UPDATE notice_delivery_events SET status = 'delivered', \
         delivered_at_ms = ?, attempts = ?, last_error = '' \
         WHERE event_id = ? AND recipient_id = ? AND status = 'pending'";
    const FAILED_SQL: &str = "UPDATE notice_delivery_events SET status = ?, attempts = ?, \
         next_attempt_at_ms = ?, last_error = ? \
         WHERE event_id = ? AND recipient_id = ? AND status = 'pending'";
    const FAILED_LIST_SQL: &str = "SELECT event_id, room_id, recipient_id AS target, \
         attempts, last_error, created_at_ms FROM notice_delivery_events \
         WHERE status = 'failed' AND created_at_ms >= ? ORDER BY created_at_ms, id LIMIT ?";
    const RETRY_EVENT_SQL: &str = "UPDATE notice_delivery_events SET status = 'pending', \
         attempts = 0, next_attempt_at_ms = ? WHERE event_id = ? AND status = 'failed'";
    const RETRY_SINCE_SQL: &str = "UPDATE notice_delivery_events SET status = 'pending', \
         attempts = 0, next_attempt_at_ms = ? \
         WHERE status = 'failed' AND created_at_ms >= ? ORDER BY created_at_ms, id LIMIT ?";
    const FAILED_COUNT_SQL: &str =
        "SELECT COUNT(*) FROM notice_delivery_events WHERE status = 'failed'";

    type Key = u64;
    type Row = Row;
    type Error = Failure;

    fn attempts(row: &Row) -> u32 {
        row.attempts
    }

    fn event_id(row: &Row) -> &str {
        &row.event_id
    }

    fn bind_row_key<'q>(row: &'q Row, statement: Statement<'q>) -> Statement<'q> {
        statement.bind(&row.event_id).bind(&row.recipient_id)
    }

    async fn send(&self, _row: &Row) -> Result<(), Failure> {
        let next = self.script.lock().expect("script lock").pop_front();
        next.expect("a send the script did not expect")
    }

    fn is_retryable(error: &Failure) -> bool {
        error.retryable
    }

    fn error_text(error: &Failure) -> String {
        error.to_string()
    }

    fn log_delivered(_row: &Row) {}

    fn log_failed(_row: &Row, _attempts: u32, _give_up: bool, _error: &Failure) {}
}

/// A pending row for `event_id`, due at `due_at_ms`.
async fn insert(pool: &MySqlPool, event_id: &str, due_at_ms: i64) {
    sqlx::query(
        "INSERT INTO notice_delivery_events (event_id, recipient_id, notice_type, room_id, \
         content, status, next_attempt_at_ms, created_at_ms) \
         VALUES (?, 'user', 'test', 'room', '{}', 'pending', ?, 0)",
    )
    .bind(event_id)
    .bind(due_at_ms)
    .execute(pool)
    .await
    .unwrap();
}

/// `(status, attempts, next_attempt_at_ms, last_error)` of `event_id`'s row.
async fn state(pool: &MySqlPool, event_id: &str) -> (String, u32, i64, String) {
    sqlx::query_as(
        "SELECT status, attempts, next_attempt_at_ms, last_error \
         FROM notice_delivery_events WHERE event_id = ?",
    )
    .bind(event_id)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Makes `event_id`'s row due now, as if its backoff had passed.
async fn make_due(pool: &MySqlPool, event_id: &str) {
    sqlx::query("UPDATE notice_delivery_events SET next_attempt_at_ms = 0 WHERE event_id = ?")
        .bind(event_id)
        .execute(pool)
        .await
        .unwrap();
}

fn retry(max_attempts: u32) -> DeliveryRetryConfig {
    DeliveryRetryConfig {
        max_attempts,
        ..DeliveryRetryConfig::default()
    }
}

#[tokio::test]
async fn a_failed_attempt_waits_its_backoff_then_is_delivered_by_a_sweep() {
    let db = testkit::TestDb::new().await;
    let sweeper = Sweeper::new(
        Scripted::answering([Err(Failure { retryable: true }), Ok(())]),
        db.pool.clone(),
        retry(16),
        &ConsumerMetrics::unregistered(),
    );
    insert(&db.pool, "e1", 0).await;
    let before_ms = service_kit::time::now_ms();
    assert_eq!(sweeper.sweep_once().await.unwrap(), 1);
    let (status, attempts, next_ms, last_error) = state(&db.pool, "e1").await;
    assert_eq!((status.as_str(), attempts), ("pending", 1));
    assert!(next_ms > before_ms, "backed off: {next_ms} vs {before_ms}");
    assert!(last_error.contains("scripted failure"), "{last_error}");
    // Not due yet: the next sweep leaves it alone.
    assert_eq!(sweeper.sweep_once().await.unwrap(), 0);
    make_due(&db.pool, "e1").await;
    assert_eq!(sweeper.sweep_once().await.unwrap(), 1);
    let (status, attempts, _, last_error) = state(&db.pool, "e1").await;
    assert_eq!(
        (status.as_str(), attempts, last_error.as_str()),
        ("delivered", 2, "")
    );
    // Delivered rows are never taken again (the script has no answer left).
    make_due(&db.pool, "e1").await;
    assert_eq!(sweeper.sweep_once().await.unwrap(), 0);
}

#[tokio::test]
async fn a_permanent_error_or_the_spent_budget_fails_the_row() {
    let db = testkit::TestDb::new().await;
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = ConsumerMetrics::register(&mut registry);
    let sweeper = Sweeper::new(
        Scripted::answering([
            Err(Failure { retryable: false }),
            Err(Failure { retryable: true }),
            Err(Failure { retryable: true }),
        ]),
        db.pool.clone(),
        retry(2),
        &metrics,
    );
    insert(&db.pool, "permanent", 0).await;
    assert_eq!(sweeper.sweep_once().await.unwrap(), 1);
    let (status, attempts, _, _) = state(&db.pool, "permanent").await;
    assert_eq!((status.as_str(), attempts), ("failed", 1));
    insert(&db.pool, "budget", 0).await;
    assert_eq!(sweeper.sweep_once().await.unwrap(), 1);
    assert_eq!(state(&db.pool, "budget").await.0, "pending");
    make_due(&db.pool, "budget").await;
    assert_eq!(sweeper.sweep_once().await.unwrap(), 1);
    let (status, attempts, _, _) = state(&db.pool, "budget").await;
    assert_eq!((status.as_str(), attempts), ("failed", 2));
    // Both failed rows are counted and exported until someone deals with them.
    assert_eq!(sweeper.count_failed().await.unwrap(), 2);
    let mut exposition = String::new();
    prometheus_client::encoding::text::encode(&mut exposition, &registry).unwrap();
    assert!(
        exposition.contains("consumer_delivery_failed_rows{table=\"notice_delivery_events\"} 2"),
        "{exposition}"
    );
}

#[tokio::test]
async fn a_fresh_row_belongs_to_the_inline_attempt_until_its_lease_ends() {
    let db = testkit::TestDb::new().await;
    let sweeper = Sweeper::new(
        Scripted::answering([Ok(())]),
        db.pool.clone(),
        retry(16),
        &ConsumerMetrics::unregistered(),
    );
    // As a consumer commits it: due only when the in-line attempt's lease ends.
    insert(
        &db.pool,
        "fresh",
        service_kit::time::now_ms() + sweeper.lease_ms(),
    )
    .await;
    assert_eq!(sweeper.sweep_once().await.unwrap(), 0);
    let row: Row = sqlx::query_as(
        "SELECT event_id, recipient_id, attempts FROM notice_delivery_events \
         WHERE event_id = 'fresh'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    sweeper.deliver_all(&[row]).await;
    assert_eq!(state(&db.pool, "fresh").await.0, "delivered");
}
