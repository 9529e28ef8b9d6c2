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

/// A notice that failed for good is listed by `deliveries list`, refused
/// for an unknown event, and after an audited `deliveries retry` sent by the
/// running service's sweeper; the listing uses its index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_notice_is_listed_and_sent_again_after_an_audited_retry() {
    use consumer_runtime::host::{OperatorCommand, run_operator};
    let f = fixture(1).await;
    let operator = |args: &[&str]| {
        let command = OperatorCommand::from_args(args.iter().copied()).expect("valid arguments");
        let config = f.config.clone();
        async move { run_operator::<notice_consumer::Service>(&config, command).await }
    };
    let room = testkit::unique("room-");
    f.fake.inject_fault(FaultRule::error_code(
        SENDMSG,
        tencent_im::codes::OPENIM_TO_ACCOUNT,
    ));
    let (shutdown, task) = f.start().await;
    let event = kicked(&room, 1, "u-later");
    f.publish(&event).await;
    assert!(f.status_is(&event.event_id, "u-later", "failed").await);

    let listed = operator(&["deliveries", "list", "--json"]).await.unwrap();
    let listed: serde_json::Value = serde_json::from_str(&listed.output).unwrap();
    assert_eq!(listed["table"], "notice_delivery_events");
    let failed = listed["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["event_id"], event.event_id.as_str());
    assert_eq!(failed[0]["target"], "u-later");
    assert_eq!(failed[0]["attempts"], 1);
    assert!(
        failed[0]["last_error"].as_str().unwrap().contains("90003"),
        "{failed:?}"
    );

    let unknown = id();
    let error = operator(&[
        "deliveries",
        "retry",
        "--event-id",
        &unknown,
        "--operator",
        "alice",
        "--reason",
        "r",
    ])
    .await
    .unwrap_err();
    assert!(
        error.to_string().contains("no failed row of event"),
        "{error}"
    );
    let error = operator(&[
        "deliveries",
        "retry",
        "--all",
        "--operator",
        "alice",
        "--reason",
        " ",
    ])
    .await
    .unwrap_err();
    assert!(
        error.to_string().contains("--reason is required"),
        "{error}"
    );
    assert_eq!(audit_count(&f.db.pool).await, 0, "refusals change nothing");

    let retried = operator(&[
        "deliveries",
        "retry",
        "--event-id",
        &event.event_id,
        "--operator",
        "alice",
        "--reason",
        "recipient account restored",
    ])
    .await
    .unwrap();
    assert!(
        retried.output.starts_with("1 failed rows"),
        "{}",
        retried.output
    );
    assert!(f.status_is(&event.event_id, "u-later", "delivered").await);
    shutdown.cancel();
    task.await.unwrap();
    assert_eq!(f.fake.c2c_messages("u-later").len(), 1);
    let audit: (String, String, String, String) =
        sqlx::query_as("SELECT operator, action, target, outcome FROM consumer_operator_audit")
            .fetch_one(&f.db.pool)
            .await
            .unwrap();
    assert_eq!(
        audit,
        (
            "alice".to_string(),
            "deliveries retry".to_string(),
            format!("notice_delivery_events event_id={}", event.event_id),
            "reset 1 rows".to_string()
        )
    );
    // Nothing failed is left: a second retry of everything resets none.
    let none = operator(&[
        "deliveries",
        "retry",
        "--all",
        "--operator",
        "alice",
        "--reason",
        "sweep up",
    ])
    .await
    .unwrap();
    assert!(none.output.starts_with("0 failed rows"), "{}", none.output);
}

/// The operator statements read an index on `status`, not the whole table,
/// among many delivered rows (EXPLAIN of the table's own statements).
#[tokio::test]
async fn failed_notices_are_found_through_their_index() {
    use consumer_runtime::sweeper::DeliveryTable;
    use notice_consumer::notices::NoticeDeliveries;
    use sqlx::Row;
    let db = testkit::TestDb::new().await;
    for batch in 0..10 {
        let mut insert = sqlx::QueryBuilder::new(
            "INSERT INTO notice_delivery_events (event_id, recipient_id, notice_type, room_id, \
             content, status, next_attempt_at_ms, created_at_ms) ",
        );
        insert.push_values(0..200, |mut row, n| {
            row.push_bind(format!("e-{batch}-{n}"))
                .push_bind("u")
                .push_bind("room_kicked")
                .push_bind("r")
                .push_bind("{}")
                .push_bind(if n % 50 == 0 { "failed" } else { "delivered" })
                .push_bind(0_i64)
                .push_bind(i64::from(batch * 200 + n));
        });
        insert.build().execute(&db.pool).await.unwrap();
    }
    sqlx::query("ANALYZE TABLE notice_delivery_events")
        .execute(&db.pool)
        .await
        .unwrap();
    for statement in [
        NoticeDeliveries::FAILED_LIST_SQL,
        NoticeDeliveries::RETRY_SINCE_SQL,
    ] {
        let explain = format!("EXPLAIN {statement}");
        let mut query = sqlx::query(&explain);
        if statement.starts_with("UPDATE") {
            query = query.bind(0_i64);
        }
        let plan = query
            .bind(0_i64)
            .bind(100_u32)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        let key: Option<String> = plan.try_get("key").unwrap();
        // The UPDATE may walk either index that starts with `status`; both
        // touch only the failed rows, never the whole table.
        assert!(
            matches!(key.as_deref(), Some("idx_status_created" | "idx_due")),
            "{statement}: {key:?}"
        );
        if statement.starts_with("SELECT") {
            assert_eq!(key.as_deref(), Some("idx_status_created"), "{statement}");
        }
    }
}

async fn audit_count(pool: &sqlx::MySqlPool) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM consumer_operator_audit")
        .fetch_one(pool)
        .await
        .unwrap()
}
