//! Counters of what `RoomIm` sent, for the services' metrics:
//! group messages, gift batches and the events merged into them, events
//! deferred for want of budget, sends that waited for their group's budget,
//! and refusals by Tencent's per-group limit (which pacing keeps at 0; the
//! alert ImGroupMessagesRefused fires when they are not). Registered per
//! dedup group (label `consumer_group`) with [`ImStats::register`].

use prometheus_client::{
    encoding::{EncodeMetric, MetricEncoder, NoLabelSet},
    metrics::{MetricType, TypedMetric, counter::Counter},
    registry::Registry,
};

/// The counters of one `RoomIm`.
#[derive(Debug)]
pub struct ImStats {
    messages: Counter,
    batches: Counter,
    merged_events: Counter,
    deferred_events: Counter,
    freq_refusals: Counter,
    pacing_waits: PacingWaitsCounter,
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
    /// Sends Tencent refused or dropped for its per-group limit.
    pub freq_refusals: u64,
    /// Sends that waited for their group's budget.
    pub pacing_waits: u64,
}

/// The client's count of sends that waited for a permit, read at each
/// scrape (the pacer lives in the client, shared by its clones).
#[derive(Debug, Clone)]
struct PacingWaitsCounter(tencent_im::Client);

impl TypedMetric for PacingWaitsCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for PacingWaitsCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let waits = self.0.pacer_stats().waits;
        encoder.encode_counter::<NoLabelSet, _, u64>(&waits, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

impl ImStats {
    /// Counters of the sends made through `client`.
    pub(crate) fn new(client: &tencent_im::Client) -> Self {
        Self {
            messages: Counter::default(),
            batches: Counter::default(),
            merged_events: Counter::default(),
            deferred_events: Counter::default(),
            freq_refusals: Counter::default(),
            pacing_waits: PacingWaitsCounter(client.clone()),
        }
    }

    /// Registers the counters (`im_*_total`) labelled `consumer_group`.
    pub fn register(&self, registry: &mut Registry, consumer_group: &str) {
        let metrics = self;
        let registry = registry
            .sub_registry_with_label(("consumer_group".into(), consumer_group.to_owned().into()));
        registry.register(
            "im_group_messages_sent",
            "Group messages Tencent IM accepted (single events and gift batches).",
            metrics.messages.clone(),
        );
        registry.register(
            "im_gift_batches_sent",
            "Gift batches sent (one message carrying several gift events).",
            metrics.batches.clone(),
        );
        registry.register(
            "im_events_merged",
            "Events carried by gift batches.",
            metrics.merged_events.clone(),
        );
        registry.register(
            "im_events_deferred",
            "Events handed back because their room's IM budget was spent.",
            metrics.deferred_events.clone(),
        );
        registry.register(
            "im_pacing_waits",
            "Group messages that waited for their group's per-second budget.",
            metrics.pacing_waits.clone(),
        );
        registry.register(
            "im_freq_limit_refusals",
            "Sends Tencent IM refused or dropped for its per-group limit: MsgFreqCtrl or 10023. Pacing keeps it at 0.",
            metrics.freq_refusals.clone(),
        );
    }

    /// A message carrying `events` events was accepted.
    pub(crate) fn sent(&self, events: usize) {
        self.messages.inc();
        if events > 1 {
            self.batches.inc();
            self.merged_events
                .inc_by(u64::try_from(events).unwrap_or(u64::MAX));
        }
    }

    /// `events` events were deferred.
    pub(crate) fn deferred(&self, events: usize) {
        self.deferred_events
            .inc_by(u64::try_from(events).unwrap_or(u64::MAX));
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
            self.freq_refusals.inc();
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> ImStatsSnapshot {
        ImStatsSnapshot {
            messages: self.messages.get(),
            batches: self.batches.get(),
            merged_events: self.merged_events.get(),
            deferred_events: self.deferred_events.get(),
            freq_refusals: self.freq_refusals.get(),
            pacing_waits: self.pacing_waits.0.pacer_stats().waits,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> tencent_im::Client {
        tencent_im::Client::new(tencent_im::ClientConfig::new(
            "http://127.0.0.1:9",
            1,
            "admin",
            "key",
        ))
        .unwrap()
    }

    #[test]
    fn batches_count_their_events_and_only_the_group_limit_counts_as_a_refusal() {
        let stats = ImStats::new(&client());
        stats.sent(1);
        stats.sent(5);
        stats.deferred(3);
        stats.failed(&tencent_im::Error::Dropped {
            api: "group_open_http_svc/send_group_msg",
            reason: tencent_im::MSG_FREQ_CTRL.into(),
        });
        stats.failed(&tencent_im::Error::HttpStatus {
            api: "group_open_http_svc/send_group_msg",
            status: 429,
        });
        let snapshot = stats.snapshot();
        assert_eq!(
            (snapshot.messages, snapshot.batches, snapshot.merged_events),
            (2, 1, 5)
        );
        assert_eq!((snapshot.deferred_events, snapshot.freq_refusals), (3, 1));
    }

    #[test]
    fn the_counters_are_exported_per_consumer_group() {
        let stats = ImStats::new(&client());
        stats.sent(4);
        let mut registry = Registry::default();
        stats.register(&mut registry, "hyapp-room-im-bridge");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "im_group_messages_sent_total{consumer_group=\"hyapp-room-im-bridge\"} 1",
            "im_events_merged_total{consumer_group=\"hyapp-room-im-bridge\"} 4",
            "im_pacing_waits_total{consumer_group=\"hyapp-room-im-bridge\"} 0",
            "im_freq_limit_refusals_total{consumer_group=\"hyapp-room-im-bridge\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
