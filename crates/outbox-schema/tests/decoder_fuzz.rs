//! Property tests: the envelope and wake-up decoders never panic, whatever
//! the bytes, and whatever they accept satisfies the envelope invariants (a
//! payload naming its `event_type`, or none with a type this build does not
//! know: a newer producer's event).
//! Random bytes alone rarely get past protobuf parsing, so valid encodings
//! are also mutated (bit flips, truncation, splices, appended garbage) and
//! arbitrary field values are encoded, which drives the validation paths.

use outbox_schema::{
    decode_envelope, decode_wakeup,
    envelope::{KNOWN_EVENT_TYPES, MAX_ENVELOPE_BYTES, payload_event_type},
    pb::{self, room_outbox_event::Payload},
};
use proptest::prelude::*;
use prost::Message;

/// What every accepted envelope must satisfy.
fn check_accepted(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(event) = decode_envelope(bytes) {
        prop_assert!(bytes.len() <= MAX_ENVELOPE_BYTES);
        prop_assert!(!event.event_id.is_empty());
        prop_assert!(!event.room_id.is_empty());
        match event.payload.as_ref() {
            Some(payload) => {
                prop_assert_eq!(event.event_type.as_str(), payload_event_type(payload));
            }
            // Only a newer producer's type goes without a payload.
            None => prop_assert!(
                !event.event_type.is_empty()
                    && !KNOWN_EVENT_TYPES.contains(&event.event_type.as_str())
            ),
        }
    }
    if let Ok(wakeup) = decode_wakeup(bytes) {
        prop_assert!(!wakeup.room_id.is_empty() && !wakeup.box_id.is_empty());
        prop_assert!(!wakeup.command_id.is_empty());
    }
    Ok(())
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z0-9-]{1,40}",
        any::<String>(),
        Just("RoomGiftSent".to_string()),
    ]
}

fn payload() -> impl Strategy<Value = Option<Payload>> {
    prop_oneof![
        Just(None),
        (
            text(),
            text(),
            text(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(
                |(sender_id, receiver_id, gift_id, count, unit_value, total_value)| {
                    Some(Payload::RoomGiftSent(pb::RoomGiftSent {
                        sender_id,
                        receiver_id,
                        gift_id,
                        count,
                        unit_value,
                        total_value,
                    }))
                }
            ),
        text().prop_map(|user_id| Some(Payload::RoomUserJoined(pb::RoomUserJoined { user_id }))),
        proptest::collection::vec(text(), 0..4).prop_map(|ids| {
            Some(Payload::RoomTreasureOpened(pb::RoomTreasureOpened {
                rewarded_user_ids: ids,
                ..Default::default()
            }))
        }),
    ]
}

fn envelope() -> impl Strategy<Value = pb::RoomOutboxEvent> {
    (
        text(),
        text(),
        text(),
        any::<u64>(),
        any::<i64>(),
        payload(),
    )
        .prop_map(
            |(event_id, event_type, room_id, seq, occurred_at_ms, payload)| pb::RoomOutboxEvent {
                event_id,
                event_type,
                room_id,
                room_event_seq: seq,
                occurred_at_ms,
                payload,
                ..Default::default()
            },
        )
}

/// A valid envelope's bytes, damaged.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let valid = pb::RoomOutboxEvent {
        event_id: "0190c0de-0000-7000-8000-000000000001".into(),
        event_type: "RoomGiftSent".into(),
        room_id: "room-1".into(),
        payload: Some(Payload::RoomGiftSent(pb::RoomGiftSent {
            sender_id: "a".into(),
            receiver_id: "b".into(),
            gift_id: "rose".into(),
            count: 2,
            unit_value: 5,
            total_value: 10,
        })),
        ..Default::default()
    }
    .encode_to_vec();
    let len = valid.len();
    (
        proptest::collection::vec((0..len, any::<u8>()), 0..8),
        0..=len,
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(move |(flips, keep, tail)| {
            let mut bytes = valid.clone();
            for (index, mask) in flips {
                bytes[index] ^= mask;
            }
            bytes.truncate(keep.max(1));
            bytes.extend(tail);
            bytes
        })
}

proptest! {
    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        check_accepted(&bytes)?;
    }

    #[test]
    fn damaged_valid_envelopes_never_panic(bytes in mutated()) {
        check_accepted(&bytes)?;
    }

    #[test]
    fn arbitrary_field_values_decode_or_are_refused(event in envelope()) {
        let bytes = event.encode_to_vec();
        check_accepted(&bytes)?;
        // Acceptance is exactly the documented rule.
        let expected = !event.event_id.is_empty()
            && !event.room_id.is_empty()
            && match event.payload.as_ref() {
                Some(payload) => payload_event_type(payload) == event.event_type,
                None => {
                    !event.event_type.is_empty()
                        && !KNOWN_EVENT_TYPES.contains(&event.event_type.as_str())
                }
            };
        prop_assert_eq!(decode_envelope(&bytes).is_ok(), expected);
    }
}

#[test]
fn oversized_input_is_refused_before_parsing() {
    let error = decode_envelope(&vec![0u8; MAX_ENVELOPE_BYTES + 1]).unwrap_err();
    assert!(error.to_string().contains("limit"), "{error}");
}
