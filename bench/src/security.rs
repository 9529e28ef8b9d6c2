//! Mutual TLS for a bench cluster ([`Security`]): a throw-away PKI, the
//! listener settings every instance gets and the gateway's client TLS.

use service_kit::grpc_tls::{ClientTls, ServerTls};
use testkit::pki::TestPki;

/// The identity the test PKI's client certificate carries (its CN): the
/// gateway's and, as `peer_tls`, every instance's.
const IDENTITY: &str = "hyapp-test-client";

/// See the module doc.
pub struct Security {
    /// The PKI's files (removed when dropped).
    pub pki: TestPki,
    /// What the workload's gateway presents.
    pub gateway: ClientTls,
}

impl Security {
    /// A fresh PKI naming `localhost` and `127.0.0.1`.
    pub fn generate() -> Self {
        let pki = TestPki::generate(&["localhost", "127.0.0.1"]);
        let gateway = Self::client(&pki);
        Self { pki, gateway }
    }

    fn client(pki: &TestPki) -> ClientTls {
        ClientTls {
            ca_file: pki.ca.display().to_string(),
            cert_file: pki.client_cert.display().to_string(),
            key_file: pki.client_key.display().to_string(),
            domain: String::new(),
        }
    }

    /// Mutual TLS with identities on `config`'s listener and peer calls.
    pub fn apply(&self, config: &mut room_service::Config) {
        config.grpc_tls = ServerTls {
            cert_file: self.pki.server_cert.display().to_string(),
            key_file: self.pki.server_key.display().to_string(),
            client_ca_file: self.pki.ca.display().to_string(),
        };
        config.peer_tls = Self::client(&self.pki);
        config.grpc_auth.gateway_identities = vec![IDENTITY.into()];
        config.grpc_auth.peer_identities = vec![IDENTITY.into()];
    }
}
