//! Loading and checking a consumer service's configuration, for the sections
//! every consumer config carries (`log`, `mysql`, `rocketmq`, `consumer`,
//! `tencent_im`, `http_listen`). The service keeps its own config struct —
//! the file format, defaults and env prefix are its public contract, checked
//! by deploy/check against docs/configuration.md, compose and Kubernetes — and implements
//! [`ServiceConfig`] to point at those sections; load, validate and the
//! consumer settings are then written here once.

use super::Error;
use crate::{ConsumerConfig, ConsumerSettings};
use serde::{Serialize, de::DeserializeOwned};
use service_kit::{config::ConfigSources, db::MysqlConfig, mq::MqConfig, telemetry::LogConfig};
use std::{collections::HashMap, fmt::Display, path::PathBuf};

/// The sections every consumer service's config has.
#[derive(Debug, Clone, Copy)]
pub struct SharedSections<'a> {
    /// Logging.
    pub log: &'a LogConfig,
    /// MySQL holding `consumer_dedup` and the service's tables.
    pub mysql: &'a MysqlConfig,
    /// Broker (`rocketmq` section, docs/design.md#configuration-names).
    pub rocketmq: &'a MqConfig,
    /// Consumer runtime tunables.
    pub consumer: &'a ConsumerConfig,
    /// The group joined when `consumer.group` is empty.
    pub default_group: &'a str,
    /// Admin HTTP (`/healthz`, `/readyz`, `/metrics`).
    pub http_listen: &'a str,
}

/// Secret-bearing keys of the sections every consumer service has.
pub const SHARED_SECRET_KEYS: &[&str] = &[
    "mysql.url",
    "mysql.password",
    "rocketmq.access_key",
    "rocketmq.secret_key",
    "rocketmq.tls.key_password",
    "tencent_im.secret_key",
];

/// A consumer service's whole configuration: defaults → `configs/<SERVICE>.yaml`
/// (or `--config`) → `<ENV_PREFIX>__…` environment → [`ServiceConfig::validate`].
pub trait ServiceConfig: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The service's name: its binary, `configs/<SERVICE>.yaml`, telemetry.
    const SERVICE: &'static str;
    /// Environment prefix (`NOTICE` for `NOTICE__HTTP_LISTEN`).
    const ENV_PREFIX: &'static str;
    /// Keys whose environment value is a comma-separated list.
    const LIST_KEYS: &'static [&'static str] = &["rocketmq.name_servers"];
    /// The service's own keys holding a secret, beside the shared sections'
    /// ones ([`SHARED_SECRET_KEYS`]); see [`ServiceConfig::secret_keys`].
    const OWN_SECRET_KEYS: &'static [&'static str] = &[];

    /// Keys holding a secret or a URL that may carry one, shared and own;
    /// each may also be given as `<ENV_PREFIX>__<KEY>_FILE` (a Kubernetes
    /// secret file).
    fn secret_keys() -> Vec<&'static str> {
        SHARED_SECRET_KEYS
            .iter()
            .chain(Self::OWN_SECRET_KEYS)
            .copied()
            .collect()
    }

    /// The shared sections.
    fn shared(&self) -> SharedSections<'_>;

    /// The `tencent_im` section's own check (`ImSection::validate`): the
    /// runtime knows no IM vendor, so the service hands in the result.
    fn check_tencent_im(&self) -> Result<(), impl Display>;

    /// Checks of the service's own keys, after the shared ones.
    fn validate_own(&self) -> Result<(), Error> {
        Ok(())
    }

    /// Loads the layered configuration and validates it.
    fn load(file: Option<PathBuf>) -> Result<Self, Error> {
        Self::load_with_env(file, None)
    }

    /// Like [`ServiceConfig::load`] with an explicit environment (tests).
    fn load_with_env(
        file: Option<PathBuf>,
        env: Option<HashMap<String, String>>,
    ) -> Result<Self, Error> {
        let secret_keys = Self::secret_keys();
        let config: Self = ConfigSources {
            service: Self::SERVICE,
            env_prefix: Self::ENV_PREFIX,
            file,
            list_keys: Self::LIST_KEYS,
            secret_keys: &secret_keys,
        }
        .load_with_env(env)?;
        config.validate()?;
        Ok(config)
    }

    /// Refuses configurations that cannot work, naming the key, before
    /// anything is connected.
    fn validate(&self) -> Result<(), Error> {
        self.consumer_settings()?;
        self.check_tencent_im().map_err(Error::config)?;
        service_kit::config::check_listen("http_listen", self.shared().http_listen)?;
        self.validate_own()
    }

    /// The consumer of `rocketmq.room_outbox.topic` in the service's group.
    fn consumer_settings(&self) -> Result<ConsumerSettings, Error> {
        let shared = self.shared();
        Ok(ConsumerSettings::room_outbox(
            shared.rocketmq,
            shared.consumer,
            shared.default_group,
        )?)
    }
}
