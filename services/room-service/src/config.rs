//! room-service configuration: built-in defaults → `configs/room-service.yaml`
//! (or `--config FILE`) → `ROOM__*` environment variables → [`Config::validate`],
//! whose messages name the offending key. Section names keep their original
//! spelling (docs/design.md#configuration-names).

use std::path::PathBuf;

use relay_engine::config::OutboxWorkerConfig;
use room_core::RoomRules;
use serde::{Deserialize, Serialize};
use service_kit::config::ConfigSources;
use service_kit::db::MysqlConfig;
use service_kit::duration::ConfigDuration;
use service_kit::grpc_tls::{ClientTls, ServerTls};
use service_kit::mq::MqConfig;
use service_kit::telemetry::LogConfig;
use tencent_im::ImSection as TencentImConfig;

use crate::Error;
use crate::validate::{MAX_APP_CODE_LEN, is_id_charset};

mod grpc_auth;
mod grpc_tls;
mod peer_addresses;

pub use grpc_auth::{GrpcAuthConfig, UserAssertionConfig};
pub use peer_addresses::{PeerAddressConfig, PeerAddressPolicy};

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
        }
    }
}

/// The `redis` section. `Debug` is its redacted dump, so the URL's password
/// never prints.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://host:port/db`, or `rediss://` for TLS (a password in it is
    /// shown as `***` by `--dump-config`).
    #[serde(serialize_with = "service_kit::secret::serialize_redacted_url")]
    pub url: String,
    /// PEM file of the CA(s) a `rediss://` server's certificate must chain
    /// to; empty = the system's roots.
    pub tls_ca_file: String,
    /// Development only: accept a Redis off this machine without TLS or a
    /// password (service_kit::redis::check_transport).
    pub allow_insecure_transport: bool,
    /// Room lease validity; renewed at a third of it while the cell is loaded.
    pub lease_ttl: ConfigDuration,
    /// TTL of this instance's liveness key, renewed four times per TTL: a
    /// holder whose key lapsed loses its rooms to the next caller, so this
    /// is how long a dead instance's rooms stay unavailable
    /// (docs/design.md#fast-takeover). `0` turns fast takeover off (rooms
    /// wait for `lease_ttl`), e.g. while older releases still run.
    pub liveness_ttl: ConfigDuration,
    /// Deadline of one Redis command, so an outage fails requests instead of hanging them.
    pub command_timeout: ConfigDuration,
    /// Connections in the client pool.
    pub pool_size: usize,
    /// Prefix of every key, so deployments (and test runs) can share a Redis.
    pub key_prefix: String,
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        service_kit::config::debug_as_dump(self, f)
    }
}

impl RedisConfig {
    /// Where these settings live, for error messages.
    pub const KEYS: service_kit::redis::RedisKeys = service_kit::redis::RedisKeys {
        url: "redis.url",
        tls_ca_file: "redis.tls_ca_file",
    };

    /// The Redis client settings (TLS included), checked; errors name the key.
    pub fn client_config(&self) -> Result<fred::types::config::Config, Error> {
        service_kit::redis::check_transport(
            Self::KEYS,
            "redis.allow_insecure_transport",
            &self.url,
            self.allow_insecure_transport,
        )
        .and_then(|()| service_kit::redis::client_config(Self::KEYS, &self.url, &self.tls_ca_file))
        .map_err(|error| match error {
            service_kit::Error::Config(message) => Error::Config(message),
            other => Error::Config(other.to_string()),
        })
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".into(),
            tls_ca_file: String::new(),
            allow_insecure_transport: false,
            lease_ttl: ConfigDuration::from_secs(30),
            liveness_ttl: ConfigDuration::from_secs(1),
            command_timeout: ConfigDuration::from_secs(1),
            pool_size: 4,
            key_prefix: "hyapp".into(),
        }
    }
}

/// The `room` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoomConfig {
    /// Write a full snapshot every this many versions.
    pub snapshot_every_n: u64,
    /// Commit several queued commands of one room in one transaction.
    pub group_commit: bool,
    /// Largest number of commands in one group commit.
    pub group_commit_max_batch: usize,
    /// Commit lanes that let mutations of different rooms share one
    /// transaction when they are ready together; 0 gives every room's batch
    /// its own transaction.
    pub shared_commit_lanes: usize,
    /// Most rooms in one shared transaction.
    pub shared_commit_max_rooms: usize,
    /// Queued requests per room before new ones are refused (RESOURCE_EXHAUSTED).
    pub mailbox_capacity: usize,
    /// A loaded room cell idle this long is dropped and its lease released.
    pub idle_ttl: ConfigDuration,
    /// Most rooms loaded on this instance; past it an idle room is evicted
    /// or, when none is, the call is refused with RESOURCE_EXHAUSTED.
    pub max_loaded_rooms: usize,
    /// A room must have been idle this long to be evicted for another.
    pub evict_idle_after: ConfigDuration,
    /// Recent command replies kept per loaded room for cheap idempotent replays.
    pub recent_commands_per_room: usize,
    /// A user whose heartbeat is older than this leaves the room.
    pub presence_ttl: ConfigDuration,
    /// How often the presence worker looks for expired users.
    pub presence_sweep_interval: ConfigDuration,
    /// room-core tunables for new rooms (existing rooms keep theirs).
    pub rules: RulesConfig,
}

impl Default for RoomConfig {
    fn default() -> Self {
        Self {
            snapshot_every_n: 100,
            group_commit: true,
            group_commit_max_batch: 64,
            shared_commit_lanes: 4,
            shared_commit_max_rooms: 64,
            mailbox_capacity: 1024,
            idle_ttl: ConfigDuration::from_secs(300),
            max_loaded_rooms: 100_000,
            evict_idle_after: ConfigDuration::from_secs(30),
            recent_commands_per_room: 16,
            presence_ttl: ConfigDuration::from_secs(60),
            presence_sweep_interval: ConfigDuration::from_secs(5),
            rules: RulesConfig::default(),
        }
    }
}

/// `room.rules`: [`RoomRules`] with config-file durations.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RulesConfig {
    /// Senders kept in the contribution rank.
    pub rank_size: usize,
    /// Daily heat needed for treasure levels 1, 2, 3, ...
    pub treasure_thresholds: Vec<u64>,
    /// Delay between a box appearing and becoming openable.
    pub treasure_countdown: ConfigDuration,
    /// Largest `mic_seat_count` of CreateRoom.
    pub max_mic_seats: u32,
    /// Largest gift `count`.
    pub max_gift_count: u32,
    /// Largest gift `unit_value`.
    pub max_gift_unit_value: u64,
    /// Most members of a room at once (its owner may always come back).
    pub max_members: usize,
    /// Most admins of a room.
    pub max_admins: usize,
    /// Most bans in force in a room (expired ones do not count).
    pub max_bans: usize,
    /// Most distinct gift senders of a room in one UTC day.
    pub max_contributors: usize,
}

impl Default for RulesConfig {
    fn default() -> Self {
        let rules = RoomRules::default();
        Self {
            rank_size: rules.rank_size,
            treasure_thresholds: rules.treasure_thresholds,
            treasure_countdown: ConfigDuration::from_millis(rules.treasure_countdown_ms),
            max_mic_seats: rules.max_mic_seats,
            max_gift_count: rules.max_gift_count,
            max_gift_unit_value: rules.max_gift_unit_value,
            max_members: rules.max_members,
            max_admins: rules.max_admins,
            max_bans: rules.max_bans,
            max_contributors: rules.max_contributors,
        }
    }
}

impl RulesConfig {
    /// The room-core rules.
    pub fn to_rules(&self) -> RoomRules {
        RoomRules {
            rank_size: self.rank_size,
            treasure_thresholds: self.treasure_thresholds.clone(),
            treasure_countdown_ms: self.treasure_countdown.as_millis(),
            max_mic_seats: self.max_mic_seats,
            max_gift_count: self.max_gift_count,
            max_gift_unit_value: self.max_gift_unit_value,
            max_members: self.max_members,
            max_admins: self.max_admins,
            max_bans: self.max_bans,
            max_contributors: self.max_contributors,
        }
    }

    /// The per-room caps by their key under `room.rules`.
    fn caps(&self) -> [(&'static str, usize); 4] {
        [
            ("max_members", self.max_members),
            ("max_admins", self.max_admins),
            ("max_bans", self.max_bans),
            ("max_contributors", self.max_contributors),
        ]
    }
}

/// The `wallet` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WalletConfig {
    /// `http://host:port` (plaintext) or `https://host:port` (TLS) of the wallet gRPC service.
    pub endpoint: String,
    /// Deadline of one Debit/Refund call.
    pub timeout: ConfigDuration,
    /// TLS of an `https://` endpoint.
    pub tls: ClientTls,
}

impl Default for WalletConfig {
    fn default() -> Self {
        Self {
            endpoint: "http://127.0.0.1:7601".into(),
            timeout: ConfigDuration::from_secs(2),
            tls: ClientTls::default(),
        }
    }
}

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

/// The `saga` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SagaConfig {
    /// How often the recovery sweep runs.
    pub sweep_interval: ConfigDuration,
    /// A saga untouched this long is considered abandoned by a crash and
    /// compensated; also the wait after a failed refund before the next attempt.
    pub stuck_after: ConfigDuration,
    /// Refund calls a saga gets (the pipeline's and the sweep's together)
    /// before it ends `failed` and waits for an operator (docs/design.md#gift-saga).
    pub max_refund_attempts: u32,
}

impl Default for SagaConfig {
    fn default() -> Self {
        Self {
            sweep_interval: ConfigDuration::from_secs(30),
            stuck_after: ConfigDuration::from_secs(60),
            max_refund_attempts: 10,
        }
    }
}

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
    /// The URL this instance advertises in its leases, for the gRPC listener
    /// bound at `bound`: `advertise_url` when set, else derived from it.
    pub fn advertised_url(&self, bound: std::net::SocketAddr) -> String {
        if !self.advertise_url.is_empty() {
            return self.advertise_url.clone();
        }
        // The other instances reach this one over the same listener, so the
        // scheme follows whether it speaks TLS.
        let scheme = if self.grpc_tls.is_enabled() {
            "https"
        } else {
            "http"
        };
        if bound.ip().is_unspecified() {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
            return format!("{scheme}://{host}:{}", bound.port());
        }
        format!("{scheme}://{bound}")
    }

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

    /// Checks values and fills derived defaults (`node_id`, fallbacks of non-positive durations).
    pub fn validate(mut self) -> Result<Self, Error> {
        let invalid = |message: String| Err(Error::Config(message));
        if self.node_id.is_empty() {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "room-service".into());
            self.node_id = format!("{host}-{}", std::process::id());
        }
        if self.node_id.len() > 128 || !is_id_charset(&self.node_id) {
            return invalid(format!(
                "node_id `{}` must be 1..=128 chars of [A-Za-z0-9_.:-]",
                self.node_id
            ));
        }
        if self.app_code.is_empty()
            || self.app_code.len() > MAX_APP_CODE_LEN
            || !is_id_charset(&self.app_code)
        {
            return invalid(format!(
                "app_code `{}` must be 1..={MAX_APP_CODE_LEN} chars of [A-Za-z0-9_.:-]",
                self.app_code
            ));
        }
        for (key, value) in [
            ("grpc_listen", &self.grpc_listen),
            ("http_listen", &self.http_listen),
        ] {
            if value.parse::<std::net::SocketAddr>().is_err() {
                return invalid(format!("{key} `{value}` is not a host:port socket address"));
            }
        }
        if !self.advertise_url.is_empty() {
            let usable = (self.advertise_url.starts_with("http://")
                || self.advertise_url.starts_with("https://"))
                && !self.advertise_url.contains(char::is_whitespace)
                && self.advertise_url.parse::<tonic::transport::Uri>().is_ok();
            if !usable {
                return invalid(format!(
                    "advertise_url `{}` must be an http:// or https:// URL without spaces",
                    self.advertise_url
                ));
            }
        }
        self.check_grpc_tls()?;
        self.check_grpc_auth()?;
        self.check_peer_addresses()?;
        self.forward_timeout = self
            .forward_timeout
            .positive_or(ConfigDuration::from_secs(5));
        // Builds (and discards) the client settings: the scheme, the CA file's
        // existence and contents are checked now, not at the first connect.
        self.redis.client_config()?;
        if self.outbox_worker.enabled && self.outbox_worker.nudge_enabled {
            relay_engine::nudge::check(&self.outbox_worker).map_err(|error| match error {
                service_kit::Error::Config(message) => Error::Config(message),
                other => Error::Config(other.to_string()),
            })?;
        }
        if self.redis.lease_ttl.as_millis() < 1_000 {
            return invalid(format!(
                "redis.lease_ttl must be at least 1s, got {}",
                self.redis.lease_ttl
            ));
        }
        let liveness = self.redis.liveness_ttl.as_millis();
        if liveness != 0 && !(200..=self.redis.lease_ttl.as_millis()).contains(&liveness) {
            return invalid(format!(
                "redis.liveness_ttl must be 0 (off) or between 200ms and redis.lease_ttl ({}), got {}",
                self.redis.lease_ttl, self.redis.liveness_ttl
            ));
        }
        self.redis.command_timeout = self
            .redis
            .command_timeout
            .positive_or(ConfigDuration::from_secs(1));
        self.redis.pool_size = self.redis.pool_size.clamp(1, 64);
        let room = &mut self.room;
        if room.snapshot_every_n == 0 {
            return invalid("room.snapshot_every_n must be at least 1".into());
        }
        if !(1..=1024).contains(&room.group_commit_max_batch) {
            return invalid(format!(
                "room.group_commit_max_batch must be in 1..=1024, got {}",
                room.group_commit_max_batch
            ));
        }
        if room.shared_commit_lanes > 64 {
            return invalid(format!(
                "room.shared_commit_lanes must be in 0..=64 (0 turns shared commits off), got {}",
                room.shared_commit_lanes
            ));
        }
        if !(1..=1024).contains(&room.shared_commit_max_rooms) {
            return invalid(format!(
                "room.shared_commit_max_rooms must be in 1..=1024, got {}",
                room.shared_commit_max_rooms
            ));
        }
        if room.mailbox_capacity == 0 {
            return invalid("room.mailbox_capacity must be at least 1".into());
        }
        if room.max_loaded_rooms == 0 {
            return invalid("room.max_loaded_rooms must be at least 1".into());
        }
        if room.evict_idle_after.as_millis() < 0 {
            return invalid("room.evict_idle_after must not be negative".into());
        }
        room.idle_ttl = room.idle_ttl.positive_or(ConfigDuration::from_secs(300));
        room.presence_ttl = room.presence_ttl.positive_or(ConfigDuration::from_secs(60));
        room.presence_sweep_interval = room
            .presence_sweep_interval
            .positive_or(ConfigDuration::from_secs(5));
        if room.rules.rank_size == 0 {
            return invalid("room.rules.rank_size must be at least 1".into());
        }
        if room
            .rules
            .treasure_thresholds
            .windows(2)
            .any(|pair| pair[0] >= pair[1])
        {
            return invalid("room.rules.treasure_thresholds must be strictly increasing".into());
        }
        if !room.rules.treasure_countdown.is_positive() {
            return invalid("room.rules.treasure_countdown must be positive".into());
        }
        if room.rules.max_mic_seats == 0
            || room.rules.max_gift_count == 0
            || room.rules.max_gift_unit_value == 0
        {
            return invalid("room.rules.max_mic_seats, max_gift_count and max_gift_unit_value must be at least 1".into());
        }
        // Keeps count × unit_value representable as the wallet's i64 amount.
        if u128::from(room.rules.max_gift_count) * u128::from(room.rules.max_gift_unit_value)
            > i64::MAX as u128
        {
            return invalid(
                "room.rules.max_gift_count × max_gift_unit_value must fit in i64".into(),
            );
        }
        // A zero cap would refuse every join, grant, ban or gift: a typo,
        // never an intent, so start-up stops instead of every command.
        if let Some((key, _)) = room.rules.caps().into_iter().find(|(_, cap)| *cap == 0) {
            return invalid(format!("room.rules.{key} must be at least 1"));
        }
        // Builds the endpoint once: the scheme, the TLS files and an
        // `https://` endpoint's trust are all checked before anything starts.
        self.wallet
            .tls
            .endpoint("wallet.tls", "wallet.endpoint", &self.wallet.endpoint)
            .map_err(|error| Error::Config(error.to_string()))?;
        self.wallet.timeout = self
            .wallet
            .timeout
            .positive_or(ConfigDuration::from_secs(2));
        self.saga.sweep_interval = self
            .saga
            .sweep_interval
            .positive_or(ConfigDuration::from_secs(30));
        self.saga.stuck_after = self
            .saga
            .stuck_after
            .positive_or(ConfigDuration::from_secs(60));
        if self.saga.max_refund_attempts == 0 {
            return invalid("saga.max_refund_attempts must be at least 1".into());
        }
        if self.tencent_im.enabled {
            // The section's own check (the one the client is built with), so
            // a template too long for Tencent's group ids fails here too.
            if let Err(error) = self.tencent_im.validate() {
                return invalid(match error {
                    tencent_im::Error::Config(message) => message,
                    other => other.to_string(),
                });
            }
        }
        self.check_treasure_wakeups()?;
        self.shutdown_grace = self
            .shutdown_grace
            .positive_or(ConfigDuration::from_secs(20));
        Ok(self)
    }

    /// Treasure wake-ups travel only through the broker
    /// (docs/design.md#treasure-wake-ups): an embedded relay without an MQ
    /// publisher would dead-letter every wake-up, so writing them needs an
    /// embedded relay in `mq` or `dual` mode (or none: a standalone relay then
    /// publishes them).
    fn check_treasure_wakeups(&self) -> Result<(), Error> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let config = Config::default().validate().unwrap();
        assert!(!config.node_id.is_empty());
        assert_eq!(config.room.rules.to_rules(), RoomRules::default());
    }

    #[test]
    fn treasure_wakeups_need_a_relay_that_can_publish_them() {
        let mut config = Config::default();
        config.rocketmq.treasure_open.enabled = true;
        config.outbox_worker.publish_mode = "direct".into();
        let error = config.clone().validate().unwrap_err().to_string();
        assert!(
            error.contains("outbox_worker.publish_mode mq or dual"),
            "{error}"
        );
        config.rocketmq.enabled = true;
        config.rocketmq.room_outbox.enabled = true;
        config.outbox_worker.publish_mode = "mq".into();
        config.clone().validate().unwrap();
        config.outbox_worker.publish_mode = "direct".into();
        config.outbox_worker.enabled = false;
        config
            .validate()
            .expect("a standalone relay publishes the wake-ups");
    }

    #[test]
    fn messages_name_the_key() {
        type Mutation = fn(&mut Config);
        let cases: Vec<(Mutation, &str)> = vec![
            (|c| c.room.snapshot_every_n = 0, "room.snapshot_every_n"),
            (
                |c| c.room.group_commit_max_batch = 0,
                "room.group_commit_max_batch",
            ),
            (
                |c| c.room.shared_commit_lanes = 65,
                "room.shared_commit_lanes",
            ),
            (
                |c| c.room.shared_commit_max_rooms = 0,
                "room.shared_commit_max_rooms",
            ),
            (|c| c.wallet.endpoint = "wallet:1".into(), "wallet.endpoint"),
            (|c| c.redis.url = "localhost".into(), "redis.url"),
            (|c| c.grpc_listen = "nowhere".into(), "grpc_listen"),
            (|c| c.node_id = "bad node".into(), "node_id"),
            (
                |c| c.room.rules.treasure_thresholds = vec![5, 5],
                "room.rules.treasure_thresholds",
            ),
            (|c| c.tencent_im.enabled = true, "tencent_im.sdk_app_id"),
        ];
        for (mutate, key) in cases {
            let mut config = Config::default();
            mutate(&mut config);
            let error = config.validate().unwrap_err().to_string();
            assert!(error.contains(key), "{error} should name {key}");
        }
    }

    #[test]
    fn room_caps_must_be_at_least_one() {
        type Mutation = fn(&mut RulesConfig);
        let cases: [(Mutation, &str); 4] = [
            (|r| r.max_members = 0, "room.rules.max_members"),
            (|r| r.max_admins = 0, "room.rules.max_admins"),
            (|r| r.max_bans = 0, "room.rules.max_bans"),
            (|r| r.max_contributors = 0, "room.rules.max_contributors"),
        ];
        for (mutate, key) in cases {
            let mut config = Config::default();
            mutate(&mut config.room.rules);
            let error = config.validate().unwrap_err().to_string();
            assert!(error.contains(key), "{error} should name {key}");
        }
        let mut config = Config::default();
        config.room.rules.max_members = 1;
        config.room.rules.max_admins = 1;
        config.room.rules.max_bans = 1;
        config.room.rules.max_contributors = 1;
        let rules = config.validate().unwrap().room.rules.to_rules();
        assert_eq!(
            (
                rules.max_members,
                rules.max_admins,
                rules.max_bans,
                rules.max_contributors
            ),
            (1, 1, 1, 1)
        );
    }

    #[test]
    fn max_refund_attempts_must_be_at_least_one() {
        let mut config = Config::default();
        config.saga.max_refund_attempts = 0;
        let error = config.clone().validate().unwrap_err().to_string();
        assert!(error.contains("saga.max_refund_attempts"), "{error}");
        config.saga.max_refund_attempts = 1;
        assert_eq!(config.validate().unwrap().saga.max_refund_attempts, 1);
    }

    fn shipped(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("configs")
            .join(name)
    }

    #[test]
    fn shipped_files_load_and_env_overrides_them() {
        let env = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(key, value)| (key.to_string(), value.to_string()))
                    .collect(),
            )
        };
        let local = Config::load_with_env(
            Some(shipped("room-service.yaml")),
            env(&[
                ("ROOM__OUTBOX_WORKER__BATCH_SIZE", "500"),
                ("ROOM__ROOM__RULES__TREASURE_THRESHOLDS", "10,20"),
            ]),
        )
        .unwrap();
        assert_eq!(local.outbox_worker.batch_size, 500);
        assert_eq!(local.room.rules.treasure_thresholds, vec![10, 20]);
        let docker =
            Config::load_with_env(Some(shipped("room-service.docker.yaml")), env(&[])).unwrap();
        assert_eq!(docker.grpc_listen, "0.0.0.0:7101");
        // The example's certificate paths are the deployment's; a test PKI
        // stands in for its files.
        let pki = testkit::pki::TestPki::generate(&["room-service.hyapp.internal"]);
        let (cert, key, ca) = (
            pki.server_cert.display().to_string(),
            pki.server_key.display().to_string(),
            pki.ca.display().to_string(),
        );
        let files = [
            ("ROOM__GRPC_TLS__CERT_FILE", cert.as_str()),
            ("ROOM__GRPC_TLS__KEY_FILE", key.as_str()),
            ("ROOM__GRPC_TLS__CLIENT_CA_FILE", ca.as_str()),
            ("ROOM__PEER_TLS__CERT_FILE", cert.as_str()),
            ("ROOM__PEER_TLS__KEY_FILE", key.as_str()),
            ("ROOM__PEER_TLS__CA_FILE", ca.as_str()),
        ];
        let with_secret: Vec<(&str, &str)> = files
            .iter()
            .copied()
            .chain([("ROOM__TENCENT_IM__SECRET_KEY", "real-secret-key")])
            .collect();
        let tencent = Config::load_with_env(
            Some(shipped("room-service.tencent.example.yaml")),
            env(&with_secret),
        )
        .unwrap();
        assert!(tencent.grpc_tls.requires_client_cert());
        assert_eq!(tencent.outbox_worker.publish_mode, "mq");
        let dump = service_kit::config::dump(&tencent);
        assert!(!dump.contains("real-secret-key"), "{dump}");
        assert!(dump.contains("***"));
        // Without the secret the example refuses to start and names the key.
        let error = Config::load_with_env(
            Some(shipped("room-service.tencent.example.yaml")),
            env(&files),
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("tencent_im.secret_key"), "{error}");
    }

    #[test]
    fn non_positive_durations_fall_back() {
        let mut config = Config::default();
        config.room.presence_sweep_interval = ConfigDuration::from_millis(0);
        config.saga.sweep_interval = ConfigDuration::from_millis(-5);
        let config = config.validate().unwrap();
        assert_eq!(
            config.room.presence_sweep_interval,
            ConfigDuration::from_secs(5)
        );
        assert_eq!(config.saga.sweep_interval, ConfigDuration::from_secs(30));
    }
}
