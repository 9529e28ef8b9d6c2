//! Topic names, consumer groups and Kafka message conventions
//! (docs/design.md#topics-groups-and-message-conventions).
//!
//! Production brokers may need a namespace prefix (the original
//! `rocketmq.namespace`); [`namespaced`] applies it in one place.

pub use crate::groups::{TOPIC_ROOM_OUTBOX, TOPIC_TREASURE_OPEN};

/// activity-consumer's group on [`TOPIC_ROOM_OUTBOX`] (declared in [`crate::groups`]).
pub const GROUP_ACTIVITY: &str = crate::groups::ACTIVITY.group;
/// notice-consumer's group on [`TOPIC_ROOM_OUTBOX`].
pub const GROUP_NOTICE: &str = crate::groups::NOTICE.group;
/// im-bridge's group on [`TOPIC_ROOM_OUTBOX`].
pub const GROUP_IM_BRIDGE: &str = crate::groups::IM_BRIDGE.group;
/// room-service's treasure-open group on [`TOPIC_TREASURE_OPEN`].
pub const GROUP_TREASURE_OPEN: &str = crate::groups::TREASURE_OPEN.group;

/// Room event types that go to no IM group by default: heat and rank are
/// room-state facts clients read from the room snapshot, not messages
/// (docs/design.md#im-silent-events). The one list, declared with im-bridge's
/// group in [`crate::groups`] (the console's timeline reads it there):
/// im-bridge's default `im_bridge.silent_event_types`, room-service's "did
/// this command write an IM event" timing and the reliability check all read it.
pub const IM_SILENT_EVENT_TYPES: &[&str] = crate::groups::IM_SILENT_EVENT_TYPES;

/// The original producer group names, kept as Kafka `client.id`s.
pub const PRODUCER_ROOM_OUTBOX: &str = "hyapp-room-outbox-producer";
/// Producer of treasure-open wake-ups.
pub const PRODUCER_TREASURE_OPEN: &str = "hyapp-room-treasure-open-producer";

/// Redis pub/sub channel room-service publishes to after each commit that
/// wrote outbox rows (payload: the shard number), so the relay publishes at
/// once instead of waiting for its next poll.
pub const NUDGE_CHANNEL: &str = "hyapp:room_outbox:nudge";

/// Header carrying the envelope's `event_id`.
pub const HEADER_EVENT_ID: &str = "event_id";
/// Header carrying the envelope's `event_type`.
pub const HEADER_EVENT_TYPE: &str = "event_type";
/// Header carrying the W3C trace context.
pub const HEADER_TRACEPARENT: &str = "traceparent";
/// Dead-letter header: why the message was dead-lettered.
pub const HEADER_DLQ_REASON: &str = "dlq_reason";
/// Dead-letter header: the consumer group that gave up.
pub const HEADER_DLQ_GROUP: &str = "dlq_group";
/// Dead-letter header: attempts made before giving up.
pub const HEADER_DLQ_ATTEMPTS: &str = "dlq_attempts";
/// Dead-letter header: source topic/partition/offset.
pub const HEADER_DLQ_SOURCE: &str = "dlq_source";
/// Dead-letter header, only on a headers-only dead letter: the size in bytes
/// of the original payload, which was too large to copy into the dead letter
/// (the original stays at `dlq_source` for as long as the topic retains it).
pub const HEADER_DLQ_ORIGINAL_BYTES: &str = "dlq_original_bytes";

/// Applies a namespace prefix (`<namespace>.<name>`); empty namespace → unchanged.
pub fn namespaced(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}.{name}")
    }
}

/// The dead-letter topic of one consumer group, so one group's poison
/// messages never mix with another's.
pub fn dead_letter_topic(group: &str) -> String {
    format!("{group}.dlq")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_their_original_spelling() {
        assert_eq!(namespaced("", TOPIC_ROOM_OUTBOX), "hyapp_room_outbox");
        assert_eq!(
            namespaced("prod", TOPIC_ROOM_OUTBOX),
            "prod.hyapp_room_outbox"
        );
        assert_eq!(
            dead_letter_topic(GROUP_NOTICE),
            "hyapp-notice-room-outbox.dlq"
        );
    }
}
