//! The original `rocketmq` config section, mapped onto a Kafka-protocol broker
//! (docs/design.md#configuration-names):
//! `name_servers` → `bootstrap.servers`, `access_key`/`secret_key` → SASL
//! credentials, `namespace` → topic prefix, `send_timeout`/`retry` → producer
//! delivery timeout and retries. Shared by the relay (producer) and every
//! consumer, so the mapping is written once. No rdkafka dependency here: the
//! result is a list of client properties.

use crate::{Error, Secret, duration::ConfigDuration};
use serde::{Deserialize, Serialize};

/// The `rocketmq` section (names kept; docs/design.md#configuration-names).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MqConfig {
    /// Whether a broker client is enabled at all.
    pub enabled: bool,
    /// Broker bootstrap addresses (`host:port`).
    pub name_servers: Vec<String>,
    /// A single DNS name resolving to the brokers, used when `name_servers` is empty.
    pub name_server_domain: String,
    /// SASL username.
    pub access_key: String,
    /// SASL password.
    pub secret_key: Secret,
    /// Topic prefix (`<namespace>.<topic>`); empty for none.
    pub namespace: String,
    /// `plaintext`, `sasl_plaintext`, `ssl` or `sasl_ssl`. Defaults to
    /// `sasl_ssl` when credentials are set, else `plaintext`.
    pub security_protocol: String,
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub sasl_mechanism: String,
    /// Producer: how long a publish may take before it counts as failed.
    pub send_timeout: ConfigDuration,
    /// Producer: client-side retries within `send_timeout`.
    pub retry: u32,
    /// `room_outbox` topic settings.
    pub room_outbox: RoomOutboxTopicConfig,
    /// `treasure_open` topic settings.
    pub treasure_open: TreasureOpenTopicConfig,
}

/// `rocketmq.room_outbox`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoomOutboxTopicConfig {
    /// Whether the relay may publish room events to the topic (required for `mq`/`dual`).
    pub enabled: bool,
    /// Topic name before namespacing.
    pub topic: String,
    /// Producer group (used as the Kafka `client.id`).
    pub producer_group: String,
    /// Host the IM bridge consumer inside room-service.
    pub tencent_im_consumer_enabled: bool,
    /// The IM bridge's consumer group.
    pub tencent_im_consumer_group: String,
    /// Attempts before a consumer dead-letters a message.
    pub consumer_max_reconsume_times: u32,
}

/// `rocketmq.treasure_open`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TreasureOpenTopicConfig {
    /// Publish and consume delayed treasure-open wake-ups.
    pub enabled: bool,
    /// Topic name before namespacing.
    pub topic: String,
    /// Producer group (Kafka `client.id`).
    pub producer_group: String,
    /// Consumer group of room-service's wake-up consumer.
    pub consumer_group: String,
    /// Attempts before the wake-up is dead-lettered.
    pub consumer_max_reconsume_times: u32,
}

impl Default for MqConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            name_servers: Vec::new(),
            name_server_domain: String::new(),
            access_key: String::new(),
            secret_key: Secret::default(),
            namespace: String::new(),
            security_protocol: String::new(),
            sasl_mechanism: "PLAIN".into(),
            send_timeout: ConfigDuration::from_secs(3),
            retry: 2,
            room_outbox: RoomOutboxTopicConfig::default(),
            treasure_open: TreasureOpenTopicConfig::default(),
        }
    }
}

impl Default for RoomOutboxTopicConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            topic: "hyapp_room_outbox".into(),
            producer_group: "hyapp-room-outbox-producer".into(),
            tencent_im_consumer_enabled: false,
            tencent_im_consumer_group: "hyapp-room-im-bridge".into(),
            consumer_max_reconsume_times: 16,
        }
    }
}

impl Default for TreasureOpenTopicConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            topic: "hyapp_room_treasure_open".into(),
            producer_group: "hyapp-room-treasure-open-producer".into(),
            consumer_group: "hyapp-room-treasure-open".into(),
            consumer_max_reconsume_times: 16,
        }
    }
}

impl MqConfig {
    /// `bootstrap.servers`, from `name_servers` or `name_server_domain`.
    pub fn bootstrap_servers(&self) -> Result<String, Error> {
        if !self.name_servers.is_empty() {
            Ok(self.name_servers.join(","))
        } else if !self.name_server_domain.is_empty() {
            Ok(self.name_server_domain.clone())
        } else {
            Err(Error::Config(
                "rocketmq.name_servers (or rocketmq.name_server_domain) is required when the broker is used"
                    .into(),
            ))
        }
    }

    /// Full topic name with the namespace applied.
    pub fn topic(&self, name: &str) -> String {
        if self.namespace.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.namespace)
        }
    }

    /// Common client properties (bootstrap and security) for producers and consumers.
    pub fn client_properties(&self) -> Result<Vec<(&'static str, String)>, Error> {
        let mut properties = vec![("bootstrap.servers", self.bootstrap_servers()?)];
        let protocol = match self.security_protocol.as_str() {
            "" if self.access_key.is_empty() => "plaintext",
            "" => "sasl_ssl",
            "plaintext" | "sasl_plaintext" | "ssl" | "sasl_ssl" => self.security_protocol.as_str(),
            other => {
                return Err(Error::Config(format!(
                    "rocketmq.security_protocol `{other}` is not one of plaintext, sasl_plaintext, ssl, sasl_ssl"
                )));
            }
        };
        properties.push(("security.protocol", protocol.to_string()));
        if protocol.starts_with("sasl") {
            if self.access_key.is_empty() || self.secret_key.is_empty() {
                return Err(Error::Config(format!(
                    "rocketmq.access_key and rocketmq.secret_key are required with security_protocol {protocol}"
                )));
            }
            properties.push(("sasl.mechanism", self.sasl_mechanism.clone()));
            properties.push(("sasl.username", self.access_key.clone()));
            properties.push(("sasl.password", self.secret_key.expose().to_string()));
        }
        Ok(properties)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_the_original_rocketmq_keys_onto_kafka_properties() {
        let config = MqConfig {
            name_servers: vec!["b1:9092".into(), "b2:9092".into()],
            access_key: "user".into(),
            secret_key: Secret::new("pw"),
            namespace: "prod".into(),
            ..MqConfig::default()
        };
        let properties = config.client_properties().unwrap();
        assert!(properties.contains(&("bootstrap.servers", "b1:9092,b2:9092".into())));
        assert!(properties.contains(&("security.protocol", "sasl_ssl".into())));
        assert!(properties.contains(&("sasl.username", "user".into())));
        assert_eq!(config.topic("hyapp_room_outbox"), "prod.hyapp_room_outbox");
        assert!(
            !format!("{config:?}").contains("pw\""),
            "secret must not be in Debug"
        );
    }

    #[test]
    fn missing_servers_and_bad_protocol_name_the_key() {
        let error = MqConfig::default()
            .client_properties()
            .unwrap_err()
            .to_string();
        assert!(error.contains("rocketmq.name_servers"), "{error}");
        let config = MqConfig {
            name_servers: vec!["b:1".into()],
            security_protocol: "tls".into(),
            ..MqConfig::default()
        };
        assert!(
            config
                .client_properties()
                .unwrap_err()
                .to_string()
                .contains("rocketmq.security_protocol")
        );
        let config = MqConfig {
            name_servers: vec!["b:1".into()],
            security_protocol: "sasl_plaintext".into(),
            ..MqConfig::default()
        };
        assert!(
            config
                .client_properties()
                .unwrap_err()
                .to_string()
                .contains("rocketmq.access_key")
        );
    }
}
