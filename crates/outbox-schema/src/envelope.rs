//! Building the `RoomOutboxEvent` envelope from room-core events, and decoding
//! it with validation. room-core stays wire-free; this is the only mapping.

use crate::{Error, pb};
use prost::Message;
use room_core::{EventKind, LeaveReason, RoomEvent};

/// Envelope fields that come from the command, not from the event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvelopeContext {
    /// Tenant/app code.
    pub app_code: String,
    /// Room id.
    pub room_id: String,
    /// Room version after the command.
    pub room_version: u64,
    /// Idempotency key of the command.
    pub command_id: String,
    /// Gateway request id.
    pub request_id: String,
    /// Commit time, Unix ms.
    pub occurred_at_ms: i64,
    /// W3C `traceparent` of the request ("" when untraced).
    pub traceparent: String,
    /// W3C `tracestate`.
    pub tracestate: String,
}

/// The envelope of one room event. `event_id` is minted by the caller so the
/// same id is stored, published, and reused by replays.
pub fn envelope_for(
    context: &EnvelopeContext,
    event_id: String,
    event: &RoomEvent,
) -> pb::RoomOutboxEvent {
    pb::RoomOutboxEvent {
        event_id,
        event_type: event.kind.event_type().to_string(),
        app_code: context.app_code.clone(),
        room_id: context.room_id.clone(),
        room_event_seq: event.seq,
        room_version: context.room_version,
        command_id: context.command_id.clone(),
        request_id: context.request_id.clone(),
        occurred_at_ms: context.occurred_at_ms,
        traceparent: context.traceparent.clone(),
        tracestate: context.tracestate.clone(),
        payload: Some(payload_of(&event.kind)),
    }
}

/// A `match` on an [`EventKind`] whose listed variants become the payload
/// variant of the same name with the same fields, followed by the arms that
/// map fields differently.
macro_rules! same_fields {
    ($kind:expr; $($variant:ident { $($field:ident),* }),* ; $($arm:tt)*) => {
        match $kind {
            $(EventKind::$variant { $($field),* } => P::$variant(pb::$variant { $($field),* }),)*
            $($arm)*
        }
    };
}

fn leave_reason(reason: &LeaveReason) -> pb::LeaveReason {
    match reason {
        LeaveReason::Voluntary => pb::LeaveReason::Voluntary,
        LeaveReason::Kicked => pb::LeaveReason::Kicked,
        LeaveReason::PresenceExpired => pb::LeaveReason::PresenceExpired,
    }
}

/// The wire payload of an event. Most variants carry the same fields under
/// the same names on both sides: [`same_fields`] writes those arms, so a field
/// added on one side only fails to compile here.
fn payload_of(kind: &EventKind) -> pb::room_outbox_event::Payload {
    use pb::room_outbox_event::Payload as P;
    same_fields!(kind.clone();
        RoomCreated { owner_id, title, mic_seat_count },
        RoomClosed { closed_by },
        RoomUserJoined { user_id },
        RoomUserKicked { actor_id, target_id, ban_until_ms },
        RoomAdminChanged { target_id, admin },
        RoomMicTaken { user_id, seat_index },
        RoomMicLeft { user_id, seat_index },
        RoomMicLocked { actor_id, seat_index },
        RoomMicUnlocked { actor_id, seat_index },
        RoomGiftSent { sender_id, receiver_id, gift_id, count, unit_value, total_value },
        RoomHeatChanged { heat, delta },
        RoomTreasureCountdownStarted { box_id, level, open_at_ms },
        RoomTreasureOpened { box_id, level, opened_at_ms, rewarded_user_ids };
        EventKind::RoomUserLeft { user_id, reason } => P::RoomUserLeft(pb::RoomUserLeft {
            user_id,
            reason: leave_reason(&reason).into(),
        }),
        EventKind::RoomRankChanged { top } => P::RoomRankChanged(pb::RoomRankChanged {
            top: top
                .into_iter()
                .map(|entry| pb::RankEntry {
                    user_id: entry.user_id,
                    score: entry.score,
                })
                .collect(),
        }),
    )
}

/// The event type a payload variant must be announced as.
pub fn payload_event_type(payload: &pb::room_outbox_event::Payload) -> &'static str {
    use pb::room_outbox_event::Payload as P;
    match payload {
        P::RoomCreated(_) => "RoomCreated",
        P::RoomClosed(_) => "RoomClosed",
        P::RoomUserJoined(_) => "RoomUserJoined",
        P::RoomUserLeft(_) => "RoomUserLeft",
        P::RoomUserKicked(_) => "RoomUserKicked",
        P::RoomAdminChanged(_) => "RoomAdminChanged",
        P::RoomMicTaken(_) => "RoomMicTaken",
        P::RoomMicLeft(_) => "RoomMicLeft",
        P::RoomMicLocked(_) => "RoomMicLocked",
        P::RoomMicUnlocked(_) => "RoomMicUnlocked",
        P::RoomGiftSent(_) => "RoomGiftSent",
        P::RoomHeatChanged(_) => "RoomHeatChanged",
        P::RoomRankChanged(_) => "RoomRankChanged",
        P::RoomTreasureCountdownStarted(_) => "RoomTreasureCountdownStarted",
        P::RoomTreasureOpened(_) => "RoomTreasureOpened",
    }
}

/// Every `event_type` this build knows: one per payload variant.
pub const KNOWN_EVENT_TYPES: [&str; 15] = [
    "RoomCreated",
    "RoomClosed",
    "RoomUserJoined",
    "RoomUserLeft",
    "RoomUserKicked",
    "RoomAdminChanged",
    "RoomMicTaken",
    "RoomMicLeft",
    "RoomMicLocked",
    "RoomMicUnlocked",
    "RoomGiftSent",
    "RoomHeatChanged",
    "RoomRankChanged",
    "RoomTreasureCountdownStarted",
    "RoomTreasureOpened",
];

impl pb::RoomOutboxEvent {
    /// True for an event of a type newer than this build
    /// (docs/design.md#consumer-semantics): [`decode_envelope`] accepted it
    /// with no payload because its payload is a field this build does not
    /// know. Consumers acknowledge it as ignored instead of dead-lettering it,
    /// so a rolling upgrade that adds an event type floods no dead-letter topic.
    pub fn is_unknown_type(&self) -> bool {
        self.payload.is_none()
    }
}

/// Largest envelope accepted by [`decode_envelope`]; anything larger is
/// rejected before decoding (a room event is a few hundred bytes).
pub const MAX_ENVELOPE_BYTES: usize = 256 * 1024;

/// Decodes and validates an envelope: it must have an `event_id`, a
/// `room_id`, a payload, and an `event_type` that names that payload — or,
/// from a newer producer, an `event_type` this build does not know and no
/// payload it can read ([`pb::RoomOutboxEvent::is_unknown_type`]).
pub fn decode_envelope(bytes: &[u8]) -> Result<pb::RoomOutboxEvent, Error> {
    const WHAT: &str = "RoomOutboxEvent";
    if bytes.len() > MAX_ENVELOPE_BYTES {
        return Err(Error::Invalid {
            what: WHAT,
            reason: format!(
                "{} bytes exceeds the {MAX_ENVELOPE_BYTES}-byte limit",
                bytes.len()
            ),
        });
    }
    let event = pb::RoomOutboxEvent::decode(bytes).map_err(|error| Error::Decode {
        what: WHAT,
        reason: error.to_string(),
    })?;
    let invalid = |reason: String| Error::Invalid { what: WHAT, reason };
    if event.event_id.is_empty() {
        return Err(invalid("empty event_id".into()));
    }
    if event.room_id.is_empty() {
        return Err(invalid(format!(
            "event {} has an empty room_id",
            event.event_id
        )));
    }
    let Some(payload) = &event.payload else {
        // prost skips a oneof field number it does not know, so a newer
        // event type arrives payload-less; a known type without its payload
        // is broken.
        if !event.event_type.is_empty() && !KNOWN_EVENT_TYPES.contains(&event.event_type.as_str()) {
            return Ok(event);
        }
        return Err(invalid(format!("event {} has no payload", event.event_id)));
    };
    let expected = payload_event_type(payload);
    if event.event_type != expected {
        return Err(invalid(format!(
            "event {} announces `{}` but carries `{expected}`",
            event.event_id, event.event_type
        )));
    }
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;
    use room_core::RankEntry;

    fn context() -> EnvelopeContext {
        EnvelopeContext {
            app_code: "hyapp".into(),
            room_id: "room-1".into(),
            room_version: 7,
            command_id: "cmd-1".into(),
            request_id: "req-1".into(),
            occurred_at_ms: 1_700_000_000_000,
            traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
            tracestate: String::new(),
        }
    }

    fn all_kinds() -> Vec<EventKind> {
        vec![
            EventKind::RoomCreated {
                owner_id: "u1".into(),
                title: "t".into(),
                mic_seat_count: 8,
            },
            EventKind::RoomClosed {
                closed_by: "u1".into(),
            },
            EventKind::RoomUserJoined {
                user_id: "u2".into(),
            },
            EventKind::RoomUserLeft {
                user_id: "u2".into(),
                reason: LeaveReason::PresenceExpired,
            },
            EventKind::RoomUserKicked {
                actor_id: "u1".into(),
                target_id: "u2".into(),
                ban_until_ms: 9,
            },
            EventKind::RoomAdminChanged {
                target_id: "u2".into(),
                admin: true,
            },
            EventKind::RoomMicTaken {
                user_id: "u2".into(),
                seat_index: 3,
            },
            EventKind::RoomMicLeft {
                user_id: "u2".into(),
                seat_index: 3,
            },
            EventKind::RoomMicLocked {
                actor_id: "u1".into(),
                seat_index: 1,
            },
            EventKind::RoomMicUnlocked {
                actor_id: "u1".into(),
                seat_index: 1,
            },
            EventKind::RoomGiftSent {
                sender_id: "u2".into(),
                receiver_id: "u1".into(),
                gift_id: "rose".into(),
                count: 3,
                unit_value: 10,
                total_value: 30,
            },
            EventKind::RoomHeatChanged {
                heat: 30,
                delta: 30,
            },
            EventKind::RoomRankChanged {
                top: vec![RankEntry {
                    user_id: "u2".into(),
                    score: 30,
                }],
            },
            EventKind::RoomTreasureCountdownStarted {
                box_id: "b1".into(),
                level: 1,
                open_at_ms: 5,
            },
            EventKind::RoomTreasureOpened {
                box_id: "b1".into(),
                level: 1,
                opened_at_ms: 6,
                rewarded_user_ids: vec!["u2".into()],
            },
        ]
    }

    #[test]
    fn every_event_kind_round_trips_through_the_wire() {
        for (index, kind) in all_kinds().into_iter().enumerate() {
            let event = RoomEvent {
                seq: index as u64 + 1,
                kind,
            };
            let envelope = envelope_for(&context(), format!("evt-{index}"), &event);
            assert_eq!(envelope.event_type, event.kind.event_type());
            let decoded = decode_envelope(&envelope.encode_to_vec()).unwrap();
            assert_eq!(decoded, envelope);
            assert_eq!(decoded.room_event_seq, event.seq);
        }
    }

    #[test]
    fn every_event_kind_is_a_known_event_type() {
        let names: Vec<&str> = all_kinds().iter().map(|kind| kind.event_type()).collect();
        assert_eq!(names.len(), KNOWN_EVENT_TYPES.len());
        for name in names {
            assert!(KNOWN_EVENT_TYPES.contains(&name), "{name}");
        }
    }

    #[test]
    fn a_newer_event_type_decodes_as_unknown_and_a_known_one_without_payload_does_not() {
        let mut newer = pb::RoomOutboxEvent {
            event_id: "e-1".into(),
            event_type: "RoomPollStarted".into(),
            room_id: "room-1".into(),
            ..Default::default()
        }
        .encode_to_vec();
        // Field 99, length-delimited, three bytes: a payload variant from a
        // newer schema, which this build has no field for.
        newer.extend_from_slice(&[0x9a, 0x06, 3, 0x0a, 1, b'x']);
        let event = decode_envelope(&newer).unwrap();
        assert!(event.is_unknown_type());
        assert_eq!(event.event_type, "RoomPollStarted");

        let broken = pb::RoomOutboxEvent {
            event_id: "e-2".into(),
            event_type: "RoomGiftSent".into(),
            room_id: "room-1".into(),
            ..Default::default()
        }
        .encode_to_vec();
        assert!(
            decode_envelope(&broken)
                .unwrap_err()
                .to_string()
                .contains("no payload")
        );
    }

    #[test]
    fn garbage_is_a_typed_error() {
        let error = decode_envelope(&[0xff, 0xff, 0xff]).unwrap_err();
        assert!(matches!(error, Error::Decode { .. }), "{error}");
    }

    #[test]
    fn missing_fields_and_mismatched_type_are_rejected() {
        let event = RoomEvent {
            seq: 1,
            kind: EventKind::RoomUserJoined {
                user_id: "u".into(),
            },
        };
        let good = envelope_for(&context(), "e1".into(), &event);

        let mut no_id = good.clone();
        no_id.event_id.clear();
        assert!(
            decode_envelope(&no_id.encode_to_vec())
                .unwrap_err()
                .to_string()
                .contains("event_id")
        );

        let mut no_payload = good.clone();
        no_payload.payload = None;
        assert!(
            decode_envelope(&no_payload.encode_to_vec())
                .unwrap_err()
                .to_string()
                .contains("no payload")
        );

        let mut lying = good;
        lying.event_type = "RoomGiftSent".into();
        let error = decode_envelope(&lying.encode_to_vec())
            .unwrap_err()
            .to_string();
        assert!(error.contains("RoomUserJoined"), "{error}");
    }

    #[test]
    fn oversized_input_is_rejected_before_decoding() {
        let error = decode_envelope(&vec![0u8; MAX_ENVELOPE_BYTES + 1]).unwrap_err();
        assert!(matches!(error, Error::Invalid { .. }));
    }
}
