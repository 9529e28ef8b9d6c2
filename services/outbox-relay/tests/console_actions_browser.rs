//! The console's comfort actions in headless Chromium (`testkit::browser`):
//! bulk retry-now of the stuck rooms an operator ticks, with one reason
//! (each room its own audited action; an unticked room untouched), and the
//! auto-refresh toggle (a cookie preference: the live page loses and
//! regains its `<meta http-equiv=refresh>`). Each step is saved as a
//! screenshot under `target/console-screenshots/`.

mod browser;
mod common;

use browser::{DEADLINE, column, log_in, screenshots, texts};
use common::console::{ADMIN, serve_console};
use sqlx::Row as _;
use testkit::browser::Browser;

const HOUR: i64 = 3_600_000;

/// When each room's head (seq 1) is next due, in room order.
async fn next_retries(pool: &sqlx::MySqlPool) -> Vec<i64> {
    sqlx::query(
        "SELECT next_retry_at_ms FROM room_outbox WHERE room_event_seq = 1 ORDER BY room_id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    .iter()
    .map(|row| row.get::<i64, _>(0))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticked_stuck_rooms_are_retried_now_with_one_reason_in_a_browser() {
    let db = testkit::TestDb::new().await;
    let now = service_kit::time::now_ms();
    let rooms = ["room-1", "room-2", "room-3"];
    // Each room's head: a real join event (decoded on the page), retrying
    // in an hour.
    for room in rooms {
        common::insert(&db.pool, &common::room_rows(room, 1, 1)).await;
    }
    sqlx::query(
        "UPDATE room_outbox SET status = 'retryable', retry_count = 3, next_retry_at_ms = ?, \
         last_error = 'IM answered 503'",
    )
    .bind(now + HOUR)
    .execute(&db.pool)
    .await
    .unwrap();
    let base = serve_console(&db.pool).await;
    let shots = screenshots();
    let browser = Browser::start().await;
    log_in(&browser, &base, ADMIN).await;
    browser.goto(&format!("{base}/console/stuck")).await;
    browser
        .wait_for_page_text("3 stuck rooms on this page", DEADLINE)
        .await;
    for room in &rooms[..2] {
        browser
            .click(&browser.find(&format!("input.tick[value='{room}']")).await)
            .await;
    }
    browser
        .type_into(&browser.find("#bulk input[name=operator]").await, "alice")
        .await;
    browser
        .type_into(&browser.find("#bulk-reason").await, "IM back, ticket 9")
        .await;
    browser.screenshot(&shots.join("stuck-ticked.png")).await;
    browser.click(&browser.find("#bulk-retry-now").await).await;
    browser
        .wait_for_page_text("2 of 2 rooms done", DEADLINE)
        .await;
    let results = texts(&browser, "#bulk-results li").await;
    assert_eq!(results.len(), 2, "{results:?}");
    for (result, room) in results.iter().zip(&rooms) {
        assert!(
            result.starts_with(&format!("{room}: retry_now of event ")),
            "{results:?}"
        );
        assert!(
            result.contains("retryable → retryable (audit #"),
            "{results:?}"
        );
    }
    browser.screenshot(&shots.join("bulk-retry-now.png")).await;

    // The ticked rooms' heads are due now; the third still waits an hour.
    let due = next_retries(&db.pool).await;
    let after = service_kit::time::now_ms();
    assert!(due[0] <= after && due[1] <= after, "{due:?}");
    assert_eq!(due[2], now + HOUR, "room-3 was not ticked");
    // One audit row per room, each with the one reason, seen on the page.
    browser.goto(&format!("{base}/console/audit")).await;
    browser
        .wait_for_page_text("2 audit rows on this page", DEADLINE)
        .await;
    assert_eq!(column(&browser, "audit", 4).await, ["room-2", "room-1"]);
    assert_eq!(column(&browser, "audit", 7).await, ["IM back, ticket 9"; 2]);
    browser.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_refresh_toggle_turns_a_live_page_still_and_back_in_a_browser() {
    let db = testkit::TestDb::new().await;
    let base = serve_console(&db.pool).await;
    let shots = screenshots();
    let browser = Browser::start().await;
    log_in(&browser, &base, ADMIN).await;
    let refreshing = "http-equiv=\"refresh\"";
    browser
        .goto(&format!("{base}/console/stuck?room_id=room-9"))
        .await;
    assert!(browser.source().await.contains(refreshing), "on by default");
    assert_eq!(
        texts(&browser, "#refresh b").await,
        ["on"],
        "the toggle says so"
    );

    // Off: back on the same page (its search kept), no longer refreshing.
    browser.click(&browser.find("#refresh-toggle").await).await;
    browser
        .wait_for_page_text("Auto-refresh every 10 s: off", DEADLINE)
        .await;
    assert_eq!(
        browser.url().await,
        format!("{base}/console/stuck?room_id=room-9")
    );
    assert!(!browser.source().await.contains(refreshing));
    // The preference holds on every live page of this browser.
    for path in ["/console", "/console/charts", "/console/audit"] {
        browser.goto(&format!("{base}{path}")).await;
        browser
            .wait_for_page_text("Auto-refresh every 10 s: off", DEADLINE)
            .await;
        assert!(!browser.source().await.contains(refreshing), "{path}");
    }
    browser.screenshot(&shots.join("refresh-off.png")).await;

    // On again.
    browser.click(&browser.find("#refresh-toggle").await).await;
    browser
        .wait_for_page_text("Auto-refresh every 10 s: on", DEADLINE)
        .await;
    assert_eq!(browser.url().await, format!("{base}/console/audit"));
    assert!(browser.source().await.contains(refreshing));
    browser.quit().await;
}
