//! Helpers of the operator command tests: the real binary against a test
//! database, the real admin router on a loopback port, a room whose head
//! waits out a backoff, and snapshots that show a refusal wrote nothing.

use super::*;
use outbox_relay::admin;
use serde_json::Value;
use service_kit::{Secret, time::now_ms};
use sqlx::MySqlPool;
use std::process::Command;

pub const TOKEN: &str = "operator-test-token";
pub const FIVE_MINUTES: i64 = 300_000;

/// The real binary against `db`, with `args` after `--config`. Logging at
/// `info`: its lines go to stderr, so stdout must still parse as JSON.
pub fn cli(db: &testkit::TestDb, args: &[&std::ffi::OsStr]) -> std::process::Output {
    let dir = std::env::temp_dir().join(testkit::unique("relay-ops-"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("relay.yaml");
    std::fs::write(
        &config,
        format!("mysql:\n  url: \"{}\"\nlog:\n  level: \"info\"\n", db.url),
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .arg("--config")
        .arg(&config)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    testkit::binary::remove_config(&config);
    output
}

pub fn run(db: &testkit::TestDb, args: &[&str]) -> std::process::Output {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    cli(db, &args)
}

/// Runs a `--json` command that must succeed and parses its output.
pub fn run_json(db: &testkit::TestDb, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let output = run(db, &all);
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Runs a command that must fail; returns its stderr.
pub fn run_refused(db: &testkit::TestDb, args: &[&str]) -> String {
    let output = run(db, args);
    assert!(!output.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The admin router served on a loopback port; returns its base URL.
pub async fn serve_admin(pool: &MySqlPool) -> String {
    let router = admin::router(pool.clone(), Secret::new(TOKEN), 7 * 86_400_000);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    base
}

/// `count` rows of `room`; the head is made retryable, backed off five minutes.
pub async fn room_with_backed_off_head(pool: &MySqlPool, room: &str, count: u64) -> Vec<String> {
    let rows = room_rows(room, 1, count);
    insert(pool, &rows).await;
    sqlx::query(
        "UPDATE room_outbox SET status = 'retryable', retry_count = 2, last_error = 'broker down', \
         next_retry_at_ms = ? WHERE event_id = ?",
    )
    .bind(now_ms() + FIVE_MINUTES)
    .bind(&rows[0].event_id)
    .execute(pool)
    .await
    .unwrap();
    rows.into_iter().map(|row| row.event_id).collect()
}

/// Every row and audit row, to compare before and after a refusal.
pub async fn snapshot(pool: &MySqlPool) -> (Vec<(u64, String, u32, i64, String)>, i64) {
    let rows = sqlx::query_as(
        "SELECT id, status, retry_count, next_retry_at_ms, last_error FROM room_outbox ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let audits = sqlx::query_scalar("SELECT COUNT(*) FROM relay_operator_audit")
        .fetch_one(pool)
        .await
        .unwrap();
    (rows, audits)
}

pub async fn audit_rows(pool: &MySqlPool) -> Vec<(String, String, String, String, u64, String)> {
    sqlx::query_as(
        "SELECT CAST(operator AS CHAR), action, CAST(room_id AS CHAR), CAST(event_id AS CHAR), row_count, reason \
         FROM relay_operator_audit ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}
