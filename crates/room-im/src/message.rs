//! The room system messages clients receive in the room's IM group
//! (docs/im-messages.md is their reference for client developers):
//!
//! - **one event**: one `TIMCustomElem` whose `Data` is JSON
//!   `{"type":"room_event","event_type":…,"event_id":…,"room_id":…,"room_event_seq":…,
//!   "room_version":…,"occurred_at_ms":…,"data":{…payload fields…}}` and whose
//!   `Desc` is the event type;
//! - **a gift batch** (a hot room whose budget of 40 messages a second is
//!   short): `Data` is `{"type":"room_event_batch","event_type":"RoomGiftSent",
//!   "room_id":…,"fields":[…column names…],"events":[[…one row per gift…]]}`
//!   and `Desc` is `RoomGiftBatch`; each row holds the columns of
//!   [`GIFT_BATCH_FIELDS`], so the single-event fields of every gift are
//!   there, without repeating their names. A batch never exceeds Tencent's
//!   12 KB message limit ([`split_gift_batches`]).
//!
//! Clients order by `room_event_seq` and drop repeats by `event_id`, in both
//! forms alike.

use outbox_schema::pb::{self, room_outbox_event::Payload};
use serde_json::{Value, json};
use tencent_im::MsgElement;

/// The IM message body of `event`.
pub fn room_event_message(event: &pb::RoomOutboxEvent) -> Vec<MsgElement> {
    let data = json!({
        "type": "room_event",
        "event_type": event.event_type,
        "event_id": event.event_id,
        "room_id": event.room_id,
        "room_event_seq": event.room_event_seq,
        "room_version": event.room_version,
        "occurred_at_ms": event.occurred_at_ms,
        "data": event.payload.as_ref().map_or(Value::Null, payload_json),
    });
    vec![MsgElement::Custom(tencent_im::CustomElem {
        data: data.to_string(),
        desc: event.event_type.clone(),
        ext: String::new(),
    })]
}

/// The payload's fields, named as in the proto.
pub fn payload_json(payload: &Payload) -> Value {
    match payload {
        Payload::RoomCreated(p) => {
            json!({"owner_id": p.owner_id, "title": p.title, "mic_seat_count": p.mic_seat_count})
        }
        Payload::RoomClosed(p) => json!({"closed_by": p.closed_by}),
        Payload::RoomUserJoined(p) => json!({"user_id": p.user_id}),
        Payload::RoomUserLeft(p) => json!({
            "user_id": p.user_id,
            "reason": pb::LeaveReason::try_from(p.reason)
                .map_or("LEAVE_REASON_UNSPECIFIED", |reason| reason.as_str_name()),
        }),
        Payload::RoomUserKicked(p) => json!({
            "actor_id": p.actor_id, "target_id": p.target_id, "ban_until_ms": p.ban_until_ms,
        }),
        Payload::RoomAdminChanged(p) => json!({"target_id": p.target_id, "admin": p.admin}),
        Payload::RoomMicTaken(p) => json!({"user_id": p.user_id, "seat_index": p.seat_index}),
        Payload::RoomMicLeft(p) => json!({"user_id": p.user_id, "seat_index": p.seat_index}),
        Payload::RoomMicLocked(p) => json!({"actor_id": p.actor_id, "seat_index": p.seat_index}),
        Payload::RoomMicUnlocked(p) => {
            json!({"actor_id": p.actor_id, "seat_index": p.seat_index})
        }
        Payload::RoomGiftSent(p) => json!({
            "sender_id": p.sender_id, "receiver_id": p.receiver_id, "gift_id": p.gift_id,
            "count": p.count, "unit_value": p.unit_value, "total_value": p.total_value,
        }),
        Payload::RoomHeatChanged(p) => json!({"heat": p.heat, "delta": p.delta}),
        Payload::RoomRankChanged(p) => json!({
            "top": p.top.iter()
                .map(|entry| json!({"user_id": entry.user_id, "score": entry.score}))
                .collect::<Vec<_>>(),
        }),
        Payload::RoomTreasureCountdownStarted(p) => {
            json!({"box_id": p.box_id, "level": p.level, "open_at_ms": p.open_at_ms})
        }
        Payload::RoomTreasureOpened(p) => json!({
            "box_id": p.box_id, "level": p.level, "opened_at_ms": p.opened_at_ms,
            "rewarded_user_ids": p.rewarded_user_ids,
        }),
    }
}

/// `Desc` of a gift batch.
pub const GIFT_BATCH_DESC: &str = "RoomGiftBatch";

/// The columns of each row of a gift batch, in order.
pub const GIFT_BATCH_FIELDS: [&str; 10] = [
    "event_id",
    "room_event_seq",
    "room_version",
    "occurred_at_ms",
    "sender_id",
    "receiver_id",
    "gift_id",
    "count",
    "unit_value",
    "total_value",
];

/// One gift's row in a batch (`Null` for an event that is not a gift).
fn gift_row(event: &pb::RoomOutboxEvent) -> Value {
    let Some(Payload::RoomGiftSent(gift)) = &event.payload else {
        return Value::Null;
    };
    json!([
        event.event_id,
        event.room_event_seq,
        event.room_version,
        event.occurred_at_ms,
        gift.sender_id,
        gift.receiver_id,
        gift.gift_id,
        gift.count,
        gift.unit_value,
        gift.total_value,
    ])
}

/// The IM message body of a batch of gift events of `room_id`.
pub fn gift_batch_message(room_id: &str, gifts: &[&pb::RoomOutboxEvent]) -> Vec<MsgElement> {
    let rows: Vec<Value> = gifts.iter().map(|event| gift_row(event)).collect();
    batch_body(room_id, rows)
}

fn batch_body(room_id: &str, rows: Vec<Value>) -> Vec<MsgElement> {
    let data = json!({
        "type": "room_event_batch",
        "event_type": "RoomGiftSent",
        "room_id": room_id,
        "fields": GIFT_BATCH_FIELDS,
        "events": rows,
    });
    vec![MsgElement::Custom(tencent_im::CustomElem {
        data: data.to_string(),
        desc: GIFT_BATCH_DESC.to_owned(),
        ext: String::new(),
    })]
}

/// The size Tencent measures a message by: its `MsgBody` as JSON, in bytes.
pub fn body_bytes(body: &[MsgElement]) -> usize {
    serde_json::to_vec(body).map_or(usize::MAX, |bytes| bytes.len())
}

/// Bytes `text` takes once escaped inside a JSON string (the batch's JSON
/// travels as the string `Data`).
fn escaped_len(text: &str) -> usize {
    text.len()
        + text
            .chars()
            .map(|c| match c {
                '"' | '\\' => 1,
                c if u32::from(c) < 0x20 => 5,
                _ => 0,
            })
            .sum::<usize>()
}

/// Splits `gifts` (in order) into batches whose message stays within
/// `max_body_bytes`; each batch keeps the gifts' order. A gift too large to
/// fit alone still gets a batch of its own (Tencent then refuses it, and it
/// is dead-lettered with the reason).
pub fn split_gift_batches<'a>(
    room_id: &str,
    gifts: &[&'a pb::RoomOutboxEvent],
    max_body_bytes: usize,
) -> Vec<Vec<&'a pb::RoomOutboxEvent>> {
    let overhead = body_bytes(&batch_body(room_id, Vec::new()));
    let mut batches: Vec<Vec<&pb::RoomOutboxEvent>> = Vec::new();
    let mut current: Vec<&pb::RoomOutboxEvent> = Vec::new();
    let mut size = overhead;
    for gift in gifts {
        // The row, plus the comma that separates it from the previous one.
        let row = escaped_len(&gift_row(gift).to_string()) + usize::from(!current.is_empty());
        if !current.is_empty() && size + row > max_body_bytes {
            batches.push(std::mem::take(&mut current));
            size = overhead;
            current.push(gift);
            size += row - 1;
        } else {
            current.push(gift);
            size += row;
        }
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gift_message_carries_envelope_and_payload_fields() {
        let event = pb::RoomOutboxEvent {
            event_id: "e1".into(),
            event_type: "RoomGiftSent".into(),
            room_id: "r1".into(),
            room_event_seq: 7,
            payload: Some(Payload::RoomGiftSent(pb::RoomGiftSent {
                sender_id: "u1".into(),
                receiver_id: "u2".into(),
                gift_id: "rose".into(),
                count: 2,
                unit_value: 5,
                total_value: 10,
            })),
            ..Default::default()
        };
        let body = room_event_message(&event);
        let MsgElement::Custom(custom) = &body[0] else {
            panic!("custom element expected");
        };
        assert_eq!(custom.desc, "RoomGiftSent");
        let data: Value = serde_json::from_str(&custom.data).unwrap();
        assert_eq!(data["room_event_seq"], 7);
        assert_eq!(data["data"]["total_value"], 10);
        assert_eq!(data["event_id"], "e1");
    }

    #[test]
    fn leave_reason_is_named() {
        let payload = Payload::RoomUserLeft(pb::RoomUserLeft {
            user_id: "u".into(),
            reason: pb::LeaveReason::Kicked.into(),
        });
        assert_eq!(payload_json(&payload)["reason"], "LEAVE_REASON_KICKED");
    }
}

#[cfg(test)]
mod batch_tests {
    use super::*;

    fn gift(index: usize, sender: &str) -> pb::RoomOutboxEvent {
        pb::RoomOutboxEvent {
            event_id: format!("00000000-0000-4000-8000-{index:012}"),
            event_type: "RoomGiftSent".into(),
            room_id: "room-hot".into(),
            room_event_seq: 1_000 + index as u64,
            room_version: 2_000 + index as u64,
            occurred_at_ms: 1_764_720_000_000,
            payload: Some(Payload::RoomGiftSent(pb::RoomGiftSent {
                sender_id: sender.into(),
                receiver_id: "host-\"quoted\"".into(),
                gift_id: "rose".into(),
                count: 3,
                unit_value: 10,
                total_value: 30,
            })),
            ..Default::default()
        }
    }

    #[test]
    fn batches_fill_up_to_the_limit_and_never_past_it() {
        let events: Vec<_> = (0..1_000).map(|i| gift(i, &format!("用户-{i}"))).collect();
        let refs: Vec<&pb::RoomOutboxEvent> = events.iter().collect();
        let limit = 12_288;
        let batches = split_gift_batches("room-hot", &refs, limit);
        let flat: Vec<&str> = batches
            .iter()
            .flatten()
            .map(|event| event.event_id.as_str())
            .collect();
        let expected: Vec<&str> = refs.iter().map(|event| event.event_id.as_str()).collect();
        assert_eq!(flat, expected, "every gift once, in order");
        for batch in &batches {
            let size = body_bytes(&gift_batch_message("room-hot", batch));
            assert!(size <= limit, "{size} bytes");
        }
        // Full batches leave less than one row unused.
        let first = body_bytes(&gift_batch_message("room-hot", &batches[0]));
        assert!(first > limit - 200, "first batch only {first} bytes");
        assert!(batches.len() < 20, "{} batches", batches.len());
    }

    #[test]
    fn a_batch_lists_every_gift_with_the_single_event_fields() {
        let events = [gift(1, "u1"), gift(2, "u2")];
        let refs: Vec<&pb::RoomOutboxEvent> = events.iter().collect();
        let body = gift_batch_message("room-hot", &refs);
        let MsgElement::Custom(custom) = &body[0] else {
            panic!("custom element expected");
        };
        assert_eq!(custom.desc, GIFT_BATCH_DESC);
        let data: Value = serde_json::from_str(&custom.data).unwrap();
        assert_eq!(data["type"], "room_event_batch");
        assert_eq!(
            data["fields"].as_array().unwrap().len(),
            GIFT_BATCH_FIELDS.len()
        );
        let rows = data["events"].as_array().unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1][0], events[1].event_id.as_str());
        assert_eq!(rows[1][4], "u2");
        assert_eq!(rows[1][9], 30);
    }
}
