//! `console`: the relay console's cost on a million-row outbox — each page's
//! response time (median and max of repeated GETs over loopback, the
//! relay's own HTTP stack included), and the relay's drain rate of a backlog
//! with nobody looking versus with every page refreshed back to back (far
//! more often than the overview's 10 s self-refresh; what several operators
//! would do at once), between two quiet drains.
//!
//! The outbox: delivered history inserted server-side (one INSERT … SELECT
//! over a recursive sequence, 1 in 100 rows a dead letter, a few heads of
//! history rooms retrying an hour from now, so the stuck page has work),
//! then a backlog of real gift events written by `fixtures::prefill`, as in
//! `relay-drain`, drained by a real relay in `mq` mode
//! (`relay_scenarios::worker`, `mq_config`, `create_topic`).

use crate::fixtures::{self, BenchEnv};
use crate::relay_scenarios::{create_topic, mq_config, worker};
use crate::report::{Report, Row};
use outbox_relay::console::{self, ConsoleConfig, history::History};
use outbox_schema::names;
use relay_engine::config::DirectConfig;
use service_kit::{Secret, duration::ConfigDuration, time::now_ms};
use sqlx::MySqlPool;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "bench-console-token-0123456789abcdef";
/// GETs per page.
const REPEATS: usize = 20;
/// A drain watched back to back keeps at least this share of its quiet rate.
const WATCHED_MIN_RATIO: f64 = 0.95;

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

/// Puts the backlog (ids from the first backlog row on) back to pending.
const RESET_BACKLOG_SQL: &str = "UPDATE room_outbox SET status = 'pending', delivered_at_ms = 0, \
     lock_until_ms = 0, claimed_by = '' WHERE id >= ?";

/// The oldest open backlog row (the history's retrying heads are older).
const OLDEST_BACKLOG_SQL: &str = "SELECT MIN(id) FROM room_outbox FORCE INDEX (idx_claim) \
     WHERE lane = 0 AND open_flag = 1 AND id >= ?";

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

    let base = serve_console(&pool).await?;
    let pages = [
        "/console",
        "/console/stuck",
        "/console/dead-letters",
        "/console/dead-letters?room_id=hist-room-7&since=7d",
        "/console/dead-letters/dry-run",
        "/console/audit",
        "/console/rooms?room_id=bench-room-7",
        "/console/rooms?room_id=hist-room-7",
    ];
    for page in pages {
        report.add(page_row(&base, page, history + backlog).await?);
    }

    // Quiet, watched, quiet again: each drain after the first starts from a
    // reset backlog (200k rows just updated), so the watched run is
    // compared with quiet runs on either side of it.
    let reset = |pool: &MySqlPool| {
        let pool = pool.clone();
        async move {
            sqlx::query(RESET_BACKLOG_SQL)
                .bind(first_backlog)
                .execute(&pool)
                .await
        }
    };
    let quiet_first = drain(env, &pool, first_backlog, backlog, false).await?;
    reset(&pool).await?;
    let (watched, refreshes) = drain_watched(env, &pool, &base, first_backlog, backlog).await?;
    reset(&pool).await?;
    let quiet_after = drain(env, &pool, first_backlog, backlog, false).await?;
    let quiet = (quiet_first + quiet_after) / 2.0;
    for (name, rate, note) in [
        (
            "console drain, nobody looking (first)",
            quiet_first,
            String::new(),
        ),
        (
            "console drain, nobody looking (after)",
            quiet_after,
            String::new(),
        ),
    ] {
        report.add(Row {
            scenario: name.into(),
            metric: "events/s".into(),
            measured: rate,
            target: None,
            baseline: Some(quiet),
            ratio: Some(rate / quiet),
            pass: None,
            note,
        });
    }
    // Issue #33: watching must not slow the relay down by more than 5 %.
    report.add(Row {
        scenario: "console drain, pages refreshed back to back".into(),
        metric: "events/s".into(),
        measured: watched,
        target: Some(format!(">= {WATCHED_MIN_RATIO}x nobody looking")),
        baseline: Some(quiet),
        ratio: Some(watched / quiet),
        pass: Some(watched / quiet >= WATCHED_MIN_RATIO),
        note: format!("{refreshes} page loads during the drain"),
    });
    pool.close().await;
    fixtures::drop_database(env, &db).await
}

async fn drain_watched(
    env: &BenchEnv,
    pool: &MySqlPool,
    base: &str,
    first_backlog: u64,
    backlog: usize,
) -> anyhow::Result<(f64, u64)> {
    let stop = CancellationToken::new();
    let refresher = {
        let (base, stop) = (base.to_owned(), stop.clone());
        tokio::spawn(async move {
            let pages = [
                "/console",
                "/console/stuck",
                "/console/dead-letters",
                "/console/rooms?room_id=bench-room-7",
            ];
            let mut loads = 0_u64;
            while !stop.is_cancelled() {
                for page in pages {
                    if get(&base, page).await.is_ok() {
                        loads += 1;
                    }
                }
            }
            loads
        })
    };
    let rate = drain(env, pool, first_backlog, backlog, true).await?;
    stop.cancel();
    Ok((rate, refresher.await?))
}

/// Drains the backlog with one relay; events/s.
async fn drain(
    env: &BenchEnv,
    pool: &MySqlPool,
    first_backlog: u64,
    backlog: usize,
    watched: bool,
) -> anyhow::Result<f64> {
    let namespace = format!("bench{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mq = mq_config(env, &namespace);
    create_topic(&env.bootstrap, &mq.topic(names::TOPIC_ROOM_OUTBOX)).await?;
    let mut registry = prometheus_client::registry::Registry::default();
    let relay = relay_engine::build_relay(
        pool.clone(),
        &worker(
            if watched {
                "bench-console-watched"
            } else {
                "bench-console-quiet"
            },
            false,
            ConfigDuration::from_millis(20),
            &env.redis,
        ),
        &mq,
        &DirectConfig::default(),
        &mut registry,
    )?;
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let running = tokio::spawn(relay.run(shutdown.clone()));
    loop {
        let oldest: Option<u64> = sqlx::query_scalar(OLDEST_BACKLOG_SQL)
            .bind(first_backlog)
            .fetch_one(pool)
            .await?;
        if oldest.is_none() {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(900),
            "drain did not finish"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    shutdown.cancel();
    running.await??;
    Ok(backlog as f64 / elapsed)
}

async fn serve_console(pool: &MySqlPool) -> anyhow::Result<String> {
    let router = console::router(ConsoleConfig {
        pool: pool.clone(),
        admin_token: Secret::new(TOKEN),
        read_token: Secret::default(),
        history: History::default(),
        broker_lag: false,
        groups: vec![
            names::GROUP_IM_BRIDGE.to_owned(),
            names::GROUP_ACTIVITY.to_owned(),
            names::GROUP_NOTICE.to_owned(),
        ],
        trace_url: None,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(addr.to_string())
}

/// One GET with the bearer token over a fresh connection; the status code.
async fn get(addr: &str, path: &str) -> anyhow::Result<u16> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let head = String::from_utf8_lossy(&response[..response.len().min(16)]).into_owned();
    head.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no HTTP status in {head:?}"))
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

/// The median of [`REPEATS`] loads of `page` (each must answer 200).
async fn page_row(base: &str, page: &str, rows: usize) -> anyhow::Result<Row> {
    let mut times = Vec::with_capacity(REPEATS);
    for _ in 0..REPEATS {
        let started = Instant::now();
        let status = get(base, page).await?;
        times.push(started.elapsed().as_secs_f64() * 1_000.0);
        anyhow::ensure!(status == 200, "{page} answered {status}");
    }
    times.sort_by(f64::total_cmp);
    Ok(Row {
        scenario: format!("console page {page}"),
        metric: "ms (median)".into(),
        measured: times[times.len() / 2],
        target: None,
        baseline: None,
        ratio: None,
        pass: None,
        note: format!(
            "max {:.1} ms of {REPEATS}; {} rows in room_outbox",
            times[times.len() - 1],
            rows
        ),
    })
}
