//! A small WebDriver client for browser tests: starts Debian's
//! `chromedriver` on a free loopback port, opens a headless Chromium
//! session and speaks the W3C WebDriver JSON protocol over HTTP — navigate,
//! find elements by CSS selector, click, type, read text and the page
//! source, save screenshots as PNG. `cargo xtask test` installs `chromium`
//! and `chromium-driver` when missing. Dropping the [`Browser`] kills
//! chromedriver's whole process group (the browser with it).
//!
//! Waiting is [`Browser::wait_for_text`]: polling with a deadline, never a
//! fixed sleep.

use base64::Engine as _;
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian installs the driver and the browser.
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The Chromium binary the session runs.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// The W3C name of an element reference in JSON.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";
/// How long the driver may take to answer its status endpoint.
const START_DEADLINE: Duration = Duration::from_secs(30);
/// Poll step of the waits.
const POLL: Duration = Duration::from_millis(100);

/// A headless Chromium driven through chromedriver.
#[derive(Debug)]
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
}

/// An element found on the current page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element(String);

impl Browser {
    /// Starts chromedriver and a headless session. Panics with what is
    /// missing when the binaries are not installed.
    pub async fn start() -> Self {
        assert!(
            Path::new(CHROMEDRIVER).exists() && Path::new(CHROMIUM).exists(),
            "{CHROMEDRIVER} or {CHROMIUM} missing: apt-get install -y --no-install-recommends chromium chromium-driver \
             (cargo xtask test does this)"
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("free port")
            .port();
        let mut command = Command::new(CHROMEDRIVER);
        command
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let driver = command.spawn().expect("start chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            let ready = http
                .get(format!("{base}/status"))
                .send()
                .await
                .ok()
                .and_then(|response| response.status().is_success().then_some(()));
            if ready.is_some() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not start on {base}"
            );
            tokio::time::sleep(POLL).await;
        }
        let mut browser = Self {
            driver,
            base,
            session: String::new(),
            http,
        };
        let created = browser
            .call(
                reqwest::Method::POST,
                "/session",
                Some(json!({"capabilities": {"alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": CHROMIUM,
                        "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                                 "--disable-dev-shm-usage", "--window-size=1280,1400"]
                    }
                }}})),
            )
            .await;
        browser.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session id in {created}"))
            .to_owned();
        browser
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        self.try_call(method, path, body)
            .await
            .unwrap_or_else(|error| panic!("{error}"))
    }

    /// A WebDriver call; `Err` names the path and the driver's answer.
    async fn try_call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method, &url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .map_err(|error| format!("{url}: {error}"))?;
        let status = response.status();
        let value: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            return Err(format!("{path}: {status} {value}"));
        }
        Ok(value["value"].clone())
    }

    async fn session_call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Value {
        self.call(method, &format!("/session/{}{path}", self.session), body)
            .await
    }

    /// Opens `url` and waits for it to load.
    pub async fn goto(&self, url: &str) {
        self.session_call(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    /// The current page's URL.
    pub async fn url(&self) -> String {
        self.session_call(reqwest::Method::GET, "/url", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The current page's HTML as the browser holds it.
    pub async fn source(&self) -> String {
        self.session_call(reqwest::Method::GET, "/source", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Every element matching the CSS `selector`.
    pub async fn find_all(&self, selector: &str) -> Vec<Element> {
        let found = self
            .session_call(
                reqwest::Method::POST,
                "/elements",
                Some(json!({"using": "css selector", "value": selector})),
            )
            .await;
        found
            .as_array()
            .map(|elements| {
                elements
                    .iter()
                    .filter_map(|element| element[ELEMENT_KEY].as_str())
                    .map(|id| Element(id.to_owned()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first element matching `selector`; panics naming it when none does.
    pub async fn find(&self, selector: &str) -> Element {
        self.find_all(selector)
            .await
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no element matches `{selector}`"))
    }

    /// Clicks `element` (a submit button submits its form).
    pub async fn click(&self, element: &Element) {
        self.session_call(
            reqwest::Method::POST,
            &format!("/element/{}/click", element.0),
            Some(json!({})),
        )
        .await;
    }

    /// Types `text` into `element`.
    pub async fn type_into(&self, element: &Element, text: &str) {
        self.session_call(
            reqwest::Method::POST,
            &format!("/element/{}/value", element.0),
            Some(json!({ "text": text })),
        )
        .await;
    }

    /// The rendered text of `element`.
    pub async fn text(&self, element: &Element) -> String {
        self.session_call(
            reqwest::Method::GET,
            &format!("/element/{}/text", element.0),
            None,
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    /// The page's text, or `Err` while there is no page to read: a click's
    /// navigation under way has no `body` yet, or replaces the one found.
    async fn try_page_text(&self) -> Result<String, String> {
        let session = format!("/session/{}", self.session);
        let found = self
            .try_call(
                reqwest::Method::POST,
                &format!("{session}/elements"),
                Some(json!({"using": "css selector", "value": "body"})),
            )
            .await?;
        let body = found
            .as_array()
            .and_then(|elements| elements.first())
            .and_then(|element| element[ELEMENT_KEY].as_str())
            .ok_or_else(|| "no body yet".to_owned())?;
        let text = self
            .try_call(
                reqwest::Method::GET,
                &format!("{session}/element/{body}/text"),
                None,
            )
            .await?;
        Ok(text.as_str().unwrap_or_default().to_owned())
    }

    /// Waits, without reloading, until the current page's text contains
    /// `needle` — a click that submits a form returns before the browser has
    /// the answer — or panics after `timeout` with the last text seen.
    pub async fn wait_for_page_text(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.try_page_text().await {
                Ok(text) if text.contains(needle) => return text,
                Ok(text) => text,
                Err(error) => error,
            };
            assert!(
                Instant::now() < deadline,
                "`{needle}` not on the page within {timeout:?}; last seen:\n{last}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Reloads `url` until the page's text contains `needle`, or panics
    /// after `timeout` with the last text seen.
    pub async fn wait_for_text(&self, url: &str, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            self.goto(url).await;
            let text = self.try_page_text().await.unwrap_or_else(|error| error);
            if text.contains(needle) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "`{needle}` not on {url} within {timeout:?}; last text:\n{text}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until the browser is at `url` (a click's navigation may still
    /// be under way when the click returns), or panics after `timeout` with
    /// where it is and what the page says.
    pub async fn wait_for_url(&self, url: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let at = self.url().await;
            if at == url {
                return;
            }
            if Instant::now() >= deadline {
                let text = self.try_page_text().await.unwrap_or_else(|error| error);
                panic!("not at {url} within {timeout:?} but at {at}; page:\n{text}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The computed value of CSS `property` of `element` (Chromium gives
    /// colours as `rgba(r, g, b, a)`).
    pub async fn css_value(&self, element: &Element, property: &str) -> String {
        self.session_call(
            reqwest::Method::GET,
            &format!("/element/{}/css/{property}", element.0),
            None,
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    /// Emulates the system's colour scheme (`"dark"`, `"light"`) for the
    /// pages opened after, as the browser would report a user's preference
    /// (chromedriver's DevTools passthrough, `Emulation.setEmulatedMedia`).
    pub async fn prefer_color_scheme(&self, scheme: &str) {
        self.session_call(
            reqwest::Method::POST,
            "/goog/cdp/execute",
            Some(json!({
                "cmd": "Emulation.setEmulatedMedia",
                "params": {"features": [{"name": "prefers-color-scheme", "value": scheme}]}
            })),
        )
        .await;
    }

    /// Saves a PNG screenshot of the viewport to `path` (directories created).
    pub async fn screenshot(&self, path: &Path) {
        let encoded = self
            .session_call(reqwest::Method::GET, "/screenshot", None)
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap_or_default())
            .expect("screenshot is base64");
        assert!(png.starts_with(b"\x89PNG"), "screenshot is not a PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }

    /// Ends the session, then the driver (also done, less politely, on drop).
    pub async fn quit(self) {
        let _ = self
            .http
            .delete(format!("{}/session/{}", self.base, self.session))
            .send()
            .await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The driver leads its own process group: end it and the browser it started.
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
