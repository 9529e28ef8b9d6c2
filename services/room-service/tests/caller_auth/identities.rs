//! Certificates and assertions for the caller-authentication tests, made at
//! test time: a CA with a room-service certificate (server and peer client:
//! `room-service`, `localhost`, `127.0.0.1`), a gateway client (`gateway`),
//! an intruder signed by the same CA (`intruder`), a gateway-named client
//! of an unrelated CA; and an Ed25519 key signing user assertions, with its
//! JWKS file.

use std::path::{Path, PathBuf};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
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

/// Unpadded base64url (RFC 4648 §5), as JWK members are written.
fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let mut buffer = [0u8; 3];
        buffer[..chunk.len()].copy_from_slice(chunk);
        let n = (u32::from(buffer[0]) << 16) | (u32::from(buffer[1]) << 8) | u32::from(buffer[2]);
        for index in 0..=chunk.len() {
            out.push(char::from(
                ALPHABET[((n >> (18 - 6 * index)) & 63) as usize],
            ));
        }
    }
    out
}

/// Signs user assertions; `jwks` is the file room-service is given.
pub struct Signer {
    key: EncodingKey,
    kid: String,
    pub jwks: PathBuf,
}

pub const ISSUER: &str = "hyapp-gateway";
pub const AUDIENCE: &str = "room-service";

impl Signer {
    /// A fresh Ed25519 key named `kid`, its JWKS written under `dir`.
    pub fn generate(dir: &Path, kid: &str) -> Signer {
        let pair = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let key = EncodingKey::from_ed_der(&pair.serialize_der());
        let jwk: Jwk = serde_json::from_value(serde_json::json!({
            "kty": "OKP",
            "crv": "Ed25519",
            "alg": "EdDSA",
            "kid": kid,
            "x": base64_url(&pair.public_key_raw()),
        }))
        .unwrap();
        let set = JwkSet { keys: vec![jwk] };
        let jwks = write(
            dir,
            &format!("{kid}.jwks.json"),
            &serde_json::to_string(&set).unwrap(),
        );
        Signer {
            key,
            kid: kid.to_owned(),
            jwks,
        }
    }

    /// An assertion for `sub` with `audience`, expiring `expires_in` seconds from now.
    pub fn assertion(&self, sub: &str, audience: &str, expires_in: i64) -> String {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(self.kid.clone());
        let now = service_kit::time::now_ms() / 1000;
        let claims = serde_json::json!({
            "sub": sub,
            "iss": ISSUER,
            "aud": audience,
            "iat": now,
            "exp": now + expires_in,
        });
        jsonwebtoken::encode(&header, &claims, &self.key).unwrap()
    }
}
