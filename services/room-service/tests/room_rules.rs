//! Room rules seen from the gateway: a self-gift is refused before the wallet
//! is called, the per-room caps of `room.rules.*` refuse with
//! FAILED_PRECONDITION and their reason, ids are byte-exact end to end
//! (docs/design.md#identifiers), and ids at Tencent IM's limits are accepted
//! while one byte more is not. A refused command writes nothing.

mod common;

use common::*;
use hyapp_api::room::{KickUserRequest, SetAdminRequest};
use room_service::validate::{MAX_ROOM_ID_LEN, MAX_USER_ID_LEN};
use sqlx::Row;

/// The `x-error-reason` of a refusal.
fn reason(status: &tonic::Status) -> &str {
    status
        .metadata()
        .get("x-error-reason")
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
}

/// Rows of `room` in the command log, the outbox and the saga table.
async fn written(harness: &Harness, room: &str) -> (i64, i64, i64) {
    (
        harness.count("room_command_log", "room_id", room).await,
        harness.count("room_outbox", "room_id", room).await,
        harness.count("room_gift_saga", "room_id", room).await,
    )
}

#[tokio::test]
async fn a_self_gift_is_refused_before_any_wallet_call_and_writes_nothing() {
    let mut harness = Harness::start().await;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &["fan"]).await;
    let before = written(&harness, &room).await;
    let calls = harness.wallet.calls();
    let balance = harness.wallet.balance("fan");

    let command_id = testkit::unique("gift-");
    let error = harness
        .client
        .send_gift(gift(&room, &command_id, "fan", "fan", 3, 10))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert_eq!(reason(&error), "self_gift");
    assert!(error.message().contains("fan"), "{}", error.message());

    assert_eq!(harness.wallet.calls(), calls, "the wallet was called");
    assert_eq!(harness.wallet.stats().debits, 0);
    assert_eq!(harness.wallet.balance("fan"), balance);
    assert!(harness.wallet.debit_record(&command_id).is_none());
    assert_eq!(written(&harness, &room).await, before);
    assert_eq!(
        harness
            .count("room_gift_saga", "command_id", &command_id)
            .await,
        0
    );
    assert_eq!(
        harness
            .count("room_command_log", "command_id", &command_id)
            .await,
        0
    );
    // The same sender may still give to someone else.
    harness
        .client
        .send_gift(gift(
            &room,
            &testkit::unique("gift-"),
            "fan",
            "owner",
            3,
            10,
        ))
        .await
        .expect("a gift to another member");
    assert_eq!(harness.wallet.stats().debits, 1);
    harness.stop().await;
}

fn set_admin(room: &str, target: &str) -> SetAdminRequest {
    SetAdminRequest {
        meta: meta(&testkit::unique("admin-")),
        room_id: room.into(),
        actor_id: "owner".into(),
        target_id: target.into(),
        admin: true,
    }
}

fn kick_with_ban(room: &str, target: &str) -> KickUserRequest {
    KickUserRequest {
        meta: meta(&testkit::unique("kick-")),
        room_id: room.into(),
        actor_id: "owner".into(),
        target_id: target.into(),
        ban_seconds: 3_600,
    }
}

/// Asserts a cap's refusal: FAILED_PRECONDITION, its reason, nothing written.
async fn assert_capped(
    harness: &Harness,
    room: &str,
    result: Result<impl std::fmt::Debug, tonic::Status>,
    expected_reason: &str,
    before: (i64, i64, i64),
) {
    let error = result.expect_err("the cap refuses");
    assert_eq!(error.code(), tonic::Code::FailedPrecondition, "{error:?}");
    assert_eq!(reason(&error), expected_reason);
    assert_eq!(written(harness, room).await, before, "{expected_reason}");
}

#[tokio::test]
async fn caps_set_small_in_config_refuse_with_failed_precondition() {
    let mut harness = Harness::start_with(|config| {
        config.room.rules.max_members = 4;
        config.room.rules.max_admins = 1;
        config.room.rules.max_bans = 1;
        config.room.rules.max_contributors = 1;
    })
    .await;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &["a", "b", "c"]).await;

    // Members: the owner and three users fill the room.
    let before = written(&harness, &room).await;
    let refused = harness.client.join_room(join(&room, "d")).await;
    assert_capped(&harness, &room, refused, "room_full", before).await;

    // Admins: one.
    harness
        .client
        .set_admin(set_admin(&room, "a"))
        .await
        .unwrap();
    let before = written(&harness, &room).await;
    let refused = harness.client.set_admin(set_admin(&room, "b")).await;
    assert_capped(&harness, &room, refused, "too_many_admins", before).await;

    // Bans: one in force; a second kick with a ban is refused and kicks nobody.
    harness
        .client
        .kick_user(kick_with_ban(&room, "c"))
        .await
        .unwrap();
    let before = written(&harness, &room).await;
    let refused = harness.client.kick_user(kick_with_ban(&room, "b")).await;
    assert_capped(&harness, &room, refused, "too_many_bans", before).await;
    let snapshot = room_state(&mut harness.client, &room).await;
    assert!(snapshot.members.contains(&"b".to_string()));

    // Contributors: one sender today; the next one is refused before the wallet.
    harness
        .client
        .send_gift(gift(&room, &testkit::unique("gift-"), "a", "owner", 1, 5))
        .await
        .unwrap();
    let debits = harness.wallet.stats().debits;
    let before = written(&harness, &room).await;
    let refused = harness
        .client
        .send_gift(gift(&room, &testkit::unique("gift-"), "b", "owner", 1, 5))
        .await;
    assert_capped(&harness, &room, refused, "too_many_contributors", before).await;
    assert_eq!(harness.wallet.stats().debits, debits);
    // Today's contributor keeps giving.
    harness
        .client
        .send_gift(gift(&room, &testkit::unique("gift-"), "a", "owner", 1, 5))
        .await
        .expect("a known contributor is not refused");
    harness.stop().await;
}

#[tokio::test]
async fn two_spellings_of_a_room_id_are_never_one_live_room() {
    let mut harness = Harness::start().await;
    let upper = testkit::unique("Room-");
    let lower = upper.to_lowercase();
    assert_ne!(upper, lower);
    room_with_members(&mut harness.client, &upper, "Alice", &["Bob"]).await;

    // The other spelling is another room, and that one does not exist.
    let error = harness
        .client
        .join_room(join(&lower, "mallory"))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::NotFound);
    assert_eq!(reason(&error), "room_not_found");
    let error = harness
        .client
        .get_room(hyapp_api::room::GetRoomRequest {
            room_id: lower.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::NotFound);
    assert_eq!(
        harness.count("room_command_log", "room_id", &lower).await,
        0
    );

    // Creating it makes a second room with its own state.
    room_with_members(&mut harness.client, &lower, "alice", &[]).await;
    let first = room_state(&mut harness.client, &upper).await;
    let second = room_state(&mut harness.client, &lower).await;
    assert_eq!(first.owner_id, "Alice");
    assert_eq!(first.members, ["Alice", "Bob"]);
    assert_eq!(second.owner_id, "alice");
    assert_eq!(second.members, ["alice"]);

    // MySQL holds two rows, each with its own state.
    let rows = sqlx::query(
        "SELECT room_id, owner_id, version FROM rooms WHERE room_id IN (?, ?) ORDER BY room_id",
    )
    .bind(&upper)
    .bind(&lower)
    .fetch_all(&harness.pool)
    .await
    .unwrap();
    let rows: Vec<(String, String, u64)> = rows
        .iter()
        .map(|row| {
            let text = |column: &str| -> String {
                row.try_get::<service_kit::db::IdText, _>(column)
                    .unwrap()
                    .into()
            };
            (text("room_id"), text("owner_id"), row.get("version"))
        })
        .collect();
    assert_eq!(
        rows,
        [
            (upper.clone(), "Alice".to_string(), 2),
            (lower.clone(), "alice".to_string(), 1),
        ]
    );
    assert_eq!(
        harness.count("room_command_log", "room_id", &upper).await,
        2
    );
    assert_eq!(
        harness.count("room_command_log", "room_id", &lower).await,
        1
    );
    assert_eq!(harness.count("room_outbox", "room_id", &lower).await, 1);
    harness.stop().await;
}

#[tokio::test]
async fn ids_at_tencent_limits_are_accepted_and_one_byte_more_is_not() {
    let mut harness = Harness::start().await;
    // Unique per run, padded to exactly the limits.
    let pad = |prefix: String, length: usize| format!("{prefix:x<length$}");
    let room = pad(testkit::unique("room-"), MAX_ROOM_ID_LEN);
    let owner = pad(testkit::unique("owner-"), MAX_USER_ID_LEN);
    let member = pad(testkit::unique("member-"), MAX_USER_ID_LEN);
    assert_eq!((room.len(), owner.len()), (43, 32));
    room_with_members(&mut harness.client, &room, &owner, &[&member]).await;
    let snapshot = room_state(&mut harness.client, &room).await;
    assert!(snapshot.members.contains(&member));

    let error = harness
        .client
        .create_room(create(&format!("{room}x"), &owner))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        error.message(),
        "room_id must be at most 43 characters, got 44"
    );
    let error = harness
        .client
        .join_room(join(&room, &format!("{member}x")))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        error.message(),
        "user_id must be at most 32 characters, got 33"
    );
    harness.stop().await;
}
