//! The three reads — GetRoom, Heartbeat, ListRooms — for the gateway and for
//! a forwarding instance, each measured like a command: counted in
//! `room_reads_total{call,outcome}` and timed in `room_read_seconds{call}`
//! where it executes. A read this instance forwarded is counted by the
//! holder that served it (its reply names another node, or its refusal is
//! the holder's), so every read is counted once.

use std::future::Future;
use std::time::Instant;

use hyapp_api::room::{
    GetRoomRequest, HeartbeatReply, HeartbeatRequest, ListRoomsReply, ListRoomsRequest,
    RoomListEntry, RoomSnapshot,
};
use tonic::{Response, Status};

use super::served;
use crate::Error;
use crate::error::Subject;
use crate::forward::{CallContext, Served};
use crate::service::Rooms;

/// `call` label of GetRoom.
pub const GET_ROOM: &str = "GetRoom";
/// `call` label of Heartbeat.
pub const HEARTBEAT: &str = "Heartbeat";
/// `call` label of ListRooms.
pub const LIST_ROOMS: &str = "ListRooms";

/// GetRoom, for the gateway and for a forwarding instance.
pub(super) async fn get_room(
    rooms: &Rooms,
    request: &GetRoomRequest,
    call: &CallContext,
) -> Result<Response<RoomSnapshot>, Status> {
    measured(rooms, GET_ROOM, rooms.get_room_call(&request.room_id, call))
        .await
        .map(served)
        .map_err(|error| error.into_status(subject(&request.room_id)))
}

/// Heartbeat, for the gateway and for a forwarding instance.
pub(super) async fn heartbeat(
    rooms: &Rooms,
    request: &HeartbeatRequest,
    call: &CallContext,
) -> Result<Response<HeartbeatReply>, Status> {
    let beat = rooms.heartbeat_call(&request.room_id, &request.user_id, call);
    measured(rooms, HEARTBEAT, beat)
        .await
        .map(|expiry| served(expiry.map(|expires_at_ms| HeartbeatReply { expires_at_ms })))
        .map_err(|error| error.into_status(subject(&request.room_id)))
}

/// ListRooms: the Redis room list, read on whichever instance the call reaches.
pub(super) async fn list_rooms(
    rooms: &Rooms,
    request: &ListRoomsRequest,
) -> Result<Response<ListRoomsReply>, Status> {
    let started = Instant::now();
    let listed = rooms.list_rooms(request.limit).await;
    record(rooms, LIST_ROOMS, started, outcome(&listed));
    let listed = listed.map_err(Status::from)?;
    Ok(Response::new(ListRoomsReply {
        rooms: listed
            .into_iter()
            .map(|(room_id, heat)| RoomListEntry { room_id, heat })
            .collect(),
    }))
}

fn subject(room_id: &str) -> Subject<'_> {
    Subject {
        room_id,
        command_id: "",
    }
}

/// Runs a read of one room and records it if it executed here.
async fn measured<T>(
    rooms: &Rooms,
    call: &'static str,
    read: impl Future<Output = Result<Served<T>, Error>>,
) -> Result<Served<T>, Error> {
    let started = Instant::now();
    let result = read.await;
    let executed_elsewhere = match &result {
        Ok(answer) => answer.node_id != rooms.node_id(),
        Err(error) => matches!(error, Error::Forwarded(_)),
    };
    if !executed_elsewhere {
        record(rooms, call, started, outcome(&result));
    }
    result
}

/// `ok`, or the error's class label, as commands are labelled.
fn outcome<T>(result: &Result<T, Error>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(error) => error.code().label(),
    }
}

fn record(rooms: &Rooms, call: &str, started: Instant, outcome: &str) {
    rooms
        .deps
        .metrics
        .record_read(call, outcome, started.elapsed().as_secs_f64());
}
