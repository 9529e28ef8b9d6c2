//! `demo`: the scripted session of `cargo xtask demo` (which starts the stack
//! and passes the endpoints). It drives one room through room-service's gRPC
//! API — create, joins, mic seats, small gifts, a big gift, a kick with a
//! ban, heat over the first treasure threshold, a silent user, then a gift
//! storm (many small gifts at once, more than the room's IM group may
//! receive in a second, so im-bridge merges them into gift batches) — then
//! waits (polling with deadlines, never sleeping as synchronisation) for every
//! asynchronous effect, prints a report and exits 0 only if every expected
//! effect was observed (1 if some are missing, 2 if the demo itself failed).

mod checks;
mod im_messages;
mod metrics_check;
mod observe;
mod report;
mod script;
mod security;

use anyhow::Context;
use clap::Parser;
use observe::{Observed, Sources};
use script::{Driver, Expect};
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Endpoints and the timers the stack was started with.
#[derive(Debug, Parser)]
#[command(name = "demo", about = "Scripted room session against a running stack")]
struct Args {
    /// room-service gRPC endpoint.
    #[arg(long, default_value = "http://127.0.0.1:7101")]
    grpc: String,
    /// MySQL URL of the stack's database.
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306/hyapp")]
    mysql_url: String,
    /// fake-tencent-im base URL.
    #[arg(long, default_value = "http://127.0.0.1:18090")]
    fake_im: String,
    /// fake-wallet admin HTTP base URL.
    #[arg(long, default_value = "http://127.0.0.1:7602")]
    fake_wallet: String,
    /// room.rules.treasure_countdown of room-service, in ms.
    #[arg(long, default_value_t = 3_000)]
    treasure_countdown_ms: u64,
    /// room.rules.treasure_thresholds[0] of room-service.
    #[arg(long, default_value_t = 3_000)]
    treasure_threshold: u64,
    /// room.presence_ttl of room-service, in ms.
    #[arg(long, default_value_t = 3_000)]
    presence_ttl_ms: u64,
    /// activity.big_gift_threshold of activity-consumer.
    #[arg(long, default_value_t = 1_000)]
    big_gift_threshold: u64,
    /// activity.broadcast_group_id of activity-consumer.
    #[arg(long, default_value = "hyapp_global_broadcast")]
    broadcast_group: String,
    /// im-bridge's `im_bridge.silent_event_types` (acknowledged without a
    /// group message); empty = its default, `outbox_schema::names::IM_SILENT_EVENT_TYPES`.
    #[arg(long, value_delimiter = ',')]
    im_silent: Vec<String>,
    /// The activity ranking senders over every gift.
    #[arg(long, default_value = "daily_gift_rank")]
    sender_board: String,
    /// Gifts the gift storm sends into the room.
    #[arg(long, default_value_t = 150)]
    storm_gifts: usize,
    /// Storm gifts in flight at once.
    #[arg(long, default_value_t = 8)]
    storm_concurrency: usize,
    /// Most messages Tencent (the fake IM) accepts per group per second.
    #[arg(long, default_value_t = 40)]
    im_group_limit: u64,
    /// How long to wait for the consumers' effects after the script, in seconds.
    #[arg(long, default_value_t = 20)]
    effect_timeout_secs: u64,
    /// Room id (default `demo-<unix ms>`).
    #[arg(long)]
    room_id: Option<String>,
    /// A service that is not running (`name: reason`), for the report.
    #[arg(long)]
    unavailable: Vec<String>,
    /// Where the service logs are, for the report.
    #[arg(long)]
    logs: Option<String>,
    /// A secret in use by the stack, as `NAME=VALUE` (repeatable): the report
    /// fails if a value appears in any log under `--logs` or in this output.
    #[arg(long)]
    secret: Vec<String>,
    /// outbox-relay's admin base URL, checked with the `admin_token` secret.
    #[arg(long)]
    relay_admin: Option<String>,
    /// xtask's listener check of the live processes: `ok:<summary>` or `fail:<problems>`.
    #[arg(long)]
    listeners: Option<String>,
    /// A service's Prometheus endpoint to scrape after the session, as
    /// `name=URL=metric` (the metric that must be present), repeatable.
    #[arg(long)]
    metrics: Vec<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("demo: {error:#}");
            ExitCode::from(2)
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The session's users.
const HOST: &str = "host";
const KICKED: &str = "dave";
const SILENT: &str = "carol";
/// How room-service refuses a banned user's JoinRoom (room-core's
/// `Rejection::Banned`: a permission rejection with the stable code `banned`).
const BANNED: Expect = Expect::Refused {
    code: tonic::Code::PermissionDenied,
    reason: "banned",
};

/// The storm's senders and receivers, taken in turn: everyone still present
/// by then (carol expired, dave was kicked), no one giving to themselves.
const STORM_PAIRS: [(&str, &str); 3] = [("alice", "bob"), ("bob", "alice"), (HOST, "alice")];
/// Each storm gift's value: small, so the storm adds to the leaderboard and
/// the wallet totals but announces no big gift.
const STORM_UNIT_VALUE: u64 = 10;

async fn run(args: Args) -> anyhow::Result<bool> {
    let room_id = args
        .room_id
        .clone()
        .unwrap_or_else(|| format!("demo-{}", now_ms()));
    let mut driver = Driver::connect(&args.grpc, room_id.clone())
        .await
        .with_context(|| format!("connecting to room-service at {}", args.grpc))?;
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(2)
        .connect(&args.mysql_url)
        .await
        .with_context(|| format!("connecting to {}", args.mysql_url))?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let sources = Sources {
        pool,
        http: http.clone(),
        fake_im: args.fake_im.clone(),
        room_group: format!("room_{room_id}"),
        room_id: room_id.clone(),
        broadcast_group: args.broadcast_group.clone(),
        users: ["host", "alice", "bob", "carol", "dave"]
            .map(String::from)
            .to_vec(),
    };
    let mut out = String::new();
    let _ = writeln!(out, "\n=== Room outbox platform demo: room `{room_id}` ===");
    let heartbeats = driver.spawn_heartbeats(Duration::from_millis(args.presence_ttl_ms / 4));

    driver.create_room(HOST, "Demo room", 8).await;
    let mut timed = String::from("\n2. Timed effects (shortened timers)\n");
    wait_warm(&sources, &args, &mut timed).await;
    play_session(&mut driver, &args).await?;

    let treasure_cleared = wait_treasure(&mut driver, &args, &mut timed).await;
    wait_presence_expiry(&mut driver, &args, &mut timed).await;
    // After the treasure box: the storm's heat (far below the next threshold)
    // starts no second box.
    let storm_unit = STORM_UNIT_VALUE.min(args.big_gift_threshold.saturating_sub(1).max(1));
    let storm = driver
        .gift_storm(
            &STORM_PAIRS,
            args.storm_gifts,
            storm_unit,
            args.storm_concurrency,
        )
        .await;

    let (observed, mut checks) =
        await_effects(&sources, &driver, &args, treasure_cleared, &storm).await;
    heartbeats.abort();
    checks.push(wallet_check(&http, &args.fake_wallet, &driver).await);
    if !args.metrics.is_empty() {
        checks.push(metrics_check::check(&http, &args.metrics).await);
    }

    if let Some(base) = &args.relay_admin {
        let token = args
            .secret
            .iter()
            .find_map(|pair| pair.strip_prefix("outbox-relay admin_token="));
        checks.push(security::admin_check(&http, base, token).await);
    }
    checks.push(security::listeners_check(args.listeners.as_deref()));

    report::commands(&mut out, &driver.steps, &storm);
    out.push_str(&timed);
    let _ = write_treasure_rows(&mut out, &observed);
    report::consumers(&mut out, &observed, &args.sender_board);
    report::gift_storm(&mut out, &observed, &storm);
    report::lags(&mut out, &observed, &storm);
    // Last, so it sees every log line the session caused and the whole
    // report but the verdict (whose details are fixed text and check results).
    checks.push(security::secrets_check(
        &args.secret,
        args.logs.as_deref(),
        &out,
    ));
    report::verdict(&mut out, &checks, &args.unavailable, &observed.notes);
    if let Some(logs) = &args.logs {
        let _ = writeln!(out, "Service logs: {logs}");
    }
    println!("{out}");
    Ok(checks.iter().all(|check| check.ok))
}

/// The session's commands up to the treasure box: joins, mics, gifts (one
/// big), a kick and its refused rejoin, then gifts until the heat passes the
/// first treasure threshold (each below the big-gift threshold).
async fn play_session(driver: &mut Driver, args: &Args) -> anyhow::Result<()> {
    for user in ["alice", "bob", SILENT, KICKED] {
        driver.join(user, Expect::Accepted).await;
    }
    driver.take_mic("alice", 1).await;
    driver.take_mic("bob", 2).await;
    driver.gift(SILENT, "alice", "rose", 1, 100).await;
    driver.gift(KICKED, "bob", "rose", 2, 50).await;
    driver.gift("bob", "alice", "heart", 1, 200).await;
    let big = i64::try_from(args.big_gift_threshold + args.big_gift_threshold / 2)?;
    driver.gift(SILENT, "alice", "rocket", 1, big).await;
    driver.kick(HOST, KICKED, 600).await;
    driver.join(KICKED, BANNED).await;
    // Heat over the first treasure threshold with gifts below the big-gift threshold.
    let heat: u64 = driver.gifts.iter().map(|gift| gift.total_value).sum();
    let needed = args.treasure_threshold.saturating_sub(heat) + 1;
    let unit = (args.big_gift_threshold - 1).min(needed.div_ceil(2)).max(1);
    for (sender, receiver) in [("alice", "bob"), ("bob", "alice")] {
        driver
            .gift(sender, receiver, "crown", 1, i64::try_from(unit)?)
            .await;
    }
    for _ in 0..10 {
        if driver
            .gifts
            .iter()
            .map(|gift| gift.total_value)
            .sum::<u64>()
            > args.treasure_threshold
        {
            break;
        }
        driver
            .gift("alice", "bob", "crown", 1, i64::try_from(unit)?)
            .await;
    }
    Ok(())
}

/// Observes the effects until every check passes or `effect_timeout_secs`
/// runs out; returns the last observation and its checks.
async fn await_effects(
    sources: &Sources,
    driver: &Driver,
    args: &Args,
    treasure_cleared: bool,
    storm: &script::Storm,
) -> (Observed, Vec<checks::Check>) {
    let im_silent: Vec<String> = if args.im_silent.is_empty() {
        outbox_schema::names::IM_SILENT_EVENT_TYPES
            .iter()
            .map(|event_type| (*event_type).to_owned())
            .collect()
    } else {
        args.im_silent.clone()
    };
    let deadline = Instant::now() + Duration::from_secs(args.effect_timeout_secs);
    loop {
        let observed = sources.observe().await;
        let script = checks::Script {
            steps: &driver.steps,
            gifts: &driver.gifts,
            big_gift_threshold: args.big_gift_threshold,
            kicked: KICKED,
            expired: SILENT,
            treasure_cleared,
            sender_board: &args.sender_board,
            im_silent: &im_silent,
            storm,
            im_group_limit: args.im_group_limit,
        };
        let checks = checks::evaluate(&script, &observed);
        if checks.iter().all(|check| check.ok) || Instant::now() > deadline {
            break (observed, checks);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until RoomCreated is published, so the session's lags measure a
/// connected producer (the relay's first publish also fetches metadata and
/// initialises the idempotent producer). The consumers joined their groups
/// when they became ready; events of their own are what they record.
async fn wait_warm(sources: &Sources, args: &Args, out: &mut String) {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.effect_timeout_secs);
    loop {
        let observed = sources.observe().await;
        let published = observed
            .outbox
            .iter()
            .find(|row| row.event_type == "RoomCreated")
            .and_then(|row| row.delivered_at_ms.map(|at| at - row.created_at_ms));
        if let Some(lag) = published {
            let _ = writeln!(
                out,
                "  warm-up: RoomCreated published {lag} ms after commit (the relay's first publish)"
            );
            return;
        }
        if Instant::now() > deadline {
            let _ = writeln!(
                out,
                "  warm-up: RoomCreated NOT published {} ms after commit",
                started.elapsed().as_millis()
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits for the box started by the heat push to open; true when GetRoom shows it cleared.
async fn wait_treasure(driver: &mut Driver, args: &Args, out: &mut String) -> bool {
    let Ok(room) = driver.get_room().await else {
        let _ = writeln!(out, "  treasure: GetRoom failed");
        return false;
    };
    let Some(treasure) = room.treasure.filter(|box_| !box_.box_id.is_empty()) else {
        let _ = writeln!(
            out,
            "  treasure: no box counting down at heat {} (threshold {})",
            room.heat, args.treasure_threshold
        );
        return false;
    };
    let _ = writeln!(
        out,
        "  treasure: heat {} ≥ {} started box {} (level {}), countdown {} ms",
        room.heat,
        args.treasure_threshold,
        treasure.box_id,
        treasure.level,
        args.treasure_countdown_ms
    );
    let deadline = treasure.open_at_ms + 10_000;
    while now_ms() < deadline {
        if let Ok(room) = driver.get_room().await
            && room
                .treasure
                .as_ref()
                .is_none_or(|box_| box_.box_id.is_empty())
        {
            let _ = writeln!(
                out,
                "            opened: GetRoom shows no box {} ms after open_at (level reached {})",
                now_ms() - treasure.open_at_ms,
                room.treasure_level_reached
            );
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = writeln!(
        out,
        "            NOT opened 10 s after open_at (box still shown by GetRoom)"
    );
    false
}

/// Stops carol's heartbeats and waits until room-service removes her.
async fn wait_presence_expiry(driver: &mut Driver, args: &Args, out: &mut String) {
    driver.let_go(SILENT);
    let stopped = Instant::now();
    let deadline = stopped + Duration::from_millis(args.presence_ttl_ms + 10_000);
    while Instant::now() < deadline {
        if let Ok(room) = driver.get_room().await
            && !room.members.iter().any(|member| member == SILENT)
        {
            let _ = writeln!(
                out,
                "  presence: heartbeats for {SILENT} stopped; removed {} ms later (TTL {} ms from her last heartbeat, sent up to a quarter TTL earlier); members now {:?}",
                stopped.elapsed().as_millis(),
                args.presence_ttl_ms,
                room.members
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = writeln!(
        out,
        "  presence: {SILENT} still a member {} ms after her last heartbeat",
        stopped.elapsed().as_millis()
    );
}

fn write_treasure_rows(out: &mut String, observed: &Observed) -> std::fmt::Result {
    for row in observed.outbox.iter().filter(|row| row.lane == 1) {
        writeln!(
            out,
            "            wake-up row: due {} → {} at {} (hyapp_room_treasure_open)",
            row.next_retry_at_ms,
            row.status,
            row.delivered_at_ms.map_or("-".into(), |at| at.to_string())
        )?;
    }
    for row in observed
        .outbox
        .iter()
        .filter(|row| row.event_type == "RoomTreasureOpened")
    {
        writeln!(
            out,
            "            RoomTreasureOpened committed at {}",
            row.created_at_ms
        )?;
    }
    Ok(())
}

async fn wallet_check(http: &reqwest::Client, wallet: &str, driver: &Driver) -> checks::Check {
    let gifts = driver.gifts.len();
    let total: u64 = driver.gifts.iter().map(|gift| gift.total_value).sum();
    let (ok, detail) = match observe::wallet_stats(http, wallet).await {
        Ok(stats) => {
            let debits = stats["debits"].as_u64().unwrap_or(0);
            let debited = stats["total_debited"].as_u64().unwrap_or(0);
            let mut balances = Vec::new();
            for user in ["alice", "bob", SILENT, KICKED] {
                if let Ok(balance) = observe::wallet_balance(http, wallet, user).await {
                    balances.push(format!("{user}={balance}"));
                }
            }
            (
                debits == gifts as u64 && debited == total,
                format!(
                    "{debits} debits totalling {debited} (expected {gifts} / {total}); balances {}",
                    balances.join(" ")
                ),
            )
        }
        Err(error) => (false, format!("fake wallet stats unreadable: {error}")),
    };
    checks::Check {
        name: "fake-wallet debited every gift exactly once",
        ok,
        detail,
    }
}
