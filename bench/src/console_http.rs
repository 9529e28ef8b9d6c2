//! The console as the bench reaches it: its settings (a bearer token, the
//! consumer groups), served on a loopback port, and timed GETs over fresh
//! connections — the page rows of `console_scenarios` and
//! `console_consumers`.

use crate::report::Row;
use outbox_relay::console::{ConsoleConfig, history::History};
use outbox_schema::names;
use service_kit::Secret;
use sqlx::MySqlPool;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "bench-console-token-0123456789abcdef";
/// GETs per page.
const REPEATS: usize = 20;

/// The console's settings of the bench over `pool`: its token, the
/// consumer groups, no broker lag, no trace link.
pub fn console_config(pool: &MySqlPool) -> ConsoleConfig {
    ConsoleConfig {
        pool: pool.clone(),
        admin_token: Secret::new(TOKEN),
        read_token: Secret::default(),
        history: History::default(),
        broker_lag: false,
        groups: vec![
            names::GROUP_IM_BRIDGE.to_owned(),
            names::GROUP_ACTIVITY.to_owned(),
            names::GROUP_NOTICE.to_owned(),
        ],
        trace_url: None,
    }
}

/// `router` served on a loopback port; its address.
pub async fn serve(router: axum::Router) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(addr.to_string())
}

/// One GET with the bearer token over a fresh connection; the status code.
pub async fn get(addr: &str, path: &str) -> anyhow::Result<u16> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let head = String::from_utf8_lossy(&response[..response.len().min(16)]).into_owned();
    head.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no HTTP status in {head:?}"))
}

/// The median of [`REPEATS`] loads of `page`, each doing its work (each
/// must answer 200);
/// `note` says what the page read.
pub async fn page_row(base: &str, page: &str, note: &str) -> anyhow::Result<Row> {
    let mut times = Vec::with_capacity(REPEATS);
    // Each load its own query string: the console keeps a copy of a live
    // page for a second, and a copy would time nothing.
    let separator = if page.contains('?') { '&' } else { '?' };
    for load in 0..REPEATS {
        let started = Instant::now();
        let status = get(base, &format!("{page}{separator}load={load}")).await?;
        times.push(started.elapsed().as_secs_f64() * 1_000.0);
        anyhow::ensure!(status == 200, "{page} answered {status}");
    }
    times.sort_by(f64::total_cmp);
    Ok(Row {
        scenario: format!("console page {page}"),
        metric: "ms (median)".into(),
        measured: times[times.len() / 2],
        target: None,
        baseline: None,
        ratio: None,
        pass: None,
        note: format!("max {:.1} ms of {REPEATS}; {note}", times[times.len() - 1]),
    })
}
