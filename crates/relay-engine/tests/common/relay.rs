//! Shared fixtures of the relay tests: outbox rows as room-service writes
//! them, relays wired to a real database and broker, and a topic reader.
//! The engine's tests, the relay service's operator and console tests and
//! activity-consumer's direct-entry test all include this one file.

use outbox_schema::{EnvelopeContext, NewOutboxRow, envelope_for, names};
use rdkafka::{
    ClientConfig, Message,
    consumer::{Consumer, StreamConsumer},
    message::Headers,
};
use relay_engine::{
    Relay, RelaySettings,
    config::OutboxWorkerConfig,
    metrics::RelayMetrics,
    publish::{MqPublisher, Publishers},
};
use room_core::{EventKind, RoomEvent};
use service_kit::{duration::ConfigDuration, mq::MqConfig, time::now_ms};
use sqlx::MySqlPool;
use std::time::Duration;

/// A broker namespace private to one test, so topics never collide.
pub fn mq_config(bootstrap: &str, namespace: &str) -> MqConfig {
    let mut mq = MqConfig {
        enabled: true,
        name_servers: vec![bootstrap.to_string()],
        namespace: namespace.to_string(),
        send_timeout: ConfigDuration::from_secs(2),
        ..MqConfig::default()
    };
    mq.room_outbox.enabled = true;
    mq.treasure_open.enabled = true;
    mq
}

/// Fast settings for tests: fixed 1 ms backoff, short leases, no Redis nudge.
pub fn worker_config(node_id: &str) -> OutboxWorkerConfig {
    OutboxWorkerConfig {
        publish_mode: "mq".into(),
        poll_interval: ConfigDuration::from_millis(50),
        batch_size: 100,
        publish_timeout: ConfigDuration::from_secs(2),
        retry_strategy: "fixed_interval".into(),
        max_retry_count: 3,
        initial_backoff: ConfigDuration::from_millis(1),
        max_backoff: ConfigDuration::from_millis(1),
        claim_lease: ConfigDuration::from_secs(30),
        shard_lease: ConfigDuration::from_secs(10),
        nudge_enabled: false,
        node_id: node_id.to_string(),
        ..OutboxWorkerConfig::default()
    }
}

/// A relay in `mq` mode against `pool` and `mq`.
pub fn mq_relay(pool: &MySqlPool, mq: &MqConfig, worker: &OutboxWorkerConfig) -> Relay {
    let settings = RelaySettings::from_config(worker, mq).expect("valid settings");
    let publishers = Publishers {
        mq: Some(MqPublisher::new(mq, settings.publish_timeout).expect("producer")),
        direct: None,
    };
    let mut registry = prometheus_client::registry::Registry::default();
    Relay::new(
        pool.clone(),
        settings,
        publishers,
        RelayMetrics::register(&mut registry),
    )
}

/// Makes `relay` own every shard now (what its lease loop does when alone).
pub async fn own_all_shards(relay: &Relay) -> Vec<u16> {
    relay.leases().ensure_shards().await.unwrap();
    let shards = relay.leases().refresh(now_ms()).await.unwrap();
    assert_eq!(shards.len(), usize::from(outbox_schema::OUTBOX_SHARDS));
    shards
}

/// `count` RoomUserJoined rows for `room_id` with sequences `first_seq..`.
pub fn room_rows(room_id: &str, first_seq: u64, count: u64) -> Vec<NewOutboxRow> {
    (first_seq..first_seq + count)
        .map(|seq| {
            event_row(
                room_id,
                seq,
                EventKind::RoomUserJoined {
                    user_id: format!("u{seq}"),
                },
            )
        })
        .collect()
}

/// One outbox row carrying `kind` as event `seq` of `room_id`, as room-service writes it.
pub fn event_row(room_id: &str, seq: u64, kind: EventKind) -> NewOutboxRow {
    let now = now_ms();
    let context = EnvelopeContext {
        app_code: "hyapp".into(),
        room_id: room_id.into(),
        room_version: seq,
        command_id: format!("cmd-{room_id}-{seq}"),
        occurred_at_ms: now,
        traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
        ..EnvelopeContext::default()
    };
    let event = RoomEvent { seq, kind };
    let envelope = envelope_for(&context, uuid::Uuid::now_v7().to_string(), &event);
    NewOutboxRow::event(&envelope, now)
}

/// Inserts rows as room-service does (one transaction).
pub async fn insert(pool: &MySqlPool, rows: &[NewOutboxRow]) {
    let mut tx = pool.begin().await.unwrap();
    outbox_store::insert_outbox_rows(&mut tx, rows)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

/// One consumed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub key: String,
    pub event_id: String,
    pub event_type: String,
    pub traceparent: String,
    pub payload: Vec<u8>,
}

/// Reads exactly `count` records from `topic` (from the beginning), failing
/// after 60 s without progress. Afterwards checks nothing more arrives
/// within a short grace period when `expect_no_more`.
pub async fn read_topic(bootstrap: &str, topic: &str, count: usize) -> Vec<Received> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", testkit::unique("reader_"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let mut received = Vec::with_capacity(count);
    while received.len() < count {
        let message = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
            .await
            .unwrap_or_else(|_| panic!("only {} of {count} records on {topic}", received.len()))
            .unwrap();
        let header = |name: &str| {
            message
                .headers()
                .and_then(|headers| headers.iter().find(|header| header.key == name))
                .and_then(|header| header.value)
                .map(|value| String::from_utf8_lossy(value).into_owned())
                .unwrap_or_default()
        };
        received.push(Received {
            key: String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned(),
            event_id: header(names::HEADER_EVENT_ID),
            event_type: header(names::HEADER_EVENT_TYPE),
            traceparent: header(names::HEADER_TRACEPARENT),
            payload: message.payload().unwrap_or_default().to_vec(),
        });
    }
    received
}

/// Reads until `distinct` different event ids were seen (at-least-once:
/// duplicates are allowed and returned too).
pub async fn read_distinct(bootstrap: &str, topic: &str, distinct: usize) -> Vec<Received> {
    let mut records = Vec::new();
    let mut seen = std::collections::HashSet::new();
    // read_topic(count) is cumulative from the start, so grow the window.
    while seen.len() < distinct {
        records = read_topic(bootstrap, topic, records.len() + (distinct - seen.len())).await;
        seen = records
            .iter()
            .map(|record| record.event_id.clone())
            .collect();
    }
    records
}

/// Asserts a room's observed sequence never goes backwards (duplicates of
/// the event just seen are at-least-once redeliveries, allowed).
pub fn assert_never_backwards(room: &str, sequences: &[u64]) {
    for pair in sequences.windows(2) {
        assert!(
            pair[1] >= pair[0],
            "room {room} went backwards: {sequences:?}"
        );
    }
}

/// Room sequences per room, in the order they appear on the topic.
pub fn sequences_by_room(records: &[Received]) -> std::collections::BTreeMap<String, Vec<u64>> {
    let mut by_room: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for record in records {
        let envelope =
            outbox_schema::decode_envelope(&record.payload).expect("valid envelope on the topic");
        assert_eq!(envelope.room_id, record.key, "key is the room id");
        assert_eq!(
            envelope.event_id, record.event_id,
            "event_id header matches the envelope"
        );
        by_room
            .entry(envelope.room_id)
            .or_default()
            .push(envelope.room_event_seq);
    }
    by_room
}

/// Status of every row of `room_id`, by sequence.
pub async fn statuses(pool: &MySqlPool, room_id: &str) -> Vec<(u64, String)> {
    sqlx::query_as(
        "SELECT room_event_seq, status FROM room_outbox WHERE room_id = ? AND lane = 0 ORDER BY id",
    )
    .bind(room_id)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Count of rows still open (pending/delivering/retryable).
pub async fn open_rows(pool: &MySqlPool) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM room_outbox WHERE open_flag = 1")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Test identity of the fake Tencent IM.
pub const IM_APP_ID: u64 = 1_400_000_123;
/// Signing key shared by the fake and the client.
pub const IM_KEY: &str = "relay-test-key";

/// A relay in `direct` mode whose IM sink talks to `fake`.
pub fn direct_relay(pool: &MySqlPool, fake_base_url: &str, worker: &OutboxWorkerConfig) -> Relay {
    direct_relay_with(
        pool,
        fake_base_url,
        worker,
        room_im::BridgeConfig::default(),
    )
}

/// [`direct_relay`] with the given `direct.im_bridge` settings.
pub fn direct_relay_with(
    pool: &MySqlPool,
    fake_base_url: &str,
    worker: &OutboxWorkerConfig,
    im_bridge: room_im::BridgeConfig,
) -> Relay {
    let mut worker = worker.clone();
    worker.publish_mode = "direct".into();
    let direct = relay_engine::config::DirectConfig {
        tencent_im: tencent_im::ImSection {
            enabled: true,
            base_url: fake_base_url.into(),
            sdk_app_id: IM_APP_ID,
            secret_key: service_kit::Secret::new(IM_KEY),
            ..tencent_im::ImSection::default()
        },
        activity_endpoint: String::new(),
        im_bridge,
        ..relay_engine::config::DirectConfig::default()
    };
    let mut registry = prometheus_client::registry::Registry::default();
    relay_engine::build_relay(
        pool.clone(),
        &worker,
        &MqConfig::default(),
        &direct,
        &mut registry,
    )
    .expect("direct relay")
}

/// Tencent IM's group message API, as fault rules name it.
pub const SEND_GROUP_MSG: &str = "group_open_http_svc/send_group_msg";

/// A faithful fake of Tencent IM for this app id and key.
pub async fn fake_im() -> fake_tencent_im::FakeImHandle {
    fake_tencent_im::spawn(fake_tencent_im::FakeImConfig::new(
        IM_APP_ID,
        IM_KEY,
        "administrator",
    ))
    .await
    .unwrap()
}

/// The `RoomCreated` row that opens a room's chain.
pub fn created(room_id: &str) -> outbox_schema::NewOutboxRow {
    event_row(
        room_id,
        1,
        EventKind::RoomCreated {
            owner_id: "host".into(),
            title: "Lounge".into(),
            mic_seat_count: 8,
        },
    )
}

/// Runs batches until no row is open (30 s guard against a stuck relay).
pub async fn drain(relay: &Relay, pool: &sqlx::MySqlPool, shards: &[u16]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while open_rows(pool).await > 0 {
        assert!(std::time::Instant::now() < deadline, "relay did not drain");
        relay.run_batch(shards).await.unwrap();
    }
}
