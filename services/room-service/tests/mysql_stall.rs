//! room-service with its MariaDB behind a proxy that stops forwarding
//! mid-stream (docs/design.md#client-timeouts): a command whose SaveMutation
//! gets no answer fails with `UNAVAILABLE` within `mysql.statement_timeout`
//! instead of hanging, commits nothing, and the room serves again — the
//! same `command_id` applied once — when the proxy forwards again. Run for
//! a room's own transaction and for the shared commit lanes.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use hyapp_api::room::room_service_client::RoomServiceClient;
use room_service::App;
use service_kit::duration::ConfigDuration;
use testkit::stall::StallingProxy;
use tokio_util::sync::CancellationToken;

/// The deadline each test gives itself: a command that hangs fails the test
/// here instead of hanging the suite. Not an assertion about speed.
const TEST_DEADLINE: Duration = Duration::from_secs(90);

fn server_address() -> SocketAddr {
    let url = testkit::mysql_server_url();
    let authority = url
        .trim_start_matches("mysql://")
        .rsplit('@')
        .next()
        .expect("authority")
        .split('/')
        .next()
        .expect("host:port")
        .replace("localhost", "127.0.0.1");
    authority.parse().expect("the test MariaDB's address")
}

#[tokio::test]
async fn a_stalled_save_is_unavailable_and_the_room_recovers() {
    stalled_save_is_unavailable_then_recovers(0).await;
}

#[tokio::test]
async fn a_stalled_shared_commit_is_unavailable_and_the_room_recovers() {
    stalled_save_is_unavailable_then_recovers(4).await;
}

async fn stalled_save_is_unavailable_then_recovers(shared_commit_lanes: usize) {
    let db = testkit::TestDb::new().await;
    let wallet = fake_wallet::spawn(fake_wallet::FakeWalletConfig::default())
        .await
        .expect("fake wallet");
    let proxy = StallingProxy::start(server_address()).await;
    let mut config = test_config(&db, &wallet);
    config.mysql.url = format!("mysql://root@{}/{}", proxy.address(), db.name);
    config.mysql.statement_timeout = ConfigDuration::from_millis(500);
    config.mysql.acquire_timeout = ConfigDuration::from_millis(500);
    config.room.shared_commit_lanes = shared_commit_lanes;
    let config = config.validate().expect("valid test config");
    let app = App::build(config).await.expect("build app");
    let pool = app.pool();
    let mut client = RoomServiceClient::connect(format!("http://{}", app.grpc_addr()))
        .await
        .expect("connect room-service");
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(app.run(shutdown.clone()));

    tokio::time::timeout(TEST_DEADLINE, async {
        let room = testkit::unique("room-");
        room_with_members(&mut client, &room, "owner", &["alice"]).await;
        let before = room_state(&mut client, &room).await.version;
        // A pooled connection is back and idle, so the command's statement
        // is what meets the stall (not the opening of a new connection).
        while pool.num_idle() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        proxy.stall();
        let request = join(&room, "bob");
        let command_id = request.meta.as_ref().expect("meta").command_id.clone();
        let error = client
            .join_room(request.clone())
            .await
            .expect_err("a save against a stalled database must fail");
        assert_eq!(
            error.code(),
            tonic::Code::Unavailable,
            "{}",
            error.message()
        );
        assert!(
            error.message().contains("mysql.statement_timeout"),
            "{}",
            error.message()
        );
        // Read past the proxy: nothing of the command was committed.
        assert_eq!(
            count(&db.pool, "room_command_log", "command_id", &command_id).await,
            0
        );

        proxy.resume();
        let recovered = eventually(TEST_DEADLINE, || {
            let (mut client, request) = (client.clone(), request.clone());
            async move { client.join_room(request).await.is_ok() }
        })
        .await;
        assert!(recovered, "the command succeeds once the proxy forwards");
        assert_eq!(
            count(&db.pool, "room_command_log", "command_id", &command_id).await,
            1
        );
        let after = room_state(&mut client, &room).await;
        assert_eq!(after.version, before + 1, "bob joined exactly once");
        client
            .join_room(join(&room, "carol"))
            .await
            .expect("the room serves new commands again");
    })
    .await
    .expect("a command hung instead of failing");

    shutdown.cancel();
    running
        .await
        .expect("app task")
        .expect("clean shutdown after the stall");
}
