//! Handling a partition's messages: decode, run the handler (a batch when
//! several are queued, one by one with retries when something fails),
//! dead-letter what cannot be handled, and mark each offset finished in the
//! partition's [`OffsetLedger`], which stores the commit point. The worker
//! (`worker`) runs one [`Runner`] over the whole partition, or one per room
//! lane; the handling is the same.

use crate::{
    ConsumerSettings,
    dead_letter::DeadLetterProducer,
    handler::{BatchError, Handler, HandlerError, Outcome},
    kafka::KafkaConsumer,
    ledger::OffsetLedger,
    message::{Decode, Delivery},
    metrics::GroupMetrics,
};
use rdkafka::{Message, message::OwnedMessage};
use std::{
    collections::VecDeque,
    marker::PhantomData,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

mod settle;

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

/// Handles messages of one partition (all of them, or one lane's).
pub(crate) struct Runner<M, H> {
    pub shared: Arc<Shared<M, H>>,
    pub partition: i32,
    /// Set by the rebalance callback when the partition is taken away.
    pub revoked: Arc<AtomicBool>,
    pub shutdown: CancellationToken,
    /// The partition's ledger, shared by its lanes.
    pub ledger: Arc<Mutex<OffsetLedger>>,
}

/// How a batch run ended.
enum BatchRun {
    /// Every message handled, except those at these indexes, which the
    /// handler deferred.
    Done { deferred: Vec<usize> },
    /// The first `done` messages handled (some perhaps deferred); the next
    /// failed with `error`.
    FailedAt {
        outcomes: Vec<Outcome>,
        error: HandlerError,
    },
    /// Failed as a whole: handle one by one.
    Whole,
}

/// Whether the worker may go on after a step.
pub(crate) enum Step {
    Continue,
    Stop,
}

/// How handling one message ended.
enum One {
    Finished,
    Deferred,
    Stop,
}

impl<M: Decode, H: Handler<M>> Runner<M, H> {
    pub(crate) fn stopped(&self) -> bool {
        self.shutdown.is_cancelled() || self.revoked.load(Ordering::Relaxed)
    }

    /// Handles the undecodable message at the front, or the longest run of
    /// decodable ones (up to `limit`). Messages the handler defers go
    /// back to the front of `queue`, in their order.
    pub(crate) async fn handle_front(
        &self,
        queue: &mut VecDeque<OwnedMessage>,
        limit: usize,
    ) -> Step {
        let (batch, raws) = match self.take_run(queue, limit).await {
            Ok(run) => run,
            Err(step) => return step,
        };
        let now_ms = service_kit::time::now_ms();
        for delivery in &batch {
            self.shared
                .metrics
                .observe_lag(delivery.message.occurred_at_ms(), now_ms);
        }
        if batch.len() > 1 {
            return self.handle_batch(batch, raws, queue).await;
        }
        self.handle_singly(batch, raws, None, queue).await
    }

    /// Pops the longest decodable run at the front of `queue`; an unknown or
    /// undecodable message at the front is settled here instead (`Err`).
    async fn take_run(
        &self,
        queue: &mut VecDeque<OwnedMessage>,
        limit: usize,
    ) -> Result<(Vec<Delivery<M>>, Vec<OwnedMessage>), Step> {
        let mut batch: Vec<Delivery<M>> = Vec::new();
        let mut raws: Vec<OwnedMessage> = Vec::new();
        while batch.len() < limit {
            let Some(raw) = queue.front() else { break };
            match self.decode(raw) {
                Ok(message) if message.is_unknown() => {
                    if !batch.is_empty() {
                        // Handle the run before it; the unknown one is next.
                        break;
                    }
                    let Some(raw) = queue.pop_front() else {
                        return Err(Step::Continue);
                    };
                    self.acknowledge_unknown(&message, &raw);
                    return Err(Step::Continue);
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
                        return Err(Step::Continue);
                    };
                    return Err(self.dead_letter_undecodable(&raw, &reason).await);
                }
                // Handle the run before it; the bad one is next.
                Err(_) => break,
            }
        }
        Ok((batch, raws))
    }

    fn acknowledge_unknown(&self, message: &M, raw: &OwnedMessage) {
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
        self.finish([raw.offset()]);
    }

    /// Runs the handler over a batch; what it defers goes back to the queue,
    /// and after a failure the failing message is handled singly (with its
    /// retries) while the rest waits in the queue.
    async fn handle_batch(
        &self,
        mut batch: Vec<Delivery<M>>,
        mut raws: Vec<OwnedMessage>,
        queue: &mut VecDeque<OwnedMessage>,
    ) -> Step {
        let started = Instant::now();
        match self.run_batch(&batch).await {
            BatchRun::Done { deferred } => {
                let elapsed = started.elapsed().as_secs_f64();
                let finished = batch
                    .iter()
                    .enumerate()
                    .filter(|(index, _)| !deferred.contains(index))
                    .map(|(_, delivery)| delivery.offset);
                let mut count = 0;
                self.finish(finished.inspect(|_| count += 1));
                for _ in 0..count {
                    self.shared.metrics.processing.observe(elapsed);
                }
                requeue(queue, select(raws, &deferred));
                Step::Continue
            }
            BatchRun::FailedAt { outcomes, error } => {
                let failed = outcomes.len();
                let deferred: Vec<usize> = deferred_indexes(&outcomes);
                self.finish(
                    (0..failed)
                        .filter(|index| !deferred.contains(index))
                        .map(|index| batch[index].offset),
                );
                // The rest goes back to the queue, to be batched again once
                // the failing message is settled; deferred ones go first.
                let rest = raws.split_off((failed + 1).min(raws.len()));
                requeue(queue, rest);
                let failing = raws.split_off(failed.min(raws.len()));
                requeue(queue, select(raws, &deferred));
                batch.truncate(failed + 1);
                batch.drain(..failed);
                self.handle_singly(batch, failing, Some(error), queue).await
            }
            BatchRun::Whole => self.handle_singly(batch, raws, None, queue).await,
        }
    }

    /// Handles messages one by one, with retries; `prior_error` is the
    /// failure of the first one's attempt made within a batch.
    async fn handle_singly(
        &self,
        batch: Vec<Delivery<M>>,
        raws: Vec<OwnedMessage>,
        mut prior_error: Option<HandlerError>,
        queue: &mut VecDeque<OwnedMessage>,
    ) -> Step {
        let mut deferred = Vec::new();
        for (delivery, raw) in batch.into_iter().zip(raws) {
            let started = Instant::now();
            let prior = prior_error.take();
            match self.handle_one(delivery, &raw, prior).await {
                One::Stop => return Step::Stop,
                One::Deferred => deferred.push(raw),
                One::Finished => self
                    .shared
                    .metrics
                    .processing
                    .observe(started.elapsed().as_secs_f64()),
            }
        }
        requeue(queue, deferred);
        Step::Continue
    }

    /// Runs the handler once over the whole batch.
    async fn run_batch(&self, batch: &[Delivery<M>]) -> BatchRun {
        let size = batch.len();
        let first_offset = batch.first().map_or(0, |d| d.offset);
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
                for outcome in &outcomes {
                    self.count(*outcome);
                }
                return BatchRun::Done {
                    deferred: deferred_indexes(&outcomes),
                };
            }
            Ok(Err(BatchError::At { done, error })) if done.len() < size => {
                for outcome in &done {
                    self.count(*outcome);
                }
                return BatchRun::FailedAt {
                    outcomes: done,
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
    ) -> One {
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
                Ok(Outcome::Deferred) => return One::Deferred,
                Ok(outcome) => {
                    self.count(outcome);
                    self.finish([offset]);
                    return One::Finished;
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
                    _ = self.shutdown.cancelled() => return One::Stop,
                    _ = tokio::time::sleep(delay) => {}
                }
                if self.stopped() {
                    return One::Stop;
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
                return One::Stop;
            }
            self.shared.metrics.dead_lettered_handler.inc();
            self.finish([offset]);
            return One::Finished;
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
}

/// The indexes of the deferred outcomes.
fn deferred_indexes(outcomes: &[Outcome]) -> Vec<usize> {
    outcomes
        .iter()
        .enumerate()
        .filter(|(_, outcome)| **outcome == Outcome::Deferred)
        .map(|(index, _)| index)
        .collect()
}

/// The messages at `indexes`, in order.
fn select(raws: Vec<OwnedMessage>, indexes: &[usize]) -> Vec<OwnedMessage> {
    raws.into_iter()
        .enumerate()
        .filter(|(index, _)| indexes.contains(index))
        .map(|(_, raw)| raw)
        .collect()
}

/// Puts `raws` back at the front of `queue`, keeping their order.
fn requeue(queue: &mut VecDeque<OwnedMessage>, raws: Vec<OwnedMessage>) {
    for raw in raws.into_iter().rev() {
        queue.push_front(raw);
    }
}
