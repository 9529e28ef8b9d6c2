//! Private notices: `RoomUserKicked` → one notice to the kicked user;
//! `RoomTreasureOpened` → one notice per rewarded user. The notice rows are
//! written to `notice_delivery_events` (unique by event id + recipient) in
//! the same transaction as the event's dedup claim; each row then becomes
//! one C2C IM message and is marked `delivered`. A failed delivery stays
//! `pending` with a backoff and is retried from the table by the sweeper,
//! until delivered or `failed` (permanent IM error or attempts spent). The
//! attempt/retry/sweep loop is the shared [`Sweeper`]; [`NoticeDeliveries`]
//! says what the table is and how one row is sent.

use consumer_runtime::{
    BatchError, Delivery, Handler, HandlerError, Outcome, dedup,
    delivery::DeliveryRetryConfig,
    host,
    sweeper::{DeliveryTable, Statement, Sweeper},
};
use outbox_schema::pb::{self, room_outbox_event::Payload};
use serde_json::json;
use service_kit::db::IdText;
use service_kit::db::statement::BoundedPool;
use sqlx::{Connection, FromRow, MySqlConnection, QueryBuilder};
use std::sync::Arc;
use tencent_im::{MsgElement, SendC2cMsgRequest};

/// One notice to deliver.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct NoticeRow {
    // The ids are byte-exact columns, read through IdText
    // (docs/design.md#identifiers).
    /// The source event.
    #[sqlx(try_from = "IdText")]
    pub event_id: String,
    /// Who gets it.
    #[sqlx(try_from = "IdText")]
    pub recipient_id: String,
    /// `room_kicked` or `treasure_reward`.
    pub notice_type: String,
    /// The room.
    #[sqlx(try_from = "IdText")]
    pub room_id: String,
    /// The message data (JSON).
    pub content: String,
    /// Attempts made so far.
    pub attempts: u32,
}

/// The notices an event asks for (none for most events).
pub fn notices_of(event: &pb::RoomOutboxEvent) -> Vec<NoticeRow> {
    let row = |recipient: &str, notice_type: &str, content: serde_json::Value| NoticeRow {
        event_id: event.event_id.clone(),
        recipient_id: recipient.to_string(),
        notice_type: notice_type.to_string(),
        room_id: event.room_id.clone(),
        content: content.to_string(),
        attempts: 0,
    };
    match &event.payload {
        Some(Payload::RoomUserKicked(kicked)) => vec![row(
            &kicked.target_id,
            "room_kicked",
            json!({"type": "room_kicked", "event_id": event.event_id, "room_id": event.room_id,
                   "actor_id": kicked.actor_id, "ban_until_ms": kicked.ban_until_ms}),
        )],
        Some(Payload::RoomTreasureOpened(opened)) => opened
            .rewarded_user_ids
            .iter()
            .map(|user| {
                row(
                    user,
                    "treasure_reward",
                    json!({"type": "treasure_reward", "event_id": event.event_id,
                           "room_id": event.room_id, "box_id": opened.box_id,
                           "level": opened.level, "opened_at_ms": opened.opened_at_ms}),
                )
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Writes and delivers notices.
#[derive(Debug)]
pub struct NoticeProcessor {
    db: BoundedPool,
    consumer_group: String,
    deliveries: Sweeper<NoticeDeliveries>,
}

impl NoticeProcessor {
    /// The service's handler as its host runs it: notices sent through `im`,
    /// their delivery sweeper (retries by `delivery`) started as a
    /// background task, every statement under the host's statement timeout.
    pub fn start(
        im: tencent_im::Client,
        delivery: DeliveryRetryConfig,
        host: &mut host::Builder,
    ) -> Arc<Self> {
        let processor = Arc::new(Self::new(
            host.bounded_pool().clone(),
            host.consumer_group().to_string(),
            Sweeper::new(
                NoticeDeliveries::new(im),
                host.bounded_pool().clone(),
                delivery,
                host.metrics(),
            ),
        ));
        host.background("notice sweeper", {
            let processor = processor.clone();
            move |stop| async move { processor.deliveries().run(stop).await }
        });
        processor
    }

    /// A processor dedup'ing in `consumer_group`, delivering through `deliveries`.
    pub fn new(
        db: impl Into<BoundedPool>,
        consumer_group: String,
        deliveries: Sweeper<NoticeDeliveries>,
    ) -> Self {
        Self {
            db: db.into(),
            consumer_group,
            deliveries,
        }
    }

    /// The deliveries, for their sweeper.
    pub fn deliveries(&self) -> &Sweeper<NoticeDeliveries> {
        &self.deliveries
    }

    /// Applies `events` in order: one transaction for their rows, then delivery.
    pub async fn apply(
        &self,
        events: &[&pb::RoomOutboxEvent],
    ) -> Result<Vec<Outcome>, HandlerError> {
        let outcomes = vec![Outcome::Ignored; events.len()];
        let wanted: Vec<(usize, &pb::RoomOutboxEvent, Vec<NoticeRow>)> = events
            .iter()
            .enumerate()
            .map(|(index, event)| (index, *event, notices_of(event)))
            .filter(|(_, _, rows)| !rows.is_empty())
            .collect();
        if wanted.is_empty() {
            return Ok(outcomes);
        }
        // Claim and rows in one transaction, bounded by
        // `mysql.statement_timeout`: a stalled database fails the batch
        // (retried, then redelivered) instead of holding it.
        let (outcomes, rows) = self
            .db
            .run(|connection, _| Box::pin(self.write_notices(connection, wanted, outcomes)))
            .await?;
        self.deliveries.deliver_all(&rows).await;
        Ok(outcomes)
    }

    /// The dedup claim of `wanted` and the notice rows of the fresh events,
    /// in one transaction on `connection`; the outcomes and the rows to
    /// deliver once it committed.
    async fn write_notices(
        &self,
        connection: &mut MySqlConnection,
        wanted: Vec<(usize, &pb::RoomOutboxEvent, Vec<NoticeRow>)>,
        mut outcomes: Vec<Outcome>,
    ) -> Result<(Vec<Outcome>, Vec<NoticeRow>), HandlerError> {
        let now_ms = service_kit::time::now_ms();
        let ids: Vec<&str> = wanted
            .iter()
            .map(|(_, event, _)| event.event_id.as_str())
            .collect();
        let mut tx = connection.begin().await?;
        let mut fresh =
            dedup::claim_many_in_tx(&mut tx, &self.consumer_group, &ids, now_ms).await?;
        let mut rows = Vec::new();
        for (index, event, notices) in wanted {
            if fresh.remove(&event.event_id) {
                outcomes[index] = Outcome::Applied;
                rows.extend(notices);
            } else {
                outcomes[index] = Outcome::Duplicate;
            }
        }
        if !rows.is_empty() {
            let mut insert = QueryBuilder::new(
                "INSERT IGNORE INTO notice_delivery_events (event_id, recipient_id, notice_type, \
                 room_id, content, status, next_attempt_at_ms, created_at_ms) ",
            );
            // The in-line attempt after the commit owns the rows for one lease.
            let lease_until_ms = now_ms + self.deliveries.lease_ms();
            insert.push_values(&rows, |mut row, notice| {
                row.push_bind(&notice.event_id)
                    .push_bind(&notice.recipient_id)
                    .push_bind(&notice.notice_type)
                    .push_bind(&notice.room_id)
                    .push_bind(&notice.content)
                    .push_bind("pending")
                    .push_bind(lease_until_ms)
                    .push_bind(now_ms);
            });
            insert.build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok((outcomes, rows))
    }
}

/// The `notice_delivery_events` table: one C2C IM message per row.
#[derive(Debug)]
pub struct NoticeDeliveries {
    im: tencent_im::Client,
}

impl NoticeDeliveries {
    /// Notices sent through `im`.
    pub fn new(im: tencent_im::Client) -> Self {
        Self { im }
    }
}

impl DeliveryTable for NoticeDeliveries {
    const KIND: &str = "notice";
    const TABLE: &str = "notice_delivery_events";
    // The operator reads are consumer-runtime's, shared with the relay's console.
    const FAILED_COUNT_SQL: &str = consumer_runtime::host::NOTICE_FAILED_COUNT_SQL;
    const DUE_SQL: &str = "SELECT id, next_attempt_at_ms FROM notice_delivery_events \
         WHERE status = 'pending' AND next_attempt_at_ms <= ? \
         ORDER BY next_attempt_at_ms LIMIT ?";
    const CLAIM_SQL: &str = "UPDATE notice_delivery_events SET next_attempt_at_ms = ? \
         WHERE id = ? AND status = 'pending' AND next_attempt_at_ms = ?";
    const ROW_SQL: &str = "SELECT event_id, recipient_id, \
         notice_type, room_id, \
         content, attempts \
         FROM notice_delivery_events WHERE id = ?";
    const DELIVERED_SQL: &str = "UPDATE notice_delivery_events SET status = 'delivered', delivered_at_ms = ?, \
         attempts = ?, last_error = '' \
         WHERE event_id = ? AND recipient_id = ? AND status = 'pending'";
    const FAILED_SQL: &str = "UPDATE notice_delivery_events SET status = ?, attempts = ?, \
         next_attempt_at_ms = ?, last_error = ? \
         WHERE event_id = ? AND recipient_id = ? AND status = 'pending'";
    const FAILED_LIST_SQL: &str = consumer_runtime::host::NOTICE_FAILED_LIST_SQL;
    const RETRY_EVENT_SQL: &str = "UPDATE notice_delivery_events SET status = 'pending', \
         attempts = 0, next_attempt_at_ms = ? WHERE event_id = ? AND status = 'failed'";
    const RETRY_SINCE_SQL: &str = "UPDATE notice_delivery_events SET status = 'pending', \
         attempts = 0, next_attempt_at_ms = ? \
         WHERE status = 'failed' AND created_at_ms >= ? ORDER BY created_at_ms, id LIMIT ?";

    type Key = u64;
    type Row = NoticeRow;
    type Error = tencent_im::Error;

    fn attempts(row: &NoticeRow) -> u32 {
        row.attempts
    }

    fn event_id(row: &NoticeRow) -> &str {
        &row.event_id
    }

    fn bind_row_key<'q>(row: &'q NoticeRow, statement: Statement<'q>) -> Statement<'q> {
        statement.bind(&row.event_id).bind(&row.recipient_id)
    }

    async fn send(&self, row: &NoticeRow) -> Result<(), tencent_im::Error> {
        let request = SendC2cMsgRequest::for_event(
            &row.recipient_id,
            &row.event_id,
            vec![MsgElement::custom(row.content.clone())],
        );
        self.im.send_c2c_msg(&request).await.map(drop)
    }

    fn is_retryable(error: &tencent_im::Error) -> bool {
        error.is_retryable()
    }

    fn error_text(error: &tencent_im::Error) -> String {
        error.short_summary()
    }

    fn log_delivered(row: &NoticeRow) {
        tracing::info!(event_id = %row.event_id, room_id = %row.room_id, recipient_id = %row.recipient_id, notice_type = %row.notice_type, "notice delivered");
    }

    fn log_failed(row: &NoticeRow, attempts: u32, give_up: bool, error: &tencent_im::Error) {
        tracing::warn!(
            event_id = %row.event_id,
            room_id = %row.room_id,
            recipient_id = %row.recipient_id,
            attempts,
            give_up,
            %error,
            "notice delivery failed"
        );
    }
}

impl Handler<pb::RoomOutboxEvent> for NoticeProcessor {
    async fn handle(
        &self,
        delivery: &Delivery<pb::RoomOutboxEvent>,
    ) -> Result<Outcome, HandlerError> {
        let outcomes = self.apply(&[&*delivery.message]).await?;
        Ok(outcomes.first().copied().unwrap_or(Outcome::Ignored))
    }

    /// One transaction for the batch's rows; a failure rolls it all back.
    async fn handle_batch(
        &self,
        batch: &[Delivery<pb::RoomOutboxEvent>],
    ) -> Result<Vec<Outcome>, BatchError> {
        let events: Vec<&pb::RoomOutboxEvent> = batch.iter().map(|d| &*d.message).collect();
        Ok(self.apply(&events).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn treasure_opened_notifies_every_rewarded_user() {
        let event = pb::RoomOutboxEvent {
            event_id: "e".into(),
            room_id: "r".into(),
            payload: Some(Payload::RoomTreasureOpened(pb::RoomTreasureOpened {
                box_id: "b".into(),
                level: 2,
                opened_at_ms: 9,
                rewarded_user_ids: vec!["u1".into(), "u2".into()],
            })),
            ..Default::default()
        };
        let rows = notices_of(&event);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].recipient_id, "u2");
        assert!(rows[0].content.contains("\"box_id\":\"b\""));
        let joined = pb::RoomOutboxEvent {
            payload: Some(Payload::RoomUserJoined(pb::RoomUserJoined::default())),
            ..Default::default()
        };
        assert!(notices_of(&joined).is_empty());
    }
}
