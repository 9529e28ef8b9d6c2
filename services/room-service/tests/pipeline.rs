//! The whole write path in one process, against the real broker: gRPC
//! command → one MySQL transaction → the embedded relay (woken by the Redis
//! commit nudge) → `hyapp_room_outbox`, with the reply's event ids, in room
//! order, keyed by room. The earlier phase's "sync-publish" acceptance rows
//! (docs/design.md#differences-from-the-source-design) map to this: the
//! command succeeds, the outbox row is written pending, the relay delivers the
//! same event_id.

mod common;

use common::*;
use rdkafka::{
    ClientConfig, Message,
    consumer::{Consumer, StreamConsumer},
};
use std::time::Duration;

fn mq_config(config: &mut room_service::Config, namespace: &str) {
    config.rocketmq.enabled = true;
    config.rocketmq.name_servers = vec![testkit::kafka_bootstrap()];
    config.rocketmq.namespace = namespace.to_string();
    config.rocketmq.room_outbox.enabled = true;
    config.outbox_worker.enabled = true;
    config.outbox_worker.publish_mode = "mq".into();
    config.outbox_worker.node_id = testkit::unique("relay-");
    config.outbox_worker.redis_url = testkit::redis_url();
    config.outbox_worker.nudge_enabled = true;
}

/// The treasure round trip inside one room-service: heat crosses the
/// threshold → countdown event + durable wake-up row → the relay publishes the
/// wake-up at `open_at_ms` → the in-process treasure-open consumer issues
/// OpenTreasure → `RoomTreasureOpened` is committed (once, even though the
/// wake-up could be redelivered).
// Multi-threaded like the real server: the consumer runtime keeps a thread busy polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_treasure_box_opens_itself_after_its_countdown() {
    let namespace = testkit::unique("ns");
    testkit::create_topic(
        &format!("{namespace}.{}", outbox_schema::names::TOPIC_ROOM_OUTBOX),
        1,
    )
    .await;
    testkit::create_topic(
        &format!("{namespace}.{}", outbox_schema::names::TOPIC_TREASURE_OPEN),
        1,
    )
    .await;
    let harness = Harness::start_with(|config| {
        mq_config(config, &namespace);
        config.rocketmq.treasure_open.enabled = true;
        config.consumer.initial_backoff = service_kit::duration::ConfigDuration::from_millis(50);
        config.room.rules.treasure_thresholds = vec![10, 1_000_000];
        config.room.rules.treasure_countdown =
            service_kit::duration::ConfigDuration::from_millis(1_500);
    })
    .await;
    let mut client = harness.client.clone();
    let room = testkit::unique("room-box-");
    room_with_members(&mut client, &room, "host", &["alice"]).await;
    let reply = client
        .send_gift(gift(
            &room,
            &testkit::unique("gift-"),
            "alice",
            "host",
            1,
            20,
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(
        reply
            .events
            .iter()
            .any(|event| event.event_type == "RoomTreasureCountdownStarted")
    );
    let committed_at = service_kit::time::now_ms();

    let opened = eventually(Duration::from_secs(30), || async {
        harness
            .count("room_outbox", "event_type", "RoomTreasureOpened")
            .await
            == 1
    })
    .await;
    if !opened {
        let rows: Vec<(String, String, String, u32)> = sqlx::query_as(
            "SELECT event_type, status, last_error, retry_count FROM room_outbox ORDER BY id",
        )
        .fetch_all(&harness.pool)
        .await
        .unwrap();
        panic!("the box never opened: {rows:?}");
    }
    let (open_at, opened_at): (i64, i64) = sqlx::query_as(
        "SELECT w.next_retry_at_ms, o.created_at_ms FROM room_outbox w, room_outbox o \
         WHERE w.event_type = 'TreasureOpenWakeup' AND o.event_type = 'RoomTreasureOpened'",
    )
    .fetch_one(&harness.pool)
    .await
    .unwrap();
    assert!(
        open_at >= committed_at + 1_000,
        "open_at {open_at} comes from the countdown"
    );
    assert!(
        opened_at >= open_at,
        "opened at {opened_at}, not before open_at {open_at}"
    );
    let snapshot = room_state(&mut client, &room).await;
    assert_eq!(snapshot.treasure_level_reached, 1);
    assert!(snapshot.treasure.is_none(), "the opened box is gone");
    harness.stop().await;
}

#[tokio::test]
async fn commands_reach_the_topic_through_the_embedded_relay_in_room_order() {
    let namespace = testkit::unique("ns");
    let topic = format!("{namespace}.{}", outbox_schema::names::TOPIC_ROOM_OUTBOX);
    testkit::create_topic(&topic, 3).await;
    let harness = Harness::start_with(|config| mq_config(config, &namespace)).await;
    let mut client = harness.client.clone();
    let room = testkit::unique("room-e2e-");
    let mut expected = Vec::new();
    let reply = client
        .create_room(create(&room, "host"))
        .await
        .unwrap()
        .into_inner();
    expected.extend(
        reply
            .events
            .iter()
            .map(|event| (event.event_id.clone(), event.seq)),
    );
    for user in ["alice", "bob"] {
        let reply = client
            .join_room(join(&room, user))
            .await
            .unwrap()
            .into_inner();
        expected.extend(
            reply
                .events
                .iter()
                .map(|event| (event.event_id.clone(), event.seq)),
        );
    }
    let reply = client
        .send_gift(gift(&room, &testkit::unique("gift-"), "alice", "bob", 2, 5))
        .await
        .unwrap()
        .into_inner();
    expected.extend(
        reply
            .events
            .iter()
            .map(|event| (event.event_id.clone(), event.seq)),
    );
    assert!(
        expected.len() >= 5,
        "create, two joins, gift + heat: {expected:?}"
    );

    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", testkit::kafka_bootstrap())
        .set("group.id", testkit::unique("e2e-"))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[&topic]).unwrap();
    let mut seen = Vec::new();
    while seen.len() < expected.len() {
        let message = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .expect("events on the topic within 30s")
            .unwrap();
        assert_eq!(message.key(), Some(room.as_bytes()), "key = room_id");
        let envelope = outbox_schema::decode_envelope(message.payload().unwrap()).unwrap();
        seen.push((envelope.event_id, envelope.room_event_seq));
    }
    assert_eq!(
        seen, expected,
        "every event of every reply, in commit order, same event ids"
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            harness.count("room_outbox", "status", "delivered").await == expected.len() as i64
        })
        .await,
        "rows marked delivered"
    );
    harness.stop().await;
}

/// A fake Tencent IM and a room-service publishing through its embedded relay
/// to a fresh topic (`partitions` partitions) and hosting the IM bridge on it.
async fn start_with_hosted_bridge(
    app_id: u64,
    secret: &'static str,
    partitions: i32,
) -> (fake_tencent_im::FakeImHandle, Harness) {
    let im = fake_tencent_im::spawn(fake_tencent_im::FakeImConfig::new(
        app_id,
        secret,
        "administrator",
    ))
    .await
    .unwrap();
    let namespace = testkit::unique("ns");
    testkit::create_topic(
        &format!("{namespace}.{}", outbox_schema::names::TOPIC_ROOM_OUTBOX),
        partitions,
    )
    .await;
    let im_url = im.base_url();
    let harness = Harness::start_with(|config| {
        mq_config(config, &namespace);
        config.rocketmq.room_outbox.tencent_im_consumer_enabled = true;
        config.rocketmq.room_outbox.tencent_im_consumer_group = testkit::unique("bridge-");
        config.tencent_im.enabled = true;
        config.tencent_im.base_url = im_url;
        config.tencent_im.sdk_app_id = app_id;
        config.tencent_im.secret_key = service_kit::Secret::new(secret);
    })
    .await;
    (im, harness)
}

/// room-service can host the IM bridge consumer itself (docs/design.md#consumer-semantics)
/// (`rocketmq.room_outbox.tencent_im_consumer_enabled`): events published by
/// the embedded relay come back through the topic and become group messages
/// on (the faithful fake of) Tencent IM, one per event, with `Random` from the
/// event id; heat and rank changes stay silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosted_im_bridge_turns_events_into_group_messages() {
    let (im, harness) = start_with_hosted_bridge(1_400_000_002, "bridge-secret", 2).await;
    let mut client = harness.client.clone();
    let room = testkit::unique("room-im-");
    room_with_members(&mut client, &room, "host", &["alice"]).await;
    let reply = client
        .send_gift(gift(
            &room,
            &testkit::unique("gift-"),
            "alice",
            "host",
            1,
            3,
        ))
        .await
        .unwrap()
        .into_inner();
    let gift_event = reply
        .events
        .iter()
        .find(|event| event.event_type == "RoomGiftSent")
        .unwrap()
        .event_id
        .clone();
    let group = format!("room_{room}");
    // join + gift are messages; RoomCreated ensures the group; heat/rank are silent.
    let delivered = eventually(Duration::from_secs(30), || async {
        im.group_messages(&group).len() >= 2
    })
    .await;
    assert!(delivered, "messages: {:?}", im.group_messages(&group));
    let messages = im.group_messages(&group);
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert!(
        messages
            .iter()
            .any(|message| message.random == tencent_im::random_from_event_id(&gift_event))
    );
    harness.stop().await;
}

/// One trace from the gateway's request to Tencent IM, inside one
/// room-service: the command's span continues the request's `traceparent`
/// and is stored with its outbox rows, the embedded relay's publish span
/// continues it, the hosted IM bridge's consume span is a child of the
/// publish span, and the Tencent IM call is a child of the consume span.
/// (tests/traces.rs checks the same through OTLP with the standalone relay
/// and im-bridge.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_from_the_command_to_the_im_call() {
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());

    let (im, harness) = start_with_hosted_bridge(1_400_000_003, "trace-secret", 1).await;
    let mut client = harness.client.clone();
    let room = testkit::unique("room-trace-");
    client.create_room(create(&room, "host")).await.unwrap();
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let mut request = tonic::Request::new(join(&room, "alice"));
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{trace_id}-00f067aa0ba902b7-01")
            .parse()
            .unwrap(),
    );
    let reply = client.join_room(request).await.unwrap().into_inner();
    let joined = reply.events[0].event_id.clone();

    let group = format!("room_{room}");
    let random = tencent_im::random_from_event_id(&joined);
    let delivered = eventually(Duration::from_secs(30), || async {
        im.group_messages(&group)
            .iter()
            .any(|message| message.random == random)
    })
    .await;
    assert!(delivered, "the join reached the IM group");
    harness.stop().await;
    provider.force_flush().unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let in_trace: Vec<_> = spans
        .iter()
        .filter(|span| span.span_context.trace_id().to_string() == trace_id)
        .collect();
    let find = |prefix: &str| {
        in_trace
            .iter()
            .find(|span| span.name.starts_with(prefix))
            .unwrap_or_else(|| {
                panic!(
                    "no `{prefix}` span in the trace: {:?}",
                    in_trace.iter().map(|span| &span.name).collect::<Vec<_>>()
                )
            })
    };
    let command = find("hyapp.room.v1.RoomService/JoinRoom");
    assert_eq!(
        command.parent_span_id.to_string(),
        "00f067aa0ba902b7",
        "the command continues the request's span"
    );
    let publish = find("room_outbox publish");
    assert_eq!(
        publish.parent_span_id,
        command.span_context.span_id(),
        "the publish continues the command's span"
    );
    // The consume span is named after the consumer group: "<group> process".
    let consume = in_trace
        .iter()
        .find(|span| span.name.ends_with(" process"))
        .expect("a consume span in the trace");
    assert_eq!(
        consume.parent_span_id,
        publish.span_context.span_id(),
        "consumer continues the publish span"
    );
    let im_call = find("tencent_im group_open_http_svc/send_group_msg");
    assert_eq!(
        im_call.parent_span_id,
        consume.span_context.span_id(),
        "the IM call is part of the consume span"
    );
}
