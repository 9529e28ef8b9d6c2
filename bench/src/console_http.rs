//! The console as the bench reaches it: its settings (a bearer token, the
//! consumer groups), served the way the relay serves its admin port (a
//! thread of its own at the relay's default `admin_cpu_nice`, a pool of its
//! own of the default `admin_max_connections`: `outbox_relay::admin_port`),
//! and timed GETs over fresh connections — the page rows of
//! `console_scenarios` and `console_consumers`.

use crate::report::Row;
use outbox_relay::admin_port::AdminPort;
use outbox_relay::config::RelayServiceConfig;
use outbox_relay::console::{ConsoleConfig, history::History};
use outbox_schema::names;
use service_kit::{Secret, low_priority::Nice};
use sqlx::MySqlPool;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

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
        groups: groups(),
        trace_url: None,
    }
}

/// The consumer groups the bench's console shows.
pub fn groups() -> Vec<String> {
    [
        names::GROUP_IM_BRIDGE,
        names::GROUP_ACTIVITY,
        names::GROUP_NOTICE,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// A console being served; stops when dropped.
pub struct Served {
    /// `host:port` of the console.
    pub base: String,
    stop: CancellationToken,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The routes `routes` builds over their own pool to `database_url`,
/// served as the relay serves its admin port, on a loopback port.
pub async fn serve(
    database_url: &str,
    routes: impl FnOnce(MySqlPool) -> axum::Router + Send + 'static,
) -> anyhow::Result<Served> {
    let defaults = RelayServiceConfig::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = listener.local_addr()?.to_string();
    let (url, connections) = (database_url.to_owned(), defaults.admin_max_connections);
    let stop = CancellationToken::new();
    AdminPort {
        listener,
        tls: None,
        nice: Nice::new("admin_cpu_nice", defaults.admin_cpu_nice)?,
        pool: Box::new(move || {
            Ok(sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(connections)
                .connect_lazy(&url)?)
        }),
        routes: Box::new(routes),
    }
    .spawn(stop.clone())?;
    Ok(Served { base, stop })
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
