//! Validation of the commands room-service issues itself, written once for
//! both of their entries: the instance that issues one (a treasure box's
//! wake-up consumed here) and the room's holder when it is forwarded there
//! (`RoomPeer`), which trusts nothing the forwarding instance computed.

use hyapp_api::room as api;
use room_core::Command;

use super::{CommandRequest, MAX_COMMAND_ID_LEN, MAX_ROOM_ID_LEN, check_id, internal_fingerprint};
use crate::Error;

/// Longest treasure box id, in bytes (the wake-up's `box_id`).
pub const MAX_BOX_ID_BYTES: usize = 256;

/// An `OpenTreasure` wake-up for the room's pipeline; room-core then checks
/// the box, its level, `open_at_ms` and the daily reset against the room.
pub fn open_treasure(
    request: &api::OpenTreasureCommand,
    app_code: &str,
) -> Result<CommandRequest, Error> {
    check_id("room_id", &request.room_id, MAX_ROOM_ID_LEN)?;
    check_id("command_id", &request.command_id, MAX_COMMAND_ID_LEN)?;
    if request.box_id.is_empty() || request.box_id.len() > MAX_BOX_ID_BYTES {
        return Err(Error::InvalidArgument(format!(
            "box_id must be 1..={MAX_BOX_ID_BYTES} bytes"
        )));
    }
    let command = Command::OpenTreasure {
        box_id: request.box_id.clone(),
        level: request.level,
    };
    Ok(CommandRequest {
        room_id: request.room_id.clone(),
        command_id: request.command_id.clone(),
        app_code: app_code.to_owned(),
        request_id: String::new(),
        traceparent: String::new(),
        fingerprint: internal_fingerprint("OpenTreasure", &request.room_id, &command),
        command,
        forward: Some(api::peer_command::Request::OpenTreasure(request.clone())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wake_up(room_id: &str, box_id: &str) -> api::OpenTreasureCommand {
        api::OpenTreasureCommand {
            room_id: room_id.into(),
            command_id: "treasure-1".into(),
            box_id: box_id.into(),
            level: 2,
        }
    }

    #[test]
    fn a_wake_up_is_checked_and_fingerprinted_from_its_inputs() {
        let valid = open_treasure(&wake_up("room-1", "box-1"), "hyapp").unwrap();
        let again = open_treasure(&wake_up("room-1", "box-1"), "hyapp").unwrap();
        assert_eq!(valid.fingerprint, again.fingerprint);
        let other = open_treasure(&wake_up("room-1", "box-2"), "hyapp").unwrap();
        assert_ne!(valid.fingerprint, other.fingerprint);
        assert!(matches!(
            valid.forward,
            Some(api::peer_command::Request::OpenTreasure(_))
        ));
        let refused = |request| open_treasure(&request, "hyapp").unwrap_err().to_string();
        assert!(refused(wake_up("a/b", "box-1")).contains("room_id"));
        assert!(refused(wake_up("room-1", "")).contains("box_id"));
        assert!(refused(wake_up("room-1", &"b".repeat(257))).contains("box_id"));
    }
}
