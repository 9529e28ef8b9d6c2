//! `console`: the relay console's cost on a million-row outbox — each page's
//! response time (median and max of repeated GETs over loopback, the
//! relay's own HTTP stack included), and the relay's drain rate of a backlog
//! with nobody looking versus with every page refreshed back to back (far
//! more often than the overview's 10 s self-refresh; what several operators
//! would do at once): `console_drains`. The console is served as the relay
//! serves it (its own thread at `admin_cpu_nice`, its own pool). The
//! refreshes reload the same pages, as a person would, so the console
//! answers most of them from its one-second copy and paces them
//! (`console::recent`); the page times here load each page with its own
//! query string, so they time the work.
//!
//! The outbox: delivered history inserted server-side (one INSERT … SELECT
//! over a recursive sequence, 1 in 100 rows a dead letter, a few heads of
//! history rooms retrying an hour from now, so the stuck page has work),
//! then a backlog of real gift events written by `fixtures::prefill`, as in
//! `relay-drain`, drained by a real relay in `mq` mode.

use crate::console_http::{console_config, page_row, serve};
use crate::fixtures::{self, BenchEnv};
use crate::report::Report;
use outbox_relay::console;
use service_kit::time::now_ms;
use sqlx::MySqlPool;

/// Delivered history, server-side: `rows` rows in `rooms` history rooms.
const HISTORY_SQL: &str = "INSERT INTO room_outbox (event_id, app_code, room_id, shard, lane, room_event_seq, \
     event_type, topic, payload, status, retry_count, next_retry_at_ms, created_at_ms, last_error, delivered_at_ms) \
     WITH RECURSIVE seq (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < ?) \
     SELECT LPAD(n, 36, '0'), 'hyapp', CONCAT('hist-room-', n MOD ?), n MOD 64, 0, n, 'RoomGiftSent', \
     'hyapp_room_outbox', 'x', \
     CASE WHEN n MOD 100 = 2 THEN 'failed' WHEN n MOD 50000 = 1 THEN 'retryable' ELSE 'delivered' END, \
     IF(n MOD 100 = 2 OR n MOD 50000 = 1, 3, 0), IF(n MOD 50000 = 1, ? + 3600000, ? - 86400000 + n), \
     ? - 86400000 + n, IF(n MOD 100 = 2 OR n MOD 50000 = 1, 'broker down', ''), \
     IF(n MOD 100 = 2 OR n MOD 50000 = 1, 0, ? - 86400000 + n + 40) FROM seq";

/// The `console` scenario.
pub async fn console(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    let (history, backlog, rooms) = if env.smoke {
        (20_000, 2_000, 50)
    } else {
        (800_000, 200_000, 1_000)
    };
    println!("console: {history} delivered rows + {backlog} backlog rows");
    let (pool, db) = fixtures::fresh_database(env).await?;
    let now = now_ms();
    fill_history(&pool, history, now).await?;
    let first_backlog = fixtures::newest_id(&pool).await? + 1;
    fixtures::prefill(&pool, rooms, backlog).await?;
    sqlx::query("ANALYZE TABLE room_outbox")
        .execute(&pool)
        .await?;

    let database_url = format!("{}/{db}", env.mysql);
    let console = serve(&database_url, |pool| console::router(console_config(&pool))).await?;
    let base = console.base.clone();
    // A dead letter of the history (n = 102) found by its event id.
    let by_event_id = format!("/console/dead-letters?event_id={:0>36}", 102);
    let pages = [
        "/console",
        "/console/stuck",
        "/console/dead-letters",
        "/console/dead-letters?room_id=hist-room-7&since=7d",
        by_event_id.as_str(),
        "/console/dead-letters/dry-run",
        "/console/audit",
        "/console/rooms?room_id=bench-room-7",
        "/console/rooms?room_id=hist-room-7",
        "/console/charts",
    ];
    let note = format!("{} rows in room_outbox", history + backlog);
    for page in pages {
        report.add(page_row(&base, page, &note).await?);
    }

    crate::console_drains::drains(env, &pool, &base, (first_backlog, backlog), report).await?;
    drop(console);
    crate::console_consumers::consumer_pages(env, &database_url, report).await?;
    pool.close().await;
    fixtures::drop_database(env, &db).await
}

/// `history` delivered rows in one recursive insert, all as of `now`.
async fn fill_history(pool: &MySqlPool, history: usize, now: i64) -> anyhow::Result<()> {
    // MariaDB bounds recursive CTEs by this session variable.
    let mut conn = pool.acquire().await?;
    sqlx::query("SET SESSION max_recursive_iterations = 4294967295")
        .execute(&mut *conn)
        .await?;
    sqlx::query(HISTORY_SQL)
        .bind(history as i64)
        .bind(5_000_i64)
        .bind(now)
        .bind(now)
        .bind(now)
        .bind(now)
        .execute(&mut *conn)
        .await?;
    drop(conn);
    Ok(())
}
