//! The reads of [`Rooms`]: a room's state and a member's presence
//! heartbeat, each run on the instance holding the room (in its actor's
//! mailbox order, so a client reads its own writes), and the list of the
//! hottest rooms from Redis.

use hyapp_api::room::{RankEntry, RoomSnapshot, Seat, TreasureBox};
use room_core::{Rejection, RoomState, RoomStatus};
use tokio::sync::oneshot;

use super::Rooms;
use crate::Error;
use crate::cell::{Job, ReadJob};
use crate::forward::{CallContext, Served};
use crate::validate::{MAX_ROOM_ID_LEN, MAX_USER_ID_LEN, check_id};

impl Rooms {
    /// Runs `read` on the room's committed state, in mailbox order, on this
    /// instance. A room that is not loaded here and has no row in MySQL is
    /// not found without taking its lease or starting an actor, so reads of
    /// made-up ids leave nothing behind.
    async fn read<T: Send + 'static>(
        &self,
        room_id: &str,
        read: impl FnOnce(&RoomState) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        if !self.cells.is_loaded(room_id)
            && self
                .deps
                .store
                .room_meta(room_id)
                .await
                .map_err(|error| Error::database(&error))?
                .is_none()
        {
            return Err(Rejection::RoomNotFound.into());
        }
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

    /// The room's current state, read on the instance holding the room:
    /// reads go where the writes are, so a client reads its own writes.
    pub async fn get_room(&self, room_id: &str) -> Result<RoomSnapshot, Error> {
        self.get_room_call(room_id, &CallContext::internal())
            .await
            .map(|served| served.value)
    }

    /// [`Rooms::get_room`] for a gRPC call.
    pub async fn get_room_call(
        &self,
        room_id: &str,
        call: &CallContext,
    ) -> Result<Served<RoomSnapshot>, Error> {
        check_id("room_id", room_id, MAX_ROOM_ID_LEN)?;
        self.route(
            room_id,
            call,
            || Box::pin(self.get_room_here(room_id)),
            |address| Box::pin(async move { self.peers.get_room(&address, room_id, call).await }),
        )
        .await
    }

    async fn get_room_here(&self, room_id: &str) -> Result<RoomSnapshot, Error> {
        self.read(room_id, |state| {
            if state.status == RoomStatus::Vacant {
                return Err(Rejection::RoomNotFound.into());
            }
            Ok(snapshot_of(state))
        })
        .await
    }

    /// Records a presence heartbeat of a member on the instance holding the
    /// room (`call` says whether it may be forwarded); returns the new expiry.
    pub async fn heartbeat_call(
        &self,
        room_id: &str,
        user_id: &str,
        call: &CallContext,
    ) -> Result<Served<i64>, Error> {
        check_id("room_id", room_id, MAX_ROOM_ID_LEN)?;
        check_id("user_id", user_id, MAX_USER_ID_LEN)?;
        self.route(
            room_id,
            call,
            || Box::pin(self.heartbeat_here(room_id, user_id)),
            |address| {
                Box::pin(
                    async move { self.peers.heartbeat(&address, room_id, user_id, call).await },
                )
            },
        )
        .await
    }

    async fn heartbeat_here(&self, room_id: &str, user_id: &str) -> Result<i64, Error> {
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
