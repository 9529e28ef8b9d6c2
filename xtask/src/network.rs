//! The network between the services and what they call, in the reliability
//! run: one [`Proxy`] in front of each of MariaDB, Redis, the broker, the
//! fake wallet and the fake Tencent IM. The services are given the proxies'
//! ports ([`Network::service_ports`]); the harness, the workload and the
//! checker keep the real ones, so a fault on the services' path never
//! blocks the run's own calls. The MariaDB proxy is also the stable
//! address a failover moves (`crate::replication`).

use crate::proxy::{Fault, Proxy};
use crate::services::Ports;

/// What a network fault stands in front of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Mysql,
    Redis,
    Broker,
    Wallet,
    Im,
}

impl Target {
    /// Every target, in a fixed order (the schedule draws from it).
    pub const ALL: [Target; 5] = [
        Target::Mysql,
        Target::Redis,
        Target::Broker,
        Target::Wallet,
        Target::Im,
    ];

    /// The name `faults.tsv` records (the backend's process name).
    pub fn name(self) -> &'static str {
        match self {
            Target::Mysql => "mariadb",
            Target::Redis => "redis",
            Target::Broker => "tansu",
            Target::Wallet => "fake-wallet",
            Target::Im => "fake-tencent-im",
        }
    }
}

/// The proxies of one run.
#[derive(Debug)]
pub struct Network {
    mysql: Proxy,
    /// One per Redis node (two behind Sentinel).
    redis: Vec<Proxy>,
    broker: Proxy,
    wallet: Proxy,
    im: Proxy,
}

impl Network {
    /// A proxy in front of each backend port of `ports` and of the second
    /// Redis node when there is one (the backends may start later: a proxy
    /// connects upstream per connection).
    pub fn start(ports: &Ports, redis_replica: Option<u16>) -> Result<Self, String> {
        let mut redis = vec![Proxy::to_local(ports.redis)?];
        if let Some(port) = redis_replica {
            redis.push(Proxy::to_local(port)?);
        }
        Ok(Self {
            mysql: Proxy::to_local(ports.mysql)?,
            redis,
            broker: Proxy::to_local(ports.broker)?,
            wallet: Proxy::to_local(ports.wallet_grpc)?,
            im: Proxy::to_local(ports.fake_im)?,
        })
    }

    /// `ports` as the services see them: each backend behind its proxy.
    pub fn service_ports(&self, ports: &Ports) -> Ports {
        Ports {
            mysql: self.mysql.port,
            redis: self.redis[0].port,
            broker: self.broker.port,
            wallet_grpc: self.wallet.port,
            fake_im: self.im.port,
            ..ports.clone()
        }
    }

    /// The proxies in front of `target` (Redis: one per node).
    pub fn proxies(&self, target: Target) -> Vec<&Proxy> {
        match target {
            Target::Mysql => vec![&self.mysql],
            Target::Redis => self.redis.iter().collect(),
            Target::Broker => vec![&self.broker],
            Target::Wallet => vec![&self.wallet],
            Target::Im => vec![&self.im],
        }
    }

    /// The ports the two Redis nodes are announced under, when there are two.
    pub fn redis_nodes(&self) -> Option<[u16; 2]> {
        match self.redis.as_slice() {
            [master, replica] => Some([master.port, replica.port]),
            _ => None,
        }
    }

    /// The broker's proxy port, which the broker advertises.
    pub fn broker(&self) -> u16 {
        self.broker.port
    }

    /// The stable MariaDB address: what the services and the checker use.
    pub fn mysql(&self) -> &Proxy {
        &self.mysql
    }

    /// Ends every fault.
    pub fn heal(&self) {
        for target in Target::ALL {
            for proxy in self.proxies(target) {
                proxy.set_fault(Fault::None);
            }
        }
    }
}
