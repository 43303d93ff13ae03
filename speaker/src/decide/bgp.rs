//! BGP mode: what this node announces for one Service, and to which peer
//! (MetalLB's `bgpController.ShouldAnnounce` and `SetBalancer`, speaker.md
//! sections 1.7, 2.2 and 2.3). Pure: no clock, no socket, no API.

use std::collections::BTreeMap;
use std::net::IpAddr;

use cluster_view::endpoints::LeanSlice;
use cluster_view::endpoints::{self, Addresses};
use cluster_view::services;
use config::{BgpAdvertisement, Community, Config, Pool};
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Service;
use serde::Serialize;

use super::NodeFacts;

/// Why this node does not announce a Service, in MetalLB's words (the
/// `reason` of its `serviceWithdrawn` log line).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Reason {
    /// The Service does not exist.
    ServiceDeleted,
    /// Not `type: LoadBalancer`.
    NotLoadBalancer,
    /// Another `loadBalancerClass` (the speaker's `--lb-class`).
    OtherLoadBalancerClass,
    /// No ingress address yet.
    NoIpAllocated,
    /// An ingress address does not parse.
    InvalidIp,
    /// No single pool holds every ingress address.
    IpNotAllowed,
    /// No BGPAdvertisement of the pool selects this node.
    NotOwner,
    /// None of those selects the Service.
    NoMatchingAdvertisement,
    /// Two of those send the same prefix to the same peer with different
    /// LOCAL_PREF.
    ConflictingAdvertisements,
    /// The node's `NetworkUnavailable` condition is `True`.
    NodeNetworkUnavailable,
    /// The node has the exclude-from-external-load-balancers label.
    NodeLabeledExcludeBalancers,
    /// `externalTrafficPolicy: Local` and no serving endpoint here.
    NoLocalEndpoints,
    /// No serving endpoint anywhere.
    NoEndpoints,
    /// Layer 2: the Service may share its address (`allow-shared-ip`) and an
    /// L2Advertisement matching it has serviceSelectors.
    SharedIpWithServiceSelector,
    /// Layer 2, membership on: a node running a MetalLB speaker (not this
    /// implementation) is a candidate of the Service; MetalLB's speakers
    /// answer for it (a migration in progress). Not one of MetalLB's
    /// reasons.
    MetalLbSpeakerCandidate,
}

impl Reason {
    /// MetalLB's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ServiceDeleted => "serviceDeleted",
            Reason::NotLoadBalancer => "notLoadBalancer",
            Reason::OtherLoadBalancerClass => "otherLoadBalancerClass",
            Reason::NoIpAllocated => "noIPAllocated",
            Reason::InvalidIp => "invalidIP",
            Reason::IpNotAllowed => "ipNotAllowed",
            Reason::NotOwner => "notOwner",
            Reason::NoMatchingAdvertisement => "noMatchingAdvertisement",
            Reason::ConflictingAdvertisements => "conflictingAdvertisements",
            Reason::NodeNetworkUnavailable => "nodeNetworkUnavailable",
            Reason::NodeLabeledExcludeBalancers => "nodeLabeledExcludeBalancers",
            Reason::NoLocalEndpoints => "noLocalEndpoints",
            Reason::NoEndpoints => "noEndpoints",
            Reason::SharedIpWithServiceSelector => "sharedIPWithServiceSelector",
            Reason::MetalLbSpeakerCandidate => "metallbSpeakerCandidate",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Switches of the speaker that change decisions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `--lb-class` ("" = only Services without a class).
    pub lb_class: String,
    /// `--ignore-exclude-lb`.
    pub ignore_exclude_lb: bool,
}

/// One prefix to announce for a Service, from one BGPAdvertisement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Route {
    /// The ingress address masked to the advertisement's aggregation length.
    pub prefix: IpNet,
    /// LOCAL_PREF (iBGP peers only); `None`: unset (`localPref: 0`).
    pub local_pref: Option<u32>,
    /// Communities, sorted.
    pub communities: Vec<Community>,
    /// BGPPeer names to send it to; empty: every peer.
    pub peers: Vec<String>,
    /// The BGPAdvertisement it comes from.
    pub advertisement: String,
}

impl Route {
    /// Whether the route goes to the BGPPeer `peer`.
    pub fn goes_to(&self, peer: &str) -> bool {
        self.peers.is_empty() || self.peers.iter().any(|p| p == peer)
    }
}

/// What this node announces for a Service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Announcement {
    /// The ingress addresses.
    pub ips: Vec<IpAddr>,
    /// The pool holding them.
    pub pool: String,
    /// One route per (address, advertisement), in that order.
    pub routes: Vec<Route>,
}

impl Announcement {
    /// The BGPPeer names (of `peers`, the sessions running here) this
    /// node sends at least one route to, sorted: a ServiceBGPStatus's
    /// `status.peers`.
    pub fn peers<'a>(&self, peers: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let mut out: Vec<String> = peers
            .into_iter()
            .filter(|p| self.routes.iter().any(|r| r.goes_to(p)))
            .map(str::to_owned)
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// The decision for one Service on this node: announce (what) or not (why).
/// `svc` `None`: deleted. `slices`: the Service's EndpointSlices.
pub fn decide(
    config: &Config,
    node: &NodeFacts,
    svc: Option<&Service>,
    slices: &[std::sync::Arc<LeanSlice>],
    options: &Options,
) -> Result<Announcement, Reason> {
    let svc = svc.ok_or(Reason::ServiceDeleted)?;
    if !services::is_load_balancer(svc) {
        return Err(Reason::NotLoadBalancer);
    }
    if !services::handles_class(svc, &options.lb_class) {
        return Err(Reason::OtherLoadBalancerClass);
    }
    // Go parses an IPv4-mapped IPv6 address as the IPv4 address it maps (as in layer 2).
    let ips: Vec<IpAddr> = services::ingress_ips(svc)
        .map_err(|_| Reason::InvalidIp)?
        .into_iter()
        .map(|ip| ip.to_canonical())
        .collect();
    if ips.is_empty() {
        return Err(Reason::NoIpAllocated);
    }
    let pool = pool_for(config, &ips).ok_or(Reason::IpNotAllowed)?;
    let ads = should_announce(config, node, svc, pool, slices, options)?;
    let mut routes = Vec::with_capacity(ips.len() * ads.len());
    for ip in &ips {
        for ad in &ads {
            routes.push(route(*ip, ad));
        }
    }
    Ok(Announcement {
        ips,
        pool: pool.name.clone(),
        routes,
    })
}

/// The one pool holding every address (`poolFor`).
fn pool_for<'a>(config: &'a Config, ips: &[IpAddr]) -> Option<&'a Pool> {
    config
        .pools
        .values()
        .find(|p| ips.iter().all(|ip| p.contains(*ip)))
}

/// The BGPAdvertisements of `pool` that select this node.
fn pool_ads_on_node<'a>(
    config: &'a Config,
    pool: &'a Pool,
    node: &str,
) -> impl Iterator<Item = &'a BgpAdvertisement> {
    let node = node.to_owned();
    config
        .bgp_advertisements
        .iter()
        .filter(move |a| pool.bgp_advertisements.contains(&a.name) && a.nodes.contains(&node))
}

/// MetalLB's `ShouldAnnounce` for BGP, checks in its order: the
/// advertisements to use, or the first reason not to announce.
pub fn should_announce<'a>(
    config: &'a Config,
    node: &NodeFacts,
    svc: &Service,
    pool: &'a Pool,
    slices: &[std::sync::Arc<LeanSlice>],
    options: &Options,
) -> Result<Vec<&'a BgpAdvertisement>, Reason> {
    if pool_ads_on_node(config, pool, &node.name).next().is_none() {
        return Err(Reason::NotOwner);
    }
    let labels = svc.metadata.labels.clone().unwrap_or_default();
    let ads: Vec<&BgpAdvertisement> = pool_ads_on_node(config, pool, &node.name)
        .filter(|a| {
            a.service_selectors.is_empty() || a.service_selectors.iter().any(|s| s.matches(&labels))
        })
        .collect();
    if ads.is_empty() {
        return Err(Reason::NoMatchingAdvertisement);
    }
    for (i, a) in ads.iter().enumerate() {
        for b in &ads[i + 1..] {
            if !config::compatible_local_pref_on_node(a, b, pool) {
                return Err(Reason::ConflictingAdvertisements);
            }
        }
    }
    if node.network_unavailable {
        return Err(Reason::NodeNetworkUnavailable);
    }
    if node.excluded_from_lb && !options.ignore_exclude_lb {
        return Err(Reason::NodeLabeledExcludeBalancers);
    }
    if services::traffic_policy_local(svc)
        && !endpoints::has_serving_endpoint_on(slices, &node.name, Addresses::Required)
    {
        return Err(Reason::NoLocalEndpoints);
    }
    if !endpoints::has_serving_endpoint(slices, Addresses::Required) {
        return Err(Reason::NoEndpoints);
    }
    Ok(ads)
}

/// The route of `ip` under `ad`: the address masked to the aggregation
/// length of its family.
fn route(ip: IpAddr, ad: &BgpAdvertisement) -> Route {
    let len = match ip {
        IpAddr::V4(_) => ad.aggregation_length,
        IpAddr::V6(_) => ad.aggregation_length_v6,
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = u8::try_from(len.clamp(0, max)).unwrap_or(0);
    let prefix = IpNet::new(ip, len).map_or_else(|_| IpNet::from(ip), |n| n.trunc());
    let mut communities = ad.communities.clone();
    communities.sort();
    communities.dedup();
    Route {
        prefix,
        local_pref: (ad.local_pref != 0).then_some(ad.local_pref),
        communities,
        peers: ad.peers.clone(),
        advertisement: ad.name.clone(),
    }
}

/// What the BGPPeer `peer` is sent, from every announced Service's routes
/// (`routes`, in a stable order): one advertisement per prefix, duplicates
/// merged as MetalLB's native session does (the first LOCAL_PREF wins,
/// communities are unioned).
pub fn for_peer<'a>(
    peer: &str,
    routes: impl IntoIterator<Item = &'a Route>,
) -> Vec<bgp::rib_out::Advertisement> {
    let mut merged: BTreeMap<IpNet, (Option<u32>, Vec<Community>)> = BTreeMap::new();
    for r in routes.into_iter().filter(|r| r.goes_to(peer)) {
        let e = merged
            .entry(r.prefix)
            .or_insert_with(|| (r.local_pref, Vec::new()));
        e.1.extend(r.communities.iter().copied());
    }
    merged
        .into_iter()
        .map(|(prefix, (local_pref, mut communities))| {
            communities.sort();
            communities.dedup();
            let mut a = bgp::rib_out::Advertisement::new(prefix);
            a.local_pref = local_pref;
            for c in communities {
                match c {
                    Community::Standard(hi, lo) => {
                        a.communities.push(bgp::wire::Community::new(hi, lo))
                    }
                    Community::Large(g, l1, l2) => {
                        a.large_communities.push(bgp::wire::LargeCommunity {
                            global_admin: g,
                            local_data1: l1,
                            local_data2: l2,
                        })
                    }
                }
            }
            a
        })
        .collect()
}
