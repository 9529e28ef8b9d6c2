//! Prometheus metrics of room-service, served on the admin port's `/metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of a command metric.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommandLabels {
    /// Command name.
    pub command: String,
    /// `ok`, `replayed` or an error label.
    pub outcome: String,
}

/// Labels of a per-command histogram.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommandNameLabel {
    /// Command name.
    pub command: String,
}

/// Labels of a read metric.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadLabels {
    /// `GetRoom`, `Heartbeat` or `ListRooms`.
    pub call: String,
    /// `ok` or an error label, as for commands.
    pub outcome: String,
}

/// Labels of a per-read histogram.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadCallLabel {
    /// `GetRoom`, `Heartbeat` or `ListRooms`.
    pub call: String,
}

/// Labels of a forwarded call.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForwardLabels {
    /// `ok`, `refused` (the holder answered with an error),
    /// `holder_unreachable` (retried here) or `address_refused` (the lease
    /// named an address `peer_addresses` does not admit: not dialled).
    pub outcome: String,
}

/// Every metric the service records.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Write commands by name and outcome.
    pub commands: Family<CommandLabels, Counter>,
    /// End-to-end write command latency.
    pub command_seconds: Family<CommandNameLabel, Histogram>,
    /// Reads (GetRoom, Heartbeat, ListRooms) by call and outcome, counted
    /// where they execute.
    pub reads: Family<ReadLabels, Counter>,
    /// Read latency where it executes.
    pub read_seconds: Family<ReadCallLabel, Histogram>,
    /// Commands per SaveMutation transaction (group commit).
    pub batch_size: Histogram,
    /// Rooms per transaction of the shared commit lanes.
    pub shared_commit_rooms: Histogram,
    /// Room cells currently loaded on this node.
    pub cells_loaded: Gauge,
    /// Rooms unloaded to make room under `room.max_loaded_rooms`.
    pub cells_evicted: Counter,
    /// Calls refused because `room.max_loaded_rooms` was reached with no idle room.
    pub cells_refused: Counter,
    /// Rooms taken over from a holder whose liveness key had lapsed.
    pub lease_takeovers: Counter,
    /// Renewals of this instance's liveness key that failed or timed out.
    pub liveness_renewal_failures: Counter,
    /// Times this instance found its own liveness key lapsed (paused,
    /// or cut off from Redis for longer than its TTL).
    pub liveness_lapses: Counter,
    /// Gifts a previous holder left between debit and commit, settled when
    /// this instance loaded their room.
    pub orphaned_gifts_settled: Counter,
    /// Calls forwarded to the instance holding the room, by outcome.
    pub forwarded: Family<ForwardLabels, Counter>,
    /// Round trip of a forwarded call, as the forwarding instance saw it.
    pub forward_seconds: Histogram,
    /// Sagas compensated (refund issued) by the pipeline or the sweep.
    pub sagas_compensated: Counter,
    /// Sagas that ran out of refund attempts (debited, not refunded: refund by hand).
    pub sagas_failed: Counter,
    /// Sagas in `failed` now, as the last saga sweep counted them: the alert
    /// holds while any waits for an operator, and resolves once each is
    /// refunded by hand and marked.
    pub sagas_failed_open: Gauge,
    /// Sagas still between debit and commit/refund after the stuck threshold
    /// (`saga.stuck_after`), as the last saga sweep counted them after its
    /// repairs: nonzero for long means the sweep cannot settle them (the
    /// wallet refuses or is down).
    pub sagas_unsettled: Gauge,
    /// Users removed by the presence worker.
    pub presence_expired: Counter,
    /// Best-effort projection writes that failed.
    pub projection_failures: Counter,
}

impl Metrics {
    /// Creates the metrics and registers them.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::new();
        metrics.register_rooms(registry);
        metrics.register_forwarding_and_sagas(registry);
        metrics
    }

    /// Every metric, empty and unregistered.
    fn new() -> Self {
        Self {
            commands: Family::default(),
            command_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
            }),
            reads: Family::default(),
            read_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
            }),
            batch_size: Histogram::new(exponential_buckets(1.0, 2.0, 11)),
            shared_commit_rooms: Histogram::new(exponential_buckets(1.0, 2.0, 11)),
            cells_loaded: Gauge::default(),
            cells_evicted: Counter::default(),
            cells_refused: Counter::default(),
            lease_takeovers: Counter::default(),
            liveness_renewal_failures: Counter::default(),
            liveness_lapses: Counter::default(),
            orphaned_gifts_settled: Counter::default(),
            forwarded: Family::default(),
            forward_seconds: Histogram::new(exponential_buckets(0.000_25, 2.0, 16)),
            sagas_compensated: Counter::default(),
            sagas_failed: Counter::default(),
            sagas_failed_open: Gauge::default(),
            sagas_unsettled: Gauge::default(),
            presence_expired: Counter::default(),
            projection_failures: Counter::default(),
        }
    }

    /// Commands, reads, commits, cells, leases and liveness.
    fn register_rooms(&self, registry: &mut Registry) {
        registry.register(
            "room_commands",
            "Room write commands by outcome",
            self.commands.clone(),
        );
        registry.register(
            "room_command_seconds",
            "Room write command latency",
            self.command_seconds.clone(),
        );
        registry.register(
            "room_reads",
            "Room reads (GetRoom, Heartbeat, ListRooms) by call and outcome, where they execute",
            self.reads.clone(),
        );
        registry.register(
            "room_read_seconds",
            "Room read latency where the read executes",
            self.read_seconds.clone(),
        );
        registry.register(
            "room_group_commit_batch_size",
            "Commands committed per SaveMutation transaction",
            self.batch_size.clone(),
        );
        registry.register(
            "room_shared_commit_rooms",
            "Rooms whose mutations shared one transaction",
            self.shared_commit_rooms.clone(),
        );
        registry.register(
            "room_cells_loaded",
            "Room cells loaded on this node",
            self.cells_loaded.clone(),
        );
        registry.register(
            "room_cells_evicted",
            "Idle rooms unloaded to stay under room.max_loaded_rooms",
            self.cells_evicted.clone(),
        );
        registry.register(
            "room_cells_refused",
            "Calls refused with RESOURCE_EXHAUSTED: room.max_loaded_rooms reached and no room idle",
            self.cells_refused.clone(),
        );
        registry.register(
            "room_lease_takeovers",
            "Rooms taken over from a holder whose liveness key had lapsed",
            self.lease_takeovers.clone(),
        );
        registry.register(
            "room_liveness_renewal_failures",
            "Renewals of this instance's liveness key that failed or timed out",
            self.liveness_renewal_failures.clone(),
        );
        registry.register(
            "room_liveness_lapses",
            "Times this instance found its own liveness key lapsed",
            self.liveness_lapses.clone(),
        );
        registry.register(
            "room_orphaned_gifts_settled",
            "Gifts a previous holder left between debit and commit, settled at room load",
            self.orphaned_gifts_settled.clone(),
        );
    }

    /// Forwarding, gift sagas, presence and projections.
    fn register_forwarding_and_sagas(&self, registry: &mut Registry) {
        registry.register(
            "room_forwarded",
            "Calls forwarded to the instance holding the room's lease, by outcome",
            self.forwarded.clone(),
        );
        registry.register(
            "room_forward_seconds",
            "Round trip of a forwarded call, seen from the forwarding instance",
            self.forward_seconds.clone(),
        );
        registry.register(
            "room_gift_sagas_compensated",
            "Gift sagas refunded",
            self.sagas_compensated.clone(),
        );
        registry.register(
            "room_gift_sagas_failed",
            "Gift sagas whose refund attempts ran out (sender debited, not refunded)",
            self.sagas_failed.clone(),
        );
        registry.register(
            "room_gift_sagas_failed_open",
            "Gift sagas in status failed (debited, not refunded) at the last saga sweep",
            self.sagas_failed_open.clone(),
        );
        registry.register(
            "room_gift_sagas_unsettled",
            "Gift sagas still unsettled (debiting, debited, compensating) past the stuck threshold, at the last saga sweep",
            self.sagas_unsettled.clone(),
        );
        registry.register(
            "room_presence_expired",
            "Users removed after their heartbeat expired",
            self.presence_expired.clone(),
        );
        registry.register(
            "room_projection_failures",
            "Best-effort Redis projection writes that failed",
            self.projection_failures.clone(),
        );
    }

    /// Counts a forward that was not attempted (the lease named an address
    /// `peer_addresses` does not admit): no call, so no duration.
    pub fn record_forward_refused(&self) {
        self.count_forward("address_refused");
    }

    /// Records one forwarded call.
    pub fn record_forward(&self, outcome: &str, seconds: f64) {
        self.count_forward(outcome);
        self.forward_seconds.observe(seconds);
    }

    fn count_forward(&self, outcome: &str) {
        self.forwarded
            .get_or_create(&ForwardLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Records one read where it executed.
    pub fn record_read(&self, call: &str, outcome: &str, seconds: f64) {
        self.reads
            .get_or_create(&ReadLabels {
                call: call.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
        self.read_seconds
            .get_or_create(&ReadCallLabel {
                call: call.to_owned(),
            })
            .observe(seconds);
    }

    /// Records one finished write command.
    pub fn record_command(&self, command: &str, outcome: &str, seconds: f64) {
        self.commands
            .get_or_create(&CommandLabels {
                command: command.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
        self.command_seconds
            .get_or_create(&CommandNameLabel {
                command: command.to_owned(),
            })
            .observe(seconds);
    }
}
