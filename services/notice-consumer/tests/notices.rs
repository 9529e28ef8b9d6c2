//! notice-consumer end to end against the real broker, MariaDB and the fake
//! Tencent IM: one notice per (event, recipient) despite redelivery, failed
//! deliveries retried from the table (5xx, throttling), a permanent IM error
//! recorded with its code. Also prints the consume throughput.

use consumer_runtime::testing::{TestProducer, envelope, wait_until};
use fake_tencent_im::{FakeImConfig, FakeImHandle, FaultRule};
use notice_consumer::{App, config::Config};
use outbox_schema::{
    names::dead_letter_topic,
    pb::{self, room_outbox_event::Payload},
};
use service_kit::duration::ConfigDuration;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);
const SENDMSG: &str = "openim/sendmsg";

struct Fixture {
    db: testkit::TestDb,
    fake: FakeImHandle,
    config: Config,
    producer: TestProducer,
}

async fn fixture(partitions: i32) -> Fixture {
    let db = testkit::TestDb::new().await;
    let fake = fake_tencent_im::spawn(FakeImConfig::new(1_400_000_003, "notice-key", "admin"))
        .await
        .unwrap();
    let topic = testkit::unique("notice_topic_");
    let group = testkit::unique("notice_group_");
    testkit::create_topic(&topic, partitions).await;
    testkit::create_topic(&dead_letter_topic(&group), 1).await;
    let mut config = Config::default();
    config.mysql.url = db.url.clone();
    config.rocketmq.enabled = true;
    config.rocketmq.name_servers = vec![testkit::kafka_bootstrap()];
    config.rocketmq.room_outbox.topic = topic;
    config.consumer.group = group;
    config.consumer.initial_backoff = ConfigDuration::from_millis(50);
    config.consumer.commit_interval = ConfigDuration::from_millis(200);
    config.consumer.session_timeout = ConfigDuration::from_secs(6);
    config.tencent_im.base_url = fake.base_url();
    config.tencent_im.sdk_app_id = 1_400_000_003;
    config.tencent_im.admin_identifier = "admin".into();
    config.tencent_im.secret_key = service_kit::Secret::new("notice-key");
    config.notice.delivery.initial_backoff = ConfigDuration::from_millis(50);
    config.notice.delivery.sweep_interval = ConfigDuration::from_millis(100);
    config.http_listen = "127.0.0.1:0".into();
    Fixture {
        db,
        fake,
        config,
        producer: TestProducer::new(&testkit::kafka_bootstrap()).unwrap(),
    }
}

impl Fixture {
    async fn start(&self) -> (CancellationToken, JoinHandle<()>) {
        let app = App::build(self.config.clone()).await.unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { app.run(shutdown).await.unwrap() }
        });
        (shutdown, task)
    }

    async fn publish(&self, event: &pb::RoomOutboxEvent) {
        self.producer
            .send_event(&self.config.rocketmq.room_outbox.topic, event)
            .await
            .unwrap();
    }

    /// `(status, attempts, last_error)` of one notice row.
    async fn row(&self, event_id: &str, recipient: &str) -> Option<(String, u32, String)> {
        sqlx::query_as(
            "SELECT status, attempts, last_error \
             FROM notice_delivery_events WHERE event_id = ? AND recipient_id = ?",
        )
        .bind(event_id)
        .bind(recipient)
        .fetch_optional(&self.db.pool)
        .await
        .unwrap()
    }

    async fn status_is(&self, event_id: &str, recipient: &str, status: &str) -> bool {
        wait_until(WAIT, || async {
            self.row(event_id, recipient)
                .await
                .is_some_and(|row| row.0 == status)
        })
        .await
    }
}

fn id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn kicked(room: &str, seq: u64, target: &str) -> pb::RoomOutboxEvent {
    envelope(
        &id(),
        room,
        seq,
        Payload::RoomUserKicked(pb::RoomUserKicked {
            actor_id: "owner".into(),
            target_id: target.into(),
            ban_until_ms: 0,
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_notice_is_delivered_once_despite_redelivery() {
    let f = fixture(2).await;
    let room = testkit::unique("room-");
    let kick = kicked(&room, 1, "troll");
    let treasure = envelope(
        &id(),
        &room,
        2,
        Payload::RoomTreasureOpened(pb::RoomTreasureOpened {
            box_id: "box-1".into(),
            level: 1,
            opened_at_ms: 5,
            rewarded_user_ids: vec!["alice".into(), "bob".into()],
        }),
    );
    let joined = envelope(
        &id(),
        &room,
        3,
        Payload::RoomUserJoined(pb::RoomUserJoined {
            user_id: "x".into(),
        }),
    );
    for event in [&kick, &kick, &treasure, &joined, &treasure] {
        f.publish(event).await;
    }
    let (shutdown, task) = f.start().await;
    assert!(f.status_is(&kick.event_id, "troll", "delivered").await);
    assert!(f.status_is(&treasure.event_id, "alice", "delivered").await);
    assert!(f.status_is(&treasure.event_id, "bob", "delivered").await);
    // A late redelivery, after everything settled.
    let marker = kicked(&room, 4, "marker");
    f.publish(&kick).await;
    f.publish(&marker).await;
    assert!(f.status_is(&marker.event_id, "marker", "delivered").await);
    shutdown.cancel();
    task.await.unwrap();

    for user in ["troll", "alice", "bob"] {
        assert_eq!(f.fake.c2c_messages(user).len(), 1, "{user}");
    }
    let data: serde_json::Value = serde_json::from_str(
        f.fake.c2c_messages("bob")[0].msg_body[0]["MsgContent"]["Data"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(data["type"], "treasure_reward");
    assert_eq!(
        f.fake.stats().calls_by_api.get(SENDMSG),
        Some(&4),
        "no resend"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_deliveries_are_retried_from_the_table_or_recorded() {
    let f = fixture(1).await;
    let room = testkit::unique("room-");
    f.fake.inject_fault(FaultRule::http_status(SENDMSG, 503));
    f.fake.inject_fault(FaultRule::error_code(
        SENDMSG,
        tencent_im::codes::REST_FREQ_LIMIT,
    ));
    let (shutdown, task) = f.start().await;
    let retried = kicked(&room, 1, "u-retried");
    f.publish(&retried).await;
    assert!(
        f.status_is(&retried.event_id, "u-retried", "delivered")
            .await
    );
    assert_eq!(f.row(&retried.event_id, "u-retried").await.unwrap().1, 3);

    f.fake.inject_fault(FaultRule::error_code(
        SENDMSG,
        tencent_im::codes::OPENIM_TO_ACCOUNT,
    ));
    let rejected = kicked(&room, 2, "u-rejected");
    f.publish(&rejected).await;
    assert!(
        f.status_is(&rejected.event_id, "u-rejected", "failed")
            .await
    );
    let (_, attempts, last_error) = f.row(&rejected.event_id, "u-rejected").await.unwrap();
    assert_eq!(attempts, 1, "permanent: not retried");
    assert!(last_error.contains("90003"), "{last_error}");
    shutdown.cancel();
    task.await.unwrap();
    assert_eq!(f.fake.c2c_messages("u-retried").len(), 1);
    assert!(f.fake.c2c_messages("u-rejected").is_empty());
}

/// Not a benchmark with assertions: prints events/s for the closing report.
/// One in ten events is a kick (a notice and an IM call); the rest are acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throughput_report() {
    let mut f = fixture(4).await;
    f.config.tencent_im.rate_limit_per_api = 100_000;
    let total = 2000u64;
    let mut last_kicks = Vec::new();
    for n in 0..total {
        let room = format!("room-{}", n % 40);
        let seq = n / 40 + 1;
        let event = if n % 10 == 0 || n >= total - 40 {
            let event = kicked(&room, seq, &format!("user-{n}"));
            if n >= total - 40 {
                last_kicks.push((event.event_id.clone(), format!("user-{n}")));
            }
            event
        } else {
            envelope(
                &id(),
                &room,
                seq,
                Payload::RoomUserJoined(pb::RoomUserJoined {
                    user_id: "x".into(),
                }),
            )
        };
        f.publish(&event).await;
    }
    let started = Instant::now();
    let (shutdown, task) = f.start().await;
    // The last event of every room is a kick: when all are delivered, all events were consumed.
    for (event_id, user) in &last_kicks {
        assert!(f.status_is(event_id, user, "delivered").await);
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "notice-consumer throughput: {total} events ({} notices) in {elapsed:.2}s = {:.0} events/s (incl. group join)",
        total / 10 + 36,
        total as f64 / elapsed
    );
    shutdown.cancel();
    task.await.unwrap();
}
