//! `cargo xtask up`: the whole platform on this machine on the documented
//! ports (README "Services and ports"), until Ctrl-C or until a service dies.
//!
//! MariaDB/Redis (private instances when missing) → Tansu on 127.0.0.1:9092 →
//! topics → `cargo build --bins` → fakes → room-service (migrations) →
//! outbox-relay + consumers, each awaited on its probe. room-service runs
//! with `outbox_worker.enabled=false`: the standalone outbox-relay publishes
//! (mq mode), as in production.

use crate::interrupt::{self, StopFlag};
use crate::services::Ports;
use crate::stack::{self, Plan};
use crate::{infra, localdb};
use std::time::Duration;

/// Database `up` uses (the shipped configs' default); kept between runs.
const DATABASE: &str = "hyapp";

/// Runs the stack in the foreground.
pub fn run(args: &[String], stop: &StopFlag) -> Result<(), String> {
    if !args.is_empty() {
        return Err("usage: cargo xtask up".into());
    }
    let root = infra::workspace_root();
    let stack_dir = root.join("target/stack");
    let ports = Ports::fixed();
    check_ports_free(&ports)?;
    crate::step("checking MariaDB (127.0.0.1:3306) and Redis (127.0.0.1:6379)");
    let mut databases = localdb::ensure(&stack_dir)?;
    localdb::mysql_exec(&format!("CREATE DATABASE IF NOT EXISTS `{DATABASE}`"))?;
    crate::step("building the broker (tools/local-broker)");
    let tansu = infra::ensure_broker_with(|build| interrupt::run_interruptible(build, stop))?;
    let built = crate::binaries::build_binaries(stop)?;
    let plan = Plan {
        ports: ports.clone(),
        database: DATABASE.into(),
        log_dir: stack_dir,
        overrides: Vec::new(),
        advertised_broker: None,
    };
    let mut stack = stack::start(&plan, &built, &tansu, stop)?;
    print_endpoints(&plan, &stack);
    let result = loop {
        if stop.requested() {
            break Ok(());
        }
        if let Some((name, status, log)) = stack.exited() {
            break Err(format!(
                "{name} exited ({status}); last lines of {}:\n{}",
                log.display(),
                crate::logs::log_tail(&log, 20)
            ));
        }
        if stack.broker_exited() {
            break Err("the Tansu broker exited; see target/stack/tansu-9092.log".into());
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    if let Err(message) = &result {
        eprintln!("xtask: {message}");
    }
    stack.stop();
    databases.stop();
    result.map_err(|_| "the stack stopped because a process died (see above)".into())
}

/// Fails early, naming the port, when something already listens on one.
fn check_ports_free(ports: &Ports) -> Result<(), String> {
    let named = [
        (ports.broker, "broker"),
        (ports.fake_im, "fake-tencent-im"),
        (ports.wallet_grpc, "fake-wallet gRPC"),
        (ports.wallet_admin, "fake-wallet admin"),
        (ports.room_grpc, "room-service gRPC"),
        (ports.room_http, "room-service HTTP"),
        (ports.relay_http, "outbox-relay HTTP"),
        (ports.activity_grpc, "activity-consumer gRPC"),
        (ports.activity_http, "activity-consumer HTTP"),
        (ports.im_bridge_http, "im-bridge HTTP"),
        (ports.notice_http, "notice-consumer HTTP"),
    ];
    for (port, name) in named {
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            return Err(format!(
                "port {port} ({name}) is in use; is another `cargo xtask up` running? \
                 (`cargo xtask demo` uses free ports and can run next to it)"
            ));
        }
    }
    Ok(())
}

fn print_endpoints(plan: &Plan, stack: &stack::Stack) {
    let p = &plan.ports;
    let log = |name: &str| format!("target/stack/{name}.log");
    println!();
    println!(
        "The stack is up (database `{}`). Ctrl-C stops it in order.",
        plan.database
    );
    println!();
    println!("  {:<18} {:<24} {:<42} log", "service", "gRPC", "HTTP");
    let rows = [
        (
            "room-service",
            format!("127.0.0.1:{}", p.room_grpc),
            format!("http://127.0.0.1:{}/readyz", p.room_http),
        ),
        (
            "outbox-relay",
            "-".into(),
            format!("http://127.0.0.1:{}/admin/status", p.relay_http),
        ),
        (
            "im-bridge",
            "-".into(),
            format!("http://127.0.0.1:{}/readyz", p.im_bridge_http),
        ),
        (
            "activity-consumer",
            format!("127.0.0.1:{}", p.activity_grpc),
            format!("http://127.0.0.1:{}/readyz", p.activity_http),
        ),
        (
            "notice-consumer",
            "-".into(),
            format!("http://127.0.0.1:{}/readyz", p.notice_http),
        ),
        (
            "fake-tencent-im",
            "-".into(),
            format!("http://127.0.0.1:{}/admin/messages", p.fake_im),
        ),
        (
            "fake-wallet",
            format!("127.0.0.1:{}", p.wallet_grpc),
            format!("http://127.0.0.1:{}/admin/stats", p.wallet_admin),
        ),
    ];
    for (name, grpc, http) in rows {
        let state = if stack
            .unavailable
            .iter()
            .any(|(missing, _)| *missing == name)
        {
            "  (NOT RUNNING, see its log)"
        } else {
            ""
        };
        println!("  {name:<18} {grpc:<24} {http:<42} {}{state}", log(name));
    }
    println!(
        "  {:<18} {:<24} {:<42} target/stack/tansu-{}.log",
        "broker (Tansu)",
        format!("127.0.0.1:{}", p.broker),
        "-",
        p.broker
    );
    println!(
        "  operator console: http://127.0.0.1:{}/console (log in with the admin token local-admin-token)",
        p.relay_http
    );
    println!(
        "  MySQL database `{}` on 127.0.0.1:3306; Redis 127.0.0.1:6379; every service also serves /healthz and /metrics.",
        plan.database
    );
    println!();
    println!("Try (room-service has gRPC reflection):");
    let g = format!("127.0.0.1:{}", p.room_grpc);
    println!("  grpcurl -plaintext {g} list hyapp.room.v1.RoomService");
    println!(
        "  grpcurl -plaintext -d '{{\"meta\":{{\"command_id\":\"c-1\"}},\"room_id\":\"r1\",\"owner_id\":\"host\",\"title\":\"hello\",\"mic_seat_count\":8}}' {g} hyapp.room.v1.RoomService/CreateRoom"
    );
    println!(
        "  grpcurl -plaintext -d '{{\"meta\":{{\"command_id\":\"c-2\"}},\"room_id\":\"r1\",\"user_id\":\"alice\"}}' {g} hyapp.room.v1.RoomService/JoinRoom"
    );
    println!(
        "  grpcurl -plaintext -d '{{\"meta\":{{\"command_id\":\"c-3\"}},\"room_id\":\"r1\",\"sender_id\":\"alice\",\"receiver_id\":\"host\",\"gift_id\":\"rose\",\"count\":1,\"unit_value\":100}}' {g} hyapp.room.v1.RoomService/SendGift"
    );
    println!(
        "  grpcurl -plaintext -d '{{\"room_id\":\"r1\"}}' {g} hyapp.room.v1.RoomService/GetRoom"
    );
    println!(
        "  curl 'http://127.0.0.1:{}/admin/messages?group_id=room_r1'",
        p.fake_im
    );
    println!(
        "  curl -H 'Authorization: Bearer local-admin-token' http://127.0.0.1:{}/admin/status",
        p.relay_http
    );
    println!();
}
