//! Scenario 4, `e2e-latency`: SendGift commands at a fixed rate over 100
//! rooms (20 in smoke) through room-service (in-process, embedded relay in mq
//! mode) to activity-consumer (in-process, fake IM), with the relay nudge on
//! and off. Per hop p50/p99: commit → published
//! (`room_outbox.delivered_at_ms - created_at_ms`), published → consumed
//! (`consumer_dedup.processed_at_ms - delivered_at_ms`), and commit → consumed.
//! "Commit" is the row's `created_at_ms`, stamped when room-service builds
//! the transaction (after the wallet debit), so it also counts the wait for a
//! commit lane and the transaction itself; the client-side command latency
//! is reported beside it.
//! Plots: latency histograms and per-second throughput / p99 over time.
//! `e2e_curve` runs before it, on the same harness ([`run`]): the latency
//! against the pipeline's capacity measured in the same run.

use crate::{
    consumers::{self, Kind},
    fixtures::{self, BenchEnv},
    relay_scenarios::{create_topic, mq_config, worker},
    report::{Report, Row},
};
use hdrhistogram::Histogram;
use hyapp_api::room::{
    CommandMeta, CreateRoomRequest, JoinRoomRequest, SendGiftRequest,
    room_service_client::RoomServiceClient,
};
use outbox_schema::names;
use service_kit::{duration::ConfigDuration, time::now_ms};
use sqlx::{MySqlPool, Row as _};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

mod plot;
use plot::plot;

fn meta(command_id: String) -> Option<CommandMeta> {
    Some(CommandMeta {
        command_id,
        request_id: String::new(),
        app_code: "hyapp".into(),
    })
}

/// Rooms the load is spread over.
pub fn rooms(env: &BenchEnv) -> usize {
    if env.smoke { 20 } else { 100 }
}

/// Runs scenario 4 with the nudge on, then off.
pub async fn e2e_latency(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    let (rate, seconds) = if env.smoke {
        (100u64, 2u64)
    } else {
        (1_000, 30)
    };
    let rooms = rooms(env);
    println!("e2e-latency: {rate} SendGift/s over {rooms} rooms for {seconds}s, nudge on and off");
    let mut results = Vec::new();
    for nudge in [true, false] {
        results.push((
            nudge,
            run(env, nudge, rooms, Load::Rate(rate), seconds).await?,
        ));
    }
    let off_total = results
        .iter()
        .find(|(nudge, _)| !nudge)
        .map(|(_, hops)| hops.total.value_at_quantile(0.99) as f64);
    for (nudge, hops) in &results {
        let variant = if *nudge { "nudge on" } else { "nudge off" };
        for (hop, histogram) in hops.per_hop() {
            let p99 = histogram.value_at_quantile(0.99) as f64;
            let headline = *nudge && hop == "commit->consumed";
            report.add(Row {
                scenario: format!("e2e-latency {hop}, {variant}"),
                metric: "p99 ms".into(),
                measured: p99,
                target: headline.then(|| "<= 50 ms".into()),
                baseline: headline.then_some(off_total).flatten(),
                ratio: headline
                    .then(|| off_total.map(|off| p99 / off.max(1.0)))
                    .flatten(),
                pass: headline.then_some(p99 <= 50.0 && hops.failed == 0),
                note: format!(
                    "{}{}",
                    hops.note(histogram),
                    if headline {
                        "; baseline = nudge off"
                    } else {
                        ""
                    }
                ),
            });
        }
    }
    plot(env, &results)
}

#[derive(Debug)]
pub(crate) struct Hops {
    pub(crate) publish: Histogram<u64>,
    pub(crate) consume: Histogram<u64>,
    pub(crate) total: Histogram<u64>,
    /// gRPC SendGift round trips seen by the load generator.
    pub(crate) command: Histogram<u64>,
    /// Per event, ms since the load started.
    events: Vec<Event>,
    /// Commands acknowledged per second (failed ones do not count).
    pub(crate) achieved_rate: f64,
    /// Commands that did not succeed: any fails the headline row, since
    /// latencies of the survivors would flatter a system that drops load.
    pub(crate) failed: u64,
}

impl Hops {
    /// The three hops, each with its name as the report spells it.
    pub(crate) fn per_hop(&self) -> [(&'static str, &Histogram<u64>); 3] {
        [
            ("commit->published", &self.publish),
            ("published->consumed", &self.consume),
            ("commit->consumed", &self.total),
        ]
    }

    /// A hop's row note: its p50, how many events and commands it covers.
    pub(crate) fn note(&self, hop: &Histogram<u64>) -> String {
        format!(
            "p50 {} ms, {} events, {} commands failed, acknowledged {:.0}/s; command p50 {} ms, p99 {} ms",
            hop.value_at_quantile(0.5),
            hop.len(),
            self.failed,
            self.achieved_rate,
            self.command.value_at_quantile(0.5),
            self.command.value_at_quantile(0.99),
        )
    }
}

#[derive(Debug, Clone, Copy)]
struct Event {
    created: i64,
    delivered: i64,
    processed: i64,
}

/// How the load generator sends SendGift during a run.
#[derive(Debug, Clone, Copy)]
pub enum Load {
    /// Open loop: this many commands per second, whatever the answers take.
    Rate(u64),
    /// Closed loop: this many callers, each sending its next gift as soon as
    /// the last one was answered — the rate the pipeline sustains.
    Saturate(usize),
}

pub(crate) async fn run(
    env: &BenchEnv,
    nudge: bool,
    rooms: usize,
    load: Load,
    seconds: u64,
) -> anyhow::Result<Hops> {
    let (pool, db) = fixtures::fresh_database(env).await?;
    let mysql_url = format!("{}/{db}", env.mysql);
    let namespace = format!(
        "benche2e{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let mq = mq_config(env, &namespace);
    create_topic(&env.bootstrap, &mq.topic(names::TOPIC_ROOM_OUTBOX)).await?;
    let group = format!(
        "bench-e2e-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    create_topic(&env.bootstrap, &mq.topic(&names::dead_letter_topic(&group))).await?;
    let fake = consumers::fake_im().await?;
    let wallet = fake_wallet::spawn(fake_wallet::FakeWalletConfig::default()).await?;

    let config = room_config(env, &db, &mysql_url, &mq, wallet.endpoint(), nudge);
    let app = room_service::App::build(config.validate()?).await?;
    let client = RoomServiceClient::connect(format!("http://{}", app.grpc_addr())).await?;
    let room_shutdown = CancellationToken::new();
    let room_task = tokio::spawn({
        let token = room_shutdown.clone();
        async move {
            if let Err(error) = app.run(token).await {
                eprintln!("room-service stopped: {error}");
            }
        }
    });
    let (consumer_shutdown, consumer_task) =
        consumers::spawn_consumer(Kind::Activity, &mysql_url, &mq, &group, &fake).await?;

    // Room leases live in Redis across runs: fresh room ids per run.
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    open_rooms(&client, &run_id, rooms).await?;
    wait_consumed(&pool, &group, 0, Duration::from_secs(60)).await?;

    let started_ms = now_ms();
    let started = Instant::now();
    let room_of = move |index: u64| format!("e2e-{run_id}-{}", index as usize % rooms);
    let duration = Duration::from_secs(seconds);
    let outcomes = match load {
        Load::Rate(rate) => open_loop(&client, room_of, rate, duration).await,
        Load::Saturate(callers) => closed_loop(&client, room_of, callers, duration).await,
    };
    let mut failed = 0u64;
    let mut command = Histogram::<u64>::new(3)?;
    for outcome in &outcomes {
        match outcome {
            Some(took) => command.record(took.as_millis() as u64)?,
            None => failed += 1,
        }
    }
    let achieved_rate = (outcomes.len() as u64 - failed) as f64 / started.elapsed().as_secs_f64();
    wait_consumed(&pool, &group, started_ms, Duration::from_secs(120)).await?;
    let mut hops = collect(&pool, &group, started_ms, achieved_rate).await?;
    hops.command = command;
    hops.failed = failed;
    if failed > 0 {
        println!("  e2e-latency: {failed} commands failed");
    }

    consumer_shutdown.cancel();
    let _ = consumer_task.await;
    room_shutdown.cancel();
    let _ = room_task.await;
    drop(wallet);
    pool.close().await;
    fixtures::drop_database(env, &db).await?;
    Ok(hops)
}

type Client = RoomServiceClient<tonic::transport::Channel>;

/// room-service in-process against the run's database, Redis, broker and
/// fake wallet, its embedded relay on (nudge as asked), IM off.
fn room_config(
    env: &BenchEnv,
    db: &str,
    mysql_url: &str,
    mq: &service_kit::mq::MqConfig,
    wallet_endpoint: String,
    nudge: bool,
) -> room_service::Config {
    let mut config = room_service::Config::default();
    config.mysql.url = mysql_url.to_string();
    config.mysql.max_connections = 32;
    config.redis.url = env.redis.clone();
    config.grpc_listen = "127.0.0.1:0".into();
    config.http_listen = "127.0.0.1:0".into();
    config.node_id = format!("bench-{db}");
    config.wallet.endpoint = wallet_endpoint;
    config.tencent_im.enabled = false;
    config.rocketmq = mq.clone();
    config.outbox_worker = worker(
        &format!("bench-e2e-{db}"),
        nudge,
        ConfigDuration::from_secs(1),
        &env.redis,
    );
    config.outbox_worker.enabled = true;
    config
}

/// Creates the rooms, one sender each, and sends one warm-up gift per room.
async fn open_rooms(client: &Client, run_id: &str, rooms: usize) -> anyhow::Result<()> {
    for room in 0..rooms {
        let mut client = client.clone();
        let room_id = format!("e2e-{run_id}-{room}");
        client
            .create_room(CreateRoomRequest {
                meta: meta(format!("create-{room_id}")),
                room_id: room_id.clone(),
                owner_id: "host".into(),
                title: "e2e".into(),
                mic_seat_count: 8,
            })
            .await?;
        client
            .join_room(JoinRoomRequest {
                meta: meta(format!("join-{room_id}")),
                room_id: room_id.clone(),
                user_id: "sender".into(),
            })
            .await?;
        send_gift(&mut client, &room_id, u64::MAX - room as u64).await?;
    }
    Ok(())
}

/// `rate` gifts a second for `duration`, each on its own task; one entry per
/// command: its round trip, or `None` when it failed.
async fn open_loop(
    client: &Client,
    room_of: impl Fn(u64) -> String,
    rate: u64,
    duration: Duration,
) -> Vec<Option<Duration>> {
    let mut ticker = tokio::time::interval(Duration::from_micros(1_000_000 / rate.max(1)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let total = (rate as f64 * duration.as_secs_f64()) as u64;
    let mut inflight = Vec::with_capacity(total as usize);
    for index in 0..total {
        ticker.tick().await;
        let mut client = client.clone();
        let room_id = room_of(index);
        inflight.push(tokio::spawn(async move {
            let sent = Instant::now();
            send_gift(&mut client, &room_id, index).await?;
            anyhow::Ok(sent.elapsed())
        }));
    }
    let mut outcomes = Vec::with_capacity(inflight.len());
    for task in inflight {
        outcomes.push(task.await.ok().and_then(Result::ok));
    }
    outcomes
}

/// `callers` loops, each sending a gift as soon as its last one was
/// answered, for `duration`; outcomes as [`open_loop`]'s.
async fn closed_loop(
    client: &Client,
    room_of: impl Fn(u64) -> String + Clone + Send + 'static,
    callers: usize,
    duration: Duration,
) -> Vec<Option<Duration>> {
    let deadline = Instant::now() + duration;
    let tasks: Vec<_> = (0..callers as u64)
        .map(|caller| {
            let mut client = client.clone();
            let room_of = room_of.clone();
            tokio::spawn(async move {
                let mut outcomes = Vec::new();
                // Caller c sends indexes c, c + callers, …: unique command ids.
                let mut index = caller;
                while Instant::now() < deadline {
                    let sent = Instant::now();
                    let answered = send_gift(&mut client, &room_of(index), index).await;
                    outcomes.push(answered.ok().map(|()| sent.elapsed()));
                    index += callers as u64;
                }
                outcomes
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.extend(task.await.unwrap_or_default());
    }
    outcomes
}

async fn send_gift(client: &mut Client, room_id: &str, index: u64) -> anyhow::Result<()> {
    client
        .send_gift(SendGiftRequest {
            meta: meta(format!("gift-{room_id}-{index}")),
            room_id: room_id.into(),
            sender_id: "sender".into(),
            receiver_id: "host".into(),
            gift_id: "rose".into(),
            count: 1,
            unit_value: 1,
        })
        .await?;
    Ok(())
}

/// Waits until every gift row created since `since_ms` has a dedup row of `group`.
async fn wait_consumed(
    pool: &MySqlPool,
    group: &str,
    since_ms: i64,
    limit: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let row = sqlx::query(
            "SELECT COUNT(*) AS total, COUNT(d.event_id) AS consumed FROM room_outbox o \
             LEFT JOIN consumer_dedup d ON d.consumer_group = ? AND d.event_id = o.event_id \
             WHERE o.event_type = 'RoomGiftSent' AND o.created_at_ms >= ?",
        )
        .bind(group)
        .bind(since_ms)
        .fetch_one(pool)
        .await?;
        let total: i64 = row.try_get("total")?;
        let consumed: i64 = row.try_get("consumed")?;
        if total > 0 && consumed >= total {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {consumed}/{total} gifts consumed within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn collect(
    pool: &MySqlPool,
    group: &str,
    since_ms: i64,
    achieved_rate: f64,
) -> anyhow::Result<Hops> {
    let rows = sqlx::query(
        "SELECT o.created_at_ms, o.delivered_at_ms, d.processed_at_ms \
         FROM room_outbox o JOIN consumer_dedup d ON d.consumer_group = ? AND d.event_id = o.event_id \
         WHERE o.event_type = 'RoomGiftSent' AND o.created_at_ms >= ?",
    )
    .bind(group)
    .bind(since_ms)
    .fetch_all(pool)
    .await?;
    let mut hops = Hops {
        publish: Histogram::new(3)?,
        consume: Histogram::new(3)?,
        total: Histogram::new(3)?,
        command: Histogram::new(3)?,
        events: Vec::with_capacity(rows.len()),
        achieved_rate,
        failed: 0,
    };
    for row in rows {
        let event = Event {
            created: row.try_get::<i64, _>("created_at_ms")? - since_ms,
            delivered: row.try_get::<i64, _>("delivered_at_ms")? - since_ms,
            processed: row.try_get::<i64, _>("processed_at_ms")? - since_ms,
        };
        hops.publish
            .record((event.delivered - event.created).max(0) as u64)?;
        hops.consume
            .record((event.processed - event.delivered).max(0) as u64)?;
        hops.total
            .record((event.processed - event.created).max(0) as u64)?;
        hops.events.push(event);
    }
    Ok(hops)
}
