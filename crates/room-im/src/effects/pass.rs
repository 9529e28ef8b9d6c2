//! One pass of [`RoomIm::apply`] over a run of events: what was sent
//! before, the hot-room budget (control messages first, gifts merged or
//! deferred), and the messages it sends and records.

use super::{Action, ApplyError, ImOutcome, RoomIm, is_gift};
use crate::message::split_gift_batches;
use outbox_schema::pb;
use outbox_store::{dedup, im_batches, im_batches::PendingBatch};
use std::collections::HashSet;

/// One call of [`RoomIm::apply`]: its events, what became of each, and the
/// single messages sent (recorded at the end).
pub(super) struct Pass<'a> {
    room_im: &'a RoomIm,
    events: &'a [(&'a pb::RoomOutboxEvent, opentelemetry::Context)],
    outcomes: Vec<Option<ImOutcome>>,
    /// Messages sent before (dedup records, or a batch resent just now) or
    /// taken on by this pass.
    planned: HashSet<&'a str>,
    sent: Vec<&'a str>,
    /// Set once a gift had to be deferred: everything after waits too.
    deferring: bool,
}

impl<'a> Pass<'a> {
    /// Reads what was sent before, and resends any batch a crash left
    /// unrecorded that carries one of these events.
    pub(super) async fn start(
        room_im: &'a RoomIm,
        events: &'a [(&'a pb::RoomOutboxEvent, opentelemetry::Context)],
    ) -> Result<Pass<'a>, ApplyError> {
        let message_ids: Vec<&str> = events
            .iter()
            .filter(|(event, _)| matches!(room_im.action(event), Action::Message))
            .map(|(event, _)| event.event_id.as_str())
            .collect();
        let group = &room_im.dedup_group;
        // Pending batches before dedup records: a batch settles (records its
        // events, deletes itself) in one transaction, so read in this order
        // an event is always seen in one of the two.
        let pending = im_batches::pending_for(&room_im.db, group, &message_ids).await?;
        let mut already_sent = if message_ids.is_empty() {
            HashSet::new()
        } else {
            dedup::processed(&room_im.db, group, &message_ids).await?
        };
        for batch in &pending {
            tracing::info!(dedup_group = %group, batch_id = %batch.batch_id, events = batch.event_ids.len(), "resending a gift batch a crash left unrecorded");
        }
        room_im.send_pending(&pending).await?;
        already_sent.extend(pending.into_iter().flat_map(|batch| batch.event_ids));
        let planned = events
            .iter()
            .map(|(event, _)| event.event_id.as_str())
            .filter(|id| already_sent.contains(*id))
            .collect();
        Ok(Pass {
            room_im,
            events,
            outcomes: vec![None; events.len()],
            planned,
            sent: Vec::new(),
            deferring: false,
        })
    }

    pub(super) async fn run(&mut self) -> Result<(), ApplyError> {
        let events = self.events;
        let mut segment: Vec<usize> = Vec::new();
        for index in 0..events.len() {
            let (event, trace) = &events[index];
            let room_changed = segment
                .first()
                .is_some_and(|first| events[*first].0.room_id != event.room_id);
            if room_changed {
                self.flush(&mut segment).await?;
            }
            match self.room_im.action(event) {
                Action::Silent => self.outcomes[index] = Some(ImOutcome::Ignored),
                // Sent before, or a second copy of an event this pass sends.
                Action::Message if !self.planned.insert(event.event_id.as_str()) => {
                    self.outcomes[index] = Some(ImOutcome::Duplicate);
                }
                Action::Message => segment.push(index),
                Action::EnsureGroup { .. } | Action::DestroyGroup => {
                    self.flush(&mut segment).await?;
                    if self.deferring {
                        self.outcomes[index] = Some(ImOutcome::Deferred);
                        continue;
                    }
                    let applied = opentelemetry::trace::FutureExt::with_context(
                        self.room_im.lifecycle(event),
                        trace.clone(),
                    );
                    applied.await.map_err(|error| self.failed(error))?;
                    self.outcomes[index] = Some(ImOutcome::Applied);
                }
            }
        }
        self.flush(&mut segment).await
    }

    /// Sends the messages of `segment` (one room, no lifecycle event
    /// between them): singly when the room's budget covers them all, else
    /// control messages first and gifts merged, deferring what the budget
    /// cannot carry now.
    async fn flush(&mut self, segment: &mut Vec<usize>) -> Result<(), ApplyError> {
        let indexes = std::mem::take(segment);
        let Some(first) = indexes.first() else {
            return Ok(());
        };
        if self.deferring {
            return self.defer(&indexes);
        }
        let group = self.room_im.group_of(self.events[*first].0);
        let budget = self.room_im.im.group_budget(&group);
        if indexes.len() <= budget {
            return self.send_singly(&indexes).await;
        }
        let (gifts, control): (Vec<usize>, Vec<usize>) = indexes
            .into_iter()
            .partition(|index| is_gift(self.events[*index].0));
        self.send_singly(&control).await?;
        let allowed = budget.saturating_sub(control.len()).max(1);
        self.send_gifts(&gifts, allowed).await
    }

    /// Sends each event's own message, in order. Gifts among them are
    /// written down first, as batches of one, and settled once sent: a gift
    /// sent alone and redelivered after a crash could otherwise be merged
    /// into a batch on a hotter pass and shown twice; written down, it is
    /// resent verbatim (same `Random`) instead.
    async fn send_singly(&mut self, indexes: &[usize]) -> Result<(), ApplyError> {
        let events = self.events;
        let room_im = self.room_im;
        let gifts: Vec<PendingBatch> = indexes
            .iter()
            .map(|index| events[*index].0)
            .filter(|event| is_gift(event))
            .map(|event| room_im.single_gift(event))
            .collect();
        let now_ms = service_kit::time::now_ms();
        im_batches::plan(&room_im.db, &room_im.dedup_group, &gifts, now_ms).await?;
        let mut sent_gifts = 0;
        let mut failure = None;
        for index in indexes {
            let (event, trace) = &events[*index];
            let event: &'a pb::RoomOutboxEvent = event;
            let sent = opentelemetry::trace::FutureExt::with_context(
                room_im.send_single(event),
                trace.clone(),
            );
            if let Err(error) = sent.await {
                failure = Some(error);
                break;
            }
            if is_gift(event) {
                sent_gifts += 1;
            } else {
                self.sent.push(event.event_id.as_str());
            }
            self.outcomes[*index] = Some(ImOutcome::Applied);
            self.log(event);
        }
        let now_ms = service_kit::time::now_ms();
        im_batches::settle(
            &room_im.db,
            &room_im.dedup_group,
            &gifts[..sent_gifts],
            now_ms,
        )
        .await?;
        match failure {
            Some(error) => Err(self.failed(error)),
            None => Ok(()),
        }
    }

    /// Merges `gifts` into batches, sends up to `allowed` of them (a batch of
    /// one as a single message) and defers the rest.
    async fn send_gifts(&mut self, gifts: &[usize], allowed: usize) -> Result<(), ApplyError> {
        let Some(first) = gifts.first() else {
            return Ok(());
        };
        let events: Vec<&pb::RoomOutboxEvent> =
            gifts.iter().map(|index| self.events[*index].0).collect();
        let room_id = &self.events[*first].0.room_id;
        let limit = self.room_im.bridge.max_message_bytes;
        let mut merged: Vec<(&[usize], PendingBatch)> = Vec::new();
        let mut alone = Vec::new();
        let mut offset = 0;
        for (number, batch) in split_gift_batches(room_id, &events, limit)
            .into_iter()
            .enumerate()
        {
            let indexes = &gifts[offset..offset + batch.len()];
            offset += batch.len();
            if number >= allowed {
                self.deferring = true;
                self.defer(indexes)?;
            } else if let [single] = indexes {
                alone.push(*single);
            } else if let Some(pending) = self.room_im.gift_batch(&batch) {
                merged.push((indexes, pending));
            }
        }
        self.send_merged(&merged).await?;
        // A batch of one is the last: it goes after the merged ones, as one event.
        self.send_singly(&alone).await
    }

    async fn send_merged(&mut self, merged: &[(&[usize], PendingBatch)]) -> Result<(), ApplyError> {
        let Some((first, _)) = merged.first() else {
            return Ok(());
        };
        let trace = self.events[first[0]].1.clone();
        let batches: Vec<PendingBatch> = merged.iter().map(|(_, batch)| batch.clone()).collect();
        let sent = opentelemetry::trace::FutureExt::with_context(
            self.room_im.send_batches(&batches),
            trace,
        );
        match sent.await {
            Ok(()) => {}
            Err(ApplyError::Im { error, .. }) => return Err(self.failed(error)),
            Err(other) => return Err(other),
        }
        for (indexes, batch) in merged {
            tracing::debug!(
                dedup_group = %self.room_im.dedup_group,
                batch_id = %batch.batch_id,
                events = indexes.len(),
                bytes = batch.msg_body.len(),
                "gift batch sent"
            );
            for index in *indexes {
                self.outcomes[*index] = Some(ImOutcome::Applied);
            }
        }
        Ok(())
    }

    fn defer(&mut self, indexes: &[usize]) -> Result<(), ApplyError> {
        self.room_im.stats.deferred(indexes.len());
        for index in indexes {
            self.outcomes[*index] = Some(ImOutcome::Deferred);
        }
        Ok(())
    }

    /// The error for an IM failure now: the settled first events are done.
    fn failed(&self, error: tencent_im::Error) -> ApplyError {
        let done = self.outcomes.iter().map_while(|outcome| *outcome).collect();
        ApplyError::Im { done, error }
    }

    fn log(&self, event: &pb::RoomOutboxEvent) {
        tracing::debug!(
            dedup_group = %self.room_im.dedup_group,
            event_id = %event.event_id,
            room_id = %event.room_id,
            event_type = %event.event_type,
            "room event bridged"
        );
    }

    pub(super) async fn record_sent(&self) -> Result<(), outbox_store::Error> {
        dedup::record(
            &self.room_im.db,
            &self.room_im.dedup_group,
            &self.sent,
            service_kit::time::now_ms(),
        )
        .await
    }

    pub(super) fn outcomes(&self) -> Vec<ImOutcome> {
        self.outcomes
            .iter()
            .map(|outcome| outcome.unwrap_or(ImOutcome::Deferred))
            .collect()
    }
}
