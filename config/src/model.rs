//! The validated, normalised configuration `parse` produces.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Serialize, Serializer};

use crate::community::Community;
use crate::error::Warning;
use crate::selector::Selector;

/// One validated configuration: what a component runs on.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Config {
    /// Pools by name.
    pub pools: BTreeMap<String, Pool>,
    /// BGP peers, sorted by name.
    pub peers: Vec<Peer>,
    /// BFD profiles by name.
    pub bfd_profiles: BTreeMap<String, BfdProfile>,
    /// L2 advertisements, sorted by name.
    pub l2_advertisements: Vec<L2Advertisement>,
    /// BGP advertisements, sorted by name.
    pub bgp_advertisements: Vec<BgpAdvertisement>,
    /// Community aliases by name (from `Community` objects).
    pub communities: BTreeMap<String, Community>,
    /// Things accepted but not acted on, or likely mistakes.
    pub warnings: Vec<Warning>,
}

impl Config {
    /// Object counts, for a one-line summary.
    pub fn summary(&self) -> Summary {
        Summary {
            pools: self.pools.len(),
            peers: self.peers.len(),
            l2_advertisements: self.l2_advertisements.len(),
            bgp_advertisements: self.bgp_advertisements.len(),
            bfd_profiles: self.bfd_profiles.len(),
            communities: self.communities.len(),
        }
    }

    /// The pool containing `ip`, if any (pools never overlap).
    pub fn pool_for(&self, ip: IpAddr) -> Option<&Pool> {
        self.pools.values().find(|p| p.contains(ip))
    }
}

/// Object counts of a [`Config`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// IPAddressPools.
    pub pools: usize,
    /// BGPPeers.
    pub peers: usize,
    /// L2Advertisements.
    pub l2_advertisements: usize,
    /// BGPAdvertisements.
    pub bgp_advertisements: usize,
    /// BFDProfiles.
    pub bfd_profiles: usize,
    /// Community aliases.
    pub communities: usize,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} pools, {} peers, {} L2 advertisements, {} BGP advertisements, {} BFD profiles, {} communities",
            self.pools,
            self.peers,
            self.l2_advertisements,
            self.bgp_advertisements,
            self.bfd_profiles,
            self.communities
        )
    }
}

/// An address pool.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Pool {
    /// Name of the IPAddressPool.
    pub name: String,
    /// Labels of the IPAddressPool (advertisements select pools by label).
    pub labels: BTreeMap<String, String>,
    /// `spec.addresses` in order, each with the CIDRs it stands for
    /// (a range is summarised into CIDRs). Allocation walks this order.
    pub addresses: Vec<AddressBlock>,
    /// Every CIDR of the pool, sorted (IPv4 first) and non-overlapping.
    pub cidrs: Vec<IpNet>,
    /// Used for automatic allocation.
    pub auto_assign: bool,
    /// Skip IPv4 addresses ending in .0 and .255.
    pub avoid_buggy_ips: bool,
    /// Which Services the pool serves, when restricted.
    pub service_allocation: Option<ServiceAllocation>,
    /// Names of the L2Advertisements announcing this pool.
    pub l2_advertisements: Vec<String>,
    /// Names of the BGPAdvertisements announcing this pool.
    pub bgp_advertisements: Vec<String>,
}

impl Pool {
    /// Whether `ip` is one of the pool's addresses (not counting .0/.255
    /// with avoidBuggyIPs, like MetalLB).
    pub fn contains(&self, ip: IpAddr) -> bool {
        if self.avoid_buggy_ips
            && let IpAddr::V4(v4) = ip
        {
            let last = v4.octets()[3];
            if last == 0 || last == 255 {
                return false;
            }
        }
        self.cidrs.iter().any(|c| c.contains(&ip))
    }

    /// Whether the pool has IPv4 addresses.
    pub fn has_ipv4(&self) -> bool {
        self.cidrs.iter().any(|c| matches!(c, IpNet::V4(_)))
    }

    /// Whether the pool has IPv6 addresses.
    pub fn has_ipv6(&self) -> bool {
        self.cidrs.iter().any(|c| matches!(c, IpNet::V6(_)))
    }
}

/// One entry of `spec.addresses`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AddressBlock {
    /// As written (`198.51.100.0/24`, `198.51.100.10-198.51.100.20`).
    pub spec: String,
    /// The CIDRs it stands for, in address order.
    pub cidrs: Vec<IpNet>,
}

/// `spec.serviceAllocation` of a pool, resolved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServiceAllocation {
    /// Lower is preferred; 0 is the lowest priority.
    pub priority: i32,
    /// Allowed namespaces: `namespaces` plus those `namespaceSelectors`
    /// matched among the known Namespaces.
    pub namespaces: BTreeSet<String>,
    /// The namespace selectors (re-evaluated when Namespaces change).
    pub namespace_selectors: Vec<Selector>,
    /// Service selectors (OR). Empty together with the namespace fields
    /// means every Service.
    pub service_selectors: Vec<Selector>,
}

/// The peer's AS: fixed, or decided from its OPEN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PeerAsn {
    /// `peerASN`.
    Fixed(u32),
    /// `dynamicASN: internal`: the peer's AS must equal ours.
    Internal,
    /// `dynamicASN: external`: the peer's AS must differ from ours.
    External,
}

/// A BGP password: never shown by `Debug`, `Display` or `Serialize`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretString(String);

impl SecretString {
    pub(crate) fn new(s: String) -> Self {
        Self(s)
    }

    /// The password, for the code that installs it on a socket.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Serialize for SecretString {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("<redacted>")
    }
}

/// Where a peer's password comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PasswordSource {
    /// `spec.password`.
    Inline,
    /// `spec.passwordSecret`, by Secret name.
    Secret(String),
}

/// A BGP peer with defaulted and derived values.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Peer {
    /// Name of the BGPPeer.
    pub name: String,
    /// Local AS (`myASN`).
    pub my_asn: u32,
    /// Remote AS.
    pub asn: PeerAsn,
    /// AS sent to the peer in place of myASN (`localASN`).
    pub local_asn: Option<u32>,
    /// Address to dial (absent for unnumbered peering).
    pub address: Option<IpAddr>,
    /// Interface for unnumbered peering (not implemented yet: warned).
    pub interface: Option<String>,
    /// TCP port (179 unless set).
    pub port: u16,
    /// Local address to bind.
    pub source_address: Option<IpAddr>,
    /// Hold time: configured (rounded to seconds), derived as 3 x keepalive, or 90 s.
    pub hold_time: Duration,
    /// Keepalive: configured, derived as hold / 3, or 30 s.
    pub keepalive_time: Duration,
    /// Whether holdTime or keepaliveTime was set (else both are defaults).
    pub timers_configured: bool,
    /// Fixed connect retry interval (`connectTime`); exponential backoff when unset.
    pub connect_time: Option<Duration>,
    /// Router ID (`routerID`); derived per node when unset.
    pub router_id: Option<IpAddr>,
    /// Nodes that run this session (OR); `Selector::everything()` when none are set.
    pub node_selectors: Vec<Selector>,
    /// TCP MD5 password.
    pub password: Option<SecretString>,
    /// Where the password comes from.
    pub password_source: Option<PasswordSource>,
    /// BFD profile name.
    pub bfd_profile: Option<String>,
    /// The peer is several hops away.
    pub ebgp_multihop: bool,
    /// VRF to bind the session to.
    pub vrf: Option<String>,
    /// Graceful restart (RFC 4724).
    pub enable_graceful_restart: bool,
    /// Activate both address families on the session.
    pub dual_stack_address_family: bool,
}

impl Peer {
    /// Whether this peer's session runs on a node with these labels.
    pub fn selects_node(&self, labels: &BTreeMap<String, String>) -> bool {
        self.node_selectors.iter().any(|s| s.matches(labels))
    }
}

/// A BFD profile with FRR's defaults filled in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BfdProfile {
    /// Name of the BFDProfile.
    pub name: String,
    /// Required minimum RX interval, ms (default 300).
    pub receive_interval_ms: u32,
    /// Desired minimum TX interval, ms (default 300).
    pub transmit_interval_ms: u32,
    /// Detection multiplier (default 3).
    pub detect_multiplier: u32,
    /// Echo interval, ms (default 50).
    pub echo_interval_ms: u32,
    /// Echo mode.
    pub echo_mode: bool,
    /// Passive mode.
    pub passive_mode: bool,
    /// Minimum TTL of multihop packets (default 254).
    pub minimum_ttl: u32,
}

/// An L2 advertisement, resolved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct L2Advertisement {
    /// Name of the L2Advertisement.
    pub name: String,
    /// Pools it announces, by name (empty selection fields mean all pools).
    pub pools: Vec<String>,
    /// Nodes allowed to announce, among the known Nodes.
    pub nodes: BTreeSet<String>,
    /// Node selectors (empty means every node).
    pub node_selectors: Vec<Selector>,
    /// Interfaces to announce on; empty means all.
    pub interfaces: Vec<String>,
    /// Service selectors (OR); empty means every Service.
    pub service_selectors: Vec<Selector>,
    /// Weighted node preferences.
    pub preferred_node_selectors: Vec<WeightedSelector>,
}

/// A weighted node preference.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WeightedSelector {
    /// 1-100.
    pub weight: i32,
    /// Nodes the weight applies to.
    pub selector: Selector,
}

/// A BGP advertisement, resolved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BgpAdvertisement {
    /// Name of the BGPAdvertisement.
    pub name: String,
    /// Pools it announces, by name.
    pub pools: Vec<String>,
    /// IPv4 prefix length announced.
    pub aggregation_length: i32,
    /// IPv6 prefix length announced.
    pub aggregation_length_v6: i32,
    /// LOCAL_PREF; 0 means unset.
    pub local_pref: u32,
    /// Communities, aliases resolved, sorted and deduplicated.
    pub communities: Vec<Community>,
    /// BGPPeer names to announce to; empty means all peers.
    pub peers: Vec<String>,
    /// Nodes that announce, among the known Nodes.
    pub nodes: BTreeSet<String>,
    /// Node selectors (empty means every node).
    pub node_selectors: Vec<Selector>,
    /// Service selectors (OR); empty means every Service.
    pub service_selectors: Vec<Selector>,
}
