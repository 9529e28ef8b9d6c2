//! `cargo xtask chaos [--seed N] [--duration 10m] [--faults LIST] [--rooms N]
//! [--min-acked-per-room N] [--room-services N] [--consumer-instances N]
//! [--max-unavailable 5s]`: the reliability run. A private MariaDB, a private Redis and a Tansu broker
//! (all on free ports, files under `target/chaos/`) carry the whole stack
//! scaled out: three room-service instances (one database, one Redis key
//! prefix, each with its own node id and advertised URL), two relays and two
//! instances of each consumer in its group. The `chaos` crate's workload
//! sends each command to a random room-service instance while the seeded
//! fault schedule here (see [`crate::faults`]) SIGKILLs and gracefully
//! restarts instances, freezes the broker, restarts Redis and MariaDB and
//! makes the fakes fail. Then the `chaos` checker waits for the system to
//! settle and verifies the delivery ledger; its exit code is ours.
//!
//! room-service runs with `redis.liveness_ttl` at 1 s and `redis.lease_ttl`
//! at 6 s, so a crashed instance's rooms are taken over once its liveness
//! key lapses, not when its leases expire; the checker fails the run when a
//! room a killed instance held stayed unavailable longer than
//! `--max-unavailable` (5 s; see the `chaos` crate's `outage` module for
//! how it is measured and how overlapping faults count).

use crate::backends::Backends;
use crate::chaos_options::Options;
use crate::faults;
use crate::groups;
use crate::infra;
use crate::interrupt::{self, StopFlag};
use crate::localdb;
use crate::network::Network;
use crate::schedule::{Fault, Schedule};
use crate::services::{self, Overrides, Ports, Spec};
use crate::stack::{self, Plan};
use crate::topology::{self, Topology};
use std::collections::HashSet;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Instant;

/// The run's database.
const DATABASE: &str = "hyapp_chaos";
/// Gifts worth this much are announced (the workload's larger gifts cross it).
const BIG_GIFT_THRESHOLD: u64 = 3_000;
/// room-service's `redis.liveness_ttl`: how soon a crashed instance is known gone.
const LIVENESS_TTL: &str = "1s";
/// room-service's `redis.lease_ttl`, longer than [`LIVENESS_TTL`].
const LEASE_TTL: &str = "6s";

/// Runs the reliability check; `Err` carries the reason for a non-zero exit.
pub fn run(args: &[String], stop: &StopFlag) -> Result<(), String> {
    let options = Options::parse(args)?;
    let topology = Topology::new(options.room_services, options.consumer_instances)?;
    let root = infra::workspace_root();
    let dir = root.join(format!("target/chaos/seed-{}", options.seed));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|error| format!("create {}: {error}", dir.display()))?;
    announce(&options, &dir);
    let tansu = infra::ensure_broker_with(|build| interrupt::run_interruptible(build, stop))?;
    let built = crate::binaries::build_binaries(stop)?;
    if !built.contains("chaos") {
        return Err("the chaos crate did not compile (see the cargo output above)".into());
    }
    let mut backends = Backends::start(&dir, options.replication(), options.sentinel())?;
    localdb::mysql_exec_at(
        backends.mysql_port,
        &format!("CREATE DATABASE `{DATABASE}`"),
    )?;

    let mut ports = Ports::free()?;
    ports.mysql = backends.mysql_port;
    ports.redis = backends.redis_port;
    // The services reach every backend through a proxy; the harness, the
    // workload and the checker use the real ports (MariaDB's proxy aside:
    // it is the address a failover moves).
    let network = Network::start(&ports, backends.redis_replica_port)?;
    if let Some(announced) = network.redis_nodes() {
        backends.start_sentinels(announced)?;
    }
    let mut overrides = overrides();
    if let Some(url) = backends.sentinel_url() {
        overrides.extend([
            ("room-service", "ROOM__REDIS__URL".to_string(), url.clone()),
            (
                "outbox-relay",
                "RELAY__OUTBOX_WORKER__REDIS_URL".to_string(),
                url,
            ),
        ]);
    }
    let specs = scaled_specs(
        &ports,
        &network.service_ports(&ports),
        &overrides,
        &topology,
    )?;
    let (room_services, consumer_metrics) = (room_service_urls(&specs), consumer_metrics(&specs));
    let plan = Plan {
        ports: ports.clone(),
        database: DATABASE.into(),
        log_dir: dir.join("logs"),
        overrides,
        advertised_broker: Some(network.broker()),
    };
    let mut stack = stack::start_specs(&plan, specs, &built, &tansu, stop)?;
    if let Some((name, _)) = stack.unavailable.first() {
        return Err(format!(
            "{name} did not start; see {}",
            plan.log_dir.display()
        ));
    }

    crate::step("workload and fault schedule running");
    let mut workload = workload_command(&options, &ports, &room_services, &dir)
        .spawn()
        .map_err(|error| format!("cannot start the chaos workload: {error}"))?;
    let mut world = faults::World {
        stack: &mut stack,
        backends: &mut backends,
        ports: &ports,
        topology: &topology,
        network: &network,
        stop,
        log: faults::FaultLog::create(&dir.join("faults.tsv"))?,
        problems: Vec::new(),
    };
    let mut schedule = Schedule::new(options.seed, &options.faults, &topology);
    let workload_status = run_schedule(&mut world, &mut schedule, &mut workload)?;
    faults::heal(&mut world);
    let problems = std::mem::take(&mut world.problems);
    if !workload_status.success() {
        return Err(format!("the workload failed ({workload_status})"));
    }

    crate::step("faults over; checking the ledger once the system settles");
    let mysql = network.mysql().port;
    let mut checker = checker_command(&options, &ports, mysql, &consumer_metrics, &dir)
        .spawn()
        .map_err(|error| format!("cannot start the checker: {error}"))?;
    let verdict = interrupt::wait_child(&mut checker, stop)?;
    stack.stop();
    drop(backends);
    for problem in &problems {
        eprintln!("xtask: {problem}");
    }
    conclude(verdict, &problems, &dir)
}

/// Prints what the run does and where its files go.
fn announce(options: &Options, dir: &Path) {
    crate::step(&format!(
        "chaos run: seed {}, {}s of workload over {} rooms, faults {}; {} room-service \
         instances, {} per consumer group; rooms of a killed instance back within {}ms; \
         MariaDB {}; files in {}",
        options.seed,
        options.duration.as_secs(),
        options.rooms,
        options.faults.join(","),
        options.room_services,
        options.consumer_instances,
        options.max_unavailable.as_millis(),
        options
            .replication()
            .map_or("single server".to_string(), |mode| format!(
                "primary + replica ({} replication)",
                mode.name()
            )),
        dir.display()
    ));
}

/// `name=http://grpc` of every room-service instance, for the workload.
fn room_service_urls(specs: &[Spec]) -> Vec<String> {
    specs
        .iter()
        .filter(|spec| topology::role_of(spec.name) == "room-service")
        .map(|spec| {
            let grpc = spec.env_value("ROOM__GRPC_LISTEN").unwrap_or_default();
            format!("{}=http://{grpc}", spec.name)
        })
        .collect()
}

/// `name=http://…/metrics` of every consumer instance, for the checker.
fn consumer_metrics(specs: &[Spec]) -> Vec<String> {
    specs
        .iter()
        .filter(|spec| groups::is_consumer_service(topology::role_of(spec.name)))
        .map(|spec| {
            let port = spec.probe.target().0;
            format!("{}=http://127.0.0.1:{port}/metrics", spec.name)
        })
        .collect()
}

/// The `chaos workload` command: commands to every room-service instance.
fn workload_command(
    options: &Options,
    ports: &Ports,
    room_services: &[String],
    dir: &Path,
) -> Command {
    let mut workload = Command::new(crate::binaries::target_dir().join("debug/chaos"));
    workload.arg("workload");
    for room_service in room_services {
        workload.args(["--grpc", room_service]);
    }
    workload
        .args([
            "--wallet-admin",
            &format!("http://127.0.0.1:{}", ports.wallet_admin),
        ])
        .args(["--seed", &options.seed.to_string()])
        .args(["--duration-secs", &options.duration.as_secs().to_string()])
        .args(["--rooms", &options.rooms.to_string()])
        .arg("--out")
        .arg(dir.join("commands.jsonl"));
    workload
}

/// The `chaos check` command: the ledger of the run against every store.
fn checker_command(
    options: &Options,
    ports: &Ports,
    mysql: u16,
    consumer_metrics: &[String],
    dir: &Path,
) -> Command {
    let mut check = Command::new(crate::binaries::target_dir().join("debug/chaos"));
    check
        .arg("check")
        .args([
            "--mysql-url",
            &format!("mysql://root@127.0.0.1:{mysql}/{DATABASE}"),
        ])
        .args(["--fake-im", &format!("http://127.0.0.1:{}", ports.fake_im)])
        .args([
            "--wallet-admin",
            &format!("http://127.0.0.1:{}", ports.wallet_admin),
        ])
        .args(["--bootstrap", &format!("127.0.0.1:{}", ports.broker)])
        .arg("--commands")
        .arg(dir.join("commands.jsonl"))
        .arg("--faults")
        .arg(dir.join("faults.tsv"))
        .args(["--big-gift-threshold", &BIG_GIFT_THRESHOLD.to_string()])
        .args(["--dedup-groups", &dedup_groups()])
        .args([
            "--min-acked-per-room",
            &options.min_acked_per_room.to_string(),
        ])
        .args(["--room-services", &options.room_services.to_string()])
        .args([
            "--max-unavailable-ms",
            &options.max_unavailable.as_millis().to_string(),
        ])
        .args(["--dead-letter-topics", &dead_letter_topics()]);
    for metrics in consumer_metrics {
        check.args(["--metrics", metrics]);
    }
    check
}

/// The run's result from the checker's exit and the harness's own problems.
fn conclude(
    verdict: Option<std::process::ExitStatus>,
    problems: &[String],
    dir: &Path,
) -> Result<(), String> {
    match verdict {
        None => Err("interrupted".into()),
        Some(status) if status.success() && problems.is_empty() => {
            crate::detail(&format!("no violations; files in {}", dir.display()));
            Ok(())
        }
        Some(status) => Err(format!(
            "the reliability check failed ({status}, {} harness problems); logs in {}",
            problems.len(),
            dir.join("logs").display()
        )),
    }
}

/// Applies faults until the workload has finished and every enabled kind has
/// fired at least once; returns the workload's exit status.
fn run_schedule(
    world: &mut faults::World<'_>,
    schedule: &mut Schedule,
    workload: &mut Child,
) -> Result<std::process::ExitStatus, String> {
    let started = Instant::now();
    let mut finished = None;
    loop {
        if world.stop.requested() {
            let _ = workload.kill();
            return Err("interrupted".into());
        }
        if finished.is_none() {
            finished = workload.try_wait().map_err(|error| error.to_string())?;
        }
        if let Some(status) = finished
            && schedule.covered()
        {
            return Ok(status);
        }
        faults::restart_crashed(world);
        let gap = schedule.gap();
        if !faults::pause(gap, world.stop) {
            continue;
        }
        let fault: Fault = schedule.next();
        crate::detail(&format!(
            "[{:>5.1}s] {}",
            started.elapsed().as_secs_f64(),
            fault.describe()
        ));
        faults::apply(world, &fault);
    }
}

/// Every service's spec plus the extra instances of `topology`: the first
/// instance of a service is its own spec (given its identity), the others
/// are copies on ports no other listener of the run uses. The services are
/// given `proxied` ports (see [`Network`]); the fakes listen on the real ones.
fn scaled_specs(
    ports: &Ports,
    proxied: &Ports,
    overrides: &Overrides,
    topology: &Topology,
) -> Result<Vec<Spec>, String> {
    let mut specs = services::specs(proxied, DATABASE, overrides);
    for fake in services::fake_specs(ports) {
        if let Some(spec) = specs.iter_mut().find(|spec| spec.name == fake.name) {
            *spec = fake;
        }
    }
    let mut taken: HashSet<u16> = HashSet::from(ports.all());
    taken.extend(proxied.all());
    // Released before the service binds it, like `Ports::free`; only repeats
    // within this run are excluded.
    let mut fresh_port = || loop {
        let port = infra::free_port()?;
        if taken.insert(port) {
            return Ok(port);
        }
    };
    for instances in topology.services() {
        let base = specs
            .iter_mut()
            .find(|spec| spec.name == instances[0])
            .ok_or_else(|| format!("no spec for {}", instances[0]))?;
        topology::identify(base);
        let base = base.clone();
        for name in &instances[1..] {
            specs.push(topology::instance(&base, name, &mut fresh_port)?);
        }
    }
    Ok(specs)
}

fn dead_letter_topics() -> String {
    groups::ALL
        .iter()
        .map(|group| group.dead_letter_topic)
        .collect::<Vec<_>>()
        .join(",")
}

/// Consumer groups that record `consumer_dedup` rows.
fn dedup_groups() -> String {
    groups::CONSUMERS
        .iter()
        .map(|group| group.group)
        .collect::<Vec<_>>()
        .join(",")
}

/// Timers short enough that delayed work (treasure boxes, presence expiry,
/// saga sweeps, relay retries) completes within a run, with retry budgets
/// longer than any transient fault the schedule injects.
fn overrides() -> Vec<(&'static str, String, String)> {
    [
        (
            "room-service",
            "ROOM__ROOM__RULES__TREASURE_COUNTDOWN",
            "3s",
        ),
        (
            "room-service",
            "ROOM__ROOM__RULES__TREASURE_THRESHOLDS",
            "5000,1000000000",
        ),
        ("room-service", "ROOM__ROOM__PRESENCE_TTL", "20s"),
        ("room-service", "ROOM__ROOM__PRESENCE_SWEEP_INTERVAL", "1s"),
        ("room-service", "ROOM__SAGA__SWEEP_INTERVAL", "2s"),
        ("room-service", "ROOM__SAGA__STUCK_AFTER", "5s"),
        ("room-service", "ROOM__SHUTDOWN_GRACE", "5s"),
        // A crashed instance's rooms are taken over once its liveness key
        // lapses (1 s, renewed several times a second), well before it is
        // back (and it must then forward them instead of serving them).
        ("room-service", "ROOM__REDIS__LIVENESS_TTL", LIVENESS_TTL),
        // Kept at 6 s: longer than the liveness TTL, so takeovers after a
        // crash come from the liveness key, not from lease expiry (a run
        // without fast takeover shows ~6 s of unavailability per kill).
        ("room-service", "ROOM__REDIS__LEASE_TTL", LEASE_TTL),
        (
            "outbox-relay",
            "RELAY__OUTBOX_WORKER__POLL_INTERVAL",
            "200ms",
        ),
        (
            "outbox-relay",
            "RELAY__OUTBOX_WORKER__INITIAL_BACKOFF",
            "500ms",
        ),
        ("outbox-relay", "RELAY__OUTBOX_WORKER__MAX_BACKOFF", "5s"),
        (
            "outbox-relay",
            "RELAY__OUTBOX_WORKER__MAX_RETRY_COUNT",
            "100",
        ),
        ("activity-consumer", "ACTIVITY__CONSUMER__MAX_BACKOFF", "5s"),
        (
            "activity-consumer",
            "ACTIVITY__ACTIVITY__BROADCAST__MAX_BACKOFF",
            "5s",
        ),
        ("im-bridge", "IM_BRIDGE__CONSUMER__MAX_BACKOFF", "5s"),
        ("notice-consumer", "NOTICE__CONSUMER__MAX_BACKOFF", "5s"),
        // Longer than the broker outage, so members survive it without a
        // rebalance (Tansu 0.6.0 sometimes never completes the rebalance
        // that follows an outage longer than the session timeout).
        (
            "activity-consumer",
            "ACTIVITY__CONSUMER__SESSION_TIMEOUT",
            "25s",
        ),
        ("im-bridge", "IM_BRIDGE__CONSUMER__SESSION_TIMEOUT", "25s"),
        (
            "notice-consumer",
            "NOTICE__CONSUMER__SESSION_TIMEOUT",
            "25s",
        ),
    ]
    .into_iter()
    .map(|(service, key, value)| (service, key.to_string(), value.to_string()))
    .chain([(
        "activity-consumer",
        "ACTIVITY__ACTIVITY__BIG_GIFT_THRESHOLD".to_string(),
        BIG_GIFT_THRESHOLD.to_string(),
    )])
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos_options::parse_duration;
    use std::time::Duration;

    #[test]
    fn crashes_are_detected_by_the_liveness_key_not_the_lease() {
        let room = |key: &str| {
            overrides()
                .into_iter()
                .find(|(service, name, _)| *service == "room-service" && name == key)
                .map(|(_, _, value)| parse_duration(&value).unwrap())
        };
        let liveness = room("ROOM__REDIS__LIVENESS_TTL").expect("liveness TTL set");
        let lease = room("ROOM__REDIS__LEASE_TTL").expect("lease TTL set");
        assert_eq!(liveness, Duration::from_secs(1));
        assert!(
            lease > liveness * 3,
            "{lease:?}: takeover must come from the liveness key"
        );
    }
}
