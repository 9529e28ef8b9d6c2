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
