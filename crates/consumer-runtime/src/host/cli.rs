//! The binary of every consumer service, written once ("thin mains",
//! docs/style.md): args → config → telemetry → [`Host::build`] → run until a
//! signal. A service's `main.rs` only names its [`ConsumerService`].
//!
//! Operator commands beside running: `consumer-lag [--group G]` prints the
//! group's lag per partition as the broker reports it (`crate::lag`), which
//! works while every consumer of the group is down
//! (docs/runbooks.md#consumergroupdown); `dead-letters …` and `deliveries …`
//! (`super::operator`).

use super::{ConsumerService, Error, Host, ServiceConfig};
use crate::lag::{PartitionLag, read_group_lag};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
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
    #[command(subcommand)]
    command: Option<HostCommand>,
}

/// What the binary does; without a subcommand it runs the service.
#[derive(Debug, Subcommand)]
enum HostCommand {
    /// Run the consumer until SIGINT/SIGTERM (the default).
    Run,
    /// Print a consumer group's lag per partition, read from the broker
    /// (committed offset against the high watermark); works with the
    /// group's consumers down. Exits non-zero when the broker cannot answer.
    ConsumerLag {
        /// The group (default: the one this service consumes in).
        #[arg(long)]
        group: Option<String>,
        /// The topic (default: the one this service consumes, namespace
        /// applied; give `hyapp_room_treasure_open` for the treasure-open group).
        #[arg(long)]
        topic: Option<String>,
    },
    /// The operator commands (dead letters, failed deliveries).
    #[command(flatten)]
    Operator(super::OperatorCommand),
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
    match args.command {
        Some(HostCommand::ConsumerLag { group, topic }) => {
            return print_lag(&config, group, topic).await;
        }
        Some(HostCommand::Operator(command)) => {
            // stdout is the command's output (a table, or JSON for a script).
            service_kit::telemetry::init_for_command(S::Config::SERVICE, config.shared().log)?;
            return super::operator_run::main::<S>(&config, command).await;
        }
        Some(HostCommand::Run) | None => {}
    }
    service_kit::telemetry::init(S::Config::SERVICE, config.shared().log)?;
    let app = Host::<S>::build(config).await?;
    let result = app.run(service_kit::shutdown::on_signal()).await;
    service_kit::telemetry::shutdown();
    result
}

/// `consumer-lag`: one reading of the group's lag, as a table on stdout.
async fn print_lag<C: ServiceConfig>(
    config: &C,
    group: Option<String>,
    topic: Option<String>,
) -> Result<(), Error> {
    let settings = config.consumer_settings()?;
    let group = group.unwrap_or(settings.consumer_group);
    let topic = topic.unwrap_or(settings.topic);
    let properties = settings.client_properties;
    let lags = {
        let (group, topic) = (group.clone(), topic.clone());
        tokio::task::spawn_blocking(move || read_group_lag(&properties, &group, &topic))
            .await
            .map_err(|error| Error::Config(format!("lag reader task failed: {error}")))??
    };
    print!("{}", lag_table(&group, &topic, &lags));
    Ok(())
}

/// The table `consumer-lag` prints: one line per partition, then the total.
fn lag_table(group: &str, topic: &str, lags: &[PartitionLag]) -> String {
    let mut out = format!(
        "consumer group {group}, topic {topic}\n{:>9} {:>12} {:>12} {:>12} {:>10}\n",
        "partition", "committed", "low", "high", "lag"
    );
    for lag in lags {
        let committed = lag
            .committed
            .map_or_else(|| "none".to_string(), |offset| offset.to_string());
        out.push_str(&format!(
            "{:>9} {:>12} {:>12} {:>12} {:>10}\n",
            lag.partition,
            committed,
            lag.low_watermark,
            lag.high_watermark,
            lag.lag()
        ));
    }
    let total: i64 = lags.iter().map(PartitionLag::lag).sum();
    out.push_str(&format!("total lag {total}\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lag_table_has_a_line_per_partition_and_the_total() {
        let lags = [
            PartitionLag {
                partition: 0,
                committed: Some(5),
                low_watermark: 0,
                high_watermark: 9,
            },
            PartitionLag {
                partition: 1,
                committed: None,
                low_watermark: 2,
                high_watermark: 3,
            },
        ];
        let table = lag_table("g", "t", &lags);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "consumer group g, topic t");
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["0", "5", "0", "9", "4"]
        );
        assert_eq!(
            lines[3].split_whitespace().collect::<Vec<_>>(),
            ["1", "none", "2", "3", "1"]
        );
        assert_eq!(lines[4], "total lag 5");
    }
}
