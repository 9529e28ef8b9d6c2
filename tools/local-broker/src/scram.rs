//! SCRAM credentials (RFC 5802, RFC 7677) sent to the broker with
//! `AlterUserScramCredentials`, the request Kafka's own
//! `kafka-configs --alter --add-config SCRAM-SHA-512=…` sends.

use hmac::Hmac;
use rand::RngCore;
use sha2::{Sha256, Sha512};
use tansu_client::{Client, ConnectionManager};
use tansu_sans_io::{
    AlterUserScramCredentialsRequest, ErrorCode, ScramMechanism,
    alter_user_scram_credentials_request::ScramCredentialUpsertion,
};
use url::Url;

/// Iterations of the salted password: RFC 7677 asks for at least 4,096;
/// Kafka's default is 4,096 and Tansu's 16,384.
const ITERATIONS: u32 = 16_384;
/// Salt length in bytes.
const SALT_LEN: usize = 32;

/// The two SCRAM mechanisms Kafka (and Tansu) support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mechanism {
    /// SCRAM-SHA-256.
    Scram256,
    /// SCRAM-SHA-512.
    Scram512,
}

impl Mechanism {
    /// `SaltedPassword := Hi(Normalize(password), salt, i)`, with `Hi` being
    /// PBKDF2 over the mechanism's HMAC with one block of output, as long as
    /// the hash (RFC 5802 §2.2). Passwords are taken as given: the project's
    /// test passwords are ASCII, which SASLprep leaves unchanged.
    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Self::Scram256 => hi::<Hmac<Sha256>>(password, salt, iterations),
            Self::Scram512 => hi::<Hmac<Sha512>>(password, salt, iterations),
        }
    }
}

impl From<Mechanism> for i8 {
    fn from(mechanism: Mechanism) -> Self {
        match mechanism {
            Mechanism::Scram256 => ScramMechanism::Scram256.into(),
            Mechanism::Scram512 => ScramMechanism::Scram512.into(),
        }
    }
}

/// `Hi(str, salt, i)`: PBKDF2 with `Prf` (the `pbkdf2` crate), one output
/// block long, as long as `Prf`'s output.
fn hi<Prf>(password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8>
where
    Prf: hmac::digest::KeyInit + hmac::digest::Update + hmac::digest::FixedOutput + Clone + Sync,
{
    let mut salted = hmac::digest::Output::<Prf>::default();
    pbkdf2::pbkdf2::<Prf>(password, salt, iterations, &mut salted)
        .expect("HMAC takes a key of any length");
    salted.to_vec()
}

/// Stores `name`'s credential for `mechanism` on the broker at `broker`.
pub async fn create_user(
    broker: Url,
    name: &str,
    password: &str,
    mechanism: Mechanism,
) -> Result<ErrorCode, String> {
    let mut salt = [0u8; SALT_LEN];
    rand::rng().fill_bytes(&mut salt);
    let salted = mechanism.salted_password(password.as_bytes(), &salt, ITERATIONS);
    let client = ConnectionManager::builder(broker.clone())
        .client_id(Some("local-broker".into()))
        .build()
        .await
        .map(Client::new)
        .map_err(|error| format!("cannot connect to {broker}: {error}"))?;
    let upsertion = ScramCredentialUpsertion::default()
        .name(name.into())
        .mechanism(mechanism.into())
        .iterations(ITERATIONS as i32)
        .salt(salt.to_vec().into())
        .salted_password(salted.into());
    let response = client
        .call(
            AlterUserScramCredentialsRequest::default()
                .deletions(Some(Vec::new()))
                .upsertions(Some(vec![upsertion])),
        )
        .await
        .map_err(|error| format!("user create {name}: {error}"))?;
    let refused: Vec<String> = response
        .results
        .unwrap_or_default()
        .into_iter()
        .filter(|result| result.error_code != i16::from(ErrorCode::None))
        .map(|result| format!("{}: error {}", result.user, result.error_code))
        .collect();
    if refused.is_empty() {
        Ok(ErrorCode::None)
    } else {
        Err(format!("user create refused: {}", refused.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published PBKDF2-HMAC-SHA-256 and -SHA-512 vectors for password
    /// "password" and salt "salt" (RFC 6070's inputs): what a broker computes
    /// from the password a client proves, so a mismatch is a refused login.
    #[test]
    fn salted_passwords_match_the_published_vectors() {
        let sha256 = Mechanism::Scram256.salted_password(b"password", b"salt", 1);
        assert_eq!(
            hex(&sha256),
            "120fb6cffcf8b32c43e7225256c4f837a86548c92ccc35480805987cb70be17b"
        );
        let sha512 = Mechanism::Scram512.salted_password(b"password", b"salt", 1);
        assert_eq!(
            hex(&sha512),
            "867f70cf1ade02cff3752599a3a53dc4af34c7a669815ae5d513554e1c8cf252\
             c02d470a285a0501bad999bfe943c08f050235d7d68b1da55e63f73b60a57fce"
        );
        let sha256 = Mechanism::Scram256.salted_password(b"password", b"salt", 4096);
        assert_eq!(
            hex(&sha256),
            "c5e478d59288c841aa530db6845c4c8d962893a001ce4e11a4963873aa98134a"
        );
        let sha512 = Mechanism::Scram512.salted_password(b"password", b"salt", 4096);
        assert_eq!(
            hex(&sha512),
            "d197b1b33db0143e018b12f3d1d1479e6cdebdcc97c5c0f87f6902e072f457b5\
             143f30602641b3d55cd335988cb36b84376060ecd532e039b742a239434af2d5"
        );
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|byte| format!("{byte:02x}")).collect()
    }
}
