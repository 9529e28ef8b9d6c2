//! The runtime against the real broker (and MariaDB where the effect is a DB
//! write): order per partition, retries then dead letter while other
//! partitions flow, malformed messages, commit on graceful shutdown, no
//! duplicate effect after a kill between effect and commit, independent
//! groups, a treasure-open wake-up handler, no message skipped when
//! consumption resumes inside a record batch, and a record too large to copy
//! dead-lettered headers-only.

use consumer_runtime::{
    Consumer, ConsumerMetrics, Delivery, Handler, HandlerError, Outcome, dedup,
    testing::{
        TestProducer, commit_offset, envelope, header, read_topic, test_settings, wait_until,
    },
};
use outbox_schema::{
    names::{
        HEADER_DLQ_ATTEMPTS, HEADER_DLQ_GROUP, HEADER_DLQ_ORIGINAL_BYTES, HEADER_DLQ_REASON,
        HEADER_DLQ_SOURCE, HEADER_EVENT_ID, HEADER_EVENT_TYPE, dead_letter_topic,
    },
    pb,
};
use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::{sync::Semaphore, task::JoinHandle};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);

fn joined(user: &str) -> pb::room_outbox_event::Payload {
    pb::room_outbox_event::Payload::RoomUserJoined(pb::RoomUserJoined {
        user_id: user.into(),
    })
}

fn new_event_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Topic with `partitions` partitions, a fresh group, and its dead-letter topic.
async fn fixture(partitions: i32) -> (String, String) {
    let topic = testkit::unique("rt_topic_");
    let group = testkit::unique("rt_group_");
    testkit::create_topic(&topic, partitions).await;
    testkit::create_topic(&dead_letter_topic(&group), 1).await;
    (topic, group)
}

#[derive(Debug, Clone)]
struct Seen {
    event_id: String,
    room_id: String,
    seq: u64,
    partition: i32,
}

/// Records what it handles; can fail everything, or hold one event behind a gate.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<Seen>>,
    fail_all: bool,
    /// The gated event: each attempt takes a permit, then fails.
    poison: Option<(String, Arc<Semaphore>)>,
    poison_attempts: Mutex<u32>,
}

impl Recorder {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    fn has(&self, event_id: &str) -> bool {
        self.seen().iter().any(|seen| seen.event_id == event_id)
    }
}

impl Handler<pb::RoomOutboxEvent> for Recorder {
    async fn handle(
        &self,
        delivery: &Delivery<pb::RoomOutboxEvent>,
    ) -> Result<Outcome, HandlerError> {
        if self.fail_all {
            return Err(HandlerError::retryable("downstream unavailable"));
        }
        if let Some((poison, gate)) = &self.poison
            && &delivery.message.event_id == poison
        {
            *self.poison_attempts.lock().unwrap() += 1;
            gate.acquire().await.expect("gate open").forget();
            return Err(HandlerError::retryable("poison event refused"));
        }
        self.seen.lock().unwrap().push(Seen {
            event_id: delivery.message.event_id.clone(),
            room_id: delivery.message.room_id.clone(),
            seq: delivery.message.room_event_seq,
            partition: delivery.partition,
        });
        Ok(Outcome::Applied)
    }
}

/// Consumes `topic` in `group` (budget 16) until `event_id` was handled, then stops.
async fn consume_until_handled(
    topic: &str,
    group: &str,
    event_id: &str,
) -> (Arc<Recorder>, ConsumerMetrics) {
    let recorder = Arc::new(Recorder::default());
    let metrics = ConsumerMetrics::unregistered();
    let consumer = start(topic, group, 16, recorder.clone(), &metrics);
    assert!(wait_until(WAIT, || async { recorder.has(event_id) }).await);
    stop(consumer).await;
    (recorder, metrics)
}

fn start<H: Handler<pb::RoomOutboxEvent>>(
    topic: &str,
    group: &str,
    max_reconsume_times: u32,
    handler: Arc<H>,
    metrics: &ConsumerMetrics,
) -> (CancellationToken, JoinHandle<()>) {
    let settings = test_settings(
        &testkit::kafka_bootstrap(),
        topic,
        group,
        max_reconsume_times,
    )
    .expect("settings");
    let consumer = Consumer::new(settings, handler, metrics).expect("consumer");
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { consumer.run(shutdown).await.expect("consumer run") }
    });
    (shutdown, task)
}

async fn stop(consumer: (CancellationToken, JoinHandle<()>)) {
    consumer.0.cancel();
    consumer.1.await.expect("consumer task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_a_room_are_handled_once_in_order_across_partitions() {
    let (topic, group) = fixture(3).await;
    let producer = TestProducer::new(&testkit::kafka_bootstrap()).unwrap();
    for seq in 1..=15u64 {
        for room in 0..6 {
            let event = envelope(&new_event_id(), &format!("room-{room}"), seq, joined("u"));
            producer.send_event(&topic, &event).await.unwrap();
        }
    }
    let recorder = Arc::new(Recorder::default());
    let consumer = start(
        &topic,
        &group,
        16,
        recorder.clone(),
        &ConsumerMetrics::unregistered(),
    );
    assert!(wait_until(WAIT, || async { recorder.count() >= 90 }).await);
    stop(consumer).await;

    let seen = recorder.seen();
    assert_eq!(seen.len(), 90, "each event exactly once");
    let mut by_room: HashMap<String, Vec<u64>> = HashMap::new();
    let mut partitions = HashSet::new();
    for entry in &seen {
        by_room
            .entry(entry.room_id.clone())
            .or_default()
            .push(entry.seq);
        partitions.insert(entry.partition);
    }
    for (room, seqs) in by_room {
        assert_eq!(seqs, (1..=15).collect::<Vec<_>>(), "order of {room}");
    }
    assert!(partitions.len() > 1, "rooms spread over partitions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_message_is_retried_then_dead_lettered_while_other_partitions_flow() {
    let (topic, group) = fixture(3).await;
    let bootstrap = testkit::kafka_bootstrap();
    let producer = TestProducer::new(&bootstrap).unwrap();
    let poison = envelope(&new_event_id(), "poison-room", 1, joined("p"));
    let after_poison = envelope(&new_event_id(), "poison-room", 2, joined("q"));
    producer.send_event(&topic, &poison).await.unwrap();

    let gate = Arc::new(Semaphore::new(1));
    let recorder = Arc::new(Recorder {
        poison: Some((poison.event_id.clone(), gate.clone())),
        ..Recorder::default()
    });
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = ConsumerMetrics::register(&mut registry);
    let consumer = start(&topic, &group, 3, recorder.clone(), &metrics);

    // The poison failed once and is held in its second attempt.
    assert!(
        wait_until(WAIT, || async {
            *recorder.poison_attempts.lock().unwrap() >= 2
        })
        .await
    );
    let (poison_partition, _) = producer.send_event(&topic, &after_poison).await.unwrap();
    let mut elsewhere = Vec::new();
    let mut behind_poison = Vec::new();
    for room in 0..12 {
        let event = envelope(&new_event_id(), &format!("other-{room}"), 1, joined("u"));
        let (partition, _) = producer.send_event(&topic, &event).await.unwrap();
        if partition == poison_partition {
            behind_poison.push(event.event_id);
        } else {
            elsewhere.push(event.event_id);
        }
    }
    assert!(
        !elsewhere.is_empty(),
        "12 rooms cannot all hash to one of 3 partitions"
    );
    assert!(
        wait_until(WAIT, || async {
            elsewhere.iter().all(|id| recorder.has(id))
        })
        .await
    );
    assert!(
        !recorder.has(&after_poison.event_id),
        "the poison's partition waits"
    );
    assert!(behind_poison.iter().all(|id| !recorder.has(id)));
    assert_eq!(*recorder.poison_attempts.lock().unwrap(), 2);

    gate.add_permits(10);
    assert!(wait_until(WAIT, || async { recorder.has(&after_poison.event_id) }).await);
    assert!(
        wait_until(WAIT, || async {
            behind_poison.iter().all(|id| recorder.has(id))
        })
        .await
    );
    stop(consumer).await;

    assert_eq!(
        *recorder.poison_attempts.lock().unwrap(),
        4,
        "1 attempt + 3 retries"
    );
    let group_metrics = metrics.for_group(&group);
    assert_eq!(group_metrics.retried.get(), 3);
    assert_eq!(group_metrics.dead_lettered_handler.get(), 1);

    let dead = read_topic(&bootstrap, &dead_letter_topic(&group), 1, WAIT)
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    let letter = &dead[0];
    assert_eq!(
        header(letter, HEADER_EVENT_ID).as_deref(),
        Some(poison.event_id.as_str())
    );
    assert_eq!(
        header(letter, HEADER_DLQ_GROUP).as_deref(),
        Some(group.as_str())
    );
    assert_eq!(header(letter, HEADER_DLQ_ATTEMPTS).as_deref(), Some("4"));
    let reason = header(letter, HEADER_DLQ_REASON).unwrap();
    assert!(reason.contains("poison event refused"), "{reason}");
    assert!(
        header(letter, HEADER_DLQ_SOURCE)
            .unwrap()
            .starts_with(&topic)
    );
    let decoded = outbox_schema::decode_envelope(rdkafka::Message::payload(letter).unwrap());
    assert_eq!(
        decoded.unwrap(),
        poison,
        "the dead letter is the original message"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_message_goes_to_the_dead_letter_topic_and_the_partition_moves_on() {
    let (topic, group) = fixture(1).await;
    let bootstrap = testkit::kafka_bootstrap();
    let producer = TestProducer::new(&bootstrap).unwrap();
    producer
        .send_raw(&topic, "room-x", b"\xff\xff not protobuf", None)
        .await
        .unwrap();
    let good = envelope(&new_event_id(), "room-x", 1, joined("u"));
    producer.send_event(&topic, &good).await.unwrap();

    let (_, metrics) = consume_until_handled(&topic, &group, &good.event_id).await;

    assert_eq!(metrics.for_group(&group).dead_lettered_undecodable.get(), 1);
    let dead = read_topic(&bootstrap, &dead_letter_topic(&group), 1, WAIT)
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    let reason = header(&dead[0], HEADER_DLQ_REASON).unwrap();
    assert!(reason.starts_with("undecodable"), "{reason}");
    assert_eq!(header(&dead[0], HEADER_DLQ_ATTEMPTS).as_deref(), Some("1"));
}

/// An event of a type newer than this build — its payload is a field number
/// the consumer does not know — is acknowledged as ignored and counted, never
/// dead-lettered, and the partition moves on to the next event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_event_type_is_ignored_and_counted_not_dead_lettered() {
    use prost::Message as _;
    let (topic, group) = fixture(1).await;
    let bootstrap = testkit::kafka_bootstrap();
    let producer = TestProducer::new(&bootstrap).unwrap();
    let mut newer = pb::RoomOutboxEvent {
        event_id: new_event_id(),
        event_type: "RoomPollStarted".into(),
        room_id: "room-u".into(),
        room_event_seq: 1,
        ..Default::default()
    }
    .encode_to_vec();
    // Field 99 (length-delimited): a payload variant this build has no field for.
    newer.extend_from_slice(&[0x9a, 0x06, 3, 0x0a, 1, b'x']);
    producer
        .send_raw(&topic, "room-u", &newer, None)
        .await
        .unwrap();
    let good = envelope(&new_event_id(), "room-u", 2, joined("u"));
    producer.send_event(&topic, &good).await.unwrap();

    let (recorder, metrics) = consume_until_handled(&topic, &group, &good.event_id).await;

    let group_metrics = metrics.for_group(&group);
    assert_eq!(group_metrics.unknown.get(), 1);
    assert_eq!(group_metrics.dead_lettered_undecodable.get(), 0);
    assert_eq!(
        recorder.count(),
        1,
        "the handler never saw the unknown event"
    );
    let dead = read_topic(
        &bootstrap,
        &dead_letter_topic(&group),
        1,
        Duration::from_secs(3),
    )
    .await
    .unwrap_or_default();
    assert!(dead.is_empty(), "nothing dead-lettered: {}", dead.len());
}

/// An envelope bigger than `consumer.max_message_bytes` is dead-lettered with
/// a reason naming the setting, before the handler sees it, and the messages
/// after it (garbage too) are handled as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_malformed_messages_are_dead_lettered_and_the_consumer_keeps_going() {
    let (topic, group) = fixture(1).await;
    let bootstrap = testkit::kafka_bootstrap();
    let producer = TestProducer::new(&bootstrap).unwrap();
    // Valid in every respect except its size: a 64 KiB user id.
    let oversized = envelope(
        &new_event_id(),
        "room-big",
        1,
        joined(&"u".repeat(64 * 1024)),
    );
    producer.send_event(&topic, &oversized).await.unwrap();
    let before = envelope(&new_event_id(), "room-big", 2, joined("a"));
    producer.send_event(&topic, &before).await.unwrap();
    // Truncated protobuf: a length prefix promising more than follows.
    producer
        .send_raw(&topic, "room-big", b"\x0a\xff\x01abc", None)
        .await
        .unwrap();
    let after = envelope(&new_event_id(), "room-big", 3, joined("b"));
    producer.send_event(&topic, &after).await.unwrap();

    let mut settings = test_settings(&bootstrap, &topic, &group, 16).unwrap();
    settings.max_message_bytes = 16 * 1024;
    let recorder = Arc::new(Recorder::default());
    let metrics = ConsumerMetrics::unregistered();
    let consumer = Consumer::new(settings, recorder.clone(), &metrics).unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { consumer.run(shutdown).await.expect("consumer run") }
    });
    assert!(wait_until(WAIT, || async { recorder.has(&after.event_id) }).await);
    stop((shutdown, task)).await;

    assert!(recorder.has(&before.event_id));
    assert!(
        !recorder.has(&oversized.event_id),
        "the handler never sees it"
    );
    assert_eq!(metrics.for_group(&group).dead_lettered_undecodable.get(), 2);
    let dead = read_topic(&bootstrap, &dead_letter_topic(&group), 2, WAIT)
        .await
        .unwrap();
    assert_eq!(dead.len(), 2);
    let reasons: Vec<String> = dead
        .iter()
        .map(|letter| header(letter, HEADER_DLQ_REASON).unwrap())
        .collect();
    assert!(
        reasons[0].starts_with("oversized:")
            && reasons[0].contains("consumer.max_message_bytes (16384)"),
        "{reasons:?}"
    );
    assert!(reasons[1].starts_with("undecodable"), "{reasons:?}");
    assert_eq!(
        header(&dead[0], HEADER_EVENT_ID).as_deref(),
        Some(oversized.event_id.as_str()),
        "the dead letter keeps the original headers for replay"
    );
    assert_eq!(
        rdkafka::Message::payload(&dead[0]).map(<[u8]>::len),
        Some(prost::Message::encoded_len(&oversized)),
        "the payload is kept unchanged"
    );
}

/// A record of 1.5 MB — oversized for the consumer, and too large for the
/// dead-letter producer (`message.max.bytes` 1,000,000) to copy — is
/// dead-lettered headers-only: its key, event id and type, the reason, where
/// it is and how big it was. The next record of its partition is handled;
/// the partition does not wait forever on a copy that can never be published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_too_large_to_copy_is_dead_lettered_headers_only_and_the_partition_moves_on() {
    let (topic, group) = fixture(1).await;
    let bootstrap = testkit::kafka_bootstrap();
    // librdkafka's default `message.max.bytes` would refuse it before Tansu
    // sees it; Tansu itself sets no record size limit.
    let producer = TestProducer::with_max_message_bytes(&bootstrap, 4_000_000).unwrap();
    // Valid in every respect except its size: a 1.5 MB user id.
    let huge = envelope(
        &new_event_id(),
        "room-huge",
        1,
        joined(&"u".repeat(1_500_000)),
    );
    let huge_bytes = prost::Message::encoded_len(&huge);
    let (partition, offset) = producer.send_event(&topic, &huge).await.unwrap();
    let next = envelope(&new_event_id(), "room-huge", 2, joined("a"));
    producer.send_event(&topic, &next).await.unwrap();

    // Default fetch settings: librdkafka grows `fetch.message.max.bytes`
    // (1 MiB) for a bigger record, and `fetch.max.bytes` (8 MiB, the fetch
    // queue) and `receive.message.max.bytes` (100 MB) leave room for it.
    let settings = test_settings(&bootstrap, &topic, &group, 16).unwrap();
    assert!(huge_bytes > settings.max_message_bytes && huge_bytes > 1_000_000);
    let recorder = Arc::new(Recorder::default());
    let metrics = ConsumerMetrics::unregistered();
    let consumer = Consumer::new(settings, recorder.clone(), &metrics).unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(consumer.run(shutdown.clone()));
    let moved_on = wait_until(WAIT, || async { recorder.has(&next.event_id) }).await;
    shutdown.cancel();
    task.await.unwrap().unwrap();
    assert!(moved_on, "the partition stalled behind the 1.5 MB record");
    assert!(!recorder.has(&huge.event_id), "the handler never sees it");
    assert_eq!(metrics.for_group(&group).dead_lettered_undecodable.get(), 1);

    let dead = read_topic(&bootstrap, &dead_letter_topic(&group), 1, WAIT)
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    let letter = &dead[0];
    assert_eq!(
        rdkafka::Message::payload(letter).map_or(0, <[u8]>::len),
        0,
        "headers only"
    );
    assert_eq!(consumer_runtime::testing::key_text(letter), "room-huge");
    assert_eq!(
        header(letter, HEADER_EVENT_ID).as_deref(),
        Some(huge.event_id.as_str())
    );
    assert_eq!(
        header(letter, HEADER_EVENT_TYPE).as_deref(),
        Some(huge.event_type.as_str())
    );
    assert_eq!(
        header(letter, HEADER_DLQ_ORIGINAL_BYTES),
        Some(huge_bytes.to_string())
    );
    assert_eq!(
        header(letter, HEADER_DLQ_SOURCE),
        Some(format!("{topic}/{partition}/{offset}"))
    );
    assert_eq!(header(letter, HEADER_DLQ_ATTEMPTS).as_deref(), Some("1"));
    let reason = header(letter, HEADER_DLQ_REASON).unwrap();
    assert!(
        reason.starts_with(&format!("oversized: {huge_bytes} bytes"))
            && reason.contains("payload not copied")
            && reason.contains("MessageSizeTooLarge"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_commits_what_is_done() {
    let (topic, group) = fixture(1).await;
    let producer = TestProducer::new(&testkit::kafka_bootstrap()).unwrap();
    for seq in 1..=10 {
        let event = envelope(&new_event_id(), "room-c", seq, joined("u"));
        producer.send_event(&topic, &event).await.unwrap();
    }
    let first = Arc::new(Recorder::default());
    let consumer = start(
        &topic,
        &group,
        16,
        first.clone(),
        &ConsumerMetrics::unregistered(),
    );
    assert!(wait_until(WAIT, || async { first.count() == 10 }).await);
    stop(consumer).await;

    let second = Arc::new(Recorder::default());
    let consumer = start(
        &topic,
        &group,
        16,
        second.clone(),
        &ConsumerMetrics::unregistered(),
    );
    let next = envelope(&new_event_id(), "room-c", 11, joined("u"));
    producer.send_event(&topic, &next).await.unwrap();
    assert!(wait_until(WAIT, || async { second.has(&next.event_id) }).await);
    stop(consumer).await;
    // One partition, in order: had anything been redelivered it would come first.
    assert_eq!(second.seen()[0].event_id, next.event_id);
    assert_eq!(second.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_groups_progress_independently_when_one_is_failing() {
    let (topic, failing_group) = fixture(2).await;
    let healthy_group = testkit::unique("rt_group_");
    testkit::create_topic(&dead_letter_topic(&healthy_group), 1).await;
    let producer = TestProducer::new(&testkit::kafka_bootstrap()).unwrap();
    for room in 0..20 {
        let event = envelope(&new_event_id(), &format!("room-{room}"), 1, joined("u"));
        producer.send_event(&topic, &event).await.unwrap();
    }
    let metrics = ConsumerMetrics::unregistered();
    let failing = Arc::new(Recorder {
        fail_all: true,
        ..Recorder::default()
    });
    let healthy = Arc::new(Recorder::default());
    let failing_consumer = start(&topic, &failing_group, 1000, failing.clone(), &metrics);
    let healthy_consumer = start(&topic, &healthy_group, 1000, healthy.clone(), &metrics);
    assert!(wait_until(WAIT, || async { healthy.count() == 20 }).await);
    assert!(
        wait_until(WAIT, || async {
            metrics.for_group(&failing_group).retried.get() >= 2
        })
        .await
    );
    stop(healthy_consumer).await;
    stop(failing_consumer).await;
    assert_eq!(failing.count(), 0);
    assert_eq!(metrics.for_group(&healthy_group).retried.get(), 0);
}

/// The DB effect of the kill test: one transaction claims the event id and
/// bumps a per-room counter; after the commit it can hang to simulate a
/// process killed before its offset was committed.
struct CountingEffect {
    pool: sqlx::MySqlPool,
    group: String,
    hang_after: Option<String>,
    hanging: CancellationToken,
    release: CancellationToken,
    outcomes: Mutex<Vec<(String, Outcome)>>,
}

impl Handler<pb::RoomOutboxEvent> for CountingEffect {
    async fn handle(
        &self,
        delivery: &Delivery<pb::RoomOutboxEvent>,
    ) -> Result<Outcome, HandlerError> {
        let event = &delivery.message;
        let mut tx = self.pool.begin().await?;
        let outcome = if dedup::try_claim_in_tx(&mut tx, &self.group, &event.event_id, 1).await? {
            sqlx::query(
                "INSERT INTO activity_room_contribution (room_id, total_value, gift_count, updated_at_ms) \
                 VALUES (?, 0, 1, 0) ON DUPLICATE KEY UPDATE gift_count = gift_count + 1",
            )
            .bind(&event.room_id)
            .execute(&mut *tx)
            .await?;
            Outcome::Applied
        } else {
            Outcome::Duplicate
        };
        tx.commit().await?;
        self.outcomes
            .lock()
            .unwrap()
            .push((event.event_id.clone(), outcome));
        if self.hang_after.as_deref() == Some(event.event_id.as_str()) {
            self.hanging.cancel();
            self.release.cancelled().await;
        }
        Ok(outcome)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_killed_after_the_effect_before_the_commit_does_not_repeat_it() {
    let db = testkit::TestDb::new().await;
    let (topic, group) = fixture(1).await;
    let producer = TestProducer::new(&testkit::kafka_bootstrap()).unwrap();
    let events: Vec<_> = (1..=6)
        .map(|seq| envelope(&new_event_id(), "room-k", seq, joined("u")))
        .collect();
    for event in &events {
        producer.send_event(&topic, event).await.unwrap();
    }
    let release = CancellationToken::new();
    let first = Arc::new(CountingEffect {
        pool: db.pool.clone(),
        group: group.clone(),
        hang_after: Some(events[2].event_id.clone()),
        hanging: CancellationToken::new(),
        release: release.clone(),
        outcomes: Mutex::new(Vec::new()),
    });
    let (_, task) = start(
        &topic,
        &group,
        16,
        first.clone(),
        &ConsumerMetrics::unregistered(),
    );
    first.hanging.cancelled().await;
    // Killed: no drain, no final commit for the event in hand.
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());

    let second = Arc::new(CountingEffect {
        pool: db.pool.clone(),
        group: group.clone(),
        hang_after: None,
        hanging: CancellationToken::new(),
        release: CancellationToken::new(),
        outcomes: Mutex::new(Vec::new()),
    });
    let consumer = start(
        &topic,
        &group,
        16,
        second.clone(),
        &ConsumerMetrics::unregistered(),
    );
    let last = events[5].event_id.clone();
    assert!(
        wait_until(WAIT, || async {
            second
                .outcomes
                .lock()
                .unwrap()
                .iter()
                .any(|(id, _)| *id == last)
        })
        .await
    );
    stop(consumer).await;
    release.cancel();

    let redelivered = second.outcomes.lock().unwrap().clone();
    assert!(
        redelivered.contains(&(events[2].event_id.clone(), Outcome::Duplicate)),
        "the hung event comes again and is recognised: {redelivered:?}"
    );
    let count: (u64,) = sqlx::query_as(
        "SELECT gift_count FROM activity_room_contribution WHERE room_id = 'room-k'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(count.0, 6, "one effect per event");
}

/// Stands in for room-service's treasure-open consumer: issues OpenTreasure
/// with the wake-up's deterministic command id, once per command id.
#[derive(Default)]
struct OpenTreasureIssuer {
    issued: Mutex<Vec<String>>,
}

impl Handler<pb::TreasureOpenWakeup> for OpenTreasureIssuer {
    async fn handle(
        &self,
        delivery: &Delivery<pb::TreasureOpenWakeup>,
    ) -> Result<Outcome, HandlerError> {
        let wakeup = &delivery.message;
        let command_id =
            outbox_schema::treasure_open_command_id(&wakeup.room_id, &wakeup.box_id, wakeup.level);
        if command_id != wakeup.command_id {
            return Err(HandlerError::permanent(
                "wake-up carries a foreign command id",
            ));
        }
        let mut issued = self.issued.lock().unwrap();
        if issued.contains(&command_id) {
            return Ok(Outcome::Duplicate);
        }
        issued.push(command_id);
        Ok(Outcome::Applied)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wakeup_handler_issues_open_treasure_once_per_command_id() {
    use prost::Message as _;
    let (topic, group) = fixture(1).await;
    let producer = TestProducer::new(&testkit::kafka_bootstrap()).unwrap();
    let wakeup = |box_id: &str| pb::TreasureOpenWakeup {
        app_code: "hyapp".into(),
        room_id: "room-t".into(),
        box_id: box_id.into(),
        level: 2,
        open_at_ms: service_kit::time::now_ms(),
        command_id: outbox_schema::treasure_open_command_id("room-t", box_id, 2),
        source_event_id: new_event_id(),
    };
    for box_id in ["box-1", "box-1", "box-2"] {
        let payload = wakeup(box_id).encode_to_vec();
        producer
            .send_raw(&topic, "room-t", &payload, None)
            .await
            .unwrap();
    }
    let issuer = Arc::new(OpenTreasureIssuer::default());
    let metrics = ConsumerMetrics::unregistered();
    let settings = test_settings(&testkit::kafka_bootstrap(), &topic, &group, 16).unwrap();
    let consumer = Consumer::new(settings, issuer.clone(), &metrics).unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(consumer.run(shutdown.clone()));
    assert!(
        wait_until(WAIT, || async {
            metrics.for_group(&group).consumed.get() == 3
        })
        .await
    );
    shutdown.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(
        *issuer.issued.lock().unwrap(),
        vec![
            "treasure-open:room-t:box-1:2".to_string(),
            "treasure-open:room-t:box-2:2".to_string()
        ]
    );
    assert_eq!(metrics.for_group(&group).duplicates.get(), 1);
}

#[tokio::test]
async fn dedup_claims_once_and_purges_in_bounded_batches() {
    let db = testkit::TestDb::new().await;
    let group = "g-dedup";
    let ids: Vec<String> = (0..5).map(|_| new_event_id()).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();

    let mut tx = db.pool.begin().await.unwrap();
    assert!(
        dedup::try_claim_in_tx(&mut tx, group, refs[0], 1_000)
            .await
            .unwrap()
    );
    assert!(
        !dedup::try_claim_in_tx(&mut tx, group, refs[0], 1_000)
            .await
            .unwrap()
    );
    let repeated = [refs[1], refs[0], refs[1], refs[2]];
    let claimed = dedup::claim_many_in_tx(&mut tx, group, &repeated, 1_000)
        .await
        .unwrap();
    assert_eq!(claimed, HashSet::from([ids[1].clone(), ids[2].clone()]));
    tx.commit().await.unwrap();
    assert!(
        dedup::try_claim_in_tx(&mut db.pool.acquire().await.unwrap(), "other", refs[0], 1)
            .await
            .unwrap(),
        "groups dedup independently"
    );

    dedup::record(&db.pool, group, &refs[3..], service_kit::time::now_ms())
        .await
        .unwrap();
    let processed = dedup::processed(&db.pool, group, &refs).await.unwrap();
    assert_eq!(processed.len(), 5);
    assert!(
        dedup::try_claim_in_tx(
            &mut db.pool.acquire().await.unwrap(),
            group,
            &"x".repeat(37),
            1
        )
        .await
        .is_err()
    );

    // Three rows are old (processed_at_ms = 1000), two are fresh.
    let purged = dedup::purge_older_than(&db.pool, group, Duration::from_secs(3600), 2)
        .await
        .unwrap();
    assert_eq!(purged, 3);
    let left = dedup::processed(&db.pool, group, &refs).await.unwrap();
    assert_eq!(left, HashSet::from([ids[3].clone(), ids[4].clone()]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_paused_by_a_full_queue_resume_without_losing_messages() {
    let (topic, group) = fixture(2).await;
    let producer = TestProducer::new(&testkit::kafka_bootstrap()).unwrap();
    // One record per produce request: every resume starts on a batch
    // boundary (the batched case is the next tests').
    for seq in 1..=150u64 {
        for room in 0..4 {
            let event = envelope(&new_event_id(), &format!("room-{room}"), seq, joined("u"));
            producer.send_event(&topic, &event).await.unwrap();
        }
    }
    let recorder = Arc::new(Recorder::default());
    let mut settings = test_settings(&testkit::kafka_bootstrap(), &topic, &group, 16).unwrap();
    settings.partition_queue_limit = 20;
    settings.max_batch = 4;
    let consumer =
        Consumer::new(settings, recorder.clone(), &ConsumerMetrics::unregistered()).unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(consumer.run(shutdown.clone()));
    assert!(wait_until(WAIT, || async { recorder.count() >= 600 }).await);
    shutdown.cancel();
    task.await.unwrap().unwrap();
    for (room, seqs) in seqs_by_room(&recorder) {
        assert_eq!(seqs, (1..=150).collect::<Vec<_>>(), "order of {room}");
    }
}

/// Seqs seen per room, in handling order.
fn seqs_by_room(recorder: &Recorder) -> HashMap<String, Vec<u64>> {
    let mut by_room: HashMap<String, Vec<u64>> = HashMap::new();
    for entry in recorder.seen() {
        by_room.entry(entry.room_id).or_default().push(entry.seq);
    }
    by_room
}

/// `room-0` … `room-{count - 1}`.
fn room_names(count: usize) -> Vec<String> {
    (0..count).map(|room| format!("room-{room}")).collect()
}

/// A join event per room and seq, seq by seq.
fn joins(rooms: &[String], seqs: std::ops::RangeInclusive<u64>) -> Vec<pb::RoomOutboxEvent> {
    seqs.flat_map(|seq| {
        rooms
            .iter()
            .map(move |room| envelope(&new_event_id(), room, seq, joined("u")))
    })
    .collect()
}

/// Whether every room's last handled event has seq `last`.
fn rooms_reached(recorder: &Recorder, rooms: &[String], last: u64) -> bool {
    let by_room = seqs_by_room(recorder);
    rooms
        .iter()
        .all(|room| by_room.get(room).and_then(|seqs| seqs.last()) == Some(&last))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_offset_inside_a_record_batch_resumes_without_skipping() {
    let (topic, group) = fixture(1).await;
    let bootstrap = testkit::kafka_bootstrap();
    // One burst, one long linger: the 300 records land in one or a few
    // batches, so offset 137 is inside one.
    let producer = TestProducer::with_linger(&bootstrap, Duration::from_millis(200)).unwrap();
    let events: Vec<_> = (1..=300u64)
        .map(|seq| envelope(&new_event_id(), "room-batch", seq, joined("u")))
        .collect();
    producer.send_events(&topic, &events).await.unwrap();
    // The group stopped after offset 136 (seq 137).
    commit_offset(&bootstrap, &group, &topic, 0, 137).unwrap();

    let recorder = Arc::new(Recorder::default());
    let metrics = ConsumerMetrics::unregistered();
    let consumer = start(&topic, &group, 16, recorder.clone(), &metrics);
    assert!(
        wait_until(WAIT, || async { recorder.has(&events[299].event_id) }).await,
        "the last event never arrived"
    );
    stop(consumer).await;
    assert_eq!(
        seqs_by_room(&recorder)["room-batch"],
        (138..=300).collect::<Vec<_>>(),
        "every event after the committed offset, once, in order"
    );
    // Tansu serves a fetch from 137 starting at the next batch boundary: the
    // consumer must have noticed and sought back.
    assert!(metrics.for_group(&group).offset_gap_rewinds.get() >= 1);
    assert_eq!(metrics.for_group(&group).offset_gaps_unrepaired.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_holds_back_polling_without_losing_batched_records() {
    let (topic, group) = fixture(2).await;
    let bootstrap = testkit::kafka_bootstrap();
    let producer = TestProducer::with_linger(&bootstrap, Duration::from_millis(50)).unwrap();
    let rooms = room_names(4);
    let events = joins(&rooms, 1..=200);
    producer.send_events(&topic, &events).await.unwrap();
    let recorder = Arc::new(Recorder::default());
    let metrics = ConsumerMetrics::unregistered();
    let mut settings = test_settings(&bootstrap, &topic, &group, 16).unwrap();
    // Far below the batch sizes: the dispatcher holds back inside batches.
    settings.partition_queue_limit = 10;
    settings.max_batch = 4;
    let consumer = Consumer::new(settings, recorder.clone(), &metrics).unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(consumer.run(shutdown.clone()));
    let total = events.len();
    let complete = wait_until(WAIT, || async { rooms_reached(&recorder, &rooms, 200) }).await;
    shutdown.cancel();
    task.await.unwrap().unwrap();
    assert!(
        complete,
        "only {} of {total} events handled",
        recorder.count()
    );
    for (room, seqs) in seqs_by_room(&recorder) {
        assert_eq!(seqs, (1..=200).collect::<Vec<_>>(), "order of {room}");
    }
    assert_eq!(metrics.for_group(&group).offset_gaps_unrepaired.get(), 0);
}

/// Holds every message of one partition until the gate opens.
struct GatedPartition {
    recorder: Recorder,
    stuck_partition: i32,
    gate: tokio::sync::watch::Receiver<bool>,
    held: std::sync::atomic::AtomicUsize,
}

impl Handler<pb::RoomOutboxEvent> for GatedPartition {
    async fn handle(
        &self,
        delivery: &Delivery<pb::RoomOutboxEvent>,
    ) -> Result<Outcome, HandlerError> {
        if delivery.partition == self.stuck_partition {
            self.held.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut gate = self.gate.clone();
            gate.wait_for(|open| *open)
                .await
                .expect("gate sender alive");
        }
        self.recorder.handle(delivery).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_full_for_long_is_paused_so_others_flow_then_resumes_without_loss() {
    let (topic, group) = fixture(2).await;
    let bootstrap = testkit::kafka_bootstrap();
    let producer = TestProducer::with_linger(&bootstrap, Duration::from_millis(50)).unwrap();
    // Seq 1 of each room, one by one, tells where the room lands.
    let mut rooms_on = [Vec::new(), Vec::new()];
    for room in room_names(16) {
        let probe = envelope(&new_event_id(), &room, 1, joined("u"));
        let (partition, _) = producer.send_event(&topic, &probe).await.unwrap();
        rooms_on[usize::try_from(partition).unwrap()].push(room);
    }
    let [stuck_rooms, flowing_rooms] = rooms_on;
    assert!(
        !stuck_rooms.is_empty() && !flowing_rooms.is_empty(),
        "both partitions hold rooms"
    );
    producer
        .send_events(&topic, &joins(&stuck_rooms, 2..=100))
        .await
        .unwrap();

    let (open_gate, gate) = tokio::sync::watch::channel(false);
    let handler = Arc::new(GatedPartition {
        recorder: Recorder::default(),
        stuck_partition: 0,
        gate,
        held: Default::default(),
    });
    let metrics = ConsumerMetrics::unregistered();
    let mut settings = test_settings(&bootstrap, &topic, &group, 16).unwrap();
    settings.partition_queue_limit = 10;
    settings.max_batch = 4;
    let consumer = Consumer::new(settings, handler.clone(), &metrics).unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(consumer.run(shutdown.clone()));

    // Partition 0 is stuck with a full queue; only then does partition 1
    // get its events. The dispatcher holds back for a while, then pauses
    // partition 0, and partition 1 completes.
    let stuck = wait_until(WAIT, || async {
        handler.held.load(std::sync::atomic::Ordering::Relaxed) > 0
    })
    .await;
    producer
        .send_events(&topic, &joins(&flowing_rooms, 2..=100))
        .await
        .unwrap();
    let others_done = wait_until(WAIT, || async {
        rooms_reached(&handler.recorder, &flowing_rooms, 100)
    })
    .await;
    let handled_while_stuck = seqs_by_room(&handler.recorder);
    open_gate.send(true).unwrap();
    let all_done = wait_until(WAIT, || async {
        rooms_reached(&handler.recorder, &stuck_rooms, 100)
            && rooms_reached(&handler.recorder, &flowing_rooms, 100)
    })
    .await;
    shutdown.cancel();
    task.await.unwrap().unwrap();
    assert!(stuck, "partition 0 never reached the handler");
    assert!(
        others_done,
        "partition 1 did not flow while partition 0 was stuck"
    );
    assert!(
        stuck_rooms
            .iter()
            .all(|room| !handled_while_stuck.contains_key(room)),
        "the stuck partition handled nothing before the gate opened"
    );
    assert!(all_done, "only {} events handled", handler.recorder.count());
    for (room, seqs) in seqs_by_room(&handler.recorder) {
        assert_eq!(seqs, (1..=100).collect::<Vec<_>>(), "order of {room}");
    }
    assert_eq!(metrics.for_group(&group).offset_gaps_unrepaired.get(), 0);
}
