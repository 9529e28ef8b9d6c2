//! Benchmark runner. `cargo xtask bench` starts the broker and runs this in
//! release mode; each scenario prints table rows (target, measured, same-run
//! baseline, ratio, PASS/MISS) and everything is written as JSON under
//! `target/bench/`. A MISS is reported, never hidden; this is not a test and
//! asserts no timings.

mod console_consumers;
mod console_drains;
mod console_http;
mod console_scenarios;
mod consumer_scenarios;
mod consumers;
mod e2e_curve;
mod e2e_scenarios;
mod failover;
mod fixtures;
mod gateway;
mod gateway_auth;
mod hot_room;
mod memory_scenarios;
mod plots;
mod presence;
mod processes;
mod relay_baselines;
mod relay_scenarios;
mod relay_start;
mod report;
mod room_load;
mod room_scenarios;
mod routing_hint;
mod scale_out_scenarios;
mod security;

use clap::Parser;
use report::Report;

#[derive(Debug, Parser)]
#[command(name = "bench", about = "Platform benchmarks with same-run baselines")]
struct Cli {
    /// Broker bootstrap servers.
    #[arg(long, env = "HYAPP_BENCH_KAFKA_BOOTSTRAP")]
    bootstrap: String,
    /// MariaDB server URL (no database).
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306")]
    mysql: String,
    /// Redis URL.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Seconds-long smoke run (CI keeps the harness working with this).
    #[arg(long)]
    smoke: bool,
    /// Run only scenarios whose name contains one of these.
    #[arg(long)]
    only: Vec<String>,
    /// Where to write results.
    #[arg(long, default_value = "target/bench")]
    out_dir: std::path::PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Off unless asked for: `RUST_LOG=relay_engine::worker=debug` shows where
    // each relay batch spends its time.
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    let env = fixtures::BenchEnv {
        bootstrap: cli.bootstrap.clone(),
        mysql: cli.mysql.clone(),
        redis: cli.redis.clone(),
        smoke: cli.smoke,
        out_dir: cli.out_dir.clone(),
    };
    let selected = |name: &str| {
        cli.only.is_empty() || cli.only.iter().any(|only| name.contains(only.as_str()))
    };
    let mut report = Report::new(cli.smoke);
    if selected("room-mixed") {
        room_scenarios::mixed_commands(&env, &mut report).await?;
    }
    if selected("gift-storm") {
        room_scenarios::gift_storm(&env, &mut report).await?;
    }
    if selected("scale-out-mixed") {
        scale_out_scenarios::mixed_one_vs_three(&env, &mut report).await?;
    }
    if selected("scale-out-handoff") {
        scale_out_scenarios::handoff_gap(&env, &mut report).await?;
    }
    if selected("scale-out-takeover") {
        scale_out_scenarios::takeover_gap(&env, &mut report).await?;
    }
    if selected("scale-out-routing-hint") {
        routing_hint::routing_hint(&env, &mut report).await?;
    }
    if selected("gateway-auth") {
        gateway_auth::gateway_auth(&env, &mut report).await?;
    }
    if selected("failover") {
        failover::failover(&env, &mut report).await?;
    }
    if selected("presence") {
        presence::presence(&env, &mut report).await?;
    }
    if selected("relay-drain") {
        relay_scenarios::backlog_drain(&env, &mut report).await?;
    }
    if selected("relay-latency") {
        relay_scenarios::idle_latency(&env, &mut report).await?;
    }
    if selected("relay-first-event") {
        relay_start::first_event(&env, &mut report).await?;
    }
    if selected("e2e-latency") {
        e2e_curve::latency_curve(&env, &mut report).await?;
        e2e_scenarios::e2e_latency(&env, &mut report).await?;
    }
    if selected("consumer-throughput") {
        consumer_scenarios::consumer_throughput(&env, &mut report).await?;
    }
    if selected("hot-room") {
        hot_room::hot_room(&env, &mut report).await?;
    }
    if selected("console") {
        console_scenarios::console(&env, &mut report).await?;
    }
    if selected("memory") {
        memory_scenarios::memory(&env, &mut report).await?;
    }
    report.print();
    report.write(&cli.out_dir)?;
    Ok(())
}
