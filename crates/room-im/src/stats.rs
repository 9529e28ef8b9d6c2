//! Counters of what [`crate::RoomIm`] sent, for the services' metrics:
//! group messages, gift batches and the events merged into them, events
//! deferred for want of budget, and refusals by Tencent's frequency limits
//! (which pacing keeps at 0; an alert fires when they are not). The
//! [`ImCollector`] exports them, with the client's pacing waits, on each
//! scrape, labelled by the dedup group.

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric},
    metrics::counter::ConstCounter,
};
use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

/// Monotonic counters; read them with [`ImStats::snapshot`].
#[derive(Debug, Default)]
pub struct ImStats {
    messages: AtomicU64,
    batches: AtomicU64,
    merged_events: AtomicU64,
    deferred_events: AtomicU64,
    freq_refusals: AtomicU64,
}

/// A reading of [`ImStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImStatsSnapshot {
    /// Group messages Tencent accepted (single events and batches).
    pub messages: u64,
    /// Of those, gift batches.
    pub batches: u64,
    /// Events carried by gift batches.
    pub merged_events: u64,
    /// Events handed back because their room's budget was spent.
    pub deferred_events: u64,
    /// Sends Tencent refused or dropped for a frequency limit.
    pub freq_refusals: u64,
}

impl ImStats {
    /// A message carrying `events` events was accepted.
    pub(crate) fn sent(&self, events: usize) {
        self.messages.fetch_add(1, Ordering::Relaxed);
        if events > 1 {
            self.batches.fetch_add(1, Ordering::Relaxed);
            self.merged_events
                .fetch_add(u64::try_from(events).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
    }

    /// `events` events were deferred.
    pub(crate) fn deferred(&self, events: usize) {
        self.deferred_events
            .fetch_add(u64::try_from(events).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// A send failed; refusals by the per-group message limit are counted
    /// (`MsgDropReason: MsgFreqCtrl`, or ErrorCode 10023), not other
    /// throttling: pacing is what keeps this counter at 0.
    pub(crate) fn failed(&self, error: &tencent_im::Error) {
        let per_group_limit = match error {
            tencent_im::Error::Dropped { reason, .. } => reason == tencent_im::MSG_FREQ_CTRL,
            other => other.code() == Some(tencent_im::codes::GROUP_MSG_FREQ_LIMIT),
        };
        if per_group_limit {
            self.freq_refusals.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> ImStatsSnapshot {
        ImStatsSnapshot {
            messages: self.messages.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            merged_events: self.merged_events.load(Ordering::Relaxed),
            deferred_events: self.deferred_events.load(Ordering::Relaxed),
            freq_refusals: self.freq_refusals.load(Ordering::Relaxed),
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabels {
    consumer_group: String,
}

/// Exports a [`crate::RoomIm`]'s counters and its client's pacing waits.
#[derive(Debug, Clone)]
pub struct ImCollector {
    stats: Arc<ImStats>,
    client: tencent_im::Client,
    labels: GroupLabels,
}

impl ImCollector {
    /// The collector of `room_im`'s counters.
    pub fn new(room_im: &crate::RoomIm) -> Self {
        Self {
            stats: room_im.stats_handle(),
            client: room_im.client().clone(),
            labels: GroupLabels {
                consumer_group: room_im.dedup_group().to_owned(),
            },
        }
    }
}

/// Name, help and value of each exported counter.
fn counters(stats: ImStatsSnapshot, pacing_waits: u64) -> [(&'static str, &'static str, u64); 6] {
    [
        (
            "im_group_messages_sent",
            "Group messages Tencent IM accepted (single events and gift batches).",
            stats.messages,
        ),
        (
            "im_gift_batches_sent",
            "Gift batches sent (one message carrying several gift events).",
            stats.batches,
        ),
        (
            "im_events_merged",
            "Events carried by gift batches.",
            stats.merged_events,
        ),
        (
            "im_events_deferred",
            "Events handed back because their room's IM budget was spent.",
            stats.deferred_events,
        ),
        (
            "im_pacing_waits",
            "Group messages that waited for their group's per-second budget.",
            pacing_waits,
        ),
        (
            "im_freq_limit_refusals",
            "Sends Tencent IM refused or dropped for a frequency limit (MsgFreqCtrl, 10023, 60007...); pacing keeps it at 0.",
            stats.freq_refusals,
        ),
    ]
}

impl Collector for ImCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let waits = self.client.pacer_stats().waits;
        for (name, help, value) in counters(self.stats.snapshot(), waits) {
            let counter = ConstCounter::new(value);
            let mut metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(metric.encode_family(&self.labels)?)?;
        }
        Ok(())
    }
}
