//! When a holder dies or stalls (docs/design.md#fast-takeover): a room
//! whose holder was killed with -9 is taken over as soon as the holder's
//! liveness key lapses — not when its 30 s lease would — and the gift the
//! holder left between debit and commit is settled at the takeover, so the
//! gateway's retry with the same `command_id` gets the final answer; a
//! holder that was only paused (SIGSTOP) resumes fenced: it writes nothing
//! and gives the room up; and a Redis stall longer than the liveness TTL
//! makes no instance take over a room from a live holder; the takeover
//! rules themselves are checked against the lease script directly.
//!
//! The dying holder is the real `room-service` binary in a process of its
//! own; the survivor runs in the test process, on the same database, fake
//! wallet and Redis key prefix.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use fred::prelude::*;
use hyapp_api::room::room_service_client::RoomServiceClient;
use room_service::Error;
use room_service::redis::{Acquired, Redis};
use service_kit::duration::ConfigDuration;
use testkit::processes::{PrivateRedis, signal};
use tonic::transport::Channel;

const EXE: &str = env!("CARGO_BIN_EXE_room-service");

/// Bounds a wait for something the system must do by itself; the outcome
/// is decided by the system, not by this bound.
const GUARD: Duration = Duration::from_secs(30);

/// The holders' lease TTL in these tests: far longer than any wait here,
/// so a room that changes hands did so through the liveness key.
const LONG_LEASE_SECS: i64 = 60;

/// A `room-service` process on the harness's database, wallet and Redis
/// prefix; killed on drop.
struct Holder {
    child: Child,
    node_id: String,
    client: RoomServiceClient<Channel>,
    http: String,
}

impl Holder {
    async fn start(harness: &Harness) -> Holder {
        Self::start_on(harness, free_port(), None).await
    }

    /// A holder listening on `grpc_port` whose leases name `advertise_url`
    /// (its own listener when `None`), with the harness's liveness TTL.
    async fn start_on(harness: &Harness, grpc_port: u16, advertise_url: Option<&str>) -> Holder {
        let node_id = testkit::unique("node-proc-");
        let http_port = free_port();
        let log = std::env::temp_dir().join(format!("{node_id}.log"));
        let mut command = Command::new(EXE);
        command
            .env_clear()
            .env("ROOM__NODE_ID", &node_id)
            .env("ROOM__MYSQL__URL", &harness.config.mysql.url)
            .env("ROOM__MYSQL__RUN_MIGRATIONS", "false")
            .env("ROOM__REDIS__URL", &harness.config.redis.url)
            .env("ROOM__REDIS__KEY_PREFIX", &harness.config.redis.key_prefix)
            .env("ROOM__REDIS__LEASE_TTL", format!("{LONG_LEASE_SECS}s"))
            .env(
                "ROOM__REDIS__LIVENESS_TTL",
                format!("{}ms", harness.config.redis.liveness_ttl.as_millis()),
            )
            .env("ROOM__GRPC_LISTEN", format!("127.0.0.1:{grpc_port}"))
            .env("ROOM__HTTP_LISTEN", format!("127.0.0.1:{http_port}"))
            .env("ROOM__WALLET__ENDPOINT", harness.wallet.endpoint())
            .env("ROOM__OUTBOX_WORKER__ENABLED", "false")
            .env("ROOM__TENCENT_IM__ENABLED", "false")
            .env("ROOM__ROOM__PRESENCE_SWEEP_INTERVAL", "3600s")
            .env("ROOM__SAGA__SWEEP_INTERVAL", "3600s");
        if let Some(url) = advertise_url {
            command.env("ROOM__ADVERTISE_URL", url);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("holder log"))
            .spawn()
            .expect("start room-service");
        let grpc = format!("http://127.0.0.1:{grpc_port}");
        let mut holder = Holder {
            child,
            node_id,
            client: RoomServiceClient::new(
                Channel::from_shared(grpc.clone()).unwrap().connect_lazy(),
            ),
            http: format!("http://127.0.0.1:{http_port}"),
        };
        let deadline = tokio::time::Instant::now() + GUARD;
        loop {
            if let Ok(client) = RoomServiceClient::connect(grpc.clone()).await {
                holder.client = client;
                return holder;
            }
            if let Ok(Some(status)) = holder.child.try_wait() {
                panic!(
                    "room-service exited ({status}): {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "room-service did not start; see {}",
                log.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("free port")
        .port()
}

/// A survivor in this process and a holder process beside it, both with
/// the long lease.
async fn survivor_and_holder() -> (Harness, Holder) {
    let survivor = Harness::start_with(|config| {
        config.redis.lease_ttl = ConfigDuration::from_secs(LONG_LEASE_SECS);
    })
    .await;
    let holder = Holder::start(&survivor).await;
    (survivor, holder)
}

async fn lease_of(harness: &Harness, redis: &fred::clients::Client, room_id: &str) -> String {
    let key = format!("{}:room:lease:{room_id}", harness.config.redis.key_prefix);
    let value: Option<String> = redis.get(key).await.unwrap();
    value.unwrap_or_default()
}

/// Commands this instance committed (outcome ok, every command name);
/// fails when it exports none.
async fn committed_commands(http: &str) -> f64 {
    testkit::metrics::read(
        &format!("{http}/metrics"),
        "room_commands_total{outcome=\"ok\"}",
    )
    .await
}

/// How long `node_id`'s current unbroken run of liveness renewals has
/// lasted, in Redis's clock (what the lease script compares with the TTL
/// before it lets that node take a room over); `None` without a key.
async fn steady_run(
    harness: &Harness,
    redis: &fred::clients::Client,
    node_id: &str,
) -> Option<Duration> {
    let key = format!("{}:node:alive:{node_id}", harness.config.redis.key_prefix);
    let age_ms: i64 = redis
        .eval(
            "local since = redis.call('HGET', KEYS[1], 'since') \
             if not since then return -1 end \
             local t = redis.call('TIME') \
             return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(since)",
            key,
            Vec::<String>::new(),
        )
        .await
        .unwrap();
    u64::try_from(age_ms).ok().map(Duration::from_millis)
}

/// Waits until `harness`'s own run of liveness renewals is one TTL old:
/// from then on the lease script lets it take over any room whose holder
/// it finds lapsed, so only the holder's liveness decides.
async fn until_free_to_take_over(harness: &Harness, redis: &fred::clients::Client) {
    let ttl = harness.config.redis.liveness_ttl.as_std();
    let deadline = tokio::time::Instant::now() + GUARD;
    while steady_run(harness, redis, &harness.node_id)
        .await
        .is_none_or(|run| run < ttl)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} never renewed its liveness key for one TTL",
            harness.node_id
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_killed_holders_room_is_taken_over_and_its_open_gift_settled() {
    let (mut survivor, mut holder) = survivor_and_holder().await;
    let room = testkit::unique("room-");
    room_with_members(&mut holder.client, &room, "owner", &["alice", "bob"]).await;
    let alice_before = survivor.wallet.balance("alice");

    // A gift whose debit is under way when the holder dies: its saga row
    // is written, the wallet holds the call.
    survivor.wallet.set_latency(Duration::from_secs(5));
    let command_id = testkit::unique("gift-");
    let mut client = holder.client.clone();
    let request = gift(&room, &command_id, "alice", "bob", 2, 10);
    let in_flight = tokio::spawn(async move { client.send_gift(request).await });
    let pool = survivor.pool.clone();
    let id = command_id.clone();
    assert!(
        eventually(GUARD, move || {
            let pool = pool.clone();
            let id = id.clone();
            async move { count(&pool, "room_gift_saga", "command_id", &id).await == 1 }
        })
        .await,
        "the gift's saga was never started"
    );
    signal(holder.pid(), "KILL");
    let _ = holder.child.wait();
    assert!(
        in_flight.await.unwrap().is_err(),
        "the killed holder answered"
    );
    survivor.wallet.set_latency(Duration::ZERO);

    // The gateway retries with the same command_id until it gets a final answer.
    let final_answer = loop {
        let retried = survivor
            .client
            .send_gift(gift(&room, &command_id, "alice", "bob", 2, 10))
            .await;
        match retried {
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::Unavailable | tonic::Code::Aborted
                ) =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            answered => break answered,
        }
    };
    let refused = final_answer.expect_err("a refunded gift is refused");
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert_eq!(
        refused.metadata().get("x-error-reason").unwrap(),
        "gift_compensated"
    );
    assert_eq!(
        survivor.wallet.balance("alice"),
        alice_before,
        "money conserved"
    );
    assert_eq!(survivor.metric("room_lease_takeovers_total").await, 1.0);
    assert_eq!(
        survivor.metric("room_orphaned_gifts_settled_total").await,
        1.0
    );

    // The room itself answers from the survivor, state intact.
    let joined = survivor
        .client
        .join_room(join(&room, "carol"))
        .await
        .expect("join after takeover");
    assert_eq!(served_by(&joined), survivor.node_id);
    let snapshot = room_state(&mut survivor.client, &room).await;
    assert!(snapshot.members.contains(&"carol".to_owned()));
    assert!(snapshot.members.contains(&"bob".to_owned()));
    survivor.stop().await;
}

#[tokio::test]
async fn a_paused_holder_resumes_fenced_and_gives_the_room_up() {
    let (mut survivor, mut holder) = survivor_and_holder().await;
    let room = testkit::unique("room-");
    room_with_members(&mut holder.client, &room, "owner", &["alice"]).await;
    let committed_before = committed_commands(&holder.http).await;
    let redis = redis_client(&survivor.config.redis.url).await;
    assert!(
        lease_of(&survivor, &redis, &room)
            .await
            .starts_with(&holder.node_id)
    );

    signal(holder.pid(), "STOP");
    // A command that reaches the paused holder waits in its socket.
    let mut paused_client = holder.client.clone();
    let room_for_paused = room.clone();
    let queued = tokio::spawn(async move {
        paused_client
            .join_room(join(&room_for_paused, "queued"))
            .await
    });
    // Meanwhile the room moves to the survivor once the holder's key lapses.
    let client = survivor.client.clone();
    let room_for_survivor = room.clone();
    let node = survivor.node_id.clone();
    assert!(
        eventually(GUARD, move || {
            let mut client = client.clone();
            let room = room_for_survivor.clone();
            let node = node.clone();
            async move {
                client
                    .join_room(join(&room, "bob"))
                    .await
                    .is_ok_and(|joined| served_by(&joined) == node)
            }
        })
        .await,
        "the survivor never took the paused holder's room over"
    );
    assert!(
        lease_of(&survivor, &redis, &room)
            .await
            .starts_with(&survivor.node_id)
    );

    signal(holder.pid(), "CONT");
    // The queued command is not committed by the resumed holder: it is
    // forwarded to the survivor, or refused for a retry, which goes there.
    match queued.await.unwrap() {
        Ok(joined) => assert_eq!(served_by(&joined), survivor.node_id),
        Err(status) => {
            assert!(
                matches!(
                    status.code(),
                    tonic::Code::Aborted | tonic::Code::Unavailable
                ),
                "{status:?}"
            );
            let retried = holder
                .client
                .join_room(join(&room, "queued"))
                .await
                .expect("the retry is forwarded to the new holder");
            assert_eq!(served_by(&retried), survivor.node_id);
        }
    }
    assert_eq!(
        committed_commands(&holder.http).await,
        committed_before,
        "the resumed holder committed nothing"
    );
    assert!(
        testkit::metrics::read(
            &format!("{}/metrics", holder.http),
            "room_liveness_lapses_total"
        )
        .await
            >= 1.0
    );
    assert!(
        lease_of(&survivor, &redis, &room)
            .await
            .starts_with(&survivor.node_id)
    );
    let snapshot = room_state(&mut survivor.client, &room).await;
    for member in ["alice", "bob", "queued"] {
        assert!(
            snapshot.members.contains(&member.to_owned()),
            "{member} missing"
        );
    }
    survivor.stop().await;
}

/// A live holder keeps its rooms however long another instance tries for
/// them. The survivor gets commands for the holder's rooms across several
/// liveness TTLs, first while it can forward them (the holder applies
/// them), then while the holder is alive but cannot be reached: each call
/// then makes the survivor try the room itself, through the lease script,
/// and only the holder's live key stops it — a takeover that ignored
/// liveness would take the rooms here, since the survivor's own run is
/// old enough for any takeover the script allows.
#[tokio::test]
async fn a_live_holders_rooms_are_never_taken_over() {
    let mut survivor = Harness::start_with(|config| {
        config.redis.lease_ttl = ConfigDuration::from_secs(LONG_LEASE_SECS);
    })
    .await;
    // The holder's leases name a proxy in front of its listener, so the
    // survivor's forwards can be cut while the holder itself runs on.
    let grpc_port = free_port();
    let proxy = Proxy::start(format!("127.0.0.1:{grpc_port}")).await;
    let mut holder = Holder::start_on(
        &survivor,
        grpc_port,
        Some(&format!("http://{}", proxy.addr)),
    )
    .await;
    let rooms: Vec<String> = (0..3).map(|_| testkit::unique("room-")).collect();
    for room in &rooms {
        room_with_members(&mut holder.client, room, "owner", &[]).await;
    }
    let redis = redis_client(&survivor.config.redis.url).await;
    let mut leases = Vec::new();
    for room in &rooms {
        let lease = lease_of(&survivor, &redis, room).await;
        assert!(lease.starts_with(&holder.node_id), "{room}: {lease}");
        leases.push(lease);
    }
    until_free_to_take_over(&survivor, &redis).await;
    let ttl = survivor.config.redis.liveness_ttl.as_std();
    let committed_before = committed_commands(&holder.http).await;
    let forwarded_before = survivor.metric_or_zero("room_forwarded_total").await;

    // Two TTLs of commands the survivor forwards: the holder applies each.
    let mut forwarded = 0.0;
    let phase = tokio::time::Instant::now();
    while phase.elapsed() < ttl * 2 {
        for room in &rooms {
            let joined = survivor
                .client
                .join_room(join(room, &testkit::unique("user-")))
                .await
                .unwrap_or_else(|status| panic!("{room} via the survivor: {status:?}"));
            assert_eq!(served_by(&joined), holder.node_id, "{room}");
            forwarded += 1.0;
        }
    }

    // Three TTLs in which the holder lives but cannot be reached: every
    // call is tried here, and the lease script refuses each.
    proxy.cut();
    let mut refused = 0.0;
    let phase = tokio::time::Instant::now();
    while phase.elapsed() < ttl * 3 {
        for room in &rooms {
            let status = survivor
                .client
                .join_room(join(room, &testkit::unique("user-")))
                .await
                .map(|joined| served_by(&joined))
                .expect_err("the survivor served a live holder's room");
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
            assert_eq!(
                status.metadata().get("x-error-reason").unwrap(),
                "room_owned_elsewhere"
            );
            assert_eq!(
                status.metadata().get("x-room-owner").unwrap(),
                holder.node_id.as_str()
            );
            refused += 1.0;
        }
    }
    proxy.restore();
    assert_eq!(
        survivor
            .metric("room_forwarded_total{outcome=\"holder_unreachable\"}")
            .await,
        refused,
        "every refused call was tried here after its forward failed"
    );

    assert_eq!(survivor.metric("room_lease_takeovers_total").await, 0.0);
    for (room, lease) in rooms.iter().zip(&leases) {
        assert_eq!(&lease_of(&survivor, &redis, room).await, lease, "{room}");
    }
    // The holder applied every forwarded command and still applies.
    assert_eq!(
        committed_commands(&holder.http).await,
        committed_before + forwarded
    );
    assert_eq!(
        survivor.metric("room_forwarded_total").await,
        forwarded_before + forwarded + refused
    );
    for room in &rooms {
        let joined = holder
            .client
            .join_room(join(room, "still-here"))
            .await
            .expect("the holder applies its own room's command");
        assert_eq!(served_by(&joined), holder.node_id);
    }
    survivor.stop().await;
}

/// A dead holder's rooms are taken over within the documented bound
/// (docs/design.md#fast-takeover): "within one liveness TTL plus the
/// gateway's retry delay". The callers follow docs/gateway.md: the same
/// `command_id` again after each refusal's `RetryInfo` delay.
///
/// The bound is a correctness bound from configuration, not a performance
/// threshold: the holder's key lapses at most one `redis.liveness_ttl`
/// after its last renewal, which precedes the kill, and the first call
/// after that takes the room over; the retry delay is the caller's pacing
/// (`OWNED_ELSEWHERE_DEFAULT_DELAY` at most past the lapse). A takeover
/// that waited for the room lease (60 s here) instead breaks it by far. It
/// bounds when the applied call was sent: that call's own work (loading
/// the room from MySQL) is the database's speed, not the takeover's.
#[tokio::test]
async fn a_dead_holders_rooms_are_taken_over_within_one_liveness_ttl_and_the_retry_delay() {
    let (survivor, mut holder) = survivor_and_holder().await;
    let rooms: Vec<String> = (0..4).map(|_| testkit::unique("room-")).collect();
    for room in &rooms {
        room_with_members(&mut holder.client, room, "owner", &[]).await;
    }
    let redis = redis_client(&survivor.config.redis.url).await;
    until_free_to_take_over(&survivor, &redis).await;
    let ttl = survivor.config.redis.liveness_ttl.as_std();
    let bound = ttl + room_service::error::OWNED_ELSEWHERE_DEFAULT_DELAY;

    signal(holder.pid(), "KILL");
    let _ = holder.child.wait();
    // After the process is gone: every renewal it made came before this.
    let killed = tokio::time::Instant::now();
    let mut callers = Vec::new();
    for room in rooms.clone() {
        let mut client = survivor.client.clone();
        callers.push(tokio::spawn(async move {
            let request = join(&room, "after-the-kill");
            loop {
                let sent = tokio::time::Instant::now();
                assert!(sent < killed + GUARD, "{room} never answered again");
                match client.join_room(request.clone()).await {
                    Ok(joined) => {
                        return (room, sent - killed, killed.elapsed(), served_by(&joined));
                    }
                    Err(status)
                        if matches!(
                            status.code(),
                            tonic::Code::Unavailable | tonic::Code::Aborted
                        ) =>
                    {
                        let delay = tonic_types::StatusExt::get_details_retry_info(&status)
                            .and_then(|info| info.retry_delay)
                            .unwrap_or_else(|| panic!("{room}: no RetryInfo in {status:?}"));
                        tokio::time::sleep(delay).await;
                    }
                    Err(status) => panic!("{room}: {status:?}"),
                }
            }
        }));
    }
    for caller in callers {
        let (room, sent, answered, node) = caller.await.unwrap();
        println!("{room}: applied call sent {sent:?} after the kill, answered after {answered:?}");
        assert_eq!(node, survivor.node_id, "{room} answered from the survivor");
        assert!(
            sent <= bound,
            "{room}: the call that took it over was sent {sent:?} after the kill; \
             the bound is {bound:?} (liveness TTL {ttl:?} plus the retry delay)"
        );
        assert!(
            lease_of(&survivor, &redis, &room)
                .await
                .starts_with(&survivor.node_id)
        );
    }
    assert_eq!(
        survivor.metric("room_lease_takeovers_total").await,
        rooms.len() as f64
    );
    survivor.stop().await;
}

#[tokio::test]
async fn a_redis_stall_longer_than_the_liveness_ttl_moves_no_room() {
    let private = PrivateRedis::start().await;
    let url = private.url();
    let mut survivor = Harness::start_with(|config| {
        config.redis.url = url.clone();
        config.redis.lease_ttl = ConfigDuration::from_secs(LONG_LEASE_SECS);
    })
    .await;
    let mut holder = survivor
        .second_node(|config| {
            config.redis.url = url.clone();
            config.redis.lease_ttl = ConfigDuration::from_secs(LONG_LEASE_SECS);
        })
        .await;
    let rooms: Vec<String> = (0..20).map(|_| testkit::unique("room-")).collect();
    for room in &rooms {
        room_with_members(&mut holder.client, room, "owner", &[]).await;
    }
    let ttl = survivor.config.redis.liveness_ttl.as_std();

    // Every caller keeps asking the survivor for the holder's rooms from
    // before the stall until well after it: any of these calls could take
    // a room over if the stall alone made the holder look dead.
    let stop_asking = tokio_util::sync::CancellationToken::new();
    let mut askers = Vec::new();
    for room in rooms.clone() {
        let mut client = survivor.client.clone();
        let stop = stop_asking.clone();
        askers.push(tokio::spawn(async move {
            while !stop.is_cancelled() {
                let mut request = tonic::Request::new(hyapp_api::room::GetRoomRequest {
                    room_id: room.clone(),
                });
                request.set_timeout(Duration::from_millis(500));
                let _ = client.get_room(request).await;
            }
        }));
    }
    signal(private.pid(), "STOP");
    // The fault itself: Redis answers nothing for three liveness TTLs.
    tokio::time::sleep(ttl * 3).await;
    signal(private.pid(), "CONT");
    // Callers go on through the holder's renewals after the stall and the
    // survivor's own grace (one TTL) several times over.
    tokio::time::sleep(ttl * 4).await;
    stop_asking.cancel();
    for asker in askers {
        asker.await.unwrap();
    }

    assert_eq!(survivor.metric("room_lease_takeovers_total").await, 0.0);
    let redis = redis_client(&url).await;
    for room in &rooms {
        assert!(
            lease_of(&survivor, &redis, room)
                .await
                .starts_with(&holder.node_id),
            "{room} changed hands"
        );
    }
    // And the rooms answer again, from their holder.
    for room in &rooms {
        let answered = survivor
            .client
            .get_room(hyapp_api::room::GetRoomRequest {
                room_id: room.clone(),
            })
            .await
            .expect("the room answers after the stall");
        assert_eq!(served_by(&answered), holder.node_id);
    }
    assert!(holder.metric("room_liveness_lapses_total").await >= 1.0);
    holder.stop().await;
    survivor.stop().await;
}

/// The lease script's takeover rules, on the shared Redis under a prefix of
/// their own: a live holder keeps its room; a lapsed one loses it, but only
/// to an instance whose own liveness key has run unbroken for one TTL —
/// the rule that keeps a Redis stall (which ends every run) from moving rooms.
#[tokio::test]
async fn only_a_steadily_live_instance_takes_over_and_only_from_a_lapsed_holder() {
    let config = room_service::config::RedisConfig {
        url: testkit::redis_url(),
        key_prefix: testkit::unique("takeover_"),
        ..Default::default()
    };
    let ttl = config.liveness_ttl.as_std();
    let a = Redis::connect(&config, "node-a", "http://127.0.0.1:1")
        .await
        .unwrap();
    let b = Redis::connect(&config, "node-b", "http://127.0.0.1:2")
        .await
        .unwrap();
    let raw = redis_client(&config.url).await;
    let alive = |node: &str| format!("{}:node:alive:{node}", config.key_prefix);

    assert!(
        !a.renew_liveness(ttl).await.unwrap(),
        "a first renewal starts a run"
    );
    assert_eq!(a.acquire_lease("room").await.unwrap(), Acquired::Held);

    // A live holder keeps the room; the refusal says where it is and when
    // its key would lapse.
    assert!(!b.renew_liveness(ttl).await.unwrap());
    let live = b.acquire_lease("room").await.unwrap_err();
    let Error::OwnedElsewhere {
        owner,
        address,
        retry_after,
        ..
    } = live
    else {
        panic!("{live:?}");
    };
    assert_eq!(owner, "node-a");
    assert_eq!(address.as_deref(), Some("http://127.0.0.1:1"));
    assert!(
        retry_after.is_some_and(|wait| wait <= ttl),
        "{retry_after:?}"
    );

    // A lapses. B's run is younger than one TTL: no takeover yet, and no
    // address to forward to — the holder is gone.
    let _: i64 = raw.del(alive("node-a")).await.unwrap();
    let young = b.acquire_lease("room").await.unwrap_err();
    let Error::OwnedElsewhere {
        address,
        retry_after,
        ..
    } = young
    else {
        panic!("{young:?}");
    };
    assert_eq!(address, None);
    assert!(
        retry_after.is_some_and(|wait| !wait.is_zero() && wait <= ttl),
        "{retry_after:?}"
    );

    // Without a key of its own, B may take nothing over however old its run.
    let _: i64 = raw.del(alive("node-b")).await.unwrap();
    assert!(matches!(
        b.acquire_lease("room").await.unwrap_err(),
        Error::OwnedElsewhere { address: None, .. }
    ));

    // B's run is one TTL old (its `since` set back, as if it had renewed
    // all along): now it takes the room over from the lapsed holder.
    assert!(!b.renew_liveness(ttl).await.unwrap());
    let since: i64 = raw.hget(alive("node-b"), "since").await.unwrap();
    let () = raw
        .hset(alive("node-b"), ("since", since - ttl.as_millis() as i64))
        .await
        .unwrap();
    let took = b.acquire_lease("room").await.unwrap();
    let Acquired::TookOver(from) = took else {
        panic!("{took:?}");
    };
    assert_eq!(from.node_id, "node-a");
    assert!(b.acquire_lease("room").await.unwrap() == Acquired::Held);

    // A restarted node under the same id but another address is another
    // incarnation: the old incarnation's leases count as lapsed.
    assert!(!a.renew_liveness(ttl).await.unwrap());
    assert_eq!(a.acquire_lease("room-2").await.unwrap(), Acquired::Held);
    let reborn = Redis::connect(&config, "node-a", "http://127.0.0.1:3")
        .await
        .unwrap();
    assert!(
        !reborn.renew_liveness(ttl).await.unwrap(),
        "the key named the old incarnation"
    );
    let holder = b
        .lease_holder("room-2")
        .await
        .unwrap()
        .expect("held by the old incarnation");
    assert!(!holder.is_live());
    assert!(
        b.acquire_lease("room-2")
            .await
            .is_ok_and(|took| took != Acquired::Held)
    );
}
