//! The client against the fake Tencent IM server over real loopback HTTP.

use std::time::Duration;

use fake_tencent_im::{FakeImConfig, FakeImHandle, FaultRule, MessageKind, spawn};
use serde_json::json;
use tencent_im::{
    Api, Client, ClientConfig, CreateGroupRequest, DeleteGroupMemberRequest, Error, ErrorClass,
    ForbidSendMsgRequest, Idempotent, MsgElement, SendC2cMsgRequest, SendGroupMsgRequest,
    random_from_event_id,
};

const APP: u64 = 1_400_000_001;
const KEY: &str = "test-secret-key-do-not-print";
const ADMIN: &str = "administrator";
const ROOM: &str = "room-1001";

async fn fake() -> FakeImHandle {
    spawn(FakeImConfig::new(APP, KEY, ADMIN))
        .await
        .expect("fake im starts")
}

fn client_for(fake: &FakeImHandle) -> Client {
    Client::new(ClientConfig::new(fake.base_url(), APP, ADMIN, KEY)).expect("valid config")
}

async fn with_room() -> (FakeImHandle, Client) {
    let fake = fake().await;
    let client = client_for(&fake);
    client
        .ensure_group(&CreateGroupRequest::av_chat_room(ROOM, "Room 1001"))
        .await
        .expect("room");
    (fake, client)
}

fn gift_event(event_id: &str) -> SendGroupMsgRequest {
    SendGroupMsgRequest::for_event(
        ROOM,
        event_id,
        vec![MsgElement::custom(r#"{"type":"gift"}"#)],
    )
}

#[tokio::test]
async fn ensure_group_twice_creates_one_group() {
    let fake = fake().await;
    let client = client_for(&fake);
    let req = CreateGroupRequest::av_chat_room(ROOM, "Room 1001");
    assert_eq!(
        client.ensure_group(&req).await.expect("first"),
        Idempotent::Applied
    );
    assert_eq!(
        client.ensure_group(&req).await.expect("second"),
        Idempotent::AlreadyDone
    );
    let groups = fake.groups();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].group_id, ROOM);
    assert_eq!(groups[0].group_type, "AVChatRoom");
    assert_eq!(groups[0].name, "Room 1001");
    assert_eq!(
        fake.stats().rejected.get(&10021),
        Some(&1),
        "the second create hit 10021"
    );
    // The raw call still reports the duplicate, for callers that care.
    let err = client.create_group(&req).await.expect_err("duplicate");
    assert_eq!(err.code(), Some(10021));
}

#[tokio::test]
async fn destroy_group_is_idempotent() {
    let (fake, client) = with_room().await;
    assert_eq!(
        client.destroy_group(ROOM).await.expect("destroy"),
        Idempotent::Applied
    );
    assert_eq!(
        client.destroy_group(ROOM).await.expect("again"),
        Idempotent::AlreadyDone
    );
    assert!(fake.groups().is_empty());
}

#[tokio::test]
async fn redelivered_event_is_recorded_once() {
    let (fake, client) = with_room().await;
    let first = client
        .send_group_msg(&gift_event("evt-1"))
        .await
        .expect("first send");
    let again = client
        .send_group_msg(&gift_event("evt-1"))
        .await
        .expect("redelivery");
    assert_eq!(
        first.msg_seq, again.msg_seq,
        "the duplicate is answered with the original"
    );
    client
        .send_group_msg(&gift_event("evt-2"))
        .await
        .expect("other event");

    let messages = fake.group_messages(ROOM);
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0].kind, MessageKind::Group);
    assert_eq!(messages[0].random, random_from_event_id("evt-1"));
    assert_eq!(
        messages[0].msg_body,
        json!([{"MsgType": "TIMCustomElem",
                "MsgContent": {"Data": "{\"type\":\"gift\"}", "Desc": "", "Ext": ""}}])
    );
    assert_eq!(fake.stats().deduplicated, 1);
}

#[tokio::test]
async fn c2c_message_is_sent_and_deduplicated() {
    let fake = fake().await;
    let client = client_for(&fake);
    let mut req = SendC2cMsgRequest::for_event("user-7", "evt-9", vec![MsgElement::custom("hi")]);
    req.from_account = Some("user-1".into());
    let resp = client.send_c2c_msg(&req).await.expect("send");
    assert!(!resp.msg_key.is_empty());
    client.send_c2c_msg(&req).await.expect("redelivery");
    let messages = fake.c2c_messages("user-7");
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].kind, MessageKind::C2c);
    assert_eq!(messages[0].from_account.as_deref(), Some("user-1"));
    assert_eq!(messages[0].random, random_from_event_id("evt-9"));
    assert_eq!(fake.stats().deduplicated, 1);
}

#[tokio::test]
async fn kick_and_mute_reach_the_group() {
    let (fake, client) = with_room().await;
    let kick = DeleteGroupMemberRequest {
        group_id: ROOM.into(),
        member_to_del_account: vec!["u2".into()],
        silence: 1,
        reason: None,
    };
    client.delete_group_member(&kick).await.expect("kick");
    let mute = ForbidSendMsgRequest {
        group_id: ROOM.into(),
        members_account: vec!["u3".into()],
        mute_time: 600,
    };
    client.forbid_send_msg(&mute).await.expect("mute");
    let group = &fake.groups()[0];
    assert_eq!(group.removed_members, vec!["u2".to_owned()]);
    assert!(group.muted_until.contains_key("u3"));

    client
        .forbid_send_msg(&ForbidSendMsgRequest {
            mute_time: 0,
            ..mute
        })
        .await
        .expect("unmute");
    assert!(fake.groups()[0].muted_until.is_empty());
}

#[tokio::test]
async fn server_failures_are_transient() {
    let (fake, client) = with_room().await;
    let send = Api::SendGroupMsg.path();
    for status in [429, 500, 503] {
        fake.inject_fault(FaultRule::http_status(send, status));
        let err = client
            .send_group_msg(&gift_event("evt-t"))
            .await
            .expect_err("injected");
        assert!(
            matches!(err, Error::HttpStatus { status: s, .. } if s == status),
            "{err}"
        );
        assert_eq!(err.class(), ErrorClass::Transient, "{status}");
    }
    fake.inject_fault(FaultRule::error_code(send, 10002));
    let err = client
        .send_group_msg(&gift_event("evt-t"))
        .await
        .expect_err("injected");
    assert_eq!(
        (err.class(), err.code()),
        (ErrorClass::Transient, Some(10002))
    );

    // Faults are used up: the retry goes through, and only once.
    client
        .send_group_msg(&gift_event("evt-t"))
        .await
        .expect("retry succeeds");
    assert_eq!(fake.group_messages(ROOM).len(), 1);
}

#[tokio::test]
async fn timeouts_are_transient() {
    let fake = fake().await;
    let mut config = ClientConfig::new(fake.base_url(), APP, ADMIN, KEY);
    config.request_timeout = Duration::from_millis(100);
    let client = Client::new(config).expect("config");
    fake.inject_fault(FaultRule::latency("*", 3_000));
    let err = client.destroy_group(ROOM).await.expect_err("slow server");
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert_eq!(err.class(), ErrorClass::Transient);
}

#[tokio::test]
async fn throttling_is_rate_limited() {
    let (fake, client) = with_room().await;
    let send = Api::SendGroupMsg.path();
    fake.inject_fault(FaultRule::error_code(send, 10006));
    let err = client
        .send_group_msg(&gift_event("evt-r"))
        .await
        .expect_err("10006");
    assert_eq!(
        (err.class(), err.code()),
        (ErrorClass::RateLimited, Some(10006))
    );

    fake.inject_fault(FaultRule::drop_reason(send, "MsgFreqCtrl"));
    let err = client
        .send_group_msg(&gift_event("evt-r"))
        .await
        .expect_err("dropped");
    assert!(
        matches!(&err, Error::Dropped { reason, .. } if reason == "MsgFreqCtrl"),
        "{err}"
    );
    assert_eq!(err.class(), ErrorClass::RateLimited);
    assert!(
        fake.group_messages(ROOM).is_empty(),
        "a dropped message is not delivered"
    );

    // The fake's own frequency limit, as Tencent enforces it.
    fake.set_rate_limit(Some(1));
    client
        .send_group_msg(&gift_event("evt-r"))
        .await
        .expect("within the limit");
    let err = client
        .send_group_msg(&gift_event("evt-s"))
        .await
        .expect_err("over the limit");
    assert_eq!(
        (err.class(), err.code()),
        (ErrorClass::RateLimited, Some(10006))
    );
}

#[tokio::test]
async fn other_codes_are_permanent_with_the_code() {
    let (fake, client) = with_room().await;
    let mut to_nowhere = gift_event("evt-p");
    to_nowhere.group_id = "no-such-room".into();
    let err = client
        .send_group_msg(&to_nowhere)
        .await
        .expect_err("unknown group");
    assert_eq!(
        (err.class(), err.code()),
        (ErrorClass::Permanent, Some(10010))
    );

    fake.inject_fault(FaultRule::error_code("*", 80001));
    let err = client
        .send_group_msg(&gift_event("evt-p"))
        .await
        .expect_err("injected");
    assert_eq!(
        (err.class(), err.code()),
        (ErrorClass::Permanent, Some(80001))
    );
    assert!(err.to_string().contains("80001"), "{err}");
}

#[tokio::test]
async fn expired_sig_is_regenerated_and_retried_once() {
    let (fake, client) = with_room().await;
    let before = client.stats();
    fake.inject_fault(FaultRule::error_code(Api::SendGroupMsg.path(), 70001));
    client
        .send_group_msg(&gift_event("evt-x"))
        .await
        .expect("retried with a fresh sig");
    let after = client.stats();
    assert_eq!(after.expired_sig_retries, before.expired_sig_retries + 1);
    assert_eq!(after.usersig_generations, before.usersig_generations + 1);
    assert_eq!(fake.group_messages(ROOM).len(), 1);
    assert_eq!(fake.stats().rejected.get(&70001), Some(&1));

    // Only one internal retry: a second 70001 surfaces as ExpiredSig.
    fake.inject_fault(FaultRule::error_code(Api::SendGroupMsg.path(), 70001).times(2));
    let err = client
        .send_group_msg(&gift_event("evt-y"))
        .await
        .expect_err("still expired");
    assert_eq!(err.class(), ErrorClass::ExpiredSig);
    assert!(fake.pending_faults().is_empty());
}

#[tokio::test]
async fn wrong_secret_or_identity_is_rejected() {
    let fake = fake().await;
    let room = CreateGroupRequest::av_chat_room(ROOM, "Room");
    let wrong_key = ClientConfig::new(fake.base_url(), APP, ADMIN, "not-the-key");
    let err = Client::new(wrong_key)
        .expect("config")
        .ensure_group(&room)
        .await
        .expect_err("key");
    assert_eq!(
        (err.class(), err.code()),
        (ErrorClass::Permanent, Some(70009))
    );

    let not_admin = ClientConfig::new(fake.base_url(), APP, "user-1", KEY);
    let err = Client::new(not_admin)
        .expect("config")
        .ensure_group(&room)
        .await
        .expect_err("user");
    assert_eq!(err.code(), Some(60010));

    let other_app = ClientConfig::new(fake.base_url(), APP + 1, ADMIN, KEY);
    let err = Client::new(other_app)
        .expect("config")
        .ensure_group(&room)
        .await
        .expect_err("app");
    assert_eq!(err.code(), Some(70020));
    assert!(fake.groups().is_empty());
}

#[tokio::test]
async fn secrets_never_show_in_debug_or_errors() {
    let fake = fake().await;
    let config = ClientConfig::new(fake.base_url(), APP, ADMIN, KEY);
    let client = Client::new(config.clone()).expect("config");
    for shown in [
        format!("{config:?}"),
        format!("{client:?}"),
        config.secret_key.to_string(),
    ] {
        assert!(!shown.contains(KEY), "{shown}");
    }
    assert!(!format!("{:?}", fake.config()).contains(KEY));

    // Transport errors must not echo the signed URL.
    let addr = fake.addr();
    fake.shutdown().await.expect("shutdown");
    let closed =
        Client::new(ClientConfig::new(format!("http://{addr}"), APP, ADMIN, KEY)).expect("config");
    let err = closed
        .destroy_group(ROOM)
        .await
        .expect_err("nothing listening");
    assert_eq!(err.class(), ErrorClass::Transient);
    for shown in [err.to_string(), format!("{err:?}")] {
        assert!(
            !shown.contains("usersig") && !shown.contains(KEY),
            "{shown}"
        );
    }
}

#[tokio::test]
async fn calls_beyond_the_client_rate_limit_wait_instead_of_failing() {
    let fake = fake().await;
    let mut config = ClientConfig::new(fake.base_url(), APP, ADMIN, KEY);
    config.rate_limit_per_api = 5;
    let client = Client::new(config).expect("config");
    client
        .ensure_group(&CreateGroupRequest::av_chat_room(ROOM, "Room"))
        .await
        .expect("room");

    let mut sends = tokio::task::JoinSet::new();
    for n in 0..12 {
        let client = client.clone();
        sends.spawn(async move {
            client
                .send_group_msg(&gift_event(&format!("evt-{n}")))
                .await
        });
    }
    while let Some(joined) = sends.join_next().await {
        joined.expect("task").expect("every send succeeds");
    }
    assert_eq!(fake.group_messages(ROOM).len(), 12);
    assert_eq!(
        client.stats().throttled_calls,
        7,
        "a burst of 5 passes, 7 waited for tokens"
    );
}

/// A server that answers every request with a 200 whose body is `size` bytes
/// of JSON-looking padding, announced or streamed (chunked) as asked.
async fn oversized_server(size: usize, announce_length: bool) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = vec![0u8; 64 * 1024];
                let _ = socket.read(&mut request).await;
                let body = format!(
                    r#"{{"ActionStatus":"OK","ErrorCode":0,"Pad":"{}"}}"#,
                    "x".repeat(size)
                );
                let head = if announce_length {
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    )
                } else {
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_string()
                };
                let _ = socket.write_all(head.as_bytes()).await;
                if announce_length {
                    let _ = socket.write_all(body.as_bytes()).await;
                } else {
                    for piece in body.as_bytes().chunks(64 * 1024) {
                        let chunk = format!("{:x}\r\n", piece.len());
                        let _ = socket.write_all(chunk.as_bytes()).await;
                        let _ = socket.write_all(piece).await;
                        let _ = socket.write_all(b"\r\n").await;
                    }
                    let _ = socket.write_all(b"0\r\n\r\n").await;
                }
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn an_oversized_response_body_is_a_transient_error_not_a_whole_read() {
    for announce_length in [true, false] {
        let base = oversized_server(tencent_im::MAX_RESPONSE_BYTES + 1, announce_length).await;
        let client = Client::new(ClientConfig::new(base, APP, ADMIN, KEY)).expect("valid config");
        let error = client
            .send_group_msg(&gift_event("evt-oversized"))
            .await
            .expect_err("an oversized body is refused");
        assert!(
            matches!(&error, Error::Decode { detail, .. } if detail.contains("exceeds")),
            "announced={announce_length}: {error:?}"
        );
        assert_eq!(error.class(), ErrorClass::Transient);
    }
    // The same server with an ordinary body: the refusal was the size alone.
    let base = oversized_server(1_000, true).await;
    let client = Client::new(ClientConfig::new(base, APP, ADMIN, KEY)).expect("valid config");
    client
        .send_group_msg(&gift_event("evt-small"))
        .await
        .expect("a normal body decodes");
}
