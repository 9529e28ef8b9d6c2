//! Where traces go and what they say about the process, resolved once at
//! start-up from the service's `log.otlp_endpoint` and the standard
//! OpenTelemetry environment variables (docs/design.md#tracing):
//!
//! - endpoint: `log.otlp_endpoint` (full URL) when set, else
//!   `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (full URL), else
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` (base URL, `/v1/traces` appended as the
//!   OTLP spec says); none of them → no export;
//! - service name: `OTEL_SERVICE_NAME`, else `service.name` from
//!   `OTEL_RESOURCE_ATTRIBUTES`, else the binary's name;
//! - resource attributes: `OTEL_RESOURCE_ATTRIBUTES` (`k=v,k=v`, values
//!   percent-encoded).
//!
//! An empty variable counts as unset (as the OTel spec says). A malformed
//! value is refused with an error naming the variable, whether or not export
//! is on: a typo must not silently turn tracing off or drop attributes.

use crate::Error;

/// The service's own endpoint key.
pub const CONFIG_ENDPOINT_KEY: &str = "log.otlp_endpoint";
/// Full URL of the traces endpoint.
pub const ENV_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// Base URL of an OTLP/HTTP receiver; `/v1/traces` is appended.
pub const ENV_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The `service.name` resource attribute.
pub const ENV_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
/// Further resource attributes, `k=v,k=v`.
pub const ENV_RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";
/// The path the OTLP/HTTP spec gives traces under a base endpoint.
pub const TRACES_PATH: &str = "/v1/traces";

/// The resource key of the service's name.
const SERVICE_NAME_KEY: &str = "service.name";

/// Resolved trace export settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceExport {
    /// The full OTLP/HTTP traces URL; `None` exports nothing.
    pub endpoint: Option<String>,
    /// Which setting gave `endpoint` (for the start-up log line).
    pub endpoint_source: &'static str,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// Every other resource attribute, in the order given.
    pub resource_attributes: Vec<(String, String)>,
}

impl TraceExport {
    /// Resolves the settings of service `service` from its configured
    /// endpoint (`log.otlp_endpoint`, "" when unset) and the environment as
    /// `env` reads it.
    pub fn resolve(
        service: &str,
        configured_endpoint: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, Error> {
        // An empty (or blank) variable is unset.
        let var = |name: &str| env(name).filter(|value| !value.trim().is_empty());
        // Every variable is checked, even those a higher-precedence setting
        // overrides, so a bad value is reported rather than lurking.
        let configured = (!configured_endpoint.is_empty())
            .then(|| parse_url(CONFIG_ENDPOINT_KEY, configured_endpoint))
            .transpose()?;
        let traces = var(ENV_TRACES_ENDPOINT)
            .map(|value| parse_url(ENV_TRACES_ENDPOINT, &value))
            .transpose()?;
        let base = var(ENV_ENDPOINT)
            .map(|value| base_to_traces_url(&value))
            .transpose()?;
        let (endpoint, endpoint_source) = if let Some(url) = configured {
            (Some(url), CONFIG_ENDPOINT_KEY)
        } else if let Some(url) = traces {
            (Some(url), ENV_TRACES_ENDPOINT)
        } else if let Some(url) = base {
            (Some(url), ENV_ENDPOINT)
        } else {
            (None, "")
        };
        let mut attributes = match var(ENV_RESOURCE_ATTRIBUTES) {
            Some(text) => parse_resource_attributes(&text)?,
            None => Vec::new(),
        };
        let from_attributes = attributes
            .iter()
            .position(|(key, _)| key == SERVICE_NAME_KEY)
            .map(|index| attributes.remove(index).1);
        let service_name = var(ENV_SERVICE_NAME)
            .map(|name| name.trim().to_owned())
            .or(from_attributes)
            .unwrap_or_else(|| service.to_owned());
        Ok(Self {
            endpoint,
            endpoint_source,
            service_name,
            resource_attributes: attributes,
        })
    }
}

/// Checks that `value` is an absolute `http(s)://host…` URL.
fn parse_url(name: &str, value: &str) -> Result<String, Error> {
    let value = value.trim();
    let invalid = |why: &str| {
        Error::Config(format!(
            "{name} must be an http:// or https:// URL, got {:?}: {why}",
            crate::secret::redact_url(value)
        ))
    };
    let uri: axum::http::Uri = value
        .parse()
        .map_err(|error| invalid(&format!("{error}")))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(_) => return Err(invalid("the scheme is not http or https")),
        None => return Err(invalid("no scheme")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(invalid("no host"));
    }
    Ok(value.to_owned())
}

/// `OTEL_EXPORTER_OTLP_ENDPOINT` → the traces URL under it.
fn base_to_traces_url(value: &str) -> Result<String, Error> {
    let base = parse_url(ENV_ENDPOINT, value)?;
    if base.contains('?') {
        return Err(Error::Config(format!(
            "{ENV_ENDPOINT} is a base URL that {TRACES_PATH} is appended to; it cannot carry a query, got {:?}",
            crate::secret::redact_url(&base)
        )));
    }
    Ok(format!("{}{TRACES_PATH}", base.trim_end_matches('/')))
}

/// Parses `k=v,k=v` (W3C Baggage style: values percent-encoded, blanks
/// around entries ignored).
fn parse_resource_attributes(text: &str) -> Result<Vec<(String, String)>, Error> {
    let mut attributes: Vec<(String, String)> = Vec::new();
    for (index, entry) in text.split(',').enumerate() {
        let number = index + 1;
        let invalid = |why: String| {
            Error::Config(format!(
                "{ENV_RESOURCE_ATTRIBUTES}: entry {number} ({:?}) {why}",
                entry.trim()
            ))
        };
        let Some((key, value)) = entry.split_once('=') else {
            return Err(invalid("is not key=value".into()));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(invalid("has an empty key".into()));
        }
        if !key.chars().all(|c| c.is_ascii_graphic()) {
            return Err(invalid("has a key that is not printable ASCII".into()));
        }
        let value = percent_decode(value.trim()).map_err(invalid)?;
        if attributes.iter().any(|(seen, _)| seen == key) {
            return Err(invalid(format!("repeats the key {key:?}")));
        }
        attributes.push((key.to_owned(), value));
    }
    Ok(attributes)
}

/// Decodes `%XX` escapes; the result must be UTF-8.
fn percent_decode(value: &str) -> Result<String, String> {
    let bytes = value.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = bytes
                .get(index + 1..index + 3)
                .and_then(|pair| std::str::from_utf8(pair).ok())
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| format!("has a bad percent escape at byte {index} of its value"))?;
            decoded.push(hex);
            index += 3;
        } else {
            decoded.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(decoded).map_err(|_| "has a value that does not decode to UTF-8".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(configured: &str, vars: &[(&str, &str)]) -> Result<TraceExport, Error> {
        TraceExport::resolve("room-service", configured, |name| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        })
    }

    fn message(result: Result<TraceExport, Error>) -> String {
        result.expect_err("refused").to_string()
    }

    #[test]
    fn nothing_set_exports_nothing_under_the_binary_name() {
        let export = resolve("", &[]).unwrap();
        assert_eq!(export.endpoint, None);
        assert_eq!(export.service_name, "room-service");
        assert!(export.resource_attributes.is_empty());
        // Empty variables are unset.
        let export = resolve("", &[(ENV_ENDPOINT, ""), (ENV_SERVICE_NAME, " ")]).unwrap();
        assert_eq!(export.endpoint, None);
        assert_eq!(export.service_name, "room-service");
    }

    #[test]
    fn the_base_endpoint_gets_the_traces_path() {
        for base in ["http://collector:4318", "http://collector:4318/"] {
            let export = resolve("", &[(ENV_ENDPOINT, base)]).unwrap();
            assert_eq!(
                export.endpoint.as_deref(),
                Some("http://collector:4318/v1/traces")
            );
            assert_eq!(export.endpoint_source, ENV_ENDPOINT);
        }
        let export = resolve("", &[(ENV_ENDPOINT, "https://gw.example/otlp")]).unwrap();
        assert_eq!(
            export.endpoint.as_deref(),
            Some("https://gw.example/otlp/v1/traces")
        );
    }

    #[test]
    fn config_beats_the_traces_variable_which_beats_the_base_variable() {
        let both = [
            (ENV_ENDPOINT, "http://base:4318"),
            (ENV_TRACES_ENDPOINT, "http://traces:4318/custom"),
        ];
        let export = resolve("", &both).unwrap();
        assert_eq!(
            export.endpoint.as_deref(),
            Some("http://traces:4318/custom"),
            "the signal's own variable is used as given"
        );
        assert_eq!(export.endpoint_source, ENV_TRACES_ENDPOINT);
        let export = resolve("http://config:4318/v1/traces", &both).unwrap();
        assert_eq!(
            export.endpoint.as_deref(),
            Some("http://config:4318/v1/traces")
        );
        assert_eq!(export.endpoint_source, CONFIG_ENDPOINT_KEY);
    }

    #[test]
    fn malformed_endpoints_are_refused_naming_the_setting() {
        for (configured, vars, names) in [
            ("collector:4318", vec![], CONFIG_ENDPOINT_KEY),
            ("ftp://collector/v1/traces", vec![], CONFIG_ENDPOINT_KEY),
            (
                "",
                vec![(ENV_TRACES_ENDPOINT, "not a url")],
                ENV_TRACES_ENDPOINT,
            ),
            (
                "",
                vec![(ENV_TRACES_ENDPOINT, "http://")],
                ENV_TRACES_ENDPOINT,
            ),
            (
                "",
                vec![(ENV_ENDPOINT, "grpc://collector:4317")],
                ENV_ENDPOINT,
            ),
            ("", vec![(ENV_ENDPOINT, "http://c:4318/?x=1")], ENV_ENDPOINT),
            // Overridden, but still refused: a typo must surface.
            (
                "http://config:4318/v1/traces",
                vec![(ENV_ENDPOINT, "localhost")],
                ENV_ENDPOINT,
            ),
        ] {
            let text = message(resolve(configured, &vars));
            assert!(text.contains(names), "{configured:?} {vars:?}: {text}");
        }
    }

    #[test]
    fn a_password_in_a_refused_url_is_not_repeated() {
        let text = message(resolve("ftp://user:hunter2@collector/v1/traces", &[]));
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("***"), "{text}");
    }

    #[test]
    fn resource_attributes_parse_and_decode() {
        let export = resolve(
            "",
            &[(
                ENV_RESOURCE_ATTRIBUTES,
                " deployment.environment = prod ,k8s.pod.name=room-7%2Cb, note=a%20b",
            )],
        )
        .unwrap();
        assert_eq!(
            export.resource_attributes,
            vec![
                ("deployment.environment".to_owned(), "prod".to_owned()),
                ("k8s.pod.name".to_owned(), "room-7,b".to_owned()),
                ("note".to_owned(), "a b".to_owned()),
            ]
        );
    }

    #[test]
    fn the_service_name_comes_from_the_variable_then_the_attributes() {
        let attributes = (
            ENV_RESOURCE_ATTRIBUTES,
            "service.name=from-attrs,team=rooms",
        );
        let export = resolve("", &[attributes]).unwrap();
        assert_eq!(export.service_name, "from-attrs");
        assert_eq!(
            export.resource_attributes,
            vec![("team".to_owned(), "rooms".to_owned())],
            "service.name is not repeated as a plain attribute"
        );
        let export = resolve("", &[attributes, (ENV_SERVICE_NAME, "from-var")]).unwrap();
        assert_eq!(export.service_name, "from-var");
    }

    #[test]
    fn malformed_resource_attributes_are_refused_naming_the_entry() {
        for (text, names) in [
            ("a=b,c", "entry 2 (\"c\") is not key=value"),
            ("a=b,", "entry 2 (\"\") is not key=value"),
            ("=b", "entry 1 (\"=b\") has an empty key"),
            ("a=%zz", "bad percent escape"),
            ("a=%4", "bad percent escape"),
            ("a=%ff", "does not decode to UTF-8"),
            ("a=1,a=2", "repeats the key \"a\""),
            ("k\u{e9}y=1", "not printable ASCII"),
        ] {
            let error = message(resolve("", &[(ENV_RESOURCE_ATTRIBUTES, text)]));
            assert!(error.contains(ENV_RESOURCE_ATTRIBUTES), "{text}: {error}");
            assert!(error.contains(names), "{text}: {error}");
        }
    }
}
