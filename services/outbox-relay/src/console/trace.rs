//! Links from an event to its trace: `console.trace_url` is a Jaeger- or
//! Tempo-style URL template with `{trace_id}` (e.g.
//! `https://jaeger.example/trace/{trace_id}`), checked at start-up, and the
//! trace id is read from the row's stored W3C `traceparent`
//! (docs/design.md#tracing). Without a template the console shows the
//! trace id as text.

use crate::Error;

/// The placeholder a template must hold.
pub const PLACEHOLDER: &str = "{trace_id}";

/// A checked trace URL template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceUrl {
    template: String,
}

impl TraceUrl {
    /// The template of `console.trace_url`; None when empty. Refused unless
    /// it is an `http(s)://` URL holding [`PLACEHOLDER`] and no other brace.
    pub fn parse(template: &str) -> Result<Option<Self>, Error> {
        let template = template.trim();
        if template.is_empty() {
            return Ok(None);
        }
        let refuse = |why: &str| {
            Err(Error::Config(format!(
                "console.trace_url `{}` {why}",
                template.escape_debug()
            )))
        };
        if !(template.starts_with("https://") || template.starts_with("http://")) {
            return refuse("must start with http:// or https://");
        }
        if !template.contains(PLACEHOLDER) {
            return refuse("must contain {trace_id}");
        }
        let rest = template.replace(PLACEHOLDER, "");
        if rest.contains(['{', '}']) {
            return refuse("may hold no placeholder but {trace_id}");
        }
        if rest
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"')
        {
            return refuse("may hold no spaces, quotes or control characters");
        }
        Ok(Some(Self {
            template: template.to_owned(),
        }))
    }

    /// The link to the trace of `trace_id` (already checked by [`trace_id`]).
    pub fn link(&self, trace_id: &str) -> String {
        self.template.replace(PLACEHOLDER, trace_id)
    }
}

/// The trace id of a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`):
/// None when the value is not one, or the id is all zeros (invalid).
pub fn trace_id(traceparent: &str) -> Option<&str> {
    let mut parts = traceparent.split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |text: &str, len: usize| {
        text.len() == len
            && text
                .bytes()
                .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
    };
    let valid = parts.next().is_none()
        && hex(version, 2)
        && hex(trace, 32)
        && hex(span, 16)
        && hex(flags, 2)
        && trace.bytes().any(|byte| byte != b'0');
    valid.then_some(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_is_checked_at_start_up() {
        assert_eq!(TraceUrl::parse("").unwrap(), None);
        let jaeger = TraceUrl::parse("https://jaeger.example/trace/{trace_id}")
            .unwrap()
            .unwrap();
        assert_eq!(jaeger.link("ab"), "https://jaeger.example/trace/ab");
        for (bad, why) in [
            ("jaeger.example/{trace_id}", "http:// or https://"),
            ("https://jaeger.example/trace", "must contain {trace_id}"),
            (
                "https://t.example/{trace_id}?span={span_id}",
                "no placeholder",
            ),
            ("https://t.example/{trace_id} x", "no spaces"),
        ] {
            let error = TraceUrl::parse(bad).unwrap_err().to_string();
            assert!(
                error.contains("console.trace_url") && error.contains(why),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn the_trace_id_comes_from_the_traceparent() {
        let id = "4bf92f3577b34da6a3ce929d0e0e4736";
        assert_eq!(trace_id(&format!("00-{id}-00f067aa0ba902b7-01")), Some(id));
        assert_eq!(trace_id(""), None);
        assert_eq!(
            trace_id(&format!("00-{}-00f067aa0ba902b7-01", "0".repeat(32))),
            None
        );
        assert_eq!(trace_id(&format!("00-{id}-00f067aa0ba902b7-01-x")), None);
        assert_eq!(trace_id("00-<script>-00f067aa0ba902b7-01"), None);
    }
}
