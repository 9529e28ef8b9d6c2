//! Prometheus metrics of the relay (the names of docs/design.md#relay-metrics,
//! plus lag, dead letters and owned shards).

use prometheus_client::{
    metrics::{counter::Counter, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

/// Latency buckets in milliseconds, from sub-millisecond to a minute.
const LATENCY_BUCKETS_MS: [f64; 14] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1_000.0, 5_000.0, 15_000.0, 60_000.0,
];

/// All relay metrics; cheap to clone (the handles are shared).
#[derive(Debug, Clone)]
pub struct RelayMetrics {
    /// `room_outbox_publish_success_total`.
    pub publish_success: Counter,
    /// `room_outbox_publish_failure_total`.
    pub publish_failure: Counter,
    /// `room_outbox_dead_letter_total`: rows moved to `failed`.
    pub dead_letters: Counter,
    /// `room_outbox_publish_latency_ms`: one publish call.
    pub publish_latency_ms: Histogram,
    /// `room_outbox_commit_to_publish_lag_ms`: commit → broker/sink acknowledgement.
    pub commit_to_publish_lag_ms: Histogram,
    /// `room_outbox_pending_total`: rows the relay still owes a publish.
    pub pending: Gauge,
    /// `room_outbox_oldest_pending_age_ms`.
    pub oldest_pending_age_ms: Gauge,
    /// `room_outbox_owned_shards`: shard leases this instance holds.
    pub owned_shards: Gauge,
    /// `room_outbox_fenced_marks_total`: marks refused because another claim superseded ours.
    pub fenced_marks: Counter,
}

impl RelayMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            publish_success: Counter::default(),
            publish_failure: Counter::default(),
            dead_letters: Counter::default(),
            publish_latency_ms: Histogram::new(LATENCY_BUCKETS_MS),
            commit_to_publish_lag_ms: Histogram::new(LATENCY_BUCKETS_MS),
            pending: Gauge::default(),
            oldest_pending_age_ms: Gauge::default(),
            owned_shards: Gauge::default(),
            fenced_marks: Counter::default(),
        };
        registry.register(
            "room_outbox_publish_success",
            "Events published successfully",
            metrics.publish_success.clone(),
        );
        registry.register(
            "room_outbox_publish_failure",
            "Failed publish attempts",
            metrics.publish_failure.clone(),
        );
        registry.register(
            "room_outbox_dead_letter",
            "Events moved to failed (dead letter)",
            metrics.dead_letters.clone(),
        );
        registry.register(
            "room_outbox_publish_latency_ms",
            "Duration of one publish, ms",
            metrics.publish_latency_ms.clone(),
        );
        registry.register(
            "room_outbox_commit_to_publish_lag_ms",
            "Commit to publish acknowledgement, ms",
            metrics.commit_to_publish_lag_ms.clone(),
        );
        registry.register(
            "room_outbox_pending_total",
            "Outbox rows not yet delivered",
            metrics.pending.clone(),
        );
        registry.register(
            "room_outbox_oldest_pending_age_ms",
            "Age of the oldest undelivered outbox row, ms",
            metrics.oldest_pending_age_ms.clone(),
        );
        registry.register(
            "room_outbox_owned_shards",
            "Shard leases held by this relay",
            metrics.owned_shards.clone(),
        );
        registry.register(
            "room_outbox_fenced_marks",
            "Marks refused by the fencing token",
            metrics.fenced_marks.clone(),
        );
        metrics
    }
}
