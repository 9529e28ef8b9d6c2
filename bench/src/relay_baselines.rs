//! The relay drain's same-run baselines, each on the drain's rows: raw
//! rdkafka produce (no DB), the raw SQL claim+mark loop (the old two writes
//! per event, no broker) and the raw single fenced mark per row (the `mq`
//! mode's one write, no broker).

use crate::fixtures::{self, BenchEnv};
use rdkafka::{
    ClientConfig,
    producer::{FutureProducer, FutureRecord},
};
use service_kit::time::now_ms;
use std::time::{Duration, Instant};

/// Raw rdkafka produce of the drain's payloads: the broker's ceiling.
/// `topic` exists already, with the drain's partitions.
pub(crate) async fn raw_produce(
    env: &BenchEnv,
    topic: &str,
    rows: usize,
    rooms: usize,
) -> anyhow::Result<f64> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &env.bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "2")
        .set("compression.type", "lz4")
        .create()?;
    let now = now_ms();
    let payloads: Vec<_> = (0..rows)
        .map(|index| {
            fixtures::gift_row(
                &format!("bench-room-{}", index % rooms),
                (index / rooms) as u64 + 1,
                now,
            )
        })
        .collect();
    let started = Instant::now();
    for chunk in payloads.chunks(10_000) {
        let sends = chunk.iter().map(|row| {
            producer.send(
                FutureRecord::to(topic)
                    .key(&row.room_id)
                    .payload(&row.payload),
                Duration::from_secs(10),
            )
        });
        for result in futures::future::join_all(sends).await {
            result.map_err(|(error, _)| error)?;
        }
    }
    Ok(rows as f64 / started.elapsed().as_secs_f64())
}

/// The two-write loop: scan, claim UPDATE, mark UPDATE per batch.
pub(crate) async fn raw_sql_claim_mark(
    env: &BenchEnv,
    rows: usize,
    rooms: usize,
) -> anyhow::Result<f64> {
    let (pool, db) = fixtures::fresh_database(env).await?;
    fixtures::prefill(&pool, rooms, rows).await?;
    let started = Instant::now();
    loop {
        let ids: Vec<u64> = sqlx::query_scalar(
            "SELECT id FROM room_outbox FORCE INDEX (idx_claim) WHERE lane = 0 AND open_flag = 1 ORDER BY id LIMIT 2000",
        )
        .fetch_all(&pool)
        .await?;
        if ids.is_empty() {
            break;
        }
        let list = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        sqlx::query(&format!(
            "UPDATE room_outbox SET status = 'delivering', claim_token = 1 WHERE id IN ({list})"
        ))
        .execute(&pool)
        .await?;
        sqlx::query(&format!(
            "UPDATE room_outbox SET status = 'delivered' WHERE id IN ({list}) AND claim_token = 1"
        ))
        .execute(&pool)
        .await?;
    }
    let rate = rows as f64 / started.elapsed().as_secs_f64();
    pool.close().await;
    fixtures::drop_database(env, &db).await?;
    Ok(rate)
}

/// The ceiling of the `mq` mode's row writes: the same scan, then one UPDATE
/// per batch fenced by the shard lease as the relay's mark is (a join on
/// `relay_shard_leases`, owner and epoch), no claim.
pub(crate) async fn raw_sql_single_mark(
    env: &BenchEnv,
    rows: usize,
    rooms: usize,
) -> anyhow::Result<f64> {
    let (pool, db) = fixtures::fresh_database(env).await?;
    fixtures::prefill(&pool, rooms, rows).await?;
    let leases = (0..outbox_schema::OUTBOX_SHARDS)
        .map(|shard| format!("({shard}, 'bench', 1, {})", i64::MAX))
        .collect::<Vec<_>>()
        .join(",");
    sqlx::query(&format!(
        "REPLACE INTO relay_shard_leases (shard, owner, epoch, lease_until_ms) VALUES {leases}"
    ))
    .execute(&pool)
    .await?;
    let started = Instant::now();
    loop {
        let ids: Vec<u64> = sqlx::query_scalar(
            "SELECT id FROM room_outbox FORCE INDEX (idx_claim) WHERE lane = 0 AND open_flag = 1 ORDER BY id LIMIT 2000",
        )
        .fetch_all(&pool)
        .await?;
        if ids.is_empty() {
            break;
        }
        let list = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        sqlx::query(&format!(
            "UPDATE room_outbox o JOIN relay_shard_leases l ON l.shard = o.shard \
             SET o.status = 'delivered' WHERE o.id IN ({list}) \
             AND o.status IN ('pending', 'delivering', 'retryable') AND l.owner = 'bench' AND l.epoch = 1"
        ))
        .execute(&pool)
        .await?;
    }
    let rate = rows as f64 / started.elapsed().as_secs_f64();
    pool.close().await;
    fixtures::drop_database(env, &db).await?;
    Ok(rate)
}
