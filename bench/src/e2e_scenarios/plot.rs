//! The e2e-latency plots: latency histograms per hop (nudge on vs off),
//! events a second at each stage, and the p99 of commit → consumed per
//! second.

use super::Hops;
use crate::{
    fixtures::BenchEnv,
    plots::{self, Series},
};
use hdrhistogram::Histogram;

/// Latency histograms per hop (nudge on vs off), and over time: events per
/// second at each stage and the p99 of commit → consumed per second.
pub(super) fn plot(env: &BenchEnv, results: &[(bool, Hops)]) -> anyhow::Result<()> {
    let variant = |nudge: bool| if nudge { "nudge on" } else { "nudge off" };
    for (name, title, pick) in [
        (
            "e2e-latency-commit-to-published",
            "commit -> published",
            (|hops: &Hops| &hops.publish) as fn(&Hops) -> &Histogram<u64>,
        ),
        (
            "e2e-latency-commit-to-consumed",
            "commit -> consumed",
            |hops| &hops.total,
        ),
    ] {
        let series: Vec<(String, &Histogram<u64>)> = results
            .iter()
            .map(|(nudge, hops)| (variant(*nudge).to_string(), pick(hops)))
            .collect();
        plots::latency_histogram(&env.plot_path(name), &format!("e2e {title}"), &series)?;
    }
    let mut p99 = Vec::new();
    for (nudge, hops) in results {
        let mut per_second: Vec<Vec<i64>> = Vec::new();
        let mut counts: [Vec<f64>; 3] = Default::default();
        for event in &hops.events {
            let times = [event.created, event.delivered, event.processed];
            for (stage, at) in times.iter().enumerate() {
                let second = (*at / 1_000).max(0) as usize;
                if counts[stage].len() <= second {
                    counts[stage].resize(second + 1, 0.0);
                }
                counts[stage][second] += 1.0;
            }
            let second = (event.created / 1_000).max(0) as usize;
            if per_second.len() <= second {
                per_second.resize(second + 1, Vec::new());
            }
            per_second[second].push(event.processed - event.created);
        }
        if *nudge {
            let labels = ["committed/s", "published/s", "consumed/s"];
            let series: Vec<Series> = labels
                .iter()
                .zip(&counts)
                .map(|(label, counts)| Series {
                    label: (*label).into(),
                    points: step_points(counts),
                })
                .collect();
            plots::line_chart(
                &env.plot_path("e2e-throughput"),
                "e2e throughput over time (nudge on)",
                "seconds since start",
                "events/s",
                &series,
            )?;
        }
        let points = per_second
            .iter_mut()
            .enumerate()
            .filter(|(_, lags)| !lags.is_empty())
            .map(|(second, lags)| {
                lags.sort_unstable();
                let index = (lags.len() * 99 / 100).min(lags.len() - 1);
                (second as f64, lags[index] as f64)
            })
            .collect();
        p99.push(Series {
            label: variant(*nudge).into(),
            points,
        });
    }
    plots::line_chart(
        &env.plot_path("e2e-p99-over-time"),
        "e2e commit -> consumed p99 per second of commit",
        "seconds since start",
        "p99 ms",
        &p99,
    )
}

fn step_points(counts: &[f64]) -> Vec<(f64, f64)> {
    counts
        .iter()
        .enumerate()
        .flat_map(|(second, &count)| [(second as f64, count), (second as f64 + 1.0, count)])
        .collect()
}
