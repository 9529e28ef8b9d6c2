//! A stand-in for the gateway's assertion signer: an Ed25519 key made at
//! test time, its JSON Web Key Set written where room-service is told to
//! read it (`grpc_auth.user_assertion.jwks_file`), and signed JWTs naming
//! the user a call acts for. Shared by room-service's tests and the bench,
//! which both sign what room-service verifies.

use std::path::{Path, PathBuf};

use base64::Engine;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rcgen::KeyPair;

/// The issuer every assertion of [`AssertionSigner`] names.
pub const ISSUER: &str = "hyapp-gateway";
/// The audience room-service is configured with.
pub const AUDIENCE: &str = "room-service";

/// Signs user assertions with one key; `jwks` is its public half.
#[derive(Clone)]
pub struct AssertionSigner {
    key: EncodingKey,
    kid: String,
    /// The JWKS file holding the public key under `kid`.
    pub jwks: PathBuf,
}

impl std::fmt::Debug for AssertionSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AssertionSigner")
            .field("kid", &self.kid)
            .field("jwks", &self.jwks)
            .finish_non_exhaustive()
    }
}

impl AssertionSigner {
    /// A fresh key named `kid`, its JWKS written as `<dir>/<kid>.jwks.json`.
    ///
    /// # Panics
    /// When the key cannot be made or the file written: the test cannot run.
    pub fn generate(dir: &Path, kid: &str) -> AssertionSigner {
        let pair = KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("Ed25519 key");
        let public = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(pair.public_key_raw());
        let set: JwkSet = serde_json::from_value(serde_json::json!({ "keys": [{
            "kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "kid": kid, "x": public,
        }]}))
        .expect("a valid JWKS");
        let jwks = dir.join(format!("{kid}.jwks.json"));
        std::fs::write(&jwks, serde_json::to_string(&set).expect("JSON")).expect("write JWKS");
        AssertionSigner {
            key: EncodingKey::from_ed_der(&pair.serialize_der()),
            kid: kid.to_owned(),
            jwks,
        }
    }

    /// An assertion for `sub` with `audience`, expiring `expires_in` seconds
    /// from now (negative: already expired).
    pub fn assertion(&self, sub: &str, audience: &str, expires_in: i64) -> String {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(self.kid.clone());
        let now = service_kit::time::now_ms() / 1000;
        let claims = serde_json::json!({
            "sub": sub, "iss": ISSUER, "aud": audience, "iat": now, "exp": now + expires_in,
        });
        jsonwebtoken::encode(&header, &claims, &self.key).expect("sign assertion")
    }
}
