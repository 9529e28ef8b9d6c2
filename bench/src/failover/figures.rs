//! The failover scenario's figures: per half (fast takeover on or off), the
//! unavailability of the rooms the killed holder held, the calls that ran
//! out of budget and the gifts in flight at the kill, and the report rows
//! that compare the halves.

use super::{Measured, Record, ms};
use crate::{
    gateway::Answer,
    report::{Report, Row},
};
use std::{collections::BTreeMap, time::Instant};

/// The figures of one half from every room's records.
pub(super) fn analyse(logs: &[Vec<Record>], affected: &[bool], killed: Instant) -> Measured {
    let mut measured = Measured {
        rooms: logs.len(),
        ..Measured::default()
    };
    for (room, records) in logs.iter().enumerate() {
        let successes: Vec<Instant> = records
            .iter()
            .filter(|record| matches!(record.called.answer, Answer::Ok { .. }))
            .map(|record| record.called.answered)
            .collect();
        let split = successes.partition_point(|at| *at <= killed);
        let steady = successes[..split]
            .windows(2)
            .map(|pair| ms(pair[1] - pair[0]))
            .fold(0.0, f64::max);
        measured.steady_gap_ms = measured.steady_gap_ms.max(steady);
        if affected[room] {
            measured.affected += 1;
            match (
                split.checked_sub(1).map(|last| successes[last]),
                successes.get(split),
            ) {
                (Some(last), Some(first)) => {
                    measured.gaps_ms.push(ms(*first - last));
                    measured.kill_to_first_ms.push(ms(*first - killed));
                }
                (None, Some(first)) => measured.kill_to_first_ms.push(ms(*first - killed)),
                (_, None) => measured.unrecovered += 1,
            }
        }
        for record in records {
            measured.commands += 1;
            measured.retries += u64::from(record.called.attempts - 1);
            measured.over_three_retries += usize::from(record.called.attempts > 4);
            measured.retry_info_delays += u64::from(record.called.retry_info_delays);
            let outcome = match &record.called.answer {
                Answer::Ok { .. } => "committed".to_owned(),
                Answer::Refused(refusal) => {
                    *measured.refused.entry(refusal.clone()).or_default() += 1;
                    refusal.clone()
                }
                Answer::GaveUp(refusal) => {
                    measured.gave_up += 1;
                    format!("gave up after {refusal}")
                }
            };
            if record.gift && record.sent < killed && record.called.answered >= killed {
                let settled = ms(record.called.answered - killed);
                measured.inflight_gifts.push((settled, outcome));
            }
        }
    }
    measured
}

/// The value at `quantile` of `values` (nearest rank), NaN when empty.
fn quantile(values: &[f64], quantile: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((quantile * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn max(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::NAN, f64::max)
}

fn tally(counts: &BTreeMap<String, u64>) -> String {
    if counts.is_empty() {
        return "none".into();
    }
    let parts: Vec<String> = counts
        .iter()
        .map(|(what, n)| format!("{what} x{n}"))
        .collect();
    parts.join(", ")
}

/// The rows of one half; `off` (the liveness-off half) is the baseline of
/// the targeted rows.
pub(super) fn rows(
    report: &mut Report,
    scenario: &str,
    label: &str,
    lease_ttl: &str,
    run: &Measured,
    off: Option<&Measured>,
    targeted: bool,
) {
    let half = Half {
        scenario,
        run,
        off,
        targeted,
    };
    half.unavailable_rows(report, label, lease_ttl);
    half.budget_row(report);
    half.inflight_row(report);
}

/// One half's figures, its baseline, and whether its rows carry targets.
struct Half<'a> {
    scenario: &'a str,
    run: &'a Measured,
    off: Option<&'a Measured>,
    targeted: bool,
}

impl Half<'_> {
    fn check(&self, value: f64, limit: f64) -> Option<bool> {
        (self.targeted && !value.is_nan()).then_some(value <= limit)
    }

    fn target(&self, text: &str) -> Option<String> {
        self.targeted.then(|| text.to_owned())
    }

    /// The baseline figure (from the liveness-off half) and the ratio to it.
    fn with_baseline(
        &self,
        value: f64,
        figure: impl Fn(&Measured) -> f64,
    ) -> (Option<f64>, Option<f64>) {
        let baseline = self.off.map(figure);
        let ratio = baseline.filter(|b| *b > 0.0).map(|b| value / b);
        (baseline, ratio)
    }

    /// The longest and the p99 unavailability of the rooms the killed holder held.
    fn unavailable_rows(&self, report: &mut Report, label: &str, lease_ttl: &str) {
        let (scenario, run, off) = (self.scenario, self.run, self.off);
        let longest = max(&run.gaps_ms);
        let (baseline, ratio) = self.with_baseline(longest, |off| max(&off.gaps_ms));
        report.add(Row {
            scenario: format!("{scenario}, longest unavailable"),
            metric: "ms".into(),
            measured: longest,
            target: self.target("<= 2000"),
            baseline,
            ratio,
            pass: self.check(longest, 2_000.0).map(|ok| ok && run.unrecovered == 0),
            note: format!(
                "{label}, lease_ttl {lease_ttl}; killed {} holding {} of {} rooms; last success \
                 before the kill -> first after; kill -> first success max {:.0} ms; {} rooms never \
                 answered again; longest gap before the kill {:.0} ms{}",
                run.victim,
                run.affected,
                run.rooms,
                max(&run.kill_to_first_ms),
                run.unrecovered,
                run.steady_gap_ms,
                if off.is_some() {
                    "; baseline: the same with liveness_ttl 0"
                } else {
                    ""
                }
            ),
        });
        let p99 = quantile(&run.gaps_ms, 0.99);
        let (baseline, ratio) = self.with_baseline(p99, |off| quantile(&off.gaps_ms, 0.99));
        report.add(Row {
            scenario: format!("{scenario}, p99 unavailable"),
            metric: "ms".into(),
            measured: p99,
            target: None,
            baseline,
            ratio,
            pass: None,
            note: format!(
                "over the {} rooms the killed holder held; p50 {:.0} ms",
                run.gaps_ms.len(),
                quantile(&run.gaps_ms, 0.5)
            ),
        });
    }

    /// Calls still refused when their retry budget ran out.
    fn budget_row(&self, report: &mut Report) {
        let (scenario, run) = (self.scenario, self.run);
        report.add(Row {
            scenario: format!("{scenario}, failed after budget"),
            metric: "commands".into(),
            measured: run.gave_up as f64,
            target: self.target("0"),
            baseline: self.off.map(|off| off.gave_up as f64),
            ratio: None,
            pass: self.targeted.then_some(run.gave_up == 0),
            note: format!(
                "of {} commands, retry budget 45 s, same command id; {} retries ({} after a \
                 RetryInfo delay); {} calls needed more than 3 retries; final refusals: {}",
                run.commands,
                run.retries,
                run.retry_info_delays,
                run.over_three_retries,
                tally(&run.refused)
            ),
        });
    }

    /// Gifts in flight at the kill: kill → final answer.
    fn inflight_row(&self, report: &mut Report) {
        let (scenario, run) = (self.scenario, self.run);
        let settled: Vec<f64> = run.inflight_gifts.iter().map(|(ms, _)| *ms).collect();
        let mut outcomes = BTreeMap::new();
        for (_, outcome) in &run.inflight_gifts {
            *outcomes.entry(outcome.clone()).or_default() += 1;
        }
        let slowest = max(&settled);
        let (baseline, ratio) = self.with_baseline(slowest, |off| {
            max(&off
                .inflight_gifts
                .iter()
                .map(|(ms, _)| *ms)
                .collect::<Vec<_>>())
        });
        report.add(Row {
            scenario: format!("{scenario}, in-flight gifts settled"),
            metric: "ms".into(),
            measured: slowest,
            target: self.target("<= 5000"),
            baseline,
            ratio,
            pass: self.check(slowest, 5_000.0),
            note: format!(
                "{} gifts in flight at the kill, kill -> final answer (takeover included), \
                 p50 {:.0} ms; answers: {}",
                settled.len(),
                quantile(&settled, 0.5),
                tally(&outcomes)
            ),
        });
    }
}
