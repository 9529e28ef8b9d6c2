//! `deploy/prometheus/alerts.yml` and `deploy/grafana/*.json`: every metric an
//! alert expression, panel query or template variable names must be one the
//! services expose (or one Prometheus adds itself, [`SCRAPE_SERIES`]); every
//! alert links its runbook, a section of `docs/runbooks.md`.

use crate::{Model, promql};
use serde_json::Value;
use std::collections::BTreeSet;

/// Series Prometheus writes for every scrape target itself.
pub const SCRAPE_SERIES: &[&str] = &["up", "scrape_duration_seconds", "scrape_samples_scraped"];

/// Where every `runbook_url` points: a section of this file.
pub const RUNBOOKS: &str = "docs/runbooks.md";

/// Checks Prometheus rule groups (`groups[].rules[].expr`).
pub fn check_alerts(model: &Model, alerts: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let groups = alerts.get("groups").and_then(Value::as_array);
    if groups.is_none_or(|groups| groups.is_empty()) {
        problems.push("alerts: no rule groups".into());
    }
    for rule in groups
        .into_iter()
        .flatten()
        .filter_map(|group| group.get("rules").and_then(Value::as_array))
        .flatten()
    {
        let name = rule
            .get("alert")
            .or_else(|| rule.get("record"))
            .and_then(Value::as_str)
            .unwrap_or("?");
        let Some(expr) = rule.get("expr").and_then(Value::as_str) else {
            problems.push(format!("alerts: rule {name} has no expr"));
            continue;
        };
        problems.extend(unknown(model, &format!("alerts: {name}"), expr));
    }
    problems
}

/// Checks a Grafana dashboard: panel targets (rows included) and `label_values` variables.
pub fn check_dashboard(model: &Model, dashboard: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let mut panels: Vec<&Value> = Vec::new();
    collect_panels(dashboard.get("panels"), &mut panels);
    if panels.is_empty() {
        problems.push("dashboard: no panels".into());
    }
    for panel in panels {
        let title = panel.get("title").and_then(Value::as_str).unwrap_or("?");
        for target in panel
            .get("targets")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(expr) = target.get("expr").and_then(Value::as_str) {
                problems.extend(unknown(model, &format!("dashboard: panel {title}"), expr));
            }
        }
    }
    for variable in dashboard
        .pointer("/templating/list")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let query = variable
            .get("query")
            .and_then(|query| query.as_str().or_else(|| query.get("query")?.as_str()));
        if let Some(metric) = query.and_then(promql::label_values_metric)
            && !model.metrics.contains(&metric)
        {
            problems.push(format!(
                "dashboard: variable {} uses unknown metric {metric}",
                variable.get("name").and_then(Value::as_str).unwrap_or("?")
            ));
        }
    }
    problems
}

fn collect_panels<'a>(panels: Option<&'a Value>, out: &mut Vec<&'a Value>) {
    for panel in panels.and_then(Value::as_array).into_iter().flatten() {
        out.push(panel);
        collect_panels(panel.get("panels"), out);
    }
}

fn unknown(model: &Model, context: &str, expr: &str) -> Vec<String> {
    let names = promql::metric_names(expr);
    let mut problems: Vec<String> = names
        .iter()
        .filter(|name| !model.metrics.contains(*name) && !SCRAPE_SERIES.contains(&name.as_str()))
        .map(|name| format!("{context}: metric {name} is not exported by any service"))
        .collect();
    if names.is_empty() {
        problems.push(format!("{context}: expression names no metric: {expr}"));
    }
    problems
}

/// Every alert has `annotations.runbook_url` = `docs/runbooks.md#<anchor>`,
/// and `runbooks_md` (the file's text) has a heading with that anchor.
pub fn check_runbooks(alerts: &Value, runbooks_md: &str) -> Vec<String> {
    let anchors = markdown_anchors(runbooks_md);
    let mut problems = Vec::new();
    for rule in alerts
        .get("groups")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|group| group.get("rules").and_then(Value::as_array))
        .flatten()
    {
        let Some(name) = rule.get("alert").and_then(Value::as_str) else {
            continue;
        };
        let Some(url) = rule
            .pointer("/annotations/runbook_url")
            .and_then(Value::as_str)
        else {
            problems.push(format!("alerts: {name} has no annotations.runbook_url"));
            continue;
        };
        match url
            .strip_prefix(RUNBOOKS)
            .and_then(|rest| rest.strip_prefix('#'))
        {
            None => problems.push(format!(
                "alerts: {name} runbook_url {url} is not {RUNBOOKS}#<anchor>"
            )),
            Some(anchor) if !anchors.contains(anchor) => problems.push(format!(
                "alerts: {name} runbook_url anchor #{anchor} is no heading of {RUNBOOKS}"
            )),
            Some(_) => {}
        }
    }
    problems
}

/// The anchors of a Markdown file's headings, as GitHub makes them: lower
/// case, spaces to `-`, punctuation other than `-` and `_` dropped.
pub fn markdown_anchors(markdown: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut anchors = BTreeSet::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let anchor: String = title
            .to_lowercase()
            .chars()
            .filter_map(|ch| match ch {
                ' ' => Some('-'),
                ch if ch.is_alphanumeric() || ch == '-' || ch == '_' => Some(ch),
                _ => None,
            })
            .collect();
        anchors.insert(anchor);
    }
    anchors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_as_github_makes_them() {
        let anchors = markdown_anchors(
            "# Runbooks\n## RoomOutboxRelayDown\n```\n# not a heading\n```\n### Broker offset gaps (repair)\n",
        );
        let expected: BTreeSet<String> = [
            "runbooks",
            "roomoutboxrelaydown",
            "broker-offset-gaps-repair",
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(anchors, expected);
    }
}
