//! The latency curve of `e2e-latency`: first the gift capacity of the whole
//! pipeline (room-service → relay → activity-consumer, nudge on) with 64
//! callers in a closed loop, then commit → consumed, hop by hop, under an
//! open-loop load of 10 %, 25 %, 50 % and 75 % of that capacity, all in the
//! same run. A fixed rate (the 1,000 gifts/s rows) says little on its own:
//! on one machine it is a tenth of the capacity, on another a half. Target:
//! the p99 at 50 % load is at most 3× the p99 at 10 % — latency stays flat
//! until the pipeline nears what it can carry.

use crate::{
    e2e_scenarios::{self, Hops, Load, run},
    fixtures::BenchEnv,
    plots::{self, Series},
    report::{Report, Row},
};

/// Shares of the measured capacity the curve is sampled at.
const FRACTIONS: [f64; 4] = [0.10, 0.25, 0.50, 0.75];
/// Callers of the capacity run (as the mixed-command scenarios use).
const CALLERS: usize = 64;
/// Largest allowed p99(50 %) / p99(10 %).
const FLATNESS: f64 = 3.0;

/// Measures the capacity, then the curve; adds a row per load and hop and
/// the headline ratio, and plots p50/p99 against load.
pub async fn latency_curve(env: &BenchEnv, report: &mut Report) -> anyhow::Result<()> {
    let rooms = e2e_scenarios::rooms(env);
    let (capacity_seconds, seconds) = if env.smoke { (2, 2) } else { (10, 15) };
    println!(
        "e2e-latency: capacity with {CALLERS} callers over {rooms} rooms for {capacity_seconds}s"
    );
    let capacity = run(env, true, rooms, Load::Saturate(CALLERS), capacity_seconds).await?;
    let gifts_per_second = capacity.achieved_rate;
    report.add(Row {
        scenario: format!("e2e-capacity ({CALLERS} callers, closed loop, nudge on)"),
        metric: "gifts/s".into(),
        measured: gifts_per_second,
        target: None,
        baseline: None,
        ratio: None,
        pass: None,
        note: format!(
            "{} commands failed; command p50 {} ms, p99 {} ms; commit->consumed p99 {} ms",
            capacity.failed,
            capacity.command.value_at_quantile(0.5),
            capacity.command.value_at_quantile(0.99),
            capacity.total.value_at_quantile(0.99),
        ),
    });
    let mut curve = Vec::new();
    for fraction in FRACTIONS {
        let rate = (gifts_per_second * fraction).round().max(1.0) as u64;
        println!(
            "e2e-latency: {:.0} % of capacity = {rate} SendGift/s for {seconds}s",
            fraction * 100.0
        );
        let hops = run(env, true, rooms, Load::Rate(rate), seconds).await?;
        add_rows(report, fraction, rate, &hops);
        curve.push((fraction, hops));
    }
    let p99_at = |share: f64| {
        curve
            .iter()
            .find(|(fraction, _)| *fraction == share)
            .map(|(_, hops)| (hops.total.value_at_quantile(0.99) as f64, hops.failed))
    };
    if let (Some((low, low_failed)), Some((half, half_failed))) = (p99_at(0.10), p99_at(0.50)) {
        let ratio = half / low.max(1.0);
        report.add(Row {
            scenario: "e2e-curve commit->consumed p99, 50 % vs 10 % of capacity".into(),
            metric: "p99 ms".into(),
            measured: half,
            target: Some(format!("<= {FLATNESS}x the 10 % p99")),
            baseline: Some(low),
            ratio: Some(ratio),
            pass: Some(ratio <= FLATNESS && low_failed == 0 && half_failed == 0),
            note: format!("capacity {gifts_per_second:.0} gifts/s; baseline = p99 at 10 %"),
        });
    }
    plot(env, &curve)
}

fn add_rows(report: &mut Report, fraction: f64, rate: u64, hops: &Hops) {
    for (hop, histogram) in hops.per_hop() {
        report.add(Row {
            scenario: format!("e2e-curve {hop} at {:.0} % ({rate}/s)", fraction * 100.0),
            metric: "p99 ms".into(),
            measured: histogram.value_at_quantile(0.99) as f64,
            target: None,
            baseline: None,
            ratio: None,
            pass: None,
            note: hops.note(histogram),
        });
    }
}

/// `e2e-latency-curve.svg`: commit → consumed p50 and p99 against load.
fn plot(env: &BenchEnv, curve: &[(f64, Hops)]) -> anyhow::Result<()> {
    let series: Vec<Series> = [("p50", 0.5), ("p99", 0.99)]
        .into_iter()
        .map(|(label, quantile)| Series {
            label: format!("commit -> consumed {label}"),
            points: curve
                .iter()
                .map(|(fraction, hops)| {
                    (
                        fraction * 100.0,
                        hops.total.value_at_quantile(quantile) as f64,
                    )
                })
                .collect(),
        })
        .collect();
    plots::line_chart(
        &env.plot_path("e2e-latency-curve"),
        "e2e commit -> consumed against load",
        "% of measured gift capacity",
        "ms",
        &series,
    )
}
