//! Scale-out scenarios (docs/design.md#scale-out): room-service instances
//! in one process sharing one fresh database, one fake wallet and one Redis
//! key prefix of their own.
//!
//! - `scale-out-mixed`: the mixed workload through one instance (the
//!   baseline) and through three with every request sent to a seeded random
//!   instance; commands/s, and the latency of forwarded against local
//!   commands as told by `x-room-served-by`.
//! - `scale-out-handoff`: a room held by A, a loop of commands sent to B,
//!   A stopped gracefully; the longest gap between two successful replies
//!   from the last one before the stop to B's first, against the longest
//!   gap before the stop.
//! - `scale-out-takeover`: with fast takeover off, the lease of a holder killed with -9 (A stopped,
//!   then its lease re-SET naming a dead address); the time from that SET
//!   to B's first successful command, next to the configured lease TTL.
//!
//! Figures only: nothing here asserts a timing.

use crate::{
    fixtures::{self, BenchEnv},
    report::{Report, Row},
    room_load::{
        MIXED_SEED, MixedOutcome, Routing, Serving, Target, bench_config, meta, millis_at,
        mixed_workload, served_by,
    },
};
use fred::prelude::*;
use futures::TryStreamExt;
use hyapp_api::room::{
    CreateRoomRequest, JoinRoomRequest, SendGiftRequest, room_service_client::RoomServiceClient,
};
use service_kit::duration::ConfigDuration;
use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};
use tonic::transport::Channel;

/// The lease value a holder killed with -9 leaves behind: a node nobody
/// answers for, at an address where nothing listens.
const DEAD_HOLDER: &str = "node-killed http://127.0.0.1:1";

/// Instances over one fresh database, one fake wallet and one Redis key prefix.
pub struct Cluster {
    nodes: Vec<Serving>,
    _wallet: fake_wallet::FakeWalletHandle,
    db: String,
    key_prefix: String,
}

impl Cluster {
    /// Starts `count` instances; `lease_ttl` replaces the default when
    /// given, and then fast takeover is off (`redis.liveness_ttl` 0), so a
    /// dead holder's rooms wait for the lease: the path measured against it.
    pub async fn start(
        env: &BenchEnv,
        count: usize,
        lease_ttl: Option<ConfigDuration>,
    ) -> anyhow::Result<Self> {
        Self::start_secured(env, count, lease_ttl, None).await
    }

    /// [`Cluster::start`], with every instance behind `security` when given:
    /// its listener settings applied to each config, its client TLS used to
    /// reach them.
    pub async fn start_secured(
        env: &BenchEnv,
        count: usize,
        lease_ttl: Option<ConfigDuration>,
        security: Option<&crate::security::Security>,
    ) -> anyhow::Result<Self> {
        let (pool, db) = fixtures::fresh_database(env).await?;
        pool.close().await;
        let wallet = fake_wallet::spawn(fake_wallet::FakeWalletConfig::default()).await?;
        // The database's own name as prefix: no lease of another scenario, or
        // of an aborted earlier run still waiting to expire, can be seen.
        let key_prefix = db.clone();
        let mut nodes = Vec::with_capacity(count);
        for index in 0..count {
            let mut config = bench_config(env, &db, wallet.endpoint());
            config.node_id = format!("{db}-{index}");
            config.redis.key_prefix = key_prefix.clone();
            if let Some(lease_ttl) = lease_ttl {
                config.redis.lease_ttl = lease_ttl;
                config.redis.liveness_ttl = ConfigDuration::from_millis(0);
            }
            let client_tls = security.map(|security| {
                security.apply(&mut config);
                security.gateway.clone()
            });
            nodes.push(Serving::start_reached(config, client_tls.as_ref()).await?);
        }
        Ok(Self {
            nodes,
            _wallet: wallet,
            db,
            key_prefix,
        })
    }

    pub fn targets(&self) -> Vec<Target> {
        self.nodes.iter().map(|node| node.target.clone()).collect()
    }

    /// The room's lease key, as room-service names it
    /// (`<redis.key_prefix>:room:lease:<room_id>`).
    fn lease_key(&self, room_id: &str) -> String {
        format!("{}:room:lease:{room_id}", self.key_prefix)
    }

    /// Stops the instances still running, deletes the prefix's Redis keys
    /// (the room list and presence would otherwise stay behind after every
    /// run) and drops the database.
    pub async fn stop(self, env: &BenchEnv) -> anyhow::Result<()> {
        futures::future::join_all(self.nodes.into_iter().map(Serving::stop)).await;
        delete_keys(env, &self.key_prefix).await?;
        fixtures::drop_database(env, &self.db).await
    }
}

/// Deletes every Redis key under `key_prefix`.
pub async fn delete_keys(env: &BenchEnv, key_prefix: &str) -> anyhow::Result<()> {
    let redis = redis_client(env).await?;
    let keys: Vec<Key> = redis
        .scan_buffered(format!("{key_prefix}:*"), Some(1_000), None)
        .try_collect()
        .await?;
    // In chunks: a presence run leaves tens of thousands of keys.
    for chunk in keys.chunks(1_000) {
        let _: i64 = redis.del(chunk.to_vec()).await?;
    }
    let _ = redis.quit().await;
    Ok(())
}

pub async fn redis_client(env: &BenchEnv) -> anyhow::Result<Client> {
    let redis = Builder::from_config(Config::from_url(&env.redis)?).build()?;
    redis.init().await?;
    Ok(redis)
}

/// Scenario: the mixed workload through one instance, then through three.
pub async fn mixed_one_vs_three(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    let (rooms, seconds) = if env.smoke { (64, 1) } else { (1_000, 10) };
    println!(
        "scale-out-mixed: {rooms} rooms, {seconds}s on 1 instance, then on 3 (random routing)"
    );
    let one = mixed_on(env, 1, rooms, seconds, Routing::Random, None).await?;
    let three = mixed_on(env, 3, rooms, seconds, Routing::Random, None).await?;
    let forwarded_share = three.forwarded.len() as f64 / three.all.len().max(1) as f64;
    report.add(Row {
        scenario: "scale-out mixed, 1 instance".into(),
        metric: "commands/s".into(),
        measured: one.rate,
        target: None,
        baseline: None,
        ratio: None,
        pass: None,
        note: format!(
            "p50 {:.1} ms, p99 {:.1} ms, all local",
            millis_at(&one.all, 0.5),
            millis_at(&one.all, 0.99)
        ),
    });
    report.add(Row {
        scenario: "scale-out mixed, 3 instances".into(),
        metric: "commands/s".into(),
        measured: three.rate,
        target: None,
        baseline: Some(one.rate),
        ratio: Some(three.rate / one.rate.max(1.0)),
        pass: None,
        note: format!(
            "each request to a random instance (seed {MIXED_SEED:#x}); {:.0} % forwarded; \
             p50 {:.1} ms, p99 {:.1} ms; 1 process, 2 cores shared",
            forwarded_share * 100.0,
            millis_at(&three.all, 0.5),
            millis_at(&three.all, 0.99)
        ),
    });
    for (kind, histogram) in [("local", &three.local), ("forwarded", &three.forwarded)] {
        for (quantile, metric, of_one) in [(0.5, "p50 ms", "p50"), (0.99, "p99 ms", "p99")] {
            let measured = millis_at(histogram, quantile);
            let baseline = millis_at(&one.all, quantile);
            report.add(Row {
                scenario: format!("scale-out 3 instances, {kind}"),
                metric: metric.into(),
                measured,
                target: None,
                baseline: Some(baseline),
                ratio: (baseline > 0.0).then(|| measured / baseline),
                pass: None,
                note: format!(
                    "{} {kind} commands; baseline: 1 instance's {of_one}",
                    histogram.len()
                ),
            });
        }
    }
    Ok(())
}

/// The mixed workload (seed [`MIXED_SEED`]) through `instances` fresh
/// instances behind `security` (plaintext when `None`), routed by `routing`:
/// the one cluster run every mixed-workload scenario measures.
pub async fn mixed_on(
    env: &BenchEnv,
    instances: usize,
    rooms: usize,
    seconds: u64,
    routing: Routing,
    security: Option<&crate::security::Security>,
) -> anyhow::Result<MixedOutcome> {
    let cluster = Cluster::start_secured(env, instances, None, security).await?;
    let outcome = mixed_workload(&cluster.targets(), rooms, seconds, MIXED_SEED, routing).await;
    cluster.stop(env).await?;
    outcome
}

/// What a loop of probe commands saw.
#[derive(Debug, Default)]
struct Probes {
    /// When each successful reply arrived, and who served it.
    replies: Vec<(Instant, String)>,
    /// Failed calls by code (and room-service's reason, when it gave one).
    failures: BTreeMap<String, u64>,
}

impl Probes {
    fn failed(&self) -> u64 {
        self.failures.values().sum()
    }

    fn failures_note(&self) -> String {
        if self.failures.is_empty() {
            return "no call failed".into();
        }
        let codes: Vec<String> = self
            .failures
            .iter()
            .map(|(code, count)| format!("{code} x{count}"))
            .collect();
        let failed = self.failed();
        let calls = if failed == 1 { "call" } else { "calls" };
        format!("{failed} {calls} failed: {}", codes.join(", "))
    }
}

/// Creates `room_id` through `client` (so that instance takes its lease)
/// with the member who sends the probe gifts.
async fn room_with_sender(
    client: &mut RoomServiceClient<Channel>,
    room_id: &str,
) -> anyhow::Result<()> {
    client
        .create_room(CreateRoomRequest {
            meta: meta(format!("create-{room_id}")),
            room_id: room_id.into(),
            owner_id: "host".into(),
            title: "scale-out".into(),
            mic_seat_count: 8,
        })
        .await?;
    client
        .join_room(JoinRoomRequest {
            meta: meta(format!("join-{room_id}")),
            room_id: room_id.into(),
            user_id: "sender".into(),
        })
        .await?;
    Ok(())
}

/// Sends one-rose gifts for `room_id` through `client`, each under a fresh
/// command id (a gift is valid whatever came before, so only availability is
/// measured), until `done`; after a failure it waits `retry_after` first.
async fn probe_until(
    mut client: RoomServiceClient<Channel>,
    room_id: String,
    retry_after: Duration,
    done: impl Fn(&Probes) -> bool,
) -> Probes {
    let mut probes = Probes::default();
    let mut attempt = 0u64;
    while !done(&probes) {
        attempt += 1;
        let sent = client
            .send_gift(SendGiftRequest {
                meta: meta(format!("probe-{room_id}-{attempt}")),
                room_id: room_id.clone(),
                sender_id: "sender".into(),
                receiver_id: "host".into(),
                gift_id: "rose".into(),
                count: 1,
                unit_value: 1,
            })
            .await;
        match sent {
            Ok(reply) => {
                let node = served_by(reply.metadata()).unwrap_or_default().to_owned();
                probes.replies.push((Instant::now(), node));
            }
            Err(status) => {
                let reason = status
                    .metadata()
                    .get("x-error-reason")
                    .and_then(|value| value.to_str().ok())
                    .map(|reason| format!("/{reason}"))
                    .unwrap_or_default();
                *probes
                    .failures
                    .entry(format!("{:?}{reason}", status.code()))
                    .or_default() += 1;
                tokio::time::sleep(retry_after).await;
            }
        }
    }
    probes
}

/// The longest interval between consecutive replies among `replies`, and
/// the reply it began with (zero and `None` for fewer than two replies).
fn longest_gap(replies: &[(Instant, String)]) -> (Duration, Option<Instant>) {
    replies
        .windows(2)
        .map(|pair| (pair[1].0 - pair[0].0, Some(pair[0].0)))
        .max()
        .unwrap_or_default()
}

/// Milliseconds from `origin` to `at`, negative when `at` came first.
fn offset_ms(at: Instant, origin: Instant) -> f64 {
    match at.checked_duration_since(origin) {
        Some(after) => after.as_secs_f64() * 1000.0,
        None => -(origin - at).as_secs_f64() * 1000.0,
    }
}

/// Scenario: a graceful stop of the holder while commands keep arriving at
/// the other instance.
pub async fn handoff_gap(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    let (before, after) = if env.smoke {
        (Duration::from_millis(200), Duration::from_millis(500))
    } else {
        (Duration::from_secs(2), Duration::from_secs(2))
    };
    println!("scale-out-handoff: commands to B, holder A stopped gracefully after {before:?}");
    let mut cluster = Cluster::start(env, 2, None).await?;
    let node_a = cluster.nodes.remove(0);
    let node_b = cluster.nodes[0].target.clone();
    let room_id = "handoff";
    room_with_sender(&mut node_a.target.client.clone(), room_id).await?;
    let done = Arc::new(AtomicBool::new(false));
    let probing = tokio::spawn(probe_until(
        node_b.client.clone(),
        room_id.into(),
        // A short pause, so a run of refusals does not take the two cores
        // from the instances whose handoff it is measuring.
        Duration::from_millis(5),
        {
            let done = Arc::clone(&done);
            move |_| done.load(Ordering::Relaxed)
        },
    ));
    tokio::time::sleep(before).await;
    let stop_began = Instant::now();
    let holder_a = node_a.target.node_id.clone();
    node_a.stop().await;
    let stop_took = stop_began.elapsed();
    tokio::time::sleep(after).await;
    done.store(true, Ordering::Relaxed);
    let probes = probing.await?;
    let probing_ended = Instant::now();
    cluster.stop(env).await?;

    // Replies arrive in order: those before the stop are the steady state.
    let replies = &probes.replies;
    let steady = &replies[..replies.partition_point(|(at, _)| *at < stop_began)];
    let served_by_a = steady.iter().filter(|(_, node)| *node == holder_a).count();
    let first_by_b = replies
        .iter()
        .position(|(at, node)| *at >= stop_began && *node == node_b.node_id);
    // The handoff: from the last reply before the stop to B's first. Without
    // a reply by B it lasted until the loop ended.
    let handoff_began = steady.len().saturating_sub(1);
    let (gap, gap_began) = match first_by_b {
        Some(first) => longest_gap(&replies[handoff_began..=first]),
        None => {
            let last = steady.last().map_or(stop_began, |(at, _)| *at);
            (probing_ended - last, Some(last))
        }
    };
    let (steady_gap, _) = longest_gap(steady);
    let (after_gap, _) = longest_gap(&replies[first_by_b.unwrap_or(replies.len())..]);
    report.add(Row {
        scenario: "scale-out handoff gap, graceful stop".into(),
        metric: "ms".into(),
        measured: gap.as_secs_f64() * 1000.0,
        target: None,
        baseline: Some(steady_gap.as_secs_f64() * 1000.0),
        ratio: (!steady_gap.is_zero()).then(|| gap.as_secs_f64() / steady_gap.as_secs_f64()),
        pass: None,
        note: format!(
            "longest gap from the last reply before the stop to B's first, began {}; \
             first reply by B {}; A's stop took {:.0} ms; {}; baseline: longest gap before \
             the stop ({served_by_a} of {} replies by A); after: {:.1} ms",
            gap_began.map_or("nowhere".into(), |at| format!(
                "{:+.0} ms from the stop",
                offset_ms(at, stop_began)
            )),
            first_by_b.map_or("never".into(), |first| format!(
                "{:.0} ms after the stop began",
                offset_ms(replies[first].0, stop_began)
            )),
            stop_took.as_secs_f64() * 1000.0,
            probes.failures_note(),
            steady.len(),
            after_gap.as_secs_f64() * 1000.0,
        ),
    });
    Ok(())
}

/// Scenario: the holder died without releasing its lease; with fast
/// takeover off, B takes the room over once the lease expires (the
/// `failover` scenario measures the liveness key's takeover).
pub async fn takeover_gap(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    // The shortest TTL room-service accepts keeps the smoke run short.
    let lease_ttl = ConfigDuration::from_secs(if env.smoke { 1 } else { 5 });
    let retry_every = Duration::from_millis(20);
    println!("scale-out-takeover: dead holder's lease, lease_ttl {lease_ttl}");
    let mut cluster = Cluster::start(env, 2, Some(lease_ttl)).await?;
    let node_a = cluster.nodes.remove(0);
    let node_b = cluster.nodes[0].target.clone();
    let room_id = "takeover";
    room_with_sender(&mut node_a.target.client.clone(), room_id).await?;
    // A graceful stop releases the lease; SET puts back what a killed holder
    // would have left: a lease with a full TTL naming an unreachable node.
    node_a.stop().await;
    let redis = redis_client(env).await?;
    let give_up = lease_ttl.as_std() + Duration::from_secs(10);
    // Taken before the SET, so the figure includes its round trip: an upper bound.
    let set_at = Instant::now();
    let () = redis
        .set(
            cluster.lease_key(room_id),
            DEAD_HOLDER,
            Some(Expiration::PX(lease_ttl.as_millis())),
            None,
            false,
        )
        .await?;
    let _ = redis.quit().await;
    let probes = probe_until(
        node_b.client.clone(),
        room_id.into(),
        retry_every,
        |probes| !probes.replies.is_empty() || set_at.elapsed() >= give_up,
    )
    .await;
    cluster.stop(env).await?;

    let ttl_ms = lease_ttl.as_millis() as f64;
    let (measured, outcome) = match probes.replies.first() {
        Some((at, node)) => (
            (*at - set_at).as_secs_f64() * 1000.0,
            if *node == node_b.node_id {
                "served by B".to_owned()
            } else {
                format!("served by {node}")
            },
        ),
        None => (
            give_up.as_secs_f64() * 1000.0,
            format!("no success within {give_up:?}"),
        ),
    };
    report.add(Row {
        scenario: "scale-out takeover after kill -9".into(),
        metric: "ms".into(),
        measured,
        target: None,
        baseline: Some(ttl_ms),
        ratio: Some(measured / ttl_ms),
        pass: None,
        note: format!(
            "SET of the dead holder's lease (PX = lease_ttl {lease_ttl}, the baseline) to B's \
             first success, retried every {} ms; {outcome}; {}",
            retry_every.as_millis(),
            probes.failures_note()
        ),
    });
    Ok(())
}
