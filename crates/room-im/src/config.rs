//! The `im_bridge` section: what a room event does in IM beyond its group
//! message. im-bridge reads it from its own config and the relay's direct
//! mode from `direct.im_bridge`, so both paths follow the same settings.

use outbox_schema::names::IM_SILENT_EVENT_TYPES;
use serde::{Deserialize, Serialize};
use service_kit::duration::ConfigDuration;

/// Tencent's limit on one message, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 12_288;

/// The `im_bridge` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BridgeConfig {
    /// `RoomUserKicked`: remove the target from the room's IM group.
    pub kick_remove_member: bool,
    /// `RoomUserKicked`: mute the target in the group until the ban ends.
    pub kick_mute: bool,
    /// Mute length when the kick carries no future `ban_until_ms`.
    pub kick_mute_default: ConfigDuration,
    /// Event types acknowledged without a group message.
    pub silent_event_types: Vec<String>,
    /// Largest merged gift message, in bytes of its `MsgBody` JSON: Tencent
    /// refuses messages over 12 KB (Use Limits page of Tencent Cloud Chat).
    pub max_message_bytes: usize,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        Self {
            kick_remove_member: true,
            kick_mute: false,
            kick_mute_default: ConfigDuration::from_secs(600),
            silent_event_types: IM_SILENT_EVENT_TYPES
                .iter()
                .map(|event_type| (*event_type).to_owned())
                .collect(),
            max_message_bytes: MAX_MESSAGE_BYTES,
        }
    }
}
