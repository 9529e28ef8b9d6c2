//! The direct entry's bearer token check (`grpc_auth_token`): a tonic
//! interceptor that refuses a call without `authorization: Bearer <token>`
//! or with another token `UNAUTHENTICATED`, comparing in constant time. A
//! leaf module, so the config can check the token without the gRPC service.
//! A token shorter than [`MIN_TOKEN_LEN`] is refused at start-up: the entry
//! applies room events, and a short or word-like token can be guessed.

use service_kit::Secret;
use service_kit::secret::equal_in_constant_time;
use std::sync::Arc;
use tonic::{Request, Status};

/// Fewest characters a `grpc_auth_token` may have: 32 visible ASCII
/// characters, e.g. the 64 hex digits of `openssl rand -hex 32`.
pub const MIN_TOKEN_LEN: usize = 32;

/// The `authorization: Bearer <token>` check of every call, when a token is configured.
#[derive(Clone)]
pub struct BearerToken {
    expected: Option<Arc<[u8]>>,
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.expected.is_some() {
            "BearerToken(***)"
        } else {
            "BearerToken(off)"
        })
    }
}

impl BearerToken {
    /// Checks calls against `token`; an empty one checks nothing. A token
    /// that cannot travel as a header value is refused (`grpc_auth_token`).
    pub fn new(token: &Secret) -> Result<Self, crate::Error> {
        if token.is_empty() {
            return Ok(Self { expected: None });
        }
        if !token.expose().bytes().all(|byte| byte.is_ascii_graphic()) {
            return Err(crate::Error::Config(
                "grpc_auth_token must be visible ASCII without spaces (it travels as a header)"
                    .into(),
            ));
        }
        let length = token.expose().len();
        if length < MIN_TOKEN_LEN {
            return Err(crate::Error::Config(format!(
                "grpc_auth_token is {length} characters; at least {MIN_TOKEN_LEN} are required \
                 (e.g. `openssl rand -hex 32`)"
            )));
        }
        Ok(Self {
            expected: Some(format!("Bearer {}", token.expose()).into_bytes().into()),
        })
    }
}

impl tonic::service::Interceptor for BearerToken {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.expected else {
            return Ok(request);
        };
        let given = request
            .metadata()
            .get("authorization")
            .map(|value| value.as_bytes())
            .unwrap_or_default();
        if equal_in_constant_time(given, expected) {
            Ok(request)
        } else {
            Err(Status::unauthenticated("missing or wrong bearer token"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    fn request(authorization: Option<&str>) -> Request<()> {
        let mut request = Request::new(());
        if let Some(value) = authorization {
            request
                .metadata_mut()
                .insert("authorization", value.parse().unwrap());
        }
        request
    }

    fn call(check: &mut BearerToken, authorization: Option<&str>) -> Result<(), tonic::Code> {
        check
            .call(request(authorization))
            .map(drop)
            .map_err(|status| status.code())
    }

    const TOKEN: &str = "s3cret-0123456789abcdef0123456789a";
    const BEARER: &str = "Bearer s3cret-0123456789abcdef0123456789a";

    #[test]
    fn a_token_shorter_than_the_minimum_is_refused_without_printing_it() {
        let short = "s3cret-0123456789abcdef01234567";
        assert_eq!(short.len(), MIN_TOKEN_LEN - 1);
        let error = BearerToken::new(&Secret::new(short))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("grpc_auth_token is 31 characters; at least 32"),
            "{error}"
        );
        assert!(!error.contains(short), "{error}");
        BearerToken::new(&Secret::new(&short[..8])).unwrap_err();
        BearerToken::new(&Secret::new(TOKEN)).expect("32 characters accepted");
    }

    #[test]
    fn only_the_exact_bearer_token_passes() {
        let mut check = BearerToken::new(&Secret::new(TOKEN)).unwrap();
        assert_eq!(call(&mut check, Some(BEARER)), Ok(()));
        let longer = format!("{BEARER}2");
        for wrong in [
            None,
            Some(&BEARER[..BEARER.len() - 1]),
            Some(longer.as_str()),
            Some(TOKEN),
        ] {
            assert_eq!(
                call(&mut check, wrong),
                Err(tonic::Code::Unauthenticated),
                "{wrong:?}"
            );
        }
        let mut off = BearerToken::new(&Secret::default()).unwrap();
        assert_eq!(call(&mut off, None), Ok(()));
        assert!(BearerToken::new(&Secret::new("two words")).is_err());
        assert!(!format!("{check:?}").contains(TOKEN));
    }
}
