//! Migrations against a real MariaDB: a database that applied a migration
//! file before a comment-only edit (`service_kit::db::COMMENT_ONLY_EDITS`)
//! still starts, while any other checksum mismatch is still refused.

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
