//! The dispatcher's flow control: when polling holds back because the
//! workers' queues are full, when a partition full for too long is paused
//! (and resumed once it drains), and when a partition that stopped receiving
//! behind its high watermark is fetched again.

use super::{Dispatcher, seek};
use crate::{handler::Handler, kafka::lock, message::Decode, offset_gap::STALL_AFTER};
use rdkafka::consumer::Consumer as _;
use std::{
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

/// How long the dispatcher holds back polling with a partition full before
/// it pauses that partition and lets the others flow. Holding back keeps
/// librdkafka's fetch position where it was (a pause discards prefetched
/// messages and later fetches from the middle of a record batch, which
/// Tansu serves badly); pausing bounds how long one stuck partition delays
/// the rest (and stays far below `max.poll.interval.ms`).
const HOLD_BEFORE_PAUSE: Duration = Duration::from_secs(10);

impl<M: Decode, H: Handler<M>> Dispatcher<M, H> {
    /// Seeks back every partition that fetches behind its high watermark yet
    /// has received nothing for [`STALL_AFTER`]: the broker skipped its last
    /// batch (see [`crate::offset_gap`]).
    pub(super) fn repair_stalls(&mut self) {
        if self.holding_back() {
            // Not polling: nothing arrives by design, and reports are stale.
            return;
        }
        let now = Instant::now();
        let shared = Arc::clone(&self.shared);
        let fetch_stats = lock(&shared.consumer.context().fetch_stats);
        let mut stalled = Vec::new();
        for (partition, assigned) in &mut self.assigned {
            let paused = self.slots.get(partition).is_some_and(|slot| slot.paused);
            let Some(expected) = assigned.offsets.next_expected() else {
                continue;
            };
            let Some(stats) = fetch_stats.get(partition) else {
                continue;
            };
            let behind = stats.high_watermark > expected
                && stats.fetch_offset <= expected
                && stats.queued == 0;
            // The report must postdate the last progress, or it may describe
            // the moment before a seek.
            let quiet = now.duration_since(assigned.last_progress) >= STALL_AFTER
                && stats.reported_at > assigned.last_progress;
            if paused || !behind || !quiet {
                continue;
            }
            if let Some(to) = assigned.offsets.stalled() {
                assigned.last_progress = now;
                stalled.push((*partition, expected, stats.high_watermark, to));
            }
        }
        drop(fetch_stats);
        for (partition, expected, high_watermark, to) in stalled {
            self.shared.metrics.offset_gap_rewinds.inc();
            tracing::warn!(
                consumer_group = %self.shared.settings.consumer_group,
                partition,
                expected,
                high_watermark,
                seek_to = to,
                "partition stalled behind its high watermark (the broker skipped its last batch); fetching again"
            );
            if let Err(error) = seek(&self.shared, partition, to) {
                tracing::warn!(consumer_group = %self.shared.settings.consumer_group, partition, %error, "seek of a stalled partition failed; retried at the next check");
            }
        }
    }

    /// Whether the queues are full enough to stop polling: the unpaused
    /// partitions hold `partition_queue_limit` messages each on average. An
    /// aggregate budget lets a hot partition run ahead while the others
    /// still get their messages; the memory bound is the same.
    pub(super) fn holding_back(&self) -> bool {
        let (queued, active) = self
            .slots
            .values()
            .filter(|slot| !slot.paused)
            .fold((0usize, 0usize), |(queued, active), slot| {
                (queued + slot.depth.load(Ordering::Relaxed), active + 1)
            });
        active > 0
            && queued
                >= self
                    .shared
                    .settings
                    .partition_queue_limit
                    .saturating_mul(active)
    }

    /// A full partition whose queue drained to half is no longer full (and
    /// is resumed if it was paused). While polling is held back, one full
    /// for [`HOLD_BEFORE_PAUSE`] is paused so the other partitions flow.
    pub(super) fn relieve_full_partitions(&mut self) {
        let resume_below = self.shared.settings.partition_queue_limit / 2;
        let holding_back = self.holding_back();
        let now = Instant::now();
        let mut to_pause = Vec::new();
        let mut to_resume = Vec::new();
        for (partition, slot) in &mut self.slots {
            let Some(full_since) = slot.full_since else {
                continue;
            };
            if slot.depth.load(Ordering::Relaxed) <= resume_below {
                slot.full_since = None;
                if slot.paused {
                    to_resume.push(*partition);
                }
            } else if holding_back
                && !slot.paused
                && now.duration_since(full_since) >= HOLD_BEFORE_PAUSE
            {
                to_pause.push(*partition);
            }
        }
        let group = &self.shared.settings.consumer_group;
        for partition in to_pause {
            let paused = self
                .partition_list(partition)
                .and_then(|list| self.shared.consumer.pause(&list));
            match paused {
                Ok(()) => {
                    tracing::info!(consumer_group = %group, partition, "partition full for too long; paused so the others flow");
                    if let Some(slot) = self.slots.get_mut(&partition) {
                        slot.paused = true;
                    }
                }
                Err(error) => {
                    tracing::warn!(consumer_group = %group, partition, %error, "partition pause failed; still holding back")
                }
            }
        }
        for partition in to_resume {
            let resumed = self
                .partition_list(partition)
                .and_then(|list| self.shared.consumer.resume(&list));
            if let Err(error) = &resumed {
                tracing::warn!(consumer_group = %group, partition, %error, "partition resume failed");
            }
            if let Some(slot) = self.slots.get_mut(&partition) {
                slot.paused = false;
            }
            if let Some(assigned) = self.assigned.get_mut(&partition) {
                // librdkafka fetches again from the next offset, possibly
                // inside a batch: the offset tracker watches for the skip.
                assigned.offsets.fetch_restarted();
                assigned.last_progress = now;
            }
        }
    }
}
