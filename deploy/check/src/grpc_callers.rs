//! room-service's gRPC port is authenticated as shipped (docs/operations.md: trust
//! boundary): its Kubernetes config must run mutual TLS with both identity
//! lists, dial only peers `peer_addresses` admits, and carry none of the
//! development settings (`grpc_auth.allow_unauthenticated`, reflection, a
//! `*` peer host). A network policy alone is not an identity: anyone who can
//! create a pod can give it the gateway's label.

use crate::yaml;
use serde_json::Value;

/// The ConfigMap file holding room-service's config.
pub const ROOM_SERVICE_FILE: &str = "room-service.yaml";

/// Every problem of room-service's config `config`, found at `at`.
pub fn check_room_service_callers(at: &str, config: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let text = |key: &str| {
        yaml::get(config, key)
            .and_then(yaml::scalar_text)
            .unwrap_or_default()
    };
    for key in [
        "grpc_tls.cert_file",
        "grpc_tls.client_ca_file",
        "peer_tls.cert_file",
    ] {
        if text(key).is_empty() {
            problems.push(format!(
                "{at}: {key} is missing; room-service's port runs mutual TLS"
            ));
        }
    }
    for key in [
        "grpc_auth.gateway_identities",
        "grpc_auth.peer_identities",
        "peer_addresses.hosts",
    ] {
        let listed = yaml::get(config, key)
            .and_then(Value::as_array)
            .is_some_and(|list| !list.is_empty());
        if !listed {
            problems.push(format!("{at}: {key} must list who is allowed"));
        }
    }
    let any_host = yaml::get(config, "peer_addresses.hosts")
        .and_then(Value::as_array)
        .is_some_and(|hosts| hosts.iter().any(|host| host.as_str() == Some("*")));
    if any_host {
        problems.push(format!(
            "{at}: peer_addresses.hosts holds `*`: a forged lease could send calls anywhere"
        ));
    }
    for key in ["grpc_auth.allow_unauthenticated", "grpc_reflection"] {
        if matches!(yaml::get(config, key), Some(Value::Bool(true))) {
            problems.push(format!(
                "{at}: {key} is on; it is for development stacks only"
            ));
        }
    }
    problems
}
