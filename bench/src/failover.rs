//! Scenario `failover`: three room-service processes (the real binary, see
//! [`crate::processes`]) over one database, one fake wallet and one Redis key
//! prefix, under the mixed workload's command cycle (join, take a mic, two
//! gifts, leave the mic, leave) in every room, one closed loop per room, sent
//! through a [`crate::gateway`] that follows the retry contract (random
//! instance per attempt; retried with the same command id after RetryInfo's
//! delay, or 100 ms doubling for a lost connection; 45 s budget). After a
//! warm-up the instance holding the most rooms (by `x-room-served-by`) is
//! killed with SIGKILL.
//!
//! Per room the holder held at the kill: the unavailability, from the
//! room's last successful reply before the kill to its first after (the
//! baseline: the longest such gap of any room before the kill, i.e. one
//! command's latency under this load); its p99 over those rooms; calls that
//! were still refused when their budget ran out; and for every gift whose
//! first attempt was in flight at the kill, the time from the kill to its
//! final answer (committed, or refused `GIFT_COMPENSATED` once the new holder
//! settled the dead holder's open saga). That figure includes the takeover,
//! so it bounds "settled after takeover" from above.
//!
//! The same run is repeated with fast takeover off (`redis.liveness_ttl: 0`,
//! the documented off switch for rolling upgrades): a dead holder's rooms
//! then wait for its leases to expire, which is how every crash behaved
//! before liveness keys. Both use the default `redis.lease_ttl` (30 s); a
//! smoke run shortens it to 2 s so both halves take seconds. Figures only.

use crate::{
    fixtures::BenchEnv,
    gateway::{self, Answer, Called, RetryPolicy},
    processes::{ProcessCluster, config_has_key, room_service_binary},
    report::{Report, Row},
    room_load::{CYCLE, Step, Target, meta, send_step},
};
use hyapp_api::room::CreateRoomRequest;
use rand::{SeedableRng, rngs::StdRng};
use std::{
    collections::BTreeMap,
    path::Path,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};
use tokio::sync::mpsc;

mod figures;
use figures::{analyse, rows};

const SEED: u64 = 0xFA11_0FE5;

/// One command of a room's loop.
#[derive(Debug)]
struct Record {
    gift: bool,
    sent: Instant,
    called: Called,
}

/// What one half (fast takeover on or off) measured.
#[derive(Debug, Default)]
struct Measured {
    rooms: usize,
    affected: usize,
    victim: String,
    /// Per affected room: last success before the kill → first after, ms.
    gaps_ms: Vec<f64>,
    /// Per affected room: kill → first success, ms.
    kill_to_first_ms: Vec<f64>,
    /// Rooms with no success after the kill.
    unrecovered: usize,
    steady_gap_ms: f64,
    gave_up: usize,
    refused: BTreeMap<String, u64>,
    /// Gifts in flight at the kill: kill → final answer, ms, and that answer.
    inflight_gifts: Vec<(f64, String)>,
    commands: usize,
    retries: u64,
    retry_info_delays: u64,
    /// Calls that needed more than docs/gateway.md's three retries.
    over_three_retries: usize,
}

/// Runs both halves and adds their rows.
pub async fn failover(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    let Some(binary) = room_service_binary() else {
        report.add(not_measured("room-service binary not built"));
        return Ok(());
    };
    let rooms = if env.smoke { 12 } else { 120 };
    let mut common: Vec<(&str, String)> = Vec::new();
    if env.smoke {
        common.push(("ROOM__REDIS__LEASE_TTL", "2s".into()));
    }
    let lease_ttl = if env.smoke { "2s" } else { "30s (default)" };
    let has_liveness = config_has_key(&binary, "redis.liveness_ttl");
    println!(
        "failover: {rooms} rooms on 3 room-service processes, holder of the most killed -9; \
         lease_ttl {lease_ttl}, liveness on then off"
    );
    let fast = run(env, &binary, rooms, &common).await?;
    let off = if has_liveness {
        let mut off_env = common.clone();
        off_env.push(("ROOM__REDIS__LIVENESS_TTL", "0".into()));
        Some(run(env, &binary, rooms, &off_env).await?)
    } else {
        None
    };
    let label = if has_liveness {
        "liveness_ttl 1s"
    } else {
        "NO liveness key in this build"
    };
    rows(
        report,
        "failover",
        label,
        lease_ttl,
        &fast,
        off.as_ref(),
        true,
    );
    if let Some(off) = &off {
        rows(
            report,
            "failover, liveness off",
            "liveness_ttl 0",
            lease_ttl,
            off,
            None,
            false,
        );
    }
    Ok(())
}

fn not_measured(why: &str) -> Row {
    Row {
        scenario: "failover".into(),
        metric: "ms".into(),
        measured: f64::NAN,
        target: Some("<= 2000".into()),
        baseline: None,
        ratio: None,
        pass: None,
        note: format!("NOT MEASURED: {why}"),
    }
}

/// One half: start, load, kill, wait for every room to answer again.
async fn run(
    env: &BenchEnv,
    binary: &Path,
    rooms: usize,
    extra: &[(&str, String)],
) -> anyhow::Result<Measured> {
    let policy = RetryPolicy::default();
    let (warm_up, after) = if env.smoke {
        (Duration::from_secs(1), Duration::from_millis(300))
    } else {
        (Duration::from_secs(5), Duration::from_secs(2))
    };
    let mut cluster = ProcessCluster::start(env, binary, 3, extra).await?;
    let targets = cluster.targets();
    let holders = Arc::new(Mutex::new(vec![String::new(); rooms]));
    create_rooms(&targets, rooms, &policy, &holders).await?;
    let kill_at = Arc::new(OnceLock::new());
    let stop = Arc::new(AtomicBool::new(false));
    let (recovered_tx, mut recovered) = mpsc::unbounded_channel();
    let mut tasks = Vec::with_capacity(rooms);
    for room in 0..rooms {
        let shared = RoomLoop {
            targets: targets.clone(),
            policy,
            holders: Arc::clone(&holders),
            kill_at: Arc::clone(&kill_at),
            stop: Arc::clone(&stop),
            recovered: recovered_tx.clone(),
        };
        tasks.push(tokio::spawn(shared.run(room)));
    }
    drop(recovered_tx);
    let started = Instant::now();
    // The warm-up is the measured steady state before the kill.
    tokio::time::sleep(warm_up).await;
    let (victim, affected) = {
        let holders = holders.lock().unwrap_or_else(|poison| poison.into_inner());
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for holder in holders.iter() {
            *counts.entry(holder.as_str()).or_default() += 1;
        }
        let (victim, _) = counts
            .iter()
            .filter(|(node, _)| !node.is_empty())
            .max_by_key(|(_, count)| **count)
            .ok_or_else(|| anyhow::anyhow!("no room has been served"))?;
        let victim = victim.to_string();
        let affected: Vec<bool> = holders.iter().map(|holder| *holder == victim).collect();
        (victim, affected)
    };
    let index = cluster
        .nodes
        .iter()
        .position(|node| node.target.node_id == victim)
        .ok_or_else(|| anyhow::anyhow!("holder {victim} is none of the instances"))?;
    let killed = Instant::now();
    let _ = kill_at.set(killed);
    cluster.nodes[index].kill()?;
    // Every room answers again (or its calls give up) before the run ends.
    let wait = policy.budget + Duration::from_secs(10);
    let mut pending = rooms;
    while pending > 0 {
        match tokio::time::timeout_at((killed + wait).into(), recovered.recv()).await {
            Ok(Some(_)) => pending -= 1,
            Ok(None) | Err(_) => break,
        }
    }
    tokio::time::sleep(after).await;
    stop.store(true, Ordering::Relaxed);
    let mut logs = Vec::with_capacity(rooms);
    for task in tasks {
        logs.push(task.await?);
    }
    let elapsed = started.elapsed();
    cluster.stop(env).await?;
    let mut measured = analyse(&logs, &affected, killed);
    measured.victim = victim;
    println!(
        "  killed {} holding {} of {rooms} rooms; {} commands in {:.1}s",
        measured.victim,
        measured.affected,
        measured.commands,
        elapsed.as_secs_f64()
    );
    Ok(measured)
}

/// Creates the rooms through the gateway; their first holders are whoever
/// received the call.
async fn create_rooms(
    targets: &[Target],
    rooms: usize,
    policy: &RetryPolicy,
    holders: &Mutex<Vec<String>>,
) -> anyhow::Result<()> {
    let created = futures::future::join_all((0..rooms).map(|room| async move {
        let mut rng = StdRng::seed_from_u64(SEED ^ (room as u64) << 20);
        let room_id = room_id(room);
        let called = gateway::call(targets, &mut rng, policy, |mut client| {
            let room_id = room_id.clone();
            async move {
                client
                    .create_room(CreateRoomRequest {
                        meta: meta(format!("create-{room_id}")),
                        room_id,
                        owner_id: "host".into(),
                        title: "failover".into(),
                        mic_seat_count: 8,
                    })
                    .await
            }
        })
        .await;
        (room, called.answer)
    }))
    .await;
    let mut holders = holders.lock().unwrap_or_else(|poison| poison.into_inner());
    for (room, answer) in created {
        match answer {
            Answer::Ok { served_by } => holders[room] = served_by.unwrap_or_default(),
            other => anyhow::bail!("creating room {room}: {other:?}"),
        }
    }
    Ok(())
}

fn room_id(room: usize) -> String {
    format!("fo-{room}")
}

/// What a room's loop shares with the scenario.
struct RoomLoop {
    targets: Vec<Target>,
    policy: RetryPolicy,
    holders: Arc<Mutex<Vec<String>>>,
    kill_at: Arc<OnceLock<Instant>>,
    stop: Arc<AtomicBool>,
    recovered: mpsc::UnboundedSender<usize>,
}

impl RoomLoop {
    /// The command cycle in `room` until stopped; every command recorded.
    async fn run(self, room: usize) -> Vec<Record> {
        let mut rng = StdRng::seed_from_u64(SEED ^ room as u64);
        let room_id = room_id(room);
        let mut records = Vec::new();
        let mut reported = false;
        let mut round = 0u64;
        'cycles: loop {
            let user = format!("u{round}");
            for step in CYCLE {
                if self.stop.load(Ordering::Relaxed) {
                    break 'cycles;
                }
                let sent = Instant::now();
                let called = gateway::call(&self.targets, &mut rng, &self.policy, |mut client| {
                    let (room_id, user) = (room_id.clone(), user.clone());
                    async move { send_step(&mut client, step, &room_id, &user, round).await }
                })
                .await;
                if let Answer::Ok {
                    served_by: Some(node),
                } = &called.answer
                {
                    let mut holders = self.holders.lock().unwrap_or_else(|p| p.into_inner());
                    holders[room].clone_from(node);
                    drop(holders);
                    let after_kill = self.kill_at.get().is_some_and(|at| called.answered > *at);
                    if after_kill && !reported {
                        reported = true;
                        let _ = self.recovered.send(room);
                    }
                }
                let gift = matches!(step, Step::Gift(_));
                records.push(Record { gift, sent, called });
            }
            round += 1;
        }
        records
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
