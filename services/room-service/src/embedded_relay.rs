//! The embedded outbox relay (`outbox_worker.enabled`): room-service runs the
//! relay library in-process, inside the worker slot, so shutdown cancels and
//! awaits it (draining → cancel workers → wait → gRPC stop → close wallet,
//! MySQL, Redis; docs/design.md#lifecycle-start-up-and-drain-order) before
//! the MySQL pool closes. It shares room-service's
//! MySQL pool and metrics registry; the commit nudge reaches it through Redis
//! like it reaches a standalone relay.

use crate::Error;
use crate::config::Config;
use crate::workers::Workers;
use prometheus_client::registry::Registry;
use relay_engine::{Relay, config::DirectConfig};
use sqlx::MySqlPool;

/// Builds the relay when `outbox_worker.enabled`; invalid relay settings
/// (e.g. `mq` without the MQ publisher) fail start-up with the key named.
pub fn build(
    config: &Config,
    pool: &MySqlPool,
    registry: &mut Registry,
) -> Result<Option<Relay>, Error> {
    if !config.outbox_worker.enabled {
        return Ok(None);
    }
    let direct = DirectConfig {
        tencent_im: config.tencent_im.clone(),
        activity_endpoint: config.activity.endpoint.clone(),
        activity_tls: config.activity.tls.clone(),
        activity_auth_token: config.activity.auth_token.clone(),
        im_bridge: config.im_bridge.clone(),
    };
    let limit = config
        .mysql
        .statement_timeout()
        .map_err(|error| Error::Config(error.to_string()))?;
    let relay = relay_engine::build_relay(
        service_kit::db::statement::BoundedPool::new(pool.clone(), limit),
        &config.outbox_worker,
        &config.rocketmq,
        &direct,
        registry,
    )
    .map_err(|error| Error::Config(error.to_string()))?;
    Ok(Some(relay))
}

/// Spawns the relay in the worker slot; it stops claiming when the slot's token is cancelled.
pub fn start(relay: Option<Relay>, workers: &Workers) {
    let Some(relay) = relay else {
        return;
    };
    workers.spawn("outbox_relay", move |token| async move {
        if let Err(error) = relay.run(token).await {
            tracing::error!(%error, "embedded outbox relay stopped with an error");
        }
    });
}
