//! UserSig generation and verification against an independent reference implementation.
//!
//! The vectors below were produced by a straight Python transcription of the official
//! TLSSigAPIv2 (`json.dumps` with its default separators, `zlib.compress` at its default
//! level), so they check interoperability, not just that our two halves agree with each other.

use std::io::{Read, Write};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use flate2::Compression;
use flate2::read::ZlibDecoder;
use flate2::write::ZlibEncoder;
use serde_json::Value;
use tencent_im::usersig::{SigError, gen_usersig, verify_usersig};

const KEY: &str = "5bd2850fff3ecb11d7c805251c51ee463a25727bddc2385f3fa8bfee1bb93b5e";
const APP: u64 = 1_400_000_000;
const ADMIN: &str = "administrator";
const TIME: u64 = 1_700_000_000;
const EXPIRE: u64 = 604_800;
/// base64(HMAC-SHA256(KEY, content string)) computed by Python's `hmac`.
const REFERENCE_HMAC: &str = "k15OUkRWhajQMFUVpK03o9AYZL1+QR4YCsLYQolWR7M=";
/// A full UserSig produced by the Python reference for the constants above.
const REFERENCE_SIG: &str = "eJyrVgrxCdYrSy1SslJQMtIzUNJRAItkpqTmlWSmZUIkElNyM-Myi0uKEkvyi2BKilOyEwsKMlOACgxNDKAAKpdaUZBZlAqUMTMwsYCLlmTmgsQMzdFUF2emg2zJNjT1D80OCs9IzAr0dQsNK-A2MM63dIyM8jHUDgwyiXQu9okMzM8JDzL3tVWqBQBfSTTY";

/// The inverse of generation, written out step by step independently of the crate.
fn decode(sig: &str) -> Value {
    let b64: String = sig
        .chars()
        .map(|c| match c {
            '*' => '+',
            '-' => '/',
            '_' => '=',
            c => c,
        })
        .collect();
    let compressed = STANDARD.decode(b64).expect("base64");
    let mut json = String::new();
    ZlibDecoder::new(compressed.as_slice())
        .read_to_string(&mut json)
        .expect("zlib");
    serde_json::from_str(&json).expect("json")
}

fn encode(doc: &Value) -> String {
    let mut z = ZlibEncoder::new(Vec::new(), Compression::default());
    z.write_all(doc.to_string().as_bytes()).expect("zlib write");
    let b64 = STANDARD.encode(z.finish().expect("zlib finish"));
    b64.replace('+', "*").replace('/', "-").replace('=', "_")
}

#[test]
fn reference_sig_from_python_verifies() {
    let verified = verify_usersig(KEY, APP, REFERENCE_SIG, TIME + 60).expect("reference sig");
    assert_eq!(verified.identifier, ADMIN);
    assert_eq!(verified.sdk_app_id, APP);
    assert_eq!(verified.time, TIME);
    assert_eq!(verified.expire, EXPIRE);
    assert_eq!(verified.expires_at(), TIME + EXPIRE);
}

#[test]
fn generated_sig_decodes_to_the_reference_document() {
    let sig = gen_usersig(KEY, APP, ADMIN, TIME, EXPIRE);
    assert!(
        !sig.contains(['+', '/', '=']),
        "url-escaped alphabet only: {sig}"
    );
    let doc = decode(&sig);
    assert_eq!(doc["TLS.ver"], "2.0");
    assert_eq!(doc["TLS.identifier"], ADMIN);
    assert_eq!(doc["TLS.sdkappid"], APP);
    assert_eq!(doc["TLS.time"], TIME);
    assert_eq!(doc["TLS.expire"], EXPIRE);
    assert_eq!(
        doc["TLS.sig"], REFERENCE_HMAC,
        "HMAC matches the reference implementation"
    );
    // And the generated sig carries the same document as Python's, byte layout aside.
    assert_eq!(doc, decode(REFERENCE_SIG));
}

#[test]
fn round_trip_verifies_until_expiry() {
    let sig = gen_usersig(KEY, APP, ADMIN, TIME, 10);
    assert!(verify_usersig(KEY, APP, &sig, TIME).is_ok());
    assert!(
        verify_usersig(KEY, APP, &sig, TIME + 10).is_ok(),
        "valid through time + expire"
    );
    let err = verify_usersig(KEY, APP, &sig, TIME + 11).expect_err("expired");
    assert_eq!(
        err,
        SigError::Expired {
            expired_at: TIME + 10
        }
    );
    assert_eq!(err.tencent_code(), 70001);
}

#[test]
fn tampered_document_fails_the_hmac() {
    let sig = gen_usersig(KEY, APP, ADMIN, TIME, EXPIRE);
    let mut doc = decode(&sig);
    doc["TLS.identifier"] = Value::from("someone-else");
    let err = verify_usersig(KEY, APP, &encode(&doc), TIME).expect_err("tampered identifier");
    assert_eq!(err, SigError::BadSignature);

    let mut doc = decode(&sig);
    doc["TLS.expire"] = Value::from(EXPIRE * 100);
    let err = verify_usersig(KEY, APP, &encode(&doc), TIME).expect_err("extended expiry");
    assert_eq!(err, SigError::BadSignature);
}

#[test]
fn wrong_key_wrong_app_and_garbage_are_rejected() {
    let sig = gen_usersig(KEY, APP, ADMIN, TIME, EXPIRE);
    assert_eq!(
        verify_usersig("other-key", APP, &sig, TIME),
        Err(SigError::BadSignature)
    );
    assert_eq!(
        verify_usersig(KEY, APP + 1, &sig, TIME),
        Err(SigError::SdkAppIdMismatch {
            expected: APP + 1,
            found: APP
        })
    );
    for garbage in ["", "not base64 at all!", "AAAA", &sig[..sig.len() / 2]] {
        let err = verify_usersig(KEY, APP, garbage, TIME).expect_err(garbage);
        assert!(
            matches!(err, SigError::Malformed(_)),
            "{garbage:?} gave {err:?}"
        );
        assert_eq!(err.tencent_code(), 70003);
    }
}

#[test]
fn flipping_any_character_never_verifies() {
    let sig = gen_usersig(KEY, APP, ADMIN, TIME, EXPIRE);
    for index in 0..sig.len() {
        let mut bytes = sig.clone().into_bytes();
        bytes[index] = if bytes[index] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).expect("ascii");
        assert!(
            verify_usersig(KEY, APP, &tampered, TIME).is_err(),
            "flip at {index} verified"
        );
    }
}
