//! The fleet charts in headless Chromium (`testkit::browser`): an operator
//! logs in and opens `/console/charts`; the three SVG charts render under
//! the console's strict Content-Security-Policy (no script), reached from
//! the navigation of every page. With the browser reporting a dark
//! preference, the same page turns dark (the console's
//! `prefers-color-scheme` styles). The pages are saved as
//! `target/console-screenshots/charts.png` and `charts-dark.png`.

mod browser;
mod common;

use browser::{DEADLINE, log_in, screenshots};
use common::console::{ADMIN, serve_console};
use testkit::browser::Browser;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_render_in_a_browser_light_and_dark() {
    let db = testkit::TestDb::new().await;
    let now = service_kit::time::now_ms();
    for minute in 0..60_i64 {
        let created = now - 3_600_000 + minute * 60_000 + 1_000;
        sqlx::query(
            "INSERT INTO room_outbox (event_id, app_code, room_id, shard, lane, room_event_seq, \
             event_type, topic, payload, status, next_retry_at_ms, created_at_ms, delivered_at_ms) \
             VALUES (?, 'hyapp', 'room-1', 0, 0, ?, 'RoomGiftSent', 'hyapp_room_outbox', 'x', \
             'delivered', ?, ?, ?)",
        )
        .bind(format!("e-{minute}"))
        .bind(minute)
        .bind(created)
        .bind(created)
        .bind(created + 50 + minute * 10)
        .execute(&db.pool)
        .await
        .unwrap();
    }
    let base = serve_console(&db.pool).await;
    let shots = screenshots();
    let browser = Browser::start().await;
    log_in(&browser, &base, ADMIN).await;
    // The overview's navigation leads to the charts.
    browser
        .click(&browser.find("nav a[href='/console/charts']").await)
        .await;
    browser
        .wait_for_url(&format!("{base}/console/charts"), DEADLINE)
        .await;
    let page = browser
        .wait_for_page_text("Publishes per second, whole fleet", DEADLINE)
        .await;
    assert!(page.contains("exact: all 60 rows"), "{page}");
    assert!(page.contains("Auto-refresh every"), "a live page: {page}");
    assert_eq!(browser.find_all("svg").await.len(), 3);
    assert!(
        !browser.find_all("polyline").await.is_empty(),
        "lines drawn"
    );
    // No consumer applied anything: the group chart is empty and says so.
    assert_eq!(browser.find_all("svg .no-data").await.len(), 1);
    browser.screenshot(&shots.join("charts.png")).await;
    let light = browser
        .css_value(&browser.find("body").await, "background-color")
        .await;

    browser.prefer_color_scheme("dark").await;
    browser.goto(&format!("{base}/console/charts")).await;
    browser
        .wait_for_page_text("Publishes per second, whole fleet", DEADLINE)
        .await;
    let dark = browser
        .css_value(&browser.find("body").await, "background-color")
        .await;
    assert_eq!(dark, "rgba(21, 24, 28, 1)", "the dark scheme's background");
    assert_ne!(light, dark, "the light page is not dark");
    browser.screenshot(&shots.join("charts-dark.png")).await;
    browser.quit().await;
}
