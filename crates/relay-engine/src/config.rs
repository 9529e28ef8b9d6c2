//! The relay engine's configuration: the original `outbox_worker` section and
//! the direct-mode sinks (`direct`). The standalone binary's whole file
//! (MySQL, `rocketmq`, admin HTTP, console) is `outbox-relay`'s config; room-service
//! embeds the engine with these two sections of its own file. Validation follows docs/design.md#configuration-names:
//! zero or negative `poll_interval`, `batch_size`, `publish_timeout` fall back
//! to defaults; an unknown `retry_strategy` or `publish_mode`, or `mq`/`dual`
//! without the MQ publisher enabled, refuses to start with a message naming
//! the key.

use serde::{Deserialize, Serialize};
use service_kit::{Secret, duration::ConfigDuration};

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
    /// Redis URL of the nudge channel, in room-service's `redis.url` forms
    /// (`redis://`, `rediss://`, `redis-sentinel://`, `rediss-sentinel://`;
    /// service_kit::redis). A password in it is shown as `***`.
    #[serde(serialize_with = "service_kit::secret::serialize_redacted_url")]
    pub redis_url: String,
    /// PEM file of the CA(s) a TLS nudge server's (and sentinel's)
    /// certificate must chain to; empty = the system's roots.
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
