//! room-service binary: parse args → load config → init telemetry → build → run.
//! `room-service migrate` instead applies the embedded migrations and exits
//! (the Kubernetes migration Job, deploy/k8s/migrate-job.yaml).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(about = "Room service: gRPC room API and transactional outbox writer")]
struct Args {
    /// Config file (default: configs/room-service.yaml when present).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Print the effective configuration (secrets redacted) and exit.
    #[arg(long)]
    dump_config: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve until SIGINT/SIGTERM (the default).
    Run,
    /// Apply the embedded database migrations to `mysql.url` and exit 0
    /// (whatever `mysql.run_migrations` says); serves nothing.
    Migrate,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut config = room_service::Config::load(args.config).context("loading configuration")?;
    if args.dump_config {
        println!("{}", service_kit::config::dump(&config));
        return Ok(());
    }
    service_kit::telemetry::init("room-service", &config.log).context("starting telemetry")?;
    if let Some(Command::Migrate) = args.command {
        // Connect without the start-up migration, then run it explicitly:
        // the same code path and lock the start-up migration takes.
        config.mysql.run_migrations = false;
        let pool = config.mysql.connect().await.context("connecting MySQL")?;
        let migrated = service_kit::db::migrate(&pool)
            .await
            .context("running migrations");
        pool.close().await;
        migrated?;
        tracing::info!("migrations applied");
        service_kit::telemetry::shutdown();
        return Ok(());
    }
    let shutdown = service_kit::shutdown::on_signal();
    let app = room_service::App::build(config)
        .await
        .context("starting room-service")?;
    let result = app.run(shutdown).await;
    service_kit::telemetry::shutdown();
    let report = result.context("running room-service")?;
    tracing::info!(steps = ?report.steps, "room-service stopped");
    Ok(())
}
