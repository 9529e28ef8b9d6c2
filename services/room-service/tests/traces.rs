//! One trace per gateway call, as an operator's collector receives it: the
//! services' spans are exported over OTLP/HTTP (`service_kit::telemetry`, as
//! the binaries install it) to testkit's receiver, while room-service, the
//! relay engine (`relay_engine`, as the standalone relay runs it) and the IM
//! bridge engine (`im_bridge_engine`, as the standalone im-bridge runs it)
//! run against the real broker, MariaDB, Redis and the fake Tencent IM. The links checked: gateway call → room-service command
//! span → relay publish span → im-bridge consume span → Tencent IM request
//! span, all in one trace; and, without a gateway `traceparent`, the same
//! chain from a room-service root span.

mod common;

use common::*;
use opentelemetry::trace::{SpanKind, TraceContextExt as _, Tracer as _};
use std::sync::OnceLock;
use std::time::Duration;
use testkit::otlp::{OtlpReceiver, ReceivedSpan};
use tokio_util::sync::CancellationToken;

/// Exporters send every few seconds; this bounds the wait for a whole chain.
const WAIT: Duration = Duration::from_secs(60);
const COMMAND_SPAN: &str = "hyapp.room.v1.RoomService/JoinRoom";
const PUBLISH_SPAN: &str = "room_outbox publish";
const IM_SPAN: &str = "tencent_im group_open_http_svc/send_group_msg";

/// The process-wide receiver, with trace export installed towards it the
/// way every binary installs it (the tracer provider is process-wide, so
/// the tests of this binary share both and tell their traces apart by id).
fn receiver() -> &'static OtlpReceiver {
    static RECEIVER: OnceLock<OtlpReceiver> = OnceLock::new();
    RECEIVER.get_or_init(|| {
        let receiver = OtlpReceiver::start();
        let log = service_kit::telemetry::LogConfig {
            level: "warn".into(),
            otlp_endpoint: receiver.traces_url(),
            ..service_kit::telemetry::LogConfig::default()
        };
        service_kit::telemetry::init("room-service-traces-test", &log).expect("telemetry");
        receiver
    })
}

/// room-service (no embedded relay, no hosted bridge), the standalone relay
/// and the standalone im-bridge on one database and one namespace.
struct Stack {
    harness: Harness,
    im: fake_tencent_im::FakeImHandle,
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Stack {
    async fn start() -> Stack {
        let app_id = 1_400_000_011;
        let secret = "traces-secret";
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
            1,
        )
        .await;
        let harness = Harness::start().await;
        let mq = {
            let mut mq = service_kit::mq::MqConfig {
                enabled: true,
                name_servers: vec![testkit::kafka_bootstrap()],
                namespace: namespace.clone(),
                ..service_kit::mq::MqConfig::default()
            };
            mq.room_outbox.enabled = true;
            mq
        };

        // The engines the standalone relay and im-bridge run, composed here
        // the way their binaries compose them.
        let worker = relay_engine::config::OutboxWorkerConfig {
            publish_mode: "mq".into(),
            node_id: testkit::unique("relay-"),
            poll_interval: service_kit::duration::ConfigDuration::from_millis(50),
            ..Default::default()
        };
        let mut registry = prometheus_client::registry::Registry::default();
        let relay = relay_engine::build_relay(
            harness.pool.clone(),
            &worker,
            &mq,
            &relay_engine::config::DirectConfig::default(),
            &mut registry,
        )
        .expect("relay");

        let mut bridge_mq = mq.clone();
        bridge_mq.room_outbox.tencent_im_consumer_group = testkit::unique("bridge-");
        let consumer = consumer_runtime::ConsumerConfig {
            initial_backoff: service_kit::duration::ConfigDuration::from_millis(50),
            ..Default::default()
        };
        let im_section = tencent_im::ImSection {
            enabled: true,
            base_url: im.base_url(),
            sdk_app_id: app_id,
            admin_identifier: "administrator".into(),
            secret_key: service_kit::Secret::new(secret),
            ..tencent_im::ImSection::default()
        };
        let settings = im_bridge_engine::settings(&bridge_mq, &consumer).expect("bridge settings");
        let bridge = im_bridge_engine::ImBridge::build(
            settings,
            im_bridge_engine::BridgeConfig::default(),
            im_section.group_id_template.clone(),
            im_section.client().expect("IM client"),
            harness.pool.clone(),
            &consumer_runtime::ConsumerMetrics::register(&mut registry),
        )
        .expect("im-bridge");

        let shutdown = CancellationToken::new();
        let tasks = vec![
            tokio::spawn({
                let shutdown = shutdown.clone();
                async move { relay.run(shutdown).await.expect("relay run") }
            }),
            tokio::spawn({
                let shutdown = shutdown.clone();
                async move { bridge.run(shutdown).await.expect("im-bridge run") }
            }),
        ];
        Stack {
            harness,
            im,
            shutdown,
            tasks,
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            task.await.expect("service task");
        }
        self.harness.stop().await;
    }

    /// The `traceparent` stored on the outbox row of `event_id`.
    async fn row_traceparent(&self, event_id: &str) -> String {
        sqlx::query_scalar("SELECT traceparent FROM room_outbox WHERE event_id = ?")
            .bind(event_id)
            .fetch_one(&self.harness.pool)
            .await
            .expect("outbox row")
    }

    /// Rows of `room_id` stored without a `traceparent`.
    async fn untraced_rows(&self, room_id: &str) -> i64 {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM room_outbox WHERE room_id = ? AND traceparent = ''",
        )
        .bind(room_id)
        .fetch_one(&self.harness.pool)
        .await
        .expect("count rows")
    }
}

/// The chain below the command span `command` in `spans`: the publish span
/// of `event_id`, a consume span under it and the IM request under that.
struct Chain {
    publish: ReceivedSpan,
    consume: ReceivedSpan,
    im_request: ReceivedSpan,
}

fn chain(spans: &[ReceivedSpan], command: &ReceivedSpan, event_id: &str) -> Option<Chain> {
    let children = |parent: &ReceivedSpan| {
        spans
            .iter()
            .filter(|span| {
                span.trace_id == parent.trace_id && span.parent_span_id == parent.span_id
            })
            .cloned()
            .collect::<Vec<_>>()
    };
    let publish = children(command).into_iter().find(|span| {
        span.name == PUBLISH_SPAN && span.attribute("messaging.message.id") == Some(event_id)
    })?;
    // A consume span per attempt; the one whose handling called IM.
    children(&publish)
        .into_iter()
        .filter(|span| span.name.ends_with(" process"))
        .find_map(|consume| {
            let im_request = children(&consume)
                .into_iter()
                .find(|span| span.name == IM_SPAN)?;
            Some(Chain {
                publish: publish.clone(),
                consume,
                im_request,
            })
        })
}

/// The gateway's join of `user` to `room`, returning the joined event's id.
async fn join_with(stack: &Stack, room: &str, user: &str, traceparent: Option<&str>) -> String {
    let mut request = tonic::Request::new(join(room, user));
    if let Some(traceparent) = traceparent {
        request
            .metadata_mut()
            .insert("traceparent", traceparent.parse().unwrap());
    }
    let reply = stack
        .harness
        .client
        .clone()
        .join_room(request)
        .await
        .expect("join")
        .into_inner();
    reply
        .events
        .iter()
        .find(|event| event.event_type == "RoomUserJoined")
        .expect("a RoomUserJoined event")
        .event_id
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_from_the_gateway_call_to_the_im_request() {
    let receiver = receiver();
    let stack = Stack::start().await;
    let room = testkit::unique("room-trace-");
    let mut client = stack.harness.client.clone();
    client.create_room(create(&room, "host")).await.unwrap();

    // The gateway's client span, exported like the services' spans.
    let tracer = opentelemetry::global::tracer("gateway");
    let gateway_span = tracer
        .span_builder("gateway JoinRoom")
        .with_kind(SpanKind::Client)
        .start(&tracer);
    let gateway = opentelemetry::Context::new().with_span(gateway_span);
    let gateway_traceparent = service_kit::trace::traceparent_of(&gateway);
    let trace_id = gateway_traceparent[3..35].to_owned();
    let gateway_span_id = gateway_traceparent[36..52].to_owned();
    let joined = join_with(&stack, &room, "alice", Some(&gateway_traceparent)).await;
    gateway.span().end();

    let found = receiver
        .wait_for(WAIT, |spans| {
            let command = spans
                .iter()
                .find(|span| span.trace_id == trace_id && span.name == COMMAND_SPAN)?;
            let gateway = spans.iter().find(|span| span.span_id == gateway_span_id)?;
            Some((
                gateway.clone(),
                command.clone(),
                chain(spans, command, &joined)?,
            ))
        })
        .await;
    let Some((gateway, command, chain)) = found else {
        panic!(
            "no connected chain in trace {trace_id}: {:#?}",
            receiver.trace(&trace_id)
        );
    };
    assert_eq!(gateway.parent_span_id, "", "the gateway call is the root");
    assert_eq!(
        command.parent_span_id, gateway.span_id,
        "command under the gateway call"
    );
    assert_eq!(command.kind, "SPAN_KIND_SERVER");
    assert_eq!(command.attribute("room_id"), Some(room.as_str()));
    assert_eq!(chain.publish.parent_span_id, command.span_id);
    assert_eq!(chain.publish.kind, "SPAN_KIND_PRODUCER");
    assert_eq!(chain.consume.parent_span_id, chain.publish.span_id);
    assert_eq!(chain.consume.kind, "SPAN_KIND_CONSUMER");
    assert_eq!(chain.im_request.parent_span_id, chain.consume.span_id);
    assert_eq!(chain.im_request.kind, "SPAN_KIND_CLIENT");
    for span in [
        &gateway,
        &command,
        &chain.publish,
        &chain.consume,
        &chain.im_request,
    ] {
        assert_eq!(span.trace_id, trace_id, "{span:?}");
    }
    // The commit stored the command span, not the gateway's, on the row.
    assert_eq!(
        stack.row_traceparent(&joined).await,
        format!("00-{trace_id}-{}-01", command.span_id)
    );
    // And the IM request really happened.
    let random = tencent_im::random_from_event_id(&joined);
    assert!(
        stack
            .im
            .group_messages(&format!("room_{room}"))
            .iter()
            .any(|message| message.random == random)
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_without_traceparent_starts_a_trace_that_still_connects() {
    let receiver = receiver();
    let stack = Stack::start().await;
    let room = testkit::unique("room-root-");
    let mut client = stack.harness.client.clone();
    client.create_room(create(&room, "host")).await.unwrap();
    let joined = join_with(&stack, &room, "bob", None).await;

    // Every row of the room carries a trace, CreateRoom's included.
    assert_eq!(stack.untraced_rows(&room).await, 0);
    let traceparent = stack.row_traceparent(&joined).await;
    assert_eq!(traceparent.len(), 55, "{traceparent}");
    let trace_id = traceparent[3..35].to_owned();
    let command_span_id = traceparent[36..52].to_owned();

    let found = receiver
        .wait_for(WAIT, |spans| {
            let command = spans
                .iter()
                .find(|span| span.span_id == command_span_id && span.trace_id == trace_id)?;
            Some((command.clone(), chain(spans, command, &joined)?))
        })
        .await;
    let Some((command, chain)) = found else {
        panic!(
            "no connected chain in trace {trace_id}: {:#?}",
            receiver.trace(&trace_id)
        );
    };
    assert_eq!(command.name, COMMAND_SPAN);
    assert_eq!(command.parent_span_id, "", "room-service started the trace");
    assert_eq!(chain.publish.parent_span_id, command.span_id);
    assert_eq!(chain.consume.parent_span_id, chain.publish.span_id);
    assert_eq!(chain.im_request.parent_span_id, chain.consume.span_id);
    assert_eq!(chain.im_request.trace_id, trace_id);
    stack.stop().await;
}

/// A command sent to an instance that does not hold the room is executed by
/// the holder inside its own span, a child of the forwarding instance's
/// command span, and the holder's rows carry the holder's span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_command_continues_the_trace_on_the_holder() {
    let receiver = receiver();
    let mut holder = Harness::start().await;
    let mut forwarder = holder.second_node(|_| {}).await;
    let room = testkit::unique("room-fwd-");
    room_with_members(&mut holder.client, &room, "owner", &[]).await;

    let tracer = opentelemetry::global::tracer("gateway");
    let gateway = opentelemetry::Context::new().with_span(
        tracer
            .span_builder("gateway JoinRoom")
            .with_kind(SpanKind::Client)
            .start(&tracer),
    );
    let gateway_traceparent = service_kit::trace::traceparent_of(&gateway);
    let trace_id = gateway_traceparent[3..35].to_owned();
    let gateway_span_id = gateway_traceparent[36..52].to_owned();
    let mut request = tonic::Request::new(join(&room, "carol"));
    request
        .metadata_mut()
        .insert("traceparent", gateway_traceparent.parse().unwrap());
    let reply = forwarder
        .client
        .join_room(request)
        .await
        .expect("join through the other instance");
    assert_eq!(
        reply.metadata().get("x-room-served-by").unwrap(),
        holder.node_id.as_str(),
        "the holder executed it"
    );
    gateway.span().end();
    let joined = reply
        .get_ref()
        .events
        .iter()
        .find(|event| event.event_type == "RoomUserJoined")
        .expect("a RoomUserJoined event")
        .event_id
        .clone();

    let found = receiver
        .wait_for(WAIT, |spans| {
            let in_trace = |span: &&ReceivedSpan| span.trace_id == trace_id;
            let forwarding = spans
                .iter()
                .filter(in_trace)
                .find(|span| span.name == COMMAND_SPAN && span.parent_span_id == gateway_span_id)?;
            let executing = spans.iter().filter(in_trace).find(|span| {
                span.name == "hyapp.room.v1.RoomPeer/Execute"
                    && span.parent_span_id == forwarding.span_id
            })?;
            Some(executing.clone())
        })
        .await;
    let Some(executing) = found else {
        panic!(
            "no forwarded chain in trace {trace_id}: {:#?}",
            receiver.trace(&trace_id)
        );
    };
    assert_eq!(executing.kind, "SPAN_KIND_SERVER");
    assert_eq!(executing.attribute("room_id"), Some(room.as_str()));
    let stored: String =
        sqlx::query_scalar("SELECT traceparent FROM room_outbox WHERE event_id = ?")
            .bind(&joined)
            .fetch_one(&holder.pool)
            .await
            .unwrap();
    assert_eq!(stored, format!("00-{trace_id}-{}-01", executing.span_id));
    forwarder.stop().await;
    holder.stop().await;
}
