//! The fleet charts (`/console/charts`): exact numbers from the shared
//! tables when the hour is small, a bounded estimate on a million rows
//! whose statements all read by primary key (EXPLAIN and the server's own
//! count of rows read), and the page behind the session with its SVG.

mod common;
mod million;

use common::console::{ADMIN, client, groups, login, serve_console};
use outbox_relay::console::charts::sample::{self, MAX_ID_SQL, ROW_AT_OR_AFTER_SQL};
use outbox_relay::console::consumption;
use outbox_schema::names;
use sqlx::{MySqlPool, Row, mysql::MySqlPoolOptions};
use std::time::Instant;

const MINUTE: i64 = 60_000;

async fn outbox_row(
    pool: &MySqlPool,
    event_id: &str,
    (lane, event_type): (u8, &str),
    created_at_ms: i64,
    delivered_at_ms: i64,
) {
    let status = if delivered_at_ms > 0 {
        "delivered"
    } else {
        "pending"
    };
    sqlx::query(
        "INSERT INTO room_outbox (event_id, app_code, room_id, shard, lane, room_event_seq, \
         event_type, topic, payload, status, next_retry_at_ms, created_at_ms, delivered_at_ms) \
         VALUES (?, 'hyapp', 'room-1', 0, ?, 1, ?, 'hyapp_room_outbox', 'x', ?, ?, ?, ?)",
    )
    .bind(event_id)
    .bind(lane)
    .bind(event_type)
    .bind(status)
    .bind(created_at_ms)
    .bind(created_at_ms)
    .bind(delivered_at_ms)
    .execute(pool)
    .await
    .unwrap();
}

async fn applied(pool: &MySqlPool, group: &str, event_id: &str, at_ms: i64) {
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

#[tokio::test]
async fn a_small_hour_is_charted_exactly_from_the_shared_tables() {
    let db = testkit::TestDb::new().await;
    let pool = &db.pool;
    let now = service_kit::time::now_ms();
    let chain = |event_type| (0_u8, event_type);
    // Committed two hours ago: outside the window and its slack.
    outbox_row(
        pool,
        "e-old",
        chain("RoomGiftSent"),
        now - 120 * MINUTE,
        now - 120 * MINUTE + 10,
    )
    .await;
    // A wake-up committed 50 minutes ago, published when due: it counts as
    // a publish, not as lag.
    outbox_row(
        pool,
        "e-wake",
        (1, "TreasureOpenWakeup"),
        now - 50 * MINUTE,
        now - 5 * MINUTE,
    )
    .await;
    let gift_at = now - 30 * MINUTE;
    outbox_row(
        pool,
        "e-gift",
        chain("RoomGiftSent"),
        gift_at,
        gift_at + 200,
    )
    .await;
    outbox_row(
        pool,
        "e-kick",
        chain("RoomUserKicked"),
        gift_at + 1_000,
        gift_at + 5_000,
    )
    .await;
    outbox_row(pool, "e-open", chain("RoomGiftSent"), now - 10 * MINUTE, 0).await;
    applied(pool, names::GROUP_ACTIVITY, "e-gift", gift_at + 500).await;
    applied(pool, names::GROUP_IM_BRIDGE, "e-gift", gift_at + 300).await;
    applied(pool, names::GROUP_NOTICE, "e-kick", gift_at + 1_000 + 4_500).await;

    let columns = consumption::columns(&groups());
    let window = sample::window(pool, &columns, now).await.unwrap();
    assert_eq!(
        (window.step, window.sampled),
        (1, 4),
        "exact, old row left out"
    );
    let per_s = |count: f64| count / 60.0;
    let minute_of = |at: i64| usize::try_from((at - window.start_ms) / MINUTE).unwrap();
    // e-gift and e-kick were published 4.8 s apart: one minute or two.
    let (first, last) = (minute_of(gift_at + 200), minute_of(gift_at + 5_000));
    let both: f64 = window.publishes_per_s[first..=last].iter().sum();
    assert_eq!(both, per_s(2.0));
    assert_eq!(
        window.publishes_per_s[minute_of(now - 5 * MINUTE)],
        per_s(1.0)
    );
    assert_eq!(window.publishes_per_s.iter().sum::<f64>(), per_s(3.0));
    // e-gift (200 ms) and e-kick (4 s), committed in the same minute.
    let lag = window.publish_lag_ms[minute_of(gift_at)];
    assert_eq!(lag, Some((2_100.0, 4_000.0)));
    assert_eq!(
        window.publish_lag_ms.iter().flatten().count(),
        1,
        "wake-up excluded"
    );

    let group = |name: &str| window.groups.iter().find(|g| g.name == name).unwrap();
    let activity = group(names::GROUP_ACTIVITY);
    assert_eq!(activity.lag_ms[minute_of(gift_at)], Some((500.0, 500.0)));
    assert_eq!(activity.not_applied, 1, "e-open is a gift not applied yet");
    let notice = group(names::GROUP_NOTICE);
    assert_eq!(notice.lag_ms[minute_of(gift_at)], Some((4_500.0, 4_500.0)));
    assert_eq!(notice.not_applied, 0, "gifts are not notice's");
    let bridge = group(names::GROUP_IM_BRIDGE);
    assert_eq!(bridge.lag_ms[minute_of(gift_at)], Some((300.0, 300.0)));
    assert_eq!(bridge.not_applied, 2);

    // The page: behind the session, three charts with labelled axes.
    let base = serve_console(pool).await;
    let anonymous = client()
        .get(format!("{base}/console/charts"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 303);
    assert_eq!(anonymous.headers()["location"], "/console/login");
    let cookie = login(&base, ADMIN).await;
    let response = client()
        .get(format!("{base}/console/charts"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let csp = response.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("default-src 'none'") && !csp.contains("script-src"),
        "{csp}"
    );
    let page = response.text().await.unwrap();
    assert_eq!(page.matches("<svg ").count(), 3, "{page}");
    assert!(!page.contains("<script"), "no script");
    assert!(page.contains("exact: all 4 rows"), "{page}");
    assert!(page.contains("Publishes per second, whole fleet"));
    assert!(
        page.contains(">now</text>") && page.contains("−60 min"),
        "x axis"
    );
    assert!(
        page.contains("4.0 s") || page.contains("5.0 s"),
        "lag axis in seconds"
    );
    assert!(page.contains(names::GROUP_NOTICE), "one line per group");
    assert!(
        page.contains(&format!("<td>{}</td><td>2</td>", names::GROUP_IM_BRIDGE)),
        "not applied yet per group: {page}"
    );
}

type Explain<'q> = sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>;

/// The plan of an EXPLAIN statement: each row's (type, key, Extra).
async fn plan(pool: &MySqlPool, explain: Explain<'_>) -> Vec<(String, String, String)> {
    let rows = explain.fetch_all(pool).await.unwrap();
    rows.iter()
        .map(|row| {
            let text = |name: &str| {
                row.try_get::<Option<String>, _>(name)
                    .ok()
                    .flatten()
                    .unwrap_or_default()
            };
            (text("type"), text("key"), text("Extra"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_million_rows_the_charts_read_a_bounded_sample_by_primary_key() {
    let db = testkit::TestDb::new().await;
    million::fill(&db.pool).await;
    let pool = &db.pool;

    // Every statement's plan: the primary key, never a scan.
    let mut max = sqlx::QueryBuilder::new("EXPLAIN ");
    max.push(MAX_ID_SQL);
    let max_plan = plan(pool, max.build()).await;
    assert!(max_plan[0].2.contains("optimized away"), "{max_plan:?}");
    let ids: Vec<u64> = (1..=1_000).map(|n| n * 997).collect();
    let event_ids: Vec<String> = (0..1_000).map(|n| format!("{n:0>36}")).collect();
    let event_refs: Vec<&str> = event_ids.iter().map(String::as_str).collect();
    let mut step = sqlx::QueryBuilder::new("EXPLAIN ");
    step.push(ROW_AT_OR_AFTER_SQL);
    let mut sample = sample::sample_query("EXPLAIN ", &ids);
    let mut applied = sample::applied_query("EXPLAIN ", names::GROUP_ACTIVITY, &event_refs);
    for (what, query) in [
        ("row at or after", step.build().bind(500_000_u64)),
        ("sample", sample.build()),
        ("applied", applied.build()),
    ] {
        let steps = plan(pool, query).await;
        for (kind, key, _) in &steps {
            assert_eq!(key, "PRIMARY", "{what}: {steps:?}");
            assert!(kind == "range" || kind == "const", "{what}: {steps:?}");
        }
    }

    // The whole page's reads, counted by the server on one connection.
    let one = MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&db.url)
        .await
        .unwrap();
    let columns = consumption::columns(&groups());
    let now = million::EPOCH_MS + 1_000_000 + 2 * MINUTE;
    sqlx::raw_sql("FLUSH STATUS").execute(&one).await.unwrap();
    let started = Instant::now();
    let window = sample::window(&one, &columns, now).await.unwrap();
    let elapsed = started.elapsed();
    let status = sqlx::raw_sql("SHOW SESSION STATUS LIKE 'Handler_read%'")
        .fetch_all(&one)
        .await
        .unwrap();
    let read: u64 = status
        .iter()
        .map(|row| row.get::<String, _>(1).parse::<u64>().unwrap())
        .sum();
    println!(
        "charts over {} rows: {} sampled (step {}), {read} rows read, {elapsed:?}",
        million::ROWS,
        window.sampled,
        window.step
    );
    assert!(
        window.step > 1 && window.sampled <= 6_001,
        "{}",
        window.sampled
    );
    assert!(
        read < 40_000,
        "{read} rows read for the charts of a million-row outbox"
    );

    // The estimate: a row per ms, 90 in 100 published 40 ms after commit,
    // so 900 publishes a second in every minute wholly inside the fill.
    let fill_start = million::EPOCH_MS + 40;
    let fill_end = million::EPOCH_MS + 1_000_000;
    for (index, value) in window.publishes_per_s.iter().enumerate() {
        let minute_start = window.start_ms + i64::try_from(index).unwrap() * MINUTE;
        if minute_start >= fill_start && minute_start + MINUTE <= fill_end {
            assert!((value - 900.0).abs() < 45.0, "minute {index}: {value}/s");
        }
    }
    // activity applied the first 100,000 events' gifts 90 ms after commit.
    let activity = window
        .groups
        .iter()
        .find(|group| group.name == names::GROUP_ACTIVITY)
        .unwrap();
    let first_minute = usize::try_from((million::EPOCH_MS - window.start_ms) / MINUTE).unwrap();
    assert_eq!(activity.lag_ms[first_minute + 1], Some((90.0, 90.0)));
    let lag = window.publish_lag_ms[first_minute + 1];
    assert_eq!(lag, Some((40.0, 40.0)));
}
