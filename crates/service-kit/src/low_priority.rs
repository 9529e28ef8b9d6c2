//! Work that must never take CPU from a service's main work, on an OS thread
//! of its own with its own single-threaded runtime at a lower CPU priority
//! (a higher nice value): the relay's admin port, whose console an operator
//! may reload back to back while the relay drains a backlog.
//!
//! Why a thread and not a task: tasks of one runtime share its worker
//! threads, and the kernel schedules threads, not tasks; only a thread of
//! its own can be given a lower priority. On Linux the nice value is a
//! property of the thread (setpriority(2), "NOTES"), so the work's thread is
//! reniced and nothing else; threads it starts (its blocking pool) inherit
//! the value. Raising one's own nice value needs no privilege.
//!
//! The work gets its own runtime, so whatever it connects (sockets, pools)
//! is driven by that runtime's thread: it must not share connections with
//! the main runtime, or the main work would wait on I/O readiness this
//! thread, being the lower priority one, delivers late. The caller builds
//! such resources inside `work` (e.g. [`crate::db::MysqlConfig::lazy_pool`]).

use std::future::Future;
use tokio::sync::oneshot;

/// The highest nice value Linux accepts (the lowest priority).
pub const MAX_NICE: i32 = 19;

/// A nice value for [`spawn`], checked: `0..=19` (0 keeps the process's
/// priority; only raising is possible without privilege).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nice(i32);

impl Nice {
    /// `value` if within `0..=19`; otherwise a message naming `key`.
    pub fn new(key: &str, value: i32) -> Result<Self, crate::Error> {
        if (0..=MAX_NICE).contains(&value) {
            Ok(Self(value))
        } else {
            Err(crate::Error::Config(format!(
                "{key} must be between 0 and {MAX_NICE} (a nice value: higher runs at a lower \
                 CPU priority), got {value}"
            )))
        }
    }

    /// The nice value.
    pub fn value(self) -> i32 {
        self.0
    }
}

/// Resolves when the thread's work has ended (or the thread died).
#[derive(Debug)]
pub struct Finished(oneshot::Receiver<()>);

impl Finished {
    /// Waits for the work to end.
    pub async fn wait(self) {
        // An error means the thread ended without saying so (a panic in the
        // work): ended either way.
        let _ = self.0.await;
    }
}

/// Runs the future `work()` builds on a new thread named `name`, at `nice`
/// above the process's own priority, on a single-threaded runtime of its
/// own; an error when the thread or its runtime cannot be created.
pub fn spawn<F, Fut>(name: &str, nice: Nice, work: F) -> std::io::Result<Finished>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name(format!("{name}-blocking"))
        .build()?;
    let (done, finished) = oneshot::channel();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            lower_this_thread(nice);
            runtime.block_on(work());
            // The runtime's tasks (connections being served) end with it,
            // before the caller hears the work is over.
            drop(runtime);
            let _ = done.send(());
        })?;
    Ok(Finished(finished))
}

/// Adds `nice` to the calling thread's nice value; a warning when the
/// kernel refuses (the work then runs at the process's priority).
fn lower_this_thread(nice: Nice) {
    if nice.value() == 0 {
        return;
    }
    let thread = rustix::thread::gettid();
    let lowered = rustix::process::getpriority_process(Some(thread)).and_then(|current| {
        let target = (current + nice.value()).min(MAX_NICE);
        rustix::process::setpriority_process(Some(thread), target)
    });
    if let Err(error) = lowered {
        tracing::warn!(%error, nice = nice.value(), "could not lower this thread's CPU priority");
    }
}

/// The calling thread's nice value.
pub fn this_thread_nice() -> std::io::Result<i32> {
    Ok(rustix::process::getpriority_process(Some(
        rustix::thread::gettid(),
    ))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_outside_zero_to_nineteen_is_refused_naming_the_key() {
        for bad in [-1, 20, i32::MIN] {
            let error = Nice::new("admin_cpu_nice", bad).unwrap_err().to_string();
            assert!(error.contains("admin_cpu_nice"), "{error}");
        }
        assert_eq!(Nice::new("k", 19).unwrap().value(), 19);
    }

    #[tokio::test]
    async fn work_runs_on_its_own_thread_at_the_lower_priority_and_others_keep_theirs() {
        let own = this_thread_nice().unwrap();
        let (seen, seen_there) = oneshot::channel();
        let finished = spawn(
            "low-priority-test",
            Nice::new("k", 7).unwrap(),
            move || async move {
                let blocking = tokio::task::spawn_blocking(this_thread_nice).await.unwrap();
                let name = std::thread::current().name().map(str::to_owned);
                let _ = seen.send((this_thread_nice().unwrap(), blocking.unwrap(), name));
            },
        )
        .unwrap();
        finished.wait().await;
        let (there, blocking, name) = seen_there.await.unwrap();
        assert_eq!(there, (own + 7).min(MAX_NICE));
        assert_eq!(
            blocking, there,
            "the work's blocking pool inherits its priority"
        );
        assert_eq!(name.as_deref(), Some("low-priority-test"));
        assert_eq!(
            this_thread_nice().unwrap(),
            own,
            "the caller's thread is untouched"
        );
    }
}
