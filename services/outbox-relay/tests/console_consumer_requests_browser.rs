//! Replaying a consumer group's dead letter and retrying its failed delivery
//! from the console, in headless Chromium (`testkit::browser`), carried out by
//! the group's own service running in this process: notice-consumer's
//! service (its source included by file, as the relay's fixtures are; no
//! test crate depends on a service) in the notice group, on the test broker
//! and a fresh database, with the fake Tencent IM.
//!
//! Real dead letters go to the group's `<group>.dlq` through the consumer
//! runtime's own dead-letter producer: a kick that occurred now and one that
//! occurred before `consumer.dedup_retention`. An operator presses Replay on
//! each and Retry on a failed notice; the group's page shows each request
//! pending, then done (a dry run first: would replay, nothing written; the
//! kicked user's notice written exactly once, the
//! dedup row recorded, a second replay a duplicate) or refused with the
//! reason (too old: nothing written), with the audit rows written under the
//! operator and reason. A read-only session sees no forms and is refused
//! the POST. The page is saved as
//! `target/console-screenshots/consumers-requests.png`.

mod browser;
mod common;

mod notice_service;

use browser::{DEADLINE, column, log_in, screenshots};
use common::console::{ADMIN, READER, csrf_of, get, login, post, serve_console_with_consumers};
use consumer_runtime::{
    ConsumerConfig, ConsumerSettings, dead_letter::DeadLetterProducer, host,
    testing::consumed_record,
};
use notice_service::{Config, Notice};
use outbox_schema::{NewOutboxRow, groups as declared, pb};
use service_kit::{Secret, duration::ConfigDuration, mq::MqConfig};
use sqlx::MySqlPool;
use testkit::browser::Browser;
use tokio_util::sync::CancellationToken;

/// The consumers' dedup horizon in this test: an hour.
const RETENTION_MS: i64 = 3_600_000;

/// A kick of `target` that occurred at `occurred_at_ms`, as dead-lettered
/// by the notice group after it gave up on it.
async fn dead_letter(
    settings: &ConsumerSettings,
    event_id: &str,
    target: &str,
    occurred_at_ms: i64,
) {
    let envelope = pb::RoomOutboxEvent {
        event_id: event_id.into(),
        event_type: "RoomUserKicked".into(),
        app_code: "hyapp".into(),
        room_id: "room-r".into(),
        room_event_seq: 3,
        room_version: 3,
        command_id: uuid::Uuid::new_v4().to_string(),
        occurred_at_ms,
        payload: Some(pb::room_outbox_event::Payload::RoomUserKicked(
            pb::RoomUserKicked {
                actor_id: "owner".into(),
                target_id: target.into(),
                ban_until_ms: 0,
            },
        )),
        ..Default::default()
    };
    let original = consumed_record(
        &settings.topic,
        (0, 7),
        "room-r",
        event_id,
        "RoomUserKicked",
        NewOutboxRow::event(&envelope, 1).payload,
    );
    DeadLetterProducer::new(settings)
        .unwrap()
        .send(&original, "tencent im: down", 4)
        .await
        .unwrap();
}

/// notice-consumer's config in the notice group on `mq`'s namespace.
fn notice_config(db: &testkit::TestDb, mq: &MqConfig, im_base_url: String) -> Config {
    let mut config = Config::default();
    config.mysql.url = db.url.clone();
    config.rocketmq = mq.clone();
    config.consumer.group = declared::NOTICE.group.to_owned();
    config.consumer.dedup_retention = ConfigDuration::from_millis(RETENTION_MS);
    config.consumer.session_timeout = ConfigDuration::from_secs(6);
    config.tencent_im.base_url = im_base_url;
    config.tencent_im.sdk_app_id = 1_400_000_005;
    config.tencent_im.admin_identifier = "admin".into();
    config.tencent_im.secret_key = Secret::new("notice-key");
    config.delivery.sweep_interval = ConfigDuration::from_millis(100);
    config.http_listen = "127.0.0.1:0".into();
    config
}

/// The notice rows of `event_id`.
async fn notices(pool: &MySqlPool, event_id: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM notice_delivery_events WHERE event_id = ?")
        .bind(event_id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The notice rows of `event_id` that are no longer failed.
async fn not_failed(pool: &MySqlPool, event_id: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM notice_delivery_events WHERE event_id = ? AND status <> 'failed'",
    )
    .bind(event_id)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// The dedup records of `event_id`.
async fn dedup(pool: &MySqlPool, event_id: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM consumer_dedup WHERE event_id = ?")
        .bind(event_id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Every request written.
async fn requests(pool: &MySqlPool) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM consumer_operator_requests")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The state cell of the newest request on the group's page, reloaded until
/// it starts with `prefix`.
async fn request_state(browser: &Browser, url: &str, prefix: &str) -> String {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        browser.goto(url).await;
        let states = column(browser, "consumer-requests", 7).await;
        if let Some(newest) = states.first()
            && newest.starts_with(prefix)
        {
            return newest.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "newest request not `{prefix}…` within {DEADLINE:?}: {states:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Fills the request form in row `row` (1-based) of table `id` (no reason
/// typed when `reason` is empty) and presses its button of class `button`.
async fn press(browser: &Browser, id: &str, row: usize, reason: &str, button: &str) {
    let form = format!("#{id} tr:nth-child({}) form", row + 1);
    browser
        .type_into(
            &browser.find(&format!("{form} input[name=operator]")).await,
            "alice",
        )
        .await;
    if !reason.is_empty() {
        browser
            .type_into(
                &browser.find(&format!("{form} input[name=reason]")).await,
                reason,
            )
            .await;
    }
    browser
        .click(&browser.find(&format!("{form} button.{button}")).await)
        .await;
    browser.wait_for_page_text("written", DEADLINE).await;
}

/// The notice group's topics on `mq`, its two dead letters (a kick that
/// occurred now, one that occurred twice the retention ago) and a failed
/// notice: their event ids.
async fn fixtures(db: &testkit::TestDb, mq: &MqConfig) -> (String, String, String) {
    let settings = ConsumerSettings::resolve(
        mq,
        &ConsumerConfig::default(),
        &mq.room_outbox.topic,
        declared::NOTICE.group,
        0,
    )
    .unwrap();
    testkit::create_topic(&settings.topic, 1).await;
    testkit::create_topic(&settings.dead_letter_topic, 1).await;
    let (fresh, old) = (
        uuid::Uuid::new_v4().to_string(),
        uuid::Uuid::new_v4().to_string(),
    );
    let now = service_kit::time::now_ms();
    dead_letter(&settings, &fresh, "kicked-now", now).await;
    dead_letter(&settings, &old, "kicked-long-ago", now - 2 * RETENTION_MS).await;
    let failed = uuid::Uuid::new_v4().to_string();
    sqlx::query(
        "INSERT INTO notice_delivery_events (event_id, recipient_id, notice_type, room_id, \
         content, status, attempts, next_attempt_at_ms, last_error, created_at_ms) \
         VALUES (?, 'user-9', 'room_kicked', 'room-r', '{}', 'failed', 8, 0, 'IM 5xx', ?)",
    )
    .bind(&failed)
    .bind(now)
    .execute(&db.pool)
    .await
    .unwrap();

    (fresh, old, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_is_replayed_and_a_delivery_retried_by_the_groups_service() {
    let db = testkit::TestDb::new().await;
    let mq = MqConfig {
        enabled: true,
        name_servers: vec![testkit::kafka_bootstrap()],
        namespace: testkit::unique("cr"),
        ..MqConfig::default()
    };
    let (fresh, old, failed) = fixtures(&db, &mq).await;
    let fake = fake_tencent_im::spawn(fake_tencent_im::FakeImConfig::new(
        1_400_000_005,
        "notice-key",
        "admin",
    ))
    .await
    .unwrap();
    let app = host::Host::<Notice>::build(notice_config(&db, &mq, fake.base_url()))
        .await
        .unwrap();
    let shutdown = CancellationToken::new();
    let service = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { app.run(shutdown).await.unwrap() }
    });

    let base = serve_console_with_consumers(&db.pool, &mq).await;
    let page = format!(
        "{base}/console/consumers/group?group={}",
        declared::NOTICE.group
    );
    let browser = Browser::start().await;
    log_in(&browser, &base, ADMIN).await;
    browser.goto(&page).await;
    browser
        .wait_for_page_text("Failed deliveries", DEADLINE)
        .await;
    assert_eq!(
        column(&browser, "consumer-dead-letters", 0).await,
        [fresh.clone(), old.clone()]
    );

    // A dry run first, with no reason: the service's checks, nothing written.
    press(&browser, "consumer-dead-letters", 1, "", "dry-run").await;
    let state = request_state(&browser, &page, "done").await;
    assert_eq!(
        state,
        "done: dry run: would be handed to the handler; nothing was written"
    );
    assert_eq!(notices(&db.pool, &fresh).await, 0);
    assert_eq!(dedup(&db.pool, &fresh).await, 0);
    press(&browser, "consumer-dead-letters", 2, "", "dry-run").await;
    let state = request_state(&browser, &page, "refused").await;
    assert!(
        state.contains("older than consumer.dedup_retention"),
        "{state}"
    );

    press(
        &browser,
        "consumer-dead-letters",
        1,
        "IM is back, INC-7",
        "replay",
    )
    .await;
    let state = request_state(&browser, &page, "done").await;
    assert_eq!(state, "done: applied");
    assert_eq!(notices(&db.pool, &fresh).await, 1);
    assert_eq!(dedup(&db.pool, &fresh).await, 1);

    // Again: the group's dedup makes it a no-op.
    press(
        &browser,
        "consumer-dead-letters",
        1,
        "pressed twice",
        "replay",
    )
    .await;
    let state = request_state(&browser, &page, "done").await;
    assert_eq!(state, "done: duplicate: applied before, nothing done");
    assert_eq!(notices(&db.pool, &fresh).await, 1);

    press(
        &browser,
        "consumer-dead-letters",
        2,
        "old one too",
        "replay",
    )
    .await;
    let state = request_state(&browser, &page, "refused").await;
    assert!(
        state.contains("older than consumer.dedup_retention"),
        "{state}"
    );
    assert_eq!(notices(&db.pool, &old).await, 0);
    assert_eq!(dedup(&db.pool, &old).await, 0);

    press(&browser, "failed-deliveries", 1, "IM recovered", "retry").await;
    let state = request_state(&browser, &page, "done").await;
    assert_eq!(
        state,
        "done: 1 failed rows of notice_delivery_events set back to pending"
    );
    assert_eq!(not_failed(&db.pool, &failed).await, 1);

    let operators = column(&browser, "consumer-requests", 4).await;
    assert_eq!(operators, ["alice"; 6]);
    browser
        .screenshot(&screenshots().join("consumers-requests.png"))
        .await;
    browser.quit().await;

    audited_as_requested(&db.pool).await;
    read_only_is_refused(&base, &db.pool, &fresh).await;
    shutdown.cancel();
    service.await.unwrap();
}

/// One audit row per request but the dry runs (nothing to audit: the
/// request row says who asked), under its operator and reason, with its
/// outcome.
async fn audited_as_requested(pool: &MySqlPool) {
    let audit: Vec<(String, String, String, String)> = sqlx::query_as(
        "SELECT action, operator, reason, outcome FROM consumer_operator_audit ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let expected = [
        ("dead-letters replay", "IM is back, INC-7", "applied 1,"),
        ("dead-letters replay", "pressed twice", "duplicate 1,"),
        ("dead-letters replay", "old one too", "refused 1,"),
        ("deliveries retry", "IM recovered", "reset 1 rows"),
    ];
    assert_eq!(audit.len(), expected.len(), "{audit:?}");
    for ((action, operator, reason, outcome), (want_action, want_reason, want_outcome)) in
        audit.iter().zip(expected)
    {
        assert_eq!(
            (action.as_str(), operator.as_str(), reason.as_str()),
            (want_action, "alice", want_reason)
        );
        assert!(outcome.contains(want_outcome), "{outcome}");
    }
}

/// A read-only session sees no request forms, and its POST writes nothing.
async fn read_only_is_refused(base: &str, pool: &MySqlPool, event_id: &str) {
    let cookie = login(base, READER).await;
    let path = format!("/console/consumers/group?group={}", declared::NOTICE.group);
    let (status, page) = get(base, &path, &cookie).await;
    assert_eq!(status, 200, "{page}");
    assert!(
        !page.contains("/console/consumers/replay"),
        "no forms for a reader"
    );
    let csrf = csrf_of(&page);
    let before = requests(pool).await;
    let form = [
        ("csrf", csrf.as_str()),
        ("operator", "eve"),
        ("reason", "x"),
        ("group", declared::NOTICE.group),
        ("event_id", event_id),
        ("position", "0/0"),
    ];
    let (status, body) = post(
        base,
        "/console/consumers/replay",
        &cookie,
        &[("origin", base)],
        &form,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("read-only session may not change anything"),
        "{body}"
    );
    assert_eq!(requests(pool).await, before);
    // Bad input is refused precisely, before anything is written.
    let admin = login(base, ADMIN).await;
    let (_, page) = get(base, &path, &admin).await;
    let csrf = csrf_of(&page);
    for (group, event, position, expected) in [
        ("nope", event_id, "0/0", "no consumer group `nope`"),
        (
            declared::NOTICE.group,
            event_id,
            "zero",
            "expected &lt;partition&gt;/&lt;offset&gt;",
        ),
        (declared::NOTICE.group, "other-event", "0/0", "is of event"),
        (declared::NOTICE.group, "", "0/0", "event_id: required"),
    ] {
        let form = [
            ("csrf", csrf.as_str()),
            ("operator", "alice"),
            ("reason", "x"),
            ("group", group),
            ("event_id", event),
            ("position", position),
        ];
        let (status, body) = post(
            base,
            "/console/consumers/replay",
            &admin,
            &[("origin", base)],
            &form,
        )
        .await;
        assert!((400..500).contains(&status), "{status}: {body}");
        assert!(body.contains(expected), "{expected}: {body}");
    }
    assert_eq!(
        requests(pool).await,
        6,
        "only the six pressed requests were written"
    );
}
