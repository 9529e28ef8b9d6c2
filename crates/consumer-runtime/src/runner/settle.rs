//! How a message's handling is settled: decoding with the size bound,
//! dead-lettering what never reaches the handler, counting outcomes, and
//! marking offsets finished in the partition's ledger (which stores the
//! commit point).

use super::{Runner, Step};
use crate::{
    dead_letter,
    handler::{Handler, Outcome},
    message::Decode,
};
use rdkafka::{
    Message, Offset, TopicPartitionList, consumer::Consumer as _, message::OwnedMessage,
};

impl<M: Decode, H: Handler<M>> Runner<M, H> {
    /// Decodes a payload, or says why it is dead-lettered at once. The size
    /// check comes first so an oversized payload is never parsed (bounded
    /// work and memory per message whatever a producer sends).
    pub(super) fn decode(&self, raw: &OwnedMessage) -> Result<M, String> {
        let payload = raw.payload().unwrap_or_default();
        let limit = self.shared.settings.max_message_bytes;
        if payload.len() > limit {
            return Err(format!(
                "oversized: {} bytes exceeds consumer.max_message_bytes ({limit})",
                payload.len()
            ));
        }
        M::decode(payload).map_err(|error| format!("undecodable: {error}"))
    }

    /// Dead-letters a message that never reached the handler (undecodable or
    /// oversized; both count as `undecodable` in the metric).
    pub(super) async fn dead_letter_undecodable(&self, raw: &OwnedMessage, reason: &str) -> Step {
        let event_id = dead_letter::header_text(raw, outbox_schema::names::HEADER_EVENT_ID);
        tracing::error!(
            consumer_group = %self.shared.settings.consumer_group,
            event_id = event_id.as_deref().unwrap_or(""),
            partition = self.partition,
            offset = raw.offset(),
            dead_letter_topic = self.shared.dead_letters.topic(),
            reason,
            "{} message not decoded, dead-lettering",
            M::KIND
        );
        if let Step::Stop = self
            .publish_dead_letter(raw, reason, 1, event_id.as_deref())
            .await
        {
            return Step::Stop;
        }
        self.shared.metrics.dead_lettered_undecodable.inc();
        self.finish([raw.offset()]);
        Step::Continue
    }

    /// Publishes a dead letter, retrying until the broker takes it: the
    /// partition waits rather than lose the message. A copy too large to
    /// publish goes headers-only instead (`DeadLetterProducer::publish`).
    pub(super) async fn publish_dead_letter(
        &self,
        raw: &OwnedMessage,
        reason: &str,
        attempts: u32,
        event_id: Option<&str>,
    ) -> Step {
        match self
            .shared
            .dead_letters
            .publish(raw, reason, attempts, event_id, &self.shutdown)
            .await
        {
            Ok(()) => Step::Continue,
            Err(dead_letter::Stopped) => Step::Stop,
        }
    }

    pub(super) fn count(&self, outcome: Outcome) {
        if outcome == Outcome::Deferred {
            return;
        }
        self.shared.metrics.consumed.inc();
        if outcome == Outcome::Duplicate {
            self.shared.metrics.duplicates.inc();
        }
    }

    /// Marks `offsets` finished in the ledger and stores the commit point
    /// when it moved: librdkafka commits it with the next commit.
    pub(crate) fn finish(&self, offsets: impl IntoIterator<Item = i64>) {
        let point = {
            // A poisoned lock means a lane panicked mid-update of plain
            // numbers; the sets are still consistent enough to go on.
            let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
            ledger.finish(offsets)
        };
        let Some(point) = point else { return };
        let offset = point - 1;
        let mut offsets = TopicPartitionList::with_capacity(1);
        let added = offsets.add_partition_offset(
            &self.shared.settings.topic,
            self.partition,
            Offset::Offset(point),
        );
        let stored = added.and_then(|()| self.shared.consumer.store_offsets(&offsets));
        if let Err(error) = stored {
            // After a revocation the partition is no longer ours; the new
            // owner redelivers and dedup absorbs it.
            tracing::debug!(
                consumer_group = %self.shared.settings.consumer_group,
                partition = self.partition,
                offset,
                %error,
                "offset not stored"
            );
        }
    }
}
