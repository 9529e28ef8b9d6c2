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
use crate::faults;
use crate::groups;
use crate::infra;
use crate::interrupt::{self, StopFlag};
use crate::localdb;
use crate::schedule::{self, Fault, Schedule};
use crate::services::{self, Overrides, Ports, Spec};
use crate::stack::{self, Plan};
use crate::topology::{self, Topology};
use std::collections::HashSet;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The run's database.
const DATABASE: &str = "hyapp_chaos";
/// Gifts worth this much are announced (the workload's larger gifts cross it).
const BIG_GIFT_THRESHOLD: u64 = 3_000;
/// room-service's `redis.liveness_ttl`: how soon a crashed instance is known gone.
const LIVENESS_TTL: &str = "1s";
/// room-service's `redis.lease_ttl`, longer than [`LIVENESS_TTL`].
const LEASE_TTL: &str = "6s";

/// Parsed options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Seed of the workload and the fault schedule.
    pub seed: u64,
    /// How long the workload issues commands.
    pub duration: Duration,
    /// Fault kinds enabled.
    pub faults: Vec<String>,
    /// Rooms of the workload.
    pub rooms: u32,
    /// Fewest acknowledged commands every room must end with (the checker
    /// fails a run that committed less: it would prove nothing).
    pub min_acked_per_room: u32,
    /// room-service instances (1–3).
    pub room_services: usize,
    /// Instances of each consumer in its group (1–2).
    pub consumer_instances: usize,
    /// Longest a room held by a killed room-service instance may stay
    /// unavailable, other faults' time aside.
    pub max_unavailable: Duration,
}

impl Options {
    /// Parses `--seed`, `--duration`, `--faults`, `--rooms`, `--min-acked-per-room`,
    /// `--room-services`, `--consumer-instances`, `--max-unavailable`.
    pub fn parse(args: &[String]) -> Result<Self, String> {
        let mut options = Options {
            seed: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|elapsed| elapsed.as_secs())
                .unwrap_or(1),
            duration: Duration::from_secs(120),
            faults: schedule::KINDS
                .iter()
                .map(|kind| kind.to_string())
                .collect(),
            rooms: 40,
            min_acked_per_room: 1,
            room_services: 3,
            consumer_instances: 2,
            max_unavailable: Duration::from_secs(5),
        };
        let mut rest = args.iter();
        while let Some(flag) = rest.next() {
            let mut value = || rest.next().ok_or_else(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--seed" => options.seed = value()?.parse().map_err(|_| "--seed wants a number")?,
                "--duration" => options.duration = parse_duration(value()?)?,
                "--max-unavailable" => options.max_unavailable = parse_duration(value()?)?,
                "--rooms" => {
                    options.rooms = value()?.parse().map_err(|_| "--rooms wants a number")?
                }
                "--min-acked-per-room" => {
                    options.min_acked_per_room = value()?
                        .parse()
                        .map_err(|_| "--min-acked-per-room wants a number")?
                }
                "--room-services" => {
                    options.room_services = value()?
                        .parse()
                        .map_err(|_| "--room-services wants a number")?
                }
                "--consumer-instances" => {
                    options.consumer_instances = value()?
                        .parse()
                        .map_err(|_| "--consumer-instances wants a number")?
                }
                "--faults" => {
                    let list: Vec<String> = value()?
                        .split(',')
                        .map(|kind| kind.trim().to_string())
                        .collect();
                    if let Some(unknown) = list
                        .iter()
                        .find(|kind| !schedule::KINDS.contains(&kind.as_str()))
                    {
                        return Err(format!(
                            "--faults: unknown kind `{unknown}`; known: {}",
                            schedule::KINDS.join(",")
                        ));
                    }
                    options.faults = list;
                }
                other => {
                    return Err(format!(
                        "unknown option `{other}`; usage: cargo xtask chaos [--seed N] \
                         [--duration 10m] [--faults {}] [--rooms N] [--min-acked-per-room N] \
                         [--room-services 1-3] [--consumer-instances 1-2] \
                         [--max-unavailable 5s]",
                        schedule::KINDS.join(",")
                    ));
                }
            }
        }
        if options.rooms == 0 {
            return Err("--rooms must be positive".into());
        }
        if options.min_acked_per_room == 0 {
            return Err("--min-acked-per-room must be positive: a run that committed nothing proves nothing".into());
        }
        Topology::new(options.room_services, options.consumer_instances)?;
        Ok(options)
    }
}

/// `2500ms`, `90s`, `10m`, `1h` or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, "s"), |at| text.split_at(at));
    let value: u64 = number
        .parse()
        .map_err(|_| format!("bad duration `{text}`"))?;
    let millis = match unit {
        "ms" => value,
        "s" => value * 1_000,
        "m" => value * 60_000,
        "h" => value * 3_600_000,
        _ => {
            return Err(format!(
                "bad duration `{text}` (use 2500ms, 90s, 10m or 1h)"
            ));
        }
    };
    Ok(Duration::from_millis(millis))
}

/// Runs the reliability check; `Err` carries the reason for a non-zero exit.
pub fn run(args: &[String], stop: &StopFlag) -> Result<(), String> {
    let options = Options::parse(args)?;
    let topology = Topology::new(options.room_services, options.consumer_instances)?;
    let root = infra::workspace_root();
    let dir = root.join(format!("target/chaos/seed-{}", options.seed));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|error| format!("create {}: {error}", dir.display()))?;
    crate::step(&format!(
        "chaos run: seed {}, {}s of workload over {} rooms, faults {}; {} room-service \
         instances, {} per consumer group; rooms of a killed instance back within {}ms; \
         files in {}",
        options.seed,
        options.duration.as_secs(),
        options.rooms,
        options.faults.join(","),
        options.room_services,
        options.consumer_instances,
        options.max_unavailable.as_millis(),
        dir.display()
    ));
    let tansu = infra::ensure_broker_with(|build| interrupt::run_interruptible(build, stop))?;
    let built = crate::binaries::build_binaries(stop)?;
    if !built.contains("chaos") {
        return Err("the chaos crate did not compile (see the cargo output above)".into());
    }
    let mut backends = Backends::start(&dir)?;
    localdb::mysql_exec_at(
        backends.mysql_port,
        &format!("CREATE DATABASE `{DATABASE}`"),
    )?;

    let mut ports = Ports::free()?;
    ports.mysql = backends.mysql_port;
    ports.redis = backends.redis_port;
    let overrides = overrides();
    let specs = scaled_specs(&ports, &overrides, &topology)?;
    let room_services: Vec<String> = specs
        .iter()
        .filter(|spec| topology::role_of(spec.name) == "room-service")
        .map(|spec| {
            let grpc = spec.env_value("ROOM__GRPC_LISTEN").unwrap_or_default();
            format!("{}=http://{grpc}", spec.name)
        })
        .collect();
    let consumer_metrics: Vec<String> = specs
        .iter()
        .filter(|spec| groups::is_consumer_service(topology::role_of(spec.name)))
        .map(|spec| {
            let port = spec.probe.target().0;
            format!("{}=http://127.0.0.1:{port}/metrics", spec.name)
        })
        .collect();
    let plan = Plan {
        ports: ports.clone(),
        database: DATABASE.into(),
        log_dir: dir.join("logs"),
        overrides,
    };
    let mut stack = stack::start_specs(&plan, specs, &built, &tansu, stop)?;
    if let Some((name, _)) = stack.unavailable.first() {
        return Err(format!(
            "{name} did not start; see {}",
            plan.log_dir.display()
        ));
    }

    crate::step("workload and fault schedule running");
    let mut workload = Command::new(crate::binaries::target_dir().join("debug/chaos"));
    workload.arg("workload");
    for room_service in &room_services {
        workload.args(["--grpc", room_service]);
    }
    let mut workload = workload
        .args([
            "--wallet-admin",
            &format!("http://127.0.0.1:{}", ports.wallet_admin),
        ])
        .args(["--seed", &options.seed.to_string()])
        .args(["--duration-secs", &options.duration.as_secs().to_string()])
        .args(["--rooms", &options.rooms.to_string()])
        .arg("--out")
        .arg(dir.join("commands.jsonl"))
        .spawn()
        .map_err(|error| format!("cannot start the chaos workload: {error}"))?;
    let mut world = faults::World {
        stack: &mut stack,
        backends: &mut backends,
        ports: &ports,
        topology: &topology,
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
    let mut check = Command::new(crate::binaries::target_dir().join("debug/chaos"));
    check
        .arg("check")
        .args([
            "--mysql-url",
            &format!("mysql://root@127.0.0.1:{}/{DATABASE}", ports.mysql),
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
    for metrics in &consumer_metrics {
        check.args(["--metrics", metrics]);
    }
    let mut checker = check
        .spawn()
        .map_err(|error| format!("cannot start the checker: {error}"))?;
    let verdict = interrupt::wait_child(&mut checker, stop)?;
    stack.stop();
    drop(backends);
    for problem in &problems {
        eprintln!("xtask: {problem}");
    }
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
/// are copies on ports no other listener of the run uses.
fn scaled_specs(
    ports: &Ports,
    overrides: &Overrides,
    topology: &Topology,
) -> Result<Vec<Spec>, String> {
    let mut specs = services::specs(ports, DATABASE, overrides);
    let mut taken: HashSet<u16> = HashSet::from(ports.all());
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

    #[test]
    fn durations_and_options_parse() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("45").unwrap(), Duration::from_secs(45));
        assert_eq!(
            parse_duration("2500ms").unwrap(),
            Duration::from_millis(2_500)
        );
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
        let args: Vec<String> = ["--seed", "7", "--faults", "kill,broker", "--duration", "2m"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let options = Options::parse(&args).unwrap();
        assert_eq!((options.seed, options.duration.as_secs()), (7, 120));
        assert_eq!(options.faults, ["kill", "broker"]);
        assert_eq!(options.min_acked_per_room, 1);
        assert_eq!(options.max_unavailable, Duration::from_secs(5));
        let strict: Vec<String> = ["--max-unavailable", "1500ms"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            Options::parse(&strict).unwrap().max_unavailable,
            Duration::from_millis(1_500)
        );
        assert_eq!((options.room_services, options.consumer_instances), (3, 2));
        let single: Vec<String> = ["--room-services", "1", "--consumer-instances", "1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let single = Options::parse(&single).unwrap();
        assert_eq!((single.room_services, single.consumer_instances), (1, 1));
        let four: Vec<String> = ["--room-services", "4"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(Options::parse(&four).is_err());
        let strict: Vec<String> = ["--min-acked-per-room", "5"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(Options::parse(&strict).unwrap().min_acked_per_room, 5);
        let vacuous: Vec<String> = ["--min-acked-per-room", "0"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(Options::parse(&vacuous).is_err());
        let bad: Vec<String> = ["--faults", "meteor"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(Options::parse(&bad).unwrap_err().contains("meteor"));
    }

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
