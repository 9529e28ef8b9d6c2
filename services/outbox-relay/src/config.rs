//! The relay's configuration: the original `outbox_worker` section plus what a
//! standalone relay needs (MySQL, the `rocketmq` broker section, direct-mode
//! sinks, admin HTTP). Validation follows docs/design.md#configuration-names:
//! zero or negative `poll_interval`, `batch_size`, `publish_timeout` fall back
//! to defaults; an unknown `retry_strategy` or `publish_mode`, or `mq`/`dual`
//! without the MQ publisher enabled, refuses to start with a message naming
//! the key.

use serde::{Deserialize, Serialize};
use service_kit::{
    Secret, db::MysqlConfig, duration::ConfigDuration, mq::MqConfig, telemetry::LogConfig,
};

/// Where delivered events go (`outbox_worker.publish_mode`, docs/design.md#publish-modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PublishMode {
    /// Tencent IM + activity gRPC directly; delivered when all direct sinks succeed.
    Direct,
    /// The `hyapp_room_outbox` topic; delivered when the broker accepted it.
    Mq,
    /// Both; delivered when everything succeeded.
    Dual,
}

/// The `outbox_worker` section (docs/design.md#configuration-names).
/// `Debug` is its redacted dump, so `redis_url`'s password never prints.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutboxWorkerConfig {
    /// Run the relay (in room-service: the embedded relay).
    pub enabled: bool,
    /// `direct`, `mq` or `dual`.
    pub publish_mode: String,
    /// Idle polling interval (the commit nudge makes it a fallback).
    pub poll_interval: ConfigDuration,
    /// Rows claimed per batch.
    pub batch_size: i64,
    /// Deadline of one event's publish.
    pub publish_timeout: ConfigDuration,
    /// `exponential_backoff` (`initial_backoff * 2^(retry_count-1)`, capped at
    /// `max_backoff`, with jitter) or `fixed_interval` (always
    /// `initial_backoff`); resolved into a [`service_kit::backoff::Backoff`].
    pub retry_strategy: String,
    /// Attempts before a row becomes `failed` (dead letter).
    pub max_retry_count: i64,
    /// First retry delay.
    pub initial_backoff: ConfigDuration,
    /// Retry delay cap.
    pub max_backoff: ConfigDuration,
    /// How long a claim (status `delivering`) is exclusive.
    pub claim_lease: ConfigDuration,
    /// How long a shard lease lasts without renewal.
    pub shard_lease: ConfigDuration,
    /// Listen for room-service's commit nudge on Redis pub/sub.
    pub nudge_enabled: bool,
    /// Redis URL of the nudge channel (a password in it is shown as `***`).
    #[serde(serialize_with = "service_kit::secret::serialize_redacted_url")]
    pub redis_url: String,
    /// PEM file of the CA(s) a `rediss://` nudge server's certificate must
    /// chain to; empty = the system's roots.
    pub redis_tls_ca_file: String,
    /// Development only: accept a nudge Redis off this machine without TLS
    /// or a password (service_kit::redis::check_transport).
    pub redis_allow_insecure_transport: bool,
    /// Delivered rows older than this are purged by `purge`.
    pub retention: ConfigDuration,
    /// Node id in logs and leases; empty = hostname + pid.
    pub node_id: String,
}

impl Default for OutboxWorkerConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            publish_mode: "direct".into(),
            poll_interval: ConfigDuration::from_secs(1),
            batch_size: 100,
            publish_timeout: ConfigDuration::from_secs(3),
            retry_strategy: "exponential_backoff".into(),
            max_retry_count: 10,
            initial_backoff: ConfigDuration::from_secs(5),
            max_backoff: ConfigDuration::from_secs(300),
            claim_lease: ConfigDuration::from_secs(30),
            shard_lease: ConfigDuration::from_secs(10),
            nudge_enabled: true,
            redis_url: "redis://127.0.0.1:6379".into(),
            redis_tls_ca_file: String::new(),
            redis_allow_insecure_transport: false,
            retention: ConfigDuration::from_secs(7 * 86_400),
            node_id: String::new(),
        }
    }
}

impl std::fmt::Debug for OutboxWorkerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        service_kit::config::debug_as_dump(self, f)
    }
}

/// Direct-mode sinks (Tencent IM publisher + activity gRPC publisher;
/// docs/design.md#publish-modes).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DirectConfig {
    /// Tencent IM REST settings.
    pub tencent_im: TencentImConfig,
    /// activity-service gRPC endpoint, e.g. `http://127.0.0.1:7301`; empty disables the sink.
    pub activity_endpoint: String,
    /// TLS of an `https://` activity endpoint.
    pub activity_tls: service_kit::grpc_tls::ClientTls,
    /// Bearer token sent with every activity call (the entry's `grpc_auth_token`).
    pub activity_auth_token: Secret,
    /// What an event does in IM beyond its message: im-bridge's own
    /// `im_bridge` section, so both paths treat every event alike.
    pub im_bridge: room_im::BridgeConfig,
}

/// The shared `tencent_im` section (one definition for every service).
pub use tencent_im::ImSection as TencentImConfig;

/// Keys of [`RelayServiceConfig`] that hold a secret or a URL that may carry
/// one; each may also be given as `RELAY__<KEY>_FILE`.
pub const SECRET_KEYS: &[&str] = &[
    "mysql.url",
    "mysql.password",
    "rocketmq.access_key",
    "rocketmq.secret_key",
    "rocketmq.tls.key_password",
    "outbox_worker.redis_url",
    "direct.tencent_im.secret_key",
    "admin_token",
    "admin_read_token",
    "direct.activity_auth_token",
];

/// The standalone relay binary's whole configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RelayServiceConfig {
    /// Logging.
    pub log: LogConfig,
    /// MySQL holding `room_outbox`.
    pub mysql: MysqlConfig,
    /// Broker (`rocketmq` section, docs/design.md#configuration-names).
    pub rocketmq: MqConfig,
    /// The relay itself.
    pub outbox_worker: OutboxWorkerConfig,
    /// Direct-mode sinks.
    pub direct: DirectConfig,
    /// Admin HTTP listen address (`/healthz`, `/readyz`, `/metrics`, `/admin/*`).
    pub http_listen: String,
    /// Bearer token for `/admin/*` and the console; empty disables both.
    pub admin_token: Secret,
    /// Read-only token of the operator console: its sessions see every page
    /// and are refused every mutation (403); empty = no read-only access.
    pub admin_read_token: Secret,
    /// `Host` names the console and `/admin/*` answer to (port ignored);
    /// empty = `localhost`, `127.0.0.1`, `[::1]`. A specific `http_listen`
    /// address is always added (`crate::access::hosts`).
    pub admin_allowed_hosts: Vec<String>,
    /// File of named operators, `name = <sha256 hex of the token>` per line
    /// (`outbox-relay operator-hash`); empty = none.
    pub admin_operators_file: String,
    /// TLS of the admin listener (`cert_file`, `key_file`, optional
    /// `client_ca_file`); off when `cert_file` is empty. With it, console
    /// cookies are `Secure`.
    pub admin_tls: service_kit::grpc_tls::ServerTls,
    /// Operator command settings.
    pub ops: OpsConfig,
}

/// The `ops` section: limits of the operator commands.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpsConfig {
    /// Dead letters committed longer ago than this are not replayed without
    /// `--force` / `force=true`: consumers may have purged their dedup
    /// record and apply the event twice. At most [`MAX_REPLAY_AGE_SECS`].
    pub replay_max_age: ConfigDuration,
}

/// The consumers' default `consumer.dedup_retention` (7 days,
/// crates/consumer-runtime's `ConsumerConfig`): a replay older than this
/// may meet a consumer that forgot it applied the event, so
/// `ops.replay_max_age` may not exceed it.
pub const MAX_REPLAY_AGE_SECS: i64 = 7 * 86_400;

impl Default for OpsConfig {
    fn default() -> Self {
        Self {
            replay_max_age: ConfigDuration::from_secs(MAX_REPLAY_AGE_SECS),
        }
    }
}

impl OpsConfig {
    /// `replay_max_age` in ms, checked: positive and not above the
    /// consumers' dedup retention.
    pub fn replay_max_age_ms(&self) -> Result<i64, crate::Error> {
        let ms = self.replay_max_age.as_millis();
        if ms <= 0 || ms > MAX_REPLAY_AGE_SECS * 1_000 {
            return Err(crate::Error::Config(format!(
                "ops.replay_max_age `{}` must be positive and at most 7d, the consumers' \
                 default consumer.dedup_retention (an older replay may be applied twice)",
                self.replay_max_age
            )));
        }
        Ok(ms)
    }
}

impl RelayServiceConfig {
    /// Loads the layered configuration (defaults → `configs/outbox-relay.yaml`
    /// or `file` → `RELAY__…` environment, or `env` when given).
    pub fn load_with_env(
        file: Option<std::path::PathBuf>,
        env: Option<std::collections::HashMap<String, String>>,
    ) -> Result<Self, service_kit::Error> {
        service_kit::config::ConfigSources {
            service: "outbox-relay",
            env_prefix: "RELAY",
            file,
            list_keys: &["rocketmq.name_servers", "admin_allowed_hosts"],
            secret_keys: SECRET_KEYS,
        }
        .load_with_env(env)
    }
}

impl Default for RelayServiceConfig {
    fn default() -> Self {
        Self {
            log: LogConfig::default(),
            mysql: MysqlConfig::default(),
            rocketmq: MqConfig::default(),
            outbox_worker: OutboxWorkerConfig::default(),
            direct: DirectConfig::default(),
            http_listen: "127.0.0.1:7201".into(),
            admin_token: Secret::default(),
            admin_read_token: Secret::default(),
            admin_allowed_hosts: crate::access::hosts::DEFAULT_ALLOWED_HOSTS
                .iter()
                .map(|&name| name.to_owned())
                .collect(),
            admin_operators_file: String::new(),
            admin_tls: service_kit::grpc_tls::ServerTls::default(),
            ops: OpsConfig::default(),
        }
    }
}
