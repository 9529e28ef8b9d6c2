//! `room-service migrate`, as the Kubernetes migration Job runs it
//! (deploy/k8s/migrate-job.yaml): on a fresh, empty database it applies every
//! embedded migration and exits 0, serving nothing; run again it is a no-op.

const EXE: &str = env!("CARGO_BIN_EXE_room-service");

async fn tables(db: &testkit::TestDb) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
         WHERE table_schema = ? ORDER BY table_name",
    )
    .bind(&db.name)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn migrate_applies_every_migration_to_a_fresh_database_and_exits() {
    let db = testkit::TestDb::empty().await;
    assert!(tables(&db).await.is_empty(), "the database starts empty");
    // run_migrations stays false, as in the shipped Kubernetes config: the
    // subcommand migrates regardless.
    let config = testkit::binary::write_config(&format!(
        "mysql:\n  url: \"{}\"\n  run_migrations: false\nredis:\n  url: \"redis://127.0.0.1:1\"\n",
        db.url
    ));
    for attempt in ["fresh", "again"] {
        let run =
            testkit::binary::run(EXE, &["--config", config.to_str().unwrap(), "migrate"], &[]);
        assert!(
            run.status.success(),
            "{attempt}: migrate exited {:?}; stderr:\n{}",
            run.status,
            run.stderr
        );
    }
    let tables = tables(&db).await;
    for table in [
        "_sqlx_migrations",
        "rooms",
        "room_outbox",
        "room_gift_saga",
        "consumer_dedup",
        "notice_delivery_events",
        "activity_broadcasts",
    ] {
        assert!(
            tables.iter().any(|name| name == table),
            "{table} missing from {tables:?}"
        );
    }
    let applied: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations WHERE success = 1")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(applied, service_kit::db::MIGRATOR.iter().count() as i64);
}
