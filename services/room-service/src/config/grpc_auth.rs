//! The `grpc_auth` section: who may call room-service's gRPC port
//! (docs/design.md#who-may-call), and its start-up rules. With mutual TLS
//! (`grpc_tls.client_ca_file`) every call is authorised by the identity in
//! the caller's certificate: the gateway's may call `RoomService`, the other
//! instances' `RoomPeer`. A listener off loopback without mutual TLS lets
//! anyone who reaches the port act as any user, so it is refused unless
//! `allow_unauthenticated` says this is a development stack.

use serde::{Deserialize, Serialize};
use service_kit::duration::ConfigDuration;

use super::Config;
use crate::Error;

/// The `grpc_auth` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcAuthConfig {
    /// Certificate identities (a DNS or URI subject alternative name, or the
    /// subject's common name) that may call `RoomService`: the gateway.
    pub gateway_identities: Vec<String>,
    /// Certificate identities that may call `RoomPeer`: the other
    /// room-service instances (this instance's own `peer_tls` certificate
    /// must carry one, or forwarding fails).
    pub peer_identities: Vec<String>,
    /// Development only: serve a `grpc_listen` off loopback without mutual
    /// TLS, where anyone who reaches the port may act as any user.
    pub allow_unauthenticated: bool,
    /// The gateway's end-user assertion (a signed JWT per call).
    pub user_assertion: UserAssertionConfig,
}

/// `grpc_auth.user_assertion`: off while `jwks_file` is empty. When on,
/// every `RoomService` call must carry `authorization: Bearer <JWT>` signed
/// by a key of the JWKS, with this issuer and audience, unexpired; a write's
/// acting user (and a heartbeat's user) must be its subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UserAssertionConfig {
    /// JSON Web Key Set of the gateway's public signing keys (RSA, EC or
    /// Ed25519; each with a `kid`). Empty = no assertion required.
    pub jwks_file: String,
    /// The required `iss` claim.
    pub issuer: String,
    /// The required `aud` claim.
    pub audience: String,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: ConfigDuration,
}

impl Default for UserAssertionConfig {
    fn default() -> Self {
        Self {
            jwks_file: String::new(),
            issuer: String::new(),
            audience: String::new(),
            leeway: ConfigDuration::from_secs(30),
        }
    }
}

impl UserAssertionConfig {
    /// Whether an assertion is required.
    pub fn is_enabled(&self) -> bool {
        !self.jwks_file.is_empty()
    }
}

/// Longest accepted `user_assertion.leeway`: past a few minutes an expired
/// assertion would stay good long after the gateway stopped vouching for it.
const MAX_LEEWAY_SECS: u64 = 300;

impl Config {
    /// The rules above, plus: mutual TLS names both identity lists, and an
    /// assertion section is complete. The keys themselves are loaded (and a
    /// bad JWKS refused) when the app is built.
    pub(super) fn check_grpc_auth(&self) -> Result<(), Error> {
        let invalid = |message: String| Err(Error::Config(message));
        let auth = &self.grpc_auth;
        let mutual_tls = self.grpc_tls.requires_client_cert();
        if mutual_tls && (auth.gateway_identities.is_empty() || auth.peer_identities.is_empty()) {
            return invalid(
                "grpc_tls.client_ca_file is set, so grpc_auth.gateway_identities and grpc_auth.peer_identities must name the certificate identities allowed to call RoomService and RoomPeer".into(),
            );
        }
        if !mutual_tls && (!auth.gateway_identities.is_empty() || !auth.peer_identities.is_empty())
        {
            return invalid(
                "grpc_auth.gateway_identities/peer_identities need grpc_tls.client_ca_file: without client certificates there is no identity to check".into(),
            );
        }
        for identity in auth.gateway_identities.iter().chain(&auth.peer_identities) {
            if identity.trim().is_empty() || identity.trim() != identity {
                return invalid(format!(
                    "grpc_auth identity `{identity}` must be a non-empty name without surrounding spaces"
                ));
            }
        }
        if self.grpc_tls.is_enabled() && !mutual_tls {
            return invalid(
                "grpc_tls is set without client_ca_file: RoomPeer is only callable with a peer certificate when TLS is on, so set grpc_tls.client_ca_file (mutual TLS) and grpc_auth's identities".into(),
            );
        }
        if self.grpc_reachable_from_other_hosts() && !mutual_tls && !auth.allow_unauthenticated {
            return invalid(format!(
                "grpc_listen `{}` is reachable from other hosts without mutual TLS: anyone reaching it could act as any user. Set grpc_tls (with client_ca_file) and grpc_auth, or grpc_auth.allow_unauthenticated: true for a development stack",
                self.grpc_listen
            ));
        }
        check_assertion(&auth.user_assertion)
    }
}

impl Config {
    /// Whether `grpc_listen` is bound beyond loopback: the rules for who may
    /// call (`grpc_auth`) and whom forwarding may dial (`peer_addresses`)
    /// tighten then.
    pub(super) fn grpc_reachable_from_other_hosts(&self) -> bool {
        !service_kit::config::is_loopback_host(service_kit::config::host_of_address(
            &self.grpc_listen,
        ))
    }
}

fn check_assertion(assertion: &UserAssertionConfig) -> Result<(), Error> {
    let invalid = |message: String| Err(Error::Config(message));
    if !assertion.is_enabled() {
        if !assertion.issuer.is_empty() || !assertion.audience.is_empty() {
            return invalid(
                "grpc_auth.user_assertion.jwks_file is required when its issuer or audience is set"
                    .into(),
            );
        }
        return Ok(());
    }
    if assertion.issuer.is_empty() || assertion.audience.is_empty() {
        return invalid(
            "grpc_auth.user_assertion.issuer and .audience are required with jwks_file: an assertion minted for another service must not be accepted".into(),
        );
    }
    if assertion.leeway.as_std().as_secs() > MAX_LEEWAY_SECS {
        return invalid(format!(
            "grpc_auth.user_assertion.leeway must be at most {MAX_LEEWAY_SECS}s"
        ));
    }
    Ok(())
}
