//! The consumer groups' own dead letters and failed deliveries in headless
//! Chromium (`testkit::browser`). Real dead letters go to notice-consumer's
//! `<group>.dlq` on the test broker through the consumer runtime's own
//! dead-letter producer (the headers a giving-up consumer writes), one of
//! them with a hostile room id and payload, one undecodable; failed (and
//! one pending) rows go into `notice_delivery_events` and
//! `activity_broadcasts`. A read-only operator opens `/console/consumers`
//! from the navigation, the notice group's page and one letter's inspect
//! view; everything hostile is shown as text. Bad input (an unknown group,
//! a malformed or absent position) is refused precisely. The pages are
//! saved under `target/console-screenshots/consumers-*.png`.

mod abandoned_requests;
mod browser;
mod common;

use browser::{DEADLINE, column, log_in, screenshots};
use common::console::{READER, get, groups, login, serve_console_with_consumers};
use consumer_runtime::{
    ConsumerConfig, ConsumerSettings, dead_letter::DeadLetterProducer, testing::consumed_record,
};
use outbox_schema::{NewOutboxRow, groups as declared, pb};
use service_kit::mq::MqConfig;
use sqlx::MySqlPool;
use testkit::browser::Browser;

const HOSTILE_ROOM: &str = "<script>alert('room')</script>";
const HOSTILE_TARGET: &str = "<img src=x onerror=alert(1)>";

/// Two dead letters of the notice group: a kick with hostile ids, and garbage.
async fn dead_letters(mq: &MqConfig, kicked: &str, garbage: &str) -> String {
    let settings = ConsumerSettings::resolve(
        mq,
        &ConsumerConfig::default(),
        &mq.room_outbox.topic,
        declared::NOTICE.group,
        0,
    )
    .unwrap();
    testkit::create_topic(&settings.dead_letter_topic, 1).await;
    let producer = DeadLetterProducer::new(&settings).unwrap();
    let envelope = pb::RoomOutboxEvent {
        event_id: kicked.into(),
        event_type: "RoomUserKicked".into(),
        app_code: "hyapp".into(),
        room_id: HOSTILE_ROOM.into(),
        room_event_seq: 3,
        room_version: 3,
        command_id: "cmd-1".into(),
        occurred_at_ms: service_kit::time::now_ms(),
        payload: Some(pb::room_outbox_event::Payload::RoomUserKicked(
            pb::RoomUserKicked {
                actor_id: "owner".into(),
                target_id: HOSTILE_TARGET.into(),
                ban_until_ms: 0,
            },
        )),
        ..Default::default()
    };
    let payload = NewOutboxRow::event(&envelope, 1).payload;
    let topic = settings.topic.clone();
    producer
        .send(
            &consumed_record(
                &topic,
                (2, 17),
                HOSTILE_ROOM,
                kicked,
                "RoomUserKicked",
                payload,
            ),
            "tencent im: recipient <b>blocked</b>",
            4,
        )
        .await
        .unwrap();
    let junk = consumed_record(
        &topic,
        (2, 17),
        "room-2",
        garbage,
        "RoomUserKicked",
        b"\x00not protobuf".to_vec(),
    );
    producer
        .send(&junk, "decode: invalid wire type", 1)
        .await
        .unwrap();
    settings.dead_letter_topic
}

/// A failed notice (and a pending one, not listed) and a failed broadcast.
async fn failed_rows(pool: &MySqlPool, event_id: &str) {
    for (recipient, status) in [("user-7", "failed"), ("user-8", "pending")] {
        sqlx::query(
            "INSERT INTO notice_delivery_events (event_id, recipient_id, notice_type, room_id, \
             content, status, attempts, next_attempt_at_ms, last_error, created_at_ms) \
             VALUES (?, ?, 'kicked', ?, '{}', ?, 8, 0, ?, ?)",
        )
        .bind(event_id)
        .bind(recipient)
        .bind(HOSTILE_ROOM)
        .bind(status)
        .bind("<b>permanent</b> 20003")
        .bind(service_kit::time::now_ms())
        .execute(pool)
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO activity_broadcasts (event_id, room_id, sender_id, receiver_id, gift_id, \
         total_value, status, created_at_ms, attempts, next_attempt_at_ms, last_error) \
         VALUES (?, 'room-9', 'alice', 'bob', 'rocket', 5000, 'failed', ?, 5, 0, 'timeout')",
    )
    .bind(uuid::Uuid::new_v4().to_string())
    .bind(service_kit::time::now_ms())
    .execute(pool)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_operator_sees_the_consumers_dead_letters_and_failed_deliveries() {
    let db = testkit::TestDb::new().await;
    let mq = MqConfig {
        enabled: true,
        name_servers: vec![testkit::kafka_bootstrap()],
        namespace: testkit::unique("cc"),
        ..MqConfig::default()
    };
    let kicked = uuid::Uuid::new_v4().to_string();
    let garbage = uuid::Uuid::new_v4().to_string();
    let topic = dead_letters(&mq, &kicked, &garbage).await;
    failed_rows(&db.pool, &kicked).await;
    let base = serve_console_with_consumers(&db.pool, &mq).await;
    let shots = screenshots();
    let browser = Browser::start().await;
    log_in(&browser, &base, READER).await;

    browser
        .click(&browser.find("nav a[href='/console/consumers']").await)
        .await;
    browser
        .wait_for_url(&format!("{base}/console/consumers"), DEADLINE)
        .await;
    let page = browser
        .wait_for_page_text("dead-letter topic", DEADLINE)
        .await;
    assert!(page.contains(&topic), "{page}");
    let names = column(&browser, "consumer-groups", 0).await;
    assert_eq!(names, groups());
    let letters = column(&browser, "consumer-groups", 3).await;
    assert_eq!(letters, ["0", "0", "2"], "im-bridge, activity, notice");
    let failed = column(&browser, "consumer-groups", 4).await;
    assert_eq!(failed[0], "no delivery table");
    assert_eq!(failed[1], "1 in activity_broadcasts");
    assert_eq!(failed[2], "1 in notice_delivery_events");
    browser
        .screenshot(&shots.join("consumers-groups.png"))
        .await;

    let notice = format!(
        "a[href='/console/consumers/group?group={}']",
        declared::NOTICE.group
    );
    browser.click(&browser.find(&notice).await).await;
    browser
        .wait_for_page_text("Failed deliveries", DEADLINE)
        .await;
    let ids = column(&browser, "consumer-dead-letters", 0).await;
    assert_eq!(ids, [kicked.clone(), garbage.clone()]);
    let rooms = column(&browser, "consumer-dead-letters", 1).await;
    assert_eq!(
        rooms,
        [HOSTILE_ROOM, "room-2"],
        "hostile room id shown as text"
    );
    let reasons = column(&browser, "consumer-dead-letters", 3).await;
    assert_eq!(reasons[0], "tencent im: recipient <b>blocked</b>");
    assert_eq!(
        column(&browser, "consumer-dead-letters", 4).await,
        ["4", "1"]
    );
    let sources = column(&browser, "consumer-dead-letters", 6).await;
    assert_eq!(
        sources[0],
        format!("{}/2/17", mq.topic(&mq.room_outbox.topic))
    );
    let replay = column(&browser, "consumer-dead-letters", 8).await;
    assert_eq!(
        replay[0],
        format!(
            "notice-consumer dead-letters replay --event-id {kicked} --operator \"$USER\" \
             --reason \"why it is safe to replay\""
        )
    );
    assert_eq!(column(&browser, "failed-deliveries", 2).await, ["user-7"]);
    assert_eq!(
        column(&browser, "failed-deliveries", 4).await,
        ["<b>permanent</b> 20003"]
    );
    let retry = column(&browser, "failed-deliveries", 6).await;
    assert!(
        retry[0].starts_with(&format!(
            "notice-consumer deliveries retry --event-id {kicked} "
        )),
        "{retry:?}"
    );
    assert!(
        browser
            .find_all("main script, main img, main b")
            .await
            .is_empty()
    );
    assert!(browser.source().await.contains("&lt;script&gt;alert"));
    browser
        .screenshot(&shots.join("consumers-notice.png"))
        .await;

    browser.click(&browser.find("a.inspect").await).await;
    let page = browser.wait_for_page_text("Headers", DEADLINE).await;
    assert!(page.contains("RoomUserKicked"), "{page}");
    let payload = browser.text(&browser.find("#payload").await).await;
    assert!(payload.contains(HOSTILE_TARGET), "{payload}");
    let header_names = column(&browser, "dead-letter-headers", 0).await;
    for name in [
        "event_id",
        "dlq_reason",
        "dlq_group",
        "dlq_attempts",
        "dlq_source",
    ] {
        assert!(
            header_names.iter().any(|header| header == name),
            "{header_names:?}"
        );
    }
    assert!(browser.find_all("main script, main img").await.is_empty());
    browser
        .screenshot(&shots.join("consumers-dead-letter.png"))
        .await;
    browser.quit().await;

    refusals(&base, declared::NOTICE.group).await;
}

/// Bad input gets a precise refusal.
async fn refusals(base: &str, group: &str) {
    let cookie = login(base, READER).await;
    let (status, body) = get(base, "/console/consumers/group?group=nope", &cookie).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("no consumer group `nope`"), "{body}");
    let (status, body) = get(base, "/console/consumers/group", &cookie).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("group: required"), "{body}");
    let path = format!("/console/consumers/dead-letter?group={group}&position=zero");
    let (status, body) = get(base, &path, &cookie).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("position `zero`: expected &lt;partition&gt;/&lt;offset&gt;"),
        "{body}"
    );
    // The undecodable letter's inspect view says so.
    let path = format!("/console/consumers/dead-letter?group={group}&position=0/1");
    let (status, body) = get(base, &path, &cookie).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("does not decode"), "{body}");
    let path = format!("/console/consumers/dead-letter?group={group}&position=0/999");
    let (status, body) = get(base, &path, &cookie).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("no dead letter at 0/999"), "{body}");
}
