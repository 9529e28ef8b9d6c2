//! The seeded fault schedule of `cargo xtask chaos`: which fault comes
//! next and how long it lasts. The same seed gives the same sequence of
//! faults and gaps. Every enabled kind fires at least once (a shuffled
//! coverage round first: a crash of every room-service and relay instance
//! and of one instance of each consumer group, a graceful restart of one
//! instance of every service; the faults on the command path before the
//! others), then faults are drawn at random. Process faults name one
//! instance of a scaled-out service. How a fault is applied is
//! [`crate::faults`].

use crate::backends::{fake_im_failures, fake_wallet_failure};
use crate::network::Target;
use crate::topology::{self, Topology};
use std::time::Duration;

/// Fault kinds `--faults` accepts.
pub const KINDS: &[&str] = &[
    "kill",
    "restart",
    "broker",
    "redis",
    "mysql",
    "im",
    "wallet",
    "net",
    "mysql-failover",
    "redis-failover",
];

/// The network faults of the `net` kind, in the order the coverage round
/// deals them out over the targets.
const NET_FAULTS: [NetFault; 4] = [
    NetFault::Latency,
    NetFault::Stall,
    NetFault::Reset,
    NetFault::HalfOpen,
];

/// A network fault of a proxy (`crate::proxy::Fault` without its figures).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetFault {
    Latency,
    Stall,
    Reset,
    HalfOpen,
}

impl NetFault {
    fn name(self) -> &'static str {
        match self {
            NetFault::Latency => "net-latency",
            NetFault::Stall => "net-stall",
            NetFault::Reset => "net-reset",
            NetFault::HalfOpen => "net-half-open",
        }
    }
}

/// A network fault drawn for `target`: its kind, how long it holds (2–5 s)
/// and, for latency, the delay added to every chunk each way (50–250 ms).
fn net_fault(target: Target, kind: NetFault, rng: &mut Rng) -> Fault {
    Fault::Net {
        target,
        kind,
        hold: Duration::from_millis(2_000 + rng.below(3_000)),
        latency: Duration::from_millis(50 + rng.below(200)),
    }
}

/// How long a killed consumer stays down at least: past its group session
/// timeout (25 s in the chaos stack, see `crate::chaos` overrides). Tansu 0.6.0 only drops a dead member when a join finds it
/// silent for longer than the session timeout; a replacement that joins
/// sooner is handed an empty assignment while the dead member keeps its
/// partitions, and nothing moves them again (observed: a restarted
/// notice-consumer idle with `partitions=[]` for minutes). Kafka expires the
/// member on its own; with Tansu the replacement must come back late. (Its
/// twin keeps consuming its own partitions meanwhile.)
const CONSUMER_DOWN: Duration = Duration::from_secs(27);

/// How long a killed process stays down: a room-service instance 1–7 s (past
/// the 1 s liveness TTL of the chaos stack, so the survivors take its rooms
/// over before it is back, and at times past the 6 s lease TTL too), a relay
/// up to 1.5 s, a consumer longer (see [`CONSUMER_DOWN`]).
fn down_time(target: &str, rng: &mut Rng) -> Duration {
    let service = topology::role_of(target);
    if service == "room-service" {
        Duration::from_millis(1_000 + rng.below(6_000))
    } else if crate::groups::is_consumer_service(service) {
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
pub(crate) const BROKER_OUTAGE: Duration = Duration::from_secs(20);

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
    /// A network fault on the proxy in front of `target` for `hold`
    /// (`latency` is the added delay of a latency fault).
    Net {
        target: Target,
        kind: NetFault,
        hold: Duration,
        latency: Duration,
    },
    /// SIGKILL the MariaDB primary, promote its replica and move the
    /// services' address to it (`crate::replication`).
    MysqlFailover,
    /// SIGKILL the Redis master; the sentinels promote its replica
    /// (`crate::sentinel`).
    RedisFailover,
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
            Fault::Net {
                target,
                kind,
                hold,
                latency,
            } => {
                let what = match kind {
                    NetFault::Latency => format!("+{}ms each way", latency.as_millis()),
                    NetFault::Stall => "stalled (open, no bytes)".into(),
                    NetFault::Reset => "connections cut, new ones closed".into(),
                    NetFault::HalfOpen => "half-open (server side closed)".into(),
                };
                format!(
                    "network to {}: {what} for {}ms",
                    target.name(),
                    hold.as_millis()
                )
            }
            Fault::MysqlFailover => {
                "MariaDB replica held back 2s, then the primary killed, the replica promoted, the address moved".into()
            }
            Fault::RedisFailover => "Redis master killed, the sentinels promote its replica".into(),
        }
    }

    /// True for faults that commands wait on: a room-service instance (its
    /// rooms move or wait), MariaDB, Redis (the leases) and the wallet.
    fn on_command_path(&self) -> bool {
        match self {
            Fault::Kill { target, .. } | Fault::Restart { target, .. } => {
                topology::role_of(target) == "room-service"
            }
            Fault::MysqlRestart { .. }
            | Fault::MysqlFailover
            | Fault::RedisFailover
            | Fault::RedisRestart
            | Fault::Wallet { .. } => true,
            Fault::Net { target, .. } => {
                matches!(target, Target::Mysql | Target::Redis | Target::Wallet)
            }
            Fault::BrokerOutage | Fault::Im { .. } => false,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Kill { .. } => "kill",
            Fault::Restart { .. } => "graceful-restart",
            Fault::BrokerOutage => "broker-outage",
            Fault::RedisRestart => "redis-restart",
            Fault::MysqlRestart { .. } => "mysql-restart",
            Fault::Im { .. } => "im-fault",
            Fault::Wallet { .. } => "wallet-fault",
            Fault::Net { kind, .. } => kind.name(),
            Fault::MysqlFailover => "mysql-failover",
            Fault::RedisFailover => "redis-failover",
        }
    }

    pub fn target(&self) -> &'static str {
        match self {
            Fault::Kill { target, .. } | Fault::Restart { target, .. } => target,
            Fault::BrokerOutage => "tansu",
            Fault::RedisRestart => "redis",
            Fault::MysqlRestart { .. } => "mariadb",
            Fault::Im { .. } => "fake-tencent-im",
            Fault::Wallet { .. } => "fake-wallet",
            Fault::Net { target, .. } => target.name(),
            Fault::MysqlFailover => "mariadb",
            Fault::RedisFailover => "redis",
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
                        let targets = if crate::groups::is_consumer_service(instances[0]) {
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
                // Every target once, every network fault at least once.
                "net" => {
                    let offset = rng.below(4) as usize;
                    for (i, target) in Target::ALL.into_iter().enumerate() {
                        let kind = NET_FAULTS[(i + offset) % NET_FAULTS.len()];
                        coverage.push(net_fault(target, kind, &mut rng));
                    }
                }
                "mysql-failover" => coverage.push(Fault::MysqlFailover),
                "redis-failover" => coverage.push(Fault::RedisFailover),
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
            "net" => {
                let target = Target::ALL[self.rng.below(5) as usize];
                let kind = NET_FAULTS[self.rng.below(4) as usize];
                net_fault(target, kind, &mut self.rng)
            }
            "mysql-failover" => Fault::MysqlFailover,
            "redis-failover" => Fault::RedisFailover,
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

#[cfg(test)]
mod tests;
