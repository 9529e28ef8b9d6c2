//! Helpers of the console's charts and consumers tests: the console router
//! with the charts page beside it (served as one, with the same tokens, so
//! one login works for both), and where screenshots go.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use crate::common::console::{ADMIN, READER, groups};
use outbox_relay::access::{self, Access};
use outbox_relay::console::{self, ConsoleConfig, history::History};
use service_kit::Secret;
use sqlx::MySqlPool;
use std::path::PathBuf;

/// The console config of these tests.
pub fn config(pool: &MySqlPool) -> ConsoleConfig {
    ConsoleConfig {
        pool: pool.clone(),
        admin_token: Secret::new(ADMIN),
        read_token: Secret::new(READER),
        history: History::default(),
        broker_lag: false,
        groups: groups(),
        trace_url: None,
    }
}

/// The default gate with the tests' tokens (loopback hosts, no named operators).
pub fn access() -> Access {
    Access {
        credentials: access::Credentials {
            admin: Secret::new(ADMIN),
            read_only: Secret::new(READER),
            operators: access::operators::Operators::default(),
        },
        ..Access::default()
    }
}

/// The console and its charts page on a loopback port; the base URL.
pub async fn serve_with_charts(pool: &MySqlPool) -> String {
    let router =
        console::router(config(pool)).merge(console::charts::router(config(pool), access()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    base
}

/// Where the browser tests save their screenshots.
pub fn screenshots() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| testkit::source_tree::workspace_root().join("target"));
    target.join("console-screenshots")
}
