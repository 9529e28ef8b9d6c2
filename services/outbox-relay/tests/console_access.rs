//! The gate in front of the console and `/admin/*`, over real HTTP and
//! TLS: a `Host` outside `admin_allowed_hosts` is refused even with the
//! right token and a matching `Origin` (DNS rebinding), wrong tokens are
//! throttled per client until the right one is refused too (and counted),
//! and over TLS the session cookie is `Secure`.

mod common;

use common::console::*;
use outbox_relay::access::throttle;
use outbox_relay::metrics::ConsoleMetrics;
use service_kit::grpc_tls::ServerTls;
use std::sync::Arc;

#[tokio::test]
async fn a_rebound_host_is_refused_even_with_the_right_token_and_origin() {
    let db = testkit::TestDb::new().await;
    let addr = serve_gated(&db.pool, access(), &ServerTls::default()).await;
    let base = format!("http://{addr}");

    // The attacker's page on evil.example, its name re-pointed at the
    // relay: the browser sends Host and Origin both evil.example.
    let rebound = client()
        .post(format!("{base}/console/login"))
        .header("host", "evil.example")
        .header("origin", "http://evil.example")
        .form(&[("token", ADMIN)])
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 421);
    assert!(rebound.headers().get("set-cookie").is_none());
    assert!(
        rebound
            .text()
            .await
            .unwrap()
            .contains("admin_allowed_hosts")
    );
    let admin = |host: &str| {
        client()
            .get(format!("{base}/admin/status"))
            .header("host", host)
            .bearer_auth(ADMIN)
            .send()
    };
    assert_eq!(admin("evil.example:7201").await.unwrap().status(), 421);
    assert_eq!(admin(&addr.to_string()).await.unwrap().status(), 200);
    assert_eq!(
        admin(&format!("localhost:{}", addr.port()))
            .await
            .unwrap()
            .status(),
        200
    );
    // Probes answer by any name: Kubernetes calls them by pod IP.
    let probe = client()
        .get(format!("{base}/healthz"))
        .header("host", "10.9.8.7:7201")
        .send()
        .await
        .unwrap();
    assert_eq!(probe.status(), 200);

    // An allowed Host with an Origin of another allowed name is still
    // another origin; the same Origin as the Host passes.
    let (status, _) = post(
        &base,
        "/console/login",
        "",
        &[("origin", "http://localhost")],
        &[("token", ADMIN)],
    )
    .await;
    assert_eq!(status, 403);
    let origin = format!("http://{addr}");
    let (status, _) = post(
        &base,
        "/console/login",
        "",
        &[("origin", &origin)],
        &[("token", ADMIN)],
    )
    .await;
    assert_eq!(status, 303);
}

#[tokio::test]
async fn wrong_tokens_are_throttled_until_even_the_right_one_is_refused() {
    let db = testkit::TestDb::new().await;
    let mut registry = prometheus_client::registry::Registry::default();
    let mut gate = access();
    gate.throttle = Arc::new(throttle::LoginThrottle::new(ConsoleMetrics::register(
        &mut registry,
    )));
    let addr = serve_gated(&db.pool, gate, &ServerTls::default()).await;
    let base = format!("http://{addr}");
    let login = |token: &'static str| {
        client()
            .post(format!("{base}/console/login"))
            .form(&[("token", token)])
            .send()
    };
    for _ in 0..throttle::CLIENT_LIMIT {
        assert_eq!(login("guess").await.unwrap().status(), 401);
    }
    let refused = login(ADMIN).await.unwrap();
    assert_eq!(
        refused.status(),
        429,
        "the right token after five wrong ones"
    );
    assert!(refused.headers().get("set-cookie").is_none());
    let retry_after: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after > 0 && retry_after <= 300, "{retry_after}");
    // The same client's bearer requests are throttled too, on both surfaces.
    for path in ["/admin/status", "/console/stuck"] {
        let response = client()
            .get(format!("{base}{path}"))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 429, "{path}");
    }
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains("relay_console_login_failures_total 5"),
        "{text}"
    );
    assert!(
        text.contains("relay_console_login_throttled_total 3"),
        "{text}"
    );
}

#[tokio::test]
async fn over_tls_the_admin_listener_serves_https_and_the_cookie_is_secure() {
    let db = testkit::TestDb::new().await;
    let pki = testkit::pki::TestPki::generate(&["localhost"]);
    let tls = ServerTls {
        cert_file: pki.server_cert.display().to_string(),
        key_file: pki.server_key.display().to_string(),
        client_ca_file: String::new(),
    };
    let mut gate = access();
    gate.secure_cookies = true;
    let addr = serve_gated(&db.pool, gate, &tls).await;
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&pki.ca).unwrap()).unwrap();
    let https = reqwest::Client::builder()
        .add_root_certificate(ca)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let base = format!("https://localhost:{}", addr.port());
    let login = https
        .post(format!("{base}/console/login"))
        .form(&[("token", ADMIN)])
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 303);
    let set_cookie = login.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(set_cookie.contains("; Secure"), "{set_cookie}");
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    let page = https
        .get(format!("{base}/console"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let status = https
        .get(format!("{base}/admin/status"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(status.status(), 200);
    // Plain HTTP on the TLS port gets no answer.
    let plain = client()
        .get(format!("http://localhost:{}/admin/status", addr.port()))
        .bearer_auth(ADMIN)
        .send()
        .await;
    assert!(plain.is_err(), "{plain:?}");
    // Without TLS the cookie is not marked Secure.
    let plain_addr = serve_gated(&db.pool, access(), &ServerTls::default()).await;
    let set_cookie = login_cookie_header(&format!("http://{plain_addr}")).await;
    assert!(!set_cookie.contains("Secure"), "{set_cookie}");
}

async fn login_cookie_header(base: &str) -> String {
    let response = client()
        .post(format!("{base}/console/login"))
        .form(&[("token", ADMIN)])
        .send()
        .await
        .unwrap();
    response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned()
}
