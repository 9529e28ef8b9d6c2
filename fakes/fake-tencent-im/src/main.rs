//! `fake-tencent-im` binary: serves the fake on a fixed address for the local stack.
//!
//! Every flag can also come from the environment (`FAKE_IM_LISTEN`, `FAKE_IM_SDK_APP_ID`,
//! `FAKE_IM_SECRET_KEY`, `FAKE_IM_ADMIN_IDENTIFIER`, `FAKE_IM_MAX_RECORDED_MESSAGES`,
//! `FAKE_IM_GROUP_MSG_PER_SECOND`, `FAKE_IM_MAX_MSG_BODY_BYTES`) so compose files need no
//! command line. Tencent's message limits are on by default (40 messages per group per
//! second, 12,288-byte bodies); 0 turns either off.

use std::net::SocketAddr;

use clap::Parser;
use fake_tencent_im::{FakeImConfig, spawn};

#[derive(Parser)]
#[command(
    name = "fake-tencent-im",
    about = "Local fake of the Tencent Cloud IM REST API"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, env = "FAKE_IM_LISTEN", default_value = "127.0.0.1:18090")]
    listen: SocketAddr,
    /// The SDKAppID the fake accepts.
    #[arg(long, env = "FAKE_IM_SDK_APP_ID", default_value_t = 1_400_000_000)]
    sdk_app_id: u64,
    /// Key that UserSigs must be signed with.
    #[arg(long, env = "FAKE_IM_SECRET_KEY", hide_env_values = true)]
    secret_key: String,
    /// The admin identifier allowed to call the APIs.
    #[arg(
        long,
        env = "FAKE_IM_ADMIN_IDENTIFIER",
        default_value = "administrator"
    )]
    admin_identifier: String,
    /// Recorded messages kept for the admin API; the oldest are forgotten past this many.
    #[arg(
        long,
        env = "FAKE_IM_MAX_RECORDED_MESSAGES",
        default_value_t = fake_tencent_im::MAX_RECORDED_MESSAGES
    )]
    max_recorded_messages: usize,
    /// Messages a group receives in any one second before the rest are dropped with
    /// `MsgFreqCtrl` (Tencent's limit); 0 turns the limit off.
    #[arg(
        long,
        env = "FAKE_IM_GROUP_MSG_PER_SECOND",
        default_value_t = fake_tencent_im::GROUP_MSG_PER_SECOND
    )]
    group_msg_per_second: u32,
    /// Longest message body accepted, in bytes of compact JSON; longer ones get ErrorCode
    /// 80002 (Tencent's 12 KB limit). 0 turns the limit off.
    #[arg(
        long,
        env = "FAKE_IM_MAX_MSG_BODY_BYTES",
        default_value_t = fake_tencent_im::MAX_MSG_BODY_BYTES
    )]
    max_msg_body_bytes: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let config = FakeImConfig {
        listen: args.listen,
        sdk_app_id: args.sdk_app_id,
        secret_key: args.secret_key,
        admin_identifier: args.admin_identifier,
        max_recorded_messages: args.max_recorded_messages,
        group_msg_per_second: Some(args.group_msg_per_second).filter(|n| *n > 0),
        max_msg_body_bytes: Some(args.max_msg_body_bytes).filter(|n| *n > 0),
    };
    let handle = spawn(config).await?;
    wait_for_stop_signal().await?;
    tracing::info!("fake tencent im shutting down");
    handle.shutdown().await
}

/// Ctrl-C locally, SIGTERM from a container runtime.
async fn wait_for_stop_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        ctrl_c = tokio::signal::ctrl_c() => ctrl_c?,
        _ = term.recv() => {}
    }
    Ok(())
}
