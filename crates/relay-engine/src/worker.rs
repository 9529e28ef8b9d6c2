//! The relay loop: take a batch of due rows from the owned shards, publish
//! them with per-room order, mark the outcomes; repeat at once after a full
//! batch, otherwise wait for a commit nudge or the poll interval.
//!
//! How a batch is taken depends on the mode (docs/design.md#ordering-and-fencing).
//! In `mq` mode the shard lease is the claim: the relay publishes the open
//! rows of the shards it holds, within the lease's time on its own clock, and
//! writes each row once — `delivered` in one statement per batch, or
//! `retryable`/`failed` — fenced by the lease's epoch. In `direct` and `dual`
//! mode (slow request/response publishes) rows are first claimed
//! (`delivering` with a claim token and `lock_until_ms`) and marked under the
//! token.
//!
//! Per-room order: rows are scanned in commit (`id`) order; a room whose
//! earliest open row is not due (retry pending, claimed elsewhere, or still
//! unmarked from the previous batch) is skipped entirely, so nothing
//! overtakes its head. Within a batch a room's rows form a chain published in
//! order (see `chain`: pipelined on the broker in `mq` mode); different
//! rooms' chains go out together. When a chain link fails, the rest of that
//! chain is released, to follow the head once it succeeds or is dead-lettered.

use crate::{
    chain::{ChainPublisher, Outcome},
    config::PublishMode,
    leases::ShardLeases,
    marks::{Fence, Marker},
    metrics::RelayMetrics,
    publish::Publishers,
    settings::RelaySettings,
    store::{self, OutboxRow},
};
use service_kit::db::statement::BoundedPool;
use service_kit::time::now_ms;
use std::collections::{HashMap, HashSet};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

pub use crate::marks::BatchReport;

/// Scan pages per batch: rows of blocked rooms do not count towards the batch,
/// so a few blocked rooms with long backlogs cannot starve the rest of a shard.
const MAX_SCAN_PAGES: usize = 4;

/// A chain batch published but not yet recorded in `room_outbox`.
pub(crate) struct PublishedBatch {
    fence: Fence,
    claimed: usize,
    outcomes: Vec<Outcome>,
    orphans: Vec<u64>,
}

/// The rows of a published batch whose marks are still being written, as the
/// next batch must see them: the table does not say yet what became of them.
#[derive(Debug, Default)]
pub(crate) struct Unmarked {
    /// Acknowledged by the publishers: done, ahead of anything published later.
    acknowledged: HashSet<u64>,
    /// Failed or released: their room waits until they are marked.
    unsettled: HashSet<u64>,
}

impl PublishedBatch {
    /// Rows taken into the batch.
    pub(crate) fn claimed(&self) -> usize {
        self.claimed
    }

    /// The batch's rows as the next batch must treat them until marked.
    pub(crate) fn unmarked(&self) -> Unmarked {
        let mut unmarked = Unmarked::default();
        for outcome in &self.outcomes {
            match outcome {
                Outcome::Delivered(id) => unmarked.acknowledged.insert(*id),
                Outcome::Released(id) => unmarked.unsettled.insert(*id),
                Outcome::Failed(row, _) => unmarked.unsettled.insert(row.id),
            };
        }
        unmarked.unsettled.extend(self.orphans.iter().copied());
        unmarked
    }
}

/// One relay's batch processor.
#[derive(Debug, Clone)]
pub struct BatchProcessor {
    pub(crate) pool: BoundedPool,
    pub(crate) settings: RelaySettings,
    pub(crate) publishers: Publishers,
    pub(crate) metrics: RelayMetrics,
    /// This instance's shard leases: in `mq` mode, what a batch publishes on.
    pub(crate) leases: ShardLeases,
    /// Cancelled when the relay starts to stop: a batch that has not claimed
    /// (or, in `mq` mode, published) yet takes nothing, so shutdown only waits
    /// for work already under way.
    pub(crate) stopping: CancellationToken,
}

impl BatchProcessor {
    /// The marking half of the processor (see `marks`).
    fn marker(&self) -> Marker<'_> {
        Marker {
            pool: &self.pool,
            settings: &self.settings,
            metrics: &self.metrics,
        }
    }

    /// The publishing half of the processor (see `chain`).
    fn chain_publisher(&self) -> ChainPublisher<'_> {
        ChainPublisher {
            publishers: &self.publishers,
            settings: &self.settings,
            metrics: &self.metrics,
        }
    }

    /// Claims `ids` under `token` until `claim_lease` from `now` (the
    /// `delivering` write of `direct`/`dual`); the ids this relay now holds.
    async fn claim(&self, ids: &[u64], token: u64, now: i64) -> Result<HashSet<u64>, crate::Error> {
        let claimed = store::claim(
            &self.pool,
            ids,
            &self.settings.node_id,
            token,
            now,
            now + millis(self.settings.claim_lease),
        )
        .await?;
        Ok(claimed.into_iter().collect())
    }

    /// True when the shard lease is the claim: `mq` mode, unless the two-write
    /// path is asked for (`RelaySettings::claim_mq_rows`).
    fn lease_is_claim(&self) -> bool {
        self.settings.publish_mode == PublishMode::Mq && !self.settings.claim_mq_rows
    }

    /// Processes one batch of the chain lane and one of the delayed lane in `shards`.
    pub async fn run_batch(&self, shards: &[u16]) -> Result<BatchReport, crate::Error> {
        let mut report = self.run_chain_batch(shards).await?;
        report.add(self.run_delayed_batch(shards).await?);
        Ok(report)
    }

    async fn run_chain_batch(&self, shards: &[u16]) -> Result<BatchReport, crate::Error> {
        match self
            .publish_chain_batch(shards, &Unmarked::default())
            .await?
        {
            Some(published) => self.record_chain_batch(published).await,
            None => Ok(BatchReport::default()),
        }
    }

    /// Scans, takes and publishes one chain batch; the outcomes are not yet
    /// recorded. `unmarked` is the previous batch, whose marks are still being
    /// written: its acknowledged rows count as done (neither blocking their
    /// room nor published again), its other rows block their room.
    pub(crate) async fn publish_chain_batch(
        &self,
        shards: &[u16],
        unmarked: &Unmarked,
    ) -> Result<Option<PublishedBatch>, crate::Error> {
        let started = Instant::now();
        let now = now_ms();
        // In `mq` mode only the leases held, and only while they last by this
        // process's own clock: a relay resumed after a pause publishes nothing.
        let lease = self.lease_is_claim().then(|| self.leases.held());
        if lease
            .as_ref()
            .is_some_and(|held| !held.valid_at(Instant::now()))
        {
            return Ok(None);
        }
        let chosen = self.choose_chain_rows(shards, now, unmarked).await?;
        if chosen.is_empty() {
            return Ok(None);
        }
        let scanned = started.elapsed();
        if self.stopping.is_cancelled() {
            return Ok(None);
        }
        let (fence, chains, orphans, publish_until) = match lease {
            Some(held) => {
                // The scan may have been slow (or paused): look again.
                if !held.valid_at(Instant::now()) {
                    return Ok(None);
                }
                let epochs = held.epochs_of(shards);
                let chosen = chosen
                    .into_iter()
                    .filter(|row| epochs.contains_key(&row.shard));
                let (chains, _) = room_chains(chosen, |_| true);
                (
                    Fence::Lease(epochs.into_iter().collect()),
                    chains,
                    Vec::new(),
                    held.valid_until,
                )
            }
            None => {
                let token = claim_token();
                let ids: Vec<u64> = chosen.iter().map(|row| row.id).collect();
                let claimed = self.claim(&ids, token, now).await?;
                let (chains, orphans) = room_chains(chosen, |row| claimed.contains(&row.id));
                (Fence::Claim(token), chains, orphans, None)
            }
        };
        let claimed = chains.iter().map(Vec::len).sum::<usize>() + orphans.len();
        let claimed_at = started.elapsed();
        let rooms = chains.len();
        let deepest = chains.iter().map(Vec::len).max().unwrap_or(0);
        let outcomes = self
            .chain_publisher()
            .publish_chains(chains, publish_until)
            .await;
        // Where a batch's time goes: the evidence for tuning;
        // `RUST_LOG=relay_engine::worker=debug` shows it.
        tracing::debug!(
            rows = claimed,
            rooms,
            deepest,
            scan_ms = scanned.as_secs_f64() * 1e3,
            claim_ms = (claimed_at - scanned).as_secs_f64() * 1e3,
            publish_ms = (started.elapsed() - claimed_at).as_secs_f64() * 1e3,
            "chain batch published"
        );
        Ok(Some(PublishedBatch {
            fence,
            claimed,
            outcomes,
            orphans,
        }))
    }

    /// Marks a published batch's outcomes (fenced by its claim token or lease epochs).
    pub(crate) async fn record_chain_batch(
        &self,
        published: PublishedBatch,
    ) -> Result<BatchReport, crate::Error> {
        let started = Instant::now();
        let mut report = BatchReport {
            claimed: published.claimed,
            ..BatchReport::default()
        };
        report.add(
            self.marker()
                .record(published.outcomes, &published.fence)
                .await?,
        );
        if let Fence::Claim(token) = published.fence {
            report.released +=
                store::release(&self.pool, &published.orphans, token).await? as usize;
        }
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
        unmarked: &Unmarked,
    ) -> Result<Vec<OutboxRow>, crate::Error> {
        let batch = self.settings.batch_size;
        // One batch's worth per page: the common case (nothing blocked) reads
        // no row it does not claim; blocked rooms cost further pages.
        let page = batch;
        let mut blocked: HashSet<String> = HashSet::new();
        let mut chosen = Vec::with_capacity(batch);
        let mut after_id = 0;
        // The previous batch's acknowledged rows still read open while their
        // mark is written: the scan leaves them out in the index, so they are
        // neither read nor published again.
        let acknowledged: Vec<u64> = unmarked.acknowledged.iter().copied().collect();
        for _ in 0..MAX_SCAN_PAGES {
            let rows = store::scan_chain(&self.pool, shards, after_id, &acknowledged, page).await?;
            let full_page = rows.len() == page;
            for row in rows {
                after_id = row.id;
                if blocked.contains(&row.room_id) {
                    continue;
                }
                // In `mq` mode an unmarked failure still reads `pending`:
                // only memory knows its room must wait.
                if unmarked.unsettled.contains(&row.id) || !row.is_due(now) {
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

    /// Delayed wake-ups: independent of each other and of the room chain.
    pub(crate) async fn run_delayed_batch(
        &self,
        shards: &[u16],
    ) -> Result<BatchReport, crate::Error> {
        let now = now_ms();
        let lease = self.lease_is_claim().then(|| self.leases.held());
        if lease
            .as_ref()
            .is_some_and(|held| !held.valid_at(Instant::now()))
        {
            return Ok(BatchReport::default());
        }
        let due = store::scan_delayed(&self.pool, shards, now, self.settings.batch_size).await?;
        if due.is_empty() || self.stopping.is_cancelled() {
            return Ok(BatchReport::default());
        }
        let (fence, rows) = match lease {
            Some(held) => {
                if !held.valid_at(Instant::now()) {
                    return Ok(BatchReport::default());
                }
                let epochs = held.epochs_of(shards);
                let rows: Vec<OutboxRow> = due
                    .into_iter()
                    .filter(|row| epochs.contains_key(&row.shard))
                    .collect();
                (Fence::Lease(epochs.into_iter().collect()), rows)
            }
            None => {
                let token = claim_token();
                let ids: Vec<u64> = due.iter().map(|row| row.id).collect();
                let claimed = self.claim(&ids, token, now).await?;
                let rows = due
                    .into_iter()
                    .filter(|row| claimed.contains(&row.id))
                    .collect();
                (Fence::Claim(token), rows)
            }
        };
        let claimed = rows.len();
        let outcomes = futures::future::join_all(rows.into_iter().map(|row| async move {
            match self.chain_publisher().publish_one(&row).await {
                Ok(()) => Outcome::Delivered(row.id),
                Err(failure) => Outcome::Failed(Box::new(row), failure),
            }
        }))
        .await;
        let mut report = self.marker().record(outcomes, &fence).await?;
        report.claimed = claimed;
        Ok(report)
    }
}

/// Splits `chosen` (commit order) into room chains of the rows `taken`
/// accepts; a room whose row was not taken (someone else changed it) must not
/// publish anything after it, so its later rows come back as orphans.
fn room_chains(
    chosen: impl IntoIterator<Item = OutboxRow>,
    taken: impl Fn(&OutboxRow) -> bool,
) -> (Vec<Vec<OutboxRow>>, Vec<u64>) {
    let mut chains: Vec<Vec<OutboxRow>> = Vec::new();
    let mut chain_of_room: HashMap<String, usize> = HashMap::new();
    let mut broken_rooms: HashSet<String> = HashSet::new();
    let mut orphans = Vec::new();
    for row in chosen {
        if !taken(&row) {
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
    (chains, orphans)
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
