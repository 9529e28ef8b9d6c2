//! Who calls room-service, checked on every gRPC call
//! (docs/design.md#who-may-call):
//!
//! - **Mutual TLS** (`grpc_tls.client_ca_file`): the TLS handshake proves
//!   the caller holds a certificate of the configured CA; [`CallerAuth`]
//!   then authorises by the identity in it (`identity`): the gateway's may
//!   call `RoomService`, the other instances' `RoomPeer`, and nobody else
//!   either (PERMISSION_DENIED `caller_not_allowed`).
//! - **End-user assertion** (`grpc_auth.user_assertion`): every
//!   `RoomService` call carries the gateway's signed statement of which user
//!   it acts for (`assertion`); a write whose acting user (`owner_id`,
//!   `actor_id`, `user_id`, `sender_id`) or a heartbeat whose user is
//!   someone else is refused (PERMISSION_DENIED `user_mismatch`), one
//!   without a valid assertion is UNAUTHENTICATED. A forwarded call is not
//!   asked again: the instance it entered checked it, and the holder trusts
//!   that instance's peer certificate.
//!
//! Without mutual TLS nothing identifies the caller; the configuration only
//! allows that on loopback or with `grpc_auth.allow_unauthenticated`.

mod assertion;
mod identity;

pub use assertion::{AssertionVerifier, MAX_ASSERTION_BYTES};
pub use identity::certificate_names;

use tonic::Request;

use crate::Error;
use crate::config::Config;

/// Most certificate names quoted in a refusal.
const NAMES_SHOWN: usize = 4;

/// The checks of [`crate::config::GrpcAuthConfig`], loaded.
#[derive(Debug, Default)]
pub struct CallerAuth {
    mutual_tls: bool,
    gateway_identities: Vec<String>,
    peer_identities: Vec<String>,
    assertion: Option<AssertionVerifier>,
}

/// A `RoomService` caller that passed: the user its assertion names, when
/// assertions are required.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// The assertion's subject.
    pub user: Option<String>,
}

impl Caller {
    /// Refuses a request acting as another user than the assertion's subject.
    pub fn may_act_as(&self, acting: Option<&str>) -> Result<(), Error> {
        match (&self.user, acting) {
            (Some(asserted), Some(acting)) if asserted != acting => Err(Error::UserMismatch {
                asserted: asserted.clone(),
                acting: acting.to_owned(),
            }),
            _ => Ok(()),
        }
    }
}

impl CallerAuth {
    /// The checks `config` asks for (its JWKS loaded now, so a bad one
    /// fails start-up).
    pub fn from_config(config: &Config) -> Result<Self, Error> {
        let auth = &config.grpc_auth;
        let assertion = if auth.user_assertion.is_enabled() {
            Some(AssertionVerifier::load(&auth.user_assertion)?)
        } else {
            None
        };
        Ok(Self {
            mutual_tls: config.grpc_tls.requires_client_cert(),
            gateway_identities: auth.gateway_identities.clone(),
            peer_identities: auth.peer_identities.clone(),
            assertion,
        })
    }

    /// Checks a `RoomService` call: the certificate identity, then the
    /// end-user assertion.
    pub fn gateway<T>(&self, request: &Request<T>) -> Result<Caller, Error> {
        self.identity_allowed(request, &self.gateway_identities, "RoomService")?;
        let Some(verifier) = &self.assertion else {
            return Ok(Caller::default());
        };
        let token = bearer_token(request.metadata())?;
        Ok(Caller {
            user: Some(verifier.subject(token)?),
        })
    }

    /// Checks a `RoomPeer` call: only another instance's certificate.
    pub fn peer<T>(&self, request: &Request<T>) -> Result<(), Error> {
        self.identity_allowed(request, &self.peer_identities, "RoomPeer")
    }

    fn identity_allowed<T>(
        &self,
        request: &Request<T>,
        allowed: &[String],
        service: &str,
    ) -> Result<(), Error> {
        if !self.mutual_tls {
            return Ok(());
        }
        let names = request
            .peer_certs()
            .and_then(|chain| chain.first().map(|leaf| certificate_names(leaf)))
            .unwrap_or_default();
        if names.iter().any(|name| allowed.contains(name)) {
            return Ok(());
        }
        let shown: Vec<&str> = names.iter().take(NAMES_SHOWN).map(String::as_str).collect();
        Err(Error::CallerNotAllowed(format!(
            "a certificate naming {shown:?} may not call {service}"
        )))
    }
}

/// The token of `authorization: Bearer <token>`.
fn bearer_token(metadata: &tonic::metadata::MetadataMap) -> Result<&str, Error> {
    let missing = || {
        Error::Unauthenticated(
            "an `authorization: Bearer <user assertion>` header is required".into(),
        )
    };
    let value = metadata
        .get("authorization")
        .ok_or_else(missing)?
        .to_str()
        .map_err(|_| missing())?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .ok_or_else(missing)?;
    Ok(token.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_assertion_must_name_the_acting_user() {
        let caller = Caller {
            user: Some("u-1".into()),
        };
        assert!(caller.may_act_as(Some("u-1")).is_ok());
        let error = caller.may_act_as(Some("u-2")).unwrap_err();
        assert_eq!(error.reason(), "user_mismatch");
        assert_eq!(error.code().grpc(), tonic::Code::PermissionDenied);
        assert!(Caller::default().may_act_as(Some("anyone")).is_ok());
    }

    #[test]
    fn the_bearer_token_is_required_in_its_header() {
        let mut metadata = tonic::metadata::MetadataMap::new();
        assert!(bearer_token(&metadata).is_err());
        metadata.insert("authorization", "Basic abc".parse().unwrap());
        assert!(bearer_token(&metadata).is_err());
        metadata.insert("authorization", "Bearer a.b.c".parse().unwrap());
        assert_eq!(bearer_token(&metadata).unwrap(), "a.b.c");
    }
}
