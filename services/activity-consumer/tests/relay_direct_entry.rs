//! The relay's direct activity sink against the real activity-consumer
//! entry served over mutual TLS with a bearer token (certificates generated
//! at test time, `testkit::pki`): with `direct.activity_tls` and the right
//! `direct.activity_auth_token` the event is applied; with a wrong token it
//! is refused `UNAUTHENTICATED` and stays retryable, never delivered; and
//! while the entry is down, the event is retried until it returns.

#[path = "../../../crates/relay-engine/tests/common/relay.rs"]
#[allow(dead_code, reason = "the relay fixtures serve several test crates")]
mod common;

use common::*;
use room_core::EventKind;
use service_kit::Secret;
use service_kit::grpc_tls::{ClientTls, ServerTls};
use std::time::{Duration, Instant};
use testkit::pki::TestPki;

const TOKEN: &str = "relay-activity-token-0123456789abcdef";

fn direct_relay_to(
    pool: &sqlx::MySqlPool,
    endpoint: &str,
    pki: &TestPki,
    token: &str,
) -> relay_engine::Relay {
    // One node id for both relays of the test: the second takes over the
    // first one's shard leases as their owner instead of waiting them out.
    let mut worker = worker_config("relay-tls");
    worker.publish_mode = "direct".into();
    let direct = relay_engine::config::DirectConfig {
        activity_endpoint: endpoint.to_owned(),
        activity_tls: ClientTls {
            ca_file: pki.ca.display().to_string(),
            cert_file: pki.client_cert.display().to_string(),
            key_file: pki.client_key.display().to_string(),
            domain: String::new(),
        },
        activity_auth_token: Secret::new(token),
        ..Default::default()
    };
    let mut registry = prometheus_client::registry::Registry::default();
    relay_engine::build_relay(
        pool.clone(),
        &worker,
        &service_kit::mq::MqConfig::default(),
        &direct,
        &mut registry,
    )
    .unwrap()
}

/// activity-consumer's config against `db_url`, a topic of its own and the
/// fake IM at `im_url`, its gRPC entry on `grpc_listen`.
async fn activity_config(
    db_url: &str,
    im_url: &str,
    grpc_listen: &str,
) -> activity_consumer::config::Config {
    let mq = mq_config(&testkit::kafka_bootstrap(), &testkit::unique("ns"));
    testkit::create_topic(&mq.topic(outbox_schema::names::TOPIC_ROOM_OUTBOX), 1).await;
    let mut config = activity_consumer::config::Config::default();
    config.mysql.url = db_url.to_owned();
    config.rocketmq = mq;
    config.consumer.group = testkit::unique("activity-");
    config.tencent_im = tencent_im::ImSection {
        enabled: true,
        base_url: im_url.to_owned(),
        sdk_app_id: IM_APP_ID,
        secret_key: Secret::new(IM_KEY),
        ..tencent_im::ImSection::default()
    };
    config.grpc_listen = grpc_listen.to_owned();
    config.http_listen = "127.0.0.1:0".into();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_activity_entry_is_called_over_mutual_tls_with_the_token() {
    let pki = TestPki::generate(&["localhost"]);
    let db = testkit::TestDb::new().await;
    let fake = fake_im().await;
    let mut config = activity_config(&db.url, &fake.base_url(), "127.0.0.1:0").await;
    config.grpc_tls = ServerTls {
        cert_file: pki.server_cert.display().to_string(),
        key_file: pki.server_key.display().to_string(),
        client_ca_file: pki.ca.display().to_string(),
    };
    config.grpc_auth_token = Secret::new(TOKEN);
    let activity = activity_consumer::App::build(config).await.unwrap();
    let port = activity
        .server_addr(activity_consumer::GRPC_SERVER)
        .unwrap()
        .port();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(activity.run(shutdown.clone()));
    let endpoint = format!("https://localhost:{port}");

    let gift = EventKind::RoomGiftSent {
        sender_id: "alice".into(),
        receiver_id: "host".into(),
        gift_id: "rose".into(),
        count: 2,
        unit_value: 21,
        total_value: 42,
    };
    insert(&db.pool, &[event_row("room-tls", 1, gift)]).await;

    let impostor = direct_relay_to(&db.pool, &endpoint, &pki, "not-the-token");
    let shards = own_all_shards(&impostor).await;
    let report = impostor.run_batch(&shards).await.unwrap();
    assert_eq!((report.delivered, report.retried), (0, 1));
    let error: String = sqlx::query_scalar("SELECT last_error FROM room_outbox")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(error.contains("Unauthenticated"), "{error}");
    drop(impostor);

    let relay = direct_relay_to(&db.pool, &endpoint, &pki, TOKEN);
    let deadline = Instant::now() + Duration::from_secs(30);
    let shards = own_all_shards(&relay).await;
    while open_rows(&db.pool).await > 0 {
        assert!(Instant::now() < deadline, "relay did not deliver");
        relay.run_batch(&shards).await.unwrap();
    }
    assert_eq!(
        statuses(&db.pool, "room-tls").await,
        vec![(1, "delivered".into())]
    );
    let total: u64 = sqlx::query_scalar(
        "SELECT total_value FROM activity_room_contribution WHERE room_id = 'room-tls'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(total, 42);
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

/// Activity unavailable in `direct` mode (docs/design.md#publish-modes) → the event is retried
/// (the command path never waits), and delivered once activity-service is
/// back — through its real gRPC entry, counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activity_outage_is_retried_until_the_service_returns() {
    let db = testkit::TestDb::new().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut worker = worker_config("relay-activity");
    worker.publish_mode = "direct".into();
    let direct = relay_engine::config::DirectConfig {
        activity_endpoint: format!("http://127.0.0.1:{port}"),
        ..Default::default()
    };
    let mut registry = prometheus_client::registry::Registry::default();
    let relay = relay_engine::build_relay(
        db.pool.clone(),
        &worker,
        &service_kit::mq::MqConfig::default(),
        &direct,
        &mut registry,
    )
    .unwrap();
    let shards = own_all_shards(&relay).await;
    let gift = EventKind::RoomGiftSent {
        sender_id: "alice".into(),
        receiver_id: "host".into(),
        gift_id: "rose".into(),
        count: 2,
        unit_value: 21,
        total_value: 42,
    };
    insert(&db.pool, &[event_row("room-act", 1, gift)]).await;
    let report = relay.run_batch(&shards).await.unwrap();
    assert_eq!(
        (report.delivered, report.retried),
        (0, 1),
        "activity is down"
    );
    let error: String = sqlx::query_scalar("SELECT last_error FROM room_outbox")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(error.contains("activity"), "{error}");

    // activity-service comes back on its address.
    let fake = fake_im().await;
    let config = activity_config(&db.url, &fake.base_url(), &format!("127.0.0.1:{port}")).await;
    let activity = activity_consumer::App::build(config).await.unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(activity.run(shutdown.clone()));
    drain(&relay, &db.pool, &shards).await;
    let total: u64 = sqlx::query_scalar(
        "SELECT total_value FROM activity_room_contribution WHERE room_id = 'room-act'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(total, 42);
    shutdown.cancel();
    running.await.unwrap().unwrap();
}
