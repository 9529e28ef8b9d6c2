//! The dispatcher: one group consumer that hands each message to its
//! partition's worker, pauses partitions whose workers fall behind (so a
//! partition stuck in retries never blocks the others), follows rebalances,
//! and at shutdown lets in-flight work finish and commits what is done.

use crate::{
    ConsumerSettings, Error,
    dead_letter::DeadLetterProducer,
    handler::Handler,
    message::Decode,
    metrics::ConsumerMetrics,
    worker::{PartitionWorker, Shared},
};
use rdkafka::{
    ClientConfig, ClientContext, Message, TopicPartitionList,
    consumer::{
        BaseConsumer, CommitMode, Consumer as _, ConsumerContext, Rebalance, StreamConsumer,
    },
    error::{KafkaError, KafkaResult},
    message::OwnedMessage,
    types::RDKafkaErrorCode,
};
use std::{
    collections::HashMap,
    marker::PhantomData,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};
use tokio::{sync::mpsc, task::JoinSet};
use tokio_util::sync::CancellationToken;

/// The librdkafka consumer with our rebalance hooks.
pub(crate) type KafkaConsumer = StreamConsumer<RebalanceContext>;

/// How often paused partitions are checked for resumption.
const HOUSEKEEPING_INTERVAL: Duration = Duration::from_millis(50);

/// Rebalance hooks: flag revoked partitions so their workers stop taking
/// messages, and let the dispatcher retire them.
pub(crate) struct RebalanceContext {
    consumer_group: String,
    topic: String,
    revoke_flags: Mutex<HashMap<i32, Arc<AtomicBool>>>,
    revoked: Mutex<Vec<i32>>,
    revocation_pending: AtomicBool,
}

impl ClientContext for RebalanceContext {}

impl ConsumerContext for RebalanceContext {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(partitions) => {
                let partitions: Vec<i32> = partitions
                    .elements()
                    .iter()
                    .filter(|element| element.topic() == self.topic)
                    .map(|element| element.partition())
                    .collect();
                {
                    let flags = lock(&self.revoke_flags);
                    for partition in &partitions {
                        if let Some(flag) = flags.get(partition) {
                            flag.store(true, Ordering::Relaxed);
                        }
                    }
                }
                lock(&self.revoked).extend(partitions.iter().copied());
                self.revocation_pending.store(true, Ordering::Release);
                tracing::info!(consumer_group = %self.consumer_group, ?partitions, "partitions revoked");
            }
            Rebalance::Assign(partitions) => {
                let partitions: Vec<i32> = partitions
                    .elements()
                    .iter()
                    .map(|element| element.partition())
                    .collect();
                tracing::info!(consumer_group = %self.consumer_group, ?partitions, "partitions assigned");
            }
            Rebalance::Error(error) => {
                tracing::warn!(consumer_group = %self.consumer_group, %error, "rebalance failed");
            }
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, _offsets: &TopicPartitionList) {
        match result {
            Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(error) => {
                tracing::warn!(consumer_group = %self.consumer_group, %error, "offset commit failed");
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The guarded data are plain collections; a panic elsewhere leaves them usable.
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// The dispatcher's view of one partition's worker.
struct WorkerSlot {
    inbox: mpsc::UnboundedSender<OwnedMessage>,
    depth: Arc<AtomicUsize>,
    done: CancellationToken,
    paused: bool,
    /// Highest offset handed to the worker: a repeat is dropped, and a
    /// resumed partition is sought to the next one.
    last_dispatched: i64,
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
        let context = RebalanceContext {
            consumer_group: settings.consumer_group.clone(),
            topic: settings.topic.clone(),
            revoke_flags: Mutex::new(HashMap::new()),
            revoked: Mutex::new(Vec::new()),
            revocation_pending: AtomicBool::new(false),
        };
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
            retired: HashMap::new(),
            tasks: JoinSet::new(),
            shutdown: shutdown.child_token(),
        };
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING_INTERVAL);
        housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                received = self.kafka.recv() => match received {
                    Ok(message) => {
                        let message = message.detach();
                        dispatcher.retire_revoked();
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

struct Dispatcher<M, H> {
    shared: Arc<Shared<M, H>>,
    slots: HashMap<i32, WorkerSlot>,
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
        if message.offset() <= slot.last_dispatched {
            return;
        }
        // The topic has no transactions or compaction, so offsets are dense:
        // a jump means the broker skipped messages (seen with Tansu after a
        // fetch that starts inside a record batch). Never silent.
        if slot.last_dispatched >= 0 && message.offset() > slot.last_dispatched + 1 {
            tracing::warn!(
                consumer_group = %self.shared.settings.consumer_group,
                partition,
                expected = slot.last_dispatched + 1,
                received = message.offset(),
                "offset gap: the broker skipped messages of this partition"
            );
        }
        slot.last_dispatched = message.offset();
        let depth = slot.depth.fetch_add(1, Ordering::Relaxed) + 1;
        if slot.inbox.send(message).is_err() {
            // Unreachable in practice: the worker was alive a moment ago. The
            // message is not stored, so it is redelivered after a restart.
            slot.depth.fetch_sub(1, Ordering::Relaxed);
            tracing::error!(consumer_group = %self.shared.settings.consumer_group, partition, "partition worker gone, message dropped");
            return;
        }
        if depth >= limit && !slot.paused {
            let paused = self
                .partition_list(partition)
                .and_then(|list| self.shared.consumer.pause(&list));
            if let Some(slot) = self.slots.get_mut(&partition) {
                slot.paused = paused.is_ok();
            }
            tracing::debug!(consumer_group = %self.shared.settings.consumer_group, partition, depth, "partition paused");
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
                last_dispatched: -1,
            },
        );
    }

    fn partition_list(&self, partition: i32) -> KafkaResult<TopicPartitionList> {
        let mut list = TopicPartitionList::with_capacity(1);
        list.add_partition(&self.shared.settings.topic, partition);
        Ok(list)
    }

    /// Drops the workers of revoked partitions; a partition handed back later
    /// gets a new worker that waits for the old one.
    fn retire_revoked(&mut self) {
        let context = self.shared.consumer.context();
        if !context.revocation_pending.swap(false, Ordering::Acquire) {
            return;
        }
        let revoked: Vec<i32> = std::mem::take(&mut *lock(&context.revoked));
        for partition in revoked {
            lock(&context.revoke_flags).remove(&partition);
            if let Some(slot) = self.slots.remove(&partition) {
                self.retired.insert(partition, slot.done);
            }
        }
    }

    fn housekeeping(&mut self) {
        self.retire_revoked();
        let resume_below = self.shared.settings.partition_queue_limit / 2;
        let paused: Vec<i32> = self
            .slots
            .iter()
            .filter(|(_, slot)| slot.paused && slot.depth.load(Ordering::Relaxed) <= resume_below)
            .map(|(partition, _)| *partition)
            .collect();
        for partition in paused {
            let resumed = self
                .partition_list(partition)
                .and_then(|list| self.shared.consumer.resume(&list));
            if let Err(error) = &resumed {
                tracing::debug!(consumer_group = %self.shared.settings.consumer_group, partition, %error, "partition resume failed");
            }
            if let Some(slot) = self.slots.get_mut(&partition) {
                slot.paused = false;
            }
        }
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
