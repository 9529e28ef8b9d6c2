//! The seeded fault schedule of `cargo xtask chaos` and how each fault is
//! applied to the real processes. The same seed gives the same sequence of
//! faults and gaps. Every enabled kind fires at least once (a shuffled
//! coverage round first: a crash of every room-service and relay instance
//! and of one instance of each consumer group, a graceful restart of one
//! instance of every service; the faults on the command path before the
//! others), then faults are drawn at random. Each applied
//! fault is appended to `faults.tsv` for the checker's table.
//!
//! Scale-out: process faults name one instance. Faults run one after the
//! other, and one that would take down the last running instance of a
//! scaled-out service is skipped, so consumer twins are never both down and
//! room-service always has an instance to answer.

use crate::backends::{Backends, admin_call, fake_im_failures, fake_wallet_failure};
use crate::interrupt::StopFlag;
use crate::services::{self, Ports, Topology};
use crate::stack::Stack;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// Fault kinds `--faults` accepts.
pub const KINDS: &[&str] = &[
    "kill", "restart", "broker", "redis", "mysql", "im", "wallet",
];

/// Services whose instances share a consumer group on the room outbox topic.
const CONSUMERS: &[&str] = &["im-bridge", "activity-consumer", "notice-consumer"];

/// How long a killed consumer stays down at least: past its group session
/// timeout (25 s in the chaos stack, see `chaos::overrides`). Tansu 0.6.0 only drops a dead member when a join finds it
/// silent for longer than the session timeout; a replacement that joins
/// sooner is handed an empty assignment while the dead member keeps its
/// partitions, and nothing moves them again (observed: a restarted
/// notice-consumer idle with `partitions=[]` for minutes). Kafka expires the
/// member on its own; with Tansu the replacement must come back late. (Its
/// twin keeps consuming its own partitions meanwhile.)
const CONSUMER_DOWN: Duration = Duration::from_secs(27);

/// How long a killed process stays down: a room-service instance 1–7 s (past
/// the 6 s lease TTL of the chaos stack at times, so the survivors take its
/// rooms over before it is back), a relay up to 1.5 s, a consumer longer (see
/// [`CONSUMER_DOWN`]).
fn down_time(target: &str, rng: &mut Rng) -> Duration {
    let service = services::role_of(target);
    if service == "room-service" {
        Duration::from_millis(1_000 + rng.below(6_000))
    } else if CONSUMERS.contains(&service) {
        CONSUMER_DOWN + Duration::from_millis(rng.below(1500))
    } else {
        Duration::from_millis(rng.below(1500))
    }
}

/// How long a gracefully stopped process stays down: it left its consumer
/// group and released its leases on the way out, so it may come back at once.
fn restart_gap(rng: &mut Rng) -> Duration {
    Duration::from_millis(rng.below(1500))
}

/// How long the broker stays down.
const BROKER_OUTAGE: Duration = Duration::from_secs(20);

/// One fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL a process (one instance), restart it after `down`.
    Kill {
        target: &'static str,
        down: Duration,
    },
    /// Stop a process (one instance) gracefully — SIGTERM, wait for it to
    /// drain and exit — and start it again after `down`: a rolling deploy.
    Restart {
        target: &'static str,
        down: Duration,
    },
    /// Freeze the broker (SIGSTOP) for [`BROKER_OUTAGE`], then thaw it: every
    /// client sees an unreachable broker. (A kill and restart would need a
    /// durable storage engine: Tansu 0.6.0's SQLite engine panics after a
    /// restart when an idempotent producer bumps its epoch, in
    /// `tansu-storage` `lite.rs` "more or less than one row", and its memory
    /// engine loses the log.)
    BrokerOutage,
    /// SIGKILL Redis and start it again empty.
    RedisRestart,
    /// SIGKILL MariaDB, restart it after `down`.
    MysqlRestart { down: Duration },
    /// Queue fake Tencent IM failures (`variant` picks which).
    Im { variant: u8 },
    /// Make the fake wallet fail or time out (`variant` picks which).
    Wallet { variant: u8 },
}

impl Fault {
    /// Short text for the progress log.
    pub fn describe(&self) -> String {
        match self {
            Fault::Kill { target, down } => {
                format!("kill -9 {target}, restart after {}ms", down.as_millis())
            }
            Fault::Restart { target, down } => format!(
                "graceful restart of {target} (SIGTERM, exit, start after {}ms)",
                down.as_millis()
            ),
            Fault::BrokerOutage => {
                format!("broker frozen (SIGSTOP) for {}s", BROKER_OUTAGE.as_secs())
            }
            Fault::RedisRestart => "Redis killed and restarted empty".into(),
            Fault::MysqlRestart { down } => {
                format!("MariaDB killed, down for {}ms", down.as_millis())
            }
            Fault::Im { variant } => format!("fake IM: {}", fake_im_failures(*variant).0),
            Fault::Wallet { variant } => {
                format!("fake wallet: {}", fake_wallet_failure(*variant).0)
            }
        }
    }

    /// True for faults that commands wait on: a room-service instance (its
    /// rooms move or wait), MariaDB, Redis (the leases) and the wallet.
    fn on_command_path(&self) -> bool {
        match self {
            Fault::Kill { target, .. } | Fault::Restart { target, .. } => {
                services::role_of(target) == "room-service"
            }
            Fault::MysqlRestart { .. } | Fault::RedisRestart | Fault::Wallet { .. } => true,
            Fault::BrokerOutage | Fault::Im { .. } => false,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Fault::Kill { .. } => "kill",
            Fault::Restart { .. } => "graceful-restart",
            Fault::BrokerOutage => "broker-outage",
            Fault::RedisRestart => "redis-restart",
            Fault::MysqlRestart { .. } => "mysql-restart",
            Fault::Im { .. } => "im-fault",
            Fault::Wallet { .. } => "wallet-fault",
        }
    }

    fn target(&self) -> &'static str {
        match self {
            Fault::Kill { target, .. } | Fault::Restart { target, .. } => target,
            Fault::BrokerOutage => "tansu",
            Fault::RedisRestart => "redis",
            Fault::MysqlRestart { .. } => "mariadb",
            Fault::Im { .. } => "fake-tencent-im",
            Fault::Wallet { .. } => "fake-wallet",
        }
    }
}

/// SplitMix64: tiny, seedable, good enough to pick faults.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }
}

/// The fault sequence.
#[derive(Debug)]
pub struct Schedule {
    rng: Rng,
    enabled: Vec<String>,
    topology: Topology,
    coverage: Vec<Fault>,
}

impl Schedule {
    /// The schedule of `seed` over the `enabled` kinds and the instances of `topology`.
    pub fn new(seed: u64, enabled: &[String], topology: &Topology) -> Self {
        let mut rng = Rng(seed);
        let mut coverage = Vec::new();
        for kind in enabled {
            match kind.as_str() {
                // Every room-service and relay instance (each is back within
                // seconds), one instance of each consumer group (each kill
                // costs a session timeout of downtime).
                "kill" => {
                    for instances in topology.services() {
                        let targets = if CONSUMERS.contains(&instances[0]) {
                            vec![pick(instances, &mut rng)]
                        } else {
                            instances.to_vec()
                        };
                        for target in targets {
                            let down = down_time(target, &mut rng);
                            coverage.push(Fault::Kill { target, down });
                        }
                    }
                }
                "restart" => {
                    for instances in topology.services() {
                        let target = pick(instances, &mut rng);
                        let down = restart_gap(&mut rng);
                        coverage.push(Fault::Restart { target, down });
                    }
                }
                "broker" => coverage.push(Fault::BrokerOutage),
                "redis" => coverage.push(Fault::RedisRestart),
                "mysql" => coverage.push(Fault::MysqlRestart {
                    down: Duration::from_millis(2000 + rng.below(4000)),
                }),
                "im" => coverage.push(Fault::Im {
                    variant: rng.below(4) as u8,
                }),
                "wallet" => coverage.push(Fault::Wallet {
                    variant: rng.below(4) as u8,
                }),
                _ => {}
            }
        }
        // Fisher–Yates, popped from the end.
        for i in (1..coverage.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            coverage.swap(i, j);
        }
        // The command path's faults pop first, so even a short workload runs
        // through them (a room-service crash with no commands in flight
        // tests little); the slow consumer crashes come after.
        coverage.sort_by_key(Fault::on_command_path);
        Self {
            rng,
            enabled: enabled.to_vec(),
            topology: topology.clone(),
            coverage,
        }
    }

    /// True once every enabled kind has fired.
    pub fn covered(&self) -> bool {
        self.coverage.is_empty()
    }

    /// Pause before the next fault.
    pub fn gap(&mut self) -> Duration {
        Duration::from_millis(1_000 + self.rng.below(4_000))
    }

    /// The next fault: the coverage round first, then random draws.
    pub fn next(&mut self) -> Fault {
        if let Some(fault) = self.coverage.pop() {
            return fault;
        }
        let kind = self.enabled[self.rng.below(self.enabled.len() as u64) as usize].clone();
        match kind.as_str() {
            "kill" => {
                let target = self.any_instance();
                Fault::Kill {
                    target,
                    down: down_time(target, &mut self.rng),
                }
            }
            "restart" => Fault::Restart {
                target: self.any_instance(),
                down: restart_gap(&mut self.rng),
            },
            "broker" => Fault::BrokerOutage,
            "redis" => Fault::RedisRestart,
            "mysql" => Fault::MysqlRestart {
                down: Duration::from_millis(2000 + self.rng.below(4000)),
            },
            "im" => Fault::Im {
                variant: self.rng.below(4) as u8,
            },
            _ => Fault::Wallet {
                variant: self.rng.below(4) as u8,
            },
        }
    }

    /// A service drawn evenly, then one of its instances.
    fn any_instance(&mut self) -> &'static str {
        let services: Vec<_> = self.topology.services().collect();
        let instances = services[self.rng.below(services.len() as u64) as usize];
        pick(instances, &mut self.rng)
    }
}

fn pick(instances: &[&'static str], rng: &mut Rng) -> &'static str {
    instances[rng.below(instances.len() as u64) as usize]
}

/// `faults.tsv`: `ms since start \t kind \t target \t detail`.
pub struct FaultLog {
    file: std::fs::File,
    started: Instant,
}

impl FaultLog {
    /// Creates the file.
    pub fn create(path: &Path) -> Result<Self, String> {
        let file = std::fs::File::create(path)
            .map_err(|error| format!("create {}: {error}", path.display()))?;
        Ok(Self {
            file,
            started: Instant::now(),
        })
    }

    fn record(&mut self, kind: &str, target: &str, detail: &str) {
        let _ = writeln!(
            self.file,
            "{}\t{kind}\t{target}\t{detail}",
            self.started.elapsed().as_millis()
        );
    }
}

/// What faults act on.
pub struct World<'a> {
    /// The services.
    pub stack: &'a mut Stack,
    /// MariaDB and Redis.
    pub backends: &'a mut Backends,
    /// Every port.
    pub ports: &'a Ports,
    /// The instances of each scaled-out service.
    pub topology: &'a Topology,
    /// Ctrl-C.
    pub stop: &'a StopFlag,
    /// Where applied faults are recorded.
    pub log: FaultLog,
    /// Things that went wrong in the harness or a recovery (each fails the run).
    pub problems: Vec<String>,
}

/// Sleeps `duration` unless Ctrl-C comes first; false when interrupted.
pub fn pause(duration: Duration, stop: &StopFlag) -> bool {
    let until = Instant::now() + duration;
    while Instant::now() < until {
        if stop.requested() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100).min(until - Instant::now()));
    }
    true
}

/// Applies one fault and waits for the system to be whole again. A process
/// fault that would leave its service with no running instance is skipped.
pub fn apply(world: &mut World<'_>, fault: &Fault) {
    if let Fault::Kill { target, .. } | Fault::Restart { target, .. } = fault {
        let siblings = world.topology.siblings(target);
        let stack = &mut *world.stack;
        if leaves_service_down(siblings, target, |name| stack.is_running(name)) {
            crate::detail(&format!(
                "skipped: no other {} instance is running",
                services::role_of(target)
            ));
            return;
        }
    }
    world
        .log
        .record(fault.kind(), fault.target(), &fault.describe());
    let outcome = match fault {
        // Started again even when the stop failed: a fault never leaves an
        // instance down.
        Fault::Kill { target, down } => {
            let stopped = world.stack.kill(target);
            pause(*down, world.stop);
            let back = world.stack.restart(target, world.stop);
            stopped.and(back.map(drop))
        }
        Fault::Restart { target, down } => {
            let stopped = world.stack.stop_gracefully(target).map(|drained| {
                crate::detail(&format!(
                    "{target} drained and exited in {:.1}s",
                    drained.as_secs_f64()
                ));
            });
            pause(*down, world.stop);
            let back = world.stack.restart(target, world.stop);
            stopped.and(back.map(drop))
        }
        Fault::BrokerOutage => world.stack.signal_broker("STOP").and_then(|()| {
            pause(BROKER_OUTAGE, world.stop);
            world.stack.signal_broker("CONT")
        }),
        Fault::RedisRestart => world.backends.restart_redis(),
        Fault::MysqlRestart { down } => {
            world.backends.kill_mysql();
            pause(*down, world.stop);
            world.backends.restart_mysql()
        }
        Fault::Im { variant } => admin_call(
            world.ports.fake_im,
            "POST",
            "/admin/faults",
            fake_im_failures(*variant).1,
        ),
        Fault::Wallet { variant } => {
            let (_, path, body) = fake_wallet_failure(*variant);
            let result = admin_call(world.ports.wallet_admin, "POST", path, body);
            if path == "/admin/latency" {
                pause(Duration::from_secs(4), world.stop);
                admin_call(world.ports.wallet_admin, "POST", path, r#"{"millis":0}"#).and(result)
            } else {
                result
            }
        }
    };
    if let Err(error) = outcome {
        world
            .problems
            .push(format!("{}: {error}", fault.describe()));
    }
}

/// True when taking `target` down would leave its scaled-out service
/// (`siblings`, itself included) with no instance for which `running` holds.
/// A service that runs a single instance may go down: that outage is the point.
fn leaves_service_down(
    siblings: &[&str],
    target: &str,
    mut running: impl FnMut(&str) -> bool,
) -> bool {
    siblings.len() > 1
        && !siblings
            .iter()
            .filter(|sibling| **sibling != target)
            .any(|sibling| running(sibling))
}

/// Restarts any service that died on its own, recording it: a crash nobody
/// injected is a finding, so it also fails the run.
pub fn restart_crashed(world: &mut World<'_>) {
    while let Some((name, status, log)) = world.stack.exited() {
        let detail = format!("{status}; see {}", log.display());
        world.log.record("unexpected-exit", name, &detail);
        world
            .problems
            .push(format!("{name} exited on its own ({detail})"));
        let _ = world.stack.kill(name);
        if let Err(error) = world.stack.restart(name, world.stop) {
            world.problems.push(error);
        }
    }
}

/// Ends every fault: pending fake failures cleared, wallet latency off, any
/// dead process restarted.
pub fn heal(world: &mut World<'_>) {
    crate::detail("clearing fake failures; every process running");
    for (port, path) in [
        (world.ports.fake_im, "/admin/faults"),
        (world.ports.wallet_admin, "/admin/faults"),
    ] {
        if let Err(error) = admin_call(port, "DELETE", path, "") {
            world.problems.push(error);
        }
    }
    if let Err(error) = admin_call(
        world.ports.wallet_admin,
        "POST",
        "/admin/latency",
        r#"{"millis":0}"#,
    ) {
        world.problems.push(error);
    }
    restart_crashed(world);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<String> {
        KINDS.iter().map(|kind| kind.to_string()).collect()
    }

    fn scaled() -> Topology {
        Topology::new(3, 2).unwrap()
    }

    fn round(schedule: &mut Schedule) -> Vec<Fault> {
        let mut round = Vec::new();
        while !schedule.covered() {
            round.push(schedule.next());
        }
        round
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let draw = |seed| {
            let mut schedule = Schedule::new(seed, &all(), &scaled());
            (0..30)
                .map(|_| (schedule.next(), schedule.gap()))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(11), draw(11));
        assert_ne!(draw(11), draw(12));
    }

    #[test]
    fn the_coverage_round_crashes_and_restarts_every_service_and_stops_the_broker() {
        let topology = scaled();
        let round = round(&mut Schedule::new(3, &all(), &topology));
        let killed = |target: &str| {
            round
                .iter()
                .any(|f| matches!(f, Fault::Kill { target: t, .. } if *t == target))
        };
        for instance in ["room-service", "room-service-2", "room-service-3"] {
            assert!(killed(instance), "{instance}");
        }
        assert!(killed("outbox-relay") && killed("outbox-relay-2"));
        for instances in topology.services() {
            let service = instances[0];
            let hits = |kind: &str| {
                round
                    .iter()
                    .filter(|f| f.kind() == kind && services::role_of(f.target()) == service)
                    .count()
            };
            assert!(hits("kill") >= 1, "kill {service}");
            assert_eq!(hits("graceful-restart"), 1, "restart {service}");
            if CONSUMERS.contains(&service) {
                // One twin per group: each consumer crash costs a session timeout.
                assert_eq!(hits("kill"), 1, "kill {service}");
            }
        }
        for kind in [
            "broker-outage",
            "redis-restart",
            "mysql-restart",
            "im-fault",
            "wallet-fault",
        ] {
            assert!(round.iter().any(|f| f.kind() == kind), "{kind}");
        }
        let first_elsewhere = round.iter().position(|f| !f.on_command_path()).unwrap();
        assert!(
            round[first_elsewhere..]
                .iter()
                .all(|f| !f.on_command_path()),
            "room-service, MariaDB, Redis and wallet faults come first: {round:?}"
        );
        assert!(first_elsewhere >= 7, "{round:?}");
        let only_im = Schedule::new(3, &["im".to_string()], &topology).next();
        assert_eq!(only_im.kind(), "im-fault");
    }

    #[test]
    fn process_faults_name_only_instances_that_run() {
        let single = Topology::new(1, 1).unwrap();
        let mut schedule = Schedule::new(5, &["kill".into(), "restart".into()], &single);
        let targets: Vec<&str> = (0..200).map(|_| schedule.next().target()).collect();
        assert!(targets.iter().all(|t| !t.ends_with("-3")), "{targets:?}");
        assert!(
            targets
                .iter()
                .all(|t| !t.ends_with("-2") || *t == "outbox-relay-2"),
            "{targets:?}"
        );
        let mut scaled = Schedule::new(5, &["kill".into(), "restart".into()], &scaled());
        let drawn: std::collections::BTreeSet<&str> =
            (0..400).map(|_| scaled.next().target()).collect();
        assert!(drawn.contains("room-service-3") && drawn.contains("notice-consumer-2"));
    }

    #[test]
    fn the_last_running_instance_of_a_service_is_never_taken_down() {
        let twins = ["im-bridge", "im-bridge-2"];
        assert!(!leaves_service_down(&twins, "im-bridge", |_| true));
        // Its twin is down (still restarting, or failed to come back).
        assert!(leaves_service_down(&twins, "im-bridge", |name| name == "im-bridge"));
        let rooms = ["room-service", "room-service-2", "room-service-3"];
        assert!(!leaves_service_down(&rooms, "room-service-3", |name| name == "room-service"));
        assert!(leaves_service_down(&rooms, "room-service-3", |name| name == "room-service-3"));
        // One instance only: its outage is the fault.
        assert!(!leaves_service_down(
            &["room-service"],
            "room-service",
            |_| false
        ));
        assert!(!leaves_service_down(&[], "fake-wallet", |_| false));
    }
}
