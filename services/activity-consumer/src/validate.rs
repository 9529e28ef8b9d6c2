//! Field checks of a room event before it touches the activity tables. The
//! envelope decoder already guarantees an event id, a room id and a payload
//! that matches `event_type`; this adds what the tables and the arithmetic
//! need (column lengths, id charset, positive amounts whose product is the
//! announced total and fits BIGINT). A failure is permanent: the gRPC entry
//! answers INVALID_ARGUMENT naming the field, the topic consumer dead-letters
//! the message at once instead of retrying a statement that can never succeed.

use outbox_schema::ids::{
    IdProblem, MAX_APP_CODE_LEN, MAX_COMMAND_ID_LEN, MAX_EVENT_ID_LEN, MAX_ID_LEN,
};
use outbox_schema::pb::{self, room_outbox_event::Payload};
/// Longest W3C trace header kept.
const MAX_TRACE_LEN: usize = 512;

/// Checks `event`; the error names the field as `event.<field>`.
pub fn check_event(event: &pb::RoomOutboxEvent) -> Result<(), String> {
    check_id("event.event_id", &event.event_id, MAX_EVENT_ID_LEN, false)?;
    check_id("event.room_id", &event.room_id, MAX_ID_LEN, false)?;
    check_id("event.app_code", &event.app_code, MAX_APP_CODE_LEN, true)?;
    check_id(
        "event.command_id",
        &event.command_id,
        MAX_COMMAND_ID_LEN,
        true,
    )?;
    check_text("event.request_id", &event.request_id, MAX_COMMAND_ID_LEN)?;
    check_text("event.traceparent", &event.traceparent, MAX_TRACE_LEN)?;
    check_text("event.tracestate", &event.tracestate, MAX_TRACE_LEN)?;
    if event.occurred_at_ms < 0 {
        return Err(format!(
            "event.occurred_at_ms must not be negative, got {}",
            event.occurred_at_ms
        ));
    }
    if let Some(Payload::RoomGiftSent(gift)) = &event.payload {
        check_gift(gift)?;
    }
    Ok(())
}

fn check_gift(gift: &pb::RoomGiftSent) -> Result<(), String> {
    const FIELD: &str = "event.room_gift_sent";
    check_id(
        &format!("{FIELD}.sender_id"),
        &gift.sender_id,
        MAX_ID_LEN,
        false,
    )?;
    check_id(
        &format!("{FIELD}.receiver_id"),
        &gift.receiver_id,
        MAX_ID_LEN,
        false,
    )?;
    check_id(
        &format!("{FIELD}.gift_id"),
        &gift.gift_id,
        MAX_ID_LEN,
        false,
    )?;
    if gift.count == 0 {
        return Err(format!("{FIELD}.count must be positive, got 0"));
    }
    if gift.unit_value == 0 {
        return Err(format!("{FIELD}.unit_value must be positive, got 0"));
    }
    // The same computation room-service charged the wallet with.
    let product = room_core::gift_total(gift.count, gift.unit_value).ok_or_else(|| {
        format!(
            "{FIELD}.count × unit_value ({} × {}) overflows",
            gift.count, gift.unit_value
        )
    })?;
    if gift.total_value != product {
        return Err(format!(
            "{FIELD}.total_value must be count × unit_value = {product}, got {}",
            gift.total_value
        ));
    }
    Ok(())
}

/// The id rules of `outbox_schema::ids` (an empty value passes when
/// `optional`). Valid ids are ASCII, so their characters are bytes: the
/// message speaks of bytes, the unit of the columns' storage.
fn check_id(field: &str, value: &str, max: usize, optional: bool) -> Result<(), String> {
    match outbox_schema::ids::check_id(value, max) {
        Ok(()) => Ok(()),
        Err(IdProblem::Empty) if optional => Ok(()),
        Err(IdProblem::Empty) => Err(format!("{field} must not be empty")),
        Err(IdProblem::TooLong { length, max }) => {
            Err(format!("{field} must be at most {max} bytes, got {length}"))
        }
        Err(IdProblem::Forbidden {
            position,
            character,
        }) => Err(format!(
            "{field} contains {character:?} at position {position}; allowed are [A-Za-z0-9_.:-]"
        )),
    }
}

/// Free text that ends up in logs: bounded, and no control characters (which
/// could forge log lines).
fn check_text(field: &str, value: &str, max: usize) -> Result<(), String> {
    if value.len() > max {
        return Err(format!(
            "{field} must be at most {max} bytes, got {}",
            value.len()
        ));
    }
    if let Some(position) = value.chars().position(char::is_control) {
        return Err(format!(
            "{field} contains a control character at position {position}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_room_service_event_passes() {
        let event = pb::RoomOutboxEvent {
            event_id: "0190c0de-0000-7000-8000-000000000001".into(),
            event_type: "RoomGiftSent".into(),
            app_code: "hyapp".into(),
            room_id: "room-1".into(),
            command_id: "cmd-1".into(),
            occurred_at_ms: 1,
            payload: Some(Payload::RoomGiftSent(pb::RoomGiftSent {
                sender_id: "a".into(),
                receiver_id: "b".into(),
                gift_id: "rose".into(),
                count: 3,
                unit_value: 10,
                total_value: 30,
            })),
            ..Default::default()
        };
        assert_eq!(check_event(&event), Ok(()));
    }
}
