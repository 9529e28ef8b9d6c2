//! The fake's IM and admin HTTP APIs, driven with raw requests the way Tencent is called.

use fake_tencent_im::{FakeImConfig, FakeImHandle, Stats, spawn};
use serde_json::{Value, json};
use tencent_im::usersig::gen_usersig;

const APP: u64 = 1_400_000_002;
const KEY: &str = "fake-im-test-key";
const ADMIN: &str = "administrator";
const SEND: &str = "group_open_http_svc/send_group_msg";

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

struct Harness {
    fake: FakeImHandle,
    http: reqwest::Client,
}

impl Harness {
    async fn start() -> Self {
        let fake = spawn(FakeImConfig::new(APP, KEY, ADMIN))
            .await
            .expect("fake starts");
        Harness {
            fake,
            http: reqwest::Client::new(),
        }
    }

    /// Calls an IM API with an explicit query, returning HTTP status and body text.
    async fn raw(&self, api: &str, query: &[(&str, String)], body: &str) -> (u16, String) {
        let resp = self
            .http
            .post(format!("{}/v4/{api}", self.fake.base_url()))
            .query(query)
            .body(body.to_owned())
            .send()
            .await
            .expect("request");
        (resp.status().as_u16(), resp.text().await.expect("body"))
    }

    async fn call_with_sig(&self, api: &str, identifier: &str, sig: String, body: &str) -> Value {
        let query = [
            ("sdkappid", APP.to_string()),
            ("identifier", identifier.to_owned()),
            ("usersig", sig),
            ("random", "42".to_owned()),
            ("contenttype", "json".to_owned()),
        ];
        let (status, text) = self.raw(api, &query, body).await;
        assert_eq!(status, 200, "{text}");
        serde_json::from_str(&text).expect("json answer")
    }

    async fn call(&self, api: &str, body: &str) -> Value {
        let sig = gen_usersig(KEY, APP, ADMIN, now(), 3600);
        self.call_with_sig(api, ADMIN, sig, body).await
    }

    async fn admin_get(&self, path: &str) -> Value {
        let url = format!("{}/admin/{path}", self.fake.base_url());
        self.http
            .get(url)
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json")
    }

    async fn admin_post(&self, path: &str, body: Value) -> reqwest::Response {
        let url = format!("{}/admin/{path}", self.fake.base_url());
        self.http.post(url).json(&body).send().await.expect("post")
    }

    async fn create_room(&self, group_id: &str) {
        let body = json!({"Type": "AVChatRoom", "GroupId": group_id, "Name": "room"}).to_string();
        assert_eq!(
            code(&self.call("group_open_http_svc/create_group", &body).await),
            0
        );
    }
}

fn code(answer: &Value) -> i64 {
    answer["ErrorCode"].as_i64().expect("ErrorCode")
}

fn group_msg(group_id: &str, random: u32) -> String {
    json!({"GroupId": group_id, "Random": random,
           "MsgBody": [{"MsgType": "TIMCustomElem", "MsgContent": {"Data": "x"}}]})
    .to_string()
}

#[tokio::test]
async fn signatures_are_checked_like_tencent() {
    let h = Harness::start().await;
    let api = "group_open_http_svc/destroy_group";
    let body = r#"{"GroupId":"g"}"#;
    let t = now();
    let cases = [
        (ADMIN, gen_usersig(KEY, APP, ADMIN, t - 7200, 3600), 70001),
        (ADMIN, String::new(), 70002),
        (ADMIN, "definitely-not-a-sig".to_owned(), 70003),
        (ADMIN, gen_usersig("other-key", APP, ADMIN, t, 3600), 70009),
        ("someone", gen_usersig(KEY, APP, ADMIN, t, 3600), 70013),
        (ADMIN, gen_usersig(KEY, APP + 5, ADMIN, t, 3600), 70014),
        ("user-1", gen_usersig(KEY, APP, "user-1", t, 3600), 60010),
        (ADMIN, gen_usersig(KEY, APP, ADMIN, t, 3600), 10010),
    ];
    for (identifier, sig, expected) in cases {
        let answer = h.call_with_sig(api, identifier, sig, body).await;
        assert_eq!(code(&answer), expected, "{answer}");
        if expected != 0 {
            assert_eq!(answer["ActionStatus"], "FAIL");
        }
    }
    let (_, text) = h.raw(api, &[("identifier", ADMIN.to_owned())], body).await;
    assert!(text.contains("60012"), "{text}");
    let (_, text) = h.raw(api, &[("sdkappid", "1".to_owned())], body).await;
    assert!(text.contains("70020"), "{text}");
}

#[tokio::test]
async fn bodies_are_validated_per_service() {
    let h = Harness::start().await;
    h.create_room("g1").await;
    let group_cases = [
        ("not json", 10004),
        (
            r#"{"GroupId":"g1","MsgBody":[{"MsgType":"TIMCustomElem","MsgContent":{}}]}"#,
            10004,
        ),
        (r#"{"GroupId":"g1","Random":1,"MsgBody":[]}"#, 10004),
        (
            r#"{"GroupId":"g1","Random":1,"MsgBody":[{"MsgType":"Bogus","MsgContent":{}}]}"#,
            10004,
        ),
        (
            r#"{"GroupId":"g1","Random":-1,"MsgBody":[{"MsgType":"TIMTextElem","MsgContent":{"Text":"a"}}]}"#,
            10004,
        ),
        (
            r#"{"GroupId":"g1","Random":1,"MsgBody":[{"MsgType":"TIMTextElem","MsgContent":{"Text":"a"}}]}"#,
            0,
        ),
    ];
    for (body, expected) in group_cases {
        assert_eq!(code(&h.call(SEND, body).await), expected, "{body}");
    }
    let openim_cases = [
        ("[1,2]", 90001),
        (r#"{"MsgRandom":1,"MsgBody":[]}"#, 90003),
        (r#"{"To_Account":"u","MsgBody":[]}"#, 90005),
        (r#"{"To_Account":"u","MsgRandom":1,"MsgBody":{}}"#, 90002),
        (
            r#"{"SyncOtherMachine":2,"To_Account":"u","MsgRandom":1,"MsgBody":[{"MsgType":"TIMCustomElem","MsgContent":{"Data":"d"}}]}"#,
            0,
        ),
    ];
    for (body, expected) in openim_cases {
        assert_eq!(
            code(&h.call("openim/sendmsg", body).await),
            expected,
            "{body}"
        );
    }
    let create = r#"{"Type":"NotAType","GroupId":"g2","Name":"n"}"#;
    assert_eq!(
        code(&h.call("group_open_http_svc/create_group", create).await),
        10004
    );
    assert_eq!(
        code(&h.call("group_open_http_svc/no_such_command", "{}").await),
        10003
    );
    assert_eq!(code(&h.call("no_such_svc/cmd", "{}").await), 60009);
}

#[tokio::test]
async fn messages_are_recorded_deduplicated_and_filterable() {
    let h = Harness::start().await;
    h.create_room("g1").await;
    h.create_room("g2").await;
    assert_eq!(code(&h.call(SEND, &group_msg("g1", 7)).await), 0);
    let dup = h.call(SEND, &group_msg("g1", 7)).await;
    assert_eq!(
        (code(&dup), dup["MsgSeq"].as_u64()),
        (0, Some(1)),
        "duplicate keeps its seq"
    );
    assert_eq!(
        code(&h.call(SEND, &group_msg("g2", 7)).await),
        0,
        "same Random, other group"
    );
    assert_eq!(code(&h.call(SEND, &group_msg("missing", 8)).await), 10010);

    let all = h.admin_get("messages").await;
    assert_eq!(all.as_array().map(Vec::len), Some(2));
    let g1 = h.admin_get("messages?group_id=g1").await;
    assert_eq!(g1[0]["random"], 7);
    assert_eq!(g1[0]["kind"], "group");
    assert!(g1[0]["received_at_ms"].as_u64().is_some_and(|ms| ms > 0));
    assert_eq!(g1[0]["msg_body"][0]["MsgContent"]["Data"], "x");
    assert_eq!(h.admin_get("messages?to_account=nobody").await, json!([]));

    let stats: Stats = serde_json::from_value(h.admin_get("stats").await).expect("stats");
    assert_eq!((stats.messages, stats.deduplicated), (2, 1));
    assert_eq!(stats.rejected.get(&10010), Some(&1));
    assert_eq!(stats.calls_by_api.get(SEND), Some(&4));
    let groups = h.admin_get("groups").await;
    assert_eq!(groups.as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn faults_rate_limits_and_reset_via_admin_http() {
    let h = Harness::start().await;
    h.create_room("g1").await;
    let queued = h
        .admin_post(
            "faults",
            json!([{"api": SEND, "http_status": 503},
                   {"api": "*", "error_code": 10002, "times": 2}]),
        )
        .await;
    assert_eq!(queued.json::<Value>().await.expect("json")["pending"], 2);

    let sig = gen_usersig(KEY, APP, ADMIN, now(), 3600);
    let query = [
        ("sdkappid", APP.to_string()),
        ("identifier", ADMIN.to_owned()),
        ("usersig", sig),
    ];
    assert_eq!(h.raw(SEND, &query, &group_msg("g1", 1)).await.0, 503);
    assert_eq!(code(&h.call(SEND, &group_msg("g1", 1)).await), 10002);
    assert_eq!(
        code(&h.call("openim/sendmsg", "{}").await),
        10002,
        "`*` matches every api"
    );
    assert_eq!(h.admin_get("faults").await, json!([]), "rules are used up");
    assert_eq!(code(&h.call(SEND, &group_msg("g1", 1)).await), 0);

    h.admin_post(
        "faults",
        json!({"api": SEND, "msg_drop_reason": "MsgFreqCtrl"}),
    )
    .await;
    let dropped = h.call(SEND, &group_msg("g1", 2)).await;
    assert_eq!(
        (code(&dropped), &dropped["MsgDropReason"]),
        (0, &json!("MsgFreqCtrl"))
    );

    let limit = h.admin_post("rate_limit", json!({"per_second": 1})).await;
    assert_eq!(
        limit.json::<Value>().await.expect("json"),
        json!({"per_second": 1})
    );
    let c2c = r#"{"To_Account":"u","MsgRandom":1,"MsgBody":[{"MsgType":"TIMTextElem","MsgContent":{"Text":"a"}}]}"#;
    assert_eq!(code(&h.call("openim/sendmsg", c2c).await), 0);
    assert_eq!(
        code(&h.call("openim/sendmsg", c2c).await),
        60007,
        "openim limit code"
    );
    assert_eq!(
        code(&h.call(SEND, &group_msg("g1", 3)).await),
        0,
        "each api has its own window"
    );
    assert_eq!(
        code(&h.call(SEND, &group_msg("g1", 4)).await),
        10006,
        "group limit code"
    );

    let stats = h.fake.stats();
    assert_eq!(stats.http_faults.get(&503), Some(&1));
    assert_eq!(stats.dropped, 1);
    assert_eq!(
        h.fake.group_messages("g1").len(),
        2,
        "faulted and dropped sends not recorded"
    );

    assert_eq!(
        h.admin_post("reset", json!({})).await.status().as_u16(),
        204
    );
    assert_eq!(h.fake.stats(), Stats::default());
    assert!(h.fake.groups().is_empty());
    assert_eq!(
        code(&h.call(SEND, &group_msg("g1", 5)).await),
        10010,
        "limit and groups gone"
    );
}

#[tokio::test]
async fn group_admin_operations_change_the_group() {
    let h = Harness::start().await;
    h.create_room("g1").await;
    let kick = r#"{"GroupId":"g1","MemberToDel_Account":["a","b","a"],"Silence":1}"#;
    assert_eq!(
        code(
            &h.call("group_open_http_svc/delete_group_member", kick)
                .await
        ),
        0
    );
    let bad_kick = r#"{"GroupId":"g1","MemberToDel_Account":[]}"#;
    assert_eq!(
        code(
            &h.call("group_open_http_svc/delete_group_member", bad_kick)
                .await
        ),
        10004
    );
    let mute = r#"{"GroupId":"g1","Members_Account":["c"],"MuteTime":60}"#;
    assert_eq!(
        code(&h.call("group_open_http_svc/forbid_send_msg", mute).await),
        0
    );
    let group = &h.fake.groups()[0];
    assert_eq!(group.removed_members, ["a", "b"]);
    assert!(group.muted_until["c"] >= now() + 59);

    let dup = r#"{"Type":"AVChatRoom","GroupId":"g1","Name":"again"}"#;
    assert_eq!(
        code(&h.call("group_open_http_svc/create_group", dup).await),
        10021
    );
    let auto = h
        .call(
            "group_open_http_svc/create_group",
            r#"{"Type":"Public","Name":"n"}"#,
        )
        .await;
    assert!(
        auto["GroupId"]
            .as_str()
            .is_some_and(|id| id.starts_with("@TGS#")),
        "{auto}"
    );
    let destroy = r#"{"GroupId":"g1"}"#;
    assert_eq!(
        code(&h.call("group_open_http_svc/destroy_group", destroy).await),
        0
    );
    assert_eq!(
        code(&h.call("group_open_http_svc/destroy_group", destroy).await),
        10010
    );
}

#[tokio::test]
async fn shutdown_stops_the_listener() {
    let h = Harness::start().await;
    let addr = h.fake.addr();
    assert_eq!(h.admin_get("stats").await["requests"], 0);
    h.fake.shutdown().await.expect("clean shutdown");
    let err = reqwest::get(format!("http://{addr}/healthz")).await;
    assert!(err.is_err(), "nothing listens after shutdown");
}
