//! Room events in Tencent IM (docs/design.md#publish-modes): the one mapping
//! "room event → IM operations" that im-bridge (consuming the topic) and the
//! relay's direct mode (publishing straight from `room_outbox`) both run, so
//! the two paths cannot treat the same event differently.
//!
//! - [`config::BridgeConfig`]: the `im_bridge` settings both paths read;
//! - [`message`]: the group message clients receive;
//! - [`RoomIm`]: the operations themselves, deduplicated by `event_id` in
//!   `consumer_dedup` under the caller's group, paced per group and merged
//!   into gift batches when a hot room's budget is short;
//! - [`stats`]: what was sent, for the services' metrics.
//!
//! It knows nothing of Kafka: callers hand it decoded envelopes.

pub mod config;
mod effects;
pub mod message;
pub mod stats;

pub use config::BridgeConfig;
pub use effects::{ApplyError, ImOutcome, RoomIm};
/// Gift batches planned and not yet recorded (owned by outbox-store,
/// re-exported for the callers that inspect or stage them).
pub use outbox_store::im_batches;
pub use stats::{ImStats, ImStatsSnapshot};

/// The IM group of `room_id` under `template` (`{room_id}` replaced).
pub fn group_id(template: &str, room_id: &str) -> String {
    template.replace("{room_id}", room_id)
}

#[cfg(test)]
mod tests {
    #[test]
    fn group_ids_follow_the_template() {
        assert_eq!(super::group_id("room_{room_id}", "r1"), "room_r1");
    }
}
