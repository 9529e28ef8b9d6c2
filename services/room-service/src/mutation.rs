//! Turns a batch of applied commands into what gets written: the
//! SaveMutation rows (command log, outbox envelopes, treasure wake-ups, room
//! meta), the Redis projection, and each command's reply.

use std::sync::Arc;

use hyapp_api::room::{CommandReply, EventSummary};
use outbox_schema::{EnvelopeContext, NewOutboxRow, envelope_for, shard_of, wakeup_for};
use prost::Message;
use room_core::{EventKind, RoomEvent, RoomState, RoomStatus};

use crate::cell::Cell;
use crate::deps::PipelineSettings;
use crate::redis::{Projection, presence_member};
use crate::store::{Mutation, NewCommandRow, RoomMetaUpdate};
use crate::timing::is_im_event;
use crate::validate::CommandRequest;

/// One accepted command of a batch.
#[derive(Debug)]
pub struct AppliedCommand {
    /// Room version after it.
    pub version: u64,
    /// Events it produced.
    pub events: Vec<RoomEvent>,
    /// Members dropped by a RoomClosed (their presence goes too).
    pub left_on_close: Vec<String>,
    /// State right after a CreateRoom, stored as the room's first snapshot.
    pub creation_image: Option<RoomState>,
}

/// What an accepted gift costs its sender, as room-core applied it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GiftCharge<'a> {
    /// Who pays.
    pub sender_id: &'a str,
    /// The gift (the debit's reason names it).
    pub gift_id: &'a str,
    /// `RoomGiftSent.total_value`: room-core's total, checked against the
    /// room's rules — the one figure the saga row, the debit and the outbox
    /// event all carry.
    pub amount: u64,
}

impl AppliedCommand {
    /// The wallet charge of an accepted SendGift, read from the
    /// `RoomGiftSent` event it emitted; `None` for every other command.
    pub fn gift_charge(&self) -> Option<GiftCharge<'_>> {
        self.events.iter().find_map(|event| match &event.kind {
            EventKind::RoomGiftSent {
                sender_id,
                gift_id,
                total_value,
                ..
            } => Some(GiftCharge {
                sender_id,
                gift_id,
                amount: *total_value,
            }),
            _ => None,
        })
    }
}

/// Everything one batch writes.
#[derive(Debug)]
pub struct Built {
    /// The SaveMutation (shared with the commit lane that writes it).
    pub mutation: Arc<Mutation>,
    /// Redis writes after the commit.
    pub projection: Projection,
    /// Each command's reply and (activity_async_outbox, tencent_im_async_outbox).
    pub replies: Vec<(CommandReply, (bool, bool))>,
}

fn status_name(status: RoomStatus) -> &'static str {
    match status {
        RoomStatus::Vacant => "vacant",
        RoomStatus::Open => "open",
        RoomStatus::Closed => "closed",
    }
}

/// The command log row of `request`, applied at `version` and answered with `reply`.
fn command_row(
    request: &CommandRequest,
    version: u64,
    reply: &CommandReply,
    now_ms: i64,
) -> NewCommandRow {
    NewCommandRow {
        command_id: request.command_id.clone(),
        room_version: version,
        command_name: request.command.name(),
        fingerprint: request.fingerprint,
        command: serde_json::to_vec(&request.command).unwrap_or_default(),
        applied_at_ms: now_ms,
        reply: reply.encode_to_vec(),
    }
}

/// The room's app code: its own once created, else the creating request's.
fn app_code_of(cell: &Cell, requests: &[&CommandRequest]) -> String {
    if cell.app_code.is_empty() {
        requests
            .first()
            .map(|request| request.app_code.clone())
            .unwrap_or_default()
    } else {
        cell.app_code.clone()
    }
}

/// The `rooms` row after the batch.
fn meta_update(app_code: String, state: &RoomState) -> RoomMetaUpdate {
    RoomMetaUpdate {
        app_code,
        status: status_name(state.status),
        owner_id: state.owner_id.clone(),
        title: state.title.clone(),
        version: state.version,
        event_seq: state.event_seq,
        heat: state.heat,
    }
}

/// Builds the batch's writes. `requests[i]` produced `applied[i]`.
pub fn build(
    settings: &PipelineSettings,
    cell: &Cell,
    requests: &[&CommandRequest],
    applied: &[AppliedCommand],
    final_state: &RoomState,
    now_ms: i64,
) -> Built {
    let room_id = final_state.room_id.clone();
    let shard = shard_of(&room_id);
    // Outbox rows are stamped when they are written, after any wallet debit,
    // not when the batch started: `created_at_ms` then measures the outbox's
    // own delay (commit to publish), which the relay's metrics report.
    let written_at_ms = service_kit::time::now_ms().max(now_ms);
    let app_code = app_code_of(cell, requests);
    let mut commands = Vec::with_capacity(requests.len());
    let mut replies = Vec::with_capacity(requests.len());
    let mut snapshot = None;
    let mut writes = Writes {
        settings,
        room_id: room_id.clone(),
        written_at_ms,
        presence_expiry: now_ms.saturating_add(settings.presence_ttl_ms),
        outbox: Vec::new(),
        projection: Projection::default(),
        heat_changed: false,
    };

    for (request, command) in requests.iter().zip(applied) {
        let context = EnvelopeContext {
            app_code: app_code.clone(),
            room_id: room_id.clone(),
            room_version: command.version,
            command_id: request.command_id.clone(),
            request_id: request.request_id.clone(),
            occurred_at_ms: now_ms,
            traceparent: request.traceparent.clone(),
            tracestate: String::new(),
        };
        let (summaries, im_outbox) = writes.events(&context, command);
        for user_id in &command.left_on_close {
            writes
                .projection
                .presence_remove
                .push(presence_member(&room_id, user_id));
        }
        if snapshot.is_none()
            && let Some(image) = &command.creation_image
        {
            snapshot = serde_json::to_vec(image)
                .ok()
                .map(|state| (image.version, state));
        }
        let reply = CommandReply {
            room_id: room_id.clone(),
            room_version: command.version,
            events: summaries,
            replayed: false,
        };
        commands.push(command_row(request, command.version, &reply, now_ms));
        replies.push((reply, (!command.events.is_empty(), im_outbox)));
    }
    let Writes {
        outbox,
        mut projection,
        heat_changed,
        ..
    } = writes;
    if heat_changed && final_state.status == RoomStatus::Open {
        projection.room_heat = Some((room_id.clone(), final_state.heat));
    }
    if !outbox.is_empty() {
        projection.nudge_shard = Some(shard);
    }
    let committed_gifts = requests
        .iter()
        .zip(applied)
        .filter(|(_, command)| command.gift_charge().is_some())
        .map(|(request, _)| request.command_id.clone())
        .collect();
    Built {
        mutation: Arc::new(Mutation {
            room_id: room_id.clone(),
            expected_version: cell.state.version,
            meta: meta_update(app_code, final_state),
            now_ms,
            commands,
            outbox,
            committed_gifts,
            snapshot,
        }),
        projection,
        replies,
    }
}

/// The outbox rows and Redis writes of a batch, gathered command by command.
struct Writes<'a> {
    settings: &'a PipelineSettings,
    room_id: String,
    written_at_ms: i64,
    presence_expiry: i64,
    outbox: Vec<NewOutboxRow>,
    projection: Projection,
    heat_changed: bool,
}

impl Writes<'_> {
    /// One command's events: an outbox row each (and a treasure wake-up
    /// row when one is due), their projection; returns their summaries for
    /// the reply and whether any of them goes to IM.
    fn events(
        &mut self,
        context: &EnvelopeContext,
        command: &AppliedCommand,
    ) -> (Vec<EventSummary>, bool) {
        let mut summaries = Vec::with_capacity(command.events.len());
        let mut im_outbox = false;
        for event in &command.events {
            let event_id = uuid::Uuid::now_v7().to_string();
            let envelope = envelope_for(context, event_id.clone(), event);
            let event_type = event.kind.event_type();
            im_outbox |= is_im_event(event_type);
            if self.settings.treasure_wakeups
                && let Some(wakeup) = wakeup_for(&envelope)
            {
                let wakeup_id = uuid::Uuid::now_v7().to_string();
                self.outbox.push(NewOutboxRow::wakeup(
                    &envelope,
                    &wakeup,
                    wakeup_id,
                    self.written_at_ms,
                ));
            }
            self.outbox
                .push(NewOutboxRow::event(&envelope, self.written_at_ms));
            summaries.push(EventSummary {
                event_id,
                event_type: event_type.into(),
                seq: event.seq,
            });
            project_event(
                &mut self.projection,
                &self.room_id,
                &event.kind,
                self.presence_expiry,
                &mut self.heat_changed,
            );
        }
        (summaries, im_outbox)
    }
}

fn project_event(
    projection: &mut Projection,
    room_id: &str,
    kind: &EventKind,
    expires_at_ms: i64,
    heat_changed: &mut bool,
) {
    match kind {
        EventKind::RoomCreated { owner_id, .. } => {
            *heat_changed = true;
            projection
                .presence_set
                .push((presence_member(room_id, owner_id), expires_at_ms));
        }
        EventKind::RoomUserJoined { user_id } => {
            let member = presence_member(room_id, user_id);
            projection
                .presence_remove
                .retain(|removed| *removed != member);
            projection.presence_set.push((member, expires_at_ms));
        }
        EventKind::RoomUserLeft { user_id, .. } => {
            let member = presence_member(room_id, user_id);
            projection.presence_set.retain(|(set, _)| *set != member);
            projection.presence_remove.push(member);
        }
        EventKind::RoomHeatChanged { .. } => *heat_changed = true,
        EventKind::RoomClosed { .. } => {
            projection.room_heat = None;
            projection.remove_room = Some(room_id.to_owned());
            projection.presence_set.clear();
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use room_core::RoomEvent;

    fn applied(kinds: Vec<EventKind>) -> AppliedCommand {
        AppliedCommand {
            version: 3,
            events: kinds
                .into_iter()
                .zip(1..)
                .map(|(kind, seq)| RoomEvent { seq, kind })
                .collect(),
            left_on_close: Vec::new(),
            creation_image: None,
        }
    }

    #[test]
    fn a_gift_is_charged_the_total_room_core_applied() {
        let gift = applied(vec![
            EventKind::RoomGiftSent {
                sender_id: "s".into(),
                receiver_id: "r".into(),
                gift_id: "g".into(),
                count: 3,
                unit_value: 10,
                total_value: 30,
            },
            EventKind::RoomHeatChanged {
                heat: 30,
                delta: 30,
            },
        ]);
        assert_eq!(
            gift.gift_charge(),
            Some(GiftCharge {
                sender_id: "s",
                gift_id: "g",
                amount: 30,
            })
        );
        let join = applied(vec![EventKind::RoomUserJoined {
            user_id: "u".into(),
        }]);
        assert_eq!(join.gift_charge(), None);
    }
}
