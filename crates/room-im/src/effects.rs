//! What each room event does in IM:
//! - `RoomCreated` → ensure the room's IM group exists (idempotent);
//! - `RoomClosed` → destroy the group (idempotent);
//! - `RoomUserKicked` → a group message, then remove and/or mute the target
//!   per [`BridgeConfig`];
//! - any other event → one group custom message, unless its type is
//!   configured silent (acknowledged without a message).
//!
//! **Hot rooms** (docs/design.md#hot-rooms). Every group message waits for a
//! permit of its group (`tencent_im::pacer`, 40 a second). When a room has
//! more messages in hand than its group has permits free, its control
//! messages (membership, mic, kick, admin, treasure) go first, singly, in
//! their order and with `MsgPriority: High`; its gifts are then merged into
//! gift batches ([`crate::message::gift_batch_message`]), as many as the
//! budget allows, and the remaining gifts are deferred to the next batch the
//! runtime hands over. A room's lifecycle events (create, close) are never
//! passed: whatever follows a deferred gift is deferred too.
//!
//! Messages are external effects: ids already in `consumer_dedup` are
//! skipped, sent ones are recorded afterwards, and a single event's `Random`
//! derives from its `event_id` so a resend after a crash in between is
//! dropped by Tencent. A gift batch is written down before it is sent
//! (`outbox_store::im_batches`) and resent verbatim after a crash; so is a
//! gift sent alone, which a redelivery could otherwise merge into a batch.

use crate::{
    config::BridgeConfig,
    group_id,
    message::{gift_batch_message, room_event_message},
    stats::ImStats,
};
use outbox_schema::pb::{self, room_outbox_event::Payload};
use outbox_store::{im_batches, im_batches::PendingBatch};
use service_kit::db::statement::BoundedPool;
use tencent_im::{
    CreateGroupRequest, DeleteGroupMemberRequest, ForbidSendMsgRequest, MsgPriority,
    SendGroupMsgRequest,
};

/// Tencent's limit on a group name, in bytes.
const MAX_GROUP_NAME_BYTES: usize = 30;

mod pass;
use pass::Pass;

/// What became of one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImOutcome {
    /// The IM operation ran now.
    Applied,
    /// Its message had been sent before; nothing was done.
    Duplicate,
    /// The event needs nothing in IM (a silent type).
    Ignored,
    /// Its room's budget was spent: hand it over again with the next batch.
    Deferred,
}

/// Why a batch stopped.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Reading or writing the dedup records failed (worth a retry).
    #[error(transparent)]
    Dedup(#[from] outbox_store::Error),
    /// An IM call failed; the events of `done` (the batch's first ones) are
    /// settled, and the one after them is blamed for the failure. Later
    /// events may have been sent too: their records make them duplicates.
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
    /// Its dedup and pending-batch statements, each under
    /// `mysql.statement_timeout`.
    db: BoundedPool,
    dedup_group: String,
    group_id_template: String,
    bridge: BridgeConfig,
    stats: ImStats,
}

/// What one event asks of IM.
enum Action<'a> {
    EnsureGroup { name: &'a str },
    DestroyGroup,
    Message,
    Silent,
}

impl RoomIm {
    /// Operations dedup'ed in `dedup_group`, addressing groups by
    /// `group_id_template`; `db` given as a bare pool gets the default
    /// `mysql.statement_timeout`.
    pub fn new(
        im: tencent_im::Client,
        db: impl Into<BoundedPool>,
        dedup_group: String,
        group_id_template: String,
        bridge: BridgeConfig,
    ) -> Self {
        Self {
            stats: ImStats::new(&im),
            im,
            db: db.into(),
            dedup_group,
            group_id_template,
            bridge,
        }
    }

    /// The counters of what was sent (for metrics).
    pub fn stats(&self) -> &ImStats {
        &self.stats
    }

    /// Registers its counters (`im_*_total{consumer_group}`) in `registry`.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.stats.register(registry, &self.dedup_group);
    }

    /// The dedup group its records go to.
    pub fn dedup_group(&self) -> &str {
        &self.dedup_group
    }

    /// The IM client (its pacer's counters are part of the metrics).
    pub fn client(&self) -> &tencent_im::Client {
        &self.im
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

    /// Applies consecutive events (of one room, or one at a time) in order,
    /// each inside its own trace context so the IM call's span joins it;
    /// returns one outcome per event.
    pub async fn apply(
        &self,
        events: &[(&pb::RoomOutboxEvent, opentelemetry::Context)],
    ) -> Result<Vec<ImOutcome>, ApplyError> {
        let mut pass = Pass::start(self, events).await?;
        let result = pass.run().await;
        // Keep what did go out, so a retry skips it.
        let recorded = pass.record_sent().await;
        match (result, recorded) {
            (Err(error), Err(record_error)) => {
                tracing::warn!(dedup_group = %self.dedup_group, error = %record_error, "dedup record failed");
                Err(error)
            }
            (Err(error), Ok(())) => Err(error),
            (Ok(()), Err(record_error)) => Err(record_error.into()),
            (Ok(()), Ok(())) => Ok(pass.outcomes()),
        }
    }

    fn group_of(&self, event: &pb::RoomOutboxEvent) -> String {
        group_id(&self.group_id_template, &event.room_id)
    }

    async fn lifecycle(&self, event: &pb::RoomOutboxEvent) -> Result<(), tencent_im::Error> {
        let group_id = self.group_of(event);
        match self.action(event) {
            Action::EnsureGroup { name } => {
                let name = group_name(name, &event.room_id);
                self.im
                    .ensure_group(&CreateGroupRequest::av_chat_room(&group_id, name))
                    .await?;
            }
            Action::DestroyGroup => {
                self.im.destroy_group(&group_id).await?;
            }
            Action::Message | Action::Silent => {}
        }
        Ok(())
    }

    /// One event's own message (and a kick's member control).
    async fn send_single(&self, event: &pb::RoomOutboxEvent) -> Result<(), tencent_im::Error> {
        let group_id = self.group_of(event);
        let priority = if is_gift(event) {
            MsgPriority::Normal
        } else {
            MsgPriority::High
        };
        let request =
            SendGroupMsgRequest::for_event(&group_id, &event.event_id, room_event_message(event))
                .with_priority(priority);
        self.send(&request, 1).await?;
        if let Some(Payload::RoomUserKicked(kicked)) = &event.payload {
            self.control_kicked_member(&group_id, kicked).await?;
        }
        Ok(())
    }

    /// The gift batch message of `gifts` (one room's, in order), as it is
    /// written down before it is sent; `None` for no gifts.
    pub fn gift_batch(&self, gifts: &[&pb::RoomOutboxEvent]) -> Option<PendingBatch> {
        let first = gifts.first()?;
        let body = gift_batch_message(&first.room_id, gifts);
        let event_ids: Vec<String> = gifts.iter().map(|gift| gift.event_id.clone()).collect();
        Some(PendingBatch {
            batch_id: first.event_id.clone(),
            group_id: self.group_of(first),
            msg_random: batch_random(&event_ids),
            msg_body: serde_json::to_string(&body).unwrap_or_default(),
            event_ids,
        })
    }

    /// A gift's own message written down as a batch of one: exactly what
    /// [`RoomIm::send_single`] sends for it (its `Random` from its event id).
    pub fn single_gift(&self, event: &pb::RoomOutboxEvent) -> PendingBatch {
        PendingBatch {
            batch_id: event.event_id.clone(),
            group_id: self.group_of(event),
            msg_random: tencent_im::random_from_event_id(&event.event_id),
            msg_body: serde_json::to_string(&room_event_message(event)).unwrap_or_default(),
            event_ids: vec![event.event_id.clone()],
        }
    }

    /// Sends gift batches: written down together, sent one by one, then
    /// recorded with their events together (two transactions however many
    /// batches a storm room sends at once).
    async fn send_batches(&self, batches: &[PendingBatch]) -> Result<(), ApplyError> {
        let now_ms = service_kit::time::now_ms();
        im_batches::plan(&self.db, &self.dedup_group, batches, now_ms).await?;
        self.send_pending(batches).await
    }

    /// Sends written-down batches and records the events of those sent; on
    /// a failure the ones sent before it are still recorded.
    async fn send_pending(&self, batches: &[PendingBatch]) -> Result<(), ApplyError> {
        let mut failure = None;
        let mut sent = 0;
        for batch in batches {
            let msg_body = serde_json::from_str(&batch.msg_body).unwrap_or_default();
            let request = SendGroupMsgRequest {
                random: batch.msg_random,
                ..SendGroupMsgRequest::for_event(&batch.group_id, &batch.batch_id, msg_body)
            }
            .with_priority(MsgPriority::Normal);
            if let Err(error) = self.send(&request, batch.event_ids.len()).await {
                failure = Some(error);
                break;
            }
            sent += 1;
        }
        let now_ms = service_kit::time::now_ms();
        im_batches::settle(&self.db, &self.dedup_group, &batches[..sent], now_ms).await?;
        match failure {
            Some(error) => Err(ApplyError::Im {
                done: Vec::new(),
                error,
            }),
            None => Ok(()),
        }
    }

    async fn send(
        &self,
        request: &SendGroupMsgRequest,
        events: usize,
    ) -> Result<(), tencent_im::Error> {
        match self.im.send_group_msg(request).await {
            Ok(_) => {
                self.stats.sent(events);
                Ok(())
            }
            Err(error) => {
                self.stats.failed(&error);
                Err(error)
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
}

fn is_gift(event: &pb::RoomOutboxEvent) -> bool {
    matches!(event.payload, Some(Payload::RoomGiftSent(_)))
}

/// A batch's `Random`: derived from every event it carries, in order, so
/// the same batch always gets the same value.
fn batch_random(event_ids: &[String]) -> u32 {
    tencent_im::random_from_event_id(&event_ids.join(","))
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

    #[test]
    fn a_batch_random_depends_on_every_event_and_their_order() {
        let ids = |list: &[&str]| list.iter().map(|id| id.to_string()).collect::<Vec<_>>();
        let ab = batch_random(&ids(&["a", "b"]));
        assert_eq!(ab, batch_random(&ids(&["a", "b"])));
        assert_ne!(ab, batch_random(&ids(&["b", "a"])));
        assert_ne!(ab, batch_random(&ids(&["a", "b", "c"])));
    }
}
