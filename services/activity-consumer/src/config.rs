//! activity-consumer configuration: defaults → `configs/activity-consumer.yaml`
//! (or `--config`) → `ACTIVITY__…` environment → validation.

use crate::Error;
use consumer_runtime::{
    ConsumerConfig,
    delivery::DeliveryRetryConfig,
    host::{ServiceConfig, SharedSections},
};
use outbox_schema::names::GROUP_ACTIVITY;
use serde::{Deserialize, Serialize};
use service_kit::{
    Secret, db::MysqlConfig, grpc_tls::ServerTls, mq::MqConfig, telemetry::LogConfig,
};
use std::fmt::Display;
use tencent_im::ImSection as TencentImSection;

/// Whose score a gift raises on a leaderboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RankBy {
    /// The sender (a "wealth" board).
    Sender,
    /// The receiver (a "charm" board).
    Receiver,
}

/// One activity with a daily (UTC) gift leaderboard.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivityRule {
    /// Activity id, the leaderboard's key.
    pub id: String,
    /// Gifts that count; empty = every gift.
    #[serde(default)]
    pub gift_ids: Vec<String>,
    /// Whose score rises.
    #[serde(default = "default_rank_by")]
    pub rank_by: RankBy,
    /// First counted commit time, Unix ms (0 = since ever).
    #[serde(default)]
    pub starts_at_ms: i64,
    /// End of the activity, Unix ms, exclusive (0 = never).
    #[serde(default)]
    pub ends_at_ms: i64,
}

fn default_rank_by() -> RankBy {
    RankBy::Sender
}

impl ActivityRule {
    /// Whether a gift committed at `occurred_at_ms` counts for this activity.
    pub fn counts(&self, gift_id: &str, occurred_at_ms: i64) -> bool {
        (self.gift_ids.is_empty() || self.gift_ids.iter().any(|id| id == gift_id))
            && occurred_at_ms >= self.starts_at_ms
            && (self.ends_at_ms == 0 || occurred_at_ms < self.ends_at_ms)
    }
}

/// The `activity` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ActivityConfig {
    /// Activities with leaderboards.
    pub activities: Vec<ActivityRule>,
    /// A gift whose `total_value` reaches this is broadcast (0 disables).
    pub big_gift_threshold: u64,
    /// The global IM group big gifts are announced in.
    pub broadcast_group_id: String,
    /// Retries of broadcast deliveries.
    pub broadcast: DeliveryRetryConfig,
}

impl Default for ActivityConfig {
    fn default() -> Self {
        Self {
            activities: vec![ActivityRule {
                id: "daily_gift_rank".into(),
                gift_ids: Vec::new(),
                rank_by: RankBy::Sender,
                starts_at_ms: 0,
                ends_at_ms: 0,
            }],
            big_gift_threshold: 10_000,
            broadcast_group_id: "hyapp_global_broadcast".into(),
            broadcast: DeliveryRetryConfig::default(),
        }
    }
}

/// The whole configuration of activity-consumer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Logging.
    pub log: LogConfig,
    /// MySQL holding the activity tables and `consumer_dedup`.
    pub mysql: MysqlConfig,
    /// Broker (`rocketmq` section, docs/design.md#configuration-names).
    pub rocketmq: MqConfig,
    /// Consumer runtime tunables (`group` defaults to `hyapp-activity-room-outbox`).
    pub consumer: ConsumerConfig,
    /// Tencent IM REST (broadcasts).
    pub tencent_im: TencentImSection,
    /// Activity rules.
    pub activity: ActivityConfig,
    /// gRPC listen address of the `activity.v1` direct entry.
    pub grpc_listen: String,
    /// TLS of the direct entry; with `client_ca_file`, callers must present a
    /// certificate (mutual TLS), which authenticates them.
    pub grpc_tls: ServerTls,
    /// Bearer token every direct-entry call must carry (`authorization:
    /// Bearer …`); empty = none asked. Off loopback, the entry needs this or
    /// mutual TLS: anyone reaching it could otherwise write activity state.
    pub grpc_auth_token: Secret,
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
            activity: ActivityConfig::default(),
            grpc_listen: "127.0.0.1:7301".into(),
            grpc_tls: ServerTls::default(),
            grpc_auth_token: Secret::default(),
            http_listen: "127.0.0.1:7302".into(),
        }
    }
}

impl ServiceConfig for Config {
    const SERVICE: &str = "activity-consumer";
    const ENV_PREFIX: &str = "ACTIVITY";
    // The direct entry's token, beside the shared sections' secrets.
    const OWN_SECRET_KEYS: &[&str] = &["grpc_auth_token"];

    fn shared(&self) -> SharedSections<'_> {
        SharedSections {
            log: &self.log,
            mysql: &self.mysql,
            rocketmq: &self.rocketmq,
            consumer: &self.consumer,
            default_group: GROUP_ACTIVITY,
            http_listen: &self.http_listen,
        }
    }

    fn check_tencent_im(&self) -> Result<(), impl Display> {
        self.tencent_im.validate()
    }

    /// `grpc_listen`, how the entry authenticates callers, and the `activity` section.
    fn validate_own(&self) -> Result<(), Error> {
        service_kit::config::check_listen("grpc_listen", &self.grpc_listen)?;
        self.grpc_tls.load("grpc_tls")?;
        crate::auth::BearerToken::new(&self.grpc_auth_token)?;
        let loopback = self
            .grpc_listen
            .parse::<std::net::SocketAddr>()
            .is_ok_and(|addr| addr.ip().is_loopback());
        if !loopback && !self.grpc_tls.requires_client_cert() && self.grpc_auth_token.is_empty() {
            return Err(Error::Config(format!(
                "grpc_listen `{}` is reachable from other hosts: set grpc_auth_token or grpc_tls.client_ca_file (mutual TLS) so the direct entry authenticates its callers",
                self.grpc_listen
            )));
        }
        let mut ids = std::collections::HashSet::new();
        for rule in &self.activity.activities {
            if rule.id.is_empty() || rule.id.len() > 64 || !ids.insert(rule.id.as_str()) {
                return Err(Error::Config(format!(
                    "activity.activities: id `{}` must be unique and 1..=64 chars",
                    rule.id
                )));
            }
        }
        if self.activity.big_gift_threshold > 0 && self.activity.broadcast_group_id.is_empty() {
            return Err(Error::Config(
                "activity.broadcast_group_id is required when big_gift_threshold > 0".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn shipped_config_files_load_with_env_overrides_and_redaction() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/configs");
        for file in ["activity-consumer.yaml", "activity-consumer.docker.yaml"] {
            let env = [(
                "ACTIVITY__ACTIVITY__BIG_GIFT_THRESHOLD".to_string(),
                "777".to_string(),
            )]
            .into();
            let config =
                Config::load_with_env(Some(PathBuf::from(format!("{root}/{file}"))), Some(env))
                    .unwrap();
            assert_eq!(config.activity.big_gift_threshold, 777, "{file}");
            assert_eq!(
                config.consumer_settings().unwrap().consumer_group,
                GROUP_ACTIVITY
            );
            assert!(!service_kit::config::dump(&config).contains("local-dev-im-key"));
        }
    }

    #[test]
    fn activity_windows_and_gift_filters() {
        let rule = ActivityRule {
            id: "a".into(),
            gift_ids: vec!["rose".into()],
            rank_by: RankBy::Sender,
            starts_at_ms: 100,
            ends_at_ms: 200,
        };
        assert!(rule.counts("rose", 100));
        assert!(!rule.counts("rose", 200));
        assert!(!rule.counts("car", 150));
    }
}
