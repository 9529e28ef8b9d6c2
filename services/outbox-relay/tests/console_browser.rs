//! The console in a real browser (headless Chromium through chromedriver,
//! `testkit::browser`): the relay in direct mode against the fake Tencent
//! IM, whose first group message fails, so the room's head backs off for an
//! hour and holds the room. The operator logs in, finds the room on the
//! stuck page with its decoded head, skips it with a reason, watches the
//! chain drain on the room's timeline and the audit row appear, then dry-runs
//! and replays the dead letter and sees it delivered. Every page is saved as
//! a screenshot under `target/console-screenshots/`.

mod common;

use common::console::{ADMIN, READER};
use common::service::service_config;
use common::*;
use fake_tencent_im::{FakeImConfig, FaultRule};
use outbox_relay::{app::App, config::RelayServiceConfig};
use room_core::EventKind;
use service_kit::{Secret, duration::ConfigDuration};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use testkit::browser::Browser;
use tokio_util::sync::CancellationToken;

const SEND_GROUP_MSG: &str = "group_open_http_svc/send_group_msg";
const DEADLINE: Duration = Duration::from_secs(60);
const ROOM: &str = "room-ui";

fn screenshots() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| testkit::source_tree::workspace_root().join("target"));
    target.join("console-screenshots")
}

/// Polls `condition` until it holds, failing after [`DEADLINE`] with `what`.
async fn until<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + DEADLINE;
    while !condition().await {
        assert!(Instant::now() < deadline, "{what} within {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The status of each row of the timeline table on the page, in order.
async fn timeline_statuses(browser: &Browser) -> Vec<String> {
    let mut statuses = Vec::new();
    for cell in browser.find_all("#timeline span[class^='status-']").await {
        statuses.push(browser.text(&cell).await);
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_skips_a_stuck_head_and_replays_it_in_the_browser() {
    let db = testkit::TestDb::new().await;
    let fake = fake_tencent_im::spawn(FakeImConfig::new(IM_APP_ID, IM_KEY, "administrator"))
        .await
        .unwrap();
    let mut config = RelayServiceConfig {
        admin_token: Secret::new(ADMIN),
        admin_read_token: Secret::new(READER),
        ..service_config(&db.url, "relay-console")
    };
    let worker = &mut config.outbox_worker;
    worker.publish_mode = "direct".into();
    worker.max_retry_count = 10;
    // One failure backs the head off for an hour: the room is stuck until
    // an operator acts.
    worker.initial_backoff = ConfigDuration::from_secs(3_600);
    worker.max_backoff = ConfigDuration::from_secs(3_600);
    config.direct.tencent_im = tencent_im::ImSection {
        enabled: true,
        base_url: fake.base_url(),
        sdk_app_id: IM_APP_ID,
        secret_key: Secret::new(IM_KEY),
        ..tencent_im::ImSection::default()
    };
    let app = App::build(config).await.unwrap();
    let base = format!("http://{}", app.http_addr().unwrap());
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(app.run(shutdown.clone()));

    // The room exists in IM; then its first join fails once.
    insert(
        &db.pool,
        &[event_row(
            ROOM,
            1,
            EventKind::RoomCreated {
                owner_id: "host".into(),
                title: "Lounge".into(),
                mic_seat_count: 8,
            },
        )],
    )
    .await;
    until("the room's creation delivered", || async {
        statuses(&db.pool, ROOM).await == vec![(1, "delivered".to_owned())]
    })
    .await;
    fake.inject_fault(FaultRule::http_status(SEND_GROUP_MSG, 503).times(1));
    let joins = room_rows(ROOM, 2, 3);
    insert(&db.pool, &joins).await;
    let head = joins[0].event_id.clone();
    until("the head retryable, the rest held", || async {
        statuses(&db.pool, ROOM).await
            == vec![
                (1, "delivered".to_owned()),
                (2, "retryable".to_owned()),
                (3, "pending".to_owned()),
                (4, "pending".to_owned()),
            ]
    })
    .await;
    let messages_before = fake.group_messages("room_room-ui").len();

    let shots = screenshots();
    let browser = Browser::start().await;

    // Login: the token goes in a password field, and the URL never holds it.
    browser.goto(&format!("{base}/console/login")).await;
    browser.screenshot(&shots.join("login.png")).await;
    let token = browser.find("#token").await;
    browser.type_into(&token, ADMIN).await;
    browser.click(&browser.find("#login").await).await;
    browser
        .wait_for_url(&format!("{base}/console"), DEADLINE)
        .await;
    let overview = browser.wait_for_page_text("Overview", DEADLINE).await;
    assert!(
        overview.contains("Overview") && overview.contains("operator"),
        "{overview}"
    );
    assert!(overview.contains("retryable"), "{overview}");
    browser.screenshot(&shots.join("overview.png")).await;

    // The stuck room, its head decoded.
    let stuck = browser
        .wait_for_text(
            &format!("{base}/console/stuck"),
            &format!("Room {ROOM}"),
            DEADLINE,
        )
        .await;
    assert!(stuck.contains(&head), "{stuck}");
    assert!(
        stuck.contains("\"user_id\": \"u2\""),
        "the head as JSON: {stuck}"
    );
    assert!(stuck.contains("503"), "the last error: {stuck}");
    browser.screenshot(&shots.join("stuck.png")).await;
    let skip = "form[action='/console/stuck/skip']";
    browser
        .type_into(
            &browser.find(&format!("{skip} input[name=operator]")).await,
            "alice",
        )
        .await;
    browser
        .type_into(
            &browser.find(&format!("{skip} input[name=reason]")).await,
            "IM refuses this join, ticket 123",
        )
        .await;
    browser
        .click(&browser.find(&format!("{skip} button")).await)
        .await;
    let result = browser.wait_for_page_text("skip by alice", DEADLINE).await;
    assert!(result.contains("skip by alice"), "{result}");
    assert!(result.contains("retryable → failed"), "{result}");
    browser.screenshot(&shots.join("skip-result.png")).await;

    // The rows behind the head flow.
    until("the chain drained past the skipped head", || async {
        statuses(&db.pool, ROOM).await
            == vec![
                (1, "delivered".to_owned()),
                (2, "failed".to_owned()),
                (3, "delivered".to_owned()),
                (4, "delivered".to_owned()),
            ]
    })
    .await;
    let timeline_url = format!("{base}/console/rooms?room_id={ROOM}");
    browser
        .wait_for_text(&timeline_url, "skipped by alice", DEADLINE)
        .await;
    // The statuses of the table's rows, not the page's words: the search
    // form's status choice names every status too.
    assert_eq!(
        timeline_statuses(&browser).await,
        ["delivered", "failed", "delivered", "delivered"]
    );
    browser.screenshot(&shots.join("timeline.png")).await;

    // The audit row.
    let audit = browser
        .wait_for_text(
            &format!("{base}/console/audit"),
            "IM refuses this join, ticket 123",
            DEADLINE,
        )
        .await;
    assert!(
        audit.contains("alice") && audit.contains("skip") && audit.contains(&head),
        "{audit}"
    );
    browser.screenshot(&shots.join("audit.png")).await;

    // Dead letters: the skipped head; a dry run shows exactly it; replay.
    let letters = browser
        .wait_for_text(
            &format!("{base}/console/dead-letters?room_id={ROOM}"),
            &head,
            DEADLINE,
        )
        .await;
    assert!(
        letters.contains("1 dead letters on this page."),
        "{letters}"
    );
    assert!(letters.contains("skipped by alice"), "{letters}");
    browser.screenshot(&shots.join("dead-letters.png")).await;
    browser.click(&browser.find("#dry-run").await).await;
    let dry = browser
        .wait_for_page_text("would put 1 dead letters back", DEADLINE)
        .await;
    assert!(dry.contains("would put 1 dead letters back"), "{dry}");
    assert!(dry.contains(&head), "{dry}");
    assert_eq!(
        statuses(&db.pool, ROOM).await[1].1,
        "failed",
        "a dry run changes nothing"
    );
    browser.screenshot(&shots.join("dry-run.png")).await;
    browser
        .type_into(
            &browser
                .find("form[action='/console/dead-letters/replay'] input[name=operator]")
                .await,
            "alice",
        )
        .await;
    browser.click(&browser.find("#replay").await).await;
    let replayed = browser
        .wait_for_page_text("Replayed 1 dead letters", DEADLINE)
        .await;
    assert!(replayed.contains("Replayed 1 dead letters"), "{replayed}");
    browser.screenshot(&shots.join("replay-result.png")).await;

    // Delivered: the replayed event reaches IM and the timeline says so.
    until("the replayed head delivered", || async {
        statuses(&db.pool, ROOM)
            .await
            .iter()
            .all(|(_, status)| status == "delivered")
    })
    .await;
    assert_eq!(
        fake.group_messages("room_room-ui").len(),
        messages_before + 3
    );
    browser.goto(&timeline_url).await;
    browser
        .wait_for_page_text("4 events on this page", DEADLINE)
        .await;
    assert_eq!(timeline_statuses(&browser).await, ["delivered"; 4]);
    browser
        .screenshot(&shots.join("timeline-after-replay.png"))
        .await;
    let audit = browser
        .wait_for_text(&format!("{base}/console/audit"), "replay", DEADLINE)
        .await;
    assert!(audit.contains("replay"), "{audit}");
    browser
        .screenshot(&shots.join("audit-after-replay.png"))
        .await;

    // Logging out ends the session in the browser.
    browser.goto(&format!("{base}/console")).await;
    browser.click(&browser.find("nav button").await).await;
    browser
        .wait_for_url(&format!("{base}/console/login"), DEADLINE)
        .await;
    browser.goto(&format!("{base}/console")).await;
    assert_eq!(browser.url().await, format!("{base}/console/login"));

    browser.quit().await;
    shutdown.cancel();
    running.await.unwrap().unwrap();
    fake.shutdown().await.unwrap();
}
