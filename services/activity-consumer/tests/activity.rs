//! activity-consumer end to end against the real broker, MariaDB and the
//! fake Tencent IM: exactly-once leaderboard and contribution effects under
//! redelivery, the gRPC entry on the same dedup path, big-gift broadcasts
//! retried from the table after IM failures, and a permanent IM error
//! recorded on the row. Also prints the consume throughput.

use activity_consumer::{
    App,
    config::{ActivityRule, Config, RankBy},
};
use consumer_runtime::testing::{TestProducer, envelope, wait_until};
use fake_tencent_im::{FakeImConfig, FakeImHandle, FaultRule};
use hyapp_api::activity::{
    ConsumeRoomEventRequest, activity_service_client::ActivityServiceClient,
};
use outbox_schema::{
    names::dead_letter_topic,
    pb::{self, room_outbox_event::Payload},
};
use service_kit::duration::ConfigDuration;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);
const SEND_GROUP_MSG: &str = "group_open_http_svc/send_group_msg";

struct Fixture {
    db: testkit::TestDb,
    fake: FakeImHandle,
    config: Config,
    producer: TestProducer,
}

async fn fixture(partitions: i32) -> Fixture {
    let db = testkit::TestDb::new().await;
    let fake = fake_tencent_im::spawn(FakeImConfig::new(1_400_000_002, "activity-key", "admin"))
        .await
        .unwrap();
    let topic = testkit::unique("activity_topic_");
    let group = testkit::unique("activity_group_");
    testkit::create_topic(&topic, partitions).await;
    testkit::create_topic(&dead_letter_topic(&group), 1).await;
    let mut config = Config::default();
    config.mysql.url = db.url.clone();
    config.rocketmq.enabled = true;
    config.rocketmq.name_servers = vec![testkit::kafka_bootstrap()];
    config.rocketmq.room_outbox.topic = topic;
    config.consumer.group = group;
    config.consumer.initial_backoff = ConfigDuration::from_millis(50);
    config.consumer.max_backoff = ConfigDuration::from_millis(400);
    config.consumer.commit_interval = ConfigDuration::from_millis(200);
    config.consumer.session_timeout = ConfigDuration::from_secs(6);
    config.tencent_im.base_url = fake.base_url();
    config.tencent_im.sdk_app_id = 1_400_000_002;
    config.tencent_im.admin_identifier = "admin".into();
    config.tencent_im.secret_key = service_kit::Secret::new("activity-key");
    config.activity.activities = vec![
        ActivityRule {
            id: "wealth".into(),
            gift_ids: Vec::new(),
            rank_by: RankBy::Sender,
            starts_at_ms: 0,
            ends_at_ms: 0,
        },
        ActivityRule {
            id: "roses".into(),
            gift_ids: vec!["rose".into()],
            rank_by: RankBy::Receiver,
            starts_at_ms: 0,
            ends_at_ms: 0,
        },
    ];
    config.activity.big_gift_threshold = 10_000;
    config.activity.broadcast_group_id = testkit::unique("global_");
    config.activity.broadcast.initial_backoff = ConfigDuration::from_millis(50);
    config.activity.broadcast.sweep_interval = ConfigDuration::from_millis(100);
    config.grpc_listen = "127.0.0.1:0".into();
    config.http_listen = "127.0.0.1:0".into();
    Fixture {
        db,
        fake,
        config,
        producer: TestProducer::new(&testkit::kafka_bootstrap()).unwrap(),
    }
}

impl Fixture {
    async fn start(&self) -> (CancellationToken, JoinHandle<()>, std::net::SocketAddr) {
        let app = App::build(self.config.clone()).await.unwrap();
        let grpc = app.server_addr(activity_consumer::GRPC_SERVER).unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { app.run(shutdown).await.unwrap() }
        });
        (shutdown, task, grpc)
    }

    async fn publish(&self, event: &pb::RoomOutboxEvent) {
        self.producer
            .send_event(&self.config.rocketmq.room_outbox.topic, event)
            .await
            .unwrap();
    }

    async fn dedup_has(&self, event_id: &str) -> bool {
        let row: Option<(i64,)> = sqlx::query_as(
            "SELECT processed_at_ms FROM consumer_dedup WHERE consumer_group = ? AND event_id = ?",
        )
        .bind(&self.config.consumer.group)
        .bind(event_id)
        .fetch_optional(&self.db.pool)
        .await
        .unwrap();
        row.is_some()
    }

    async fn score(&self, activity: &str, user: &str) -> u64 {
        let row: Option<(u64,)> = sqlx::query_as(
            "SELECT score FROM activity_gift_leaderboard WHERE activity_id = ? AND user_id = ?",
        )
        .bind(activity)
        .bind(user)
        .fetch_optional(&self.db.pool)
        .await
        .unwrap();
        row.map_or(0, |row| row.0)
    }

    async fn broadcast(&self, event_id: &str) -> Option<(String, u32, String)> {
        sqlx::query_as(
            "SELECT status, attempts, last_error \
             FROM activity_broadcasts WHERE event_id = ?",
        )
        .bind(event_id)
        .fetch_optional(&self.db.pool)
        .await
        .unwrap()
    }
}

fn gift(room: &str, seq: u64, gift_id: &str, total_value: u64) -> pb::RoomOutboxEvent {
    envelope(
        &uuid::Uuid::new_v4().to_string(),
        room,
        seq,
        Payload::RoomGiftSent(pb::RoomGiftSent {
            sender_id: "sender".into(),
            receiver_id: "receiver".into(),
            gift_id: gift_id.into(),
            count: 1,
            unit_value: total_value,
            total_value,
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redelivered_gifts_count_once_on_both_entries() {
    let f = fixture(2).await;
    let room = testkit::unique("room-");
    let rose = gift(&room, 1, "rose", 50);
    let car = gift(&room, 2, "car", 20_000);
    let joined = envelope(
        &uuid::Uuid::new_v4().to_string(),
        &room,
        3,
        Payload::RoomUserJoined(pb::RoomUserJoined {
            user_id: "x".into(),
        }),
    );
    let last = gift(&room, 4, "rose", 5);
    for event in [&rose, &rose, &car, &car, &joined, &last] {
        f.publish(event).await;
    }
    let (shutdown, task, grpc) = f.start().await;
    // One room, one partition, in order: once the last is applied, all are.
    assert!(wait_until(WAIT, || async { f.dedup_has(&last.event_id).await }).await);

    assert_eq!(f.score("wealth", "sender").await, 50 + 20_000 + 5);
    assert_eq!(f.score("roses", "receiver").await, 55);
    let (total, count): (u64, u64) = sqlx::query_as(
        "SELECT total_value, gift_count FROM activity_room_contribution WHERE room_id = ?",
    )
    .bind(&room)
    .fetch_one(&f.db.pool)
    .await
    .unwrap();
    assert_eq!((total, count), (20_055, 3));
    assert!(
        wait_until(WAIT, || async {
            f.broadcast(&car.event_id)
                .await
                .is_some_and(|b| b.0 == "delivered")
        })
        .await
    );
    let broadcasts = f.fake.group_messages(&f.config.activity.broadcast_group_id);
    assert_eq!(broadcasts.len(), 1, "one broadcast for the big gift");

    // The relay's direct mode: same path, same dedup.
    let mut client = ActivityServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    let reply = client
        .consume_room_event(ConsumeRoomEventRequest {
            event: Some(rose.clone()),
        })
        .await
        .unwrap();
    assert!(reply.into_inner().duplicate);
    let direct = gift(&room, 5, "rose", 7);
    for expected_duplicate in [false, true] {
        let reply = client
            .consume_room_event(ConsumeRoomEventRequest {
                event: Some(direct.clone()),
            })
            .await
            .unwrap();
        assert_eq!(reply.into_inner().duplicate, expected_duplicate);
    }
    assert_eq!(f.score("roses", "receiver").await, 62);
    let invalid = client
        .consume_room_event(ConsumeRoomEventRequest {
            event: Some(pb::RoomOutboxEvent::default()),
        })
        .await
        .unwrap_err();
    assert_eq!(invalid.code(), tonic::Code::InvalidArgument);

    shutdown.cancel();
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_failures_are_retried_from_the_table_or_recorded() {
    let f = fixture(1).await;
    let room = testkit::unique("room-");
    let retried = gift(&room, 1, "car", 30_000);
    let rejected = gift(&room, 2, "plane", 90_000);
    f.fake
        .inject_fault(FaultRule::http_status(SEND_GROUP_MSG, 503).times(2));
    let (shutdown, task, _) = f.start().await;
    f.publish(&retried).await;
    assert!(
        wait_until(WAIT, || async {
            f.broadcast(&retried.event_id)
                .await
                .is_some_and(|b| b.0 == "delivered")
        })
        .await
    );
    let (_, attempts, _) = f.broadcast(&retried.event_id).await.unwrap();
    assert_eq!(attempts, 3, "two 503s, then delivered by the sweeper");

    f.fake.inject_fault(FaultRule::error_code(
        SEND_GROUP_MSG,
        tencent_im::codes::GROUP_BAD_PARAM,
    ));
    f.publish(&rejected).await;
    assert!(
        wait_until(WAIT, || async {
            f.broadcast(&rejected.event_id)
                .await
                .is_some_and(|b| b.0 == "failed")
        })
        .await
    );
    let (_, attempts, last_error) = f.broadcast(&rejected.event_id).await.unwrap();
    assert_eq!(attempts, 1, "permanent: not retried");
    assert!(last_error.contains("10004"), "{last_error}");
    assert_eq!(
        f.score("wealth", "sender").await,
        120_000,
        "the gift itself counted"
    );
    shutdown.cancel();
    task.await.unwrap();
    assert_eq!(
        f.fake
            .group_messages(&f.config.activity.broadcast_group_id)
            .len(),
        1
    );
}

/// Not a benchmark with assertions: prints events/s for the closing report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throughput_report() {
    let f = fixture(4).await;
    let events: Vec<_> = (0..4000u64)
        .map(|n| gift(&format!("room-{}", n % 64), n / 64 + 1, "rose", 10))
        .collect();
    f.producer
        .send_events(&f.config.rocketmq.room_outbox.topic, &events)
        .await
        .unwrap();
    let started = Instant::now();
    let (shutdown, task, _) = f.start().await;
    let total = events.len() as i64;
    assert!(
        wait_until(Duration::from_secs(120), || async {
            let (count,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM consumer_dedup")
                .fetch_one(&f.db.pool)
                .await
                .unwrap();
            count >= total
        })
        .await
    );
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "activity-consumer throughput: {total} events in {elapsed:.2}s = {:.0} events/s (incl. group join)",
        total as f64 / elapsed
    );
    shutdown.cancel();
    task.await.unwrap();
    assert_eq!(f.score("wealth", "sender").await, 40_000);
}
