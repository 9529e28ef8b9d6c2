//! The embedded outbox relay (`outbox_worker.enabled`): room-service runs the
//! relay library in-process, inside the worker slot, so shutdown cancels and
//! awaits it (seed 000: draining → cancel workers → wait → gRPC stop → close
//! wallet, MySQL, Redis) before the MySQL pool closes.
//!
//! INTEGRATION POINT FOR THE LEAD: construct `outbox_relay::Relay` from the
//! config sections below and spawn it with `workers.spawn("outbox_relay", |token| ...)`,
//! awaiting `token.cancelled()` to stop claiming new batches. Nothing else in
//! room-service needs to change: the lifecycle, the shared pool and the nudge
//! (Redis PUBLISH on `NUDGE_CHANNEL` after every commit with outbox rows) are in place.

use sqlx::MySqlPool;

use crate::Error;
use crate::config::Config;
use crate::workers::Workers;

/// Starts the embedded relay when enabled.
pub fn start(config: &Config, pool: &MySqlPool, workers: &Workers) -> Result<(), Error> {
    if !config.outbox_worker.enabled {
        return Ok(());
    }
    // The relay will use: config.outbox_worker, config.rocketmq, config.tencent_im, pool.
    let _ = (pool, workers);
    tracing::warn!(
        publish_mode = %config.outbox_worker.publish_mode,
        "outbox_worker.enabled but the embedded relay is not wired yet; run outbox-relay separately"
    );
    Ok(())
}
