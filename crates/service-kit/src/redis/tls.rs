//! The TLS side of a Redis client: the roots a `rediss://` (or
//! `rediss-sentinel://`) server's certificate must chain to — a CA file, or
//! the system's roots — and the rustls connector over them. The same
//! connector serves the sentinels and the primary they name.

use fred::rustls::pki_types::{CertificateDer, pem::PemObject};
use fred::rustls::{ClientConfig, RootCertStore};
use fred::types::config::{TlsConfig, TlsConnector};
use std::sync::Arc;

/// fred's TLS settings trusting `roots`.
pub(super) fn config(roots: RootCertStore) -> Result<TlsConfig, String> {
    // An explicit provider rather than fred's default connector: rustls's
    // process-wide default is ambiguous (a panic) as soon as a second
    // crypto backend is linked into the binary.
    let client = ClientConfig::builder_with_provider(Arc::new(
        fred::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|error| error.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(TlsConfig::from(TlsConnector::from(client)))
}

/// The operating system's trusted roots (as fred itself would load them).
pub(super) fn system_roots() -> Result<RootCertStore, String> {
    let loaded = fred::rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _unusable) = roots.add_parsable_certificates(loaded.certs);
    if added == 0 {
        return Err(match loaded.errors.first() {
            Some(error) => format!("no system CA certificates: {error}"),
            None => "no system CA certificates; set the CA file".into(),
        });
    }
    Ok(roots)
}

/// The certificates of the PEM file at `path`; at least one.
pub(super) fn read_roots(path: &str) -> Result<RootCertStore, String> {
    let pem = std::fs::read(path).map_err(|error| error.to_string())?;
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(&pem) {
        let certificate = certificate.map_err(|error| format!("not PEM: {error}"))?;
        roots
            .add(certificate)
            .map_err(|error| format!("bad certificate: {error}"))?;
    }
    if roots.is_empty() {
        return Err("no certificate in the file".into());
    }
    Ok(roots)
}
