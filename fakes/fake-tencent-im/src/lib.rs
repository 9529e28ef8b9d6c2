//! Faithful local fake of the Tencent Cloud IM REST API for tests and the local stack.
//!
//! It serves `POST /v4/{service}/{command}` with Tencent's query shape and answers, checks the
//! admin UserSig with [`tencent_im::usersig::verify_usersig`], keeps groups and messages in
//! memory, de-duplicates a repeated `Random` per target for five minutes like Tencent, and can
//! be steered through the `/admin/*` JSON routes or the same operations on [`FakeImHandle`].
//! Tests call [`spawn`] with port 0; the binary wraps it for the local stack.
//!
//! Like Tencent, it holds every group to [`GROUP_MSG_PER_SECOND`] delivered messages in any
//! one-second window (a message over it is answered OK with `MsgDropReason: "MsgFreqCtrl"`
//! and not delivered, whatever its `MsgPriority`) and refuses a `MsgBody` over
//! [`MAX_MSG_BODY_BYTES`] with ErrorCode 80002; both limits are configurable (`limits.rs`
//! says what Tencent documents and how strictly the fake reads it).
//!
//! Admin routes: `GET /admin/messages?group_id=&to_account=`, `GET /admin/groups`,
//! `GET /admin/stats` (with per-group counters under `groups`), `POST|GET|DELETE
//! /admin/faults` (body: one [`FaultRule`] or a list), `POST /admin/rate_limit
//! {"per_second": n|null}` (REST calls per API per second), `POST /admin/group_rate_limit
//! {"per_second": n|null}` (messages per group per second; both answer the limit now in
//! force, `null` or 0 meaning none), `POST /admin/reset`, `GET /healthz`.

mod admin;
mod faults;
mod im_api;
mod limits;
mod records;
mod state;
mod stats;

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::routing::{get, post};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use faults::FaultRule;
pub use limits::{GROUP_MSG_PER_SECOND, MAX_MSG_BODY_BYTES};
pub use records::{GroupRecord, MessageFilter, MessageKind, RecordedMessage};
pub use state::{DEDUP_WINDOW, MAX_RECORDED_MESSAGES};
pub use stats::{GroupStats, Stats};

use state::State;

/// Longest a [`FakeImHandle::shutdown`] waits for open connections before aborting the server.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// What the fake listens on and which app identity it accepts.
#[derive(Clone)]
pub struct FakeImConfig {
    /// Address to bind; port 0 picks a free one.
    pub listen: SocketAddr,
    /// The only SDKAppID accepted.
    pub sdk_app_id: u64,
    /// Key UserSigs must be signed with.
    pub secret_key: String,
    /// The only identifier allowed to call the APIs.
    pub admin_identifier: String,
    /// Recorded messages kept for `/admin/messages`; the oldest are forgotten
    /// (and counted in the stats as `forgotten`) past this many.
    pub max_recorded_messages: usize,
    /// Messages a group receives in any one second before the rest are dropped with
    /// `MsgFreqCtrl`; `None` (or 0): no limit. Tencent's is [`GROUP_MSG_PER_SECOND`].
    pub group_msg_per_second: Option<u32>,
    /// Longest `MsgBody` accepted, in bytes of compact JSON; longer ones get ErrorCode
    /// 80002. `None` (or 0): no limit. Tencent's is [`MAX_MSG_BODY_BYTES`].
    pub max_msg_body_bytes: Option<usize>,
}

impl FakeImConfig {
    /// Loopback on a free port, with the given identity.
    pub fn new(
        sdk_app_id: u64,
        secret_key: impl Into<String>,
        admin_identifier: impl Into<String>,
    ) -> Self {
        FakeImConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            sdk_app_id,
            secret_key: secret_key.into(),
            admin_identifier: admin_identifier.into(),
            max_recorded_messages: MAX_RECORDED_MESSAGES,
            group_msg_per_second: Some(GROUP_MSG_PER_SECOND),
            max_msg_body_bytes: Some(MAX_MSG_BODY_BYTES),
        }
    }
}

impl fmt::Debug for FakeImConfig {
    // Even a fake's key is kept out of logs, so copied configs never teach bad habits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeImConfig")
            .field("listen", &self.listen)
            .field("sdk_app_id", &self.sdk_app_id)
            .field("secret_key", &"***")
            .field("admin_identifier", &self.admin_identifier)
            .field("max_recorded_messages", &self.max_recorded_messages)
            .field("group_msg_per_second", &self.group_msg_per_second)
            .field("max_msg_body_bytes", &self.max_msg_body_bytes)
            .finish()
    }
}

/// Shared server state handed to every handler.
#[derive(Clone, Debug)]
pub(crate) struct App {
    config: Arc<FakeImConfig>,
    state: Arc<Mutex<State>>,
}

impl App {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A handler that panicked mid-update leaves plain data behind; keep serving.
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Forgets everything recorded and set at runtime; the configured limits apply again.
    fn reset(&self) {
        self.lock().reset(self.config.group_msg_per_second);
    }
}

/// The fake's routes: the IM API under `/v4`, and the admin API.
fn router(app: App) -> Router {
    Router::new()
        .route("/v4/{service}/{command}", post(im_api::handle))
        .route("/admin/messages", get(admin::messages))
        .route("/admin/groups", get(admin::groups))
        .route("/admin/stats", get(admin::stats))
        .route(
            "/admin/faults",
            post(admin::add_faults)
                .get(admin::list_faults)
                .delete(admin::clear_faults),
        )
        .route("/admin/rate_limit", post(admin::set_rate_limit))
        .route("/admin/group_rate_limit", post(admin::set_group_rate_limit))
        .route("/admin/reset", post(admin::reset))
        .route("/healthz", get(admin::healthz))
        .with_state(app)
}

/// A running fake. Dropping it stops the server; [`FakeImHandle::shutdown`] also waits for it.
#[derive(Debug)]
pub struct FakeImHandle {
    addr: SocketAddr,
    app: App,
    cancel: CancellationToken,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

/// Binds `config.listen` and serves the fake on a background task.
pub async fn spawn(config: FakeImConfig) -> anyhow::Result<FakeImHandle> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding fake im to {}", config.listen))?;
    let addr = listener.local_addr().context("reading fake im address")?;
    // A 0 in the config means "no limit", as on the command line and the admin API.
    let config = FakeImConfig {
        group_msg_per_second: config.group_msg_per_second.filter(|n| *n > 0),
        max_msg_body_bytes: config.max_msg_body_bytes.filter(|n| *n > 0),
        ..config
    };
    let app = App {
        state: Arc::new(Mutex::new(State::new(config.group_msg_per_second))),
        config: Arc::new(config),
    };
    let cancel = CancellationToken::new();
    // Replies go out at once, as from the real service, not after a delayed ACK.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let serve = axum::serve(listener, router(app.clone()))
        .with_graceful_shutdown(cancel.clone().cancelled_owned());
    let task = tokio::spawn(async move { serve.await });
    tracing::info!(%addr, sdk_app_id = app.config.sdk_app_id, "fake tencent im listening");
    Ok(FakeImHandle {
        addr,
        app,
        cancel,
        task: Some(task),
    })
}

impl FakeImHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://{addr}`, ready for `tencent_im::ClientConfig::base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The configuration the fake was started with.
    pub fn config(&self) -> &FakeImConfig {
        &self.app.config
    }

    /// Recorded messages matching `filter`, oldest first.
    pub fn messages(&self, filter: &MessageFilter) -> Vec<RecordedMessage> {
        self.app.lock().messages(filter)
    }

    /// Recorded messages to `group_id`, oldest first.
    pub fn group_messages(&self, group_id: &str) -> Vec<RecordedMessage> {
        self.messages(&MessageFilter {
            group_id: Some(group_id.to_owned()),
            to_account: None,
        })
    }

    /// Recorded one-to-one messages to `to_account`, oldest first.
    pub fn c2c_messages(&self, to_account: &str) -> Vec<RecordedMessage> {
        self.messages(&MessageFilter {
            group_id: None,
            to_account: Some(to_account.to_owned()),
        })
    }

    /// Live groups, ordered by id.
    pub fn groups(&self) -> Vec<GroupRecord> {
        self.app.lock().groups.values().cloned().collect()
    }

    /// Counters since start or the last reset.
    pub fn stats(&self) -> Stats {
        self.app.lock().stats.clone()
    }

    /// Queues a fault behind any already pending.
    pub fn inject_fault(&self, rule: FaultRule) {
        self.app.lock().faults.push(rule);
    }

    /// Faults not yet used up.
    pub fn pending_faults(&self) -> Vec<FaultRule> {
        self.app.lock().faults.clone()
    }

    /// Limits every API to `per_second` calls per second (`None` or 0: unlimited).
    pub fn set_rate_limit(&self, per_second: Option<u32>) {
        self.app.lock().set_rate_limit(per_second);
    }

    /// Holds every group to `per_second` delivered messages in any one second (`None` or 0:
    /// no limit), from now on; returns the limit in force. Messages already delivered in the
    /// last second keep counting.
    pub fn set_group_rate_limit(&self, per_second: Option<u32>) -> Option<u32> {
        self.app.lock().set_group_rate_limit(per_second)
    }

    /// Forgets groups, messages, stats, faults and the API rate limit; the group message
    /// limit goes back to the configured one.
    pub fn reset(&self) {
        self.app.reset();
    }

    /// Stops accepting, lets in-flight requests finish, and waits for the server task.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        self.cancel.cancel();
        let Some(mut task) = self.task.take() else {
            return Ok(());
        };
        match tokio::time::timeout(SHUTDOWN_GRACE, &mut task).await {
            Ok(joined) => joined
                .context("fake im server task")?
                .context("fake im server"),
            Err(_) => {
                // Idle keep-alive connections from a client still alive elsewhere can hold the
                // graceful shutdown open; the fake has nothing to flush, so cut them off.
                task.abort();
                Ok(())
            }
        }
    }
}

impl Drop for FakeImHandle {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
