//! Reading a service's Prometheus `/metrics` text in tests. A series that
//! is not exposed fails the test, naming the series and showing the scrape:
//! a helper that read a missing metric as 0 would let an assertion like
//! "nothing was fenced" pass against a metric that was renamed or never
//! registered. A caller to whom "absent" legitimately means 0 — a labelled
//! family exposes no line until its first label set is recorded — says so
//! by calling [`value_or_zero`].
//!
//! A series is written as in PromQL without operators: `name`, or
//! `name{label="value",…}` to select the samples carrying those labels
//! (others may be present). Its value is the sum over every matching
//! sample, so `room_commands_total` adds up all its label sets.

/// Fetches the exposition text at `url` (the full `/metrics` URL).
///
/// # Panics
/// When the endpoint cannot be reached or does not answer 200.
pub async fn scrape(url: &str) -> String {
    let response = reqwest::get(url)
        .await
        .unwrap_or_else(|error| panic!("GET {url}: {error}"));
    assert!(
        response.status().is_success(),
        "GET {url}: {}",
        response.status()
    );
    response
        .text()
        .await
        .unwrap_or_else(|error| panic!("GET {url}: {error}"))
}

/// The sum of the samples of `series` in `text`; `None` when no sample
/// matches.
///
/// # Panics
/// When `series` is not a well-formed selector (a test bug).
pub fn find(text: &str, series: &str) -> Option<f64> {
    let (name, wanted) = parse_selector(series);
    let mut found = None;
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let Some((sample_name, labels, value)) = split_sample(line) else {
            continue;
        };
        if sample_name != name
            || !wanted
                .iter()
                .all(|pair| labels.iter().any(|label| label == pair))
        {
            continue;
        }
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("sample of {series} is not a number: {line}"));
        found = Some(found.unwrap_or(0.0) + value);
    }
    found
}

/// The sum of the samples of `series` in `text`.
///
/// # Panics
/// When no sample matches, naming `series` and showing `text`.
pub fn value(text: &str, series: &str) -> f64 {
    find(text, series).unwrap_or_else(|| panic!("no sample of {series} in the scrape:\n{text}"))
}

/// The sum of the samples of `series`, or 0 when none is exposed: only
/// for a labelled family that exposes nothing until its first label set is
/// recorded, where absence is the documented meaning of 0.
pub fn value_or_zero(text: &str, series: &str) -> f64 {
    find(text, series).unwrap_or(0.0)
}

/// [`scrape`] then [`value`]: fails when the series is missing.
pub async fn read(url: &str, series: &str) -> f64 {
    value(&scrape(url).await, series)
}

/// [`scrape`] then [`value_or_zero`].
pub async fn read_or_zero(url: &str, series: &str) -> f64 {
    value_or_zero(&scrape(url).await, series)
}

/// `name` and its `label="value"` pairs (as written, quotes included).
fn parse_selector(series: &str) -> (&str, Vec<&str>) {
    match series.split_once('{') {
        None => (series, Vec::new()),
        Some((name, rest)) => {
            let labels = rest
                .strip_suffix('}')
                .unwrap_or_else(|| panic!("series selector {series} lacks its closing brace"));
            let pairs = labels.split(',').filter(|pair| !pair.is_empty()).collect();
            (name, pairs)
        }
    }
}

/// A sample line as (name, `label="value"` pairs, value text). Label values
/// containing `,` or `}` are not split correctly; the services' labels are
/// identifiers.
fn split_sample(line: &str) -> Option<(&str, Vec<&str>, &str)> {
    let line = line.trim();
    if let Some((name, rest)) = line.split_once('{') {
        let (labels, value) = rest.split_once("} ")?;
        let value = value.split_whitespace().next()?;
        return Some((name, labels.split(',').collect(), value));
    }
    let (name, value) = line.split_once(' ')?;
    Some((name, Vec::new(), value.split_whitespace().next()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP room_reads_total Reads.\n\
        # TYPE room_reads_total counter\n\
        room_reads_total{call=\"GetRoom\",outcome=\"ok\"} 2\n\
        room_reads_total{call=\"Heartbeat\",outcome=\"ok\"} 3\n\
        room_reads_total_extra 100\n\
        room_forwarded_total 0\n\
        room_batch_sum 7.5\n";

    #[test]
    fn a_series_sums_its_matching_samples() {
        assert_eq!(value(TEXT, "room_reads_total"), 5.0);
        assert_eq!(value(TEXT, "room_reads_total{call=\"GetRoom\"}"), 2.0);
        assert_eq!(
            value(TEXT, "room_reads_total{outcome=\"ok\",call=\"Heartbeat\"}"),
            3.0
        );
        assert_eq!(value(TEXT, "room_batch_sum"), 7.5);
        assert_eq!(value(TEXT, "room_forwarded_total"), 0.0);
    }

    #[test]
    #[should_panic(expected = "no sample of room_fenced_total in the scrape")]
    fn a_missing_metric_fails_naming_it() {
        value(TEXT, "room_fenced_total");
    }

    #[test]
    #[should_panic(expected = "no sample of room_reads_total{call=\"Other\"}")]
    fn a_missing_label_set_fails_naming_it() {
        value(TEXT, "room_reads_total{call=\"Other\"}");
    }

    #[test]
    fn a_prefix_is_not_a_match_and_absence_is_zero_only_when_asked() {
        assert_eq!(find(TEXT, "room_reads"), None);
        assert_eq!(find(TEXT, "room_forwarded"), None);
        assert_eq!(value_or_zero(TEXT, "room_cells_loaded"), 0.0);
        assert_eq!(
            value_or_zero(TEXT, "room_reads_total{call=\"GetRoom\"}"),
            2.0
        );
    }
}
