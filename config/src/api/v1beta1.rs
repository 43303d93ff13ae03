//! `metallb.io/v1beta1`: every kind but the v1beta2 BGPPeer.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Duration, Password, is_false, is_zero_i32, is_zero_u16, is_zero_u32, schema};

// ---------------------------------------------------------------------------
// IPAddressPool

/// A pool of addresses LoadBalancer Services get their IPs from.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "metallb.io",
    version = "v1beta1",
    kind = "IPAddressPool",
    plural = "ipaddresspools",
    namespaced,
    status = "IPAddressPoolStatus",
    derive = "Default",
    derive = "PartialEq",
    category = "metallb",
    shortname = "ipp",
    doc = "IPAddressPool represents a pool of IP addresses that can be allocated to LoadBalancer services.",
    printcolumn(
        name = "Auto Assign",
        type_ = "boolean",
        json_path = ".spec.autoAssign"
    ),
    printcolumn(
        name = "Avoid Buggy IPs",
        type_ = "boolean",
        json_path = ".spec.avoidBuggyIPs"
    ),
    printcolumn(name = "Addresses", type_ = "string", json_path = ".spec.addresses")
)]
#[serde(default, rename_all = "camelCase")]
#[schemars(transform = schema::required(&["addresses"]))]
pub struct IPAddressPoolSpec {
    /// A list of IP address ranges over which MetalLB has authority.
    /// Either CIDRs (`192.168.10.0/24`, `fc00::/64`) or inclusive ranges
    /// (`192.168.9.1-192.168.9.5`).
    pub addresses: Vec<String>,
    /// Whether the pool is used for automatic allocation (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub auto_assign: Option<bool>,
    /// Skip IPv4 addresses ending in .0 and .255.
    #[serde(rename = "avoidBuggyIPs", skip_serializing_if = "is_false")]
    #[schemars(extend("default" = false))]
    pub avoid_buggy_ips: bool,
    /// Pins the pool to namespaces and Services.
    #[serde(rename = "serviceAllocation", skip_serializing_if = "Option::is_none")]
    pub allocate_to: Option<ServiceAllocation>,
}

/// Which Services a pool serves, and with which priority.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct ServiceAllocation {
    /// Lower is preferred; 0 (unset) is the lowest priority.
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub priority: i32,
    /// Namespaces the pool serves.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Namespaces, by label, the pool serves.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub namespace_selectors: Vec<LabelSelector>,
    /// Services, by label, the pool serves.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub service_selectors: Vec<LabelSelector>,
}

/// Usage counters of a pool, written by the controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
#[schemars(transform = schema::required(&["assignedIPv4", "assignedIPv6", "availableIPv4", "availableIPv6"]))]
pub struct IPAddressPoolStatus {
    /// Distinct IPv4 addresses in use (exact up to 2^63-1, clamped above).
    #[serde(rename = "assignedIPv4")]
    pub assigned_ipv4: i64,
    /// Distinct IPv6 addresses in use (exact up to 2^63-1, clamped above).
    #[serde(rename = "assignedIPv6")]
    pub assigned_ipv6: i64,
    /// IPv4 addresses still free (exact up to 2^63-1, clamped above).
    #[serde(rename = "availableIPv4")]
    pub available_ipv4: i64,
    /// IPv6 addresses still free (exact up to 2^63-1, clamped above).
    #[serde(rename = "availableIPv6")]
    pub available_ipv6: i64,
}

// ---------------------------------------------------------------------------
// L2Advertisement

/// Announces the IPs of some pools with ARP/NDP from some nodes.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "metallb.io",
    version = "v1beta1",
    kind = "L2Advertisement",
    plural = "l2advertisements",
    namespaced,
    status = "EmptyStatus",
    derive = "Default",
    derive = "PartialEq",
    category = "metallb",
    shortname = "l2adv",
    doc = "L2Advertisement allows to advertise the LoadBalancer IPs provided by the selected pools via L2.",
    printcolumn(
        name = "IPAddressPools",
        type_ = "string",
        json_path = ".spec.ipAddressPools"
    ),
    printcolumn(
        name = "IPAddressPool Selectors",
        type_ = "string",
        json_path = ".spec.ipAddressPoolSelectors"
    ),
    printcolumn(name = "Interfaces", type_ = "string", json_path = ".spec.interfaces"),
    printcolumn(
        name = "Node Selectors",
        type_ = "string",
        json_path = ".spec.nodeSelectors",
        priority = 10
    )
)]
#[serde(default, rename_all = "camelCase")]
#[serde(remote = "Self")]
pub struct L2AdvertisementSpec {
    /// Pools, by name, announced by this advertisement.
    #[serde(rename = "ipAddressPools", skip_serializing_if = "Vec::is_empty")]
    pub ip_address_pools: Vec<String>,
    /// Pools, by label, announced by this advertisement.
    #[serde(
        rename = "ipAddressPoolSelectors",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub ip_address_pool_selectors: Vec<LabelSelector>,
    /// Nodes allowed to announce; empty means all.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub node_selectors: Vec<LabelSelector>,
    /// Interfaces to announce on; empty means all.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<String>,
    /// Only Services matching one of these selectors are announced.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub service_selectors: Vec<LabelSelector>,
    /// Soft preference among eligible nodes for the announcing node.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub preferred_node_selectors: Vec<PreferredNodeSelector>,
}

super::optional_spec!(L2AdvertisementSpec);

/// A weighted preference for the announcing node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
#[schemars(transform = schema::required(&["preference", "weight"]))]
pub struct PreferredNodeSelector {
    /// Weight, 1-100, summed over matching selectors.
    #[schemars(range(min = 1, max = 100))]
    pub weight: i32,
    /// Nodes this preference applies to (empty matches all).
    pub preference: LabelSelector,
}

/// The empty status of the configuration kinds.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct EmptyStatus {}

// ---------------------------------------------------------------------------
// BGPAdvertisement

/// Announces the IPs of some pools over BGP to some peers from some nodes.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "metallb.io",
    version = "v1beta1",
    kind = "BGPAdvertisement",
    plural = "bgpadvertisements",
    namespaced,
    status = "EmptyStatus",
    derive = "Default",
    derive = "PartialEq",
    category = "metallb",
    shortname = "bgpadv",
    doc = "BGPAdvertisement allows to advertise the IPs coming from the selected IPAddressPools via BGP, setting the parameters of the BGP Advertisement.",
    printcolumn(
        name = "IPAddressPools",
        type_ = "string",
        json_path = ".spec.ipAddressPools"
    ),
    printcolumn(
        name = "IPAddressPool Selectors",
        type_ = "string",
        json_path = ".spec.ipAddressPoolSelectors"
    ),
    printcolumn(name = "Peers", type_ = "string", json_path = ".spec.peers"),
    printcolumn(
        name = "Node Selectors",
        type_ = "string",
        json_path = ".spec.nodeSelectors",
        priority = 10
    )
)]
#[serde(default, rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.serviceSelectors) || self.serviceSelectors.size() == 0 || ((!has(self.aggregationLength) || self.aggregationLength == 32) && (!has(self.aggregationLengthV6) || self.aggregationLengthV6 == 128))",
    "message": "serviceSelectors and aggregationLength are mutually exclusive, can only be used together with default aggregationLength (32) and aggregationLengthV6 (128)",
}]))]
#[serde(remote = "Self")]
pub struct BGPAdvertisementSpec {
    /// IPv4 prefix length announced (default 32).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), extend("default" = 32))]
    pub aggregation_length: Option<i32>,
    /// IPv6 prefix length announced (default 128).
    #[serde(
        rename = "aggregationLengthV6",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("default" = 128))]
    pub aggregation_length_v6: Option<i32>,
    /// LOCAL_PREF attribute (iBGP only); 0 means unset.
    #[serde(skip_serializing_if = "is_zero_u32")]
    #[schemars(range(min = 0, max = 4294967295u32), extend("format" = "int64"))]
    pub local_pref: u32,
    /// Communities: `a:b`, `large:a:b:c`, or a Community alias name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub communities: Vec<String>,
    /// Pools, by name, announced by this advertisement.
    #[serde(rename = "ipAddressPools", skip_serializing_if = "Vec::is_empty")]
    pub ip_address_pools: Vec<String>,
    /// Pools, by label, announced by this advertisement.
    #[serde(
        rename = "ipAddressPoolSelectors",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub ip_address_pool_selectors: Vec<LabelSelector>,
    /// Nodes that announce (act as next hops); empty means all.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub node_selectors: Vec<LabelSelector>,
    /// BGPPeer names to announce to; empty means all.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
    /// Only Services matching one of these selectors are announced.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub service_selectors: Vec<LabelSelector>,
}

super::optional_spec!(BGPAdvertisementSpec);

// ---------------------------------------------------------------------------
// BFDProfile

/// BFD session parameters, referenced by BGPPeers.
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema,
)]
#[kube(
    group = "metallb.io",
    version = "v1beta1",
    kind = "BFDProfile",
    plural = "bfdprofiles",
    namespaced,
    status = "EmptyStatus",
    derive = "Default",
    derive = "PartialEq",
    category = "metallb",
    shortname = "bfdp",
    doc = "BFDProfile represents the settings of the bfd session that can be optionally associated with a BGP session.",
    printcolumn(
        name = "Passive Mode",
        type_ = "boolean",
        json_path = ".spec.passiveMode"
    ),
    printcolumn(
        name = "Transmit Interval",
        type_ = "integer",
        json_path = ".spec.transmitInterval"
    ),
    printcolumn(
        name = "Receive Interval",
        type_ = "integer",
        json_path = ".spec.receiveInterval"
    ),
    printcolumn(
        name = "Multiplier",
        type_ = "integer",
        json_path = ".spec.detectMultiplier"
    )
)]
#[serde(default, rename_all = "camelCase")]
#[serde(remote = "Self")]
pub struct BFDProfileSpec {
    /// Minimum interval, in ms, this system can receive control packets (default 300).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 60000), extend("format" = "int32"))]
    pub receive_interval: Option<u32>,
    /// Minimum interval, in ms, this system wants to send control packets (default 300).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 60000), extend("format" = "int32"))]
    pub transmit_interval: Option<u32>,
    /// Detection multiplier (default 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 2, max = 255), extend("format" = "int32"))]
    pub detect_multiplier: Option<u32>,
    /// Echo interval, in ms (default 50).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 60000), extend("format" = "int32"))]
    pub echo_interval: Option<u32>,
    /// Enables echo mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub echo_mode: Option<bool>,
    /// Waits for the peer to start the session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passive_mode: Option<bool>,
    /// Minimum expected TTL of incoming multihop control packets.
    #[serde(rename = "minimumTtl", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 254), extend("format" = "int32"))]
    pub minimum_ttl: Option<u32>,
}

super::optional_spec!(BFDProfileSpec);

// ---------------------------------------------------------------------------
// Community

/// Named BGP communities usable in BGPAdvertisements.
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema,
)]
#[kube(
    group = "metallb.io",
    version = "v1beta1",
    kind = "Community",
    plural = "communities",
    namespaced,
    status = "EmptyStatus",
    derive = "Default",
    derive = "PartialEq",
    category = "metallb",
    shortname = "comm",
    doc = "Community is a collection of aliases for communities. Users can define named aliases to be used in the BGPAdvertisement."
)]
#[serde(default, rename_all = "camelCase")]
#[serde(remote = "Self")]
pub struct CommunitySpec {
    /// The aliases.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub communities: Vec<CommunityAlias>,
}

super::optional_spec!(CommunitySpec);

/// One named community.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(default)]
pub struct CommunityAlias {
    /// The alias.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `a:b` (two 16-bit values) or `large:a:b:c` (three 32-bit values).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub value: String,
}

// ---------------------------------------------------------------------------
// BGPPeer (v1beta1, deprecated)

/// The deprecated v1beta1 BGPPeer, still served.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "metallb.io",
    version = "v1beta1",
    kind = "BGPPeer",
    plural = "bgppeers",
    namespaced,
    status = "EmptyStatus",
    derive = "Default",
    derive = "PartialEq",
    category = "metallb",
    shortname = "bgpp",
    served = true,
    storage = false,
    deprecated = "v1beta1 is deprecated, please use v1beta2",
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
#[schemars(transform = schema::required(&["myASN", "peerASN", "peerAddress"]))]
#[serde(remote = "Self")]
pub struct BGPPeerSpec {
    /// AS number to use for the local end of the session.
    #[serde(rename = "myASN")]
    #[schemars(range(min = 0, max = 4294967295u32), extend("format" = "int64"))]
    pub my_asn: u32,
    /// AS number to expect from the remote end of the session.
    #[serde(rename = "peerASN")]
    #[schemars(range(min = 0, max = 4294967295u32), extend("format" = "int64"))]
    pub asn: u32,
    /// Address to dial when establishing the session.
    #[serde(rename = "peerAddress")]
    pub address: String,
    /// Source address to use when establishing the session.
    #[serde(rename = "sourceAddress", skip_serializing_if = "String::is_empty")]
    pub src_address: String,
    /// Port to dial; 0 means 179.
    #[serde(rename = "peerPort", skip_serializing_if = "is_zero_u16")]
    #[schemars(range(min = 0, max = 16384), extend("format" = "int32"))]
    pub port: u16,
    /// Requested hold time; 0 means unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_time: Option<Duration>,
    /// Requested keepalive time; 0 means unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive_time: Option<Duration>,
    /// BGP router ID to advertise to the peer.
    #[serde(rename = "routerID", skip_serializing_if = "String::is_empty")]
    pub router_id: String,
    /// Only connect to this peer on nodes that match one of these selectors.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub node_selectors: Vec<NodeSelector>,
    /// Authentication password for routers enforcing TCP MD5 authenticated sessions.
    #[serde(skip_serializing_if = "Password::is_empty")]
    pub password: Password,
    /// Name of the BFDProfile to use for this peer's BFD session.
    #[serde(rename = "bfdProfile", skip_serializing_if = "String::is_empty")]
    pub bfd_profile: String,
    /// The peer is multiple hops away.
    #[serde(rename = "ebgpMultiHop", skip_serializing_if = "is_false")]
    pub ebgp_multi_hop: bool,
}

super::optional_spec!(BGPPeerSpec);

/// The legacy node selector of v1beta1 BGPPeers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeSelector {
    /// Exact label matches.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<MatchExpression>,
}

/// One requirement of a legacy node selector.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(default)]
#[schemars(transform = schema::required(&["key", "operator", "values"]))]
pub struct MatchExpression {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// Values for `In` and `NotIn`.
    #[schemars(length(min = 1))]
    pub values: Vec<String>,
}

// ---------------------------------------------------------------------------
// ConfigurationState (status only)

/// Whether a component's configuration is valid (`controller`, `speaker-<node>`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "metallb.io",
    version = "v1beta1",
    kind = "ConfigurationState",
    plural = "configurationstates",
    namespaced,
    no_spec,
    status = "ConfigurationStateStatus",
    derive = "Default",
    derive = "PartialEq",
    category = "metallb",
    shortname = "cfgstate",
    doc = "ConfigurationState reports whether the configuration a MetalLB component loaded is valid.",
    printcolumn(name = "Result", type_ = "string", json_path = ".status.result"),
    printcolumn(
        name = "ErrorSummary",
        type_ = "string",
        json_path = ".status.errorSummary"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct ConfigurationStateSpec {}

/// `Valid`, `Invalid` or `Unknown`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ConfigurationResult {
    /// The last configuration loaded is valid.
    Valid,
    /// The last configuration seen is invalid; the component runs on its last valid one.
    Invalid,
    /// Not reported yet.
    #[default]
    Unknown,
}

/// Status of a `ConfigurationState`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct ConfigurationStateStatus {
    /// Overall verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<ConfigurationResult>,
    /// The last configuration error (`configuration error: <error>`), empty when valid.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub last_error: String,
    /// Same text as lastError (MetalLB's field, kept for scripts).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error_summary: String,
    /// `configReconcilerValid` (speakers) or `poolReconcilerValid` (controller).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Vec<Condition>,
    /// A speaker's view of the layer-2 membership (metallb-rs; absent with
    /// membership off and from the controller): what `metallbctl explain`
    /// elects with for this node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer2_membership: Option<Layer2Membership>,
}

/// The most live speakers a [`Layer2Membership`] names one by one; past it
/// only their count (a list of thousands rewritten on every change would
/// cost more than it tells).
pub const MAX_PUBLISHED_LIVE_SPEAKERS: usize = 256;

/// A speaker's view of the layer-2 membership.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct Layer2Membership {
    /// `Joining` (not a member yet: it answers for nothing), `Joined`, or
    /// `SelfFenced` (no majority of the speakers answers: it answers for
    /// nothing).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// How many speakers it holds live, itself included.
    pub live_count: i32,
    /// Their node names, sorted; empty past 256 (`MAX_PUBLISHED_LIVE_SPEAKERS`)
    /// (then `truncated`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub live_speakers: Vec<String>,
    /// Whether `liveSpeakers` was left out for its size.
    #[serde(skip_serializing_if = "is_false")]
    pub truncated: bool,
}

/// [`Layer2Membership::state`] values.
pub const MEMBERSHIP_JOINING: &str = "Joining";
/// Joined.
pub const MEMBERSHIP_JOINED: &str = "Joined";
/// Self-fenced.
pub const MEMBERSHIP_SELF_FENCED: &str = "SelfFenced";

impl Layer2Membership {
    /// The view of a speaker that holds `live` live (`fenced`: it answers
    /// for nothing meanwhile; `joined`: a member yet).
    pub fn of(live: &std::collections::BTreeSet<String>, joined: bool, fenced: bool) -> Self {
        let truncated = live.len() > MAX_PUBLISHED_LIVE_SPEAKERS;
        Layer2Membership {
            state: if !joined {
                MEMBERSHIP_JOINING
            } else if fenced {
                MEMBERSHIP_SELF_FENCED
            } else {
                MEMBERSHIP_JOINED
            }
            .to_owned(),
            live_count: i32::try_from(live.len()).unwrap_or(i32::MAX),
            live_speakers: if truncated {
                Vec::new()
            } else {
                live.iter().cloned().collect()
            },
            truncated,
        }
    }

    /// The speakers it elects with, when it says: none while joining or
    /// fenced (it wins nothing), its list when published, else `None`.
    pub fn electing(&self) -> Option<std::collections::BTreeSet<String>> {
        match self.state.as_str() {
            MEMBERSHIP_JOINING | MEMBERSHIP_SELF_FENCED => Some(Default::default()),
            _ if self.truncated => None,
            _ => Some(self.live_speakers.iter().cloned().collect()),
        }
    }
}

/// Condition type written by speakers.
pub const CONDITION_CONFIG_RECONCILER_VALID: &str = "configReconcilerValid";
/// Condition type written by the controller.
pub const CONDITION_POOL_RECONCILER_VALID: &str = "poolReconcilerValid";
/// Condition reason when the configuration loaded.
pub const REASON_RECONCILED: &str = "Reconciled";
/// Condition reason when the configuration is invalid.
pub const REASON_CONFIGURATION_ERROR: &str = "ConfigurationError";

// ---------------------------------------------------------------------------
// ServiceL2Status / ServiceBGPStatus

/// Which node announces a Service in layer 2, and on which interfaces.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "metallb.io",
    version = "v1beta1",
    kind = "ServiceL2Status",
    plural = "servicel2statuses",
    namespaced,
    no_spec,
    status = "MetalLBServiceL2Status",
    derive = "Default",
    derive = "PartialEq",
    category = "metallb",
    shortname = "svcl2",
    doc = "ServiceL2Status reveals the actual traffic status of loadbalancer services in layer2 mode.",
    printcolumn(name = "Allocated Node", type_ = "string", json_path = ".status.node"),
    printcolumn(
        name = "Service Name",
        type_ = "string",
        json_path = ".status.serviceName"
    ),
    printcolumn(
        name = "Service Namespace",
        type_ = "string",
        json_path = ".status.serviceNamespace"
    )
)]
pub struct ServiceL2StatusSpec {}

/// Status of a `ServiceL2Status`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct MetalLBServiceL2Status {
    /// The announcing node.
    #[serde(skip_serializing_if = "String::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}]))]
    pub node: String,
    /// The Service's name.
    #[serde(skip_serializing_if = "String::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}]))]
    pub service_name: String,
    /// The Service's namespace.
    #[serde(skip_serializing_if = "String::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}]))]
    pub service_namespace: String,
    /// Interfaces announced on; empty when announcing on all of them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceInfo>,
}

/// One interface of a `ServiceL2Status`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(default)]
pub struct InterfaceInfo {
    /// Interface name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// Which peers a node advertises a Service to.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "metallb.io",
    version = "v1beta1",
    kind = "ServiceBGPStatus",
    plural = "servicebgpstatuses",
    namespaced,
    no_spec,
    status = "MetalLBServiceBGPStatus",
    derive = "Default",
    derive = "PartialEq",
    category = "metallb",
    shortname = "svcbgp",
    doc = "ServiceBGPStatus exposes the BGP peers a service is configured to be advertised to, per relevant node.",
    printcolumn(name = "Node", type_ = "string", json_path = ".status.node"),
    printcolumn(
        name = "Service Name",
        type_ = "string",
        json_path = ".status.serviceName"
    ),
    printcolumn(
        name = "Service Namespace",
        type_ = "string",
        json_path = ".status.serviceNamespace"
    )
)]
pub struct ServiceBGPStatusSpec {}

/// Status of a `ServiceBGPStatus`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct MetalLBServiceBGPStatus {
    /// The advertising node.
    #[serde(skip_serializing_if = "String::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}]))]
    pub node: String,
    /// The Service's name.
    #[serde(skip_serializing_if = "String::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}]))]
    pub service_name: String,
    /// The Service's namespace.
    #[serde(skip_serializing_if = "String::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "Value is immutable"}]))]
    pub service_namespace: String,
    /// BGPPeer names the Service is advertised to from this node.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
}

// ---------------------------------------------------------------------------
// NodeBGPStatus (metallb-rs)

/// What one node announces in BGP, in the speaker's summary mode
/// (`--service-bgp-status=summary`): one object per node (named after it)
/// instead of one ServiceBGPStatus per (Service, node). It holds only what
/// the configuration and the Services do not tell: the peers in effect here,
/// the prefixes of `externalTrafficPolicy: Local` Services announced here,
/// and the Services an advertisement selects here that are not announced.
/// An `externalTrafficPolicy: Cluster` Service announced as the
/// configuration says changes no node's object.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "metallb.io",
    version = "v1beta1",
    kind = "NodeBGPStatus",
    plural = "nodebgpstatuses",
    namespaced,
    no_spec,
    status = "NodeBGPStatusStatus",
    derive = "Default",
    derive = "PartialEq",
    category = "metallb",
    shortname = "nodebgp",
    doc = "NodeBGPStatus sums up what one node announces in BGP (the speaker's summary mode): its peers, its externalTrafficPolicy Local prefixes and the Services it does not announce against the configuration.",
    printcolumn(name = "Node", type_ = "string", json_path = ".status.node"),
    printcolumn(name = "Peers", type_ = "string", json_path = ".status.peers"),
    printcolumn(
        name = "Local Services",
        type_ = "integer",
        json_path = ".status.localServices"
    ),
    printcolumn(
        name = "Withdrawn",
        type_ = "integer",
        json_path = ".status.withdrawnServices"
    ),
    printcolumn(name = "Withheld", type_ = "string", json_path = ".status.withheld"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct NodeBGPStatusSpec {}

/// Status of a `NodeBGPStatus`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeBGPStatusStatus {
    /// The node.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub node: String,
    /// BGPPeer names with a session on this node (the peers in effect).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
    /// Why this node announces nothing although advertisements select it
    /// (`nodeNetworkUnavailable`, `nodeLabeledExcludeBalancers`); empty
    /// otherwise. The Services it withholds are not listed one by one.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub withheld: String,
    /// Prefixes of `externalTrafficPolicy: Local` Services announced from
    /// here, per pool and BGPAdvertisement.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub local_prefixes: Vec<PrefixCount>,
    /// How many `externalTrafficPolicy: Local` Services are announced from
    /// here (all of them, listed or not).
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub local_services: i32,
    /// How many Services an advertisement selects here but this node does
    /// not announce for another reason than `withheld` (all of them).
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub withdrawn_services: i32,
    /// The Services behind `localServices` and `withdrawnServices`, sorted
    /// by namespace and name, cut at the speaker's cap.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exceptions: Vec<ServiceException>,
    /// Whether `exceptions` was cut.
    #[serde(skip_serializing_if = "is_false")]
    pub exceptions_truncated: bool,
}

/// Announced prefixes of one pool under one BGPAdvertisement.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct PrefixCount {
    /// The IPAddressPool.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pool: String,
    /// The BGPAdvertisement.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub advertisement: String,
    /// Distinct prefixes.
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub prefixes: i32,
}

/// One Service a node announces or withdraws against what the
/// configuration alone says.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct ServiceException {
    /// The Service's namespace.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub service_namespace: String,
    /// The Service's name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub service_name: String,
    /// Whether this node announces it (an `externalTrafficPolicy: Local`
    /// Service with an endpoint here).
    #[serde(skip_serializing_if = "is_false")]
    pub announced: bool,
    /// Why it is not announced (MetalLB's word, e.g.
    /// `conflictingAdvertisements`); empty when announced.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// BGPPeer names it is sent to from here (announced only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
}

// ---------------------------------------------------------------------------
// BGPSessionStatus (metallb-rs)

/// The state of one BGP session of one node, written by that node's speaker.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "metallb.io",
    version = "v1beta1",
    kind = "BGPSessionStatus",
    plural = "bgpsessionstatuses",
    namespaced,
    no_spec,
    status = "BGPSessionStatusStatus",
    derive = "Default",
    derive = "PartialEq",
    category = "metallb",
    shortname = "bgpsess",
    doc = "BGPSessionStatus reports the state of the BGP (and BFD) session between one node and one BGPPeer.",
    printcolumn(name = "Node", type_ = "string", json_path = ".status.node"),
    printcolumn(name = "Peer", type_ = "string", json_path = ".status.peer"),
    printcolumn(name = "BGP", type_ = "string", json_path = ".status.bgpStatus"),
    printcolumn(name = "BFD", type_ = "string", json_path = ".status.bfdStatus"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct BGPSessionStatusSpec {}

/// Status of a `BGPSessionStatus`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct BGPSessionStatusStatus {
    /// The node running the session.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub node: String,
    /// The BGPPeer name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub peer: String,
    /// The VRF the session runs in (empty for the default VRF).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub vrf: String,
    /// RFC 4271 state: Idle, Connect, Active, OpenSent, OpenConfirm, Established.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub bgp_status: String,
    /// Up, Down, Init, AdminDown, or N/A without a BFD profile.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub bfd_status: String,
    /// When bgpStatus or bfdStatus last changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// The last NOTIFICATION or connection error (never a secret).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub last_error: String,
}
