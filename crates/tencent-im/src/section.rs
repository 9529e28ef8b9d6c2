//! The `tencent_im` section of a service config file, shared by every service
//! that talks to Tencent IM (room-service's CreateRoom, the relay's direct
//! sink, im-bridge, activity-consumer, notice-consumer), so the keys, defaults
//! and validation are written once.

use crate::{Client, ClientConfig, Error};
use serde::{Deserialize, Serialize};
use service_kit::{Secret, duration::ConfigDuration};

/// The default `group_id_template`. Room ids are sized for it: the longest
/// one the services accept (`outbox_schema::ids::MAX_ROOM_ID_LEN`) makes a
/// group id of exactly [`MAX_GROUP_ID_BYTES`] with it, so a template may add
/// no more bytes to the room id than this one does.
pub const DEFAULT_GROUP_ID_TEMPLATE: &str = "room_{room_id}";

/// Tencent IM's limit on a group id (`GroupId`), in bytes.
pub const MAX_GROUP_ID_BYTES: usize = 48;

/// The placeholder a group id template must hold once.
const ROOM_ID_PLACEHOLDER: &str = "{room_id}";

/// `tencent_im` config section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImSection {
    /// Use Tencent IM at all (where optional for the service).
    pub enabled: bool,
    /// `https://console.tim.qq.com` (or a regional host) in production, the fake's URL locally.
    pub base_url: String,
    /// Application id (SDKAppID).
    pub sdk_app_id: u64,
    /// Admin account the UserSig is issued for.
    pub admin_identifier: String,
    /// Application secret key (UserSig signing key).
    pub secret_key: Secret,
    /// Per-call timeout.
    pub request_timeout: ConfigDuration,
    /// Validity of generated admin UserSigs.
    pub usersig_ttl: ConfigDuration,
    /// Client-side calls per second per API.
    pub rate_limit_per_api: u32,
    /// Group messages per group per second (Tencent's limit is 40): every
    /// group message of the process is paced to it.
    pub group_msg_per_second: u32,
    /// Room group id; `{room_id}` is replaced.
    pub group_id_template: String,
}

impl Default for ImSection {
    fn default() -> Self {
        Self {
            enabled: false,
            base_url: "https://console.tim.qq.com".into(),
            sdk_app_id: 0,
            admin_identifier: "administrator".into(),
            secret_key: Secret::default(),
            request_timeout: ConfigDuration::from_secs(3),
            usersig_ttl: ConfigDuration::from_secs(7 * 86_400),
            rate_limit_per_api: 200,
            group_msg_per_second: crate::config::DEFAULT_GROUP_MSG_PER_SECOND,
            group_id_template: DEFAULT_GROUP_ID_TEMPLATE.into(),
        }
    }
}

impl ImSection {
    /// Checks the section; errors name the key (`tencent_im.<key>`).
    pub fn validate(&self) -> Result<(), Error> {
        let invalid = |message: &str| Err(Error::Config(format!("tencent_im.{message}")));
        if self.sdk_app_id == 0 {
            return invalid("sdk_app_id is required");
        }
        if self.secret_key.is_empty() {
            return invalid("secret_key is required");
        }
        if self.base_url.is_empty() {
            return invalid("base_url is required");
        }
        if self.group_id_template.matches(ROOM_ID_PLACEHOLDER).count() != 1 {
            return invalid("group_id_template must contain {room_id}, once");
        }
        let added = self.group_id_template.len() - ROOM_ID_PLACEHOLDER.len();
        let allowed = DEFAULT_GROUP_ID_TEMPLATE.len() - ROOM_ID_PLACEHOLDER.len();
        if added > allowed {
            return Err(Error::Config(format!(
                "tencent_im.group_id_template adds {added} bytes to the room id; at most {allowed} fit \
                 (room ids are sized so that `{DEFAULT_GROUP_ID_TEMPLATE}` keeps group ids within \
                 Tencent's {MAX_GROUP_ID_BYTES}-byte limit)"
            )));
        }
        Ok(())
    }

    /// Validates and builds the client.
    pub fn client(&self) -> Result<Client, Error> {
        self.validate()?;
        let mut config = ClientConfig::new(
            self.base_url.clone(),
            self.sdk_app_id,
            self.admin_identifier.clone(),
            self.secret_key.expose(),
        );
        config.request_timeout = self
            .request_timeout
            .positive_or(ConfigDuration::from_secs(3))
            .as_std();
        config.usersig_ttl = self
            .usersig_ttl
            .positive_or(ConfigDuration::from_secs(7 * 86_400))
            .as_std();
        config.rate_limit_per_api = self.rate_limit_per_api.max(1);
        config.group_msg_per_second = self.group_msg_per_second.max(1);
        Client::new(config)
    }

    /// The IM group of `room_id`.
    pub fn group_id(&self, room_id: &str) -> String {
        self.group_id_template.replace("{room_id}", room_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_key() {
        let error = ImSection::default().validate().unwrap_err().to_string();
        assert!(error.contains("tencent_im.sdk_app_id"), "{error}");
        let section = ImSection {
            sdk_app_id: 1,
            secret_key: Secret::new("k"),
            group_id_template: "fixed".into(),
            ..ImSection::default()
        };
        assert!(
            section
                .validate()
                .unwrap_err()
                .to_string()
                .contains("group_id_template")
        );
        let section = ImSection {
            group_id_template: "g_{room_id}".into(),
            ..section
        };
        assert!(section.client().is_ok());
        assert_eq!(section.group_id("r1"), "g_r1");
        assert!(!format!("{section:?}").contains("\"k\""));
    }

    #[test]
    fn a_template_may_add_no_more_than_the_default_does() {
        let with = |template: &str| ImSection {
            sdk_app_id: 1,
            secret_key: Secret::new("k"),
            group_id_template: template.into(),
            ..ImSection::default()
        };
        assert!(with(DEFAULT_GROUP_ID_TEMPLATE).validate().is_ok());
        assert!(with("{room_id}").validate().is_ok());
        assert!(
            with("rm:{room_id}:").validate().is_ok(),
            "5 bytes, as room_"
        );
        let error = with("hyapp_room_{room_id}")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("tencent_im.group_id_template adds 11 bytes"),
            "{error}"
        );
        let error = with("{room_id}{room_id}")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(error.contains("once"), "{error}");
    }
}
