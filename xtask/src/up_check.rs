//! The end of a full `cargo xtask test`: docs/operations.md's `cargo xtask up` exercised
//! as a newcomer would use it. Starts it (through its Ctrl-C supervisor), waits
//! until every documented port answers its probe, stops it with SIGTERM as a
//! terminal Ctrl-C would, and checks that it exits cleanly and leaves no
//! service listening.

use crate::services::{Ports, Probe};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the stack may take to come up (binaries are already built).
const START_TIMEOUT: Duration = Duration::from_secs(240);
/// How long the ordered stop may take.
const STOP_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs the check.
pub fn run() -> Result<(), String> {
    let ports = Ports::fixed();
    let log_path = crate::infra::workspace_root().join("target/up-check.log");
    crate::step(
        "checking `cargo xtask up`: start, every probe on the documented ports, SIGTERM, clean exit",
    );
    let mut up = start_up(&log_path)?;
    let tail = || crate::logs::log_tail(&log_path, 20);
    let started = Instant::now();
    await_probes(&ports, &mut up, &tail)?;
    crate::detail(&format!(
        "every service answered in {:.1}s; sending SIGTERM",
        started.elapsed().as_secs_f64()
    ));
    let stopping = Instant::now();
    stop_up(&mut up, &tail)?;
    let still_listening = still_listening(&ports);
    if !still_listening.is_empty() {
        return Err(format!(
            "after `cargo xtask up` stopped, ports {still_listening:?} still answer"
        ));
    }
    crate::detail(&format!(
        "stopped cleanly in {:.1}s",
        stopping.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// Starts `cargo xtask up` (this executable), its output into `log_path`.
fn start_up(log_path: &Path) -> Result<Child, String> {
    let log = std::fs::File::create(log_path)
        .map_err(|error| format!("create {}: {error}", log_path.display()))?;
    let log_err = log.try_clone().map_err(|error| error.to_string())?;
    let exe = std::env::current_exe().map_err(|error| error.to_string())?;
    Command::new(exe)
        .arg("up")
        .current_dir(crate::infra::workspace_root())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .map_err(|error| format!("cannot start xtask up: {error}"))
}

/// Waits until every documented probe answers 200; `Err` when `up` exits
/// first or [`START_TIMEOUT`] passes (then `up` is stopped).
fn await_probes(ports: &Ports, up: &mut Child, tail: &dyn Fn() -> String) -> Result<(), String> {
    let probes = [
        ("fake-tencent-im", Probe::Healthz(ports.fake_im)),
        ("fake-wallet", Probe::Healthz(ports.wallet_admin)),
        ("room-service", Probe::Readyz(ports.room_http)),
        ("outbox-relay", Probe::Readyz(ports.relay_http)),
        ("im-bridge", Probe::Readyz(ports.im_bridge_http)),
        ("activity-consumer", Probe::Readyz(ports.activity_http)),
        ("notice-consumer", Probe::Readyz(ports.notice_http)),
    ];
    let started = Instant::now();
    loop {
        let waiting: Vec<&str> = probes
            .iter()
            .filter(|(_, probe)| {
                let (port, path) = probe.target();
                crate::probe::http_status(port, path) != Some(200)
            })
            .map(|(name, _)| *name)
            .collect();
        if waiting.is_empty() {
            return Ok(());
        }
        if let Ok(Some(status)) = up.try_wait() {
            return Err(format!(
                "`cargo xtask up` exited ({status}) before it was ready:\n{}",
                tail()
            ));
        }
        if started.elapsed() > START_TIMEOUT {
            let _ = Command::new("kill")
                .args(["-TERM", &up.id().to_string()])
                .status();
            let _ = up.wait();
            return Err(format!(
                "`cargo xtask up`: no answer from {} within {}s:\n{}",
                waiting.join(", "),
                START_TIMEOUT.as_secs(),
                tail()
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// SIGTERM to `up`, as a terminal's Ctrl-C; `Ok` when it exits cleanly
/// within [`STOP_TIMEOUT`].
fn stop_up(up: &mut Child, tail: &dyn Fn() -> String) -> Result<(), String> {
    let _ = Command::new("kill")
        .args(["-TERM", &up.id().to_string()])
        .status();
    let stopping = Instant::now();
    let status = loop {
        if let Ok(Some(status)) = up.try_wait() {
            break status;
        }
        if stopping.elapsed() > STOP_TIMEOUT {
            let _ = up.kill();
            return Err(format!(
                "`cargo xtask up` did not stop within {}s:\n{}",
                STOP_TIMEOUT.as_secs(),
                tail()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "`cargo xtask up` exited with {status} after SIGTERM:\n{}",
            tail()
        ))
    }
}

/// The documented ports something still answers on.
fn still_listening(ports: &Ports) -> Vec<u16> {
    [
        ports.room_grpc,
        ports.room_http,
        ports.relay_http,
        ports.broker,
        ports.fake_im,
    ]
    .into_iter()
    .filter(|port| {
        let addr: SocketAddr = ([127, 0, 0, 1], *port).into();
        TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok()
    })
    .collect()
}
