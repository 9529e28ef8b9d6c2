//! Redis over TLS (`rediss://` with `redis.tls_ca_file`, and the relay
//! nudge's `outbox_worker.redis_url` / `redis_tls_ca_file`) against a
//! private redis-server listening on TLS only, with a certificate made at
//! test time; and the start-up refusals of CA files that cannot work.

use fred::prelude::*;
use room_service::config::{Config, RedisConfig};
use room_service::redis::Redis;
use std::sync::Arc;
use std::time::Duration;
use testkit::pki::TestPki;
use testkit::tls_servers::TlsRedis;
use tokio_util::sync::CancellationToken;

/// Turns a hang into a failure; the outcome is decided by the server, not
/// by this bound.
const GUARD: Duration = Duration::from_secs(30);

fn redis_config(url: String, ca: &std::path::Path) -> RedisConfig {
    RedisConfig {
        url,
        tls_ca_file: ca.display().to_string(),
        key_prefix: testkit::unique("tls_"),
        ..RedisConfig::default()
    }
}

#[tokio::test]
async fn leases_work_over_tls_with_the_right_ca_and_the_wrong_ca_is_refused() {
    let pki = TestPki::generate(&["localhost", "127.0.0.1"]);
    let server = TlsRedis::start(&pki).await;

    let redis = tokio::time::timeout(
        GUARD,
        Redis::connect(
            &redis_config(server.url(), &pki.ca),
            "node-a",
            "http://127.0.0.1:1",
        ),
    )
    .await
    .expect("connect within the guard")
    .unwrap_or_else(|error| panic!("connect over TLS: {error}; log {}", server.log().display()));
    redis
        .acquire_lease("room-tls")
        .await
        .expect("lease over TLS");
    assert_eq!(
        redis.lease_holder("room-tls").await.unwrap(),
        None,
        "the lease is ours"
    );
    redis.close().await;

    let refused = tokio::time::timeout(
        GUARD,
        Redis::connect(
            &redis_config(server.url(), &pki.wrong_ca),
            "node-b",
            "http://127.0.0.1:1",
        ),
    )
    .await
    .expect("refusal within the guard")
    .expect_err("a server signed by another CA was trusted");
    assert!(
        refused.to_string().contains("UnknownIssuer"),
        "expected an unknown-issuer refusal, got {refused}"
    );
}

#[tokio::test]
async fn the_relay_nudge_subscribes_over_tls() {
    let pki = TestPki::generate(&["localhost", "127.0.0.1"]);
    let server = TlsRedis::start(&pki).await;
    let notify = Arc::new(tokio::sync::Notify::new());
    let shutdown = CancellationToken::new();
    let listener = tokio::spawn(relay_engine::nudge::listen(
        server.url(),
        pki.ca.display().to_string(),
        notify.clone(),
        shutdown.clone(),
    ));

    // A publisher on the same TLS settings; it publishes until the
    // subscriber (which may still be connecting) has heard one nudge.
    let publisher = Client::new(
        relay_engine::nudge::client_config(&server.url(), &pki.ca.display().to_string()).unwrap(),
        None,
        None,
        None,
    );
    publisher.init().await.expect("publisher over TLS");
    let heard = tokio::time::timeout(GUARD, async {
        loop {
            let _: i64 = publisher
                .publish(outbox_schema::names::NUDGE_CHANNEL, "0")
                .await
                .expect("publish over TLS");
            tokio::select! {
                _ = notify.notified() => break,
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    })
    .await;
    shutdown.cancel();
    listener.await.unwrap();
    let _ = publisher.quit().await;
    heard.expect("the nudge subscriber heard a nudge over TLS");
}

#[test]
fn unusable_ca_files_are_refused_at_start_up() {
    let mut config = Config::default();
    config.redis.url = "rediss://127.0.0.1:6380".into();
    config.redis.tls_ca_file = "/nonexistent/redis-ca.pem".into();
    let error = config
        .validate()
        .expect_err("missing CA file accepted")
        .to_string();
    assert!(
        error.contains("redis.tls_ca_file `/nonexistent/redis-ca.pem`"),
        "{error}"
    );

    let mut config = Config::default();
    config.redis.tls_ca_file = "/nonexistent/redis-ca.pem".into();
    let error = config
        .validate()
        .expect_err("CA file with redis:// accepted")
        .to_string();
    assert!(
        error.contains("redis.tls_ca_file is set") && error.contains("rediss://"),
        "{error}"
    );

    let mut config = Config::default();
    config.outbox_worker.redis_url = "rediss://127.0.0.1:6380".into();
    config.outbox_worker.redis_tls_ca_file = "/nonexistent/nudge-ca.pem".into();
    let error = config
        .validate()
        .expect_err("missing nudge CA file accepted")
        .to_string();
    assert!(
        error.contains("outbox_worker.redis_tls_ca_file `/nonexistent/nudge-ca.pem`"),
        "{error}"
    );

    // The standalone relay checks the same keys when it builds its settings.
    let worker = relay_engine::config::OutboxWorkerConfig {
        redis_url: "rediss://127.0.0.1:6380".into(),
        redis_tls_ca_file: "/nonexistent/nudge-ca.pem".into(),
        ..Default::default()
    };
    let error = relay_engine::RelaySettings::from_config(&worker, &Default::default())
        .expect_err("relay accepted a missing nudge CA file")
        .to_string();
    assert!(error.contains("outbox_worker.redis_tls_ca_file"), "{error}");
}
