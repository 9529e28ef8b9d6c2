//! The fake's IM and admin HTTP APIs, driven with raw requests the way Tencent is called.

use fake_tencent_im::{
    FakeImConfig, FakeImHandle, GROUP_MSG_PER_SECOND, GroupStats, MAX_MSG_BODY_BYTES, Stats, spawn,
};
use serde_json::{Value, json};
use tencent_im::usersig::gen_usersig;
use tencent_im::{MSG_FREQ_CTRL, codes};

const APP: u64 = 1_400_000_002;
const KEY: &str = "fake-im-test-key";
const ADMIN: &str = "administrator";
const SEND: &str = "group_open_http_svc/send_group_msg";
const SENDMSG: &str = "openim/sendmsg";

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
        Harness::start_with(FakeImConfig::new(APP, KEY, ADMIN)).await
    }

    async fn start_with(config: FakeImConfig) -> Self {
        let fake = spawn(config).await.expect("fake starts");
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

/// A one-element `MsgBody` whose compact JSON is exactly `bytes` long.
fn msg_body_of(bytes: usize) -> Value {
    let body_with =
        |data: String| json!([{"MsgType": "TIMCustomElem", "MsgContent": {"Data": data}}]);
    let overhead = serde_json::to_vec(&body_with(String::new()))
        .expect("json")
        .len();
    let body = body_with("x".repeat(bytes - overhead));
    assert_eq!(serde_json::to_vec(&body).expect("json").len(), bytes);
    body
}

/// Whether the answer is an OK that Tencent's frequency control kept from delivery.
fn freq_dropped(answer: &Value) -> bool {
    code(answer) == 0 && answer["ActionStatus"] == "OK" && answer["MsgDropReason"] == MSG_FREQ_CTRL
}

/// The per-group counters `/admin/stats` shows for `group_id`.
async fn group_stats(h: &Harness, group_id: &str) -> GroupStats {
    let stats: Stats = serde_json::from_value(h.admin_get("stats").await).expect("stats");
    stats.groups.get(group_id).cloned().unwrap_or_default()
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

/// The limit of the burst test.
const LIMIT: u32 = 6;

#[tokio::test]
async fn a_group_gets_its_limit_a_second_and_the_rest_are_dropped_with_msg_freq_ctrl() {
    let h = Harness::start().await;
    assert_eq!(GROUP_MSG_PER_SECOND, 40);
    assert_eq!(
        h.fake.config().group_msg_per_second,
        Some(40),
        "on by default"
    );
    // A small limit keeps the burst far inside one second of the fake's
    // clock however loaded the machine is (the 40 itself is exercised on a
    // paused clock in the unit tests of `limits` and `state`).
    assert_eq!(h.fake.set_group_rate_limit(Some(LIMIT)), Some(LIMIT));
    h.create_room("g1").await;
    h.create_room("g2").await;
    // Sent back to back, all well inside one second of the fake's clock.
    for random in 1..=LIMIT {
        let answer = h.call(SEND, &group_msg("g1", random)).await;
        assert_eq!(code(&answer), 0, "{answer}");
        assert_eq!(answer["MsgSeq"], random, "{answer}");
        assert!(answer.get("MsgDropReason").is_none(), "{answer}");
    }
    let other = h.call(SEND, &group_msg("g2", 1)).await;
    assert_eq!((code(&other), &other["MsgSeq"]), (0, &json!(1)), "{other}");
    assert!(
        other.get("MsgDropReason").is_none(),
        "another group is unaffected"
    );
    for random in LIMIT + 1..=LIMIT + 5 {
        let answer = h.call(SEND, &group_msg("g1", random)).await;
        assert!(freq_dropped(&answer), "{answer}");
    }
    let resend = h.call(SEND, &group_msg("g1", 1)).await;
    assert_eq!(
        (code(&resend), &resend["MsgSeq"]),
        (0, &json!(1)),
        "a resend is answered as the first send, not dropped: {resend}"
    );
    assert!(resend.get("MsgDropReason").is_none(), "{resend}");

    let randoms: Vec<u32> = h
        .fake
        .group_messages("g1")
        .iter()
        .map(|m| m.random)
        .collect();
    assert_eq!(
        randoms,
        (1..=LIMIT).collect::<Vec<_>>(),
        "exactly the first LIMIT"
    );
    let stats: Stats = serde_json::from_value(h.admin_get("stats").await).expect("stats");
    assert_eq!(
        (stats.freq_dropped, stats.dropped, stats.deduplicated),
        (5, 0, 1)
    );
    let g1 = GroupStats {
        delivered: u64::from(LIMIT),
        freq_dropped: 5,
        oversized: 0,
        peak_per_second: u64::from(LIMIT),
    };
    assert_eq!(stats.groups.get("g1"), Some(&g1));
    assert_eq!(
        stats
            .groups
            .get("g2")
            .map(|g| (g.delivered, g.peak_per_second)),
        Some((1, 1))
    );
    let raw = h.admin_get("stats").await;
    assert_eq!(
        raw["groups"]["g1"],
        json!({"delivered": LIMIT, "freq_dropped": 5, "oversized": 0, "peak_per_second": LIMIT})
    );
}

#[tokio::test]
async fn the_group_limit_is_set_at_runtime_and_duplicates_do_not_count() {
    let h = Harness::start().await;
    h.create_room("g1").await;
    let limit = h
        .admin_post("group_rate_limit", json!({"per_second": 2}))
        .await;
    assert_eq!(
        limit.json::<Value>().await.expect("json"),
        json!({"per_second": 2})
    );
    assert_eq!(h.call(SEND, &group_msg("g1", 1)).await["MsgSeq"], 1);
    assert_eq!(
        h.call(SEND, &group_msg("g1", 1)).await["MsgSeq"],
        1,
        "duplicate"
    );
    let second = h.call(SEND, &group_msg("g1", 2)).await;
    assert_eq!(second["MsgSeq"], 2, "the duplicate took no slot: {second}");
    assert!(freq_dropped(&h.call(SEND, &group_msg("g1", 3)).await));
    assert_eq!(
        group_stats(&h, "g1").await,
        GroupStats {
            delivered: 2,
            freq_dropped: 1,
            oversized: 0,
            peak_per_second: 2,
        }
    );

    for off in [json!({"per_second": 0}), json!({"per_second": null})] {
        let answer = h.admin_post("group_rate_limit", off).await;
        assert_eq!(
            answer.json::<Value>().await.expect("json"),
            json!({"per_second": null})
        );
    }
    for random in 10..20 {
        let answer = h.call(SEND, &group_msg("g1", random)).await;
        assert!(answer.get("MsgDropReason").is_none(), "no limit: {answer}");
    }

    assert_eq!(h.fake.set_group_rate_limit(Some(1)), Some(1));
    h.fake.reset();
    h.create_room("g1").await;
    for random in 1..=2 {
        let answer = h.call(SEND, &group_msg("g1", random)).await;
        assert!(
            answer.get("MsgDropReason").is_none(),
            "reset restores 40: {answer}"
        );
    }
}

#[tokio::test]
async fn message_bodies_over_12_kib_are_refused_with_80002() {
    let h = Harness::start().await;
    assert_eq!(MAX_MSG_BODY_BYTES, 12_288);
    h.create_room("g1").await;
    let group_send = |random: u32, bytes: usize| {
        json!({"GroupId": "g1", "Random": random, "MsgBody": msg_body_of(bytes)}).to_string()
    };
    let c2c_send = |random: u32, bytes: usize| {
        json!({"To_Account": "u", "MsgRandom": random, "MsgBody": msg_body_of(bytes)}).to_string()
    };
    assert_eq!(code(&h.call(SEND, &group_send(1, 12_288)).await), 0);
    let too_long = h.call(SEND, &group_send(2, 12_289)).await;
    assert_eq!(
        (code(&too_long), &too_long["ActionStatus"]),
        (codes::MSG_TOO_LONG, &json!("FAIL")),
        "{too_long}"
    );
    assert_eq!(code(&h.call(SENDMSG, &c2c_send(1, 12_288)).await), 0);
    assert_eq!(
        code(&h.call(SENDMSG, &c2c_send(2, 12_289)).await),
        codes::MSG_TOO_LONG
    );

    assert_eq!(
        h.fake.group_messages("g1").len(),
        1,
        "the refused one is not recorded"
    );
    assert_eq!(h.fake.c2c_messages("u").len(), 1);
    let stats = h.fake.stats();
    assert_eq!(stats.oversized, 2);
    assert_eq!(stats.rejected.get(&codes::MSG_TOO_LONG), Some(&2));
    assert_eq!(
        group_stats(&h, "g1").await,
        GroupStats {
            delivered: 1,
            freq_dropped: 0,
            oversized: 1,
            peak_per_second: 1,
        }
    );
}

#[tokio::test]
async fn msg_priority_is_validated_and_recorded() {
    let h = Harness::start().await;
    h.create_room("g1").await;
    let with_priority = |random: u32, priority: Value| {
        json!({"GroupId": "g1", "Random": random, "MsgPriority": priority,
               "MsgBody": [{"MsgType": "TIMTextElem", "MsgContent": {"Text": "a"}}]})
        .to_string()
    };
    for (random, priority) in (1..).zip(["High", "Normal", "Low", "Lowest"]) {
        assert_eq!(
            code(&h.call(SEND, &with_priority(random, json!(priority))).await),
            0
        );
    }
    for (random, priority) in (10..).zip([json!("high"), json!("Urgent"), json!(1)]) {
        let answer = h.call(SEND, &with_priority(random, priority.clone())).await;
        assert_eq!(
            code(&answer),
            codes::GROUP_BAD_PARAM,
            "{priority}: {answer}"
        );
        let info = answer["ErrorInfo"].as_str().unwrap_or_default();
        assert!(info.contains("MsgPriority"), "{info}");
    }
    assert_eq!(code(&h.call(SEND, &group_msg("g1", 20)).await), 0);
    let recorded: Vec<Option<String>> = h
        .fake
        .group_messages("g1")
        .into_iter()
        .map(|m| m.msg_priority)
        .collect();
    let expected = ["High", "Normal", "Low", "Lowest"].map(|p| Some(p.to_owned()));
    assert_eq!(recorded[..4], expected);
    assert_eq!(recorded[4..], [None]);
}

#[tokio::test]
async fn the_message_limits_can_be_turned_off_in_the_config() {
    let config = FakeImConfig {
        group_msg_per_second: Some(0),
        max_msg_body_bytes: None,
        ..FakeImConfig::new(APP, KEY, ADMIN)
    };
    let h = Harness::start_with(config).await;
    assert_eq!(
        h.fake.config().group_msg_per_second,
        None,
        "0 reads as no limit"
    );
    h.create_room("g1").await;
    for random in 1..=45 {
        let answer = h.call(SEND, &group_msg("g1", random)).await;
        assert!(answer.get("MsgDropReason").is_none(), "{answer}");
    }
    let big = json!({"GroupId": "g1", "Random": 99, "MsgBody": msg_body_of(20_000)});
    assert_eq!(code(&h.call(SEND, &big.to_string()).await), 0);
    assert_eq!(h.fake.group_messages("g1").len(), 46);
}
