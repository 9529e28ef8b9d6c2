//! The relay's first event after start-up against its hundredth
//! (`relay-first-event`): commit → marked delivered with the producer cold,
//! and warmed up as the binary does before it reports ready.

use crate::{
    fixtures::{self, BenchEnv},
    relay_scenarios::{Path, create_topic, mq_config, mq_relay, wait_delivered, worker},
    report::{Report, Row},
};
use outbox_schema::names;
use service_kit::{duration::ConfigDuration, time::now_ms};
use sqlx::MySqlPool;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The first event after start-up against the hundredth (commit → marked
/// delivered), with the producer cold (connection and metadata fetched by the
/// first publish) and warmed up as the binary does before it reports ready.
pub async fn first_event(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    const EVENTS: usize = 100;
    for warm in [false, true] {
        let (pool, db) = fixtures::fresh_database(env).await?;
        let namespace = format!(
            "benchfirst{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let mq = mq_config(env, &namespace);
        create_topic(&env.bootstrap, &mq.topic(names::TOPIC_ROOM_OUTBOX)).await?;
        // Polling every 5 ms stands in for the nudge, whose subscription
        // would race the first event.
        let node_id = "bench-first";
        let relay = mq_relay(
            &pool,
            &worker(node_id, false, ConfigDuration::from_millis(5), &env.redis),
            &mq,
            Path::LeaseFenced,
        )?;
        if warm {
            relay.warm_up().await?;
        }
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(relay.run(shutdown.clone()));
        wait_owned(&pool, node_id).await?;
        let mut latencies = Vec::with_capacity(EVENTS);
        for index in 0..EVENTS {
            let row = fixtures::gift_row("first-room", index as u64 + 1, now_ms());
            let mut tx = pool.begin().await?;
            outbox_store::insert_outbox_rows(&mut tx, std::slice::from_ref(&row)).await?;
            tx.commit().await?;
            latencies.push(wait_delivered(&pool, &row.event_id).await?);
        }
        shutdown.cancel();
        handle.await??;
        pool.close().await;
        fixtures::drop_database(env, &db).await?;
        let producer = if warm {
            "warmed up before ready"
        } else {
            "cold"
        };
        for (label, position) in [("1st", 0), ("100th", EVENTS - 1)] {
            report.add(Row {
                scenario: format!("relay_first_event, producer {producer}"),
                metric: format!("{label} event ms"),
                measured: latencies[position] as f64,
                target: None,
                baseline: None,
                ratio: None,
                pass: None,
                note: "commit to marked delivered, one event at a time, poll 5 ms".into(),
            });
        }
    }
    Ok(())
}

/// Waits until `node_id` holds every shard.
async fn wait_owned(pool: &MySqlPool, node_id: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let owned: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM relay_shard_leases WHERE owner = ? AND lease_until_ms > ?",
        )
        .bind(node_id)
        .bind(now_ms())
        .fetch_one(pool)
        .await?;
        if owned == i64::from(outbox_schema::OUTBOX_SHARDS) {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "{node_id} never held the shards");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
