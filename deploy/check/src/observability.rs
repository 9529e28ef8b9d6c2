//! `deploy/prometheus/alerts.yml` and `deploy/grafana/*.json`: every metric an
//! alert expression, panel query or template variable names must be one the
//! services expose.

use crate::{Model, promql};
use serde_json::Value;

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
        .filter(|name| !model.metrics.contains(*name))
        .map(|name| format!("{context}: metric {name} is not exported by any service"))
        .collect();
    if names.is_empty() {
        problems.push(format!("{context}: expression names no metric: {expr}"));
    }
    problems
}
