//! Bad input on both of activity-consumer's entries. The `activity.v1` gRPC
//! entry: a table of malformed requests, one per field and kind of damage
//! (empty, oversized, wrong charset, control characters, negative, overflow,
//! inconsistent), each refused with INVALID_ARGUMENT naming the field, and
//! nothing written to any activity table or `consumer_dedup`. The topic
//! entry: a malformed gift is dead-lettered at once with the same reason
//! while the gift after it is applied.

use activity_consumer::{App, config::Config};
use consumer_runtime::testing::{TestProducer, envelope, header, read_topic, wait_until};
use hyapp_api::activity::{
    ConsumeRoomEventRequest, activity_service_client::ActivityServiceClient,
};
use outbox_schema::{
    names::{HEADER_DLQ_REASON, dead_letter_topic},
    pb::{self, room_outbox_event::Payload},
};
use service_kit::duration::ConfigDuration;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);
const TABLES: &[&str] = &[
    "consumer_dedup",
    "activity_gift_leaderboard",
    "activity_room_contribution",
    "activity_broadcasts",
];

/// A consumer on a fresh database, topic and group. The IM endpoint is never
/// called: every valid gift here is below the big-gift threshold.
async fn config(db: &testkit::TestDb) -> Config {
    let topic = testkit::unique("activity_bad_");
    let group = testkit::unique("activity_bad_group_");
    testkit::create_topic(&topic, 1).await;
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
    config.tencent_im.base_url = "http://127.0.0.1:1".into();
    config.tencent_im.sdk_app_id = 1;
    config.tencent_im.secret_key = service_kit::Secret::new("unused-key");
    config.activity.big_gift_threshold = 1_000_000;
    config.grpc_listen = "127.0.0.1:0".into();
    config.http_listen = "127.0.0.1:0".into();
    config
}

fn valid_gift(room: &str, sender: &str) -> pb::RoomOutboxEvent {
    envelope(
        &uuid::Uuid::new_v4().to_string(),
        room,
        1,
        Payload::RoomGiftSent(pb::RoomGiftSent {
            sender_id: sender.into(),
            receiver_id: "receiver".into(),
            gift_id: "rose".into(),
            count: 2,
            unit_value: 5,
            total_value: 10,
        }),
    )
}

fn gift_mut(event: &mut pb::RoomOutboxEvent) -> &mut pb::RoomGiftSent {
    match event.payload.as_mut() {
        Some(Payload::RoomGiftSent(gift)) => gift,
        _ => unreachable!("valid_gift builds a gift"),
    }
}

type Edit = Box<dyn Fn(&mut pb::RoomOutboxEvent)>;

fn case(
    name: &'static str,
    edit: impl Fn(&mut pb::RoomOutboxEvent) + 'static,
    message: &'static str,
) -> (&'static str, Edit, &'static str) {
    (name, Box::new(edit), message)
}

fn cases() -> Vec<(&'static str, Edit, &'static str)> {
    vec![
        case("empty event_id", |e| e.event_id.clear(), "empty event_id"),
        case(
            "oversized event_id",
            |e| e.event_id = "e".repeat(37),
            "event.event_id must be at most 36 bytes, got 37",
        ),
        case(
            "event_id charset",
            |e| e.event_id = "e 1".into(),
            "event.event_id contains ' ' at position 1",
        ),
        case(
            "event_id control char",
            |e| e.event_id = "e\n1".into(),
            "event.event_id contains '\\n'",
        ),
        case("empty room_id", |e| e.room_id.clear(), "empty room_id"),
        case(
            "oversized room_id",
            |e| e.room_id = "r".repeat(65),
            "event.room_id must be at most 64 bytes, got 65",
        ),
        case(
            "room_id charset",
            |e| e.room_id = "room/1".into(),
            "event.room_id contains '/' at position 4",
        ),
        case(
            "room_id unicode",
            |e| e.room_id = "房间".into(),
            "event.room_id contains '房' at position 0",
        ),
        case(
            "event_type mismatch",
            |e| e.event_type = "RoomUserJoined".into(),
            "announces `RoomUserJoined` but carries `RoomGiftSent`",
        ),
        case("missing payload", |e| e.payload = None, "has no payload"),
        case(
            "app_code charset",
            |e| e.app_code = "app code".into(),
            "event.app_code contains ' '",
        ),
        case(
            "oversized app_code",
            |e| e.app_code = "a".repeat(33),
            "event.app_code must be at most 32 bytes",
        ),
        case(
            "oversized command_id",
            |e| e.command_id = "c".repeat(129),
            "event.command_id must be at most 128 bytes",
        ),
        case(
            "command_id charset",
            |e| e.command_id = "cmd;1".into(),
            "event.command_id contains ';'",
        ),
        case(
            "request_id control char",
            |e| e.request_id = "req\r\nforged log line".into(),
            "event.request_id contains a control character at position 3",
        ),
        case(
            "oversized request_id",
            |e| e.request_id = "q".repeat(129),
            "event.request_id must be at most 128 bytes",
        ),
        case(
            "oversized traceparent",
            |e| e.traceparent = "0".repeat(513),
            "event.traceparent must be at most 512 bytes",
        ),
        case(
            "tracestate control char",
            |e| e.tracestate = "a=\u{0}".into(),
            "event.tracestate contains a control character",
        ),
        case(
            "negative occurred_at_ms",
            |e| e.occurred_at_ms = -1,
            "event.occurred_at_ms must not be negative, got -1",
        ),
        case(
            "empty sender_id",
            |e| gift_mut(e).sender_id.clear(),
            "event.room_gift_sent.sender_id must not be empty",
        ),
        case(
            "oversized sender_id",
            |e| gift_mut(e).sender_id = "s".repeat(65),
            "event.room_gift_sent.sender_id must be at most 64 bytes",
        ),
        case(
            "receiver_id charset",
            |e| gift_mut(e).receiver_id = "bob@example".into(),
            "event.room_gift_sent.receiver_id contains '@'",
        ),
        case(
            "empty gift_id",
            |e| gift_mut(e).gift_id.clear(),
            "event.room_gift_sent.gift_id must not be empty",
        ),
        case(
            "gift_id control char",
            |e| gift_mut(e).gift_id = "rose\u{7}".into(),
            "event.room_gift_sent.gift_id contains '\\u{7}'",
        ),
        case(
            "zero count",
            |e| gift_mut(e).count = 0,
            "event.room_gift_sent.count must be positive, got 0",
        ),
        case(
            "zero unit_value",
            |e| gift_mut(e).unit_value = 0,
            "event.room_gift_sent.unit_value must be positive, got 0",
        ),
        case(
            "overflowing product",
            |e| {
                let gift = gift_mut(e);
                gift.count = u32::MAX;
                gift.unit_value = u64::MAX;
                gift.total_value = u64::MAX;
            },
            "event.room_gift_sent.count × unit_value (4294967295 × 18446744073709551615) overflows",
        ),
        case(
            "total above i64",
            |e| {
                let gift = gift_mut(e);
                gift.count = 2;
                gift.unit_value = 1 << 62;
                gift.total_value = 1 << 63;
            },
            "overflows",
        ),
        case(
            "inconsistent total_value",
            |e| gift_mut(e).total_value = 11,
            "event.room_gift_sent.total_value must be count × unit_value = 10, got 11",
        ),
    ]
}

async fn rows(db: &testkit::TestDb) -> Vec<(&'static str, i64)> {
    let mut counts = Vec::new();
    for table in TABLES {
        let count: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(&db.pool)
            .await
            .unwrap();
        counts.push((*table, count));
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_grpc_requests_name_the_field_and_write_nothing() {
    let db = testkit::TestDb::new().await;
    let app = App::build(config(&db).await).await.unwrap();
    let grpc = app.server_addr(activity_consumer::GRPC_SERVER).unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { app.run(shutdown).await.unwrap() }
    });
    let mut client = ActivityServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();

    let missing = client
        .consume_room_event(ConsumeRoomEventRequest { event: None })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::InvalidArgument);
    assert!(missing.message().contains("event is required"));
    let mut failures = Vec::new();
    for (name, edit, message) in cases() {
        let mut event = valid_gift("room-bad", "bad-sender");
        edit(&mut event);
        match client
            .consume_room_event(ConsumeRoomEventRequest { event: Some(event) })
            .await
        {
            Ok(_) => failures.push(format!("{name}: accepted")),
            Err(status)
                if status.code() != tonic::Code::InvalidArgument
                    || !status.message().contains(message) =>
            {
                failures.push(format!(
                    "{name}: {:?} `{}` should be InvalidArgument containing `{message}`",
                    status.code(),
                    status.message()
                ));
            }
            Err(_) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        rows(&db).await.iter().all(|(_, count)| *count == 0),
        "nothing written: {:?}",
        rows(&db).await
    );

    // The control: the untouched request is applied, so the refusals above
    // were about the fields, not the setup.
    let reply = client
        .consume_room_event(ConsumeRoomEventRequest {
            event: Some(valid_gift("room-bad", "good-sender")),
        })
        .await
        .unwrap();
    assert!(!reply.into_inner().duplicate);
    assert!(rows(&db).await.iter().any(|(_, count)| *count > 0));
    shutdown.cancel();
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_gift_on_the_topic_is_dead_lettered_at_once_and_the_next_applied() {
    let db = testkit::TestDb::new().await;
    let config = config(&db).await;
    let producer = TestProducer::new(&testkit::kafka_bootstrap()).unwrap();
    let mut bad = valid_gift("room-topic", "bad-sender");
    gift_mut(&mut bad).count = 0;
    let good = valid_gift("room-topic", "good-sender");
    for event in [&bad, &good] {
        producer
            .send_event(&config.rocketmq.room_outbox.topic, event)
            .await
            .unwrap();
    }
    let app = App::build(config.clone()).await.unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { app.run(shutdown).await.unwrap() }
    });
    let applied = |event_id: String| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM consumer_dedup WHERE event_id = ?")
                .bind(event_id)
                .fetch_one(&pool)
                .await
                .unwrap()
                == 1
        }
    };
    assert!(wait_until(WAIT, || applied(good.event_id.clone())).await);
    let dead = read_topic(
        &testkit::kafka_bootstrap(),
        &dead_letter_topic(&config.consumer.group),
        1,
        WAIT,
    )
    .await
    .unwrap();
    shutdown.cancel();
    task.await.unwrap();

    assert_eq!(dead.len(), 1);
    let reason = header(&dead[0], HEADER_DLQ_REASON).unwrap();
    assert!(
        reason.contains("event.room_gift_sent.count must be positive"),
        "{reason}"
    );
    assert!(!applied(bad.event_id.clone()).await);
    let bad_scores: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM activity_gift_leaderboard WHERE user_id = 'bad-sender'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(bad_scores, 0);
}
