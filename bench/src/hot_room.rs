//! Scenario `hot-room`: one room in a gift storm (3,000 gifts/s for 30 s, a
//! kick every 5 s) beside 200 ordinary rooms at 5 events/s each, produced
//! straight into the room topic (key = room id, as the relay publishes) while
//! im-bridge consumes in-process against the fake IM with Tencent's limit of
//! 40 messages a second per group ON. It measures what docs/design.md#hot-rooms
//! promises: no group over the limit, every gift shown exactly once, kicks
//! fast, the ordinary rooms unharmed (same-run baseline: those rooms alone at
//! the same rate) and how long the consumer's lag takes to return to zero.
//! `HYAPP_BENCH_HOT_ROOM_RATE=N` runs the storm at N gifts/s instead (to find
//! the rate one im-bridge sustains on the machine at hand).

use crate::{
    consumers::{self, Kind, OffsetWatcher},
    fixtures::{self, BenchEnv},
    relay_scenarios::{create_topic, mq_config},
    report::Report,
};
use fake_tencent_im::{MessageFilter, MessageKind, RecordedMessage, Stats};
use outbox_schema::{NewOutboxRow, names};
use rdkafka::ClientConfig;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use room_core::EventKind;
use serde_json::Value;
use service_kit::time::now_ms;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

mod rows;
use rows::add_rows;

/// Events a second of each ordinary room.
const ORDINARY_PER_SECOND: u64 = 5;
/// Index of the hot room; the ordinary rooms are `1..=n` (`consumers::room_name`).
const HOT: usize = 0;
/// Tencent's limit on messages a second per group, which the fake enforces.
const LIMIT: u64 = fake_tencent_im::GROUP_MSG_PER_SECOND as u64;
/// How often the producers wake to catch up with the wall clock.
const TICK: Duration = Duration::from_millis(5);

/// Sizes: gifts a second into the hot room, seconds, ordinary rooms, seconds
/// between kicks, seconds of the baseline. Three smoke seconds would see no
/// kick at 5 s: the smoke run kicks every second.
const FULL: (u64, u64, usize, u64, u64) = (3_000, 30, 200, 5, 10);
const SMOKE: (u64, u64, usize, u64, u64) = (300, 3, 20, 1, 2);

/// One run's load; `hot_per_second` 0 is the baseline (no hot room).
#[derive(Debug, Clone, Copy)]
struct Load {
    hot_per_second: u64,
    kick_every: u64,
    rooms: usize,
    seconds: u64,
}

/// What a run produced, and what the fake shows of it.
struct Outcome {
    hot: HotRoom,
    /// Events produced into the ordinary rooms.
    ordinary: usize,
    /// From the end of the load until the group's committed offsets reached the topic's end.
    lag_zero_after: Duration,
    stats: Stats,
    figures: Figures,
}

/// The broker's producer and the topic it writes.
struct Topic(FutureProducer, String);

/// Runs the scenario: the ordinary rooms alone (the baseline), then with the storm.
pub async fn hot_room(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    let (hot_per_second, seconds, rooms, kick_every, alone_seconds) =
        if env.smoke { SMOKE } else { FULL };
    let hot_per_second = std::env::var("HYAPP_BENCH_HOT_ROOM_RATE")
        .ok()
        .and_then(|rate| rate.parse().ok())
        .unwrap_or(hot_per_second);
    let storm = Load {
        hot_per_second,
        kick_every,
        rooms,
        seconds,
    };
    let alone = Load {
        hot_per_second: 0,
        seconds: alone_seconds,
        ..storm
    };
    println!(
        "hot-room: {hot_per_second} gifts/s into one room for {seconds}s, a kick every \
         {kick_every}s, beside {rooms} rooms at {ORDINARY_PER_SECOND}/s; baseline: them alone"
    );
    let (pool, db) = fixtures::fresh_database(env).await?;
    let mysql_url = format!("{}/{db}", env.mysql);
    let baseline = run(env, &mysql_url, alone).await?;
    let stormy = run(env, &mysql_url, storm).await?;
    add_rows(report, hot_per_second as f64, &stormy, &baseline);
    pool.close().await;
    fixtures::drop_database(env, &db).await
}

/// One run with its own topic, group and fake: warm-up, paced load, drain.
async fn run(env: &BenchEnv, mysql_url: &str, load: Load) -> anyhow::Result<Outcome> {
    let short_id = || uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let mq = mq_config(env, &format!("benchhr{}", short_id()));
    let topic = mq.topic(names::TOPIC_ROOM_OUTBOX);
    create_topic(&env.bootstrap, &topic).await?;
    let group = format!("bench-hot-room-{}", short_id());
    create_topic(&env.bootstrap, &mq.topic(&names::dead_letter_topic(&group))).await?;
    // Only the REST limit per API is lifted; the limit per group stays on.
    let fake = consumers::fake_im().await?;
    anyhow::ensure!(fake.config().group_msg_per_second == Some(LIMIT as u32));
    consumers::create_im_groups(&fake, load.rooms + 1).await?;
    let watcher = OffsetWatcher::new(&env.bootstrap, &group, &topic)?;
    let (shutdown, handle) =
        consumers::spawn_consumer(Kind::ImBridge, mysql_url, &mq, &group, &fake).await?;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &env.bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "2")
        .create()?;
    let topic = Topic(producer, topic);
    let partitions = warm_up(&topic, &watcher, load.rooms).await?;
    let on_hot_partition = |room: &usize| partitions[*room] == partitions[HOT];
    let neighbours = (1..=load.rooms)
        .filter(on_hot_partition)
        .map(group_of)
        .collect();
    let started_ms = now_ms();
    let (hot, ordinary, ended) = produce(&topic, load).await?;
    let deadline = Duration::from_secs(if env.smoke { 60 } else { 600 });
    let lag_zero_after = watcher.caught_up_after(ended, deadline).await?;
    shutdown.cancel();
    let _ = handle.await;
    let mut messages = fake.messages(&MessageFilter::default());
    messages.retain(|message| message.kind == MessageKind::Group);
    let figures = Figures::of(&messages, started_ms, &neighbours);
    let stats = fake.stats();
    Ok(Outcome {
        hot,
        ordinary,
        lag_zero_after,
        stats,
        figures,
    })
}

/// One join per room, consumed before the clock starts: the group has joined
/// and every connection is open, so no run bills its start-up to its first
/// events. Returns each room's partition.
async fn warm_up(topic: &Topic, watcher: &OffsetWatcher, rooms: usize) -> anyhow::Result<Vec<i32>> {
    let (now, deadline) = (now_ms(), Duration::from_secs(120));
    let row = |room| {
        let user_id = "warm-up".to_string();
        let joined = EventKind::RoomUserJoined { user_id };
        fixtures::event_row(&consumers::room_name(room), 1, now, joined)
    };
    let deliveries = (0..=rooms).map(|room| send(topic, &row(room)));
    let partitions = delivered(deliveries.collect::<anyhow::Result<_>>()?).await?;
    watcher.caught_up_after(Instant::now(), deadline).await?;
    Ok(partitions)
}

/// Produces the load (hot room and ordinary rooms side by side, each paced by
/// the wall clock); returns the hot room's producer, the ordinary events
/// produced and when producing ended.
async fn produce(topic: &Topic, load: Load) -> anyhow::Result<(HotRoom, usize, Instant)> {
    let mut hot = HotRoom::new(Duration::from_secs(load.kick_every));
    let hot_row = |index, elapsed, now| hot.row(index, elapsed, now);
    let ordinary_row = |index, _: Duration, now| ordinary_row(index, load.rooms, now);
    let ordinary_rate = load.rooms as u64 * ORDINARY_PER_SECOND;
    let duration = Duration::from_secs(load.seconds);
    let (hot_sent, ordinary_sent) = tokio::join!(
        paced(topic, load.hot_per_second, duration, hot_row),
        paced(topic, ordinary_rate, duration, ordinary_row),
    );
    let ended = Instant::now();
    let ((hot_deliveries, hot_took), (ordinary_deliveries, _)) = (hot_sent?, ordinary_sent?);
    let ordinary = ordinary_deliveries.len();
    delivered(hot_deliveries).await?;
    delivered(ordinary_deliveries).await?;
    hot.seconds = hot_took.as_secs_f64();
    Ok((hot, ordinary, ended))
}

/// Produces `per_second × duration` rows, `make(index, elapsed, now_ms)`, each
/// built (and so stamped) the moment it is due; a late tick catches up, so a
/// machine too slow for the rate shows as a longer time taken, never as
/// fewer rows. Returns the deliveries and the time producing took.
async fn paced(
    topic: &Topic,
    per_second: u64,
    duration: Duration,
    mut make: impl FnMut(usize, Duration, i64) -> NewOutboxRow,
) -> anyhow::Result<(Vec<DeliveryFuture>, Duration)> {
    let total = (per_second as f64 * duration.as_secs_f64()) as usize;
    let mut deliveries = Vec::with_capacity(total);
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let started = Instant::now();
    while deliveries.len() < total {
        ticks.tick().await;
        let elapsed = started.elapsed();
        let due = ((elapsed.as_secs_f64() * per_second as f64) as usize).min(total);
        while deliveries.len() < due {
            let row = make(deliveries.len(), elapsed, now_ms());
            deliveries.push(send(topic, &row)?);
        }
    }
    Ok((deliveries, started.elapsed()))
}

/// Enqueues `row` keyed by its room, as the relay publishes it.
fn send(Topic(producer, topic): &Topic, row: &NewOutboxRow) -> anyhow::Result<DeliveryFuture> {
    let record = FutureRecord::to(topic).key(&row.room_id);
    let record = record.payload(&row.payload);
    Ok(producer.send_result(record).map_err(|(error, _)| error)?)
}

/// Waits until the broker acknowledged every enqueued row; returns their partitions.
async fn delivered(deliveries: Vec<DeliveryFuture>) -> anyhow::Result<Vec<i32>> {
    let mut partitions = Vec::with_capacity(deliveries.len());
    for result in futures::future::join_all(deliveries).await {
        partitions.push(result?.map_err(|(error, _)| error)?.partition);
    }
    Ok(partitions)
}

/// The hot room's producer: its next kick, what it sent and how long it took.
#[derive(Debug, Default)]
struct HotRoom {
    kick_every: Duration,
    next_kick: Duration,
    gifts: HashSet<String>,
    kicks: usize,
    seconds: f64,
}

impl HotRoom {
    fn new(kick_every: Duration) -> Self {
        let next_kick = kick_every;
        HotRoom {
            kick_every,
            next_kick,
            ..HotRoom::default()
        }
    }

    /// The `index`-th event: a gift, or a kick when one is due.
    fn row(&mut self, index: usize, elapsed: Duration, now: i64) -> NewOutboxRow {
        let (room, seq) = (consumers::room_name(HOT), index as u64 + 2); // 1: the warm-up
        if elapsed >= self.next_kick {
            self.next_kick += self.kick_every;
            self.kicks += 1;
            return fixtures::kick_row(&room, seq, now);
        }
        let row = fixtures::gift_row(&room, seq, now);
        self.gifts.insert(row.event_id.clone());
        row
    }

    /// Gifts a second it reached.
    fn rate(&self) -> f64 {
        self.gifts.len() as f64 / self.seconds.max(1e-3)
    }
}

/// The `index`-th ordinary event: the rooms take turns (so each gets its
/// share of the rate), each room cycling join, mic taken, gift, gift, gift.
fn ordinary_row(index: usize, rooms: usize, now: i64) -> NewOutboxRow {
    let room = consumers::room_name(1 + index % rooms);
    let turn = (index / rooms) as u64;
    let seq = turn + 2; // seq 1 was the warm-up join
    let (user_id, seat_index) = (format!("fan-{}", turn / 5), 1);
    let kind = match turn % 5 {
        0 => EventKind::RoomUserJoined { user_id },
        1 => EventKind::RoomMicTaken {
            user_id,
            seat_index,
        },
        _ => return fixtures::gift_row(&room, seq, now),
    };
    fixtures::event_row(&room, seq, now, kind)
}

/// The events `message` shows as `(event_id, event_type, occurred_at_ms)`,
/// alone or as the rows of a gift batch, and whether it is a batch.
fn shown_events(message: &RecordedMessage) -> (Vec<(String, String, i64)>, bool) {
    let data = message.msg_body[0]["MsgContent"]["Data"].as_str();
    let data: Value = serde_json::from_str(data.unwrap_or("null")).unwrap_or_default();
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    let event_type = text(&data["event_type"]);
    if data["type"] == "room_event" {
        let at = data["occurred_at_ms"].as_i64().unwrap_or(0);
        return (vec![(text(&data["event_id"]), event_type, at)], false);
    }
    // A batch names its columns in "fields" (docs/im-messages.md).
    let items = |value: &Value| value.as_array().cloned().unwrap_or_default();
    let (fields, rows) = (items(&data["fields"]), items(&data["events"]));
    let column = |name: &str| fields.iter().position(|field| field == name);
    let (id, at) = (column("event_id"), column("occurred_at_ms"));
    let shown = rows.iter().map(|row| {
        let event_id = id.map(|id| text(&row[id])).unwrap_or_default();
        let at = at.and_then(|at| row[at].as_i64()).unwrap_or(0);
        (event_id, event_type.clone(), at)
    });
    (shown.collect(), data["type"] == "room_event_batch")
}

/// The figures of one run, read from the fake's group messages.
#[derive(Debug, Default)]
struct Figures {
    /// Group id → when each of its messages arrived.
    received: HashMap<String, Vec<u64>>,
    /// Hot room: times each gift id was shown; when each message carrying
    /// gifts arrived, and how many of those were batches.
    gifts_shown: HashMap<String, u32>,
    gift_times: Vec<u64>,
    gift_batches: u64,
    /// Publish → IM, ms: the hot room's kicks; the ordinary rooms' on the hot
    /// room's partition (its neighbours, how many) and on the others.
    kick_ms: Vec<i64>,
    neighbour_ms: Vec<i64>,
    neighbours: usize,
    other_ms: Vec<i64>,
}

impl Figures {
    /// The figures of `messages`; events older than `started_ms` (the warm-up) are not counted.
    fn of(messages: &[RecordedMessage], started_ms: i64, neighbours: &HashSet<String>) -> Self {
        let (mut figures, hot_group) = (Figures::default(), group_of(HOT));
        for message in messages {
            let group = message.group_id.clone().unwrap_or_default();
            let place = (group == hot_group, neighbours.contains(&group));
            figures.count(message, place, started_ms);
            let times = figures.received.entry(group).or_default();
            times.push(message.received_at_ms);
        }
        figures.neighbours = neighbours.len();
        figures
    }

    /// Publish → IM of every ordinary room.
    fn ordinary_ms(&self) -> Vec<i64> {
        [&self.neighbour_ms[..], &self.other_ms].concat()
    }

    /// Counts the events `message` shows, in the hot room's group or not, on
    /// its partition or not.
    fn count(&mut self, message: &RecordedMessage, place: (bool, bool), started_ms: i64) {
        let ((hot, neighbour), received) = (place, message.received_at_ms);
        let (events, batch) = shown_events(message);
        let gifts = events.iter().any(|(_, kind, _)| kind == "RoomGiftSent");
        if hot && gifts {
            self.gift_times.push(received);
        }
        self.gift_batches += u64::from(hot && batch);
        for (event_id, kind, at) in events.into_iter().filter(|event| event.2 >= started_ms) {
            let latency = received as i64 - at;
            match (hot, kind.as_str()) {
                (true, "RoomGiftSent") => *self.gifts_shown.entry(event_id).or_default() += 1,
                (true, "RoomUserKicked") => self.kick_ms.push(latency),
                (true, _) => {}
                (false, _) if neighbour => self.neighbour_ms.push(latency),
                (false, _) => self.other_ms.push(latency),
            }
        }
    }
}

/// The IM group of room `room` (as `consumers::create_im_groups` names it).
fn group_of(room: usize) -> String {
    format!("room_{}", consumers::room_name(room))
}
