//! `deliveries list` and `deliveries retry`: the failed rows of the table of
//! retried deliveries a service owns (notice-consumer's
//! `notice_delivery_events`, activity-consumer's `activity_broadcasts`),
//! listed, and set back to `pending` with a fresh attempt budget so the
//! service's sweeper sends them again.
//!
//! The statements are the table's own ([`DeliveryTable`]'s `FAILED_LIST_SQL`,
//! `RETRY_EVENT_SQL`, `RETRY_SINCE_SQL`; the two services' listings are
//! written in [`super::failed_tables`], which the relay's console reads
//! too): one guarded UPDATE each
//! (`status = 'failed'`, so a row delivered or pending meanwhile is left
//! alone), bounded by a row limit, committed in one transaction with its
//! audit row.

use super::{
    Error,
    audit::{self, Accountable},
    failed_tables::{Columns, rows_of},
};
use crate::sweeper::DeliveryTable;
use serde::Serialize;
use sqlx::MySqlPool;
use std::{future::Future, pin::Pin};

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One failed delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedRow {
    /// The event it belongs to.
    pub event_id: String,
    /// The room.
    pub room_id: String,
    /// Who it was for (the table says how).
    pub target: String,
    /// Attempts made.
    pub attempts: u32,
    /// The last error.
    pub last_error: String,
    /// When the row was written (the event consumed), Unix ms.
    pub created_at_ms: i64,
}

/// Which failed rows a retry resets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// The rows of one event.
    Event(String),
    /// The oldest `limit` rows created at or after `since_ms` (`--all`: 0).
    Since {
        /// Lower bound of `created_at_ms`.
        since_ms: i64,
        /// Most rows reset by one command.
        limit: u32,
    },
}

/// Who is doing it and where, for the audit row.
#[derive(Debug, Clone, Copy)]
pub struct RetryBy<'a> {
    /// Operator and reason.
    pub who: &'a Accountable,
    /// The service binary.
    pub service: &'a str,
    /// The consumer group.
    pub consumer_group: &'a str,
    /// The selection as given, for the audit row.
    pub target: &'a str,
}

type ListFn = for<'a> fn(&'a MySqlPool, i64, u32) -> BoxFuture<'a, Result<Vec<FailedRow>, Error>>;
type RetryFn =
    for<'a> fn(&'a MySqlPool, &'a Selection, RetryBy<'a>) -> BoxFuture<'a, Result<u64, Error>>;

/// The operator side of one [`DeliveryTable`], as a service declares it
/// ([`super::ConsumerService::failed_deliveries`]).
#[derive(Clone, Copy)]
pub struct FailedDeliveries {
    table: &'static str,
    list: ListFn,
    retry: RetryFn,
}

impl std::fmt::Debug for FailedDeliveries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailedDeliveries")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl FailedDeliveries {
    /// The operator commands of table `T`.
    pub fn of<T: DeliveryTable>() -> Self {
        Self {
            table: T::TABLE,
            list: |pool, since_ms, limit| Box::pin(list::<T>(pool, since_ms, limit)),
            retry: |pool, selection, by| Box::pin(retry::<T>(pool, selection, by)),
        }
    }

    /// The table's name.
    pub fn table(&self) -> &'static str {
        self.table
    }

    /// The oldest `limit` failed rows created at or after `since_ms`.
    pub async fn list(
        &self,
        pool: &MySqlPool,
        since_ms: i64,
        limit: u32,
    ) -> Result<Vec<FailedRow>, Error> {
        (self.list)(pool, since_ms, limit).await
    }

    /// Resets the selected failed rows to `pending`, due now, with a fresh
    /// budget, in one transaction with the audit row; returns how many.
    /// Refuses (and changes nothing) when an event has no failed row.
    pub async fn retry(
        &self,
        pool: &MySqlPool,
        selection: &Selection,
        by: RetryBy<'_>,
    ) -> Result<u64, Error> {
        (self.retry)(pool, selection, by).await
    }
}

async fn list<T: DeliveryTable>(
    pool: &MySqlPool,
    since_ms: i64,
    limit: u32,
) -> Result<Vec<FailedRow>, Error> {
    let rows: Vec<Columns> = sqlx::query_as(T::FAILED_LIST_SQL)
        .bind(since_ms)
        .bind(limit)
        .fetch_all(pool)
        .await
        .map_err(service_kit::Error::from)?;
    Ok(rows_of(rows))
}

async fn retry<T: DeliveryTable>(
    pool: &MySqlPool,
    selection: &Selection,
    by: RetryBy<'_>,
) -> Result<u64, Error> {
    let now_ms = service_kit::time::now_ms();
    let mut tx = pool.begin().await.map_err(service_kit::Error::from)?;
    let statement = match selection {
        Selection::Event(event_id) => sqlx::query(T::RETRY_EVENT_SQL)
            .bind(now_ms)
            .bind(event_id.as_str()),
        Selection::Since { since_ms, limit } => sqlx::query(T::RETRY_SINCE_SQL)
            .bind(now_ms)
            .bind(*since_ms)
            .bind(*limit),
    };
    let reset = statement
        .execute(&mut *tx)
        .await
        .map_err(service_kit::Error::from)?
        .rows_affected();
    if let Selection::Event(event_id) = selection
        && reset == 0
    {
        // Dropping the transaction rolls it back: nothing changed, no audit row.
        return Err(Error::Operator(format!(
            "no failed row of event `{event_id}` in {}",
            T::TABLE
        )));
    }
    let target = format!("{} {}", T::TABLE, by.target);
    let action = audit::Action {
        service: by.service,
        consumer_group: by.consumer_group,
        action: "deliveries retry",
        target: &target,
    };
    audit::record(&mut tx, by.who, action, &format!("reset {reset} rows")).await?;
    tx.commit().await.map_err(service_kit::Error::from)?;
    Ok(reset)
}
