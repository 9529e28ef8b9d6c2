//! What the local stack runs: its ports, the shared local credentials, and
//! each service's command line and environment overrides. Everything a
//! service needs is passed explicitly (env `PREFIX__KEY` / flags), so the
//! shipped `configs/*.yaml` only supply the remaining defaults.

/// SDKAppID the fake Tencent IM accepts and every IM client signs for.
pub const IM_SDK_APP_ID: u64 = 1_400_000_000;
/// Key UserSigs are signed with (local only).
pub const IM_SECRET_KEY: &str = "local-dev-im-key";
/// Admin identifier of the IM REST calls.
pub const IM_ADMIN: &str = "administrator";
/// Messages the local fake IM keeps for the admin API (and the checks).
const IM_RECORDED_MESSAGES: usize = 2_000_000;

/// Every port of the stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ports {
    /// Tansu (Kafka protocol).
    pub broker: u16,
    /// fake-tencent-im (REST + `/admin/*`).
    pub fake_im: u16,
    /// fake-wallet gRPC.
    pub wallet_grpc: u16,
    /// fake-wallet admin HTTP.
    pub wallet_admin: u16,
    /// room-service gRPC.
    pub room_grpc: u16,
    /// room-service HTTP.
    pub room_http: u16,
    /// outbox-relay HTTP (admin, health, metrics).
    pub relay_http: u16,
    /// activity-consumer gRPC (activity/v1 direct entry).
    pub activity_grpc: u16,
    /// activity-consumer HTTP.
    pub activity_http: u16,
    /// im-bridge HTTP.
    pub im_bridge_http: u16,
    /// notice-consumer HTTP.
    pub notice_http: u16,
    /// MariaDB/MySQL the services use (3306 unless a private instance runs).
    pub mysql: u16,
    /// Redis the services use (6379 unless a private instance runs).
    pub redis: u16,
}

impl Ports {
    /// Every port, services' and infrastructure's alike.
    pub fn all(&self) -> [u16; 13] {
        [
            self.broker,
            self.fake_im,
            self.wallet_grpc,
            self.wallet_admin,
            self.room_grpc,
            self.room_http,
            self.relay_http,
            self.activity_grpc,
            self.activity_http,
            self.im_bridge_http,
            self.notice_http,
            self.mysql,
            self.redis,
        ]
    }

    /// The documented ports of `cargo xtask up` (README "Services and ports").
    pub fn fixed() -> Self {
        Self {
            broker: 9092,
            fake_im: 18090,
            wallet_grpc: 7601,
            wallet_admin: 7602,
            room_grpc: 7101,
            room_http: 7102,
            relay_http: 7201,
            activity_grpc: 7301,
            activity_http: 7302,
            im_bridge_http: 7401,
            notice_http: 7502,
            mysql: 3306,
            redis: 6379,
        }
    }

    /// Free loopback ports, so a demo can run next to `up` or the tests.
    pub fn free() -> Result<Self, String> {
        // Hold every listener until all are chosen so no port repeats.
        let mut held = Vec::new();
        let mut next = || -> Result<u16, String> {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")
                .map_err(|error| format!("cannot find a free port: {error}"))?;
            let port = listener
                .local_addr()
                .map_err(|error| error.to_string())?
                .port();
            held.push(listener);
            Ok(port)
        };
        let ports = Self {
            broker: next()?,
            fake_im: next()?,
            wallet_grpc: next()?,
            wallet_admin: next()?,
            room_grpc: next()?,
            room_http: next()?,
            relay_http: next()?,
            activity_grpc: next()?,
            activity_http: next()?,
            im_bridge_http: next()?,
            notice_http: next()?,
            mysql: 3306,
            redis: 6379,
        };
        drop(held);
        Ok(ports)
    }
}

/// How a service shows it is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// `GET /readyz` answers 200 (the services).
    Readyz(u16),
    /// `GET /healthz` answers 200 (the fakes have no readiness of their own).
    Healthz(u16),
}

impl Probe {
    /// `(port, path)` of the probe.
    pub fn target(self) -> (u16, &'static str) {
        match self {
            Probe::Readyz(port) => (port, "/readyz"),
            Probe::Healthz(port) => (port, "/healthz"),
        }
    }
}

/// When a service starts, relative to the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// The fakes of other teams' systems.
    Fakes,
    /// room-service (runs the migrations first).
    Writer,
    /// The relay and the consumers, in parallel.
    Downstream,
}

/// One service of the stack.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Instance (and log) name; the binary's name unless several instances run.
    pub name: &'static str,
    /// Executable under `target/debug`.
    pub binary: &'static str,
    /// Shipped config file relative to the workspace root, passed as `--config` when it exists.
    pub config: Option<&'static str>,
    /// Extra command-line arguments.
    pub args: Vec<String>,
    /// Environment overrides.
    pub env: Vec<(String, String)>,
    /// Readiness probe.
    pub probe: Probe,
    /// Start phase.
    pub phase: Phase,
    /// When false, a failed start is reported and the stack runs without it
    /// (a consumer that failed to build or start).
    pub required: bool,
}

/// Per-service overrides a caller adds (the demo's shortened timers):
/// `(service name, ENV_KEY, value)`.
pub type Overrides = [(&'static str, String, String)];

fn kv(key: &str, value: impl ToString) -> (String, String) {
    (key.to_string(), value.to_string())
}

/// Common keys of a service that owns tables, consumes the broker and calls IM.
fn service_env(
    prefix: &str,
    ports: &Ports,
    database: &str,
    with_im: bool,
) -> Vec<(String, String)> {
    let mut env = vec![
        kv(
            &format!("{prefix}__MYSQL__URL"),
            format!("mysql://root@127.0.0.1:{}/{database}", ports.mysql),
        ),
        kv(&format!("{prefix}__MYSQL__RUN_MIGRATIONS"), true),
        kv(&format!("{prefix}__ROCKETMQ__ENABLED"), true),
        kv(
            &format!("{prefix}__ROCKETMQ__NAME_SERVERS"),
            format!("127.0.0.1:{}", ports.broker),
        ),
    ];
    if with_im {
        env.extend([
            kv(
                &format!("{prefix}__TENCENT_IM__BASE_URL"),
                format!("http://127.0.0.1:{}", ports.fake_im),
            ),
            kv(&format!("{prefix}__TENCENT_IM__SDK_APP_ID"), IM_SDK_APP_ID),
            kv(&format!("{prefix}__TENCENT_IM__SECRET_KEY"), IM_SECRET_KEY),
            kv(&format!("{prefix}__TENCENT_IM__ADMIN_IDENTIFIER"), IM_ADMIN),
        ]);
    }
    env
}

/// The services in start order (the stop order is `stack::STOP_ORDER`).
pub fn specs(ports: &Ports, database: &str, overrides: &Overrides) -> Vec<Spec> {
    let mut room = service_env("ROOM", ports, database, true);
    room.extend([
        kv(
            "ROOM__GRPC_LISTEN",
            format!("127.0.0.1:{}", ports.room_grpc),
        ),
        kv(
            "ROOM__HTTP_LISTEN",
            format!("127.0.0.1:{}", ports.room_http),
        ),
        kv(
            "ROOM__REDIS__URL",
            format!("redis://127.0.0.1:{}", ports.redis),
        ),
        kv(
            "ROOM__WALLET__ENDPOINT",
            format!("http://127.0.0.1:{}", ports.wallet_grpc),
        ),
        kv("ROOM__TENCENT_IM__ENABLED", true),
        // The standalone outbox-relay publishes; room-service only writes the outbox.
        kv("ROOM__OUTBOX_WORKER__ENABLED", false),
        kv("ROOM__ROCKETMQ__ROOM_OUTBOX__ENABLED", true),
        // Treasure wake-up rows, and the treasure-open consumer inside room-service.
        kv("ROOM__ROCKETMQ__TREASURE_OPEN__ENABLED", true),
    ]);
    let mut relay = service_env("RELAY", ports, database, false);
    relay.extend([
        kv(
            "RELAY__HTTP_LISTEN",
            format!("127.0.0.1:{}", ports.relay_http),
        ),
        kv("RELAY__ROCKETMQ__ROOM_OUTBOX__ENABLED", true),
        kv("RELAY__ROCKETMQ__TREASURE_OPEN__ENABLED", true),
        kv("RELAY__OUTBOX_WORKER__ENABLED", true),
        kv("RELAY__OUTBOX_WORKER__PUBLISH_MODE", "mq"),
        kv(
            "RELAY__OUTBOX_WORKER__REDIS_URL",
            format!("redis://127.0.0.1:{}", ports.redis),
        ),
    ]);
    let mut im_bridge = service_env("IM_BRIDGE", ports, database, true);
    im_bridge.push(kv(
        "IM_BRIDGE__HTTP_LISTEN",
        format!("127.0.0.1:{}", ports.im_bridge_http),
    ));
    let mut activity = service_env("ACTIVITY", ports, database, true);
    activity.extend([
        kv(
            "ACTIVITY__GRPC_LISTEN",
            format!("127.0.0.1:{}", ports.activity_grpc),
        ),
        kv(
            "ACTIVITY__HTTP_LISTEN",
            format!("127.0.0.1:{}", ports.activity_http),
        ),
    ]);
    let mut notice = service_env("NOTICE", ports, database, true);
    notice.push(kv(
        "NOTICE__HTTP_LISTEN",
        format!("127.0.0.1:{}", ports.notice_http),
    ));

    let mut specs = vec![
        Spec {
            name: "fake-tencent-im",
            binary: "fake-tencent-im",
            config: None,
            args: vec![
                format!("--listen=127.0.0.1:{}", ports.fake_im),
                format!("--sdk-app-id={IM_SDK_APP_ID}"),
                format!("--secret-key={IM_SECRET_KEY}"),
                format!("--admin-identifier={IM_ADMIN}"),
                // The reliability checks read every message back: a 10-minute
                // run records ~120k, past the fake's default limit.
                format!("--max-recorded-messages={IM_RECORDED_MESSAGES}"),
            ],
            env: Vec::new(),
            probe: Probe::Healthz(ports.fake_im),
            phase: Phase::Fakes,
            required: true,
        },
        Spec {
            name: "fake-wallet",
            binary: "fake-wallet",
            config: None,
            args: vec![
                format!("--grpc-listen=127.0.0.1:{}", ports.wallet_grpc),
                format!("--admin-listen=127.0.0.1:{}", ports.wallet_admin),
            ],
            env: Vec::new(),
            probe: Probe::Healthz(ports.wallet_admin),
            phase: Phase::Fakes,
            required: true,
        },
        Spec {
            name: "room-service",
            binary: "room-service",
            config: Some("services/room-service/configs/room-service.yaml"),
            args: Vec::new(),
            env: room,
            probe: Probe::Readyz(ports.room_http),
            phase: Phase::Writer,
            required: true,
        },
        Spec {
            name: "outbox-relay",
            binary: "outbox-relay",
            config: Some("services/outbox-relay/configs/outbox-relay.yaml"),
            args: Vec::new(),
            env: relay,
            probe: Probe::Readyz(ports.relay_http),
            phase: Phase::Downstream,
            required: true,
        },
        Spec {
            name: "im-bridge",
            binary: "im-bridge",
            config: Some("services/im-bridge/configs/im-bridge.yaml"),
            args: Vec::new(),
            env: im_bridge,
            probe: Probe::Readyz(ports.im_bridge_http),
            phase: Phase::Downstream,
            required: false,
        },
        Spec {
            name: "activity-consumer",
            binary: "activity-consumer",
            config: Some("services/activity-consumer/configs/activity-consumer.yaml"),
            args: Vec::new(),
            env: activity,
            probe: Probe::Readyz(ports.activity_http),
            phase: Phase::Downstream,
            required: false,
        },
        Spec {
            name: "notice-consumer",
            binary: "notice-consumer",
            config: Some("services/notice-consumer/configs/notice-consumer.yaml"),
            args: Vec::new(),
            env: notice,
            probe: Probe::Readyz(ports.notice_http),
            phase: Phase::Downstream,
            required: false,
        },
    ];
    for (service, key, value) in overrides {
        if let Some(spec) = specs.iter_mut().find(|spec| spec.name == *service) {
            spec.env.retain(|(existing, _)| existing != key);
            spec.env.push((key.clone(), value.clone()));
        }
    }
    specs
}

/// Names of the instances the reliability run may start of each service it
/// scales out, in start order: the first keeps the service's own name (its
/// log, its probe, its overrides), the others are `<service>-<n>`.
pub const INSTANCE_NAMES: &[&[&str]] = &[
    &["room-service", "room-service-2", "room-service-3"],
    &["outbox-relay", "outbox-relay-2"],
    &["im-bridge", "im-bridge-2"],
    &["activity-consumer", "activity-consumer-2"],
    &["notice-consumer", "notice-consumer-2"],
];

/// The service an instance belongs to: its name without a `-<n>` suffix.
pub fn role_of(instance: &str) -> &str {
    match instance.rsplit_once('-') {
        Some((service, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => service,
        _ => instance,
    }
}

/// Which instances of each scaled-out service run: every instance of one
/// service shares its database, Redis key prefix, broker and consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    services: Vec<&'static [&'static str]>,
}

impl Topology {
    /// `room_services` room-service instances (1–3), two relays and
    /// `consumers` instances (1–2) of each consumer.
    pub fn new(room_services: usize, consumers: usize) -> Result<Self, String> {
        let take = |names: &'static [&'static str], count: usize| {
            (1..=names.len())
                .contains(&count)
                .then(|| &names[..count])
                .ok_or_else(|| format!("{}: 1 to {} instances, not {count}", names[0], names.len()))
        };
        let mut services = vec![take(INSTANCE_NAMES[0], room_services)?, INSTANCE_NAMES[1]];
        for names in &INSTANCE_NAMES[2..] {
            services.push(take(names, consumers)?);
        }
        Ok(Self { services })
    }

    /// Each scaled-out service's instances, first the service's own name.
    pub fn services(&self) -> impl Iterator<Item = &'static [&'static str]> + '_ {
        self.services.iter().copied()
    }

    /// Every instance of `instance`'s service in this run, itself included;
    /// empty when its service is not scaled out.
    pub fn siblings(&self, instance: &str) -> &'static [&'static str] {
        self.services
            .iter()
            .find(|names| names.contains(&instance))
            .copied()
            .unwrap_or_default()
    }
}

/// Instance `name` of `base` (scale-out): every `*_LISTEN` address moves to a
/// port from `port` (the HTTP listener carries the probe), then [`identify`].
/// Another writer starts with the downstream services, once the first has
/// run the migrations: migrators racing on a fresh MariaDB database fail on
/// each other's half-applied migration.
pub fn instance(
    base: &Spec,
    name: &'static str,
    mut port: impl FnMut() -> Result<u16, String>,
) -> Result<Spec, String> {
    let mut spec = base.clone();
    spec.name = name;
    spec.phase = spec.phase.max(Phase::Downstream);
    for (key, value) in &mut spec.env {
        if key.ends_with("_LISTEN") {
            let moved = port()?;
            *value = format!("127.0.0.1:{moved}");
            if key.ends_with("__HTTP_LISTEN") {
                spec.probe = Probe::Readyz(moved);
            }
        }
    }
    identify(&mut spec);
    Ok(spec)
}

/// Gives an instance the identity its peers know it by: room-service its
/// lease node id (the `x-room-served-by` of its replies) and the URL the
/// other instances forward commands to; the relay its node id in shard
/// leases. Both are the instance name, so logs, faults and the ledger agree.
pub fn identify(spec: &mut Spec) {
    let own = |key: &str, value: String| (key.to_string(), value);
    let identity = match role_of(spec.name) {
        "room-service" => vec![
            own("ROOM__NODE_ID", spec.name.to_string()),
            own(
                "ROOM__ADVERTISE_URL",
                format!(
                    "http://{}",
                    spec.env_value("ROOM__GRPC_LISTEN").unwrap_or_default()
                ),
            ),
        ],
        "outbox-relay" => vec![own("RELAY__OUTBOX_WORKER__NODE_ID", spec.name.to_string())],
        _ => Vec::new(),
    };
    for (key, value) in identity {
        spec.env.retain(|(existing, _)| *existing != key);
        spec.env.push((key, value));
    }
}

impl Spec {
    /// The value of environment override `key`, when set.
    pub fn env_value(&self, key: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(existing, _)| existing == key)
            .map(|(_, value)| value.as_str())
    }
}

/// Topics (name, partitions) created before any consumer subscribes: the two
/// seed topics and each consumer group's dead-letter topic (`<group>.dlq`).
pub const TOPICS: &[(&str, u32)] = &[
    ("hyapp_room_outbox", 4),
    ("hyapp_room_treasure_open", 2),
    ("hyapp-room-im-bridge.dlq", 1),
    ("hyapp-activity-room-outbox.dlq", 1),
    ("hyapp-notice-room-outbox.dlq", 1),
    ("hyapp-room-treasure-open.dlq", 1),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_and_overrides_replace() {
        let ports = Ports::free().unwrap();
        // The infrastructure ports are the shared 3306/6379 here.
        let all = &ports.all()[..11];
        let unique: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(unique.len(), all.len());
        let overrides = [(
            "room-service",
            "ROOM__OUTBOX_WORKER__ENABLED".to_string(),
            "true".to_string(),
        )];
        let specs = specs(&ports, "db", &overrides);
        let room = specs
            .iter()
            .find(|spec| spec.name == "room-service")
            .unwrap();
        let values: Vec<_> = room
            .env
            .iter()
            .filter(|(key, _)| key == "ROOM__OUTBOX_WORKER__ENABLED")
            .collect();
        assert_eq!(values.len(), 1);
        assert_eq!(values[0].1, "true");
    }

    #[test]
    fn instances_get_their_own_listeners_and_identity() {
        let ports = Ports::free().unwrap();
        let specs = specs(&ports, "db", &[]);
        let base = |name: &str| specs.iter().find(|spec| spec.name == name).unwrap();
        let mut next = 40_000;
        let mut port = || {
            next += 1;
            Ok(next)
        };
        let room = instance(base("room-service"), "room-service-2", &mut port).unwrap();
        assert_eq!(room.env_value("ROOM__GRPC_LISTEN"), Some("127.0.0.1:40001"));
        assert_eq!(room.env_value("ROOM__HTTP_LISTEN"), Some("127.0.0.1:40002"));
        assert_eq!(room.probe, Probe::Readyz(40_002));
        assert_eq!(
            room.phase,
            Phase::Downstream,
            "after the first ran the migrations"
        );
        assert_eq!(room.env_value("ROOM__NODE_ID"), Some("room-service-2"));
        assert_eq!(
            room.env_value("ROOM__ADVERTISE_URL"),
            Some("http://127.0.0.1:40001")
        );
        assert_eq!(
            room.env_value("ROOM__MYSQL__URL"),
            base("room-service").env_value("ROOM__MYSQL__URL")
        );
        let activity =
            instance(base("activity-consumer"), "activity-consumer-2", &mut port).unwrap();
        assert_eq!(
            activity.env_value("ACTIVITY__GRPC_LISTEN"),
            Some("127.0.0.1:40003")
        );
        assert_eq!(activity.probe, Probe::Readyz(40_004));
        assert_eq!(activity.env_value("ACTIVITY__NODE_ID"), None);
        let relay = instance(base("outbox-relay"), "outbox-relay-2", &mut port).unwrap();
        assert_eq!(
            relay.env_value("RELAY__OUTBOX_WORKER__NODE_ID"),
            Some("outbox-relay-2")
        );
    }

    #[test]
    fn instances_belong_to_their_service() {
        assert_eq!(role_of("room-service-3"), "room-service");
        assert_eq!(role_of("room-service"), "room-service");
        assert_eq!(role_of("fake-tencent-im"), "fake-tencent-im");
        let topology = Topology::new(3, 2).unwrap();
        assert_eq!(
            topology.siblings("im-bridge-2"),
            ["im-bridge", "im-bridge-2"]
        );
        assert_eq!(topology.siblings("room-service").len(), 3);
        assert!(topology.siblings("fake-wallet").is_empty());
        assert_eq!(
            Topology::new(1, 1).unwrap().siblings("notice-consumer"),
            ["notice-consumer"]
        );
        assert!(Topology::new(4, 2).is_err());
        assert!(Topology::new(3, 0).is_err());
    }
}
