//! `cargo xtask demo [--keep]`: the platform's main job in one command.
//!
//! Brings the stack up like `up`, but on free ports, in a fresh database
//! (`hyapp_demo_<unix secs>`) and with shortened timers, then runs the
//! scripted session of the `demo` crate (a gRPC driver; xtask itself stays
//! std-only) and uses its exit code: 0 only when every expected effect was
//! observed. The stack is stopped and the database dropped afterwards
//! (`--keep` keeps the database and prints its name).
//!
//! Two security checks join the demo's report: the secrets in use (the IM
//! key, a per-run relay admin token) are passed to the driver, which greps
//! every log in the log directory and its own output for them; and before the
//! session every service process is checked to listen only on its configured
//! addresses ([`listeners`]).

// Declared here rather than in main.rs: only the demo uses it.
#[path = "listeners.rs"]
mod listeners;

use crate::interrupt::{self, StopFlag};
use crate::services::Ports;
use crate::stack::{self, Plan};
use crate::{infra, localdb};
use std::process::Command;

/// Shortened timers, shared by the stack overrides and the driver's expectations.
const TREASURE_COUNTDOWN_MS: u64 = 3_000;
const TREASURE_THRESHOLDS: &str = "3000,1000000000";
const PRESENCE_TTL_MS: u64 = 3_000;
const BIG_GIFT_THRESHOLD: u64 = 1_000;

/// Runs the demo; `Err` carries the reason for a non-zero exit.
pub fn run(args: &[String], stop: &StopFlag) -> Result<(), String> {
    let keep = match args {
        [] => false,
        [flag] if flag == "--keep" => true,
        _ => return Err("usage: cargo xtask demo [--keep]".into()),
    };
    let root = infra::workspace_root();
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0);
    let database = format!("hyapp_demo_{secs}");
    let log_dir = root.join(format!("target/demo/{secs}"));

    crate::step("checking MariaDB (127.0.0.1:3306) and Redis (127.0.0.1:6379)");
    let mut databases = localdb::ensure(&root.join("target/demo"))?;
    crate::step("building the broker (tools/local-broker) beside the workspace");
    let (tansu, built) = infra::with_broker_built(
        &root.join("target/broker-build.log"),
        |build| interrupt::run_interruptible(build, stop),
        || crate::binaries::build_binaries(stop),
    )?;
    if !built.contains("demo") {
        return Err("the demo crate did not compile (see the cargo output above)".into());
    }
    crate::step(&format!("creating database `{database}`"));
    localdb::mysql_exec(&format!("CREATE DATABASE `{database}`"))?;

    // Per run, so a leak found in the logs is this run's and not an old one's.
    let admin_token = format!("demo-admin-token-{secs}-{}", std::process::id());
    let plan = Plan {
        ports: Ports::free()?,
        database: database.clone(),
        log_dir: log_dir.clone(),
        overrides: overrides(&admin_token),
        advertised_broker: None,
    };
    let result = run_with_database(&plan, &built, &tansu, &admin_token, stop);
    // The stack (dropped inside) is stopped before the database goes away.
    if keep {
        println!("kept database `{database}`; logs in {}", log_dir.display());
    } else if let Err(error) = localdb::mysql_exec(&format!("DROP DATABASE IF EXISTS `{database}`"))
    {
        eprintln!("xtask: could not drop `{database}`: {error}");
    } else {
        crate::detail(&format!(
            "dropped database `{database}`; logs kept in {}",
            log_dir.display()
        ));
    }
    databases.stop();
    result
}

fn run_with_database(
    plan: &Plan,
    built: &crate::binaries::Built,
    tansu: &std::path::Path,
    admin_token: &str,
    stop: &StopFlag,
) -> Result<(), String> {
    let mut stack = stack::start(plan, built, tansu, stop)?;
    let p = &plan.ports;
    let running: Vec<&str> = stack.running.iter().map(|service| service.name).collect();
    let listening = listeners::check(&configured_listeners(p, &running));
    match &listening {
        Ok(summary) => crate::detail(&format!("listeners as configured: {summary}")),
        Err(problems) => crate::detail(&format!("UNEXPECTED LISTENERS: {problems}")),
    }
    crate::step("running the scripted session (demo crate)");
    let mut command = driver_command(plan, &stack, admin_token, &listening);
    let mut child = command
        .spawn()
        .map_err(|error| format!("cannot run the demo driver: {error}"))?;
    let status = interrupt::wait_child(&mut child, stop)?;
    let died = stack.exited();
    stack.stop();
    if let Some((name, status, log)) = died {
        eprintln!(
            "xtask: {name} exited during the demo ({status}); last lines of {}:\n{}",
            log.display(),
            crate::logs::log_tail(&log, 20)
        );
    }
    match status {
        None => Err("interrupted".into()),
        Some(status) if status.success() => Ok(()),
        Some(status) => Err(format!(
            "the demo did not observe every expected effect ({status}); logs in {}",
            plan.log_dir.display()
        )),
    }
}

/// The demo crate's driver: the session's endpoints, the secrets it must not
/// find in any log, the listeners found, and each running service's
/// `/metrics` with a metric it must export after the session.
fn driver_command(
    plan: &Plan,
    stack: &stack::Stack,
    admin_token: &str,
    listening: &Result<String, String>,
) -> Command {
    let p = &plan.ports;
    let mut command = Command::new(crate::binaries::target_dir().join("debug/demo"));
    command
        .args(["--grpc", &format!("http://127.0.0.1:{}", p.room_grpc)])
        .args([
            "--mysql-url",
            &format!("mysql://root@127.0.0.1:3306/{}", plan.database),
        ])
        .args(["--fake-im", &format!("http://127.0.0.1:{}", p.fake_im)])
        .args([
            "--fake-wallet",
            &format!("http://127.0.0.1:{}", p.wallet_admin),
        ])
        .args([
            "--treasure-countdown-ms",
            &TREASURE_COUNTDOWN_MS.to_string(),
        ])
        .args(["--presence-ttl-ms", &PRESENCE_TTL_MS.to_string()])
        .args(["--big-gift-threshold", &BIG_GIFT_THRESHOLD.to_string()])
        .args(["--treasure-threshold", first_threshold()])
        .args(["--logs", &plan.log_dir.display().to_string()])
        .args([
            "--secret",
            &format!("tencent_im.secret_key={}", crate::services::IM_SECRET_KEY),
        ])
        .args([
            "--secret",
            &format!("outbox-relay admin_token={admin_token}"),
        ])
        .args([
            "--relay-admin",
            &format!("http://127.0.0.1:{}", p.relay_http),
        ])
        .args([
            "--listeners",
            &match listening {
                Ok(summary) => format!("ok:{summary}"),
                Err(problems) => format!("fail:{problems}"),
            },
        ])
        .current_dir(infra::workspace_root());
    // Each service's /metrics, with a metric it must export after the session.
    for (name, port, metric) in [
        ("room-service", p.room_http, "room_commands_total"),
        (
            "outbox-relay",
            p.relay_http,
            "room_outbox_publish_success_total",
        ),
        (
            "im-bridge",
            p.im_bridge_http,
            "consumer_messages_consumed_total",
        ),
        (
            "activity-consumer",
            p.activity_http,
            "consumer_messages_consumed_total",
        ),
        (
            "notice-consumer",
            p.notice_http,
            "consumer_messages_consumed_total",
        ),
    ] {
        if !stack
            .unavailable
            .iter()
            .any(|(unavailable, _)| *unavailable == name)
        {
            command.args([
                "--metrics",
                &format!("{name}=http://127.0.0.1:{port}/metrics={metric}"),
            ]);
        }
    }
    for (name, reason) in &stack.unavailable {
        let first_line = reason.lines().next().unwrap_or_default();
        command.args(["--unavailable", &format!("{name}: {first_line}")]);
    }
    command
}

/// Each running service's configured listen addresses (all on 127.0.0.1).
fn configured_listeners<'a>(
    p: &Ports,
    running: &[&'a str],
) -> std::collections::BTreeMap<&'a str, Vec<std::net::SocketAddr>> {
    let local = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    running
        .iter()
        .filter_map(|name| {
            let ports = match *name {
                "room-service" => vec![p.room_grpc, p.room_http],
                "outbox-relay" => vec![p.relay_http],
                "im-bridge" => vec![p.im_bridge_http],
                "activity-consumer" => vec![p.activity_grpc, p.activity_http],
                "notice-consumer" => vec![p.notice_http],
                "fake-tencent-im" => vec![p.fake_im],
                "fake-wallet" => vec![p.wallet_grpc, p.wallet_admin],
                _ => return None,
            };
            Some((*name, ports.into_iter().map(local).collect()))
        })
        .collect()
}

fn first_threshold() -> &'static str {
    TREASURE_THRESHOLDS.split(',').next().unwrap_or("3000")
}

/// The demo's shortened timers and thresholds, and the relay's admin token,
/// as environment overrides.
fn overrides(admin_token: &str) -> Vec<(&'static str, String, String)> {
    let ms = |value: u64| format!("{value}ms");
    [
        (
            "room-service",
            "ROOM__ROOM__RULES__TREASURE_COUNTDOWN",
            ms(TREASURE_COUNTDOWN_MS),
        ),
        (
            "room-service",
            "ROOM__ROOM__RULES__TREASURE_THRESHOLDS",
            TREASURE_THRESHOLDS.into(),
        ),
        (
            "room-service",
            "ROOM__ROOM__PRESENCE_TTL",
            ms(PRESENCE_TTL_MS),
        ),
        (
            "room-service",
            "ROOM__ROOM__PRESENCE_SWEEP_INTERVAL",
            ms(250),
        ),
        ("room-service", "ROOM__SHUTDOWN_GRACE", "5s".into()),
        (
            "outbox-relay",
            "RELAY__OUTBOX_WORKER__POLL_INTERVAL",
            ms(200),
        ),
        (
            "outbox-relay",
            "RELAY__OUTBOX_WORKER__INITIAL_BACKOFF",
            ms(500),
        ),
        (
            "activity-consumer",
            "ACTIVITY__ACTIVITY__BIG_GIFT_THRESHOLD",
            BIG_GIFT_THRESHOLD.to_string(),
        ),
        ("outbox-relay", "RELAY__ADMIN_TOKEN", admin_token.into()),
    ]
    .into_iter()
    .map(|(service, key, value)| (service, key.to_string(), value))
    .collect()
}
