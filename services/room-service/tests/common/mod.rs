//! Test harness: a room-service on port 0 against a fresh MariaDB database,
//! the shared Redis and an in-process fake wallet, plus request builders and
//! row counters.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::time::Duration;

use hyapp_api::room::room_service_client::RoomServiceClient;
use hyapp_api::room::{
    CommandMeta, CreateRoomRequest, GetRoomRequest, JoinRoomRequest, RoomSnapshot, SendGiftRequest,
};
use room_service::{App, Config, Rooms, ShutdownReport};
use sqlx::MySqlPool;
use testkit::TestDb;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// A running room-service with its dependencies.
pub struct Harness {
    pub db: TestDb,
    pub wallet: fake_wallet::FakeWalletHandle,
    pub client: RoomServiceClient<Channel>,
    pub rooms: Rooms,
    pub pool: MySqlPool,
    pub http: String,
    pub workers: room_service::workers::Workers,
    pub node_id: String,
    pub config: Config,
    pub grpc_addr: std::net::SocketAddr,
    app: Option<App>,
    shutdown: CancellationToken,
    task: Option<JoinHandle<Result<ShutdownReport, room_service::Error>>>,
}

/// A config for tests: port 0, a unique node id, no embedded relay, no IM,
/// and workers that only run when a test calls them.
pub fn test_config(db: &TestDb, wallet: &fake_wallet::FakeWalletHandle) -> Config {
    let mut config = Config::default();
    config.mysql.url = db.url.clone();
    config.mysql.max_connections = 8;
    config.redis.url = testkit::redis_url();
    // Redis is shared by every test (and anything else on the machine):
    // nodes of one test share its database and so its key prefix, and see
    // nobody else's leases, presence or room list.
    config.redis.key_prefix = db.name.clone();
    config.grpc_listen = "127.0.0.1:0".into();
    config.http_listen = "127.0.0.1:0".into();
    config.node_id = testkit::unique("node-");
    config.wallet.endpoint = wallet.endpoint();
    config.outbox_worker.enabled = false;
    config.tencent_im.enabled = false;
    config.room.presence_sweep_interval = service_kit::duration::ConfigDuration::from_secs(3600);
    config.saga.sweep_interval = service_kit::duration::ConfigDuration::from_secs(3600);
    config.shutdown_grace = service_kit::duration::ConfigDuration::from_secs(10);
    config
}

impl Harness {
    /// See [`metric`].
    pub async fn metric(&self, series: &str) -> f64 {
        metric(&self.http, series).await
    }

    /// See [`metric_or_zero`].
    pub async fn metric_or_zero(&self, series: &str) -> f64 {
        metric_or_zero(&self.http, series).await
    }

    /// Another instance on this harness's database, wallet and Redis prefix,
    /// with its own node id and ports.
    pub async fn second_node(&self, tweak: impl FnOnce(&mut Config)) -> Node {
        let mut config = test_config(&self.db, &self.wallet);
        tweak(&mut config);
        Node::start(config).await
    }
}

/// The `/metrics` text of the admin server at `http`.
pub async fn metrics_text(http: &str) -> String {
    testkit::metrics::scrape(&format!("{http}/metrics")).await
}

/// The sum of every sample of `series` on the `/metrics` of the admin
/// server at `http`: a name (all label sets, e.g.
/// `room_group_commit_batch_size_sum`) or `name{label="value"}`. Fails the
/// test, naming the series, when no sample matches.
pub async fn metric(http: &str, series: &str) -> f64 {
    testkit::metrics::value(&metrics_text(http).await, series)
}

/// [`metric`], but 0 when no sample matches: only for a labelled family
/// (`room_commands_total`, `room_forwarded_total`, `room_reads_total`),
/// which exposes nothing until its first label set is recorded.
pub async fn metric_or_zero(http: &str, series: &str) -> f64 {
    testkit::metrics::value_or_zero(&metrics_text(http).await, series)
}

/// A further room-service instance started by [`Harness::second_node`].
pub struct Node {
    pub client: RoomServiceClient<Channel>,
    pub http: String,
    pub node_id: String,
    pub grpc: String,
    shutdown: CancellationToken,
    task: JoinHandle<Result<ShutdownReport, room_service::Error>>,
}

impl Node {
    async fn start(config: Config) -> Node {
        let config = config.validate().expect("valid test config");
        let app = App::build(config.clone()).await.expect("build app");
        let grpc = format!("http://{}", app.grpc_addr());
        let client = RoomServiceClient::connect(grpc.clone())
            .await
            .expect("connect room-service");
        let shutdown = CancellationToken::new();
        Node {
            client,
            http: format!("http://{}", app.http_addr()),
            node_id: config.node_id.clone(),
            grpc,
            task: tokio::spawn(app.run(shutdown.clone())),
            shutdown,
        }
    }

    /// See [`metric`].
    pub async fn metric(&self, series: &str) -> f64 {
        metric(&self.http, series).await
    }

    /// See [`metric_or_zero`].
    pub async fn metric_or_zero(&self, series: &str) -> f64 {
        metric_or_zero(&self.http, series).await
    }

    /// Gracefully stops the instance.
    pub async fn stop(self) -> ShutdownReport {
        self.shutdown.cancel();
        self.task.await.expect("app task").expect("clean shutdown")
    }
}

impl Harness {
    /// Database + wallet + app with the default test config.
    pub async fn start() -> Harness {
        Self::start_with(|_| {}).await
    }

    /// Like [`Harness::start`], with config tweaks.
    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> Harness {
        let db = TestDb::new().await;
        let wallet = fake_wallet::spawn(fake_wallet::FakeWalletConfig::default())
            .await
            .expect("fake wallet");
        let mut config = test_config(&db, &wallet);
        tweak(&mut config);
        Self::start_on(db, wallet, config).await
    }

    /// Starts the app on an existing database and wallet.
    pub async fn start_on(
        db: TestDb,
        wallet: fake_wallet::FakeWalletHandle,
        config: Config,
    ) -> Harness {
        let config = config.validate().expect("valid test config");
        let app = App::build(config.clone()).await.expect("build app");
        let client = RoomServiceClient::connect(format!("http://{}", app.grpc_addr()))
            .await
            .expect("connect room-service");
        Harness {
            rooms: app.rooms(),
            pool: db.pool.clone(),
            http: format!("http://{}", app.http_addr()),
            workers: app.workers().clone(),
            node_id: config.node_id.clone(),
            grpc_addr: app.grpc_addr(),
            config,
            db,
            wallet,
            client,
            app: Some(app),
            shutdown: CancellationToken::new(),
            task: None,
        }
        .running()
    }

    fn running(mut self) -> Self {
        let app = self.app.take().expect("app");
        let token = self.shutdown.clone();
        self.task = Some(tokio::spawn(app.run(token)));
        self
    }

    /// Gracefully stops the app and returns its shutdown report with the
    /// database and wallet, for a restart.
    pub async fn stop(mut self) -> (ShutdownReport, TestDb, fake_wallet::FakeWalletHandle) {
        self.shutdown.cancel();
        let report = self
            .task
            .take()
            .expect("running")
            .await
            .expect("app task")
            .expect("clean shutdown");
        (report, self.db, self.wallet)
    }

    /// Rows in `table` whose `column` equals `value`.
    pub async fn count(&self, table: &str, column: &str, value: &str) -> i64 {
        count(&self.pool, table, column, value).await
    }
}

/// Rows in `table` whose `column` equals `value`.
pub async fn count(pool: &MySqlPool, table: &str, column: &str, value: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table} WHERE {column} = ?"))
        .bind(value)
        .fetch_one(pool)
        .await
        .expect("count rows")
}

/// The room's state as the gateway sees it (GetRoom); panics if the call fails.
pub async fn room_state(client: &mut RoomServiceClient<Channel>, room_id: &str) -> RoomSnapshot {
    client
        .get_room(GetRoomRequest {
            room_id: room_id.to_string(),
        })
        .await
        .unwrap_or_else(|status| panic!("GetRoom {room_id}: {status}"))
        .into_inner()
}

/// Polls `condition` until it holds or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if condition().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn meta(command_id: &str) -> Option<CommandMeta> {
    Some(CommandMeta {
        command_id: command_id.into(),
        request_id: testkit::unique("req-"),
        app_code: String::new(),
    })
}

pub fn create(room_id: &str, owner_id: &str) -> CreateRoomRequest {
    CreateRoomRequest {
        meta: meta(&testkit::unique("create-")),
        room_id: room_id.into(),
        owner_id: owner_id.into(),
        title: "test room".into(),
        mic_seat_count: 8,
    }
}

pub fn join(room_id: &str, user_id: &str) -> JoinRoomRequest {
    JoinRoomRequest {
        meta: meta(&testkit::unique("join-")),
        room_id: room_id.into(),
        user_id: user_id.into(),
    }
}

pub fn gift(
    room_id: &str,
    command_id: &str,
    sender: &str,
    receiver: &str,
    count: i64,
    unit_value: i64,
) -> SendGiftRequest {
    SendGiftRequest {
        meta: meta(command_id),
        room_id: room_id.into(),
        sender_id: sender.into(),
        receiver_id: receiver.into(),
        gift_id: "rose".into(),
        count,
        unit_value,
    }
}

/// Creates `room_id` owned by `owner` with `members` joined.
pub async fn room_with_members(
    client: &mut RoomServiceClient<Channel>,
    room_id: &str,
    owner: &str,
    members: &[&str],
) {
    client
        .create_room(create(room_id, owner))
        .await
        .expect("create room");
    for member in members {
        client
            .join_room(join(room_id, member))
            .await
            .expect("join room");
    }
}

/// A TCP proxy in front of MySQL or Redis that a test can cut (every
/// connection dropped, new ones refused) and restore, to simulate an outage.
pub struct Proxy {
    pub addr: std::net::SocketAddr,
    state: std::sync::Arc<std::sync::Mutex<(bool, CancellationToken)>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Proxies to `target` (`host:port`).
    pub async fn start(target: String) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = std::sync::Arc::new(std::sync::Mutex::new((false, CancellationToken::new())));
        let shared = std::sync::Arc::clone(&state);
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let (cut, token) = {
                    let guard = shared.lock().unwrap();
                    (guard.0, guard.1.clone())
                };
                if cut {
                    continue; // dropping the socket refuses the connection
                }
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        () = token.cancelled() => {}
                    }
                });
            }
        });
        Proxy {
            addr,
            state,
            accept,
        }
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        let mut guard = self.state.lock().unwrap();
        guard.0 = true;
        guard.1.cancel();
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        let mut guard = self.state.lock().unwrap();
        *guard = (false, CancellationToken::new());
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// The node id in a reply's `x-room-served-by`.
pub fn served_by<T>(response: &tonic::Response<T>) -> String {
    response
        .metadata()
        .get(room_service::forward::SERVED_BY)
        .expect("x-room-served-by")
        .to_str()
        .unwrap()
        .to_owned()
}

/// A connected Redis client of its own (the tests read and plant keys).
pub async fn redis_client(url: &str) -> fred::clients::Client {
    use fred::prelude::*;
    let client = fred::clients::Client::new(
        fred::types::config::Config::from_url(url).unwrap(),
        None,
        None,
        None,
    );
    client.init().await.unwrap();
    client
}
