//! The console on a million-row outbox (`million::fill`): each page's time
//! (median of repeated loads over loopback, printed, never asserted as a
//! threshold) and each of the console's own statements' cost in rows read
//! (asserted: a ceiling that does not grow with the table). The overview's
//! counts are the case in point: the exact counts `ops::status` reads walk
//! the whole backlog (asserted to read more than 100,000 rows here, so the
//! measure can fail), the console's capped ones read a fixed amount.

mod common;
mod million;

use common::console::*;
use million::{fill, median_and_max, rows_read};
use outbox_relay::console::counts::{COUNT_CAP, FAILING_CAPPED_SQL, OPEN_CAPPED_SQL};
use outbox_relay::ops::queries::STATUS_COUNTS_SQL;
use std::time::Instant;

/// Loads per page measured.
const LOADS: usize = 10;

/// Median and max ms of [`LOADS`] GETs of `path`, each answering 200.
async fn page_time(base: &str, path: &str, cookie: &str) -> (f64, f64, String) {
    let mut times = Vec::with_capacity(LOADS);
    let mut body = String::new();
    for _ in 0..LOADS {
        let started = Instant::now();
        let (status, page) = get(base, path, cookie).await;
        times.push(started.elapsed().as_secs_f64() * 1_000.0);
        assert_eq!(status, 200, "{path}: {page}");
        body = page;
    }
    let (median, max) = median_and_max(times);
    (median, max, body)
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
