//! Marking a published batch's outcomes in `room_outbox`, under the fence the
//! batch was taken with (docs/design.md#ordering-and-fencing): the claim
//! token of a claimed batch (`direct`, `dual`), or the owner and epoch of the
//! shard leases a batch was published on alone (`mq`). A refused mark means
//! the rows are someone else's now; it is counted
//! (`room_outbox_fenced_marks_total`) and changes nothing.
//!
//! [`Marker`] borrows only what marking needs, so this module stays below
//! `worker`, which publishes the batches and hands their [`Outcome`]s here.

use crate::{
    chain::Outcome, failure::PublishFailure, metrics::RelayMetrics, settings::RelaySettings, store,
    store::OutboxRow,
};
use outbox_schema::OutboxStatus;
use service_kit::db::statement::BoundedPool;
use service_kit::time::now_ms;

/// What one batch did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BatchReport {
    /// Rows taken into the batch: claimed, or in `mq` mode published on the
    /// shard lease alone.
    pub claimed: usize,
    /// Rows marked delivered.
    pub delivered: usize,
    /// Rows marked retryable.
    pub retried: usize,
    /// Rows marked failed (dead letters).
    pub dead_lettered: usize,
    /// Rows released behind a failed head.
    pub released: usize,
    /// Marks refused by the fence (claim token, or shard lease epoch).
    pub fenced: usize,
}

impl BatchReport {
    pub(crate) fn add(&mut self, other: BatchReport) {
        self.claimed += other.claimed;
        self.delivered += other.delivered;
        self.retried += other.retried;
        self.dead_lettered += other.dead_lettered;
        self.released += other.released;
        self.fenced += other.fenced;
    }
}

/// What a batch's marks are conditional on.
#[derive(Debug, Clone)]
pub(crate) enum Fence {
    /// The rows were claimed with this token (`direct`, `dual`).
    Claim(u64),
    /// The rows were published on these shard leases (shard → epoch) alone (`mq`).
    Lease(Vec<(u16, u64)>),
}

/// What marking a batch uses of the relay's batch processor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Marker<'a> {
    pub(crate) pool: &'a BoundedPool,
    pub(crate) settings: &'a RelaySettings,
    pub(crate) metrics: &'a RelayMetrics,
}

impl Marker<'_> {
    /// Writes a batch's outcomes: one statement for the delivered rows, one
    /// per failure, the released rows handed back (`direct`/`dual`) or left
    /// as they were (`mq`, never written).
    pub(crate) async fn record(
        &self,
        outcomes: Vec<Outcome>,
        fence: &Fence,
    ) -> Result<BatchReport, crate::Error> {
        let node_id = self.settings.node_id.as_str();
        let mut report = BatchReport::default();
        let mut delivered = Vec::new();
        let mut released = Vec::new();
        let now = now_ms();
        for outcome in outcomes {
            match outcome {
                Outcome::Delivered(id) => delivered.push(id),
                Outcome::Released(id) => released.push(id),
                Outcome::Failed(row, failure) => {
                    self.record_failure(&row, &failure, fence, now, &mut report)
                        .await?
                }
            }
        }
        let marked = match fence {
            Fence::Claim(token) => {
                store::mark_delivered(self.pool, &delivered, *token, now).await?
            }
            Fence::Lease(epochs) => {
                store::mark_delivered_leased(self.pool, &delivered, node_id, epochs, now).await?
            }
        } as usize;
        if marked < delivered.len() {
            let fenced = delivered.len() - marked;
            report.fenced += fenced;
            self.metrics.fenced_marks.inc_by(fenced as u64);
            tracing::warn!(node_id = %self.settings.node_id, fenced, "delivered marks refused by a newer claim or lease");
        }
        report.delivered += marked;
        report.released += match fence {
            Fence::Claim(token) => store::release(self.pool, &released, *token).await? as usize,
            // Never written: they still read as they did before the batch.
            Fence::Lease(_) => released.len(),
        };
        Ok(report)
    }

    /// Marks one failed row retryable (due again after its backoff) or
    /// dead-lettered, fenced like the batch's other marks, and logs it.
    async fn record_failure(
        &self,
        row: &OutboxRow,
        failure: &PublishFailure,
        fence: &Fence,
        now: i64,
        report: &mut BatchReport,
    ) -> Result<(), crate::Error> {
        let node_id = self.settings.node_id.as_str();
        let attempts = row.retry_count.saturating_add(1);
        let dead = !failure.retryable || attempts >= self.settings.max_retry_count;
        let delay = self.settings.backoff.delay(attempts);
        let next_retry_at_ms = now + millis(delay);
        let marked = match fence {
            Fence::Claim(token) => {
                store::mark_failure(
                    self.pool,
                    row.id,
                    *token,
                    dead,
                    next_retry_at_ms,
                    &failure.message,
                )
                .await?
            }
            Fence::Lease(epochs) => match epoch_of(epochs, row.shard) {
                Some(epoch) => {
                    store::mark_failure_leased(
                        self.pool,
                        row.id,
                        node_id,
                        epoch,
                        dead,
                        next_retry_at_ms,
                        &failure.message,
                    )
                    .await?
                }
                None => false,
            },
        };
        if !marked {
            report.fenced += 1;
            self.metrics.fenced_marks.inc();
        } else if dead {
            report.dead_lettered += 1;
            self.metrics.dead_letters.inc();
            tracing::error!(
                worker = "room_outbox",
                node_id = %self.settings.node_id,
                event_id = %row.event_id,
                event_type = %row.event_type,
                room_id = %row.room_id,
                retry_count = attempts,
                status = OutboxStatus::Failed.as_str(),
                final_failure = !failure.retryable,
                error = %failure.message,
                "outbox event dead-lettered; room moves on"
            );
        } else {
            report.retried += 1;
            tracing::warn!(
                worker = "room_outbox",
                node_id = %self.settings.node_id,
                event_id = %row.event_id,
                event_type = %row.event_type,
                room_id = %row.room_id,
                retry_count = attempts,
                status = OutboxStatus::Retryable.as_str(),
                next_retry_at_ms,
                error = %failure.message,
                "outbox publish failed; retrying"
            );
        }
        Ok(())
    }
}

fn epoch_of(epochs: &[(u16, u64)], shard: u16) -> Option<u64> {
    epochs
        .iter()
        .find(|(held, _)| *held == shard)
        .map(|(_, epoch)| *epoch)
}

fn millis(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
