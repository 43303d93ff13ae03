//! Builders shared by the integration tests: MetalLB objects are written as
//! the YAML manifests a user would apply, and turned into
//! [`config::Resources`] here.
//!
//! Only documentation addresses (192.0.2.0/24, 198.51.100.0/24,
//! 203.0.113.0/24, 2001:db8::/32) and private ASNs (64512-65534) are used.

#![allow(dead_code)] // each test binary uses a different subset

use config::api::{v1beta1, v1beta2};
use std::sync::Arc;

use config::{Config, ConfigError, Resources};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Secret};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The namespace MetalLB objects live in.
pub const NAMESPACE: &str = "metallb-system";

/// Parses a multi-document YAML string (`---` separated) into its documents.
pub fn docs(yaml: &str) -> Vec<Value> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(yaml).unwrap_or_else(|e| panic!("invalid YAML: {e}\n{yaml}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// Parses a single YAML document into a typed object.
pub fn typed<T: DeserializeOwned>(doc: &Value) -> T {
    serde_json::from_value(doc.clone()).unwrap_or_else(|e| {
        panic!(
            "cannot decode {}: {e}",
            serde_json::to_string_pretty(doc).unwrap()
        )
    })
}

/// Turns a multi-document YAML manifest into the inputs of `config::parse`,
/// dispatching on `kind` (and `apiVersion` for BGPPeer: v1beta1 peers are
/// converted with `config::convert_bgp_peer`, as the conversion webhook
/// would). Namespaced objects without a namespace are put in
/// `metallb-system`.
pub fn objs(yaml: &str) -> Resources {
    let mut r = Resources::default();
    for mut doc in docs(yaml) {
        let kind = doc["kind"]
            .as_str()
            .unwrap_or_else(|| panic!("document without kind: {doc}"))
            .to_owned();
        let api_version = doc["apiVersion"].as_str().unwrap_or_default().to_owned();
        if !matches!(kind.as_str(), "Node" | "Namespace") {
            let meta = doc
                .as_object_mut()
                .unwrap()
                .entry("metadata")
                .or_insert_with(|| Value::Object(Default::default()));
            if meta.get("namespace").is_none() {
                meta["namespace"] = Value::String(NAMESPACE.into());
            }
        }
        match kind.as_str() {
            "IPAddressPool" => r.pools.push(Arc::new(typed(&doc))),
            "BGPPeer" if api_version == "metallb.io/v1beta1" => {
                let old: v1beta1::BGPPeer = typed(&doc);
                r.peers.push(Arc::new(config::convert_bgp_peer(&old)));
            }
            "BGPPeer" => r.peers.push(Arc::new(typed::<v1beta2::BGPPeer>(&doc))),
            "BFDProfile" => r.bfd_profiles.push(Arc::new(typed(&doc))),
            "BGPAdvertisement" => r.bgp_advertisements.push(Arc::new(typed(&doc))),
            "L2Advertisement" => r.l2_advertisements.push(Arc::new(typed(&doc))),
            "Community" => r.communities.push(Arc::new(typed(&doc))),
            "Secret" => r.secrets.push(Arc::new(typed::<Secret>(&doc))),
            "Node" => r.nodes.push(Arc::new(typed::<Node>(&doc))),
            "Namespace" => r.namespaces.push(Arc::new(typed::<Namespace>(&doc))),
            "ConfigMap" => r.bgp_extras = Some(Arc::new(typed::<ConfigMap>(&doc))),
            other => panic!("unsupported kind {other}"),
        }
    }
    r
}

/// `config::parse` of a YAML manifest, which must be valid.
pub fn accept(yaml: &str) -> Config {
    match config::parse(&objs(yaml)) {
        Ok(cfg) => cfg,
        Err(e) => panic!(
            "expected a valid configuration, got {:?}: {e}\n--- input ---\n{yaml}",
            e.object
        ),
    }
}

/// `config::parse` of a YAML manifest, which must be invalid.
pub fn reject(yaml: &str) -> ConfigError {
    match config::parse(&objs(yaml)) {
        Ok(_) => panic!("expected a configuration error\n--- input ---\n{yaml}"),
        Err(e) => e,
    }
}

/// Asserts that `yaml` is rejected with exactly `message`, blaming
/// `kind`/`name`, transient or not.
#[track_caller]
pub fn assert_rejected(yaml: &str, kind: &str, name: &str, message: &str, transient: bool) {
    let err = reject(yaml);
    assert_eq!(err.message, message, "message\n--- input ---\n{yaml}");
    assert_eq!(err.to_string(), message, "Display is the message");
    let object = err
        .object
        .as_ref()
        .unwrap_or_else(|| panic!("no object in {err:?}"));
    assert_eq!(
        (object.kind.as_str(), object.name.as_str()),
        (kind, name),
        "object of {message:?}"
    );
    assert_eq!(err.transient, transient, "transient of {message:?}");
    assert_eq!(err.is_transient(), transient);
}

/// An IPv4 pool.
pub fn pool(name: &str, addresses: &[&str]) -> String {
    let addrs: Vec<String> = addresses.iter().map(|a| format!("      - {a:?}")).collect();
    format!(
        "---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: {name}
spec:
  addresses:
{}
",
        addrs.join("\n")
    )
}

/// An eBGP peer (v1beta2) with only the required fields.
pub fn peer(name: &str, address: &str) -> String {
    format!(
        "---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata:
  name: {name}
spec:
  myASN: 64512
  peerASN: 64513
  peerAddress: {address}
"
    )
}

/// A Node with labels.
pub fn node(name: &str, labels: &[(&str, &str)]) -> String {
    let mut out = format!(
        "---
apiVersion: v1
kind: Node
metadata:
  name: {name}
  labels:
    kubernetes.io/hostname: {name}
"
    );
    for (k, v) in labels {
        out.push_str(&format!("    {k}: {v}\n"));
    }
    out
}
