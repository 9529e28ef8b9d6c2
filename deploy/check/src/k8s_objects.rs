//! What the Kubernetes checks share about the objects they read: the pod
//! label every selector uses, a Deployment as the other objects see it, and
//! an object's name. A leaf, so that `k8s` (which reads Deployments) and
//! `network_policy` (which checks policies against them) both import it
//! without importing each other.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The pod label every selector uses.
pub(crate) const NAME_LABEL: &str = "app.kubernetes.io/name";

/// What the other objects need to know about one Deployment.
#[derive(Debug, Clone)]
pub(crate) struct Deployment {
    /// `metadata.namespace` ("default" when absent).
    pub namespace: String,
    /// The pods' `app.kubernetes.io/name` label.
    pub pod_name: String,
    /// Every label of the pod template.
    pub pod_labels: Value,
    /// `spec.replicas` (1 when absent).
    pub replicas: i64,
    /// The container's ports.
    pub ports: BTreeSet<u16>,
    /// The container's named ports.
    pub named_ports: BTreeMap<String, u16>,
    /// The port the pods call each other on (the advertised listener), if any.
    pub peer_port: Option<u16>,
}

/// `metadata.name` of an object ("" when absent).
pub(crate) fn name_of(doc: &Value) -> String {
    doc.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}
