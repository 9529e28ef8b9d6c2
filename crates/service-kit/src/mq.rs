//! The original `rocketmq` config section, mapped onto a Kafka-protocol broker
//! (docs/design.md#configuration-names):
//! `name_servers` → `bootstrap.servers`, `access_key`/`secret_key` → SASL
//! credentials, `namespace` → topic prefix, `send_timeout`/`retry` → producer
//! delivery timeout and retries. Shared by the relay (producer) and every
//! consumer, so the mapping is written once. No rdkafka dependency here: the
//! result is a list of client properties.
//!
//! Security (docs/design.md#connections): `security_protocol` picks
//! plaintext, TLS (`ssl`), SASL (`sasl_plaintext`) or both (`sasl_ssl`);
//! `sasl_mechanism` is PLAIN or SCRAM-SHA-256/512; the `tls` subsection
//! names the CA file, an optional client certificate and its key. The
//! broker's host name is always verified. Every combination that cannot work
//! is refused when the properties are built, which every service does at
//! start-up, and so is `plaintext` or `sasl_plaintext` to a broker that is
//! not on this machine, unless `rocketmq.allow_insecure_transport` is set
//! (development stacks only). Extra client properties (a consumer's
//! `client_properties`) may not set what this section owns
//! ([`check_extra_properties`]): a typed key cannot be overridden by a
//! free-form one, e.g. to turn the certificate check off.

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
    /// TLS settings for `ssl` / `sasl_ssl`.
    pub tls: KafkaTls,
    /// Development only: accept `plaintext` or `sasl_plaintext` to brokers
    /// that are not on this machine. Off by default, and refused by
    /// deploy-check in the Kubernetes manifests.
    pub allow_insecure_transport: bool,
    /// Producer: how long a publish may take before it counts as failed.
    pub send_timeout: ConfigDuration,
    /// Producer: client-side retries within `send_timeout`.
    pub retry: u32,
    /// `room_outbox` topic settings.
    pub room_outbox: RoomOutboxTopicConfig,
    /// `treasure_open` topic settings.
    pub treasure_open: TreasureOpenTopicConfig,
}

/// `rocketmq.tls`: what the client trusts and presents over TLS. Only valid
/// with `security_protocol` `ssl` or `sasl_ssl`; without `ca_file` the
/// system's CA store is trusted (managed brokers use public CAs).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaTls {
    /// PEM CA certificate(s) the brokers' certificates must chain to.
    pub ca_file: String,
    /// PEM client certificate, for brokers that authenticate clients by
    /// certificate; empty = none.
    pub cert_file: String,
    /// PEM private key of `cert_file`.
    pub key_file: String,
    /// Password of an encrypted `key_file`; empty for an unencrypted key.
    pub key_password: Secret,
}

impl KafkaTls {
    fn is_set(&self) -> bool {
        !(self.ca_file.is_empty()
            && self.cert_file.is_empty()
            && self.key_file.is_empty()
            && self.key_password.is_empty())
    }
}

/// The SASL mechanisms this build speaks (PLAIN is built into librdkafka;
/// SCRAM comes with its OpenSSL support).
pub const SASL_MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

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
            tls: KafkaTls::default(),
            allow_insecure_transport: false,
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

    /// Common client properties (bootstrap and security) for producers and
    /// consumers, refusing any setting that cannot work (see the module docs).
    pub fn client_properties(&self) -> Result<Vec<(&'static str, String)>, Error> {
        let mut properties = vec![("bootstrap.servers", self.bootstrap_servers()?)];
        let protocol = self.protocol()?;
        properties.push(("security.protocol", protocol.to_string()));
        if protocol.starts_with("sasl") {
            properties.extend(self.sasl_properties(protocol)?);
            if self.sends_password_in_clear() {
                tracing::warn!(
                    "rocketmq: SASL PLAIN over sasl_plaintext sends the password unencrypted; use sasl_ssl or SCRAM"
                );
            }
        }
        if protocol.ends_with("ssl") {
            properties.extend(self.tls_properties()?);
        } else if self.tls.is_set() {
            return Err(Error::Config(format!(
                "rocketmq.tls is set but security_protocol is {protocol}: use ssl or sasl_ssl, or remove rocketmq.tls"
            )));
        }
        self.check_transport(protocol)?;
        Ok(properties)
    }

    /// Whether credentials would cross the network unencrypted (`sasl_plaintext`
    /// with PLAIN): allowed — some private networks offer nothing else — but
    /// worth a start-up warning.
    pub fn sends_password_in_clear(&self) -> bool {
        matches!(self.protocol(), Ok("sasl_plaintext"))
            && self.sasl_mechanism.eq_ignore_ascii_case("PLAIN")
    }

    /// Refuses an unencrypted protocol to a broker reached over a network,
    /// unless the operator opted out explicitly.
    fn check_transport(&self, protocol: &str) -> Result<(), Error> {
        if protocol.ends_with("ssl") || self.allow_insecure_transport {
            return Ok(());
        }
        let addresses: Vec<&str> = if self.name_servers.is_empty() {
            vec![self.name_server_domain.as_str()]
        } else {
            self.name_servers.iter().map(String::as_str).collect()
        };
        let remote = addresses.into_iter().find(|address| {
            !crate::config::is_loopback_host(crate::config::host_of_address(address))
        });
        match remote {
            None => Ok(()),
            Some(address) => Err(Error::Config(format!(
                "rocketmq.security_protocol {protocol} is not encrypted and broker `{address}` \
                 is not this machine: use sasl_ssl (or ssl), or set \
                 rocketmq.allow_insecure_transport: true (development stacks only)"
            ))),
        }
    }

    fn protocol(&self) -> Result<&str, Error> {
        match self.security_protocol.as_str() {
            "" if self.access_key.is_empty() => Ok("plaintext"),
            "" => Ok("sasl_ssl"),
            "plaintext" | "sasl_plaintext" | "ssl" | "sasl_ssl" => {
                Ok(self.security_protocol.as_str())
            }
            other => Err(Error::Config(format!(
                "rocketmq.security_protocol `{other}` is not one of plaintext, sasl_plaintext, ssl, sasl_ssl"
            ))),
        }
    }

    fn sasl_properties(&self, protocol: &str) -> Result<Vec<(&'static str, String)>, Error> {
        if self.access_key.is_empty() || self.secret_key.is_empty() {
            return Err(Error::Config(format!(
                "rocketmq.access_key and rocketmq.secret_key are required with security_protocol {protocol}"
            )));
        }
        let mechanism = self.sasl_mechanism.to_ascii_uppercase();
        if !SASL_MECHANISMS.contains(&mechanism.as_str()) {
            return Err(Error::Config(format!(
                "rocketmq.sasl_mechanism `{}` is not one of {}",
                self.sasl_mechanism,
                SASL_MECHANISMS.join(", ")
            )));
        }
        Ok(vec![
            ("sasl.mechanism", mechanism),
            ("sasl.username", self.access_key.clone()),
            ("sasl.password", self.secret_key.expose().to_string()),
        ])
    }

    /// TLS properties, with every file read now so a missing or non-PEM file
    /// is refused at start-up rather than at the first connection.
    fn tls_properties(&self) -> Result<Vec<(&'static str, String)>, Error> {
        use crate::grpc_tls::{CERTIFICATE, PRIVATE_KEY, read_pem};
        let tls = &self.tls;
        // The broker's certificate must name the host the client dialled.
        let mut properties = vec![
            ("enable.ssl.certificate.verification", "true".to_string()),
            ("ssl.endpoint.identification.algorithm", "https".to_string()),
        ];
        if !tls.ca_file.is_empty() {
            read_pem("rocketmq.tls", "ca_file", &tls.ca_file, CERTIFICATE)?;
            properties.push(("ssl.ca.location", tls.ca_file.clone()));
        }
        match (tls.cert_file.is_empty(), tls.key_file.is_empty()) {
            (true, true) if !tls.key_password.is_empty() => {
                return Err(Error::Config(
                    "rocketmq.tls.key_password is set without rocketmq.tls.key_file".into(),
                ));
            }
            (true, true) => {}
            (false, false) => {
                read_pem("rocketmq.tls", "cert_file", &tls.cert_file, CERTIFICATE)?;
                read_pem("rocketmq.tls", "key_file", &tls.key_file, PRIVATE_KEY)?;
                properties.push(("ssl.certificate.location", tls.cert_file.clone()));
                properties.push(("ssl.key.location", tls.key_file.clone()));
                if !tls.key_password.is_empty() {
                    properties.push(("ssl.key.password", tls.key_password.expose().to_string()));
                }
            }
            _ => {
                return Err(Error::Config(
                    "rocketmq.tls.cert_file and rocketmq.tls.key_file must be set together".into(),
                ));
            }
        }
        Ok(properties)
    }
}

/// Whether a librdkafka property belongs to the `rocketmq` section (broker
/// addresses, the protocol, SASL, TLS and its certificate checks), so that
/// no free-form property list may set it.
pub fn is_owned_property(key: &str) -> bool {
    let key = key.trim().to_ascii_lowercase();
    matches!(
        key.as_str(),
        "bootstrap.servers" | "metadata.broker.list" | "security.protocol"
    ) || key.starts_with("ssl")
        || key.starts_with("sasl.")
        || key.starts_with("enable.ssl.")
        || key.starts_with("enable.sasl.")
        || key.starts_with("https.")
}

/// Refuses a property of `section` (e.g. `consumer.client_properties`) that
/// [`is_owned_property`]: applied last, it would silently replace what the
/// `rocketmq` section configured, e.g. `enable.ssl.certificate.verification`.
pub fn check_extra_properties<'a>(
    section: &str,
    keys: impl IntoIterator<Item = &'a String>,
) -> Result<(), Error> {
    match keys.into_iter().find(|key| is_owned_property(key)) {
        None => Ok(()),
        Some(key) => Err(Error::Config(format!(
            "{section}.{key} may not be set there: broker addresses, security.protocol, \
             sasl.* and ssl.* come only from the rocketmq section (security_protocol, \
             sasl_mechanism, access_key, secret_key, tls)"
        ))),
    }
}

#[cfg(test)]
mod tests;
