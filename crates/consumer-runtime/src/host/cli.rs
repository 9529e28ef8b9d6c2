//! The binary of every consumer service, written once ("thin mains",
//! docs/style.md): args → config → telemetry → [`Host::build`] → run until a
//! signal. A service's `main.rs` only names its [`ConsumerService`].

use super::{ConsumerService, Error, Host, ServiceConfig};
use clap::{CommandFactory, FromArgMatches, Parser};
use std::path::PathBuf;

/// The arguments every consumer binary takes; the command's name, about line
/// and the default config path in `--config`'s help are the service's.
#[derive(Debug, Parser)]
struct Args {
    /// Config file (default: configs/<service>.yaml when present).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print the effective configuration (secrets redacted) and exit.
    #[arg(long)]
    dump_config: bool,
    /// An operator command instead of running the service.
    #[command(subcommand)]
    operator: Option<super::OperatorCommand>,
}

impl Args {
    /// Parses the process arguments for service `S` (exits on `--help` or an
    /// invalid argument, as clap does).
    fn parse_for<S: ConsumerService>() -> Self {
        let service = S::Config::SERVICE;
        let matches = Args::command()
            .name(service)
            .about(S::ABOUT)
            .mut_arg("config", |arg| {
                arg.help(format!(
                    "Config file (default: configs/{service}.yaml when present)"
                ))
            })
            .get_matches();
        Args::from_arg_matches(&matches).unwrap_or_else(|error| error.exit())
    }
}

/// Runs service `S` as its binary: `--dump-config` prints the effective
/// configuration (secrets redacted) and returns; otherwise the service runs
/// until SIGTERM/SIGINT and then drains ([`Host::run`]).
pub async fn main<S: ConsumerService>() -> Result<(), Error> {
    let args = Args::parse_for::<S>();
    let config = S::Config::load(args.config)?;
    if args.dump_config {
        println!("{}", service_kit::config::dump(&config));
        return Ok(());
    }
    if let Some(command) = args.operator {
        // stdout is the command's output (a table, or JSON for a script).
        service_kit::telemetry::init_for_command(S::Config::SERVICE, config.shared().log)?;
        return super::operator_run::main::<S>(&config, command).await;
    }
    service_kit::telemetry::init(S::Config::SERVICE, config.shared().log)?;
    let app = Host::<S>::build(config).await?;
    let result = app.run(service_kit::shutdown::on_signal()).await;
    service_kit::telemetry::shutdown();
    result
}
