//! CreateRoom's synchronous Tencent IM group creation (`tencent_im_ms`;
//! docs/design.md#im-group-creation-on-createroom): bounded by the IM
//! request timeout so clients can join the group as soon as the reply
//! arrives. A failure never fails the command; the
//! relay's idempotent EnsureGroup for `RoomCreated` repairs it.

use std::time::Duration;

use tencent_im::ImSection as TencentImConfig;
use tencent_im::{Client, CreateGroupRequest};

use crate::Error;

/// Tencent limits group names to 30 bytes.
const MAX_GROUP_NAME_BYTES: usize = 30;

/// The IM group creator.
#[derive(Debug, Clone)]
pub struct ImGroups {
    client: Client,
    section: TencentImConfig,
    timeout: Duration,
}

/// `title` cut to at most `max` bytes on a character boundary.
fn truncate_bytes(title: &str, max: usize) -> &str {
    let mut end = title.len().min(max);
    while !title.is_char_boundary(end) {
        end -= 1;
    }
    &title[..end]
}

impl ImGroups {
    /// The creator, or `None` when `tencent_im.enabled` is false.
    pub fn from_config(config: &TencentImConfig) -> Result<Option<Self>, Error> {
        if !config.enabled {
            return Ok(None);
        }
        let timeout = config
            .request_timeout
            .positive_or(service_kit::duration::ConfigDuration::from_secs(3))
            .as_std();
        let client = config
            .client()
            .map_err(|error| Error::Config(error.to_string()))?;
        Ok(Some(Self {
            client,
            section: config.clone(),
            timeout,
        }))
    }

    /// The group id of a room.
    pub fn group_id(&self, room_id: &str) -> String {
        self.section.group_id(room_id)
    }

    /// Creates the room's group unless it exists, within the timeout.
    pub async fn ensure_group(&self, room_id: &str, title: &str) -> Result<(), String> {
        let request = CreateGroupRequest::av_chat_room(
            self.group_id(room_id),
            truncate_bytes(title, MAX_GROUP_NAME_BYTES),
        );
        match tokio::time::timeout(self.timeout, self.client.ensure_group(&request)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err(format!("timed out after {:?}", self.timeout)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cut_on_character_boundaries() {
        assert_eq!(truncate_bytes("short", 30), "short");
        let long = "语音房间标题非常非常非常长的名字";
        let cut = truncate_bytes(long, 30);
        assert!(cut.len() <= 30);
        assert!(long.starts_with(cut));
    }
}
