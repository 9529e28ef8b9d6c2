//! The `console` scenario's drains: the relay's drain rate of the 200k
//! backlog with nobody looking versus with the live pages reloaded back to
//! back by a client on a thread of its own at the process's CPU priority.
//! Quiet and watched drains alternate in mirrored pairs (quiet, watched,
//! watched, quiet, …), so a drift of the table's state over the run weighs
//! on both alike. The watched row also says how much CPU the console's
//! threads (`relay-admin…`) and the client's took during each drain: what
//! watching can take from the relay at most, whatever the drains' noise.

use crate::console_http::get;
use crate::fixtures::BenchEnv;
use crate::relay_scenarios::{create_topic, mq_config, worker};
use crate::report::{Report, Row};
use outbox_schema::names;
use relay_engine::config::DirectConfig;
use service_kit::duration::ConfigDuration;
use service_kit::low_priority::{self, Nice};
use sqlx::MySqlPool;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// A drain watched back to back keeps at least this share of its quiet rate.
const WATCHED_MIN_RATIO: f64 = 0.95;

/// Mirrored pairs of quiet and watched drains: a drain takes seconds and
/// quiet drains alone differ by ±9 % (measured: 29,597 to 35,097 events/s
/// in one run), so one of each would measure noise.
const PAIRS: usize = 6;

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

/// A watched drain: its events/s, the pages answered meanwhile, and the
/// share of one core the console's threads and the watcher's took.
#[derive(Debug, Clone, Copy)]
struct Watched {
    rate: f64,
    loads: u64,
    console_cpu: f64,
    watcher_cpu: f64,
}

/// The drains and their rows: `backlog` rows from id `first_backlog` on.
pub async fn drains(
    env: &BenchEnv,
    pool: &MySqlPool,
    base: &str,
    (first_backlog, backlog): (u64, usize),
    report: &mut Report,
) -> anyhow::Result<()> {
    // A priming drain, then every drain from a reset backlog (200k rows just
    // updated), so each compared drain starts in the same table state. The
    // priming drain runs over rows no drain has touched yet and is faster
    // than any drain after a reset (measured 1.12x against 0.88x of their
    // mean), which would make the comparison measure the table.
    let reset = || async move {
        sqlx::query(RESET_BACKLOG_SQL)
            .bind(first_backlog)
            .execute(pool)
            .await
    };
    let rows = (first_backlog, backlog);
    let priming = drain(env, pool, rows, false).await?;
    let (mut quiet, mut watched) = (Vec::new(), Vec::new());
    for pair in 0..PAIRS * 2 {
        reset().await?;
        // quiet, watched, watched, quiet, quiet, watched, …
        if (pair % 4 == 0) || (pair % 4 == 3) {
            quiet.push(drain(env, pool, rows, false).await?);
        } else {
            watched.push(drain_watched(env, pool, base, rows, &WATCHED_PAGES).await?);
        }
    }
    report.add(plain_row(
        "console drain, priming (fresh rows; not compared)",
        priming,
        String::new(),
    ));
    let quiet_mean = mean(&quiet);
    report.add(plain_row(
        "console drain, nobody looking",
        quiet_mean,
        format!("drains: {}", listed(&quiet)),
    ));
    report.add(watched_row(&watched, quiet_mean));
    Ok(())
}

fn mean(rates: &[f64]) -> f64 {
    rates.iter().sum::<f64>() / rates.len() as f64
}

fn listed(rates: &[f64]) -> String {
    rates
        .iter()
        .map(|rate| format!("{rate:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn plain_row(scenario: &str, rate: f64, note: String) -> Row {
    Row {
        scenario: scenario.into(),
        metric: "events/s (mean)".into(),
        measured: rate,
        target: None,
        baseline: None,
        ratio: None,
        pass: None,
        note,
    }
}

/// The target row: the watched drains' mean against the quiet drains'.
fn watched_row(watched: &[Watched], quiet_mean: f64) -> Row {
    let rates: Vec<f64> = watched.iter().map(|run| run.rate).collect();
    let ratio = mean(&rates) / quiet_mean;
    let shares = watched
        .iter()
        .map(|run| {
            format!(
                "{} loads, console {:.1} % / client {:.1} % of a core",
                run.loads,
                run.console_cpu * 100.0,
                run.watcher_cpu * 100.0
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    // Issue #33: watching must not slow the relay down by more than 5 %.
    Row {
        scenario: "console drain, pages reloaded back to back".into(),
        metric: "events/s (mean)".into(),
        measured: mean(&rates),
        target: Some(format!(">= {WATCHED_MIN_RATIO}x nobody looking")),
        baseline: Some(quiet_mean),
        ratio: Some(ratio),
        pass: Some(ratio >= WATCHED_MIN_RATIO),
        note: format!(
            "drains: {}; during each: {shares} (a page's reloads by one session are paced \
             to 30/s by the console)",
            listed(&rates)
        ),
    }
}

/// A drain while a client on a thread of its own (not the relay's
/// runtime), at the process's CPU priority, reloads `pages` back to back;
/// at least one page must have been answered (200) meanwhile.
async fn drain_watched(
    env: &BenchEnv,
    pool: &MySqlPool,
    base: &str,
    rows: (u64, usize),
    pages: &[&'static str],
) -> anyhow::Result<Watched> {
    let stop = CancellationToken::new();
    let _stop_on_error = stop.clone().drop_guard();
    let (count, counted) = tokio::sync::oneshot::channel();
    let (base, pages, watching) = (base.to_owned(), pages.to_vec(), stop.clone());
    let same_priority = Nice::new("watcher", 0)?;
    let (console_before, watcher_before) =
        (cpu_ticks(CONSOLE_THREADS)?, cpu_ticks(WATCHER_THREAD)?);
    let started = Instant::now();
    let finished = low_priority::spawn(WATCHER_THREAD, same_priority, move || async move {
        let mut loads = 0_u64;
        while !watching.is_cancelled() {
            for page in &pages {
                if matches!(get(&base, page).await, Ok(200)) {
                    loads += 1;
                }
            }
        }
        let _ = count.send(loads);
    })?;
    let rate = drain(env, pool, rows, true).await?;
    // Read before the watcher's thread ends and takes its counts with it.
    let watcher_ticks = cpu_ticks(WATCHER_THREAD)?.saturating_sub(watcher_before);
    let console_ticks = cpu_ticks(CONSOLE_THREADS)?.saturating_sub(console_before);
    let elapsed = started.elapsed().as_secs_f64();
    stop.cancel();
    finished.wait().await;
    let loads = counted.await?;
    anyhow::ensure!(loads > 0, "the watcher loaded no page during the drain");
    Ok(Watched {
        rate,
        loads,
        console_cpu: console_ticks as f64 / TICKS_PER_SECOND / elapsed,
        watcher_cpu: watcher_ticks as f64 / TICKS_PER_SECOND / elapsed,
    })
}

/// The unit of `/proc`'s CPU times (USER_HZ: 100 on Linux's ABI).
const TICKS_PER_SECOND: f64 = 100.0;

/// User plus system CPU ticks of this process's threads whose name starts
/// with `prefix` (`/proc/self/task/<tid>/stat` fields 14 and 15, counted
/// after the name's closing parenthesis, since a name may hold spaces).
fn cpu_ticks(prefix: &str) -> anyhow::Result<u64> {
    let mut ticks = 0;
    for task in std::fs::read_dir("/proc/self/task")? {
        let path = task?.path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(path.join("comm")),
            std::fs::read_to_string(path.join("stat")),
        ) else {
            continue; // the thread ended meanwhile
        };
        if !comm.starts_with(prefix) {
            continue;
        }
        let after_name = stat
            .rfind(')')
            .and_then(|end| stat.get(end + 2..))
            .ok_or_else(|| anyhow::anyhow!("unreadable {}", path.display()))?;
        let fields: Vec<&str> = after_name.split(' ').collect();
        for field in [14, 15] {
            ticks += fields
                .get(field - 3)
                .ok_or_else(|| anyhow::anyhow!("short {}", path.display()))?
                .parse::<u64>()?;
        }
    }
    Ok(ticks)
}

/// Drains the backlog with one relay; events/s.
async fn drain(
    env: &BenchEnv,
    pool: &MySqlPool,
    (first_backlog, backlog): (u64, usize),
    watched: bool,
) -> anyhow::Result<f64> {
    let namespace = format!("bench{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mq = mq_config(env, &namespace);
    create_topic(&env.bootstrap, &mq.topic(names::TOPIC_ROOM_OUTBOX)).await?;
    let mut registry = prometheus_client::registry::Registry::default();
    let node = if watched {
        "bench-console-watched"
    } else {
        "bench-console-quiet"
    };
    let relay = relay_engine::build_relay(
        pool.clone(),
        &worker(node, false, ConfigDuration::from_millis(20), &env.redis),
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
