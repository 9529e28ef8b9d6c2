//! `local-broker`: the Tansu broker with the three commands the project uses.
//!
//! * `broker` serves the Kafka protocol on `--listener-url` with the given
//!   `--storage-engine` (`memory://tansu/` or `sqlite://FILE`), optionally
//!   requiring SASL (`--authentication`);
//! * `topic create NAME --partitions N --broker URL` creates a topic;
//! * `user create NAME PASSWORD --mechanism scram256|scram512 --broker URL`
//!   stores SCRAM credentials.
//!
//! Flag names follow Tansu's own command line, so a stock `tansu` binary is a
//! drop-in replacement. The broker itself is Tansu's (`tansu-broker`),
//! built exactly as its command line builds it.

mod scram;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tansu_broker::{
    NODE_ID, TracingFormat, broker::Broker, coordinator::group::administrator::Controller,
};
use tansu_sans_io::ErrorCode;
use tansu_storage::StorageContainer;
use url::Url;

/// The Tansu release this binary is built from; `--version` prints it, and
/// xtask checks it before using a binary it did not build.
const TANSU_VERSION: &str = "0.6.0";

#[derive(Debug, Parser)]
#[command(name = "local-broker", version = TANSU_VERSION, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the Kafka protocol.
    Broker(BrokerArgs),
    /// Topic administration.
    Topic {
        #[command(subcommand)]
        command: TopicCommand,
    },
    /// SCRAM user administration.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
}

#[derive(Debug, clap::Args)]
struct BrokerArgs {
    /// All members of one cluster share this id.
    #[arg(long, default_value = "tansu_cluster")]
    cluster_id: String,
    /// Where the broker listens.
    #[arg(long, default_value = "tcp://127.0.0.1:9092")]
    listener_url: Url,
    /// Where clients are told to connect (metadata responses).
    #[arg(long, default_value = "tcp://127.0.0.1:9092")]
    advertised_listener_url: Url,
    /// `memory://tansu/` or `sqlite://FILE` (relative to the working directory).
    #[arg(long, default_value = "memory://tansu/")]
    storage_engine: Url,
    /// Require SASL (SCRAM) from every client.
    #[arg(long)]
    authentication: bool,
}

#[derive(Debug, Subcommand)]
enum TopicCommand {
    /// Create a topic.
    Create {
        /// The broker to ask.
        #[arg(long, default_value = "tcp://127.0.0.1:9092")]
        broker: Url,
        /// The topic's name.
        name: String,
        /// How many partitions it has.
        #[arg(long, default_value_t = 3)]
        partitions: i32,
    },
}

#[derive(Debug, Subcommand)]
enum UserCommand {
    /// Create (or replace) a user's SCRAM credential.
    Create {
        /// The broker to ask.
        #[arg(long, default_value = "tcp://127.0.0.1:9092")]
        broker: Url,
        /// The user's name.
        name: String,
        /// The user's password.
        password: String,
        /// The SCRAM mechanism the credential is for.
        #[arg(long, value_enum, default_value_t = scram::Mechanism::Scram512)]
        mechanism: scram::Mechanism,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("local-broker: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(ErrorCode::None) => ExitCode::SUCCESS,
        Ok(code) => {
            eprintln!("local-broker: the broker answered {code}");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("local-broker: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> Result<ErrorCode, String> {
    match command {
        Command::Broker(args) => serve(args).await,
        Command::Topic {
            command:
                TopicCommand::Create {
                    broker,
                    name,
                    partitions,
                },
        } => tansu_topic::Topic::create()
            .broker(broker)
            .name(name)
            .partitions(partitions)
            .config(Default::default())
            .build()
            .main()
            .await
            .map_err(|error| format!("topic create: {error}")),
        Command::User {
            command:
                UserCommand::Create {
                    broker,
                    name,
                    password,
                    mechanism,
                },
        } => scram::create_user(broker, &name, &password, mechanism).await,
    }
}

/// Builds the broker as Tansu's own `tansu broker` does and serves until
/// the process is stopped.
async fn serve(args: BrokerArgs) -> Result<ErrorCode, String> {
    // Tansu's log lines (text, to stdout), as its own binary writes them.
    let _tracing = tansu_broker::otel::init(TracingFormat::Text)
        .map_err(|error| format!("cannot start logging: {error}"))?;
    let started = tokio::time::Instant::now();
    let listening = format!(
        "local-broker (tansu {TANSU_VERSION}) listening on {} (advertised {}), storage {}",
        args.listener_url,
        args.advertised_listener_url,
        args.storage_engine.scheme()
    );
    let broker = Broker::<Controller<StorageContainer>, StorageContainer>::builder()
        .node_id(NODE_ID)
        .cluster_id(args.cluster_id)
        .incarnation_id(uuid::Uuid::now_v7())
        .advertised_listener(args.advertised_listener_url)
        .otlp_endpoint_url(None)
        .schema_registry(None)
        .storage(args.storage_engine)
        .listener(args.listener_url)
        .authentication(args.authentication)
        .tls_server_config(None)
        .silent(false)
        .build()
        .await
        .map_err(|error| format!("cannot build the broker: {error}"))?;
    println!("{listening}");
    broker
        .main(started)
        .await
        .map_err(|error| format!("broker: {error}"))
}
