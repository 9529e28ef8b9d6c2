//! Bad input through the real gRPC server: every malformed field is refused
//! with INVALID_ARGUMENT (or NOT_FOUND for an unknown room) and a message
//! naming the field, and nothing is written.

mod common;

use common::*;
use hyapp_api::room::room_service_client::RoomServiceClient;
use hyapp_api::room::{
    CreateRoomRequest, GetRoomRequest, HeartbeatRequest, JoinRoomRequest, KickUserRequest,
    SendGiftRequest,
};
use tonic::transport::Channel;

type Call = Box<
    dyn FnOnce(
        RoomServiceClient<Channel>,
    ) -> futures::future::BoxFuture<'static, Result<(), tonic::Status>>,
>;

struct Case {
    name: &'static str,
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
        name,
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
        name,
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
        name,
        call: Box::new(move |mut client| {
            Box::pin(async move { client.create_room(request).await.map(drop) })
        }),
        code: tonic::Code::InvalidArgument,
        message,
    }
}

#[tokio::test]
async fn malformed_fields_are_refused_with_the_field_name_and_write_nothing() {
    let mut harness = Harness::start().await;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &["fan"]).await;
    let fresh = testkit::unique("fresh-");
    let long_id = "x".repeat(65);
    let long_command = "c".repeat(129);

    let cases = vec![
        join_case(
            "empty command_id",
            |r| r.meta.as_mut().unwrap().command_id.clear(),
            &room,
            "meta.command_id must not be empty",
        ),
        join_case(
            "oversized command_id",
            move |r| r.meta.as_mut().unwrap().command_id = long_command,
            &room,
            "meta.command_id must be at most 128 characters, got 129",
        ),
        join_case(
            "command_id charset",
            |r| r.meta.as_mut().unwrap().command_id = "cmd 1".into(),
            &room,
            "meta.command_id contains ' ' at position 3",
        ),
        join_case("missing meta", |r| r.meta = None, &room, "meta must be set"),
        join_case(
            "empty room_id",
            |r| r.room_id.clear(),
            &room,
            "room_id must not be empty",
        ),
        join_case(
            "oversized room_id",
            {
                let long_id = long_id.clone();
                move |r| r.room_id = long_id
            },
            &room,
            "room_id must be at most 64 characters, got 65",
        ),
        join_case(
            "room_id charset",
            |r| r.room_id = "room/1".into(),
            &room,
            "room_id contains '/' at position 4",
        ),
        join_case(
            "room_id unicode",
            |r| r.room_id = "房间".into(),
            &room,
            "room_id contains '房' at position 0",
        ),
        join_case(
            "empty user_id",
            |r| r.user_id.clear(),
            &room,
            "user_id must not be empty",
        ),
        join_case(
            "oversized user_id",
            move |r| r.user_id = long_id,
            &room,
            "user_id must be at most 64 characters, got 65",
        ),
        join_case(
            "user_id charset",
            |r| r.user_id = "u;drop".into(),
            &room,
            "user_id contains ';' at position 1",
        ),
        join_case(
            "app_code charset",
            |r| r.meta.as_mut().unwrap().app_code = "app code".into(),
            &room,
            "meta.app_code contains ' '",
        ),
        gift_case(
            "zero count",
            |r| r.count = 0,
            &room,
            tonic::Code::InvalidArgument,
            "count must be positive, got 0",
        ),
        gift_case(
            "negative count",
            |r| r.count = -5,
            &room,
            tonic::Code::InvalidArgument,
            "count must be positive, got -5",
        ),
        gift_case(
            "overflowing count",
            |r| r.count = i64::from(u32::MAX) + 1,
            &room,
            tonic::Code::InvalidArgument,
            "count 4294967296 overflows",
        ),
        gift_case(
            "count above room limit",
            |r| r.count = 10_000,
            &room,
            tonic::Code::InvalidArgument,
            "count must be in 1..=9999, got 10000",
        ),
        gift_case(
            "zero unit_value",
            |r| r.unit_value = 0,
            &room,
            tonic::Code::InvalidArgument,
            "unit_value must be positive, got 0",
        ),
        gift_case(
            "negative unit_value",
            |r| r.unit_value = -1,
            &room,
            tonic::Code::InvalidArgument,
            "unit_value must be positive, got -1",
        ),
        gift_case(
            "overflowing total",
            |r| {
                r.count = i64::from(u32::MAX);
                r.unit_value = i64::MAX;
            },
            &room,
            tonic::Code::InvalidArgument,
            "overflows",
        ),
        gift_case(
            "unit_value above room limit",
            |r| r.unit_value = 1_000_001,
            &room,
            tonic::Code::InvalidArgument,
            "unit_value must be in 1..=1000000",
        ),
        gift_case(
            "empty gift_id",
            |r| r.gift_id.clear(),
            &room,
            tonic::Code::InvalidArgument,
            "gift_id must not be empty",
        ),
        gift_case(
            "gift_id charset",
            |r| r.gift_id = "rose!".into(),
            &room,
            tonic::Code::InvalidArgument,
            "gift_id contains '!'",
        ),
        gift_case(
            "empty sender_id",
            |r| r.sender_id.clear(),
            &room,
            tonic::Code::InvalidArgument,
            "sender_id must not be empty",
        ),
        gift_case(
            "oversized receiver_id",
            |r| r.receiver_id = "r".repeat(65),
            &room,
            tonic::Code::InvalidArgument,
            "receiver_id must be at most 64 characters",
        ),
        gift_case(
            "sender not a member",
            |r| r.sender_id = "stranger".into(),
            &room,
            tonic::Code::FailedPrecondition,
            "user stranger is not a member",
        ),
        gift_case(
            "unknown room",
            {
                let fresh = fresh.clone();
                move |r| r.room_id = fresh
            },
            &room,
            tonic::Code::NotFound,
            "room does not exist",
        ),
        create_case(
            "empty title",
            |r| r.title = "   ".into(),
            &fresh,
            "title must not be empty",
        ),
        create_case(
            "oversized title",
            |r| r.title = "t".repeat(129),
            &fresh,
            "title must be at most 128 characters, got 129",
        ),
        create_case(
            "zero seats",
            |r| r.mic_seat_count = 0,
            &fresh,
            "mic_seat_count must be at least 1",
        ),
        create_case(
            "too many seats",
            |r| r.mic_seat_count = 21,
            &fresh,
            "mic_seat_count must be in 1..=20, got 21",
        ),
        create_case(
            "empty owner_id",
            |r| r.owner_id.clear(),
            &fresh,
            "owner_id must not be empty",
        ),
        Case {
            name: "kick target charset",
            call: Box::new({
                let room = room.clone();
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
            name: "join unknown room",
            call: Box::new({
                let fresh = fresh.clone();
                move |mut client| {
                    Box::pin(async move { client.join_room(join(&fresh, "u")).await.map(drop) })
                }
            }),
            code: tonic::Code::NotFound,
            message: "room does not exist",
        },
        Case {
            name: "get unknown room",
            call: Box::new({
                let fresh = fresh.clone();
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
            name: "heartbeat empty user",
            call: Box::new({
                let room = room.clone();
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
    ];

    let log_before = harness.count("room_command_log", "room_id", &room).await;
    let outbox_before = harness.count("room_outbox", "room_id", &room).await;
    for case in cases {
        let error = (case.call)(harness.client.clone())
            .await
            .expect_err(case.name);
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
