//! The wallet gRPC client (contract `wallet/v1`, owned by another team): debit
//! and refund idempotent by key, each bounded by `wallet.timeout`. A debit
//! either definitely did not happen ([`DebitFailure::Refused`]) or its outcome
//! is unknown ([`DebitFailure::Unknown`]) and must be compensated. An
//! `https://` endpoint is called over TLS (`wallet.tls`), an `http://` one in
//! plaintext.

use std::time::Duration;

use hyapp_api::wallet::{DebitRequest, RefundRequest, wallet_service_client::WalletServiceClient};
use tonic::transport::Channel;

use crate::Error;
use crate::config::WalletConfig;

/// Why a debit did not succeed.
#[derive(Debug)]
pub enum DebitFailure {
    /// The wallet refused it; no money moved.
    Refused(Error),
    /// Timeout, transport error or server failure: the debit may have happened.
    Unknown(Error),
}

/// Result of a refund call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refunded {
    /// Money moved back (now or by an earlier identical call).
    Refunded,
    /// The wallet never applied the debit; nothing to give back.
    DebitNotFound,
}

/// The wallet client.
#[derive(Debug, Clone)]
pub struct Wallet {
    client: WalletServiceClient<Channel>,
}

/// Refund idempotency key of a gift's debit.
pub fn refund_key(command_id: &str) -> String {
    format!("refund:{command_id}")
}

impl Wallet {
    /// A lazily connecting client, so the wallet being down at start-up only fails gifts.
    pub fn new(config: &WalletConfig) -> Result<Self, Error> {
        let timeout: Duration = config.timeout.as_std();
        let channel = config
            .tls
            .endpoint("wallet.tls", "wallet.endpoint", &config.endpoint)
            .map_err(|error| Error::Config(error.to_string()))?
            .timeout(timeout)
            .connect_timeout(timeout)
            // A stalled or half-open connection is found by an unanswered
            // PING and replaced (docs/design.md#client-timeouts).
            .http2_keep_alive_interval(config.keepalive_interval.as_std())
            .keep_alive_timeout(timeout)
            .keep_alive_while_idle(true)
            .connect_lazy();
        Ok(Self {
            client: WalletServiceClient::new(channel),
        })
    }

    /// Debits `amount` from `user_id` under the gift's `command_id`.
    pub async fn debit(
        &self,
        command_id: &str,
        user_id: &str,
        amount: u64,
        reason: String,
    ) -> Result<(), DebitFailure> {
        // The wallet's contract is a signed amount; `room_core::gift_total`
        // keeps every gift within it, so this only refuses a caller's bug.
        let Ok(signed) = i64::try_from(amount) else {
            return Err(DebitFailure::Refused(Error::WalletRefused(format!(
                "amount {amount} exceeds the wallet's range"
            ))));
        };
        let request = DebitRequest {
            idempotency_key: command_id.to_owned(),
            user_id: user_id.to_owned(),
            amount: signed,
            reason,
        };
        match self.client.clone().debit(request).await {
            Ok(_) => Ok(()),
            Err(status) => Err(classify_debit(&status, user_id, amount)),
        }
    }

    /// Refunds the debit made under `command_id`.
    pub async fn refund(&self, command_id: &str, reason: &str) -> Result<Refunded, Error> {
        let request = RefundRequest {
            idempotency_key: refund_key(command_id),
            debit_idempotency_key: command_id.to_owned(),
            reason: reason.to_owned(),
        };
        match self.client.clone().refund(request).await {
            Ok(reply) if reply.get_ref().debit_not_found => Ok(Refunded::DebitNotFound),
            Ok(_) => Ok(Refunded::Refunded),
            Err(status) => Err(Error::WalletUnavailable(format!(
                "refund {command_id}: {:?} {}",
                status.code(),
                status.message()
            ))),
        }
    }
}

fn classify_debit(status: &tonic::Status, user_id: &str, amount: u64) -> DebitFailure {
    match status.code() {
        tonic::Code::FailedPrecondition if status.message().contains("insufficient balance") => {
            DebitFailure::Refused(Error::InsufficientBalance {
                user_id: user_id.to_owned(),
                amount,
            })
        }
        tonic::Code::FailedPrecondition | tonic::Code::InvalidArgument => {
            DebitFailure::Refused(Error::WalletRefused(status.message().to_owned()))
        }
        code => DebitFailure::Unknown(Error::WalletUnavailable(format!(
            "debit: {code:?} {}",
            status.message()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use service_kit::duration::ConfigDuration;

    #[test]
    fn debit_failures_are_classified() {
        let insufficient = tonic::Status::failed_precondition("insufficient balance");
        assert!(matches!(
            classify_debit(&insufficient, "u", 5),
            DebitFailure::Refused(Error::InsufficientBalance { .. })
        ));
        let unavailable = tonic::Status::unavailable("down");
        assert!(matches!(
            classify_debit(&unavailable, "u", 5),
            DebitFailure::Unknown(_)
        ));
        let deadline = tonic::Status::deadline_exceeded("slow");
        assert!(matches!(
            classify_debit(&deadline, "u", 5),
            DebitFailure::Unknown(_)
        ));
    }

    /// The tests' own deadline: a client that hangs fails here. Not a
    /// claim about how fast the error comes.
    const TEST_DEADLINE: Duration = Duration::from_secs(60);

    fn config(endpoint: String) -> WalletConfig {
        WalletConfig {
            endpoint,
            timeout: ConfigDuration::from_millis(200),
            keepalive_interval: ConfigDuration::from_millis(100),
            ..WalletConfig::default()
        }
    }

    #[tokio::test]
    async fn a_wallet_that_never_answers_fails_the_debit_as_unknown() {
        let silent = testkit::stall::SilentListener::start().await;
        let wallet = Wallet::new(&config(silent.http_url())).unwrap();
        let outcome =
            tokio::time::timeout(TEST_DEADLINE, wallet.debit("c1", "u1", 5, "gift".into()))
                .await
                .expect("the debit hung on a silent wallet");
        assert!(
            matches!(outcome, Err(DebitFailure::Unknown(_))),
            "{outcome:?}"
        );
        assert!(
            silent.accepted() >= 1,
            "the client never reached the listener"
        );
    }

    #[tokio::test]
    async fn an_idle_connection_that_stalls_is_closed_by_the_keepalive_and_replaced() {
        let server = fake_wallet::spawn(fake_wallet::FakeWalletConfig::default())
            .await
            .unwrap();
        let proxy = testkit::stall::StallingProxy::start(server.grpc_addr()).await;
        let wallet = Wallet::new(&config(proxy.http_url())).unwrap();
        wallet
            .debit("c1", "u1", 5, "gift".into())
            .await
            .expect("a debit through the healthy proxy");

        proxy.stall();
        // No call is made: only the unanswered PINGs can notice the stall.
        tokio::time::timeout(TEST_DEADLINE, async {
            while proxy.closed_by_client() == 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the stalled connection was never given up");

        proxy.resume();
        wallet
            .debit("c2", "u1", 5, "gift".into())
            .await
            .expect("a debit on a new connection");
    }
}
