//! Redis behind Sentinel, on real servers: a primary, a replica and three
//! sentinels (`testkit::sentinel`). A client built from the
//! `redis-sentinel://` URL by `service_kit::redis` writes, the primary is
//! killed with -9, the sentinels promote the replica, and the same client
//! writes and reads again — on the promoted server, checked by reading it
//! directly.
//!
//! The direct client of the replica is built like a service's (command
//! timeout, reconnects): the promotion closes every client connection on
//! the promoted server (`CLIENT KILL TYPE normal`), and a client with
//! fred's defaults — no reconnect, no command timeout — then waits for an
//! answer forever. Every wait here is bounded by [`GUARD`] and names what
//! never happened.

use fred::prelude::*;
use service_kit::redis::{RedisKeys, client_builder, client_config};
use std::future::Future;
use std::time::Duration;
use testkit::sentinel::SentinelRedis;

const KEYS: RedisKeys = RedisKeys {
    url: "redis.url",
    tls_ca_file: "redis.tls_ca_file",
};

/// Turns a hang into a failure; when things happen is up to the servers.
const GUARD: Duration = Duration::from_secs(60);

/// Each command's timeout: a command sent while the client reconnects
/// fails after it, and the poll tries again.
const COMMAND_TIMEOUT: Duration = Duration::from_millis(500);

/// Retries `attempt` until it succeeds, within [`GUARD`]; each attempt is
/// bounded by the client's command timeout and by the guard itself.
async fn until_ok<T, F, Fut>(what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let outcome = tokio::time::timeout_at(deadline, attempt()).await;
        match outcome {
            Ok(Ok(value)) => return value,
            Ok(Err(error)) => assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: still failing after {GUARD:?}: {error}"
            ),
            Err(_) => panic!("{what}: no answer within {GUARD:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client of `url` with the timeouts and reconnects every service's has.
fn client(url: &str) -> Client {
    let config = client_config(KEYS, url, "").expect("a valid Redis URL");
    client_builder(config, COMMAND_TIMEOUT)
        .expect("builder")
        .build()
        .expect("client")
}

/// Connects `client` (the first connection, which `init` waits for).
async fn connect(what: &str, client: &Client) {
    tokio::time::timeout(GUARD, client.init())
        .await
        .unwrap_or_else(|_| panic!("{what}: not connected within {GUARD:?}"))
        .unwrap_or_else(|error| panic!("{what}: {error}"));
}

#[tokio::test]
async fn the_same_client_writes_again_on_the_promoted_primary() {
    let mut redis = SentinelRedis::start().await;
    let client = client(&redis.url());
    connect("connect through the sentinels", &client).await;
    until_ok("write to the first primary", || {
        client.set::<(), _, _>("before", "1", None, None, false)
    })
    .await;
    // The replica has it before the crash (replication is asynchronous; a
    // write not yet copied would be lost, which is what leases tolerate).
    let replica = self::client(&redis.replica_url());
    connect("reach the replica", &replica).await;
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
    let before: Option<String> = until_ok("read through the sentinels", || {
        client.get::<Option<String>, _>("before")
    })
    .await;
    assert_eq!(before.as_deref(), Some("1"));
    // The promotion closed the replica client's connection; it reconnects.
    let after: Option<String> = until_ok("read the promoted server", || {
        replica.get::<Option<String>, _>("after")
    })
    .await;
    assert_eq!(
        after.as_deref(),
        Some("2"),
        "the write went to the promoted replica"
    );
    let role: Vec<Value> = until_ok("ROLE of the promoted server", || {
        replica.custom(
            fred::types::CustomCommand::new_static("ROLE", None, false),
            Vec::<Value>::new(),
        )
    })
    .await;
    assert_eq!(
        role.first().and_then(Value::as_str).as_deref(),
        Some("master")
    );
    for (what, client) in [("sentinel client", &client), ("replica client", &replica)] {
        tokio::time::timeout(GUARD, client.quit())
            .await
            .unwrap_or_else(|_| panic!("{what}: QUIT not done within {GUARD:?}"))
            .unwrap_or_else(|error| panic!("{what}: QUIT: {error}"));
    }
}
