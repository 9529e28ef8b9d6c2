//! Named operators (`admin_operators_file`): each line `name = <sha256 hex>`
//! gives one person a token of their own, so the audit trail records who
//! really acted instead of whatever a form said.
//!
//! Why a plain SHA-256 and not a slow password hash: no stretching crate is
//! in the build, and stretching protects *guessable* secrets. These tokens
//! are not chosen by people: [`MIN_OPERATOR_TOKEN_BYTES`] bytes of random
//! text (`outbox-relay operator-hash` refuses a shorter one) cannot be found
//! from their hash by trying, however fast each try is. The file therefore
//! holds no secret worth stealing, only names and hashes.
//!
//! Blank lines and `#` comments are allowed; an unreadable file, a
//! malformed line, an invalid or duplicate name, or a hash used twice
//! refuses start-up with the line number.

use crate::Error;
use service_kit::operator::OperatorName;
use service_kit::secret::equal_in_constant_time;
use sha2::{Digest, Sha256};

/// Shortest token `operator-hash` accepts: 32 bytes of random text.
pub const MIN_OPERATOR_TOKEN_BYTES: usize = 32;

/// The named operators of the file.
#[derive(Clone, Default)]
pub struct Operators {
    entries: Vec<(OperatorName, [u8; 32])>,
}

impl std::fmt::Debug for Operators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|(name, _)| name.as_str()))
            .finish()
    }
}

impl Operators {
    /// Reads `path`; an empty path means no named operators.
    pub fn load(path: &str) -> Result<Self, Error> {
        if path.is_empty() {
            return Ok(Self::default());
        }
        let text = std::fs::read_to_string(path)
            .map_err(|error| Error::Config(format!("admin_operators_file `{path}`: {error}")))?;
        Self::parse(&text)
            .map_err(|problem| Error::Config(format!("admin_operators_file `{path}`: {problem}")))
    }

    /// The operators of a file's text, or the first problem with its line.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut entries: Vec<(OperatorName, [u8; 32])> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((name, hash)) = line.split_once('=') else {
                return Err(format!("line {number}: expected `name = <sha256 hex>`"));
            };
            let name = OperatorName::new(name)
                .map_err(|refusal| format!("line {number}: {}", refusal.naming("the name")))?;
            let hash = parse_hash(hash.trim())
                .ok_or_else(|| format!("line {number}: the hash is not 64 hex digits"))?;
            if entries.iter().any(|(known, _)| *known == name) {
                return Err(format!("line {number}: operator `{name}` is listed twice"));
            }
            if entries.iter().any(|(_, known)| *known == hash) {
                return Err(format!(
                    "line {number}: `{name}` has the hash of another operator's token"
                ));
            }
            entries.push((name, hash));
        }
        Ok(Self { entries })
    }

    /// The operator whose token `token` is. Every entry is compared, in
    /// constant time, so timing says nothing about which one matched.
    pub fn operator_of(&self, token: &str) -> Option<OperatorName> {
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (name, hash) in &self.entries {
            if equal_in_constant_time(&presented, hash) {
                found = Some(name.clone());
            }
        }
        found
    }

    /// Whether `name` is still listed (a session of a removed operator ends).
    pub fn contains(&self, name: &str) -> bool {
        self.entries.iter().any(|(known, _)| known.as_str() == name)
    }

    /// Whether the file named nobody.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The file line of `name` with `token`, for `outbox-relay operator-hash`;
/// refuses a name the file would refuse and a short token.
pub fn hash_line(name: &str, token: &str) -> Result<String, Error> {
    let name =
        OperatorName::new(name).map_err(|refusal| Error::InvalidInput(refusal.naming("--name")))?;
    if token.len() < MIN_OPERATOR_TOKEN_BYTES {
        return Err(Error::InvalidInput(format!(
            "the token on stdin has {} bytes; give at least {MIN_OPERATOR_TOKEN_BYTES} bytes \
             of random text (e.g. `openssl rand -hex 32`)",
            token.len()
        )));
    }
    let hash: String = Sha256::digest(token.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    Ok(format!("{name} = {hash}"))
}

fn parse_hash(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut hash = [0u8; 32];
    for (index, byte) in hash.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(index * 2..index * 2 + 2)?, 16).ok()?;
    }
    Some(hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "alice-token-0123456789abcdef012345";

    #[test]
    fn a_hashed_token_names_its_operator() {
        let line = hash_line("alice", TOKEN).unwrap();
        let operators = Operators::parse(&format!("# ops\n\n{line}\n")).unwrap();
        assert_eq!(operators.operator_of(TOKEN).unwrap().as_str(), "alice");
        assert_eq!(operators.operator_of("alice"), None);
        assert!(operators.contains("alice") && !operators.contains("bob"));
        assert!(!format!("{operators:?}").contains(&line[8..]));
        let short = hash_line("alice", "short").unwrap_err().to_string();
        assert!(short.contains("at least 32 bytes"), "{short}");
    }

    #[test]
    fn bad_files_name_the_line() {
        let line = hash_line("alice", TOKEN).unwrap();
        let hash = line.split(" = ").nth(1).unwrap();
        for (text, expected) in [
            (format!("{line}\nbob {hash}"), "line 2: expected"),
            (format!("bad name = {hash}"), "line 1: the name has ' '"),
            (
                format!("{line}\n{line}"),
                "line 2: operator `alice` is listed twice",
            ),
            (
                format!("{line}\nbob = {hash}"),
                "line 2: `bob` has the hash",
            ),
            ("bob = abc".to_owned(), "line 1: the hash is not 64 hex"),
        ] {
            let error = Operators::parse(&text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
        let missing = Operators::load("/nonexistent/operators").unwrap_err();
        assert!(
            missing.to_string().contains("admin_operators_file"),
            "{missing}"
        );
    }
}
