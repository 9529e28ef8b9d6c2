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

/// The figures of one half from every room's records.
fn analyse(logs: &[Vec<Record>], affected: &[bool], killed: Instant) -> Measured {
    let mut measured = Measured {
        rooms: logs.len(),
        ..Measured::default()
    };
    for (room, records) in logs.iter().enumerate() {
        let successes: Vec<Instant> = records
            .iter()
            .filter(|record| matches!(record.called.answer, Answer::Ok { .. }))
            .map(|record| record.called.answered)
            .collect();
        let split = successes.partition_point(|at| *at <= killed);
        let steady = successes[..split]
            .windows(2)
            .map(|pair| ms(pair[1] - pair[0]))
            .fold(0.0, f64::max);
        measured.steady_gap_ms = measured.steady_gap_ms.max(steady);
        if affected[room] {
            measured.affected += 1;
            match (
                split.checked_sub(1).map(|last| successes[last]),
                successes.get(split),
            ) {
                (Some(last), Some(first)) => {
                    measured.gaps_ms.push(ms(*first - last));
                    measured.kill_to_first_ms.push(ms(*first - killed));
                }
                (None, Some(first)) => measured.kill_to_first_ms.push(ms(*first - killed)),
                (_, None) => measured.unrecovered += 1,
            }
        }
        for record in records {
            measured.commands += 1;
            measured.retries += u64::from(record.called.attempts - 1);
            measured.over_three_retries += usize::from(record.called.attempts > 4);
            measured.retry_info_delays += u64::from(record.called.retry_info_delays);
            let outcome = match &record.called.answer {
                Answer::Ok { .. } => "committed".to_owned(),
                Answer::Refused(refusal) => {
                    *measured.refused.entry(refusal.clone()).or_default() += 1;
                    refusal.clone()
                }
                Answer::GaveUp(refusal) => {
                    measured.gave_up += 1;
                    format!("gave up after {refusal}")
                }
            };
            if record.gift && record.sent < killed && record.called.answered >= killed {
                let settled = ms(record.called.answered - killed);
                measured.inflight_gifts.push((settled, outcome));
            }
        }
    }
    measured
}

/// The value at `quantile` of `values` (nearest rank), NaN when empty.
fn quantile(values: &[f64], quantile: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((quantile * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn max(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::NAN, f64::max)
}

fn tally(counts: &BTreeMap<String, u64>) -> String {
    if counts.is_empty() {
        return "none".into();
    }
    let parts: Vec<String> = counts
        .iter()
        .map(|(what, n)| format!("{what} x{n}"))
        .collect();
    parts.join(", ")
}

/// The rows of one half; `off` (the liveness-off half) is the baseline of
/// the targeted rows.
fn rows(
    report: &mut Report,
    scenario: &str,
    label: &str,
    lease_ttl: &str,
    run: &Measured,
    off: Option<&Measured>,
    targeted: bool,
) {
    let check = |value: f64, limit: f64| (targeted && !value.is_nan()).then_some(value <= limit);
    let target = |text: &str| targeted.then(|| text.to_owned());
    let with_baseline = |value: f64, baseline: Option<f64>| {
        let ratio = baseline.filter(|b| *b > 0.0).map(|b| value / b);
        (baseline, ratio)
    };
    let longest = max(&run.gaps_ms);
    let (baseline, ratio) = with_baseline(longest, off.map(|off| max(&off.gaps_ms)));
    report.add(Row {
        scenario: format!("{scenario}, longest unavailable"),
        metric: "ms".into(),
        measured: longest,
        target: target("<= 2000"),
        baseline,
        ratio,
        pass: check(longest, 2_000.0).map(|ok| ok && run.unrecovered == 0),
        note: format!(
            "{label}, lease_ttl {lease_ttl}; killed {} holding {} of {} rooms; last success \
             before the kill -> first after; kill -> first success max {:.0} ms; {} rooms never \
             answered again; longest gap before the kill {:.0} ms{}",
            run.victim,
            run.affected,
            run.rooms,
            max(&run.kill_to_first_ms),
            run.unrecovered,
            run.steady_gap_ms,
            if off.is_some() {
                "; baseline: the same with liveness_ttl 0"
            } else {
                ""
            }
        ),
    });
    let p99 = quantile(&run.gaps_ms, 0.99);
    let (baseline, ratio) = with_baseline(p99, off.map(|off| quantile(&off.gaps_ms, 0.99)));
    report.add(Row {
        scenario: format!("{scenario}, p99 unavailable"),
        metric: "ms".into(),
        measured: p99,
        target: None,
        baseline,
        ratio,
        pass: None,
        note: format!(
            "over the {} rooms the killed holder held; p50 {:.0} ms",
            run.gaps_ms.len(),
            quantile(&run.gaps_ms, 0.5)
        ),
    });
    report.add(Row {
        scenario: format!("{scenario}, failed after budget"),
        metric: "commands".into(),
        measured: run.gave_up as f64,
        target: target("0"),
        baseline: off.map(|off| off.gave_up as f64),
        ratio: None,
        pass: targeted.then_some(run.gave_up == 0),
        note: format!(
            "of {} commands, retry budget 45 s, same command id; {} retries ({} after a \
             RetryInfo delay); {} calls needed more than 3 retries; final refusals: {}",
            run.commands,
            run.retries,
            run.retry_info_delays,
            run.over_three_retries,
            tally(&run.refused)
        ),
    });
    let settled: Vec<f64> = run.inflight_gifts.iter().map(|(ms, _)| *ms).collect();
    let mut outcomes = BTreeMap::new();
    for (_, outcome) in &run.inflight_gifts {
        *outcomes.entry(outcome.clone()).or_default() += 1;
    }
    let slowest = max(&settled);
    let (baseline, ratio) = with_baseline(
        slowest,
        off.map(|off| {
            max(&off
                .inflight_gifts
                .iter()
                .map(|(ms, _)| *ms)
                .collect::<Vec<_>>())
        }),
    );
    report.add(Row {
        scenario: format!("{scenario}, in-flight gifts settled"),
        metric: "ms".into(),
        measured: slowest,
        target: target("<= 5000"),
        baseline,
        ratio,
        pass: check(slowest, 5_000.0),
        note: format!(
            "{} gifts in flight at the kill, kill -> final answer (takeover included), \
             p50 {:.0} ms; answers: {}",
            settled.len(),
            quantile(&settled, 0.5),
            tally(&outcomes)
        ),
    });
}
