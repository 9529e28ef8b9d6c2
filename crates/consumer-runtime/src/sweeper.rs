//! The delivery-table sweeper, written once for every table of pending
//! deliveries (activity's big-gift broadcasts, notice's C2C notices).
//!
//! The pattern it owns: a row commits with the consumed event's effect
//! (`pending`, its `next_attempt_at_ms` a lease into the future so the in-line
//! attempt owns it); [`Sweeper::deliver`] sends it right after the commit and
//! records the result on the row — `delivered`, `pending` again with a backoff
//! ([`DeliveryRetryConfig::backoff_ms`]), or `failed` once the error is
//! permanent or `max_attempts` are spent. [`Sweeper::run`] takes up rows whose
//! time has come: each is claimed by compare-and-set on its due time, pushed a
//! lease ahead, so several instances never send the same row at once.
//!
//! [`Sweeper::run`] also counts the table's `failed` rows (given up, waiting
//! for an operator) into `consumer_delivery_failed_rows{table}` every
//! [`FAILED_COUNT_INTERVAL`]: a state, so its alert holds while such rows
//! exist and resolves once they are dealt with (docs/runbooks.md).
//!
//! What differs per table comes from the consumer as a [`DeliveryTable`]: the
//! statements (associated `const`s, each a string literal in the impl, so the
//! SQL stays greppable and `crates/testkit/tests/sql_policy.rs` can see that
//! no value is spliced in), the row type, how one row is sent, and its log
//! lines. The send error is the table's own type, classified through the
//! trait, because this crate knows no IM vendor (ARCHITECTURE.md: the
//! runtime is vendor-free).

use crate::{ConsumerMetrics, delivery::DeliveryRetryConfig};
use prometheus_client::metrics::gauge::Gauge;
use sqlx::{
    MySql, MySqlPool,
    mysql::{MySqlArguments, MySqlRow},
    query::Query,
};
use std::{future::Future, time::Duration};
use tokio_util::sync::CancellationToken;

/// A statement with its bound values so far.
pub type Statement<'q> = Query<'q, MySql, MySqlArguments>;

/// One table of pending deliveries: its statements, its rows and how a row is
/// sent. Every statement filters on `status = 'pending'`, so a row already
/// delivered or failed is never touched again.
pub trait DeliveryTable: Send + Sync + 'static {
    /// What the log lines call one delivery (`broadcast`, `notice`): the
    /// sweeper logs `"{KIND} sweep failed"` and `"{KIND} status update failed"`.
    const KIND: &'static str;
    /// The table's name: the `table` label of `consumer_delivery_failed_rows`,
    /// and what the operator commands' output and audit rows call it.
    const TABLE: &'static str;

    /// Due rows: binds `now_ms` and the sweep batch size; selects
    /// `(key, next_attempt_at_ms)` of `pending` rows due by then, oldest due first.
    const DUE_SQL: &'static str;
    /// The claim: binds the new due time (now + lease), the key and the due
    /// time read by [`Self::DUE_SQL`]; updates only if that due time is unchanged.
    const CLAIM_SQL: &'static str;
    /// One row by key, the columns of [`Self::Row`].
    const ROW_SQL: &'static str;
    /// Delivered: binds `delivered_at_ms`, `attempts`, then the row's key
    /// ([`Self::bind_row_key`]); sets `status = 'delivered'`, clears `last_error`.
    const DELIVERED_SQL: &'static str;
    /// Failed attempt: binds `status` (`pending` or `failed`), `attempts`,
    /// `next_attempt_at_ms`, `last_error`, then the row's key.
    const FAILED_SQL: &'static str;
    /// Rows in `failed`: `SELECT COUNT(*) … WHERE status = 'failed'`, a range
    /// read of an index that leads with `status`.
    const FAILED_COUNT_SQL: &'static str;

    /// Operator listing (`deliveries list`): binds `created_at_ms` lower
    /// bound and a row limit; selects `(event_id, room_id, target, attempts,
    /// last_error, created_at_ms)` of `failed` rows created since, oldest
    /// first — `target` says who the row was for. Served by an index on
    /// `(status, created_at_ms)`.
    const FAILED_LIST_SQL: &'static str;
    /// Operator retry of one event's rows: binds the new due time (now) and
    /// the event id; sets `failed` rows back to `pending` with `attempts = 0`
    /// (a fresh budget), so the sweeper takes them up. Guarded by
    /// `status = 'failed'`: a row delivered or pending meanwhile is left alone.
    const RETRY_EVENT_SQL: &'static str;
    /// Operator retry by creation time: binds the new due time, the
    /// `created_at_ms` lower bound and a row limit; like
    /// [`Self::RETRY_EVENT_SQL`] for the oldest `failed` rows created since.
    const RETRY_SINCE_SQL: &'static str;

    /// The key [`Self::DUE_SQL`] returns and the claim and row lookup bind.
    type Key: for<'r> sqlx::Decode<'r, MySql>
        + for<'q> sqlx::Encode<'q, MySql>
        + sqlx::Type<MySql>
        + Clone
        + Send
        + Sync
        + Unpin
        + 'static;
    /// One delivery, as [`Self::ROW_SQL`] selects it.
    type Row: for<'r> sqlx::FromRow<'r, MySqlRow> + Send + Sync + Unpin + 'static;
    /// Why a send failed.
    type Error: std::fmt::Display + Send;

    /// Attempts already made on `row`.
    fn attempts(row: &Self::Row) -> u32;
    /// The event the row belongs to (for logs).
    fn event_id(row: &Self::Row) -> &str;
    /// Binds the columns that identify `row` in [`Self::DELIVERED_SQL`] and
    /// [`Self::FAILED_SQL`].
    fn bind_row_key<'q>(row: &'q Self::Row, statement: Statement<'q>) -> Statement<'q>;

    /// Sends one row. Must be idempotent towards the receiver (e.g. a message
    /// `Random` derived from the event id): a resend after a crash between the
    /// send and the status update is possible.
    fn send(&self, row: &Self::Row) -> impl Future<Output = Result<(), Self::Error>> + Send;
    /// Whether another attempt can help.
    fn is_retryable(error: &Self::Error) -> bool;
    /// The short text stored in `last_error`.
    fn error_text(error: &Self::Error) -> String;

    /// Logs a delivered row (the table's own line and fields).
    fn log_delivered(row: &Self::Row);
    /// Logs a failed attempt (the table's own line and fields).
    fn log_failed(row: &Self::Row, attempts: u32, give_up: bool, error: &Self::Error);
}

/// How often [`Sweeper::run`] counts the table's failed rows.
pub const FAILED_COUNT_INTERVAL: Duration = Duration::from_secs(15);

/// Delivers the rows of one [`DeliveryTable`] and sweeps up the due ones.
#[derive(Debug)]
pub struct Sweeper<T> {
    table: T,
    pool: MySqlPool,
    retry: DeliveryRetryConfig,
    failed_rows: Gauge,
}

impl<T: DeliveryTable> Sweeper<T> {
    /// A sweeper of `table` in `pool` with `retry`'s budget and cadence,
    /// exporting the table's failed rows into `metrics`.
    pub fn new(
        table: T,
        pool: MySqlPool,
        retry: DeliveryRetryConfig,
        metrics: &ConsumerMetrics,
    ) -> Self {
        Self {
            table,
            pool,
            retry,
            failed_rows: metrics.failed_deliveries(T::TABLE),
        }
    }

    /// Counts the table's `failed` rows into `consumer_delivery_failed_rows`
    /// and returns the count.
    pub async fn count_failed(&self) -> Result<i64, sqlx::Error> {
        let failed: i64 = sqlx::query_scalar(T::FAILED_COUNT_SQL)
            .fetch_one(&self.pool)
            .await?;
        self.failed_rows.set(failed);
        Ok(failed)
    }

    /// How long a fresh row belongs to the in-line attempt: the consumer
    /// writes `next_attempt_at_ms = now + lease_ms()` when it commits the row.
    pub fn lease_ms(&self) -> i64 {
        self.retry.lease_ms()
    }

    /// Delivers rows just committed (their lease is ours). Failures are
    /// recorded on the rows, never returned: the consumed event is done.
    pub async fn deliver_all(&self, rows: &[T::Row]) {
        for row in rows {
            self.deliver(row).await;
        }
    }

    /// One attempt at `row`; the outcome is recorded on the row.
    pub async fn deliver(&self, row: &T::Row) {
        let attempts = T::attempts(row) + 1;
        let now_ms = service_kit::time::now_ms();
        let update = match self.table.send(row).await {
            Ok(()) => {
                T::log_delivered(row);
                T::bind_row_key(
                    row,
                    sqlx::query(T::DELIVERED_SQL).bind(now_ms).bind(attempts),
                )
            }
            Err(error) => {
                let give_up = !T::is_retryable(&error) || attempts >= self.retry.max_attempts;
                let next_attempt_at_ms = now_ms + self.retry.backoff_ms(attempts);
                T::log_failed(row, attempts, give_up, &error);
                T::bind_row_key(
                    row,
                    sqlx::query(T::FAILED_SQL)
                        .bind(if give_up { "failed" } else { "pending" })
                        .bind(attempts)
                        .bind(next_attempt_at_ms)
                        .bind(T::error_text(&error)),
                )
            }
        };
        if let Err(error) = update.execute(&self.pool).await {
            // The lease runs out and a sweep retries; the send is idempotent.
            tracing::warn!(event_id = %T::event_id(row), %error, "{} status update failed", T::KIND);
        }
    }

    /// One sweep: claims due rows (compare-and-set on their due time, so
    /// several instances never take the same row) and delivers them. Returns
    /// how many were attempted.
    pub async fn sweep_once(&self) -> Result<usize, sqlx::Error> {
        let now_ms = service_kit::time::now_ms();
        let due: Vec<(T::Key, i64)> = sqlx::query_as(T::DUE_SQL)
            .bind(now_ms)
            .bind(self.retry.sweep_batch.max(1))
            .fetch_all(&self.pool)
            .await?;
        let mut attempted = 0;
        for (key, due_at_ms) in due {
            let claimed = sqlx::query(T::CLAIM_SQL)
                .bind(now_ms + self.retry.lease_ms())
                .bind(key.clone())
                .bind(due_at_ms)
                .execute(&self.pool)
                .await?
                .rows_affected();
            if claimed == 0 {
                continue;
            }
            let row: Option<T::Row> = sqlx::query_as(T::ROW_SQL)
                .bind(key)
                .fetch_optional(&self.pool)
                .await?;
            if let Some(row) = row {
                self.deliver(&row).await;
                attempted += 1;
            }
        }
        Ok(attempted)
    }

    /// Sweeps every `sweep_interval` and counts the failed rows every
    /// [`FAILED_COUNT_INTERVAL`] until `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) {
        let mut ticker = tokio::time::interval(self.retry.sweep_every());
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut count_ticker = tokio::time::interval(FAILED_COUNT_INTERVAL);
        count_ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => {
                    if let Err(error) = self.sweep_once().await {
                        tracing::warn!(%error, "{} sweep failed", T::KIND);
                    }
                }
                _ = count_ticker.tick() => {
                    if let Err(error) = self.count_failed().await {
                        tracing::warn!(%error, "{} failed-row count failed", T::KIND);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
            exposition
                .contains("consumer_delivery_failed_rows{table=\"notice_delivery_events\"} 2"),
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
}
