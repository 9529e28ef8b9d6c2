//! Treasure-open wake-ups: the delayed message the relay publishes to
//! `hyapp_room_treasure_open` at `open_at_ms`, and the deterministic command
//! id that makes a redelivered wake-up an idempotent replay.

use crate::{Error, pb};
use prost::Message;

/// Command id of the OpenTreasure command a wake-up triggers. Deterministic in
/// (room, box, level), so every redelivery maps to the same command.
pub fn treasure_open_command_id(room_id: &str, box_id: &str, level: u32) -> String {
    format!("treasure-open:{room_id}:{box_id}:{level}")
}

/// The wake-up for a `RoomTreasureCountdownStarted` envelope, or `None` for any other event.
pub fn wakeup_for(event: &pb::RoomOutboxEvent) -> Option<pb::TreasureOpenWakeup> {
    let Some(pb::room_outbox_event::Payload::RoomTreasureCountdownStarted(started)) =
        &event.payload
    else {
        return None;
    };
    Some(pb::TreasureOpenWakeup {
        app_code: event.app_code.clone(),
        room_id: event.room_id.clone(),
        box_id: started.box_id.clone(),
        level: started.level,
        open_at_ms: started.open_at_ms,
        command_id: treasure_open_command_id(&event.room_id, &started.box_id, started.level),
        source_event_id: event.event_id.clone(),
    })
}

/// Decodes and validates a wake-up message.
pub fn decode_wakeup(bytes: &[u8]) -> Result<pb::TreasureOpenWakeup, Error> {
    const WHAT: &str = "TreasureOpenWakeup";
    let wakeup = pb::TreasureOpenWakeup::decode(bytes).map_err(|error| Error::Decode {
        what: WHAT,
        reason: error.to_string(),
    })?;
    if wakeup.room_id.is_empty() || wakeup.box_id.is_empty() || wakeup.command_id.is_empty() {
        return Err(Error::Invalid {
            what: WHAT,
            reason: "room_id, box_id and command_id are required".into(),
        });
    }
    Ok(wakeup)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{EnvelopeContext, envelope_for};
    use room_core::{EventKind, RoomEvent};

    #[test]
    fn countdown_becomes_a_wakeup_with_a_deterministic_command_id() {
        let context = EnvelopeContext {
            room_id: "r1".into(),
            app_code: "hyapp".into(),
            ..Default::default()
        };
        let event = RoomEvent {
            seq: 4,
            kind: EventKind::RoomTreasureCountdownStarted {
                box_id: "r1-1-0".into(),
                level: 2,
                open_at_ms: 99,
            },
        };
        let envelope = envelope_for(&context, "e4".into(), &event);
        let wakeup = wakeup_for(&envelope).unwrap();
        assert_eq!(wakeup.open_at_ms, 99);
        assert_eq!(wakeup.level, 2);
        assert_eq!(wakeup.source_event_id, "e4");
        assert_eq!(
            wakeup.command_id,
            treasure_open_command_id("r1", "r1-1-0", 2)
        );
        assert_eq!(decode_wakeup(&wakeup.encode_to_vec()).unwrap(), wakeup);

        let other = RoomEvent {
            seq: 5,
            kind: EventKind::RoomUserJoined {
                user_id: "u".into(),
            },
        };
        assert!(wakeup_for(&envelope_for(&context, "e5".into(), &other)).is_none());
    }

    #[test]
    fn invalid_wakeups_are_typed_errors() {
        assert!(matches!(
            decode_wakeup(&[0xff, 0x01]),
            Err(Error::Decode { .. })
        ));
        let empty = pb::TreasureOpenWakeup::default().encode_to_vec();
        assert!(matches!(decode_wakeup(&empty), Err(Error::Invalid { .. })));
    }
}
