//! room-service configuration: built-in defaults → `configs/room-service.yaml`
//! (or `--config FILE`) → `ROOM__*` environment variables → [`Config::validate`],
//! whose messages name the offending key. Section names keep their original
//! spelling (docs/design.md#configuration-names).

use std::path::PathBuf;

use relay_engine::config::OutboxWorkerConfig;
use serde::{Deserialize, Serialize};
use service_kit::adjusted::Adjustments;
use service_kit::config::ConfigSources;
use service_kit::db::MysqlConfig;
use service_kit::duration::ConfigDuration;
use service_kit::grpc_tls::{ClientTls, ServerTls};
use service_kit::mq::MqConfig;
use service_kit::telemetry::LogConfig;
use tencent_im::ImSection as TencentImConfig;

use crate::Error;

mod grpc_auth;
mod grpc_tls;
mod instance;
mod peer_addresses;
mod redis;
mod relay;
mod room;
mod wallet;

pub use grpc_auth::{GrpcAuthConfig, UserAssertionConfig};
pub use peer_addresses::{PeerAddressConfig, PeerAddressPolicy};
pub use redis::RedisConfig;
pub use relay::ActivityConfig;
pub use room::{RoomConfig, RulesConfig};
pub use wallet::{SagaConfig, WalletConfig};

/// The whole room-service configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Logging.
    pub log: LogConfig,
    /// MySQL holding rooms, the command log, snapshots, the outbox and sagas.
    pub mysql: MysqlConfig,
    /// Redis: room leases, projections, presence, the relay nudge.
    pub redis: RedisConfig,
    /// gRPC listen address (port 0 picks a free one).
    pub grpc_listen: String,
    /// TLS (and with `client_ca_file`, mutual TLS) of the gRPC listener,
    /// which serves the gateway and the other instances alike.
    pub grpc_tls: ServerTls,
    /// How this instance verifies (and, for mutual TLS, authenticates to)
    /// another instance whose advertised URL is `https://` when it forwards
    /// a call there (docs/design.md#scale-out).
    pub peer_tls: ClientTls,
    /// Who may call the gRPC port: certificate identities and the gateway's
    /// end-user assertion (docs/design.md#who-may-call).
    pub grpc_auth: GrpcAuthConfig,
    /// Serve gRPC reflection (the schema, for grpcurl and similar tools).
    /// Off by default: it maps the API for whoever reaches the port.
    pub grpc_reflection: bool,
    /// Which holder addresses read from a room lease this instance will
    /// dial when it forwards a call (a lease value is data in Redis).
    pub peer_addresses: PeerAddressConfig,
    /// Admin HTTP listen address: `/healthz`, `/readyz`, `/metrics`.
    pub http_listen: String,
    /// This node's id, the value of the room leases it holds; empty = `$HOSTNAME-<pid>`.
    pub node_id: String,
    /// URL other instances use to reach this instance's gRPC port when they
    /// forward a call for a room it holds (stored in its room leases). Empty:
    /// `http://<grpc_listen>` for a concrete address, `http://$HOSTNAME:<port>`
    /// when listening on all interfaces. Must be reachable from every instance.
    pub advertise_url: String,
    /// Longest a forwarded call may take when its caller set no deadline.
    pub forward_timeout: ConfigDuration,
    /// `app_code` used when a request leaves it empty.
    pub app_code: String,
    /// Room pipeline tunables and room-core rules.
    pub room: RoomConfig,
    /// The wallet service.
    pub wallet: WalletConfig,
    /// Broker section, docs/design.md#configuration-names (only `treasure_open.enabled`
    /// matters to the writer).
    pub rocketmq: MqConfig,
    /// The embedded relay.
    pub outbox_worker: OutboxWorkerConfig,
    /// Tencent IM (CreateRoom's synchronous group creation; also the relay's direct sink).
    pub tencent_im: TencentImConfig,
    /// The activity service's direct entry (the embedded relay's `direct`/`dual` sink).
    pub activity: ActivityConfig,
    /// In-process consumers' runtime tunables (treasure-open, IM bridge).
    pub consumer: consumer_runtime::ConsumerConfig,
    /// The hosted IM bridge's behaviour (`rocketmq.room_outbox.tencent_im_consumer_enabled`).
    pub im_bridge: im_bridge_engine::BridgeConfig,
    /// Wallet saga recovery.
    pub saga: SagaConfig,
    /// Longest the graceful drain may take before the process exits anyway.
    pub shutdown_grace: ConfigDuration,
    /// Values validation replaced (a non-positive duration by its default),
    /// logged as warnings once telemetry runs ([`Config::warn_adjusted`]).
    #[serde(skip)]
    adjusted: Vec<Adjusted>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            log: LogConfig::default(),
            mysql: MysqlConfig::default(),
            redis: RedisConfig::default(),
            grpc_listen: "127.0.0.1:7101".into(),
            grpc_tls: ServerTls::default(),
            peer_tls: ClientTls::default(),
            grpc_auth: GrpcAuthConfig::default(),
            grpc_reflection: false,
            peer_addresses: PeerAddressConfig::default(),
            http_listen: "127.0.0.1:7102".into(),
            node_id: String::new(),
            advertise_url: String::new(),
            forward_timeout: ConfigDuration::from_secs(5),
            app_code: "hyapp".into(),
            room: RoomConfig::default(),
            wallet: WalletConfig::default(),
            rocketmq: MqConfig::default(),
            outbox_worker: OutboxWorkerConfig::default(),
            tencent_im: TencentImConfig::default(),
            activity: ActivityConfig::default(),
            consumer: consumer_runtime::ConsumerConfig::default(),
            im_bridge: im_bridge_engine::BridgeConfig::default(),
            saga: SagaConfig::default(),
            shutdown_grace: ConfigDuration::from_secs(20),
            adjusted: Vec::new(),
        }
    }
}

/// A value [`Config::validate`] replaced rather than refused: the key, what
/// was given and what is used instead (docs/style.md, "Configuration").
pub use service_kit::adjusted::Adjusted;

/// Keys whose `ROOM__…` environment value is a comma-separated list.
const LIST_KEYS: &[&str] = &[
    "room.rules.treasure_thresholds",
    "rocketmq.name_servers",
    // The hosted bridge's list, as im-bridge itself reads it.
    "im_bridge.silent_event_types",
];

/// Keys holding a secret or a URL that may carry one; each may also be given
/// as `ROOM__<KEY>_FILE` (a Kubernetes secret file).
pub const SECRET_KEYS: &[&str] = &[
    "mysql.url",
    "mysql.password",
    "redis.url",
    "rocketmq.access_key",
    "rocketmq.secret_key",
    "rocketmq.tls.key_password",
    "tencent_im.secret_key",
    "outbox_worker.redis_url",
    "activity.auth_token",
];

impl Config {
    /// Loads the layered configuration and validates it.
    pub fn load(file: Option<PathBuf>) -> Result<Self, Error> {
        Self::load_with_env(file, None)
    }

    /// Like [`Config::load`], with the environment given explicitly (tests).
    pub fn load_with_env(
        file: Option<PathBuf>,
        env: Option<std::collections::HashMap<String, String>>,
    ) -> Result<Self, Error> {
        let config: Config = ConfigSources {
            service: "room-service",
            env_prefix: "ROOM",
            file,
            list_keys: LIST_KEYS,
            secret_keys: SECRET_KEYS,
        }
        .load_with_env(env)
        .map_err(|error| Error::Config(error.to_string()))?;
        config.validate()
    }

    /// Checks every section (each refusal names its key), fills `node_id`
    /// when empty, and replaces a non-positive duration by its default,
    /// recording it for [`Config::warn_adjusted`].
    pub fn validate(mut self) -> Result<Self, Error> {
        let mut adjusted = Adjustments::default();
        self.check_instance(&mut adjusted)?;
        self.check_grpc_tls()?;
        self.check_grpc_auth()?;
        self.check_peer_addresses()?;
        self.check_relay()?;
        self.redis.validate(&mut adjusted)?;
        self.room.validate(&mut adjusted)?;
        self.wallet.validate(&mut adjusted)?;
        self.saga.validate(&mut adjusted)?;
        self.check_tencent_im()?;
        self.check_treasure_wakeups()?;
        self.adjusted.extend(adjusted.into_vec());
        Ok(self)
    }

    /// The values validation replaced, in the order it met them.
    pub fn adjusted(&self) -> &[Adjusted] {
        &self.adjusted
    }

    /// Logs one warning per replaced value; called once telemetry runs
    /// (validation happens before it).
    pub fn warn_adjusted(&self) {
        service_kit::adjusted::warn_each("room-service", &self.adjusted);
    }
}

#[cfg(test)]
mod tests;
