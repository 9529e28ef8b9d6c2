//! Room service: the gateway's gRPC API over the Room Cell and the writer of
//! the transactional outbox.
//!
//! A write command is validated (`validate`), forwarded once to the instance
//! holding the room's lease if that is another one (`forward`), queued on its
//! room's actor (`cells`), checked for idempotency, applied to a clone of the room state,
//! charged to the wallet for gifts, and committed with its outbox rows in one
//! MySQL transaction (`pipeline`, `mutation`, `store`); projections and the
//! relay nudge follow in Redis (`redis`). The reply never waits for IM,
//! activity, notice or the broker: those read the outbox.
//!
//! The actors and the pipeline share `deps`; background tasks (the `sweeps`,
//! the `embedded_relay`, the in-process `consumers`) run in the `workers`
//! slot, which `app` cancels and awaits before the pools close.

mod app;
pub mod auth;
pub(crate) mod batch;
pub mod cell;
mod cells;
mod command_span;
pub mod config;
mod consumers;
mod deps;
mod embedded_relay;
pub mod error;
pub mod forward;
mod gifts;
pub mod grpc;
mod im;
mod liveness;
mod metrics;
mod mutation;
mod pipeline;
pub mod redis;
pub mod service;
pub mod store;
pub mod sweeps;
mod timing;
pub mod validate;
mod wallet;
pub mod workers;

pub use app::{App, ShutdownReport};
pub use config::Config;
pub use error::{Error, ErrorCode};
pub use service::Rooms;
