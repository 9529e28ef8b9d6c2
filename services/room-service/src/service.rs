//! [`Rooms`]: the service's transport-independent API. Write commands go
//! through the room's actor (see `cells`) on the instance that holds the
//! room's lease; a call that reaches another instance is forwarded to the
//! holder once (`forward`). Every command is logged as a
//! `room_command_timing` line and counted where it executes (one refused by
//! validation is logged, not counted). Also the internal entry points:
//! [`Rooms::open_treasure`] for the treasure-open consumer and
//! [`Rooms::expire_presence`] for the presence worker. The reads are in
//! `reads`.

use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use hyapp_api::room::{self as api, CommandReply};
use room_core::{Command, LeaveReason};
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

mod reads;

pub use reads::snapshot_of;

use crate::Error;
use crate::cell::{CommandJob, CommandOutcome, Job};
use crate::cells::Cells;
use crate::command_span;
use crate::deps::Deps;
use crate::forward::{CallContext, Peers, Served, retry_here};
use crate::im::ImGroups;
use crate::timing::{self, CommandIdentity, StageTimings};
use crate::validate::{self, CommandRequest, internal_fingerprint};

/// The room API.
#[derive(Debug, Clone)]
pub struct Rooms {
    pub(crate) cells: Arc<Cells>,
    pub(crate) deps: Arc<Deps>,
    pub(crate) im: Option<ImGroups>,
    pub(crate) default_app_code: String,
    pub(crate) peers: Arc<Peers>,
}

/// Command id of the presence-expiry leave of `user_id` whose entry expired at
/// `expires_at_ms`: deterministic, so every node and retry maps to one command.
pub fn presence_command_id(room_id: &str, user_id: &str, expires_at_ms: i64) -> String {
    let digest = Sha256::digest(format!("{room_id}|{user_id}|{expires_at_ms}"));
    let hex: String = digest
        .iter()
        .take(16)
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("presence-expired:{hex}")
}

impl Rooms {
    /// The default app code.
    pub fn default_app_code(&self) -> &str {
        &self.default_app_code
    }

    /// This instance's node id.
    pub fn node_id(&self) -> &str {
        self.peers.node_id()
    }

    /// Runs a validated write command made by room-service itself (forwarded
    /// to the room's holder when that is another instance), inside its
    /// internal span (`command_span::internal`).
    pub async fn execute(&self, request: CommandRequest) -> Result<CommandReply, Error> {
        self.execute_internal(request, &CallContext::internal())
            .await
    }

    /// [`Rooms::execute`] with `call` saying whether it may be forwarded.
    async fn execute_internal(
        &self,
        mut request: CommandRequest,
        call: &CallContext,
    ) -> Result<CommandReply, Error> {
        let span = command_span::internal(
            request.command.name(),
            &request.traceparent,
            &request.room_id,
        );
        request.traceparent = span.traceparent();
        command_span::run(span, async {
            self.execute_call(request, call)
                .await
                .map(|served| served.value)
        })
        .await
    }

    /// Runs a validated write command on the instance holding the room.
    pub async fn execute_call(
        &self,
        request: CommandRequest,
        call: &CallContext,
    ) -> Result<Served<CommandReply>, Error> {
        let room_id = request.room_id.clone();
        let request = &request;
        self.route(
            &room_id,
            call,
            || Box::pin(self.execute_here(request.clone())),
            |address| Box::pin(async move { self.peers.execute(&address, request, call).await }),
        )
        .await
    }

    /// Serves a call here, or on the room's holder when another live instance
    /// holds its lease: at most one hop. A holder whose liveness key lapsed
    /// is not called: the local attempt takes the room over. A holder that
    /// cannot be reached, is stopping or no longer holds the room gets one
    /// more local attempt, which takes the room over once its lease is free
    /// or its liveness key lapsed (fenced by the version CAS).
    async fn route<'a, T>(
        &'a self,
        room_id: &'a str,
        call: &'a CallContext,
        mut here: impl FnMut() -> BoxFuture<'a, Result<T, Error>> + Send,
        there: impl FnOnce(String) -> BoxFuture<'a, Result<Served<T>, Error>> + Send,
    ) -> Result<Served<T>, Error> {
        // A room loaded here is ours until its actor says otherwise; for any
        // other, one GET saves starting an actor that could not take the lease.
        let holder = if self.cells.is_loaded(room_id) {
            None
        } else {
            self.deps.redis.lease_holder(room_id).await?
        };
        let refused = match holder {
            Some(holder) if holder.is_live() => holder.owned_elsewhere(room_id),
            _ => match here().await {
                Err(error @ Error::OwnedElsewhere { .. }) => error,
                answered => return answered.map(|value| self.served_here(value)),
            },
        };
        let Error::OwnedElsewhere {
            address: Some(address),
            ..
        } = &refused
        else {
            return Err(refused);
        };
        if !call.may_forward {
            return Err(refused);
        }
        if let Some(why) = self.peers.refuses(address) {
            // A lease value is data in Redis: an address outside the fleet's
            // networks is not dialled, nor handed to the gateway as a hint.
            let shown: String = address.chars().take(120).collect();
            tracing::warn!(room_id, address = %shown, why, "room lease names an address outside peer_addresses; not dialled");
            self.deps.metrics.record_forward_refused();
            return Err(refused.without_holder_address());
        }
        let address = address.clone();
        let started = Instant::now();
        let forwarded = there(address).await;
        let outcome = match &forwarded {
            Ok(_) => "ok",
            Err(error) if retry_here(error) => "holder_unreachable",
            Err(_) => "refused",
        };
        self.deps
            .metrics
            .record_forward(outcome, started.elapsed().as_secs_f64());
        match forwarded {
            Err(error) if retry_here(&error) => {
                tracing::debug!(room_id, %error, "holder unreachable or leaving; trying here");
                here().await.map(|value| self.served_here(value))
            }
            answered => answered,
        }
    }

    fn served_here<T>(&self, value: T) -> Served<T> {
        Served {
            value,
            node_id: self.node_id().to_owned(),
            address: self.peers.advertised_url().to_owned(),
        }
    }

    /// Runs a validated write command through this instance's actor of the room.
    async fn execute_here(&self, request: CommandRequest) -> Result<CommandReply, Error> {
        let started = Instant::now();
        let room_id = request.room_id.clone();
        let command_id = request.command_id.clone();
        let command_name = request.command.name();
        let title = match &request.command {
            Command::CreateRoom { title, .. } => Some(title.clone()),
            _ => None,
        };
        let (sender, receiver) = oneshot::channel();
        self.cells.submit(
            &room_id,
            Job::Command(CommandJob {
                request,
                reply: sender,
            }),
        );
        let CommandOutcome { result, mut stages } =
            receiver.await.unwrap_or_else(|_| CommandOutcome {
                result: Err(Error::Internal(
                    "room actor stopped without answering".into(),
                )),
                stages: StageTimings::default(),
            });
        if let (Ok(reply), Some(im), Some(title)) = (&result, &self.im, &title)
            && !reply.replayed
        {
            let im_started = Instant::now();
            if let Err(error) = im.ensure_group(&room_id, title).await {
                // The relay's EnsureGroup for RoomCreated repairs it.
                tracing::warn!(room_id, %error, "im group creation failed, left to the outbox");
            }
            stages.tencent_im = im_started.elapsed();
        }
        let (outcome, reason) = match &result {
            Ok(reply) if reply.replayed => ("replayed", ""),
            Ok(_) => ("ok", ""),
            Err(error) => (error.code().label(), error.reason()),
        };
        let total = started.elapsed();
        timing::log(
            CommandIdentity {
                command: command_name,
                room_id: &room_id,
                command_id: &command_id,
                outcome,
                reason,
            },
            &stages,
            total,
        );
        self.deps
            .metrics
            .record_command(command_name, outcome, total.as_secs_f64());
        result
    }

    /// Opens a treasure box through the normal pipeline (called by the
    /// treasure-open consumer with `treasure_open_command_id(..)`, so a
    /// redelivered wake-up is an idempotent replay). room-core re-validates box,
    /// level, `open_at_ms` and the daily reset.
    pub async fn open_treasure(
        &self,
        room_id: &str,
        box_id: &str,
        level: u32,
        command_id: &str,
    ) -> Result<CommandReply, Error> {
        let started = Instant::now();
        let wake_up = api::OpenTreasureCommand {
            room_id: room_id.to_owned(),
            command_id: command_id.to_owned(),
            box_id: box_id.to_owned(),
            level,
        };
        match validate::open_treasure(&wake_up, &self.default_app_code) {
            Ok(request) => self.execute(request).await,
            Err(error) => {
                timing::log_refused(
                    "OpenTreasure",
                    room_id,
                    command_id,
                    &error,
                    started.elapsed(),
                );
                Err(error)
            }
        }
    }

    /// Removes a user whose presence expired, as a normal LeaveRoom command so
    /// a `RoomUserLeft{PresenceExpired}` event is emitted.
    pub async fn expire_presence(
        &self,
        room_id: &str,
        user_id: &str,
        expires_at_ms: i64,
    ) -> Result<CommandReply, Error> {
        let command = Command::LeaveRoom {
            user_id: user_id.to_owned(),
            reason: LeaveReason::PresenceExpired,
        };
        let command_id = presence_command_id(room_id, user_id, expires_at_ms);
        // Not forwarded: every instance sweeps the same presence entries, and
        // the holder's own sweep removes those of its rooms.
        self.execute_internal(
            self.internal_request(room_id, &command_id, "PresenceExpired", command),
            &CallContext::local_only(),
        )
        .await
    }

    fn internal_request(
        &self,
        room_id: &str,
        command_id: &str,
        kind: &str,
        command: Command,
    ) -> CommandRequest {
        CommandRequest {
            room_id: room_id.to_owned(),
            command_id: command_id.to_owned(),
            app_code: self.default_app_code.clone(),
            request_id: String::new(),
            traceparent: String::new(),
            fingerprint: internal_fingerprint(kind, room_id, &command),
            command,
            // Every instance sweeps the same presence entries: never forwarded.
            forward: None,
        }
    }

    /// Validation context for gateway requests.
    pub fn context<'a>(&'a self, traceparent: &'a str) -> validate::RequestContext<'a> {
        validate::RequestContext {
            default_app_code: &self.default_app_code,
            traceparent,
            now_ms: service_kit::time::now_ms(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presence_command_ids_are_deterministic_and_short() {
        let id = presence_command_id(&"r".repeat(64), &"u".repeat(64), i64::MAX);
        assert_eq!(
            id,
            presence_command_id(&"r".repeat(64), &"u".repeat(64), i64::MAX)
        );
        assert!(id.len() <= validate::MAX_COMMAND_ID_LEN);
        assert!(validate::is_id_charset(&id));
        assert_ne!(id, presence_command_id("r", "u", 1));
    }
}
