//! A relay paused past its shard lease and resumed (SIGSTOP/SIGCONT of the
//! real binary) while another relay took its shards over: in `mq` mode the
//! lease is the claim, so the resumed relay must publish nothing on the lease
//! it lost (its own monotonic clock says the lease is over) and mark nothing
//! (the epoch fences its marks), and only publishes again once it holds a
//! lease of its own. Read back from the topic with a real consumer and from
//! the table.

mod common;

use common::*;
use outbox_schema::names;
use rdkafka::{
    ClientConfig, Message, TopicPartitionList,
    consumer::{Consumer, StreamConsumer},
    message::Headers,
    producer::{FutureProducer, FutureRecord},
};
use service_kit::{db::IdText, mq::MqConfig, time::now_ms};
use sqlx::MySqlPool;
use std::collections::{BTreeMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ROOMS: usize = 12;
const LEASE_MS: u64 = 2_000;

/// A relay binary in `mq` mode against `db` and `mq`, with short leases.
struct RelayProcess {
    child: Child,
    metrics_url: String,
    config: std::path::PathBuf,
}

impl RelayProcess {
    fn start(db: &testkit::TestDb, mq: &MqConfig, node_id: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = testkit::binary::write_config(&format!(
            "mysql:\n  url: \"{url}\"\n\
             http_listen: \"127.0.0.1:{port}\"\n\
             rocketmq:\n  enabled: true\n  name_servers: [\"{bootstrap}\"]\n  namespace: \"{namespace}\"\n  \
             send_timeout: 2s\n  room_outbox:\n    enabled: true\n  treasure_open:\n    enabled: true\n\
             outbox_worker:\n  publish_mode: mq\n  poll_interval: 50ms\n  batch_size: 20\n  \
             publish_timeout: 2s\n  shard_lease: {LEASE_MS}ms\n  nudge_enabled: false\n  node_id: \"{node_id}\"\n",
            url = db.url,
            bootstrap = mq.name_servers[0],
            namespace = mq.namespace,
        ));
        let child = Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
            .arg("--config")
            .arg(&config)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Self {
            child,
            metrics_url: format!("http://127.0.0.1:{port}/metrics"),
            config,
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal}");
    }

    /// A counter of the running process; fails the test, naming it, when
    /// the process does not export it (a renamed metric must not read as 0).
    async fn counter(&self, name: &str) -> f64 {
        testkit::metrics::read(&self.metrics_url, name).await
    }

    fn stop(mut self) {
        self.signal("-CONT");
        self.signal("-TERM");
        let status = self.child.wait().unwrap();
        assert!(status.success(), "relay exited with {status}");
        testkit::binary::remove_config(&self.config);
    }
}

async fn eventually<F: Future<Output = bool>>(what: &str, mut condition: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !condition().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Shards `owner` holds a live lease on, and their epochs.
async fn leases_of(pool: &MySqlPool, owner: &str) -> BTreeMap<u16, u64> {
    sqlx::query_as::<_, (u16, u64)>(
        "SELECT shard, epoch FROM relay_shard_leases WHERE owner = ? AND lease_until_ms > ?",
    )
    .bind(owner)
    .bind(now_ms())
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

/// Rows of each room's next `count` sequences after `done`.
async fn insert_phase(pool: &MySqlPool, rooms: &[String], first_seq: u64, count: u64) -> usize {
    let rows: Vec<_> = rooms
        .iter()
        .flat_map(|room| room_rows(room, first_seq, count))
        .collect();
    insert(pool, &rows).await;
    rows.len()
}

async fn markers(pool: &MySqlPool, first_seq: u64, last_seq: u64) -> HashSet<String> {
    sqlx::query_scalar::<_, IdText>(
        "SELECT DISTINCT claimed_by FROM room_outbox WHERE room_event_seq BETWEEN ? AND ?",
    )
    .bind(first_seq)
    .bind(last_seq)
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .map(String::from)
    .collect()
}

/// Key of the marker records that end each partition's read.
const END_MARKER: &str = "end-of-test-marker";

/// Appends one marker record to each of `partitions`, acknowledged by the
/// broker before this returns.
async fn append_end_markers(bootstrap: &str, topic: &str, partitions: &[i32]) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("message.timeout.ms", "30000")
        .create()
        .unwrap();
    for partition in partitions {
        let record = FutureRecord::to(topic)
            .partition(*partition)
            .key(END_MARKER)
            .payload("");
        producer
            .send(record, Duration::from_secs(30))
            .await
            .unwrap_or_else(|(error, _)| panic!("end marker on partition {partition}: {error}"));
    }
}

/// Every record on `topic`, read to the end of each partition.
///
/// "Quiet" is defined without a timing threshold: both relays have exited
/// when this runs, so nothing can be appended by them any more. One marker
/// record is then appended to every partition; a partition is read in
/// order, so once its marker arrives, everything the relays ever published
/// there has been read — a duplicate too, which a read of exactly the
/// expected count would have left unread. The only timeout is a guard
/// against a reader that stops making progress.
async fn read_to_end(bootstrap: &str, topic: &str) -> Vec<Received> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", testkit::unique("pause_reader_"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    let partitions: Vec<i32> = metadata.topics()[0]
        .partitions()
        .iter()
        .map(|partition| partition.id())
        .collect();
    assert!(!partitions.is_empty(), "{topic} has partitions");
    append_end_markers(bootstrap, topic, &partitions).await;
    let mut assignment = TopicPartitionList::new();
    for partition in &partitions {
        assignment
            .add_partition_offset(topic, *partition, rdkafka::Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut unfinished: HashSet<i32> = partitions.iter().copied().collect();
    let mut received = Vec::new();
    while !unfinished.is_empty() {
        let message = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no progress after {} records; no end marker yet on {unfinished:?}",
                    received.len()
                )
            })
            .unwrap();
        if message.key() == Some(END_MARKER.as_bytes()) {
            unfinished.remove(&message.partition());
            continue;
        }
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

#[tokio::test]
async fn a_relay_resumed_past_its_lease_neither_publishes_nor_marks_on_it() {
    let db = testkit::TestDb::new().await;
    let mq = mq_config(&testkit::kafka_bootstrap(), &testkit::unique("ns"));
    let topic = mq.topic(names::TOPIC_ROOM_OUTBOX);
    testkit::create_topic(&topic, 4).await;
    let rooms: Vec<String> = (0..ROOMS).map(|index| format!("room-{index}")).collect();

    // A drains the first events alone and goes idle holding every shard.
    let relay_a = RelayProcess::start(&db, &mq, "relay-a");
    eventually("relay-a holds every shard", || async {
        leases_of(&db.pool, "relay-a").await.len() == 64
    })
    .await;
    let mut expected = insert_phase(&db.pool, &rooms, 1, 5).await;
    eventually("relay-a drains", || async {
        open_rows(&db.pool).await == 0
    })
    .await;
    let epochs_a = leases_of(&db.pool, "relay-a").await;

    // A freezes. B takes the shards over once A's leases lapse (a new epoch
    // each) and delivers what is committed meanwhile.
    relay_a.signal("-STOP");
    let relay_b = RelayProcess::start(&db, &mq, "relay-b");
    eventually("relay-b takes every shard over", || async {
        leases_of(&db.pool, "relay-b").await.len() == 64
    })
    .await;
    let epochs_b = leases_of(&db.pool, "relay-b").await;
    assert!(
        epochs_b
            .iter()
            .all(|(shard, epoch)| *epoch > epochs_a[shard]),
        "a takeover bumps every epoch: {epochs_a:?} → {epochs_b:?}"
    );
    expected += insert_phase(&db.pool, &rooms, 6, 5).await;
    eventually("relay-b drains", || async {
        open_rows(&db.pool).await == 0
    })
    .await;

    // B freezes too, holding fresh leases; new events wait on its shards.
    // A resumes: its watch still lists every shard under the old epochs, and
    // it would publish them at once if it trusted that view.
    relay_b.signal("-STOP");
    expected += insert_phase(&db.pool, &rooms, 11, 5).await;
    relay_a.signal("-CONT");
    // A publishes them only under leases of its own: once B's have lapsed.
    eventually("relay-a takes the shards back", || async {
        let held = leases_of(&db.pool, "relay-a").await;
        held.len() == 64 && held.iter().all(|(shard, epoch)| *epoch > epochs_b[shard])
    })
    .await;
    eventually("relay-a drains the new events", || async {
        open_rows(&db.pool).await == 0
    })
    .await;
    relay_b.signal("-CONT");
    // B comes back past its lease too; it rejoins, and the shards split.
    eventually("relay-b rejoins", || async {
        !leases_of(&db.pool, "relay-b").await.is_empty()
    })
    .await;
    assert_eq!(
        relay_a.counter("room_outbox_fenced_marks_total").await,
        0.0,
        "relay-a marked nothing on its lost leases: it published nothing on them"
    );
    assert_eq!(
        relay_b.counter("room_outbox_fenced_marks_total").await,
        0.0,
        "relay-b marked nothing on its lost leases"
    );
    relay_a.stop();
    relay_b.stop();

    // The table: each phase was marked by the relay that held the leases.
    assert_eq!(
        markers(&db.pool, 1, 5).await,
        HashSet::from(["relay-a".to_string()])
    );
    assert_eq!(
        markers(&db.pool, 6, 10).await,
        HashSet::from(["relay-b".to_string()])
    );
    assert_eq!(
        markers(&db.pool, 11, 15).await,
        HashSet::from(["relay-a".to_string()])
    );
    let delivered: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM room_outbox WHERE status = 'delivered'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(delivered, expected as i64);

    // The topic, read to its end: every event once, every room in commit
    // order. A stale publish of the frozen phase would be a second copy
    // whose mark was fenced — an extra record past the expected count.
    let records = read_to_end(&testkit::kafka_bootstrap(), &topic).await;
    assert_eq!(
        records.len(),
        expected,
        "every record on the topic, duplicates included"
    );
    let unique: HashSet<_> = records.iter().map(|record| &record.event_id).collect();
    assert_eq!(unique.len(), expected, "no event published twice");
    for (room, sequences) in sequences_by_room(&records) {
        assert_eq!(
            sequences,
            (1..=15).collect::<Vec<u64>>(),
            "room {room} in commit order"
        );
    }
}
