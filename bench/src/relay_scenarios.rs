//! Relay scenarios: backlog drain with 1 and 2 relays against same-run
//! baselines (raw rdkafka produce of the same payloads; raw SQL of the same
//! rows, both as the two-write claim+mark loop and as the one fenced mark per
//! row the `mq` mode writes), and the relay's own old two-write path in the
//! same run, per-room order verified on the topic afterwards; idle-to-publish
//! latency with and without the commit nudge (the first event after start-up
//! is `relay_start`). Plots: drain throughput over time, idle-to-publish
//! latency histograms.

use crate::{
    fixtures::{self, BenchEnv},
    plots::{self, Series},
    relay_baselines,
    report::{Report, Row},
};
use fred::prelude::*;
use hdrhistogram::Histogram;
use outbox_schema::names;
use rdkafka::{
    ClientConfig, Message,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
    consumer::{Consumer, StreamConsumer},
};
use relay_engine::{
    Relay, RelaySettings,
    config::{DirectConfig, OutboxWorkerConfig},
    metrics::RelayMetrics,
    publish::{MqPublisher, Publishers},
};
use service_kit::{duration::ConfigDuration, mq::MqConfig, time::now_ms};
use sqlx::{MySqlPool, Row as _};
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};
use tokio_util::sync::CancellationToken;

/// Partitions of every benchmark topic.
pub const PARTITIONS: i32 = 8;

/// The broker section of a benchmark service in `namespace`.
pub fn mq_config(env: &BenchEnv, namespace: &str) -> MqConfig {
    let mut mq = MqConfig {
        enabled: true,
        name_servers: vec![env.bootstrap.clone()],
        namespace: namespace.into(),
        send_timeout: ConfigDuration::from_secs(10),
        ..MqConfig::default()
    };
    mq.room_outbox.enabled = true;
    mq
}

/// A relay worker in mq mode.
pub fn worker(node_id: &str, nudge: bool, poll: ConfigDuration, redis: &str) -> OutboxWorkerConfig {
    OutboxWorkerConfig {
        publish_mode: "mq".into(),
        poll_interval: poll,
        batch_size: 2_000,
        publish_timeout: ConfigDuration::from_secs(10),
        shard_lease: ConfigDuration::from_secs(2),
        nudge_enabled: nudge,
        redis_url: redis.into(),
        node_id: node_id.into(),
        ..OutboxWorkerConfig::default()
    }
}

/// Creates `topic` with [`PARTITIONS`] partitions.
pub async fn create_topic(bootstrap: &str, topic: &str) -> anyhow::Result<()> {
    create_topic_of(bootstrap, topic, PARTITIONS).await
}

/// [`create_topic`] with `partitions` partitions.
pub async fn create_topic_of(bootstrap: &str, topic: &str, partitions: i32) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    admin.create_topics([&new], &AdminOptions::new()).await?;
    Ok(())
}

/// Scenario 3 (and the relay issue's drain figure).
pub async fn backlog_drain(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    let (rows, rooms) = if env.smoke {
        (2_000, 50)
    } else {
        (200_000, 1_000)
    };
    println!("relay-drain: {rows} rows across {rooms} rooms");
    let raw_topic = format!(
        "bench-raw-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    create_topic(&env.bootstrap, &raw_topic).await?;
    let produce_baseline = relay_baselines::raw_produce(env, &raw_topic, rows, rooms).await?;
    let sql_baseline = relay_baselines::raw_sql_claim_mark(env, rows, rooms).await?;
    let single_mark_ceiling = relay_baselines::raw_sql_single_mark(env, rows, rooms).await?;
    let lower = produce_baseline.min(sql_baseline);
    baseline_rows(report, produce_baseline, sql_baseline, single_mark_ceiling);
    let mut curves = Vec::new();
    let (two_write, two_write_order, _) = drain_with(env, rows, rooms, 1, Path::TwoWrites).await?;
    report.add(Row {
        scenario: "relay-drain (1 relay, two-write path)".into(),
        metric: "events/s".into(),
        measured: two_write,
        target: None,
        baseline: Some(sql_baseline),
        ratio: Some(two_write / sql_baseline),
        pass: Some(two_write_order),
        note: format!(
            "claim to delivering, then mark (RelaySettings::claim_mq_rows); per-room order on topic: {}",
            if two_write_order { "verified" } else { "VIOLATED" }
        ),
    });
    for relays in [1usize, 2] {
        let (rate, order_ok, curve) =
            drain_with(env, rows, rooms, relays, Path::LeaseFenced).await?;
        curves.push(Series {
            label: format!("{relays} relay{}", if relays > 1 { "s" } else { "" }),
            points: curve,
        });
        let ratio = rate / lower;
        report.add(Row {
            scenario: format!(
                "relay-drain ({relays} relay{})",
                if relays > 1 { "s" } else { "" }
            ),
            metric: "events/s".into(),
            measured: rate,
            target: Some(">= 30000, >= 0.5x".into()),
            baseline: Some(lower),
            ratio: Some(ratio),
            pass: Some(rate >= 30_000.0 && ratio >= 0.5 && order_ok),
            note: format!(
                "per-room order on topic: {}",
                if order_ok { "verified" } else { "VIOLATED" }
            ),
        });
        if relays == 1 {
            one_relay_rows(report, rate, single_mark_ceiling, two_write);
        }
    }
    curves.push(Series {
        label: "raw SQL claim+mark baseline (mean)".into(),
        points: vec![
            (0.0, sql_baseline),
            (rows as f64 / sql_baseline, sql_baseline),
        ],
    });
    plots::line_chart(
        &env.plot_path("relay-drain-throughput"),
        &format!("relay backlog drain, {rows} rows / {rooms} rooms"),
        "seconds since start",
        "events/s (per 0.5 s)",
        &curves,
    )
}

/// Which of the relay's `mq` paths a drain runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    /// The shard lease is the claim: one fenced mark per delivered row.
    LeaseFenced,
    /// Claim to `delivering`, then mark (`RelaySettings::claim_mq_rows`).
    TwoWrites,
}

/// A relay in `mq` mode on `path`.
pub(crate) fn mq_relay(
    pool: &MySqlPool,
    worker: &OutboxWorkerConfig,
    mq: &MqConfig,
    path: Path,
) -> anyhow::Result<Relay> {
    let mut settings = RelaySettings::from_config(worker, mq)?;
    settings.claim_mq_rows = path == Path::TwoWrites;
    let publishers = Publishers {
        mq: Some(MqPublisher::new(mq, settings.publish_timeout)?),
        direct: None,
    };
    let mut registry = prometheus_client::registry::Registry::default();
    Ok(Relay::new(
        pool.clone(),
        settings,
        publishers,
        RelayMetrics::register(&mut registry),
    ))
}

/// Window of the drain throughput curve.
const CURVE_WINDOW: Duration = Duration::from_millis(500);

async fn drain_with(
    env: &BenchEnv,
    rows: usize,
    rooms: usize,
    relays: usize,
    path: Path,
) -> anyhow::Result<(f64, bool, Vec<(f64, f64)>)> {
    let (pool, db) = fixtures::fresh_database(env).await?;
    fixtures::prefill(&pool, rooms, rows).await?;
    let namespace = format!("bench{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mq = mq_config(env, &namespace);
    let topic = mq.topic(names::TOPIC_ROOM_OUTBOX);
    create_topic(&env.bootstrap, &topic).await?;
    let shutdown = CancellationToken::new();
    // Warmed up (connected, metadata fetched) before the clock starts, as the
    // binary is before it reports ready: a drain is what a running relay
    // does with a backlog, and a cold producer's first batch waited ~1 s for
    // its connection and producer id (`relay-first-event` measures that).
    let mut warmed = Vec::new();
    for index in 0..relays {
        let relay = mq_relay(
            &pool,
            &worker(
                &format!("bench-relay-{index}"),
                false,
                ConfigDuration::from_millis(20),
                &env.redis,
            ),
            &mq,
            path,
        )?;
        relay.warm_up().await?;
        warmed.push(relay);
    }
    let started = Instant::now();
    let handles: Vec<_> = warmed
        .into_iter()
        .map(|relay| tokio::spawn(relay.run(shutdown.clone())))
        .collect();
    // Events/s per window. The relay drains in commit order, so the rows
    // behind the oldest open one approximate what has been delivered; the
    // end (no open row), and so the reported rate, is exact.
    let newest = fixtures::newest_id(&pool).await?;
    let mut curve = Vec::new();
    let (mut window_start, mut window_open) = (Duration::ZERO, rows as i64);
    loop {
        let open = match fixtures::oldest_open_id(&pool).await? {
            Some(oldest) => (newest + 1).saturating_sub(oldest) as i64,
            None => 0,
        };
        let at = started.elapsed();
        if at - window_start >= CURVE_WINDOW || open == 0 {
            let rate = (window_open - open) as f64 / (at - window_start).as_secs_f64();
            curve.push((window_start.as_secs_f64(), rate));
            curve.push((at.as_secs_f64(), rate));
            (window_start, window_open) = (at, open);
        }
        if open == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    shutdown.cancel();
    for handle in handles {
        handle.await??;
    }
    let order_ok = verify_room_order(env, &topic, rows).await?;
    pool.close().await;
    fixtures::drop_database(env, &db).await?;
    Ok((rows as f64 / elapsed, order_ok, curve))
}

/// Reads the whole topic and checks each room's sequence never goes backwards
/// and ends complete (at-least-once duplicates allowed). A topic that stops
/// short is reported (as a violation, with the count), not a crash.
async fn verify_room_order(env: &BenchEnv, topic: &str, rows: usize) -> anyhow::Result<bool> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &env.bootstrap)
        .set(
            "group.id",
            format!("bench-verify-{}", uuid::Uuid::new_v4().simple()),
        )
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()?;
    consumer.subscribe(&[topic])?;
    let mut last: HashMap<String, u64> = HashMap::new();
    let mut distinct = std::collections::HashSet::new();
    let (mut ok, mut messages) = (true, 0usize);
    while distinct.len() < rows {
        let Ok(message) = tokio::time::timeout(Duration::from_secs(30), consumer.recv()).await
        else {
            println!(
                "  verify: only {} of {rows} events on {topic} ({messages} messages) after 30 s of silence",
                distinct.len()
            );
            return Ok(false);
        };
        let message = message?;
        messages += 1;
        let envelope = outbox_schema::decode_envelope(message.payload().unwrap_or_default())?;
        let previous = last
            .insert(envelope.room_id.clone(), envelope.room_event_seq)
            .unwrap_or(0);
        if envelope.room_event_seq < previous {
            ok = false;
        }
        distinct.insert(envelope.event_id);
    }
    Ok(ok)
}

/// Idle-to-publish latency (commit → delivered) of single events, with and without the nudge.
pub async fn idle_latency(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    let samples = if env.smoke { 5 } else { 200 };
    let mut histograms = Vec::new();
    for nudge in [true, false] {
        let histogram =
            latency_samples(env, nudge, if nudge { samples } else { samples / 2 }).await?;
        for (quantile, label) in [(0.5, "p50"), (0.99, "p99")] {
            report.add(Row {
                scenario: format!(
                    "relay idle-to-publish, nudge {}",
                    if nudge { "on" } else { "off" }
                ),
                metric: format!("{label} ms"),
                measured: histogram.value_at_quantile(quantile) as f64,
                target: None,
                baseline: None,
                ratio: None,
                pass: None,
                note: "poll_interval 1s; commit to broker ack".into(),
            });
        }
        histograms.push((
            format!("nudge {}", if nudge { "on" } else { "off" }),
            histogram,
        ));
    }
    let series: Vec<_> = histograms
        .iter()
        .map(|(label, histogram)| (label.clone(), histogram))
        .collect();
    plots::latency_histogram(
        &env.plot_path("relay-idle-to-publish"),
        "relay idle-to-publish latency (poll 1 s)",
        &series,
    )
}

async fn latency_samples(
    env: &BenchEnv,
    nudge: bool,
    samples: usize,
) -> anyhow::Result<Histogram<u64>> {
    let (pool, db) = fixtures::fresh_database(env).await?;
    let namespace = format!(
        "benchlat{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let mq = mq_config(env, &namespace);
    create_topic(&env.bootstrap, &mq.topic(names::TOPIC_ROOM_OUTBOX)).await?;
    let mut registry = prometheus_client::registry::Registry::default();
    let relay = relay_engine::build_relay(
        pool.clone(),
        &worker(
            "bench-latency",
            nudge,
            ConfigDuration::from_secs(1),
            &env.redis,
        ),
        &mq,
        &DirectConfig::default(),
        &mut registry,
    )?;
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(relay.run(shutdown.clone()));
    let redis = Builder::from_config(Config::from_url(&env.redis)?).build()?;
    redis.init().await?;
    // Let the relay take its shards and subscribe before measuring.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut histogram = Histogram::<u64>::new(3)?;
    for index in 0..samples {
        let row = fixtures::gift_row("latency-room", index as u64 + 1, now_ms());
        let mut tx = pool.begin().await?;
        outbox_store::insert_outbox_rows(&mut tx, std::slice::from_ref(&row)).await?;
        tx.commit().await?;
        if nudge {
            let _: i64 = redis
                .publish(names::NUDGE_CHANNEL, row.shard.to_string())
                .await?;
        }
        let latency = wait_delivered(&pool, &row.event_id).await?;
        histogram.record(latency.max(0) as u64)?;
        // Decorrelate from the poll ticker.
        tokio::time::sleep(Duration::from_millis(7 * (index as u64 % 13))).await;
    }
    shutdown.cancel();
    handle.await??;
    let _ = redis.quit().await;
    pool.close().await;
    fixtures::drop_database(env, &db).await?;
    Ok(histogram)
}

pub(crate) async fn wait_delivered(pool: &MySqlPool, event_id: &str) -> anyhow::Result<i64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let row = sqlx::query("SELECT delivered_at_ms - created_at_ms AS lag FROM room_outbox WHERE event_id = ? AND status = 'delivered'")
            .bind(event_id)
            .fetch_optional(pool)
            .await?;
        if let Some(row) = row {
            return Ok(row.try_get("lag")?);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "event {event_id} not delivered within 30s"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// An informational row: no target, no baseline.
fn info_row(scenario: &str, measured: f64, note: &str) -> Row {
    Row {
        scenario: scenario.into(),
        metric: "events/s".into(),
        measured,
        target: None,
        baseline: None,
        ratio: None,
        pass: None,
        note: note.into(),
    }
}

/// The drain's baselines: raw produce, raw SQL claim+mark, and the
/// single-fenced-mark ceiling.
fn baseline_rows(report: &mut Report, produce: f64, sql: f64, single_mark: f64) {
    report.add(info_row(
        "relay-drain baseline: raw produce",
        produce,
        "rdkafka idempotent producer, same payloads, no DB",
    ));
    report.add(info_row(
        "relay-drain baseline: raw SQL",
        sql,
        "claim+mark UPDATEs of the same rows, no broker",
    ));
    report.add(info_row(
        "relay-drain ceiling: raw SQL single fenced mark",
        single_mark,
        "scan + one lease-fenced UPDATE per batch of the same rows, no broker",
    ));
}

/// One lease-fenced relay against the single-mark ceiling and the
/// two-write relay of the same run.
fn one_relay_rows(report: &mut Report, rate: f64, single_mark_ceiling: f64, two_write: f64) {
    let of_ceiling = rate / single_mark_ceiling;
    let of_old = rate / two_write;
    report.add(Row {
        scenario: "relay-drain (1 relay) vs single-mark ceiling".into(),
        metric: "ratio".into(),
        measured: of_ceiling,
        target: Some(">= 0.8x".into()),
        baseline: Some(single_mark_ceiling),
        ratio: Some(of_ceiling),
        pass: Some(of_ceiling >= 0.8),
        note: format!("{rate:.0} events/s of a {single_mark_ceiling:.0} events/s ceiling"),
    });
    report.add(Row {
        scenario: "relay-drain (1 relay) vs two-write relay".into(),
        metric: "ratio".into(),
        measured: of_old,
        target: Some(">= 1.6x".into()),
        baseline: Some(two_write),
        ratio: Some(of_old),
        pass: Some(of_old >= 1.6),
        note: format!("{rate:.0} events/s against {two_write:.0} events/s, same run"),
    });
}
