//! Consumer metrics, labelled by `consumer_group` so several consumers in one
//! process (room-service hosts im-bridge and treasure-open) share one set of
//! families: consumed, duplicate, retried and dead-lettered counters,
//! processing latency, and commit-to-consume lag measured from the event's
//! `occurred_at_ms`; the group's lag per partition as the broker reports it
//! (`crate::lag`); and the failed rows of the delivery tables (`crate::sweeper`).

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabels {
    consumer_group: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeadLetterLabels {
    consumer_group: String,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabels {
    consumer_group: String,
    partition: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TableLabels {
    table: &'static str,
}

type HistogramFamily = Family<GroupLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 0.5 ms … ~16 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

fn lag_histogram() -> Histogram {
    // 5 ms … ~11 min.
    Histogram::new(exponential_buckets(0.005, 2.0, 18))
}

/// The metric families of every consumer in the process. Register once, then
/// hand [`ConsumerMetrics::for_group`] to each consumer.
#[derive(Debug, Clone)]
pub struct ConsumerMetrics {
    consumed: Family<GroupLabels, Counter>,
    duplicates: Family<GroupLabels, Counter>,
    retried: Family<GroupLabels, Counter>,
    dead_lettered: Family<DeadLetterLabels, Counter>,
    processing: HistogramFamily,
    lag: HistogramFamily,
    gap_rewinds: Family<GroupLabels, Counter>,
    gaps_unrepaired: Family<GroupLabels, Counter>,
    unknown: Family<GroupLabels, Counter>,
    partition_lag: Family<PartitionLabels, Gauge>,
    partition_committed: Family<PartitionLabels, Gauge>,
    failed_deliveries: Family<TableLabels, Gauge>,
}

impl ConsumerMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            consumed: Family::default(),
            duplicates: Family::default(),
            retried: Family::default(),
            dead_lettered: Family::default(),
            processing: Family::new_with_constructor(latency_histogram),
            lag: Family::new_with_constructor(lag_histogram),
            gap_rewinds: Family::default(),
            gaps_unrepaired: Family::default(),
            unknown: Family::default(),
            partition_lag: Family::default(),
            partition_committed: Family::default(),
            failed_deliveries: Family::default(),
        };
        registry.register(
            "consumer_messages_consumed",
            "Messages handled to completion (applied, duplicate or ignored)",
            metrics.consumed.clone(),
        );
        registry.register(
            "consumer_messages_duplicate",
            "Messages whose event id had already been handled",
            metrics.duplicates.clone(),
        );
        registry.register(
            "consumer_messages_retried",
            "Failed handler attempts that were retried",
            metrics.retried.clone(),
        );
        registry.register(
            "consumer_messages_dead_lettered",
            "Messages sent to the dead-letter topic, by reason (handler, undecodable)",
            metrics.dead_lettered.clone(),
        );
        registry.register(
            "consumer_processing_seconds",
            "Time from dispatch to a message's offset being stored",
            metrics.processing.clone(),
        );
        registry.register(
            "consumer_lag_seconds",
            "Time from the event's commit (occurred_at_ms) to its consumption",
            metrics.lag.clone(),
        );
        registry.register(
            "consumer_offset_gap_rewinds",
            "Seeks back to fetch messages the broker skipped (an offset jumped)",
            metrics.gap_rewinds.clone(),
        );
        registry.register(
            "consumer_offset_gaps_unrepaired",
            "Offset gaps that could not be filled: those messages were not consumed",
            metrics.gaps_unrepaired.clone(),
        );
        registry.register(
            "consumer_unknown_events",
            "Messages of a kind newer than this build, acknowledged without the handler",
            metrics.unknown.clone(),
        );
        registry.register(
            "consumer_partition_lag_messages",
            "Messages of a partition the group has not committed, read from the broker",
            metrics.partition_lag.clone(),
        );
        registry.register(
            "consumer_partition_committed_offset",
            "The group's committed offset of a partition, read from the broker (-1: none)",
            metrics.partition_committed.clone(),
        );
        registry.register(
            "consumer_delivery_failed_rows",
            "Rows of a delivery table in status failed (given up, awaiting an operator)",
            metrics.failed_deliveries.clone(),
        );
        metrics
    }

    /// Unregistered metrics (tests, or a caller that exports nothing).
    pub fn unregistered() -> Self {
        Self::register(&mut Registry::default())
    }

    /// Records one partition's broker-side position (`crate::lag`).
    pub fn record_partition_lag(
        &self,
        consumer_group: &str,
        partition: i32,
        committed: Option<i64>,
        lag: i64,
    ) {
        let labels = PartitionLabels {
            consumer_group: consumer_group.to_string(),
            partition: partition.to_string(),
        };
        self.partition_lag.get_or_create(&labels).set(lag);
        self.partition_committed
            .get_or_create(&labels)
            .set(committed.unwrap_or(-1));
    }

    /// The gauge of failed rows of delivery table `table` (`crate::sweeper`).
    pub fn failed_deliveries(&self, table: &'static str) -> Gauge {
        self.failed_deliveries
            .get_or_create_owned(&TableLabels { table })
    }

    /// The counters of one consumer group.
    pub fn for_group(&self, consumer_group: &str) -> GroupMetrics {
        let labels = GroupLabels {
            consumer_group: consumer_group.to_string(),
        };
        let dead_letter = |reason| DeadLetterLabels {
            consumer_group: consumer_group.to_string(),
            reason,
        };
        GroupMetrics {
            consumed: self.consumed.get_or_create_owned(&labels),
            duplicates: self.duplicates.get_or_create_owned(&labels),
            retried: self.retried.get_or_create_owned(&labels),
            dead_lettered_handler: self
                .dead_lettered
                .get_or_create_owned(&dead_letter("handler")),
            dead_lettered_undecodable: self
                .dead_lettered
                .get_or_create_owned(&dead_letter("undecodable")),
            processing: self.processing.get_or_create_owned(&labels),
            lag: self.lag.get_or_create_owned(&labels),
            offset_gap_rewinds: self.gap_rewinds.get_or_create_owned(&labels),
            offset_gaps_unrepaired: self.gaps_unrepaired.get_or_create_owned(&labels),
            unknown: self.unknown.get_or_create_owned(&labels),
        }
    }
}

/// One group's metric handles, resolved once so the hot path takes no locks.
#[derive(Debug, Clone)]
pub struct GroupMetrics {
    /// Messages handled to completion.
    pub consumed: Counter,
    /// Duplicates among them.
    pub duplicates: Counter,
    /// Retried attempts.
    pub retried: Counter,
    /// Dead-lettered after the handler gave up.
    pub dead_lettered_handler: Counter,
    /// Dead-lettered because the payload did not decode.
    pub dead_lettered_undecodable: Counter,
    /// Acknowledged without the handler: a message kind newer than this build.
    pub unknown: Counter,
    /// Processing latency, seconds.
    pub processing: Histogram,
    /// Commit-to-consume lag, seconds.
    pub lag: Histogram,
    /// Seeks back to re-fetch skipped messages.
    pub offset_gap_rewinds: Counter,
    /// Gaps left unfilled (messages not consumed).
    pub offset_gaps_unrepaired: Counter,
}

impl GroupMetrics {
    /// Observes the lag of an event that occurred at `occurred_at_ms`.
    pub fn observe_lag(&self, occurred_at_ms: i64, now_ms: i64) {
        if occurred_at_ms > 0 {
            let lag_ms = now_ms.saturating_sub(occurred_at_ms).max(0);
            self.lag.observe(lag_ms as f64 / 1000.0);
        }
    }
}
