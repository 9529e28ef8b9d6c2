//! What the room-service scenarios share: an in-process instance on a bench
//! database ([`Serving`]) and the mixed command workload
//! ([`mixed_workload`]), so the one-instance and the scale-out runs send the
//! same commands and only the number of instances differs. Each reply is
//! classed as local or forwarded by its `x-room-served-by` header; with
//! [`Routing::Hint`] the workload sends each room's calls to the address its
//! last reply named in `x-room-served-by-address`.

use crate::fixtures::BenchEnv;
use hdrhistogram::Histogram;
use hyapp_api::room::{
    CommandMeta, CommandReply, CreateRoomRequest, JoinRoomRequest, LeaveMicRequest,
    LeaveRoomRequest, SendGiftRequest, TakeMicRequest, room_service_client::RoomServiceClient,
};
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};
use tokio_util::sync::CancellationToken;
use tonic::{metadata::MetadataMap, transport::Channel};

/// Concurrent request loops of the room-service scenarios.
pub const CONCURRENCY: usize = 64;

/// Seed of the mixed workload's instance picks: a rerun routes alike.
pub const MIXED_SEED: u64 = 0x5CA1E;

/// The config of a bench room-service on database `db`: port 0 listeners,
/// no relay, no IM, the fake wallet at `wallet_endpoint`.
pub fn bench_config(env: &BenchEnv, db: &str, wallet_endpoint: String) -> room_service::Config {
    let mut config = room_service::Config::default();
    config.mysql.url = format!("{}/{db}", env.mysql);
    config.mysql.max_connections = 32;
    config.redis.url = env.redis.clone();
    config.grpc_listen = "127.0.0.1:0".into();
    config.http_listen = "127.0.0.1:0".into();
    config.node_id = format!("bench-{db}");
    config.wallet.endpoint = wallet_endpoint;
    config.outbox_worker.enabled = false;
    config.tencent_im.enabled = false;
    config
}

/// One room-service instance a workload sends requests to.
#[derive(Debug, Clone)]
pub struct Target {
    /// Its gRPC client.
    pub client: RoomServiceClient<Channel>,
    /// Its node id, to tell its own replies from forwarded ones.
    pub node_id: String,
    /// The URL it advertises to its peers (and in `x-room-served-by-address`).
    pub address: String,
}

/// An in-process room-service serving until [`Serving::stop`].
pub struct Serving {
    /// Client and node id.
    pub target: Target,
    shutdown: CancellationToken,
    handle: tokio::task::JoinHandle<()>,
}

impl Serving {
    /// Builds and starts an App from `config`.
    pub async fn start(config: room_service::Config) -> anyhow::Result<Self> {
        Self::start_reached(config, None).await
    }

    /// [`Serving::start`], reached over TLS with `tls` when given (the
    /// listener then serves TLS, `https://localhost:<port>`).
    pub async fn start_reached(
        config: room_service::Config,
        tls: Option<&service_kit::grpc_tls::ClientTls>,
    ) -> anyhow::Result<Self> {
        let config = config.validate()?;
        let node_id = config.node_id.clone();
        let advertised = config.clone();
        let app = room_service::App::build(config).await?;
        let address = advertised.advertised_url(app.grpc_addr());
        let client = match tls {
            None => RoomServiceClient::connect(format!("http://{}", app.grpc_addr())).await?,
            Some(tls) => {
                let url = format!("https://localhost:{}", app.grpc_addr().port());
                // Lazily: the handshake needs the server, which runs below.
                RoomServiceClient::new(tls.endpoint("tls", "endpoint", &url)?.connect_lazy())
            }
        };
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let handle = tokio::spawn(async move {
            if let Err(error) = app.run(token).await {
                eprintln!("room-service stopped: {error}");
            }
        });
        Ok(Self {
            target: Target {
                client,
                node_id,
                address,
            },
            shutdown,
            handle,
        })
    }

    /// Stops gracefully (the instance releases its leases) and waits for it.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.handle.await;
    }
}

/// Command metadata with `command_id` and the bench's app code.
pub fn meta(command_id: String) -> Option<CommandMeta> {
    Some(CommandMeta {
        command_id,
        request_id: String::new(),
        app_code: "hyapp".into(),
    })
}

/// Milliseconds at quantile `quantile` of a µs histogram.
pub fn millis_at(histogram: &Histogram<u64>, quantile: f64) -> f64 {
    histogram.value_at_quantile(quantile) as f64 / 1000.0
}

/// What one run of [`mixed_workload`] measured; latencies in µs.
#[derive(Debug)]
pub struct MixedOutcome {
    /// Commands per second over the timed phase.
    pub rate: f64,
    /// Every command.
    pub all: Histogram<u64>,
    /// Commands executed by the instance they were sent to.
    pub local: Histogram<u64>,
    /// Commands the receiving instance forwarded to the room's holder
    /// (`x-room-served-by` names another instance).
    pub forwarded: Histogram<u64>,
    /// Replies that carried `x-room-served-by-address`.
    pub with_address: u64,
}

impl MixedOutcome {
    fn empty() -> anyhow::Result<Self> {
        Ok(Self {
            rate: 0.0,
            all: Histogram::new(3)?,
            local: Histogram::new(3)?,
            forwarded: Histogram::new(3)?,
            with_address: 0,
        })
    }

    /// Records one reply that took `took` from the instance named `sent_to`.
    fn record(&mut self, took: Duration, sent_to: &str, metadata: &MetadataMap) {
        let micros = took.as_micros() as u64;
        let kind = if served_by(metadata).is_some_and(|served_by| served_by != sent_to) {
            &mut self.forwarded
        } else {
            &mut self.local
        };
        // The histograms resize to any value, so recording cannot fail.
        let _ = kind.record(micros);
        let _ = self.all.record(micros);
        self.with_address += u64::from(served_by_address(metadata).is_some());
    }

    fn merge(&mut self, other: &Self) -> anyhow::Result<()> {
        self.all.add(&other.all)?;
        self.local.add(&other.local)?;
        self.forwarded.add(&other.forwarded)?;
        self.with_address += other.with_address;
        Ok(())
    }
}

/// The node id in a reply's `x-room-served-by`, if any.
pub fn served_by(metadata: &MetadataMap) -> Option<&str> {
    metadata
        .get(room_service::forward::SERVED_BY)
        .and_then(|value| value.to_str().ok())
}

/// The URL in a reply's `x-room-served-by-address` (the advertised URL of
/// the instance that served it: the gateway's routing hint), if any.
pub fn served_by_address(metadata: &MetadataMap) -> Option<&str> {
    metadata
        .get(room_service::forward::SERVED_BY_ADDRESS)
        .and_then(|value| value.to_str().ok())
}

/// How the workload picks the instance of each call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    /// A seeded random instance per call.
    Random,
    /// The instance at the address the room's last reply named in
    /// `x-room-served-by-address`; random while none is known (or the
    /// address is none of the targets').
    Hint,
}

/// A task's routing state: which target each of its rooms was last served by.
struct Router {
    routing: Routing,
    by_address: HashMap<String, usize>,
    hints: HashMap<String, usize>,
}

impl Router {
    fn new(routing: Routing, targets: &[Target]) -> Self {
        let by_address = targets
            .iter()
            .enumerate()
            .map(|(index, target)| (target.address.clone(), index))
            .collect();
        Self {
            routing,
            by_address,
            hints: HashMap::new(),
        }
    }

    /// The target of the next call for `room_id`; `random` is drawn on every
    /// call whatever the routing, so the random picks repeat run to run.
    fn pick(&self, room_id: &str, random: usize) -> usize {
        match self.routing {
            Routing::Random => random,
            Routing::Hint => self.hints.get(room_id).copied().unwrap_or(random),
        }
    }

    /// Remembers who served `room_id`, as a reply's metadata says.
    fn learn(&mut self, room_id: &str, metadata: &MetadataMap) {
        if self.routing != Routing::Hint {
            return;
        }
        let known = served_by_address(metadata).and_then(|url| self.by_address.get(url));
        if let Some(&index) = known {
            self.hints.insert(room_id.to_owned(), index);
        }
    }
}

/// One command of the cycle a user goes through in a room.
#[derive(Debug, Clone, Copy)]
pub enum Step {
    Join,
    TakeMic,
    Gift(u8),
    LeaveMic,
    Leave,
}

/// Join, take a mic, two gifts, leave the mic, leave: valid in this order
/// for a fresh user, whatever the room's other members do.
pub const CYCLE: [Step; 6] = [
    Step::Join,
    Step::TakeMic,
    Step::Gift(0),
    Step::Gift(1),
    Step::LeaveMic,
    Step::Leave,
];

/// Sends `step` of `user`'s `round` in `room_id`; its command id is unique
/// per (step, room, round), so a retry of the same step is the same command.
pub async fn send_step(
    client: &mut RoomServiceClient<Channel>,
    step: Step,
    room_id: &str,
    user: &str,
    round: u64,
) -> Result<tonic::Response<CommandReply>, tonic::Status> {
    let id = |kind: &str| meta(format!("{kind}-{room_id}-{round}"));
    let room_id = room_id.to_owned();
    let user_id = user.to_owned();
    match step {
        Step::Join => {
            client
                .join_room(JoinRoomRequest {
                    meta: id("join"),
                    room_id,
                    user_id,
                })
                .await
        }
        Step::TakeMic => {
            client
                .take_mic(TakeMicRequest {
                    meta: id("mic"),
                    room_id,
                    user_id,
                    seat_index: 1,
                })
                .await
        }
        Step::Gift(gift) => {
            client
                .send_gift(SendGiftRequest {
                    meta: meta(format!("gift-{room_id}-{round}-{gift}")),
                    room_id,
                    sender_id: user_id,
                    receiver_id: "host".into(),
                    gift_id: "rose".into(),
                    count: 1,
                    unit_value: 1,
                })
                .await
        }
        Step::LeaveMic => {
            client
                .leave_mic(LeaveMicRequest {
                    meta: id("unmic"),
                    room_id,
                    user_id,
                })
                .await
        }
        Step::Leave => {
            client
                .leave_room(LeaveRoomRequest {
                    meta: id("leave"),
                    room_id,
                    user_id,
                })
                .await
        }
    }
}

/// A task's RNG of one phase: the same picks on every run.
fn phase_rng(seed: u64, phase: u64, task: usize) -> StdRng {
    StdRng::seed_from_u64(seed ^ (phase << 32) ^ task as u64)
}

/// The mixed command load over `rooms` rooms for `seconds`: each of 64
/// tasks owns a disjoint set of rooms, so its command sequence is valid by
/// construction. Every request, room creation included, goes to an instance
/// of `targets` picked uniformly by an RNG seeded from `seed` — or, with
/// [`Routing::Hint`], to the one that served the room's last reply when its
/// address is known; with one target that is plain sequential load on it.
pub async fn mixed_workload(
    targets: &[Target],
    rooms: usize,
    seconds: u64,
    seed: u64,
    routing: Routing,
) -> anyhow::Result<MixedOutcome> {
    anyhow::ensure!(!targets.is_empty(), "the mixed workload needs an instance");
    let mut setup = Vec::new();
    for task in 0..CONCURRENCY {
        let mut targets = targets.to_vec();
        setup.push(tokio::spawn(async move {
            let mut rng = phase_rng(seed, 0, task);
            let mut router = Router::new(routing, &targets);
            for room in (task..rooms).step_by(CONCURRENCY) {
                let room_id = format!("mixed-{room}");
                let pick = rng.random_range(0..targets.len());
                let reply = targets[pick]
                    .client
                    .create_room(CreateRoomRequest {
                        meta: meta(format!("create-{room_id}")),
                        room_id: room_id.clone(),
                        owner_id: "host".into(),
                        title: "bench".into(),
                        mic_seat_count: 8,
                    })
                    .await?;
                router.learn(&room_id, reply.metadata());
            }
            anyhow::Ok(router)
        }));
    }
    let mut routers = Vec::new();
    for task in setup {
        routers.push(task.await??);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut workers = Vec::new();
    for (task, mut router) in routers.into_iter().enumerate() {
        let mut targets = targets.to_vec();
        let stop = Arc::clone(&stop);
        workers.push(tokio::spawn(async move {
            let mut rng = phase_rng(seed, 1, task);
            // Recorded per task and merged at the end: no lock per command.
            let mut outcome = MixedOutcome::empty()?;
            let owned: Vec<usize> = (task..rooms).step_by(CONCURRENCY).collect();
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for room in &owned {
                    let room_id = format!("mixed-{room}");
                    let user = format!("u{task}-{round}");
                    for step in CYCLE {
                        let pick = router.pick(&room_id, rng.random_range(0..targets.len()));
                        let target = &mut targets[pick];
                        let at = Instant::now();
                        let reply =
                            send_step(&mut target.client, step, &room_id, &user, round).await?;
                        outcome.record(at.elapsed(), &target.node_id, reply.metadata());
                        router.learn(&room_id, reply.metadata());
                    }
                    // Only between cycles, so every user that joined has left.
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
                round += 1;
            }
            anyhow::Ok(outcome)
        }));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = MixedOutcome::empty()?;
    for worker in workers {
        total.merge(&worker.await??)?;
    }
    total.rate = total.all.len() as f64 / started.elapsed().as_secs_f64();
    Ok(total)
}
