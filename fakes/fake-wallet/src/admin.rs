//! The admin HTTP surface, mirroring [`crate::FakeWalletHandle`]'s methods for
//! out-of-process tests and the local stack:
//! `GET /healthz`, `GET /admin/stats`, `POST|GET|DELETE /admin/faults`
//! (body: one [`FaultRule`]), `POST /admin/latency {"millis": n}`,
//! `POST /admin/balance {"user_id": "..", "balance": n}`,
//! `GET /admin/balance?user_id=..`.

use std::time::Duration;

use axum::extract::{Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use crate::Shared;
use crate::faults::FaultRule;
use crate::ledger::WalletStats;

/// The admin routes.
pub(crate) fn router(shared: Shared) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/admin/stats", get(stats))
        .route(
            "/admin/faults",
            post(add_fault).get(list_faults).delete(clear_faults),
        )
        .route("/admin/latency", post(set_latency))
        .route("/admin/balance", post(set_balance).get(get_balance))
        .with_state(shared)
}

async fn stats(State(shared): State<Shared>) -> Json<WalletStats> {
    Json(shared.lock().ledger.stats())
}

async fn add_fault(
    State(shared): State<Shared>,
    Json(rule): Json<FaultRule>,
) -> Json<Vec<FaultRule>> {
    let mut state = shared.lock();
    state.faults.add(rule);
    Json(state.faults.pending())
}

async fn list_faults(State(shared): State<Shared>) -> Json<Vec<FaultRule>> {
    Json(shared.lock().faults.pending())
}

async fn clear_faults(State(shared): State<Shared>) -> &'static str {
    shared.lock().faults.clear();
    "cleared"
}

#[derive(Debug, Deserialize)]
struct Latency {
    millis: u64,
}

async fn set_latency(State(shared): State<Shared>, Json(latency): Json<Latency>) -> &'static str {
    shared
        .lock()
        .faults
        .set_latency(Duration::from_millis(latency.millis));
    "ok"
}

#[derive(Debug, Deserialize)]
struct SetBalance {
    user_id: String,
    balance: i64,
}

async fn set_balance(State(shared): State<Shared>, Json(body): Json<SetBalance>) -> &'static str {
    shared
        .lock()
        .ledger
        .set_balance(&body.user_id, body.balance);
    "ok"
}

#[derive(Debug, Deserialize)]
struct BalanceQuery {
    user_id: String,
}

async fn get_balance(
    State(shared): State<Shared>,
    Query(query): Query<BalanceQuery>,
) -> Json<serde_json::Value> {
    let balance = shared.lock().ledger.balance(&query.user_id);
    Json(serde_json::json!({ "user_id": query.user_id, "balance": balance }))
}
