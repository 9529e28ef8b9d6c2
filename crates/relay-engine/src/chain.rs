//! Publishing one batch's room chains and turning the results into per-row
//! outcomes for `worker::record`.
//!
//! `mq` mode pipelines the whole batch: every chain's rows are enqueued on
//! the idempotent producer first, then the acknowledgements are collected,
//! so a batch costs about one produce round trip however deep its chains are
//! (publishing a chain one acknowledged link at a time made a batch cost
//! chain depth × round trip, which grew the next batch's chains in turn).
//! Direct sinks are request/response calls, so `direct` and `dual` still
//! publish a chain's links one after another.
//!
//! In both, the first failing link of a chain is the one that fails; the rows
//! behind it are released to follow it later. A batch published on the shard
//! lease alone (`mq` mode) carries the time its lease can no longer be relied
//! on: no row is started after it, and the rows not started are released.
//!
//! [`ChainPublisher`] borrows only what publishing needs (publishers,
//! settings, metrics), so this module stays below `worker`, which claims the
//! batches, calls it and records its [`Outcome`]s.

use crate::{
    metrics::RelayMetrics,
    publish::{InFlight, Pipeline, PublishFailure, Publishers},
    settings::RelaySettings,
    store::OutboxRow,
};
use service_kit::time::now_ms;
use std::time::{Duration, Instant};

/// Grace beyond `publish_timeout` before the relay stops waiting for a publisher.
const PUBLISH_GUARD: Duration = Duration::from_secs(2);

/// What became of one claimed row.
pub(crate) enum Outcome {
    Delivered(u64),
    Failed(Box<OutboxRow>, PublishFailure),
    Released(u64),
}

/// What publishing a batch's rows uses of the relay's batch processor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChainPublisher<'a> {
    pub(crate) publishers: &'a Publishers,
    pub(crate) settings: &'a RelaySettings,
    pub(crate) metrics: &'a RelayMetrics,
}

impl ChainPublisher<'_> {
    /// Publishes `chains` (each one room's rows in commit order), starting
    /// no row at or after `publish_until`.
    pub(crate) async fn publish_chains(
        &self,
        chains: Vec<Vec<OutboxRow>>,
        publish_until: Option<Instant>,
    ) -> Vec<Outcome> {
        let rows = chains.iter().map(Vec::len).sum::<usize>() as i64;
        let _publishing = Publishing::start(&self.metrics.publishing, rows);
        let may_start = || publish_until.is_none_or(|until| Instant::now() < until);
        let outcomes = if let Some(pipeline) = self.publishers.pipeline() {
            self.publish_pipelined(&pipeline, chains, &may_start).await
        } else {
            futures::future::join_all(
                chains
                    .into_iter()
                    .map(|chain| self.publish_in_turn(chain, &may_start)),
            )
            .await
        };
        outcomes.into_iter().flatten().collect()
    }

    /// Publishes one row and waits for it (delayed wake-ups, direct sinks).
    pub(crate) async fn publish_one(&self, row: &OutboxRow) -> Result<(), PublishFailure> {
        let _publishing = Publishing::start(&self.metrics.publishing, 1);
        self.publish_row(row).await
    }

    /// [`Self::publish_one`] inside a batch already counted as publishing.
    async fn publish_row(&self, row: &OutboxRow) -> Result<(), PublishFailure> {
        let started = Instant::now();
        let timeout = self.settings.publish_timeout;
        // The publishers enforce `publish_timeout` themselves (the producer's
        // message timeout, the sinks' request deadlines), which is what keeps a
        // given-up message from landing later; this outer guard only catches a hang.
        let result = guarded(
            started + timeout + PUBLISH_GUARD,
            self.publishers.publish(row, timeout),
        )
        .await;
        self.observe(row, started, result)
    }

    async fn publish_in_turn(
        &self,
        chain: Vec<OutboxRow>,
        may_start: &impl Fn() -> bool,
    ) -> Vec<Outcome> {
        let mut outcomes = Vec::with_capacity(chain.len());
        let mut rows = chain.into_iter();
        while let Some(row) = rows.next() {
            if !may_start() {
                outcomes.push(Outcome::Released(row.id));
                outcomes.extend(rows.by_ref().map(|rest| Outcome::Released(rest.id)));
                break;
            }
            match self.publish_row(&row).await {
                Ok(()) => outcomes.push(Outcome::Delivered(row.id)),
                Err(failure) => {
                    outcomes.push(Outcome::Failed(Box::new(row), failure));
                    outcomes.extend(rows.by_ref().map(|rest| Outcome::Released(rest.id)));
                }
            }
        }
        outcomes
    }

    async fn publish_pipelined(
        &self,
        pipeline: &Pipeline<'_>,
        chains: Vec<Vec<OutboxRow>>,
        may_start: &impl Fn() -> bool,
    ) -> Vec<Vec<Outcome>> {
        let timeout = self.settings.publish_timeout;
        let enqueued_at = Instant::now();
        let mut started = Vec::with_capacity(chains.len());
        for chain in chains {
            let mut links = Vec::with_capacity(chain.len());
            let mut rows = chain.into_iter().peekable();
            while let Some(row) = rows.next_if(|_| may_start()) {
                let in_flight = pipeline.start(&row, timeout).await;
                let enqueued = in_flight.enqueued();
                links.push((row, in_flight));
                if !enqueued {
                    // Nothing may go out behind a row that never reached the queue.
                    break;
                }
            }
            let unsent: Vec<u64> = rows.map(|row| row.id).collect();
            started.push((links, unsent));
        }
        let deadline = enqueued_at + timeout + PUBLISH_GUARD;
        let settled = started
            .into_iter()
            .map(|(links, unsent)| self.settle(links, unsent, enqueued_at, deadline));
        futures::future::join_all(settled).await
    }

    /// Collects a pipelined chain's acknowledgements in order.
    async fn settle(
        &self,
        links: Vec<(OutboxRow, InFlight)>,
        unsent: Vec<u64>,
        enqueued_at: Instant,
        deadline: Instant,
    ) -> Vec<Outcome> {
        let mut outcomes = Vec::with_capacity(links.len() + unsent.len());
        let mut head_failed = false;
        for (row, in_flight) in links {
            let result = guarded(deadline, in_flight.finish()).await;
            match (self.observe(&row, enqueued_at, result), head_failed) {
                (Ok(()), false) => outcomes.push(Outcome::Delivered(row.id)),
                (Ok(()), true) => {
                    // The producer keeps a partition in order across retries;
                    // only a row it gave up on (message timeout) can leave a
                    // later one acknowledged. The broker has it, so it is
                    // delivered; say loudly that it went ahead of its head.
                    tracing::error!(
                        worker = "room_outbox",
                        node_id = %self.settings.node_id,
                        room_id = %row.room_id,
                        event_id = %row.event_id,
                        "outbox event acknowledged after an earlier event of its room failed"
                    );
                    outcomes.push(Outcome::Delivered(row.id));
                }
                // Behind a failed head: not counted as an attempt of its own.
                (Err(_), true) => outcomes.push(Outcome::Released(row.id)),
                (Err(failure), false) => {
                    head_failed = true;
                    outcomes.push(Outcome::Failed(Box::new(row), failure));
                }
            }
        }
        outcomes.extend(unsent.into_iter().map(Outcome::Released));
        outcomes
    }

    /// Metrics of one publish. The failure is logged where its new status is
    /// known (`BatchProcessor::finish`), with the retry count it now has.
    fn observe(
        &self,
        row: &OutboxRow,
        started: Instant,
        result: Result<(), PublishFailure>,
    ) -> Result<(), PublishFailure> {
        self.metrics
            .publish_latency_seconds
            .observe(started.elapsed().as_secs_f64());
        match &result {
            Ok(()) => {
                self.metrics.publish_success.inc();
                // Commit → publish lag of room events; wake-ups are late on purpose.
                if row.lane == outbox_schema::row::LANE_CHAIN {
                    let lag_ms = (now_ms() - row.created_at_ms).max(0);
                    self.metrics
                        .commit_to_publish_lag_seconds
                        .observe(lag_ms as f64 / 1_000.0);
                }
            }
            Err(_) => {
                self.metrics.publish_failure.inc();
            }
        }
        result
    }
}

/// Rows counted in `room_outbox_publishing` for as long as this lives (also
/// when a stuck publish is dropped at shutdown).
struct Publishing<'a> {
    gauge: &'a prometheus_client::metrics::gauge::Gauge,
    rows: i64,
}

impl<'a> Publishing<'a> {
    fn start(gauge: &'a prometheus_client::metrics::gauge::Gauge, rows: i64) -> Self {
        gauge.inc_by(rows);
        Self { gauge, rows }
    }
}

impl Drop for Publishing<'_> {
    fn drop(&mut self) {
        self.gauge.dec_by(self.rows);
    }
}

async fn guarded(
    deadline: Instant,
    publish: impl Future<Output = Result<(), PublishFailure>>,
) -> Result<(), PublishFailure> {
    match tokio::time::timeout_at(deadline.into(), publish).await {
        Ok(result) => result,
        Err(_) => Err(PublishFailure::transient(
            "publish timed out past publish_timeout",
        )),
    }
}
