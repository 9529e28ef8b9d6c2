//! Faithful local fake of the `wallet/v1` gRPC service with injectable faults.
//!
//! Debit and Refund are idempotent by key exactly like the real wallet: the
//! same key returns the stored outcome with `replayed=true`; a debit key reused
//! with another user or amount is `FAILED_PRECONDITION`; an unaffordable debit
//! is `FAILED_PRECONDITION` "insufficient balance"; a refund of a debit the
//! wallet never saw answers `debit_not_found=true` (and cancels that key).
//! Faults (fail the next N calls of a method, before or after applying them,
//! and added latency) are set through [`FakeWalletHandle`] in-process or the
//! admin HTTP routes documented in `admin`. Tests call [`spawn`] on port 0.
//! With [`FakeWalletConfig::tls`] the gRPC port speaks TLS, as the real
//! wallet does in production, so room-service's TLS client is tested too.

mod admin;
pub mod faults;
mod grpc;
pub mod ledger;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Context;
use hyapp_api::wallet::wallet_service_server::WalletServiceServer;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use faults::{FaultCode, FaultRule, Method};
pub use ledger::{DebitRecord, WalletStats};

/// Balance of a user the fake has not seen before, unless configured otherwise.
pub const DEFAULT_INITIAL_BALANCE: i64 = 1_000_000;

/// Where the fake listens and how wallets start.
#[derive(Debug, Clone)]
pub struct FakeWalletConfig {
    /// gRPC address; port 0 picks a free one.
    pub grpc_listen: SocketAddr,
    /// Admin HTTP address; port 0 picks a free one.
    pub admin_listen: SocketAddr,
    /// Balance of users not listed in `balances`.
    pub initial_balance: i64,
    /// Starting balances of particular users.
    pub balances: Vec<(String, i64)>,
    /// TLS of the gRPC port; `None` = plaintext.
    pub tls: Option<tonic::transport::ServerTlsConfig>,
}

impl Default for FakeWalletConfig {
    fn default() -> Self {
        Self {
            grpc_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            initial_balance: DEFAULT_INITIAL_BALANCE,
            balances: Vec::new(),
            tls: None,
        }
    }
}

/// Everything the handlers share.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) ledger: ledger::Ledger,
    pub(crate) faults: faults::Faults,
    pub(crate) calls: u64,
}

/// Cheaply clonable access to [`State`].
#[derive(Debug, Clone)]
pub(crate) struct Shared(Arc<Mutex<State>>);

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panicked handler leaves plain data behind; keep serving.
        self.0.lock().unwrap_or_else(|poison| poison.into_inner())
    }
}

/// A running fake wallet. Dropping it stops both servers.
#[derive(Debug)]
pub struct FakeWalletHandle {
    grpc_addr: SocketAddr,
    tls: bool,
    admin_addr: SocketAddr,
    shared: Shared,
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

/// Starts the gRPC server and the admin HTTP server.
pub async fn spawn(config: FakeWalletConfig) -> anyhow::Result<FakeWalletHandle> {
    let mut ledger = ledger::Ledger::new(config.initial_balance);
    for (user_id, balance) in &config.balances {
        ledger.set_balance(user_id, *balance);
    }
    let shared = Shared(Arc::new(Mutex::new(State {
        ledger,
        faults: faults::Faults::default(),
        calls: 0,
    })));
    let cancel = CancellationToken::new();

    let grpc_listener = tokio::net::TcpListener::bind(config.grpc_listen)
        .await
        .with_context(|| format!("bind wallet grpc {}", config.grpc_listen))?;
    let grpc_addr = grpc_listener.local_addr()?;
    let admin_listener = tokio::net::TcpListener::bind(config.admin_listen)
        .await
        .with_context(|| format!("bind wallet admin {}", config.admin_listen))?;
    let admin_addr = admin_listener.local_addr()?;

    let service = WalletServiceServer::new(grpc::FakeWalletService {
        shared: shared.clone(),
    });
    let grpc_cancel = cancel.clone();
    let tls = config.tls.is_some();
    let mut server = tonic::transport::Server::builder();
    if let Some(tls) = config.tls {
        server = server.tls_config(tls).context("wallet grpc tls")?;
    }
    let grpc_task = tokio::spawn(async move {
        // Without TCP_NODELAY, concurrent replies on one HTTP/2 connection wait
        // for the client's delayed ACK (~40 ms): real gRPC servers set it.
        let incoming =
            tonic::transport::server::TcpIncoming::from(grpc_listener).with_nodelay(Some(true));
        let result = server
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, grpc_cancel.cancelled_owned())
            .await;
        if let Err(error) = result {
            tracing::error!(%error, "fake wallet grpc server failed");
        }
    });
    let admin_cancel = cancel.clone();
    let router = admin::router(shared.clone());
    let admin_task = tokio::spawn(async move {
        let result = axum::serve(admin_listener, router)
            .with_graceful_shutdown(admin_cancel.cancelled_owned())
            .await;
        if let Err(error) = result {
            tracing::error!(%error, "fake wallet admin server failed");
        }
    });
    tracing::info!(%grpc_addr, %admin_addr, "fake wallet listening");
    Ok(FakeWalletHandle {
        grpc_addr,
        tls,
        admin_addr,
        shared,
        cancel,
        tasks: vec![grpc_task, admin_task],
    })
}

impl FakeWalletHandle {
    /// gRPC address.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// `http://host:port` (`https://` with TLS) of the gRPC server, as a client endpoint.
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.grpc_addr)
    }

    /// Admin HTTP address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// Fails the next `count` calls of `method` with `code`, without applying them.
    pub fn fail_next(&self, method: Method, count: u32, code: FaultCode) {
        self.inject(FaultRule {
            method,
            count,
            code,
            after_apply: false,
        });
    }

    /// Queues a fault rule.
    pub fn inject(&self, rule: FaultRule) {
        self.shared.lock().faults.add(rule);
    }

    /// Adds `latency` to every call.
    pub fn set_latency(&self, latency: Duration) {
        self.shared.lock().faults.set_latency(latency);
    }

    /// Drops pending faults and latency.
    pub fn clear_faults(&self) {
        self.shared.lock().faults.clear();
    }

    /// Counters for checkers.
    pub fn stats(&self) -> WalletStats {
        self.shared.lock().ledger.stats()
    }

    /// Calls received so far (faulted ones included).
    pub fn calls(&self) -> u64 {
        self.shared.lock().calls
    }

    /// Current balance of `user_id`.
    pub fn balance(&self, user_id: &str) -> i64 {
        self.shared.lock().ledger.balance(user_id)
    }

    /// Sets the balance of `user_id`.
    pub fn set_balance(&self, user_id: &str, balance: i64) {
        self.shared.lock().ledger.set_balance(user_id, balance);
    }

    /// The debit stored under `key`, if any.
    pub fn debit_record(&self, key: &str) -> Option<DebitRecord> {
        self.shared.lock().ledger.debit_record(key)
    }

    /// Stops both servers and waits for them (at most a few seconds).
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        for task in self.tasks.drain(..) {
            if tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .is_err()
            {
                tracing::warn!("fake wallet server did not stop in time");
            }
        }
    }
}

impl Drop for FakeWalletHandle {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
