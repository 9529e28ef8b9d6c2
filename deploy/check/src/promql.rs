//! Metric names referenced by a PromQL expression, found without a PromQL
//! parser: strings, label matchers (`{…}`), range/subquery brackets (`[…]`) and
//! label lists after `by`/`without`/`on`/`ignoring`/`group_left`/`group_right`
//! are removed; what is left that is an identifier, not a function call, not a
//! keyword (aggregation operators included) and not a number is a metric name.

use std::collections::BTreeSet;

const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
    // Aggregation operators, which may be followed by `by (…)` before their `(`.
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

const LABEL_LIST_WORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names `expr` selects.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let stripped = strip_groups(expr);
    let chars: Vec<char> = stripped.chars().collect();
    let mut names = BTreeSet::new();
    let mut index = 0;
    let mut skip_next_paren = false;
    while index < chars.len() {
        let ch = chars[index];
        if ch.is_ascii_alphabetic() || ch == '_' || ch == ':' {
            let start = index;
            while index < chars.len()
                && (chars[index].is_ascii_alphanumeric()
                    || chars[index] == '_'
                    || chars[index] == ':')
            {
                index += 1;
            }
            let word: String = chars[start..index].iter().collect();
            let mut next = index;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let is_call = next < chars.len() && chars[next] == '(';
            let lower = word.to_ascii_lowercase();
            if LABEL_LIST_WORDS.contains(&lower.as_str()) {
                skip_next_paren = true;
            } else if !is_call && !KEYWORDS.contains(&lower.as_str()) && !is_number_like(&word) {
                names.insert(word);
            }
            continue;
        }
        if ch == '(' && skip_next_paren {
            // A label list: skip to its closing parenthesis.
            while index < chars.len() && chars[index] != ')' {
                index += 1;
            }
            skip_next_paren = false;
        } else if ch.is_ascii_digit() || ch == '.' {
            // A number such as 1e-9 or 0.5: skip its exponent letters too.
            while index + 1 < chars.len()
                && (chars[index + 1].is_ascii_alphanumeric()
                    || chars[index + 1] == '.'
                    || ((chars[index + 1] == '-' || chars[index + 1] == '+')
                        && matches!(chars[index], 'e' | 'E')))
            {
                index += 1;
            }
        } else if !ch.is_whitespace() {
            skip_next_paren = false;
        }
        index += 1;
    }
    names
}

fn is_number_like(word: &str) -> bool {
    word.eq_ignore_ascii_case("e")
}

/// Removes string literals and the contents of `{…}` and `[…]`.
fn strip_groups(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut depth_brace = 0usize;
    let mut depth_bracket = 0usize;
    let mut quote: Option<char> = None;
    for ch in expr.chars() {
        if let Some(open) = quote {
            if ch == open {
                quote = None;
            }
            continue;
        }
        match ch {
            '"' | '\'' | '`' => quote = Some(ch),
            '{' => depth_brace += 1,
            '}' => depth_brace = depth_brace.saturating_sub(1),
            '[' => depth_bracket += 1,
            ']' => depth_bracket = depth_bracket.saturating_sub(1),
            _ if depth_brace == 0 && depth_bracket == 0 => out.push(ch),
            _ => {}
        }
    }
    out
}

/// The metric named by a Grafana `label_values(metric, label)` variable query.
pub fn label_values_metric(query: &str) -> Option<String> {
    let inner = query.trim().strip_prefix("label_values(")?;
    let first = inner.split([',', ')']).next()?;
    let name = first.split('{').next()?.trim();
    (!name.is_empty()).then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(expr: &str) -> Vec<String> {
        metric_names(expr).into_iter().collect()
    }

    #[test]
    fn finds_metrics_not_labels_functions_or_numbers() {
        assert_eq!(
            names(
                "histogram_quantile(0.99, sum by (consumer_group, le) (rate(consumer_lag_seconds_bucket{consumer_group=~\"$g\"}[5m]))) > 30"
            ),
            ["consumer_lag_seconds_bucket"]
        );
        assert_eq!(
            names("sum(rate(a_total[5m])) / clamp_min(sum(rate(b_total[5m])), 1e-9) > 0.05"),
            ["a_total", "b_total"]
        );
        assert_eq!(
            names("max(x) > 10 and deriv(max(x)[10m:1m]) > 0 unless on (job) y"),
            ["x", "y"]
        );
        assert_eq!(
            names("room_outbox_owned_shards"),
            ["room_outbox_owned_shards"]
        );
    }

    #[test]
    fn label_values_queries() {
        assert_eq!(
            label_values_metric("label_values(consumer_messages_consumed_total, consumer_group)")
                .as_deref(),
            Some("consumer_messages_consumed_total")
        );
        assert_eq!(label_values_metric("up"), None);
    }
}
