//! One partition's worker: takes the partition's messages in offset order,
//! decodes them, runs the handler (a batch when several are queued, one by
//! one with retries when something fails), dead-letters what cannot be
//! handled, and stores `offset + 1` only once a message is done.

use crate::{
    ConsumerSettings,
    dead_letter::{self, DeadLetterProducer},
    handler::{BatchError, Handler, HandlerError, Outcome},
    kafka::KafkaConsumer,
    message::{Decode, Delivery},
    metrics::GroupMetrics,
};
use rdkafka::{
    Message, Offset, TopicPartitionList, consumer::Consumer as _, message::OwnedMessage,
};
use std::{
    collections::VecDeque,
    marker::PhantomData,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Instant,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// What every worker of one consumer shares.
pub(crate) struct Shared<M, H> {
    pub settings: ConsumerSettings,
    pub handler: Arc<H>,
    pub consumer: Arc<KafkaConsumer>,
    pub dead_letters: DeadLetterProducer,
    pub metrics: GroupMetrics,
    /// Signalled when a full partition's queue drains to half, so the
    /// dispatcher resumes polling at once.
    pub drained: tokio::sync::Notify,
    pub message: PhantomData<fn() -> M>,
}

/// One partition's worker and its inbox.
pub(crate) struct PartitionWorker<M, H> {
    pub shared: Arc<Shared<M, H>>,
    pub partition: i32,
    pub inbox: mpsc::UnboundedReceiver<OwnedMessage>,
    /// Messages dispatched but not yet taken from the inbox (pause/resume).
    pub depth: Arc<AtomicUsize>,
    /// Set by the rebalance callback when the partition is taken away.
    pub revoked: Arc<AtomicBool>,
    pub shutdown: CancellationToken,
    /// The previous worker of this partition, which must finish first so two
    /// workers never handle one partition at once.
    pub previous: Option<CancellationToken>,
    /// Cancelled when this worker exits.
    pub done: CancellationToken,
}

/// How a batch run ended.
enum BatchRun {
    /// Every message handled; the offset of the last one.
    Done(i64),
    /// The first `done` messages handled; the next failed with `error`.
    FailedAt { done: usize, error: HandlerError },
    /// Failed as a whole: handle one by one.
    Whole,
}

/// Whether the worker may go on after a step.
enum Step {
    Continue,
    Stop,
}

impl<M: Decode, H: Handler<M>> PartitionWorker<M, H> {
    /// Counts a message taken from the inbox; crossing down to half the
    /// queue limit wakes a dispatcher that holds back for this partition.
    fn took_one(&self) {
        let before = self.depth.fetch_sub(1, Ordering::Relaxed);
        if before == self.shared.settings.partition_queue_limit / 2 + 1 {
            self.shared.drained.notify_one();
        }
    }

    pub(crate) async fn run(mut self) {
        let _done = self.done.clone().drop_guard();
        if let Some(previous) = self.previous.take() {
            tokio::select! {
                _ = previous.cancelled() => {}
                _ = self.shutdown.cancelled() => return,
            }
        }
        // First offset not yet done; earlier ones arriving again (a partition
        // handed back after a rebalance) are skipped.
        let mut next_offset = i64::MIN;
        let mut queue: VecDeque<OwnedMessage> = VecDeque::new();
        loop {
            if queue.is_empty() {
                let received = tokio::select! {
                    biased;
                    _ = self.shutdown.cancelled() => return,
                    received = self.inbox.recv() => received,
                };
                let Some(message) = received else { return };
                self.took_one();
                queue.push_back(message);
            }
            while queue.len() < self.shared.settings.max_batch {
                let Ok(message) = self.inbox.try_recv() else {
                    break;
                };
                self.took_one();
                queue.push_back(message);
            }
            if self.stopped() {
                return;
            }
            while queue.front().is_some_and(|m| m.offset() < next_offset) {
                queue.pop_front();
            }
            if queue.is_empty() {
                continue;
            }
            if let Step::Stop = self.handle_front(&mut queue, &mut next_offset).await {
                return;
            }
        }
    }

    fn stopped(&self) -> bool {
        self.shutdown.is_cancelled() || self.revoked.load(Ordering::Relaxed)
    }

    /// Handles the undecodable message at the front, or the longest run of
    /// decodable ones (up to `max_batch`).
    async fn handle_front(
        &self,
        queue: &mut VecDeque<OwnedMessage>,
        next_offset: &mut i64,
    ) -> Step {
        let mut batch: Vec<Delivery<M>> = Vec::new();
        let mut raws: Vec<OwnedMessage> = Vec::new();
        while batch.len() < self.shared.settings.max_batch {
            let Some(raw) = queue.front() else { break };
            match self.decode(raw) {
                Ok(message) if message.is_unknown() => {
                    if !batch.is_empty() {
                        // Handle the run before it; the unknown one is next.
                        break;
                    }
                    let Some(raw) = queue.pop_front() else {
                        return Step::Continue;
                    };
                    tracing::info!(
                        consumer_group = %self.shared.settings.consumer_group,
                        event_id = message.event_id(),
                        room_id = message.room_id(),
                        partition = self.partition,
                        offset = raw.offset(),
                        "{} of a type this build does not know, acknowledged as ignored",
                        M::KIND
                    );
                    self.shared.metrics.unknown.inc();
                    self.store(raw.offset(), next_offset);
                    return Step::Continue;
                }
                Ok(message) => {
                    batch.push(Delivery {
                        message: Arc::new(message),
                        partition: self.partition,
                        offset: raw.offset(),
                        attempt: 1,
                        traceparent: crate::trace::header_traceparent(raw),
                    });
                    raws.extend(queue.pop_front());
                }
                Err(reason) if batch.is_empty() => {
                    let Some(raw) = queue.pop_front() else {
                        return Step::Continue;
                    };
                    return self
                        .dead_letter_undecodable(&raw, &reason, next_offset)
                        .await;
                }
                // Handle the run before it; the bad one is next.
                Err(_) => break,
            }
        }
        let now_ms = service_kit::time::now_ms();
        for delivery in &batch {
            self.shared
                .metrics
                .observe_lag(delivery.message.occurred_at_ms(), now_ms);
        }
        let mut prior_error = None;
        if batch.len() > 1 {
            let started = Instant::now();
            match self.run_batch(&batch).await {
                BatchRun::Done(last_offset) => {
                    let elapsed = started.elapsed().as_secs_f64();
                    for _ in &batch {
                        self.shared.metrics.processing.observe(elapsed);
                    }
                    self.store(last_offset, next_offset);
                    return Step::Continue;
                }
                BatchRun::FailedAt { done, error } => {
                    if let Some(last_done) = done.checked_sub(1).and_then(|i| batch.get(i)) {
                        self.store(last_done.offset, next_offset);
                    }
                    // The rest goes back to the queue, to be batched again
                    // once the failing message is settled.
                    let rest = raws.split_off((done + 1).min(raws.len()));
                    for raw in rest.into_iter().rev() {
                        queue.push_front(raw);
                    }
                    batch.truncate(done + 1);
                    batch.drain(..done);
                    raws.drain(..done.min(raws.len()));
                    prior_error = Some(error);
                }
                BatchRun::Whole => {}
            }
        }
        for (delivery, raw) in batch.into_iter().zip(&raws) {
            let started = Instant::now();
            let prior = prior_error.take();
            if let Step::Stop = self.handle_one(delivery, raw, prior, next_offset).await {
                return Step::Stop;
            }
            self.shared
                .metrics
                .processing
                .observe(started.elapsed().as_secs_f64());
        }
        Step::Continue
    }

    /// Runs the handler once over the whole batch.
    async fn run_batch(&self, batch: &[Delivery<M>]) -> BatchRun {
        let size = batch.len();
        let first_offset = batch.first().map_or(0, |d| d.offset);
        let last_offset = batch.last().map_or(0, |d| d.offset);
        let handler = self.shared.handler.clone();
        let mut owned: Vec<Delivery<M>> = batch.to_vec();
        let spans =
            crate::trace::start_consume_spans(&self.shared.settings.consumer_group, &mut owned);
        let span = tracing::info_span!(
            "consume_batch",
            consumer_group = %self.shared.settings.consumer_group,
            partition = self.partition,
            first_offset,
            size
        );
        // A task of its own, so a panicking handler is an error, not a dead worker.
        let task = tokio::spawn(async move { handler.handle_batch(&owned).await }.instrument(span));
        let joined = task.await;
        crate::trace::finish_consume_spans(spans, joined.as_ref().is_ok_and(Result::is_ok));
        let reason = match joined {
            Ok(Ok(outcomes)) if outcomes.len() == size => {
                for outcome in outcomes {
                    self.count(outcome);
                }
                return BatchRun::Done(last_offset);
            }
            Ok(Err(BatchError::At { done, error })) if done.len() < size => {
                let failed = done.len();
                for outcome in done {
                    self.count(outcome);
                }
                return BatchRun::FailedAt {
                    done: failed,
                    error,
                };
            }
            Ok(Ok(outcomes)) => format!("{} outcomes for {size} messages", outcomes.len()),
            Ok(Err(BatchError::At { done, error })) => {
                format!("{error} (reported after {} of {size} messages)", done.len())
            }
            Ok(Err(BatchError::Whole(error))) => error.to_string(),
            Err(join_error) => format!("handler panicked: {join_error}"),
        };
        // The failed batch counts as one failed attempt.
        self.shared.metrics.retried.inc();
        tracing::info!(
            consumer_group = %self.shared.settings.consumer_group,
            partition = self.partition,
            first_offset,
            size,
            error = %reason,
            "batch failed, handling one by one"
        );
        BatchRun::Whole
    }

    /// One message: retry with backoff up to the budget, then dead-letter.
    /// `prior_error` is the failure of a first attempt made within a batch.
    async fn handle_one(
        &self,
        mut delivery: Delivery<M>,
        raw: &OwnedMessage,
        mut prior_error: Option<HandlerError>,
        next_offset: &mut i64,
    ) -> Step {
        let settings = &self.shared.settings;
        let group = settings.consumer_group.as_str();
        let offset = delivery.offset;
        loop {
            let attempt = delivery.attempt;
            let result = match prior_error.take() {
                Some(error) => Err(error),
                None => self.run_handler(delivery.clone()).await,
            };
            let error = match result {
                Ok(outcome) => {
                    self.count(outcome);
                    self.store(offset, next_offset);
                    return Step::Continue;
                }
                Err(error) => error,
            };
            let event_id = delivery.message.event_id();
            let room_id = delivery.message.room_id();
            if !error.is_permanent() && attempt < settings.retry.max_attempts() {
                self.shared.metrics.retried.inc();
                let delay = settings.retry.backoff.delay(attempt);
                tracing::warn!(
                    consumer_group = group,
                    event_id,
                    room_id,
                    partition = self.partition,
                    offset,
                    attempt,
                    delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    %error,
                    "handler failed, retrying"
                );
                tokio::select! {
                    _ = self.shutdown.cancelled() => return Step::Stop,
                    _ = tokio::time::sleep(delay) => {}
                }
                if self.stopped() {
                    return Step::Stop;
                }
                delivery.attempt += 1;
                continue;
            }
            tracing::error!(
                consumer_group = group,
                event_id,
                room_id,
                partition = self.partition,
                offset,
                attempt,
                permanent = error.is_permanent(),
                %error,
                "handler gave up, dead-lettering"
            );
            let kind = if error.is_permanent() {
                "permanent"
            } else {
                "retries exhausted"
            };
            let reason = format!("{kind}: {error}");
            if let Step::Stop = self
                .publish_dead_letter(raw, &reason, attempt, Some(event_id))
                .await
            {
                return Step::Stop;
            }
            self.shared.metrics.dead_lettered_handler.inc();
            self.store(offset, next_offset);
            return Step::Continue;
        }
    }

    /// Calls the handler in its own task so a panic becomes a retryable error.
    async fn run_handler(&self, mut delivery: Delivery<M>) -> Result<Outcome, HandlerError> {
        let handler = self.shared.handler.clone();
        let mut spans = crate::trace::start_consume_spans(
            &self.shared.settings.consumer_group,
            std::slice::from_mut(&mut delivery),
        );
        let context = spans
            .first()
            .map(|span| span.context().clone())
            .unwrap_or_default();
        let span = tracing::info_span!(
            "consume",
            consumer_group = %self.shared.settings.consumer_group,
            event_id = %delivery.message.event_id(),
            room_id = %delivery.message.room_id(),
            partition = delivery.partition,
            offset = delivery.offset,
            attempt = delivery.attempt
        );
        let task = tokio::spawn(
            opentelemetry::trace::FutureExt::with_context(
                async move { handler.handle(&delivery).await },
                context,
            )
            .instrument(span),
        );
        let result = task.await.unwrap_or_else(|join_error| {
            Err(HandlerError::Retryable(format!(
                "handler panicked: {join_error}"
            )))
        });
        if let Some(span) = spans.pop() {
            span.finish(
                result
                    .as_ref()
                    .err()
                    .map(|error| error.to_string())
                    .as_deref(),
            );
        }
        result
    }

    /// Decodes a payload, or says why it is dead-lettered at once. The size
    /// check comes first so an oversized payload is never parsed (bounded
    /// work and memory per message whatever a producer sends).
    fn decode(&self, raw: &OwnedMessage) -> Result<M, String> {
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
    async fn dead_letter_undecodable(
        &self,
        raw: &OwnedMessage,
        reason: &str,
        next_offset: &mut i64,
    ) -> Step {
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
        self.store(raw.offset(), next_offset);
        Step::Continue
    }

    /// Publishes a dead letter, retrying until the broker takes it: the
    /// partition waits rather than lose the message. A copy too large to
    /// publish goes headers-only instead (`DeadLetterProducer::publish`).
    async fn publish_dead_letter(
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

    fn count(&self, outcome: Outcome) {
        self.shared.metrics.consumed.inc();
        if outcome == Outcome::Duplicate {
            self.shared.metrics.duplicates.inc();
        }
    }

    /// Marks `offset` done: librdkafka commits `offset + 1` with the next commit.
    fn store(&self, offset: i64, next_offset: &mut i64) {
        *next_offset = offset + 1;
        let mut offsets = TopicPartitionList::with_capacity(1);
        let added = offsets.add_partition_offset(
            &self.shared.settings.topic,
            self.partition,
            Offset::Offset(offset + 1),
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
