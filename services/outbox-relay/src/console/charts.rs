//! `GET /console/charts`: the whole fleet's last hour as server-rendered SVG
//! charts — publishes per second, commit → publish lag, and each consumer
//! group's commit → applied lag — with no script, so the console's strict
//! Content-Security-Policy holds.
//!
//! The numbers come from the shared MySQL, not from the serving relay's
//! memory (`history`, which only knows this instance) nor from each
//! instance's admin endpoint: the tables every relay and consumer writes
//! already hold the fleet's history, and the console then needs no route to
//! the other instances ([`sample`] says how it is read in bounded,
//! primary-key statements). The groups are the timeline's
//! (`ConsoleConfig::groups`, declared once in `outbox_schema::groups`).

pub mod sample;
pub mod svg;

use super::{Console, consumption, refresh::Live};
use crate::access::Client;
use axum::{
    Extension, Router,
    extract::State,
    http::{HeaderMap, Uri},
    response::Response,
    routing::get,
};
use maud::{Markup, html};
use sample::Window;
use svg::{Chart, Series, Unit};

/// The charts' routes, merged into the console's router
/// (`console::router_with`), behind its gate like every other page.
pub(super) fn routes() -> Router<Console> {
    Router::new().route("/console/charts", get(charts))
}

/// A live page: it refreshes itself like the overview (`refresh`).
async fn charts(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let live = Live::of(&headers, uri);
    let session = match console.session(&headers, client).await {
        Ok(session) => session,
        Err(refusal) => return refusal,
    };
    let columns = consumption::columns(&console.config.groups);
    let now = service_kit::time::now_ms();
    let result = sample::window(&console.config.pool, &columns, now)
        .await
        .map(|window| page(&window));
    console.render_live(&session, "Fleet charts (last hour)", &live, result)
}

/// The three charts and how they were read.
pub fn page(window: &Window) -> Markup {
    let minutes = u32::try_from(sample::BUCKETS).unwrap_or(60);
    let publishes = Chart {
        title: "Publishes per second, whole fleet".into(),
        unit: Unit::PerSecond,
        series: vec![Series {
            label: "published/s".into(),
            values: window.publishes_per_s.iter().copied().map(Some).collect(),
        }],
        minutes,
    };
    let publish_lag = Chart {
        title: "Commit → publish lag (room chain; wake-ups excluded)".into(),
        unit: Unit::Millis,
        series: vec![
            average_of("average", &window.publish_lag_ms),
            maximum_of("max", &window.publish_lag_ms),
        ],
        minutes,
    };
    let group_lag = Chart {
        title: "Commit → applied lag per consumer group (average)".into(),
        unit: Unit::Millis,
        series: window
            .groups
            .iter()
            .map(|group| average_of(&group.name, &group.lag_ms))
            .collect(),
        minutes,
    };
    html! {
        p class="muted" id="charts-source" {
            "Read from the shared MySQL (room_outbox and consumer_dedup), so every relay and \
             consumer instance counts. One point per minute; "
            @if window.step == 1 {
                "exact: all " (window.sampled) " rows of the window read."
            } @else {
                "estimated from " (window.sampled) " rows (every " (window.step) "th id)."
            }
        }
        (svg::render(&publishes))
        (svg::render(&publish_lag))
        (svg::render(&group_lag))
        table id="group-pending" {
            tr { th { "group" } th { "events of the hour it handles, not applied yet" } }
            @for group in &window.groups {
                tr { td { (group.name) } td { (group.not_applied) } }
            }
        }
        p { a href="/console" { "Back to the overview" } }
    }
}

fn average_of(label: &str, values: &[Option<(f64, f64)>]) -> Series {
    Series {
        label: label.to_owned(),
        values: values
            .iter()
            .map(|point| point.map(|(avg, _)| avg))
            .collect(),
    }
}

fn maximum_of(label: &str, values: &[Option<(f64, f64)>]) -> Series {
    Series {
        label: label.to_owned(),
        values: values
            .iter()
            .map(|point| point.map(|(_, max)| max))
            .collect(),
    }
}
