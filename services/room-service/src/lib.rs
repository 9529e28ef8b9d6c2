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

pub mod app;
pub mod auth;
pub(crate) mod batch;
pub mod cell;
pub mod cells;
pub mod command_span;
pub mod config;
pub mod consumers;
pub mod deps;
pub mod embedded_relay;
pub mod error;
pub mod forward;
pub mod gifts;
pub mod grpc;
pub mod im;
pub mod liveness;
pub mod metrics;
pub mod mutation;
pub mod pipeline;
pub mod redis;
pub mod service;
pub mod store;
pub mod sweeps;
pub mod timing;
pub mod validate;
pub mod wallet;
pub mod workers;

pub use app::{App, ShutdownReport};
pub use config::Config;
pub use error::{Error, ErrorCode};
pub use service::Rooms;
