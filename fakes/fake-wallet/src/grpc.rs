//! The `wallet/v1` gRPC service over the shared [`crate::Shared`] state: each
//! call sleeps the injected latency, consults the pending faults, and answers
//! from the ledger with the real service's codes and messages.

use hyapp_api::wallet::{
    DebitReply, DebitRequest, GetBalanceReply, GetBalanceRequest, RefundReply, RefundRequest,
    wallet_service_server::WalletService,
};
use tonic::{Request, Response, Status};

use crate::Shared;
use crate::faults::{FiredFault, Method};
use crate::ledger::DebitError;

/// The tonic service.
#[derive(Debug, Clone)]
pub(crate) struct FakeWalletService {
    pub(crate) shared: Shared,
}

impl FakeWalletService {
    /// Waits the configured latency and returns the fault to apply to this call, if any.
    async fn enter(&self, method: Method) -> Option<FiredFault> {
        let (latency, fault) = {
            let mut state = self.shared.lock();
            state.calls += 1;
            (state.faults.latency(), state.faults.take(method))
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        fault
    }
}

fn injected(fault: FiredFault) -> Status {
    Status::new(fault.code.code(), "injected fault")
}

#[tonic::async_trait]
impl WalletService for FakeWalletService {
    async fn debit(&self, request: Request<DebitRequest>) -> Result<Response<DebitReply>, Status> {
        let fault = self.enter(Method::Debit).await;
        if let Some(fault) = fault.filter(|fault| !fault.after_apply) {
            return Err(injected(fault));
        }
        let request = request.into_inner();
        let outcome = self.shared.lock().ledger.debit(
            &request.idempotency_key,
            &request.user_id,
            request.amount,
        );
        let outcome = outcome.map_err(|error| match error {
            DebitError::Invalid(message) => Status::invalid_argument(message),
            DebitError::KeyConflict(message) => Status::failed_precondition(message),
            DebitError::InsufficientBalance => Status::failed_precondition("insufficient balance"),
            DebitError::Cancelled => {
                Status::failed_precondition("debit was already refunded and cannot be applied")
            }
        })?;
        if let Some(fault) = fault {
            return Err(injected(fault));
        }
        Ok(Response::new(DebitReply {
            transaction_id: outcome.record.transaction_id,
            balance_after: outcome.record.balance_after,
            replayed: outcome.replayed,
        }))
    }

    async fn refund(
        &self,
        request: Request<RefundRequest>,
    ) -> Result<Response<RefundReply>, Status> {
        let fault = self.enter(Method::Refund).await;
        if let Some(fault) = fault.filter(|fault| !fault.after_apply) {
            return Err(injected(fault));
        }
        let request = request.into_inner();
        let outcome = self
            .shared
            .lock()
            .ledger
            .refund(&request.idempotency_key, &request.debit_idempotency_key)
            .map_err(Status::failed_precondition)?;
        if let Some(fault) = fault {
            return Err(injected(fault));
        }
        Ok(Response::new(RefundReply {
            transaction_id: outcome.record.transaction_id,
            balance_after: outcome.record.balance_after,
            replayed: outcome.replayed,
            debit_not_found: outcome.record.debit_not_found,
        }))
    }

    async fn get_balance(
        &self,
        request: Request<GetBalanceRequest>,
    ) -> Result<Response<GetBalanceReply>, Status> {
        if let Some(fault) = self.enter(Method::GetBalance).await {
            return Err(injected(fault));
        }
        let user_id = request.into_inner().user_id;
        if user_id.is_empty() {
            return Err(Status::invalid_argument("user_id is required"));
        }
        let balance = self.shared.lock().ledger.balance(&user_id);
        Ok(Response::new(GetBalanceReply { balance }))
    }
}
