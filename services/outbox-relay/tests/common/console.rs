//! Helpers of the console tests: the console router on a loopback port, a
//! client that never follows redirects (so each hop can be checked), login,
//! and the CSRF token read from a page's forms.

use outbox_relay::console::{self, ConsoleConfig, consumers::Sources, history::History};
use outbox_schema::names;
use service_kit::{Secret, mq::MqConfig};
use sqlx::MySqlPool;

/// The operator token of the console tests.
pub const ADMIN: &str = "console-admin-token-0123456789abcdef";
/// The read-only token.
pub const READER: &str = "console-read-token-0123456789abcdef0";

/// The consumer groups the timeline shows.
pub fn groups() -> Vec<String> {
    vec![
        names::GROUP_IM_BRIDGE.to_owned(),
        names::GROUP_ACTIVITY.to_owned(),
        names::GROUP_NOTICE.to_owned(),
    ]
}

/// The console's settings of the tests over `pool`: their tokens, the
/// groups of [`groups`], no broker lag, no trace link.
pub fn config(pool: &MySqlPool) -> ConsoleConfig {
    ConsoleConfig {
        pool: pool.clone(),
        admin_token: Secret::new(ADMIN),
        read_token: Secret::new(READER),
        history: History::default(),
        broker_lag: false,
        groups: groups(),
        trace_url: None,
    }
}

/// The console router alone, served on a loopback port; its base URL.
pub async fn serve_console(pool: &MySqlPool) -> String {
    serve_router(console::router(config(pool))).await
}

/// The console with the consumer groups' pages reading the broker of `mq`,
/// behind [`access`]; its base URL.
pub async fn serve_console_with_consumers(pool: &MySqlPool, mq: &MqConfig) -> String {
    let sources = Sources::from_mq(mq, &groups()).unwrap();
    serve_router(console::router_with_consumers(
        config(pool),
        access(),
        86_400_000,
        sources,
    ))
    .await
}

/// `router` served on a loopback port; its base URL.
async fn serve_router(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    base
}

/// A client that shows every redirect instead of following it.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Logs in with `token`; the session cookie (`name=value`).
pub async fn login(base: &str, token: &str) -> String {
    let response = client()
        .post(format!("{base}/console/login"))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303, "login with a valid token");
    let cookie = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    cookie.split(';').next().unwrap().to_owned()
}

/// GET `path` with the session `cookie`: status and body.
pub async fn get(base: &str, path: &str, cookie: &str) -> (u16, String) {
    let response = client()
        .get(format!("{base}{path}"))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The CSRF token in a page's forms.
pub fn csrf_of(page: &str) -> String {
    let marker = "name=\"csrf\" value=\"";
    let start = page.find(marker).expect("a form with a csrf field") + marker.len();
    page[start..start + page[start..].find('"').unwrap()].to_owned()
}

/// POSTs `form` to `path` with `cookie` and extra `headers`: status and body.
pub async fn post(
    base: &str,
    path: &str,
    cookie: &str,
    headers: &[(&str, &str)],
    form: &[(&str, &str)],
) -> (u16, String) {
    let mut request = client()
        .post(format!("{base}{path}"))
        .header("cookie", cookie)
        .form(form);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The console and `/admin/*` behind `access`, served as the relay serves
/// them: client addresses known to the throttle, over TLS when `tls` is
/// set, the probes beside them. Returns the bound address.
pub async fn serve_gated(
    pool: &MySqlPool,
    access: outbox_relay::access::Access,
    tls: &service_kit::grpc_tls::ServerTls,
) -> std::net::SocketAddr {
    let max_age = 7 * 86_400_000;
    let config = ConsoleConfig {
        admin_token: access.credentials.admin.clone(),
        read_token: access.credentials.read_only.clone(),
        ..config(pool)
    };
    let probes = service_kit::admin_http::router(
        std::sync::Arc::default(),
        std::sync::Arc::new(prometheus_client::registry::Registry::default()),
    );
    let router = probes
        .merge(outbox_relay::admin::router_with(
            pool.clone(),
            access.clone(),
            max_age,
            max_age,
        ))
        .merge(console::router_with(config, access, max_age));
    let tls = outbox_relay::admin_tls::load(tls).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(outbox_relay::admin_tls::serve(
        listener,
        tls,
        router,
        tokio_util::sync::CancellationToken::new(),
    ));
    addr
}

/// The gate of the tests: the console tokens, default hosts, a fresh
/// throttle.
pub fn access() -> outbox_relay::access::Access {
    outbox_relay::access::Access {
        credentials: outbox_relay::access::Credentials {
            admin: Secret::new(ADMIN),
            read_only: Secret::new(READER),
            operators: Default::default(),
        },
        ..Default::default()
    }
}
