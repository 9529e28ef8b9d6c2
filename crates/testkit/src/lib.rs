//! Test helpers for the real infrastructure the tests run against: a fresh
//! MariaDB database per test (migrated), the Redis server, and the
//! Kafka-protocol broker that `cargo xtask test` starts for the run; and an
//! OTLP/HTTP trace receiver (`otlp`) for tests of what the services export.
//!
//! Environment (set by `cargo xtask test`; the defaults match a developer machine):
//! `HYAPP_TEST_MYSQL_URL` (default `mysql://root@127.0.0.1:3306`),
//! `HYAPP_TEST_REDIS_URL` (default `redis://127.0.0.1:6379`),
//! `HYAPP_TEST_KAFKA_BOOTSTRAP` (no default: the broker only exists inside a test run).

pub mod assertions;
pub mod binary;
pub mod browser;
pub mod metrics;
pub mod otlp;
pub mod pki;
pub mod processes;
pub mod secrets;
pub mod secure_broker;
pub mod sentinel;
pub mod source_tree;
pub mod stall;
pub mod tls_servers;

use rdkafka::{
    ClientConfig,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
};
use sqlx::{Connection, MySqlConnection, MySqlPool};
use std::time::Duration;

/// Prefix of every per-test database (`hyapp_t_<unix secs>_<random>`);
/// `cargo xtask test` drops leftovers older than a few hours.
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

/// The broker binary `cargo xtask test` built (`HYAPP_TEST_TANSU`: the
/// workspace's `local-broker`, Tansu's broker behind the commands the
/// tests use).
///
/// # Panics
/// When the tests were not started through `cargo xtask test`, with a message saying so.
pub fn tansu_binary() -> String {
    std::env::var("HYAPP_TEST_TANSU").unwrap_or_else(|_| {
        panic!("HYAPP_TEST_TANSU is unset: run the tests with `cargo xtask test`, which builds the broker")
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
        let db = Self::empty().await;
        service_kit::db::migrate(&db.pool)
            .await
            .expect("run migrations");
        db
    }

    /// Creates a new database without running the migrations.
    ///
    /// # Panics
    /// When MariaDB is unreachable: the test cannot run.
    pub async fn empty() -> Self {
        // The creation time in the name lets `cargo xtask test` drop only
        // databases old enough not to belong to a concurrent run.
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_secs())
            .unwrap_or(0);
        let name = unique(&format!("{TEST_DB_PREFIX}{secs}_"));
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
        Self { pool, name, url }
    }
}

/// Creates a topic on the test broker.
///
/// # Panics
/// When the broker refuses to create it.
pub async fn create_topic(name: &str, partitions: i32) {
    create_topic_on(&kafka_bootstrap(), name, partitions).await;
}

/// A private broker for tests that stop and restart it (broker outages),
/// started from the broker binary `cargo xtask test` built ([`tansu_binary`]).
#[derive(Debug)]
pub struct PrivateBroker {
    /// `127.0.0.1:PORT`.
    pub bootstrap: String,
    port: u16,
    child: Option<std::process::Child>,
}

impl PrivateBroker {
    /// Starts a memory-backed broker on a free port and waits until it listens.
    ///
    /// # Panics
    /// When Tansu is unavailable or does not start within 30 s.
    pub async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut broker = Self {
            bootstrap: format!("127.0.0.1:{port}"),
            port,
            child: None,
        };
        broker.restart().await;
        broker
    }

    /// Kills the broker (like a crash).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port (memory storage: topics start empty).
    pub async fn restart(&mut self) {
        self.stop();
        let tansu = tansu_binary();
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let child = std::process::Command::new(&tansu)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {tansu}: {error}"));
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(&self.bootstrap)
            .await
            .is_err()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "private broker did not start"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Creates a topic on a specific broker.
///
/// # Panics
/// When the broker refuses.
pub async fn create_topic_on(bootstrap: &str, name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
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
