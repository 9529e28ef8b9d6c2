//! What the consumer scenarios share: an in-process fake Tencent IM with its
//! rate limit lifted, the three consumers (activity, notice, im-bridge) built
//! in-process against one database and namespace, a pre-filled topic of room
//! envelopes, and a watcher of a group's committed offsets.

use crate::{
    fixtures::{self, BenchEnv},
    relay_scenarios::PARTITIONS,
};
use consumer_runtime::ConsumerConfig;
use fake_tencent_im::{FakeImConfig, FakeImHandle};
use rdkafka::{
    ClientConfig, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer as _},
    producer::{FutureProducer, FutureRecord},
};
use service_kit::{duration::ConfigDuration, mq::MqConfig, time::now_ms};
use std::{sync::Arc, time::Duration};
use tencent_im::ImSection as TencentImSection;
use tokio_util::sync::CancellationToken;

/// Identity of the in-process fake IM.
pub const IM_APP_ID: u64 = 1_400_000_077;
/// Its signing key.
pub const IM_KEY: &str = "bench-im-key";
/// Its admin account.
pub const IM_ADMIN: &str = "administrator";

/// Starts the fake IM with no server-side rate limit.
pub async fn fake_im() -> anyhow::Result<FakeImHandle> {
    let fake = fake_tencent_im::spawn(FakeImConfig::new(IM_APP_ID, IM_KEY, IM_ADMIN)).await?;
    fake.set_rate_limit(None);
    Ok(fake)
}

/// The `tencent_im` section pointing at the fake, client-side limit lifted.
pub fn im_section(fake: &FakeImHandle) -> TencentImSection {
    TencentImSection {
        enabled: true,
        base_url: fake.base_url(),
        sdk_app_id: IM_APP_ID,
        admin_identifier: IM_ADMIN.into(),
        secret_key: service_kit::Secret::new(IM_KEY),
        rate_limit_per_api: 1_000_000,
        ..TencentImSection::default()
    }
}

/// Creates the room groups im-bridge sends to (`room_{room_id}`).
pub async fn create_im_groups(fake: &FakeImHandle, rooms: usize) -> anyhow::Result<()> {
    let mut config = tencent_im::ClientConfig::new(fake.base_url(), IM_APP_ID, IM_ADMIN, IM_KEY);
    config.rate_limit_per_api = 1_000_000;
    let client = tencent_im::Client::new(config)?;
    for room in 0..rooms {
        client
            .ensure_group(&tencent_im::CreateGroupRequest::av_chat_room(
                format!("room_{}", room_name(room)),
                "bench",
            ))
            .await?;
    }
    Ok(())
}

/// Room ids of the pre-filled topic.
pub fn room_name(room: usize) -> String {
    format!("bench-room-{room}")
}

/// The `consumer` section of a benchmark group: defaults, with fast commits.
pub fn consumer_section(group: &str) -> ConsumerConfig {
    ConsumerConfig {
        group: group.into(),
        commit_interval: ConfigDuration::from_millis(100),
        session_timeout: ConfigDuration::from_secs(6),
        ..ConsumerConfig::default()
    }
}

/// One of the three topic consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// activity-consumer.
    Activity,
    /// notice-consumer.
    Notice,
    /// im-bridge.
    ImBridge,
}

impl Kind {
    /// All three.
    pub const ALL: [Kind; 3] = [Kind::Activity, Kind::Notice, Kind::ImBridge];

    /// Service (and binary) name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Activity => "activity-consumer",
            Kind::Notice => "notice-consumer",
            Kind::ImBridge => "im-bridge",
        }
    }
}

/// Builds and runs `kind` in-process in `group`; cancel the token to stop it.
pub async fn spawn_consumer(
    kind: Kind,
    mysql_url: &str,
    mq: &MqConfig,
    group: &str,
    fake: &FakeImHandle,
) -> anyhow::Result<(CancellationToken, tokio::task::JoinHandle<()>)> {
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let mysql = service_kit::db::MysqlConfig {
        url: mysql_url.into(),
        ..service_kit::db::MysqlConfig::default()
    };
    let handle = match kind {
        Kind::Activity => {
            let config = activity_consumer::config::Config {
                mysql,
                rocketmq: mq.clone(),
                consumer: consumer_section(group),
                tencent_im: im_section(fake),
                grpc_listen: "127.0.0.1:0".into(),
                http_listen: "127.0.0.1:0".into(),
                ..activity_consumer::config::Config::default()
            };
            let app = activity_consumer::App::build(config).await?;
            tokio::spawn(async move {
                if let Err(error) = app.run(token).await {
                    eprintln!("activity-consumer stopped: {error}");
                }
            })
        }
        Kind::Notice => {
            let config = notice_consumer::config::Config {
                mysql,
                rocketmq: mq.clone(),
                consumer: consumer_section(group),
                tencent_im: im_section(fake),
                http_listen: "127.0.0.1:0".into(),
                ..notice_consumer::config::Config::default()
            };
            let app = notice_consumer::App::build(config).await?;
            tokio::spawn(async move {
                if let Err(error) = app.run(token).await {
                    eprintln!("notice-consumer stopped: {error}");
                }
            })
        }
        Kind::ImBridge => {
            let config = im_bridge::config::Config {
                mysql,
                rocketmq: mq.clone(),
                consumer: consumer_section(group),
                tencent_im: im_section(fake),
                http_listen: "127.0.0.1:0".into(),
                ..im_bridge::config::Config::default()
            };
            let app = im_bridge::App::build(config).await?;
            tokio::spawn(async move {
                if let Err(error) = app.run(token).await {
                    eprintln!("im-bridge stopped: {error}");
                }
            })
        }
    };
    Ok((shutdown, handle))
}

/// Produces `total` envelopes over `rooms` rooms to `topic` (idempotent
/// producer, key = room id); every `kick_every`-th event (if non-zero) is a
/// `RoomUserKicked`, the rest gifts.
pub async fn prefill_topic(
    env: &BenchEnv,
    topic: &str,
    total: usize,
    rooms: usize,
    kick_every: usize,
) -> anyhow::Result<()> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &env.bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "2")
        .create()?;
    let now = now_ms();
    let rows: Vec<_> = (0..total)
        .map(|index| {
            let room = room_name(index % rooms);
            let seq = (index / rooms) as u64 + 1;
            if kick_every > 0 && index % kick_every == kick_every - 1 {
                fixtures::kick_row(&room, seq, now)
            } else {
                fixtures::gift_row(&room, seq, now)
            }
        })
        .collect();
    for chunk in rows.chunks(5_000) {
        let sends = chunk.iter().map(|row| {
            producer.send(
                FutureRecord::to(topic)
                    .key(&row.room_id)
                    .payload(&row.payload),
                Duration::from_secs(30),
            )
        });
        for result in futures::future::join_all(sends).await {
            result.map_err(|(error, _)| error)?;
        }
    }
    Ok(())
}

/// Reads a group's committed offsets on a topic (without joining the group).
#[derive(Clone)]
pub struct OffsetWatcher {
    consumer: Arc<BaseConsumer>,
    topic: String,
}

impl std::fmt::Debug for OffsetWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffsetWatcher")
            .field("topic", &self.topic)
            .finish()
    }
}

impl OffsetWatcher {
    /// A watcher of `group` on `topic`.
    pub fn new(bootstrap: &str, group: &str, topic: &str) -> anyhow::Result<Self> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()?;
        Ok(Self {
            consumer: Arc::new(consumer),
            topic: topic.into(),
        })
    }

    /// Sum of committed offsets over all partitions (= messages done, since
    /// every partition starts at 0 on a fresh topic).
    pub async fn committed(&self) -> anyhow::Result<i64> {
        let consumer = Arc::clone(&self.consumer);
        let topic = self.topic.clone();
        tokio::task::spawn_blocking(move || {
            let mut list = TopicPartitionList::new();
            for partition in 0..PARTITIONS {
                list.add_partition(&topic, partition);
            }
            let committed = consumer.committed_offsets(list, Duration::from_secs(5))?;
            Ok(committed
                .elements()
                .iter()
                .map(|element| match element.offset() {
                    Offset::Offset(offset) => offset,
                    _ => 0,
                })
                .sum())
        })
        .await?
    }

    /// Sum of the high watermarks over all partitions: the topic's end, which
    /// the committed offsets reach once the group has consumed everything.
    pub async fn end(&self) -> anyhow::Result<i64> {
        let consumer = Arc::clone(&self.consumer);
        let topic = self.topic.clone();
        tokio::task::spawn_blocking(move || {
            let mut end = 0;
            for partition in 0..PARTITIONS {
                let (_, high) =
                    consumer.fetch_watermarks(&topic, partition, Duration::from_secs(5))?;
                end += high;
            }
            Ok(end)
        })
        .await?
    }

    /// How long after `since` the committed offsets reached the topic's end
    /// (lag 0); call it once the producers are done, so the end stays put.
    pub async fn caught_up_after(
        &self,
        since: std::time::Instant,
        deadline: Duration,
    ) -> anyhow::Result<Duration> {
        let end = self.end().await?;
        loop {
            let committed = self.committed().await?;
            if committed >= end {
                return Ok(since.elapsed());
            }
            let waited = since.elapsed();
            anyhow::ensure!(waited < deadline, "at {committed}/{end} after {waited:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
