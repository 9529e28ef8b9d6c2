//! TLS for the gRPC servers and clients, written once: the config sections
//! ([`ServerTls`]: a certificate, its key and optionally the CA whose client
//! certificates are required; [`ClientTls`]: the CA to trust, optionally a
//! client certificate and a name to verify), the PEM loading and the tonic
//! `ServerTlsConfig` / `ClientTlsConfig` built from them.
//!
//! Everything is checked when the config is validated, so a missing file, a
//! certificate without its key or an `https://` endpoint the client cannot
//! speak is refused at start-up naming the key, never at the first call.
//! Without TLS settings a server is plaintext and an `http://` endpoint stays
//! plaintext; an `https://` endpoint always uses TLS, trusting `ca_file` or,
//! without one, the bundled Mozilla roots (`webpki-roots`, the same trust the
//! Tencent IM client has).

use serde::{Deserialize, Serialize};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};

use crate::Error;

/// A gRPC server's TLS section (`grpc_tls`). Off while `cert_file` is empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerTls {
    /// PEM certificate chain the server presents; empty = plaintext.
    pub cert_file: String,
    /// PEM private key of `cert_file` (PKCS#8, PKCS#1 or SEC1).
    pub key_file: String,
    /// PEM CA certificate(s); when set every client must present a
    /// certificate signed by one of them (mutual TLS).
    pub client_ca_file: String,
}

impl ServerTls {
    /// Whether the server speaks TLS.
    pub fn is_enabled(&self) -> bool {
        !self.cert_file.is_empty()
    }

    /// Whether clients must present a certificate.
    pub fn requires_client_cert(&self) -> bool {
        self.is_enabled() && !self.client_ca_file.is_empty()
    }

    /// Loads the files into a tonic server config (`None` when TLS is off),
    /// refusing half a configuration and unreadable or unparsable files with
    /// `section` (e.g. `grpc_tls`) in the message.
    pub fn load(&self, section: &str) -> Result<Option<ServerTlsConfig>, Error> {
        if !self.is_enabled() {
            if !self.key_file.is_empty() || !self.client_ca_file.is_empty() {
                return Err(config(format!(
                    "{section}.cert_file is required when {section}.key_file or {section}.client_ca_file is set"
                )));
            }
            return Ok(None);
        }
        if self.key_file.is_empty() {
            return Err(config(format!(
                "{section}.key_file is required with {section}.cert_file"
            )));
        }
        let cert = read_pem(section, "cert_file", &self.cert_file, CERTIFICATE)?;
        let key = read_pem(section, "key_file", &self.key_file, PRIVATE_KEY)?;
        let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(cert, key));
        if !self.client_ca_file.is_empty() {
            let ca = read_pem(section, "client_ca_file", &self.client_ca_file, CERTIFICATE)?;
            tls = tls.client_ca_root(Certificate::from_pem(ca));
        }
        // Building a server with it parses the chain and the key (and checks
        // that they belong together), so a bad file fails here, not per connection.
        tonic::transport::Server::builder()
            .tls_config(tls.clone())
            .map_err(|error| config(format!("{section}: unusable certificate or key: {error}")))?;
        Ok(Some(tls))
    }
}

/// A gRPC client's TLS section (`wallet.tls`, `peer_tls`, …), used when the
/// endpoint is `https://`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientTls {
    /// PEM CA certificate(s) the server's certificate must chain to; empty =
    /// the bundled Mozilla roots.
    pub ca_file: String,
    /// PEM client certificate for mutual TLS; empty = none presented.
    pub cert_file: String,
    /// PEM private key of `cert_file`.
    pub key_file: String,
    /// Name the server's certificate is verified against instead of the
    /// endpoint's host (an endpoint given as an IP address, a shared name).
    pub domain: String,
}

impl ClientTls {
    /// Whether any key of the section is set.
    pub fn is_set(&self) -> bool {
        *self != Self::default()
    }

    /// Whether the client presents a certificate.
    pub fn has_identity(&self) -> bool {
        !self.cert_file.is_empty()
    }

    /// Loads the files into a tonic client config, refusing half an identity
    /// and unreadable or unparsable files with `section` in the message.
    pub fn load(&self, section: &str) -> Result<ClientTlsConfig, Error> {
        let mut tls = ClientTlsConfig::new();
        tls = if self.ca_file.is_empty() {
            tls.with_webpki_roots()
        } else {
            let ca = read_pem(section, "ca_file", &self.ca_file, CERTIFICATE)?;
            tls.ca_certificate(Certificate::from_pem(ca))
        };
        match (self.cert_file.is_empty(), self.key_file.is_empty()) {
            (true, true) => {}
            (false, false) => {
                let cert = read_pem(section, "cert_file", &self.cert_file, CERTIFICATE)?;
                let key = read_pem(section, "key_file", &self.key_file, PRIVATE_KEY)?;
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            _ => {
                return Err(config(format!(
                    "{section}.cert_file and {section}.key_file must be set together"
                )));
            }
        }
        if !self.domain.is_empty() {
            tls = tls.domain_name(self.domain.clone());
        }
        // Building a connector parses the CA and the identity now.
        Endpoint::from_static("https://tls-check.invalid")
            .tls_config(tls.clone())
            .map_err(|error| config(format!("{section}: unusable certificate or key: {error}")))?;
        Ok(tls)
    }

    /// An endpoint for `url` (the value of the key `endpoint_key`): TLS with
    /// this section for `https://`, plaintext for `http://`. A TLS section
    /// next to an `http://` endpoint is refused: whoever set a CA expects
    /// TLS, and silently sending plaintext would defeat it.
    pub fn endpoint(
        &self,
        section: &str,
        endpoint_key: &str,
        url: &str,
    ) -> Result<Endpoint, Error> {
        let endpoint = Endpoint::from_shared(url.to_owned())
            .map_err(|error| config(format!("{endpoint_key} `{url}`: {error}")))?;
        if url.starts_with("https://") {
            let tls = self.load(section)?;
            return endpoint
                .tls_config(tls)
                .map_err(|error| config(format!("{endpoint_key} `{url}`: {error}")));
        }
        if !url.starts_with("http://") {
            return Err(config(format!(
                "{endpoint_key} `{url}` must start with http:// or https://"
            )));
        }
        if self.is_set() {
            return Err(config(format!(
                "{section} is set but {endpoint_key} `{url}` is http://: use https:// or remove {section}"
            )));
        }
        Ok(endpoint)
    }
}

pub(crate) const CERTIFICATE: &str = "-----BEGIN CERTIFICATE-----";
pub(crate) const PRIVATE_KEY: &str = "PRIVATE KEY-----";

/// Reads a PEM file, refusing one that lacks `marker`: tonic would accept an
/// empty CA file and then trust nothing, failing only at the first handshake.
pub(crate) fn read_pem(
    section: &str,
    key: &str,
    path: &str,
    marker: &str,
) -> Result<Vec<u8>, Error> {
    let bytes = std::fs::read(path)
        .map_err(|error| config(format!("{section}.{key} `{path}`: {error}")))?;
    if !String::from_utf8_lossy(&bytes).contains(marker) {
        return Err(config(format!(
            "{section}.{key} `{path}` holds no PEM `{}`",
            marker.trim_matches('-')
        )));
    }
    Ok(bytes)
}

fn config(message: String) -> Error {
    Error::Config(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(name: &str, body: &str) -> String {
        let dir = std::env::temp_dir().join(format!("service-kit-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, body).unwrap();
        path.display().to_string()
    }

    fn error_of<T: std::fmt::Debug>(result: Result<T, Error>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn server_tls_is_off_until_a_certificate_is_set_and_never_half_on() {
        assert!(ServerTls::default().load("grpc_tls").unwrap().is_none());
        let key_only = ServerTls {
            key_file: "/x.pem".into(),
            ..ServerTls::default()
        };
        assert!(error_of(key_only.load("grpc_tls")).contains("grpc_tls.cert_file is required"));
        let cert_only = ServerTls {
            cert_file: "/x.pem".into(),
            ..ServerTls::default()
        };
        assert!(error_of(cert_only.load("grpc_tls")).contains("grpc_tls.key_file is required"));
        let missing = ServerTls {
            cert_file: "/nonexistent/cert.pem".into(),
            key_file: "/nonexistent/key.pem".into(),
            client_ca_file: String::new(),
        };
        assert!(
            error_of(missing.load("grpc_tls"))
                .contains("grpc_tls.cert_file `/nonexistent/cert.pem`")
        );
    }

    #[test]
    fn files_without_pem_are_refused_by_name() {
        let junk = temp_file("junk.pem", "not a certificate");
        let client = ClientTls {
            ca_file: junk.clone(),
            ..ClientTls::default()
        };
        let error = error_of(client.load("wallet.tls"));
        assert!(
            error.contains("wallet.tls.ca_file") && error.contains("BEGIN CERTIFICATE"),
            "{error}"
        );
        let half = ClientTls {
            cert_file: junk,
            ..ClientTls::default()
        };
        assert!(error_of(half.load("peer_tls")).contains("must be set together"));
    }

    #[test]
    fn endpoints_choose_tls_by_scheme() {
        let none = ClientTls::default();
        assert!(
            none.endpoint("wallet.tls", "wallet.endpoint", "http://127.0.0.1:1")
                .is_ok()
        );
        // System (bundled) roots: https works without any file.
        assert!(
            none.endpoint(
                "wallet.tls",
                "wallet.endpoint",
                "https://wallet.example:443"
            )
            .is_ok()
        );
        let domain = ClientTls {
            domain: "wallet.internal".into(),
            ..ClientTls::default()
        };
        let error =
            error_of(domain.endpoint("wallet.tls", "wallet.endpoint", "http://127.0.0.1:1"));
        assert!(
            error.contains("wallet.tls is set") && error.contains("http://"),
            "{error}"
        );
        let error = error_of(none.endpoint("wallet.tls", "wallet.endpoint", "wallet:1"));
        assert!(error.contains("wallet.endpoint"), "{error}");
    }
}
