//! HTML building blocks of the console: the page frame with its navigation,
//! tables and forms, written with `maud`, which escapes every value it is
//! given (room ids, payloads, errors and operator names are hostile input),
//! so markup is only ever the literals written in the templates. The
//! frame carries no script; the stylesheet is served from the console's own
//! path, which the Content-Security-Policy ([`CSP`]) allows and nothing else.

use maud::{DOCTYPE, Markup, html};
use std::fmt::Write as _;

/// The console's Content-Security-Policy: nothing from elsewhere, no script
/// at all, no inline style, forms post only to the console itself, and no
/// framing (clickjacking).
pub const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; \
     form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The stylesheet every page links (`/console/style.css`).
pub const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222}\
nav{background:#23395d;padding:8px 16px}nav a{color:#fff;margin-right:16px;text-decoration:none}\
nav form{display:inline;float:right}main{padding:8px 16px}\
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}\
th{background:#eef}pre{background:#f6f6f6;padding:6px;max-width:900px;overflow:auto;white-space:pre-wrap}\
.err{color:#a00;font-weight:bold}.ok{color:#060;font-weight:bold}.muted{color:#777}\
form.inline{display:inline-block;margin:2px 8px 2px 0;padding:4px;border:1px solid #ddd}\
input{margin:2px}.bar{color:#23395d}\
:root{color-scheme:light dark}.pending{color:#a60}.applied{color:#060}.lag{color:#555;font-size:12px}\
form.search,form.bulk{margin:6px 0;padding:4px;border:1px solid #ddd}.refresh{float:right;margin:0}\
@media (prefers-color-scheme:dark){body{background:#15181c;color:#ddd}th{background:#26324a}\
td,th,form.inline,form.search,form.bulk{border-color:#444}pre{background:#1e2329}a{color:#8ab4f8}\
nav{background:#0f1a2e}.muted,.lag{color:#999}.err{color:#ff7b72}.ok,.applied{color:#7ee787}\
.pending{color:#f2cc60}.bar{color:#8ab4f8}input,select,button{background:#1e2329;color:#ddd;border:1px solid #555}}";

/// `text` percent-encoded for a query-string value (only unreserved
/// characters stay), so a hostile id cannot add parameters to a link.
pub fn query_value(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// The link to a room's timeline page.
pub fn room_link(room_id: &str) -> Markup {
    html! { a href={ "/console/rooms?room_id=" (query_value(room_id)) } { (room_id) } }
}

/// A whole page: title, navigation (with the session's role and a logout
/// form carrying `csrf`), optional self-refresh in seconds, and `body`.
pub fn page(
    title: &str,
    role: &str,
    csrf: &str,
    refresh_secs: Option<u32>,
    body: Markup,
) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                @if let Some(secs) = refresh_secs { meta http-equiv="refresh" content=(secs); }
                title { (title) " · outbox relay" }
                link rel="stylesheet" href="/console/style.css";
            }
            body {
                nav {
                    a href="/console" { "Overview" }
                    a href="/console/stuck" { "Stuck rooms" }
                    a href="/console/dead-letters" { "Dead letters" }
                    a href="/console/audit" { "Audit" }
                    a href="/console/rooms" { "Room timeline" }
                    a href="/console/charts" { "Charts" }
                    a href="/console/consumers" { "Consumers" }
                    form method="post" action="/console/logout" {
                        (hidden("csrf", csrf))
                        span class="muted" id="role" { (role) }
                        " "
                        button type="submit" { "Log out" }
                    }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
    .into_string()
}

/// The login page (no session yet): a password field, posted, never in a URL.
pub fn login_page(message: Option<&str>) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "Log in · outbox relay" }
                link rel="stylesheet" href="/console/style.css";
            }
            body {
                main {
                    h1 { "Outbox relay console" }
                    @if let Some(text) = message { p class="err" id="login-error" { (text) } }
                    form method="post" action="/console/login" {
                        label {
                            "Admin token "
                            input type="password" name="token" id="token"
                                autocomplete="current-password" required;
                        }
                        " "
                        button type="submit" id="login" { "Log in" }
                    }
                }
            }
        }
    }
    .into_string()
}

/// A hidden form field.
pub fn hidden(name: &str, value: &str) -> Markup {
    html! { input type="hidden" name=(name) value=(value); }
}

/// A table with `headers` and rows of cells; `id` names it for tests and links.
pub fn table(id: &str, headers: &[&str], rows: &[Vec<Markup>]) -> Markup {
    html! {
        table id=(id) {
            tr { @for header in headers { th { (header) } } }
            @for row in rows { tr { @for cell in row { td { (cell) } } } }
            @if rows.is_empty() {
                tr { td colspan=(headers.len().max(1)) class="muted" { "none" } }
            }
        }
    }
}

/// A duration in ms as people read it: `850 ms`, `12.3 s`, `4 min`, `2.5 h`.
pub fn age(ms: i64) -> String {
    match ms {
        ms if ms < 1_000 => format!("{ms} ms"),
        ms if ms < 60_000 => format!("{:.1} s", ms as f64 / 1_000.0),
        ms if ms < 3_600_000 => format!("{:.1} min", ms as f64 / 60_000.0),
        ms => format!("{:.1} h", ms as f64 / 3_600_000.0),
    }
}

/// A wall-clock time in ms since the epoch as UTC `YYYY-MM-DD HH:MM:SS`.
pub fn utc(ms: i64) -> String {
    if ms <= 0 {
        return "—".into();
    }
    let secs = ms.div_euclid(1_000);
    let rest = secs.rem_euclid(86_400);
    let (year, month, day) = crate::ops::render::civil_date(secs.div_euclid(86_400));
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

/// A wall-clock time in ms as UTC `YYYY-MM-DD HH:MM:SS.mmm`: the lags that
/// matter are milliseconds.
pub fn utc_ms(ms: i64) -> String {
    if ms <= 0 {
        return "—".into();
    }
    format!("{}.{:03}", utc(ms), ms.rem_euclid(1_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_leaves_no_markup() {
        let hostile = "<script>alert('x')</script>\"&";
        let escaped = html! { (hostile) }.into_string();
        assert_eq!(
            escaped,
            "&lt;script&gt;alert('x')&lt;/script&gt;&quot;&amp;"
        );
        assert!(!room_link(hostile).into_string().contains("<script>"));
        let field = hidden("csrf", "\"><script>").into_string();
        assert_eq!(
            field,
            "<input type=\"hidden\" name=\"csrf\" value=\"&quot;&gt;&lt;script&gt;\">"
        );
        assert_eq!(query_value("a b&c=d"), "a%20b%26c%3Dd");
    }

    #[test]
    fn times_read_as_people_write_them() {
        assert_eq!(utc(0), "—");
        assert_eq!(utc_ms(1_764_633_600_042), "2025-12-02 00:00:00.042");
        assert_eq!(utc(1_764_633_600_000), "2025-12-02 00:00:00");
        assert_eq!(utc(951_782_400_000 + 3_661_000), "2000-02-29 01:01:01");
        assert_eq!(age(850), "850 ms");
        assert_eq!(age(12_340), "12.3 s");
        assert_eq!(age(7_200_000), "2.0 h");
    }
}
