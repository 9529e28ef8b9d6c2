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

/// A service's environment: `(KEY, value)` pairs.
type Env = Vec<(String, String)>;

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

/// The services in start order (the stop order is `stack::stop_order`).
pub fn specs(ports: &Ports, database: &str, overrides: &Overrides) -> Vec<Spec> {
    let mut specs = fake_specs(ports);
    specs.extend([
        app_spec(
            "room-service",
            "services/room-service/configs/room-service.yaml",
            room_env(ports, database),
            ports.room_http,
            Phase::Writer,
            true,
        ),
        app_spec(
            "outbox-relay",
            "services/outbox-relay/configs/outbox-relay.yaml",
            relay_env(ports, database),
            ports.relay_http,
            Phase::Downstream,
            true,
        ),
        app_spec(
            "im-bridge",
            "services/im-bridge/configs/im-bridge.yaml",
            im_bridge_env(ports, database),
            ports.im_bridge_http,
            Phase::Downstream,
            false,
        ),
        app_spec(
            "activity-consumer",
            "services/activity-consumer/configs/activity-consumer.yaml",
            activity_env(ports, database),
            ports.activity_http,
            Phase::Downstream,
            false,
        ),
        app_spec(
            "notice-consumer",
            "services/notice-consumer/configs/notice-consumer.yaml",
            notice_env(ports, database),
            ports.notice_http,
            Phase::Downstream,
            false,
        ),
    ]);
    for (service, key, value) in overrides {
        if let Some(spec) = specs.iter_mut().find(|spec| spec.name == *service) {
            spec.env.retain(|(existing, _)| existing != key);
            spec.env.push((key.clone(), value.clone()));
        }
    }
    specs
}

/// A service binary of the workspace, started with its config file and
/// `env`, ready when its admin port answers `/readyz`.
fn app_spec(
    name: &'static str,
    config: &'static str,
    env: Env,
    admin_port: u16,
    phase: Phase,
    required: bool,
) -> Spec {
    Spec {
        name,
        binary: name,
        config: Some(config),
        args: Vec::new(),
        env,
        probe: Probe::Readyz(admin_port),
        phase,
        required,
    }
}

/// The two fakes, started first.
pub fn fake_specs(ports: &Ports) -> Vec<Spec> {
    vec![
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
    ]
}

/// room-service: its listeners, Redis, the wallet, IM, and the outbox written for the standalone relay.
fn room_env(ports: &Ports, database: &str) -> Env {
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
        // A local stack on loopback: grpcurl may list the API (off by default).
        kv("ROOM__GRPC_REFLECTION", true),
        // The standalone outbox-relay publishes; room-service only writes the outbox.
        kv("ROOM__OUTBOX_WORKER__ENABLED", false),
        kv("ROOM__ROCKETMQ__ROOM_OUTBOX__ENABLED", true),
        // Treasure wake-up rows, and the treasure-open consumer inside room-service.
        kv("ROOM__ROCKETMQ__TREASURE_OPEN__ENABLED", true),
    ]);
    room
}

/// outbox-relay: mq mode on both topics.
fn relay_env(ports: &Ports, database: &str) -> Env {
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
    relay
}

/// im-bridge's listener.
fn im_bridge_env(ports: &Ports, database: &str) -> Env {
    let mut im_bridge = service_env("IM_BRIDGE", ports, database, true);
    im_bridge.push(kv(
        "IM_BRIDGE__HTTP_LISTEN",
        format!("127.0.0.1:{}", ports.im_bridge_http),
    ));
    im_bridge
}

/// activity-consumer's listeners.
fn activity_env(ports: &Ports, database: &str) -> Env {
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
    activity
}

/// notice-consumer's listener.
fn notice_env(ports: &Ports, database: &str) -> Env {
    let mut notice = service_env("NOTICE", ports, database, true);
    notice.push(kv(
        "NOTICE__HTTP_LISTEN",
        format!("127.0.0.1:{}", ports.notice_http),
    ));
    notice
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

/// The seed topics and their partitions.
const SEED_TOPICS: [(&str, u32); 2] = [
    (crate::groups::TOPIC_ROOM_OUTBOX, 4),
    (crate::groups::TOPIC_TREASURE_OPEN, 2),
];

/// Topics (name, partitions) created before any consumer subscribes: the two
/// seed topics and each consumer group's dead-letter topic (`<group>.dlq`,
/// from the one list of groups).
pub fn topics() -> Vec<(&'static str, u32)> {
    SEED_TOPICS
        .into_iter()
        .chain(
            crate::groups::ALL
                .iter()
                .map(|group| (group.dead_letter_topic, 1)),
        )
        .collect()
}

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
}
