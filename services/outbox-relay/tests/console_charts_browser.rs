//! The fleet charts in headless Chromium (`testkit::browser`): an operator
//! logs in and opens `/console/charts`; the three SVG charts render under
//! the console's strict Content-Security-Policy (no script). The page is
//! saved as `target/console-screenshots/charts.png`.

mod common;
#[path = "common/console_consumers.rs"]
mod console_consumers;

use common::console::ADMIN;
use console_consumers::{screenshots, serve_with_charts};
use std::time::Duration;
use testkit::browser::Browser;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_render_in_a_browser() {
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
    let base = serve_with_charts(&db.pool).await;
    let shots = screenshots();
    std::fs::create_dir_all(&shots).unwrap();
    let browser = Browser::start().await;
    browser.goto(&format!("{base}/console/login")).await;
    browser
        .type_into(&browser.find("#token").await, ADMIN)
        .await;
    browser.click(&browser.find("#login").await).await;
    browser
        .wait_for_page_text("Overview", Duration::from_secs(30))
        .await;
    let page = browser
        .wait_for_text(
            &format!("{base}/console/charts"),
            "Publishes per second, whole fleet",
            Duration::from_secs(30),
        )
        .await;
    assert!(page.contains("exact: all 60 rows"), "{page}");
    assert_eq!(browser.find_all("svg").await.len(), 3);
    assert!(
        !browser.find_all("polyline").await.is_empty(),
        "lines drawn"
    );
    browser.screenshot(&shots.join("charts.png")).await;
    browser.quit().await;
}
