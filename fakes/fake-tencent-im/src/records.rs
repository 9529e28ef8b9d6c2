//! What the fake shows of its history: the messages it recorded and the groups alive,
//! as `/admin/messages` and `/admin/groups` answer them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Whether a recorded message went to a group or to one account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageKind {
    /// `group_open_http_svc/send_group_msg`
    Group,
    /// `openim/sendmsg`
    C2c,
}

/// One accepted, non-duplicate message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedMessage {
    /// Group or one-to-one.
    pub kind: MessageKind,
    /// `GroupId` for group messages.
    pub group_id: Option<String>,
    /// `To_Account` for one-to-one messages.
    pub to_account: Option<String>,
    /// `From_Account`, when given.
    pub from_account: Option<String>,
    /// `Random` (group) or `MsgRandom` (one-to-one).
    pub random: u32,
    /// `MsgBody` exactly as received.
    pub msg_body: serde_json::Value,
    /// `MsgPriority` of a group message, when given (`High`, `Normal`, `Low`, `Lowest`).
    #[serde(default)]
    pub msg_priority: Option<String>,
    /// `MsgSeq` assigned (per group; a global counter for one-to-one).
    pub msg_seq: u64,
    /// When the fake accepted it, unix milliseconds.
    pub received_at_ms: u64,
}

/// A live group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// `GroupId`.
    pub group_id: String,
    /// `Type`, e.g. `AVChatRoom`.
    pub group_type: String,
    /// `Name`.
    pub name: String,
    /// `Owner_Account`, when given.
    pub owner_account: Option<String>,
    /// Creation time, unix milliseconds.
    pub created_at_ms: u64,
    /// Accounts removed via `delete_group_member`, in call order, without repeats.
    pub removed_members: Vec<String>,
    /// Muted accounts and the unix second their mute ends.
    pub muted_until: BTreeMap<String, u64>,
    /// Last `MsgSeq` handed out in this group.
    pub last_msg_seq: u64,
}

/// Filters for [`crate::FakeImHandle::messages`] and `GET /admin/messages`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageFilter {
    /// Only messages to this group.
    #[serde(default)]
    pub group_id: Option<String>,
    /// Only one-to-one messages to this account.
    #[serde(default)]
    pub to_account: Option<String>,
}
