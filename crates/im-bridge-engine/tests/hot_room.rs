//! Hot rooms against the real broker, MariaDB and the fake Tencent IM with
//! its per-group limit on (docs/design.md#hot-rooms): a gift storm never
//! puts more than the limit into the room's group in any second, every gift
//! is shown exactly once across single messages and gift batches, a kick is
//! not held behind the gifts before it, a quiet room on the same partition
//! is not held behind the hot one, and a batch — or a gift sent alone —
//! sent but not recorded before a crash is resent as the very same message.

use consumer_runtime::{
    ConsumerMetrics,
    testing::{TestProducer, envelope, test_settings, wait_until},
};
use fake_tencent_im::{FakeImConfig, FakeImHandle, RecordedMessage};
use im_bridge_engine::{BridgeConfig, ImBridge};
use outbox_schema::{
    names::dead_letter_topic,
    pb::{self, room_outbox_event::Payload},
};
use room_im::{ImOutcome, RoomIm};
use serde_json::Value;
use std::{collections::HashMap, time::Duration};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(120);
const TEMPLATE: &str = "room_{room_id}";
const APP: u64 = 1_400_000_002;

struct Fixture {
    db: testkit::TestDb,
    fake: FakeImHandle,
    topic: String,
    group: String,
    producer: TestProducer,
    metrics: ConsumerMetrics,
}

/// One partition, so every room of the test shares it.
async fn fixture() -> Fixture {
    let db = testkit::TestDb::new().await;
    let fake = fake_tencent_im::spawn(FakeImConfig::new(APP, "hot-key", "admin"))
        .await
        .unwrap();
    let topic = testkit::unique("hot_topic_");
    let group = testkit::unique("hot_group_");
    testkit::create_topic(&topic, 1).await;
    testkit::create_topic(&dead_letter_topic(&group), 1).await;
    Fixture {
        db,
        fake,
        topic,
        group,
        producer: TestProducer::new(&testkit::kafka_bootstrap()).unwrap(),
        metrics: ConsumerMetrics::unregistered(),
    }
}

impl Fixture {
    /// A client pacing groups to `per_second` messages.
    fn client(&self, per_second: u32) -> tencent_im::Client {
        let mut config =
            tencent_im::ClientConfig::new(self.fake.base_url(), APP, "admin", "hot-key");
        config.group_msg_per_second = per_second;
        tencent_im::Client::new(config).unwrap()
    }

    fn start(&self, bridge: BridgeConfig, per_second: u32) -> (CancellationToken, JoinHandle<()>) {
        let settings =
            test_settings(&testkit::kafka_bootstrap(), &self.topic, &self.group, 16).unwrap();
        let bridge = ImBridge::build(
            settings,
            bridge,
            TEMPLATE.into(),
            self.client(per_second),
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

    async fn consumed(&self, count: usize) -> bool {
        let count = count as u64;
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
            title: "storm".into(),
            mic_seat_count: 8,
        }),
    )
}

fn gift(room: &str, seq: u64) -> pb::RoomOutboxEvent {
    envelope(
        &id(),
        room,
        seq,
        Payload::RoomGiftSent(pb::RoomGiftSent {
            sender_id: format!("fan-{seq}"),
            receiver_id: "host".into(),
            gift_id: "rocket".into(),
            count: 1,
            unit_value: 100,
            total_value: 100,
        }),
    )
}

fn joined(room: &str, seq: u64) -> pb::RoomOutboxEvent {
    envelope(
        &id(),
        room,
        seq,
        Payload::RoomUserJoined(pb::RoomUserJoined {
            user_id: format!("listener-{seq}"),
        }),
    )
}

fn kicked(room: &str, seq: u64) -> pb::RoomOutboxEvent {
    envelope(
        &id(),
        room,
        seq,
        Payload::RoomUserKicked(pb::RoomUserKicked {
            actor_id: "owner".into(),
            target_id: "troll".into(),
            ban_until_ms: 0,
        }),
    )
}

/// The event ids a recorded group message carries: one for a single event,
/// every row's for a gift batch.
fn carried(message: &RecordedMessage) -> Vec<String> {
    let data: Value = serde_json::from_str(
        message.msg_body[0]["MsgContent"]["Data"]
            .as_str()
            .expect("custom data"),
    )
    .expect("json data");
    match data["type"].as_str() {
        Some("room_event") => vec![data["event_id"].as_str().unwrap().to_string()],
        Some("room_event_batch") => data["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row[0].as_str().unwrap().to_string())
            .collect(),
        other => panic!("unexpected message type {other:?}"),
    }
}

/// How many times each event id was shown in `messages`.
fn shown(messages: &[RecordedMessage]) -> HashMap<String, usize> {
    let mut shown = HashMap::new();
    for message in messages {
        for event_id in carried(message) {
            *shown.entry(event_id).or_default() += 1;
        }
    }
    shown
}

fn is_batch(message: &RecordedMessage) -> bool {
    message.msg_body[0]["MsgContent"]["Desc"] == "RoomGiftBatch"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gift_storm_stays_within_the_limit_shows_every_gift_once_and_puts_the_kick_first() {
    let f = fixture().await;
    let room = testkit::unique("hot-");
    let group_id = format!("room_{room}");
    let mut events = vec![created(&room)];
    events.extend((2..=301).map(|seq| gift(&room, seq)));
    let kick = kicked(&room, 302);
    events.push(kick.clone());
    events.extend((303..=400).map(|seq| gift(&room, seq)));
    f.producer.send_events(&f.topic, &events).await.unwrap();
    let consumer = f.start(BridgeConfig::default(), 40);
    assert!(f.consumed(events.len()).await);
    stop(consumer).await;

    let messages = f.fake.group_messages(&group_id);
    let shown = shown(&messages);
    for event in &events[1..] {
        assert_eq!(
            shown.get(&event.event_id),
            Some(&1),
            "{} shown once",
            event.room_event_seq
        );
    }
    assert_eq!(shown.len(), events.len() - 1, "nothing else shown");
    assert!(messages.iter().any(is_batch), "the storm was merged");
    assert!(
        messages.len() < 100,
        "{} messages for 399 events",
        messages.len()
    );
    let stats = f.fake.stats();
    let group = &stats.groups[&group_id];
    assert!(
        group.peak_per_second <= 40,
        "peak {}",
        group.peak_per_second
    );
    assert_eq!(group.freq_dropped, 0, "never refused by the limit");
    // The kick went out before the message carrying the gift queued just
    // before it: control messages are not held behind gifts.
    let seq_of = |event_id: &str| {
        messages
            .iter()
            .find(|message| carried(message).iter().any(|id| id == event_id))
            .map(|message| message.msg_seq)
            .unwrap()
    };
    assert!(seq_of(&kick.event_id) < seq_of(&events[300].event_id));
    let kick_message = messages
        .iter()
        .find(|message| carried(message) == [kick.event_id.clone()])
        .unwrap();
    assert_eq!(kick_message.msg_priority.as_deref(), Some("High"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_room_is_not_held_behind_a_hot_room_that_waits_for_its_budget() {
    let f = fixture().await;
    let hot = testkit::unique("hot-");
    let quiet = testkit::unique("quiet-");
    let mut events = vec![created(&hot), created(&quiet)];
    events.extend((2..=121).map(|seq| gift(&hot, seq)));
    events.extend((2..=4).map(|seq| joined(&quiet, seq)));
    f.producer.send_events(&f.topic, &events).await.unwrap();
    // Two messages a second and small batches: the hot room needs many
    // seconds and defers most of its gifts batch after batch.
    let bridge = BridgeConfig {
        max_message_bytes: 1_500,
        ..BridgeConfig::default()
    };
    let consumer = f.start(bridge, 2);
    assert!(f.consumed(events.len()).await);
    stop(consumer).await;

    let hot_messages = f.fake.group_messages(&format!("room_{hot}"));
    let quiet_messages = f.fake.group_messages(&format!("room_{quiet}"));
    assert_eq!(quiet_messages.len(), 3);
    let last = |messages: &[RecordedMessage]| messages.iter().map(|m| m.received_at_ms).max();
    assert!(
        last(&quiet_messages) < last(&hot_messages),
        "the quiet room finished while the hot room still waited"
    );
    let shown = shown(&hot_messages);
    assert_eq!(shown.len(), 120);
    assert!(shown.values().all(|count| *count == 1));
    let stats = f.fake.stats();
    let group = &stats.groups[&format!("room_{hot}")];
    assert!(group.peak_per_second <= 2, "peak {}", group.peak_per_second);
    assert_eq!(group.freq_dropped, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gift_sent_alone_but_not_recorded_is_not_merged_into_a_batch_after_a_crash() {
    let f = fixture().await;
    let room = testkit::unique("alone-");
    let gifts: Vec<_> = (2..=5).map(|seq| gift(&room, seq)).collect();
    let quiet = f.client(40);
    quiet
        .ensure_group(&tencent_im::CreateGroupRequest::av_chat_room(
            format!("room_{room}"),
            "alone",
        ))
        .await
        .unwrap();
    let before_crash = RoomIm::new(
        quiet.clone(),
        f.db.pool.clone(),
        "alone-group".into(),
        TEMPLATE.into(),
        BridgeConfig::default(),
    );
    // The state a crash leaves on a quiet pass: the first gift written
    // down as a batch of one and sent alone, not recorded.
    let alone = before_crash.single_gift(&gifts[0]);
    room_im::im_batches::plan(&f.db.pool, "alone-group", std::slice::from_ref(&alone), 0)
        .await
        .unwrap();
    let request = tencent_im::SendGroupMsgRequest {
        random: alone.msg_random,
        ..tencent_im::SendGroupMsgRequest::for_event(
            &alone.group_id,
            &alone.batch_id,
            serde_json::from_str(&alone.msg_body).unwrap(),
        )
    };
    quiet.send_group_msg(&request).await.unwrap();
    // A quiet pass writes a gift down before sending it alone, too: with
    // the send refused, the gift stays written down for its resend.
    f.fake.inject_fault(fake_tencent_im::FaultRule::http_status(
        "group_open_http_svc/send_group_msg",
        502,
    ));
    let refused = [(&gifts[3], opentelemetry::Context::new())];
    assert!(before_crash.apply(&refused).await.is_err());
    let pending =
        room_im::im_batches::pending_for(&f.db.pool, "alone-group", &[gifts[3].event_id.as_str()])
            .await
            .unwrap();
    assert_eq!(pending, vec![before_crash.single_gift(&gifts[3])]);

    // Redelivered with the rest on a hot pass (one message a second), where
    // gifts are merged: the first is resent as it was, not merged again.
    let after_crash = RoomIm::new(
        f.client(1),
        f.db.pool.clone(),
        "alone-group".into(),
        TEMPLATE.into(),
        BridgeConfig::default(),
    );
    let traced: Vec<_> = gifts
        .iter()
        .map(|event| (event, opentelemetry::Context::new()))
        .collect();
    let outcomes = after_crash.apply(&traced).await.unwrap();
    assert_eq!(outcomes[0], ImOutcome::Duplicate);
    let messages = f.fake.group_messages(&format!("room_{room}"));
    assert!(
        messages.iter().any(is_batch),
        "the hot pass merged the others"
    );
    let shown = shown(&messages);
    let first = &gifts[0].event_id;
    assert_eq!(shown.get(first), Some(&1), "the first gift shown once");
    assert_eq!(
        f.fake.stats().deduplicated,
        1,
        "the resend absorbed by Tencent's dedup"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_sent_but_not_recorded_is_resent_as_the_same_message() {
    let f = fixture().await;
    let room = testkit::unique("crash-");
    let client = f.client(40);
    let room_im = RoomIm::new(
        client.clone(),
        f.db.pool.clone(),
        "crash-group".into(),
        TEMPLATE.into(),
        BridgeConfig::default(),
    );
    let gifts: Vec<_> = (2..=6).map(|seq| gift(&room, seq)).collect();
    let refs: Vec<&pb::RoomOutboxEvent> = gifts.iter().collect();
    client
        .ensure_group(&tencent_im::CreateGroupRequest::av_chat_room(
            format!("room_{room}"),
            "crash",
        ))
        .await
        .unwrap();
    // The state a crash leaves: the batch written down and sent, its
    // events not recorded.
    let batch = room_im.gift_batch(&refs).unwrap();
    room_im::im_batches::plan(&f.db.pool, "crash-group", std::slice::from_ref(&batch), 0)
        .await
        .unwrap();
    let request = tencent_im::SendGroupMsgRequest {
        random: batch.msg_random,
        ..tencent_im::SendGroupMsgRequest::for_event(
            &batch.group_id,
            &batch.batch_id,
            serde_json::from_str(&batch.msg_body).unwrap(),
        )
    };
    client.send_group_msg(&request).await.unwrap();

    // Redelivered, in two parts as a restart might hand them over.
    let traced: Vec<_> = refs
        .iter()
        .map(|event| (*event, opentelemetry::Context::new()))
        .collect();
    let first = room_im.apply(&traced[..2]).await.unwrap();
    let rest = room_im.apply(&traced[2..]).await.unwrap();
    assert!(
        first
            .iter()
            .chain(&rest)
            .all(|outcome| *outcome == ImOutcome::Duplicate)
    );
    let messages = f.fake.group_messages(&format!("room_{room}"));
    assert_eq!(messages.len(), 1, "the resend was the same message");
    assert_eq!(
        f.fake.stats().deduplicated,
        1,
        "absorbed by Tencent's dedup"
    );
    let ids: Vec<&str> = gifts.iter().map(|gift| gift.event_id.as_str()).collect();
    let recorded = consumer_runtime::dedup::processed(&f.db.pool, "crash-group", &ids)
        .await
        .unwrap();
    assert_eq!(recorded.len(), 5, "every merged event recorded");
    let pending: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM im_pending_batch_events")
        .fetch_one(&f.db.pool)
        .await
        .unwrap();
    assert_eq!(pending, 0, "the batch is settled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebalance_during_a_storm_stays_within_twice_the_limit_and_loses_nothing() {
    let f = fixture().await;
    // Two partitions so the second member gets one of them.
    let topic = testkit::unique("hot_topic_");
    testkit::create_topic(&topic, 2).await;
    let f = Fixture { topic, ..f };
    let hot = testkit::unique("hot-");
    let mut events = vec![created(&hot)];
    events.extend((2..=161).map(|seq| gift(&hot, seq)));
    f.producer.send_events(&f.topic, &events).await.unwrap();
    let bridge = BridgeConfig {
        max_message_bytes: 1_500,
        ..BridgeConfig::default()
    };
    let per_second = 4;
    let first = f.start(bridge.clone(), per_second);
    // The second member joins while the first is still pacing the storm
    // (160 gifts at about ten a message and four messages a second).
    assert!(
        wait_until(WAIT, || async {
            f.fake.group_messages(&format!("room_{hot}")).len() >= 3
        })
        .await
    );
    let second = f.start(bridge, per_second);
    assert!(
        wait_until(WAIT, || async {
            shown(&f.fake.group_messages(&format!("room_{hot}"))).len() >= 160
        })
        .await
    );
    stop(first).await;
    stop(second).await;

    let messages = f.fake.group_messages(&format!("room_{hot}"));
    let shown = shown(&messages);
    assert_eq!(shown.len(), 160, "every gift shown");
    assert!(shown.values().all(|count| *count == 1), "none twice");
    let stats = f.fake.stats();
    let group = &stats.groups[&format!("room_{hot}")];
    println!(
        "rebalance during a storm: peak {} messages in one second (limit {per_second})",
        group.peak_per_second
    );
    assert!(
        group.peak_per_second <= 2 * u64::from(per_second),
        "peak {} above twice the limit",
        group.peak_per_second
    );
}
