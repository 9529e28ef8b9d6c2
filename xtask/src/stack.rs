//! The local stack shared by `cargo xtask up`, `demo` and `chaos`: broker
//! and topics, the binaries `crate::binaries` built, the services started in phases and each awaited
//! on its probe, and an ordered stop (room-service first so it drains, then
//! the relay, the consumers, the fakes, the broker).

use crate::binaries::{Built, target_dir};
use crate::infra::{self, Broker, BrokerStorage};
use crate::interrupt::{self, StopFlag};
use crate::logs::log_tail;
use crate::probe::http_status;
use crate::services::{self, Overrides, Phase, Ports, Spec};
use crate::topology;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Stop order by service (see [`topology::role_of`]): the writer drains
/// first, then whatever reads after it: the relay, the consumers (the one
/// list of `crate::groups`), the fakes.
pub fn stop_order() -> Vec<&'static str> {
    ["room-service", "outbox-relay"]
        .into_iter()
        .chain(crate::groups::CONSUMERS.iter().map(|group| group.service))
        .chain(["fake-tencent-im", "fake-wallet"])
        .collect()
}

/// How long a service may take to answer its probe.
const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a service may drain after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(25);

/// What to start.
#[derive(Debug)]
pub struct Plan {
    /// All ports.
    pub ports: Ports,
    /// MySQL database every service uses.
    pub database: String,
    /// Where `<service>.log` files go.
    pub log_dir: PathBuf,
    /// Extra per-service environment.
    pub overrides: Vec<(&'static str, String, String)>,
    /// The broker port clients are told to use, when not its own (a proxy
    /// in front of it: the reliability run's network faults).
    pub advertised_broker: Option<u16>,
}

/// A started service.
#[derive(Debug)]
pub struct Running {
    /// Service name.
    pub name: &'static str,
    /// Its log file.
    pub log: PathBuf,
    child: Child,
}

/// The running stack; dropping it stops everything in order.
#[derive(Debug)]
pub struct Stack {
    broker: Option<Broker>,
    /// What was started, kept to restart a service the same way.
    specs: Vec<Spec>,
    log_dir: PathBuf,
    /// Services that answered their probe.
    pub running: Vec<Running>,
    /// Optional services that did not start: `(name, reason with log tail)`.
    pub unavailable: Vec<(&'static str, String)>,
}

/// Starts the broker (in memory), creates the topics and starts every service.
pub fn start(plan: &Plan, built: &Built, tansu: &Path, stop: &StopFlag) -> Result<Stack, String> {
    let specs = services::specs(&plan.ports, &plan.database, &plan.overrides as &Overrides);
    start_specs(plan, specs, built, tansu, stop)
}

/// Starts the broker (in memory), creates the topics and starts `specs` in phases.
pub fn start_specs(
    plan: &Plan,
    specs: Vec<Spec>,
    built: &Built,
    tansu: &Path,
    stop: &StopFlag,
) -> Result<Stack, String> {
    std::fs::create_dir_all(&plan.log_dir)
        .map_err(|error| format!("create {}: {error}", plan.log_dir.display()))?;
    crate::step(&format!(
        "starting Tansu on 127.0.0.1:{} (memory storage)",
        plan.ports.broker
    ));
    let broker = infra::start_broker_advertised(
        tansu,
        plan.ports.broker,
        plan.advertised_broker.unwrap_or(plan.ports.broker),
        &BrokerStorage::Memory,
        &plan.log_dir,
    )?;
    let mut stack = Stack {
        broker: Some(broker),
        specs: specs.clone(),
        log_dir: plan.log_dir.clone(),
        running: Vec::new(),
        unavailable: Vec::new(),
    };
    create_topics(tansu, plan.ports.broker)?;
    for phase in [Phase::Fakes, Phase::Writer, Phase::Downstream] {
        let batch: Vec<&Spec> = specs.iter().filter(|spec| spec.phase == phase).collect();
        let mut launched = Vec::new();
        for spec in batch {
            if !built.contains(spec.binary) {
                let reason = "its package did not compile (see the cargo output above)".to_string();
                if spec.required {
                    return Err(format!("{}: {reason}", spec.name));
                }
                crate::detail(&format!("{:<18} NOT AVAILABLE: {reason}", spec.name));
                stack.unavailable.push((spec.name, reason));
                continue;
            }
            launched.push((spec, launch(spec, &plan.log_dir)?));
        }
        for (spec, mut running) in launched {
            match wait_ready(spec, &mut running, stop) {
                Ok(elapsed) => {
                    crate::detail(&format!(
                        "{:<18} ready in {:.1}s",
                        spec.name,
                        elapsed.as_secs_f64()
                    ));
                    stack.running.push(running);
                }
                Err(reason) if !spec.required => {
                    crate::detail(&format!("{:<18} NOT AVAILABLE: {reason}", spec.name));
                    interrupt::terminate(&mut running.child, Duration::from_secs(5));
                    stack.unavailable.push((spec.name, reason));
                }
                Err(reason) => {
                    interrupt::terminate(&mut running.child, Duration::from_secs(5));
                    return Err(format!("{} did not become ready: {reason}", spec.name));
                }
            }
        }
    }
    Ok(stack)
}

fn create_topics(tansu: &Path, port: u16) -> Result<(), String> {
    crate::step("creating topics");
    for (topic, partitions) in services::topics() {
        let output = Command::new(tansu)
            .args(["topic", "create", topic])
            .args(["--partitions", &partitions.to_string()])
            .args(["--broker", &format!("tcp://127.0.0.1:{port}")])
            .output()
            .map_err(|error| format!("cannot run tansu topic create: {error}"))?;
        if !output.status.success() {
            return Err(format!(
                "tansu topic create {topic} failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        crate::detail(&format!("{topic} ({partitions} partitions)"));
    }
    Ok(())
}

fn launch(spec: &Spec, log_dir: &Path) -> Result<Running, String> {
    let root = infra::workspace_root();
    let binary = target_dir().join("debug").join(spec.binary);
    let log = log_dir.join(format!("{}.log", spec.name));
    // Appended: a restarted service keeps the log of the instance before it.
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|error| format!("open {}: {error}", log.display()))?;
    let file_err = file.try_clone().map_err(|error| error.to_string())?;
    let mut command = Command::new(&binary);
    if let Some(config) = spec
        .config
        .map(|config| root.join(config))
        .filter(|path| path.exists())
    {
        command.arg("--config").arg(config);
    }
    command
        .args(&spec.args)
        .envs(spec.env.iter().map(|(key, value)| (key, value)))
        .current_dir(&root)
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(file_err)
        // Own process group: the terminal's Ctrl-C reaches xtask only, which stops services in order.
        .process_group(0);
    let child = command
        .spawn()
        .map_err(|error| format!("cannot start {}: {error}", binary.display()))?;
    Ok(Running {
        name: spec.name,
        log,
        child,
    })
}

fn wait_ready(spec: &Spec, running: &mut Running, stop: &StopFlag) -> Result<Duration, String> {
    let started = Instant::now();
    let (port, path) = spec.probe.target();
    loop {
        if http_status(port, path) == Some(200) {
            return Ok(started.elapsed());
        }
        if let Ok(Some(status)) = running.child.try_wait() {
            return Err(format!(
                "exited during start-up ({status}); last lines of {}:\n{}",
                running.log.display(),
                log_tail(&running.log, 15)
            ));
        }
        if stop.requested() {
            return Err("interrupted".into());
        }
        if started.elapsed() > READY_TIMEOUT {
            return Err(format!(
                "no 200 from http://127.0.0.1:{port}{path} within {}s; last lines of {}:\n{}",
                READY_TIMEOUT.as_secs(),
                running.log.display(),
                log_tail(&running.log, 15)
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

impl Stack {
    /// SIGKILLs service `name` (no drain, as a crash would) and reaps it.
    pub fn kill(&mut self, name: &str) -> Result<(), String> {
        let mut service = self.take_running(name)?;
        let _ = service.child.kill();
        let _ = service.child.wait();
        Ok(())
    }

    /// Stops service `name` as an orchestrator would (SIGTERM, then wait for
    /// it to drain and exit). It is no longer running afterwards either way;
    /// `Err` when it needed SIGKILL after [`STOP_GRACE`] or exited unclean.
    pub fn stop_gracefully(&mut self, name: &str) -> Result<Duration, String> {
        let mut service = self.take_running(name)?;
        let started = Instant::now();
        if !interrupt::terminate(&mut service.child, STOP_GRACE) {
            return Err(format!(
                "{name} did not exit within {}s of SIGTERM; see {}",
                STOP_GRACE.as_secs(),
                service.log.display()
            ));
        }
        match service.child.wait() {
            Ok(status) if status.success() => Ok(started.elapsed()),
            Ok(status) => Err(format!(
                "{name} exited with {status} after SIGTERM; see {}",
                service.log.display()
            )),
            Err(error) => Err(format!("waiting for {name}: {error}")),
        }
    }

    /// Takes service `name` out of the running set, to be stopped.
    fn take_running(&mut self, name: &str) -> Result<Running, String> {
        let index = self
            .running
            .iter()
            .position(|service| service.name == name)
            .ok_or_else(|| format!("{name} is not running"))?;
        Ok(self.running.remove(index))
    }

    /// True while service `name` runs (started and not exited).
    pub fn is_running(&mut self, name: &str) -> bool {
        self.running
            .iter_mut()
            .any(|service| service.name == name && matches!(service.child.try_wait(), Ok(None)))
    }

    /// Starts service `name` again exactly as at start-up and waits for its probe.
    pub fn restart(&mut self, name: &str, stop: &StopFlag) -> Result<Duration, String> {
        let spec = self
            .specs
            .iter()
            .find(|spec| spec.name == name)
            .cloned()
            .ok_or_else(|| format!("{name} is not part of this stack"))?;
        let mut running = launch(&spec, &self.log_dir)?;
        match wait_ready(&spec, &mut running, stop) {
            Ok(elapsed) => {
                self.running.push(running);
                Ok(elapsed)
            }
            Err(reason) => {
                interrupt::terminate(&mut running.child, Duration::from_secs(5));
                Err(format!("{name} did not come back: {reason}"))
            }
        }
    }

    /// Freezes (`STOP`) or thaws (`CONT`) the broker process.
    pub fn signal_broker(&mut self, signal: &str) -> Result<(), String> {
        self.broker
            .as_ref()
            .ok_or("the broker is not running")?
            .process
            .signal(signal)
    }

    /// The first service that exited since start-up, with its status.
    pub fn exited(&mut self) -> Option<(&'static str, ExitStatus, PathBuf)> {
        self.running
            .iter_mut()
            .find_map(|service| match service.child.try_wait() {
                Ok(Some(status)) => Some((service.name, status, service.log.clone())),
                _ => None,
            })
    }

    /// True when the broker process died.
    pub fn broker_exited(&mut self) -> bool {
        self.broker
            .as_mut()
            .is_some_and(|broker| !broker.process.is_running())
    }

    /// Stops the services in [`stop_order`] (SIGTERM, wait, SIGKILL after the
    /// grace), then the broker.
    pub fn stop(&mut self) {
        if self.running.is_empty() && self.broker.is_none() {
            return;
        }
        crate::step("stopping the stack (room-service first, broker last)");
        for role in stop_order() {
            while let Some(index) = self
                .running
                .iter()
                .position(|service| topology::role_of(service.name) == role)
            {
                let mut service = self.running.remove(index);
                if let Ok(Some(status)) = service.child.try_wait() {
                    crate::detail(&format!(
                        "{:<18} had already exited ({status})",
                        service.name
                    ));
                    continue;
                }
                let started = Instant::now();
                let graceful = interrupt::terminate(&mut service.child, STOP_GRACE);
                crate::detail(&format!(
                    "{:<18} {} in {:.1}s",
                    service.name,
                    if graceful { "stopped" } else { "killed" },
                    started.elapsed().as_secs_f64()
                ));
            }
        }
        for mut service in self.running.drain(..) {
            interrupt::terminate(&mut service.child, STOP_GRACE);
        }
        if let Some(broker) = self.broker.take() {
            drop(broker);
            crate::detail("broker             stopped");
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.stop();
    }
}
