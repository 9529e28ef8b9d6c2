//! One loaded room: its authoritative [`RoomState`] (the Room Cell), the
//! jobs its mailbox accepts, the cache of recent replies used for cheap
//! idempotent replays, and the rebuild from the newest snapshot plus the
//! command log after it.

use std::collections::{HashMap, VecDeque};

use hyapp_api::room::CommandReply;
use room_core::{Command, RoomRules, RoomState};
use tokio::sync::oneshot;

use crate::Error;
use crate::store::Store;
use crate::timing::StageTimings;
use crate::validate::{CommandRequest, Fingerprint};

/// What a write command's caller gets back.
#[derive(Debug)]
pub struct CommandOutcome {
    /// The reply, or why the command failed.
    pub result: Result<CommandReply, Error>,
    /// Stage times for the timing log.
    pub stages: StageTimings,
}

/// A write command waiting in a room's mailbox.
#[derive(Debug)]
pub struct CommandJob {
    /// The validated command.
    pub request: CommandRequest,
    /// Where the outcome goes.
    pub reply: oneshot::Sender<CommandOutcome>,
}

impl CommandJob {
    /// Sends the outcome; a caller that went away is not an error.
    pub fn answer(self, result: Result<CommandReply, Error>, stages: StageTimings) {
        let _ = self.reply.send(CommandOutcome { result, stages });
    }
}

/// A read of the current state, run in mailbox order (after earlier commands).
pub type ReadJob = Box<dyn FnOnce(Result<&RoomState, Error>) + Send>;

/// Anything a room's mailbox accepts.
#[allow(
    clippy::large_enum_variant,
    reason = "commands are the common case; boxing them would allocate once more per command"
)]
pub enum Job {
    /// A write command.
    Command(CommandJob),
    /// A read of the committed state.
    Read(ReadJob),
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Job::Command(job) => f
                .debug_tuple("Command")
                .field(&job.request.command_id)
                .finish(),
            Job::Read(_) => f.write_str("Read"),
        }
    }
}

impl Job {
    /// Fails the job without running it.
    pub fn fail(self, error: Error) {
        match self {
            Job::Command(job) => job.answer(Err(error), StageTimings::default()),
            Job::Read(read) => read(Err(error)),
        }
    }
}

/// A committed command's reply, kept to answer retries without a database lookup.
#[derive(Debug, Clone)]
pub struct RecentReply {
    /// Fingerprint of the original request.
    pub fingerprint: Fingerprint,
    /// Command name (for the conflict message).
    pub command_name: &'static str,
    /// The original reply (`replayed=false`).
    pub reply: CommandReply,
}

/// Bounded map of the most recent replies of one room.
#[derive(Debug, Default)]
pub struct RecentCommands {
    capacity: usize,
    order: VecDeque<String>,
    replies: HashMap<String, RecentReply>,
}

impl RecentCommands {
    /// Keeps at most `capacity` replies.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            order: VecDeque::with_capacity(capacity),
            replies: HashMap::with_capacity(capacity),
        }
    }

    /// The reply of `command_id`, if still cached.
    pub fn get(&self, command_id: &str) -> Option<&RecentReply> {
        self.replies.get(command_id)
    }

    /// Remembers a reply, evicting the oldest beyond capacity.
    pub fn insert(&mut self, command_id: String, reply: RecentReply) {
        if self.capacity == 0 {
            return;
        }
        if self.replies.insert(command_id.clone(), reply).is_none() {
            self.order.push_back(command_id);
        }
        while self.order.len() > self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.replies.remove(&oldest);
            }
        }
    }
}

/// The answer to a reused command_id: the original reply marked as replayed
/// when the request is the same, else the conflict error.
pub fn replay_or_conflict(
    request: &CommandRequest,
    original_fingerprint: &[u8],
    original_name: &str,
    original_room: &str,
    reply: &CommandReply,
) -> Result<CommandReply, Error> {
    if original_fingerprint == request.fingerprint && original_room == request.room_id {
        let mut replayed = reply.clone();
        replayed.replayed = true;
        Ok(replayed)
    } else {
        Err(Error::CommandIdReused {
            command_id: request.command_id.clone(),
            original: format!("{original_name} on room {original_room}"),
        })
    }
}

/// A loaded room.
#[derive(Debug)]
pub struct Cell {
    /// Committed state (never a speculative one: batches work on clones).
    pub state: RoomState,
    /// App code of the room ("" until it is created).
    pub app_code: String,
    /// Version of the newest snapshot.
    pub last_snapshot_version: u64,
    /// Recent replies.
    pub recent: RecentCommands,
}

/// Rebuilds a room: the newest snapshot at or below the committed version,
/// then every later command re-applied with the `now_ms` it was first applied
/// with. Each replayed step must land on the logged version, and the result on
/// the version in `rooms`; anything else is corrupt data, not a retry case.
pub async fn rebuild(
    store: &Store,
    room_id: &str,
    rules: &RoomRules,
    recent_capacity: usize,
) -> Result<Cell, Error> {
    let database = |error: sqlx::Error| Error::database(&error);
    let vacant = || Cell {
        state: RoomState::vacant(room_id, rules.clone()),
        app_code: String::new(),
        last_snapshot_version: 0,
        recent: RecentCommands::new(recent_capacity),
    };
    let Some(meta) = store.room_meta(room_id).await.map_err(database)? else {
        return Ok(vacant());
    };
    let mut cell = vacant();
    cell.app_code = meta.app_code;
    if let Some((version, state)) = store
        .latest_snapshot(room_id, meta.version)
        .await
        .map_err(database)?
    {
        cell.state = serde_json::from_slice(&state).map_err(|error| {
            Error::Internal(format!(
                "snapshot {room_id}@{version} is undecodable: {error}"
            ))
        })?;
        if cell.state.version != version {
            return Err(Error::Internal(format!(
                "snapshot {room_id}@{version} holds version {}",
                cell.state.version
            )));
        }
        cell.last_snapshot_version = version;
    }
    for logged in store
        .commands_after(room_id, cell.state.version)
        .await
        .map_err(database)?
    {
        if logged.room_version > meta.version {
            // Written by a stale owner after we read the meta; our first commit's CAS will catch it.
            break;
        }
        let command: Command = serde_json::from_slice(&logged.command).map_err(|error| {
            Error::Internal(format!(
                "command {room_id}@{} is undecodable: {error}",
                logged.room_version
            ))
        })?;
        let applied =
            room_core::apply(&cell.state, &command, logged.applied_at_ms).map_err(|rejection| {
                Error::Internal(format!(
                    "replay of {room_id}@{} was rejected: {rejection}",
                    logged.room_version
                ))
            })?;
        if applied.state.version != logged.room_version {
            return Err(Error::Internal(format!(
                "replay of {room_id} reached version {} but the log says {}",
                applied.state.version, logged.room_version
            )));
        }
        cell.state = applied.state;
    }
    if cell.state.version != meta.version {
        return Err(Error::Internal(format!(
            "rebuilt {room_id} at version {} but rooms.version is {}",
            cell.state.version, meta.version
        )));
    }
    Ok(cell)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(version: u64) -> RecentReply {
        RecentReply {
            fingerprint: [0; 32],
            command_name: "JoinRoom",
            reply: CommandReply {
                room_id: "r".into(),
                room_version: version,
                events: Vec::new(),
                replayed: false,
            },
        }
    }

    #[test]
    fn recent_commands_are_bounded() {
        let mut recent = RecentCommands::new(2);
        recent.insert("a".into(), reply(1));
        recent.insert("b".into(), reply(2));
        recent.insert("c".into(), reply(3));
        assert!(recent.get("a").is_none());
        assert_eq!(recent.get("c").unwrap().reply.room_version, 3);
        assert_eq!(recent.order.len(), 2);
    }
}
