//! Helpers of the console's browser tests (headless Chromium through
//! `testkit::browser`): where screenshots go, waiting on a condition with a
//! deadline, logging in through the login form, and reading a table's
//! cells as the browser renders them (the page's whole text also holds
//! the search forms' choices, so counting words on it counts those too).

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::path::PathBuf;
use std::time::{Duration, Instant};
use testkit::browser::Browser;

/// How long any one wait of these tests may take.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Where the browser tests save their screenshots:
/// `target/console-screenshots/` (or under `CARGO_TARGET_DIR`).
pub fn screenshots() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| testkit::source_tree::workspace_root().join("target"));
    let dir = target.join("console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Polls `condition` until it holds, failing after [`DEADLINE`] with `what`.
pub async fn until<F, Fut>(what: &str, mut condition: F)
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

/// Logs in at `base` with `token` through the form; waits for the overview.
pub async fn log_in(browser: &Browser, base: &str, token: &str) {
    browser.goto(&format!("{base}/console/login")).await;
    browser
        .type_into(&browser.find("#token").await, token)
        .await;
    browser.click(&browser.find("#login").await).await;
    browser
        .wait_for_url(&format!("{base}/console"), DEADLINE)
        .await;
    browser.wait_for_page_text("Overview", DEADLINE).await;
}

/// The rendered text of every element matching `selector`, in page order.
pub async fn texts(browser: &Browser, selector: &str) -> Vec<String> {
    let mut texts = Vec::new();
    for element in browser.find_all(selector).await {
        texts.push(browser.text(&element).await);
    }
    texts
}

/// The text of each cell in column `column` (0-based) of the table `#id`,
/// header row left out.
pub async fn column(browser: &Browser, id: &str, column: usize) -> Vec<String> {
    let selector = format!("#{id} tr td:nth-child({})", column + 1);
    texts(browser, &selector).await
}

/// A `room_outbox` row as these tests write it (chain lane, shard 0).
#[derive(Debug, Clone)]
pub struct Row<'a> {
    /// Its event id.
    pub event_id: &'a str,
    /// Its room.
    pub room_id: &'a str,
    /// Its seq in the room.
    pub seq: i64,
    /// Its event type.
    pub event_type: &'a str,
    /// Its status.
    pub status: &'a str,
    /// Committed at (ms).
    pub created_at_ms: i64,
    /// Marked delivered at (ms; 0 = not).
    pub delivered_at_ms: i64,
    /// Next retry at (ms).
    pub next_retry_at_ms: i64,
}

/// Inserts `row`, with a `traceparent` and, when failing, an error.
pub async fn insert(pool: &sqlx::MySqlPool, row: &Row<'_>) {
    let failing = matches!(row.status, "retryable" | "failed");
    sqlx::query(
        "INSERT INTO room_outbox (event_id, app_code, room_id, shard, lane, room_event_seq, \
         event_type, topic, payload, traceparent, status, retry_count, next_retry_at_ms, \
         created_at_ms, delivered_at_ms, last_error) \
         VALUES (?, 'hyapp', ?, 0, 0, ?, ?, 'hyapp_room_outbox', 'x', \
         '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', ?, ?, ?, ?, ?, ?)",
    )
    .bind(row.event_id)
    .bind(row.room_id)
    .bind(row.seq)
    .bind(row.event_type)
    .bind(row.status)
    .bind(if failing { 3 } else { 0 })
    .bind(row.next_retry_at_ms)
    .bind(row.created_at_ms)
    .bind(row.delivered_at_ms)
    .bind(if failing { "broker down" } else { "" })
    .execute(pool)
    .await
    .unwrap();
}

/// Records that `group` applied `event_id` at `at_ms`.
pub async fn applied(pool: &sqlx::MySqlPool, group: &str, event_id: &str, at_ms: i64) {
    sqlx::query(
        "INSERT INTO consumer_dedup (consumer_group, event_id, processed_at_ms) VALUES (?, ?, ?)",
    )
    .bind(group)
    .bind(event_id)
    .bind(at_ms)
    .execute(pool)
    .await
    .unwrap();
}
