//! The relay loop: claim a batch of due rows from the owned shards, publish
//! them with per-room order, mark the outcomes; repeat at once after a full
//! batch, otherwise wait for a commit nudge or the poll interval.
//!
//! Per-room order: rows are scanned in commit (`id`) order; a room whose
//! earliest open row is not due (retry pending, or claimed elsewhere) is
//! skipped entirely, so nothing overtakes its head. Within a batch a room's
//! rows form a chain published in order (see `chain`: pipelined on the broker
//! in `mq` mode); different rooms' chains go out together. When a chain link
//! fails, the rest of that chain is released, to follow the head once it
//! succeeds or is dead-lettered.

use crate::{
    chain::{ChainPublisher, Outcome},
    metrics::RelayMetrics,
    publish::Publishers,
    settings::RelaySettings,
    store::{self, OutboxRow},
};
use outbox_schema::OutboxStatus;
use service_kit::time::now_ms;
use sqlx::MySqlPool;
use std::collections::{HashMap, HashSet};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// Scan pages per batch: rows of blocked rooms do not count towards the batch,
/// so a few blocked rooms with long backlogs cannot starve the rest of a shard.
const MAX_SCAN_PAGES: usize = 4;

/// What one batch did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BatchReport {
    /// Rows claimed.
    pub claimed: usize,
    /// Rows marked delivered.
    pub delivered: usize,
    /// Rows marked retryable.
    pub retried: usize,
    /// Rows marked failed (dead letters).
    pub dead_lettered: usize,
    /// Rows released behind a failed head.
    pub released: usize,
    /// Marks refused by the fencing token.
    pub fenced: usize,
}

impl BatchReport {
    fn add(&mut self, other: BatchReport) {
        self.claimed += other.claimed;
        self.delivered += other.delivered;
        self.retried += other.retried;
        self.dead_lettered += other.dead_lettered;
        self.released += other.released;
        self.fenced += other.fenced;
    }
}

/// A chain batch published but not yet recorded in `room_outbox`.
pub(crate) struct PublishedBatch {
    token: u64,
    claimed: usize,
    outcomes: Vec<Outcome>,
    orphans: Vec<u64>,
}

impl PublishedBatch {
    /// Rows claimed.
    pub(crate) fn claimed(&self) -> usize {
        self.claimed
    }

    /// Rows the publishers acknowledged.
    pub(crate) fn acknowledged(&self) -> HashSet<u64> {
        self.outcomes
            .iter()
            .filter_map(|outcome| match outcome {
                Outcome::Delivered(id) => Some(*id),
                _ => None,
            })
            .collect()
    }
}

/// One relay's batch processor.
#[derive(Debug, Clone)]
pub struct BatchProcessor {
    pub(crate) pool: MySqlPool,
    pub(crate) settings: RelaySettings,
    pub(crate) publishers: Publishers,
    pub(crate) metrics: RelayMetrics,
    /// Cancelled when the relay starts to stop: a batch that has not claimed
    /// yet claims nothing, so shutdown only waits for work already claimed.
    pub(crate) stopping: CancellationToken,
}

impl BatchProcessor {
    /// The publishing half of the processor (see `chain`).
    fn chain_publisher(&self) -> ChainPublisher<'_> {
        ChainPublisher {
            publishers: &self.publishers,
            settings: &self.settings,
            metrics: &self.metrics,
        }
    }

    /// Processes one batch of the chain lane and one of the delayed lane in `shards`.
    pub async fn run_batch(&self, shards: &[u16]) -> Result<BatchReport, crate::Error> {
        let mut report = self.run_chain_batch(shards).await?;
        report.add(self.run_delayed_batch(shards).await?);
        Ok(report)
    }

    async fn run_chain_batch(&self, shards: &[u16]) -> Result<BatchReport, crate::Error> {
        match self.publish_chain_batch(shards, &HashSet::new()).await? {
            Some(published) => self.record_chain_batch(published).await,
            None => Ok(BatchReport::default()),
        }
    }

    /// Scans, claims and publishes one chain batch; the outcomes are not yet
    /// recorded. Rows in `acknowledged` (published by the previous batch,
    /// whose marks are still being written) count as done: they neither block
    /// their room nor get claimed again.
    pub(crate) async fn publish_chain_batch(
        &self,
        shards: &[u16],
        acknowledged: &HashSet<u64>,
    ) -> Result<Option<PublishedBatch>, crate::Error> {
        let started = Instant::now();
        let now = now_ms();
        let chosen = self.choose_chain_rows(shards, now, acknowledged).await?;
        if chosen.is_empty() {
            return Ok(None);
        }
        let scanned = started.elapsed();
        if self.stopping.is_cancelled() {
            return Ok(None);
        }
        let token = claim_token();
        let ids: Vec<u64> = chosen.iter().map(|row| row.id).collect();
        let claimed: HashSet<u64> = store::claim(
            &self.pool,
            &ids,
            &self.settings.node_id,
            token,
            now,
            now + millis(self.settings.claim_lease),
        )
        .await?
        .into_iter()
        .collect();

        // Chains per room, in commit order. A room whose row was not claimed
        // (someone else changed it) must not publish anything after it.
        let mut chains: Vec<Vec<OutboxRow>> = Vec::new();
        let mut chain_of_room: HashMap<String, usize> = HashMap::new();
        let mut broken_rooms: HashSet<String> = HashSet::new();
        let mut orphans = Vec::new();
        for row in chosen {
            if !claimed.contains(&row.id) {
                broken_rooms.insert(row.room_id.clone());
                continue;
            }
            if broken_rooms.contains(&row.room_id) {
                orphans.push(row.id);
                continue;
            }
            let index = *chain_of_room.entry(row.room_id.clone()).or_insert_with(|| {
                chains.push(Vec::new());
                chains.len() - 1
            });
            chains[index].push(row);
        }
        let claimed_at = started.elapsed();
        let rooms = chains.len();
        let deepest = chains.iter().map(Vec::len).max().unwrap_or(0);
        let outcomes = self.chain_publisher().publish_chains(chains).await;
        // Where a batch's time goes: the evidence for tuning;
        // `RUST_LOG=outbox_relay::worker=debug` shows it.
        tracing::debug!(
            rows = claimed.len(),
            rooms,
            deepest,
            scan_ms = scanned.as_secs_f64() * 1e3,
            claim_ms = (claimed_at - scanned).as_secs_f64() * 1e3,
            publish_ms = (started.elapsed() - claimed_at).as_secs_f64() * 1e3,
            "chain batch published"
        );
        Ok(Some(PublishedBatch {
            token,
            claimed: claimed.len(),
            outcomes,
            orphans,
        }))
    }

    /// Marks a published batch's outcomes (fenced by its claim token).
    pub(crate) async fn record_chain_batch(
        &self,
        published: PublishedBatch,
    ) -> Result<BatchReport, crate::Error> {
        let started = Instant::now();
        let mut report = BatchReport {
            claimed: published.claimed,
            ..BatchReport::default()
        };
        report.add(self.record(published.outcomes, published.token).await?);
        report.released +=
            store::release(&self.pool, &published.orphans, published.token).await? as usize;
        tracing::debug!(
            rows = published.claimed,
            mark_ms = started.elapsed().as_secs_f64() * 1e3,
            "chain batch recorded"
        );
        Ok(report)
    }

    /// Scans the owned shards' backlog in commit order and picks up to
    /// `batch_size` due rows, never one that would overtake its room's head.
    async fn choose_chain_rows(
        &self,
        shards: &[u16],
        now: i64,
        acknowledged: &HashSet<u64>,
    ) -> Result<Vec<OutboxRow>, crate::Error> {
        let batch = self.settings.batch_size;
        // One batch's worth per page: the common case (nothing blocked) reads
        // no row it does not claim; blocked rooms cost further pages.
        let page = batch;
        let mut blocked: HashSet<String> = HashSet::new();
        let mut chosen = Vec::with_capacity(batch);
        let mut after_id = 0;
        for _ in 0..MAX_SCAN_PAGES {
            let rows = store::scan_chain(&self.pool, shards, after_id, page).await?;
            let full_page = rows.len() == page;
            for row in rows {
                after_id = row.id;
                if acknowledged.contains(&row.id) {
                    continue;
                }
                if blocked.contains(&row.room_id) {
                    continue;
                }
                if !row.is_due(now) {
                    blocked.insert(row.room_id.clone());
                    continue;
                }
                chosen.push(row);
                if chosen.len() == batch {
                    return Ok(chosen);
                }
            }
            if !full_page {
                break;
            }
        }
        Ok(chosen)
    }

    async fn record(
        &self,
        outcomes: Vec<Outcome>,
        token: u64,
    ) -> Result<BatchReport, crate::Error> {
        let mut report = BatchReport::default();
        let mut delivered = Vec::new();
        let mut released = Vec::new();
        let now = now_ms();
        for outcome in outcomes {
            match outcome {
                Outcome::Delivered(id) => delivered.push(id),
                Outcome::Released(id) => released.push(id),
                Outcome::Failed(row, failure) => {
                    let attempts = row.retry_count.saturating_add(1);
                    let dead = !failure.retryable || attempts >= self.settings.max_retry_count;
                    let delay = self.settings.backoff.delay(attempts);
                    let next_retry_at_ms = now + millis(delay);
                    let marked = store::mark_failure(
                        &self.pool,
                        row.id,
                        token,
                        dead,
                        next_retry_at_ms,
                        &failure.message,
                    )
                    .await?;
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
                }
            }
        }
        let marked = store::mark_delivered(&self.pool, &delivered, token, now).await? as usize;
        if marked < delivered.len() {
            let fenced = delivered.len() - marked;
            report.fenced += fenced;
            self.metrics.fenced_marks.inc_by(fenced as u64);
            tracing::warn!(node_id = %self.settings.node_id, fenced, "delivered marks refused by a newer claim");
        }
        report.delivered += marked;
        report.released += store::release(&self.pool, &released, token).await? as usize;
        Ok(report)
    }

    /// Delayed wake-ups: independent of each other and of the room chain.
    pub(crate) async fn run_delayed_batch(
        &self,
        shards: &[u16],
    ) -> Result<BatchReport, crate::Error> {
        let now = now_ms();
        let due = store::scan_delayed(&self.pool, shards, now, self.settings.batch_size).await?;
        if due.is_empty() || self.stopping.is_cancelled() {
            return Ok(BatchReport::default());
        }
        let token = claim_token();
        let ids: Vec<u64> = due.iter().map(|row| row.id).collect();
        let claimed: HashSet<u64> = store::claim(
            &self.pool,
            &ids,
            &self.settings.node_id,
            token,
            now,
            now + millis(self.settings.claim_lease),
        )
        .await?
        .into_iter()
        .collect();
        let rows: Vec<OutboxRow> = due
            .into_iter()
            .filter(|row| claimed.contains(&row.id))
            .collect();
        let outcomes = futures::future::join_all(rows.into_iter().map(|row| async move {
            match self.chain_publisher().publish_one(&row).await {
                Ok(()) => Outcome::Delivered(row.id),
                Err(failure) => Outcome::Failed(Box::new(row), failure),
            }
        }))
        .await;
        let mut report = self.record(outcomes, token).await?;
        report.claimed = claimed.len();
        Ok(report)
    }
}

/// A fresh fencing token for one claim: random, non-zero (0 means "never claimed").
fn claim_token() -> u64 {
    loop {
        let token = rand::random::<u64>() >> 1;
        if token != 0 {
            return token;
        }
    }
}

fn millis(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
