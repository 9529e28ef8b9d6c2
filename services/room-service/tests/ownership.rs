//! Room ownership across nodes: the Redis lease names the one node that
//! executes a room's commands (others forward to it, see tests/scale_out.rs),
//! the version compare-and-set fences a stale owner, and a cell rebuilt from
//! snapshot + command log is identical to the one that wrote them.

mod common;

use common::*;
use hyapp_api::room::TakeMicRequest;
use hyapp_api::room::room_service_client::RoomServiceClient;
use room_service::App;
use room_service::cell::rebuild;
use room_service::redis::Redis;
use room_service::store::Store;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn a_stale_owner_is_fenced_by_the_version_compare_and_set() {
    let mut node_a = Harness::start().await;
    let node_a_addr = node_a.grpc_addr;
    let room = testkit::unique("room-");
    room_with_members(&mut node_a.client, &room, "owner", &["alice"]).await;

    let config_b = common::test_config(&node_a.db, &node_a.wallet)
        .validate()
        .unwrap();
    let node_b_id = config_b.node_id.clone();
    let app_b = App::build(config_b.clone()).await.unwrap();
    let mut client_b = RoomServiceClient::connect(format!("http://{}", app_b.grpc_addr()))
        .await
        .unwrap();
    let stop_b = CancellationToken::new();
    let task_b = tokio::spawn(app_b.run(stop_b.clone()));

    // A's lease expires (simulated) and B takes the room over.
    let redis_a = Redis::connect(
        &node_a.config.redis,
        &node_a.node_id,
        &node_a.config.advertised_url(node_a_addr),
    )
    .await
    .unwrap();
    redis_a.release_lease(&room).await.unwrap();
    let joined = client_b
        .join_room(join(&room, "bob"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(joined.room_version, 3);

    // A still believes it owns the room: its commit must not land.
    let outbox_before = node_a.count("room_outbox", "room_id", &room).await;
    let stale = join(&room, "carol");
    let stale_id = stale.meta.as_ref().unwrap().command_id.clone();
    let error = node_a.client.join_room(stale).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::Aborted, "{}", error.message());
    assert!(
        error.message().contains("another owner"),
        "{}",
        error.message()
    );
    assert_eq!(
        node_a
            .count("room_command_log", "command_id", &stale_id)
            .await,
        0
    );
    assert_eq!(
        node_a.count("room_outbox", "room_id", &room).await,
        outbox_before
    );

    // A dropped its cell: its next attempt finds B's lease and runs on B.
    let joined = node_a.client.join_room(join(&room, "carol")).await.unwrap();
    assert_eq!(
        joined.metadata().get("x-room-served-by").unwrap(),
        node_b_id.as_str()
    );
    assert_eq!(joined.get_ref().room_version, 4);

    let snapshot = room_state(&mut client_b, &room).await;
    assert_eq!(snapshot.version, 4);
    assert!(snapshot.members.contains(&"bob".to_string()));
    assert!(snapshot.members.contains(&"carol".to_string()));

    stop_b.cancel();
    task_b.await.unwrap().unwrap();
    redis_a.close().await;
    node_a.stop().await;
}

#[tokio::test]
async fn snapshot_plus_replay_rebuilds_the_identical_room() {
    let mut harness = Harness::start_with(|config| config.room.snapshot_every_n = 4).await;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &["u1", "u2", "u3"]).await;
    harness
        .client
        .take_mic(TakeMicRequest {
            meta: meta(&testkit::unique("mic-")),
            room_id: room.clone(),
            user_id: "u2".into(),
            seat_index: 1,
        })
        .await
        .unwrap();
    for index in 0..6 {
        let sender = ["u1", "u2", "u3"][index % 3];
        harness
            .client
            .send_gift(gift(
                &room,
                &testkit::unique("gift-"),
                sender,
                "owner",
                3,
                100,
            ))
            .await
            .unwrap();
    }
    let before = room_state(&mut harness.client, &room).await;
    assert_eq!(before.version, 11);
    // Creation image, then every 4 versions; older ones pruned down to the previous one.
    let versions: Vec<u64> =
        sqlx::query_scalar("SELECT version FROM room_snapshots WHERE room_id = ? ORDER BY version")
            .bind(&room)
            .fetch_all(&harness.pool)
            .await
            .unwrap();
    assert_eq!(versions, vec![4, 8]);

    let store = Store::new(harness.pool.clone());
    let rules = harness.config.room.rules.to_rules();
    let from_snapshot = rebuild(&store, &room, &rules, 0).await.unwrap().state;
    assert_eq!(from_snapshot.version, 11);
    // Without snapshots the whole log replays to the same state.
    sqlx::query("DELETE FROM room_snapshots WHERE room_id = ?")
        .bind(&room)
        .execute(&harness.pool)
        .await
        .unwrap();
    let from_log = rebuild(&store, &room, &rules, 0).await.unwrap().state;
    assert_eq!(from_log, from_snapshot);

    // A restarted node serves the same room.
    let (_, db, wallet) = harness.stop().await;
    let config = common::test_config(&db, &wallet);
    let mut restarted = Harness::start_on(db, wallet, config).await;
    let after = room_state(&mut restarted.client, &room).await;
    assert_eq!(after, before);
    let next = restarted
        .client
        .join_room(join(&room, "u4"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next.room_version, 12);
    restarted.stop().await;
}
