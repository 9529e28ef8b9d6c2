//! room-service binary: parse args → load config → init telemetry → build → run.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

#[derive(Debug, Parser)]
#[command(about = "Room service: gRPC room API and transactional outbox writer")]
struct Args {
    /// Config file (default: configs/room-service.yaml when present).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print the effective configuration (secrets redacted) and exit.
    #[arg(long)]
    dump_config: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = room_service::Config::load(args.config).context("loading configuration")?;
    if args.dump_config {
        println!("{}", service_kit::config::dump(&config));
        return Ok(());
    }
    service_kit::telemetry::init("room-service", &config.log).context("starting telemetry")?;
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
