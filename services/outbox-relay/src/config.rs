//! The standalone relay binary's whole configuration file: MySQL, the
//! `rocketmq` broker section, the engine's `outbox_worker` and `direct`
//! sections (`relay_engine::config`), admin HTTP, the console and the
//! operator commands' limits.

use serde::{Deserialize, Serialize};
use service_kit::{
    Secret, db::MysqlConfig, duration::ConfigDuration, mq::MqConfig, telemetry::LogConfig,
};

pub use relay_engine::config::{DirectConfig, OutboxWorkerConfig, PublishMode, TencentImConfig};

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
    /// How much lower than the relay's the admin port's CPU priority is: it
    /// runs on a thread of its own at this nice value above the process's
    /// (0..=19; 0 = the same), so reloading the console never slows
    /// delivery (`service_kit::low_priority`).
    pub admin_cpu_nice: i32,
    /// The admin port's own MySQL pool (console, `/admin/*`), apart from the
    /// relay's `mysql.max_connections`, so operators never take a
    /// connection the relay needs; at least 1.
    pub admin_max_connections: u32,
    /// Operator command settings.
    pub ops: OpsConfig,
    /// Operator console settings.
    pub console: ConsoleSection,
}

/// The `console` section.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleSection {
    /// Trace URL template with `{trace_id}` (Jaeger/Tempo style, e.g.
    /// `https://jaeger.example/trace/{trace_id}`): each event on the room
    /// timeline links to its trace. Empty = the trace id is shown as text.
    pub trace_url: String,
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
            admin_cpu_nice: 10,
            admin_max_connections: 4,
            ops: OpsConfig::default(),
            console: ConsoleSection::default(),
        }
    }
}
