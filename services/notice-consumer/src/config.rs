//! notice-consumer configuration: defaults → `configs/notice-consumer.yaml`
//! (or `--config`) → `NOTICE__…` environment → validation.

use consumer_runtime::{
    ConsumerConfig,
    delivery::DeliveryRetryConfig,
    host::{ServiceConfig, SharedSections},
};
use outbox_schema::names::GROUP_NOTICE;
use serde::{Deserialize, Serialize};
use service_kit::{db::MysqlConfig, mq::MqConfig, telemetry::LogConfig};
use std::fmt::Display;
use tencent_im::ImSection as TencentImSection;

/// The `notice` section.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NoticeConfig {
    /// Retries of C2C deliveries from `notice_delivery_events`.
    pub delivery: DeliveryRetryConfig,
}

/// The whole configuration of notice-consumer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Logging.
    pub log: LogConfig,
    /// MySQL holding `notice_delivery_events` and `consumer_dedup`.
    pub mysql: MysqlConfig,
    /// Broker (`rocketmq` section, docs/design.md#configuration-names).
    pub rocketmq: MqConfig,
    /// Consumer runtime tunables (`group` defaults to `hyapp-notice-room-outbox`).
    pub consumer: ConsumerConfig,
    /// Tencent IM REST (C2C messages).
    pub tencent_im: TencentImSection,
    /// Notice delivery.
    pub notice: NoticeConfig,
    /// Admin HTTP (`/healthz`, `/readyz`, `/metrics`).
    pub http_listen: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            log: LogConfig::default(),
            mysql: MysqlConfig::default(),
            rocketmq: MqConfig::default(),
            consumer: ConsumerConfig::default(),
            tencent_im: TencentImSection::default(),
            notice: NoticeConfig::default(),
            http_listen: "127.0.0.1:7502".into(),
        }
    }
}

impl ServiceConfig for Config {
    const SERVICE: &str = "notice-consumer";
    const ENV_PREFIX: &str = "NOTICE";

    fn shared(&self) -> SharedSections<'_> {
        SharedSections {
            log: &self.log,
            mysql: &self.mysql,
            rocketmq: &self.rocketmq,
            consumer: &self.consumer,
            default_group: GROUP_NOTICE,
            http_listen: &self.http_listen,
        }
    }

    fn check_tencent_im(&self) -> Result<(), impl Display> {
        self.tencent_im.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn shipped_config_files_load_with_env_overrides_and_redaction() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/configs");
        for file in ["notice-consumer.yaml", "notice-consumer.docker.yaml"] {
            let env = [(
                "NOTICE__NOTICE__DELIVERY__MAX_ATTEMPTS".to_string(),
                "5".to_string(),
            )]
            .into();
            let config =
                Config::load_with_env(Some(PathBuf::from(format!("{root}/{file}"))), Some(env))
                    .unwrap();
            assert_eq!(config.notice.delivery.max_attempts, 5, "{file}");
            assert_eq!(
                config.consumer_settings().unwrap().consumer_group,
                GROUP_NOTICE
            );
            assert!(!service_kit::config::dump(&config).contains("local-dev-im-key"));
        }
    }
}
