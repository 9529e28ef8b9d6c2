//! The one conversion of an [`Error`] into the gRPC status a caller gets
//! (docs/gateway.md). Every refusal carries, in the standard
//! `grpc-status-details-bin`, a `google.rpc.ErrorInfo` (the reason in
//! UPPER_SNAKE_CASE, [`ERROR_DOMAIN`], and the ids a gateway needs) and, when
//! sending the call again can succeed, a `google.rpc.RetryInfo` with the delay
//! of [`Error::retry`]. A status another instance answered a forwarded call
//! with passes through with its details unchanged.
//!
//! The metadata `x-error-reason` (lowercase), `x-error-kind` and
//! `x-room-owner` are still sent exactly as before, for one release, so
//! gateways that read them keep working while they move to `ErrorInfo`.

use std::collections::HashMap;

use tonic_types::{ErrorDetails, StatusExt};

use super::{Error, upper_snake};

/// `ErrorInfo.domain` of every refusal room-service builds.
pub const ERROR_DOMAIN: &str = "room-service.hyapp.io";

/// Longest `ErrorInfo.metadata` value; longer ones are cut at a character
/// boundary (ids are far shorter; a value echoed from a malformed request
/// must not grow the trailer).
pub const MAX_ERROR_INFO_VALUE_BYTES: usize = 256;

/// Metadata of a holder's status that the caller needs: the reason, whether
/// it is a room-core rejection, and the owner (kept for one release beside
/// the status details, which carry the same).
const FORWARDED_STATUS_METADATA: [&str; 3] = ["x-error-reason", "x-error-kind", "x-room-owner"];

/// `x-error-kind` of a status whose reason is a room-core rejection code.
const KIND_REJECTION: &str = "rejection";

/// What a refused call was about, as the caller sent it: named in the
/// refusal's `ErrorInfo` when the error itself does not say. Empty fields
/// are left out.
#[derive(Debug, Clone, Copy, Default)]
pub struct Subject<'a> {
    /// The call's `room_id`.
    pub room_id: &'a str,
    /// The call's `command_id` (writes only).
    pub command_id: &'a str,
}

impl Error {
    /// The room-core rejection code, whether the rule refused here or on the
    /// holder a call was forwarded to.
    pub fn rejection_code(&self) -> Option<&str> {
        match self {
            Error::Rejected(rejection) => Some(rejection.code()),
            Error::Forwarded(status) => status
                .metadata()
                .get("x-error-kind")
                .is_some_and(|kind| kind == KIND_REJECTION)
                .then(|| self.forwarded_reason())
                .flatten(),
            _ => None,
        }
    }

    /// The `x-error-reason` of a forwarded status (`None`: the status did not
    /// come from a room-service handler, e.g. the connection failed).
    pub fn forwarded_reason(&self) -> Option<&str> {
        match self {
            Error::Forwarded(status) => status
                .metadata()
                .get("x-error-reason")
                .and_then(|value| value.to_str().ok()),
            _ => None,
        }
    }

    /// The status of this refusal of a call about `subject`.
    pub fn into_status(self, subject: Subject<'_>) -> tonic::Status {
        if let Error::Forwarded(forwarded) = self {
            return pass_through(&forwarded);
        }
        let details = self.error_details(subject);
        let mut status =
            tonic::Status::with_error_details(self.code().grpc(), self.to_string(), details);
        // Kept as they were for one release (docs/gateway.md).
        if let Ok(value) = self.reason().parse() {
            status.metadata_mut().insert("x-error-reason", value);
        }
        if matches!(self, Error::Rejected(_)) {
            status
                .metadata_mut()
                .insert("x-error-kind", KIND_REJECTION.parse().expect("ascii"));
        }
        if let Error::OwnedElsewhere { owner, .. } = &self
            && let Ok(value) = owner.parse()
        {
            status.metadata_mut().insert("x-room-owner", value);
        }
        status
    }

    /// The `ErrorInfo`, and the `RetryInfo` when a retry can succeed.
    fn error_details(&self, subject: Subject<'_>) -> ErrorDetails {
        let (room_id, command_id) = match self {
            Error::OwnedElsewhere { room_id, .. }
            | Error::StaleOwner { room_id }
            | Error::Overloaded { room_id } => (room_id.as_str(), subject.command_id),
            Error::CommandIdReused { command_id, .. }
            | Error::GiftCompensated { command_id }
            | Error::GiftRefundFailed { command_id }
            | Error::GiftInFlight { command_id } => (subject.room_id, command_id.as_str()),
            _ => (subject.room_id, subject.command_id),
        };
        let mut metadata = HashMap::new();
        put(&mut metadata, "room_id", room_id);
        put(&mut metadata, "command_id", command_id);
        if let Error::OwnedElsewhere { owner, address, .. } = self {
            put(&mut metadata, "holder", owner);
            put(
                &mut metadata,
                "holder_address",
                address.as_deref().unwrap_or_default(),
            );
        }
        let mut details =
            ErrorDetails::with_error_info(upper_snake(self.reason()), ERROR_DOMAIN, metadata);
        if let Some(delay) = self.retry().delay() {
            details.set_retry_info(Some(delay));
        }
        details
    }
}

/// The holder's answer to a forwarded call, as it sent it: code, message,
/// status details and the reason metadata. Rebuilt, not passed through
/// whole: the holder's response headers (content-type, date, …) are not
/// ours to send again.
fn pass_through(forwarded: &tonic::Status) -> tonic::Status {
    let mut status = tonic::Status::with_details(
        forwarded.code(),
        forwarded.message(),
        prost::bytes::Bytes::copy_from_slice(forwarded.details()),
    );
    for key in FORWARDED_STATUS_METADATA {
        if let Some(value) = forwarded.metadata().get(key) {
            status.metadata_mut().insert(key, value.clone());
        }
    }
    status
}

/// Adds `key` unless `value` is empty, cut to [`MAX_ERROR_INFO_VALUE_BYTES`].
fn put(metadata: &mut HashMap<String, String>, key: &str, value: &str) {
    if value.is_empty() {
        return;
    }
    let mut end = value.len().min(MAX_ERROR_INFO_VALUE_BYTES);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    metadata.insert(key.to_owned(), value[..end].to_owned());
}

impl From<Error> for tonic::Status {
    fn from(error: Error) -> Self {
        error.into_status(Subject::default())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use room_core::Rejection;

    use super::*;
    use crate::error::{ErrorCode, Reason};

    fn owned_elsewhere(retry_after: Option<Duration>) -> Error {
        Error::OwnedElsewhere {
            room_id: "r1".into(),
            owner: "node-b".into(),
            address: Some("http://10.0.0.2:7101".into()),
            retry_after,
        }
    }

    #[test]
    fn owner_is_named_in_message_metadata_and_error_info() {
        let status = tonic::Status::from(owned_elsewhere(None));
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(status.message().contains("node-b"));
        assert_eq!(status.metadata().get("x-room-owner").unwrap(), "node-b");
        assert_eq!(
            status.metadata().get("x-error-reason").unwrap(),
            "room_owned_elsewhere"
        );
        let details = status.get_error_details();
        let info = details.error_info().expect("ErrorInfo");
        assert_eq!(info.reason, "ROOM_OWNED_ELSEWHERE");
        assert_eq!(info.domain, ERROR_DOMAIN);
        assert_eq!(info.metadata["room_id"], "r1");
        assert_eq!(info.metadata["holder"], "node-b");
        assert_eq!(info.metadata["holder_address"], "http://10.0.0.2:7101");
        assert!(!info.metadata.contains_key("command_id"));
        assert_eq!(
            details.retry_info().expect("RetryInfo").retry_delay,
            Some(Reason::RoomOwnedElsewhere.retry().delay().unwrap())
        );
    }

    #[test]
    fn the_lease_codes_delay_overrides_the_default() {
        let status = owned_elsewhere(Some(Duration::from_millis(730))).into_status(Subject {
            room_id: "ignored",
            command_id: "c9",
        });
        let details = status.get_error_details();
        assert_eq!(
            details.retry_info().unwrap().retry_delay,
            Some(Duration::from_millis(730))
        );
        let info = details.error_info().unwrap();
        assert_eq!(info.metadata["room_id"], "r1", "the error's own room wins");
        assert_eq!(info.metadata["command_id"], "c9");
    }

    #[test]
    fn rules_name_the_subject_and_are_not_retryable() {
        let status = Error::from(Rejection::SeatTaken).into_status(Subject {
            room_id: "r1",
            command_id: "c1",
        });
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert_eq!(status.metadata().get("x-error-kind").unwrap(), "rejection");
        let details = status.get_error_details();
        let info = details.error_info().unwrap();
        assert_eq!(info.reason, "SEAT_TAKEN");
        assert_eq!(info.metadata["room_id"], "r1");
        assert_eq!(info.metadata["command_id"], "c1");
        assert!(details.retry_info().is_none());
    }

    #[test]
    fn metadata_values_are_bounded_and_empty_ones_left_out() {
        let long = "é".repeat(MAX_ERROR_INFO_VALUE_BYTES);
        let status = Error::InvalidArgument("room_id is too long".into()).into_status(Subject {
            room_id: &long,
            command_id: "",
        });
        let details = status.get_error_details();
        let info = details.error_info().unwrap();
        let room_id = &info.metadata["room_id"];
        assert!(
            room_id.len() <= MAX_ERROR_INFO_VALUE_BYTES,
            "{}",
            room_id.len()
        );
        assert!(long.starts_with(room_id.as_str()));
        assert!(!info.metadata.contains_key("command_id"));
    }

    #[test]
    fn forwarded_statuses_keep_code_message_reason_and_details_only() {
        let mut holder = Error::GiftInFlight {
            command_id: "g1".into(),
        }
        .into_status(Subject {
            room_id: "r1",
            command_id: "g1",
        });
        holder
            .metadata_mut()
            .insert("content-type", "application/grpc".parse().unwrap());
        let error = Error::Forwarded(Box::new(holder.clone()));
        assert_eq!(error.code(), ErrorCode::Aborted);
        assert_eq!(error.forwarded_reason(), Some("gift_in_flight"));
        let status = tonic::Status::from(error);
        assert_eq!(status.code(), holder.code());
        assert_eq!(status.message(), holder.message());
        assert_eq!(status.details(), holder.details());
        assert!(!status.details().is_empty());
        assert_eq!(
            status.metadata().get("x-error-reason").unwrap(),
            "gift_in_flight"
        );
        assert!(status.metadata().get("content-type").is_none());
        let details = status.get_error_details();
        assert_eq!(details.error_info().unwrap().reason, "GIFT_IN_FLIGHT");
        assert_eq!(
            details.retry_info().unwrap().retry_delay,
            Reason::GiftInFlight.retry().delay()
        );
    }

    #[test]
    fn forwarded_rules_keep_their_kind() {
        let holder = tonic::Status::from(Error::from(Rejection::SeatTaken));
        let error = Error::Forwarded(Box::new(holder));
        assert_eq!(error.rejection_code(), Some(Rejection::SeatTaken.code()));
        let not_a_rule = Error::Forwarded(Box::new(tonic::Status::from(Error::ShuttingDown)));
        assert_eq!(not_a_rule.rejection_code(), None);
    }
}
