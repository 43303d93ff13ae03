//! Why a Service is (not) announced, node by node: the speaker's own
//! decisions ([`crate::decide`]) run for every Node on the same inputs the
//! speakers read (the configuration objects, the Nodes, the Service and its
//! EndpointSlices), with a hint naming the object and field to change.
//! Pure: `metallbctl explain` runs it on files or on objects read from the
//! API server.
//!
//! Both modes: BGP (what each node sends to which BGPPeer) and layer 2 (the
//! election order every speaker computes, with scores, and the interfaces).
//! Layer 2 takes the live speakers per node ([`LiveSpeakers`]): the view
//! each speaker reports of its membership (its ConfigurationState's
//! `layer2Membership`), else a set given (`metallbctl explain
//! --live-speakers`, or the Nodes whose speaker Pod is Ready), or every Node
//! (membership off, as MetalLB's "memberlist disabled"). Each node decides
//! with its own view, as its speaker does: views that differ show as two
//! nodes answering, or none.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use cluster_view::endpoints;
use cluster_view::endpoints::LeanSlice;
use cluster_view::services;
use config::Resources;
use k8s_openapi::api::core::v1::Service;
use serde::Serialize;

use crate::decide::NodeFacts;
use crate::decide::bgp::{self, Options, Reason};
use crate::decide::l2::{self, Election};
use crate::decide::sessions;
use crate::node_config;

/// The speakers each node elects with in layer 2.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveSpeakers {
    /// Per node, the view its speaker reports (empty: it elects with
    /// nobody, joining or self-fenced), with its state word.
    pub reported: BTreeMap<String, (BTreeSet<String>, String)>,
    /// For the other nodes: a set, or `None` (every Node).
    pub otherwise: Option<BTreeSet<String>>,
    /// The nodes where a MetalLB speaker runs (Ready or started; a migration): with
    /// membership on, the layer-2 Services they are candidates of are left
    /// to MetalLB ([`NodeFacts::metallb_speaker`]).
    pub metallb: BTreeSet<String>,
}

impl LiveSpeakers {
    /// Every Node is live (membership off).
    pub fn every() -> Self {
        Self::default()
    }

    /// The same set for every node.
    pub fn same(live: BTreeSet<String>) -> Self {
        LiveSpeakers {
            reported: BTreeMap::new(),
            otherwise: Some(live),
            metallb: BTreeSet::new(),
        }
    }

    /// The set `node` elects with.
    pub fn of(&self, node: &str) -> Option<&BTreeSet<String>> {
        self.reported
            .get(node)
            .map(|(v, _)| v)
            .or(self.otherwise.as_ref())
    }

    /// The distinct views of the reporting nodes, when they differ: each
    /// with the nodes that hold it (at most `max` views).
    fn disagreements(&self, max: usize) -> Vec<(BTreeSet<String>, Vec<String>)> {
        let mut by_view: BTreeMap<&BTreeSet<String>, Vec<String>> = BTreeMap::new();
        for (node, (view, _)) in &self.reported {
            // A node electing with nobody disagrees with no one: it wins nothing.
            if !view.is_empty() {
                by_view.entry(view).or_default().push(node.clone());
            }
        }
        if by_view.len() < 2 {
            return Vec::new();
        }
        by_view
            .into_iter()
            .take(max)
            .map(|(v, n)| (v.clone(), n))
            .collect()
    }
}

/// The explanation of one Service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `namespace/name`.
    pub service: String,
    /// Its ingress addresses (as written in its status).
    pub ips: Vec<String>,
    /// BGP mode, one entry per Node (sorted by name).
    pub bgp: Vec<NodeBgp>,
    /// Layer 2 mode, when an L2Advertisement selects the Service's pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub l2: Option<L2>,
    /// Combinations that leave the Service unreachable although MetalLB
    /// accepts them, each naming what to change.
    pub warnings: Vec<String>,
}

/// What one node does for the Service in BGP mode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeBgp {
    /// The Node's name.
    pub node: String,
    /// Announced or not.
    pub announced: bool,
    /// MetalLB's reason when not (`notOwner`, `noLocalEndpoints`, ...), or
    /// `configurationInvalid` when this node's configuration is refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What to change, naming the object and field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The routes sent, per BGPPeer running on this node.
    pub routes: Vec<PeerRoute>,
    /// The BGPPeers whose sessions run on this node.
    pub sessions: Vec<String>,
}

/// Layer 2: the election and what each node does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct L2 {
    /// The candidates in order (the first answers), when an election is held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub election: Option<Election>,
    /// One entry per Node (sorted by name).
    pub nodes: Vec<NodeL2>,
}

/// What one node does for the Service in layer 2 mode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeL2 {
    /// The Node's name.
    pub node: String,
    /// Answers ARP/NDP for the addresses.
    pub announced: bool,
    /// MetalLB's reason when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What to change, or who answers instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The interfaces it answers on (empty: every eligible one).
    pub interfaces: Vec<String>,
}

/// One prefix sent to one BGPPeer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerRoute {
    /// The BGPPeer's name.
    pub peer: String,
    /// The prefix.
    pub prefix: String,
    /// LOCAL_PREF (iBGP peers only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_pref: Option<u32>,
    /// Communities.
    pub communities: Vec<String>,
    /// The BGPAdvertisement it comes from.
    pub advertisement: String,
}

/// Explains `svc` (`namespace/name`; `None`: it does not exist) on every
/// Node of `resources`, with the Service's EndpointSlices `slices`; `live`:
/// the speakers each node takes part in layer-2 elections with.
pub fn service(
    resources: &Resources,
    key: &str,
    svc: Option<&Service>,
    slices: &[Arc<LeanSlice>],
    options: &Options,
    live: &LiveSpeakers,
) -> Explanation {
    let ips = svc
        .and_then(|s| s.status.as_ref()?.load_balancer.as_ref()?.ingress.clone())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|i| i.ip)
        .collect::<Vec<_>>();
    let mut nodes: Vec<_> = resources.nodes.iter().collect();
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let facts_all: BTreeMap<String, NodeFacts> = nodes
        .iter()
        .map(|n| {
            let mut f = NodeFacts::of(n);
            f.metallb_speaker = live.metallb.contains(&f.name);
            (f.name.clone(), f)
        })
        .collect();
    let mut bgp_nodes = Vec::with_capacity(nodes.len());
    let mut l2_nodes = Vec::with_capacity(nodes.len());
    let mut election = None;
    let mut l2_used = false;
    let mut bgp_used = false;
    for node in nodes {
        let facts = NodeFacts::of(node);
        let parsed = node_config::for_node(resources.clone(), node)
            .and_then(|r| config::parse(&r).map_err(|e| e.to_string()));
        let config = match parsed {
            Ok(c) => c,
            Err(e) => {
                bgp_nodes.push(NodeBgp {
                    node: facts.name,
                    announced: false,
                    reason: Some("configurationInvalid".into()),
                    hint: Some(format!(
                        "this node's speaker refuses the configuration (and keeps its last \
                         good one): {e}"
                    )),
                    routes: Vec::new(),
                    sessions: Vec::new(),
                });
                continue;
            }
        };
        let view = live.of(&facts.name);
        let d = l2::decide(
            &config,
            &facts.name,
            l2::Cluster {
                nodes: &facts_all,
                live: view,
            },
            svc,
            slices,
            options,
        );
        l2_used |= config
            .l2_advertisements
            .iter()
            .any(|a| l2_selects_pool(&config, &a.pools, &ips));
        bgp_used |= config
            .bgp_advertisements
            .iter()
            .any(|a| l2_selects_pool(&config, &a.pools, &ips));
        let mut l2_node = node_l2(&d, &config, &facts, svc, key, &ips, options);
        // The election shown: the one of a node that answers (the first
        // node's when none does).
        if election.is_none()
            || (l2_node.announced && !l2_nodes.iter().any(|n: &NodeL2| n.announced))
        {
            election = d.election.clone();
        }
        if !l2_node.announced && view.is_some_and(|l| !l.contains(&facts.name)) {
            let more = l2_node.hint.take().unwrap_or_default();
            l2_node.hint = Some(match live.reported.get(&facts.name) {
                Some((_, state)) => format!(
                    "the speaker of node {} reports its membership {state}: it answers for \
                     nothing; {more}",
                    facts.name
                ),
                None => format!(
                    "the speaker of node {} is not live (not a member of the speakers' \
                     membership): no candidate; {more}",
                    facts.name
                ),
            });
        }
        l2_nodes.push(l2_node);
        let (specs, _skipped) = sessions::sessions(&config, &facts);
        let running: Vec<String> = specs.keys().cloned().collect();
        match bgp::decide(&config, &facts, svc, slices, options) {
            Ok(ann) => {
                let mut routes = Vec::new();
                for peer in &running {
                    for r in ann.routes.iter().filter(|r| r.goes_to(peer)) {
                        routes.push(PeerRoute {
                            peer: peer.clone(),
                            prefix: r.prefix.to_string(),
                            local_pref: r.local_pref,
                            communities: r.communities.iter().map(ToString::to_string).collect(),
                            advertisement: r.advertisement.clone(),
                        });
                    }
                }
                bgp_nodes.push(NodeBgp {
                    node: facts.name,
                    announced: true,
                    reason: None,
                    hint: routes.is_empty().then(|| {
                        "announced, but to no BGPPeer: no session runs on this node for the \
                         advertisements' spec.peers (BGPPeer spec.nodeSelectors)"
                            .to_owned()
                    }),
                    routes,
                    sessions: running,
                });
            }
            Err(reason) => {
                let hint = hint(reason, &config, &facts, svc, key, &ips, options);
                bgp_nodes.push(NodeBgp {
                    node: facts.name,
                    announced: false,
                    reason: Some(reason.as_str().to_owned()),
                    hint: Some(hint),
                    routes: Vec::new(),
                    sessions: running,
                });
            }
        }
    }
    // Only the modes the Service's pool is advertised in (both when its
    // addresses are in no pool or do not parse: the reasons say so).
    let in_pool = bgp_nodes
        .iter()
        .all(|n| !matches!(n.reason.as_deref(), Some("ipNotAllowed" | "invalidIP")));
    if in_pool && !bgp_used && (l2_used || !ips.is_empty()) {
        bgp_nodes.clear();
    }
    // An externalTrafficPolicy Local Service whose endpoints run where no
    // advertisement selects: the speakers' own warning (event and condition).
    // Both judged on the whole configuration (every node's share), parsed once.
    let whole = config::parse(resources).ok();
    let local_unselected = whole.as_ref().zip(svc).and_then(|(whole, svc)| {
        crate::warnings::local_endpoints_unselected(whole, key, svc, slices)
    });
    let mut warnings: Vec<String> = local_unselected.iter().map(|w| w.message.clone()).collect();
    warnings.extend(self::warnings(&bgp_nodes, svc, key));
    // The configuration's own warnings about the Service's pool (the
    // controller's NotAnnounceable events), judged on every Node.
    let pool_warnings = whole
        .as_ref()
        .map(|c| pool_selector_warnings(c, resources, &ips))
        .unwrap_or_default();
    if in_pool && !bgp_used && !l2_used && !ips.is_empty() && pool_warnings.is_empty() {
        warnings.push(format!(
            "no L2Advertisement or BGPAdvertisement selects the IPAddressPool of Service {key} \
             (their spec.ipAddressPools / spec.ipAddressPoolSelectors): nothing announces it"
        ));
    }
    if l2_used {
        let answering: Vec<&str> = l2_nodes
            .iter()
            .filter(|n| n.announced)
            .map(|n| n.node.as_str())
            .collect();
        let views = live.disagreements(4);
        if !views.is_empty() {
            let shown: Vec<String> = views
                .iter()
                .map(|(v, n)| {
                    format!(
                        "{} see{} {}",
                        n.join(", "),
                        if n.len() == 1 { "s" } else { "" },
                        v.iter().cloned().collect::<Vec<_>>().join(", ")
                    )
                })
                .collect();
            warnings.push(format!(
                "the speakers' membership views differ ({}): a change still spreading, or \
                 speakers cut from each other; {}",
                shown.join("; "),
                match answering.as_slice() {
                    [] => format!("no node answers for Service {key}"),
                    [one] => format!("{one} answers for Service {key}"),
                    many => format!("{} all answer for Service {key}", many.join(", ")),
                }
            ));
        }
    }
    let l2 = l2_used.then_some(L2 {
        election,
        nodes: l2_nodes,
    });
    if let (Some(l2), Some(svc), None) = (&l2, svc, &local_unselected)
        && services::traffic_policy_local(svc)
        && l2
            .election
            .as_ref()
            .is_some_and(|e| e.candidates.is_empty())
    {
        warnings.push(format!(
            "Service {key} has spec.externalTrafficPolicy Local and none of the nodes with its \
             endpoints ({}) is selected by an L2Advertisement of its pool (their \
             spec.nodeSelectors) or eligible: nothing answers for it",
            endpoints::nodes_with_serving_endpoints(slices, endpoints::Addresses::NotRequired)
                .into_iter()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    for w in pool_warnings {
        if !warnings.contains(&w) {
            warnings.push(w);
        }
    }
    Explanation {
        service: key.to_owned(),
        ips,
        bgp: bgp_nodes,
        l2,
        warnings,
    }
}

/// `config::overlap`'s warnings about the pool of `ips` (or an advertisement
/// of it), on the whole configuration `config` (parsed from `resources`) and
/// every Node. An invalid configuration has none (each node's reason says so).
fn pool_selector_warnings(
    config: &config::Config,
    resources: &Resources,
    ips: &[String],
) -> Vec<String> {
    let Some(pool) = ips
        .iter()
        .filter_map(|ip| ip.parse().ok())
        .find_map(|ip| config.pool_for(ip))
    else {
        return Vec::new();
    };
    let w = config::overlap::selector_warnings(config, &resources.nodes);
    config::overlap::by_pool(config, &w)
        .remove(&pool.name)
        .unwrap_or_default()
}

/// Whether an advertisement of `pools` selects the pool of `ips`.
fn l2_selects_pool(config: &config::Config, pools: &[String], ips: &[String]) -> bool {
    let parsed: Vec<IpAddr> = ips.iter().filter_map(|i| i.parse().ok()).collect();
    config.pools.values().any(|p| {
        !parsed.is_empty()
            && parsed.iter().all(|ip| p.contains(ip.to_canonical()))
            && pools.contains(&p.name)
    })
}

fn node_l2(
    d: &l2::Decision,
    config: &config::Config,
    node: &NodeFacts,
    svc: Option<&Service>,
    key: &str,
    ips: &[String],
    options: &Options,
) -> NodeL2 {
    match &d.result {
        Ok(a) => NodeL2 {
            node: node.name.clone(),
            announced: true,
            reason: None,
            hint: None,
            interfaces: a.interfaces.names(),
        },
        Err(reason) => {
            let hint = match (reason, &d.election) {
                (Reason::NotOwner, Some(e)) => match e.winner() {
                    Some(w) => format!("node {w} wins the election and answers"),
                    None => format!(
                        "no node is a candidate for Service {key}: every node selected by its \
                         L2Advertisements is excluded (NetworkUnavailable, the exclude label) \
                         or, with externalTrafficPolicy Local, hosts no serving endpoint"
                    ),
                },
                (Reason::NotOwner, None) => format!(
                    "Service {key} has no serving endpoint anywhere (its Pods are not ready, or \
                     spec.selector matches none)"
                ),
                (Reason::NoMatchingAdvertisement, _) => format!(
                    "no L2Advertisement of the Service's pool that selects Service {key} selects \
                     node {} (their spec.nodeSelectors / spec.serviceSelectors)",
                    node.name
                ),
                (r, _) => hint(*r, config, node, svc, key, ips, options),
            };
            NodeL2 {
                node: node.name.clone(),
                announced: false,
                reason: Some(reason.as_str().to_owned()),
                hint: Some(hint),
                interfaces: Vec::new(),
            }
        }
    }
}

/// What to change for `reason`, naming the object and field.
fn hint(
    reason: Reason,
    config: &config::Config,
    node: &NodeFacts,
    svc: Option<&Service>,
    key: &str,
    ips: &[String],
    options: &Options,
) -> String {
    let pool = || {
        let parsed: Vec<IpAddr> = ips.iter().filter_map(|i| i.parse().ok()).collect();
        config
            .pools
            .values()
            .find(|p| !parsed.is_empty() && parsed.iter().all(|ip| p.contains(*ip)))
            .map(|p| p.name.clone())
            .unwrap_or_default()
    };
    match reason {
        Reason::ServiceDeleted => format!("Service {key} does not exist"),
        Reason::NotLoadBalancer => format!(
            "Service {key} spec.type is {}: only LoadBalancer Services are announced",
            svc.and_then(|s| s.spec.as_ref()?.type_.clone())
                .unwrap_or_else(|| "ClusterIP".into())
        ),
        Reason::OtherLoadBalancerClass => format!(
            "Service {key} spec.loadBalancerClass is {:?}; these speakers handle {}",
            svc.and_then(|s| s.spec.as_ref()?.load_balancer_class.clone())
                .unwrap_or_default(),
            if options.lb_class.is_empty() {
                "Services without a class (--lb-class)".to_owned()
            } else {
                format!("class {:?} (--lb-class)", options.lb_class)
            }
        ),
        Reason::NoIpAllocated => format!(
            "Service {key} status.loadBalancer.ingress is empty: the controller has not \
             assigned an address (its events on the Service and ConfigurationState \
             controller say why)"
        ),
        Reason::InvalidIp => format!(
            "Service {key} status.loadBalancer.ingress holds an address that does not parse \
             ({}): the speakers announce it nowhere until its status is fixed",
            ips.iter()
                .filter(|i| i.parse::<IpAddr>().is_err())
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Reason::IpNotAllowed => format!(
            "no single IPAddressPool holds every address of {key} ({}): check the pools' \
             spec.addresses",
            ips.join(", ")
        ),
        Reason::NotOwner => format!(
            "no BGPAdvertisement of IPAddressPool {} selects node {}: its spec.ipAddressPools \
             / spec.ipAddressPoolSelectors or spec.nodeSelectors",
            pool(),
            node.name
        ),
        Reason::NoMatchingAdvertisement => format!(
            "the BGPAdvertisements of IPAddressPool {} on node {} do not select Service {key}: \
             their spec.serviceSelectors, or the Service's labels",
            pool(),
            node.name
        ),
        Reason::ConflictingAdvertisements => format!(
            "two BGPAdvertisements of IPAddressPool {} send the same prefix with different \
             spec.localPref on node {}",
            pool(),
            node.name
        ),
        Reason::NodeNetworkUnavailable => format!(
            "Node {} has the condition NetworkUnavailable=True (status.conditions)",
            node.name
        ),
        Reason::NodeLabeledExcludeBalancers => format!(
            "Node {} has the label node.kubernetes.io/exclude-from-external-load-balancers \
             (or run the speakers with --ignore-exclude-lb)",
            node.name
        ),
        Reason::NoLocalEndpoints => format!(
            "Service {key} has spec.externalTrafficPolicy Local and none of its serving \
             endpoints (EndpointSlices) runs on node {}",
            node.name
        ),
        Reason::SharedIpWithServiceSelector => format!(
            "Service {key} shares its address (allow-shared-ip annotation) and an L2Advertisement \
             of IPAddressPool {} has spec.serviceSelectors",
            pool()
        ),
        Reason::NoEndpoints => format!(
            "Service {key} has no serving endpoint with an address (its Pods are not ready, or \
             spec.selector matches none)"
        ),
        Reason::MetalLbSpeakerCandidate => format!(
            "a MetalLB speaker Pod (image .../metallb/speaker, without the label \
             metallb-rs/component) runs on a \
             candidate node of Service {key}: MetalLB's speakers answer for it until none is \
             (a migration in progress; speaker flag --yield-to-metallb)"
        ),
    }
}

/// Service-level combinations: announcements no peer receives (nodes with
/// endpoints but no advertisement: [`crate::warnings`]).
fn warnings(nodes: &[NodeBgp], svc: Option<&Service>, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Some(svc) = svc else { return out };
    if !services::is_load_balancer(svc) {
        return out;
    }
    let announcing: Vec<&NodeBgp> = nodes.iter().filter(|n| n.announced).collect();
    if !announcing.is_empty() && announcing.iter().all(|n| n.routes.is_empty()) {
        out.push(format!(
            "Service {key} is announced by {} but to no BGPPeer: the advertisements' \
             spec.peers name no BGPPeer whose session runs on those nodes",
            announcing
                .iter()
                .map(|n| n.node.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    out
}
