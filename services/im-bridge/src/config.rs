//! im-bridge configuration: defaults → `configs/im-bridge.yaml` (or
//! `--config`) → `IM_BRIDGE__…` environment → validation. The consumer group,
//! topic and retry budget come from the original `rocketmq.room_outbox` keys
//! (`tencent_im_consumer_group`, `topic`, `consumer_max_reconsume_times`),
//! the same keys room-service reads when it hosts the bridge in-process.

use consumer_runtime::{
    ConsumerConfig,
    host::{ServiceConfig, SharedSections},
};
use serde::{Deserialize, Serialize};
use service_kit::{db::MysqlConfig, mq::MqConfig, telemetry::LogConfig};
use std::fmt::Display;
use tencent_im::ImSection as TencentImSection;

/// The `im_bridge` section (defined once in room-im: the relay's direct mode reads it too).
pub use im_bridge_engine::BridgeConfig;

/// The standalone im-bridge's whole configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Logging.
    pub log: LogConfig,
    /// MySQL holding `consumer_dedup`.
    pub mysql: MysqlConfig,
    /// Broker (`rocketmq` section, docs/design.md#configuration-names).
    pub rocketmq: MqConfig,
    /// Consumer runtime tunables.
    pub consumer: ConsumerConfig,
    /// Tencent IM REST.
    pub tencent_im: TencentImSection,
    /// Bridge behaviour.
    pub im_bridge: BridgeConfig,
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
            im_bridge: BridgeConfig::default(),
            http_listen: "127.0.0.1:7401".into(),
        }
    }
}

impl ServiceConfig for Config {
    const SERVICE: &str = "im-bridge";
    const ENV_PREFIX: &str = "IM_BRIDGE";
    const LIST_KEYS: &[&str] = &["rocketmq.name_servers", "im_bridge.silent_event_types"];

    fn shared(&self) -> SharedSections<'_> {
        SharedSections {
            log: &self.log,
            mysql: &self.mysql,
            rocketmq: &self.rocketmq,
            consumer: &self.consumer,
            default_group: &self.rocketmq.room_outbox.tencent_im_consumer_group,
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
    fn shipped_config_files_load_and_env_overrides() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/configs");
        for file in ["im-bridge.yaml", "im-bridge.docker.yaml"] {
            let config = Config::load_with_env(
                Some(PathBuf::from(format!("{root}/{file}"))),
                Some(
                    [(
                        "IM_BRIDGE__IM_BRIDGE__SILENT_EVENT_TYPES".to_string(),
                        "RoomHeatChanged,RoomRankChanged".to_string(),
                    )]
                    .into(),
                ),
            )
            .unwrap();
            config.validate().unwrap();
            let settings = config.consumer_settings().unwrap();
            assert_eq!(settings.consumer_group, "hyapp-room-im-bridge");
            assert_eq!(settings.retry.max_reconsume_times, 16);
            assert_eq!(config.im_bridge.silent_event_types.len(), 2, "{file}");
            let dump = service_kit::config::dump(&config);
            assert!(!dump.contains("local-dev-im-key"), "secrets are redacted");
        }
    }
}
