//! A production-shaped million-row `room_outbox` for the EXPLAIN tests
//! (the relay's own statements in relay-engine's `tests/explain.rs`, the
//! operator queries in outbox-relay's `tests/operator_explain.rs`, which
//! includes this file): mostly delivered history, a backlog, retrying heads
//! and dead letters, a populated audit trail and consumer dedup rows, with
//! fresh statistics.

use sqlx::MySqlPool;

/// Rows in the filled outbox.
pub const ROWS: u64 = 1_000_000;
/// Rows per INSERT … SELECT (ten statements: no giant transaction).
const CHUNK: u64 = 100_000;

/// Fills `room_outbox` with [`ROWS`] rows server-side: a 100,000-row number
/// table from a cross join of digits, then ten INSERT … SELECTs over it.
/// 1 row in 100 is retryable, 1 in 100 failed, 8 in 100 pending, the rest
/// delivered; 5,000 rooms; ids in commit-time order.
pub async fn fill(pool: &MySqlPool) {
    let mut conn = pool.acquire().await.unwrap();
    sqlx::raw_sql("CREATE TEMPORARY TABLE digits (d INT NOT NULL PRIMARY KEY)")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::raw_sql("INSERT INTO digits VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::raw_sql("CREATE TEMPORARY TABLE numbers (n INT NOT NULL PRIMARY KEY)")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::raw_sql(
        "INSERT INTO numbers SELECT a.d + 10 * b.d + 100 * c.d + 1000 * d.d + 10000 * e.d \
         FROM digits a, digits b, digits c, digits d, digits e",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    for chunk in 0..ROWS / CHUNK {
        sqlx::query(
            "INSERT INTO room_outbox (event_id, app_code, room_id, shard, lane, room_event_seq, \
             event_type, topic, payload, status, retry_count, next_retry_at_ms, created_at_ms, \
             last_error, delivered_at_ms) \
             SELECT LPAD(? + n, 36, '0'), 'hyapp', CONCAT('room-', (? + n) MOD 5000), (? + n) MOD 64, \
             IF((? + n) MOD 997 = 0, 1, 0), ? + n, 'RoomUserJoined', 'hyapp_room_outbox', 'x', \
             CASE WHEN (? + n) MOD 100 = 1 THEN 'retryable' WHEN (? + n) MOD 100 = 2 THEN 'failed' \
                  WHEN (? + n) MOD 100 >= 92 THEN 'pending' ELSE 'delivered' END, \
             IF((? + n) MOD 100 IN (1, 2), 3, 0), 1700000000000 + ? + n, 1700000000000 + ? + n, \
             IF((? + n) MOD 100 IN (1, 2), 'broker down', ''), 0 \
             FROM numbers",
        )
        .bind(chunk * CHUNK)
        .bind(chunk * CHUNK)
        .bind(chunk * CHUNK)
        .bind(chunk * CHUNK)
        .bind(chunk * CHUNK)
        .bind(chunk * CHUNK)
        .bind(chunk * CHUNK)
        .bind(chunk * CHUNK)
        .bind(chunk * CHUNK)
        .bind(chunk * CHUNK)
        .bind(chunk * CHUNK)
        .bind(chunk * CHUNK)
        .execute(&mut *conn)
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO relay_operator_audit (at_ms, operator, action, room_id, event_id, row_count) \
         SELECT 1700000000000 + n, 'oncall', ELT(1 + n MOD 4, 'replay', 'retry_now', 'skip', 'purge'), \
         CONCAT('room-', n MOD 5000), '', 1 FROM numbers WHERE n < 50000",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    // What the consumers applied: a dedup row per event for one group.
    sqlx::query(
        "INSERT INTO consumer_dedup (consumer_group, event_id, processed_at_ms) \
         SELECT 'hyapp-room-im-bridge', LPAD(n, 36, '0'), 1700000000000 + n FROM numbers",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    // Fresh statistics, as a production table has them.
    sqlx::raw_sql("ANALYZE TABLE room_outbox, relay_operator_audit, consumer_dedup")
        .execute(&mut *conn)
        .await
        .unwrap();
}
