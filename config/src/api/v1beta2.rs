//! `metallb.io/v1beta2`: BGPPeer (the storage version).

use k8s_openapi::api::core::v1::SecretReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Duration, Password, is_false, is_zero_u16, is_zero_u32, schema};

/// A BGP neighbour of the speakers (`BGPPeer`, v1beta2).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "metallb.io",
    version = "v1beta2",
    kind = "BGPPeer",
    plural = "bgppeers",
    namespaced,
    status = "BGPPeerStatus",
    derive = "Default",
    derive = "PartialEq",
    category = "metallb",
    shortname = "bgpp",
    doc = "BGPPeer is the Schema for the peers API.",
    printcolumn(name = "Address", type_ = "string", json_path = ".spec.peerAddress"),
    printcolumn(name = "ASN", type_ = "string", json_path = ".spec.peerASN"),
    printcolumn(name = "BFD Profile", type_ = "string", json_path = ".spec.bfdProfile"),
    printcolumn(
        name = "Multi Hops",
        type_ = "string",
        json_path = ".spec.ebgpMultiHop"
    )
)]
#[serde(default, rename_all = "camelCase")]
#[schemars(transform = schema::required(&["myASN"]))]
#[serde(remote = "Self")]
pub struct BGPPeerSpec {
    /// AS number to use for the local end of the session.
    #[serde(rename = "myASN")]
    #[schemars(range(min = 0, max = 4294967295u32), extend("format" = "int64"))]
    pub my_asn: u32,
    /// AS number to expect from the remote end of the session.
    /// Exactly one of peerASN and dynamicASN must be set.
    #[serde(rename = "peerASN", skip_serializing_if = "is_zero_u32")]
    #[schemars(range(min = 0, max = 4294967295u32), extend("format" = "int64"))]
    pub peer_asn: u32,
    /// `internal` or `external`: the peer's AS is taken from its OPEN.
    #[serde(rename = "dynamicASN", skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["internal", "external"]))]
    pub dynamic_asn: String,
    /// AS number sent to the peer in place of myASN.
    #[serde(rename = "localASN", skip_serializing_if = "is_zero_u32")]
    #[schemars(range(min = 1, max = 4294967295u32), extend("format" = "int64"))]
    pub local_asn: u32,
    /// Address to dial when establishing the session.
    #[serde(rename = "peerAddress", skip_serializing_if = "String::is_empty")]
    pub address: String,
    /// Interface for unnumbered BGP peering.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub interface: String,
    /// Source address to use when establishing the session.
    #[serde(rename = "sourceAddress", skip_serializing_if = "String::is_empty")]
    pub src_address: String,
    /// Port to dial when establishing the session (179 when unset).
    #[serde(rename = "peerPort", skip_serializing_if = "is_zero_u16")]
    #[schemars(range(min = 1, max = 16384), extend("format" = "int32", "default" = 179))]
    pub port: u16,
    /// Requested BGP hold time, per RFC4271.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_time: Option<Duration>,
    /// Requested BGP keepalive time, per RFC4271.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive_time: Option<Duration>,
    /// Requested BGP connect retry time, in whole seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [
        {
            "rule": "duration(self).getSeconds() >= 1 && duration(self).getSeconds() <= 65535",
            "message": "connect time should be between 1 seconds to 65535",
        },
        {
            "rule": "duration(self).getMilliseconds() % 1000 == 0",
            "message": "connect time should contain a whole number of seconds",
        },
    ]))]
    pub connect_time: Option<Duration>,
    /// BGP router ID to advertise to the peer.
    #[serde(rename = "routerID", skip_serializing_if = "String::is_empty")]
    pub router_id: String,
    /// Only connect to this peer on nodes that match one of these selectors.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub node_selectors: Vec<LabelSelector>,
    /// Authentication password for routers enforcing TCP MD5 authenticated sessions.
    #[serde(skip_serializing_if = "Password::is_empty")]
    pub password: Password,
    /// Reference to a `kubernetes.io/basic-auth` Secret holding the password
    /// (key `password`). Mutually exclusive with password.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_secret: Option<SecretReference>,
    /// Name of the BFDProfile to use for this peer's BFD session.
    #[serde(rename = "bfdProfile", skip_serializing_if = "String::is_empty")]
    pub bfd_profile: String,
    /// Enable graceful restart (RFC 4724) for this session.
    #[serde(rename = "enableGracefulRestart", skip_serializing_if = "is_false")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self == oldSelf",
        "message": "EnableGracefulRestart cannot be changed after creation",
    }]))]
    pub enable_graceful_restart: bool,
    /// The peer is multiple hops away.
    #[serde(rename = "ebgpMultiHop", skip_serializing_if = "is_false")]
    pub ebgp_multi_hop: bool,
    /// Host VRF the session is established in.
    #[serde(rename = "vrf", skip_serializing_if = "String::is_empty")]
    pub vrf_name: String,
    /// Deprecated: has no effect.
    #[serde(rename = "disableMP", skip_serializing_if = "is_false")]
    #[schemars(extend("default" = false))]
    pub disable_mp: bool,
    /// Activate both IPv4 and IPv6 address families on the session.
    #[serde(skip_serializing_if = "is_false")]
    #[schemars(extend("default" = false))]
    pub dual_stack_address_family: bool,
}

super::optional_spec!(BGPPeerSpec);

/// BGPPeer has an empty status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct BGPPeerStatus {}
