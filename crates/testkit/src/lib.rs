//! Test helpers for the real infrastructure the tests run against: a fresh
//! MariaDB database per test (migrated), the Redis server, and the
//! Kafka-protocol broker that `cargo xtask test` starts for the run.
//!
//! Environment (set by `cargo xtask test`; the defaults match a developer machine):
//! `HYAPP_TEST_MYSQL_URL` (default `mysql://root@127.0.0.1:3306`),
//! `HYAPP_TEST_REDIS_URL` (default `redis://127.0.0.1:6379`),
//! `HYAPP_TEST_KAFKA_BOOTSTRAP` (no default: the broker only exists inside a test run).

use rdkafka::{
    ClientConfig,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
};
use sqlx::{Connection, MySqlConnection, MySqlPool};
use std::time::Duration;

/// Prefix of every per-test database; `cargo xtask test` drops leftovers.
pub const TEST_DB_PREFIX: &str = "hyapp_t_";

/// Server URL (no database) of the MariaDB the tests use.
pub fn mysql_server_url() -> String {
    std::env::var("HYAPP_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into())
}

/// URL of the Redis the tests use.
pub fn redis_url() -> String {
    std::env::var("HYAPP_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// Bootstrap servers of the broker started for this test run.
///
/// # Panics
/// When the tests were not started through `cargo xtask test`, with a message saying so.
pub fn kafka_bootstrap() -> String {
    std::env::var("HYAPP_TEST_KAFKA_BOOTSTRAP").unwrap_or_else(|_| {
        panic!("HYAPP_TEST_KAFKA_BOOTSTRAP is unset: run the tests with `cargo xtask test`, which starts the broker")
    })
}

/// A short unique suffix for databases, topics, groups and ids.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// A freshly created and migrated database, private to one test.
#[derive(Debug)]
pub struct TestDb {
    /// Pool connected to the test database.
    pub pool: MySqlPool,
    /// Database name.
    pub name: String,
    /// Full URL of the test database, for services started by the test.
    pub url: String,
}

impl TestDb {
    /// Creates and migrates a new database.
    ///
    /// # Panics
    /// When MariaDB is unreachable or the migrations fail: the test cannot run.
    pub async fn new() -> Self {
        let name = unique(TEST_DB_PREFIX);
        let server = mysql_server_url();
        let mut admin = MySqlConnection::connect(&server)
            .await
            .unwrap_or_else(|error| panic!("cannot reach MariaDB at {server}: {error}"));
        sqlx::query(&format!("CREATE DATABASE `{name}`"))
            .execute(&mut admin)
            .await
            .expect("create test database");
        let url = format!("{server}/{name}");
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(16)
            .connect(&url)
            .await
            .expect("connect test database");
        service_kit::db::MIGRATOR
            .run(&pool)
            .await
            .expect("run migrations");
        Self { pool, name, url }
    }
}

/// Creates a topic on the test broker and waits until it is usable.
///
/// # Panics
/// When the broker refuses to create it.
pub async fn create_topic(name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .expect("admin client");
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .create_topics([&topic], &options)
        .await
        .expect("create_topics call");
    for result in results {
        if let Err((topic, code)) = result {
            assert!(
                code == rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists,
                "create topic {topic}: {code}"
            );
        }
    }
}
