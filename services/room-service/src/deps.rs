//! [`Deps`], what every room actor and worker shares, and the
//! [`PipelineSettings`] of the per-room write pipeline.
//!
//! They live in a leaf module of their own (it names only the store, Redis,
//! liveness, wallet and metrics types) so that the actors (`cells`), the pipeline
//! (`pipeline`, `gifts`, `mutation`), the room API (`service`) and the sweeps
//! can all take them without importing `app`, which builds them and in turn
//! depends on all of those modules.

use std::time::Duration;

use room_core::RoomRules;

use crate::liveness::Liveness;
use crate::metrics::Metrics;
use crate::redis::Redis;
use crate::store::Store;
use crate::wallet::Wallet;

/// What every room actor and worker shares.
#[derive(Debug)]
pub struct Deps {
    /// MySQL repository.
    pub store: Store,
    /// Redis leases, projections, presence, nudge.
    pub redis: Redis,
    /// This instance's liveness key, which fences its own writes.
    pub liveness: std::sync::Arc<Liveness>,
    /// Wallet client.
    pub wallet: Wallet,
    /// Metrics.
    pub metrics: Metrics,
    /// Pipeline settings.
    pub settings: PipelineSettings,
}

/// Settings of the per-room pipeline, from the `room` config section.
#[derive(Debug, Clone)]
pub struct PipelineSettings {
    /// Snapshot cadence in versions.
    pub snapshot_every_n: u64,
    /// Whether queued commands of a room commit together.
    pub group_commit: bool,
    /// Largest group commit.
    pub max_batch: usize,
    /// Recent replies kept per room.
    pub recent_per_room: usize,
    /// Presence validity after a heartbeat or join.
    pub presence_ttl_ms: i64,
    /// Write treasure-open wake-up rows (rocketmq.treasure_open.enabled).
    pub treasure_wakeups: bool,
    /// Rules of new rooms.
    pub rules: RoomRules,
    /// Idle time after which a cell is dropped.
    pub idle_ttl: Duration,
    /// Mailbox capacity per room.
    pub mailbox_capacity: usize,
    /// Most rooms loaded on this instance.
    pub max_loaded_rooms: usize,
    /// Least idle time of a room evicted to load another past the cap.
    pub evict_idle_after: Duration,
    /// Refund attempts a saga may spend (`saga.max_refund_attempts`).
    pub max_refund_attempts: u32,
}
