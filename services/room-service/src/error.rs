//! The crate's one [`Error`] and its [`ErrorCode`], which converts to both a
//! gRPC [`tonic::Code`] and an HTTP status, so every transport reports the same
//! class for the same failure. Each error's stable reason is one of
//! [`Reason`] (or room-core's rule code), with its retry advice in the one
//! table of `reason`; `status` turns an error into the gRPC status a gateway
//! reads (docs/gateway.md).

mod reason;
mod status;

use room_core::{Rejection, RejectionKind};

pub use reason::{OWNED_ELSEWHERE_DEFAULT_DELAY, Reason, Retry, upper_snake};
pub use status::{ERROR_DOMAIN, MAX_ERROR_INFO_VALUE_BYTES, Subject};

/// Transport-independent class of an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// Malformed request.
    InvalidArgument,
    /// The room (or addressed object) does not exist.
    NotFound,
    /// The command_id was used before for a different request.
    AlreadyExists,
    /// Well-formed but not allowed in the current state.
    FailedPrecondition,
    /// The actor may not do this, or the caller may not call this.
    PermissionDenied,
    /// The call carries no valid credentials (the end-user assertion).
    Unauthenticated,
    /// A concurrent owner changed the room; retry.
    Aborted,
    /// Too many queued requests for one room.
    ResourceExhausted,
    /// A dependency (MySQL, Redis, wallet) is down, the room is owned elsewhere, or we are draining.
    Unavailable,
    /// A bug or corrupt data.
    Internal,
}

impl ErrorCode {
    /// The class of a status another instance answered with: its own code
    /// where we have one, retryable `Unavailable` for transport-level codes
    /// (deadline, cancellation), `Internal` for the rest.
    pub fn from_grpc(code: tonic::Code) -> Self {
        match code {
            tonic::Code::InvalidArgument | tonic::Code::OutOfRange => ErrorCode::InvalidArgument,
            tonic::Code::NotFound => ErrorCode::NotFound,
            tonic::Code::AlreadyExists => ErrorCode::AlreadyExists,
            tonic::Code::FailedPrecondition => ErrorCode::FailedPrecondition,
            tonic::Code::PermissionDenied => ErrorCode::PermissionDenied,
            tonic::Code::Unauthenticated => ErrorCode::Unauthenticated,
            tonic::Code::Aborted => ErrorCode::Aborted,
            tonic::Code::ResourceExhausted => ErrorCode::ResourceExhausted,
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
                ErrorCode::Unavailable
            }
            tonic::Code::Ok
            | tonic::Code::Unknown
            | tonic::Code::Unimplemented
            | tonic::Code::Internal
            | tonic::Code::DataLoss => ErrorCode::Internal,
        }
    }

    /// The gRPC code.
    pub fn grpc(self) -> tonic::Code {
        match self {
            ErrorCode::InvalidArgument => tonic::Code::InvalidArgument,
            ErrorCode::NotFound => tonic::Code::NotFound,
            ErrorCode::AlreadyExists => tonic::Code::AlreadyExists,
            ErrorCode::FailedPrecondition => tonic::Code::FailedPrecondition,
            ErrorCode::PermissionDenied => tonic::Code::PermissionDenied,
            ErrorCode::Unauthenticated => tonic::Code::Unauthenticated,
            ErrorCode::Aborted => tonic::Code::Aborted,
            ErrorCode::ResourceExhausted => tonic::Code::ResourceExhausted,
            ErrorCode::Unavailable => tonic::Code::Unavailable,
            ErrorCode::Internal => tonic::Code::Internal,
        }
    }

    /// The HTTP status.
    pub fn http(self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        match self {
            ErrorCode::InvalidArgument => StatusCode::BAD_REQUEST,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::AlreadyExists => StatusCode::CONFLICT,
            ErrorCode::FailedPrecondition => StatusCode::PRECONDITION_FAILED,
            ErrorCode::PermissionDenied => StatusCode::FORBIDDEN,
            ErrorCode::Unauthenticated => StatusCode::UNAUTHORIZED,
            ErrorCode::Aborted => StatusCode::CONFLICT,
            ErrorCode::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Short label for metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::NotFound => "not_found",
            ErrorCode::AlreadyExists => "already_exists",
            ErrorCode::FailedPrecondition => "failed_precondition",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::Aborted => "aborted",
            ErrorCode::ResourceExhausted => "resource_exhausted",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
        }
    }
}

/// Everything that can go wrong in room-service.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// A request field is malformed; the message names the field.
    #[error("{0}")]
    InvalidArgument(String),
    /// room-core refused the command.
    #[error("{0}")]
    Rejected(Rejection),
    /// The call's end-user assertion is missing or does not verify.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// The caller's certificate identity may not call this service.
    #[error("caller not allowed: {0}")]
    CallerNotAllowed(String),
    /// The end-user assertion names another user than the one the command acts as.
    #[error("the user assertion is for {asserted}, but the request acts as {acting}")]
    UserMismatch {
        /// The assertion's subject.
        asserted: String,
        /// The command's acting user (`actor_id`, `user_id`, `sender_id`, …).
        acting: String,
    },
    /// The command_id was used before for a different request.
    #[error("command_id {command_id} was already used for a different request ({original})")]
    CommandIdReused {
        /// The reused id.
        command_id: String,
        /// What the id was first used for.
        original: String,
    },
    /// A SendGift with this command_id failed earlier and was refunded; its id is spent.
    #[error(
        "command_id {command_id} belongs to a gift that failed and was refunded; use a new command_id"
    )]
    GiftCompensated {
        /// The spent id.
        command_id: String,
    },
    /// A SendGift with this command_id failed, and its refund failed past its
    /// budget (saga `failed`): operators refund it by hand; its id is spent.
    #[error(
        "command_id {command_id} belongs to a gift whose refund failed; it is left to operators; use a new command_id"
    )]
    GiftRefundFailed {
        /// The spent id.
        command_id: String,
    },
    /// A SendGift with this command_id is still being processed or recovered.
    #[error("command_id {command_id} is still being processed; retry later")]
    GiftInFlight {
        /// The busy id.
        command_id: String,
    },
    /// Another node holds the room's lease (and forwarding to it was not
    /// possible: no address, already forwarded once, or it is unreachable).
    #[error("room {room_id} is owned by node {owner}")]
    OwnedElsewhere {
        /// The room.
        room_id: String,
        /// The owning node.
        owner: String,
        /// The owner's advertised gRPC URL, from its lease.
        address: Option<String>,
        /// When a retry can be answered (the holder's liveness key lapses by
        /// then unless it is renewed, or this instance's own takeover grace
        /// ends); `None` when unknown.
        retry_after: Option<std::time::Duration>,
    },
    /// The instance holding the room answered a forwarded call with this
    /// status; it goes back to the caller as the holder sent it.
    #[error("{}", .0.message())]
    Forwarded(Box<tonic::Status>),
    /// This instance holds `room.max_loaded_rooms` rooms and none has been
    /// idle long enough to be evicted.
    #[error(
        "this instance already holds its limit of {limit} loaded rooms and none is idle; retry later"
    )]
    TooManyRooms {
        /// `room.max_loaded_rooms`.
        limit: usize,
    },
    /// The version compare-and-set failed: another owner wrote the room since we loaded it.
    #[error("room {room_id} was changed by another owner; retry")]
    StaleOwner {
        /// The room.
        room_id: String,
    },
    /// The wallet refused the debit because the sender cannot afford it.
    #[error("insufficient balance: user {user_id} cannot pay {amount}")]
    InsufficientBalance {
        /// The sender.
        user_id: String,
        /// The gift's total value.
        amount: u64,
    },
    /// The wallet refused the debit for another reason.
    #[error("wallet refused the debit: {0}")]
    WalletRefused(String),
    /// The wallet could not be reached or failed.
    #[error("wallet unavailable: {0}")]
    WalletUnavailable(String),
    /// MySQL could not be reached or failed.
    #[error("database unavailable: {0}")]
    Database(String),
    /// Redis could not be reached or failed.
    #[error("redis unavailable: {0}")]
    Redis(String),
    /// The room's mailbox is full.
    #[error("room {room_id} is overloaded; retry later")]
    Overloaded {
        /// The room.
        room_id: String,
    },
    /// The server is shutting down.
    #[error("room-service is shutting down")]
    ShuttingDown,
    /// Invalid configuration; the message names the key.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Binding or serving a listener failed.
    #[error("server: {0}")]
    Server(String),
    /// Stored data that cannot be decoded or replayed.
    #[error("internal: {0}")]
    Internal(String),
}

impl Error {
    /// The transport-independent class.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::InvalidArgument(_) => ErrorCode::InvalidArgument,
            Error::Rejected(rejection) => match rejection.kind() {
                RejectionKind::InvalidArgument => ErrorCode::InvalidArgument,
                RejectionKind::NotFound => ErrorCode::NotFound,
                RejectionKind::FailedPrecondition => ErrorCode::FailedPrecondition,
                RejectionKind::PermissionDenied => ErrorCode::PermissionDenied,
            },
            Error::Unauthenticated(_) => ErrorCode::Unauthenticated,
            Error::CallerNotAllowed(_) | Error::UserMismatch { .. } => ErrorCode::PermissionDenied,
            Error::CommandIdReused { .. } => ErrorCode::AlreadyExists,
            Error::GiftCompensated { .. }
            | Error::GiftRefundFailed { .. }
            | Error::InsufficientBalance { .. }
            | Error::WalletRefused(_) => ErrorCode::FailedPrecondition,
            Error::GiftInFlight { .. } | Error::StaleOwner { .. } => ErrorCode::Aborted,
            Error::Overloaded { .. } | Error::TooManyRooms { .. } => ErrorCode::ResourceExhausted,
            Error::Forwarded(status) => ErrorCode::from_grpc(status.code()),
            Error::OwnedElsewhere { .. }
            | Error::WalletUnavailable(_)
            | Error::Database(_)
            | Error::Redis(_)
            | Error::ShuttingDown => ErrorCode::Unavailable,
            Error::Config(_) | Error::Server(_) | Error::Internal(_) => ErrorCode::Internal,
        }
    }

    /// Stable machine-readable reason, sent as the `x-error-reason` metadata
    /// (and, in UPPER_SNAKE_CASE, as `ErrorInfo.reason`).
    pub fn reason(&self) -> &'static str {
        match (self, self.service_reason()) {
            (_, Some(reason)) => reason.as_str(),
            (Error::Rejected(rejection), None) => rejection.code(),
            // The holder's own reason travels in the status it sent.
            _ => "forwarded",
        }
    }

    /// The reason of a refusal room-service decides itself; `None` for a
    /// room-core rule (its code is the reason) and for a forwarded status.
    /// Exhaustive: a new variant does not compile until it has a reason, and
    /// with it a line in the retry table.
    pub fn service_reason(&self) -> Option<Reason> {
        Some(match self {
            Error::Rejected(_) | Error::Forwarded(_) => return None,
            Error::InvalidArgument(_) => Reason::InvalidArgument,
            Error::Unauthenticated(_) => Reason::Unauthenticated,
            Error::CallerNotAllowed(_) => Reason::CallerNotAllowed,
            Error::UserMismatch { .. } => Reason::UserMismatch,
            Error::CommandIdReused { .. } => Reason::CommandIdReused,
            Error::GiftCompensated { .. } => Reason::GiftCompensated,
            Error::GiftRefundFailed { .. } => Reason::GiftRefundFailed,
            Error::GiftInFlight { .. } => Reason::GiftInFlight,
            Error::OwnedElsewhere { .. } => Reason::RoomOwnedElsewhere,
            Error::StaleOwner { .. } => Reason::StaleOwner,
            Error::InsufficientBalance { .. } => Reason::InsufficientBalance,
            Error::WalletRefused(_) => Reason::WalletRefused,
            Error::WalletUnavailable(_) => Reason::WalletUnavailable,
            Error::Database(_) => Reason::DatabaseUnavailable,
            Error::Redis(_) => Reason::RedisUnavailable,
            Error::Overloaded { .. } => Reason::Overloaded,
            Error::TooManyRooms { .. } => Reason::TooManyLoadedRooms,
            Error::ShuttingDown => Reason::ShuttingDown,
            Error::Config(_) => Reason::Config,
            Error::Server(_) => Reason::Server,
            Error::Internal(_) => Reason::Internal,
        })
    }

    /// Whether, and after how long, the refused call may succeed when sent
    /// again unchanged: the reason's line of the retry table, or for
    /// `room_owned_elsewhere` the time the lease code named. Rules and
    /// forwarded statuses (whose holder decided) are [`Retry::Never`] here.
    pub fn retry(&self) -> Retry {
        match self {
            Error::OwnedElsewhere {
                retry_after: Some(after),
                ..
            } => Retry::After(*after),
            _ => self.service_reason().map_or(Retry::Never, Reason::retry),
        }
    }

    /// This refusal without the holder's address: for an address read from
    /// a lease that `peer_addresses` does not admit, which must not reach
    /// the gateway as a routing hint either.
    pub fn without_holder_address(self) -> Error {
        match self {
            Error::OwnedElsewhere {
                room_id,
                owner,
                retry_after,
                ..
            } => Error::OwnedElsewhere {
                room_id,
                owner,
                address: None,
                retry_after,
            },
            other => other,
        }
    }

    /// The database error, classified once here: every sqlx failure the
    /// pipeline does not handle itself means MySQL is unreachable or failing.
    pub fn database(error: &sqlx::Error) -> Error {
        Error::Database(error.to_string())
    }

    /// A Redis failure.
    pub fn redis(error: &fred::error::Error) -> Error {
        Error::Redis(error.to_string())
    }
}

impl From<Rejection> for Error {
    fn from(rejection: Rejection) -> Self {
        Error::Rejected(rejection)
    }
}

impl axum::response::IntoResponse for Error {
    fn into_response(self) -> axum::response::Response {
        (self.code().http(), self.to_string()).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejection_kinds_map_to_grpc_and_http() {
        let cases = [
            (Rejection::RoomNotFound, tonic::Code::NotFound, 404),
            (Rejection::SeatTaken, tonic::Code::FailedPrecondition, 412),
            (
                Rejection::CannotKickOwner,
                tonic::Code::PermissionDenied,
                403,
            ),
            (Rejection::AmountOverflow, tonic::Code::InvalidArgument, 400),
        ];
        for (rejection, grpc, http) in cases {
            let error = Error::from(rejection);
            assert_eq!(error.code().grpc(), grpc);
            assert_eq!(error.code().http().as_u16(), http);
        }
    }
}
