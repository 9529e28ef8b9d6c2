//! A container's `env` as Kubernetes resolves it in one pod, so the checks
//! see values instead of recipes: a `valueFrom.fieldRef` (downward API) or
//! secret becomes a sample value, and a `$(VAR)` inside a `value` is replaced
//! by VAR's value when VAR is defined earlier in the list, exactly as the
//! kubelet does (a later or unknown VAR is left as the literal text `$(VAR)`,
//! `$$` is an escaped `$`). That lets `ROOM__ADVERTISE_URL:
//! http://$(POD_IP):7101` be checked as the URL a pod really gets, and lets the
//! checks tell values that differ per pod (the pod's name, uid, IP) from
//! values every pod shares.

use crate::yaml;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The IP a sample pod has (`status.podIP`): from the private range pod
/// networks use, and distinct from every literal value in the manifests, so
/// an advertised host equal to it came from the downward API.
pub const SAMPLE_POD_IP: &str = "10.244.3.17";

/// A sample value for every value source that is not a literal.
const SAMPLE_SECRET: &str = "sample-secret-value";

/// The sample of a Redis URL taken from a Secret: TLS and an ACL user.
const SAMPLE_REDIS_URL: &str =
    "rediss://sample-user:sample-secret-value@redis.hyapp-infra.svc.cluster.local:6380";

/// The fields `valueFrom.fieldRef` may read in an env variable, with whether
/// the value differs between pods of one Deployment. Labels and annotations
/// (`metadata.labels['key']`) are shared by the pods of one template.
const POD_FIELDS: [(&str, bool); 9] = [
    ("metadata.name", true),
    ("metadata.uid", true),
    ("status.podIP", true),
    ("status.podIPs", true),
    ("metadata.namespace", false),
    ("spec.nodeName", false),
    ("spec.serviceAccountName", false),
    ("status.hostIP", false),
    ("status.hostIPs", false),
];

/// One container's environment in a sample pod.
#[derive(Debug, Clone, Default)]
pub struct PodEnv {
    /// Variable → its value in the sample pod.
    pub values: BTreeMap<String, String>,
    /// Variables whose value differs from pod to pod.
    pub per_pod: BTreeSet<String>,
    /// Variables a later variable's value refers to as `$(NAME)`.
    pub referenced: BTreeSet<String>,
}

/// Resolves the `env` list of a container of Deployment `deployment` in
/// `namespace`. Problems (a downward field env cannot read, a `$(VAR)` that
/// Kubernetes would leave unexpanded) are prefixed with `context`.
pub fn resolve(
    context: &str,
    deployment: &str,
    namespace: &str,
    env: &[Value],
) -> (PodEnv, Vec<String>) {
    let mut pod = PodEnv::default();
    let mut problems = Vec::new();
    for item in env {
        let Some(name) = item.get("name").and_then(Value::as_str) else {
            continue;
        };
        let (value, per_pod) = if let Some(text) = item.get("value").and_then(yaml::scalar_text) {
            let expanded = expand(&text, &pod.values);
            for unresolved in &expanded.unresolved {
                problems.push(format!(
                    "{context} env {name}: $({unresolved}) is not defined above it, so the pod gets the literal text `$({unresolved})`"
                ));
            }
            let per_pod = expanded.used.iter().any(|used| pod.per_pod.contains(used));
            pod.referenced.extend(expanded.used);
            (expanded.text, per_pod)
        } else if let Some(path) = item
            .pointer("/valueFrom/fieldRef/fieldPath")
            .and_then(Value::as_str)
        {
            match field_sample(path, deployment, namespace) {
                Some(sample) => sample,
                None => {
                    problems.push(format!(
                        "{context} env {name}: fieldRef {path} is not a pod field an env variable can read"
                    ));
                    (String::new(), false)
                }
            }
        } else if name.ends_with("REDIS__URL") || name.ends_with("REDIS_URL") {
            // A Redis URL comes whole from a Secret (it carries the password):
            // a sample of the shape the services require off loopback.
            (SAMPLE_REDIS_URL.to_string(), false)
        } else {
            // secretKeyRef, configMapKeyRef, resourceFieldRef: the same in every pod.
            (SAMPLE_SECRET.to_string(), false)
        };
        if per_pod {
            pod.per_pod.insert(name.to_string());
        } else {
            pod.per_pod.remove(name);
        }
        pod.values.insert(name.to_string(), value);
    }
    (pod, problems)
}

/// A downward field's value in the sample pod and whether it differs per pod.
fn field_sample(path: &str, deployment: &str, namespace: &str) -> Option<(String, bool)> {
    if ["metadata.labels['", "metadata.annotations['"]
        .iter()
        .any(|prefix| path.starts_with(prefix) && path.ends_with("']"))
    {
        return Some((SAMPLE_SECRET.to_string(), false));
    }
    let (_, per_pod) = POD_FIELDS.iter().find(|(field, _)| *field == path)?;
    let sample = match path {
        // A ReplicaSet hash and a random suffix, as the Deployment names pods.
        "metadata.name" => format!("{deployment}-6d9f7c8b5-x7k2q"),
        "metadata.uid" => "0f8e2c7a-1b3d-4e5f-9a6b-7c8d9e0f1a2b".to_string(),
        "status.podIP" | "status.podIPs" => SAMPLE_POD_IP.to_string(),
        "metadata.namespace" => namespace.to_string(),
        "spec.nodeName" => "node-1".to_string(),
        "spec.serviceAccountName" => "default".to_string(),
        _ => "192.168.0.10".to_string(),
    };
    Some((sample, *per_pod))
}

/// A `value` after `$(VAR)` expansion.
#[derive(Debug, PartialEq, Eq)]
struct Expanded {
    text: String,
    /// Variables that were substituted.
    used: BTreeSet<String>,
    /// `$(NAME)` references left as they are (NAME not defined yet).
    unresolved: Vec<String>,
}

/// Kubernetes' expansion: `$$` → `$`, `$(NAME)` → NAME's value when defined,
/// anything else unchanged.
fn expand(text: &str, defined: &BTreeMap<String, String>) -> Expanded {
    let mut out = Expanded {
        text: String::new(),
        used: BTreeSet::new(),
        unresolved: Vec::new(),
    };
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.text.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.text.push('$');
            rest = tail;
        } else if let Some((name, tail)) = after
            .strip_prefix('(')
            .and_then(|inner| inner.split_once(')'))
        {
            match defined.get(name) {
                Some(value) => {
                    out.text.push_str(value);
                    out.used.insert(name.to_string());
                }
                None => {
                    out.text.push_str(&format!("$({name})"));
                    out.unresolved.push(name.to_string());
                }
            }
            rest = tail;
        } else {
            out.text.push('$');
            rest = after;
        }
    }
    out.text.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_follows_kubernetes() {
        let defined: BTreeMap<String, String> =
            [("POD_IP".to_string(), "10.0.0.5".to_string())].into();
        let expanded = expand("http://$(POD_IP):7101", &defined);
        assert_eq!(expanded.text, "http://10.0.0.5:7101");
        assert!(expanded.used.contains("POD_IP"));
        let escaped = expand("$$(POD_IP) costs $5 $(LATER)", &defined);
        assert_eq!(escaped.text, "$(POD_IP) costs $5 $(LATER)");
        assert!(escaped.used.is_empty());
        assert_eq!(escaped.unresolved, ["LATER"]);
    }

    #[test]
    fn downward_fields_are_sampled_and_order_matters() {
        let env: Vec<Value> = serde_json::from_str(
            r#"[
                {"name": "EARLY", "value": "http://$(POD_IP):7101"},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "URL", "value": "http://$(POD_IP):7101"},
                {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "BAD", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}},
                {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
            ]"#,
        )
        .unwrap();
        let (pod, problems) = resolve("k8s: Deployment svc", "svc", "ns", &env);
        assert_eq!(pod.values["URL"], format!("http://{SAMPLE_POD_IP}:7101"));
        assert_eq!(pod.values["EARLY"], "http://$(POD_IP):7101");
        assert_eq!(pod.values["NS"], "ns");
        assert!(pod.values["NAME"].starts_with("svc-"));
        let per_pod: Vec<&str> = pod.per_pod.iter().map(String::as_str).collect();
        assert_eq!(per_pod, ["NAME", "POD_IP", "URL"]);
        assert!(pod.referenced.contains("POD_IP"));
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("env EARLY: $(POD_IP) is not defined above it"));
        assert!(problems[1].contains("env BAD: fieldRef status.phase"));
    }
}
