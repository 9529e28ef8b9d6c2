//! The console's overview page as HTML: row counts and ages, publishes per
//! minute, relay instances and shard leases, consumer lag, the oldest dead
//! letters. A pure function of the reports the `ops` functions and the
//! console's history return; every value goes through `html::escape`.

use super::history::{GroupLag, Minute};
use super::html::{age, escape, table, utc};
use super::pages::dead_letter_table;
use crate::ops::{DeadLetter, LeaseReport, StatusReport};
use std::fmt::Write as _;

/// Seconds between the overview's self-refreshes.
pub const OVERVIEW_REFRESH_SECS: u32 = 10;

/// Ages of the oldest row by failing status, ms.
#[derive(Debug, Clone, Copy, Default)]
pub struct FailingAges {
    /// Oldest retryable row.
    pub retryable_ms: i64,
    /// Oldest dead letter.
    pub failed_ms: i64,
}

/// Everything the overview shows.
#[derive(Debug)]
pub struct Overview<'a> {
    /// Counts, backlog age, retrying heads.
    pub status: &'a StatusReport,
    /// Oldest retry and dead letter.
    pub ages: FailingAges,
    /// Publishes per minute, last 15 minutes, this instance.
    pub minutes: &'a [Minute],
    /// Shard leases and instances.
    pub leases: &'a LeaseReport,
    /// Consumer lag per group (None: no broker configured).
    pub lags: Option<&'a [GroupLag]>,
    /// The oldest dead letters.
    pub dead_letters: &'a [DeadLetter],
}

/// The overview page's body.
pub fn overview(view: &Overview<'_>) -> String {
    let mut out = outbox_section(view);
    out.push_str(&publishing_section(view.minutes));
    out.push_str(&leases_section(view.leases));
    out.push_str(&lag_section(view.lags));
    out.push_str("<h2>Dead letters (oldest)</h2>");
    out.push_str(&dead_letter_table(
        "overview-dead-letters",
        view.dead_letters,
    ));
    out.push_str("<p><a href=\"/console/dead-letters\">All dead letters</a></p>");
    out
}

/// The overview's row counts and the oldest pending chain row.
fn outbox_section(view: &Overview<'_>) -> String {
    let status = view.status;
    let mut out = String::from("<h2>Outbox</h2>");

    out.push_str(&table(
        "outbox",
        &["Rows", "Count", "Oldest"],
        &[
            vec![
                "open (pending, delivering, retryable)".into(),
                status.open.to_string(),
                age(status.oldest_pending_age_ms),
            ],
            vec![
                "retryable".into(),
                status.retryable.to_string(),
                age(view.ages.retryable_ms),
            ],
            vec![
                "failed (dead letters)".into(),
                status.failed.to_string(),
                age(view.ages.failed_ms),
            ],
        ],
    ));
    let _ = write!(
        out,
        "<p>Oldest pending chain row: <b id=\"oldest-pending\">{}</b>. Delivered rows are history and not counted.</p>",
        age(status.oldest_pending_age_ms)
    );
    out
}

/// The overview's publishes per minute of this relay instance.
fn publishing_section(minutes: &[Minute]) -> String {
    let mut out = String::new();
    out.push_str("<h2>Publishing, last 15 minutes (this relay instance)</h2>");
    let total: u64 = minutes.iter().map(|minute| minute.published).sum();
    let peak = minutes
        .iter()
        .map(|minute| minute.published)
        .max()
        .unwrap_or(0)
        .max(1);
    let rows: Vec<Vec<String>> = minutes
        .iter()
        .map(|minute| {
            let bar = "█".repeat(usize::try_from(minute.published * 40 / peak).unwrap_or(0));
            vec![
                utc(minute.until_ms),
                minute.published.to_string(),
                format!("{:.1}", minute.published as f64 / 60.0),
                minute
                    .mean_lag_seconds
                    .map_or_else(|| "—".into(), |lag| age((lag * 1_000.0) as i64)),
                format!("<span class=\"bar\">{bar}</span>"),
            ]
        })
        .collect();
    let _ = write!(out, "<p>Published: <b id=\"published-15m\">{total}</b></p>");
    out.push_str(&table(
        "publish-rate",
        &[
            "Minute until",
            "Published",
            "Per second",
            "Mean commit→publish lag",
            "",
        ],
        &rows,
    ));
    out
}

/// The overview's relay instances and shard coverage.
fn leases_section(leases: &LeaseReport) -> String {
    let mut out = String::new();
    out.push_str("<h2>Relays and shard leases</h2>");
    let instances: Vec<Vec<String>> = leases
        .instances
        .iter()
        .map(|instance| {
            vec![
                escape(&instance.instance_id),
                age(instance.heartbeat_age_ms),
                instance.live_shards.to_string(),
                utc(instance.started_at_ms),
            ]
        })
        .collect();
    out.push_str(&table(
        "relays",
        &["Instance", "Heartbeat age", "Live shards", "Started"],
        &instances,
    ));
    let _ = write!(
        out,
        "<p>Shards without a live lease: <b id=\"uncovered\">{}</b> of {}</p>",
        leases.uncovered_shards.len(),
        leases.shards.len()
    );
    out
}

/// The overview's consumer lag per group and partition, as last read.
fn lag_section(lags: Option<&[GroupLag]>) -> String {
    let mut out = String::new();
    out.push_str("<h2>Consumer groups (lag from the broker)</h2>");
    match lags {
        None => out.push_str("<p class=\"muted\">No broker configured (publish_mode direct).</p>"),
        Some([]) => out.push_str("<p class=\"muted\">Not read yet (every 30 s).</p>"),
        Some(lags) => {
            let mut rows = Vec::new();
            for lag in lags {
                match &lag.partitions {
                    Err(error) => rows.push(vec![
                        escape(&lag.group),
                        escape(&lag.topic),
                        "—".into(),
                        format!("<span class=\"err\">{}</span>", escape(error)),
                        "".into(),
                        utc(lag.read_at_ms),
                    ]),
                    Ok(partitions) => rows.extend(partitions.iter().map(|partition| {
                        vec![
                            escape(&lag.group),
                            escape(&lag.topic),
                            partition.partition.to_string(),
                            partition.lag().to_string(),
                            partition
                                .committed
                                .map_or_else(|| "none".into(), |offset| offset.to_string()),
                            utc(lag.read_at_ms),
                        ]
                    })),
                }
            }
            out.push_str(&table(
                "consumer-lag",
                &["Group", "Topic", "Partition", "Lag", "Committed", "Read at"],
                &rows,
            ));
        }
    }
    out
}
