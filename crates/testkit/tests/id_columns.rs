//! Ids compare byte-exactly in MySQL (docs/design.md#identifiers): every id
//! column of every table is `utf8mb4_bin`, so `Room1` and `room1` are two
//! keys, and ids read back through `service_kit::db::IdText` — a plain
//! `String` cannot be decoded from such a column by sqlx 0.8, which these
//! tests pin down so the reason for `IdText` cannot silently go away.

use service_kit::db::IdText;
use sqlx::Row;

/// Character columns that hold ids without ending in `_id`.
const IDS_NOT_NAMED_ID: [&str; 4] = ["owner", "claimed_by", "consumer_group", "app_code"];

/// `(table, column, collation)` of every character column of the test
/// database that holds an id: named `*_id`, or listed above.
async fn id_columns(pool: &sqlx::MySqlPool) -> Vec<(String, String, String)> {
    let rows = sqlx::query(
        "SELECT table_name AS t, column_name AS c, collation_name AS k FROM information_schema.columns \
         WHERE table_schema = DATABASE() AND data_type IN ('char', 'varchar') \
         AND table_name <> '_sqlx_migrations' ORDER BY table_name, column_name",
    )
    .fetch_all(pool)
    .await
    .expect("information_schema");
    rows.iter()
        .map(|row| {
            let text = |name: &str| -> String { row.try_get::<IdText, _>(name).unwrap().into() };
            (text("t"), text("c"), text("k"))
        })
        .filter(|(_, column, _)| {
            column.ends_with("_id") || IDS_NOT_NAMED_ID.contains(&column.as_str())
        })
        .collect()
}

#[tokio::test]
async fn every_id_column_of_every_table_compares_byte_exactly() {
    let db = testkit::TestDb::new().await;
    let columns = id_columns(&db.pool).await;
    // The scan sees the tables of every migration, so it cannot pass empty.
    for expected in [
        ("rooms", "room_id"),
        ("room_command_log", "command_id"),
        ("room_outbox", "event_id"),
        ("relay_shard_leases", "owner"),
        ("consumer_dedup", "consumer_group"),
        ("activity_broadcasts", "receiver_id"),
        ("notice_delivery_events", "recipient_id"),
    ] {
        assert!(
            columns
                .iter()
                .any(|(table, column, _)| (table.as_str(), column.as_str()) == expected),
            "{expected:?} not found among {columns:?}"
        );
    }
    let case_insensitive: Vec<_> = columns
        .iter()
        .filter(|(_, _, collation)| collation != "utf8mb4_bin")
        .collect();
    assert!(
        case_insensitive.is_empty(),
        "id columns not byte-exact (add them to a migration like 20261210000010_ids_byte_exact.sql): {case_insensitive:?}"
    );
}

async fn insert_room(pool: &sqlx::MySqlPool, room_id: &str, owner_id: &str) {
    sqlx::query(
        "INSERT INTO rooms (room_id, app_code, status, owner_id, title, version, event_seq, \
         created_at_ms, updated_at_ms) VALUES (?, 'hyapp', 'open', ?, 't', 1, 1, 0, 0)",
    )
    .bind(room_id)
    .bind(owner_id)
    .execute(pool)
    .await
    .expect("insert room");
}

/// Owners of the rooms whose id equals `room_id`, as MySQL compares it.
async fn owners_of(pool: &sqlx::MySqlPool, room_id: &str) -> Vec<String> {
    sqlx::query_scalar::<_, IdText>(
        "SELECT owner_id FROM rooms WHERE room_id = ? ORDER BY owner_id",
    )
    .bind(room_id)
    .fetch_all(pool)
    .await
    .expect("select rooms")
    .into_iter()
    .map(String::from)
    .collect()
}

#[tokio::test]
async fn two_spellings_are_two_rows_and_ids_read_back_as_text() {
    let db = testkit::TestDb::new().await;
    insert_room(&db.pool, "Room1", "Alice").await;
    // Under utf8mb4_general_ci this was a duplicate primary key.
    insert_room(&db.pool, "room1", "alice").await;
    assert_eq!(owners_of(&db.pool, "Room1").await, ["Alice"]);
    assert_eq!(owners_of(&db.pool, "room1").await, ["alice"]);
    assert!(owners_of(&db.pool, "ROOM1").await.is_empty());

    let row = sqlx::query("SELECT room_id, status FROM rooms WHERE room_id = 'Room1'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let room_id: String = row.try_get::<IdText, _>("room_id").unwrap().into();
    assert_eq!(room_id, "Room1");
    // Columns that are not ids keep their collation and decode as String.
    assert_eq!(row.try_get::<String, _>("status").unwrap(), "open");
    // Why IdText exists: sqlx refuses String for a `_bin` column. If this
    // starts to pass, sqlx learned to decode them and IdText can go.
    let refused = row.try_get::<String, _>("room_id").unwrap_err().to_string();
    assert!(refused.contains("mismatched types"), "{refused}");
}

#[tokio::test]
async fn id_text_still_refuses_bytes_that_are_not_utf8() {
    let db = testkit::TestDb::new().await;
    let error = sqlx::query_scalar::<_, IdText>("SELECT CAST(X'FF' AS BINARY)")
        .fetch_one(&db.pool)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("utf-8"), "{error}");
}

/// The migration applies over rows written under the old collation, and the
/// rows come through unchanged.
#[tokio::test]
async fn the_migration_keeps_rows_written_case_insensitively() {
    let db = testkit::TestDb::new().await;
    sqlx::raw_sql(
        "ALTER TABLE rooms MODIFY room_id VARCHAR(64) CHARACTER SET utf8mb4 \
         COLLATE utf8mb4_general_ci NOT NULL; \
         DELETE FROM _sqlx_migrations WHERE version = 20261210000010",
    )
    .execute(&db.pool)
    .await
    .expect("back to the old collation");
    insert_room(&db.pool, "Room1", "Alice").await;
    // Case-insensitive again: the old behaviour this migration ends.
    assert_eq!(owners_of(&db.pool, "room1").await, ["Alice"]);

    service_kit::db::migrate(&db.pool)
        .await
        .expect("migration re-applies");
    assert_eq!(owners_of(&db.pool, "Room1").await, ["Alice"]);
    assert!(owners_of(&db.pool, "room1").await.is_empty());
}
