//! The `activity-consumer` binary: args → config → telemetry → [`activity_consumer::App`].

use clap::Parser;
use std::path::PathBuf;

/// Consumes room facts into activity leaderboards, totals and broadcasts.
#[derive(Debug, Parser)]
#[command(name = "activity-consumer")]
struct Args {
    /// Config file (default: configs/activity-consumer.yaml when present).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print the effective configuration (secrets redacted) and exit.
    #[arg(long)]
    dump_config: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = activity_consumer::config::Config::load(args.config)?;
    if args.dump_config {
        println!("{}", service_kit::config::dump(&config));
        return Ok(());
    }
    service_kit::telemetry::init("activity-consumer", &config.log);
    let app = activity_consumer::App::build(config).await?;
    let result = app.run(service_kit::shutdown::on_signal()).await;
    service_kit::telemetry::shutdown();
    result?;
    Ok(())
}
