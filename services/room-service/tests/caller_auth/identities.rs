//! Certificates and assertions for the caller-authentication tests, made at
//! test time: a CA with a room-service certificate (server and peer client:
//! `room-service`, `localhost`, `127.0.0.1`), a gateway client (`gateway`),
//! an intruder signed by the same CA (`intruder`) and a gateway-named
//! client of an unrelated CA. (The assertion signer is `testkit::assertions`.)

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use service_kit::grpc_tls::{ClientTls, ServerTls};

/// One certificate and its key, as PEM files.
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The files of the module doc.
pub struct Identities {
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub room_service: Pair,
    pub gateway: Pair,
    pub intruder: Pair,
    pub foreign_gateway: Pair,
}

impl Drop for Identities {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn authority(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(params, key))
}

fn issue(
    dir: &Path,
    file: &str,
    issuer: &Issuer<'static, KeyPair>,
    common_name: &str,
    names: &[&str],
    server: bool,
) -> Pair {
    let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
    let mut params = CertificateParams::new(names).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = if server {
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ]
    } else {
        vec![ExtendedKeyUsagePurpose::ClientAuth]
    };
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    Pair {
        cert: write(dir, &format!("{file}.pem"), &cert.pem()),
        key: write(dir, &format!("{file}-key.pem"), &key.serialize_pem()),
    }
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

fn text(path: &Path) -> String {
    path.display().to_string()
}

impl Identities {
    pub fn generate() -> Identities {
        let dir = std::env::temp_dir().join(testkit::unique("hyapp-callers-"));
        std::fs::create_dir_all(&dir).unwrap();
        let (ca_pem, ca) = authority("hyapp test CA");
        let (_, foreign) = authority("someone else's CA");
        Identities {
            ca: write(&dir, "ca.pem", &ca_pem),
            room_service: issue(
                &dir,
                "room-service",
                &ca,
                "room-service",
                &["room-service", "localhost", "127.0.0.1"],
                true,
            ),
            gateway: issue(&dir, "gateway", &ca, "gateway", &[], false),
            intruder: issue(&dir, "intruder", &ca, "intruder", &[], false),
            foreign_gateway: issue(&dir, "foreign", &foreign, "gateway", &[], false),
            dir,
        }
    }

    /// The listener's mutual TLS.
    pub fn server_tls(&self) -> ServerTls {
        ServerTls {
            cert_file: text(&self.room_service.cert),
            key_file: text(&self.room_service.key),
            client_ca_file: text(&self.ca),
        }
    }

    /// A client presenting `pair`, verifying the server as `domain` (empty:
    /// the URL's host).
    pub fn client(&self, pair: Option<&Pair>, domain: &str) -> ClientTls {
        ClientTls {
            ca_file: text(&self.ca),
            cert_file: pair.map(|pair| text(&pair.cert)).unwrap_or_default(),
            key_file: pair.map(|pair| text(&pair.key)).unwrap_or_default(),
            domain: domain.to_owned(),
        }
    }
}
