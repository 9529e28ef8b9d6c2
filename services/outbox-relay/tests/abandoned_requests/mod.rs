//! Marking a consumer request abandoned from the console, in headless
//! Chromium: four requests of the notice group — one claimed eleven minutes
//! ago by an instance that died (past `consumer_runtime::host::STALLED_AFTER`),
//! one claimed seconds ago, one pending for fifteen minutes (the page says
//! no instance has claimed it), one done. Only the stalled one has
//! the form; an operator marks it, and the page shows it abandoned with who
//! and why. Marking any other is refused with the reason and changes
//! nothing; a read-only session is refused. The page is saved as
//! `target/console-screenshots/consumers-abandoned.png`.

use super::browser::{DEADLINE, column, log_in, screenshots, texts};
use super::common::console::{
    ADMIN, READER, csrf_of, get, login, post, serve_console_with_consumers,
};
use consumer_runtime::{ConsumerConfig, ConsumerSettings};
use outbox_schema::groups::NOTICE;
use service_kit::{mq::MqConfig, time::now_ms};
use sqlx::MySqlPool;
use testkit::browser::Browser;

/// A request of the notice group as a service left it; its id.
async fn request(pool: &MySqlPool, claimed_by: &str, claimed_at_ms: i64, outcome: &str) -> u64 {
    sqlx::query(
        "INSERT INTO consumer_operator_requests (consumer_group, action, event_id, dlq_position, \
         operator, reason, requested_at_ms, claimed_by, claimed_at_ms, outcome, detail) \
         VALUES (?, 'replay_dead_letter', 'evt-1', '0/0', 'bob', 'IM back', ?, ?, ?, ?, '')",
    )
    .bind(NOTICE.group)
    .bind(now_ms() - 900_000)
    .bind(claimed_by)
    .bind(claimed_at_ms)
    .bind(outcome)
    .execute(pool)
    .await
    .unwrap()
    .last_insert_id()
}

/// The outcome column of each request, by id.
async fn outcomes(pool: &MySqlPool) -> Vec<(u64, String)> {
    sqlx::query_as("SELECT id, outcome FROM consumer_operator_requests ORDER BY id")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_request_whose_instance_died_is_marked_abandoned() {
    let db = testkit::TestDb::new().await;
    let mq = MqConfig {
        enabled: true,
        name_servers: vec![testkit::kafka_bootstrap()],
        namespace: testkit::unique("ab"),
        ..MqConfig::default()
    };
    let settings = ConsumerSettings::resolve(
        &mq,
        &ConsumerConfig::default(),
        &mq.room_outbox.topic,
        NOTICE.group,
        0,
    )
    .unwrap();
    testkit::create_topic(&settings.dead_letter_topic, 1).await;
    let now = now_ms();
    let stalled = request(&db.pool, "gone-host:41", now - 11 * 60_000, "").await;
    let running = request(&db.pool, "live-host:7", now - 5_000, "").await;
    let pending = request(&db.pool, "", 0, "").await;
    let done = request(&db.pool, "live-host:7", now - 60_000, "done").await;

    let base = serve_console_with_consumers(&db.pool, &mq).await;
    let page = format!("{base}/console/consumers/group?group={}", NOTICE.group);
    let browser = Browser::start().await;
    log_in(&browser, &base, ADMIN).await;
    browser.goto(&page).await;
    browser.wait_for_page_text("Requests", DEADLINE).await;
    let ids = column(&browser, "consumer-requests", 0).await;
    assert_eq!(
        ids,
        [done, pending, running, stalled].map(|id| id.to_string())
    );
    let buttons = texts(&browser, "#consumer-requests form.abandon-request button").await;
    assert_eq!(
        buttons,
        ["Mark abandoned"],
        "only the stalled request has the form"
    );

    let form = "#consumer-requests form.abandon-request";
    browser
        .type_into(
            &browser.find(&format!("{form} input[name=operator]")).await,
            "alice",
        )
        .await;
    browser
        .type_into(
            &browser.find(&format!("{form} input[name=reason]")).await,
            "gone-host was replaced, INC-9",
        )
        .await;
    browser
        .click(&browser.find(&format!("{form} button")).await)
        .await;
    browser
        .wait_for_page_text("marked abandoned", DEADLINE)
        .await;
    browser.goto(&page).await;
    let states = column(&browser, "consumer-requests", 7).await;
    assert!(
        states[3].starts_with("abandoned: abandoned by alice: gone-host was replaced, INC-9;"),
        "{states:?}"
    );
    assert!(
        states[2].starts_with("running on live-host:7"),
        "{states:?}"
    );
    assert!(
        states[1].starts_with("pending for 9")
            && states[1].contains("no instance of notice-consumer has claimed it"),
        "a request unclaimed for 15 minutes says why it may be: {states:?}"
    );
    browser
        .screenshot(&screenshots().join("consumers-abandoned.png"))
        .await;
    browser.quit().await;

    refusals(&base, &db.pool, [stalled, running, pending, done]).await;
}

/// Every other request, an unknown one and a read-only session are refused
/// with the reason; nothing changes.
async fn refusals(base: &str, pool: &MySqlPool, [stalled, running, pending, done]: [u64; 4]) {
    let before = outcomes(pool).await;
    let path = format!("/console/consumers/group?group={}", NOTICE.group);
    let admin = login(base, ADMIN).await;
    let (_, page) = get(base, &path, &admin).await;
    let csrf = csrf_of(&page);
    let cases = [
        (running, "abandoned only after 600 s".to_string()),
        (pending, "is pending".to_string()),
        (done, "has finished (done)".to_string()),
        (stalled, "has finished (abandoned)".to_string()),
        (999_999, "no request #999999".to_string()),
    ];
    for (id, expected) in cases {
        let id = id.to_string();
        let form = [
            ("csrf", csrf.as_str()),
            ("operator", "alice"),
            ("reason", "x"),
            ("group", NOTICE.group),
            ("id", id.as_str()),
        ];
        let (status, body) = post(
            base,
            "/console/consumers/abandon",
            &admin,
            &[("origin", base)],
            &form,
        )
        .await;
        assert!((400..500).contains(&status), "{id}: {status}: {body}");
        assert!(body.contains(&expected), "{expected}: {body}");
    }
    let reader = login(base, READER).await;
    let (_, page) = get(base, &path, &reader).await;
    assert!(!page.contains("abandon-request"), "no form for a reader");
    let csrf = csrf_of(&page);
    let running = running.to_string();
    let form = [
        ("csrf", csrf.as_str()),
        ("operator", "eve"),
        ("reason", "x"),
        ("group", NOTICE.group),
        ("id", running.as_str()),
    ];
    let (status, body) = post(
        base,
        "/console/consumers/abandon",
        &reader,
        &[("origin", base)],
        &form,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(outcomes(pool).await, before);
}
