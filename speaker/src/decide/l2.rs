//! Layer 2 mode: which node answers for a Service's addresses, and on which
//! interfaces (MetalLB's `layer2Controller.ShouldAnnounce`,
//! `sortL2Candidates` and `SetBalancer`, speaker.md sections 1.7, 3.1, 3.2
//! and 8). Pure: no clock, no socket, no API; every speaker computes the
//! same election from the same inputs, and so does `metallbctl explain`.
//!
//! The election is stateless: the candidates are the live speakers (all
//! known Nodes when membership is off, MetalLB's "memberlist disabled"),
//! minus nodes with `NetworkUnavailable=True`, minus nodes labelled
//! `node.kubernetes.io/exclude-from-external-load-balancers` (unless
//! `--ignore-exclude-lb`), kept only when an L2Advertisement matching the
//! Service selects them; with `externalTrafficPolicy: Local` only those
//! hosting a serving endpoint. They are ordered by the sum of the
//! `preferredNodeSelectors` weights (descending), then by
//! `sha256(node + "#" + first ingress IP)` (ascending, the IP printed as Go
//! prints it). The first one announces.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use cluster_view::endpoints::LeanSlice;
use cluster_view::endpoints::{self, Addresses};
use cluster_view::services;
use config::{Config, L2Advertisement, Pool};
use k8s_openapi::api::core::v1::Service;
use serde::{Serialize, Serializer};
use sha2::{Digest, Sha256};

use super::NodeFacts;
pub use super::bgp::{Options, Reason};

/// The annotations that let a Service share its address (the key counts,
/// whatever its value).
pub const ALLOW_SHARED_IP: [&str; 2] = [
    "metallb.io/allow-shared-ip",
    "metallb.universe.tf/allow-shared-ip",
];

/// What the election knows of the cluster.
#[derive(Clone, Copy, Debug)]
pub struct Cluster<'a> {
    /// Every known Node, by name.
    pub nodes: &'a BTreeMap<String, NodeFacts>,
    /// The live speakers; `None`: membership is off (MetalLB's "memberlist
    /// disabled"), every known Node counts as live.
    pub live: Option<&'a BTreeSet<String>>,
}

/// One candidate of an election.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    /// The node.
    pub node: String,
    /// Sum of the matching `preferredNodeSelectors` weights.
    pub score: i64,
    /// `sha256(node + "#" + ip)`, the tie-break (ascending).
    #[serde(serialize_with = "hex")]
    pub hash: [u8; 32],
    /// Its Node is known (membership off, the known Nodes are live).
    #[serde(skip)]
    pub known: bool,
}

fn hex<S: Serializer>(h: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&to_hex(h))
}

/// `h` in lower-case hexadecimal.
pub fn to_hex(h: &[u8]) -> String {
    use std::fmt::Write;
    h.iter()
        .fold(String::with_capacity(h.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The ordered candidates of a Service: the first one announces, the
/// second takes over if the first goes away (and nothing else changes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Election {
    /// The address the hash is computed on (the first ingress IP, as Go
    /// prints it).
    pub ip: String,
    /// The candidates, winner first.
    pub candidates: Vec<Candidate>,
}

impl Election {
    /// The winner, if any.
    pub fn winner(&self) -> Option<&str> {
        self.candidates.first().map(|c| c.node.as_str())
    }

    /// The candidate right after `node` (who takes over when `node` goes).
    pub fn next_after(&self, node: &str) -> Option<&str> {
        let i = self.candidates.iter().position(|c| c.node == node)?;
        self.candidates.get(i + 1).map(|c| c.node.as_str())
    }
}

/// The interfaces an address is announced on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind", content = "names")]
pub enum Interfaces {
    /// Every eligible interface (an advertisement without `interfaces`).
    All,
    /// Only these (the union of the advertisements' lists), sorted.
    Only(BTreeSet<String>),
}

impl Interfaces {
    /// The names, sorted; empty for [`Interfaces::All`] (ServiceL2Status
    /// leaves `interfaces` out then).
    pub fn names(&self) -> Vec<String> {
        match self {
            Interfaces::All => Vec::new(),
            Interfaces::Only(s) => s.iter().cloned().collect(),
        }
    }
}

/// What this node announces for a Service (it won the election).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Announcement {
    /// The ingress addresses.
    pub ips: Vec<IpAddr>,
    /// The pool holding them.
    pub pool: String,
    /// Where to answer for them (the advertisements matching the Service
    /// and this node).
    pub interfaces: Interfaces,
}

/// The layer-2 decision for one Service on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// The election, when it was held (every check before it passed).
    pub election: Option<Election>,
    /// Announce (what), or why not.
    #[serde(serialize_with = "result")]
    pub result: Result<Announcement, Reason>,
}

fn result<S: Serializer>(r: &Result<Announcement, Reason>, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    enum R<'a> {
        Announce(&'a Announcement),
        Withdraw(&'a str),
    }
    match r {
        Ok(a) => R::Announce(a).serialize(s),
        Err(e) => R::Withdraw(e.as_str()).serialize(s),
    }
}

impl Decision {
    fn withdraw(reason: Reason) -> Self {
        Decision {
            election: None,
            result: Err(reason),
        }
    }
}

/// The decision for the Service `svc` (`None`: deleted) on the node `me`.
/// `slices`: the Service's EndpointSlices. Checks in MetalLB's order
/// (speaker.md 1.7 then 3.1). The same as [`prepare`] then
/// [`Prepared::decide`].
pub fn decide(
    config: &Config,
    me: &str,
    cluster: Cluster<'_>,
    svc: Option<&Service>,
    slices: &[Arc<LeanSlice>],
    options: &Options,
) -> Decision {
    match prepare(config, me, cluster.nodes, svc, slices, options) {
        Ok(p) => p.decide(me, cluster.live),
        Err(reason) => Decision::withdraw(reason),
    }
}

/// A Service's election before the live speakers are known: every check
/// that does not depend on them passed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// Every candidate whatever its liveness (the known Nodes and the nodes
    /// the advertisements select), in election order: the election among
    /// any live set is this order with the nodes not live left out.
    pub order: Election,
    /// What `me` announces if it wins.
    pub if_won: Announcement,
    /// The candidates that run a MetalLB speaker
    /// ([`NodeFacts::metallb_speaker`]), in election order. With
    /// membership on, any of them leaves the Service to MetalLB's
    /// speakers: they elect among themselves, not seeing this
    /// implementation's, and one of them answers while any is a
    /// candidate. With membership off both implementations elect among
    /// every known Node alike (the same winner), so nobody yields.
    pub metallb: Vec<String>,
}

impl Prepared {
    /// The decision when `live` are the live speakers (`None`: membership
    /// off, the known Nodes of `nodes` count).
    pub fn decide(self, me: &str, live: Option<&BTreeSet<String>>) -> Decision {
        let Prepared {
            order,
            if_won,
            metallb,
        } = self;
        let election = Election {
            ip: order.ip,
            candidates: order
                .candidates
                .into_iter()
                .filter(|c| match live {
                    Some(l) => l.contains(&c.node),
                    None => c.known,
                })
                .collect(),
        };
        let result = if live.is_some() && !metallb.is_empty() {
            Err(Reason::MetalLbSpeakerCandidate)
        } else if election.winner() == Some(me) {
            Ok(if_won)
        } else {
            Err(Reason::NotOwner)
        };
        Decision {
            election: Some(election),
            result,
        }
    }
}

/// The checks of [`decide`] that do not depend on the live speakers, and
/// the election order among every node that could be live; `Err`: the
/// Service is withdrawn whoever is live.
pub fn prepare(
    config: &Config,
    me: &str,
    nodes: &BTreeMap<String, NodeFacts>,
    svc: Option<&Service>,
    slices: &[Arc<LeanSlice>],
    options: &Options,
) -> Result<Prepared, Reason> {
    let Some(svc) = svc else {
        return Err(Reason::ServiceDeleted);
    };
    if !services::is_load_balancer(svc) {
        return Err(Reason::NotLoadBalancer);
    }
    if !services::handles_class(svc, &options.lb_class) {
        return Err(Reason::OtherLoadBalancerClass);
    }
    // Go parses an IPv4-mapped IPv6 address as the IPv4 address it maps
    // (in the pool check, the hash and the ARP answers alike).
    let ips: Vec<IpAddr> = match services::ingress_ips(svc) {
        Ok(ips) => ips.into_iter().map(|ip| ip.to_canonical()).collect(),
        Err(_) => return Err(Reason::InvalidIp),
    };
    let Some(first) = ips.first().copied() else {
        return Err(Reason::NoIpAllocated);
    };
    let Some(pool) = config
        .pools
        .values()
        .find(|p| ips.iter().all(|ip| p.contains(*ip)))
    else {
        return Err(Reason::IpNotAllowed);
    };
    if !endpoints::has_serving_endpoint(slices, Addresses::NotRequired) {
        return Err(Reason::NotOwner);
    }
    let ads = ads_for_service(config, pool, svc);
    if shares_ip(svc) && ads.iter().any(|a| !a.service_selectors.is_empty()) {
        return Err(Reason::SharedIpWithServiceSelector);
    }
    if !ads.iter().any(|a| a.nodes.contains(me)) {
        return Err(Reason::NoMatchingAdvertisement);
    }
    // Every node that may be live: the known ones, and those the
    // advertisements select (a live speaker without a known Node).
    let mut universe: BTreeSet<&str> = nodes.keys().map(String::as_str).collect();
    universe.extend(ads.iter().flat_map(|a| a.nodes.iter().map(String::as_str)));
    let order = order(&ads, universe, nodes, svc, slices, first, options);
    let metallb = order
        .candidates
        .iter()
        .filter(|c| nodes.get(&c.node).is_some_and(|f| f.metallb_speaker))
        .map(|c| c.node.clone())
        .collect();
    Ok(Prepared {
        order,
        metallb,
        if_won: Announcement {
            ips,
            pool: pool.name.clone(),
            interfaces: interfaces(&ads, me),
        },
    })
}

/// Whether the Service carries an `allow-shared-ip` annotation.
pub fn shares_ip(svc: &Service) -> bool {
    svc.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| ALLOW_SHARED_IP.iter().any(|k| a.contains_key(*k)))
}

/// The L2Advertisements of `pool` that select the Service (no
/// serviceSelectors, or one matching its labels), whatever nodes they
/// select (`l2AdsForService`).
pub fn ads_for_service<'a>(
    config: &'a Config,
    pool: &Pool,
    svc: &Service,
) -> Vec<&'a L2Advertisement> {
    let empty = BTreeMap::new();
    let labels = svc.metadata.labels.as_ref().unwrap_or(&empty);
    config
        .l2_advertisements
        .iter()
        .filter(|a| pool.l2_advertisements.contains(&a.name))
        .filter(|a| {
            a.service_selectors.is_empty() || a.service_selectors.iter().any(|s| s.matches(labels))
        })
        .collect()
}

/// The ordered candidates among the live speakers for a Service whose
/// matching advertisements are `ads` and whose first address is `ip`.
pub fn elect(
    ads: &[&L2Advertisement],
    cluster: Cluster<'_>,
    svc: &Service,
    slices: &[Arc<LeanSlice>],
    ip: IpAddr,
    options: &Options,
) -> Election {
    let live: BTreeSet<&str> = match cluster.live {
        Some(l) => l.iter().map(String::as_str).collect(),
        None => cluster.nodes.keys().map(String::as_str).collect(),
    };
    order(ads, live, cluster.nodes, svc, slices, ip, options)
}

/// The ordered candidates among `universe`.
fn order(
    ads: &[&L2Advertisement],
    universe: BTreeSet<&str>,
    known: &BTreeMap<String, NodeFacts>,
    svc: &Service,
    slices: &[Arc<LeanSlice>],
    ip: IpAddr,
    options: &Options,
) -> Election {
    let mut nodes: BTreeSet<&str> = universe
        .into_iter()
        .filter(|n| match known.get(*n) {
            // A live speaker without a known Node is not excluded here (the
            // advertisements' node sets hold known Nodes only).
            None => true,
            Some(f) => !f.network_unavailable && (options.ignore_exclude_lb || !f.excluded_from_lb),
        })
        .filter(|n| ads.iter().any(|a| a.nodes.contains(*n)))
        .collect();
    if services::traffic_policy_local(svc) {
        let serving = endpoints::nodes_with_serving_endpoints(slices, Addresses::NotRequired);
        nodes.retain(|n| serving.contains(*n));
    }
    let ip = config::gofmt::ip(ip);
    let mut keyed: Vec<(i64, [u8; 32], &str)> = nodes
        .into_iter()
        .map(|n| {
            let mut h = Sha256::new();
            h.update(n.as_bytes());
            h.update(b"#");
            h.update(ip.as_bytes());
            (score(ads, n, known.get(n)), h.finalize().into(), n)
        })
        .collect();
    keyed.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let candidates = keyed
        .into_iter()
        .map(|(score, hash, node)| Candidate {
            node: node.to_owned(),
            score,
            hash,
            known: known.contains_key(node),
        })
        .collect();
    Election { ip, candidates }
}

/// The preference of `node`: the weights of every matching
/// `preferredNodeSelectors` entry of every advertisement selecting it.
fn score(ads: &[&L2Advertisement], node: &str, facts: Option<&NodeFacts>) -> i64 {
    let Some(facts) = facts else {
        return 0;
    };
    ads.iter()
        .filter(|a| a.nodes.contains(node))
        .flat_map(|a| a.preferred_node_selectors.iter())
        .filter(|p| p.selector.matches(&facts.labels))
        .map(|p| i64::from(p.weight))
        .sum()
}

/// The interfaces of the advertisements matching the Service and selecting
/// `me`: all when one of them names none, else the union of their lists
/// (`ipAdvertisementFor`).
pub fn interfaces(ads: &[&L2Advertisement], me: &str) -> Interfaces {
    let mine = ads.iter().filter(|a| a.nodes.contains(me));
    let mut names = BTreeSet::new();
    for a in mine {
        if a.interfaces.is_empty() {
            return Interfaces::All;
        }
        names.extend(a.interfaces.iter().cloned());
    }
    Interfaces::Only(names)
}
