//! The platform in-process, as the alert scenarios break it: room-service,
//! outbox-relay (mq mode) and the three consumers against one fresh
//! database, the real broker (topics in a namespace of their own, groups of
//! their own), the shared Redis, the fake wallet and the fake Tencent IM.
//! Each service's admin HTTP is a scrape target, named by its job.

use consumer_runtime::ConsumerConfig;
use fake_tencent_im::{FakeImConfig, FakeImHandle};
use outbox_schema::names;
use service_kit::{Secret, db::MysqlConfig, duration::ConfigDuration, mq::MqConfig};
use std::{collections::BTreeMap, net::SocketAddr, time::Duration};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The scrape jobs, as alerts.yml names them.
pub const JOBS: [&str; 5] = [
    "room-service",
    "outbox-relay",
    "im-bridge",
    "activity-consumer",
    "notice-consumer",
];

const IM_APP_ID: u64 = 1_400_000_077;
const IM_KEY: &str = "alerts-im-key";
const IM_ADMIN: &str = "administrator";

/// What a scenario changes in the services' configuration.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// The relay's broker address instead of the real one (a closed port:
    /// the relay cannot publish).
    pub relay_bootstrap: Option<String>,
    /// im-bridge retries every 20 ms and never gives a message up.
    pub bridge_retries_forever: bool,
    /// room-service's `saga.max_refund_attempts` instead of the default.
    pub refund_attempts: Option<u32>,
}

/// A started service: its admin address, its shutdown token and its task.
type Started = (SocketAddr, (CancellationToken, JoinHandle<()>));

struct Running {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

/// The running platform.
pub struct Stack {
    pub db: testkit::TestDb,
    pub im: FakeImHandle,
    pub wallet: fake_wallet::FakeWalletHandle,
    pub mq: MqConfig,
    /// `job → consumer group` of the three consumers.
    pub groups: BTreeMap<&'static str, String>,
    pub grpc: String,
    /// Targets service discovery lists: `job → admin address`.
    pub targets: BTreeMap<&'static str, SocketAddr>,
    running: BTreeMap<&'static str, Running>,
}

fn spawn<F, E>(run: F) -> (CancellationToken, JoinHandle<()>)
where
    F: FnOnce(CancellationToken) -> JoinHandle<Result<(), E>>,
    E: std::fmt::Display + Send + 'static,
{
    let shutdown = CancellationToken::new();
    let task = run(shutdown.clone());
    let watcher = tokio::spawn(async move {
        if let Ok(Err(error)) = task.await {
            eprintln!("service stopped with an error: {error}");
        }
    });
    (shutdown, watcher)
}

impl Stack {
    /// Starts everything; returns once every service was built and runs.
    pub async fn start(setup: &Setup) -> Stack {
        let db = testkit::TestDb::new().await;
        let im = fake_tencent_im::spawn(FakeImConfig::new(IM_APP_ID, IM_KEY, IM_ADMIN))
            .await
            .expect("fake IM");
        im.set_rate_limit(None);
        let wallet = fake_wallet::spawn(fake_wallet::FakeWalletConfig::default())
            .await
            .expect("fake wallet");
        let mut mq = MqConfig {
            enabled: true,
            name_servers: vec![testkit::kafka_bootstrap()],
            namespace: testkit::unique("alerts"),
            send_timeout: ConfigDuration::from_secs(1),
            ..MqConfig::default()
        };
        mq.room_outbox.enabled = true;
        testkit::create_topic(&mq.topic(names::TOPIC_ROOM_OUTBOX), 3).await;
        let groups: BTreeMap<&'static str, String> = JOBS[2..]
            .iter()
            .map(|job| (*job, testkit::unique(&format!("{job}-"))))
            .collect();
        for group in groups.values() {
            testkit::create_topic(&mq.topic(&names::dead_letter_topic(group)), 1).await;
        }
        let mut stack = Stack {
            db,
            im,
            wallet,
            mq,
            groups,
            grpc: String::new(),
            targets: BTreeMap::new(),
            running: BTreeMap::new(),
        };
        for job in JOBS {
            stack.start_service(job, setup).await;
        }
        stack
    }

    async fn start_service(&mut self, job: &'static str, setup: &Setup) {
        let mysql = service_kit::db::MysqlConfig {
            url: self.db.url.clone(),
            max_connections: 6,
            ..service_kit::db::MysqlConfig::default()
        };
        let (addr, (shutdown, task)) = match job {
            "room-service" => self.start_room_service(mysql, setup).await,
            "outbox-relay" => self.start_relay(mysql, setup).await,
            consumer => self.start_consumer(consumer, mysql, setup).await,
        };
        self.targets.insert(job, addr);
        self.running.insert(
            job,
            Running {
                addr,
                shutdown,
                task,
            },
        );
    }

    async fn start_room_service(&mut self, mysql: MysqlConfig, setup: &Setup) -> Started {
        let mut config = room_service::Config::default();
        config.mysql = mysql;
        config.redis.url = testkit::redis_url();
        config.redis.key_prefix = self.db.name.clone();
        config.grpc_listen = "127.0.0.1:0".into();
        config.http_listen = "127.0.0.1:0".into();
        config.node_id = testkit::unique("node-");
        config.wallet.endpoint = self.wallet.endpoint();
        config.outbox_worker.enabled = false;
        config.tencent_im.enabled = false;
        config.saga.sweep_interval = ConfigDuration::from_millis(500);
        if let Some(attempts) = setup.refund_attempts {
            config.saga.max_refund_attempts = attempts;
        }
        let config = config.validate().expect("valid room-service config");
        let app = room_service::App::build(config)
            .await
            .expect("room-service");
        self.grpc = format!("http://{}", app.grpc_addr());
        let addr = app.http_addr();
        let running = spawn(|token| tokio::spawn(async move { app.run(token).await.map(|_| ()) }));
        (addr, running)
    }

    async fn start_relay(&self, mysql: MysqlConfig, setup: &Setup) -> Started {
        let mut mq = self.mq.clone();
        if let Some(bootstrap) = &setup.relay_bootstrap {
            mq.name_servers = vec![bootstrap.clone()];
        }
        let config = outbox_relay::config::RelayServiceConfig {
            mysql,
            rocketmq: mq,
            outbox_worker: outbox_relay::config::OutboxWorkerConfig {
                publish_mode: "mq".into(),
                poll_interval: ConfigDuration::from_millis(50),
                publish_timeout: ConfigDuration::from_secs(1),
                // A broker outage must not turn rows into dead letters here.
                max_retry_count: 1_000_000,
                retry_strategy: "fixed_interval".into(),
                initial_backoff: ConfigDuration::from_millis(100),
                max_backoff: ConfigDuration::from_millis(100),
                nudge_enabled: false,
                node_id: testkit::unique("relay-"),
                ..Default::default()
            },
            http_listen: "127.0.0.1:0".into(),
            ..Default::default()
        };
        let app = outbox_relay::app::App::build(config).await.expect("relay");
        let addr = app.http_addr().expect("relay admin address");
        (addr, spawn(|token| tokio::spawn(app.run(token))))
    }

    async fn start_consumer(&self, consumer: &str, mysql: MysqlConfig, setup: &Setup) -> Started {
        let mut section = ConsumerConfig {
            group: self.groups[consumer].clone(),
            commit_interval: ConfigDuration::from_millis(100),
            session_timeout: ConfigDuration::from_secs(6),
            initial_backoff: ConfigDuration::from_millis(50),
            max_backoff: ConfigDuration::from_millis(400),
            ..ConsumerConfig::default()
        };
        let mut mq = self.mq.clone();
        if consumer == "im-bridge" && setup.bridge_retries_forever {
            section.initial_backoff = ConfigDuration::from_millis(20);
            section.max_backoff = ConfigDuration::from_millis(20);
            mq.room_outbox.consumer_max_reconsume_times = 1_000_000;
        }
        let im = service_kit_im(&self.im);
        let http_listen = "127.0.0.1:0".to_string();
        match consumer {
            "im-bridge" => {
                let config = im_bridge::config::Config {
                    mysql,
                    rocketmq: mq,
                    consumer: section,
                    tencent_im: im,
                    http_listen,
                    ..Default::default()
                };
                let app = im_bridge::App::build(config).await.expect("im-bridge");
                let addr = app.admin_addr().expect("admin address");
                (addr, spawn(|token| tokio::spawn(app.run(token))))
            }
            "activity-consumer" => {
                let config = activity_consumer::config::Config {
                    mysql,
                    rocketmq: mq,
                    consumer: section,
                    tencent_im: im,
                    grpc_listen: "127.0.0.1:0".into(),
                    http_listen,
                    ..Default::default()
                };
                let app = activity_consumer::App::build(config)
                    .await
                    .expect("activity-consumer");
                let addr = app.admin_addr().expect("admin address");
                (addr, spawn(|token| tokio::spawn(app.run(token))))
            }
            _ => {
                let config = notice_consumer::config::Config {
                    mysql,
                    rocketmq: mq,
                    consumer: section,
                    tencent_im: im,
                    http_listen,
                    ..Default::default()
                };
                let app = notice_consumer::App::build(config)
                    .await
                    .expect("notice-consumer");
                let addr = app.admin_addr().expect("admin address");
                (addr, spawn(|token| tokio::spawn(app.run(token))))
            }
        }
    }

    /// Stops `job` gracefully; its target stays listed (its scrapes fail).
    pub async fn stop(&mut self, job: &str) {
        let running = self.running.remove(job).expect("running service");
        running.shutdown.cancel();
        running.task.await.expect("service task");
        // Nothing answers on the port any more.
        assert!(
            tokio::net::TcpStream::connect(running.addr).await.is_err(),
            "{job} still listens"
        );
    }

    /// Stops everything that still runs.
    pub async fn stop_all(mut self) {
        for job in JOBS {
            if self.running.contains_key(job) {
                self.stop(job).await;
            }
        }
    }

    /// The admin `/metrics` of `addr`, `None` when the scrape fails.
    pub async fn scrape(addr: SocketAddr) -> Option<String> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .ok()?;
        let response = client
            .get(format!("http://{addr}/metrics"))
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            return None;
        }
        response.text().await.ok()
    }
}

/// The `tencent_im` section of a consumer, pointing at the fake IM.
fn service_kit_im(im: &FakeImHandle) -> tencent_im::ImSection {
    tencent_im::ImSection {
        enabled: true,
        base_url: im.base_url(),
        sdk_app_id: IM_APP_ID,
        admin_identifier: IM_ADMIN.into(),
        secret_key: Secret::new(IM_KEY),
        rate_limit_per_api: 1_000_000,
        ..Default::default()
    }
}
