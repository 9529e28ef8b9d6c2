//! The sections of the embedded relay and its sinks: `outbox_worker` (its
//! nudge), `rocketmq` (treasure wake-ups), `activity` (the direct entry) and
//! `tencent_im` (also CreateRoom's group creation); their checks name the
//! key.

use serde::{Deserialize, Serialize};
use service_kit::grpc_tls::ClientTls;

use super::Config;
use crate::Error;

/// `activity`: where the embedded relay's direct mode calls activity-service.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ActivityConfig {
    /// gRPC endpoint, e.g. `http://127.0.0.1:7301`; empty disables the activity sink.
    pub endpoint: String,
    /// TLS of an `https://` endpoint.
    pub tls: ClientTls,
    /// Bearer token sent with every call (the entry's `grpc_auth_token`).
    pub auth_token: service_kit::Secret,
}

impl Config {
    /// The embedded relay's nudge settings, the Tencent IM section when it is
    /// on, and whether treasure wake-ups can be published.
    pub(super) fn check_relay(&self) -> Result<(), Error> {
        if self.outbox_worker.enabled && self.outbox_worker.nudge_enabled {
            relay_engine::nudge::check(&self.outbox_worker).map_err(|error| match error {
                service_kit::Error::Config(message) => Error::Config(message),
                other => Error::Config(other.to_string()),
            })?;
        }
        Ok(())
    }

    /// The section's own check (the one the client is built with), so a
    /// template too long for Tencent's group ids fails here too.
    pub(super) fn check_tencent_im(&self) -> Result<(), Error> {
        if !self.tencent_im.enabled {
            return Ok(());
        }
        self.tencent_im.validate().map_err(|error| {
            Error::Config(match error {
                tencent_im::Error::Config(message) => message,
                other => other.to_string(),
            })
        })
    }

    /// Treasure wake-ups travel only through the broker
    /// (docs/design.md#treasure-wake-ups): an embedded relay without an MQ
    /// publisher would dead-letter every wake-up, so writing them needs an
    /// embedded relay in `mq` or `dual` mode (or none: a standalone relay then
    /// publishes them).
    pub(super) fn check_treasure_wakeups(&self) -> Result<(), Error> {
        if !self.rocketmq.treasure_open.enabled {
            return Ok(());
        }
        if self.outbox_worker.enabled {
            let relay =
                relay_engine::RelaySettings::from_config(&self.outbox_worker, &self.rocketmq)
                    .map_err(|error| Error::Config(error.to_string()))?;
            if !relay.uses_mq() {
                return Err(Error::Config(
                    "rocketmq.treasure_open.enabled needs outbox_worker.publish_mode mq or dual: the embedded relay publishes wake-ups to the broker, and in direct mode it would dead-letter them".into(),
                ));
            }
        }
        Ok(())
    }
}
