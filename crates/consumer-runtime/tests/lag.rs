//! The group's lag as the broker reports it (`consumer_runtime::lag`),
//! against the real broker: after a group consumed part of a topic and
//! stopped, [`read_group_lag`] reports, per partition, the committed offset
//! the group stopped at, the high watermark and exactly the messages
//! produced since; while the group runs again but cannot complete anything,
//! [`LagMonitor`] exports the same per-partition lag as
//! `consumer_partition_lag_messages`.

use consumer_runtime::{
    Consumer, ConsumerMetrics, Delivery, Handler, HandlerError, Outcome,
    lag::{LagMonitor, read_group_lag},
    testing::{TestProducer, envelope, test_settings, wait_until},
};
use outbox_schema::{names::dead_letter_topic, pb};
use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);
const PARTITIONS: i32 = 3;

/// Completes every message, or (refusing) fails every one as retryable, so
/// the group holds its partitions without committing.
#[derive(Default)]
struct Switch {
    refusing: AtomicBool,
    completed: AtomicUsize,
}

impl Handler<pb::RoomOutboxEvent> for Switch {
    async fn handle(&self, _: &Delivery<pb::RoomOutboxEvent>) -> Result<Outcome, HandlerError> {
        if self.refusing.load(Ordering::SeqCst) {
            return Err(HandlerError::retryable("downstream unavailable"));
        }
        self.completed.fetch_add(1, Ordering::SeqCst);
        Ok(Outcome::Applied)
    }
}

/// Publishes `count` events spread over rooms; returns how many landed on
/// each partition.
async fn produce(
    producer: &TestProducer,
    topic: &str,
    round: &str,
    count: usize,
) -> BTreeMap<i32, i64> {
    let mut per_partition = BTreeMap::new();
    for index in 0..count {
        let event = envelope(
            &uuid::Uuid::new_v4().to_string(),
            &format!("room-{}", index % 7),
            index as u64 + 1,
            pb::room_outbox_event::Payload::RoomUserJoined(pb::RoomUserJoined {
                user_id: format!("{round}-{index}"),
            }),
        );
        let (partition, _) = producer.send_event(topic, &event).await.unwrap();
        *per_partition.entry(partition).or_insert(0) += 1;
    }
    per_partition
}

fn properties() -> Vec<(String, String)> {
    vec![("bootstrap.servers".into(), testkit::kafka_bootstrap())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_reports_each_partitions_lag_with_the_group_down_and_running() {
    let topic = testkit::unique("lag_topic_");
    let group = testkit::unique("lag_group_");
    testkit::create_topic(&topic, PARTITIONS).await;
    testkit::create_topic(&dead_letter_topic(&group), 1).await;
    let producer = TestProducer::new(&testkit::kafka_bootstrap()).unwrap();

    // A group that has never committed counts from the oldest message.
    let first = produce(&producer, &topic, "first", 21).await;
    let before = read_group_lag(&properties(), &group, &topic).unwrap();
    assert_eq!(before.len(), PARTITIONS as usize);
    for lag in &before {
        let produced = first.get(&lag.partition).copied().unwrap_or(0);
        assert_eq!(lag.committed, None, "partition {}", lag.partition);
        assert_eq!(lag.lag(), produced, "partition {}", lag.partition);
    }

    // Consume everything, stop (the stop commits), produce more while down.
    let switch = Arc::new(Switch::default());
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = ConsumerMetrics::register(&mut registry);
    let settings = test_settings(&testkit::kafka_bootstrap(), &topic, &group, 10_000).unwrap();
    let monitor = LagMonitor::new(&settings, &metrics);
    let run = |settings| {
        let consumer = Consumer::new(settings, switch.clone(), &metrics).unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { consumer.run(shutdown).await.unwrap() }
        });
        (shutdown, task)
    };
    let (shutdown, task) = run(settings.clone());
    assert!(
        wait_until(WAIT, || async {
            switch.completed.load(Ordering::SeqCst) == 21
        })
        .await
    );
    shutdown.cancel();
    task.await.unwrap();
    let second = produce(&producer, &topic, "second", 17).await;

    let down = read_group_lag(&properties(), &group, &topic).unwrap();
    assert_eq!(down.len(), PARTITIONS as usize);
    for lag in &down {
        let consumed = first.get(&lag.partition).copied().unwrap_or(0);
        let waiting = second.get(&lag.partition).copied().unwrap_or(0);
        assert_eq!(lag.low_watermark, 0, "partition {}", lag.partition);
        assert_eq!(
            lag.high_watermark,
            consumed + waiting,
            "partition {}",
            lag.partition
        );
        // A partition the first round never reached has no commit.
        let committed = (consumed > 0).then_some(consumed);
        assert_eq!(lag.committed, committed, "partition {}", lag.partition);
        assert_eq!(lag.lag(), waiting, "partition {}", lag.partition);
    }
    assert_eq!(down.iter().map(|lag| lag.lag()).sum::<i64>(), 17);

    // Running again but completing nothing: the exported gauge shows the
    // same lag per partition (the monitor is its own client, not a member).
    switch.refusing.store(true, Ordering::SeqCst);
    let (shutdown, task) = run(settings);
    let expected: Vec<String> = down
        .iter()
        .map(|lag| {
            format!(
                "consumer_partition_lag_messages{{consumer_group=\"{group}\",partition=\"{}\"}} {}",
                lag.partition,
                lag.lag()
            )
        })
        .collect();
    let deadline = std::time::Instant::now() + WAIT;
    let mut exposition = String::new();
    let mut shown = false;
    while !shown && std::time::Instant::now() < deadline {
        monitor.read_once().await.unwrap();
        exposition.clear();
        prometheus_client::encoding::text::encode(&mut exposition, &registry).unwrap();
        shown = expected
            .iter()
            .all(|line| exposition.contains(line.as_str()));
        if !shown {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert!(shown, "expected {expected:#?} in\n{exposition}");
    assert_eq!(switch.completed.load(Ordering::SeqCst), 21);
    shutdown.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn a_missing_topic_is_an_error_naming_it() {
    let topic = testkit::unique("lag_missing_");
    let error = read_group_lag(&properties(), "lag_nobody", &topic).unwrap_err();
    assert!(error.to_string().contains(&topic), "{error}");
}
