//! The gateway's end-user assertion: a JWT in `authorization: Bearer …`,
//! signed by one of the keys of `grpc_auth.user_assertion.jwks_file`, with
//! the configured issuer and audience, unexpired; its `sub` is the user the
//! gateway authenticated. Verification is `jsonwebtoken`'s; this module
//! only decides which key and which algorithm: the key by the token's `kid`,
//! the algorithm by the key (never by the token's header, so a token cannot
//! pick a weaker algorithm or use a public key as an HMAC secret).

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use crate::Error;
use crate::config::UserAssertionConfig;

/// Longest accepted assertion; real ones are well under 2 KiB.
pub const MAX_ASSERTION_BYTES: usize = 8 * 1024;
/// Largest JWKS file read at start-up.
const MAX_JWKS_BYTES: u64 = 1024 * 1024;
/// Most keys in the JWKS (a rotation has two or three).
const MAX_KEYS: usize = 64;

/// One verification key: its id, its algorithm and the key.
struct VerifyingKey {
    kid: String,
    algorithm: Algorithm,
    key: DecodingKey,
}

/// Verifies assertions against the configured keys.
pub struct AssertionVerifier {
    keys: Vec<VerifyingKey>,
    issuer: String,
    audience: String,
    leeway_secs: u64,
}

impl std::fmt::Debug for AssertionVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kids: Vec<&str> = self.keys.iter().map(|key| key.kid.as_str()).collect();
        f.debug_struct("AssertionVerifier")
            .field("kids", &kids)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish()
    }
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
}

impl AssertionVerifier {
    /// Loads the JWKS of `config`, refusing an unreadable file, a key
    /// without `kid`, a duplicate `kid`, a symmetric (`oct`) key and a key
    /// whose `alg` does not fit its type, naming the key.
    pub fn load(config: &UserAssertionConfig) -> Result<Self, Error> {
        let invalid = |message: String| {
            Error::Config(format!(
                "grpc_auth.user_assertion.jwks_file `{}`: {message}",
                config.jwks_file
            ))
        };
        let size = std::fs::metadata(&config.jwks_file)
            .map_err(|error| invalid(error.to_string()))?
            .len();
        if size > MAX_JWKS_BYTES {
            return Err(invalid(format!("larger than {MAX_JWKS_BYTES} bytes")));
        }
        let text = std::fs::read_to_string(&config.jwks_file)
            .map_err(|error| invalid(error.to_string()))?;
        let set: JwkSet = serde_json::from_str(&text)
            .map_err(|error| invalid(format!("not a JSON Web Key Set: {error}")))?;
        if set.keys.is_empty() || set.keys.len() > MAX_KEYS {
            return Err(invalid(format!("must hold 1..={MAX_KEYS} keys")));
        }
        let mut keys: Vec<VerifyingKey> = Vec::new();
        for jwk in &set.keys {
            let key = verifying_key(jwk).map_err(&invalid)?;
            if keys.iter().any(|known| known.kid == key.kid) {
                return Err(invalid(format!("kid `{}` appears twice", key.kid)));
            }
            keys.push(key);
        }
        Ok(Self {
            keys,
            issuer: config.issuer.clone(),
            audience: config.audience.clone(),
            leeway_secs: config.leeway.as_std().as_secs(),
        })
    }

    /// The subject of a valid `token`, or why it is not valid (never echoing it).
    pub fn subject(&self, token: &str) -> Result<String, Error> {
        let refused = |why: String| Error::Unauthenticated(format!("user assertion {why}"));
        if token.len() > MAX_ASSERTION_BYTES {
            return Err(refused(format!(
                "is longer than {MAX_ASSERTION_BYTES} bytes"
            )));
        }
        let header = jsonwebtoken::decode_header(token)
            .map_err(|error| refused(format!("is not a JWT ({error})")))?;
        let kid = header.kid.ok_or_else(|| refused("has no kid".into()))?;
        let key = self
            .keys
            .iter()
            .find(|key| key.kid == kid)
            .ok_or_else(|| refused("is signed by an unknown key".into()))?;
        let mut validation = Validation::new(key.algorithm);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = self.leeway_secs;
        let claims = jsonwebtoken::decode::<Claims>(token, &key.key, &validation)
            .map_err(|error| refused(format!("does not verify ({error})")))?;
        Ok(claims.claims.sub)
    }
}

/// The key and the algorithm a JWK verifies with.
fn verifying_key(jwk: &Jwk) -> Result<VerifyingKey, String> {
    let kid = jwk
        .common
        .key_id
        .clone()
        .filter(|kid| !kid.is_empty())
        .ok_or("every key needs a kid")?;
    let named = |problem: &str| format!("key `{kid}`: {problem}");
    let declared = match jwk.common.key_algorithm {
        Some(algorithm) => Some(
            algorithm
                .to_string()
                .parse::<Algorithm>()
                .map_err(|_| named("its alg is not supported"))?,
        ),
        None => None,
    };
    let (allowed, default): (&[Algorithm], Algorithm) = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => (
            &[
                Algorithm::RS256,
                Algorithm::RS384,
                Algorithm::RS512,
                Algorithm::PS256,
                Algorithm::PS384,
                Algorithm::PS512,
            ],
            Algorithm::RS256,
        ),
        AlgorithmParameters::EllipticCurve(params) => match params.curve {
            EllipticCurve::P256 => (&[Algorithm::ES256], Algorithm::ES256),
            EllipticCurve::P384 => (&[Algorithm::ES384], Algorithm::ES384),
            _ => return Err(named("only the P-256 and P-384 curves are supported")),
        },
        AlgorithmParameters::OctetKeyPair(params) if params.curve == EllipticCurve::Ed25519 => {
            (&[Algorithm::EdDSA], Algorithm::EdDSA)
        }
        AlgorithmParameters::OctetKeyPair(_) => {
            return Err(named("only the Ed25519 curve is supported for OKP keys"));
        }
        AlgorithmParameters::OctetKey(_) => {
            return Err(named(
                "symmetric (oct) keys are refused: whoever can verify with one can also mint assertions",
            ));
        }
    };
    let algorithm = declared.unwrap_or(default);
    if !allowed.contains(&algorithm) {
        return Err(named("its alg does not fit its key type"));
    }
    let key = DecodingKey::from_jwk(jwk).map_err(|error| named(&error.to_string()))?;
    // The Ed25519 verifier reads the first 32 bytes of the key: a shorter
    // `x` must be refused here, not found at the first assertion.
    if algorithm == Algorithm::EdDSA && key.as_bytes().len() != 32 {
        return Err(named("an Ed25519 key's x must be 32 bytes"));
    }
    Ok(VerifyingKey {
        kid,
        algorithm,
        key,
    })
}
