//! Request and response bodies with Tencent's exact field names, and the API path list.
//!
//! Field names follow the Tencent IM REST docs verbatim (`GroupId`, `Owner_Account`,
//! `MsgBody`, ...). Responses ignore unknown fields and default missing ones, because Tencent
//! adds fields over time and omits most of them on failure.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The REST APIs this client calls; the path is also the rate-limit and metrics key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// `group_open_http_svc/create_group`
    CreateGroup,
    /// `group_open_http_svc/destroy_group`
    DestroyGroup,
    /// `group_open_http_svc/send_group_msg`
    SendGroupMsg,
    /// `group_open_http_svc/delete_group_member`
    DeleteGroupMember,
    /// `group_open_http_svc/forbid_send_msg`
    ForbidSendMsg,
    /// `openim/sendmsg` (one-to-one message)
    SendC2cMsg,
}

impl Api {
    /// Every API, for iteration in metrics and tests.
    pub const ALL: [Api; 6] = [
        Api::CreateGroup,
        Api::DestroyGroup,
        Api::SendGroupMsg,
        Api::DeleteGroupMember,
        Api::ForbidSendMsg,
        Api::SendC2cMsg,
    ];

    /// `{service}/{command}` as it appears after `/v4/` in the URL.
    pub const fn path(self) -> &'static str {
        match self {
            Api::CreateGroup => "group_open_http_svc/create_group",
            Api::DestroyGroup => "group_open_http_svc/destroy_group",
            Api::SendGroupMsg => "group_open_http_svc/send_group_msg",
            Api::DeleteGroupMember => "group_open_http_svc/delete_group_member",
            Api::ForbidSendMsg => "group_open_http_svc/forbid_send_msg",
            Api::SendC2cMsg => "openim/sendmsg",
        }
    }
}

/// Derives the message `Random` / `MsgRandom` from an event id: the first 4 bytes of its
/// SHA-256, big-endian. A redelivered event therefore reuses the same value and Tencent
/// de-duplicates the resend.
pub fn random_from_event_id(event_id: &str) -> u32 {
    let digest = Sha256::digest(event_id.as_bytes());
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// The `ActionStatus` / `ErrorCode` / `ErrorInfo` triple every response carries.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Envelope {
    #[serde(rename = "ActionStatus", default)]
    pub action_status: String,
    #[serde(rename = "ErrorCode", default)]
    pub error_code: i64,
    #[serde(rename = "ErrorInfo", default)]
    pub error_info: String,
}

/// One element of `MsgBody`. Serialized as `{"MsgType": ..., "MsgContent": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "MsgType", content = "MsgContent")]
pub enum MsgElement {
    /// `TIMCustomElem`: opaque data the room clients interpret.
    #[serde(rename = "TIMCustomElem")]
    Custom(CustomElem),
    /// `TIMTextElem`: plain text.
    #[serde(rename = "TIMTextElem")]
    Text(TextElem),
}

impl MsgElement {
    /// A `TIMCustomElem` with `Data` and empty `Desc` / `Ext`.
    pub fn custom(data: impl Into<String>) -> Self {
        MsgElement::Custom(CustomElem {
            data: data.into(),
            desc: String::new(),
            ext: String::new(),
        })
    }
}

/// `MsgContent` of a `TIMCustomElem`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomElem {
    /// Payload, usually JSON text.
    #[serde(rename = "Data", default)]
    pub data: String,
    /// Description (shown in offline push).
    #[serde(rename = "Desc", default)]
    pub desc: String,
    /// Extension field.
    #[serde(rename = "Ext", default)]
    pub ext: String,
}

/// `MsgContent` of a `TIMTextElem`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextElem {
    /// The text.
    #[serde(rename = "Text", default)]
    pub text: String,
}

/// `group_open_http_svc/create_group` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreateGroupRequest {
    /// Group type; rooms use `AVChatRoom`.
    #[serde(rename = "Type")]
    pub group_type: String,
    /// Our own group id (the room id), so creation is idempotent.
    #[serde(rename = "GroupId")]
    pub group_id: String,
    /// Display name (Tencent limits it to 30 bytes).
    #[serde(rename = "Name")]
    pub name: String,
    /// Owner; omitted means the app admin owns the group.
    #[serde(rename = "Owner_Account", skip_serializing_if = "Option::is_none")]
    pub owner_account: Option<String>,
}

impl CreateGroupRequest {
    /// An `AVChatRoom` with a caller-chosen id, owned by the admin.
    pub fn av_chat_room(group_id: impl Into<String>, name: impl Into<String>) -> Self {
        CreateGroupRequest {
            group_type: "AVChatRoom".to_owned(),
            group_id: group_id.into(),
            name: name.into(),
            owner_account: None,
        }
    }
}

/// `create_group` response body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct CreateGroupResponse {
    /// The created group's id.
    #[serde(rename = "GroupId", default)]
    pub group_id: String,
}

/// `group_open_http_svc/destroy_group` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DestroyGroupRequest {
    /// The group to destroy.
    #[serde(rename = "GroupId")]
    pub group_id: String,
}

/// `group_open_http_svc/send_group_msg` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SendGroupMsgRequest {
    /// Target group.
    #[serde(rename = "GroupId")]
    pub group_id: String,
    /// De-duplication key: Tencent drops a second message with the same value.
    #[serde(rename = "Random")]
    pub random: u32,
    /// Message elements.
    #[serde(rename = "MsgBody")]
    pub msg_body: Vec<MsgElement>,
    /// Sender shown to clients; omitted means the admin.
    #[serde(rename = "From_Account", skip_serializing_if = "Option::is_none")]
    pub from_account: Option<String>,
    /// Which messages Tencent discards first when the group is over its frequency
    /// limit; omitted means Tencent's default (`Normal`).
    #[serde(rename = "MsgPriority", skip_serializing_if = "Option::is_none")]
    pub msg_priority: Option<MsgPriority>,
}

/// `MsgPriority` of a group message, spelled exactly (and case-sensitively) as Tencent
/// expects. Over a group's frequency limit (40 messages per second per group), Tencent
/// discards lower-priority messages first; `High` makes a message less likely to be
/// discarded, never certain to be delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MsgPriority {
    /// Kept in preference to every other priority.
    High,
    /// Tencent's default.
    Normal,
    /// Discarded before `Normal`.
    Low,
    /// Discarded first.
    Lowest,
}

impl SendGroupMsgRequest {
    /// A message whose `Random` derives from `event_id`, so redelivery is de-duplicated.
    pub fn for_event(
        group_id: impl Into<String>,
        event_id: &str,
        msg_body: Vec<MsgElement>,
    ) -> Self {
        SendGroupMsgRequest {
            group_id: group_id.into(),
            random: random_from_event_id(event_id),
            msg_body,
            from_account: None,
            msg_priority: None,
        }
    }

    /// The same request sent with `MsgPriority: priority`.
    pub fn with_priority(self, priority: MsgPriority) -> Self {
        SendGroupMsgRequest {
            msg_priority: Some(priority),
            ..self
        }
    }
}

/// `send_group_msg` response body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct SendGroupMsgResponse {
    /// Server timestamp, unix seconds.
    #[serde(rename = "MsgTime", default)]
    pub msg_time: u64,
    /// Sequence number within the group.
    #[serde(rename = "MsgSeq", default)]
    pub msg_seq: u64,
    /// Set when Tencent accepted but did not deliver the message.
    #[serde(rename = "MsgDropReason", default)]
    pub msg_drop_reason: Option<String>,
}

/// `group_open_http_svc/delete_group_member` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeleteGroupMemberRequest {
    /// The group.
    #[serde(rename = "GroupId")]
    pub group_id: String,
    /// Accounts to remove.
    #[serde(rename = "MemberToDel_Account")]
    pub member_to_del_account: Vec<String>,
    /// 1 = do not notify the group.
    #[serde(rename = "Silence")]
    pub silence: u32,
    /// Optional reason shown to the removed members.
    #[serde(rename = "Reason", skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `group_open_http_svc/forbid_send_msg` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ForbidSendMsgRequest {
    /// The group.
    #[serde(rename = "GroupId")]
    pub group_id: String,
    /// Accounts to mute.
    #[serde(rename = "Members_Account")]
    pub members_account: Vec<String>,
    /// Mute duration in seconds; 0 lifts the mute.
    #[serde(rename = "MuteTime")]
    pub mute_time: u64,
}

/// `openim/sendmsg` (one-to-one) request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SendC2cMsgRequest {
    /// 1 = sync to the sender's other devices, 2 = do not.
    #[serde(rename = "SyncOtherMachine")]
    pub sync_other_machine: u32,
    /// Sender; omitted means the admin.
    #[serde(rename = "From_Account", skip_serializing_if = "Option::is_none")]
    pub from_account: Option<String>,
    /// Recipient.
    #[serde(rename = "To_Account")]
    pub to_account: String,
    /// De-duplication key, like `Random` for groups.
    #[serde(rename = "MsgRandom")]
    pub msg_random: u32,
    /// Message elements.
    #[serde(rename = "MsgBody")]
    pub msg_body: Vec<MsgElement>,
}

impl SendC2cMsgRequest {
    /// A message from the admin whose `MsgRandom` derives from `event_id`, not synced.
    pub fn for_event(
        to_account: impl Into<String>,
        event_id: &str,
        msg_body: Vec<MsgElement>,
    ) -> Self {
        SendC2cMsgRequest {
            sync_other_machine: 2,
            from_account: None,
            to_account: to_account.into(),
            msg_random: random_from_event_id(event_id),
            msg_body,
        }
    }
}

/// `openim/sendmsg` response body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct SendC2cMsgResponse {
    /// Server timestamp, unix seconds.
    #[serde(rename = "MsgTime", default)]
    pub msg_time: u64,
    /// Message key usable for recall.
    #[serde(rename = "MsgKey", default)]
    pub msg_key: String,
    /// Set when Tencent accepted but did not deliver the message.
    #[serde(rename = "MsgDropReason", default)]
    pub msg_drop_reason: Option<String>,
}

/// Response body of APIs that return only the envelope.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct Empty {}

/// Outcome of an idempotent operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idempotent {
    /// This call made the change.
    Applied,
    /// The change had already been made (group exists / group already gone).
    AlreadyDone,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_is_stable_and_spreads() {
        assert_eq!(random_from_event_id("evt-1"), random_from_event_id("evt-1"));
        assert_ne!(random_from_event_id("evt-1"), random_from_event_id("evt-2"));
        // First 4 bytes of SHA-256("abc") = ba7816bf.
        assert_eq!(random_from_event_id("abc"), 0xba78_16bf);
    }

    #[test]
    fn send_group_msg_serializes_with_tencent_names() {
        let mut req =
            SendGroupMsgRequest::for_event("room-1", "abc", vec![MsgElement::custom("d")]);
        req.from_account = Some("u1".into());
        let json = serde_json::to_value(&req).expect("serialize");
        assert_eq!(
            json,
            serde_json::json!({
                "GroupId": "room-1",
                "Random": 0xba78_16bf_u32,
                "MsgBody": [{"MsgType": "TIMCustomElem",
                             "MsgContent": {"Data": "d", "Desc": "", "Ext": ""}}],
                "From_Account": "u1",
            })
        );
    }

    #[test]
    fn msg_priority_is_sent_as_tencent_spells_it() {
        let spelled = [
            (MsgPriority::High, "High"),
            (MsgPriority::Normal, "Normal"),
            (MsgPriority::Low, "Low"),
            (MsgPriority::Lowest, "Lowest"),
        ];
        for (priority, name) in spelled {
            let req =
                SendGroupMsgRequest::for_event("room-1", "abc", vec![]).with_priority(priority);
            let json = serde_json::to_value(&req).expect("serialize");
            assert_eq!(json["MsgPriority"], name);
        }
        let plain = SendGroupMsgRequest::for_event("room-1", "abc", vec![]);
        let json = serde_json::to_value(&plain).expect("serialize");
        assert!(
            json.get("MsgPriority").is_none(),
            "omitted when unset: {json}"
        );
    }
}
