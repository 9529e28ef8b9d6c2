//! The console on a million-row outbox (`million::fill`): each page's time
//! (median of repeated loads over loopback, printed, never asserted as a
//! threshold) and each of the console's own statements' cost in rows read
//! (asserted: a ceiling that does not grow with the table). The overview's
//! counts are the case in point: the exact counts `ops::status` reads walk
//! the whole backlog (asserted to read more than 100,000 rows here, so the
//! measure can fail), the console's capped ones read a fixed amount — and
//! run as one-shot statements, since MariaDB re-executes a cached prepared
//! statement of their shape up to ~100× slower (`console::counts`; both
//! times printed, the one-shot use asserted through the server's own count
//! of statements prepared).

mod common;
mod million;

use common::console::*;
use million::{fill, median_and_max, rows_read};
use outbox_relay::console::counts::{COUNT_CAP, FAILING_CAPPED_SQL, OPEN_CAPPED_SQL};
use outbox_relay::ops::queries::STATUS_COUNTS_SQL;
use sqlx::mysql::MySqlPoolOptions;
use std::time::Instant;

/// Loads per page measured.
const LOADS: usize = 10;

/// Median and max ms of [`LOADS`] GETs of `path`, each answering 200.
async fn page_time(base: &str, path: &str, cookie: &str) -> (f64, f64, String) {
    let mut times = Vec::with_capacity(LOADS);
    let mut body = String::new();
    for load in 0..LOADS {
        let started = Instant::now();
        let (status, page) = get(base, &distinct(path, load), cookie).await;
        times.push(started.elapsed().as_secs_f64() * 1_000.0);
        assert_eq!(status, 200, "{path}: {page}");
        body = page;
    }
    let (median, max) = median_and_max(times);
    (median, max, body)
}

/// `path` with a query parameter of its own, so that no load is answered
/// from the copy the console keeps of a live page for a second
/// (`console::recent`): each load is timed doing its work.
fn distinct(path: &str, load: usize) -> String {
    let separator = if path.contains('?') { '&' } else { '?' };
    format!("{path}{separator}load={load}")
}

#[tokio::test]
async fn the_overview_reads_a_bounded_number_of_rows_on_a_million() {
    let db = testkit::TestDb::new().await;
    fill(&db.pool).await;
    let mut conn = db.pool.acquire().await.unwrap();

    // Before: the exact counts read every open row's index entry.
    let exact = rows_read(&mut conn, async |conn| {
        sqlx::query(STATUS_COUNTS_SQL)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
    })
    .await;
    assert!(exact > 100_000, "the exact counts read {exact} rows");
    let mut before = Vec::new();
    for _ in 0..LOADS {
        let started = Instant::now();
        outbox_relay::ops::status(&db.pool).await.unwrap();
        before.push(started.elapsed().as_secs_f64() * 1_000.0);
    }
    let (before_median, before_max) = median_and_max(before);

    // After: each capped count reads at most the cap + 1 entries (and the
    // derived table's rows back once).
    let cap = u64::try_from(COUNT_CAP).unwrap() + 1;
    let open = rows_read(&mut conn, async |conn| {
        let counted: i64 = sqlx::query_scalar(OPEN_CAPPED_SQL)
            .bind(COUNT_CAP + 1)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(counted, COUNT_CAP + 1, "100,000 rows are open");
    })
    .await;
    let failed = rows_read(&mut conn, async |conn| {
        let counted: i64 = sqlx::query_scalar(FAILING_CAPPED_SQL)
            .bind("failed")
            .bind(COUNT_CAP + 1)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(counted, 10_000, "1 row in 100 is a dead letter");
    })
    .await;
    println!("rows read: exact counts {exact}, capped open {open}, capped failed {failed}");
    assert!(open <= 2 * cap + 2, "capped open count read {open} rows");
    assert!(
        failed <= 2 * cap + 2,
        "capped failed count read {failed} rows"
    );

    let base = serve_console(&db.pool).await;
    let cookie = login(&base, ADMIN).await;
    let (median, max, page) = page_time(&base, "/console", &cookie).await;
    println!(
        "overview on {} rows: before (ops::status) median {before_median:.1} ms, max \
         {before_max:.1} ms; after (page) median {median:.1} ms, max {max:.1} ms",
        million::ROWS
    );
    // 100,000 open rows: past the cap. Exactly 10,000 dead letters and
    // 10,000 retrying rows: at the cap, so exact.
    assert!(page.contains("more than 10000"), "{page}");
    assert!(page.contains("<td>10000</td>"), "{page}");
}

/// Median ms of [`LOADS`] runs of the overview's three capped counts in
/// turn on `conn`, as `persistent` (re-executed from the statement cache)
/// or one-shot statements. (The same statement re-executed back to back is
/// fast either way; re-executed after another one, as the overview runs
/// them, a cached one is not.)
async fn capped_counts_time(conn: &mut sqlx::MySqlConnection, persistent: bool) -> f64 {
    let mut times = Vec::with_capacity(LOADS);
    for _ in 0..LOADS {
        let started = Instant::now();
        sqlx::query_scalar::<_, i64>(OPEN_CAPPED_SQL)
            .persistent(persistent)
            .bind(COUNT_CAP + 1)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        for status in ["retryable", "failed"] {
            sqlx::query_scalar::<_, i64>(FAILING_CAPPED_SQL)
                .persistent(persistent)
                .bind(status)
                .bind(COUNT_CAP + 1)
                .fetch_one(&mut *conn)
                .await
                .unwrap();
        }
        times.push(started.elapsed().as_secs_f64() * 1_000.0);
    }
    median_and_max(times).0
}

/// Statements the server has prepared for the session of `pool`'s only
/// connection.
async fn prepared(pool: &sqlx::MySqlPool) -> u64 {
    let row = sqlx::raw_sql("SHOW SESSION STATUS LIKE 'Com_stmt_prepare'")
        .fetch_one(pool)
        .await
        .unwrap();
    let value: String = sqlx::Row::try_get(&row, 1).unwrap();
    value.parse().unwrap()
}

#[tokio::test]
async fn every_page_is_timed_and_the_overview_counts_run_one_shot_on_a_million() {
    let db = testkit::TestDb::new().await;
    fill(&db.pool).await;

    // The statement cache's re-execution against a fresh prepare: printed.
    let mut conn = db.pool.acquire().await.unwrap();
    let cached = capped_counts_time(&mut conn, true).await;
    let one_shot = capped_counts_time(&mut conn, false).await;
    println!(
        "the three capped counts, median of {LOADS}: re-executed from the statement cache \
         {cached:.1} ms, one-shot {one_shot:.1} ms"
    );
    drop(conn);

    // One connection, so the session's prepare count is the console's.
    let pool = MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&db.url)
        .await
        .unwrap();
    let base = serve_console(&pool).await;
    let cookie = login(&base, ADMIN).await;
    let (status, _) = get(&base, "/console", &cookie).await;
    assert_eq!(status, 200);
    let before = prepared(&pool).await;
    let (status, _) = get(&base, &distinct("/console", 2), &cookie).await;
    assert_eq!(status, 200);
    let again = prepared(&pool).await - before;
    // The three capped counts are prepared afresh on every load; the
    // cheap lookups come from the cache (so the measure can tell).
    assert!(again >= 3, "{again} statements prepared on a second load");
    assert!(again < 10, "{again} statements prepared on a second load");

    // Every page, timed: the listings first pages, a search by event id,
    // a second page through the first page's Next link.
    let (_, timeline) = get(&base, "/console/rooms?room_id=room-7", &cookie).await;
    let marker = "id=\"next-page\" href=\"";
    let start = timeline.find(marker).expect("a next page") + marker.len();
    let next = timeline[start..start + timeline[start..].find('"').unwrap()].replace("&amp;", "&");
    let event = format!("{:0>36}", 4_201);
    let pages = [
        "/console".to_owned(),
        "/console/stuck".to_owned(),
        "/console/stuck?room_id=room-1".to_owned(),
        format!("/console/stuck?event_id={event}"),
        "/console/dead-letters".to_owned(),
        "/console/dead-letters?event_type=RoomGiftSent&from=2023-11-14%2022:13".to_owned(),
        "/console/audit".to_owned(),
        "/console/audit?action=skip&room_id=room-2".to_owned(),
        "/console/rooms?room_id=room-7".to_owned(),
        next,
        "/console/charts".to_owned(),
    ];
    println!(
        "page times on {} rows (debug build), median/max of {LOADS}:",
        million::ROWS
    );
    for path in &pages {
        let (median, max, _) = page_time(&base, path, &cookie).await;
        println!("  {path}: {median:.1} / {max:.1} ms");
    }
}
