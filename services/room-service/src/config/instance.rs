//! The top-level keys that say who this instance is and where it listens:
//! `node_id`, `app_code`, `grpc_listen`, `http_listen`, `advertise_url`,
//! `forward_timeout` and `shutdown_grace`; their checks name the key.

use service_kit::duration::ConfigDuration;

use super::Config;
use crate::Error;
use crate::validate::{MAX_APP_CODE_LEN, is_id_charset};
use service_kit::adjusted::Adjustments;

impl Config {
    /// The URL this instance advertises in its leases, for the gRPC listener
    /// bound at `bound`: `advertise_url` when set, else derived from it.
    pub fn advertised_url(&self, bound: std::net::SocketAddr) -> String {
        if !self.advertise_url.is_empty() {
            return self.advertise_url.clone();
        }
        // The other instances reach this one over the same listener, so the
        // scheme follows whether it speaks TLS.
        let scheme = if self.grpc_tls.is_enabled() {
            "https"
        } else {
            "http"
        };
        if bound.ip().is_unspecified() {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
            return format!("{scheme}://{host}:{}", bound.port());
        }
        format!("{scheme}://{bound}")
    }

    /// Fills an empty `node_id` (`$HOSTNAME-<pid>`) and checks the identity
    /// and listener keys; a non-positive `forward_timeout` or
    /// `shutdown_grace` falls back to its default with a warning.
    pub(super) fn check_instance(&mut self, adjusted: &mut Adjustments) -> Result<(), Error> {
        if self.node_id.is_empty() {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "room-service".into());
            self.node_id = format!("{host}-{}", std::process::id());
        }
        if self.node_id.len() > 128 || !is_id_charset(&self.node_id) {
            return invalid(format!(
                "node_id `{}` must be 1..=128 chars of [A-Za-z0-9_.:-]",
                self.node_id
            ));
        }
        if self.app_code.is_empty()
            || self.app_code.len() > MAX_APP_CODE_LEN
            || !is_id_charset(&self.app_code)
        {
            return invalid(format!(
                "app_code `{}` must be 1..={MAX_APP_CODE_LEN} chars of [A-Za-z0-9_.:-]",
                self.app_code
            ));
        }
        self.check_listeners()?;
        let forward = ConfigDuration::from_secs(5);
        self.forward_timeout = adjusted.positive("forward_timeout", self.forward_timeout, forward);
        let grace = ConfigDuration::from_secs(20);
        self.shutdown_grace = adjusted.positive("shutdown_grace", self.shutdown_grace, grace);
        Ok(())
    }

    /// Both listeners are socket addresses; `advertise_url`, when set, an
    /// http(s) URL.
    fn check_listeners(&self) -> Result<(), Error> {
        for (key, value) in [
            ("grpc_listen", &self.grpc_listen),
            ("http_listen", &self.http_listen),
        ] {
            if value.parse::<std::net::SocketAddr>().is_err() {
                return invalid(format!("{key} `{value}` is not a host:port socket address"));
            }
        }
        if !self.advertise_url.is_empty() {
            let usable = (self.advertise_url.starts_with("http://")
                || self.advertise_url.starts_with("https://"))
                && !self.advertise_url.contains(char::is_whitespace)
                && self.advertise_url.parse::<tonic::transport::Uri>().is_ok();
            if !usable {
                return invalid(format!(
                    "advertise_url `{}` must be an http:// or https:// URL without spaces",
                    self.advertise_url
                ));
            }
        }
        Ok(())
    }
}

fn invalid(message: String) -> Result<(), Error> {
    Err(Error::Config(message))
}
