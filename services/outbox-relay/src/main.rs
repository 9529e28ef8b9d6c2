//! `outbox-relay`: runs the relay (default), or performs one operator command
//! against `room_outbox` (`outbox_relay::ops`, the same code the admin HTTP
//! endpoints run) and prints it as tables, or as JSON with `--json`:
//! `status`, `room`, `retry-now`, `skip`, `leases`, `audit`,
//! `dead-letters list|replay`, `purge`. Mutations need `--operator`. Two
//! more manage console access: `console revoke-sessions` ends every console
//! session, `operator-hash --name <name>` turns a token read from stdin
//! into an `admin_operators_file` line.

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use outbox_relay::{
    access::{operators, sessions},
    app::App,
    config::RelayServiceConfig,
    ops::{self, AuditFilter, DeadLetterFilter, OperatorName, Target, render::Render},
};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "outbox-relay",
    version,
    about = "Publishes room_outbox rows in per-room order"
)]
struct Cli {
    /// Config file (default: configs/outbox-relay.yaml when present).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Print the effective config (secrets redacted) and exit.
    #[arg(long)]
    dump_config: bool,
    /// Print operator command results as JSON (for scripts) instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the relay until SIGINT/SIGTERM (the default).
    Run,
    /// Open, retrying and dead-lettered rows, backlog age, retrying heads.
    Status,
    /// One room's open chain: its head (decoded), what queues behind it, its wake-ups.
    Room {
        /// The room.
        room_id: String,
    },
    /// Make a retryable head (or event) due now instead of after its backoff.
    RetryNow {
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        who: WhoArgs,
    },
    /// Dead-letter a failing head (or event) so the rows behind it flow.
    Skip {
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        who: WhoArgs,
    },
    /// Shard leases (owner, epoch, expiry) and relay instances.
    Leases,
    /// The operator audit trail, newest first.
    Audit {
        /// Only the last window, e.g. 2h, 7d.
        #[arg(long)]
        since: Option<String>,
        /// Only this action: replay, retry_now, skip, purge.
        #[arg(long)]
        action: Option<String>,
        /// Only this room.
        #[arg(long)]
        room_id: Option<String>,
        /// At most this many (default 100).
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Dead letters (rows in `failed`).
    #[command(subcommand)]
    DeadLetters(DeadLetterCommand),
    /// Operator console sessions.
    #[command(subcommand)]
    Console(ConsoleCommand),
    /// Print the `admin_operators_file` line of a named operator, hashing
    /// the token read from stdin (never an argument: it would be in the
    /// shell history and the process list).
    OperatorHash {
        /// The operator's name, as the audit trail will record it.
        #[arg(long)]
        name: String,
    },
    /// Delete delivered rows older than the retention window, in bounded batches.
    Purge {
        /// Keep rows younger than this (default: outbox_worker.retention).
        #[arg(long)]
        retention: Option<String>,
        #[command(flatten)]
        who: WhoArgs,
    },
}

#[derive(Debug, Subcommand)]
enum ConsoleCommand {
    /// End every console session on every replica (copied cookies included).
    RevokeSessions,
}

#[derive(Debug, Subcommand)]
enum DeadLetterCommand {
    /// List dead letters.
    List(FilterArgs),
    /// Put dead letters back to pending, keeping their event_id.
    Replay {
        #[command(flatten)]
        filter: FilterArgs,
        /// Only show what would be replayed (and what ops.replay_max_age refuses).
        #[arg(long)]
        dry_run: bool,
        /// Replay dead letters older than ops.replay_max_age too (consumers
        /// may apply them twice).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        who: WhoArgs,
    },
}

/// Which row a retry-now or skip acts on: exactly one of the two.
#[derive(Debug, Args)]
struct TargetArgs {
    /// The room whose head to act on.
    #[arg(long)]
    room_id: Option<String>,
    /// The event to act on.
    #[arg(long)]
    event_id: Option<String>,
}

/// Who performs a mutation, and why (recorded in the audit trail).
#[derive(Debug, Args)]
struct WhoArgs {
    /// Your name, recorded in the audit trail (required for a mutation).
    #[arg(long)]
    operator: Option<String>,
    /// Why (required for skip).
    #[arg(long)]
    reason: Option<String>,
}

impl WhoArgs {
    fn operator(&self) -> anyhow::Result<OperatorName> {
        let name = self.operator.as_deref().unwrap_or_default();
        Ok(ops::audit::operator_name(name, "--operator")?)
    }
}

#[derive(Debug, Args)]
struct FilterArgs {
    /// Only this event.
    #[arg(long)]
    event_id: Option<String>,
    /// Only this room (its dead letters in commit order).
    #[arg(long)]
    room_id: Option<String>,
    /// Only this event type.
    #[arg(long)]
    event_type: Option<String>,
    /// Committed within this window ending now, e.g. 2h.
    #[arg(long)]
    since: Option<String>,
    /// Committed at or after this Unix time in ms.
    #[arg(long)]
    since_ms: Option<i64>,
    /// Committed before this Unix time in ms.
    #[arg(long)]
    until_ms: Option<i64>,
    /// At most this many (default 100).
    #[arg(long)]
    limit: Option<u64>,
}

impl From<FilterArgs> for DeadLetterFilter {
    fn from(args: FilterArgs) -> Self {
        DeadLetterFilter {
            event_id: args.event_id,
            room_id: args.room_id,
            event_type: args.event_type,
            since: args.since,
            since_ms: args.since_ms,
            until_ms: args.until_ms,
            limit: args.limit,
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let config = RelayServiceConfig::load_with_env(cli.config.clone(), None)?;
    if cli.dump_config {
        println!("{}", service_kit::config::dump(&config));
        return Ok(());
    }
    let json = cli.json;
    let command = cli.command.unwrap_or(Command::Run);
    if matches!(command, Command::Run) {
        service_kit::telemetry::init("outbox-relay", &config.log)?;
    } else {
        // stdout is the command's output (a table, or JSON for a script).
        service_kit::telemetry::init_for_command("outbox-relay", &config.log)?;
    }
    execute(command, config, json).await
}

/// Runs the relay, or one operator command with its report on stdout.
async fn execute(command: Command, config: RelayServiceConfig, json: bool) -> anyhow::Result<()> {
    match command {
        Command::Run => {
            let shutdown = service_kit::shutdown::on_signal();
            let result = App::build(config).await?.run(shutdown).await;
            service_kit::telemetry::shutdown();
            result?;
        }
        Command::Status => print(json, &ops::status(&pool(&config).await?).await?)?,
        Command::Room { room_id } => {
            print(json, &ops::room(&pool(&config).await?, &room_id).await?)?;
        }
        Command::RetryNow { target, who } => {
            let (target, operator) = (target_of(&target)?, who.operator()?);
            let pool = pool(&config).await?;
            let done = ops::retry_now(&pool, &target, &operator, who.reason.as_deref()).await?;
            print(json, &done)?;
        }
        Command::Skip { target, who } => {
            let (target, operator) = (target_of(&target)?, who.operator()?);
            let pool = pool(&config).await?;
            print(
                json,
                &ops::skip(&pool, &target, &operator, who.reason.as_deref()).await?,
            )?;
        }
        Command::Leases => print(json, &ops::leases(&pool(&config).await?).await?)?,
        Command::Audit {
            since,
            action,
            room_id,
            limit,
        } => {
            let filter = AuditFilter {
                since,
                action,
                room_id,
                limit,
            };
            print(
                json,
                &ops::audit::list(&pool(&config).await?, &filter).await?,
            )?;
        }
        Command::DeadLetters(DeadLetterCommand::List(filter)) => {
            let letters = ops::list_dead_letters(&pool(&config).await?, &filter.into()).await?;
            print(json, &letters)?;
        }
        Command::DeadLetters(DeadLetterCommand::Replay {
            filter,
            dry_run,
            force,
            who,
        }) => replay(&config, json, filter, dry_run, force, who).await?,
        Command::Console(ConsoleCommand::RevokeSessions) => {
            let generation = sessions::revoke_all(&pool(&config).await?).await?;
            if json {
                print_json(&serde_json::json!({ "generation": generation }))?;
            } else {
                println!("every console session ended (session generation {generation})");
            }
        }
        Command::OperatorHash { name } => operator_hash(&name)?,
        Command::Purge { retention, who } => purge(&config, json, retention, who).await?,
    }
    Ok(())
}

/// `dead-letters replay`: a dry run lists, a real one re-queues (audited),
/// refusing letters older than `ops.replay_max_age` unless forced.
async fn replay(
    config: &RelayServiceConfig,
    json: bool,
    filter: FilterArgs,
    dry_run: bool,
    force: bool,
    who: WhoArgs,
) -> anyhow::Result<()> {
    let operator = if dry_run { None } else { Some(who.operator()?) };
    let guard = ops::ReplayGuard {
        max_age_ms: config.ops.replay_max_age_ms()?,
        force,
    };
    let replay = ops::replay_dead_letters(
        &pool(config).await?,
        &filter.into(),
        dry_run,
        operator.as_ref(),
        who.reason.as_deref(),
        guard,
    )
    .await?;
    print_replay(json, dry_run, &replay)
}

/// `operator-hash`: the `operators` line for `name`, the token read from stdin.
fn operator_hash(name: &str) -> anyhow::Result<()> {
    let mut token = String::new();
    std::io::stdin()
        .read_line(&mut token)
        .context("read the token from stdin")?;
    println!(
        "{}",
        operators::hash_line(name, token.trim_end_matches(['\r', '\n']))?
    );
    Ok(())
}

/// `purge`: delivered rows older than `--retention` (default the worker's).
async fn purge(
    config: &RelayServiceConfig,
    json: bool,
    retention: Option<String>,
    who: WhoArgs,
) -> anyhow::Result<()> {
    let operator = who.operator()?;
    let retention = match retention {
        Some(text) => ops::parse_duration("--retention", &text)?,
        None => config.outbox_worker.retention.as_millis(),
    };
    let pool = pool(config).await?;
    let report = ops::purge_delivered(&pool, retention, &operator, who.reason.as_deref()).await?;
    print(json, &report)
}

fn target_of(args: &TargetArgs) -> anyhow::Result<Target> {
    Ok(Target::from_parts(
        args.room_id.as_deref(),
        args.event_id.as_deref(),
    )?)
}

async fn pool(config: &RelayServiceConfig) -> anyhow::Result<sqlx::MySqlPool> {
    config.mysql.connect().await.context("connect mysql")
}

fn print(json: bool, report: &(impl serde::Serialize + Render)) -> anyhow::Result<()> {
    if json {
        print_json(report)
    } else {
        print!("{}", report.render());
        Ok(())
    }
}

fn print_replay(json: bool, dry_run: bool, replay: &ops::Replay) -> anyhow::Result<()> {
    if json {
        return print_json(&serde_json::json!({
            "dry_run": dry_run,
            "replayed": replay.replayed,
            "too_old": replay.too_old,
            "forced": replay.forced,
        }));
    }
    let verb = if dry_run { "would replay" } else { "replayed" };
    print!(
        "{verb} {} dead letters\n{}",
        replay.replayed.len(),
        replay.replayed.render()
    );
    let label = if dry_run {
        "refused unless --force"
    } else {
        "forced past ops.replay_max_age"
    };
    for row in &replay.too_old {
        println!("{label}: event {}: {}", row.event_id, row.why);
    }
    Ok(())
}

fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
