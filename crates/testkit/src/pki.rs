//! A throw-away public-key infrastructure for TLS tests, generated at test
//! time so no key or certificate is ever checked in (and none can expire in
//! the repository): a CA, a server certificate and a client certificate
//! signed by it (for mutual TLS), and a second, unrelated CA for the
//! "a server signed by someone else is refused" cases.
//!
//! Every file is PEM, in a fresh directory of its own, so tests running in
//! parallel never share keys. The directory is removed when the [`TestPki`]
//! is dropped: keep it alive as long as anything may still read the files
//! (a server that loads its certificate lazily, a client that reconnects).

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

/// Paths of the generated PEM files; see the module docs.
#[derive(Debug)]
pub struct TestPki {
    /// The directory holding every file below (removed on drop).
    pub dir: PathBuf,
    /// The CA certificate that signed the server and client certificates.
    pub ca: PathBuf,
    /// Server certificate for the names given to [`TestPki::generate`].
    pub server_cert: PathBuf,
    /// The server certificate's private key (PKCS#8).
    pub server_key: PathBuf,
    /// Client certificate (CN `hyapp-test-client`), for mutual TLS.
    pub client_cert: PathBuf,
    /// The client certificate's private key (PKCS#8).
    pub client_key: PathBuf,
    /// A CA certificate that signed nothing here: trusting only it must make
    /// every handshake with the server fail.
    pub wrong_ca: PathBuf,
}

impl TestPki {
    /// Generates the CA, the server certificate (valid for `server_names`:
    /// each one that parses as an IP address becomes an IP SAN, every other
    /// one a DNS SAN, e.g. `["localhost", "127.0.0.1"]`), the client
    /// certificate and the unrelated CA, and writes them as PEM files.
    ///
    /// # Panics
    /// When a name is not a valid SAN or the temporary directory is not
    /// writable: the test cannot run.
    pub fn generate(server_names: &[&str]) -> TestPki {
        let dir = std::env::temp_dir().join(crate::unique("hyapp-pki-"));
        std::fs::create_dir_all(&dir).expect("create pki dir");

        let (ca_pem, ca) = certificate_authority("hyapp test CA");
        let (wrong_ca_pem, _) = certificate_authority("hyapp unrelated test CA");

        let names: Vec<String> = server_names.iter().map(|name| name.to_string()).collect();
        let mut server = CertificateParams::new(names).expect("server names are valid SANs");
        server.distinguished_name.push(
            DnType::CommonName,
            server_names.first().copied().unwrap_or("hyapp-test-server"),
        );
        server.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        // webpki (rustls) refuses a server certificate without serverAuth.
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let (server_cert, server_key) = signed(&server, &ca);

        let mut client = CertificateParams::new(Vec::<String>::new()).expect("no SANs");
        client
            .distinguished_name
            .push(DnType::CommonName, "hyapp-test-client");
        client.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let (client_cert, client_key) = signed(&client, &ca);

        TestPki {
            ca: write(&dir, "ca.pem", &ca_pem),
            server_cert: write(&dir, "server.pem", &server_cert),
            server_key: write(&dir, "server-key.pem", &server_key),
            client_cert: write(&dir, "client.pem", &client_cert),
            client_key: write(&dir, "client-key.pem", &client_key),
            wrong_ca: write(&dir, "wrong-ca.pem", &wrong_ca_pem),
            dir,
        }
    }
}

impl Drop for TestPki {
    fn drop(&mut self) {
        // Best effort: a leftover directory in the temp dir harms nothing.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A self-signed CA allowed to sign certificates: its PEM and its issuer.
fn certificate_authority(common_name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().expect("generate CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("no SANs");
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key).expect("self-sign CA");
    (cert.pem(), Issuer::new(params, key))
}

/// A certificate for `params` with a fresh key, signed by `issuer`: (cert PEM, key PEM).
fn signed(params: &CertificateParams, issuer: &Issuer<'static, KeyPair>) -> (String, String) {
    let key = KeyPair::generate().expect("generate key");
    let cert = params.signed_by(&key, issuer).expect("sign certificate");
    (cert.pem(), key.serialize_pem())
}

fn write(dir: &Path, name: &str, pem: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, pem).expect("write pem file");
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_file_as_pem_and_removes_them_on_drop() {
        let pki = TestPki::generate(&["localhost", "127.0.0.1"]);
        let dir = pki.dir.clone();
        for (path, marker) in [
            (&pki.ca, "CERTIFICATE"),
            (&pki.server_cert, "CERTIFICATE"),
            (&pki.server_key, "PRIVATE KEY"),
            (&pki.client_cert, "CERTIFICATE"),
            (&pki.client_key, "PRIVATE KEY"),
            (&pki.wrong_ca, "CERTIFICATE"),
        ] {
            let text = std::fs::read_to_string(path).expect("pem file exists");
            assert!(
                text.starts_with(&format!("-----BEGIN {marker}-----")),
                "{} is not a PEM {marker}",
                path.display()
            );
        }
        assert_ne!(
            std::fs::read(&pki.ca).unwrap(),
            std::fs::read(&pki.wrong_ca).unwrap()
        );
        drop(pki);
        assert!(!dir.exists(), "pki dir survived the drop");
    }
}
