//! The SendGift wallet saga (docs/design.md#gift-saga): debit before commit, refund when the
//! commit fails, the recovery sweep for the crash window, the refund budget
//! after which a saga ends `failed`, and wallet refusals that leave nothing
//! behind.

mod common;

use common::*;
use fake_wallet::{FaultCode, Method};
use hyapp_api::wallet::DebitRequest;
use hyapp_api::wallet::wallet_service_client::WalletServiceClient;

async fn saga_status(harness: &Harness, command_id: &str) -> Option<String> {
    sqlx::query_scalar("SELECT status FROM room_gift_saga WHERE command_id = ?")
        .bind(command_id)
        .fetch_optional(&harness.pool)
        .await
        .unwrap()
}

/// `(status, refund_attempts, last_error)` of a saga row.
async fn saga_refunds(harness: &Harness, command_id: &str) -> (String, u32, String) {
    sqlx::query_as(
        "SELECT status, refund_attempts, last_error FROM room_gift_saga WHERE command_id = ?",
    )
    .bind(command_id)
    .fetch_one(&harness.pool)
    .await
    .unwrap()
}

/// Makes a saga look untouched for ten minutes, so the next sweep (with a
/// one-minute `stuck_after`) picks it up, as a later sweep would in production.
async fn age_saga(harness: &Harness, command_id: &str) {
    sqlx::query("UPDATE room_gift_saga SET updated_at_ms = ? WHERE command_id = ?")
        .bind(service_kit::time::now_ms() - 10 * 60_000)
        .bind(command_id)
        .execute(&harness.pool)
        .await
        .unwrap();
}

/// One saga sweep with the harness's budget and a one-minute `stuck_after`;
/// returns how many sagas it refunded.
async fn sweep(harness: &Harness) -> usize {
    let budget = harness.config.saga.max_refund_attempts;
    room_service::sweeps::sweep_sagas(&harness.rooms, 60_000, budget)
        .await
        .unwrap()
}

/// The crash window: a gift of 70 debited at the wallet, its saga row left in
/// `status` ten minutes ago, neither committed nor refunded. Returns the room
/// and the gift's command id.
async fn crash_window_saga(harness: &Harness, status: &str) -> (String, String) {
    let room = testkit::unique("room-");
    let command_id = testkit::unique("gift-");
    let mut wallet = WalletServiceClient::connect(harness.wallet.endpoint())
        .await
        .unwrap();
    wallet
        .debit(DebitRequest {
            idempotency_key: command_id.clone(),
            user_id: "fan".into(),
            amount: 70,
            reason: "gift".into(),
        })
        .await
        .unwrap();
    let long_ago = service_kit::time::now_ms() - 10 * 60_000;
    sqlx::query(
        "INSERT INTO room_gift_saga (command_id, room_id, sender_id, amount, status, created_at_ms, updated_at_ms) \
         VALUES (?, ?, 'fan', 70, ?, ?, ?)",
    )
    .bind(&command_id)
    .bind(&room)
    .bind(status)
    .bind(long_ago)
    .bind(long_ago)
    .execute(&harness.pool)
    .await
    .unwrap();
    (room, command_id)
}

#[tokio::test]
async fn a_gift_debits_once_and_commits_its_saga() {
    let mut harness = Harness::start().await;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &["fan"]).await;
    let command_id = testkit::unique("gift-");
    let request = gift(&room, &command_id, "fan", "owner", 3, 10);
    let reply = harness
        .client
        .send_gift(request.clone())
        .await
        .unwrap()
        .into_inner();
    let types: Vec<&str> = reply
        .events
        .iter()
        .map(|event| event.event_type.as_str())
        .collect();
    assert_eq!(
        types,
        ["RoomGiftSent", "RoomHeatChanged", "RoomRankChanged"]
    );
    assert_eq!(harness.wallet.balance("fan"), 1_000_000 - 30);
    assert_eq!(
        saga_status(&harness, &command_id).await.as_deref(),
        Some("committed")
    );

    let replay = harness
        .client
        .send_gift(request)
        .await
        .unwrap()
        .into_inner();
    assert!(replay.replayed);
    assert_eq!(harness.wallet.stats().debits, 1);
    assert_eq!(harness.wallet.balance("fan"), 1_000_000 - 30);
    harness.stop().await;
}

#[tokio::test]
async fn insufficient_balance_is_a_clear_error_and_writes_nothing() {
    let mut harness = Harness::start().await;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &["poor"]).await;
    harness.wallet.set_balance("poor", 5);
    let command_id = testkit::unique("gift-");
    let error = harness
        .client
        .send_gift(gift(&room, &command_id, "poor", "owner", 1, 6))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::FailedPrecondition);
    assert!(
        error.message().contains("insufficient balance"),
        "{}",
        error.message()
    );
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
    assert_eq!(
        harness.count("room_outbox", "room_id", &room).await,
        2,
        "create + join only"
    );
    assert_eq!(harness.wallet.balance("poor"), 5);
    let snapshot = room_state(&mut harness.client, &room).await;
    assert_eq!(snapshot.heat, 0);
    harness.stop().await;
}

#[tokio::test]
async fn a_failed_commit_is_refunded_and_leaves_no_rows() {
    let mut harness = Harness::start().await;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &["fan"]).await;
    let outbox_before = harness.count("room_outbox", "room_id", &room).await;
    // Make every outbox insert fail: the SaveMutation transaction aborts after the debit.
    sqlx::query(
        "CREATE TRIGGER fail_outbox BEFORE INSERT ON room_outbox FOR EACH ROW \
         SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected outbox failure'",
    )
    .execute(&harness.pool)
    .await
    .unwrap();
    let command_id = testkit::unique("gift-");
    let error = harness
        .client
        .send_gift(gift(&room, &command_id, "fan", "owner", 2, 50))
        .await
        .unwrap_err();
    assert_eq!(
        error.code(),
        tonic::Code::Unavailable,
        "{}",
        error.message()
    );

    // Debited, then refunded; neither the command nor any outbox row exists.
    let stats = harness.wallet.stats();
    assert_eq!((stats.debits, stats.refunds), (1, 1));
    assert_eq!(harness.wallet.balance("fan"), 1_000_000);
    assert_eq!(
        saga_status(&harness, &command_id).await.as_deref(),
        Some("compensated")
    );
    assert_eq!(
        harness
            .count("room_command_log", "command_id", &command_id)
            .await,
        0
    );
    assert_eq!(
        harness.count("room_outbox", "room_id", &room).await,
        outbox_before
    );

    sqlx::query("DROP TRIGGER fail_outbox")
        .execute(&harness.pool)
        .await
        .unwrap();
    // The refunded id is spent; a new id works and the cell was not corrupted.
    let reused = harness
        .client
        .send_gift(gift(&room, &command_id, "fan", "owner", 2, 50))
        .await
        .unwrap_err();
    assert_eq!(reused.code(), tonic::Code::FailedPrecondition);
    assert!(
        reused.message().contains("refunded"),
        "{}",
        reused.message()
    );
    let fresh = harness
        .client
        .send_gift(gift(
            &room,
            &testkit::unique("gift-"),
            "fan",
            "owner",
            2,
            50,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fresh.room_version, 3);
    harness.stop().await;
}

#[tokio::test]
async fn an_unknown_debit_outcome_is_compensated() {
    let mut harness = Harness::start().await;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &["fan"]).await;
    // The debit is applied but its reply is lost.
    harness.wallet.inject(fake_wallet::FaultRule {
        method: Method::Debit,
        count: 1,
        code: FaultCode::DeadlineExceeded,
        after_apply: true,
    });
    let command_id = testkit::unique("gift-");
    let error = harness
        .client
        .send_gift(gift(&room, &command_id, "fan", "owner", 1, 40))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::Unavailable);
    assert!(error.message().contains("wallet"), "{}", error.message());
    assert_eq!(harness.wallet.balance("fan"), 1_000_000);
    assert_eq!(harness.wallet.stats().refunds, 1);
    assert_eq!(
        saga_status(&harness, &command_id).await.as_deref(),
        Some("compensated")
    );
    assert_eq!(
        harness
            .count("room_command_log", "command_id", &command_id)
            .await,
        0
    );

    // Wallet down before applying: also compensated (nothing to refund).
    harness
        .wallet
        .fail_next(Method::Debit, 1, FaultCode::Unavailable);
    let second = testkit::unique("gift-");
    let error = harness
        .client
        .send_gift(gift(&room, &second, "fan", "owner", 1, 40))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::Unavailable);
    assert_eq!(
        saga_status(&harness, &second).await.as_deref(),
        Some("compensated")
    );
    assert_eq!(harness.wallet.balance("fan"), 1_000_000);
    harness.stop().await;
}

#[tokio::test]
async fn the_sweep_refunds_a_saga_left_by_a_crash() {
    let harness = Harness::start().await;
    let (room, command_id) = crash_window_saga(&harness, "debited").await;
    // A fresh saga of a live pipeline must be left alone.
    let live = testkit::unique("gift-");
    sqlx::query(
        "INSERT INTO room_gift_saga (command_id, room_id, sender_id, amount, status, created_at_ms, updated_at_ms) \
         VALUES (?, ?, 'fan', 5, 'debiting', ?, ?)",
    )
    .bind(&live)
    .bind(&room)
    .bind(service_kit::time::now_ms())
    .bind(service_kit::time::now_ms())
    .execute(&harness.pool)
    .await
    .unwrap();
    assert_eq!(harness.wallet.balance("fan"), 1_000_000 - 70);

    let repaired = sweep(&harness).await;
    assert_eq!(repaired, 1);
    assert_eq!(harness.wallet.balance("fan"), 1_000_000);
    assert_eq!(harness.wallet.stats().refunds, 1);
    assert_eq!(
        saga_status(&harness, &command_id).await.as_deref(),
        Some("compensated")
    );
    assert_eq!(
        saga_status(&harness, &live).await.as_deref(),
        Some("debiting")
    );
    // Idempotent: a second sweep finds nothing and moves no money.
    assert_eq!(sweep(&harness).await, 0);
    assert_eq!(harness.wallet.stats().refunds, 1);
    harness.stop().await;
}

#[tokio::test]
async fn a_refund_that_keeps_failing_ends_failed_after_the_budget() {
    let harness = Harness::start_with(|config| config.saga.max_refund_attempts = 3).await;
    let budget = harness.config.saga.max_refund_attempts;
    let (_, command_id) = crash_window_saga(&harness, "debiting").await;
    // Every refund fails, far more often than the budget allows.
    harness
        .wallet
        .fail_next(Method::Refund, 100, FaultCode::Unavailable);

    for attempt in 1..=budget {
        let calls = harness.wallet.calls();
        let refunded = sweep(&harness).await;
        assert_eq!(refunded, 0);
        assert_eq!(
            harness.wallet.calls(),
            calls + 1,
            "one refund call per sweep"
        );
        let (status, attempts, last_error) = saga_refunds(&harness, &command_id).await;
        assert_eq!(attempts, attempt);
        assert!(last_error.contains("injected fault"), "{last_error}");
        if attempt < budget {
            assert_eq!(status, "compensating", "attempt {attempt}");
            assert_eq!(harness.metric("room_gift_sagas_failed_total").await, 0.0);
        } else {
            assert_eq!(status, "failed", "attempt {attempt}");
        }
        age_saga(&harness, &command_id).await;
    }
    assert_eq!(harness.metric("room_gift_sagas_failed_total").await, 1.0);

    // Terminal: a later sweep neither calls the wallet nor touches the row.
    let calls = harness.wallet.calls();
    assert_eq!(sweep(&harness).await, 0);
    assert_eq!(harness.wallet.calls(), calls);
    let (status, attempts, last_error) = saga_refunds(&harness, &command_id).await;
    assert_eq!((status.as_str(), attempts), ("failed", budget));
    assert!(last_error.contains("injected fault"), "{last_error}");
    assert_eq!(harness.metric("room_gift_sagas_failed_total").await, 1.0);
    // Debited and not refunded: what the alert asks an operator to fix.
    assert_eq!(harness.wallet.balance("fan"), 1_000_000 - 70);
    assert_eq!(harness.wallet.stats().refunds, 0);
    // The alert's gauge holds while the row waits, and clears once the
    // operator has marked it (the runbook's last step).
    assert_eq!(harness.metric("room_gift_sagas_failed_open").await, 1.0);
    sqlx::query("UPDATE room_gift_saga SET status = 'compensated' WHERE command_id = ? AND status = 'failed'")
        .bind(&command_id)
        .execute(&harness.pool)
        .await
        .unwrap();
    assert_eq!(sweep(&harness).await, 0);
    assert_eq!(harness.metric("room_gift_sagas_failed_open").await, 0.0);
    harness.stop().await;
}

#[tokio::test]
async fn the_pipelines_failed_refund_counts_against_the_budget() {
    let mut harness = Harness::start_with(|config| config.saga.max_refund_attempts = 2).await;
    let budget = harness.config.saga.max_refund_attempts;
    let room = testkit::unique("room-");
    room_with_members(&mut harness.client, &room, "owner", &["fan"]).await;
    // The debit is applied but its reply is lost, and the pipeline's refund fails.
    harness.wallet.inject(fake_wallet::FaultRule {
        method: Method::Debit,
        count: 1,
        code: FaultCode::DeadlineExceeded,
        after_apply: true,
    });
    harness
        .wallet
        .fail_next(Method::Refund, 100, FaultCode::Unavailable);
    let command_id = testkit::unique("gift-");
    let error = harness
        .client
        .send_gift(gift(&room, &command_id, "fan", "owner", 1, 40))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::Unavailable);
    let (status, attempts, _) = saga_refunds(&harness, &command_id).await;
    assert_eq!((status.as_str(), attempts), ("compensating", 1));

    // The sweep has one attempt left; when it fails too the saga is failed.
    age_saga(&harness, &command_id).await;
    let calls = harness.wallet.calls();
    sweep(&harness).await;
    assert_eq!(harness.wallet.calls(), calls + 1);
    let (status, attempts, last_error) = saga_refunds(&harness, &command_id).await;
    assert_eq!((status.as_str(), attempts), ("failed", budget));
    assert!(last_error.contains("injected fault"), "{last_error}");
    assert_eq!(harness.metric("room_gift_sagas_failed_total").await, 1.0);
    assert_eq!(harness.wallet.balance("fan"), 1_000_000 - 40);

    age_saga(&harness, &command_id).await;
    let calls = harness.wallet.calls();
    sweep(&harness).await;
    assert_eq!(harness.wallet.calls(), calls);
    assert_eq!(harness.metric("room_gift_sagas_failed_total").await, 1.0);

    // A retry of the gift is told its id is spent and why, not "in flight".
    let retried = harness
        .client
        .send_gift(gift(&room, &command_id, "fan", "owner", 1, 40))
        .await
        .unwrap_err();
    assert_eq!(retried.code(), tonic::Code::FailedPrecondition);
    assert_eq!(
        retried
            .metadata()
            .get("x-error-reason")
            .map(|value| value.to_str().unwrap()),
        Some("gift_refund_failed")
    );
    assert_eq!(harness.wallet.calls(), calls, "no second debit");
    harness.stop().await;
}

#[tokio::test]
async fn a_saga_whose_budget_a_crash_spent_is_failed_without_another_refund() {
    let harness = Harness::start_with(|config| config.saga.max_refund_attempts = 2).await;
    let command_id = testkit::unique("gift-");
    // Claimed for its last attempt, then the process died before the refund.
    let long_ago = service_kit::time::now_ms() - 10 * 60_000;
    sqlx::query(
        "INSERT INTO room_gift_saga (command_id, room_id, sender_id, amount, status, \
         refund_attempts, last_error, created_at_ms, updated_at_ms) \
         VALUES (?, ?, 'fan', 9, 'compensating', 2, 'refund x: Unavailable earlier', ?, ?)",
    )
    .bind(&command_id)
    .bind(testkit::unique("room-"))
    .bind(long_ago)
    .bind(long_ago)
    .execute(&harness.pool)
    .await
    .unwrap();
    let calls = harness.wallet.calls();
    sweep(&harness).await;
    assert_eq!(harness.wallet.calls(), calls, "no refund beyond the budget");
    let (status, attempts, last_error) = saga_refunds(&harness, &command_id).await;
    assert_eq!((status.as_str(), attempts), ("failed", 2));
    assert_eq!(
        last_error, "refund x: Unavailable earlier",
        "the last error is kept"
    );
    assert_eq!(harness.metric("room_gift_sagas_failed_total").await, 1.0);
    harness.stop().await;
}
