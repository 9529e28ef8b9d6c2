//! How room-service's gRPC TLS settings must agree (README: Connecting to
//! production): the listener's `grpc_tls`, the URL the other instances are
//! told to use, and the `peer_tls` this instance forwards with.

use super::Config;
use crate::Error;

impl Config {
    /// The listener's TLS, the URL the other instances use and how they are
    /// called must agree: an instance serving TLS is reached over `https://`,
    /// and when the listener requires client certificates, instances
    /// forwarding to each other must present one (`peer_tls`).
    pub(super) fn check_grpc_tls(&self) -> Result<(), Error> {
        let invalid = |message: String| Err(Error::Config(message));
        self.grpc_tls
            .load("grpc_tls")
            .map_err(|error| Error::Config(error.to_string()))?;
        let tls = self.grpc_tls.is_enabled();
        if tls && self.advertise_url.starts_with("http://") {
            return invalid(format!(
                "advertise_url `{}` must be https:// when grpc_tls is set: the other instances reach this one over the TLS listener",
                self.advertise_url
            ));
        }
        if !tls && self.advertise_url.starts_with("https://") {
            return invalid(format!(
                "advertise_url `{}` is https:// but grpc_tls.cert_file is empty: the listener speaks plaintext",
                self.advertise_url
            ));
        }
        if !tls && self.peer_tls.is_set() {
            return invalid(
                "peer_tls is set but grpc_tls is not: instances reach each other over the listener, which speaks plaintext".into(),
            );
        }
        if self.grpc_tls.requires_client_cert() && !self.peer_tls.has_identity() {
            return invalid(
                "grpc_tls.client_ca_file requires client certificates, so peer_tls.cert_file and peer_tls.key_file must be set: instances forward calls to each other over that listener".into(),
            );
        }
        if tls {
            self.peer_tls
                .load("peer_tls")
                .map_err(|error| Error::Config(error.to_string()))?;
        }
        Ok(())
    }
}
