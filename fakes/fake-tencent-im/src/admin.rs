//! `/admin/*` JSON endpoints for tests and the local stack to inspect and steer the fake.
//!
//! They need no signature: the fake only ever listens on loopback or inside the local stack.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::App;
use crate::faults::FaultRule;
use crate::records::{GroupRecord, MessageFilter, RecordedMessage};
use crate::stats::Stats;

pub(crate) async fn messages(
    State(app): State<App>,
    Query(filter): Query<MessageFilter>,
) -> Json<Vec<RecordedMessage>> {
    Json(app.lock().messages(&filter))
}

pub(crate) async fn groups(State(app): State<App>) -> Json<Vec<GroupRecord>> {
    Json(app.lock().groups.values().cloned().collect())
}

pub(crate) async fn stats(State(app): State<App>) -> Json<Stats> {
    Json(app.lock().stats.clone())
}

/// One rule or a list of rules; both shapes are accepted so curl one-liners stay short.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum FaultRules {
    Many(Vec<FaultRule>),
    One(FaultRule),
}

pub(crate) async fn add_faults(
    State(app): State<App>,
    Json(rules): Json<FaultRules>,
) -> Json<Value> {
    let rules = match rules {
        FaultRules::Many(rules) => rules,
        FaultRules::One(rule) => vec![rule],
    };
    let mut state = app.lock();
    state.faults.extend(rules);
    tracing::info!(pending = state.faults.len(), "fake im faults queued");
    Json(json!({ "pending": state.faults.len() }))
}

pub(crate) async fn list_faults(State(app): State<App>) -> Json<Vec<FaultRule>> {
    Json(app.lock().faults.clone())
}

pub(crate) async fn clear_faults(State(app): State<App>) -> StatusCode {
    app.lock().faults.clear();
    StatusCode::NO_CONTENT
}

/// Body of `POST /admin/rate_limit` and `POST /admin/group_rate_limit`, and their answer
/// (the limit now in force); `null` or 0 removes the limit.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct RateLimitBody {
    #[serde(default)]
    per_second: Option<u32>,
}

pub(crate) async fn set_rate_limit(
    State(app): State<App>,
    Json(body): Json<RateLimitBody>,
) -> Json<RateLimitBody> {
    let mut state = app.lock();
    state.set_rate_limit(body.per_second);
    tracing::info!(per_second = ?state.rate_limit, "fake im rate limit set");
    Json(RateLimitBody {
        per_second: state.rate_limit,
    })
}

pub(crate) async fn set_group_rate_limit(
    State(app): State<App>,
    Json(body): Json<RateLimitBody>,
) -> Json<RateLimitBody> {
    let per_second = app.lock().set_group_rate_limit(body.per_second);
    tracing::info!(?per_second, "fake im group message limit set");
    Json(RateLimitBody { per_second })
}

pub(crate) async fn reset(State(app): State<App>) -> StatusCode {
    app.reset();
    tracing::info!("fake im state reset");
    StatusCode::NO_CONTENT
}

pub(crate) async fn healthz() -> &'static str {
    "ok"
}
