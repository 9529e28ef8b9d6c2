//! Fixtures of the relay engine's tests: the shared relay fixtures
//! (`relay.rs`, also included by the relay service's and activity-consumer's
//! tests) and log capture.

#![allow(dead_code, reason = "each test binary uses a different subset")]

pub mod log;
mod relay;

pub use relay::*;
