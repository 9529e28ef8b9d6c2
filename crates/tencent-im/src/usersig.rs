//! Admin UserSig generation and verification per Tencent's TLSSigAPIv2.
//!
//! A UserSig is `url_escape(base64(zlib(json)))` where the JSON document carries
//! `TLS.sig = base64(HMAC-SHA256(secret_key, content))` over a fixed newline-separated
//! content string. `TLS.expire` is a validity *duration* in seconds counted from `TLS.time`,
//! exactly as in the official SDKs. Both functions take the current time as an argument so they
//! stay pure and testable; only [`crate::Client`] reads the system clock.

use std::fmt;
use std::io::{Read, Write};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use flate2::Compression;
use flate2::read::ZlibDecoder;
use flate2::write::ZlibEncoder;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Upper bound on the inflated JSON size; a real UserSig is a few hundred bytes, so anything
/// larger is garbage and must not be allowed to balloon memory in the fake server.
const MAX_INFLATED_LEN: u64 = 16 * 1024;

/// The JSON document inside a UserSig. Field order matches the official SDKs.
#[derive(Serialize, Deserialize)]
struct SigDoc {
    #[serde(rename = "TLS.ver")]
    ver: String,
    #[serde(rename = "TLS.identifier")]
    identifier: String,
    #[serde(rename = "TLS.sdkappid")]
    sdkappid: u64,
    #[serde(rename = "TLS.expire")]
    expire: u64,
    #[serde(rename = "TLS.time")]
    time: u64,
    #[serde(rename = "TLS.sig")]
    sig: String,
}

/// A UserSig that decoded and whose HMAC matched the secret key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedSig {
    /// `TLS.identifier`: the account the signature was issued for.
    pub identifier: String,
    /// `TLS.sdkappid`.
    pub sdk_app_id: u64,
    /// `TLS.time`: issue time in unix seconds.
    pub time: u64,
    /// `TLS.expire`: validity in seconds, counted from `time`.
    pub expire: u64,
}

impl VerifiedSig {
    /// Unix second after which the signature is expired.
    pub fn expires_at(&self) -> u64 {
        self.time.saturating_add(self.expire)
    }
}

/// Why a UserSig was rejected by [`verify_usersig`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SigError {
    /// Not url-escaped base64 of zlib of the expected JSON document.
    Malformed(&'static str),
    /// The HMAC does not match: tampered, or signed with another key.
    BadSignature,
    /// Signed for a different SDKAppID.
    SdkAppIdMismatch {
        /// The SDKAppID the verifier expected.
        expected: u64,
        /// The SDKAppID inside the signature.
        found: u64,
    },
    /// `time + expire` is in the past.
    Expired {
        /// Unix second the signature expired at.
        expired_at: u64,
    },
}

impl SigError {
    /// The ErrorCode Tencent IM answers with for this failure.
    pub fn tencent_code(&self) -> i64 {
        match self {
            SigError::Expired { .. } => crate::error::codes::USERSIG_EXPIRED,
            SigError::Malformed(_) => crate::error::codes::USERSIG_INVALID,
            SigError::BadSignature => crate::error::codes::USERSIG_VERIFY_FAILED,
            SigError::SdkAppIdMismatch { .. } => crate::error::codes::USERSIG_SDKAPPID_MISMATCH,
        }
    }
}

impl fmt::Display for SigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SigError::Malformed(why) => write!(f, "usersig malformed: {why}"),
            SigError::BadSignature => f.write_str("usersig signature mismatch"),
            SigError::SdkAppIdMismatch { expected, found } => {
                write!(
                    f,
                    "usersig sdkappid mismatch: expected {expected}, found {found}"
                )
            }
            SigError::Expired { expired_at } => write!(f, "usersig expired at {expired_at}"),
        }
    }
}

impl std::error::Error for SigError {}

/// Builds the exact string that TLSSigAPIv2 signs (no userbuf).
fn content_to_sign(identifier: &str, sdk_app_id: u64, time: u64, expire: u64) -> String {
    format!(
        "TLS.identifier:{identifier}\nTLS.sdkappid:{sdk_app_id}\nTLS.time:{time}\nTLS.expire:{expire}\n"
    )
}

fn hmac_base64(secret_key: &str, content: &str) -> String {
    STANDARD.encode(hmac_raw(secret_key, content).finalize().into_bytes())
}

fn hmac_raw(secret_key: &str, content: &str) -> Hmac<Sha256> {
    // HMAC hashes over-long keys and pads short ones, so every key length is valid.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret_key.as_bytes())
        .expect("hmac accepts keys of any length");
    mac.update(content.as_bytes());
    mac
}

/// Tencent's url-safe alphabet swap applied on top of standard base64.
fn url_escape(b64: &str) -> String {
    b64.chars()
        .map(|c| match c {
            '+' => '*',
            '/' => '-',
            '=' => '_',
            other => other,
        })
        .collect()
}

fn url_unescape(sig: &str) -> String {
    sig.chars()
        .map(|c| match c {
            '*' => '+',
            '-' => '/',
            '_' => '=',
            other => other,
        })
        .collect()
}

/// Generates a UserSig for `identifier`, issued at `now_secs` and valid for `expire_secs`.
pub fn gen_usersig(
    secret_key: &str,
    sdk_app_id: u64,
    identifier: &str,
    now_secs: u64,
    expire_secs: u64,
) -> String {
    let content = content_to_sign(identifier, sdk_app_id, now_secs, expire_secs);
    let doc = SigDoc {
        ver: "2.0".to_owned(),
        identifier: identifier.to_owned(),
        sdkappid: sdk_app_id,
        expire: expire_secs,
        time: now_secs,
        sig: hmac_base64(secret_key, &content),
    };
    let json = serde_json::to_vec(&doc).expect("sig doc has only strings and integers");
    let mut encoder = ZlibEncoder::new(Vec::new(), Compression::default());
    // Writing into a Vec cannot fail; the Results exist only for generic writers.
    encoder
        .write_all(&json)
        .expect("zlib into a vec cannot fail");
    let compressed = encoder.finish().expect("zlib into a vec cannot fail");
    url_escape(&STANDARD.encode(compressed))
}

/// Decodes `sig`, recomputes its HMAC with `secret_key`, and checks SDKAppID and expiry.
///
/// The identifier is returned rather than checked so the caller can compare it with the
/// request's `identifier` and report Tencent's distinct error for a mismatch.
pub fn verify_usersig(
    secret_key: &str,
    sdk_app_id: u64,
    sig: &str,
    now_secs: u64,
) -> Result<VerifiedSig, SigError> {
    let doc = decode_doc(sig)?;
    if doc.ver != "2.0" {
        return Err(SigError::Malformed("unsupported TLS.ver"));
    }
    let content = content_to_sign(&doc.identifier, doc.sdkappid, doc.time, doc.expire);
    let claimed = STANDARD
        .decode(doc.sig.as_bytes())
        .map_err(|_| SigError::Malformed("TLS.sig is not base64"))?;
    // verify_slice compares in constant time, so the fake does not leak the HMAC by timing.
    hmac_raw(secret_key, &content)
        .verify_slice(&claimed)
        .map_err(|_| SigError::BadSignature)?;
    if doc.sdkappid != sdk_app_id {
        return Err(SigError::SdkAppIdMismatch {
            expected: sdk_app_id,
            found: doc.sdkappid,
        });
    }
    let verified = VerifiedSig {
        identifier: doc.identifier,
        sdk_app_id: doc.sdkappid,
        time: doc.time,
        expire: doc.expire,
    };
    if verified.expires_at() < now_secs {
        return Err(SigError::Expired {
            expired_at: verified.expires_at(),
        });
    }
    Ok(verified)
}

fn decode_doc(sig: &str) -> Result<SigDoc, SigError> {
    if sig.is_empty() {
        return Err(SigError::Malformed("empty"));
    }
    let compressed = STANDARD
        .decode(url_unescape(sig).as_bytes())
        .map_err(|_| SigError::Malformed("not base64"))?;
    let mut json = Vec::new();
    ZlibDecoder::new(compressed.as_slice())
        .take(MAX_INFLATED_LEN)
        .read_to_end(&mut json)
        .map_err(|_| SigError::Malformed("not zlib"))?;
    // flate2's reader stops at the end of the deflate stream without checking zlib's Adler-32
    // trailer; zlib's `uncompress`, which Tencent uses, rejects a bad one, so do the same.
    let trailer = compressed
        .last_chunk::<4>()
        .map(|bytes| u32::from_be_bytes(*bytes))
        .ok_or(SigError::Malformed("not zlib"))?;
    if trailer != adler32(&json) {
        return Err(SigError::Malformed("zlib checksum mismatch"));
    }
    serde_json::from_slice(&json).map_err(|_| SigError::Malformed("not the usersig json document"))
}

/// Adler-32 as defined by RFC 1950; inputs here are a few hundred bytes, so no batching.
fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65_521;
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in data {
        a = (a + u32::from(byte)) % MOD;
        b = (b + a) % MOD;
    }
    (b << 16) | a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adler32_matches_rfc1950_example() {
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
    }

    #[test]
    fn escape_round_trips_every_swapped_char() {
        let b64 = "ab+/cd==";
        assert_eq!(url_escape(b64), "ab*-cd__");
        assert_eq!(url_unescape(&url_escape(b64)), b64);
    }

    #[test]
    fn content_string_matches_tlssigapiv2_layout() {
        assert_eq!(
            content_to_sign("administrator", 1400000000, 1700000000, 604800),
            "TLS.identifier:administrator\nTLS.sdkappid:1400000000\nTLS.time:1700000000\nTLS.expire:604800\n"
        );
    }
}
