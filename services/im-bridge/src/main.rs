//! The `im-bridge` binary: args → config → telemetry → [`im_bridge::App`].

use clap::Parser;
use std::path::PathBuf;

/// Consumes room events and drives Tencent IM groups.
#[derive(Debug, Parser)]
#[command(name = "im-bridge")]
struct Args {
    /// Config file (default: configs/im-bridge.yaml when present).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print the effective configuration (secrets redacted) and exit.
    #[arg(long)]
    dump_config: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = im_bridge::config::Config::load(args.config)?;
    if args.dump_config {
        println!("{}", service_kit::config::dump(&config));
        return Ok(());
    }
    service_kit::telemetry::init("im-bridge", &config.log);
    let app = im_bridge::App::build(config).await?;
    let result = app.run(service_kit::shutdown::on_signal()).await;
    service_kit::telemetry::shutdown();
    result?;
    Ok(())
}
