//! Shard leases: how several relay instances split the 64 outbox shards
//! without publishing the same row twice in normal operation.
//!
//! Each instance heartbeats into `relay_instances`; the live instances, sorted
//! by id, deal the shards round-robin (shard `s` belongs to instance
//! `s mod n`). An instance renews the shards it holds, takes over wanted
//! shards whose lease expired (bumping the shard's `epoch`), and lets go of
//! shards it no longer wants so their new owner can take them. Claims check
//! the lease in the same statement (see `store::claim`), so a relay whose
//! lease lapsed cannot claim; marks are fenced by the claim token.

use crate::Error;
use outbox_schema::OUTBOX_SHARDS;
use service_kit::db::IdText;
use sqlx::{MySql, MySqlPool, QueryBuilder, Row};

/// The lease view of one relay instance.
#[derive(Debug, Clone)]
pub struct ShardLeases {
    pool: MySqlPool,
    node_id: String,
    lease_ms: i64,
}

impl ShardLeases {
    /// Leases for `node_id`, each lasting `lease_ms` without renewal.
    pub fn new(pool: MySqlPool, node_id: String, lease_ms: i64) -> Self {
        Self {
            pool,
            node_id,
            lease_ms,
        }
    }

    /// Creates the shard rows if missing (idempotent).
    pub async fn ensure_shards(&self) -> Result<(), Error> {
        let shards: Vec<u16> = (0..OUTBOX_SHARDS).collect();
        let mut builder =
            QueryBuilder::<MySql>::new("INSERT IGNORE INTO relay_shard_leases (shard) ");
        builder.push_values(&shards, |mut row, shard| {
            row.push_bind(*shard);
        });
        builder.build().execute(&self.pool).await?;
        Ok(())
    }

    /// One heartbeat + rebalance round. Returns the shards this instance holds
    /// a live lease on afterwards, sorted.
    pub async fn refresh(&self, now_ms: i64) -> Result<Vec<u16>, Error> {
        sqlx::query(
            "INSERT INTO relay_instances (instance_id, heartbeat_at_ms, started_at_ms) VALUES (?, ?, ?) \
             ON DUPLICATE KEY UPDATE heartbeat_at_ms = VALUES(heartbeat_at_ms)",
        )
        .bind(&self.node_id)
        .bind(now_ms)
        .bind(now_ms)
        .execute(&self.pool)
        .await?;
        let live: Vec<String> = sqlx::query(
            "SELECT instance_id FROM relay_instances WHERE heartbeat_at_ms > ? ORDER BY instance_id",
        )
        .bind(now_ms - self.lease_ms)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| row.try_get::<IdText, _>("instance_id").map(String::from))
        .collect::<Result<_, _>>()?;
        let wanted = wanted_shards(&live, &self.node_id);
        let until = now_ms + self.lease_ms;

        // Let go of shards we should no longer hold (expire them now, keep the owner for the record).
        let mut release = QueryBuilder::<MySql>::new(
            "UPDATE relay_shard_leases SET lease_until_ms = 0 WHERE owner = ",
        );
        release.push_bind(&self.node_id);
        if !wanted.is_empty() {
            release.push(" AND shard NOT IN ");
            push_shards(&mut release, &wanted);
        }
        release.build().execute(&self.pool).await?;

        if !wanted.is_empty() {
            // Renew what we hold.
            let mut renew =
                QueryBuilder::<MySql>::new("UPDATE relay_shard_leases SET lease_until_ms = ");
            renew
                .push_bind(until)
                .push(" WHERE owner = ")
                .push_bind(&self.node_id);
            renew
                .push(" AND lease_until_ms > ")
                .push_bind(now_ms)
                .push(" AND shard IN ");
            push_shards(&mut renew, &wanted);
            renew.build().execute(&self.pool).await?;

            // Take over wanted shards whose lease expired; a new owner term bumps the epoch.
            let mut acquire = QueryBuilder::<MySql>::new(
                "UPDATE relay_shard_leases SET epoch = epoch + 1, owner = ",
            );
            acquire
                .push_bind(&self.node_id)
                .push(", lease_until_ms = ")
                .push_bind(until);
            acquire
                .push(" WHERE lease_until_ms <= ")
                .push_bind(now_ms)
                .push(" AND shard IN ");
            push_shards(&mut acquire, &wanted);
            acquire.build().execute(&self.pool).await?;
        }
        self.owned(now_ms).await
    }

    /// Shards this instance holds a live lease on.
    pub async fn owned(&self, now_ms: i64) -> Result<Vec<u16>, Error> {
        let rows = sqlx::query(
            "SELECT shard FROM relay_shard_leases WHERE owner = ? AND lease_until_ms > ? ORDER BY shard",
        )
        .bind(&self.node_id)
        .bind(now_ms)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| row.try_get::<u16, _>("shard"))
            .collect::<Result<_, _>>()
            .map_err(Error::from)
    }

    /// Leaves the group on shutdown: expire our leases and heartbeat so peers
    /// take the shards at once instead of after the lease timeout.
    pub async fn leave(&self) -> Result<(), Error> {
        sqlx::query("UPDATE relay_shard_leases SET lease_until_ms = 0 WHERE owner = ?")
            .bind(&self.node_id)
            .execute(&self.pool)
            .await?;
        sqlx::query("DELETE FROM relay_instances WHERE instance_id = ?")
            .bind(&self.node_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

fn push_shards(builder: &mut QueryBuilder<'_, MySql>, shards: &[u16]) {
    builder.push("(");
    let mut separated = builder.separated(", ");
    for shard in shards {
        separated.push_bind(*shard);
    }
    separated.push_unseparated(")");
}

/// The shards `me` should hold given the sorted live instances: round-robin by
/// position. An instance not (yet) in the list wants nothing.
pub fn wanted_shards(live_sorted: &[String], me: &str) -> Vec<u16> {
    let Some(position) = live_sorted.iter().position(|id| id == me) else {
        return Vec::new();
    };
    let count = live_sorted.len();
    (0..OUTBOX_SHARDS)
        .filter(|shard| usize::from(*shard) % count == position)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_dealt_without_overlap_or_gap() {
        let live: Vec<String> = ["a", "b", "c"].iter().map(|id| id.to_string()).collect();
        let mut all: Vec<u16> = live
            .iter()
            .flat_map(|id| wanted_shards(&live, id))
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..OUTBOX_SHARDS).collect::<Vec<_>>());
        assert!(wanted_shards(&live, "z").is_empty());
        assert_eq!(
            wanted_shards(&live[..1], "a").len(),
            usize::from(OUTBOX_SHARDS)
        );
    }
}
