//! Scenario 6, `memory`: peak RSS (`VmHWM` of `/proc/<pid>/status`) of the
//! real service binaries, each its own process, read at the end of a load:
//! the relay draining a pre-filled backlog, each consumer draining a
//! pre-filled topic, and room-service holding 10,000 freshly created rooms.
//! The binaries are taken from the bench binary's own target directory
//! (`cargo xtask bench` builds them in release first); a missing binary is
//! reported as not measured, never guessed.

use crate::{
    consumers::{self, IM_ADMIN, IM_APP_ID, IM_KEY, Kind, OffsetWatcher},
    fixtures::{self, BenchEnv},
    relay_scenarios::{create_topic, mq_config},
    report::{Report, Row},
};
use hyapp_api::room::{CommandMeta, CreateRoomRequest, room_service_client::RoomServiceClient};
use outbox_schema::names;
use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

const MIB: f64 = 1024.0 * 1024.0;

/// A spawned service binary, killed (by its own pid) on drop.
#[derive(Debug)]
struct Service(Child);

impl Service {
    fn spawn(binary: &PathBuf, env: &[(String, String)]) -> anyhow::Result<Self> {
        let child = Command::new(binary)
            .envs(env.iter().map(|(key, value)| (key, value)))
            .current_dir(binary.parent().unwrap_or(std::path::Path::new(".")))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(Self(child))
    }

    /// Peak resident set size so far, bytes.
    fn peak_rss(&self) -> anyhow::Result<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id()))?;
        let kib: f64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("no VmHWM in /proc status"))?;
        Ok(kib * 1024.0)
    }

    fn ensure_alive(&mut self, name: &str) -> anyhow::Result<()> {
        if let Some(status) = self.0.try_wait()? {
            anyhow::bail!("{name} exited early: {status}");
        }
        Ok(())
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The service binary `name` beside the bench's own, if built.
pub fn binary(name: &str) -> Option<PathBuf> {
    let path = std::env::current_exe().ok()?.parent()?.join(name);
    path.exists().then_some(path)
}

fn kv(key: impl Into<String>, value: impl ToString) -> (String, String) {
    (key.into(), value.to_string())
}

fn row(name: &str, target_mib: f64, measured: Option<f64>, note: String) -> Row {
    match measured {
        Some(bytes) => Row {
            scenario: format!("memory {name}"),
            metric: "peak MiB".into(),
            measured: bytes / MIB,
            target: Some(format!("<= {target_mib} MiB")),
            baseline: None,
            ratio: None,
            pass: Some(bytes / MIB <= target_mib),
            note,
        },
        None => Row {
            scenario: format!("memory {name}"),
            metric: "peak MiB".into(),
            measured: f64::NAN,
            target: Some(format!("<= {target_mib} MiB")),
            baseline: None,
            ratio: None,
            pass: None,
            note: format!("NOT MEASURED: {note}"),
        },
    }
}

/// Runs scenario 6.
pub async fn memory(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    let (events, rooms) = if env.smoke {
        (2_000, 50)
    } else {
        (50_000, 200)
    };
    println!("memory: relay and consumers over {events} events, room-service with rooms loaded");
    report.add(relay(env, events, rooms).await?);
    for result in consumer_rows(env, events, rooms).await? {
        report.add(result);
    }
    report.add(room_service(env).await?);
    Ok(())
}

fn broker_env(prefix: &str, env: &BenchEnv, db: &str, namespace: &str) -> Vec<(String, String)> {
    vec![
        kv(
            format!("{prefix}__MYSQL__URL"),
            format!("{}/{db}", env.mysql),
        ),
        kv(format!("{prefix}__ROCKETMQ__ENABLED"), true),
        kv(format!("{prefix}__ROCKETMQ__NAME_SERVERS"), &env.bootstrap),
        kv(format!("{prefix}__ROCKETMQ__NAMESPACE"), namespace),
        kv(format!("{prefix}__HTTP_LISTEN"), "127.0.0.1:0"),
    ]
}

async fn relay(env: &BenchEnv, events: usize, rooms: usize) -> anyhow::Result<Row> {
    let Some(path) = binary("outbox-relay") else {
        return Ok(row("outbox-relay", 64.0, None, "binary not built".into()));
    };
    let (pool, db) = fixtures::fresh_database(env).await?;
    fixtures::prefill(&pool, rooms, events).await?;
    let namespace = format!(
        "benchmem{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    create_topic(
        &env.bootstrap,
        &mq_config(env, &namespace).topic(names::TOPIC_ROOM_OUTBOX),
    )
    .await?;
    let mut service_env = broker_env("RELAY", env, &db, &namespace);
    service_env.extend([
        kv("RELAY__ROCKETMQ__ROOM_OUTBOX__ENABLED", true),
        kv("RELAY__OUTBOX_WORKER__ENABLED", true),
        kv("RELAY__OUTBOX_WORKER__PUBLISH_MODE", "mq"),
        kv("RELAY__OUTBOX_WORKER__REDIS_URL", &env.redis),
        kv("RELAY__OUTBOX_WORKER__NODE_ID", format!("bench-mem-{db}")),
    ]);
    let mut service = Service::spawn(&path, &service_env)?;
    let deadline = Instant::now() + Duration::from_secs(if env.smoke { 60 } else { 300 });
    while fixtures::oldest_open_id(&pool).await?.is_some() {
        service.ensure_alive("outbox-relay")?;
        anyhow::ensure!(Instant::now() < deadline, "relay did not drain in time");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let peak = service.peak_rss()?;
    drop(service);
    pool.close().await;
    fixtures::drop_database(env, &db).await?;
    Ok(row(
        "outbox-relay",
        64.0,
        Some(peak),
        format!("after draining {events} rows / {rooms} rooms; default config, mq mode"),
    ))
}

async fn consumer_rows(env: &BenchEnv, events: usize, rooms: usize) -> anyhow::Result<Vec<Row>> {
    let (pool, db) = fixtures::fresh_database(env).await?;
    let namespace = format!(
        "benchmem{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let mq = mq_config(env, &namespace);
    let topic = mq.topic(names::TOPIC_ROOM_OUTBOX);
    create_topic(&env.bootstrap, &topic).await?;
    consumers::prefill_topic(env, &topic, events, rooms, 10).await?;
    let fake = consumers::fake_im().await?;
    consumers::create_im_groups(&fake, rooms).await?;
    let mut rows = Vec::new();
    for kind in Kind::ALL {
        let Some(path) = binary(kind.name()) else {
            rows.push(row(kind.name(), 64.0, None, "binary not built".into()));
            continue;
        };
        let prefix = match kind {
            Kind::Activity => "ACTIVITY",
            Kind::Notice => "NOTICE",
            Kind::ImBridge => "IM_BRIDGE",
        };
        let group = format!(
            "bench-mem-{}-{}",
            kind.name(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        create_topic(&env.bootstrap, &mq.topic(&names::dead_letter_topic(&group))).await?;
        let mut service_env = broker_env(prefix, env, &db, &namespace);
        service_env.extend([
            kv(format!("{prefix}__CONSUMER__GROUP"), &group),
            kv(format!("{prefix}__CONSUMER__COMMIT_INTERVAL"), "100ms"),
            kv(format!("{prefix}__TENCENT_IM__ENABLED"), true),
            kv(format!("{prefix}__TENCENT_IM__BASE_URL"), fake.base_url()),
            kv(format!("{prefix}__TENCENT_IM__SDK_APP_ID"), IM_APP_ID),
            kv(format!("{prefix}__TENCENT_IM__SECRET_KEY"), IM_KEY),
            kv(format!("{prefix}__TENCENT_IM__ADMIN_IDENTIFIER"), IM_ADMIN),
            kv(
                format!("{prefix}__TENCENT_IM__RATE_LIMIT_PER_API"),
                1_000_000,
            ),
        ]);
        if kind == Kind::Activity {
            service_env.push(kv("ACTIVITY__GRPC_LISTEN", "127.0.0.1:0"));
        }
        let watcher = OffsetWatcher::new(&env.bootstrap, &group, &topic)?;
        let mut service = Service::spawn(&path, &service_env)?;
        let deadline = Instant::now() + Duration::from_secs(if env.smoke { 60 } else { 600 });
        while watcher.committed().await? < events as i64 {
            service.ensure_alive(kind.name())?;
            anyhow::ensure!(Instant::now() < deadline, "{} did not drain", kind.name());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        rows.push(row(
            kind.name(),
            64.0,
            Some(service.peak_rss()?),
            format!("after draining {events} events (10% kicks)"),
        ));
    }
    pool.close().await;
    fixtures::drop_database(env, &db).await?;
    Ok(rows)
}

async fn room_service(env: &BenchEnv) -> anyhow::Result<Row> {
    let rooms = if env.smoke { 200 } else { 10_000 };
    let Some(path) = binary("room-service") else {
        return Ok(row("room-service", 512.0, None, "binary not built".into()));
    };
    let (pool, db) = fixtures::fresh_database(env).await?;
    pool.close().await;
    let wallet = fake_wallet::spawn(fake_wallet::FakeWalletConfig::default()).await?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let service_env = vec![
        kv("ROOM__MYSQL__URL", format!("{}/{db}", env.mysql)),
        kv("ROOM__REDIS__URL", &env.redis),
        kv("ROOM__GRPC_LISTEN", format!("127.0.0.1:{port}")),
        kv("ROOM__HTTP_LISTEN", "127.0.0.1:0"),
        kv("ROOM__NODE_ID", format!("bench-mem-{db}")),
        kv("ROOM__WALLET__ENDPOINT", wallet.endpoint()),
        kv("ROOM__TENCENT_IM__ENABLED", false),
        kv("ROOM__OUTBOX_WORKER__ENABLED", false),
    ];
    let mut service = Service::spawn(&path, &service_env)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let client = loop {
        match RoomServiceClient::connect(format!("http://127.0.0.1:{port}")).await {
            Ok(client) => break client,
            Err(error) => {
                service.ensure_alive("room-service")?;
                anyhow::ensure!(Instant::now() < deadline, "room-service not up: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let idle = service.peak_rss()?;
    // Room leases live in Redis and outlast a killed process: fresh ids per run.
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let mut tasks = Vec::new();
    for task in 0..32 {
        let mut client = client.clone();
        let run = run.clone();
        tasks.push(tokio::spawn(async move {
            for room in (task..rooms).step_by(32) {
                client
                    .create_room(CreateRoomRequest {
                        meta: Some(CommandMeta {
                            command_id: format!("create-mem-{run}-{room}"),
                            request_id: String::new(),
                            app_code: "hyapp".into(),
                        }),
                        room_id: format!("mem-{run}-{room}"),
                        owner_id: "host".into(),
                        title: "memory".into(),
                        mic_seat_count: 8,
                    })
                    .await?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let peak = service.peak_rss()?;
    drop(service);
    drop(wallet);
    fixtures::drop_database(env, &db).await?;
    let mut result = row(
        "room-service",
        512.0,
        Some(peak),
        format!(
            "{rooms} rooms created via gRPC and held (idle_ttl 300s); idle peak {:.1} MiB",
            idle / MIB
        ),
    );
    result.baseline = Some(idle / MIB);
    Ok(result)
}
