//! Scenario 5, `consumer-throughput`: a topic pre-filled with N envelopes
//! (gifts, plus ~10% `RoomUserKicked` so notice-consumer does real work) is
//! drained from scratch by each consumer in its own fresh group, in-process,
//! dedup on, against the fake IM with its rate limits lifted. "Drained" =
//! the group's committed offsets reach N. Same-run baseline: a bare rdkafka
//! consumer reading the same topic with no handler.

use crate::{
    consumers::{self, Kind, OffsetWatcher},
    fixtures::{self, BenchEnv},
    relay_scenarios::{create_topic, mq_config},
    report::{Report, Row},
};
use outbox_schema::names;
use rdkafka::{
    ClientConfig,
    consumer::{Consumer as _, StreamConsumer},
};
use std::time::{Duration, Instant};

/// Rooms the pre-filled events are spread over.
const ROOMS: usize = 200;
/// One event in this many is a kick.
const KICK_EVERY: usize = 10;

/// Runs scenario 5.
pub async fn consumer_throughput(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    let total = if env.smoke { 2_000 } else { 50_000 };
    println!("consumer-throughput: {total} envelopes, {ROOMS} rooms, 1 in {KICK_EVERY} a kick");
    let (pool, db) = fixtures::fresh_database(env).await?;
    let mysql_url = format!("{}/{db}", env.mysql);
    let namespace = format!("benchct{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mq = mq_config(env, &namespace);
    let topic = mq.topic(names::TOPIC_ROOM_OUTBOX);
    create_topic(&env.bootstrap, &topic).await?;
    consumers::prefill_topic(env, &topic, total, ROOMS, KICK_EVERY).await?;
    let fake = consumers::fake_im().await?;
    consumers::create_im_groups(&fake, ROOMS).await?;
    let baseline = raw_consume(env, &topic, total).await?;
    report.add(Row {
        scenario: "consumer-throughput baseline: raw".into(),
        metric: "events/s".into(),
        measured: baseline,
        target: None,
        baseline: None,
        ratio: None,
        pass: None,
        note: "bare rdkafka StreamConsumer, no handler, incl. group join".into(),
    });
    let deadline = Duration::from_secs(if env.smoke { 60 } else { 600 });
    for kind in Kind::ALL {
        let group = format!(
            "bench-{}-{}",
            kind.name(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        create_topic(&env.bootstrap, &mq.topic(&names::dead_letter_topic(&group))).await?;
        let watcher = OffsetWatcher::new(&env.bootstrap, &group, &topic)?;
        let started = Instant::now();
        let (shutdown, handle) =
            consumers::spawn_consumer(kind, &mysql_url, &mq, &group, &fake).await?;
        let mut first_progress: Option<(Instant, i64)> = None;
        let mut done = 0;
        while done < total as i64 {
            anyhow::ensure!(
                started.elapsed() < deadline,
                "{} drained only {done}/{total} within {deadline:?}",
                kind.name()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
            done = watcher.committed().await?;
            if done > 0 && first_progress.is_none() {
                first_progress = Some((Instant::now(), done));
            }
        }
        let elapsed = started.elapsed().as_secs_f64();
        shutdown.cancel();
        let _ = handle.await;
        let rate = total as f64 / elapsed;
        let steady = first_progress
            .map(|(at, base)| (total as i64 - base) as f64 / at.elapsed().as_secs_f64().max(1e-3))
            .unwrap_or(rate);
        let work = match kind {
            Kind::Activity => "gift leaderboard txn per batch; kicks ignored",
            Kind::Notice => "kicks (10%) -> notice row + C2C IM; gifts need no notice",
            Kind::ImBridge => "1 group message per event; kicks also remove the member",
        };
        report.add(Row {
            scenario: format!("consumer-throughput {}", kind.name()),
            metric: "events/s".into(),
            measured: rate,
            target: None,
            baseline: Some(baseline),
            ratio: Some(rate / baseline),
            pass: None,
            note: format!(
                "{work}; incl. group join; {steady:.0}/s after first commit; dedup on; commit 100ms"
            ),
        });
    }
    let stats = fake.stats();
    println!(
        "  fake IM: {} requests, {} messages",
        stats.requests, stats.messages
    );
    pool.close().await;
    fixtures::drop_database(env, &db).await?;
    Ok(())
}

/// Reads `total` messages with no handler: the broker + client ceiling.
async fn raw_consume(env: &BenchEnv, topic: &str, total: usize) -> anyhow::Result<f64> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &env.bootstrap)
        .set(
            "group.id",
            format!("bench-raw-{}", uuid::Uuid::new_v4().simple()),
        )
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()?;
    consumer.subscribe(&[topic])?;
    let started = Instant::now();
    for _ in 0..total {
        tokio::time::timeout(Duration::from_secs(30), consumer.recv()).await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}
