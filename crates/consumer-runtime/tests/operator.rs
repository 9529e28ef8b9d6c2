//! The operator commands of the consumer host against the real broker and
//! MariaDB: a handler that fails makes a dead letter; `dead-letters list`
//! and `inspect` show it without moving the group's offsets; `replay` hands
//! it to the group's handler, which applies it exactly once (a second replay
//! is a duplicate); an event older than `consumer.dedup_retention` is refused
//! without `--force`; every replay is audited and a dry run is not; unknown
//! event ids are refused.

use consumer_runtime::{
    Consumer, ConsumerConfig, ConsumerMetrics, Delivery, Handler, HandlerError, Outcome, dedup,
    host::{self, ConsumerService, OperatorCommand, ServiceConfig, SharedSections, run_operator},
    testing::{TestProducer, envelope, read_topic, test_settings, wait_until},
};
use outbox_schema::{names::dead_letter_topic, pb};
use serde::{Deserialize, Serialize};
use service_kit::{db::MysqlConfig, duration::ConfigDuration, mq::MqConfig, telemetry::LogConfig};
use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);

/// Events the handler refuses while the "downstream" is broken.
static REFUSED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
/// Events whose effect was applied, in order (each test runs in its own process).
static APPLIED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Applies an event by claiming its id in `consumer_dedup` (the effect's
/// transaction), refusing the ids in [`REFUSED`] as a broken downstream would.
struct Effects {
    pool: sqlx::MySqlPool,
    group: String,
}

impl Handler<pb::RoomOutboxEvent> for Effects {
    async fn handle(
        &self,
        delivery: &Delivery<pb::RoomOutboxEvent>,
    ) -> Result<Outcome, HandlerError> {
        let event_id = delivery.event_id();
        if REFUSED
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|refused| refused.contains(event_id))
        {
            return Err(HandlerError::permanent("downstream refused the event"));
        }
        let mut tx = self.pool.begin().await?;
        let fresh =
            dedup::try_claim_in_tx(&mut tx, &self.group, event_id, service_kit::time::now_ms())
                .await?;
        tx.commit().await?;
        if !fresh {
            return Ok(Outcome::Duplicate);
        }
        APPLIED.lock().unwrap().push(event_id.to_string());
        Ok(Outcome::Applied)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
struct TestConfig {
    log: LogConfig,
    mysql: MysqlConfig,
    rocketmq: MqConfig,
    consumer: ConsumerConfig,
    http_listen: String,
}

impl ServiceConfig for TestConfig {
    const SERVICE: &str = "operator-test";
    const ENV_PREFIX: &str = "OPERATOR_TEST";

    fn shared(&self) -> SharedSections<'_> {
        SharedSections {
            log: &self.log,
            mysql: &self.mysql,
            rocketmq: &self.rocketmq,
            consumer: &self.consumer,
            default_group: "unused",
            http_listen: &self.http_listen,
        }
    }

    fn check_tencent_im(&self) -> Result<(), impl std::fmt::Display> {
        Ok::<(), String>(())
    }
}

#[derive(Debug)]
struct TestService;

impl ConsumerService for TestService {
    type Config = TestConfig;
    type Message = pb::RoomOutboxEvent;
    type Handler = Effects;
    const ABOUT: &str = "test";

    async fn build(
        _config: &TestConfig,
        host: &mut host::Builder,
    ) -> Result<Arc<Effects>, host::Error> {
        Ok(Arc::new(Effects {
            pool: host.pool().clone(),
            group: host.consumer_group().to_string(),
        }))
    }
}

fn joined(event_id: &str, room: &str, occurred_at_ms: i64) -> pb::RoomOutboxEvent {
    let mut event = envelope(
        event_id,
        room,
        1,
        pb::room_outbox_event::Payload::RoomUserJoined(pb::RoomUserJoined {
            user_id: "u-1".into(),
        }),
    );
    event.occurred_at_ms = occurred_at_ms;
    event
}

async fn run(config: &TestConfig, args: &[&str]) -> Result<host::OperatorReport, host::Error> {
    let command = OperatorCommand::from_args(args.iter().copied()).expect("valid arguments");
    run_operator::<TestService>(config, command).await
}

fn json(report: &host::OperatorReport) -> serde_json::Value {
    serde_json::from_str(&report.output).expect("--json prints JSON")
}

fn applied_count(event_id: &str) -> usize {
    APPLIED
        .lock()
        .unwrap()
        .iter()
        .filter(|id| *id == event_id)
        .count()
}

/// `(operator, action, target, reason, outcome)` of the group's audit rows, oldest first.
async fn audit_rows(
    pool: &sqlx::MySqlPool,
    group: &str,
) -> Vec<(String, String, String, String, String)> {
    sqlx::query_as(
        "SELECT operator, action, target, reason, outcome FROM consumer_operator_audit \
         WHERE consumer_group = ? ORDER BY id",
    )
    .bind(group)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_is_listed_inspected_and_replayed_once_through_the_groups_handler() {
    let db = testkit::TestDb::new().await;
    let bootstrap = testkit::kafka_bootstrap();
    let topic = testkit::unique("op_topic_");
    let group = testkit::unique("op_group_");
    testkit::create_topic(&topic, 1).await;
    testkit::create_topic(&dead_letter_topic(&group), 1).await;
    let now = service_kit::time::now_ms();
    let fresh = uuid::Uuid::new_v4().to_string();
    let old = uuid::Uuid::new_v4().to_string();
    let healthy = uuid::Uuid::new_v4().to_string();
    *REFUSED.lock().unwrap() = Some(HashSet::from([fresh.clone(), old.clone()]));

    // The live consumer: the refused events go to the dead-letter topic.
    let settings = test_settings(&bootstrap, &topic, &group, 0).unwrap();
    let live = Consumer::new(
        settings,
        Arc::new(Effects {
            pool: db.pool.clone(),
            group: group.clone(),
        }),
        &ConsumerMetrics::unregistered(),
    )
    .unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(live.run(shutdown.clone()));
    let producer = TestProducer::new(&bootstrap).unwrap();
    producer
        .send_event(&topic, &joined(&fresh, "room-a", now))
        .await
        .unwrap();
    // Occurred two hours ago: older than the 1h dedup retention configured below.
    producer
        .send_event(&topic, &joined(&old, "room-b", now - 2 * 3_600_000))
        .await
        .unwrap();
    producer
        .send_event(&topic, &joined(&healthy, "room-a", now))
        .await
        .unwrap();
    assert!(wait_until(WAIT, || async { applied_count(&healthy) == 1 }).await);
    let dead = read_topic(&bootstrap, &dead_letter_topic(&group), 2, WAIT)
        .await
        .unwrap();
    assert_eq!(dead.len(), 2);
    shutdown.cancel();
    task.await.unwrap().unwrap();

    let mut config = TestConfig::default();
    config.mysql.url = db.url.clone();
    config.rocketmq.enabled = true;
    config.rocketmq.name_servers = vec![bootstrap.clone()];
    config.rocketmq.room_outbox.topic = topic.clone();
    config.consumer.group = group.clone();
    config.consumer.dedup_retention = ConfigDuration::from_secs(3_600);

    // list: both, with what the runtime recorded, oldest first.
    let listed = json(
        &run(&config, &["dead-letters", "list", "--json"])
            .await
            .unwrap(),
    );
    assert_eq!(listed["matched"], 2);
    let letters = listed["dead_letters"].as_array().unwrap();
    assert_eq!(letters[0]["event_id"], fresh.as_str());
    assert_eq!(letters[0]["room_id"], "room-a");
    assert_eq!(letters[0]["event_type"], "RoomUserJoined");
    assert_eq!(letters[0]["attempts"], 1);
    assert_eq!(letters[0]["group"], group.as_str());
    assert!(
        letters[0]["source"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{topic}/0/"))
    );
    assert!(
        letters[0]["reason"]
            .as_str()
            .unwrap()
            .contains("downstream refused")
    );
    assert_eq!(letters[1]["event_id"], old.as_str());
    // Both were dead-lettered within the last hour.
    let listed = run(&config, &["dead-letters", "list", "--since", "1h"])
        .await
        .unwrap();
    assert!(
        listed.output.starts_with("2 dead letters in "),
        "{}",
        listed.output
    );

    // inspect: headers and the decoded envelope.
    let inspected = run(&config, &["dead-letters", "inspect", &fresh])
        .await
        .unwrap();
    assert!(
        inspected.output.contains("dlq_reason: "),
        "{}",
        inspected.output
    );
    assert!(
        inspected.output.contains("room_id: \"room-a\""),
        "{}",
        inspected.output
    );
    let unknown = uuid::Uuid::new_v4().to_string();
    let error = run(&config, &["dead-letters", "inspect", &unknown])
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("no dead letter of event"),
        "{error}"
    );

    // A dry run says what would happen and changes nothing.
    let dry = run(&config, &["dead-letters", "replay", "--all", "--dry-run"])
        .await
        .unwrap();
    assert!(!dry.complete, "the old event is refused: {}", dry.output);
    assert!(
        dry.output.contains("would replay 1, refused 1"),
        "{}",
        dry.output
    );
    assert!(
        audit_rows(&db.pool, &group).await.is_empty(),
        "a dry run is not audited"
    );

    // Still broken downstream: the replay fails, the letter stays.
    let failed = run(
        &config,
        &[
            "dead-letters",
            "replay",
            "--event-id",
            &fresh,
            "--operator",
            "alice",
            "--reason",
            "try",
        ],
    )
    .await
    .unwrap();
    assert!(!failed.complete);
    assert!(
        failed.output.contains("FAILED: downstream refused"),
        "{}",
        failed.output
    );

    // Repaired: the replay applies it, once; a second replay is a duplicate.
    *REFUSED.lock().unwrap() = None;
    let replayed = run(
        &config,
        &[
            "dead-letters",
            "replay",
            "--all",
            "--json",
            "--operator",
            "alice",
            "--reason",
            "IM fixed, INC-7",
        ],
    )
    .await
    .unwrap();
    assert!(!replayed.complete, "the old event is still refused");
    let report = json(&replayed);
    let events = report["events"].as_array().unwrap();
    assert_eq!(events[0]["event_id"], fresh.as_str());
    assert_eq!(events[0]["result"], "applied");
    assert_eq!(events[1]["event_id"], old.as_str());
    assert_eq!(events[1]["result"], "refused");
    let refusal = events[1]["detail"].as_str().unwrap();
    assert!(
        refusal.contains("older than consumer.dedup_retention"),
        "{refusal}"
    );
    assert!(refusal.contains("apply its effect twice"), "{refusal}");
    assert_eq!(applied_count(&fresh), 1);
    assert_eq!(applied_count(&old), 0);

    let again = run(
        &config,
        &[
            "dead-letters",
            "replay",
            "--event-id",
            &fresh,
            "--operator",
            "bob",
            "--reason",
            "again",
        ],
    )
    .await
    .unwrap();
    assert!(again.complete);
    assert!(
        again.output.contains("duplicate (applied before)"),
        "{}",
        again.output
    );
    assert_eq!(applied_count(&fresh), 1, "the group's dedup keeps it once");

    // --force takes the old one.
    let forced = run(
        &config,
        &[
            "dead-letters",
            "replay",
            "--event-id",
            &old,
            "--force",
            "--operator",
            "alice",
            "--reason",
            "checked never applied",
        ],
    )
    .await
    .unwrap();
    assert!(forced.complete, "{}", forced.output);
    assert_eq!(applied_count(&old), 1);

    // An id with no dead letter is refused before anything is audited.
    let error = run(
        &config,
        &[
            "dead-letters",
            "replay",
            "--event-id",
            &unknown,
            "--operator",
            "alice",
            "--reason",
            "r",
        ],
    )
    .await
    .unwrap_err();
    assert!(
        error.to_string().contains("no dead letter of event"),
        "{error}"
    );

    let audit = audit_rows(&db.pool, &group).await;
    assert_eq!(audit.len(), 4, "{audit:?}");
    assert_eq!(
        (
            audit[0].0.as_str(),
            audit[0].1.as_str(),
            audit[0].3.as_str()
        ),
        ("alice", "dead-letters replay", "try")
    );
    assert_eq!(audit[0].2, format!("event_id={fresh}"));
    assert!(audit[0].4.contains("failed 1"), "{:?}", audit[0]);
    assert_eq!(audit[1].2, "all");
    assert!(
        audit[1].4.contains("applied 1") && audit[1].4.contains("refused 1"),
        "{:?}",
        audit[1]
    );
    assert!(audit[2].4.contains("duplicate 1"), "{:?}", audit[2]);
    assert_eq!(audit[3].2, format!("event_id={old} force"));

    // The reader committed nothing: no offsets under its own group id.
    assert_eq!(
        committed(
            &bootstrap,
            &format!("{group}.dlq-reader"),
            &dead_letter_topic(&group)
        ),
        rdkafka::Offset::Invalid
    );
    let still_there = read_topic(&bootstrap, &dead_letter_topic(&group), 2, WAIT)
        .await
        .unwrap();
    assert_eq!(
        still_there.len(),
        2,
        "dead letters stay in the topic after a replay"
    );
}

/// The offset `group` committed on partition 0 of `topic`.
fn committed(bootstrap: &str, group: &str, topic: &str) -> rdkafka::Offset {
    use rdkafka::consumer::Consumer as _;
    let consumer: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .create()
        .unwrap();
    let mut list = rdkafka::TopicPartitionList::new();
    list.add_partition(topic, 0);
    consumer
        .committed_offsets(list, Duration::from_secs(10))
        .unwrap()
        .find_partition(topic, 0)
        .unwrap()
        .offset()
}
