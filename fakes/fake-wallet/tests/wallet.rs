//! The fake over real gRPC and HTTP: idempotency, balances, refunds and faults.

use fake_wallet::{FakeWalletConfig, FaultCode, Method};
use hyapp_api::wallet::{
    DebitRequest, GetBalanceRequest, RefundRequest, wallet_service_client::WalletServiceClient,
};
use tonic::transport::Channel;

async fn client(handle: &fake_wallet::FakeWalletHandle) -> WalletServiceClient<Channel> {
    WalletServiceClient::connect(handle.endpoint())
        .await
        .expect("connect fake wallet")
}

fn debit(key: &str, user: &str, amount: i64) -> DebitRequest {
    DebitRequest {
        idempotency_key: key.into(),
        user_id: user.into(),
        amount,
        reason: "test".into(),
    }
}

#[tokio::test]
async fn debit_refund_and_balance_over_grpc() {
    let handle = fake_wallet::spawn(FakeWalletConfig {
        balances: vec![("poor".into(), 5)],
        ..FakeWalletConfig::default()
    })
    .await
    .unwrap();
    let mut wallet = client(&handle).await;

    let first = wallet
        .debit(debit("k1", "u1", 300))
        .await
        .unwrap()
        .into_inner();
    assert!(!first.replayed);
    assert_eq!(first.balance_after, 1_000_000 - 300);
    let again = wallet
        .debit(debit("k1", "u1", 300))
        .await
        .unwrap()
        .into_inner();
    assert!(again.replayed);
    assert_eq!(again.transaction_id, first.transaction_id);

    let conflict = wallet.debit(debit("k1", "u1", 301)).await.unwrap_err();
    assert_eq!(conflict.code(), tonic::Code::FailedPrecondition);

    let poor = wallet.debit(debit("k2", "poor", 6)).await.unwrap_err();
    assert_eq!(poor.code(), tonic::Code::FailedPrecondition);
    assert_eq!(poor.message(), "insufficient balance");

    let refund = wallet
        .refund(RefundRequest {
            idempotency_key: "r1".into(),
            debit_idempotency_key: "k1".into(),
            reason: "test".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!refund.debit_not_found && !refund.replayed);
    let unknown = wallet
        .refund(RefundRequest {
            idempotency_key: "r2".into(),
            debit_idempotency_key: "nope".into(),
            reason: "test".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(unknown.debit_not_found);

    let balance = wallet
        .get_balance(GetBalanceRequest {
            user_id: "u1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(balance.balance, 1_000_000);
    let stats = handle.stats();
    assert_eq!((stats.debits, stats.refunds), (1, 1));
    assert_eq!((stats.total_debited, stats.total_refunded), (300, 300));
    handle.shutdown().await;
}

#[tokio::test]
async fn injected_faults_fail_the_next_calls() {
    let handle = fake_wallet::spawn(FakeWalletConfig::default())
        .await
        .unwrap();
    let mut wallet = client(&handle).await;
    handle.fail_next(Method::Debit, 2, FaultCode::Unavailable);
    for _ in 0..2 {
        let error = wallet.debit(debit("k", "u", 1)).await.unwrap_err();
        assert_eq!(error.code(), tonic::Code::Unavailable);
    }
    assert!(wallet.debit(debit("k", "u", 1)).await.is_ok());
    assert_eq!(handle.stats().debits, 1);

    // A fault after applying: the debit happened although the caller saw an error.
    handle.inject(fake_wallet::FaultRule {
        method: Method::Debit,
        count: 1,
        code: FaultCode::DeadlineExceeded,
        after_apply: true,
    });
    let error = wallet.debit(debit("k2", "u", 1)).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::DeadlineExceeded);
    assert!(handle.debit_record("k2").is_some());
    handle.shutdown().await;
}

#[tokio::test]
async fn admin_http_sets_faults_and_reports_stats() {
    let handle = fake_wallet::spawn(FakeWalletConfig::default())
        .await
        .unwrap();
    let base = format!("http://{}", handle.admin_addr());
    let http = reqwest::Client::new();
    let response = http
        .post(format!("{base}/admin/faults"))
        .json(&serde_json::json!({"method": "refund", "count": 1, "code": "internal"}))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success());
    let mut wallet = client(&handle).await;
    let error = wallet
        .refund(RefundRequest {
            idempotency_key: "r".into(),
            debit_idempotency_key: "d".into(),
            reason: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::Internal);
    wallet.debit(debit("d", "u", 7)).await.unwrap();
    let stats: serde_json::Value = http
        .get(format!("{base}/admin/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["debits"], 1);
    assert_eq!(stats["total_debited"], 7);
    handle.shutdown().await;
}
