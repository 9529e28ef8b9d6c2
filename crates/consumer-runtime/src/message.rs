//! What a consumer consumes: the [`Decode`] step that turns a Kafka payload
//! into a typed message (the room outbox envelope, or a treasure-open
//! wake-up), and the [`Delivery`] a handler receives.

use outbox_schema::pb;
use std::sync::Arc;

/// A message type the runtime can consume.
/// `Debug` shows a decoded dead letter to an operator (`dead-letters inspect`).
pub trait Decode: Sized + Send + Sync + std::fmt::Debug + 'static {
    /// What the message is, for logs and dead-letter reasons.
    const KIND: &'static str;

    /// Decodes and validates a payload; an error sends the message straight
    /// to the dead-letter topic.
    fn decode(payload: &[u8]) -> Result<Self, outbox_schema::Error>;

    /// The dedup key.
    fn event_id(&self) -> &str;

    /// The room, for logs.
    fn room_id(&self) -> &str;

    /// When the fact happened (or was due), Unix ms; the lag metric measures
    /// from here. Zero means unknown.
    fn occurred_at_ms(&self) -> i64;

    /// True for a message of a kind newer than this build: the runtime
    /// acknowledges it without calling the handler and counts it
    /// (`consumer_unknown_events_total`), so a rolling upgrade that adds an
    /// event type fills no dead-letter topic.
    fn is_unknown(&self) -> bool {
        false
    }
}

impl Decode for pb::RoomOutboxEvent {
    const KIND: &'static str = "RoomOutboxEvent";

    fn decode(payload: &[u8]) -> Result<Self, outbox_schema::Error> {
        outbox_schema::decode_envelope(payload)
    }

    fn event_id(&self) -> &str {
        &self.event_id
    }

    fn room_id(&self) -> &str {
        &self.room_id
    }

    fn occurred_at_ms(&self) -> i64 {
        self.occurred_at_ms
    }

    fn is_unknown(&self) -> bool {
        self.is_unknown_type()
    }
}

impl Decode for pb::TreasureOpenWakeup {
    const KIND: &'static str = "TreasureOpenWakeup";

    fn decode(payload: &[u8]) -> Result<Self, outbox_schema::Error> {
        outbox_schema::decode_wakeup(payload)
    }

    /// The deterministic OpenTreasure command id: every redelivery of one
    /// wake-up maps to the same command, which room-service replays idempotently.
    fn event_id(&self) -> &str {
        &self.command_id
    }

    fn room_id(&self) -> &str {
        &self.room_id
    }

    /// A wake-up is "late" from the moment the box was due to open.
    fn occurred_at_ms(&self) -> i64 {
        self.open_at_ms
    }
}

/// One decoded message with where it came from. Cheap to clone: the message
/// is shared.
#[derive(Debug, PartialEq)]
pub struct Delivery<M> {
    /// The decoded message.
    pub message: Arc<M>,
    /// Source partition.
    pub partition: i32,
    /// Source offset.
    pub offset: i64,
    /// 1 on first delivery, then 2, 3, … while the runtime retries it.
    pub attempt: u32,
    /// W3C trace context of this attempt's consume span (the message's
    /// `traceparent` header continued); "" when untraced.
    pub traceparent: String,
}

impl<M> Clone for Delivery<M> {
    // Hand-written: a derive would demand `M: Clone`, which sharing makes unnecessary.
    fn clone(&self) -> Self {
        Self {
            message: self.message.clone(),
            partition: self.partition,
            offset: self.offset,
            attempt: self.attempt,
            traceparent: self.traceparent.clone(),
        }
    }
}

impl<M> Delivery<M> {
    /// The trace context to run this message's work in (e.g. with
    /// `opentelemetry::trace::FutureExt::with_context`), so IM calls and other
    /// spans join the event's trace.
    pub fn trace_context(&self) -> opentelemetry::Context {
        service_kit::trace::context_from_traceparent(&self.traceparent)
    }
}

impl<M: Decode> Delivery<M> {
    /// The message's dedup key.
    pub fn event_id(&self) -> &str {
        self.message.event_id()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn both_message_kinds_decode_and_reject_garbage() {
        let wakeup = pb::TreasureOpenWakeup {
            room_id: "r".into(),
            box_id: "b".into(),
            command_id: "treasure-open:r:b:1".into(),
            open_at_ms: 5,
            ..Default::default()
        };
        let decoded = <pb::TreasureOpenWakeup as Decode>::decode(&wakeup.encode_to_vec()).unwrap();
        assert_eq!(decoded.event_id(), "treasure-open:r:b:1");
        assert_eq!(decoded.occurred_at_ms(), 5);
        assert!(<pb::RoomOutboxEvent as Decode>::decode(&[0xff, 0xff]).is_err());
        assert!(<pb::TreasureOpenWakeup as Decode>::decode(b"\x01").is_err());
    }
}
