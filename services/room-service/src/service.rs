//! [`Rooms`]: the service's transport-independent API. Write commands go
//! through the room's actor (see `cells`); every one is logged as a
//! `room_command_timing` line and counted (one refused by validation is
//! logged, not counted). Also the internal entry points:
//! [`Rooms::open_treasure`] for the treasure-open consumer and
//! [`Rooms::expire_presence`] for the presence worker.

use std::sync::Arc;
use std::time::Instant;

use hyapp_api::room::{CommandReply, RankEntry, RoomSnapshot, Seat, TreasureBox};
use room_core::{Command, LeaveReason, Rejection, RoomState, RoomStatus};
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

use crate::Error;
use crate::cell::{CommandJob, CommandOutcome, Job, ReadJob};
use crate::cells::Cells;
use crate::deps::Deps;
use crate::im::ImGroups;
use crate::timing::{self, CommandIdentity, StageTimings};
use crate::validate::{
    self, CommandRequest, MAX_COMMAND_ID_LEN, MAX_ID_LEN, check_id, internal_fingerprint,
};

/// The room API.
#[derive(Debug, Clone)]
pub struct Rooms {
    pub(crate) cells: Arc<Cells>,
    pub(crate) deps: Arc<Deps>,
    pub(crate) im: Option<ImGroups>,
    pub(crate) default_app_code: String,
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

    /// Runs a validated write command through the room's pipeline.
    pub async fn execute(&self, request: CommandRequest) -> Result<CommandReply, Error> {
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
        let valid = check_id("room_id", room_id, MAX_ID_LEN)
            .and_then(|()| check_id("command_id", command_id, MAX_COMMAND_ID_LEN))
            .and_then(|()| {
                if box_id.is_empty() || box_id.len() > 256 {
                    Err(Error::InvalidArgument(
                        "box_id must be 1..=256 bytes".into(),
                    ))
                } else {
                    Ok(())
                }
            });
        if let Err(error) = valid {
            timing::log_refused(
                "OpenTreasure",
                room_id,
                command_id,
                &error,
                started.elapsed(),
            );
            return Err(error);
        }
        let command = Command::OpenTreasure {
            box_id: box_id.to_owned(),
            level,
        };
        self.execute(self.internal_request(room_id, command_id, "OpenTreasure", command))
            .await
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
        self.execute(self.internal_request(room_id, &command_id, "PresenceExpired", command))
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
        }
    }

    /// Runs `read` on the room's committed state, in mailbox order.
    async fn read<T: Send + 'static>(
        &self,
        room_id: &str,
        read: impl FnOnce(&RoomState) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        let (sender, receiver) = oneshot::channel();
        let job: ReadJob = Box::new(move |state| {
            let _ = sender.send(state.and_then(read));
        });
        self.cells.submit(room_id, Job::Read(job));
        receiver.await.unwrap_or_else(|_| {
            Err(Error::Internal(
                "room actor stopped without answering".into(),
            ))
        })
    }

    /// The room's current state.
    pub async fn get_room(&self, room_id: &str) -> Result<RoomSnapshot, Error> {
        check_id("room_id", room_id, MAX_ID_LEN)?;
        self.read(room_id, |state| {
            if state.status == RoomStatus::Vacant {
                return Err(Rejection::RoomNotFound.into());
            }
            Ok(snapshot_of(state))
        })
        .await
    }

    /// Records a presence heartbeat of a member; returns the new expiry.
    pub async fn heartbeat(&self, room_id: &str, user_id: &str) -> Result<i64, Error> {
        check_id("room_id", room_id, MAX_ID_LEN)?;
        check_id("user_id", user_id, MAX_ID_LEN)?;
        let member = user_id.to_owned();
        self.read(room_id, move |state| match state.status {
            RoomStatus::Vacant => Err(Rejection::RoomNotFound.into()),
            RoomStatus::Closed => Err(Rejection::RoomClosed.into()),
            RoomStatus::Open if !state.is_member(&member) => {
                Err(Rejection::NotAMember { user_id: member }.into())
            }
            RoomStatus::Open => Ok(()),
        })
        .await?;
        let expires_at_ms =
            service_kit::time::now_ms().saturating_add(self.deps.settings.presence_ttl_ms);
        self.deps
            .redis
            .touch_presence(room_id, user_id, expires_at_ms)
            .await?;
        Ok(expires_at_ms)
    }

    /// The hottest rooms; `limit` 0 means 20, above 100 is invalid.
    pub async fn list_rooms(&self, limit: u32) -> Result<Vec<(String, u64)>, Error> {
        let limit = match limit {
            0 => 20,
            1..=100 => limit,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "limit must be in 1..=100, got {limit}"
                )));
            }
        };
        self.deps.redis.top_rooms(i64::from(limit)).await
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

fn status_text(status: RoomStatus) -> &'static str {
    match status {
        RoomStatus::Vacant => "vacant",
        RoomStatus::Open => "open",
        RoomStatus::Closed => "closed",
    }
}

/// The wire snapshot of a state.
pub fn snapshot_of(state: &RoomState) -> RoomSnapshot {
    RoomSnapshot {
        room_id: state.room_id.clone(),
        status: status_text(state.status).into(),
        owner_id: state.owner_id.clone(),
        title: state.title.clone(),
        version: state.version,
        heat: state.heat,
        members: state.members.keys().cloned().collect(),
        admins: state.admins.iter().cloned().collect(),
        seats: state
            .seats
            .iter()
            .enumerate()
            .map(|(index, seat)| Seat {
                index: u32::try_from(index).unwrap_or(u32::MAX),
                user_id: seat.user_id.clone().unwrap_or_default(),
                locked: seat.locked,
            })
            .collect(),
        rank: state
            .rank
            .iter()
            .map(|entry| RankEntry {
                user_id: entry.user_id.clone(),
                score: entry.score,
            })
            .collect(),
        treasure: state.treasure.current.as_ref().map(|current| TreasureBox {
            box_id: current.box_id.clone(),
            level: current.level,
            open_at_ms: current.open_at_ms,
        }),
        treasure_level_reached: state.treasure.level_reached,
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
        assert!(id.len() <= MAX_COMMAND_ID_LEN);
        assert!(validate::is_id_charset(&id));
        assert_ne!(id, presence_command_id("r", "u", 1));
    }
}
