//! `outbox-relay`: runs the relay (default), or performs one operator action
//! against `room_outbox` and prints JSON: `status`, `dead-letters list`,
//! `dead-letters replay [--dry-run]`, `purge [--retention 7d]`.

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use outbox_relay::{
    app::App,
    config::RelayServiceConfig,
    ops::{self, DeadLetterFilter},
};
use service_kit::duration::ConfigDuration;
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
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the relay until SIGINT/SIGTERM (the default).
    Run,
    /// Row counts per status and the age of the oldest undelivered row.
    Status,
    /// Dead letters (rows in `failed`).
    #[command(subcommand)]
    DeadLetters(DeadLetterCommand),
    /// Delete delivered rows older than the retention window, in bounded batches.
    Purge {
        /// Keep rows younger than this (default: outbox_worker.retention).
        #[arg(long)]
        retention: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum DeadLetterCommand {
    /// List dead letters.
    List(FilterArgs),
    /// Put dead letters back to pending, keeping their event_id.
    Replay {
        #[command(flatten)]
        filter: FilterArgs,
        /// Only show what would be replayed.
        #[arg(long)]
        dry_run: bool,
    },
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
    service_kit::telemetry::init("outbox-relay", &config.log)?;
    match cli.command.unwrap_or(Command::Run) {
        Command::Run => {
            let shutdown = service_kit::shutdown::on_signal();
            let result = App::build(config).await?.run(shutdown).await;
            service_kit::telemetry::shutdown();
            result?;
        }
        Command::Status => print_json(&ops::status(&pool(&config).await?).await?)?,
        Command::DeadLetters(DeadLetterCommand::List(filter)) => {
            print_json(&ops::list_dead_letters(&pool(&config).await?, &filter.into()).await?)?;
        }
        Command::DeadLetters(DeadLetterCommand::Replay { filter, dry_run }) => {
            let replayed =
                ops::replay_dead_letters(&pool(&config).await?, &filter.into(), dry_run).await?;
            print_json(&serde_json::json!({ "dry_run": dry_run, "replayed": replayed }))?;
        }
        Command::Purge { retention } => {
            let retention = match retention {
                Some(text) => ConfigDuration::parse(&text)
                    .map_err(anyhow::Error::msg)
                    .context("--retention")?,
                None => config.outbox_worker.retention,
            };
            let deleted =
                ops::purge_delivered(&pool(&config).await?, retention.as_millis()).await?;
            print_json(&serde_json::json!({ "deleted": deleted, "retention": retention }))?;
        }
    }
    Ok(())
}

async fn pool(config: &RelayServiceConfig) -> anyhow::Result<sqlx::MySqlPool> {
    config.mysql.connect().await.context("connect mysql")
}

fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
