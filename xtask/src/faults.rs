//! The seeded fault schedule of `cargo xtask chaos` and how each fault is
//! applied to the real processes. The same seed gives the same sequence of
//! faults and gaps. Every enabled kind fires at least once (a shuffled
//! coverage round first, including a crash of every process kind), then
//! faults are drawn at random. Each applied fault is appended to
//! `faults.tsv` for the checker's table.

use crate::backends::Backends;
use crate::interrupt::StopFlag;
use crate::services::Ports;
use crate::stack::{self, Stack};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// Fault kinds `--faults` accepts.
pub const KINDS: &[&str] = &["kill", "broker", "redis", "mysql", "im", "wallet"];

/// Processes a `kill` fault may hit.
const KILL_TARGETS: &[&str] = &[
    "room-service",
    "outbox-relay",
    "outbox-relay-2",
    "im-bridge",
    "activity-consumer",
    "notice-consumer",
];

/// How long a killed consumer stays down at least: past its group session
/// timeout (25 s in the chaos stack, see `chaos::overrides`). Tansu 0.6.0 only drops a dead member when a join finds it
/// silent for longer than the session timeout; a replacement that joins
/// sooner is handed an empty assignment while the dead member keeps its
/// partitions, and nothing moves them again (observed: a restarted
/// notice-consumer idle with `partitions=[]` for minutes). Kafka expires the
/// member on its own; with Tansu the replacement must come back late.
const CONSUMER_DOWN: Duration = Duration::from_secs(27);

/// How long a killed process stays down: up to 1.5 s, a consumer longer (see [`CONSUMER_DOWN`]).
fn down_time(target: &str, rng: &mut Rng) -> Duration {
    let jitter = Duration::from_millis(rng.below(1500));
    if target.ends_with("-consumer") || target == "im-bridge" {
        CONSUMER_DOWN + jitter
    } else {
        jitter
    }
}

/// How long the broker stays down.
const BROKER_OUTAGE: Duration = Duration::from_secs(20);

/// One fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL a process, restart it after `down`.
    Kill {
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
            Fault::BrokerOutage => {
                format!("broker frozen (SIGSTOP) for {}s", BROKER_OUTAGE.as_secs())
            }
            Fault::RedisRestart => "Redis killed and restarted empty".into(),
            Fault::MysqlRestart { down } => {
                format!("MariaDB killed, down for {}ms", down.as_millis())
            }
            Fault::Im { variant } => format!("fake IM: {}", im_rules(*variant).0),
            Fault::Wallet { variant } => format!("fake wallet: {}", wallet_fault(*variant).0),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Fault::Kill { .. } => "kill",
            Fault::BrokerOutage => "broker-outage",
            Fault::RedisRestart => "redis-restart",
            Fault::MysqlRestart { .. } => "mysql-restart",
            Fault::Im { .. } => "im-fault",
            Fault::Wallet { .. } => "wallet-fault",
        }
    }

    fn target(&self) -> &'static str {
        match self {
            Fault::Kill { target, .. } => target,
            Fault::BrokerOutage => "tansu",
            Fault::RedisRestart => "redis",
            Fault::MysqlRestart { .. } => "mariadb",
            Fault::Im { .. } => "fake-tencent-im",
            Fault::Wallet { .. } => "fake-wallet",
        }
    }
}

/// The fake IM failure sets: `(description, JSON rules)`.
fn im_rules(variant: u8) -> (&'static str, &'static str) {
    match variant % 4 {
        0 => (
            "next 40 calls answer HTTP 429",
            r#"[{"api":"*","http_status":429,"times":40}]"#,
        ),
        1 => (
            "next 40 calls answer HTTP 503",
            r#"[{"api":"*","http_status":503,"times":40}]"#,
        ),
        2 => (
            "next 40 calls answer ErrorCode 60007 (REST frequency limit)",
            r#"[{"api":"*","error_code":60007,"error_info":"REST API frequency limit","times":40}]"#,
        ),
        _ => (
            "next 40 calls take 1.5s",
            r#"[{"api":"*","latency_ms":1500,"times":40}]"#,
        ),
    }
}

/// The fake wallet failures: `(description, path, JSON body)`.
fn wallet_fault(variant: u8) -> (&'static str, &'static str, &'static str) {
    match variant % 4 {
        0 => (
            "next 8 debits UNAVAILABLE",
            "/admin/faults",
            r#"{"method":"debit","count":8,"code":"unavailable"}"#,
        ),
        1 => (
            "next 8 debits applied but answered DEADLINE_EXCEEDED (lost replies)",
            "/admin/faults",
            r#"{"method":"debit","count":8,"code":"deadline_exceeded","after_apply":true}"#,
        ),
        2 => (
            "next 4 refunds INTERNAL",
            "/admin/faults",
            r#"{"method":"refund","count":4,"code":"internal"}"#,
        ),
        _ => (
            "every call takes 2.5s for 4s (past room-service's 2s timeout)",
            "/admin/latency",
            r#"{"millis":2500}"#,
        ),
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
    coverage: Vec<Fault>,
}

impl Schedule {
    /// The schedule of `seed` over the `enabled` kinds.
    pub fn new(seed: u64, enabled: &[String]) -> Self {
        let mut rng = Rng(seed);
        let mut coverage = Vec::new();
        for kind in enabled {
            match kind.as_str() {
                "kill" => coverage.extend(KILL_TARGETS.iter().map(|target| Fault::Kill {
                    target,
                    down: down_time(target, &mut rng),
                })),
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
        Self {
            rng,
            enabled: enabled.to_vec(),
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
                let target = KILL_TARGETS[self.rng.below(KILL_TARGETS.len() as u64) as usize];
                Fault::Kill {
                    target,
                    down: down_time(target, &mut self.rng),
                }
            }
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

/// Applies one fault and waits for the system to be whole again.
pub fn apply(world: &mut World<'_>, fault: &Fault) {
    world
        .log
        .record(fault.kind(), fault.target(), &fault.describe());
    let outcome = match fault {
        Fault::Kill { target, down } => world.stack.kill(target).and_then(|()| {
            pause(*down, world.stop);
            world.stack.restart(target, world.stop).map(|_| ())
        }),
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
        Fault::Im { variant } => post(
            world.ports.fake_im,
            "POST",
            "/admin/faults",
            im_rules(*variant).1,
        ),
        Fault::Wallet { variant } => {
            let (_, path, body) = wallet_fault(*variant);
            let result = post(world.ports.wallet_admin, "POST", path, body);
            if path == "/admin/latency" {
                pause(Duration::from_secs(4), world.stop);
                post(world.ports.wallet_admin, "POST", path, r#"{"millis":0}"#).and(result)
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

fn post(port: u16, method: &str, path: &str, body: &str) -> Result<(), String> {
    match stack::http_request(port, method, path, Some(body)) {
        Some(status) if (200..300).contains(&status) => Ok(()),
        other => Err(format!(
            "{method} 127.0.0.1:{port}{path} answered {other:?}"
        )),
    }
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
        if let Err(error) = post(port, "DELETE", path, "") {
            world.problems.push(error);
        }
    }
    if let Err(error) = post(
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

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let draw = |seed| {
            let mut schedule = Schedule::new(seed, &all());
            (0..30)
                .map(|_| (schedule.next(), schedule.gap()))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(11), draw(11));
        assert_ne!(draw(11), draw(12));
    }

    #[test]
    fn the_coverage_round_crashes_every_process_and_stops_the_broker() {
        let mut schedule = Schedule::new(3, &all());
        let mut round = Vec::new();
        while !schedule.covered() {
            round.push(schedule.next());
        }
        for target in KILL_TARGETS {
            assert!(
                round
                    .iter()
                    .any(|f| matches!(f, Fault::Kill { target: t, .. } if t == target)),
                "{target}"
            );
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
        let only_im = Schedule::new(3, &["im".to_string()]).next();
        assert_eq!(only_im.kind(), "im-fault");
    }
}
