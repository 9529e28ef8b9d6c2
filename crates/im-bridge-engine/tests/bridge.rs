//! im-bridge against the real broker, MariaDB and the fake Tencent IM:
//! group lifecycle and kick control, one message per event despite
//! redelivery, retries on throttling and 5xx, dead letter on a permanent
//! error, UserSig regeneration, and no repeat after a kill before commit.

use consumer_runtime::{
    ConsumerMetrics, Delivery, Handler, HandlerError, Outcome,
    testing::{TestProducer, envelope, header, read_topic, test_settings, wait_until},
};
use fake_tencent_im::{FakeImConfig, FakeImHandle, FaultRule};
use im_bridge_engine::{BridgeConfig, ImBridge, handler::ImBridgeHandler};
use outbox_schema::{
    names::{HEADER_DLQ_REASON, HEADER_EVENT_ID, dead_letter_topic},
    pb::{self, room_outbox_event::Payload},
};
use std::{
    sync::Arc,
    time::{Duration, Instant},
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);
const SEND_GROUP_MSG: &str = "group_open_http_svc/send_group_msg";
const TEMPLATE: &str = "room_{room_id}";

struct Fixture {
    db: testkit::TestDb,
    fake: FakeImHandle,
    im: tencent_im::Client,
    topic: String,
    group: String,
    producer: TestProducer,
    metrics: ConsumerMetrics,
}

async fn fixture() -> Fixture {
    let db = testkit::TestDb::new().await;
    let fake = fake_tencent_im::spawn(FakeImConfig::new(1_400_000_001, "bridge-key", "admin"))
        .await
        .unwrap();
    let im = tencent_im::Client::new(tencent_im::ClientConfig::new(
        fake.base_url(),
        1_400_000_001,
        "admin",
        "bridge-key",
    ))
    .unwrap();
    let topic = testkit::unique("bridge_topic_");
    let group = testkit::unique("bridge_group_");
    testkit::create_topic(&topic, 2).await;
    testkit::create_topic(&dead_letter_topic(&group), 1).await;
    Fixture {
        db,
        fake,
        im,
        topic,
        group,
        producer: TestProducer::new(&testkit::kafka_bootstrap()).unwrap(),
        metrics: ConsumerMetrics::unregistered(),
    }
}

impl Fixture {
    fn start(
        &self,
        bridge: BridgeConfig,
        max_reconsume_times: u32,
    ) -> (CancellationToken, JoinHandle<()>) {
        let settings = test_settings(
            &testkit::kafka_bootstrap(),
            &self.topic,
            &self.group,
            max_reconsume_times,
        )
        .unwrap();
        let bridge = ImBridge::build(
            settings,
            bridge,
            TEMPLATE.into(),
            self.im.clone(),
            self.db.pool.clone(),
            &self.metrics,
        )
        .unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { bridge.run(shutdown).await.unwrap() }
        });
        (shutdown, task)
    }

    async fn publish(&self, event: &pb::RoomOutboxEvent) {
        self.producer.send_event(&self.topic, event).await.unwrap();
    }

    async fn consumed(&self, count: u64) -> bool {
        wait_until(WAIT, || async {
            self.metrics.for_group(&self.group).consumed.get() >= count
        })
        .await
    }
}

async fn stop(consumer: (CancellationToken, JoinHandle<()>)) {
    consumer.0.cancel();
    consumer.1.await.unwrap();
}

fn id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn created(room: &str) -> pb::RoomOutboxEvent {
    envelope(
        &id(),
        room,
        1,
        Payload::RoomCreated(pb::RoomCreated {
            owner_id: "owner".into(),
            title: "Friday night".into(),
            mic_seat_count: 8,
        }),
    )
}

fn joined(room: &str, seq: u64) -> pb::RoomOutboxEvent {
    envelope(
        &id(),
        room,
        seq,
        Payload::RoomUserJoined(pb::RoomUserJoined {
            user_id: format!("user-{seq}"),
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn room_lifecycle_drives_the_im_group() {
    let f = fixture().await;
    let room = testkit::unique("room-");
    let group_id = format!("room_{room}");
    let kicked = envelope(
        &id(),
        &room,
        3,
        Payload::RoomUserKicked(pb::RoomUserKicked {
            actor_id: "owner".into(),
            target_id: "troll".into(),
            ban_until_ms: service_kit::time::now_ms() + 3_600_000,
        }),
    );
    let heat = envelope(
        &id(),
        &room,
        4,
        Payload::RoomHeatChanged(pb::RoomHeatChanged { heat: 5, delta: 5 }),
    );
    let closed = envelope(
        &id(),
        &room,
        5,
        Payload::RoomClosed(pb::RoomClosed {
            closed_by: "owner".into(),
        }),
    );
    for event in [&created(&room), &joined(&room, 2), &kicked, &heat] {
        f.publish(event).await;
    }
    let bridge = BridgeConfig {
        kick_mute: true,
        silent_event_types: vec!["RoomHeatChanged".into()],
        ..BridgeConfig::default()
    };
    let consumer = f.start(bridge, 16);
    assert!(f.consumed(4).await);

    let group = f
        .fake
        .groups()
        .into_iter()
        .find(|g| g.group_id == group_id)
        .expect("group created");
    assert_eq!(group.name, "Friday night");
    assert_eq!(group.removed_members, vec!["troll".to_string()]);
    assert!(group.muted_until.contains_key("troll"), "kicked user muted");
    let messages = f.fake.group_messages(&group_id);
    assert_eq!(messages.len(), 2, "join and kick; heat is silent");
    let data: serde_json::Value = serde_json::from_str(
        messages[1].msg_body[0]["MsgContent"]["Data"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(data["event_type"], "RoomUserKicked");
    assert_eq!(data["data"]["target_id"], "troll");
    assert_eq!(
        messages[1].random,
        tencent_im::random_from_event_id(&kicked.event_id)
    );

    f.publish(&closed).await;
    assert!(f.consumed(5).await);
    stop(consumer).await;
    assert!(
        f.fake.groups().iter().all(|g| g.group_id != group_id),
        "group destroyed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_event_delivered_twice_sends_one_message() {
    let f = fixture().await;
    let room = testkit::unique("room-");
    let event = joined(&room, 2);
    f.publish(&created(&room)).await;
    f.publish(&event).await;
    f.publish(&event).await;
    let consumer = f.start(BridgeConfig::default(), 16);
    assert!(f.consumed(3).await);
    stop(consumer).await;
    // Replayed later (beyond Tencent's window, say): still deduplicated by us.
    let consumer = f.start(BridgeConfig::default(), 16);
    f.publish(&event).await;
    assert!(f.consumed(4).await);
    stop(consumer).await;

    assert_eq!(f.fake.group_messages(&format!("room_{room}")).len(), 1);
    let stats = f.fake.stats();
    assert_eq!(
        stats.calls_by_api.get(SEND_GROUP_MSG),
        Some(&1),
        "our dedup, not Tencent's"
    );
    assert_eq!(f.metrics.for_group(&f.group).duplicates.get(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_and_server_errors_are_retried_with_backoff_then_delivered() {
    let f = fixture().await;
    let room = testkit::unique("room-");
    f.publish(&created(&room)).await;
    f.publish(&joined(&room, 2)).await;
    f.fake.inject_fault(
        FaultRule::error_code(SEND_GROUP_MSG, tencent_im::codes::REST_FREQ_LIMIT).times(2),
    );
    f.fake
        .inject_fault(FaultRule::http_status(SEND_GROUP_MSG, 502));
    let consumer = f.start(BridgeConfig::default(), 16);
    assert!(f.consumed(2).await);
    stop(consumer).await;
    assert_eq!(f.fake.group_messages(&format!("room_{room}")).len(), 1);
    assert_eq!(f.metrics.for_group(&f.group).retried.get(), 3);
    assert_eq!(f.metrics.for_group(&f.group).dead_lettered_handler.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_im_error_dead_letters_with_the_code() {
    let f = fixture().await;
    let room = testkit::unique("room-");
    let rejected = joined(&room, 2);
    let next = joined(&room, 3);
    f.publish(&created(&room)).await;
    f.publish(&rejected).await;
    f.publish(&next).await;
    f.fake.inject_fault(FaultRule::error_code(
        SEND_GROUP_MSG,
        tencent_im::codes::GROUP_BAD_PARAM,
    ));
    let consumer = f.start(BridgeConfig::default(), 16);
    assert!(f.consumed(2).await, "created and the next join");
    assert!(
        wait_until(WAIT, || async {
            f.metrics.for_group(&f.group).dead_lettered_handler.get() == 1
        })
        .await
    );
    stop(consumer).await;

    assert_eq!(
        f.metrics.for_group(&f.group).retried.get(),
        0,
        "permanent: no retries"
    );
    let dead = read_topic(
        &testkit::kafka_bootstrap(),
        &dead_letter_topic(&f.group),
        1,
        WAIT,
    )
    .await
    .unwrap();
    assert_eq!(
        header(&dead[0], HEADER_EVENT_ID).as_deref(),
        Some(rejected.event_id.as_str())
    );
    let reason = header(&dead[0], HEADER_DLQ_REASON).unwrap();
    assert!(reason.contains("error_code=10004"), "{reason}");
    let messages = f.fake.group_messages(&format!("room_{room}"));
    assert_eq!(messages.len(), 1);
    assert_eq!(
        messages[0].random,
        tencent_im::random_from_event_id(&next.event_id)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_usersig_is_regenerated_and_the_message_delivered() {
    let f = fixture().await;
    let room = testkit::unique("room-");
    f.publish(&created(&room)).await;
    f.publish(&joined(&room, 2)).await;
    f.fake.inject_fault(FaultRule::error_code(
        SEND_GROUP_MSG,
        tencent_im::codes::USERSIG_EXPIRED,
    ));
    let consumer = f.start(BridgeConfig::default(), 16);
    assert!(f.consumed(2).await);
    stop(consumer).await;
    assert_eq!(f.fake.group_messages(&format!("room_{room}")).len(), 1);
    let stats = f.im.stats();
    assert_eq!(stats.expired_sig_retries, 1);
    assert_eq!(
        stats.usersig_generations, 2,
        "first signature, then a fresh one"
    );
    assert_eq!(
        f.metrics.for_group(&f.group).retried.get(),
        0,
        "the client handled it"
    );
}

/// The real handler, hanging after one event's effect like a process killed
/// before its offset commit.
struct HangsAfter {
    inner: ImBridgeHandler,
    event_id: String,
    hanging: CancellationToken,
    release: CancellationToken,
}

impl Handler<pb::RoomOutboxEvent> for HangsAfter {
    async fn handle(
        &self,
        delivery: &Delivery<pb::RoomOutboxEvent>,
    ) -> Result<Outcome, HandlerError> {
        let outcome = self.inner.handle(delivery).await?;
        if delivery.message.event_id == self.event_id {
            self.hanging.cancel();
            self.release.cancelled().await;
        }
        Ok(outcome)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_sending_before_commit_does_not_send_again() {
    let f = fixture().await;
    let room = testkit::unique("room-");
    let victim = joined(&room, 2);
    for event in [&created(&room), &victim, &joined(&room, 3)] {
        f.publish(event).await;
    }
    let hanging = CancellationToken::new();
    let release = CancellationToken::new();
    let handler = HangsAfter {
        inner: ImBridgeHandler::new(room_im::RoomIm::new(
            f.im.clone(),
            f.db.pool.clone(),
            f.group.clone(),
            TEMPLATE.into(),
            BridgeConfig::default(),
        )),
        event_id: victim.event_id.clone(),
        hanging: hanging.clone(),
        release: release.clone(),
    };
    let settings = test_settings(&testkit::kafka_bootstrap(), &f.topic, &f.group, 16).unwrap();
    let killed = consumer_runtime::Consumer::new(settings, Arc::new(handler), &f.metrics).unwrap();
    let task = tokio::spawn(killed.run(CancellationToken::new()));
    hanging.cancelled().await;
    task.abort();
    let _ = task.await;

    let consumer = f.start(BridgeConfig::default(), 16);
    assert!(
        wait_until(WAIT, || async {
            f.fake.group_messages(&format!("room_{room}")).len() == 2
        })
        .await
    );
    assert!(
        wait_until(WAIT, || async {
            f.metrics.for_group(&f.group).duplicates.get() >= 1
        })
        .await
    );
    stop(consumer).await;
    release.cancel();
    assert_eq!(
        f.fake.stats().calls_by_api.get(SEND_GROUP_MSG),
        Some(&2),
        "victim sent once"
    );
}

/// Not a benchmark with assertions: prints events/s for the closing report.
/// Every event is one IM call here; the client's rate limit is lifted so the
/// number shows the bridge, not Tencent's 200 calls/s per API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throughput_report() {
    let mut f = fixture().await;
    let mut im =
        tencent_im::ClientConfig::new(f.fake.base_url(), 1_400_000_001, "admin", "bridge-key");
    im.rate_limit_per_api = 100_000;
    f.im = tencent_im::Client::new(im).unwrap();
    let mut events = Vec::new();
    for room in 0..40 {
        events.push(created(&format!("tp-room-{room}")));
    }
    for seq in 2..=50u64 {
        for room in 0..40 {
            events.push(joined(&format!("tp-room-{room}"), seq));
        }
    }
    // Batched like the relay's production.
    f.producer.send_events(&f.topic, &events).await.unwrap();
    let started = Instant::now();
    let consumer = f.start(BridgeConfig::default(), 16);
    assert!(f.consumed(events.len() as u64).await);
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "im-bridge throughput: {} events in {elapsed:.2}s = {:.0} events/s (incl. group join)",
        events.len(),
        events.len() as f64 / elapsed
    );
    stop(consumer).await;
}
