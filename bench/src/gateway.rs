//! A gateway that follows room-service's retry contract (docs/gateway.md):
//! every attempt goes to a random instance, and a failed attempt is retried
//! with the same request, so the same `command_id` (a new one is never made
//! up), until the retry budget is spent:
//!
//! - a refusal from room-service (it carries `google.rpc.ErrorInfo`) is
//!   retried only when it carries `google.rpc.RetryInfo`, after its
//!   `retry_delay`;
//! - a status without ErrorInfo (an older holder's, or the network's) is
//!   retried when it is `UNAVAILABLE`, `ABORTED` or `RESOURCE_EXHAUSTED`, or
//!   a failure on the client's side: a refused or broken connection (tonic
//!   reports one broken mid-call as `UNKNOWN` with the I/O error as its
//!   source) or the gateway's own attempt deadline
//!   ([`RetryPolicy::attempt_timeout`]). A client-side failure is retried
//!   after 100 ms on another instance, as the contract says; a retryable
//!   status of an older holder after 100 ms doubling up to 2 s.
//!
//! The budget is time ([`RetryPolicy::budget`], 45 s), not docs/gateway.md's
//! three retries, so that a scenario sees when every call got its answer;
//! [`Called::attempts`] tells how many calls needed more than three.

use crate::room_load::{Target, served_by};
use rand::{Rng, rngs::StdRng};
use std::{
    future::Future,
    time::{Duration, Instant},
};
use tonic::{Code, Response, Status, transport::Channel};
use tonic_types::StatusExt;

type Client = hyapp_api::room::room_service_client::RoomServiceClient<Channel>;

/// How long and how often the gateway retries one call.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Longest from the first attempt to the last.
    pub budget: Duration,
    /// Wait after a client-side failure, and the first default backoff of
    /// a retryable status without ErrorInfo (which doubles per retry).
    pub first_backoff: Duration,
    /// Largest default backoff.
    pub max_backoff: Duration,
    /// The gateway's own deadline of one attempt.
    pub attempt_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            budget: Duration::from_secs(45),
            first_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            attempt_timeout: Duration::from_secs(10),
        }
    }
}

/// The final answer of one call.
#[derive(Debug, Clone)]
pub enum Answer {
    /// Served, by the node `x-room-served-by` names.
    Ok {
        /// The serving node, when the reply said.
        served_by: Option<String>,
    },
    /// A final refusal, e.g. `FailedPrecondition/GIFT_COMPENSATED`.
    Refused(String),
    /// Still refused when the retry budget ran out; the last refusal.
    GaveUp(String),
}

/// One call through the gateway.
#[derive(Debug, Clone)]
pub struct Called {
    /// Its final answer.
    pub answer: Answer,
    /// Attempts made, the first included.
    pub attempts: u32,
    /// Retries whose delay came from the refusal's RetryInfo.
    pub retry_info_delays: u32,
    /// When the final answer arrived.
    pub answered: Instant,
}

/// Whether a status without ErrorInfo is retried with the same command id.
pub fn retryable(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable | Code::Aborted | Code::ResourceExhausted
    )
}

/// The refusal's reason: `ErrorInfo.reason` from the status details, else
/// room-service's `x-error-reason` metadata; empty when neither is there.
pub fn reason(status: &Status) -> String {
    if let Some(info) = status.get_error_details().error_info() {
        return info.reason.clone();
    }
    status
        .metadata()
        .get("x-error-reason")
        .and_then(|value| value.to_str().ok())
        .map(str::to_uppercase)
        .unwrap_or_default()
}

/// `Code/REASON` of a refusal, for tallies.
pub fn describe(status: &Status) -> String {
    let reason = reason(status);
    if reason.is_empty() {
        format!("{:?}", status.code())
    } else {
        format!("{:?}/{reason}", status.code())
    }
}

/// Sends one call through the gateway: `send` makes the same request on the
/// client it is given; each attempt goes to an instance of `targets` picked
/// with `rng`.
pub async fn call<T, F, Fut>(
    targets: &[Target],
    rng: &mut StdRng,
    policy: &RetryPolicy,
    mut send: F,
) -> Called
where
    F: FnMut(Client) -> Fut,
    Fut: Future<Output = Result<Response<T>, Status>>,
{
    let began = Instant::now();
    let mut attempts = 0;
    let mut retry_info_delays = 0;
    let mut backoff = policy.first_backoff;
    let mut avoid = None;
    loop {
        attempts += 1;
        let pick = match avoid {
            // Another instance than the one whose connection failed.
            Some(failed) if targets.len() > 1 => {
                (failed + rng.random_range(1..targets.len())) % targets.len()
            }
            _ => rng.random_range(0..targets.len()),
        };
        let target = &targets[pick];
        let sent = tokio::time::timeout(policy.attempt_timeout, send(target.client.clone())).await;
        let gateway_timeout = sent.is_err();
        let status = match sent {
            Ok(Ok(reply)) => {
                return Called {
                    answer: Answer::Ok {
                        served_by: served_by(reply.metadata()).map(str::to_owned),
                    },
                    attempts,
                    retry_info_delays,
                    answered: Instant::now(),
                };
            }
            Ok(Err(status)) => status,
            Err(_) => Status::deadline_exceeded("the gateway's attempt deadline passed"),
        };
        let details = status.get_error_details();
        // A server's answer has no source: this failed on the client's side.
        let local = gateway_timeout || std::error::Error::source(&status).is_some();
        avoid = local.then_some(pick);
        let delay = if details.error_info().is_some() {
            details.retry_info().map(|info| {
                retry_info_delays += 1;
                info.retry_delay.unwrap_or_default()
            })
        } else if local {
            Some(policy.first_backoff)
        } else if retryable(status.code()) {
            let delay = backoff;
            backoff = (backoff * 2).min(policy.max_backoff);
            Some(delay)
        } else {
            None
        };
        let Some(delay) = delay else {
            return Called {
                answer: Answer::Refused(describe(&status)),
                attempts,
                retry_info_delays,
                answered: Instant::now(),
            };
        };
        if began.elapsed() + delay > policy.budget {
            return Called {
                answer: Answer::GaveUp(describe(&status)),
                attempts,
                retry_info_delays,
                answered: Instant::now(),
            };
        }
        // The contract's wait before the retry, not a stand-in for a signal.
        tokio::time::sleep(delay).await;
    }
}
