//! Migrations against a real MariaDB: a database that applied a migration
//! file before a comment-only edit (`service_kit::db::COMMENT_ONLY_EDITS`)
//! still starts, while any other checksum mismatch is still refused; and
//! instances that start together on a fresh database migrate it once.

use service_kit::db::{COMMENT_ONLY_EDITS, MIGRATOR, migrate};

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).expect("hex"))
        .collect()
}

async fn set_checksum(pool: &sqlx::MySqlPool, version: i64, checksum: &[u8]) {
    sqlx::query("UPDATE _sqlx_migrations SET checksum = ? WHERE version = ?")
        .bind(checksum)
        .bind(version)
        .execute(pool)
        .await
        .expect("checksum set");
}

async fn checksum(pool: &sqlx::MySqlPool, version: i64) -> Vec<u8> {
    sqlx::query_scalar("SELECT checksum FROM _sqlx_migrations WHERE version = ?")
        .bind(version)
        .fetch_one(pool)
        .await
        .expect("migration recorded")
}

#[tokio::test]
async fn a_database_migrated_before_a_comment_only_edit_still_starts() {
    let db = testkit::TestDb::new().await;
    for (version, applied) in COMMENT_ONLY_EDITS {
        let current = MIGRATOR
            .iter()
            .find(|migration| migration.version == *version)
            .expect("the edited migration is embedded")
            .checksum
            .to_vec();
        assert_ne!(hex(applied), current, "{version}: the file did change");
        set_checksum(&db.pool, *version, &hex(applied)).await;
        // sqlx alone refuses the database that applied the older text…
        assert!(
            MIGRATOR.run(&db.pool).await.is_err(),
            "{version}: sqlx accepts a changed file"
        );
        // …the platform's migrate moves it to the current checksum and runs.
        migrate(&db.pool).await.expect("comment-only edit accepted");
        assert_eq!(checksum(&db.pool, *version).await, current);
    }
}

#[tokio::test]
async fn any_other_checksum_mismatch_is_still_refused() {
    let db = testkit::TestDb::new().await;
    let (version, _) = COMMENT_ONLY_EDITS[0];
    set_checksum(&db.pool, version, &[0u8; 48]).await;
    assert!(
        migrate(&db.pool).await.is_err(),
        "a migration whose statements may differ must not start"
    );
    assert_eq!(checksum(&db.pool, version).await, vec![0u8; 48]);
}

#[tokio::test]
async fn instances_starting_together_migrate_a_fresh_database_once() {
    let db = testkit::TestDb::empty().await;
    let mut starts = Vec::new();
    for _ in 0..4 {
        // Each with its own pool, as separate processes would be.
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(2)
            .connect(&db.url)
            .await
            .expect("connect");
        starts.push(tokio::spawn(async move { migrate(&pool).await }));
    }
    for start in starts {
        start.await.expect("task").expect("every instance starts");
    }
    let applied: Vec<(i64, bool)> =
        sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&db.pool)
            .await
            .expect("recorded migrations");
    let embedded: Vec<(i64, bool)> = MIGRATOR
        .iter()
        .filter(|migration| !migration.migration_type.is_down_migration())
        .map(|migration| (migration.version, true))
        .collect();
    assert_eq!(applied, embedded);
}
