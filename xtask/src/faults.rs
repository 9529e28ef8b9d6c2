//! How each fault of the [`crate::schedule`] is applied to the real
//! processes of `cargo xtask chaos`, and `faults.tsv`, where every applied
//! fault is recorded for the checker: its kind and target, and when it
//! began and when the system was whole again (Unix ms, the clock the
//! workload's ledger uses), so the checker can measure how long a killed
//! room-service instance's rooms stayed unavailable and which other faults
//! overlapped that time.
//!
//! Scale-out: faults run one after the other, and one that would take down
//! the last running instance of a scaled-out service is skipped, so consumer
//! twins are never both down and room-service always has an instance to
//! answer.

use crate::backends::{Backends, admin_call, fake_im_failures, fake_wallet_failure};
use crate::interrupt::StopFlag;
use crate::network::Network;
use crate::proxy;
use crate::schedule::{BROKER_OUTAGE, Fault, NetFault};
use crate::services::Ports;
use crate::stack::Stack;
use crate::topology::{self, Topology};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long the replica is held back before the primary is killed in a
/// `mysql-failover` (`replication::hold_back`); kept in step with the
/// schedule's description of the fault.
const REPLICA_LAG: Duration = Duration::from_secs(2);

/// Milliseconds since the Unix epoch.
fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis())
}

/// `faults.tsv`: `ms since start \t kind \t target \t started unix ms \t
/// ended unix ms \t detail`, one line per fault once it is over.
pub struct FaultLog {
    file: std::fs::File,
    started: Instant,
}

impl FaultLog {
    /// Creates the file.
    pub fn create(path: &Path) -> Result<Self, String> {
        let file = std::fs::File::create(path)
            .map_err(|error| format!("create {}: {error}", path.display()))?;
        Ok(Self {
            file,
            started: Instant::now(),
        })
    }

    /// Records a fault applied at `began` (Unix ms) that is over now.
    fn record(&mut self, kind: &str, target: &str, detail: &str, began: u128) {
        let now = unix_ms();
        let at = self
            .started
            .elapsed()
            .as_millis()
            .saturating_sub(now.saturating_sub(began));
        let _ = writeln!(
            self.file,
            "{at}\t{kind}\t{target}\t{began}\t{now}\t{detail}"
        );
    }
}

/// What faults act on.
pub struct World<'a> {
    /// The services.
    pub stack: &'a mut Stack,
    /// MariaDB and Redis.
    pub backends: &'a mut Backends,
    /// Every port.
    pub ports: &'a Ports,
    /// The instances of each scaled-out service.
    pub topology: &'a Topology,
    /// The proxies between the services and what they call.
    pub network: &'a Network,
    /// Ctrl-C.
    pub stop: &'a StopFlag,
    /// Where applied faults are recorded.
    pub log: FaultLog,
    /// Things that went wrong in the harness or a recovery (each fails the run).
    pub problems: Vec<String>,
}

/// Sleeps `duration` unless Ctrl-C comes first; false when interrupted.
pub fn pause(duration: Duration, stop: &StopFlag) -> bool {
    let until = Instant::now() + duration;
    while Instant::now() < until {
        if stop.requested() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100).min(until - Instant::now()));
    }
    true
}

/// Applies one fault and waits for the system to be whole again. A process
/// fault that would leave its service with no running instance is skipped.
pub fn apply(world: &mut World<'_>, fault: &Fault) {
    if let Fault::Kill { target, .. } | Fault::Restart { target, .. } = fault {
        let siblings = world.topology.siblings(target);
        let stack = &mut *world.stack;
        if leaves_service_down(siblings, target, |name| stack.is_running(name)) {
            crate::detail(&format!(
                "skipped: no other {} instance is running",
                topology::role_of(target)
            ));
            return;
        }
    }
    if *fault == Fault::MysqlFailover && !world.backends.has_replica() {
        crate::detail("skipped: no replica left (the run goes on with the promoted server)");
        return;
    }
    let began = unix_ms();
    let outcome = act(world, fault);
    world
        .log
        .record(fault.kind(), fault.target(), &fault.describe(), began);
    if let Err(error) = outcome {
        world
            .problems
            .push(format!("{}: {error}", fault.describe()));
    }
}

/// Applies `fault` and returns once the system is whole again.
fn act(world: &mut World<'_>, fault: &Fault) -> Result<(), String> {
    match fault {
        // Started again even when the stop failed: a fault never leaves an
        // instance down.
        Fault::Kill { target, down } => {
            let stopped = world.stack.kill(target);
            pause(*down, world.stop);
            let back = world.stack.restart(target, world.stop);
            stopped.and(back.map(drop))
        }
        Fault::Restart { target, down } => {
            let stopped = world.stack.stop_gracefully(target).map(|drained| {
                crate::detail(&format!(
                    "{target} drained and exited in {:.1}s",
                    drained.as_secs_f64()
                ));
            });
            pause(*down, world.stop);
            let back = world.stack.restart(target, world.stop);
            stopped.and(back.map(drop))
        }
        Fault::BrokerOutage => world.stack.signal_broker("STOP").and_then(|()| {
            pause(BROKER_OUTAGE, world.stop);
            world.stack.signal_broker("CONT")
        }),
        Fault::RedisRestart => world.backends.restart_redis(),
        Fault::MysqlRestart { down } => {
            world.backends.kill_mysql();
            pause(*down, world.stop);
            world.backends.restart_mysql()
        }
        Fault::Net {
            target,
            kind,
            hold,
            latency,
        } => {
            let fault = match kind {
                NetFault::Latency => proxy::Fault::Latency(*latency),
                NetFault::Stall => proxy::Fault::Stall,
                NetFault::Reset => proxy::Fault::Reset,
                NetFault::HalfOpen => proxy::Fault::HalfOpen,
            };
            let proxies = world.network.proxies(*target);
            for proxy in &proxies {
                proxy.set_fault(fault);
            }
            pause(*hold, world.stop);
            for proxy in &proxies {
                proxy.set_fault(proxy::Fault::None);
            }
            Ok(())
        }
        Fault::MysqlFailover => {
            // The replica falls behind first, so the kill finds commits the
            // replica does not have: held unanswered (semi-sync) or already
            // acknowledged (async, counted lost by the checker).
            world.backends.hold_replica_back()?;
            pause(REPLICA_LAG, world.stop);
            world
                .backends
                .fail_over_mysql(world.network.mysql())
                .map(|detail| crate::detail(&detail))
        }
        Fault::RedisFailover => world
            .backends
            .fail_over_redis()
            .map(|detail| crate::detail(&detail)),
        Fault::Im { variant } => admin_call(
            world.ports.fake_im,
            "POST",
            "/admin/faults",
            fake_im_failures(*variant).1,
        ),
        Fault::Wallet { variant } => {
            let (_, path, body) = fake_wallet_failure(*variant);
            let result = admin_call(world.ports.wallet_admin, "POST", path, body);
            if path == "/admin/latency" {
                pause(Duration::from_secs(4), world.stop);
                admin_call(world.ports.wallet_admin, "POST", path, r#"{"millis":0}"#).and(result)
            } else {
                result
            }
        }
    }
}

/// True when taking `target` down would leave its scaled-out service
/// (`siblings`, itself included) with no instance for which `running` holds.
/// A service that runs a single instance may go down: that outage is the point.
fn leaves_service_down(
    siblings: &[&str],
    target: &str,
    mut running: impl FnMut(&str) -> bool,
) -> bool {
    siblings.len() > 1
        && !siblings
            .iter()
            .filter(|sibling| **sibling != target)
            .any(|sibling| running(sibling))
}

/// Restarts any service that died on its own, recording it: a crash nobody
/// injected is a finding, so it also fails the run.
pub fn restart_crashed(world: &mut World<'_>) {
    while let Some((name, status, log)) = world.stack.exited() {
        let detail = format!("{status}; see {}", log.display());
        world
            .log
            .record("unexpected-exit", name, &detail, unix_ms());
        world
            .problems
            .push(format!("{name} exited on its own ({detail})"));
        let _ = world.stack.kill(name);
        if let Err(error) = world.stack.restart(name, world.stop) {
            world.problems.push(error);
        }
    }
}

/// Ends every fault: pending fake failures cleared, wallet latency off, any
/// dead process restarted.
pub fn heal(world: &mut World<'_>) {
    crate::detail("clearing fake failures and network faults; every process running");
    world.network.heal();
    for (port, path) in [
        (world.ports.fake_im, "/admin/faults"),
        (world.ports.wallet_admin, "/admin/faults"),
    ] {
        if let Err(error) = admin_call(port, "DELETE", path, "") {
            world.problems.push(error);
        }
    }
    if let Err(error) = admin_call(
        world.ports.wallet_admin,
        "POST",
        "/admin/latency",
        r#"{"millis":0}"#,
    ) {
        world.problems.push(error);
    }
    restart_crashed(world);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_running_instance_of_a_service_is_never_taken_down() {
        let twins = ["im-bridge", "im-bridge-2"];
        assert!(!leaves_service_down(&twins, "im-bridge", |_| true));
        // Its twin is down (still restarting, or failed to come back).
        assert!(leaves_service_down(&twins, "im-bridge", |name| name == "im-bridge"));
        let rooms = ["room-service", "room-service-2", "room-service-3"];
        assert!(!leaves_service_down(&rooms, "room-service-3", |name| name == "room-service"));
        assert!(leaves_service_down(&rooms, "room-service-3", |name| name == "room-service-3"));
        // One instance only: its outage is the fault.
        assert!(!leaves_service_down(
            &["room-service"],
            "room-service",
            |_| false
        ));
        assert!(!leaves_service_down(&[], "fake-wallet", |_| false));
    }
}
