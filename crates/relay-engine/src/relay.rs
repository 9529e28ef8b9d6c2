//! [`Relay`]: the running relay — lease upkeep, the batch loop with nudge and
//! poll wake-ups, and the backlog gauges. Embeddable: room-service runs the
//! same `Relay` in-process when `outbox_worker.enabled`.

use crate::{
    Error,
    leases::ShardLeases,
    metrics::RelayMetrics,
    publish::Publishers,
    settings::RelaySettings,
    worker::{BatchProcessor, BatchReport, PublishedBatch, Unmarked},
};
use futures::FutureExt;
use service_kit::db::statement::BoundedPool;
use service_kit::time::now_ms;
use std::{sync::Arc, time::Duration};
use tokio::sync::{Notify, watch};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

/// Shortest sleep between idle batches when a wake-up is (over)due.
const MIN_WAKEUP_WAIT: Duration = Duration::from_millis(10);

/// Beyond `publish_timeout`: a batch's publish guard and its marks, before
/// a shard let go of in a rebalance may be taken over (see `ShardLeases::with_handover_ms`).
const HANDOVER_GUARD: Duration = Duration::from_secs(4);

/// How often backlog gauges are refreshed.
const GAUGE_INTERVAL: Duration = Duration::from_secs(5);

/// A configured relay, ready to [`Relay::run`].
#[derive(Debug, Clone)]
pub struct Relay {
    processor: BatchProcessor,
    nudge: Arc<Notify>,
}

impl Relay {
    /// Assembles a relay from validated settings and its publishers. Its
    /// statements run within `pool`'s statement timeout (a bare pool gets
    /// the default).
    pub fn new(
        pool: impl Into<BoundedPool>,
        settings: RelaySettings,
        publishers: Publishers,
        metrics: RelayMetrics,
    ) -> Self {
        let pool = pool.into();
        let lease_ms = i64::try_from(settings.shard_lease.as_millis()).unwrap_or(i64::MAX);
        // In `mq` mode the lease is the claim: a shard let go of in a rebalance
        // waits until the batches under way on it are published and marked.
        let handover =
            if settings.publish_mode == crate::config::PublishMode::Mq && !settings.claim_mq_rows {
                settings.publish_timeout + HANDOVER_GUARD
            } else {
                Duration::ZERO
            };
        let leases = ShardLeases::new(pool.clone(), settings.node_id.clone(), lease_ms)
            .with_handover_ms(i64::try_from(handover.as_millis()).unwrap_or(i64::MAX));
        Self {
            processor: BatchProcessor {
                pool,
                settings,
                publishers,
                metrics,
                leases,
                stopping: CancellationToken::new(),
            },
            nudge: Arc::new(Notify::new()),
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &RelaySettings {
        &self.processor.settings
    }

    /// Connects the producer (if the mode has one) and fetches both topics'
    /// metadata, so the first event after start-up publishes as fast as the
    /// hundredth; the binary is ready only once this succeeded.
    pub async fn warm_up(&self) -> Result<(), Error> {
        let Some(mq) = &self.processor.publishers.mq else {
            return Ok(());
        };
        let settings = &self.processor.settings;
        let topics = [
            settings.room_outbox_topic.clone(),
            settings.treasure_open_topic.clone(),
        ];
        mq.warm_up(&topics, settings.publish_timeout).await
    }

    /// Wakes the loop now (what a nudge does); used by embedders and tests.
    pub fn nudge(&self) {
        self.nudge.notify_one();
    }

    /// The shard leases of this instance (tests and operations).
    pub fn leases(&self) -> &ShardLeases {
        &self.processor.leases
    }

    /// One batch over the given shards (tests and benchmarks drive this directly).
    pub async fn run_batch(&self, shards: &[u16]) -> Result<BatchReport, Error> {
        self.processor.run_batch(shards).await
    }

    /// Runs until `shutdown`: stops claiming new batches, lets the in-flight
    /// batch finish (each publish is bounded by `publish_timeout`), gives its
    /// shard leases back, and returns.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<(), Error> {
        self.processor.stopping = shutdown.clone();
        let settings = self.processor.settings.clone();
        self.processor.leases.ensure_shards().await?;
        let (owned_tx, owned_rx) = watch::channel(Vec::<u16>::new());
        let background = shutdown.child_token();
        let tasks = self.spawn_background(owned_tx, &background);
        tracing::info!(worker = "room_outbox", node_id = %settings.node_id, mode = ?settings.publish_mode, "relay started");

        // The previous chain batch's marks, written while the next batch is
        // scanned, taken and published (see `Recording`).
        let mut recording: Option<Recording> = None;
        let nothing_unmarked = Unmarked::default();
        while !shutdown.is_cancelled() {
            let shards = owned_rx.borrow().clone();
            let unmarked = recording
                .as_ref()
                .map_or(&nothing_unmarked, |previous| &previous.unmarked);
            // The two lanes hold different rows: publish both at once.
            let (chain, delayed) = tokio::join!(
                self.processor.publish_chain_batch(&shards, unmarked),
                self.processor.run_delayed_batch(&shards),
            );
            // At most one batch is being recorded at a time.
            if let Some(previous) = recording.take() {
                previous.finish(&settings.node_id).await;
            }
            let full = match chain {
                Ok(Some(published)) => {
                    let full = published.claimed() >= settings.batch_size;
                    recording = Some(Recording::start(&self.processor, published));
                    full
                }
                Ok(None) => false,
                Err(error) => {
                    // MySQL trouble: the rows stay where they are; try again after a poll interval.
                    tracing::warn!(worker = "room_outbox", node_id = %settings.node_id, %error, "relay batch failed");
                    false
                }
            };
            if let Err(error) = delayed {
                tracing::warn!(worker = "room_outbox", node_id = %settings.node_id, %error, "relay wake-up batch failed");
            }
            if full {
                continue;
            }
            // A nudge that arrived during the batch is a commit waiting to be
            // published: go at once, without the round trip that computes how
            // long to sleep.
            let nudged = self.nudge.notified();
            tokio::pin!(nudged);
            if nudged.as_mut().now_or_never().is_some() {
                continue;
            }
            let wait = self.idle_wait(&shards).await;
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = nudged => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
        if let Some(previous) = recording.take() {
            previous.finish(&settings.node_id).await;
        }
        background.cancel();
        tasks.wait().await;
        if let Some(mq) = &self.processor.publishers.mq {
            mq.flush(settings.publish_timeout);
        }
        if let Err(error) = self.processor.leases.leave().await {
            tracing::warn!(%error, "could not release shard leases; peers take them after expiry");
        }
        tracing::info!(worker = "room_outbox", node_id = %settings.node_id, "relay stopped");
        Ok(())
    }

    /// Starts the relay's background tasks — lease upkeep (publishing the
    /// owned shards on `owned`), the backlog gauges and, when enabled, the
    /// nudge listener — all stopped by `background`.
    fn spawn_background(
        &self,
        owned_tx: watch::Sender<Vec<u16>>,
        background: &CancellationToken,
    ) -> TaskTracker {
        let tasks = TaskTracker::new();
        tasks.spawn(lease_loop(
            self.processor.leases.clone(),
            owned_tx,
            self.nudge.clone(),
            self.processor.metrics.clone(),
            self.processor.settings.shard_lease,
            background.clone(),
        ));
        tasks.spawn(gauge_loop(
            self.processor.pool.clone(),
            self.processor.metrics.clone(),
            background.clone(),
        ));
        if self.processor.settings.nudge_enabled {
            tasks.spawn(crate::nudge::listen(
                self.processor.settings.redis_url.expose().to_owned(),
                self.processor.settings.redis_tls_ca_file.clone(),
                self.nudge.clone(),
                background.clone(),
            ));
        }
        tasks.close();
        tasks
    }

    /// How long an idle relay sleeps: until the next poll, or until the
    /// next delayed wake-up is due if that comes first, so a treasure box
    /// opens on time rather than up to a poll interval late.
    async fn idle_wait(&self, shards: &[u16]) -> Duration {
        let poll_interval = self.processor.settings.poll_interval;
        match crate::store::next_delayed_due(&self.processor.pool, shards).await {
            Ok(Some(due)) => {
                let until_due = u64::try_from(due.saturating_sub(now_ms())).unwrap_or(0);
                // Never below a few ms: a due row we could not claim must not become a busy loop.
                poll_interval.min(Duration::from_millis(until_due).max(MIN_WAKEUP_WAIT))
            }
            _ => poll_interval,
        }
    }
}

/// A published chain batch whose outcomes are being marked in the
/// background, so the relay's critical path is scan → (claim →) publish and
/// the marks' commit (an fsync) overlaps the next batch.
///
/// Order: the next batch treats this batch's acknowledged rows as done (they
/// are on the broker, ahead of anything published later) and every other row
/// of this batch as blocking its room until marked — from memory, since in
/// `mq` mode those rows still read `pending` (`worker::Unmarked`). If the
/// marks fail, the rows are taken again by a later batch (in `direct`/`dual`
/// once their claim expires) and published once more: a late duplicate (at
/// least once, deduplicated by `event_id`), never an event overtaking its
/// room's head.
struct Recording {
    unmarked: Unmarked,
    task: tokio::task::JoinHandle<Result<BatchReport, Error>>,
}

impl Recording {
    fn start(processor: &BatchProcessor, published: PublishedBatch) -> Self {
        let processor = processor.clone();
        Self {
            unmarked: published.unmarked(),
            task: tokio::spawn(async move { processor.record_chain_batch(published).await }),
        }
    }

    async fn finish(self, node_id: &str) {
        match self.task.await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => {
                tracing::warn!(worker = "room_outbox", %node_id, %error, "marking a published batch failed; its rows are published again by a later batch")
            }
            Err(error) => {
                tracing::warn!(worker = "room_outbox", %node_id, %error, "marking task died")
            }
        }
    }
}

async fn lease_loop(
    leases: ShardLeases,
    owned: watch::Sender<Vec<u16>>,
    nudge: Arc<Notify>,
    metrics: RelayMetrics,
    lease: Duration,
    shutdown: CancellationToken,
) {
    // Renew well before expiry so one slow round does not lose the shards.
    let interval = (lease / 3).max(Duration::from_millis(100));
    while !shutdown.is_cancelled() {
        match leases.refresh(now_ms()).await {
            Ok(shards) => {
                metrics.owned_shards.set(shards.len() as i64);
                let changed = *owned.borrow() != shards;
                owned.send_replace(shards);
                if changed {
                    // New shards may hold a backlog: look at once.
                    nudge.notify_one();
                }
            }
            Err(error) => tracing::warn!(%error, "shard lease refresh failed"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

async fn gauge_loop(pool: BoundedPool, metrics: RelayMetrics, shutdown: CancellationToken) {
    while !shutdown.is_cancelled() {
        match backlog_counts(&pool).await {
            Ok((pending, oldest, failed)) => {
                metrics.pending.set(pending);
                let age_ms = oldest.map_or(0, |oldest| (now_ms() - oldest).max(0));
                metrics
                    .oldest_pending_age_seconds
                    .set(age_ms as f64 / 1_000.0);
                metrics.failed.set(failed);
            }
            Err(error) => tracing::debug!(%error, "backlog gauge query failed"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = tokio::time::sleep(GAUGE_INTERVAL) => {}
        }
    }
}

/// Open rows, the oldest open row's commit time and failed rows, within the
/// statement timeout. All three are index range reads (idx_claim,
/// idx_failing), never a table scan. One-shot statements (`persistent(false)`):
/// MariaDB re-executes these cached prepared statements 50-100x slower than
/// fresh ones when other statements ran on the connection in between (1.5-2 s
/// a round against ~23 ms on a million-row outbox); a prepare costs ~0.2 ms.
async fn backlog_counts(pool: &BoundedPool) -> Result<(i64, Option<i64>, i64), Error> {
    pool.run(|connection, _| {
        Box::pin(async move {
            let pending = sqlx::query_scalar(crate::backlog::OPEN_COUNT_SQL)
                .persistent(false)
                .fetch_one(&mut *connection)
                .await?;
            let oldest = sqlx::query_scalar(crate::backlog::OLDEST_OPEN_SQL)
                .persistent(false)
                .fetch_one(&mut *connection)
                .await?;
            let failed = sqlx::query_scalar(crate::backlog::FAILED_COUNT_SQL)
                .persistent(false)
                .fetch_one(&mut *connection)
                .await?;
            Ok((pending, oldest, failed))
        })
    })
    .await
}
