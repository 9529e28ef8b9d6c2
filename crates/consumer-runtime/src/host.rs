//! The consumer host: everything a consumer service is besides its handler
//! and its own config sections, written once so the three consumers cannot
//! drift apart under failure (docs/style.md, "one mechanism per concern").
//!
//! - [`ServiceConfig`]: layered config load (`ConfigSources`) and the checks
//!   of the shared sections (consumer settings, `tencent_im`, `http_listen`);
//! - [`Host`]: MySQL, the consumer and its metrics, admin HTTP with
//!   readiness, the dedup purge, the service's background tasks (e.g. a
//!   [`crate::sweeper::Sweeper`]) and extra servers (activity's gRPC entry),
//!   and the shutdown order — the consumer drains first, then the background
//!   tasks and admin stop, then MySQL closes;
//! - [`main`]: the binary (`--config`, `--dump-config`, telemetry, signals);
//! - [`EmbeddedConsumer`]: a consumer with its purge, for a process that
//!   hosts it itself (room-service runs the IM bridge);
//! - [`Error`]: the one error type of the consumer services;
//! - the operator commands of every consumer binary ([`OperatorCommand`]):
//!   `dead-letters list|inspect|replay` over the group's `<group>.dlq` and
//!   `deliveries list|retry` over the service's delivery table, each
//!   mutation audited in `consumer_operator_audit`; the same replay and
//!   retry run for the requests the relay's console writes
//!   (`consumer_operator_requests`), by a background task of every service.
//!
//! A consumer service is then its handler, its config struct implementing
//! [`ServiceConfig`], a [`ConsumerService`] saying how to build the handler,
//! and a `main.rs` calling [`main`].

mod app;
mod audit;
mod cli;
mod config;
mod dead_letters;
mod deliveries;
mod embedded;
mod error;
mod failed_tables;
mod operator;
mod operator_run;
mod replay;
mod requests;

pub use app::{Builder, Host};
pub use cli::main;
pub use config::{ServiceConfig, SharedSections};
pub use dead_letters::{
    DeadLetter, Filter as DeadLetterFilter, Found as DeadLettersFound, count as count_dead_letters,
    read as read_dead_letters, read_first as read_first_dead_letters,
};
pub use deliveries::{FailedDeliveries, FailedRow};
pub use embedded::EmbeddedConsumer;
pub use error::{BoxError, Error};
pub use failed_tables::{
    BROADCAST_FAILED_COUNT_SQL, BROADCAST_FAILED_LIST_SQL, DeliveryTableName,
    NOTICE_FAILED_COUNT_SQL, NOTICE_FAILED_LIST_SQL,
};
pub use operator::{DeadLettersCommand, DeliveriesCommand, OperatorCommand, ReplayArgs, RetryArgs};
pub use operator_run::{OperatorReport, run_operator};
pub use replay::{ReplayLine, Replayed};
pub use requests::{RequestAction, STALLED_AFTER, UNCLAIMED_AFTER};

use crate::{Decode, Handler};
use std::{future::Future, sync::Arc};

/// One consumer service, for [`Host`] and [`main`].
pub trait ConsumerService: Send + Sync + 'static {
    /// The service's configuration.
    type Config: ServiceConfig;
    /// What it consumes.
    type Message: Decode;
    /// What it does with it.
    type Handler: Handler<Self::Message>;

    /// One line for `--help`.
    const ABOUT: &'static str;

    /// Builds the handler from the config and the host's shared resources
    /// ([`Builder::pool`], [`Builder::consumer_group`]); registers on
    /// `host` any background task or extra server the service runs beside
    /// the consumer. Spawns nothing itself: [`Host::run`] starts and stops it all.
    fn build(
        config: &Self::Config,
        host: &mut Builder,
    ) -> impl Future<Output = Result<Arc<Self::Handler>, Error>> + Send;

    /// The service's table of retried deliveries, for the `deliveries`
    /// operator commands (`FailedDeliveries::of::<Table>()`); none by default.
    fn failed_deliveries() -> Option<FailedDeliveries> {
        None
    }
}
