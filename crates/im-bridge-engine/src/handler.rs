//! The im-bridge's [`Handler`]: hands each partition's events to
//! [`room_im::RoomIm`] (which owns what an event means in IM, the same code
//! the relay's direct mode runs) and turns its answer into the runtime's
//! outcomes: IM throttling, server errors and an expired signature are
//! retried; any other IM failure is permanent and its Tencent error code ends
//! up in the dead-letter reason.
//!
//! The handler runs with one lane per room ([`Handler::PER_KEY_LANES`]): a
//! hot room waiting for its IM budget (40 messages a second per group) holds
//! only its own lane, never the quiet rooms of its partition, and the gifts
//! it cannot send yet come back as deferred with its next batch
//! (docs/design.md#hot-rooms).

use consumer_runtime::{BatchError, Delivery, Handler, HandlerError, Outcome};
use outbox_schema::pb;
use room_im::{ApplyError, ImOutcome, RoomIm};

/// The im-bridge's [`Handler`].
#[derive(Debug)]
pub struct ImBridgeHandler {
    room_im: RoomIm,
}

impl ImBridgeHandler {
    /// A handler running `room_im` (dedup'ed in the consumer group).
    pub fn new(room_im: RoomIm) -> Self {
        Self { room_im }
    }

    /// Registers the metrics of its IM sends (`im_*_total`).
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.room_im.register_metrics(registry);
    }

    async fn apply(
        &self,
        batch: &[Delivery<pb::RoomOutboxEvent>],
    ) -> Result<Vec<Outcome>, BatchError> {
        let events: Vec<_> = batch
            .iter()
            .map(|delivery| (&*delivery.message, delivery.trace_context()))
            .collect();
        match self.room_im.apply(&events).await {
            Ok(outcomes) => Ok(outcomes.into_iter().map(outcome).collect()),
            Err(ApplyError::Dedup(error)) => Err(consumer_runtime::Error::from(error).into()),
            Err(ApplyError::Im { done, error }) => Err(BatchError::At {
                done: done.into_iter().map(outcome).collect(),
                error: handler_error(&error),
            }),
        }
    }
}

fn outcome(outcome: ImOutcome) -> Outcome {
    match outcome {
        ImOutcome::Applied => Outcome::Applied,
        ImOutcome::Duplicate => Outcome::Duplicate,
        ImOutcome::Ignored => Outcome::Ignored,
        ImOutcome::Deferred => Outcome::Deferred,
    }
}

/// The handler error for an IM failure; its text carries the Tencent code.
pub fn handler_error(error: &tencent_im::Error) -> HandlerError {
    if error.is_retryable() {
        HandlerError::Retryable(error.summary())
    } else {
        HandlerError::Permanent(error.summary())
    }
}

impl Handler<pb::RoomOutboxEvent> for ImBridgeHandler {
    const PER_KEY_LANES: bool = true;

    async fn handle(
        &self,
        delivery: &Delivery<pb::RoomOutboxEvent>,
    ) -> Result<Outcome, HandlerError> {
        match self.apply(std::slice::from_ref(delivery)).await {
            Ok(outcomes) => Ok(outcomes.first().copied().unwrap_or(Outcome::Ignored)),
            Err(BatchError::Whole(error) | BatchError::At { error, .. }) => Err(error),
        }
    }

    async fn handle_batch(
        &self,
        batch: &[Delivery<pb::RoomOutboxEvent>],
    ) -> Result<Vec<Outcome>, BatchError> {
        self.apply(batch).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn im_errors_map_by_class_and_keep_the_code() {
        let limited = tencent_im::Error::HttpStatus {
            api: "openim/sendmsg",
            status: 503,
        };
        assert!(matches!(
            handler_error(&limited),
            HandlerError::Retryable(_)
        ));
        let rejected = tencent_im::Error::HttpStatus {
            api: "openim/sendmsg",
            status: 403,
        };
        assert!(handler_error(&rejected).is_permanent());
    }
}
