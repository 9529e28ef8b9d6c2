//! Hand-written SVG charts of what the scenarios collect (latency histograms,
//! throughput over time), written next to `results.json` under
//! `target/bench/`. Plain SVG strings on purpose: a plotting crate would cost
//! the bench more compile time than these two chart shapes are worth.

use hdrhistogram::Histogram;
use std::{fmt::Write as _, path::Path};

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 360.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

/// One named line of (x, y) points.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points in x order.
    pub points: Vec<(f64, f64)>,
}

/// A line chart of `series` written to `path`.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> anyhow::Result<()> {
    let points = series.iter().flat_map(|line| line.points.iter());
    let x_max = points.clone().map(|point| point.0).fold(0.0, f64::max);
    let y_max = points.map(|point| point.1).fold(0.0, f64::max);
    let (x_max, y_max) = (nice(x_max), nice(y_max));
    let mut svg = frame(title, x_label, y_label, x_max, y_max);
    for (index, line) in series.iter().enumerate() {
        let color = COLORS[index % COLORS.len()];
        let coords: Vec<String> = line
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x, x_max), sy(y, y_max)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>"#,
            coords.join(" ")
        );
        legend(&mut svg, index, &line.label, color);
    }
    svg.push_str("</svg>\n");
    write(path, &svg)
}

/// A latency histogram: each series' counts in equal-width buckets from 0 to
/// the largest p99.9 of the series (the tail beyond is folded into the last
/// bucket so one outlier cannot flatten the chart), drawn as step lines.
pub fn latency_histogram(
    path: &Path,
    title: &str,
    series: &[(String, &Histogram<u64>)],
) -> anyhow::Result<()> {
    const BUCKETS: u64 = 60;
    let top = series
        .iter()
        .map(|(_, histogram)| histogram.value_at_quantile(0.999))
        .max()
        .unwrap_or(1)
        .max(1);
    let width = top.div_ceil(BUCKETS).max(1);
    let lines: Vec<Series> = series
        .iter()
        .map(|(label, histogram)| {
            let mut counts = vec![0u64; BUCKETS as usize];
            for value in histogram.iter_recorded() {
                let bucket = (value.value_iterated_to() / width).min(BUCKETS - 1);
                counts[bucket as usize] += value.count_at_value();
            }
            // Steps: each bucket is a flat segment from its start to its end.
            let points = counts
                .iter()
                .enumerate()
                .flat_map(|(bucket, &count)| {
                    let start = (bucket as u64 * width) as f64;
                    [(start, count as f64), (start + width as f64, count as f64)]
                })
                .collect();
            Series {
                label: format!(
                    "{label} (p50 {} ms, p99 {} ms)",
                    histogram.value_at_quantile(0.5),
                    histogram.value_at_quantile(0.99)
                ),
                points,
            }
        })
        .collect();
    line_chart(path, title, "latency (ms)", "events", &lines)
}

/// The axis ceiling: `value` rounded up to 1, 2 or 5 × a power of ten.
fn nice(value: f64) -> f64 {
    if value <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|step| step * magnitude)
        .find(|ceiling| *ceiling >= value)
        .unwrap_or(10.0 * magnitude)
}

fn sx(x: f64, x_max: f64) -> f64 {
    LEFT + x / x_max * (WIDTH - LEFT - RIGHT)
}

fn sy(y: f64, y_max: f64) -> f64 {
    HEIGHT - BOTTOM - y / y_max * (HEIGHT - TOP - BOTTOM)
}

/// Background, title, axes with five ticks each, axis labels.
fn frame(title: &str, x_label: &str, y_label: &str, x_max: f64, y_max: f64) -> String {
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="11">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="20" text-anchor="middle" font-size="14">{}</text>
"#,
        WIDTH / 2.0,
        escape(title)
    );
    let (x0, y0, x1, y1) = (LEFT, HEIGHT - BOTTOM, WIDTH - RIGHT, TOP);
    let _ = writeln!(
        svg,
        r#"<path d="M{x0},{y1} V{y0} H{x1}" fill="none" stroke="black"/>"#
    );
    for tick in 0..=5 {
        let fraction = f64::from(tick) / 5.0;
        let (x, y) = (sx(fraction * x_max, x_max), sy(fraction * y_max, y_max));
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{}" stroke="black"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
            y0 + 4.0,
            y0 + 16.0,
            label(fraction * x_max)
        );
        let _ = writeln!(
            svg,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 6.0,
            y + 4.0,
            label(fraction * y_max)
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (x0 + x1) / 2.0,
        HEIGHT - 12.0,
        escape(x_label)
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(16,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
        (y0 + y1) / 2.0,
        escape(y_label)
    );
    svg
}

fn legend(svg: &mut String, index: usize, label: &str, color: &str) {
    let y = TOP + 6.0 + 16.0 * index as f64;
    let _ = writeln!(
        svg,
        r#"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
        WIDTH - 300.0,
        WIDTH - 280.0,
        WIDTH - 274.0,
        y + 4.0,
        escape(label)
    );
}

fn label(value: f64) -> String {
    if value >= 10_000.0 {
        format!("{:.0}k", value / 1_000.0)
    } else if value >= 10.0 || value == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn write(path: &Path, svg: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, svg)?;
    println!("  plot written to {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_well_formed_svg() {
        let dir = std::env::temp_dir().join(format!("bench-plots-{}", std::process::id()));
        let mut histogram = Histogram::<u64>::new(3).unwrap();
        for value in [1u64, 2, 2, 3, 40, 500] {
            histogram.record(value).unwrap();
        }
        latency_histogram(&dir.join("h.svg"), "a <b>", &[("x".into(), &histogram)]).unwrap();
        let text = std::fs::read_to_string(dir.join("h.svg")).unwrap();
        assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
        assert!(text.contains("a &lt;b&gt;"));
        assert_eq!(nice(0.0), 1.0);
        assert_eq!(nice(730.0), 1_000.0);
        assert_eq!(nice(31_000.0), 50_000.0);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
