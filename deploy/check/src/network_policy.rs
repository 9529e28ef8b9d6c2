//! NetworkPolicies against the Deployments they select. Once an ingress
//! policy selects a pod, the pod accepts only what some rule admits, so a
//! policy that forgets a port silently cuts a Service (or scraping) off, and
//! one that forgets the Deployment's own pods breaks room-service's
//! forwarding to a room's holder (`RoomPeer` shares the gateway's port). The
//! checks: every policy selects a Deployment in its namespace, every port it
//! names is one the pods listen on, every container port is admitted from
//! somewhere, the peer port is admitted from the Deployment's own pods, a
//! same-namespace `podSelector` names a Deployment that exists, and a
//! Deployment whose pods call each other has a policy at all (its peer port
//! is otherwise open to every pod in the cluster). Ports whose callers must
//! be named — a `grpc` port (calls that change rooms or leaderboards) and
//! the `http` port of pods labelled `hyapp.io/operator-endpoints: "true"`
//! (the relay's operator endpoints) — must be guarded by a policy, and no
//! rule may admit everyone to them.
//!
//! Only `matchLabels` selectors are read; a policy using `matchExpressions`
//! is reported rather than guessed at.

use crate::k8s_objects::{Deployment, NAME_LABEL, name_of};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The pod label of Deployments whose `http` port serves operator actions.
const OPERATOR_ENDPOINTS_LABEL: &str = "hyapp.io/operator-endpoints";

/// The label every namespace carries with its own name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Checks every NetworkPolicy; returns the problems.
pub(crate) fn check(
    policies: &[&Value],
    deployments: &BTreeMap<String, Deployment>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut guarded = BTreeSet::new();
    for policy in policies {
        let name = name_of(policy);
        let namespace = namespace_of(policy);
        let spec = policy.get("spec").cloned().unwrap_or(Value::Null);
        if policy.to_string().contains("matchExpressions") {
            problems.push(format!(
                "k8s: NetworkPolicy {name} uses matchExpressions, which deploy-check cannot evaluate; use matchLabels"
            ));
            continue;
        }
        let selector = spec
            .pointer("/podSelector/matchLabels")
            .cloned()
            .unwrap_or(Value::Null);
        let selected: Vec<(&String, &Deployment)> = deployments
            .iter()
            .filter(|(_, deployment)| {
                deployment.namespace == namespace && selects(&selector, &deployment.pod_labels)
            })
            .collect();
        if selected.is_empty() {
            problems.push(format!(
                "k8s: NetworkPolicy {name} selects no Deployment in {namespace}"
            ));
            continue;
        }
        let rules: Vec<Value> = spec
            .get("ingress")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        problems.extend(check_peers(&name, &namespace, &rules, deployments));
        // Without policyTypes, a policy is an ingress policy (and also an
        // egress one when it has egress rules).
        let ingress = match spec.get("policyTypes").and_then(Value::as_array) {
            Some(types) => types.iter().any(|kind| kind == "Ingress"),
            None => true,
        };
        if !ingress {
            continue;
        }
        for (deployment_name, deployment) in selected {
            guarded.insert(deployment_name.clone());
            problems.extend(check_admitted(&name, deployment_name, deployment, &rules));
        }
    }
    for (name, deployment) in deployments {
        if guarded.contains(name) {
            continue;
        }
        if let Some(peer) = deployment.peer_port {
            problems.push(format!(
                "k8s: Deployment {name} has no NetworkPolicy: port {peer}, where its pods call each other, is open to every pod in the cluster"
            ));
        } else if let Some(port) = restricted_ports(deployment).first() {
            problems.push(format!(
                "k8s: Deployment {name} has no NetworkPolicy: port {port}, whose callers must be named, is open to every pod in the cluster"
            ));
        }
    }
    problems
}

/// Same-namespace pod selectors in `rules` name a Deployment that exists.
fn check_peers(
    name: &str,
    namespace: &str,
    rules: &[Value],
    deployments: &BTreeMap<String, Deployment>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for rule in rules {
        for peer in rule
            .get("from")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let same_namespace =
                peer.get("namespaceSelector").is_none() && peer.get("ipBlock").is_none();
            if let Some(target) = peer
                .pointer("/podSelector/matchLabels")
                .and_then(|labels| labels.get(NAME_LABEL))
                .and_then(Value::as_str)
                && same_namespace
                && !deployments.values().any(|deployment| {
                    deployment.namespace == namespace && deployment.pod_name == target
                })
            {
                problems.push(format!(
                    "k8s: NetworkPolicy {name} admits pods labelled {target}, which no Deployment in {namespace} runs"
                ));
            }
        }
    }
    problems
}

/// What an ingress policy's `rules` admit to one `deployment` it selects:
/// only its own ports, every port from somewhere, restricted ports from
/// named callers only, the peer port from its own pods.
fn check_admitted(
    name: &str,
    deployment_name: &str,
    deployment: &Deployment,
    rules: &[Value],
) -> Vec<String> {
    let mut problems = Vec::new();
    for rule in rules {
        for port in rule
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let number = port_number(port, deployment);
            if !number.is_some_and(|number| deployment.ports.contains(&number)) {
                problems.push(format!(
                    "k8s: NetworkPolicy {name} admits port {} of {deployment_name}, which is not one of its ports {:?}",
                    port.get("port").map(Value::to_string).unwrap_or_default(),
                    deployment.ports
                ));
            }
        }
    }
    for port in &deployment.ports {
        if !rules
            .iter()
            .any(|rule| admits_port(rule, *port, deployment))
        {
            problems.push(format!(
                "k8s: NetworkPolicy {name} admits nobody to {deployment_name} port {port}"
            ));
        }
    }
    for port in restricted_ports(deployment) {
        if rules
            .iter()
            .any(|rule| admits_port(rule, port, deployment) && admits_anyone(rule))
        {
            problems.push(format!(
                "k8s: NetworkPolicy {name} admits anyone to {deployment_name} port {port}, whose callers must be named"
            ));
        }
    }
    if let Some(peer) = deployment.peer_port
        && !rules
            .iter()
            .any(|rule| admits_port(rule, peer, deployment) && admits_own_pods(rule, deployment))
    {
        problems.push(format!(
            "k8s: NetworkPolicy {name} does not admit {deployment_name}'s own pods to port {peer}: an instance could not forward a call to the instance holding the room"
        ));
    }
    problems
}

/// The ports of `deployment` whose callers a policy must name (module docs).
fn restricted_ports(deployment: &Deployment) -> Vec<u16> {
    let operator =
        deployment.pod_labels.get(OPERATOR_ENDPOINTS_LABEL) == Some(&Value::String("true".into()));
    deployment
        .named_ports
        .iter()
        .filter(|(name, _)| *name == "grpc" || (operator && *name == "http"))
        .map(|(_, port)| *port)
        .collect()
}

/// Whether `rule` admits every pod (no `from`), or has a source that selects
/// neither particular pods nor particular namespaces.
fn admits_anyone(rule: &Value) -> bool {
    let sources = rule
        .get("from")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let names = |selector: Option<&Value>| {
        selector
            .and_then(|selector| selector.get("matchLabels"))
            .and_then(Value::as_object)
            .is_some_and(|labels| !labels.is_empty())
    };
    sources.is_empty()
        || sources.iter().any(|source| {
            source.get("ipBlock").is_none()
                && !names(source.get("podSelector"))
                && !names(source.get("namespaceSelector"))
        })
}

fn namespace_of(doc: &Value) -> String {
    doc.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string()
}

/// `matchLabels` semantics: an absent or empty selector selects every pod.
fn selects(match_labels: &Value, labels: &Value) -> bool {
    match match_labels.as_object() {
        None => true,
        Some(wanted) => wanted
            .iter()
            .all(|(key, value)| labels.get(key) == Some(value)),
    }
}

/// A rule's port entry as a number (named ports looked up in the pod).
fn port_number(port: &Value, deployment: &Deployment) -> Option<u16> {
    match port.get("port")? {
        Value::String(named) => deployment.named_ports.get(named).copied(),
        other => other.as_u64().and_then(|port| u16::try_from(port).ok()),
    }
}

/// Whether `rule` admits TCP connections to `port` (from some source).
fn admits_port(rule: &Value, port: u16, deployment: &Deployment) -> bool {
    let entries = rule
        .get("ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    // No `ports`: every port.
    entries.is_empty()
        || entries.iter().any(|entry| {
            let tcp = entry
                .get("protocol")
                .and_then(Value::as_str)
                .is_none_or(|protocol| protocol == "TCP");
            let Some(first) = port_number(entry, deployment) else {
                return false;
            };
            let last = entry
                .get("endPort")
                .and_then(Value::as_u64)
                .and_then(|end| u16::try_from(end).ok())
                .unwrap_or(first);
            tcp && (first..=last).contains(&port)
        })
}

/// Whether `rule` admits the pods of `deployment` itself.
fn admits_own_pods(rule: &Value, deployment: &Deployment) -> bool {
    let sources = rule
        .get("from")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    // No `from`: every source.
    sources.is_empty()
        || sources.iter().any(|source| {
            if source.get("ipBlock").is_some() {
                return false;
            }
            let namespace_ok = match source.get("namespaceSelector") {
                None => true,
                Some(namespaces) => {
                    match namespaces.get("matchLabels").and_then(Value::as_object) {
                        None => true,
                        Some(labels) if labels.is_empty() => true,
                        Some(labels) => {
                            labels.len() == 1
                                && labels.get(NAMESPACE_NAME_LABEL).and_then(Value::as_str)
                                    == Some(deployment.namespace.as_str())
                        }
                    }
                }
            };
            let pods = source
                .pointer("/podSelector/matchLabels")
                .cloned()
                .unwrap_or(Value::Null);
            namespace_ok && selects(&pods, &deployment.pod_labels)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment() -> BTreeMap<String, Deployment> {
        [(
            "room-service".to_string(),
            Deployment {
                namespace: "ns".into(),
                pod_name: "room-service".into(),
                pod_labels: serde_json::json!({NAME_LABEL: "room-service"}),
                replicas: 3,
                ports: [7101, 7102].into(),
                named_ports: [("grpc".to_string(), 7101)].into(),
                peer_port: Some(7101),
            },
        )]
        .into()
    }

    fn policy(ingress: Value) -> Value {
        serde_json::json!({
            "kind": "NetworkPolicy",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "podSelector": {"matchLabels": {NAME_LABEL: "room-service"}},
                "policyTypes": ["Ingress"],
                "ingress": ingress,
            }
        })
    }

    #[test]
    fn peers_gateway_and_scraping_admitted() {
        let good = policy(serde_json::json!([
            {"from": [
                {"podSelector": {"matchLabels": {NAME_LABEL: "room-service"}}},
                {"namespaceSelector": {}, "podSelector": {"matchLabels": {"hyapp.io/room-client": "true"}}}
            ], "ports": [{"port": "grpc"}]},
            {"ports": [{"port": 7102}]}
        ]));
        assert_eq!(check(&[&good], &deployment()), Vec::<String>::new());
    }

    #[test]
    fn forgotten_peers_ports_and_policies_are_problems() {
        let gateway_only = policy(serde_json::json!([
            {"from": [{"namespaceSelector": {"matchLabels": {"team": "edge"}}}],
             "ports": [{"port": 7101}, {"port": 7103}]},
            {"from": [{"podSelector": {"matchLabels": {NAME_LABEL: "gateway"}}}]}
        ]));
        let problems = check(&[&gateway_only], &deployment());
        let expected = [
            "admits port 7103 of room-service",
            "does not admit room-service's own pods to port 7101",
            "admits pods labelled gateway, which no Deployment in ns runs",
        ];
        for needle in expected {
            assert!(
                problems.iter().any(|p| p.contains(needle)),
                "{needle}: {problems:?}"
            );
        }
        let closed = policy(serde_json::json!([{"ports": [{"port": 7101}]}]));
        let problems = check(&[&closed], &deployment());
        assert!(
            problems[0].contains("admits nobody to room-service port 7102"),
            "{problems:?}"
        );
        let problems = check(&[], &deployment());
        assert!(
            problems[0].contains("room-service has no NetworkPolicy"),
            "{problems:?}"
        );
    }

    #[test]
    fn restricted_ports_need_a_policy_that_names_their_callers() {
        let mut relay = deployment();
        let mut spec = relay.remove("room-service").unwrap();
        spec.peer_port = None;
        spec.pod_name = "outbox-relay".into();
        spec.pod_labels =
            serde_json::json!({NAME_LABEL: "room-service", OPERATOR_ENDPOINTS_LABEL: "true"});
        spec.ports = [7201].into();
        spec.named_ports = [("http".to_string(), 7201)].into();
        let deployments: BTreeMap<String, Deployment> = [("outbox-relay".to_string(), spec)].into();

        let unguarded = check(&[], &deployments);
        assert!(
            unguarded[0].contains("outbox-relay has no NetworkPolicy: port 7201"),
            "{unguarded:?}"
        );
        let open = policy(serde_json::json!([{"ports": [{"port": 7201}]}]));
        let problems = check(&[&open], &deployments);
        assert!(
            problems[0].contains("admits anyone to outbox-relay port 7201"),
            "{problems:?}"
        );
        let any_namespace = policy(serde_json::json!([
            {"from": [{"namespaceSelector": {}}], "ports": [{"port": 7201}]}
        ]));
        assert_eq!(check(&[&any_namespace], &deployments).len(), 1);
        let named = policy(serde_json::json!([
            {"from": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "monitoring"}}}], "ports": [{"port": 7201}]}
        ]));
        assert_eq!(check(&[&named], &deployments), Vec::<String>::new());
    }
}
