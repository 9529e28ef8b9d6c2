//! `mysql.statement_timeout` against a real MariaDB behind a proxy that stops
//! forwarding mid-stream (docs/design.md#client-timeouts): the statement
//! errors instead of hanging, the connection is dropped rather than kept
//! in the pool, a transaction cut off this way leaves nothing committed,
//! and the pool serves statements again once the network is back.

use service_kit::db::MysqlConfig;
use service_kit::db::statement::{bounded, is_timed_out};
use sqlx::{Connection, MySqlPool, Row};
use std::sync::Arc;
use std::time::Duration;
use testkit::TestDb;
use testkit::stall::StallingProxy;

/// The deadline each test gives itself: a client that hangs fails the test
/// here instead of hanging the suite. Not an assertion about speed.
const TEST_DEADLINE: Duration = Duration::from_secs(60);
const STATEMENT_TIMEOUT: Duration = Duration::from_millis(500);

/// A pool of one connection to `db` through `proxy`, as a service builds it.
async fn pool_through(proxy: &StallingProxy, db: &TestDb) -> MySqlPool {
    let config = MysqlConfig {
        url: testkit::stall::mysql_url_via(proxy.address(), &db.name),
        max_connections: 1,
        acquire_timeout: service_kit::duration::ConfigDuration::from_millis(500),
        ssl_mode: service_kit::db::MysqlSslMode::Disabled,
        ..MysqlConfig::default()
    };
    config.connect().await.expect("connect through the proxy")
}

async fn select_one(pool: &MySqlPool) -> Result<i64, sqlx::Error> {
    bounded(pool, STATEMENT_TIMEOUT, |connection| {
        Box::pin(async move {
            let row = sqlx::query("SELECT 1").fetch_one(&mut *connection).await?;
            row.try_get::<i64, _>(0)
        })
    })
    .await
}

/// Waits until the pool's one connection is back (its release ping
/// answered), so the stall starts between statements.
async fn idle(pool: &MySqlPool) {
    while pool.num_idle() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_stalled_statement_errors_and_the_pool_recovers_when_forwarding_resumes() {
    let db = TestDb::empty().await;
    let proxy = StallingProxy::start(testkit::stall::mysql_server_address()).await;
    let pool = pool_through(&proxy, &db).await;
    tokio::time::timeout(TEST_DEADLINE, async {
        assert_eq!(select_one(&pool).await.expect("through a healthy proxy"), 1);
        idle(&pool).await;

        proxy.stall();
        let error = select_one(&pool)
            .await
            .expect_err("a stalled statement must fail");
        assert!(is_timed_out(&error), "{error}");
        // The abandoned connection is closed, not counted until a ping
        // through the stall would come back.
        assert_eq!(pool.size(), 0);
        // While stalled, a new connection cannot be opened either: an
        // error again (the pool's acquire timeout), not a hang.
        assert!(select_one(&pool).await.is_err());

        proxy.resume();
        assert_eq!(select_one(&pool).await.expect("after resume"), 1);
    })
    .await
    .expect("the client hung instead of failing");
}

#[tokio::test]
async fn a_transaction_cut_off_by_a_stall_commits_nothing() {
    let db = TestDb::empty().await;
    sqlx::query("CREATE TABLE stall_probe (id INT PRIMARY KEY)")
        .execute(&db.pool)
        .await
        .expect("create table");
    let proxy = Arc::new(StallingProxy::start(testkit::stall::mysql_server_address()).await);
    let pool = pool_through(&proxy, &db).await;
    tokio::time::timeout(TEST_DEADLINE, async {
        idle(&pool).await;
        let stalling = proxy.clone();
        let (id_sender, id_receiver) = tokio::sync::oneshot::channel::<u64>();
        let result: Result<(), sqlx::Error> = bounded(&pool, STATEMENT_TIMEOUT, |connection| {
            Box::pin(async move {
                let mut transaction = connection.begin().await?;
                let row = sqlx::query("SELECT CONNECTION_ID()")
                    .fetch_one(&mut *transaction)
                    .await?;
                let _ = id_sender.send(row.try_get::<u64, _>(0)?);
                stalling.stall();
                sqlx::query("INSERT INTO stall_probe (id) VALUES (1)")
                    .execute(&mut *transaction)
                    .await?;
                transaction.commit().await
            })
        })
        .await;
        let error = result.expect_err("the insert never got an answer");
        assert!(is_timed_out(&error), "{error}");
        let server_id = id_receiver.await.expect("the server's connection id");

        // The held INSERT reaches the server after the client closed its
        // side, followed by the close: the server runs it inside the open
        // transaction and then rolls that back. Wait until the session is
        // gone, then look.
        proxy.resume();
        loop {
            let open: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?",
            )
            .bind(server_id)
            .fetch_one(&db.pool)
            .await
            .expect("processlist");
            if open == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM stall_probe")
            .fetch_one(&db.pool)
            .await
            .expect("count");
        assert_eq!(
            rows, 0,
            "a transaction cut off before its COMMIT left a row"
        );
    })
    .await
    .expect("the client hung instead of failing");
}
