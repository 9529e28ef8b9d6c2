//! Fixtures of the relay service's tests: the relay fixtures the engine's
//! tests use and their log capture (included from the engine crate), the console's HTTP
//! client, the operator commands' helpers and the service's config.

#![allow(dead_code, reason = "each test binary uses a different subset")]

pub mod console;
#[path = "../../../../crates/relay-engine/tests/common/log.rs"]
pub mod log;
pub mod operator;
#[path = "../../../../crates/relay-engine/tests/common/relay.rs"]
mod relay;
pub mod service;

pub use relay::*;
