//! Scenario `presence`: presence at scale. Three room-service processes
//! (the real binary, [`crate::processes`]), 500 rooms and 50,000 members
//! (100 a room), every member heartbeating every 10 s (the offered rate is
//! 5,000 heartbeats/s), each heartbeat to a random instance as the gateway's
//! contract has it (two in three are forwarded to the room's holder).
//!
//! Setup (rooms created and members joined on the room's holder, 128 calls
//! in flight) is timed and reported on its own row. The heartbeats run on a
//! fixed schedule: member `u` is due at `t0 + round × 10 s + u × 10 s /
//! 50,000`, paced by sleeping until then (a late worker sends at once), for a
//! 30 s window. Reported: heartbeats/s answered over the window (target: the
//! offered rate), p50/p99 latency from the send and from the due time (the
//! latter counts any lag of the schedule), and the CPU share of the three
//! room-service processes (`utime + stime` from `/proc/<pid>/stat` over the
//! window ÷ (wall time × cores)), against the same processes idle for a few
//! seconds with every member present (baseline). Figures only.

use crate::{
    fixtures::BenchEnv,
    gateway,
    processes::{ProcessCluster, own_cpu_time, room_service_binary},
    report::{Report, Row},
    room_load::{Target, meta, millis_at, served_by},
};
use hdrhistogram::Histogram;
use hyapp_api::room::{CreateRoomRequest, HeartbeatRequest, JoinRoomRequest};
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

const SETUP_CONCURRENCY: usize = 128;
const WORKERS: usize = 256;

/// Sizes of one run.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    users: usize,
    rooms: usize,
    interval: Duration,
    window: Duration,
    idle: Duration,
}

impl Sizes {
    /// The full run's sizes, or the smoke run's.
    fn of_run(smoke: bool) -> Self {
        if smoke {
            Sizes {
                users: 300,
                rooms: 6,
                interval: Duration::from_secs(1),
                window: Duration::from_secs(2),
                idle: Duration::from_millis(500),
            }
        } else {
            Sizes {
                users: 50_000,
                rooms: 500,
                interval: Duration::from_secs(10),
                window: Duration::from_secs(30),
                idle: Duration::from_secs(5),
            }
        }
    }
}

/// What the heartbeat workers measured (µs histograms).
#[derive(Debug)]
struct Beats {
    from_send: Histogram<u64>,
    from_due: Histogram<u64>,
    forwarded: u64,
    failures: BTreeMap<String, u64>,
    last_sent: Option<Instant>,
}

impl Beats {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            from_send: Histogram::new(3)?,
            from_due: Histogram::new(3)?,
            forwarded: 0,
            failures: BTreeMap::new(),
            last_sent: None,
        })
    }

    fn merge(&mut self, other: Self) -> anyhow::Result<()> {
        self.from_send.add(&other.from_send)?;
        self.from_due.add(&other.from_due)?;
        self.forwarded += other.forwarded;
        for (what, count) in other.failures {
            *self.failures.entry(what).or_default() += count;
        }
        self.last_sent = self.last_sent.max(other.last_sent);
        Ok(())
    }
}

/// Runs the scenario.
pub async fn presence(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    let sizes = Sizes::of_run(env.smoke);
    let offered = sizes.users as f64 / sizes.interval.as_secs_f64();
    let Some(binary) = room_service_binary() else {
        report.add(row(
            "heartbeats/s",
            f64::NAN,
            "NOT MEASURED: binary not built".into(),
        ));
        return Ok(());
    };
    println!(
        "presence: {} members in {} rooms on 3 room-service processes, a heartbeat each every \
         {:?} ({offered:.0}/s) for {:?}",
        sizes.users, sizes.rooms, sizes.interval, sizes.window
    );
    let cluster = ProcessCluster::start(env, &binary, 3, &[]).await?;
    let targets = cluster.targets();
    let setup_began = Instant::now();
    join_everyone(&targets, sizes).await?;
    let setup = setup_began.elapsed();
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
    let share = |cpu: Duration, wall: Duration| cpu.as_secs_f64() / (wall.as_secs_f64() * cores);

    let idle_cpu = cluster.cpu_time()?;
    let idle_began = Instant::now();
    // The idle window is a measurement, timed by the clock.
    tokio::time::sleep(sizes.idle).await;
    let idle_share = share(cluster.cpu_time()? - idle_cpu, idle_began.elapsed());

    let (cpu_before, own_before, busy_began) =
        (cluster.cpu_time()?, own_cpu_time()?, Instant::now());
    let t0 = Instant::now() + Duration::from_millis(100);
    let beats = heartbeats(&targets, sizes, t0).await?;
    let busy = busy_began.elapsed();
    let busy_share = share(cluster.cpu_time()? - cpu_before, busy);
    let own_share = share(own_cpu_time()? - own_before, busy);
    // The schedule's length, or longer when the workers fell behind it.
    let sending = beats.last_sent.unwrap_or(t0).saturating_duration_since(t0);
    let wall = sizes.window.max(sending);
    cluster.stop(env).await?;

    report.add(throughput_row(sizes, &beats, wall, offered));
    report.add(row(
        "p99 heartbeat",
        millis_at(&beats.from_send, 0.99),
        format!(
            "ms from the send; p50 {:.1} ms; from the due time p50 {:.1}, p99 {:.1} ms",
            millis_at(&beats.from_send, 0.5),
            millis_at(&beats.from_due, 0.5),
            millis_at(&beats.from_due, 0.99)
        ),
    ));
    let mut cpu = row(
        "room-service CPU",
        busy_share * 100.0,
        format!(
            "% of {cores} cores, 3 processes together over the window; idle with every member \
             present {:.1} % (baseline); the load generator {:.1} %",
            idle_share * 100.0,
            own_share * 100.0
        ),
    );
    cpu.baseline = Some(idle_share * 100.0);
    report.add(cpu);
    report.add(row(
        "setup",
        setup.as_secs_f64(),
        format!(
            "s to create {} rooms and join {} members ({:.0} joins/s), each on the room's holder",
            sizes.rooms,
            sizes.users,
            sizes.users as f64 / setup.as_secs_f64()
        ),
    ));
    Ok(())
}

/// Heartbeats answered a second against the rate offered.
fn throughput_row(sizes: Sizes, beats: &Beats, wall: Duration, offered: f64) -> Row {
    let answered = beats.from_send.len();
    let failed: u64 = beats.failures.values().sum();
    let rate = answered as f64 / wall.as_secs_f64().max(f64::EPSILON);
    let mut throughput = row(
        "heartbeats/s",
        rate,
        format!(
            "{} members / {} rooms, every {:?} over {:.1} s, random instance per call \
             ({:.0} % forwarded); {failed} failed{}",
            sizes.users,
            sizes.rooms,
            sizes.interval,
            wall.as_secs_f64(),
            beats.forwarded as f64 * 100.0 / answered.max(1) as f64,
            failures_note(&beats.failures)
        ),
    );
    throughput.target = Some(format!(">= {:.0}", offered * 0.99));
    throughput.pass = Some(rate >= offered * 0.99);
    throughput.baseline = Some(offered);
    throughput.ratio = Some(rate / offered);
    throughput
}

fn row(metric: &str, measured: f64, note: String) -> Row {
    Row {
        scenario: format!("presence, {metric}"),
        metric: match metric {
            "heartbeats/s" => "beats/s",
            "room-service CPU" => "%",
            "setup" => "s",
            _ => "ms",
        }
        .into(),
        measured,
        target: None,
        baseline: None,
        ratio: None,
        pass: None,
        note,
    }
}

fn failures_note(failures: &BTreeMap<String, u64>) -> String {
    if failures.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = failures
        .iter()
        .map(|(what, n)| format!("{what} x{n}"))
        .collect();
    format!(" ({})", parts.join(", "))
}

fn room_of(user: usize, sizes: Sizes) -> usize {
    user % sizes.rooms
}

/// Creates every room on instance `room % 3` (which then holds it) and
/// joins its members there.
async fn join_everyone(targets: &[Target], sizes: Sizes) -> anyhow::Result<()> {
    let mut tasks = Vec::with_capacity(SETUP_CONCURRENCY);
    for task in 0..SETUP_CONCURRENCY {
        let targets = targets.to_vec();
        tasks.push(tokio::spawn(async move {
            for room in (task..sizes.rooms).step_by(SETUP_CONCURRENCY) {
                let room_id = format!("p-{room}");
                let mut client = targets[room % targets.len()].client.clone();
                client
                    .create_room(CreateRoomRequest {
                        meta: meta(format!("create-{room_id}")),
                        room_id: room_id.clone(),
                        owner_id: "host".into(),
                        title: "presence".into(),
                        mic_seat_count: 8,
                    })
                    .await?;
                for user in (room..sizes.users).step_by(sizes.rooms) {
                    client
                        .join_room(JoinRoomRequest {
                            meta: meta(format!("join-{room_id}-{user}")),
                            room_id: room_id.clone(),
                            user_id: format!("m{user}"),
                        })
                        .await?;
                }
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// Every member's heartbeats on the schedule, from `t0` for the window.
async fn heartbeats(targets: &[Target], sizes: Sizes, t0: Instant) -> anyhow::Result<Beats> {
    let end = t0 + sizes.window;
    let mut workers = Vec::with_capacity(WORKERS);
    for worker in 0..WORKERS {
        let targets = targets.to_vec();
        workers.push(tokio::spawn(async move {
            let mut beats = Beats::new()?;
            let mut rng = StdRng::seed_from_u64(0xBEA7 ^ worker as u64);
            let slot = sizes.interval.as_secs_f64() / sizes.users as f64;
            'rounds: for round in 0.. {
                for user in (worker..sizes.users).step_by(WORKERS) {
                    let due =
                        t0 + sizes.interval * round + Duration::from_secs_f64(slot * user as f64);
                    if due >= end {
                        break 'rounds;
                    }
                    // The heartbeat schedule's pacing.
                    tokio::time::sleep_until(due.into()).await;
                    let target = &targets[rng.random_range(0..targets.len())];
                    let sent = Instant::now();
                    beats.last_sent = Some(sent);
                    let reply = target
                        .client
                        .clone()
                        .heartbeat(HeartbeatRequest {
                            room_id: format!("p-{}", room_of(user, sizes)),
                            user_id: format!("m{user}"),
                        })
                        .await;
                    let answered = Instant::now();
                    match reply {
                        Ok(reply) => {
                            let _ = beats.from_send.record((answered - sent).as_micros() as u64);
                            let _ = beats.from_due.record((answered - due).as_micros() as u64);
                            let by = served_by(reply.metadata());
                            beats.forwarded += u64::from(by.is_some_and(|by| by != target.node_id));
                        }
                        Err(status) => {
                            *beats
                                .failures
                                .entry(gateway::describe(&status))
                                .or_default() += 1;
                        }
                    }
                }
            }
            anyhow::Ok(beats)
        }));
    }
    let mut total = Beats::new()?;
    for worker in workers {
        total.merge(worker.await??)?;
    }
    Ok(total)
}
