//! Big-gift broadcasts: a row in `activity_broadcasts` (committed with the
//! gift's effect, so once per event) becomes one message in the global IM
//! group. Delivery is tried right after the commit; a failure leaves the row
//! `pending` with a backoff, and the sweeper tries again when due, until
//! `delivered` or `failed` (permanent error or attempts spent). The message's
//! `Random` derives from the event id, so a resend after a crash is dropped
//! by Tencent.
//!
//! The attempt/retry/sweep loop is the shared [`Sweeper`]; this file says
//! what the table is ([`Broadcasts`]) and how one row is sent.

use consumer_runtime::sweeper::{DeliveryTable, Statement, Sweeper};
use serde_json::json;
use service_kit::db::IdText;
use sqlx::FromRow;
use std::sync::atomic::{AtomicBool, Ordering};
use tencent_im::{CreateGroupRequest, MsgElement, SendGroupMsgRequest};

/// One broadcast to deliver.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct BroadcastRow {
    // The ids are byte-exact columns, read through IdText
    // (docs/design.md#identifiers).
    /// The gift event.
    #[sqlx(try_from = "IdText")]
    pub event_id: String,
    /// Where the gift was sent.
    #[sqlx(try_from = "IdText")]
    pub room_id: String,
    /// Sender.
    #[sqlx(try_from = "IdText")]
    pub sender_id: String,
    /// Receiver.
    #[sqlx(try_from = "IdText")]
    pub receiver_id: String,
    /// Gift.
    #[sqlx(try_from = "IdText")]
    pub gift_id: String,
    /// Gift value.
    pub total_value: u64,
    /// Attempts made so far.
    pub attempts: u32,
}

/// Delivers broadcasts to the global group and sweeps up the due ones.
pub type Broadcaster = Sweeper<Broadcasts>;

/// The `activity_broadcasts` table, and the global group its rows go to.
#[derive(Debug)]
pub struct Broadcasts {
    im: tencent_im::Client,
    group_id: String,
    group_ready: AtomicBool,
}

impl Broadcasts {
    /// Broadcasts to `group_id` (created on first use).
    pub fn new(im: tencent_im::Client, group_id: String) -> Self {
        Self {
            im,
            group_id,
            group_ready: AtomicBool::new(false),
        }
    }
}

impl DeliveryTable for Broadcasts {
    const KIND: &str = "broadcast";
    const TABLE: &str = "activity_broadcasts";
    // The operator reads are consumer-runtime's, shared with the relay's console.
    const FAILED_COUNT_SQL: &str = consumer_runtime::host::BROADCAST_FAILED_COUNT_SQL;
    const DUE_SQL: &str = "SELECT event_id, next_attempt_at_ms FROM activity_broadcasts \
         WHERE status = 'pending' AND next_attempt_at_ms <= ? \
         ORDER BY next_attempt_at_ms LIMIT ?";
    const CLAIM_SQL: &str = "UPDATE activity_broadcasts SET next_attempt_at_ms = ? \
         WHERE event_id = ? AND status = 'pending' AND next_attempt_at_ms = ?";
    const ROW_SQL: &str = "SELECT event_id, room_id, \
         sender_id, receiver_id, \
         gift_id, total_value, attempts \
         FROM activity_broadcasts WHERE event_id = ?";
    const DELIVERED_SQL: &str = "UPDATE activity_broadcasts SET status = 'delivered', delivered_at_ms = ?, \
         attempts = ?, last_error = '' WHERE event_id = ? AND status = 'pending'";
    const FAILED_SQL: &str = "UPDATE activity_broadcasts SET status = ?, attempts = ?, \
         next_attempt_at_ms = ?, last_error = ? WHERE event_id = ? AND status = 'pending'";
    const FAILED_LIST_SQL: &str = consumer_runtime::host::BROADCAST_FAILED_LIST_SQL;
    const RETRY_EVENT_SQL: &str = "UPDATE activity_broadcasts SET status = 'pending', \
         attempts = 0, next_attempt_at_ms = ? WHERE event_id = ? AND status = 'failed'";
    const RETRY_SINCE_SQL: &str = "UPDATE activity_broadcasts SET status = 'pending', \
         attempts = 0, next_attempt_at_ms = ? \
         WHERE status = 'failed' AND created_at_ms >= ? ORDER BY created_at_ms, event_id LIMIT ?";

    // event_id is an id column (utf8mb4_bin), which sqlx does not decode as String.
    type Key = IdText;
    type Row = BroadcastRow;
    type Error = tencent_im::Error;

    fn attempts(row: &BroadcastRow) -> u32 {
        row.attempts
    }

    fn event_id(row: &BroadcastRow) -> &str {
        &row.event_id
    }

    fn bind_row_key<'q>(row: &'q BroadcastRow, statement: Statement<'q>) -> Statement<'q> {
        statement.bind(&row.event_id)
    }

    async fn send(&self, row: &BroadcastRow) -> Result<(), tencent_im::Error> {
        if !self.group_ready.load(Ordering::Relaxed) {
            self.im
                .ensure_group(&CreateGroupRequest::av_chat_room(
                    &self.group_id,
                    "broadcast",
                ))
                .await?;
            self.group_ready.store(true, Ordering::Relaxed);
        }
        let data = json!({
            "type": "big_gift",
            "event_id": row.event_id,
            "room_id": row.room_id,
            "sender_id": row.sender_id,
            "receiver_id": row.receiver_id,
            "gift_id": row.gift_id,
            "total_value": row.total_value,
        });
        let request = SendGroupMsgRequest::for_event(
            &self.group_id,
            &row.event_id,
            vec![MsgElement::custom(data.to_string())],
        );
        self.im.send_group_msg(&request).await.map(drop)
    }

    fn is_retryable(error: &tencent_im::Error) -> bool {
        error.is_retryable()
    }

    fn error_text(error: &tencent_im::Error) -> String {
        error.short_summary()
    }

    fn log_delivered(row: &BroadcastRow) {
        tracing::info!(event_id = %row.event_id, room_id = %row.room_id, total_value = row.total_value, "big gift broadcast");
    }

    fn log_failed(row: &BroadcastRow, attempts: u32, give_up: bool, error: &tencent_im::Error) {
        tracing::warn!(
            event_id = %row.event_id,
            room_id = %row.room_id,
            attempts,
            give_up,
            %error,
            "big gift broadcast failed"
        );
    }
}
