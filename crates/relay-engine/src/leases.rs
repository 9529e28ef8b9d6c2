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
//!
//! In `mq` mode the lease itself is the claim (docs/design.md#ordering-and-fencing):
//! every refresh records the epoch of each shard held and, on this process's
//! monotonic clock, until when the lease may still be relied on
//! ([`HeldLeases`]), so a relay resumed after a pause publishes nothing on a
//! lease that may have moved, and its marks carry the epoch in SQL.
//!
//! Every lease statement runs within `mysql.statement_timeout`: a refresh
//! against a stalled database fails, the shards it held stay recorded with
//! their old validity, which runs out, and the relay stops publishing on them.

use crate::Error;
use outbox_schema::OUTBOX_SHARDS;
use service_kit::db::IdText;
use service_kit::db::statement::BoundedPool;
use sqlx::{MySql, QueryBuilder, Row};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// Part of a lease a relay does not rely on: lease expiry is compared with
/// other relays' wall clocks, and a batch started just before the end still
/// enqueues for a few milliseconds. A quarter keeps a late renewal (they run
/// every third of the lease) from stopping publishes.
const LEASE_MARGIN_DIVISOR: u32 = 4;

/// The shards a relay held at its last successful refresh.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldLeases {
    /// Epoch of each shard held: marks are fenced by it.
    pub epochs: HashMap<u16, u64>,
    /// Until when the leases may be relied on, measured from when the renewal
    /// was sent (its statements ran later, so the real expiry is later still),
    /// less the margin. `None` before the first refresh.
    pub valid_until: Option<Instant>,
}

impl HeldLeases {
    /// May this relay still publish on these leases at `now`?
    pub fn valid_at(&self, now: Instant) -> bool {
        self.valid_until.is_some_and(|until| now < until)
    }

    /// The held shards among `shards`, with their epochs.
    pub fn epochs_of(&self, shards: &[u16]) -> HashMap<u16, u64> {
        shards
            .iter()
            .filter_map(|shard| self.epochs.get(shard).map(|epoch| (*shard, *epoch)))
            .collect()
    }
}

/// The lease view of one relay instance.
#[derive(Debug, Clone)]
pub struct ShardLeases {
    db: BoundedPool,
    node_id: String,
    lease_ms: i64,
    handover_ms: i64,
    held: Arc<RwLock<HeldLeases>>,
}

impl ShardLeases {
    /// Leases for `node_id`, each lasting `lease_ms` without renewal (a
    /// bare pool gets the default statement timeout).
    pub fn new(db: impl Into<BoundedPool>, node_id: String, lease_ms: i64) -> Self {
        Self {
            db: db.into(),
            node_id,
            lease_ms,
            handover_ms: 0,
            held: Arc::default(),
        }
    }

    /// Leases let go of while running (a rebalance, not a shutdown) stay
    /// this relay's for `handover_ms` more, published on by nothing: in `mq`
    /// mode the batches already under way on them finish and are marked
    /// under the old epoch, instead of being published again by the next
    /// owner behind later rows.
    pub fn with_handover_ms(mut self, handover_ms: i64) -> Self {
        self.handover_ms = handover_ms;
        self
    }

    /// What the last successful refresh found held.
    pub fn held(&self) -> HeldLeases {
        self.held
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set_held(&self, held: HeldLeases) {
        *self
            .held
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = held;
    }

    /// Creates the shard rows if missing (idempotent).
    pub async fn ensure_shards(&self) -> Result<(), Error> {
        let shards: Vec<u16> = (0..OUTBOX_SHARDS).collect();
        let mut builder =
            QueryBuilder::<MySql>::new("INSERT IGNORE INTO relay_shard_leases (shard) ");
        builder.push_values(&shards, |mut row, shard| {
            row.push_bind(*shard);
        });
        crate::db::execute(&self.db, builder).await?;
        Ok(())
    }

    /// One heartbeat + rebalance round. Returns the shards this instance holds
    /// a live lease on afterwards, sorted.
    pub async fn refresh(&self, now_ms: i64) -> Result<Vec<u16>, Error> {
        // Taken before anything is sent: however long the statements take (or
        // however long this process is paused), the lease cannot have been
        // renewed for longer than `lease_ms` from here.
        let sent = Instant::now();
        let heartbeat = sqlx::query(
            "INSERT INTO relay_instances (instance_id, heartbeat_at_ms, started_at_ms) VALUES (?, ?, ?) \
             ON DUPLICATE KEY UPDATE heartbeat_at_ms = VALUES(heartbeat_at_ms)",
        )
        .bind(&self.node_id)
        .bind(now_ms)
        .bind(now_ms);
        crate::db::execute_query(&self.db, heartbeat).await?;
        let live = sqlx::query(
            "SELECT instance_id FROM relay_instances WHERE heartbeat_at_ms > ? ORDER BY instance_id",
        )
        .bind(now_ms - self.lease_ms);
        let live: Vec<String> = crate::db::fetch_all_query(&self.db, live)
            .await?
            .iter()
            .map(|row| row.try_get::<IdText, _>("instance_id").map(String::from))
            .collect::<Result<_, _>>()?;
        let wanted = wanted_shards(&live, &self.node_id);
        let until = now_ms + self.lease_ms;

        // Let go of shards we should no longer hold (expire them after the
        // handover, keep the owner for the record).
        let mut release = QueryBuilder::<MySql>::new(
            "UPDATE relay_shard_leases SET lease_until_ms = LEAST(lease_until_ms, ",
        );
        release
            .push_bind(now_ms.saturating_add(self.handover_ms))
            .push(") WHERE owner = ")
            .push_bind(&self.node_id);
        if !wanted.is_empty() {
            release.push(" AND shard NOT IN ");
            push_shards(&mut release, &wanted);
        }
        crate::db::execute(&self.db, release).await?;

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
            crate::db::execute(&self.db, renew).await?;

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
            crate::db::execute(&self.db, acquire).await?;
        }
        // Shards in handover are still ours in the table, but not to publish on.
        let held: HashMap<u16, u64> = self
            .owned_epochs(now_ms)
            .await?
            .into_iter()
            .filter(|(shard, _)| wanted.contains(shard))
            .collect();
        let lease = Duration::from_millis(u64::try_from(self.lease_ms).unwrap_or(0));
        let mut shards: Vec<u16> = held.keys().copied().collect();
        shards.sort_unstable();
        self.set_held(HeldLeases {
            epochs: held,
            valid_until: Some(sent + lease - lease / LEASE_MARGIN_DIVISOR),
        });
        Ok(shards)
    }

    /// Shards this instance holds a live lease on.
    pub async fn owned(&self, now_ms: i64) -> Result<Vec<u16>, Error> {
        let mut shards: Vec<u16> = self.owned_epochs(now_ms).await?.into_keys().collect();
        shards.sort_unstable();
        Ok(shards)
    }

    async fn owned_epochs(&self, now_ms: i64) -> Result<HashMap<u16, u64>, Error> {
        let query = sqlx::query(
            "SELECT shard, epoch FROM relay_shard_leases WHERE owner = ? AND lease_until_ms > ?",
        )
        .bind(&self.node_id)
        .bind(now_ms);
        let rows = crate::db::fetch_all_query(&self.db, query).await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get::<u16, _>("shard")?,
                    row.try_get::<u64, _>("epoch")?,
                ))
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Error::from)
    }

    /// Leaves the group on shutdown: expire our leases and heartbeat so peers
    /// take the shards at once instead of after the lease timeout.
    pub async fn leave(&self) -> Result<(), Error> {
        self.set_held(HeldLeases::default());
        let expire =
            sqlx::query("UPDATE relay_shard_leases SET lease_until_ms = 0 WHERE owner = ?")
                .bind(&self.node_id);
        crate::db::execute_query(&self.db, expire).await?;
        let gone =
            sqlx::query("DELETE FROM relay_instances WHERE instance_id = ?").bind(&self.node_id);
        crate::db::execute_query(&self.db, gone).await?;
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
