//! The `room` section and its `room.rules`: the pipeline's tunables and
//! the room-core rules new rooms get; its checks name the key.

use room_core::RoomRules;
use serde::{Deserialize, Serialize};
use service_kit::duration::ConfigDuration;

use crate::Error;
use service_kit::adjusted::Adjustments;

/// The `room` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoomConfig {
    /// Write a full snapshot every this many versions.
    pub snapshot_every_n: u64,
    /// Commit several queued commands of one room in one transaction.
    pub group_commit: bool,
    /// Largest number of commands in one group commit.
    pub group_commit_max_batch: usize,
    /// Commit lanes that let mutations of different rooms share one
    /// transaction when they are ready together; 0 gives every room's batch
    /// its own transaction.
    pub shared_commit_lanes: usize,
    /// Most rooms in one shared transaction.
    pub shared_commit_max_rooms: usize,
    /// Queued requests per room before new ones are refused (RESOURCE_EXHAUSTED).
    pub mailbox_capacity: usize,
    /// A loaded room cell idle this long is dropped and its lease released.
    pub idle_ttl: ConfigDuration,
    /// Most rooms loaded on this instance; past it an idle room is evicted
    /// or, when none is, the call is refused with RESOURCE_EXHAUSTED.
    pub max_loaded_rooms: usize,
    /// A room must have been idle this long to be evicted for another.
    pub evict_idle_after: ConfigDuration,
    /// Recent command replies kept per loaded room for cheap idempotent replays.
    pub recent_commands_per_room: usize,
    /// A user whose heartbeat is older than this leaves the room.
    pub presence_ttl: ConfigDuration,
    /// How often the presence worker looks for expired users.
    pub presence_sweep_interval: ConfigDuration,
    /// room-core tunables for new rooms (existing rooms keep theirs).
    pub rules: RulesConfig,
}

impl Default for RoomConfig {
    fn default() -> Self {
        Self {
            snapshot_every_n: 100,
            group_commit: true,
            group_commit_max_batch: 64,
            shared_commit_lanes: 4,
            shared_commit_max_rooms: 64,
            mailbox_capacity: 1024,
            idle_ttl: ConfigDuration::from_secs(300),
            max_loaded_rooms: 100_000,
            evict_idle_after: ConfigDuration::from_secs(30),
            recent_commands_per_room: 16,
            presence_ttl: ConfigDuration::from_secs(60),
            presence_sweep_interval: ConfigDuration::from_secs(5),
            rules: RulesConfig::default(),
        }
    }
}

/// `room.rules`: [`RoomRules`] with config-file durations.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RulesConfig {
    /// Senders kept in the contribution rank.
    pub rank_size: usize,
    /// Daily heat needed for treasure levels 1, 2, 3, ...
    pub treasure_thresholds: Vec<u64>,
    /// Delay between a box appearing and becoming openable.
    pub treasure_countdown: ConfigDuration,
    /// Largest `mic_seat_count` of CreateRoom.
    pub max_mic_seats: u32,
    /// Largest gift `count`.
    pub max_gift_count: u32,
    /// Largest gift `unit_value`.
    pub max_gift_unit_value: u64,
    /// Most members of a room at once (its owner may always come back).
    pub max_members: usize,
    /// Most admins of a room.
    pub max_admins: usize,
    /// Most bans in force in a room (expired ones do not count).
    pub max_bans: usize,
    /// Most distinct gift senders of a room in one UTC day.
    pub max_contributors: usize,
}

impl Default for RulesConfig {
    fn default() -> Self {
        let rules = RoomRules::default();
        Self {
            rank_size: rules.rank_size,
            treasure_thresholds: rules.treasure_thresholds,
            treasure_countdown: ConfigDuration::from_millis(rules.treasure_countdown_ms),
            max_mic_seats: rules.max_mic_seats,
            max_gift_count: rules.max_gift_count,
            max_gift_unit_value: rules.max_gift_unit_value,
            max_members: rules.max_members,
            max_admins: rules.max_admins,
            max_bans: rules.max_bans,
            max_contributors: rules.max_contributors,
        }
    }
}

impl RulesConfig {
    /// The room-core rules.
    pub fn to_rules(&self) -> RoomRules {
        RoomRules {
            rank_size: self.rank_size,
            treasure_thresholds: self.treasure_thresholds.clone(),
            treasure_countdown_ms: self.treasure_countdown.as_millis(),
            max_mic_seats: self.max_mic_seats,
            max_gift_count: self.max_gift_count,
            max_gift_unit_value: self.max_gift_unit_value,
            max_members: self.max_members,
            max_admins: self.max_admins,
            max_bans: self.max_bans,
            max_contributors: self.max_contributors,
        }
    }

    /// The per-room caps by their key under `room.rules`.
    fn caps(&self) -> [(&'static str, usize); 4] {
        [
            ("max_members", self.max_members),
            ("max_admins", self.max_admins),
            ("max_bans", self.max_bans),
            ("max_contributors", self.max_contributors),
        ]
    }
}

impl RoomConfig {
    /// Checks the section: zero sizes and out-of-range batch and lane
    /// counts are refused; a non-positive `idle_ttl`, `presence_ttl` or
    /// `presence_sweep_interval` falls back to its default with a warning.
    pub(super) fn validate(&mut self, adjusted: &mut Adjustments) -> Result<(), Error> {
        self.check_sizes()?;
        if self.evict_idle_after.as_millis() < 0 {
            return invalid("room.evict_idle_after must not be negative".into());
        }
        for (key, value, default) in [
            ("room.idle_ttl", &mut self.idle_ttl, 300),
            ("room.presence_ttl", &mut self.presence_ttl, 60),
            (
                "room.presence_sweep_interval",
                &mut self.presence_sweep_interval,
                5,
            ),
        ] {
            *value = adjusted.positive(key, *value, ConfigDuration::from_secs(default));
        }
        self.rules.validate()
    }

    fn check_sizes(&self) -> Result<(), Error> {
        if self.snapshot_every_n == 0 {
            return invalid("room.snapshot_every_n must be at least 1".into());
        }
        if !(1..=1024).contains(&self.group_commit_max_batch) {
            return invalid(format!(
                "room.group_commit_max_batch must be in 1..=1024, got {}",
                self.group_commit_max_batch
            ));
        }
        if self.shared_commit_lanes > 64 {
            return invalid(format!(
                "room.shared_commit_lanes must be in 0..=64 (0 turns shared commits off), got {}",
                self.shared_commit_lanes
            ));
        }
        if !(1..=1024).contains(&self.shared_commit_max_rooms) {
            return invalid(format!(
                "room.shared_commit_max_rooms must be in 1..=1024, got {}",
                self.shared_commit_max_rooms
            ));
        }
        if self.mailbox_capacity == 0 {
            return invalid("room.mailbox_capacity must be at least 1".into());
        }
        if self.max_loaded_rooms == 0 {
            return invalid("room.max_loaded_rooms must be at least 1".into());
        }
        Ok(())
    }
}

impl RulesConfig {
    /// Checks `room.rules`; every refusal names its key.
    fn validate(&self) -> Result<(), Error> {
        if self.rank_size == 0 {
            return invalid("room.rules.rank_size must be at least 1".into());
        }
        if self
            .treasure_thresholds
            .windows(2)
            .any(|pair| pair[0] >= pair[1])
        {
            return invalid("room.rules.treasure_thresholds must be strictly increasing".into());
        }
        if !self.treasure_countdown.is_positive() {
            return invalid("room.rules.treasure_countdown must be positive".into());
        }
        if self.max_mic_seats == 0 || self.max_gift_count == 0 || self.max_gift_unit_value == 0 {
            return invalid("room.rules.max_mic_seats, max_gift_count and max_gift_unit_value must be at least 1".into());
        }
        // Keeps count × unit_value representable as the wallet's i64 amount.
        if u128::from(self.max_gift_count) * u128::from(self.max_gift_unit_value) > i64::MAX as u128
        {
            return invalid(
                "room.rules.max_gift_count × max_gift_unit_value must fit in i64".into(),
            );
        }
        // A zero cap would refuse every join, grant, ban or gift: a typo,
        // never an intent, so start-up stops instead of every command.
        if let Some((key, _)) = self.caps().into_iter().find(|(_, cap)| *cap == 0) {
            return invalid(format!("room.rules.{key} must be at least 1"));
        }
        Ok(())
    }
}

fn invalid(message: String) -> Result<(), Error> {
    Err(Error::Config(message))
}
