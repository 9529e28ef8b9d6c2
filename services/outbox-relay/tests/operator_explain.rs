//! Every operator query reads an index: a million-row `room_outbox` (mostly
//! delivered history, a backlog, retrying heads and dead letters, as in
//! production) and a populated audit trail, then `EXPLAIN` of every
//! statement in `ops::OPERATOR_QUERIES` (and the replay UPDATE, built per
//! call, and the timeline's consumed-events lookup) fails on a full table scan (`type = ALL`) or a full index scan
//! (`type = index`). The plans are printed for review.

use outbox_relay::ops::{self, dead_letters, queries};
use sqlx::{Column, MySqlPool, Row, mysql::MySqlRow};

#[path = "../../../crates/relay-engine/tests/explain/fill.rs"]
mod fill;

use fill::{ROWS, fill};

/// `sql` with every `?` replaced by a literal of the type its column has,
/// judged from the text around it: ids and types as strings, the rest as
/// growing numbers (so `id >= ? AND id < ?` is a non-empty range).
fn with_samples(sql: &str) -> String {
    let pieces: Vec<&str> = sql.split('?').collect();
    let mut number = 0;
    let mut filled = vec![pieces[0].to_owned()];
    for (index, after) in pieces.iter().enumerate().skip(1) {
        let before = pieces[..index].concat();
        let before = before.trim_end();
        let literal = if after.starts_with(" = ''") {
            "''".to_owned()
        } else if before.ends_with("room_id =") {
            "'room-7'".to_owned()
        } else if before.ends_with("event_id =") {
            // Row 2 is a dead letter (`n MOD 100 = 2`).
            format!("'{:0>36}'", 2)
        } else if before.ends_with("failing_status =") {
            "'retryable'".to_owned()
        } else if before.ends_with("action =") {
            "'skip'".to_owned()
        } else if before.ends_with("event_type =") || before.ends_with("last_error =") {
            "'RoomUserJoined'".to_owned()
        } else if before.ends_with("lane =") {
            "0".to_owned()
        } else if before.ends_with("LIMIT") {
            "100".to_owned()
        } else {
            number += 1;
            (1_700_000_000_000_i64 + number * 100_000).to_string()
        };
        filled.push(literal);
        filled.push((*after).to_owned());
    }
    filled.concat()
}

fn cell(row: &MySqlRow, index: usize) -> String {
    if let Ok(value) = row.try_get::<Option<String>, _>(index) {
        return value.unwrap_or_else(|| "NULL".into());
    }
    if let Ok(value) = row.try_get::<Option<u64>, _>(index) {
        return value.map_or_else(|| "NULL".into(), |value| value.to_string());
    }
    row.try_get::<Option<i64>, _>(index)
        .ok()
        .flatten()
        .map_or_else(|| "?".into(), |value| value.to_string())
}

/// Prints the plan of `sql` and returns its full scans of tables that grow.
async fn full_scans(pool: &MySqlPool, name: &str, sql: &str) -> Vec<String> {
    let explained = sqlx::raw_sql(&format!("EXPLAIN {sql}"))
        .fetch_all(pool)
        .await
        .unwrap_or_else(|error| panic!("EXPLAIN {name}: {error}\n{sql}"));
    println!("== {name}");
    let mut scans = Vec::new();
    for row in &explained {
        let named = |wanted: &str| {
            let index = row
                .columns()
                .iter()
                .position(|column| column.name() == wanted);
            index.map_or_else(|| "NULL".to_owned(), |index| cell(row, index))
        };
        let columns: Vec<String> = row
            .columns()
            .iter()
            .map(|column| format!("{}={}", column.name(), cell(row, column.ordinal())))
            .collect();
        println!("   {}", columns.join(" "));
        let (table, access) = (named("table"), named("type"));
        if (access == "ALL" || access == "index")
            && !queries::SMALL_TABLES.contains(&table.as_str())
        {
            scans.push(format!("{name}: {access} on {table}"));
        }
    }
    scans
}

#[tokio::test]
async fn every_operator_query_reads_an_index_on_a_million_rows() {
    let db = testkit::TestDb::new().await;
    fill(&db.pool).await;
    let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM room_outbox")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(total, ROWS as i64);

    let replay = format!(
        "{}1{}1000, 2000, 3000)",
        dead_letters::REPLAY_SET_SQL,
        dead_letters::REPLAY_WHERE_SQL
    );
    let mut statements: Vec<(&str, String)> = ops::OPERATOR_QUERIES
        .iter()
        .map(|(name, sql)| (*name, with_samples(sql)))
        .collect();
    statements.push(("replay", replay));
    // The timeline's consumed-events lookup, built per call like the replay.
    let consumed = format!(
        "{}'hyapp-room-im-bridge', 'hyapp-notice-room-outbox'{}'{:0>36}', '{:0>36}')",
        queries::DEDUP_GROUPS_SQL,
        queries::DEDUP_EVENTS_SQL,
        7,
        5007
    );
    statements.push(("timeline_consumed", consumed));

    let mut scans = Vec::new();
    for (name, sql) in &statements {
        scans.extend(full_scans(&db.pool, name, sql).await);
    }
    assert!(
        scans.is_empty(),
        "full scans (see the EXPLAIN rows above): {scans:#?}"
    );
    assert!(statements.len() >= 22, "every operator query was explained");
}

#[tokio::test]
async fn a_full_scan_is_caught() {
    // The check must be able to fail: a predicate no index covers is a
    // table scan, and it is reported.
    let db = testkit::TestDb::new().await;
    let scans = full_scans(
        &db.pool,
        "unindexed",
        &with_samples("SELECT id FROM room_outbox WHERE traceparent = ? LIMIT ?"),
    )
    .await;
    assert_eq!(scans, vec!["unindexed: ALL on room_outbox".to_owned()]);
    assert_eq!(
        with_samples("SELECT 1 FROM t WHERE room_id = ? AND (? = '' OR a = ?) LIMIT ?"),
        "SELECT 1 FROM t WHERE room_id = 'room-7' AND ('' = '' OR a = 1700000100000) LIMIT 100"
    );
}
