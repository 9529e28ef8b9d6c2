//! The room system message clients receive in the room's IM group: one
//! `TIMCustomElem` whose `Data` is JSON
//! `{"type":"room_event","event_type":…,"event_id":…,"room_id":…,"room_event_seq":…,
//! "room_version":…,"occurred_at_ms":…,"data":{…payload fields…}}` and whose
//! `Desc` is the event type. Clients order by `room_event_seq` and drop
//! repeats by `event_id`.

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
