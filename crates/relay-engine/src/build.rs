//! Assembling a [`Relay`] from its config sections: settings validated
//! (naming the key), the direct sinks and the MQ producer created for the
//! configured publish mode. The standalone binary and room-service's
//! embedded relay both build through here.

use crate::{
    Error, Relay, RelaySettings,
    config::{DirectConfig, OutboxWorkerConfig},
    direct::DirectSinks,
    metrics::RelayMetrics,
    publish::{MqPublisher, Publishers},
};
use prometheus_client::registry::Registry;
use service_kit::db::statement::BoundedPool;
use service_kit::mq::MqConfig;

/// Builds a relay from its config sections; used by this binary and by
/// room-service's embedded relay. Fails on invalid settings (naming the key).
/// Its statements run within `pool`'s statement timeout (a bare pool gets
/// the default).
pub fn build_relay(
    pool: impl Into<BoundedPool>,
    worker: &OutboxWorkerConfig,
    mq: &MqConfig,
    direct: &DirectConfig,
    registry: &mut Registry,
) -> Result<Relay, Error> {
    let metrics = RelayMetrics::register(registry);
    build_relay_with(pool, worker, mq, direct, metrics, registry)
}

/// [`build_relay`] with metrics the caller registered (and keeps a handle
/// of: the console samples them).
pub fn build_relay_with(
    pool: impl Into<BoundedPool>,
    worker: &OutboxWorkerConfig,
    mq: &MqConfig,
    direct: &DirectConfig,
    metrics: RelayMetrics,
    registry: &mut Registry,
) -> Result<Relay, Error> {
    let pool = pool.into();
    let settings = RelaySettings::from_config(worker, mq)?;
    service_kit::adjusted::warn_each("outbox_worker", &settings.adjusted);
    let direct = if settings.uses_direct() {
        let sinks = DirectSinks::new(direct, &pool)?;
        if let Some(im) = &sinks.im {
            // The direct IM sink's sends, paced and counted like im-bridge's.
            im.register_metrics(registry);
        }
        Some(sinks)
    } else {
        None
    };
    let publishers = Publishers {
        mq: if settings.uses_mq() {
            Some(MqPublisher::new(mq, settings.publish_timeout)?)
        } else {
            None
        },
        direct,
    };
    Ok(Relay::new(pool, settings, publishers, metrics))
}
