//! The `console` scenario's drains: the relay's delivery rate with the live
//! pages reloaded back to back against without, within the same drains. A
//! client on a thread of its own, at the process's CPU priority, reloads
//! the pages during every other second of each drain; each row's
//! `delivered_at_ms` puts it in a watched or a quiet second, and the
//! two rates are compared. Whole drains, one quiet and one watched, differ
//! by the table's state and whatever else the machine does (quiet drains alone
//! measured 24,955 to 35,478 events/s in one run); alternating within a
//! drain compares each watched second with its neighbours. The row
//! also says how much CPU the console's threads (`relay-admin…`) took
//! while watched.

use crate::console_http::get;
use crate::fixtures::BenchEnv;
use crate::processes::cpu_time_of;
use crate::relay_scenarios::{create_topic, mq_config, worker};
use crate::report::{Report, Row};
use outbox_schema::names;
use relay_engine::config::DirectConfig;
use service_kit::duration::ConfigDuration;
use service_kit::low_priority::{self, Nice};
use service_kit::time::now_ms;
use sqlx::MySqlPool;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A drain watched back to back keeps at least this share of its quiet rate.
const WATCHED_MIN_RATIO: f64 = 0.95;

/// Drains, each alternating watched and quiet stretches.
const DRAINS: usize = 8;

/// How long each watched or quiet stretch lasts: the relay marks rows
/// delivered a claimed batch at a time (up to 2,000 rows, ~15 a second
/// here), so a stretch holds whole batches and a shorter one would count
/// batches more than rates.
const STRETCH: Duration = Duration::from_secs(1);

/// The pages the watcher reloads, each in turn, with no pause.
const WATCHED_PAGES: [&str; 4] = [
    "/console",
    "/console/stuck",
    "/console/dead-letters",
    "/console/rooms?room_id=bench-room-7",
];

/// The watcher's thread name (the kernel keeps 15 bytes of it).
const WATCHER_THREAD: &str = "bench-watcher";
/// The console's threads: its runtime's and its blocking pool's.
const CONSOLE_THREADS: &str = "relay-admin";

/// Puts the backlog (ids from the first backlog row on) back to pending.
const RESET_BACKLOG_SQL: &str = "UPDATE room_outbox SET status = 'pending', delivered_at_ms = 0, \
     lock_until_ms = 0, claimed_by = '' WHERE id >= ?";

/// The oldest open backlog row (the history's retrying heads are older).
const OLDEST_BACKLOG_SQL: &str = "SELECT MIN(id) FROM room_outbox FORCE INDEX (idx_claim) \
     WHERE lane = 0 AND open_flag = 1 AND id >= ?";

/// When each backlog row was delivered.
const DELIVERED_AT_SQL: &str = "SELECT delivered_at_ms FROM room_outbox WHERE id >= ?";

/// One stretch of a drain: `[from_ms, to_ms)`, watched or not.
#[derive(Debug, Clone, Copy)]
struct Stretch {
    from_ms: i64,
    to_ms: i64,
    watched: bool,
}

/// Rows delivered and seconds spent, watched and quiet.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    watched: (u64, f64),
    quiet: (u64, f64),
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.watched.0 += other.watched.0;
        self.watched.1 += other.watched.1;
        self.quiet.0 += other.quiet.0;
        self.quiet.1 += other.quiet.1;
    }

    fn rates(&self) -> (f64, f64) {
        (
            self.watched.0 as f64 / self.watched.1,
            self.quiet.0 as f64 / self.quiet.1,
        )
    }
}

/// One drain's figures.
#[derive(Debug, Clone, Copy)]
struct Drained {
    tally: Tally,
    loads: u64,
    /// The share of one core the console's threads took while watched, as
    /// the kernel's tick accounting saw it (the client's own work is too
    /// bursty for it, read 0 in some drains, and is another machine's in
    /// production).
    console_cpu: f64,
}

/// The drains and their row: `backlog` rows from id `first_backlog` on.
pub async fn drains(
    env: &BenchEnv,
    pool: &MySqlPool,
    base: &str,
    (first_backlog, backlog): (u64, usize),
    report: &mut Report,
) -> anyhow::Result<()> {
    // A priming drain first: the first drain over rows no drain has touched
    // runs in another table state than every drain after a reset.
    let rows = (first_backlog, backlog);
    let priming = drain(env, pool, rows).await?;
    let mut drained = Vec::new();
    for run in 0..DRAINS {
        sqlx::query(RESET_BACKLOG_SQL)
            .bind(first_backlog)
            .execute(pool)
            .await?;
        // Half the drains start watched, half quiet.
        drained.push(drain_alternating(env, pool, base, rows, run % 2 == 0).await?);
    }
    report.add(Row {
        scenario: "console drain, priming (fresh rows; not compared)".into(),
        metric: "events/s".into(),
        measured: priming,
        target: None,
        baseline: None,
        ratio: None,
        pass: None,
        note: String::new(),
    });
    // Every drain compared, and watched: some page answered meanwhile.
    let compared = drained
        .iter()
        .all(|run| run.tally.watched.1 > 0.0 && run.tally.quiet.1 > 0.0 && run.loads > 0);
    if !compared {
        // A smoke run's backlog drains in less than a second.
        anyhow::ensure!(
            env.smoke,
            "a drain was too short to alternate, or no page was answered while watched"
        );
        println!("console drain: too short to alternate (smoke run); not compared");
        return Ok(());
    }
    report.add(watched_row(&drained));
    Ok(())
}

/// The target row: the watched seconds' rate against the quiet ones', and
/// how much the drains' own ratios scatter (mean ± standard error).
fn watched_row(drained: &[Drained]) -> Row {
    let mut total = Tally::default();
    for run in drained {
        total.add(run.tally);
    }
    let (watched, quiet) = total.rates();
    let ratios: Vec<f64> = drained
        .iter()
        .map(|run| {
            let (watched, quiet) = run.tally.rates();
            watched / quiet
        })
        .collect();
    let ratio_mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    let variance = ratios
        .iter()
        .map(|ratio| (ratio - ratio_mean).powi(2))
        .sum::<f64>()
        / (ratios.len() as f64 - 1.0).max(1.0);
    let spread = format!(
        "{ratio_mean:.2} ± {:.2}",
        (variance / ratios.len() as f64).sqrt()
    );
    let each = drained
        .iter()
        .map(|run| {
            let (watched, quiet) = run.tally.rates();
            format!(
                "{:.2}x ({} loads; console {:.1} % of a core)",
                watched / quiet,
                run.loads,
                run.console_cpu * 100.0
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    // Issue #33: watching must not slow the relay down by more than 5 %.
    Row {
        scenario: "console drain, pages reloaded back to back (every other second)".into(),
        metric: "events/s".into(),
        measured: watched,
        target: Some(format!(">= {WATCHED_MIN_RATIO}x nobody looking")),
        baseline: Some(quiet),
        ratio: Some(watched / quiet),
        pass: Some(watched / quiet >= WATCHED_MIN_RATIO),
        note: format!(
            "baseline: the same drains' quiet seconds; per-drain ratios {spread}: {each}; a page's \
             reloads by one session are paced to 30/s by the console"
        ),
    }
}

/// A drain during which a client on a thread of its own (not the relay's
/// runtime), at the process's CPU priority, reloads [`WATCHED_PAGES`] back
/// to back every other [`STRETCH`], starting with `watched_first`.
async fn drain_alternating(
    env: &BenchEnv,
    pool: &MySqlPool,
    base: &str,
    rows: (u64, usize),
    watched_first: bool,
) -> anyhow::Result<Drained> {
    let stop = CancellationToken::new();
    let _stop_on_error = stop.clone().drop_guard();
    let (switch, watching) = watch::channel(false);
    let (count, counted) = tokio::sync::oneshot::channel();
    let finished = low_priority::spawn(
        WATCHER_THREAD,
        Nice::new("watcher", 0)?,
        watcher(base.to_owned(), watching, stop.clone(), count),
    )?;
    let before = thread_cpu_times(CONSOLE_THREADS)?;
    let toggling = tokio::spawn(toggle(switch, watched_first, stop.clone()));
    drain(env, pool, rows).await?;
    stop.cancel();
    let stretches = toggling.await?;
    let after = thread_cpu_times(CONSOLE_THREADS)?;
    finished.wait().await;
    let loads = counted.await?;
    let tally = tally(pool, rows.0, &stretches).await?;
    let watched_seconds = tally.watched.1;
    Ok(Drained {
        tally,
        loads,
        console_cpu: cpu_since(&before, &after).as_secs_f64() / watched_seconds,
    })
}

/// The watcher's work: reload the pages while the switch is on, until `stop`.
fn watcher(
    base: String,
    mut watching: watch::Receiver<bool>,
    stop: CancellationToken,
    count: tokio::sync::oneshot::Sender<u64>,
) -> impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> + Send {
    move || {
        Box::pin(async move {
            let mut loads = 0_u64;
            while !stop.is_cancelled() {
                if !*watching.borrow_and_update() {
                    tokio::select! {
                        () = stop.cancelled() => break,
                        _ = watching.changed() => continue,
                    }
                }
                // The switch is read before each load, so a watched
                // stretch spills at most one load into the quiet one after.
                for page in WATCHED_PAGES {
                    if !*watching.borrow() {
                        break;
                    }
                    if matches!(get(&base, page).await, Ok(200)) {
                        loads += 1;
                    }
                }
            }
            let _ = count.send(loads);
        })
    }
}

/// Flips the watcher on and off every [`STRETCH`] until `stop`; the stretches.
async fn toggle(switch: watch::Sender<bool>, first: bool, stop: CancellationToken) -> Vec<Stretch> {
    let mut stretches = Vec::new();
    let mut watched = first;
    loop {
        let from_ms = now_ms();
        switch.send_replace(watched);
        let stopped = tokio::select! {
            () = stop.cancelled() => true,
            () = tokio::time::sleep(STRETCH) => false,
        };
        stretches.push(Stretch {
            from_ms,
            to_ms: now_ms(),
            watched,
        });
        if stopped {
            switch.send_replace(false);
            return stretches;
        }
        watched = !watched;
    }
}

/// The rows delivered in each stretch, summed by kind. The first stretch
/// (the relay taking its leases) and the last (cut short by the drain's
/// end) are left out.
async fn tally(
    pool: &MySqlPool,
    first_backlog: u64,
    stretches: &[Stretch],
) -> anyhow::Result<Tally> {
    let mut delivered: Vec<i64> = sqlx::query_scalar(DELIVERED_AT_SQL)
        .bind(first_backlog)
        .fetch_all(pool)
        .await?;
    delivered.sort_unstable();
    let inner = stretches
        .get(1..stretches.len().saturating_sub(1))
        .unwrap_or_default();
    let mut tally = Tally::default();
    for stretch in inner {
        let rows = delivered.partition_point(|&at| at < stretch.to_ms)
            - delivered.partition_point(|&at| at < stretch.from_ms);
        let seconds = (stretch.to_ms - stretch.from_ms) as f64 / 1_000.0;
        let kind = if stretch.watched {
            &mut tally.watched
        } else {
            &mut tally.quiet
        };
        kind.0 += rows as u64;
        kind.1 += seconds;
    }
    Ok(tally)
}

/// The CPU time (user + system) each of this process's threads whose name
/// starts with `prefix` used so far, by thread id.
fn thread_cpu_times(prefix: &str) -> anyhow::Result<HashMap<u64, Duration>> {
    let mut times = HashMap::new();
    for task in std::fs::read_dir("/proc/self/task")? {
        let path = task?.path();
        let Ok(comm) = std::fs::read_to_string(path.join("comm")) else {
            continue; // the thread ended meanwhile
        };
        if !comm.starts_with(prefix) {
            continue;
        }
        let tid: u64 = path
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(|name| name.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("unexpected {}", path.display()))?;
        // The thread may end between the two reads.
        if let Ok(time) = cpu_time_of(&path.join("stat").to_string_lossy()) {
            times.insert(tid, time);
        }
    }
    Ok(times)
}

/// The CPU time the threads of `after` used since `before` (a thread new
/// since then counts from zero; one gone since is not counted).
fn cpu_since(before: &HashMap<u64, Duration>, after: &HashMap<u64, Duration>) -> Duration {
    after
        .iter()
        .map(|(tid, time)| time.saturating_sub(before.get(tid).copied().unwrap_or_default()))
        .sum()
}

/// Drains the backlog with one relay; events/s.
async fn drain(
    env: &BenchEnv,
    pool: &MySqlPool,
    (first_backlog, backlog): (u64, usize),
) -> anyhow::Result<f64> {
    let namespace = format!("bench{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mq = mq_config(env, &namespace);
    create_topic(&env.bootstrap, &mq.topic(names::TOPIC_ROOM_OUTBOX)).await?;
    let mut registry = prometheus_client::registry::Registry::default();
    let relay = relay_engine::build_relay(
        pool.clone(),
        &worker(
            "bench-console",
            false,
            ConfigDuration::from_millis(20),
            &env.redis,
        ),
        &mq,
        &DirectConfig::default(),
        &mut registry,
    )?;
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let running = tokio::spawn(relay.run(shutdown.clone()));
    loop {
        let oldest: Option<u64> = sqlx::query_scalar(OLDEST_BACKLOG_SQL)
            .bind(first_backlog)
            .fetch_one(pool)
            .await?;
        if oldest.is_none() {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(900),
            "drain did not finish"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    shutdown.cancel();
    running.await??;
    Ok(backlog as f64 / elapsed)
}
