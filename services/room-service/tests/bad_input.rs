//! Bad input through the real gRPC server: every field of every room-service
//! RPC, malformed every way it can be (empty, oversized, wrong charset,
//! control characters, negative, overflow, out of range), is refused with
//! INVALID_ARGUMENT (or NOT_FOUND for an unknown room) and a message naming
//! the field, and nothing is written. `meta.*` and `room_id`, which every
//! write RPC validates the same way, are checked on all eleven of them.

mod common;

use common::*;
use futures::future::BoxFuture;
use hyapp_api::room::room_service_client::RoomServiceClient;
use hyapp_api::room::{
    CloseRoomRequest, CommandMeta, CreateRoomRequest, GetRoomRequest, HeartbeatRequest,
    JoinRoomRequest, KickUserRequest, LeaveMicRequest, LeaveRoomRequest, ListRoomsRequest,
    LockMicRequest, SendGiftRequest, SetAdminRequest, TakeMicRequest, UnlockMicRequest,
};
use room_service::validate::{MAX_ID_LEN, MAX_ROOM_ID_LEN, MAX_USER_ID_LEN};
use tonic::transport::Channel;

type Call =
    Box<dyn FnOnce(RoomServiceClient<Channel>) -> BoxFuture<'static, Result<(), tonic::Status>>>;

struct Case {
    name: String,
    call: Call,
    code: tonic::Code,
    message: &'static str,
}

fn join_case(
    name: &'static str,
    edit: impl FnOnce(&mut JoinRoomRequest) + 'static,
    room: &str,
    message: &'static str,
) -> Case {
    let mut request = join(room, "user-1");
    edit(&mut request);
    Case {
        name: name.into(),
        call: Box::new(move |mut client| {
            Box::pin(async move { client.join_room(request).await.map(drop) })
        }),
        code: tonic::Code::InvalidArgument,
        message,
    }
}

fn gift_case(
    name: &'static str,
    edit: impl FnOnce(&mut SendGiftRequest) + 'static,
    room: &str,
    code: tonic::Code,
    message: &'static str,
) -> Case {
    let mut request = gift(room, &testkit::unique("gift-"), "fan", "owner", 1, 1);
    edit(&mut request);
    Case {
        name: name.into(),
        call: Box::new(move |mut client| {
            Box::pin(async move { client.send_gift(request).await.map(drop) })
        }),
        code,
        message,
    }
}

fn create_case(
    name: &'static str,
    edit: impl FnOnce(&mut CreateRoomRequest) + 'static,
    room: &str,
    message: &'static str,
) -> Case {
    let mut request = create(room, "owner");
    edit(&mut request);
    Case {
        name: name.into(),
        call: Box::new(move |mut client| {
            Box::pin(async move { client.create_room(request).await.map(drop) })
        }),
        code: tonic::Code::InvalidArgument,
        message,
    }
}

/// A write RPC's request: each carries `meta` and `room_id`, validated alike.
trait WriteRequest: Send + 'static {
    const RPC: &'static str;
    /// `meta` and `room_id`, borrowed together.
    fn shared_fields(&mut self) -> (&mut Option<CommandMeta>, &mut String);
    fn send(
        client: RoomServiceClient<Channel>,
        request: Self,
    ) -> BoxFuture<'static, Result<(), tonic::Status>>;
}

macro_rules! write_request {
    ($($request:ty => $rpc:literal, $method:ident;)*) => {$(
        impl WriteRequest for $request {
            const RPC: &'static str = $rpc;
            fn shared_fields(&mut self) -> (&mut Option<CommandMeta>, &mut String) {
                (&mut self.meta, &mut self.room_id)
            }
            fn send(
                mut client: RoomServiceClient<Channel>,
                request: Self,
            ) -> BoxFuture<'static, Result<(), tonic::Status>> {
                Box::pin(async move { client.$method(request).await.map(drop) })
            }
        }
    )*};
}

write_request! {
    CreateRoomRequest => "CreateRoom", create_room;
    CloseRoomRequest => "CloseRoom", close_room;
    JoinRoomRequest => "JoinRoom", join_room;
    LeaveRoomRequest => "LeaveRoom", leave_room;
    KickUserRequest => "KickUser", kick_user;
    SetAdminRequest => "SetAdmin", set_admin;
    TakeMicRequest => "TakeMic", take_mic;
    LeaveMicRequest => "LeaveMic", leave_mic;
    LockMicRequest => "LockMic", lock_mic;
    UnlockMicRequest => "UnlockMic", unlock_mic;
    SendGiftRequest => "SendGift", send_gift;
}

/// `request` (valid) with `edit` applied, expected to fail with INVALID_ARGUMENT.
fn write_case<R: WriteRequest>(
    what: &str,
    mut request: R,
    edit: impl FnOnce(&mut R),
    message: &'static str,
) -> Case {
    edit(&mut request);
    Case {
        name: format!("{} {what}", R::RPC),
        call: Box::new(move |client| R::send(client, request)),
        code: tonic::Code::InvalidArgument,
        message,
    }
}

/// A fresh `meta` for a request expected to be refused.
fn m() -> Option<CommandMeta> {
    meta(&testkit::unique("bad-"))
}

/// Valid requests on the test's room (owned by "owner", "fan" a member):
/// each case damages one field of one of them.
fn close_req(room: &str) -> CloseRoomRequest {
    CloseRoomRequest {
        meta: m(),
        room_id: room.into(),
        actor_id: "owner".into(),
    }
}

fn leave_req(room: &str) -> LeaveRoomRequest {
    LeaveRoomRequest {
        meta: m(),
        room_id: room.into(),
        user_id: "fan".into(),
    }
}

fn kick_req(room: &str) -> KickUserRequest {
    KickUserRequest {
        meta: m(),
        room_id: room.into(),
        actor_id: "owner".into(),
        target_id: "fan".into(),
        ban_seconds: 0,
    }
}

fn set_admin_req(room: &str) -> SetAdminRequest {
    SetAdminRequest {
        meta: m(),
        room_id: room.into(),
        actor_id: "owner".into(),
        target_id: "fan".into(),
        admin: true,
    }
}

fn take_mic_req(room: &str, seat_index: u32) -> TakeMicRequest {
    TakeMicRequest {
        meta: m(),
        room_id: room.into(),
        user_id: "fan".into(),
        seat_index,
    }
}

fn leave_mic_req(room: &str) -> LeaveMicRequest {
    LeaveMicRequest {
        meta: m(),
        room_id: room.into(),
        user_id: "fan".into(),
    }
}

fn lock_mic_req(room: &str, seat_index: u32) -> LockMicRequest {
    LockMicRequest {
        meta: m(),
        room_id: room.into(),
        actor_id: "owner".into(),
        seat_index,
    }
}

fn unlock_mic_req(room: &str, seat_index: u32) -> UnlockMicRequest {
    UnlockMicRequest {
        meta: m(),
        room_id: room.into(),
        actor_id: "owner".into(),
        seat_index,
    }
}

fn gift_req(room: &str) -> SendGiftRequest {
    gift(room, &testkit::unique("gift-"), "fan", "owner", 1, 1)
}

/// An edit of a request's `meta` or `room_id`.
type SharedEdit = fn(&mut Option<CommandMeta>, &mut String);

/// The damage every write RPC must refuse in its `meta` and `room_id`.
fn shared_edits() -> Vec<(&'static str, SharedEdit, &'static str)> {
    fn meta(meta: &mut Option<CommandMeta>) -> &mut CommandMeta {
        meta.as_mut().expect("templates carry meta")
    }
    fn e(
        what: &'static str,
        edit: SharedEdit,
        message: &'static str,
    ) -> (&'static str, SharedEdit, &'static str) {
        (what, edit, message)
    }
    vec![
        e("missing meta", |m, _| *m = None, "meta must be set"),
        e(
            "empty meta.command_id",
            |m, _| meta(m).command_id.clear(),
            "meta.command_id must not be empty",
        ),
        e(
            "oversized meta.command_id",
            |m, _| meta(m).command_id = "c".repeat(129),
            "meta.command_id must be at most 128 characters, got 129",
        ),
        e(
            "meta.command_id charset",
            |m, _| meta(m).command_id = "cmd 1".into(),
            "meta.command_id contains ' ' at position 3",
        ),
        e(
            "meta.command_id control char",
            |m, _| meta(m).command_id = "cmd\n1".into(),
            "meta.command_id contains '\\n' at position 3",
        ),
        e(
            "oversized meta.app_code",
            |m, _| meta(m).app_code = "a".repeat(33),
            "meta.app_code must be at most 32 characters, got 33",
        ),
        e(
            "meta.app_code charset",
            |m, _| meta(m).app_code = "app code".into(),
            "meta.app_code contains ' '",
        ),
        e(
            "oversized meta.request_id",
            |m, _| meta(m).request_id = "r".repeat(129),
            "meta.request_id must be at most 128 characters",
        ),
        e(
            "meta.request_id control char",
            |m, _| meta(m).request_id = "req\u{1b}[31m".into(),
            "meta.request_id contains a control character at position 3",
        ),
        e(
            "empty room_id",
            |_, r| r.clear(),
            "room_id must not be empty",
        ),
        e(
            // The IM group id `room_<room_id>` must fit Tencent's 48 bytes.
            "oversized room_id",
            |_, r| *r = "x".repeat(MAX_ROOM_ID_LEN + 1),
            "room_id must be at most 43 characters, got 44",
        ),
        e(
            "room_id charset",
            |_, r| *r = "room/1".into(),
            "room_id contains '/' at position 4",
        ),
        e(
            "room_id control char",
            |_, r| *r = "room\t1".into(),
            "room_id contains '\\t' at position 4",
        ),
    ]
}

/// [`shared_edits`] applied to a valid request of each write RPC.
fn shared_cases(room: &str, fresh: &str) -> Vec<Case> {
    fn apply<R: WriteRequest>(edit: SharedEdit) -> impl FnOnce(&mut R) {
        move |request| {
            let (meta, room_id) = request.shared_fields();
            edit(meta, room_id);
        }
    }
    let mut cases = Vec::new();
    for (what, edit, message) in shared_edits() {
        cases.extend([
            write_case(what, create(fresh, "owner"), apply(edit), message),
            write_case(what, close_req(room), apply(edit), message),
            write_case(what, join(room, "newbie"), apply(edit), message),
            write_case(what, leave_req(room), apply(edit), message),
            write_case(what, kick_req(room), apply(edit), message),
            write_case(what, set_admin_req(room), apply(edit), message),
            write_case(what, take_mic_req(room, 1), apply(edit), message),
            write_case(what, leave_mic_req(room), apply(edit), message),
            write_case(what, lock_mic_req(room, 2), apply(edit), message),
            write_case(what, unlock_mic_req(room, 2), apply(edit), message),
            write_case(what, gift_req(room), apply(edit), message),
        ]);
    }
    cases
}

/// The same id damage for an id field of any request, whose limit is `max`.
fn id_edits(field: &'static str, max: usize) -> [(String, String, String); 4] {
    [
        (
            "".into(),
            format!("{field} must not be empty"),
            "empty".into(),
        ),
        (
            "u".repeat(max + 1),
            format!("{field} must be at most {max} characters, got {}", max + 1),
            "oversized".into(),
        ),
        (
            "u;drop".into(),
            format!("{field} contains ';' at position 1"),
            "charset".into(),
        ),
        (
            "u\u{0}".into(),
            format!("{field} contains '\\0' at position 1"),
            "control char".into(),
        ),
    ]
}

/// Every id field of every RPC (other than `meta.*` and `room_id` of the
/// write RPCs), with each kind of id damage.
fn id_cases(room: &str, fresh: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    for field in [
        "owner_id",
        "actor_id",
        "user_id",
        "target_id",
        "sender_id",
        "receiver_id",
        "gift_id",
    ] {
        // User ids are Tencent IM accounts (32 bytes); gift ids only fill a column.
        let max = if field == "gift_id" {
            MAX_ID_LEN
        } else {
            MAX_USER_ID_LEN
        };
        for (value, message, what) in id_edits(field, max) {
            // Leaked: the table wants `&'static str` messages, and this is a test.
            let message: &'static str = Box::leak(message.into_boxed_str());
            let what = format!("{what} {field}");
            cases.extend(id_field_cases(field, &what, value, message, room, fresh));
        }
    }
    cases.extend(read_id_cases(room));
    cases
}

/// `field` damaged to `value` in every write request that carries it.
fn id_field_cases(
    field: &'static str,
    what: &str,
    value: String,
    message: &'static str,
    room: &str,
    fresh: &str,
) -> Vec<Case> {
    match field {
        "owner_id" => vec![write_case(
            what,
            create(fresh, "owner"),
            |r| r.owner_id = value,
            message,
        )],
        "actor_id" => vec![
            write_case(
                what,
                close_req(room),
                |r| r.actor_id = value.clone(),
                message,
            ),
            write_case(
                what,
                kick_req(room),
                |r| r.actor_id = value.clone(),
                message,
            ),
            write_case(
                what,
                set_admin_req(room),
                |r| r.actor_id = value.clone(),
                message,
            ),
            write_case(
                what,
                lock_mic_req(room, 2),
                |r| r.actor_id = value.clone(),
                message,
            ),
            write_case(
                what,
                unlock_mic_req(room, 2),
                |r| r.actor_id = value,
                message,
            ),
        ],
        "user_id" => vec![
            write_case(
                what,
                join(room, "newbie"),
                |r| r.user_id = value.clone(),
                message,
            ),
            write_case(
                what,
                leave_req(room),
                |r| r.user_id = value.clone(),
                message,
            ),
            write_case(
                what,
                take_mic_req(room, 1),
                |r| r.user_id = value.clone(),
                message,
            ),
            write_case(what, leave_mic_req(room), |r| r.user_id = value, message),
        ],
        "target_id" => vec![
            write_case(
                what,
                kick_req(room),
                |r| r.target_id = value.clone(),
                message,
            ),
            write_case(what, set_admin_req(room), |r| r.target_id = value, message),
        ],
        "sender_id" | "receiver_id" | "gift_id" => vec![write_case(
            what,
            gift_req(room),
            |r| match field {
                "sender_id" => r.sender_id = value,
                "receiver_id" => r.receiver_id = value,
                _ => r.gift_id = value,
            },
            message,
        )],
        _ => unreachable!(),
    }
}

/// The read RPCs' ids, bounded as the commands that create them are.
fn read_id_cases(room: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    for (value, message, what) in id_edits("user_id", MAX_USER_ID_LEN) {
        let message: &'static str = Box::leak(message.into_boxed_str());
        let room = room.to_string();
        cases.push(Case {
            name: format!("Heartbeat {what} user_id"),
            call: Box::new(move |mut client| {
                Box::pin(async move {
                    client
                        .heartbeat(HeartbeatRequest {
                            room_id: room,
                            user_id: value,
                        })
                        .await
                        .map(drop)
                })
            }),
            code: tonic::Code::InvalidArgument,
            message,
        });
    }
    for (value, message, what) in id_edits("room_id", MAX_ROOM_ID_LEN) {
        let message: &'static str = Box::leak(message.into_boxed_str());
        let (get_value, beat_value) = (value.clone(), value);
        cases.push(Case {
            name: format!("GetRoom {what} room_id"),
            call: Box::new(move |mut client| {
                Box::pin(async move {
                    client
                        .get_room(GetRoomRequest { room_id: get_value })
                        .await
                        .map(drop)
                })
            }),
            code: tonic::Code::InvalidArgument,
            message,
        });
        cases.push(Case {
            name: format!("Heartbeat {what} room_id"),
            call: Box::new(move |mut client| {
                Box::pin(async move {
                    client
                        .heartbeat(HeartbeatRequest {
                            room_id: beat_value,
                            user_id: "fan".into(),
                        })
                        .await
                        .map(drop)
                })
            }),
            code: tonic::Code::InvalidArgument,
            message,
        });
    }
    cases
}

/// Numeric fields outside their range (the signed gift amounts are in the
/// hand-written table below).
fn range_cases(room: &str, fresh: &str) -> Vec<Case> {
    let mut cases = vec![
        write_case(
            "u32::MAX mic_seat_count",
            create(fresh, "owner"),
            |r| r.mic_seat_count = u32::MAX,
            "mic_seat_count must be in 1..=20, got 4294967295",
        ),
        write_case(
            "title control char",
            create(fresh, "owner"),
            |r| r.title = "ti\u{0}tle".into(),
            "title contains a control character at position 2",
        ),
        write_case(
            "title newline",
            create(fresh, "owner"),
            |r| r.title = "line\nforged".into(),
            "title contains a control character at position 4",
        ),
        write_case(
            "u32::MAX seat_index",
            take_mic_req(room, u32::MAX),
            |_| {},
            "seat_index 4294967295 does not exist",
        ),
        write_case(
            "u32::MAX seat_index",
            lock_mic_req(room, u32::MAX),
            |_| {},
            "seat_index 4294967295 does not exist",
        ),
        write_case(
            "u32::MAX seat_index",
            unlock_mic_req(room, u32::MAX),
            |_| {},
            "seat_index 4294967295 does not exist",
        ),
        write_case(
            "i64::MIN count",
            gift(room, &testkit::unique("gift-"), "fan", "owner", i64::MIN, 1),
            |_| {},
            "count must be positive, got -9223372036854775808",
        ),
        write_case(
            "i64::MAX unit_value",
            gift(room, &testkit::unique("gift-"), "fan", "owner", 1, i64::MAX),
            |_| {},
            "unit_value must be in 1..=1000000",
        ),
    ];
    for limit in [101, u32::MAX] {
        cases.push(Case {
            name: format!("ListRooms limit {limit}"),
            call: Box::new(move |mut client| {
                Box::pin(async move {
                    client
                        .list_rooms(ListRoomsRequest { limit })
                        .await
                        .map(drop)
                })
            }),
            code: tonic::Code::InvalidArgument,
            message: if limit == 101 {
                "limit must be in 1..=100, got 101"
            } else {
                "limit must be in 1..=100, got 4294967295"
            },
        });
    }
    cases
}

/// The gift amounts: signed on the wire, positive, within u32 and the room's limits.
fn gift_amount_cases(room: &str) -> Vec<Case> {
    vec![
        gift_case(
            "zero count",
            |r| r.count = 0,
            room,
            tonic::Code::InvalidArgument,
            "count must be positive, got 0",
        ),
        gift_case(
            "negative count",
            |r| r.count = -5,
            room,
            tonic::Code::InvalidArgument,
            "count must be positive, got -5",
        ),
        gift_case(
            "overflowing count",
            |r| r.count = i64::from(u32::MAX) + 1,
            room,
            tonic::Code::InvalidArgument,
            "count 4294967296 overflows",
        ),
        gift_case(
            "count above room limit",
            |r| r.count = 10_000,
            room,
            tonic::Code::InvalidArgument,
            "count must be in 1..=9999, got 10000",
        ),
        gift_case(
            "zero unit_value",
            |r| r.unit_value = 0,
            room,
            tonic::Code::InvalidArgument,
            "unit_value must be positive, got 0",
        ),
        gift_case(
            "negative unit_value",
            |r| r.unit_value = -1,
            room,
            tonic::Code::InvalidArgument,
            "unit_value must be positive, got -1",
        ),
        gift_case(
            "overflowing total",
            |r| {
                r.count = i64::from(u32::MAX);
                r.unit_value = i64::MAX;
            },
            room,
            tonic::Code::InvalidArgument,
            "overflows",
        ),
        gift_case(
            "unit_value above room limit",
            |r| r.unit_value = 1_000_001,
            room,
            tonic::Code::InvalidArgument,
            "unit_value must be in 1..=1000000",
        ),
    ]
}

/// The gift's ids and parties, and a gift to a room that does not exist.
fn gift_party_cases(room: &str, fresh: &str) -> Vec<Case> {
    vec![
        gift_case(
            "empty gift_id",
            |r| r.gift_id.clear(),
            room,
            tonic::Code::InvalidArgument,
            "gift_id must not be empty",
        ),
        gift_case(
            "gift_id charset",
            |r| r.gift_id = "rose!".into(),
            room,
            tonic::Code::InvalidArgument,
            "gift_id contains '!'",
        ),
        gift_case(
            "empty sender_id",
            |r| r.sender_id.clear(),
            room,
            tonic::Code::InvalidArgument,
            "sender_id must not be empty",
        ),
        gift_case(
            "oversized receiver_id",
            |r| r.receiver_id = "r".repeat(MAX_USER_ID_LEN + 1),
            room,
            tonic::Code::InvalidArgument,
            "receiver_id must be at most 32 characters",
        ),
        gift_case(
            "sender not a member",
            |r| r.sender_id = "stranger".into(),
            room,
            tonic::Code::FailedPrecondition,
            "user stranger is not a member",
        ),
        gift_case(
            "unknown room",
            {
                let fresh = fresh.to_string();
                move |r| r.room_id = fresh
            },
            room,
            tonic::Code::NotFound,
            "room does not exist",
        ),
    ]
}

/// CreateRoom's own fields.
fn create_field_cases(fresh: &str) -> Vec<Case> {
    vec![
        create_case(
            "empty title",
            |r| r.title = "   ".into(),
            fresh,
            "title must not be empty",
        ),
        create_case(
            "oversized title",
            |r| r.title = "t".repeat(129),
            fresh,
            "title must be at most 128 characters, got 129",
        ),
        create_case(
            "zero seats",
            |r| r.mic_seat_count = 0,
            fresh,
            "mic_seat_count must be at least 1",
        ),
        create_case(
            "too many seats",
            |r| r.mic_seat_count = 21,
            fresh,
            "mic_seat_count must be in 1..=20, got 21",
        ),
        create_case(
            "empty owner_id",
            |r| r.owner_id.clear(),
            fresh,
            "owner_id must not be empty",
        ),
    ]
}

/// A few fields of the other RPCs, and rooms that do not exist.
fn other_field_cases(room: &str, fresh: &str) -> Vec<Case> {
    vec![
        join_case(
            "room_id unicode",
            |r| r.room_id = "房间".into(),
            room,
            "room_id contains '房' at position 0",
        ),
        Case {
            name: "kick target charset".into(),
            call: Box::new({
                let room = room.to_string();
                move |mut client| {
                    Box::pin(async move {
                        client
                            .kick_user(KickUserRequest {
                                meta: meta(&testkit::unique("kick-")),
                                room_id: room,
                                actor_id: "owner".into(),
                                target_id: "bad id".into(),
                                ban_seconds: 0,
                            })
                            .await
                            .map(drop)
                    })
                }
            }),
            code: tonic::Code::InvalidArgument,
            message: "target_id contains ' '",
        },
        Case {
            name: "join unknown room".into(),
            call: Box::new({
                let fresh = fresh.to_string();
                move |mut client| {
                    Box::pin(async move { client.join_room(join(&fresh, "u")).await.map(drop) })
                }
            }),
            code: tonic::Code::NotFound,
            message: "room does not exist",
        },
        Case {
            name: "get unknown room".into(),
            call: Box::new({
                let fresh = fresh.to_string();
                move |mut client| {
                    Box::pin(async move {
                        client
                            .get_room(GetRoomRequest { room_id: fresh })
                            .await
                            .map(drop)
                    })
                }
            }),
            code: tonic::Code::NotFound,
            message: "room does not exist",
        },
        Case {
            name: "heartbeat empty user".into(),
            call: Box::new({
                let room = room.to_string();
                move |mut client| {
                    Box::pin(async move {
                        client
                            .heartbeat(HeartbeatRequest {
                                room_id: room,
                                user_id: String::new(),
                            })
                            .await
                            .map(drop)
                    })
                }
            }),
            code: tonic::Code::InvalidArgument,
            message: "user_id must not be empty",
        },
    ]
}

#[tokio::test]
async fn malformed_fields_are_refused_with_the_field_name_and_write_nothing() {
    let mut harness = Harness::start().await;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &["fan"]).await;
    let fresh = testkit::unique("fresh-");

    let mut cases = other_field_cases(&room, &fresh);
    cases.extend(gift_amount_cases(&room));
    cases.extend(gift_party_cases(&room, &fresh));
    cases.extend(create_field_cases(&fresh));
    cases.extend(shared_cases(&room, &fresh));
    cases.extend(id_cases(&room, &fresh));
    cases.extend(range_cases(&room, &fresh));
    assert!(
        cases.len() > 200,
        "every field of every RPC: {}",
        cases.len()
    );

    let log_before = harness.count("room_command_log", "room_id", &room).await;
    let outbox_before = harness.count("room_outbox", "room_id", &room).await;
    for case in cases {
        let error = (case.call)(harness.client.clone())
            .await
            .expect_err(&case.name);
        assert_eq!(
            error.code(),
            case.code,
            "{}: {}",
            case.name,
            error.message()
        );
        assert!(
            error.message().contains(case.message),
            "{}: `{}` should contain `{}`",
            case.name,
            error.message(),
            case.message
        );
    }
    assert_eq!(
        harness.count("room_command_log", "room_id", &room).await,
        log_before
    );
    assert_eq!(
        harness.count("room_outbox", "room_id", &room).await,
        outbox_before
    );
    assert_eq!(
        harness.count("room_command_log", "room_id", &fresh).await,
        0
    );
    assert_eq!(harness.count("rooms", "room_id", &fresh).await, 0);
    let sagas: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM room_gift_saga")
        .fetch_one(&harness.pool)
        .await
        .unwrap();
    assert_eq!(sagas, 0);
    assert_eq!(harness.wallet.stats().debits, 0);
    harness.stop().await;
}
