//! Ctrl-C handling without a signal handler (xtask is std-only and forbids
//! `unsafe`, so it cannot install one).
//!
//! `up` and `demo` re-execute themselves under a tiny `sh` supervisor:
//!
//! - the supervisor traps INT/TERM/HUP and only *touches a stop file*;
//! - xtask runs as the supervisor's background job, which POSIX shells start
//!   with SIGINT ignored, so Ctrl-C does not kill it mid-shutdown;
//! - xtask polls the stop file ([`StopFlag::requested`]) and stops the stack
//!   in order; the supervisor exits with xtask's status.
//!
//! Services are started in their own process groups, so the terminal's
//! Ctrl-C reaches none of them directly: xtask decides the stop order.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

/// Environment variable naming the stop file; set once supervised.
const STOP_FILE_ENV: &str = "XTASK_STOP_FILE";

/// The supervisor script: `$0` is xtask, `$@` its arguments.
const SUPERVISOR: &str = r#"
stop="$XTASK_STOP_FILE"
rm -f "$stop"
trap 'touch "$stop"' INT TERM HUP
( trap '' HUP; exec "$0" "$@" ) &
child=$!
while :; do
  wait "$child"; status=$?
  kill -0 "$child" 2>/dev/null || { rm -f "$stop"; exit "$status"; }
done
"#;

/// Whether a stop (Ctrl-C, SIGTERM, SIGHUP) was requested.
#[derive(Debug, Clone)]
pub struct StopFlag {
    path: Option<PathBuf>,
}

impl StopFlag {
    /// A flag that is never raised (unsupervised runs, where Ctrl-C simply
    /// kills the process group).
    pub fn never() -> Self {
        StopFlag { path: None }
    }

    /// True once the supervisor saw a stop signal.
    pub fn requested(&self) -> bool {
        self.path.as_ref().is_some_and(|path| path.exists())
    }
}

/// Returns the stop flag when already supervised; otherwise replaces this
/// process with the supervisor (which runs xtask again) and never returns,
/// unless `sh` cannot be executed, in which case Ctrl-C simply kills xtask
/// (services then stop on their own SIGINT, unordered).
pub fn supervise(args: &[String]) -> StopFlag {
    if let Ok(path) = std::env::var(STOP_FILE_ENV) {
        return StopFlag {
            path: Some(PathBuf::from(path)),
        };
    }
    let Ok(exe) = std::env::current_exe() else {
        return StopFlag { path: None };
    };
    let stop_file = std::env::temp_dir().join(format!("xtask-stop-{}", std::process::id()));
    let error = Command::new("sh")
        .arg("-c")
        .arg(SUPERVISOR)
        .arg(exe)
        .args(args)
        .env(STOP_FILE_ENV, &stop_file)
        .exec();
    eprintln!(
        "xtask: cannot run the sh supervisor ({error}); Ctrl-C will not stop the stack in order"
    );
    StopFlag { path: None }
}

/// Waits for `child`, killing it (SIGTERM, then SIGKILL) when a stop is
/// requested. Returns `Ok(None)` when interrupted.
pub fn wait_child(
    child: &mut Child,
    stop: &StopFlag,
) -> Result<Option<std::process::ExitStatus>, String> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(Some(status)),
            Ok(None) => {}
            Err(error) => return Err(format!("waiting for a child process: {error}")),
        }
        if stop.requested() {
            terminate(child, Duration::from_secs(5));
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// SIGTERM (through the `kill` command: std has no signal API), then SIGKILL
/// after `grace`. Returns true when the process stopped within the grace.
pub fn terminate(child: &mut Child, grace: Duration) -> bool {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return true;
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = std::time::Instant::now() + grace;
    while std::time::Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// Runs `command` to completion unless a stop is requested; fails on a
/// non-zero exit with the command's description.
pub fn run_interruptible(command: &mut Command, stop: &StopFlag) -> Result<(), String> {
    let description = format!("{command:?}");
    let mut child = command
        .spawn()
        .map_err(|error| format!("cannot run {description}: {error}"))?;
    match wait_child(&mut child, stop)? {
        Some(status) if status.success() => Ok(()),
        Some(status) => Err(format!("{description} failed ({status})")),
        None => Err("interrupted".into()),
    }
}
