//! What each room event does in IM:
//! - `RoomCreated` → ensure the room's IM group exists (idempotent);
//! - `RoomClosed` → destroy the group (idempotent);
//! - `RoomUserKicked` → a group message, then remove and/or mute the target
//!   per [`BridgeConfig`];
//! - any other event → one group custom message, unless its type is
//!   configured silent (acknowledged without a message).
//!
//! Messages are external effects: ids already in `consumer_dedup` are
//! skipped, sent ones are recorded afterwards, and each message's `Random`
//! derives from its `event_id` so a resend after a crash in between is dropped
//! by Tencent.

use crate::{config::BridgeConfig, group_id, message::room_event_message};
use outbox_schema::pb::{self, room_outbox_event::Payload};
use outbox_store::dedup;
use sqlx::MySqlPool;
use std::collections::HashSet;
use tencent_im::{
    CreateGroupRequest, DeleteGroupMemberRequest, ForbidSendMsgRequest, SendGroupMsgRequest,
};

/// Tencent's limit on a group name, in bytes.
const MAX_GROUP_NAME_BYTES: usize = 30;

/// What became of one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImOutcome {
    /// The IM operation ran now.
    Applied,
    /// Its message had been sent before; nothing was done.
    Duplicate,
    /// The event needs nothing in IM (a silent type).
    Ignored,
}

/// Why a batch stopped.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Reading or writing the dedup records failed (worth a retry).
    #[error(transparent)]
    Dedup(#[from] outbox_store::Error),
    /// An IM call failed at the event after `done`; the events before it are
    /// done (and their messages recorded).
    #[error("{}", error.summary())]
    Im {
        /// Outcomes of the events before the failing one.
        done: Vec<ImOutcome>,
        /// The IM failure ([`tencent_im::Error::is_retryable`] says what next).
        error: tencent_im::Error,
    },
}

/// The room-event → IM operations of one dedup group.
#[derive(Debug)]
pub struct RoomIm {
    im: tencent_im::Client,
    pool: MySqlPool,
    dedup_group: String,
    group_id_template: String,
    bridge: BridgeConfig,
}

/// What one event asks of IM.
enum Action<'a> {
    EnsureGroup { name: &'a str },
    DestroyGroup,
    Message,
    Silent,
}

impl RoomIm {
    /// Operations dedup'ed in `dedup_group`, addressing groups by `group_id_template`.
    pub fn new(
        im: tencent_im::Client,
        pool: MySqlPool,
        dedup_group: String,
        group_id_template: String,
        bridge: BridgeConfig,
    ) -> Self {
        Self {
            im,
            pool,
            dedup_group,
            group_id_template,
            bridge,
        }
    }

    fn action<'a>(&self, event: &'a pb::RoomOutboxEvent) -> Action<'a> {
        match &event.payload {
            Some(Payload::RoomCreated(created)) => Action::EnsureGroup {
                name: &created.title,
            },
            Some(Payload::RoomClosed(_)) => Action::DestroyGroup,
            // A type newer than this build: nothing it knows to do in IM.
            None => Action::Silent,
            _ if self.bridge.silent_event_types.contains(&event.event_type) => Action::Silent,
            _ => Action::Message,
        }
    }

    /// Applies consecutive events of one room chain (or partition) in order,
    /// each inside its own trace context so the IM call's span joins it.
    pub async fn apply(
        &self,
        events: &[(&pb::RoomOutboxEvent, opentelemetry::Context)],
    ) -> Result<Vec<ImOutcome>, ApplyError> {
        let message_ids: Vec<&str> = events
            .iter()
            .filter(|(event, _)| matches!(self.action(event), Action::Message))
            .map(|(event, _)| event.event_id.as_str())
            .collect();
        let already_sent = if message_ids.is_empty() {
            HashSet::new()
        } else {
            dedup::processed(&self.pool, &self.dedup_group, &message_ids).await?
        };
        let mut sent: Vec<&str> = Vec::new();
        let mut outcomes = Vec::with_capacity(events.len());
        for (event, trace) in events {
            let applied = opentelemetry::trace::FutureExt::with_context(
                self.apply_one(event, &already_sent, &sent),
                trace.clone(),
            );
            match applied.await {
                Ok(outcome) => {
                    if outcome == ImOutcome::Applied
                        && matches!(self.action(event), Action::Message)
                    {
                        sent.push(&event.event_id);
                    }
                    tracing::debug!(
                        dedup_group = %self.dedup_group,
                        event_id = %event.event_id,
                        room_id = %event.room_id,
                        event_type = %event.event_type,
                        ?outcome,
                        "room event bridged"
                    );
                    outcomes.push(outcome);
                }
                Err(error) => {
                    // Keep what did go out, so the retry skips it.
                    if let Err(record_error) = self.record(&sent).await {
                        tracing::warn!(dedup_group = %self.dedup_group, error = %record_error, "dedup record failed");
                    }
                    return Err(ApplyError::Im {
                        done: outcomes,
                        error,
                    });
                }
            }
        }
        self.record(&sent).await?;
        Ok(outcomes)
    }

    async fn apply_one(
        &self,
        event: &pb::RoomOutboxEvent,
        already_sent: &HashSet<String>,
        sent_now: &[&str],
    ) -> Result<ImOutcome, tencent_im::Error> {
        let group_id = group_id(&self.group_id_template, &event.room_id);
        match self.action(event) {
            Action::EnsureGroup { name } => {
                let name = group_name(name, &event.room_id);
                self.im
                    .ensure_group(&CreateGroupRequest::av_chat_room(&group_id, name))
                    .await?;
                Ok(ImOutcome::Applied)
            }
            Action::DestroyGroup => {
                self.im.destroy_group(&group_id).await?;
                Ok(ImOutcome::Applied)
            }
            Action::Silent => Ok(ImOutcome::Ignored),
            Action::Message
                if already_sent.contains(&event.event_id)
                    || sent_now.contains(&event.event_id.as_str()) =>
            {
                Ok(ImOutcome::Duplicate)
            }
            Action::Message => {
                let request = SendGroupMsgRequest::for_event(
                    &group_id,
                    &event.event_id,
                    room_event_message(event),
                );
                self.im.send_group_msg(&request).await?;
                if let Some(Payload::RoomUserKicked(kicked)) = &event.payload {
                    self.control_kicked_member(&group_id, kicked).await?;
                }
                Ok(ImOutcome::Applied)
            }
        }
    }

    async fn control_kicked_member(
        &self,
        group_id: &str,
        kicked: &pb::RoomUserKicked,
    ) -> Result<(), tencent_im::Error> {
        if self.bridge.kick_remove_member {
            self.im
                .delete_group_member(&DeleteGroupMemberRequest {
                    group_id: group_id.to_string(),
                    member_to_del_account: vec![kicked.target_id.clone()],
                    silence: 1,
                    reason: None,
                })
                .await?;
        }
        if self.bridge.kick_mute {
            let now_ms = service_kit::time::now_ms();
            let mute_secs = if kicked.ban_until_ms > now_ms {
                // Round up so the mute never ends before the ban.
                u64::try_from((kicked.ban_until_ms - now_ms + 999) / 1000).unwrap_or(0)
            } else {
                u64::try_from(self.bridge.kick_mute_default.as_millis() / 1000).unwrap_or(0)
            };
            if mute_secs > 0 {
                self.im
                    .forbid_send_msg(&ForbidSendMsgRequest {
                        group_id: group_id.to_string(),
                        members_account: vec![kicked.target_id.clone()],
                        mute_time: mute_secs,
                    })
                    .await?;
            }
        }
        Ok(())
    }

    async fn record(&self, sent: &[&str]) -> Result<(), outbox_store::Error> {
        dedup::record(
            &self.pool,
            &self.dedup_group,
            sent,
            service_kit::time::now_ms(),
        )
        .await
    }
}

/// The room title cut to Tencent's limit on a char boundary; the room id when empty.
fn group_name<'a>(title: &'a str, room_id: &'a str) -> &'a str {
    let name = if title.is_empty() { room_id } else { title };
    let mut cut = name.len().min(MAX_GROUP_NAME_BYTES);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    &name[..cut]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_names_fit_tencent_limit() {
        assert_eq!(group_name("", "room-1"), "room-1");
        assert_eq!(group_name("短标题", "r"), "短标题");
        let long = "语音房".repeat(10);
        let name = group_name(&long, "r");
        assert!(name.len() <= MAX_GROUP_NAME_BYTES && long.starts_with(name));
    }
}
