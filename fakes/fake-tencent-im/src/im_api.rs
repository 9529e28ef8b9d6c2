//! `POST /v4/{service}/{command}`: authentication, faults, rate limits and the IM APIs.
//!
//! The order mirrors what a caller of the real service observes: the signature is checked
//! first, then injected faults and the per-API frequency limit apply, and only then is the
//! body validated and executed. Bodies are read as untyped JSON with Tencent's field names
//! spelled out here, independently of the client's structs, so a misspelled field in either
//! one shows up as a test failure instead of cancelling out.
//!
//! A message send then meets Tencent's message limits ([`crate::limits`]): a `MsgBody` over
//! the size limit is refused with ErrorCode 80002, and a new group message over its group's
//! frequency limit is answered OK with `MsgDropReason: "MsgFreqCtrl"` and not delivered.

use std::collections::HashMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use tencent_im::usersig::verify_usersig;
use tencent_im::{MSG_FREQ_CTRL, codes};
use tokio::time::Instant;

use crate::App;
use crate::limits::msg_body_bytes;
use crate::records::GroupRecord;
use crate::state::{GroupDelivery, SentMessage, unix_millis};

/// Group types Tencent accepts in `create_group`.
const GROUP_TYPES: &[&str] = &[
    "Private",
    "Public",
    "ChatRoom",
    "AVChatRoom",
    "Community",
    "Work",
    "Meeting",
];

/// Tencent caps group names at 30 bytes.
const MAX_GROUP_NAME_BYTES: usize = 30;

/// The `MsgPriority` values `send_group_msg` accepts, spelled case-sensitively as Tencent does.
const MSG_PRIORITIES: &[&str] = &["High", "Normal", "Low", "Lowest"];

/// An ErrorCode answer, carried through `?` inside the handlers.
struct Fail(i64, String);

fn fail(code: i64, info: impl Into<String>) -> Fail {
    Fail(code, info.into())
}

type Outcome = Result<Map<String, Value>, Fail>;

pub(crate) async fn handle(
    State(app): State<App>,
    Path((service, command)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let api = format!("{service}/{command}");
    {
        let mut state = app.lock();
        state.stats.requests += 1;
        *state.stats.calls_by_api.entry(api.clone()).or_default() += 1;
    }
    let outcome = match authenticate(&app, &query) {
        Err(rejected) => Err(rejected),
        Ok(()) => execute(&app, &api, &body).await,
    };
    match outcome {
        Ok(Reply::Json(Ok(mut fields))) => {
            app.lock().stats.accepted += 1;
            fields.insert("ActionStatus".into(), json!("OK"));
            fields.insert("ErrorCode".into(), json!(0));
            fields.insert("ErrorInfo".into(), json!(""));
            Json(Value::Object(fields)).into_response()
        }
        Ok(Reply::Json(Err(Fail(code, info)))) | Err(Fail(code, info)) => {
            *app.lock().stats.rejected.entry(code).or_default() += 1;
            tracing::debug!(im_api = %api, error_code = code, "fake im rejected call");
            Json(json!({"ActionStatus": "FAIL", "ErrorCode": code, "ErrorInfo": info}))
                .into_response()
        }
        Ok(Reply::Http(status)) => {
            *app.lock()
                .stats
                .http_faults
                .entry(status.as_u16())
                .or_default() += 1;
            (status, "injected fault").into_response()
        }
    }
}

enum Reply {
    Json(Outcome),
    Http(StatusCode),
}

fn authenticate(app: &App, query: &HashMap<String, String>) -> Result<(), Fail> {
    let config = &app.config;
    let sdk_app_id = query
        .get("sdkappid")
        .ok_or_else(|| fail(codes::SDKAPPID_MISSING, "sdkappid is required"))?;
    if sdk_app_id.parse::<u64>().ok() != Some(config.sdk_app_id) {
        return Err(fail(codes::SDKAPPID_NOT_FOUND, "sdkappid not found"));
    }
    let identifier = query
        .get("identifier")
        .map(String::as_str)
        .unwrap_or_default();
    let usersig = query.get("usersig").map(String::as_str).unwrap_or_default();
    if usersig.is_empty() {
        return Err(fail(codes::USERSIG_EMPTY, "usersig is empty"));
    }
    let now = unix_millis() / 1000;
    let verified = verify_usersig(&config.secret_key, config.sdk_app_id, usersig, now)
        .map_err(|e| fail(e.tencent_code(), e.to_string()))?;
    if verified.identifier != identifier {
        return Err(fail(
            codes::USERSIG_IDENTIFIER_MISMATCH,
            "identifier does not match the usersig identifier",
        ));
    }
    if identifier != config.admin_identifier {
        return Err(fail(
            codes::ADMIN_REQUIRED,
            "this api requires the app admin identity",
        ));
    }
    Ok(())
}

async fn execute(app: &App, api: &str, body: &[u8]) -> Result<Reply, Fail> {
    let fault = app.lock().take_fault(api);
    let mut drop_reason = None;
    if let Some(fault) = fault {
        if fault.latency_ms > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(fault.latency_ms)).await;
        }
        if let Some(status) = fault.http_status {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return Ok(Reply::Http(status));
        }
        if let Some(code) = fault.error_code {
            let info = fault
                .error_info
                .unwrap_or_else(|| format!("injected error {code}"));
            return Err(Fail(code, info));
        }
        drop_reason = fault.msg_drop_reason;
    }
    let is_group_api = api.starts_with("group_open_http_svc/");
    if !app.lock().admit(api, Instant::now()) {
        let code = if is_group_api {
            codes::GROUP_FREQ_LIMIT
        } else {
            codes::REST_FREQ_LIMIT
        };
        return Err(fail(code, "frequency limit exceeded"));
    }
    let bad_json = if is_group_api {
        codes::GROUP_BAD_PARAM
    } else {
        codes::OPENIM_JSON
    };
    let body = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(body)) => body,
        _ => return Err(fail(bad_json, "request body is not a json object")),
    };
    let outcome = match api {
        "group_open_http_svc/create_group" => create_group(app, &body),
        "group_open_http_svc/destroy_group" => destroy_group(app, &body),
        "group_open_http_svc/send_group_msg" => send_group_msg(app, &body, drop_reason),
        "group_open_http_svc/delete_group_member" => delete_group_member(app, &body),
        "group_open_http_svc/forbid_send_msg" => forbid_send_msg(app, &body),
        "openim/sendmsg" => send_c2c_msg(app, &body, drop_reason),
        _ if is_group_api => Err(fail(codes::GROUP_BAD_COMMAND, "invalid command")),
        _ => Err(fail(codes::BAD_RESOURCE, "unknown api")),
    };
    Ok(Reply::Json(outcome))
}

fn string_field<'a>(body: &'a Map<String, Value>, name: &str, code: i64) -> Result<&'a str, Fail> {
    match body.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        _ => Err(fail(
            code,
            format!("{name} is required and must be a non-empty string"),
        )),
    }
}

fn optional_string(
    body: &Map<String, Value>,
    name: &str,
    code: i64,
) -> Result<Option<String>, Fail> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(fail(code, format!("{name} must be a string"))),
    }
}

fn u32_field(body: &Map<String, Value>, name: &str, code: i64) -> Result<u32, Fail> {
    body.get(name)
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| {
            fail(
                code,
                format!("{name} is required and must be a 32-bit unsigned integer"),
            )
        })
}

fn string_list(body: &Map<String, Value>, name: &str) -> Result<Vec<String>, Fail> {
    let invalid = || {
        fail(
            codes::GROUP_BAD_PARAM,
            format!("{name} must be a non-empty string array"),
        )
    };
    let items = body
        .get(name)
        .and_then(Value::as_array)
        .ok_or_else(invalid)?;
    let names: Option<Vec<String>> = items
        .iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect();
    names.filter(|n| !n.is_empty()).ok_or_else(invalid)
}

/// Checks `MsgBody` element by element the way Tencent documents the message formats.
fn msg_body(body: &Map<String, Value>, code: i64) -> Result<Value, Fail> {
    let invalid = |why: &str| fail(code, format!("MsgBody invalid: {why}"));
    let elems = body
        .get("MsgBody")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("not an array"))?;
    if elems.is_empty() {
        return Err(invalid("empty"));
    }
    for elem in elems {
        let msg_type = elem
            .get("MsgType")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("MsgType"))?;
        let content = elem
            .get("MsgContent")
            .and_then(Value::as_object)
            .ok_or_else(|| invalid("MsgContent"))?;
        let strings_ok = |fields: &[&str]| {
            fields
                .iter()
                .all(|f| content.get(*f).is_none_or(Value::is_string))
        };
        let ok = match msg_type {
            "TIMCustomElem" => strings_ok(&["Data", "Desc", "Ext", "Sound"]),
            "TIMTextElem" => content.get("Text").is_some_and(Value::is_string),
            "TIMFaceElem" | "TIMLocationElem" | "TIMSoundElem" | "TIMImageElem" | "TIMFileElem"
            | "TIMVideoFileElem" => true,
            _ => false,
        };
        if !ok {
            return Err(invalid(msg_type));
        }
    }
    Ok(Value::Array(elems.clone()))
}

/// Refuses a `MsgBody` over the configured size limit the way Tencent does, with 80002.
fn check_body_size(app: &App, msg_body: &Value) -> Result<(), Fail> {
    let bytes = msg_body_bytes(msg_body);
    match app.config.max_msg_body_bytes {
        Some(max) if bytes > max => Err(fail(
            codes::MSG_TOO_LONG,
            format!("message content too long: MsgBody is {bytes} bytes, the limit {max}"),
        )),
        _ => Ok(()),
    }
}

/// `MsgPriority`, when given, must be one of Tencent's four values.
fn msg_priority(body: &Map<String, Value>) -> Result<Option<String>, Fail> {
    let priority = optional_string(body, "MsgPriority", codes::GROUP_BAD_PARAM)?;
    match priority {
        Some(p) if !MSG_PRIORITIES.contains(&p.as_str()) => Err(fail(
            codes::GROUP_BAD_PARAM,
            format!("MsgPriority {p:?} is invalid: use High, Normal, Low or Lowest"),
        )),
        _ => Ok(priority),
    }
}

fn create_group(app: &App, body: &Map<String, Value>) -> Outcome {
    let bad = codes::GROUP_BAD_PARAM;
    let group_type = string_field(body, "Type", bad)?;
    if !GROUP_TYPES.contains(&group_type) {
        return Err(fail(bad, format!("unknown group Type {group_type}")));
    }
    let name = string_field(body, "Name", bad)?;
    if name.len() > MAX_GROUP_NAME_BYTES {
        return Err(fail(bad, "Name is longer than 30 bytes"));
    }
    let owner_account = optional_string(body, "Owner_Account", bad)?;
    let requested_id = optional_string(body, "GroupId", bad)?;
    let mut state = app.lock();
    let group_id = match requested_id {
        Some(id) if state.groups.contains_key(&id) => {
            return Err(fail(codes::GROUP_ID_USED, "group id has been used"));
        }
        Some(id) => id,
        None => {
            state.next_auto_group += 1;
            format!("@TGS#{}", state.next_auto_group)
        }
    };
    let record = GroupRecord {
        group_id: group_id.clone(),
        group_type: group_type.to_owned(),
        name: name.to_owned(),
        owner_account,
        created_at_ms: unix_millis(),
        removed_members: Vec::new(),
        muted_until: Default::default(),
        last_msg_seq: 0,
    };
    state.groups.insert(group_id.clone(), record);
    Ok(Map::from_iter([("GroupId".to_owned(), json!(group_id))]))
}

fn destroy_group(app: &App, body: &Map<String, Value>) -> Outcome {
    let group_id = string_field(body, "GroupId", codes::GROUP_BAD_PARAM)?;
    match app.lock().groups.remove(group_id) {
        Some(_) => Ok(Map::new()),
        None => Err(group_not_found()),
    }
}

fn group_not_found() -> Fail {
    fail(
        codes::GROUP_NOT_FOUND,
        "group does not exist or has been dismissed",
    )
}

fn send_group_msg(app: &App, body: &Map<String, Value>, drop_reason: Option<String>) -> Outcome {
    let bad = codes::GROUP_BAD_PARAM;
    let group_id = string_field(body, "GroupId", bad)?.to_owned();
    let random = u32_field(body, "Random", bad)?;
    let msg_body = msg_body(body, bad)?;
    let from_account = optional_string(body, "From_Account", bad)?;
    let msg_priority = msg_priority(body)?;
    let mut state = app.lock();
    // Read under the lock, so the group windows see sends in the order they are judged.
    let now = Instant::now();
    if !state.groups.contains_key(&group_id) {
        return Err(group_not_found());
    }
    if let Err(too_long) = check_body_size(app, &msg_body) {
        state.stats.count_oversized(Some(&group_id));
        return Err(too_long);
    }
    if let Some(reason) = drop_reason {
        state.stats.dropped += 1;
        return Ok(group_msg_dropped(&reason));
    }
    let sent = SentMessage {
        from_account,
        random,
        msg_body,
        msg_priority,
    };
    let record_limit = app.config.max_recorded_messages;
    match state.accept_group_message(&group_id, sent, now, record_limit) {
        None => Err(group_not_found()),
        Some(GroupDelivery::FreqDropped) => Ok(group_msg_dropped(MSG_FREQ_CTRL)),
        Some(GroupDelivery::Accepted(seen)) => Ok(Map::from_iter([
            ("MsgTime".to_owned(), json!(seen.msg_time)),
            ("MsgSeq".to_owned(), json!(seen.msg_seq)),
        ])),
    }
}

/// The answer to a group message accepted but not delivered: OK, no `MsgSeq`, a reason.
fn group_msg_dropped(reason: &str) -> Map<String, Value> {
    Map::from_iter([
        ("MsgTime".to_owned(), json!(unix_millis() / 1000)),
        ("MsgSeq".to_owned(), json!(0)),
        ("MsgDropReason".to_owned(), json!(reason)),
    ])
}

fn delete_group_member(app: &App, body: &Map<String, Value>) -> Outcome {
    let group_id = string_field(body, "GroupId", codes::GROUP_BAD_PARAM)?;
    let members = string_list(body, "MemberToDel_Account")?;
    if body.get("Silence").is_some_and(|s| !s.is_u64()) {
        return Err(fail(codes::GROUP_BAD_PARAM, "Silence must be 0 or 1"));
    }
    let mut state = app.lock();
    let group = state.groups.get_mut(group_id).ok_or_else(group_not_found)?;
    for member in members {
        if !group.removed_members.contains(&member) {
            group.removed_members.push(member);
        }
    }
    Ok(Map::new())
}

fn forbid_send_msg(app: &App, body: &Map<String, Value>) -> Outcome {
    let group_id = string_field(body, "GroupId", codes::GROUP_BAD_PARAM)?;
    let members = string_list(body, "Members_Account")?;
    let mute_time = body
        .get("MuteTime")
        .and_then(Value::as_u64)
        .ok_or_else(|| fail(codes::GROUP_BAD_PARAM, "MuteTime is required"))?;
    let mut state = app.lock();
    let group = state.groups.get_mut(group_id).ok_or_else(group_not_found)?;
    let until = unix_millis() / 1000 + mute_time;
    for member in members {
        if mute_time == 0 {
            group.muted_until.remove(&member);
        } else {
            group.muted_until.insert(member, until);
        }
    }
    Ok(Map::new())
}

fn send_c2c_msg(app: &App, body: &Map<String, Value>, drop_reason: Option<String>) -> Outcome {
    if body
        .get("SyncOtherMachine")
        .is_some_and(|v| !matches!(v.as_u64(), Some(1 | 2)))
    {
        return Err(fail(codes::OPENIM_JSON, "SyncOtherMachine must be 1 or 2"));
    }
    let to_account = string_field(body, "To_Account", codes::OPENIM_TO_ACCOUNT)?.to_owned();
    let random = u32_field(body, "MsgRandom", codes::OPENIM_MSG_RANDOM)?;
    let msg_body = msg_body(body, codes::OPENIM_MSG_BODY)?;
    let from_account = optional_string(body, "From_Account", codes::OPENIM_JSON)?;
    let mut state = app.lock();
    let now = Instant::now();
    if let Err(too_long) = check_body_size(app, &msg_body) {
        state.stats.count_oversized(None);
        return Err(too_long);
    }
    if let Some(reason) = drop_reason {
        state.stats.dropped += 1;
        return Ok(Map::from_iter([
            ("MsgTime".to_owned(), json!(unix_millis() / 1000)),
            ("MsgKey".to_owned(), json!("")),
            ("MsgDropReason".to_owned(), json!(reason)),
        ]));
    }
    let sent = SentMessage {
        from_account,
        random,
        msg_body,
        msg_priority: None,
    };
    let record_limit = app.config.max_recorded_messages;
    let seen = state.accept_c2c_message(&to_account, sent, now, record_limit);
    // Tencent's MsgKey is `{seq}_{random}_{time}`.
    let msg_key = format!("{}_{}_{}", seen.msg_seq, random, seen.msg_time);
    Ok(Map::from_iter([
        ("MsgTime".to_owned(), json!(seen.msg_time)),
        ("MsgKey".to_owned(), json!(msg_key)),
    ]))
}
