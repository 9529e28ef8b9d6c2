//! `rediss://` against a real TLS Redis whose certificate names `localhost`
//! only: the client service-kit builds checks the host name, so reaching the
//! same server as `127.0.0.1` is refused while `localhost` connects.

use fred::prelude::*;
use service_kit::redis::{RedisKeys, client_config};
use std::time::Duration;
use testkit::pki::TestPki;
use testkit::tls_servers::TlsRedis;

const KEYS: RedisKeys = RedisKeys {
    url: "redis.url",
    tls_ca_file: "redis.tls_ca_file",
};

/// Turns a hang into a failure; the outcome is decided by the handshake.
const GUARD: Duration = Duration::from_secs(30);

/// Connects one client (no reconnect policy: the first failure is the answer).
async fn connect(url: &str, ca: &std::path::Path) -> Result<Client, Error> {
    let config = client_config(KEYS, url, &ca.display().to_string()).expect("valid settings");
    let client = Builder::from_config(config).build()?;
    tokio::time::timeout(GUARD, client.init())
        .await
        .expect("handshake within the guard")?;
    Ok(client)
}

#[tokio::test]
async fn a_certificate_that_does_not_name_the_host_is_refused() {
    let pki = TestPki::generate(&["localhost"]);
    let server = TlsRedis::start(&pki).await;

    // The same server, CA and port: only the name dialled differs.
    let named = format!("rediss://localhost:{}", server.port);
    let client = connect(&named, &pki.ca).await.unwrap_or_else(|error| {
        panic!(
            "{named} with the right CA: {error}; log {}",
            server.log().display()
        )
    });
    let pong: String = client.ping(None).await.expect("PING over TLS");
    assert_eq!(pong, "PONG");
    client.quit().await.expect("quit");

    let refused = connect(&server.url(), &pki.ca)
        .await
        .expect_err("a certificate for localhost was accepted for 127.0.0.1");
    assert!(
        refused.to_string().contains("NotValidForName"),
        "expected a host-name refusal, got {refused}"
    );
}
