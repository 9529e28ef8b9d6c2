//! The `room_outbox` row as room-service writes it — its two kinds, a room
//! event on the room's ordered chain and a delayed treasure wake-up, each
//! built by one constructor — and the shard function that assigns rows (and
//! so rooms) to relay shard leases (docs/design.md#ordering-and-fencing).
//! The INSERT itself lives in the outbox-store crate, which may use sqlx.

use crate::names::{TOPIC_ROOM_OUTBOX, TOPIC_TREASURE_OPEN};
use crate::pb;
use prost::Message;

/// Number of relay shards. Fixed: every row's `shard` column was computed with
/// it, so changing it needs a data migration.
pub const OUTBOX_SHARDS: u16 = 64;

/// Lane of the room's ordered chain.
pub const LANE_CHAIN: u8 = 0;
/// Lane of delayed wake-ups, outside the room's ordering chain.
pub const LANE_DELAYED: u8 = 1;

/// Shard of a room: FNV-1a 32 of the room id modulo [`OUTBOX_SHARDS`]. Stable
/// across versions and platforms (it is stored), and cheap.
pub fn shard_of(room_id: &str) -> u16 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in room_id.as_bytes() {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    u16::try_from(hash % u32::from(OUTBOX_SHARDS)).unwrap_or(0)
}

/// A row to insert into `room_outbox` in the command's transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOutboxRow {
    /// Unique event id (the envelope's).
    pub event_id: String,
    /// Tenant/app code.
    pub app_code: String,
    /// Room the event belongs to.
    pub room_id: String,
    /// [`shard_of`] the room.
    pub shard: u16,
    /// [`LANE_CHAIN`] or [`LANE_DELAYED`].
    pub lane: u8,
    /// Per-room event sequence.
    pub room_event_seq: u64,
    /// Envelope event type (or `TreasureOpenWakeup`).
    pub event_type: String,
    /// Destination topic (before namespacing).
    pub topic: String,
    /// Encoded protobuf payload.
    pub payload: Vec<u8>,
    /// W3C trace context of the originating request.
    pub traceparent: String,
    /// Earliest publish time (`room_outbox.next_retry_at_ms`, the same column
    /// the relay moves on every retry): commit time, or `open_at_ms` for a wake-up.
    pub next_retry_at_ms: i64,
    /// Commit time.
    pub created_at_ms: i64,
}

/// `event_type` of a wake-up row (it carries no room event envelope).
pub const WAKEUP_EVENT_TYPE: &str = "TreasureOpenWakeup";

impl NewOutboxRow {
    /// The chain row (lane 0) carrying `envelope` to the room-events topic,
    /// due at once; `created_at_ms` is when its transaction was built.
    pub fn event(envelope: &pb::RoomOutboxEvent, created_at_ms: i64) -> Self {
        Self {
            event_id: envelope.event_id.clone(),
            app_code: envelope.app_code.clone(),
            room_id: envelope.room_id.clone(),
            shard: shard_of(&envelope.room_id),
            lane: LANE_CHAIN,
            room_event_seq: envelope.room_event_seq,
            event_type: envelope.event_type.clone(),
            topic: TOPIC_ROOM_OUTBOX.into(),
            payload: envelope.encode_to_vec(),
            traceparent: envelope.traceparent.clone(),
            next_retry_at_ms: envelope.occurred_at_ms,
            created_at_ms,
        }
    }

    /// The delayed row (lane 1, outside the room's chain) that publishes
    /// `wakeup` to the treasure-open topic at its `open_at_ms`. `source` is the
    /// countdown event it belongs to; the row gets an id of its own.
    pub fn wakeup(
        source: &pb::RoomOutboxEvent,
        wakeup: &pb::TreasureOpenWakeup,
        event_id: String,
        created_at_ms: i64,
    ) -> Self {
        Self {
            event_id,
            app_code: source.app_code.clone(),
            room_id: source.room_id.clone(),
            shard: shard_of(&source.room_id),
            lane: LANE_DELAYED,
            room_event_seq: source.room_event_seq,
            event_type: WAKEUP_EVENT_TYPE.into(),
            topic: TOPIC_TREASURE_OPEN.into(),
            payload: wakeup.encode_to_vec(),
            traceparent: source.traceparent.clone(),
            next_retry_at_ms: wakeup.open_at_ms,
            created_at_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_is_stable_and_in_range() {
        // Pinned values: these are stored in room_outbox.shard and must never change.
        // FNV-1a 32 test vectors: "" = 0x811c9dc5, "a" = 0xe40c292c.
        assert_eq!(shard_of(""), 0x05);
        assert_eq!(shard_of("a"), 0x2c);
        assert_eq!(shard_of("room-1"), shard_of("room-1"));
        let mut seen = std::collections::BTreeSet::new();
        for index in 0..10_000 {
            let shard = shard_of(&format!("room-{index}"));
            assert!(shard < OUTBOX_SHARDS);
            seen.insert(shard);
        }
        assert_eq!(
            seen.len(),
            usize::from(OUTBOX_SHARDS),
            "rooms spread over every shard"
        );
    }

    #[test]
    fn an_event_row_is_due_at_commit_and_a_wakeup_row_at_open_time() {
        let started = pb::RoomTreasureCountdownStarted {
            box_id: "box-1".into(),
            level: 2,
            open_at_ms: 9_000,
        };
        let envelope = pb::RoomOutboxEvent {
            event_id: "e-1".into(),
            event_type: "RoomTreasureCountdownStarted".into(),
            app_code: "app".into(),
            room_id: "room-1".into(),
            room_event_seq: 7,
            occurred_at_ms: 1_000,
            traceparent: "tp".into(),
            payload: Some(pb::room_outbox_event::Payload::RoomTreasureCountdownStarted(started)),
            ..Default::default()
        };
        let event = NewOutboxRow::event(&envelope, 1_005);
        assert_eq!(
            (
                event.lane,
                event.next_retry_at_ms,
                event.created_at_ms,
                event.room_event_seq
            ),
            (LANE_CHAIN, 1_000, 1_005, 7)
        );
        assert_eq!(
            (event.topic.as_str(), event.shard),
            (TOPIC_ROOM_OUTBOX, shard_of("room-1"))
        );
        assert_eq!(
            pb::RoomOutboxEvent::decode(event.payload.as_slice()).unwrap(),
            envelope
        );
        let wakeup = crate::wakeup_for(&envelope).unwrap();
        let row = NewOutboxRow::wakeup(&envelope, &wakeup, "w-1".into(), 1_005);
        assert_eq!(
            (
                row.lane,
                row.next_retry_at_ms,
                row.event_type.as_str(),
                row.topic.as_str()
            ),
            (LANE_DELAYED, 9_000, WAKEUP_EVENT_TYPE, TOPIC_TREASURE_OPEN)
        );
        assert_eq!(
            (row.event_id.as_str(), row.traceparent.as_str()),
            ("w-1", "tp")
        );
    }
}
