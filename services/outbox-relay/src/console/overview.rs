//! The console's overview page as HTML: row counts (bounded, see
//! `counts`) and ages, publishes per minute, relay instances and shard
//! leases, consumer lag, the oldest dead letters. A pure function of the
//! reports the `ops` functions and the console's history return, written
//! with `maud`, which escapes every value.

use super::counts::{Capped, Counts};
use super::history::{Gauges, GroupLag, Minute};
use super::html::{age, table, utc};
use super::pages::dead_letter_table;
use crate::ops::{DeadLetter, LeaseReport};
use maud::{Markup, html};

/// Everything the overview shows.
#[derive(Debug)]
pub struct Overview<'a> {
    /// Counts (capped) and the oldest rows' ages.
    pub counts: &'a Counts,
    /// This process's relay gauges, when it runs a relay.
    pub gauges: Option<Gauges>,
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
pub fn overview(view: &Overview<'_>) -> Markup {
    html! {
        (outbox_section(view))
        (publishing_section(view.minutes))
        (leases_section(view.leases))
        (lag_section(view.lags))
        h2 { "Dead letters (oldest)" }
        (dead_letter_table("overview-dead-letters", view.dead_letters))
        p { a href="/console/dead-letters" { "All dead letters" } }
    }
}

/// The overview's row counts and the oldest pending chain row.
fn outbox_section(view: &Overview<'_>) -> Markup {
    let counts = view.counts;
    let gauges = view.gauges;
    let row = |label: &str, count: Capped, exact: Option<i64>, oldest_ms: i64| {
        vec![
            html! { (label) },
            html! {
                (count)
                @if let (Capped::MoreThan(_), Some(exact)) = (count, exact) {
                    " " span class="muted" { "(relay gauge: " (exact) ")" }
                }
            },
            html! { (age(oldest_ms)) },
        ]
    };
    let rows = [
        row(
            "open (pending, delivering, retryable)",
            counts.open,
            gauges.map(|gauges| gauges.pending),
            counts.oldest_pending_age_ms,
        ),
        row(
            "retryable",
            counts.retryable,
            None,
            counts.oldest_retryable_age_ms,
        ),
        row(
            "failed (dead letters)",
            counts.failed,
            gauges.map(|gauges| gauges.failed),
            counts.oldest_failed_age_ms,
        ),
    ];
    html! {
        h2 { "Outbox" }
        (table("outbox", &["Rows", "Count", "Oldest"], &rows))
        p {
            "Oldest pending chain row: " b id="oldest-pending" { (age(counts.oldest_pending_age_ms)) }
            ". Delivered rows are history and not counted; counts stop at "
            (super::counts::COUNT_CAP) " so the page costs the same however large the backlog."
        }
    }
}

/// The overview's publishes per minute of this relay instance.
fn publishing_section(minutes: &[Minute]) -> Markup {
    let total: u64 = minutes.iter().map(|minute| minute.published).sum();
    let peak = minutes
        .iter()
        .map(|minute| minute.published)
        .max()
        .unwrap_or(0)
        .max(1);
    let rows: Vec<Vec<Markup>> = minutes
        .iter()
        .map(|minute| {
            let bar = "█".repeat(usize::try_from(minute.published * 40 / peak).unwrap_or(0));
            vec![
                html! { (utc(minute.until_ms)) },
                html! { (minute.published) },
                html! { (format!("{:.1}", minute.published as f64 / 60.0)) },
                html! {
                    @match minute.mean_lag_seconds {
                        Some(lag) => (age((lag * 1_000.0) as i64)),
                        None => "—",
                    }
                },
                html! { span class="bar" { (bar) } },
            ]
        })
        .collect();
    let headers = [
        "Minute until",
        "Published",
        "Per second",
        "Mean commit→publish lag",
        "",
    ];
    html! {
        h2 { "Publishing, last 15 minutes (this relay instance)" }
        p { "Published: " b id="published-15m" { (total) } }
        (table("publish-rate", &headers, &rows))
    }
}

/// The overview's relay instances and shard coverage.
fn leases_section(leases: &LeaseReport) -> Markup {
    let instances: Vec<Vec<Markup>> = leases
        .instances
        .iter()
        .map(|instance| {
            vec![
                html! { (instance.instance_id) },
                html! { (age(instance.heartbeat_age_ms)) },
                html! { (instance.live_shards) },
                html! { (utc(instance.started_at_ms)) },
            ]
        })
        .collect();
    html! {
        h2 { "Relays and shard leases" }
        (table("relays", &["Instance", "Heartbeat age", "Live shards", "Started"], &instances))
        p {
            "Shards without a live lease: " b id="uncovered" { (leases.uncovered_shards.len()) }
            " of " (leases.shards.len())
        }
    }
}

/// The overview's consumer lag per group and partition, as last read.
fn lag_section(lags: Option<&[GroupLag]>) -> Markup {
    html! {
        h2 { "Consumer groups (lag from the broker)" }
        @match lags {
            None => p class="muted" { "No broker configured (publish_mode direct)." },
            Some([]) => p class="muted" { "Not read yet (every 30 s)." },
            Some(lags) => (lag_table(lags)),
        }
    }
}

/// One row per partition of each group, or the group's read error.
fn lag_table(lags: &[GroupLag]) -> Markup {
    let mut rows = Vec::new();
    for lag in lags {
        match &lag.partitions {
            Err(error) => rows.push(vec![
                html! { (lag.group) },
                html! { (lag.topic) },
                html! { "—" },
                html! { span class="err" { (error) } },
                html! {},
                html! { (utc(lag.read_at_ms)) },
            ]),
            Ok(partitions) => rows.extend(partitions.iter().map(|partition| {
                vec![
                    html! { (lag.group) },
                    html! { (lag.topic) },
                    html! { (partition.partition) },
                    html! { (partition.lag()) },
                    html! {
                        @match partition.committed {
                            Some(offset) => (offset),
                            None => "none",
                        }
                    },
                    html! { (utc(lag.read_at_ms)) },
                ]
            })),
        }
    }
    let headers = ["Group", "Topic", "Partition", "Lag", "Committed", "Read at"];
    table("consumer-lag", &headers, &rows)
}
