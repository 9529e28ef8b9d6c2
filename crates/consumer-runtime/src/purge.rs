//! The scheduled purge of a group's old `consumer_dedup` rows, and of gift
//! batches left pending as long (`im_pending_batches`): the SQL is
//! outbox-store's; when and how much is the consumer's [`DedupPurge`]. Each
//! batch runs under `mysql.statement_timeout` (the pool's [`BoundedPool`]).

use crate::config::DedupPurge;
use outbox_store::{dedup::purge_older_than, im_batches};
use service_kit::db::statement::BoundedPool;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Purges `group`'s old dedup rows per `purge` until `shutdown`.
pub async fn run_purger(
    db: BoundedPool,
    group: String,
    purge: DedupPurge,
    shutdown: CancellationToken,
) {
    let DedupPurge {
        retention,
        interval,
        batch,
    } = purge;
    let mut ticker = tokio::time::interval(interval.max(Duration::from_secs(1)));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        match purge_older_than(&db, &group, retention, batch).await {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(consumer_group = %group, deleted, "dedup rows purged"),
            Err(error) => {
                tracing::warn!(consumer_group = %group, %error, "dedup purge failed");
            }
        }
        match im_batches::purge_older_than(&db, &group, retention).await {
            Ok(0) => {}
            Ok(deleted) => {
                tracing::info!(consumer_group = %group, deleted, "pending gift batches purged")
            }
            Err(error) => {
                tracing::warn!(consumer_group = %group, %error, "pending gift batch purge failed");
            }
        }
    }
}
