//! BGPPeer conversion between `metallb.io/v1beta1` and `metallb.io/v1beta2`,
//! with MetalLB's field mapping (`api/v1beta1/bgppeer_conversion.go`, hub
//! v1beta2), for the conversion webhook. Pure: objects in, objects out.
//!
//! v1beta1 -> v1beta2 copies every v1beta1 field; the legacy node selectors
//! become label selectors (an empty one stays empty: it selects every node).
//! v1beta2 -> v1beta1 copies the fields v1beta1 has and loses the others
//! (`dynamicASN`, `localASN`, `interface`, `connectTime`, `passwordSecret`,
//! `enableGracefulRestart`, `vrf`, `disableMP`, `dualStackAddressFamily`), as
//! MetalLB does: v1beta1 has no place for them.
//!
//! One difference: MetalLB's v1beta1 `holdTime`/`keepaliveTime` are plain Go
//! durations, so a v1beta1 object without them converts to an explicit `0s`
//! (a hold time of 0: no keepalives at all), and a v1beta2 object without
//! them reads back as v1beta1 `0s`. Here an absent duration stays absent in
//! both directions (the session then uses the default timers), and a written
//! one, `0s` included, is copied as written.
//!
//! [`convert_object`] converts one object of a `ConversionReview` (JSON in,
//! JSON out); every error says what was wrong and never quotes the object
//! (it may hold a BGP password).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde_json::Value;

use crate::api::{GROUP, v1beta1, v1beta2};

/// The path the controller serves conversion on (MetalLB's).
pub const WEBHOOK_PATH: &str = "/convert";
/// The Service in front of the controller's webhooks (MetalLB's).
pub const WEBHOOK_SERVICE: &str = "metallb-webhook-service";

/// The only kind converted.
pub const KIND: &str = "BGPPeer";
/// `metallb.io/v1beta1`.
pub const V1BETA1: &str = "metallb.io/v1beta1";
/// `metallb.io/v1beta2`.
pub const V1BETA2: &str = "metallb.io/v1beta2";

/// Why an object could not be converted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    /// The object is not a JSON object with `apiVersion` and `kind`.
    #[error("the object to convert has no apiVersion or kind")]
    NotAnObject,
    /// The object is of a kind other than BGPPeer.
    #[error("cannot convert kind {kind:?} ({api_version}): only metallb.io BGPPeer is converted")]
    UnknownKind {
        /// The object's apiVersion.
        api_version: String,
        /// The object's kind.
        kind: String,
    },
    /// A version (of the object or the desired one) that is not served.
    #[error(
        "cannot convert BGPPeer {from:?} to {to:?}: the versions are metallb.io/v1beta1 and metallb.io/v1beta2"
    )]
    UnknownVersion {
        /// The object's apiVersion.
        from: String,
        /// The desired apiVersion.
        to: String,
    },
    /// The object does not decode as a BGPPeer of its version (the serde
    /// error names the field and the expected type, not the value).
    #[error("decoding BGPPeer {name:?} as {api_version}: {reason}")]
    Decode {
        /// The object's name, when it has one.
        name: String,
        /// The object's apiVersion.
        api_version: String,
        /// Where and why.
        reason: String,
    },
    /// The converted object could not be written as JSON.
    #[error("encoding the converted BGPPeer: {0}")]
    Encode(String),
}

/// v1beta1 -> v1beta2 (MetalLB's `ConvertTo`).
pub fn bgp_peer_to_v1beta2(old: &v1beta1::BGPPeer) -> v1beta2::BGPPeer {
    let s = &old.spec;
    v1beta2::BGPPeer {
        metadata: old.metadata.clone(),
        spec: v1beta2::BGPPeerSpec {
            my_asn: s.my_asn,
            peer_asn: s.asn,
            address: s.address.clone(),
            src_address: s.src_address.clone(),
            port: s.port,
            hold_time: s.hold_time.clone(),
            keepalive_time: s.keepalive_time.clone(),
            router_id: s.router_id.clone(),
            node_selectors: s.node_selectors.iter().map(label_selector).collect(),
            password: s.password.clone(),
            bfd_profile: s.bfd_profile.clone(),
            ebgp_multi_hop: s.ebgp_multi_hop,
            ..Default::default()
        },
        status: old.status.as_ref().map(|_| v1beta2::BGPPeerStatus {}),
    }
}

/// v1beta2 -> v1beta1 (MetalLB's `ConvertFrom`): the fields v1beta1 lacks are lost.
pub fn bgp_peer_to_v1beta1(new: &v1beta2::BGPPeer) -> v1beta1::BGPPeer {
    let s = &new.spec;
    v1beta1::BGPPeer {
        metadata: new.metadata.clone(),
        spec: v1beta1::BGPPeerSpec {
            my_asn: s.my_asn,
            asn: s.peer_asn,
            address: s.address.clone(),
            src_address: s.src_address.clone(),
            port: s.port,
            hold_time: s.hold_time.clone(),
            keepalive_time: s.keepalive_time.clone(),
            router_id: s.router_id.clone(),
            node_selectors: s.node_selectors.iter().map(legacy_selector).collect(),
            password: s.password.clone(),
            bfd_profile: s.bfd_profile.clone(),
            ebgp_multi_hop: s.ebgp_multi_hop,
        },
        status: new.status.as_ref().map(|_| v1beta1::EmptyStatus {}),
    }
}

/// MetalLB's `parseNodeSelector`: empty lists are left out.
fn label_selector(ns: &v1beta1::NodeSelector) -> LabelSelector {
    LabelSelector {
        match_labels: (!ns.match_labels.is_empty()).then(|| ns.match_labels.clone()),
        match_expressions: (!ns.match_expressions.is_empty()).then(|| {
            ns.match_expressions
                .iter()
                .map(|e| LabelSelectorRequirement {
                    key: e.key.clone(),
                    operator: e.operator.clone(),
                    values: (!e.values.is_empty()).then(|| e.values.clone()),
                })
                .collect()
        }),
    }
}

/// MetalLB's `labelsToLegacySelector`.
fn legacy_selector(sel: &LabelSelector) -> v1beta1::NodeSelector {
    v1beta1::NodeSelector {
        match_labels: sel.match_labels.clone().unwrap_or_default(),
        match_expressions: sel
            .match_expressions
            .iter()
            .flatten()
            .map(|e| v1beta1::MatchExpression {
                key: e.key.clone(),
                operator: e.operator.clone(),
                values: e.values.clone().unwrap_or_default(),
            })
            .collect(),
    }
}

fn decode<T: serde::de::DeserializeOwned>(
    obj: &Value,
    api_version: &str,
) -> Result<T, ConversionError> {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    serde_path_to_error::deserialize(obj).map_err(|e| ConversionError::Decode {
        name,
        api_version: api_version.to_string(),
        // The path and serde's reason; serde's "invalid type" and "invalid
        // value" messages quote the value, so only the path is kept for them.
        reason: safe_reason(&e),
    })
}

fn safe_reason(e: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let inner = e.inner().to_string();
    let kind = if inner.starts_with("invalid type") {
        "a value of the wrong type".to_string()
    } else if inner.starts_with("invalid value") {
        "an invalid value".to_string()
    } else {
        inner
    };
    format!("{}: {kind}", e.path())
}

fn encode<T: serde::Serialize>(obj: &T) -> Result<Value, ConversionError> {
    serde_json::to_value(obj).map_err(|e| ConversionError::Encode(e.to_string()))
}

/// Converts one object of a `ConversionReview` to `desired` (an apiVersion).
/// An object already at `desired` is returned as it is.
pub fn convert_object(obj: &Value, desired: &str) -> Result<Value, ConversionError> {
    let api_version = obj.get("apiVersion").and_then(Value::as_str);
    let kind = obj.get("kind").and_then(Value::as_str);
    let (Some(api_version), Some(kind)) = (api_version, kind) else {
        return Err(ConversionError::NotAnObject);
    };
    let group = api_version.split_once('/').map(|(g, _)| g);
    if kind != KIND || group != Some(GROUP) {
        return Err(ConversionError::UnknownKind {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        });
    }
    match (api_version, desired) {
        (V1BETA1, V1BETA2) => encode(&bgp_peer_to_v1beta2(&decode(obj, api_version)?)),
        (V1BETA2, V1BETA1) => encode(&bgp_peer_to_v1beta1(&decode(obj, api_version)?)),
        (V1BETA1, V1BETA1) | (V1BETA2, V1BETA2) => Ok(obj.clone()),
        _ => Err(ConversionError::UnknownVersion {
            from: api_version.to_string(),
            to: desired.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests;
