//! One partition's worker: takes the partition's messages from its inbox in
//! offset order and has a [`Runner`] handle them, in one of two shapes:
//!
//! - **partition order** (the default): one runner over the whole
//!   partition, strictly in offset order;
//! - **key lanes** ([`Handler::PER_KEY_LANES`]): one lane per Kafka message
//!   key (the room id), each a task with its own runner and queue, so a room
//!   that waits (for its IM budget, say) holds only its own lane and never
//!   the other rooms of its partition. Within a lane, order is the
//!   partition's. The committed offset is the lowest one still outstanding
//!   in any lane ([`OffsetLedger`]). At most `partition_queue_limit`
//!   messages are in the lanes at once; past that the worker stops taking
//!   from the inbox and the dispatcher's usual hold-back applies.

use crate::{
    handler::Handler,
    ledger::OffsetLedger,
    message::Decode,
    runner::{Runner, Shared, Step},
};
use rdkafka::{Message, message::OwnedMessage};
use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};
use tokio::{sync::mpsc, task::JoinSet};
use tokio_util::sync::CancellationToken;

/// A lane's batch is this many times `consumer.max_batch`: a lane holds one
/// room, and a room that waits for its budget merges what it is handed (a
/// hot room's gifts into gift batches), so the larger its batch, the more
/// each of its messages carries. With 64 a storm room could pass at most
/// 64 gifts per message; 256 covers Tencent's 12 KB message (~90 gifts).
const LANE_BATCH_FACTOR: usize = 4;

/// Pause of a lane whose whole batch was deferred before it asks again, so
/// a handler that defers without making progress cannot spin a core.
const DEFERRED_PAUSE: Duration = Duration::from_millis(5);

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

/// The worker's view of one lane.
struct LaneSlot {
    inbox: mpsc::UnboundedSender<OwnedMessage>,
    /// Messages handed to the lane and not yet reported handled.
    pending: usize,
}

/// A lane's report: `handled` of its messages are finished.
struct LaneProgress {
    key: Vec<u8>,
    handled: usize,
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
        let runner = Arc::new(Runner {
            shared: self.shared.clone(),
            partition: self.partition,
            revoked: self.revoked.clone(),
            shutdown: self.shutdown.clone(),
            ledger: Arc::new(Mutex::new(OffsetLedger::default())),
        });
        if H::PER_KEY_LANES {
            self.run_lanes(runner).await;
        } else {
            self.run_in_order(&runner).await;
        }
    }

    /// Takes `message` on in the ledger; false for an offset taken before
    /// (a partition re-fetched after a seek), which is skipped.
    fn take(&self, runner: &Runner<M, H>, message: &OwnedMessage) -> bool {
        let mut ledger = runner.ledger.lock().unwrap_or_else(|p| p.into_inner());
        ledger.take(message.offset())
    }

    /// Partition order: one queue, handled front first.
    async fn run_in_order(&mut self, runner: &Runner<M, H>) {
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
                if self.take(runner, &message) {
                    queue.push_back(message);
                }
            }
            while queue.len() < self.shared.settings.max_batch {
                let Ok(message) = self.inbox.try_recv() else {
                    break;
                };
                self.took_one();
                if self.take(runner, &message) {
                    queue.push_back(message);
                }
            }
            if runner.stopped() {
                return;
            }
            if queue.is_empty() {
                continue;
            }
            let before = queue.len();
            let limit = self.shared.settings.max_batch;
            if let Step::Stop = runner.handle_front(&mut queue, limit).await {
                return;
            }
            if queue.len() == before {
                tokio::time::sleep(DEFERRED_PAUSE).await;
            }
        }
    }

    /// Key lanes: each key's messages go to its lane; lanes finish in any
    /// order and report back, so the worker knows when a lane is idle (and
    /// drops it) and how many messages are in the lanes.
    async fn run_lanes(&mut self, runner: Arc<Runner<M, H>>) {
        let limit = self.shared.settings.partition_queue_limit;
        let (progress, mut reports) = mpsc::unbounded_channel::<LaneProgress>();
        let mut lanes: HashMap<Vec<u8>, LaneSlot> = HashMap::new();
        let mut in_lanes = 0usize;
        let mut tasks = JoinSet::new();
        loop {
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => break,
                Some(report) = reports.recv() => {
                    in_lanes -= report.handled;
                    settle(&mut lanes, report);
                }
                received = self.inbox.recv(), if in_lanes < limit => {
                    let Some(message) = received else { break };
                    self.took_one();
                    if runner.stopped() {
                        break;
                    }
                    if !self.take(&runner, &message) {
                        continue;
                    }
                    in_lanes += 1;
                    let key = message.key().unwrap_or_default().to_vec();
                    let slot = lanes.entry(key.clone()).or_insert_with(|| {
                        let (inbox, lane) = mpsc::unbounded_channel();
                        tasks.spawn(run_lane(runner.clone(), key, lane, progress.clone()));
                        LaneSlot { inbox, pending: 0 }
                    });
                    slot.pending += 1;
                    // A lane outlives its sender's use: it ends only once the
                    // worker drops the slot, so this send cannot fail.
                    let _ = slot.inbox.send(message);
                }
            }
            if runner.stopped() {
                break;
            }
        }
        // Dropping the lanes' senders lets each lane finish what it is
        // doing and end; the partition is not handed on before they have.
        drop(lanes);
        while tasks.join_next().await.is_some() {}
    }
}

/// Applies a lane's report; a lane with nothing pending is dropped, which
/// ends its task.
fn settle(lanes: &mut HashMap<Vec<u8>, LaneSlot>, report: LaneProgress) {
    let Some(slot) = lanes.get_mut(&report.key) else {
        return;
    };
    slot.pending = slot.pending.saturating_sub(report.handled);
    if slot.pending == 0 {
        lanes.remove(&report.key);
    }
}

/// One lane: its key's messages in order, batched as the partition's would be.
async fn run_lane<M: Decode, H: Handler<M>>(
    runner: Arc<Runner<M, H>>,
    key: Vec<u8>,
    mut inbox: mpsc::UnboundedReceiver<OwnedMessage>,
    progress: mpsc::UnboundedSender<LaneProgress>,
) {
    let max_batch = runner.shared.settings.max_batch * LANE_BATCH_FACTOR;
    let mut queue: VecDeque<OwnedMessage> = VecDeque::new();
    loop {
        if queue.is_empty() {
            match inbox.recv().await {
                Some(message) => queue.push_back(message),
                None => return,
            }
        }
        while queue.len() < max_batch {
            let Ok(message) = inbox.try_recv() else { break };
            queue.push_back(message);
        }
        if runner.stopped() {
            return;
        }
        let before = queue.len();
        let step = runner.handle_front(&mut queue, max_batch).await;
        let handled = before - queue.len();
        if handled > 0 {
            let report = LaneProgress {
                key: key.clone(),
                handled,
            };
            if progress.send(report).is_err() {
                return;
            }
        } else {
            tokio::time::sleep(DEFERRED_PAUSE).await;
        }
        if let Step::Stop = step {
            return;
        }
    }
}
