//! One sample object of every metallb.io kind, with a value for every printer column, in
//! the address and AS plan of lab/README.md.

use anyhow::{Result, bail};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// A written lab status timestamp (any valid time will do).
const TIME: &str = "2026-01-01T00:00:00Z";

/// `(apiVersion, object without metadata, status)` of the sample of `kind`; `None` for a
/// kind the tests do not know yet (a new CRD: add a sample here).
pub fn sample(kind: &str, name: &str) -> Option<(&'static str, Value, Option<Value>)> {
    let pool = format!("{name}-pool");
    Some(match kind {
        "IPAddressPool" => (
            "metallb.io/v1beta1",
            json!({"spec": {
                "addresses": ["198.51.100.0/24", "2001:db8:100::/120"],
                "autoAssign": true,
                "avoidBuggyIPs": true,
            }}),
            None,
        ),
        "BFDProfile" => (
            "metallb.io/v1beta1",
            json!({"spec": {
                "receiveInterval": 300,
                "transmitInterval": 250,
                "detectMultiplier": 3,
                "passiveMode": false,
            }}),
            None,
        ),
        "BGPPeer" => (
            "metallb.io/v1beta2",
            json!({"spec": {
                "myASN": 64513,
                "peerASN": 64512,
                "peerAddress": "192.0.2.1",
                "bfdProfile": format!("{name}-bfd"),
                "ebgpMultiHop": true,
                "holdTime": "90s",
            }}),
            None,
        ),
        "Community" => (
            "metallb.io/v1beta1",
            json!({"spec": {"communities": [
                {"name": "no-export", "value": "65535:65281"},
                {"name": "large", "value": "large:64512:1:2"},
            ]}}),
            None,
        ),
        "BGPAdvertisement" => (
            "metallb.io/v1beta1",
            json!({"spec": {
                "ipAddressPools": [pool],
                "ipAddressPoolSelectors": [{"matchLabels": {"pool": "lab"}}],
                "peers": [format!("{name}-peer")],
                "nodeSelectors": [{"matchLabels": {"kubernetes.io/hostname": "node-1"}}],
                "aggregationLength": 32,
            }}),
            None,
        ),
        "L2Advertisement" => (
            "metallb.io/v1beta1",
            json!({"spec": {
                "ipAddressPools": [pool],
                "ipAddressPoolSelectors": [{"matchLabels": {"pool": "lab"}}],
                "interfaces": ["eth0"],
                "nodeSelectors": [{"matchLabels": {"kubernetes.io/hostname": "node-2"}}],
            }}),
            None,
        ),
        "BGPSessionStatus" => (
            "metallb.io/v1beta1",
            json!({}),
            Some(json!({
                "node": "node-1",
                "peer": format!("{name}-peer"),
                "bgpStatus": "Established",
                "bfdStatus": "Up",
                "lastTransitionTime": TIME,
            })),
        ),
        "ServiceL2Status" => (
            "metallb.io/v1beta1",
            json!({}),
            Some(json!({
                "node": "node-2",
                "serviceName": "web",
                "serviceNamespace": "shop",
                "interfaces": [{"name": "eth0"}],
            })),
        ),
        "ServiceBGPStatus" => (
            "metallb.io/v1beta1",
            json!({}),
            Some(json!({
                "node": "node-3",
                "serviceName": "web",
                "serviceNamespace": "shop",
                "peers": [format!("{name}-peer")],
            })),
        ),
        "NodeBGPStatus" => (
            "metallb.io/v1beta1",
            json!({}),
            Some(json!({
                "node": "node-2",
                "peers": [format!("{name}-peer")],
                "localServices": 2,
                "withdrawnServices": 1,
                "withheld": "nodeNetworkUnavailable",
                "exceptions": [
                    {"serviceNamespace": "shop", "serviceName": "cart", "announced": true,
                     "peers": [format!("{name}-peer")]},
                    {"serviceNamespace": "shop", "serviceName": "db",
                     "reason": "conflictingAdvertisements"},
                ],
            })),
        ),
        "ConfigurationState" => (
            "metallb.io/v1beta1",
            json!({}),
            Some(json!({
                "result": "Invalid",
                "lastError": "configuration error: peer 192.0.2.1 has no bfd profile",
                "errorSummary": "configuration error: peer 192.0.2.1 has no bfd profile",
                "conditions": [{
                    "type": "configReconcilerValid",
                    "status": "False",
                    "reason": "ConfigurationError",
                    "message": "configuration error: peer 192.0.2.1 has no bfd profile",
                    "lastTransitionTime": TIME,
                }],
            })),
        ),
        _ => return None,
    })
}

/// The ApiResource of `kind` (plural `plural`) at `api_version`.
pub fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Creates the sample of `kind` named `name` in `ns` (and writes its status); returns
/// the object as stored.
pub async fn create_sample(
    client: &Client,
    ns: &str,
    kind: &str,
    plural: &str,
    name: &str,
) -> Result<DynamicObject> {
    let Some((api_version, body, status)) = sample(kind, name) else {
        bail!(
            "no sample object for kind {kind}: a new CRD in deploy/crds/; add one to \
             e2e/tests/e2e/samples.rs (with a value for each printer column)"
        );
    };
    let ar = resource(api_version, kind, plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let obj = DynamicObject::new(name, &ar).data(body);
    let mut created = api
        .create(&PostParams::default(), &obj)
        .await
        .map_err(|e| anyhow::anyhow!("creating the sample {kind} {ns}/{name}: {e}"))?;
    if let Some(status) = status {
        created = api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .map_err(|e| {
                anyhow::anyhow!("writing the status of the sample {kind} {ns}/{name}: {e}")
            })?;
    }
    Ok(created)
}
