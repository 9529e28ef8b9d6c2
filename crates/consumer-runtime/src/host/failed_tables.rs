//! The operator reads of the platform's delivery tables, written once:
//! notice-consumer's `notice_delivery_events` and activity-consumer's
//! `activity_broadcasts`. Their `failed` count and listing statements live
//! here, so the services' [`crate::sweeper::DeliveryTable`] impls (which
//! take them as their `FAILED_COUNT_SQL` and `FAILED_LIST_SQL`, for the
//! sweeper's gauge and `deliveries list`) and the relay's operator console
//! (which reads the tables without the services' code) run the same SQL.
//!
//! Each statement is a literal `const` (docs/style.md; the SQL policy test).

use super::{Error, deliveries::FailedRow};
use service_kit::db::IdText;
use sqlx::MySqlPool;

/// `notice_delivery_events`' failed rows: idx_due (status,
/// next_attempt_at_ms) makes it a range read.
pub const NOTICE_FAILED_COUNT_SQL: &str =
    "SELECT COUNT(*) FROM notice_delivery_events WHERE status = 'failed'";
/// `notice_delivery_events`' failed rows created since (bind) oldest first,
/// at most (bind) rows: `(event_id, room_id, target, attempts, last_error,
/// created_at_ms)`, the target being the recipient.
pub const NOTICE_FAILED_LIST_SQL: &str = "SELECT event_id, room_id, recipient_id AS target, attempts, \
     last_error, created_at_ms FROM notice_delivery_events \
     WHERE status = 'failed' AND created_at_ms >= ? ORDER BY created_at_ms, id LIMIT ?";
/// `activity_broadcasts`' failed rows: idx_status (status, created_at_ms).
pub const BROADCAST_FAILED_COUNT_SQL: &str =
    "SELECT COUNT(*) FROM activity_broadcasts WHERE status = 'failed'";
/// `activity_broadcasts`' failed rows created since (bind) oldest first, at
/// most (bind) rows, the target saying which gift from whom to whom.
pub const BROADCAST_FAILED_LIST_SQL: &str = "SELECT event_id, room_id, \
     CONCAT('gift ', gift_id, ' from ', sender_id, ' to ', receiver_id) AS target, \
     attempts, last_error, created_at_ms FROM activity_broadcasts \
     WHERE status = 'failed' AND created_at_ms >= ? ORDER BY created_at_ms, event_id LIMIT ?";

/// One of the platform's delivery tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryTableName {
    /// notice-consumer's `notice_delivery_events`.
    NoticeDeliveries,
    /// activity-consumer's `activity_broadcasts`.
    ActivityBroadcasts,
}

impl DeliveryTableName {
    /// The table of the consumer service `service`, if it has one.
    pub fn of_service(service: &str) -> Option<Self> {
        match service {
            "notice-consumer" => Some(Self::NoticeDeliveries),
            "activity-consumer" => Some(Self::ActivityBroadcasts),
            _ => None,
        }
    }

    /// The table's name.
    pub fn table(self) -> &'static str {
        match self {
            Self::NoticeDeliveries => "notice_delivery_events",
            Self::ActivityBroadcasts => "activity_broadcasts",
        }
    }

    /// How many rows are `failed`.
    pub async fn count_failed(self, pool: &MySqlPool) -> Result<i64, Error> {
        let query = match self {
            Self::NoticeDeliveries => sqlx::query_scalar(NOTICE_FAILED_COUNT_SQL),
            Self::ActivityBroadcasts => sqlx::query_scalar(BROADCAST_FAILED_COUNT_SQL),
        };
        Ok(query
            .fetch_one(pool)
            .await
            .map_err(service_kit::Error::from)?)
    }

    /// The oldest `limit` failed rows created at or after `since_ms`.
    pub async fn list_failed(
        self,
        pool: &MySqlPool,
        since_ms: i64,
        limit: u32,
    ) -> Result<Vec<FailedRow>, Error> {
        let query = match self {
            Self::NoticeDeliveries => sqlx::query_as(NOTICE_FAILED_LIST_SQL),
            Self::ActivityBroadcasts => sqlx::query_as(BROADCAST_FAILED_LIST_SQL),
        };
        let rows: Vec<Columns> = query
            .bind(since_ms)
            .bind(limit)
            .fetch_all(pool)
            .await
            .map_err(service_kit::Error::from)?;
        Ok(rows_of(rows))
    }
}

/// The columns of a failed-row listing.
pub(super) type Columns = (IdText, IdText, IdText, u32, IdText, i64);

/// The rows of a failed-row listing.
pub(super) fn rows_of(rows: Vec<Columns>) -> Vec<FailedRow> {
    rows.into_iter()
        .map(
            |(event_id, room_id, target, attempts, last_error, created_at_ms)| FailedRow {
                event_id: event_id.into(),
                room_id: room_id.into(),
                target: target.into(),
                attempts,
                last_error: last_error.into(),
                created_at_ms,
            },
        )
        .collect()
}
