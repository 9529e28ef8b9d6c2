//! Redis behind Sentinel, on real servers: a primary, a replica and three
//! sentinels (`testkit::sentinel`). A client built from the
//! `redis-sentinel://` URL by `service_kit::redis` writes, the primary is
//! killed with -9, the sentinels promote the replica, and the same client
//! writes and reads again — on the promoted server, checked by reading it
//! directly.

use fred::prelude::*;
use service_kit::redis::{RedisKeys, client_builder, client_config};
use std::time::Duration;
use testkit::sentinel::SentinelRedis;

const KEYS: RedisKeys = RedisKeys {
    url: "redis.url",
    tls_ca_file: "redis.tls_ca_file",
};

/// Turns a hang into a failure; when things happen is up to the servers.
const GUARD: Duration = Duration::from_secs(60);

/// Retries `attempt` until it succeeds, within [`GUARD`].
async fn until_ok<T, F, Fut>(what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        match attempt().await {
            Ok(value) => return value,
            Err(error) => assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: still failing after {GUARD:?}: {error}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_same_client_writes_again_on_the_promoted_primary() {
    let mut redis = SentinelRedis::start().await;
    let config = client_config(KEYS, &redis.url(), "").expect("a Sentinel URL");
    let client = client_builder(config, Duration::from_millis(500))
        .expect("builder")
        .build()
        .expect("client");
    tokio::time::timeout(GUARD, client.init())
        .await
        .expect("connect within the guard")
        .expect("connect through the sentinels");
    let () = client
        .set("before", "1", None, None, false)
        .await
        .expect("write to the first primary");
    // The replica has it before the crash (replication is asynchronous; a
    // write not yet copied would be lost, which is what leases tolerate).
    let replica = Client::new(
        Config::from_url(&redis.replica_url()).unwrap(),
        None,
        None,
        None,
    );
    replica.init().await.expect("reach the replica");
    until_ok("the write reaches the replica", || async {
        match replica.get::<Option<String>, _>("before").await? {
            Some(_) => Ok(()),
            None => Err(Error::new(ErrorKind::NotFound, "not replicated yet")),
        }
    })
    .await;

    redis.kill_primary();
    redis.await_failover().await;

    // Commands fail while the client finds the new primary, then land on it.
    until_ok("write after the failover", || {
        client.set::<(), _, _>("after", "2", None, None, false)
    })
    .await;
    let before: Option<String> = client.get("before").await.expect("read");
    assert_eq!(before.as_deref(), Some("1"));
    let after: Option<String> = replica
        .get("after")
        .await
        .expect("read the promoted server");
    assert_eq!(
        after.as_deref(),
        Some("2"),
        "the write went to the promoted replica"
    );
    let role: Vec<Value> = replica
        .custom(
            fred::types::CustomCommand::new_static("ROLE", None, false),
            Vec::<Value>::new(),
        )
        .await
        .expect("ROLE");
    assert_eq!(
        role.first().and_then(Value::as_str).as_deref(),
        Some("master")
    );
    let _ = client.quit().await;
    let _ = replica.quit().await;
}
