//! The `notice-consumer` binary: args → config → telemetry → [`notice_consumer::App`].

use clap::Parser;
use std::path::PathBuf;

/// Turns private-notice room facts into C2C IM messages.
#[derive(Debug, Parser)]
#[command(name = "notice-consumer")]
struct Args {
    /// Config file (default: configs/notice-consumer.yaml when present).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print the effective configuration (secrets redacted) and exit.
    #[arg(long)]
    dump_config: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = notice_consumer::config::Config::load(args.config)?;
    if args.dump_config {
        println!("{}", service_kit::config::dump(&config));
        return Ok(());
    }
    service_kit::telemetry::init("notice-consumer", &config.log);
    let app = notice_consumer::App::build(config).await?;
    let result = app.run(service_kit::shutdown::on_signal()).await;
    service_kit::telemetry::shutdown();
    result?;
    Ok(())
}
