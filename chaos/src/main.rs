//! `chaos`: the two halves of `cargo xtask chaos` that need async clients
//! (xtask itself stays std-only and owns the processes and the faults).
//!
//! - `chaos workload`: the seeded command mix against room-service, each call
//!   to a random instance, refusals retried as the gateway contract says
//!   ([`refusal`]); writes every command, its outcome, the instances
//!   involved and when it was sent and answered to `commands.jsonl`.
//! - `chaos check`: waits for the system to settle, then verifies the
//!   delivery ledger (see [`checks`]) and prints the table; exit code 1 when
//!   any promise is broken. "Settled" means every rule passed twice, on
//!   snapshots a quiet period apart with the same ledger in both
//!   ([`checks::settle`]): the first all-pass snapshot may be a coincidence
//!   of effects still in flight. Before that it measures how long each
//!   killed room-service instance's rooms stayed unavailable ([`outage`]);
//!   that and the scale-out figures are judged once, from the ledger alone.

mod checks;
mod im_messages;
mod ledger;
mod observe;
mod outage;
mod refusal;
mod report;
mod routing;
mod workload;

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "Reliability workload and ledger checker")]
struct Cli {
    #[command(subcommand)]
    command: Mode,
}

#[derive(Subcommand, Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "parsed once at start-up; boxing the checker's options buys nothing"
)]
enum Mode {
    /// Drive room-service with a seeded command mix.
    Workload(WorkloadArgs),
    /// Verify the ledger once the system has settled.
    Check(CheckArgs),
}

/// `chaos workload`'s flags.
#[derive(Args, Debug)]
struct WorkloadArgs {
    /// A room-service instance, `NAME=URL` or `URL` (repeatable): each
    /// call goes to a random one, and the ledger records it by name.
    #[arg(long, required = true)]
    grpc: Vec<String>,
    /// Fake wallet admin URL (users are funded up front).
    #[arg(long)]
    wallet_admin: String,
    /// Seed of every random choice.
    #[arg(long)]
    seed: u64,
    /// Seconds of commands.
    #[arg(long)]
    duration_secs: u64,
    /// Rooms.
    #[arg(long, default_value_t = 40)]
    rooms: u32,
    /// Users per room.
    #[arg(long, default_value_t = 6)]
    users_per_room: u32,
    /// Concurrent clients.
    #[arg(long, default_value_t = 12)]
    concurrency: u32,
    /// Seconds one command is retried before its outcome is unknown.
    #[arg(long, default_value_t = 60)]
    retry_budget_secs: u64,
    /// Where the ledger goes.
    #[arg(long)]
    out: PathBuf,
}

/// `chaos check`'s flags.
#[derive(Args, Debug)]
struct CheckArgs {
    /// The run's database.
    #[arg(long)]
    mysql_url: String,
    /// Fake IM base URL.
    #[arg(long)]
    fake_im: String,
    /// Fake wallet admin URL.
    #[arg(long)]
    wallet_admin: String,
    /// Broker bootstrap (dead-letter topic sizes).
    #[arg(long)]
    bootstrap: String,
    /// `commands.jsonl` from the workload.
    #[arg(long)]
    commands: PathBuf,
    /// `faults.tsv` from the fault schedule.
    #[arg(long)]
    faults: PathBuf,
    /// Longest wait for the system to settle.
    #[arg(long, default_value_t = 180)]
    settle_secs: u64,
    /// Quiet period: after the first all-pass snapshot, the checker waits
    /// this long and observes again; that snapshot must pass too, with
    /// the ledger unchanged. A bounded settle check, not synchronisation.
    #[arg(long, default_value_t = 10)]
    quiet_secs: u64,
    /// Fewest acknowledged commands each room the workload sent commands
    /// to must have (at least 1): a run that committed nothing fails.
    #[arg(long, default_value_t = 1)]
    min_acked_per_room: usize,
    /// room-service instances the run started; with one, nothing can be
    /// forwarded and no lease can move to another instance.
    #[arg(long, default_value_t = 3)]
    room_services: usize,
    /// Longest a room held by a killed room-service instance may stay
    /// unavailable, other faults' time excused (milliseconds).
    #[arg(long, default_value_t = 5_000)]
    max_unavailable_ms: u64,
    /// activity-consumer's group, whose consumer_dedup rows record which
    /// gift events it credited.
    #[arg(long, default_value = outbox_schema::names::GROUP_ACTIVITY)]
    activity_group: String,
    /// im-bridge's group: its consumer_dedup rows follow the order its
    /// messages went out, where control events may overtake gifts.
    #[arg(long, default_value = outbox_schema::names::GROUP_IM_BRIDGE)]
    im_bridge_group: String,
    /// Event types im-bridge does not send (comma separated); unset = its
    /// default, `outbox_schema::names::IM_SILENT_EVENT_TYPES`.
    #[arg(long)]
    im_silent: Option<String>,
    /// Big-gift threshold of activity-consumer.
    #[arg(long)]
    big_gift_threshold: u64,
    /// Global broadcast IM group.
    #[arg(long, default_value = "hyapp_global_broadcast")]
    broadcast_group: String,
    /// Most messages one IM group may receive in any one-second window:
    /// Tencent's per-group limit, the fake's `--group-msg-per-second`.
    #[arg(long, default_value_t = 40)]
    im_group_limit: usize,
    /// Dead-letter topics (comma separated); unset = every group's of
    /// `outbox_schema::groups::ALL`.
    #[arg(long)]
    dead_letter_topics: Option<String>,
    /// Consumer groups that write consumer_dedup (comma separated);
    /// unset = `outbox_schema::groups::CONSUMERS`.
    #[arg(long)]
    dedup_groups: Option<String>,
    /// `service=URL` of a consumer's /metrics (repeatable).
    #[arg(long)]
    metrics: Vec<String>,
}

fn list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The groups that record `consumer_dedup` rows, from the one list.
fn default_dedup_groups() -> Vec<String> {
    outbox_schema::groups::CONSUMERS
        .iter()
        .map(|group| group.group.to_string())
        .collect()
}

/// Every consumer group's dead-letter topic, from the one list.
fn default_dead_letter_topics() -> Vec<String> {
    outbox_schema::groups::ALL
        .iter()
        .map(|group| group.dead_letter_topic.to_string())
        .collect()
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Cli::parse()).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("chaos: {error:#}");
            ExitCode::from(2)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Mode::Workload(args) => run_workload(args).await,
        Mode::Check(args) => run_check(args).await,
    }
}

/// `chaos workload`: the seeded command mix, its ledger written to `--out`.
async fn run_workload(args: WorkloadArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.rooms > 0 && args.users_per_room >= 2 && args.concurrency > 0,
        "rooms, users_per_room ≥ 2 and concurrency must be positive"
    );
    let shape = workload::Shape {
        seed: args.seed,
        duration: Duration::from_secs(args.duration_secs),
        rooms: args.rooms,
        users_per_room: args.users_per_room,
        concurrency: args.concurrency,
        retry_budget: Duration::from_secs(args.retry_budget_secs),
    };
    let instances = args
        .grpc
        .iter()
        .map(|spec| routing::Instance::parse(spec))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let records = workload::run(&instances, &args.wallet_admin, &shape).await?;
    ledger::write_commands(&args.out, &records)?;
    println!("{}", report::workload_line(&records));
    Ok(ExitCode::SUCCESS)
}

/// `chaos check`: the ledger rules judged once, then every other rule polled
/// until the system settled; prints the table, fails on a broken promise.
async fn run_check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.min_acked_per_room >= 1,
        "--min-acked-per-room must be at least 1"
    );
    anyhow::ensure!(
        args.im_group_limit >= 1,
        "--im-group-limit must be at least 1"
    );
    let commands = ledger::read_commands(&args.commands)?;
    let faults = ledger::read_faults(&args.faults)?;
    let kills = outage::measure(&commands, &faults, args.room_services);
    let ledger_verdicts = checks::ledger_rules(
        &commands,
        &faults,
        &kills,
        &checks::LedgerExpectations {
            room_services: args.room_services,
            max_unavailable: Duration::from_millis(args.max_unavailable_ms),
        },
    );
    for failed in ledger_verdicts.iter().filter(|check| !check.passed) {
        eprintln!(
            "chaos: FAIL {}: {}",
            failed.name,
            failed.offenders.join("; ")
        );
    }
    let sources = sources(&args).await?;
    let settle_after = (args.settle_secs, args.quiet_secs);
    let expect = expectations(args);
    let started = Instant::now();
    let settler = checks::settle::Settler::new(
        started + Duration::from_secs(settle_after.0),
        Duration::from_secs(3),
        Duration::from_secs(settle_after.1),
    );
    let (seen, verdicts) = settle(&sources, &commands, &expect, ledger_verdicts, settler).await?;
    let run = report::Run {
        commands: &commands,
        faults: &faults,
        kills: &kills,
    };
    print!(
        "{}",
        report::render(&run, &seen, &verdicts, started.elapsed())
    );
    Ok(if verdicts.iter().all(|check| check.passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What the checker expects, from its flags.
fn expectations(args: CheckArgs) -> checks::Expectations {
    checks::Expectations {
        im_silent: args.im_silent.as_deref().map_or_else(
            || {
                outbox_schema::names::IM_SILENT_EVENT_TYPES
                    .iter()
                    .map(|event_type| (*event_type).to_owned())
                    .collect()
            },
            list,
        ),
        room_group_prefix: "room_".into(),
        broadcast_group: args.broadcast_group,
        big_gift_threshold: args.big_gift_threshold,
        dedup_groups: args
            .dedup_groups
            .map_or_else(default_dedup_groups, |text| list(&text)),
        activity_group: args.activity_group,
        im_bridge_group: args.im_bridge_group,
        min_acked_per_room: args.min_acked_per_room,
        im_group_limit: args.im_group_limit,
    }
}

/// Where the checker looks: the run's database, the fakes, the broker and
/// each consumer's `/metrics`.
async fn sources(args: &CheckArgs) -> anyhow::Result<observe::Sources> {
    let metrics = args
        .metrics
        .iter()
        .map(|pair| {
            pair.split_once('=')
                .map(|(name, url)| (name.to_string(), url.to_string()))
                .ok_or_else(|| anyhow::anyhow!("--metrics wants service=URL, got {pair:?}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(observe::Sources {
        pool: sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(2)
            .connect(&args.mysql_url)
            .await?,
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?,
        fake_im: args.fake_im.clone(),
        wallet_admin: args.wallet_admin.clone(),
        bootstrap: args.bootstrap.clone(),
        dead_letter_topics: args
            .dead_letter_topics
            .as_deref()
            .map_or_else(default_dead_letter_topics, list),
        metrics,
    })
}

/// The system converges after the faults stop; polls until every promise
/// holds and still holds after a quiet period, or the deadline passes; then
/// returns the last view with every verdict (the ledger's included).
async fn settle(
    sources: &observe::Sources,
    commands: &[ledger::CommandRecord],
    expect: &checks::Expectations,
    ledger_verdicts: Vec<checks::Check>,
    mut settler: checks::settle::Settler,
) -> anyhow::Result<(observe::Observation, Vec<checks::Check>)> {
    loop {
        let wait = match sources.observe().await {
            Ok(seen) => {
                let mut verdicts = checks::run(commands, &seen, expect);
                let passed = verdicts.iter().all(|check| check.passed);
                let ledger = checks::settle::fingerprint(&seen);
                match settler.after(passed, ledger, Instant::now()) {
                    checks::settle::Next::Done(settled) => {
                        verdicts.extend(ledger_verdicts);
                        verdicts.push(settled);
                        return Ok((seen, verdicts));
                    }
                    checks::settle::Next::Confirm(quiet) => {
                        eprintln!(
                            "chaos: every rule passes; confirming after a {}s quiet period",
                            quiet.as_secs()
                        );
                        quiet
                    }
                    checks::settle::Next::Wait(poll) => poll,
                }
            }
            Err(error) if settler.expired(Instant::now()) => return Err(error),
            Err(error) => {
                eprintln!("chaos: observation failed, retrying: {error:#}");
                settler.unobserved()
            }
        };
        tokio::time::sleep(wait).await;
    }
}
