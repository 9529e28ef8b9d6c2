//! Line charts as inline SVG, written with maud like every other page part,
//! so each label is escaped: no script and no inline style (the console's
//! Content-Security-Policy forbids both), colours are presentation
//! attributes. Each chart has a y axis with three labelled ticks in its
//! unit, an x axis in minutes before now, and a legend.

use maud::{Markup, html};

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 220.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 20.0;
const BOTTOM: f64 = 40.0;

/// Line colours, in series order (readable on light and dark backgrounds).
const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

/// The unit of a chart's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Events per second.
    PerSecond,
    /// Milliseconds (labelled in ms, s or min).
    Millis,
}

impl Unit {
    /// `value` as an axis label.
    pub fn label(self, value: f64) -> String {
        match self {
            Unit::PerSecond if value >= 10.0 || value == 0.0 => format!("{value:.0}/s"),
            Unit::PerSecond => format!("{value:.2}/s"),
            Unit::Millis if value >= 120_000.0 => format!("{:.0} min", value / 60_000.0),
            Unit::Millis if value >= 2_000.0 => format!("{:.1} s", value / 1_000.0),
            Unit::Millis if value < 10.0 && value.fract() != 0.0 => format!("{value:.1} ms"),
            Unit::Millis => format!("{value:.0} ms"),
        }
    }

    /// The lowest top tick: a millisecond chart spans at least 2 ms, so an
    /// empty or sub-millisecond chart's ticks read 0, 1 and 2 ms instead of
    /// a middle tick rounded to "0 ms".
    fn least_top(self) -> f64 {
        match self {
            Unit::PerSecond => 0.0,
            Unit::Millis => 2.0,
        }
    }
}

/// One line: its legend label and a value per point (None: a gap).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The legend text.
    pub label: String,
    /// Oldest point first.
    pub values: Vec<Option<f64>>,
}

/// A chart: title, unit and lines over `minutes` minutes ending now.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Its title (also the SVG's accessible name).
    pub title: String,
    /// The values' unit.
    pub unit: Unit,
    /// The lines.
    pub series: Vec<Series>,
    /// The minutes the x axis spans.
    pub minutes: u32,
}

/// The smallest "round" number (1, 2 or 5 × 10ⁿ) at or above `value`, so
/// the top tick is a readable label; 1 for an empty chart.
pub fn nice_ceiling(value: f64) -> f64 {
    if value.is_nan() || value <= 0.0 {
        return 1.0;
    }
    let magnitude = 10_f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|factor| factor * magnitude)
        .find(|candidate| *candidate >= value)
        .unwrap_or(10.0 * magnitude)
}

/// The polylines of `values` (one per run without gaps) scaled to the plot.
fn segments(values: &[Option<f64>], top: f64) -> Vec<String> {
    let plot_width = WIDTH - LEFT - RIGHT;
    let plot_height = HEIGHT - TOP - BOTTOM;
    let span = values.len().saturating_sub(1).max(1) as f64;
    let mut runs = Vec::new();
    let mut current = String::new();
    for (index, value) in values.iter().enumerate() {
        match value {
            Some(value) => {
                let x = LEFT + plot_width * index as f64 / span;
                let y = TOP + plot_height * (1.0 - (value / top).clamp(0.0, 1.0));
                if !current.is_empty() {
                    current.push(' ');
                }
                current.push_str(&format!("{x:.1},{y:.1}"));
            }
            None if !current.is_empty() => runs.push(std::mem::take(&mut current)),
            None => {}
        }
    }
    if !current.is_empty() {
        runs.push(current);
    }
    runs
}

/// The chart as an `<svg>` element.
pub fn render(chart: &Chart) -> Markup {
    let highest = chart
        .series
        .iter()
        .flat_map(|series| series.values.iter().flatten())
        .fold(0.0_f64, |max, value| max.max(*value));
    let top = nice_ceiling(highest.max(chart.unit.least_top()));
    let empty = chart
        .series
        .iter()
        .all(|series| series.values.iter().all(Option::is_none));
    let bottom_y = HEIGHT - BOTTOM;
    let right_x = WIDTH - RIGHT;
    let ticks = [0.0, top / 2.0, top];
    let minutes = f64::from(chart.minutes);
    let x_ticks = [60.0, 45.0, 30.0, 15.0, 0.0].map(|before| before * minutes / 60.0);
    html! {
        figure class="chart" {
            svg xmlns="http://www.w3.org/2000/svg" viewBox={ "0 0 " (WIDTH) " " (HEIGHT) }
                width=(WIDTH) height=(HEIGHT) role="img" aria-label=(chart.title) {
                title { (chart.title) }
                line x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(bottom_y) stroke="#888" {}
                line x1=(LEFT) y1=(bottom_y) x2=(right_x) y2=(bottom_y) stroke="#888" {}
                @for tick in ticks {
                    @let y = TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - tick / top);
                    line x1=(LEFT) y1=(y) x2=(right_x) y2=(y) stroke="#888" stroke-opacity="0.25" {}
                    text class="y-tick" x=(LEFT - 6.0) y=(y + 4.0) text-anchor="end" font-size="11" fill="currentColor" {
                        (chart.unit.label(tick))
                    }
                }
                @for before in x_ticks {
                    @let x = right_x - (right_x - LEFT) * before / minutes.max(1.0);
                    text class="x-tick" x=(x) y=(bottom_y + 16.0) text-anchor="middle" font-size="11" fill="currentColor" {
                        @if before == 0.0 { "now" } @else { "−" (before) " min" }
                    }
                }
                @if empty {
                    text class="no-data" x=((LEFT + right_x) / 2.0) y=((TOP + bottom_y) / 2.0) text-anchor="middle"
                        font-size="13" fill="currentColor" { "no data in this hour" }
                }
                @for (index, series) in chart.series.iter().enumerate() {
                    @let colour = COLOURS[index % COLOURS.len()];
                    @for points in segments(&series.values, top) {
                        polyline class="series" points=(points) fill="none" stroke=(colour) stroke-width="2" {}
                    }
                    @let legend_x = LEFT + 10.0 + 190.0 * index as f64;
                    rect x=(legend_x) y=(HEIGHT - 14.0) width="12" height="4" fill=(colour) {}
                    text class="legend" x=(legend_x + 16.0) y=(HEIGHT - 9.0) font-size="11" fill="currentColor" {
                        (series.label)
                    }
                }
            }
            figcaption { (chart.title) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_top_tick_is_a_round_number() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(0.3), 0.5);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(120.0), 200.0);
        assert_eq!(nice_ceiling(2_000.0), 2_000.0);
    }

    #[test]
    fn gaps_split_a_line_and_values_are_scaled() {
        let runs = segments(&[Some(0.0), Some(1.0), None, Some(0.5)], 1.0);
        assert_eq!(runs.len(), 2);
        assert_eq!(
            runs[0],
            format!(
                "{LEFT:.1},{:.1} {:.1},{TOP:.1}",
                HEIGHT - BOTTOM,
                LEFT + (WIDTH - LEFT - RIGHT) / 3.0
            )
        );
        assert!(segments(&[None, None], 1.0).is_empty());
    }

    #[test]
    fn labels_are_escaped_and_carry_units() {
        let chart = Chart {
            title: "lag <script>".into(),
            unit: Unit::Millis,
            series: vec![Series {
                label: "g\"><script>alert(1)</script>".into(),
                values: vec![Some(1_500.0), Some(90_000.0)],
            }],
            minutes: 60,
        };
        let svg = render(&chart).into_string();
        assert!(!svg.contains("<script>"), "{svg}");
        assert!(svg.contains("&lt;script&gt;"), "{svg}");
        assert!(svg.contains("100.0 s") && svg.contains("0 ms"), "{svg}");
        assert!(svg.contains("−60 min") && svg.contains("now"), "{svg}");
        assert_eq!(Unit::PerSecond.label(0.25), "0.25/s");
        assert_eq!(Unit::Millis.label(2.5), "2.5 ms");
        assert_eq!(Unit::Millis.label(300_000.0), "5 min");
    }

    #[test]
    fn an_empty_chart_says_so_and_its_ticks_differ() {
        let chart = |values: Vec<Option<f64>>| Chart {
            title: "lag".into(),
            unit: Unit::Millis,
            series: vec![Series {
                label: "average".into(),
                values,
            }],
            minutes: 60,
        };
        let ticks = |svg: &str| -> Vec<String> {
            svg.split("class=\"y-tick\"")
                .skip(1)
                .map(|rest| rest[rest.find('>').unwrap() + 1..rest.find('<').unwrap()].to_owned())
                .collect()
        };
        let empty = render(&chart(vec![None; 60])).into_string();
        assert_eq!(ticks(&empty), ["0 ms", "1 ms", "2 ms"], "{empty}");
        assert!(empty.contains("no data in this hour"), "{empty}");
        let small = render(&chart(vec![Some(0.4), Some(0.2)])).into_string();
        assert_eq!(ticks(&small), ["0 ms", "1 ms", "2 ms"], "{small}");
        assert!(!small.contains("no data"), "{small}");
        let ten = render(&chart(vec![Some(4.2)])).into_string();
        assert_eq!(ticks(&ten), ["0 ms", "2.5 ms", "5 ms"], "{ten}");
    }
}
