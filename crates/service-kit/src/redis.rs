//! How every service builds its Redis client settings: one URL (`redis://`
//! plain, `rediss://` TLS) and an optional CA file. Written once so room-service's
//! pool and the relay's nudge subscriber check and trust alike.
//!
//! With `rediss://` and no CA file the server's certificate is checked
//! against the system's roots (managed Redis offerings use public CAs);
//! with a CA file, against that file only. The host name in the URL is
//! always checked. Errors name the config key, and everything is checked
//! when the settings are built, so a service refuses a bad value at start-up.
//!
//! [`check_transport`], which every service runs at start-up beside
//! [`client_config`], refuses a Redis that is not on this machine unless it
//! is reached over `rediss://` with a password (AUTH or an ACL user), or the
//! service's `allow_insecure_transport` key says otherwise (development
//! stacks only): the network to Redis is not trusted, and the leases and
//! the commit nudge live there.

use crate::Error;
use fred::rustls::pki_types::{CertificateDer, pem::PemObject};
use fred::rustls::{ClientConfig, RootCertStore};
use fred::types::config::{Config, TlsConfig, TlsConnector};
use std::sync::Arc;

/// Where a service's Redis settings live in its config, for error messages
/// (`redis.url` / `redis.tls_ca_file`, `outbox_worker.redis_url` / …).
#[derive(Debug, Clone, Copy)]
pub struct RedisKeys {
    /// Key of the URL.
    pub url: &'static str,
    /// Key of the CA file.
    pub tls_ca_file: &'static str,
}

/// Refuses `url` when its host is not this machine and it is either plain
/// `redis://` or carries no password, unless `allow_insecure` (the value of
/// the key `allow_key`, named in the message). Never prints the password.
pub fn check_transport(
    keys: RedisKeys,
    allow_key: &str,
    url: &str,
    allow_insecure: bool,
) -> Result<(), Error> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(()); // client_config refuses it, naming the scheme
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let (userinfo, host_port) = authority.rsplit_once('@').unwrap_or(("", authority));
    let has_password = userinfo
        .split_once(':')
        .is_some_and(|(_, password)| !password.is_empty());
    let host = crate::config::host_of_address(host_port);
    if allow_insecure || crate::config::is_loopback_host(host) {
        return Ok(());
    }
    let missing = match (scheme == "rediss", has_password) {
        (true, true) => return Ok(()),
        (false, _) => "is not TLS (use rediss://)",
        (true, false) => "carries no password (rediss://user:password@host, from a Secret)",
    };
    Err(Error::Config(format!(
        "{} `{}` {missing} and its host `{host}` is not this machine; or set {allow_key}: \
         true (development stacks only)",
        keys.url,
        crate::secret::redact_url(url)
    )))
}

/// The fred client config for `url`, trusting `tls_ca_file` when it is not
/// empty. Refuses a scheme other than `redis://`/`rediss://`, a CA file
/// with a plain `redis://` URL (it would be silently unused), and a CA file
/// that cannot be read or holds no certificate.
pub fn client_config(keys: RedisKeys, url: &str, tls_ca_file: &str) -> Result<Config, Error> {
    let redacted = || crate::secret::redact_url(url);
    let tls = if url.starts_with("rediss://") {
        true
    } else if url.starts_with("redis://") {
        false
    } else {
        return Err(Error::Config(format!(
            "{} `{}` must start with redis:// or rediss:// (TLS)",
            keys.url,
            redacted()
        )));
    };
    if !tls_ca_file.is_empty() && !tls {
        return Err(Error::Config(format!(
            "{} is set but {} `{}` is not TLS; use rediss://",
            keys.tls_ca_file,
            keys.url,
            redacted()
        )));
    }
    let mut config = Config::from_url(url)
        .map_err(|error| Error::Config(format!("{} `{}`: {error}", keys.url, redacted())))?;
    if tls {
        let roots = if tls_ca_file.is_empty() {
            system_roots()
                .map_err(|error| Error::Config(format!("{} `{}`: {error}", keys.url, redacted())))?
        } else {
            read_roots(tls_ca_file).map_err(|error| {
                Error::Config(format!("{} `{tls_ca_file}`: {error}", keys.tls_ca_file))
            })?
        };
        // An explicit provider rather than fred's default connector: rustls's
        // process-wide default is ambiguous (a panic) as soon as a second
        // crypto backend is linked into the binary.
        let client = ClientConfig::builder_with_provider(Arc::new(
            fred::rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|error| Error::Config(format!("{}: {error}", keys.url)))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.tls = Some(TlsConfig::from(TlsConnector::from(client)));
    }
    Ok(config)
}

/// The operating system's trusted roots (as fred itself would load them).
fn system_roots() -> Result<RootCertStore, String> {
    let loaded = fred::rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _unusable) = roots.add_parsable_certificates(loaded.certs);
    if added == 0 {
        return Err(match loaded.errors.first() {
            Some(error) => format!("no system CA certificates: {error}"),
            None => "no system CA certificates; set the CA file".into(),
        });
    }
    Ok(roots)
}

fn read_roots(path: &str) -> Result<RootCertStore, String> {
    let pem = std::fs::read(path).map_err(|error| error.to_string())?;
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(&pem) {
        let certificate = certificate.map_err(|error| format!("not PEM: {error}"))?;
        roots
            .add(certificate)
            .map_err(|error| format!("bad certificate: {error}"))?;
    }
    if roots.is_empty() {
        return Err("no certificate in the file".into());
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: RedisKeys = RedisKeys {
        url: "redis.url",
        tls_ca_file: "redis.tls_ca_file",
    };

    fn refusal(url: &str, ca: &str) -> String {
        match client_config(KEYS, url, ca) {
            Ok(_) => panic!("accepted {url} with CA `{ca}`"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn plain_and_tls_urls_are_accepted() {
        assert!(
            !client_config(KEYS, "redis://127.0.0.1:6379", "")
                .unwrap()
                .uses_tls()
        );
        assert!(
            client_config(KEYS, "rediss://127.0.0.1:6380", "")
                .unwrap()
                .uses_tls()
        );
    }

    #[test]
    fn bad_settings_are_refused_naming_the_key() {
        assert!(refusal("localhost:6379", "").contains("redis.url"));
        assert!(
            refusal("redis://127.0.0.1:6379", "/etc/hostname").contains("redis.tls_ca_file is set")
        );
        let missing = refusal("rediss://127.0.0.1:6380", "/nonexistent/ca.pem");
        assert!(
            missing.contains("redis.tls_ca_file `/nonexistent/ca.pem`"),
            "{missing}"
        );
        // A file that exists but holds no certificate.
        let not_pem = std::env::temp_dir().join(format!("hyapp-not-pem-{}", std::process::id()));
        std::fs::write(&not_pem, "not a certificate\n").unwrap();
        let empty = refusal("rediss://127.0.0.1:6380", not_pem.to_str().unwrap());
        let _ = std::fs::remove_file(&not_pem);
        assert!(empty.contains("no certificate"), "{empty}");
    }

    #[test]
    fn a_remote_redis_needs_tls_and_a_password_unless_allowed() {
        let allow = "redis.allow_insecure_transport";
        let check = |url: &str, allowed: bool| check_transport(KEYS, allow, url, allowed);
        for (url, why) in [
            ("redis://:hunter2@redis.internal:6379", "is not TLS"),
            ("redis://redis.internal:6379", "is not TLS"),
            ("rediss://redis.internal:6380", "carries no password"),
            ("rediss://room@redis.internal:6380/0", "carries no password"),
        ] {
            let error = check(url, false).unwrap_err().to_string();
            assert!(
                error.contains(why)
                    && error.contains("`redis.internal`")
                    && error.contains("redis.url")
                    && error.contains(allow)
                    && !error.contains("hunter2"),
                "{error}"
            );
            check(url, true).expect("explicitly allowed");
        }
        for url in [
            "rediss://:hunter2@redis.internal:6380",
            "rediss://room:hunter2@redis.internal:6380/0",
            "redis://127.0.0.1:6379",
            "redis://localhost:6379/1",
            "redis://[::1]:6379",
        ] {
            check(url, false).expect(url);
        }
    }

    #[test]
    fn a_password_in_the_url_stays_out_of_the_message() {
        let error = refusal("redis://:hunter2@127.0.0.1:6379", "/etc/hostname");
        assert!(!error.contains("hunter2"), "{error}");
    }
}
