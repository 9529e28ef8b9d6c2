//! The consumer groups of the platform, declared once: which service runs
//! each, its group id, the topics it consumes and its dead-letter topic
//! (docs/design.md#topics-groups-and-message-conventions).
//!
//! Everything that needs the list reads it here: the consumers' defaults
//! (through [`crate::names`]), the relay's room timeline, the chaos run
//! (xtask and the `chaos` crate) and deploy-check, which holds the
//! Kubernetes and compose files to it. The file is plain consts with no
//! dependency, not even on its crate, so xtask (std-only) includes this very
//! file with `#[path]` instead of keeping a second list.

/// Room facts, published by the outbox relay. Key = room_id.
pub const TOPIC_ROOM_OUTBOX: &str = "hyapp_room_outbox";
/// Delayed treasure-box wake-ups, published at `open_at_ms`.
pub const TOPIC_TREASURE_OPEN: &str = "hyapp_room_treasure_open";

/// Room event types im-bridge passes over by default (its
/// `im_bridge.silent_event_types`): heat and rank are room-state facts
/// clients read from the room snapshot, not messages
/// (docs/design.md#im-silent-events). `names::IM_SILENT_EVENT_TYPES` is this list.
pub const IM_SILENT_EVENT_TYPES: &[&str] = &["RoomHeatChanged", "RoomRankChanged"];

/// Which event types a group applies, and so records in `consumer_dedup`;
/// the others it passes over by design (the room timeline shows them as
/// "not consumed by design", not as a backlog). It states what each
/// consumer's handler matches on (activity: `processor.rs`, notice:
/// `notices.rs`, im-bridge: `room_im::effects`); a handler that starts
/// applying another type adds it here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handles {
    /// Every event type but these.
    AllExcept(&'static [&'static str]),
    /// Only these event types.
    Only(&'static [&'static str]),
}

impl Handles {
    /// Whether the group applies events of `event_type`.
    pub fn handles(&self, event_type: &str) -> bool {
        match self {
            Handles::AllExcept(skipped) => !skipped.contains(&event_type),
            Handles::Only(applied) => applied.contains(&event_type),
        }
    }
}

/// One consumer group and what runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerGroup {
    /// The service (binary and deployment) that runs the group.
    pub service: &'static str,
    /// The Kafka consumer group id.
    pub group: &'static str,
    /// The topics the group consumes.
    pub topics: &'static [&'static str],
    /// Where it dead-letters what it gives up on: `<group>.dlq`, so one
    /// group's poison messages never mix with another's.
    pub dead_letter_topic: &'static str,
    /// The event types it applies.
    pub handles: Handles,
}

/// im-bridge: room events into Tencent IM groups.
pub const IM_BRIDGE: ConsumerGroup = ConsumerGroup {
    service: "im-bridge",
    group: "hyapp-room-im-bridge",
    topics: &[TOPIC_ROOM_OUTBOX],
    dead_letter_topic: "hyapp-room-im-bridge.dlq",
    handles: Handles::AllExcept(IM_SILENT_EVENT_TYPES),
};

/// activity-consumer: room events into the activity tables.
pub const ACTIVITY: ConsumerGroup = ConsumerGroup {
    service: "activity-consumer",
    group: "hyapp-activity-room-outbox",
    topics: &[TOPIC_ROOM_OUTBOX],
    dead_letter_topic: "hyapp-activity-room-outbox.dlq",
    handles: Handles::Only(&["RoomGiftSent"]),
};

/// notice-consumer: room events into user notices.
pub const NOTICE: ConsumerGroup = ConsumerGroup {
    service: "notice-consumer",
    group: "hyapp-notice-room-outbox",
    topics: &[TOPIC_ROOM_OUTBOX],
    dead_letter_topic: "hyapp-notice-room-outbox.dlq",
    handles: Handles::Only(&["RoomUserKicked", "RoomTreasureOpened"]),
};

/// room-service's treasure-open wake-ups.
pub const TREASURE_OPEN: ConsumerGroup = ConsumerGroup {
    service: "room-service",
    group: "hyapp-room-treasure-open",
    topics: &[TOPIC_TREASURE_OPEN],
    dead_letter_topic: "hyapp-room-treasure-open.dlq",
    handles: Handles::Only(&["TreasureOpenWakeup"]),
};

/// The consumer services on the room events topic. Each records what it
/// applied in `consumer_dedup`, so they make a room's timeline and the
/// chaos run's exactly-once ledger.
pub const CONSUMERS: [ConsumerGroup; 3] = [IM_BRIDGE, ACTIVITY, NOTICE];

/// Every consumer group: the consumer services' and room-service's.
pub const ALL: [ConsumerGroup; 4] = [IM_BRIDGE, ACTIVITY, NOTICE, TREASURE_OPEN];

/// The groups `service` runs (room-service's own; a consumer service its one).
pub fn run_by(service: &str) -> impl Iterator<Item = &'static ConsumerGroup> + '_ {
    ALL.iter().filter(move |group| group.service == service)
}

/// Whether `service` is one of [`CONSUMERS`].
pub fn is_consumer_service(service: &str) -> bool {
    CONSUMERS.iter().any(|group| group.service == service)
}

#[cfg(test)]
mod group_tests {
    use super::*;

    #[test]
    fn every_dead_letter_topic_is_its_group_dot_dlq() {
        for group in ALL {
            assert_eq!(
                group.dead_letter_topic,
                format!("{}.dlq", group.group),
                "{}",
                group.service
            );
        }
    }

    #[test]
    fn each_group_says_which_event_types_it_applies() {
        assert!(IM_BRIDGE.handles.handles("RoomGiftSent"));
        assert!(!IM_BRIDGE.handles.handles("RoomHeatChanged"));
        assert!(ACTIVITY.handles.handles("RoomGiftSent"));
        assert!(!ACTIVITY.handles.handles("RoomUserJoined"));
        assert!(NOTICE.handles.handles("RoomUserKicked"));
        assert!(!NOTICE.handles.handles("RoomGiftSent"));
        assert!(TREASURE_OPEN.handles.handles("TreasureOpenWakeup"));
    }

    #[test]
    fn groups_and_services_are_unique() {
        for (index, group) in ALL.iter().enumerate() {
            for other in &ALL[index + 1..] {
                assert_ne!(group.group, other.group);
            }
        }
        for (index, group) in CONSUMERS.iter().enumerate() {
            assert!(is_consumer_service(group.service));
            for other in &CONSUMERS[index + 1..] {
                assert_ne!(group.service, other.service);
            }
        }
        assert!(!is_consumer_service("room-service"));
        assert_eq!(run_by("room-service").count(), 1);
    }
}
