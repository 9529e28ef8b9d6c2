//! room-service with its MariaDB behind a proxy that stops forwarding
//! mid-stream (docs/design.md#client-timeouts): a command whose SaveMutation
//! gets no answer fails with `UNAVAILABLE` within `mysql.statement_timeout`
//! instead of hanging, commits nothing, and the room serves again — the
//! same `command_id` applied once — when the proxy forwards again. Run for
//! a room's own transaction and for the shared commit lanes. And a `COMMIT`
//! that reaches the server but whose answer never comes back is
//! `UNAVAILABLE` too, never success: the retry with the same `command_id`
//! then gets the stored reply of the command that did land.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use hyapp_api::room::room_service_client::RoomServiceClient;
use room_service::App;
use service_kit::duration::ConfigDuration;
use testkit::stall::StallingProxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// The deadline each test gives itself: a command that hangs fails the test
/// here instead of hanging the suite. Not an assertion about speed.
const TEST_DEADLINE: Duration = Duration::from_secs(90);

/// The MySQL packet of sqlx's `COMMIT`: length 7, sequence 0, COM_QUERY.
const COMMIT_PACKET: &[u8] = b"\x07\x00\x00\x00\x03COMMIT";

/// A TCP proxy to MariaDB that, once armed, lets the next `COMMIT` through
/// to the server and then forwards nothing back on that connection: the
/// transaction commits, its client never hears so.
struct CommitAnswerLost {
    address: SocketAddr,
    armed: Arc<AtomicBool>,
}

impl CommitAnswerLost {
    async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("local address");
        let armed = Arc::new(AtomicBool::new(false));
        let arming = armed.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(target).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                let lost = Arc::new(AtomicBool::new(false));
                tokio::spawn(upstream(
                    client_read,
                    server_write,
                    arming.clone(),
                    lost.clone(),
                ));
                tokio::spawn(downstream(server_read, client_write, lost));
            }
        });
        Self { address, armed }
    }

    /// The answer to the next `COMMIT` any connection sends is lost.
    fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }
}

async fn upstream(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    armed: Arc<AtomicBool>,
    lost: Arc<AtomicBool>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    while let Ok(read) = from.read(&mut buffer).await {
        let chunk = &buffer[..read];
        if read == 0 {
            break;
        }
        // Decided before the COMMIT goes on, so its answer cannot slip back.
        if chunk
            .windows(COMMIT_PACKET.len())
            .any(|window| window == COMMIT_PACKET)
            && armed.swap(false, Ordering::SeqCst)
        {
            lost.store(true, Ordering::SeqCst);
        }
        if to.write_all(chunk).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

async fn downstream(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    lost: Arc<AtomicBool>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    while let Ok(read) = from.read(&mut buffer).await {
        if read == 0 {
            break;
        }
        if lost.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// The answer of a command whose database work outlived
/// `mysql.statement_timeout`: UNAVAILABLE (the gateway retries it with the
/// same `command_id`), naming the timeout.
fn assert_unavailable_by_the_statement_timeout(error: &tonic::Status) {
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
}

#[tokio::test]
async fn a_commit_whose_answer_is_lost_is_unavailable_and_the_retry_replays_it() {
    let db = testkit::TestDb::new().await;
    let wallet = fake_wallet::spawn(fake_wallet::FakeWalletConfig::default())
        .await
        .expect("fake wallet");
    let proxy = CommitAnswerLost::start(testkit::stall::mysql_server_address()).await;
    let mut config = test_config(&db, &wallet);
    config.mysql.url = testkit::stall::mysql_url_via(proxy.address, &db.name);
    config.mysql.statement_timeout = ConfigDuration::from_millis(500);
    let mut harness = Harness::start_on(db, wallet, config).await;

    tokio::time::timeout(TEST_DEADLINE, async {
        let room = testkit::unique("room-");
        room_with_members(&mut harness.client, &room, "owner", &["alice"]).await;
        let before = room_state(&mut harness.client, &room).await.version;

        proxy.arm();
        let request = join(&room, "bob");
        let command_id = request.meta.as_ref().expect("meta").command_id.clone();
        let error = harness
            .client
            .join_room(request.clone())
            .await
            .expect_err("a COMMIT without an answer must not be reported as success");
        assert_unavailable_by_the_statement_timeout(&error);
        // It did land: the outcome was unknown, not a failure.
        assert_eq!(
            harness
                .count("room_command_log", "command_id", &command_id)
                .await,
            1
        );

        let reply = harness
            .client
            .join_room(request)
            .await
            .expect("the retry with the same command_id")
            .into_inner();
        assert!(reply.replayed, "the retry answers with the stored reply");
        assert_eq!(reply.room_version, before + 1);
        let after = room_state(&mut harness.client, &room).await;
        assert_eq!(after.version, before + 1, "bob joined exactly once");
        harness
            .client
            .join_room(join(&room, "carol"))
            .await
            .expect("the room serves new commands");
    })
    .await
    .expect("a command hung instead of failing");
    harness.stop().await;
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
    let proxy = StallingProxy::start(testkit::stall::mysql_server_address()).await;
    let mut config = test_config(&db, &wallet);
    config.mysql.url = testkit::stall::mysql_url_via(proxy.address(), &db.name);
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
        assert_unavailable_by_the_statement_timeout(&error);
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
