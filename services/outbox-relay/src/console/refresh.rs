//! Auto-refresh of the live pages (overview, stuck rooms, dead letters,
//! audit, a room's timeline, the charts) without script: a `<meta http-equiv=refresh>`
//! every [`REFRESH_SECS`], on unless the browser holds the cookie
//! `console_refresh=off`. The toggle on each page is a link to
//! `/console/refresh?set=off|on&back=<the page>`, which sets the cookie and
//! sends the browser back — only to a console path, never elsewhere (no
//! open redirect). The cookie is a display preference, not an authority:
//! it changes nothing on the server, so it needs no CSRF token.

use super::html::query_value;
use axum::{
    extract::Query,
    http::{HeaderMap, HeaderValue, StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use maud::{Markup, html};

/// Seconds between a live page's self-refreshes.
pub const REFRESH_SECS: u32 = 10;
/// The preference cookie.
pub const COOKIE: &str = "console_refresh";

/// A live page's refresh: whether it is on, and where the page is.
#[derive(Debug, Clone)]
pub struct Live {
    on: bool,
    uri: Uri,
}

impl Live {
    /// The refresh of the page at `uri` for the browser of `headers`.
    pub fn of(headers: &HeaderMap, uri: Uri) -> Self {
        Self {
            on: is_on(headers),
            uri,
        }
    }

    /// The meta refresh's seconds, when on.
    pub fn secs(&self) -> Option<u32> {
        self.on.then_some(REFRESH_SECS)
    }

    /// The page's toggle.
    pub fn toggle(&self) -> Markup {
        toggle(self.on, &self.uri)
    }
}

/// Whether the live pages refresh themselves for this browser.
pub fn is_on(headers: &HeaderMap) -> bool {
    !headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .any(|(name, value)| name == COOKIE && value == "off")
}

/// The toggle shown on a live page at `uri`.
pub fn toggle(on: bool, uri: &Uri) -> Markup {
    let back = uri
        .path_and_query()
        .map_or("/console", |path| path.as_str());
    let (set, label) = if on {
        ("off", "turn off")
    } else {
        ("on", "turn on")
    };
    html! {
        p class="refresh muted" id="refresh" {
            "Auto-refresh every " (REFRESH_SECS) " s: " b { @if on { "on" } @else { "off" } } " · "
            a id="refresh-toggle" href={ "/console/refresh?set=" (set) "&back=" (query_value(back)) } { (label) }
        }
    }
}

/// The toggle's query.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub(super) struct Toggle {
    set: String,
    back: String,
}

/// A console path to return to: `/console` or under it, no scheme, host or
/// `//`, no backslash or control character; else the overview.
fn back_to(back: &str) -> &str {
    let inside =
        back == "/console" || back.starts_with("/console/") || back.starts_with("/console?");
    let clean = !back.contains("//")
        && !back.contains('\\')
        && !back.chars().any(char::is_control)
        && back.len() <= 2_048;
    if inside && clean { back } else { "/console" }
}

/// Sets the preference and returns to the page (303); a `set` other than
/// `on`/`off` is a 400 naming it.
pub(super) async fn set(Query(toggle): Query<Toggle>) -> Response {
    let value = match toggle.set.as_str() {
        "on" => "on",
        "off" => "off",
        _ => {
            let mut response = (StatusCode::BAD_REQUEST, "set must be on or off").into_response();
            super::secure(response.headers_mut());
            return response;
        }
    };
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    let location = HeaderValue::from_str(back_to(&toggle.back))
        .unwrap_or_else(|_| HeaderValue::from_static("/console"));
    headers.insert(header::LOCATION, location);
    let cookie = format!("{COOKIE}={value}; Path=/console; SameSite=Strict; Max-Age=31536000");
    if let Ok(cookie) = HeaderValue::from_str(&cookie) {
        headers.insert(header::SET_COOKIE, cookie);
    }
    super::secure(headers);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_toggle_returns_only_to_the_console() {
        assert_eq!(
            back_to("/console/stuck?room_id=a"),
            "/console/stuck?room_id=a"
        );
        assert_eq!(back_to("/console"), "/console");
        for elsewhere in [
            "https://evil.example/",
            "//evil.example/console",
            "/console//evil",
            "/consoles",
            "/console/\\evil",
            "/admin/status",
        ] {
            assert_eq!(back_to(elsewhere), "/console", "{elsewhere}");
        }
    }

    #[test]
    fn refresh_is_on_unless_the_cookie_says_off() {
        let mut headers = HeaderMap::new();
        assert!(is_on(&headers));
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("relay_console=x; console_refresh=off"),
        );
        assert!(!is_on(&headers));
    }
}
