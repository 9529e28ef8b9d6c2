//! `leases`: which relay instance publishes which shards — every shard's
//! lease (owner, epoch, expiry) and every instance's heartbeat — read from
//! the tables `relay_engine::leases` maintains. Both tables are small by
//! construction (64 shards, one row per relay instance).

use super::queries::{INSTANCES_SQL, LEASES_SQL};
use crate::Error;
use serde::Serialize;
use service_kit::db::IdText;
use service_kit::time::now_ms;
use sqlx::{MySqlPool, Row};

/// One shard's lease.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ShardLease {
    /// Shard number.
    pub shard: u16,
    /// Instance holding (or last holding) it; "" when never taken.
    pub owner: String,
    /// Owner terms so far (bumped on every takeover).
    pub epoch: u64,
    /// Lease expiry.
    pub lease_until_ms: i64,
    /// True while the lease is live: only then may the owner claim rows.
    pub live: bool,
}

/// One relay instance.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Instance {
    /// Its `node_id`.
    pub instance_id: String,
    /// Last heartbeat.
    pub heartbeat_at_ms: i64,
    /// Time since it, ms.
    pub heartbeat_age_ms: i64,
    /// First heartbeat.
    pub started_at_ms: i64,
    /// Shards it holds a live lease on.
    pub live_shards: usize,
}

/// Shard leases and relay instances.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LeaseReport {
    /// Every shard, by number.
    pub shards: Vec<ShardLease>,
    /// Every instance with a heartbeat row, by id.
    pub instances: Vec<Instance>,
    /// Shards no live lease covers: their rows wait for a relay.
    pub uncovered_shards: Vec<u16>,
}

/// The lease report.
pub async fn leases(pool: &MySqlPool) -> Result<LeaseReport, Error> {
    let now = now_ms();
    let shards: Vec<ShardLease> = sqlx::query(LEASES_SQL)
        .fetch_all(pool)
        .await?
        .iter()
        .map(|row| {
            let lease_until_ms: i64 = row.try_get("lease_until_ms")?;
            Ok(ShardLease {
                shard: row.try_get("shard")?,
                owner: row.try_get::<IdText, _>("owner")?.into(),
                epoch: row.try_get("epoch")?,
                lease_until_ms,
                live: lease_until_ms > now,
            })
        })
        .collect::<Result<_, sqlx::Error>>()?;
    let instances = sqlx::query(INSTANCES_SQL)
        .fetch_all(pool)
        .await?
        .iter()
        .map(|row| {
            let instance_id: String = row.try_get::<IdText, _>("instance_id")?.into();
            let heartbeat_at_ms: i64 = row.try_get("heartbeat_at_ms")?;
            Ok(Instance {
                live_shards: shards
                    .iter()
                    .filter(|lease| lease.live && lease.owner == instance_id)
                    .count(),
                instance_id,
                heartbeat_at_ms,
                heartbeat_age_ms: (now - heartbeat_at_ms).max(0),
                started_at_ms: row.try_get("started_at_ms")?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()?;
    let covered: Vec<u16> = shards
        .iter()
        .filter(|lease| lease.live)
        .map(|lease| lease.shard)
        .collect();
    Ok(LeaseReport {
        uncovered_shards: (0..outbox_schema::OUTBOX_SHARDS)
            .filter(|shard| !covered.contains(shard))
            .collect(),
        shards,
        instances,
    })
}
