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
//! statements (associated `const`s, each a string literal — in the impl, or
//! for the failed count and list in `host::failed_tables`, which the relay's
//! console reads too — so the SQL stays greppable and
//! `crates/testkit/tests/sql_policy.rs` can see that no value is spliced in),
//! the row type, how one row is sent, and its log
//! lines. The send error is the table's own type, classified through the
//! trait, because this crate knows no IM vendor (ARCHITECTURE.md: the
//! runtime is vendor-free).
//!
//! Every statement runs within `mysql.statement_timeout`
//! ([`service_kit::db::statement`]): a stalled database fails the sweep or
//! the status update (the lease runs out and a later sweep retries) instead
//! of holding the sweeper until TCP gives up. The send is not under it.

use crate::{ConsumerMetrics, delivery::DeliveryRetryConfig};
use prometheus_client::metrics::gauge::Gauge;
use service_kit::db::statement::BoundedPool;
use sqlx::{
    MySql,
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
    db: BoundedPool,
    retry: DeliveryRetryConfig,
    failed_rows: Gauge,
}

impl<T: DeliveryTable> Sweeper<T> {
    /// A sweeper of `table` in `pool` with `retry`'s budget and cadence,
    /// exporting the table's failed rows into `metrics`. Its statements run
    /// within `pool`'s statement timeout (a bare pool gets the default).
    pub fn new(
        table: T,
        pool: impl Into<BoundedPool>,
        retry: DeliveryRetryConfig,
        metrics: &ConsumerMetrics,
    ) -> Self {
        Self {
            table,
            db: pool.into(),
            retry,
            failed_rows: metrics.failed_deliveries(T::TABLE),
        }
    }

    /// Counts the table's `failed` rows into `consumer_delivery_failed_rows`
    /// and returns the count.
    pub async fn count_failed(&self) -> Result<i64, sqlx::Error> {
        let failed: i64 = self
            .db
            .run(|connection, _| {
                Box::pin(sqlx::query_scalar(T::FAILED_COUNT_SQL).fetch_one(connection))
            })
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
        if let Err(error) = self.execute(update).await {
            // The lease runs out and a sweep retries; the send is idempotent.
            tracing::warn!(event_id = %T::event_id(row), %error, "{} status update failed", T::KIND);
        }
    }

    /// One sweep: claims due rows (compare-and-set on their due time, so
    /// several instances never take the same row) and delivers them. Returns
    /// how many were attempted.
    pub async fn sweep_once(&self) -> Result<usize, sqlx::Error> {
        let now_ms = service_kit::time::now_ms();
        let batch = self.retry.sweep_batch.max(1);
        let due: Vec<(T::Key, i64)> = self
            .db
            .run(|connection, _| {
                Box::pin(
                    sqlx::query_as(T::DUE_SQL)
                        .bind(now_ms)
                        .bind(batch)
                        .fetch_all(connection),
                )
            })
            .await?;
        let mut attempted = 0;
        for (key, due_at_ms) in due {
            let claim = sqlx::query(T::CLAIM_SQL)
                .bind(now_ms + self.retry.lease_ms())
                .bind(key.clone())
                .bind(due_at_ms);
            let claimed = self.execute(claim).await?;
            if claimed == 0 {
                continue;
            }
            let row: Option<T::Row> = self
                .db
                .run(|connection, _| {
                    Box::pin(
                        sqlx::query_as(T::ROW_SQL)
                            .bind(key)
                            .fetch_optional(connection),
                    )
                })
                .await?;
            if let Some(row) = row {
                self.deliver(&row).await;
                attempted += 1;
            }
        }
        Ok(attempted)
    }

    /// Runs `statement` within the statement timeout; rows affected.
    async fn execute(&self, statement: Statement<'_>) -> Result<u64, sqlx::Error> {
        self.db
            .run(|connection, _| {
                Box::pin(async move { Ok(statement.execute(connection).await?.rows_affected()) })
            })
            .await
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
mod tests;
