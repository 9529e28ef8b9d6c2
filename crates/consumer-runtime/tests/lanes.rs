//! Room lanes (`Handler::PER_KEY_LANES`) against the real broker: a room
//! whose handling waits holds only its own lane while the other rooms of its
//! partition go on, its order is kept, the committed offset never passes
//! it (a restart redelivers it), and deferred messages come back before the
//! ones queued after them.

use consumer_runtime::{
    BatchError, Consumer, ConsumerMetrics, Delivery, Handler, HandlerError, Outcome,
    testing::{TestProducer, envelope, test_settings, wait_until},
};
use outbox_schema::{names::dead_letter_topic, pb};
use std::{
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::{sync::Semaphore, task::JoinHandle};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);

fn event(room: &str, seq: u64) -> pb::RoomOutboxEvent {
    envelope(
        &uuid::Uuid::new_v4().to_string(),
        room,
        seq,
        pb::room_outbox_event::Payload::RoomUserJoined(pb::RoomUserJoined {
            user_id: format!("{room}-user-{seq}"),
        }),
    )
}

async fn fixture() -> (String, String) {
    let topic = testkit::unique("lane_topic_");
    let group = testkit::unique("lane_group_");
    // One partition: every room shares it, as rooms do in production.
    testkit::create_topic(&topic, 1).await;
    testkit::create_topic(&dead_letter_topic(&group), 1).await;
    (topic, group)
}

fn start<H: Handler<pb::RoomOutboxEvent>>(
    topic: &str,
    group: &str,
    handler: Arc<H>,
) -> (CancellationToken, JoinHandle<()>) {
    let settings = test_settings(&testkit::kafka_bootstrap(), topic, group, 16).unwrap();
    let consumer = Consumer::new(settings, handler, &ConsumerMetrics::unregistered()).unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { consumer.run(shutdown).await.unwrap() }
    });
    (shutdown, task)
}

async fn stop(consumer: (CancellationToken, JoinHandle<()>)) {
    consumer.0.cancel();
    consumer.1.await.unwrap();
}

/// Records `room/seq` of what it handles; the gated room's events wait for
/// a permit of the gate first.
#[derive(Default)]
struct Lanes {
    seen: Mutex<Vec<String>>,
    gate: Option<(String, Arc<Semaphore>)>,
}

impl Lanes {
    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    fn has(&self, name: &str) -> bool {
        self.seen().iter().any(|seen| seen == name)
    }
}

fn name(event: &pb::RoomOutboxEvent) -> String {
    format!("{}/{}", event.room_id, event.room_event_seq)
}

impl Handler<pb::RoomOutboxEvent> for Lanes {
    const PER_KEY_LANES: bool = true;

    async fn handle(
        &self,
        delivery: &Delivery<pb::RoomOutboxEvent>,
    ) -> Result<Outcome, HandlerError> {
        if let Some((room, gate)) = &self.gate
            && &delivery.message.room_id == room
        {
            gate.acquire().await.expect("gate open").forget();
        }
        self.seen.lock().unwrap().push(name(&delivery.message));
        Ok(Outcome::Applied)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_that_waits_holds_only_its_own_lane_and_the_commit_waits_for_it() {
    let (topic, group) = fixture().await;
    let producer = TestProducer::new(&testkit::kafka_bootstrap()).unwrap();
    let order = [
        event("hot", 1),
        event("quiet", 1),
        event("quiet", 2),
        event("hot", 2),
        event("quiet", 3),
    ];
    for event in &order {
        producer.send_event(&topic, event).await.unwrap();
    }
    let gate = Arc::new(Semaphore::new(0));
    let held = Arc::new(Lanes {
        gate: Some(("hot".into(), gate.clone())),
        ..Lanes::default()
    });
    let consumer = start(&topic, &group, held.clone());
    assert!(
        wait_until(WAIT, || async { held.has("quiet/3") }).await,
        "the quiet room went on while the hot one waited: {:?}",
        held.seen()
    );
    assert_eq!(held.seen(), ["quiet/1", "quiet/2", "quiet/3"]);
    // Stop with hot/1 still waiting: the committed offset may not pass it,
    // although every event after it was handled.
    stop(consumer).await;

    let again = Arc::new(Lanes::default());
    let consumer = start(&topic, &group, again.clone());
    assert!(
        wait_until(WAIT, || async {
            again.has("hot/2") && again.has("quiet/3")
        })
        .await
    );
    stop(consumer).await;
    let seen = again.seen();
    let of = |room: &str| -> Vec<String> {
        seen.iter()
            .filter(|seen| seen.starts_with(room))
            .cloned()
            .collect()
    };
    assert_eq!(
        of("hot/"),
        ["hot/1", "hot/2"],
        "redelivered from hot/1, in order"
    );
    assert_eq!(
        of("quiet/"),
        ["quiet/1", "quiet/2", "quiet/3"],
        "what follows hot/1's offset comes again (dedup absorbs it in real handlers)"
    );
}

/// Handles the first message of each batch and defers the rest.
#[derive(Default)]
struct OneAtATime {
    seen: Mutex<Vec<String>>,
    batches: Mutex<usize>,
}

impl Handler<pb::RoomOutboxEvent> for OneAtATime {
    const PER_KEY_LANES: bool = true;

    async fn handle(
        &self,
        delivery: &Delivery<pb::RoomOutboxEvent>,
    ) -> Result<Outcome, HandlerError> {
        self.seen.lock().unwrap().push(name(&delivery.message));
        Ok(Outcome::Applied)
    }

    async fn handle_batch(
        &self,
        batch: &[Delivery<pb::RoomOutboxEvent>],
    ) -> Result<Vec<Outcome>, BatchError> {
        *self.batches.lock().unwrap() += 1;
        let mut outcomes = vec![Outcome::Deferred; batch.len()];
        self.seen.lock().unwrap().push(name(&batch[0].message));
        outcomes[0] = Outcome::Applied;
        Ok(outcomes)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_messages_come_back_first_and_each_is_handled_once() {
    let (topic, group) = fixture().await;
    let producer = TestProducer::new(&testkit::kafka_bootstrap()).unwrap();
    let events: Vec<_> = (1..=40).map(|seq| event("room", seq)).collect();
    producer.send_events(&topic, &events).await.unwrap();
    let handler = Arc::new(OneAtATime::default());
    let consumer = start(&topic, &group, handler.clone());
    assert!(wait_until(WAIT, || async { handler.seen.lock().unwrap().len() >= 40 }).await);
    stop(consumer).await;
    let expected: Vec<String> = events.iter().map(name).collect();
    assert_eq!(
        *handler.seen.lock().unwrap(),
        expected,
        "in order, once each"
    );
    assert!(
        *handler.batches.lock().unwrap() > 1,
        "deferred messages were handed over again in batches"
    );
}
