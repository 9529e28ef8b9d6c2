//! A million-row outbox for the console's measurements, and how many rows a
//! statement reads. The fill follows `operator_explain.rs`'s (server-side
//! INSERT … SELECTs over a number table; 1 row in 100 retryable, 1 in 100
//! failed, 8 in 100 pending, the rest delivered; 5,000 rooms; ids in
//! commit-time order), with every row carrying a `traceparent`, and a
//! `consumer_dedup` row of one group for the first 100,000 events, so the
//! console's pages have consumption to show.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use sqlx::{MySqlPool, Row, mysql::MySqlConnection};

/// Rows in the filled outbox.
pub const ROWS: u64 = 1_000_000;
/// Rows per INSERT … SELECT (ten statements: no giant transaction).
const CHUNK: u64 = 100_000;
/// Commit time of row n: this plus n ms.
pub const EPOCH_MS: i64 = 1_700_000_000_000;

/// Fills `room_outbox`, `relay_operator_audit` and `consumer_dedup`.
pub async fn fill(pool: &MySqlPool) {
    let mut conn = pool.acquire().await.unwrap();
    sqlx::raw_sql(
        "CREATE TEMPORARY TABLE digits (d INT NOT NULL PRIMARY KEY); \
         INSERT INTO digits VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9); \
         CREATE TEMPORARY TABLE numbers (n INT NOT NULL PRIMARY KEY); \
         INSERT INTO numbers SELECT a.d + 10 * b.d + 100 * c.d + 1000 * d.d + 10000 * e.d \
         FROM digits a, digits b, digits c, digits d, digits e",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    for chunk in 0..ROWS / CHUNK {
        let base = i64::try_from(chunk * CHUNK).unwrap();
        let mut query = sqlx::query(
            "INSERT INTO room_outbox (event_id, app_code, room_id, shard, lane, room_event_seq, \
             event_type, topic, payload, traceparent, status, retry_count, next_retry_at_ms, \
             created_at_ms, last_error, delivered_at_ms) \
             SELECT LPAD(? + n, 36, '0'), 'hyapp', CONCAT('room-', (? + n) MOD 5000), (? + n) MOD 64, \
             IF((? + n) MOD 997 = 0, 1, 0), ? + n, ELT(1 + (? + n) MOD 3, 'RoomUserJoined', \
             'RoomGiftSent', 'RoomHeatChanged'), 'hyapp_room_outbox', 'x', \
             CONCAT('00-', LPAD(HEX(? + n), 32, '0'), '-00000000000000a1-01'), \
             CASE WHEN (? + n) MOD 100 = 1 THEN 'retryable' WHEN (? + n) MOD 100 = 2 THEN 'failed' \
                  WHEN (? + n) MOD 100 >= 92 THEN 'pending' ELSE 'delivered' END, \
             IF((? + n) MOD 100 IN (1, 2), 3, 0), ? + ? + n, ? + ? + n, \
             IF((? + n) MOD 100 IN (1, 2), 'broker down', ''), \
             IF((? + n) MOD 100 < 92 AND (? + n) MOD 100 NOT IN (1, 2), ? + ? + n + 40, 0) \
             FROM numbers",
        );
        for _ in 0..7 {
            query = query.bind(base);
        }
        for _ in 0..4 {
            query = query.bind(base);
        }
        query = query.bind(EPOCH_MS).bind(base).bind(EPOCH_MS).bind(base);
        query = query
            .bind(base)
            .bind(base)
            .bind(base)
            .bind(EPOCH_MS)
            .bind(base);
        query.execute(&mut *conn).await.unwrap();
    }
    sqlx::query(
        "INSERT INTO relay_operator_audit (at_ms, operator, action, room_id, event_id, row_count) \
         SELECT ? + n, 'oncall', ELT(1 + n MOD 4, 'replay', 'retry_now', 'skip', 'purge'), \
         CONCAT('room-', n MOD 5000), '', 1 FROM numbers WHERE n < 50000",
    )
    .bind(EPOCH_MS)
    .execute(&mut *conn)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO consumer_dedup (consumer_group, event_id, processed_at_ms) \
         SELECT 'hyapp-activity-room-outbox', LPAD(n, 36, '0'), ? + n + 90 FROM numbers",
    )
    .bind(EPOCH_MS)
    .execute(&mut *conn)
    .await
    .unwrap();
    // Fresh statistics, as a production table has them.
    sqlx::raw_sql("ANALYZE TABLE room_outbox, relay_operator_audit, consumer_dedup")
        .execute(&mut *conn)
        .await
        .unwrap();
}

/// Rows the server read for `run` on `conn` (every `Handler_read_*` of the
/// session, temporary tables included): what a statement costs, whatever
/// its plan says.
pub async fn rows_read<F>(conn: &mut MySqlConnection, run: F) -> u64
where
    F: AsyncFnOnce(&mut MySqlConnection),
{
    sqlx::raw_sql("FLUSH STATUS")
        .execute(&mut *conn)
        .await
        .unwrap();
    run(&mut *conn).await;
    let rows = sqlx::raw_sql("SHOW SESSION STATUS LIKE 'Handler_read%'")
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    rows.iter()
        .map(|row| {
            let value: String = row.try_get(1).unwrap();
            value.parse::<u64>().unwrap()
        })
        .sum()
}

/// The median of `times` (ms), and the maximum.
pub fn median_and_max(mut times: Vec<f64>) -> (f64, f64) {
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], times[times.len() - 1])
}
