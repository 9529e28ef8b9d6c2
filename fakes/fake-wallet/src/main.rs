//! Fake wallet binary for the local stack: `fake-wallet --grpc-listen 127.0.0.1:7601
//! --admin-listen 127.0.0.1:7602 --initial-balance 1000000`.

use std::net::SocketAddr;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(about = "Fake wallet/v1 gRPC service with injectable faults")]
struct Args {
    /// gRPC listen address.
    #[arg(
        long,
        env = "FAKE_WALLET_GRPC_LISTEN",
        default_value = "127.0.0.1:7601"
    )]
    grpc_listen: SocketAddr,
    /// Admin HTTP listen address.
    #[arg(
        long,
        env = "FAKE_WALLET_ADMIN_LISTEN",
        default_value = "127.0.0.1:7602"
    )]
    admin_listen: SocketAddr,
    /// Balance of users not seen before.
    #[arg(long, env = "FAKE_WALLET_INITIAL_BALANCE", default_value_t = fake_wallet::DEFAULT_INITIAL_BALANCE)]
    initial_balance: i64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    service_kit::telemetry::init("fake-wallet", &service_kit::telemetry::LogConfig::default())?;
    let shutdown = service_kit::shutdown::on_signal();
    let handle = fake_wallet::spawn(fake_wallet::FakeWalletConfig {
        grpc_listen: args.grpc_listen,
        admin_listen: args.admin_listen,
        initial_balance: args.initial_balance,
        balances: Vec::new(),
        tls: None,
    })
    .await?;
    shutdown.cancelled().await;
    handle.shutdown().await;
    Ok(())
}
