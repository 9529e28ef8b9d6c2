//! Helpers of the console tests: the console router on a loopback port, a
//! client that never follows redirects (so each hop can be checked), login,
//! and the CSRF token read from a page's forms.

use outbox_relay::console::{self, ConsoleConfig, history::History};
use outbox_schema::names;
use service_kit::Secret;
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

/// The console router alone, served on a loopback port; its base URL.
pub async fn serve_console(pool: &MySqlPool) -> String {
    let router = console::router(ConsoleConfig {
        pool: pool.clone(),
        admin_token: Secret::new(ADMIN),
        read_token: Secret::new(READER),
        history: History::default(),
        broker_lag: false,
        groups: groups(),
    });
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
