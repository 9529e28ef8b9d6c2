//! Prometheus metrics of the relay (the names of docs/design.md#relay-metrics,
//! plus lag, dead letters, failed rows and owned shards). Durations are in
//! seconds and gauges carry no `_total`, as Prometheus' naming conventions
//! ask (`deploy/check` refuses anything else).

use prometheus_client::{
    metrics::{counter::Counter, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use std::sync::atomic::AtomicU64;

/// Latency buckets in seconds, from half a millisecond to a minute.
const LATENCY_BUCKETS_SECONDS: [f64; 14] = [
    0.000_5, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0, 15.0, 60.0,
];

/// A gauge holding seconds (fractional).
pub type SecondsGauge = Gauge<f64, AtomicU64>;

/// All relay metrics; cheap to clone (the handles are shared).
#[derive(Debug, Clone)]
pub struct RelayMetrics {
    /// `room_outbox_publish_success_total`.
    pub publish_success: Counter,
    /// `room_outbox_publish_failure_total`.
    pub publish_failure: Counter,
    /// `room_outbox_dead_letter_total`: rows moved to `failed`.
    pub dead_letters: Counter,
    /// `room_outbox_publish_latency_seconds`: one publish call.
    pub publish_latency_seconds: Histogram,
    /// `room_outbox_commit_to_publish_lag_seconds`: commit → broker/sink acknowledgement.
    pub commit_to_publish_lag_seconds: Histogram,
    /// `room_outbox_pending`: rows the relay still owes a publish.
    pub pending: Gauge,
    /// `room_outbox_oldest_pending_age_seconds`.
    pub oldest_pending_age_seconds: SecondsGauge,
    /// `room_outbox_failed`: rows in `failed` now (dead letters not yet
    /// replayed), so an alert holds for as long as any waits for an operator.
    pub failed: Gauge,
    /// `room_outbox_owned_shards`: shard leases this instance holds.
    pub owned_shards: Gauge,
    /// `room_outbox_fenced_marks_total`: marks refused by their fence (a
    /// newer lease epoch in `mq` mode, a newer claim otherwise).
    pub fenced_marks: Counter,
    /// `room_outbox_publishing`: rows this relay is publishing now. In `mq`
    /// mode no row status says so (they read `pending` until marked).
    pub publishing: Gauge,
}

impl RelayMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            publish_success: Counter::default(),
            publish_failure: Counter::default(),
            dead_letters: Counter::default(),
            publish_latency_seconds: Histogram::new(LATENCY_BUCKETS_SECONDS),
            commit_to_publish_lag_seconds: Histogram::new(LATENCY_BUCKETS_SECONDS),
            pending: Gauge::default(),
            oldest_pending_age_seconds: SecondsGauge::default(),
            failed: Gauge::default(),
            owned_shards: Gauge::default(),
            fenced_marks: Counter::default(),
            publishing: Gauge::default(),
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
            "room_outbox_publish_latency_seconds",
            "Duration of one publish, seconds",
            metrics.publish_latency_seconds.clone(),
        );
        registry.register(
            "room_outbox_commit_to_publish_lag_seconds",
            "Commit to publish acknowledgement, seconds",
            metrics.commit_to_publish_lag_seconds.clone(),
        );
        registry.register(
            "room_outbox_pending",
            "Outbox rows not yet delivered",
            metrics.pending.clone(),
        );
        registry.register(
            "room_outbox_oldest_pending_age_seconds",
            "Age of the oldest undelivered outbox row, seconds",
            metrics.oldest_pending_age_seconds.clone(),
        );
        registry.register(
            "room_outbox_failed",
            "Outbox rows in status failed (dead letters awaiting replay)",
            metrics.failed.clone(),
        );
        registry.register(
            "room_outbox_owned_shards",
            "Shard leases held by this relay",
            metrics.owned_shards.clone(),
        );
        registry.register(
            "room_outbox_fenced_marks",
            "Marks refused by their fence (lease epoch or claim token)",
            metrics.fenced_marks.clone(),
        );
        registry.register(
            "room_outbox_publishing",
            "Rows this relay is publishing now",
            metrics.publishing.clone(),
        );
        metrics
    }
}
