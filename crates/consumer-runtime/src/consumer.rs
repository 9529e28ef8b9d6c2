//! The dispatcher: one group consumer that hands each message to its
//! partition's worker, holds back (stops polling) while the workers' queues
//! are full and pauses a partition that stays full meanwhile (so a partition
//! stuck in retries never blocks the others for long), follows rebalances,
//! re-fetches what the broker skipped, and at shutdown lets in-flight work
//! finish and commits what is done.

use crate::{
    ConsumerSettings, Error,
    dead_letter::DeadLetterProducer,
    handler::Handler,
    kafka::{AssignmentChange, KafkaConsumer, RebalanceContext, lock},
    message::Decode,
    metrics::ConsumerMetrics,
    offset_gap::{OffsetTracker, Verdict},
    runner::Shared,
    worker::PartitionWorker,
};
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    consumer::{CommitMode, Consumer as _},
    error::{KafkaError, KafkaResult},
    message::OwnedMessage,
    types::RDKafkaErrorCode,
};
use std::{
    collections::HashMap,
    marker::PhantomData,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};
use tokio::{sync::mpsc, task::JoinSet};
use tokio_util::sync::CancellationToken;

mod flow_control;

/// Bound on a seek or committed-offset lookup (both rare: gap repair and
/// partition assignment).
const SEEK_TIMEOUT: Duration = Duration::from_secs(5);

/// How often full and paused partitions are checked for resumption.
const HOUSEKEEPING_INTERVAL: Duration = Duration::from_millis(50);

/// The dispatcher's view of one partition's worker.
struct WorkerSlot {
    inbox: mpsc::UnboundedSender<OwnedMessage>,
    depth: Arc<AtomicUsize>,
    done: CancellationToken,
    paused: bool,
    /// Since when the queue has been at the limit (until it drains to half).
    full_since: Option<Instant>,
}

/// The dispatcher's offset bookkeeping of one assigned partition.
struct AssignedPartition {
    offsets: OffsetTracker,
    /// Last message received or seek made: a partition that shows neither
    /// while behind its high watermark is stalled.
    last_progress: Instant,
}

/// A group consumer of one topic, running `H` over messages of type `M`.
pub struct Consumer<M, H> {
    shared: Arc<Shared<M, H>>,
    kafka: Arc<KafkaConsumer>,
}

impl<M, H> std::fmt::Debug for Consumer<M, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("consumer_group", &self.shared.settings.consumer_group)
            .field("topic", &self.shared.settings.topic)
            .finish_non_exhaustive()
    }
}

impl<M: Decode, H: Handler<M>> Consumer<M, H> {
    /// Creates the group consumer and the dead-letter producer and subscribes
    /// to the topic. Nothing is consumed until [`Consumer::run`].
    pub fn new(
        settings: ConsumerSettings,
        handler: Arc<H>,
        metrics: &ConsumerMetrics,
    ) -> Result<Self, Error> {
        service_kit::adjusted::warn_each(&settings.consumer_group, &settings.adjusted);
        let context =
            RebalanceContext::new(settings.consumer_group.clone(), settings.topic.clone());
        let mut config = ClientConfig::new();
        for (key, value) in settings.consumer_properties() {
            config.set(key, value);
        }
        let consumer: KafkaConsumer = config.create_with_context(context)?;
        consumer.subscribe(&[settings.topic.as_str()])?;
        let consumer = Arc::new(consumer);
        let shared = Arc::new(Shared {
            dead_letters: DeadLetterProducer::new(&settings)?,
            metrics: metrics.for_group(&settings.consumer_group),
            drained: tokio::sync::Notify::new(),
            consumer: consumer.clone(),
            handler,
            settings,
            message: PhantomData,
        });
        Ok(Self {
            shared,
            kafka: consumer,
        })
    }

    /// The consumer group.
    pub fn consumer_group(&self) -> &str {
        &self.shared.settings.consumer_group
    }

    /// Consumes until `shutdown` is cancelled, then lets in-flight messages
    /// finish (up to the grace period) and commits the stored offsets.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), Error> {
        let settings = &self.shared.settings;
        let group = settings.consumer_group.as_str();
        tracing::info!(
            consumer_group = group,
            topic = %settings.topic,
            dead_letter_topic = %settings.dead_letter_topic,
            "consumer started"
        );
        let mut dispatcher = Dispatcher {
            shared: self.shared.clone(),
            slots: HashMap::new(),
            assigned: HashMap::new(),
            retired: HashMap::new(),
            tasks: JoinSet::new(),
            shutdown: shutdown.child_token(),
        };
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING_INTERVAL);
        housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            // Sums the queue depths: once per turn, not once per branch.
            let holding_back = dispatcher.holding_back();
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                received = self.kafka.recv(), if !holding_back => match received {
                    Ok(message) => {
                        let message = message.detach();
                        dispatcher.follow_rebalance();
                        dispatcher.dispatch(message);
                    }
                    Err(error) => {
                        tracing::warn!(consumer_group = group, %error, "kafka consume error");
                        tokio::select! {
                            _ = shutdown.cancelled() => break,
                            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                        }
                    }
                },
                _ = self.shared.drained.notified(), if holding_back => {
                    dispatcher.relieve_full_partitions();
                }
                _ = housekeeping.tick() => dispatcher.housekeeping(),
            }
        }
        tracing::info!(consumer_group = group, "consumer draining");
        dispatcher.drain(settings.shutdown_grace).await;
        match self.kafka.commit_consumer_state(CommitMode::Sync) {
            Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(error) => {
                tracing::warn!(consumer_group = group, %error, "final offset commit failed")
            }
        }
        self.kafka.unsubscribe();
        tracing::info!(consumer_group = group, "consumer stopped");
        Ok(())
    }
}

/// Seeks `partition` to `offset`: librdkafka drops what it had fetched
/// beyond and fetches from there.
fn seek<M, H>(shared: &Shared<M, H>, partition: i32, offset: i64) -> KafkaResult<()> {
    shared.consumer.seek(
        &shared.settings.topic,
        partition,
        Offset::Offset(offset),
        SEEK_TIMEOUT,
    )
}

struct Dispatcher<M, H> {
    shared: Arc<Shared<M, H>>,
    slots: HashMap<i32, WorkerSlot>,
    /// Offset bookkeeping per assigned partition (also those with no message
    /// yet, which can be stalled from the start).
    assigned: HashMap<i32, AssignedPartition>,
    /// Done tokens of workers whose partition was revoked or who died, so a
    /// successor waits for them.
    retired: HashMap<i32, CancellationToken>,
    tasks: JoinSet<()>,
    shutdown: CancellationToken,
}

impl<M: Decode, H: Handler<M>> Dispatcher<M, H> {
    fn context(&self) -> &RebalanceContext {
        self.shared.consumer.context()
    }

    fn dispatch(&mut self, message: OwnedMessage) {
        let partition = message.partition();
        if message.topic() != self.shared.settings.topic {
            return;
        }
        if !self.assigned.contains_key(&partition) {
            // Assigned before the dispatcher saw the change.
            self.track(&[partition]);
        }
        let offset = message.offset();
        let Some(assigned) = self.assigned.get_mut(&partition) else {
            return;
        };
        assigned.last_progress = Instant::now();
        let group = &self.shared.settings.consumer_group;
        match assigned.offsets.observe(offset) {
            Verdict::Dispatch => {}
            Verdict::Duplicate => return,
            Verdict::Unrepairable { expected } => {
                self.shared.metrics.offset_gaps_unrepaired.inc();
                tracing::error!(
                    consumer_group = %group,
                    partition,
                    expected,
                    received = offset,
                    "offset gap: messages of this partition no longer exist on the broker"
                );
            }
            Verdict::Rewind { to, expected } => {
                self.shared.metrics.offset_gap_rewinds.inc();
                tracing::warn!(
                    consumer_group = %group,
                    partition,
                    expected,
                    received = offset,
                    seek_to = to,
                    "offset gap: the broker skipped messages of this partition; fetching them again"
                );
                match seek(&self.shared, partition, to) {
                    Ok(()) => return,
                    Err(error) => {
                        // Without the seek nothing brings the skipped messages
                        // back; handing this one on at least loses no more.
                        assigned.offsets.abandon_repair(offset);
                        self.shared.metrics.offset_gaps_unrepaired.inc();
                        tracing::error!(consumer_group = %group, partition, expected, received = offset, %error, "offset gap: seek failed, skipped messages are not consumed");
                    }
                }
            }
        }
        self.hand_to_worker(partition, message);
    }

    fn hand_to_worker(&mut self, partition: i32, message: OwnedMessage) {
        let alive = self
            .slots
            .get(&partition)
            .is_some_and(|slot| !slot.inbox.is_closed());
        if !alive {
            self.spawn_worker(partition);
        }
        let limit = self.shared.settings.partition_queue_limit;
        let Some(slot) = self.slots.get_mut(&partition) else {
            return;
        };
        let depth = slot.depth.fetch_add(1, Ordering::Relaxed) + 1;
        if slot.inbox.send(message).is_err() {
            // Unreachable in practice: the worker was alive a moment ago. The
            // message is not stored, so it is redelivered after a restart.
            slot.depth.fetch_sub(1, Ordering::Relaxed);
            tracing::error!(consumer_group = %self.shared.settings.consumer_group, partition, "partition worker gone, message dropped");
            return;
        }
        if depth >= limit && slot.full_since.is_none() {
            slot.full_since = Some(Instant::now());
            tracing::debug!(consumer_group = %self.shared.settings.consumer_group, partition, depth, "partition queue full; holding back");
        }
    }

    fn spawn_worker(&mut self, partition: i32) {
        let mut previous = self.retired.remove(&partition);
        if let Some(old) = self.slots.remove(&partition) {
            previous = Some(old.done);
        }
        let (inbox_sender, inbox) = mpsc::unbounded_channel();
        let depth = Arc::new(AtomicUsize::new(0));
        let revoked = Arc::new(AtomicBool::new(false));
        let done = CancellationToken::new();
        lock(&self.context().revoke_flags).insert(partition, revoked.clone());
        let worker = PartitionWorker {
            shared: self.shared.clone(),
            partition,
            inbox,
            depth: depth.clone(),
            revoked,
            shutdown: self.shutdown.clone(),
            previous,
            done: done.clone(),
        };
        self.tasks.spawn(worker.run());
        self.slots.insert(
            partition,
            WorkerSlot {
                inbox: inbox_sender,
                depth,
                done,
                paused: false,
                full_since: None,
            },
        );
    }

    /// Starts the offset bookkeeping of newly assigned partitions at the
    /// group's committed offsets (where librdkafka starts fetching), so a
    /// first message past it, or none at all, is noticed.
    fn track(&mut self, partitions: &[i32]) {
        if partitions.is_empty() {
            return;
        }
        let topic = self.shared.settings.topic.as_str();
        let mut list = TopicPartitionList::with_capacity(partitions.len());
        for partition in partitions {
            list.add_partition(topic, *partition);
        }
        let committed = match self.shared.consumer.committed_offsets(list, SEEK_TIMEOUT) {
            Ok(committed) => committed,
            Err(error) => {
                tracing::warn!(consumer_group = %self.shared.settings.consumer_group, ?partitions, %error, "committed offsets unknown; a gap at the start of this assignment is caught only by the next message");
                TopicPartitionList::new()
            }
        };
        for partition in partitions {
            let start =
                committed
                    .find_partition(topic, *partition)
                    .and_then(|element| match element.offset() {
                        Offset::Offset(offset) => Some(offset),
                        _ => None,
                    });
            self.assigned.insert(
                *partition,
                AssignedPartition {
                    offsets: OffsetTracker::starting_at(start),
                    last_progress: Instant::now(),
                },
            );
        }
    }

    fn partition_list(&self, partition: i32) -> KafkaResult<TopicPartitionList> {
        let mut list = TopicPartitionList::with_capacity(1);
        list.add_partition(&self.shared.settings.topic, partition);
        Ok(list)
    }

    /// Applies rebalances in order: revoked partitions lose their workers (a
    /// partition handed back later gets a new worker that waits for the old
    /// one) and their bookkeeping; assigned ones start theirs.
    fn follow_rebalance(&mut self) {
        let context = self.shared.consumer.context();
        if !context.changes_pending.swap(false, Ordering::Acquire) {
            return;
        }
        let changes: Vec<AssignmentChange> = std::mem::take(&mut *lock(&context.changes));
        for change in changes {
            match change {
                AssignmentChange::Revoked(partitions) => {
                    for partition in partitions {
                        lock(&self.context().revoke_flags).remove(&partition);
                        self.assigned.remove(&partition);
                        if let Some(slot) = self.slots.remove(&partition) {
                            self.retired.insert(partition, slot.done);
                        }
                    }
                }
                AssignmentChange::Assigned(partitions) => self.track(&partitions),
            }
        }
    }

    fn housekeeping(&mut self) {
        self.follow_rebalance();
        self.relieve_full_partitions();
        self.repair_stalls();
        while let Some(finished) = self.tasks.try_join_next() {
            if let Err(error) = finished {
                tracing::error!(consumer_group = %self.shared.settings.consumer_group, %error, "partition worker failed");
            }
        }
        self.retired.retain(|_, done| !done.is_cancelled());
    }

    /// Stops the workers: they finish the message in hand (no new ones) within
    /// `grace`, after which they are aborted and their messages redelivered later.
    async fn drain(mut self, grace: Duration) {
        self.shutdown.cancel();
        self.slots.clear();
        let finished = tokio::time::timeout(grace, async {
            while self.tasks.join_next().await.is_some() {}
        })
        .await;
        if finished.is_err() {
            tracing::warn!(
                consumer_group = %self.shared.settings.consumer_group,
                grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
                "in-flight messages abandoned at shutdown"
            );
            self.tasks.shutdown().await;
        }
    }
}
