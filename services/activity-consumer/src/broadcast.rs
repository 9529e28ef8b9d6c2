//! Big-gift broadcasts: a row in `activity_broadcasts` (committed with the
//! gift's effect, so once per event) becomes one message in the global IM
//! group. Delivery is tried right after the commit; a failure leaves the row
//! `pending` with a backoff, and the sweeper tries again when due, until
//! `delivered` or `failed` (permanent error or attempts spent). The message's
//! `Random` derives from the event id, so a resend after a crash is dropped
//! by Tencent.

use consumer_runtime::delivery::DeliveryRetryConfig;
use serde_json::json;
use sqlx::{FromRow, MySqlPool};
use std::sync::atomic::{AtomicBool, Ordering};
use tencent_im::{CreateGroupRequest, MsgElement, SendGroupMsgRequest};
use tokio_util::sync::CancellationToken;

/// One broadcast to deliver.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct BroadcastRow {
    /// The gift event.
    pub event_id: String,
    /// Where the gift was sent.
    pub room_id: String,
    /// Sender.
    pub sender_id: String,
    /// Receiver.
    pub receiver_id: String,
    /// Gift.
    pub gift_id: String,
    /// Gift value.
    pub total_value: u64,
    /// Attempts made so far.
    pub attempts: u32,
}

/// Delivers broadcasts to the global group.
#[derive(Debug)]
pub struct Broadcaster {
    im: tencent_im::Client,
    pool: MySqlPool,
    group_id: String,
    retry: DeliveryRetryConfig,
    group_ready: AtomicBool,
}

impl Broadcaster {
    /// A broadcaster to `group_id`.
    pub fn new(
        im: tencent_im::Client,
        pool: MySqlPool,
        group_id: String,
        retry: DeliveryRetryConfig,
    ) -> Self {
        Self {
            im,
            pool,
            group_id,
            retry,
            group_ready: AtomicBool::new(false),
        }
    }

    /// How long a fresh row belongs to the in-line attempt.
    pub fn lease_ms(&self) -> i64 {
        self.retry.lease_ms()
    }

    /// Delivers rows just committed (their lease is ours). Failures are
    /// recorded on the row, never returned: the consumed event is done.
    pub async fn deliver_all(&self, rows: &[BroadcastRow]) {
        for row in rows {
            self.deliver(row).await;
        }
    }

    async fn deliver(&self, row: &BroadcastRow) {
        let attempts = row.attempts + 1;
        let now_ms = service_kit::time::now_ms();
        let update = match self.send(row).await {
            Ok(()) => {
                tracing::info!(event_id = %row.event_id, room_id = %row.room_id, total_value = row.total_value, "big gift broadcast");
                sqlx::query(
                    "UPDATE activity_broadcasts SET status = 'delivered', delivered_at_ms = ?, \
                     attempts = ?, last_error = '' WHERE event_id = ? AND status = 'pending'",
                )
                .bind(now_ms)
                .bind(attempts)
                .bind(&row.event_id)
            }
            Err(error) => {
                let give_up = !error.is_retryable() || attempts >= self.retry.max_attempts;
                let next_attempt_at_ms = now_ms + self.retry.backoff_ms(attempts);
                tracing::warn!(
                    event_id = %row.event_id,
                    room_id = %row.room_id,
                    attempts,
                    give_up,
                    %error,
                    "big gift broadcast failed"
                );
                sqlx::query(
                    "UPDATE activity_broadcasts SET status = ?, attempts = ?, \
                     next_attempt_at_ms = ?, last_error = ? WHERE event_id = ? AND status = 'pending'",
                )
                .bind(if give_up { "failed" } else { "pending" })
                .bind(attempts)
                .bind(next_attempt_at_ms)
                .bind(error.short_summary())
                .bind(&row.event_id)
            }
        };
        if let Err(error) = update.execute(&self.pool).await {
            // The lease runs out and the sweeper retries; Random dedups a resend.
            tracing::warn!(event_id = %row.event_id, %error, "broadcast status update failed");
        }
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

    /// One sweep: claims due rows (compare-and-set on their due time, so
    /// several instances never take the same row) and delivers them.
    pub async fn sweep_once(&self) -> Result<usize, sqlx::Error> {
        let now_ms = service_kit::time::now_ms();
        let due: Vec<(String, i64)> = sqlx::query_as(
            "SELECT event_id, next_attempt_at_ms FROM activity_broadcasts \
             WHERE status = 'pending' AND next_attempt_at_ms <= ? \
             ORDER BY next_attempt_at_ms LIMIT ?",
        )
        .bind(now_ms)
        .bind(self.retry.sweep_batch.max(1))
        .fetch_all(&self.pool)
        .await?;
        let mut delivered = 0;
        for (event_id, due_at_ms) in due {
            let claimed = sqlx::query(
                "UPDATE activity_broadcasts SET next_attempt_at_ms = ? \
                 WHERE event_id = ? AND status = 'pending' AND next_attempt_at_ms = ?",
            )
            .bind(now_ms + self.retry.lease_ms())
            .bind(&event_id)
            .bind(due_at_ms)
            .execute(&self.pool)
            .await?
            .rows_affected();
            if claimed == 0 {
                continue;
            }
            let row: Option<BroadcastRow> = sqlx::query_as(
                "SELECT event_id, room_id, \
                 sender_id, receiver_id, \
                 gift_id, total_value, attempts \
                 FROM activity_broadcasts WHERE event_id = ?",
            )
            .bind(&event_id)
            .fetch_optional(&self.pool)
            .await?;
            if let Some(row) = row {
                self.deliver(&row).await;
                delivered += 1;
            }
        }
        Ok(delivered)
    }

    /// Sweeps every `sweep_interval` until `shutdown`.
    pub async fn run_sweeper(&self, shutdown: CancellationToken) {
        let mut ticker = tokio::time::interval(self.retry.sweep_every());
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            if let Err(error) = self.sweep_once().await {
                tracing::warn!(%error, "broadcast sweep failed");
            }
        }
    }
}
