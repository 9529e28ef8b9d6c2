//! MySQL and Redis outages: commands fail with UNAVAILABLE and leave no
//! partial state, and the service recovers by itself when they return.

mod common;

use std::time::Duration;

use common::*;

#[tokio::test]
async fn mysql_and_redis_outages_are_unavailable_and_recover() {
    let db = testkit::TestDb::new().await;
    let wallet = fake_wallet::spawn(fake_wallet::FakeWalletConfig::default())
        .await
        .unwrap();
    let mysql_target = testkit::mysql_server_url()
        .trim_start_matches("mysql://")
        .rsplit('@')
        .next()
        .unwrap()
        .to_owned();
    let redis_target = testkit::redis_url()
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let mysql_proxy = Proxy::start(mysql_target).await;
    let redis_proxy = Proxy::start(redis_target).await;
    let mut config = test_config(&db, &wallet);
    config.mysql.url = format!("mysql://root@{}/{}", mysql_proxy.addr, db.name);
    config.mysql.acquire_timeout = service_kit::duration::ConfigDuration::from_millis(500);
    config.redis.url = format!("redis://{}", redis_proxy.addr);
    config.redis.command_timeout = service_kit::duration::ConfigDuration::from_millis(300);
    let mut harness = Harness::start_on(db, wallet, config).await;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &["alice"]).await;

    // MySQL down: UNAVAILABLE, nothing written, the cell unchanged.
    mysql_proxy.cut();
    let request = join(&room, "bob");
    let command_id = request.meta.as_ref().unwrap().command_id.clone();
    let error = harness.client.join_room(request.clone()).await.unwrap_err();
    assert_eq!(
        error.code(),
        tonic::Code::Unavailable,
        "{}",
        error.message()
    );
    assert!(error.message().contains("database"), "{}", error.message());
    mysql_proxy.restore();
    assert_eq!(
        harness
            .count("room_command_log", "command_id", &command_id)
            .await,
        0
    );
    let recovered = eventually(Duration::from_secs(10), || {
        let (mut client, request) = (harness.client.clone(), request.clone());
        async move { client.join_room(request).await.is_ok() }
    })
    .await;
    assert!(recovered, "commands succeed again once MySQL is back");
    let snapshot = room_state(&mut harness.client, &room).await;
    assert_eq!(snapshot.version, 3);

    // Redis down: a loaded room keeps committing (projections are best
    // effort) while its lease lasts, a room that needs a lease is UNAVAILABLE.
    redis_proxy.cut();
    harness
        .client
        .join_room(join(&room, "carol"))
        .await
        .unwrap();
    // Still after this instance's liveness key has lapsed (renewals failing
    // for longer than its TTL): nobody can take the room over through a
    // Redis nobody reaches, so the holder serves on under its room lease.
    let lapsed = eventually(Duration::from_secs(10), || async {
        harness.metric("room_liveness_renewal_failures_total").await >= 4.0
    })
    .await;
    assert!(lapsed, "liveness renewals kept succeeding with Redis cut");
    harness.client.join_room(join(&room, "dave")).await.unwrap();
    let other = testkit::unique("room-");
    let create_other = create(&other, "owner");
    let error = harness
        .client
        .create_room(create_other.clone())
        .await
        .unwrap_err();
    assert_eq!(
        error.code(),
        tonic::Code::Unavailable,
        "{}",
        error.message()
    );
    assert!(error.message().contains("redis"), "{}", error.message());
    assert_eq!(harness.count("rooms", "room_id", &other).await, 0);
    redis_proxy.restore();
    let recovered = eventually(Duration::from_secs(10), || {
        let (mut client, request) = (harness.client.clone(), create_other.clone());
        async move { client.create_room(request).await.is_ok() }
    })
    .await;
    assert!(recovered, "rooms load again once Redis is back");
    assert_eq!(harness.count("rooms", "room_id", &other).await, 1);
    harness.stop().await;
}
