//! Turning scrapes of running services into `promtool test rules` input, so
//! every alert of `deploy/prometheus/alerts.yml` is evaluated by Prometheus'
//! own rule engine against what the services really export
//! (`tests/alert_scenarios.rs` runs the services and promtool).
//!
//! A scenario scrapes every target twice, some seconds apart, once the state
//! it sets up holds. The input series say "this state continues": each
//! series starts at its first scrape and moves on linearly at the rate seen
//! between the two scrapes (a counter keeps counting at the observed rate, a
//! growing backlog keeps growing, a still gauge stays still), for
//! [`WINDOW_MINUTES`] at one-minute steps. As Prometheus does, every sample
//! gets its target's `job` and `instance` labels, and each target gets an
//! `up` series: 1 when both scrapes answered, 0 when they failed; a target
//! not listed at all (no service discovery entry) has no `up` series.
//!
//! The verdict of each alert is read from Prometheus' `ALERTS` series at the
//! end of the window: `max(ALERTS{alertname="X",alertstate="firing"}) or
//! vector(0)`, expected 1 where the scenario must fire it and 0 elsewhere.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Minutes of synthesized history; longer than every `for:` plus its range
/// window (the longest: 10 m `for` over a 10 m `deriv`).
pub const WINDOW_MINUTES: u32 = 30;

/// One sample of a text exposition.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Series name as exposed (`_total`, `_bucket` suffixes included).
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// A scrape target: `job`, `instance` and its two scrapes (`None`: the
/// scrape failed, as for a stopped process).
#[derive(Debug, Clone)]
pub struct Target {
    /// The scrape job (the service name).
    pub job: String,
    /// `host:port`.
    pub instance: String,
    /// First and second scrape.
    pub scrapes: [Option<Vec<Sample>>; 2],
}

/// Parses the Prometheus/OpenMetrics text format (comments skipped).
pub fn parse_exposition(text: &str) -> Result<Vec<Sample>, String> {
    let mut samples = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .ok_or_else(|| format!("no value in {line:?}"))?;
        let value = parse_value(value).ok_or_else(|| format!("bad value in {line:?}"))?;
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest
                    .strip_suffix('}')
                    .ok_or_else(|| format!("unclosed labels in {line:?}"))?;
                (name.to_string(), parse_labels(body)?)
            }
        };
        samples.push(Sample {
            name,
            labels,
            value,
        });
    }
    Ok(samples)
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        other => other.parse().ok(),
    }
}

fn parse_labels(body: &str) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    let mut rest = body.trim_start_matches(',');
    while !rest.is_empty() {
        let (key, after) = rest
            .split_once("=\"")
            .ok_or_else(|| format!("bad label in {body:?}"))?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err(format!("unterminated label value in {body:?}")),
                Some((index, '"')) => break index,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, escaped)) => value.push(escaped),
                    None => return Err(format!("dangling escape in {body:?}")),
                },
                Some((_, other)) => value.push(other),
            }
        };
        labels.insert(key.trim().to_string(), value);
        rest = after[end + 1..].trim_start_matches(',').trim_start();
    }
    Ok(labels)
}

/// The series selector promtool's input format takes: `name{k="v",...}`.
fn selector(name: &str, labels: &BTreeMap<String, String>) -> String {
    let body: Vec<String> = labels
        .iter()
        .map(|(key, value)| {
            let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
            format!("{key}=\"{escaped}\"")
        })
        .collect();
    format!("{name}{{{}}}", body.join(","))
}

/// `WINDOW_MINUTES + 1` values from `first`, moving at `per_second`; a
/// series that was never negative (a count draining) stops at zero.
fn continued(first: f64, per_second: f64) -> String {
    let floor = if first >= 0.0 { 0.0 } else { f64::NEG_INFINITY };
    (0..=WINDOW_MINUTES)
        .map(|minute| {
            format!(
                "{}",
                (first + per_second * 60.0 * f64::from(minute)).max(floor)
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// promtool input series (`(series, values)`) for `targets` whose scrapes
/// were `seconds_apart` apart. Series seen in only one scrape are left out:
/// their trend is unknown.
pub fn input_series(targets: &[Target], seconds_apart: f64) -> Vec<(String, String)> {
    let mut series = Vec::new();
    for target in targets {
        let target_labels = BTreeMap::from([
            ("instance".to_string(), target.instance.clone()),
            ("job".to_string(), target.job.clone()),
        ]);
        let up = target.scrapes.iter().all(Option::is_some);
        series.push((
            selector("up", &target_labels),
            continued(if up { 1.0 } else { 0.0 }, 0.0),
        ));
        let [Some(first), Some(second)] = &target.scrapes else {
            continue;
        };
        for sample in first.iter().filter(|sample| sample.value.is_finite()) {
            let Some(later) = second.iter().find(|other| {
                other.name == sample.name
                    && other.labels == sample.labels
                    && other.value.is_finite()
            }) else {
                continue;
            };
            let mut labels = sample.labels.clone();
            labels.extend(target_labels.clone());
            let per_second = (later.value - sample.value) / seconds_apart;
            series.push((
                selector(&sample.name, &labels),
                continued(sample.value, per_second),
            ));
        }
    }
    series
}

/// The `max(ALERTS…) or vector(0)` expression of one alert's verdict.
pub fn verdict_expr(alert: &str) -> String {
    format!("max(ALERTS{{alertname=\"{alert}\",alertstate=\"firing\"}}) or vector(0)")
}

/// A `promtool test rules` file: `series` as input, one expression test per
/// `(alert, must_fire)` at the end of the window.
pub fn rule_test_file(
    rule_file: &str,
    series: &[(String, String)],
    verdicts: &[(String, bool)],
) -> String {
    let mut out = String::new();
    let quote = |text: &str| format!("'{}'", text.replace('\'', "''"));
    let _ = writeln!(out, "rule_files:\n  - {}", quote(rule_file));
    let _ = writeln!(out, "evaluation_interval: 1m\ntests:\n  - interval: 1m");
    let _ = writeln!(out, "    input_series:");
    for (selector, values) in series {
        let _ = writeln!(
            out,
            "      - series: {}\n        values: {}",
            quote(selector),
            quote(values)
        );
    }
    let _ = writeln!(out, "    promql_expr_test:");
    for (alert, must_fire) in verdicts {
        let _ = writeln!(
            out,
            "      - expr: {}\n        eval_time: {WINDOW_MINUTES}m\n        exp_samples:\n          - labels: '{{}}'\n            value: {}",
            quote(&verdict_expr(alert)),
            u8::from(*must_fire)
        );
    }
    out
}

/// The alerts whose verdict differed, read from promtool's failure report
/// (`expr: "max(ALERTS{alertname=\"X\"…`).
pub fn mismatched_alerts(promtool_output: &str) -> Vec<String> {
    promtool_output
        .lines()
        .filter_map(|line| {
            let start = line.find("alertname=\\\"")? + "alertname=\\\"".len();
            let end = line[start..].find("\\\"")?;
            Some(line[start..start + end].to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expositions_parse_with_labels_escapes_and_special_values() {
        let samples = parse_exposition(
            "# HELP x y\n# TYPE x counter\nx_total 3\nlag{group=\"a,b\",path=\"q\\\"r\"} 1.5\nh_bucket{le=\"+Inf\"} NaN\n# EOF\n",
        )
        .unwrap();
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0].name, "x_total");
        assert_eq!(samples[1].labels["group"], "a,b");
        assert_eq!(samples[1].labels["path"], "q\"r");
        assert!(samples[2].value.is_nan());
        assert!(parse_exposition("x{a=\"1\" 2").is_err());
    }

    #[test]
    fn series_continue_at_the_observed_rate_and_up_follows_the_scrapes() {
        let scrape = |value| {
            Some(vec![Sample {
                name: "c_total".into(),
                labels: BTreeMap::new(),
                value,
            }])
        };
        let targets = [
            Target {
                job: "a".into(),
                instance: "h:1".into(),
                scrapes: [scrape(10.0), scrape(12.0)],
            },
            Target {
                job: "b".into(),
                instance: "h:2".into(),
                scrapes: [None, None],
            },
        ];
        let series = input_series(&targets, 60.0);
        assert_eq!(series.len(), 3);
        assert_eq!(series[0].0, "up{instance=\"h:1\",job=\"a\"}");
        assert!(series[0].1.starts_with("1 1 1"));
        assert_eq!(series[1].0, "c_total{instance=\"h:1\",job=\"a\"}");
        assert!(series[1].1.starts_with("10 12 14 16"), "{}", series[1].1);
        assert_eq!(series[2].0, "up{instance=\"h:2\",job=\"b\"}");
        assert!(series[2].1.starts_with("0 0"));
    }

    #[test]
    fn promtool_failures_name_their_alert() {
        let output = "  FAILED:\n    expr: \"max(ALERTS{alertname=\\\"RoomServiceDown\\\",alertstate=\\\"firing\\\"}) or vector(0)\", time: 30m,\n        exp: {} 1E+00\n        got: {} 0E+00\n";
        assert_eq!(mismatched_alerts(output), ["RoomServiceDown"]);
        let file = rule_test_file("r.yml", &[], &[("A".into(), true)]);
        assert!(file.contains("alertname=\"A\""), "{file}");
        assert!(file.contains("value: 1"), "{file}");
    }
}
