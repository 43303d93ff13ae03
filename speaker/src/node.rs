//! The speaker of one node, without its I/O: the configuration in force
//! (last good kept), the own Node, the decision per Service, the BGP
//! sessions and routes ([`BgpSpeaker`]), and what to tell the cluster
//! (ServiceBGPStatus objects, `metallb_speaker_announced`, `nodeAssigned`
//! events, BGPSessionStatus objects); the layer-2 election and claims
//! ([`L2Speaker`]: ServiceL2Status, `announceFailed`). The daemon feeds it
//! watch changes, the live speakers ([`NodeSpeaker::set_live`]) and session
//! events and carries out [`Effects`]; tests drive it with fakes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use cluster_view::endpoints::LeanSlice;
use config::Config;
use k8s_openapi::api::core::v1::Service;

use crate::bgp_speaker::{BfdOps, BgpSpeaker, Closing, SessionFactory};
use crate::bgp_status::Summary;
use crate::config_state::{ConfigTracker, Loaded};
use crate::decide::NodeFacts;
use crate::decide::bgp::{self, Options, Reason};
use crate::decide::l2;
use crate::decide::sessions;
use crate::l2_speaker::{L2Ops, L2Speaker, NoL2};

/// What one Service is on this node (BGP).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announced {
    /// Its ingress addresses.
    pub ips: Vec<IpAddr>,
    /// BGPPeer names it is sent to (sorted).
    pub peers: Vec<String>,
}

/// What the daemon must carry out after a step.
#[derive(Debug, Default, PartialEq)]
pub struct Effects {
    /// ServiceBGPStatus per Service key: `Some(peers)` to write, `None` to
    /// delete.
    pub service_status: BTreeMap<String, Option<Vec<String>>>,
    /// `metallb_speaker_announced{service, protocol="bgp", node, ip}`: set
    /// to 1 (`true`) or deleted (`false`).
    pub announced_metric: Vec<(String, IpAddr, bool)>,
    /// Services that became announced: the `nodeAssigned` event.
    pub node_assigned: Vec<String>,
    /// ServiceL2Status per Service key: `Some(interfaces)` to write (sorted;
    /// empty: all), `None` to delete.
    pub l2_status: BTreeMap<String, Option<Vec<String>>>,
    /// `metallb_speaker_announced{service, protocol="layer2", node, ip}`.
    pub l2_announced_metric: Vec<(String, IpAddr, bool)>,
    /// Services that became announced in layer 2 (`nodeAssigned`).
    pub l2_node_assigned: Vec<String>,
    /// Addresses whose interfaces do not exist here (`announceFailed`).
    pub announce_failed: Vec<(String, IpAddr)>,
}

impl Effects {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.service_status.is_empty()
            && self.announced_metric.is_empty()
            && self.node_assigned.is_empty()
            && self.l2_status.is_empty()
            && self.l2_announced_metric.is_empty()
            && self.l2_node_assigned.is_empty()
            && self.announce_failed.is_empty()
    }
}

/// Which speakers send a BGP Service's `nodeAssigned` event
/// (`--bgp-node-assigned-events`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AssignedEvents {
    /// One per Service transition: only the first announcing node in the
    /// `sha256(node#ip)` order (layer 2's tie-break, computed alike by every
    /// speaker from the whole configuration), and none for the Services
    /// already announced when the speaker (re)starts.
    #[default]
    One,
    /// Every announcing node, also after a restart (MetalLB).
    Every,
}

/// The speaker of one node.
pub struct NodeSpeaker<F: SessionFactory, B: BfdOps, L: L2Ops = NoL2> {
    options: Options,
    tracker: ConfigTracker,
    facts: Option<NodeFacts>,
    bgp: BgpSpeaker<F, B>,
    announced: BTreeMap<String, Announced>,
    /// Every known Node (the layer-2 candidates).
    nodes: BTreeMap<String, NodeFacts>,
    /// The live speakers; `None`: membership off (every known Node).
    live: Option<BTreeSet<String>>,
    l2: L2Speaker<L>,
    /// Layer 2, per Service key: the owner this node takes over from if it
    /// goes (this node is next in the Service's election).
    succeeds: BTreeMap<String, String>,
    effects: Effects,
    /// The latest configuration was refused: a Service announced from here has an
    /// address in none of its pools.
    refused: bool,
    /// What a NodeBGPStatus of this node says (`--service-bgp-status=summary`).
    summary: Summary,
    assigned: AssignedEvents,
    /// The whole configuration (every node's share): who else announces.
    whole: Option<Config>,
    /// Before the first full pass: no `nodeAssigned` (the Services were
    /// announced before the restart) with [`AssignedEvents::One`].
    initial_pass: bool,
    /// Node names interned for [`L2Cached::order`].
    names: Names,
    /// Layer 2, per Service key that held an election: its candidates in
    /// election order whatever their liveness, so that a change of the live
    /// speakers decides it again without the configuration, the hashes or
    /// the Service ([`NodeSpeaker::decide_live`]).
    l2_cache: BTreeMap<String, L2Cached>,
    /// How much of each election order [`NodeSpeaker::l2_cache`] keeps.
    l2_prefix: OrderPrefix,
    /// The nodes that joined or left since the last
    /// [`NodeSpeaker::decide_live`] (`All`: membership turned on or off).
    live_changed: Option<LiveChanged>,
}

/// Node names as small numbers (one per name ever seen in an election).
#[derive(Default)]
struct Names {
    names: Vec<String>,
    ids: std::collections::HashMap<String, u32>,
}

impl Names {
    fn id(&mut self, name: &str) -> u32 {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = u32::try_from(self.names.len()).expect("fewer than 2^32 node names");
        self.names.push(name.to_owned());
        self.ids.insert(name.to_owned(), id);
        id
    }

    fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }
}

/// How much of a layer-2 Service's election order is cached: its first
/// candidates, at least `min_len` of them and on until `min_live` of them
/// are live (or the order ends). Whoever is live, the winner and the next
/// are the first two live candidates of the whole order; while two of the
/// prefix are live they are the prefix's, so a change of a node outside the
/// prefix changes nothing. When fewer than two of a cut prefix are left
/// live, the Service is decided again in full (and cached anew).
///
/// 5,000 candidates for each of 10,000 Services would hold 200 MB; a prefix
/// of 16 holds 640 KB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrderPrefix {
    /// Candidates kept at least.
    pub min_len: usize,
    /// Live candidates kept at least (2 at least: the winner and the next).
    pub min_live: usize,
}

impl Default for OrderPrefix {
    /// 16 candidates and 8 live ones: with half of the nodes lost at once,
    /// about 1 Service in 30 has fewer than 2 of its 8 live left and is
    /// decided again in full.
    fn default() -> Self {
        OrderPrefix {
            min_len: 16,
            min_live: 8,
        }
    }
}

/// A layer-2 Service's election, cached.
struct L2Cached {
    /// The first candidates whatever their liveness, in election order
    /// ([`l2::Prepared::order`]), as [`Names`] ids ([`OrderPrefix`]).
    order: Box<[u32]>,
    /// The whole order is longer than [`L2Cached::order`].
    cut: bool,
    /// What this node announces if it wins.
    if_won: l2::Announcement,
    /// The winner and the next candidate among the live speakers, as last
    /// applied.
    elected: (Option<u32>, Option<u32>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum LiveChanged {
    All,
    Nodes(BTreeSet<String>),
}

/// A layer-2 decision made again after a change of the live speakers
/// ([`NodeSpeaker::decide_live`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveDecided {
    /// The Service.
    pub key: String,
    /// Announced from this node in layer 2, or why not.
    pub result: Result<(), Reason>,
    /// Whether what this node announces for it changed.
    pub changed: bool,
}

/// A cached election order cut too short to tell the winner and the next
/// among the live speakers.
struct CutShort;

/// What applying a layer-2 result did.
struct L2Applied {
    result: Result<(), Reason>,
    changed: bool,
}

/// The decision for one Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decided {
    /// Announced, or why not.
    pub result: Result<(), Reason>,
    /// Whether what this node announces for it changed (addresses or peers).
    pub changed: bool,
    /// Layer 2: announced from this node, or why not.
    pub l2: Result<(), Reason>,
    /// Whether what this node announces in layer 2 for it changed (started,
    /// ended, or addresses).
    pub l2_changed: bool,
}

/// The outcome of [`NodeSpeaker::load`].
pub struct LoadOutcome {
    /// What happened to the configuration.
    pub loaded: Loaded,
    /// Every Service must be decided again (new configuration or node).
    pub reprocess_all: bool,
    /// Sessions ended by the change (to await or spawn).
    pub closing: Vec<Closing>,
    /// BGPPeers selected for this node that cannot run (name, why).
    pub skipped: Vec<sessions::Skipped>,
}

impl<F: SessionFactory, B: BfdOps> NodeSpeaker<F, B, NoL2> {
    /// A speaker with no configuration yet (and no layer-2 responder: see
    /// [`NodeSpeaker::with_l2`]).
    pub fn new(options: Options, bgp: BgpSpeaker<F, B>) -> Self {
        Self {
            options,
            tracker: ConfigTracker::new(),
            facts: None,
            bgp,
            announced: BTreeMap::new(),
            nodes: BTreeMap::new(),
            live: None,
            l2: L2Speaker::new(NoL2),
            succeeds: BTreeMap::new(),
            effects: Effects::default(),
            refused: false,
            summary: Summary::default(),
            // the daemon's default is `One` (its flag); tests and MetalLB: every node
            assigned: AssignedEvents::Every,
            whole: None,
            initial_pass: true,
            names: Names::default(),
            l2_cache: BTreeMap::new(),
            l2_prefix: OrderPrefix::default(),
            live_changed: None,
        }
    }

    /// The same speaker, answering layer 2 through `ops` (before any
    /// Service is decided).
    pub fn with_l2<L: L2Ops>(self, ops: L) -> NodeSpeaker<F, B, L> {
        NodeSpeaker {
            options: self.options,
            tracker: self.tracker,
            facts: self.facts,
            bgp: self.bgp,
            announced: self.announced,
            nodes: self.nodes,
            live: self.live,
            l2: L2Speaker::new(ops),
            succeeds: self.succeeds,
            effects: self.effects,
            refused: self.refused,
            summary: self.summary,
            assigned: self.assigned,
            whole: self.whole,
            initial_pass: self.initial_pass,
            names: self.names,
            l2_cache: self.l2_cache,
            l2_prefix: self.l2_prefix,
            live_changed: self.live_changed,
        }
    }
}

impl<F: SessionFactory, B: BfdOps, L: L2Ops> NodeSpeaker<F, B, L> {
    /// Every known Node (the layer-2 candidates). Returns whether something
    /// the election reads changed (then every Service must be decided
    /// again).
    pub fn set_nodes(&mut self, nodes: BTreeMap<String, NodeFacts>) -> bool {
        if self.nodes == nodes {
            return false;
        }
        self.nodes = nodes;
        true
    }

    /// The live speakers, from the membership protocol (`None`: membership
    /// off, every known Node counts, MetalLB's "memberlist disabled").
    /// Returns whether it changed (then [`NodeSpeaker::decide_live`]
    /// decides again the layer-2 Services it may change).
    pub fn set_live(&mut self, live: Option<BTreeSet<String>>) -> bool {
        if self.live == live {
            return false;
        }
        let changed = match (&self.live, &live) {
            (Some(old), Some(new)) => {
                LiveChanged::Nodes(old.symmetric_difference(new).cloned().collect())
            }
            _ => LiveChanged::All,
        };
        self.live_changed = Some(match (self.live_changed.take(), changed) {
            (Some(LiveChanged::Nodes(mut a)), LiveChanged::Nodes(b)) => {
                a.extend(b);
                LiveChanged::Nodes(a)
            }
            (None, c) => c,
            _ => LiveChanged::All,
        });
        self.live = live;
        true
    }

    /// The live speakers in force (`None`: membership off).
    pub fn live(&self) -> Option<&BTreeSet<String>> {
        self.live.as_ref()
    }

    /// Decides again, after changes of the live speakers
    /// ([`NodeSpeaker::set_live`]), the layer-2 Services whose candidates
    /// include a node that joined or left: those whose winner is no longer
    /// live first, then the others, each from its cached election order
    /// (no hash, no configuration or Service read; the result is the one
    /// [`NodeSpeaker::service`] would give). A Service whose cached prefix
    /// of candidates ([`OrderPrefix`]) has fewer than two live left is
    /// decided in full, with its Service and EndpointSlices from `lookup`.
    /// Returns them in that order. Call [`NodeSpeaker::publish`] and take
    /// the effects after it, as after [`NodeSpeaker::service`].
    pub fn decide_live<S>(&mut self, mut lookup: S) -> Vec<LiveDecided>
    where
        S: FnMut(&str) -> (Option<Arc<Service>>, Vec<Arc<LeanSlice>>),
    {
        let Some(changed) = self.live_changed.take() else {
            return Vec::new();
        };
        if self.tracker.running().is_none() || self.facts.is_none() {
            return Vec::new();
        }
        // The changed nodes by id (names never seen in an election are in
        // no order).
        let changed: Option<Vec<bool>> = match &changed {
            LiveChanged::All => None,
            LiveChanged::Nodes(n) => {
                let mut by_id = vec![false; self.names.names.len()];
                for id in n.iter().filter_map(|n| self.names.ids.get(n)) {
                    by_id[*id as usize] = true;
                }
                if !by_id.contains(&true) {
                    return Vec::new();
                }
                Some(by_id)
            }
        };
        // The Services whose winner is gone first (the takeovers), before
        // the scan of every cached order for the others.
        let first: Vec<String> = self
            .l2_cache
            .iter()
            .filter(|(_, c)| c.elected.0.is_some_and(|w| !self.is_live(w)))
            .map(|(k, _)| k.clone())
            .collect();
        let mut decided: Vec<LiveDecided> = first
            .iter()
            .map(|key| self.live_decided(key, &mut lookup))
            .collect();
        let first: BTreeSet<String> = first.into_iter().collect();
        let rest: Vec<String> = self
            .l2_cache
            .iter()
            .filter(|(k, c)| {
                !first.contains(*k)
                    && match &changed {
                        None => true,
                        Some(by_id) => c.order.iter().any(|i| by_id[*i as usize]),
                    }
            })
            .map(|(k, _)| k.clone())
            .collect();
        decided.extend(rest.iter().map(|key| self.live_decided(key, &mut lookup)));
        decided
    }

    fn live_decided<S>(&mut self, key: &str, lookup: &mut S) -> LiveDecided
    where
        S: FnMut(&str) -> (Option<Arc<Service>>, Vec<Arc<LeanSlice>>),
    {
        let (result, changed) = match self.redecide_cached(key, false).expect("cached") {
            Ok(a) => (a.result, a.changed),
            Err(CutShort) => {
                let (svc, slices) = lookup(key);
                let d = self
                    .service(key, svc.as_deref(), &slices)
                    .expect("decided from a cache, so configured");
                (d.l2, d.l2_changed)
            }
        };
        LiveDecided {
            key: key.to_owned(),
            result,
            changed,
        }
    }

    /// How much of each layer-2 election order is cached from now on
    /// (`min_live` at least 2).
    pub fn set_l2_order_prefix(&mut self, prefix: OrderPrefix) {
        self.l2_prefix = OrderPrefix {
            min_len: prefix.min_len,
            min_live: prefix.min_live.max(2),
        };
    }

    /// Every Service was decided with the live speakers in force (a full
    /// pass): nothing is left for [`NodeSpeaker::decide_live`].
    pub fn decide_live_done(&mut self) {
        self.live_changed = None;
    }

    /// How many layer-2 elections are cached, and how many candidates they
    /// hold in all.
    pub fn l2_cached(&self) -> (usize, usize) {
        (
            self.l2_cache.len(),
            self.l2_cache.values().map(|c| c.order.len()).sum(),
        )
    }

    fn is_live(&self, id: u32) -> bool {
        let name = self.names.name(id);
        match &self.live {
            Some(l) => l.contains(name),
            None => self.nodes.contains_key(name),
        }
    }

    /// The Service `key`'s layer-2 result from its cached order and the live
    /// speakers, applied (`force`: even when its winner and next did not
    /// change). `None`: not cached; `Err`: its cached prefix is too short to
    /// tell (decide it in full).
    fn redecide_cached(&mut self, key: &str, force: bool) -> Option<Result<L2Applied, CutShort>> {
        let me = self.facts.as_ref()?.name.clone();
        let c = self.l2_cache.get(key)?;
        let mut live = c.order.iter().copied().filter(|i| self.is_live(*i));
        let elected = (live.next(), live.next());
        if c.cut && elected.1.is_none() {
            return Some(Err(CutShort));
        }
        if !force && elected == c.elected {
            let won = elected.0.is_some_and(|w| self.names.name(w) == me);
            return Some(Ok(L2Applied {
                result: if won { Ok(()) } else { Err(Reason::NotOwner) },
                changed: false,
            }));
        }
        let (winner, next) = (
            elected.0.map(|i| self.names.name(i).to_owned()),
            elected.1.map(|i| self.names.name(i)),
        );
        let successor_of = winner
            .as_ref()
            .filter(|w| **w != me && next == Some(me.as_str()))
            .cloned();
        let won = winner.as_deref() == Some(me.as_str());
        let c = self.l2_cache.get_mut(key)?;
        c.elected = elected;
        let announce = if won {
            Ok(c.if_won.clone())
        } else {
            Err(Reason::NotOwner)
        };
        Some(Ok(self.apply_l2(key, announce, successor_of)))
    }

    /// Applies a layer-2 result: who this node succeeds, the claims and the
    /// effects.
    fn apply_l2(
        &mut self,
        key: &str,
        result: Result<l2::Announcement, Reason>,
        successor_of: Option<String>,
    ) -> L2Applied {
        match successor_of {
            Some(owner) => {
                self.succeeds.insert(key.to_owned(), owner);
            }
            None => {
                self.succeeds.remove(key);
            }
        }
        let l2_change = self.l2.set_service(key, result.as_ref().ok());
        let changed = l2_change.assigned || l2_change.metric.iter().any(|(_, on)| !on);
        if let Some(status) = l2_change.status {
            self.effects.l2_status.insert(key.to_owned(), status);
        }
        for (ip, on) in l2_change.metric {
            self.effects
                .l2_announced_metric
                .push((key.to_owned(), ip, on));
        }
        if l2_change.assigned {
            self.effects.l2_node_assigned.push(key.to_owned());
        }
        for ip in l2_change.failed {
            self.effects.announce_failed.push((key.to_owned(), ip));
        }
        L2Applied {
            result: result.map(|_| ()),
            changed,
        }
    }

    /// The owners this node would take layer-2 addresses over from (it is
    /// next after them in some Service's election): the membership
    /// protocol's fast path watches them.
    pub fn watched_owners(&self) -> BTreeSet<String> {
        self.succeeds.values().cloned().collect()
    }

    /// The layer-2 half.
    pub fn l2(&mut self) -> &mut L2Speaker<L> {
        &mut self.l2
    }

    /// Takes the latest configuration (parsed for this node) and the own
    /// Node. An invalid one leaves everything as it is.
    pub fn load(&mut self, parsed: Result<Config, String>, node: NodeFacts) -> LoadOutcome {
        // MetalLB's `SetConfig`: a configuration under which a Service announced from
        // here has an address in no pool is refused (the running one stays, the error
        // is reported, and it is tried again later), rather than withdrawing the
        // Service for as long as a pool is being replaced.
        self.refused = false;
        let parsed = parsed.and_then(|cfg| match self.orphaned(&cfg) {
            Some((key, ip)) => Err({
                self.refused = true;
                format!(
                    "service {key} has no configuration under new config: its address {ip} is in no IPAddressPool (the running configuration is kept)"
                )
            }),
            None => Ok(cfg),
        });
        let loaded = self.tracker.load(parsed);
        let node_changed = self.facts.as_ref() != Some(&node);
        let sessions_changed =
            node_changed && self.facts.as_ref().is_none_or(|f| f.labels != node.labels);
        self.facts = Some(node);
        let mut closing = Vec::new();
        let mut skipped = Vec::new();
        let apply =
            matches!(loaded, Loaded::Accepted) || (sessions_changed && self.tracker.loaded());
        if apply && let (Some(cfg), Some(facts)) = (self.tracker.running(), self.facts.as_ref()) {
            let (specs, s) = sessions::sessions(cfg, facts);
            closing = self.bgp.set_sessions(specs);
            self.bgp
                .set_unrunnable(s.iter().map(|k| (k.peer.clone(), k.why.clone())));
            skipped = s;
        }
        let reprocess_all =
            self.tracker.loaded() && (matches!(loaded, Loaded::Accepted) || node_changed);
        LoadOutcome {
            loaded,
            reprocess_all,
            closing,
            skipped,
        }
    }

    /// The first Service announced from here (key, address) whose address is in no pool
    /// of `cfg`.
    fn orphaned(&self, cfg: &Config) -> Option<(String, IpAddr)> {
        let in_no_pool = |ip: &IpAddr| !cfg.pools.values().any(|p| p.contains(*ip));
        self.announced
            .iter()
            .flat_map(|(k, a)| a.ips.iter().map(move |ip| (k.as_str(), *ip)))
            .chain(self.l2.announced_ips())
            .find(|(_, ip)| in_no_pool(ip))
            .map(|(k, ip)| (k.to_owned(), ip))
    }

    /// Whether the latest configuration was refused because a Service announced from
    /// here has an address in no pool of it: worth loading again once Services change.
    pub fn refused_for_announced(&self) -> bool {
        self.refused
    }

    /// The configuration in force.
    pub fn config(&self) -> Option<&Config> {
        self.tracker.running()
    }

    /// The configuration tracker (loaded / stale).
    pub fn tracker(&self) -> &ConfigTracker {
        &self.tracker
    }

    /// Decides the Service `key` again (`svc` `None`: deleted). Nothing
    /// happens before the first valid configuration and the own Node.
    /// Returns the decision (for the log). Call [`NodeSpeaker::publish`]
    /// after a batch.
    pub fn service(
        &mut self,
        key: &str,
        svc: Option<&Service>,
        slices: &[Arc<LeanSlice>],
    ) -> Option<Decided> {
        let (Some(cfg), Some(facts)) = (self.tracker.running(), self.facts.as_ref()) else {
            return None;
        };
        let prepared = l2::prepare(cfg, &facts.name, &self.nodes, svc, slices, &self.options);
        let l2_result = match prepared {
            Err(reason) => {
                self.l2_cache.remove(key);
                self.apply_l2(key, Err(reason), None)
            }
            Ok(p) if !p.metallb.is_empty() => {
                // A MetalLB speaker is a candidate (a migration): decided in
                // full and not cached, as whether this node yields does not
                // depend on the live speakers (Node changes decide it again).
                self.l2_cache.remove(key);
                let me = facts.name.clone();
                let d = p.decide(&me, self.live.as_ref());
                let successor_of = match (&d.result, &d.election) {
                    (Err(Reason::NotOwner), Some(e)) => e
                        .winner()
                        .filter(|w| e.next_after(w) == Some(me.as_str()))
                        .map(str::to_owned),
                    _ => None,
                };
                self.apply_l2(key, d.result, successor_of)
            }
            Ok(p) => {
                // The prefix: `min_len` candidates, then on until `min_live`
                // of them are live.
                let all = p.order.candidates.len();
                let mut order = Vec::with_capacity(all.min(self.l2_prefix.min_len));
                let mut live = 0;
                for c in &p.order.candidates {
                    if order.len() >= self.l2_prefix.min_len && live >= self.l2_prefix.min_live {
                        break;
                    }
                    let id = self.names.id(&c.node);
                    live += usize::from(self.is_live(id));
                    order.push(id);
                }
                let cached = L2Cached {
                    cut: order.len() < all,
                    order: order.into_boxed_slice(),
                    if_won: p.if_won,
                    elected: (None, None),
                };
                self.l2_cache.insert(key.to_owned(), cached);
                match self.redecide_cached(key, true).expect("just cached") {
                    Ok(a) => a,
                    Err(CutShort) => unreachable!("a cut prefix holds two live candidates"),
                }
            }
        };
        let (Some(cfg), Some(facts)) = (self.tracker.running(), self.facts.as_ref()) else {
            unreachable!("checked above");
        };
        let decision = bgp::decide(cfg, facts, svc, slices, &self.options);
        let (routes, now) = match &decision {
            Ok(a) => (
                Some(a.routes.clone()),
                Some(Announced {
                    ips: a.ips.clone(),
                    peers: a.peers(self.bgp.peers()),
                }),
            ),
            Err(_) => (None, None),
        };
        self.bgp.set_service(key, routes);
        self.summary.service(
            key,
            svc,
            &decision,
            now.as_ref().map(|n| n.peers.as_slice()).unwrap_or_default(),
        );
        let before = self.announced.get(key).cloned();
        let changed = before != now;
        if changed {
            // The metric follows the addresses.
            let old_ips = before.as_ref().map(|b| b.ips.clone()).unwrap_or_default();
            let new_ips = now.as_ref().map(|n| n.ips.clone()).unwrap_or_default();
            for ip in &old_ips {
                if !new_ips.contains(ip) {
                    self.effects
                        .announced_metric
                        .push((key.to_owned(), *ip, false));
                }
            }
            for ip in &new_ips {
                if !old_ips.contains(ip) {
                    self.effects
                        .announced_metric
                        .push((key.to_owned(), *ip, true));
                }
            }
            let before_peers = before.as_ref().map(|b| &b.peers);
            let now_peers = now.as_ref().map(|n| &n.peers);
            if before_peers != now_peers {
                self.effects
                    .service_status
                    .insert(key.to_owned(), now_peers.filter(|p| !p.is_empty()).cloned());
            }
            if before.is_none() && now.is_some() && self.emits_assigned(facts, svc, slices) {
                self.effects.node_assigned.push(key.to_owned());
            }
            match now {
                Some(n) => {
                    self.announced.insert(key.to_owned(), n);
                }
                None => {
                    self.announced.remove(key);
                }
            }
        }
        Some(Decided {
            result: decision.map(|_| ()),
            changed,
            l2: l2_result.result,
            l2_changed: l2_result.changed,
        })
    }

    /// Keys of the Services announced now (BGP or layer 2).
    pub fn announced(&self) -> impl Iterator<Item = &str> {
        let mut keys: BTreeSet<&str> = self.announced.keys().map(String::as_str).collect();
        keys.extend(self.l2.announced());
        keys.into_iter()
    }

    /// Keys of the Services this node holds anything for: announced (BGP or
    /// layer 2), next in line for (layer 2), or in its NodeBGPStatus
    /// summary, or with a cached layer-2 election. A full pass decides these
    /// again besides the cached Services, so that one gone from the cache while the watch was away
    /// (deleted, or no longer a LoadBalancer when the speaker watches those
    /// only) leaves nothing behind.
    pub fn tracked(&self) -> impl Iterator<Item = &str> {
        let mut keys: BTreeSet<&str> = self.announced().collect();
        keys.extend(self.succeeds.keys().map(String::as_str));
        keys.extend(self.summary.keys());
        keys.extend(self.l2_cache.keys().map(String::as_str));
        keys.into_iter()
    }

    /// The NodeBGPStatus status of this node (`--service-bgp-status=summary`):
    /// its sessions' peers and the Services it reports one by one.
    pub fn bgp_summary(&self) -> config::api::v1beta1::NodeBGPStatusStatus {
        let node = self
            .facts
            .as_ref()
            .map(|f| f.name.clone())
            .unwrap_or_default();
        let peers: Vec<String> = self.bgp.peers().map(str::to_owned).collect();
        self.summary.status(&node, &peers)
    }

    /// Lists at most `max` Services in [`NodeSpeaker::bgp_summary`] (before
    /// any Service is decided).
    pub fn set_summary_cap(&mut self, max: usize) {
        self.summary = Summary::new(max);
    }

    /// Which speakers send BGP `nodeAssigned` events.
    pub fn set_assigned_events(&mut self, a: AssignedEvents) {
        self.assigned = a;
    }

    /// The whole configuration (every node's share, for who else announces).
    pub fn set_whole_config(&mut self, whole: Option<Config>) {
        self.whole = whole;
    }

    /// The first full pass over the Services is done: from now on a Service
    /// that starts being announced is a transition.
    pub fn initial_pass_done(&mut self) {
        self.initial_pass = false;
    }

    /// Whether this node sends the `nodeAssigned` of a Service it starts
    /// announcing: every node with [`AssignedEvents::Every`]; else none in
    /// the first pass, and only the first node of the `sha256(node#ip)` order
    /// that announces it (by the whole configuration). Without the whole
    /// configuration, this node (as before).
    fn emits_assigned(
        &self,
        me: &NodeFacts,
        svc: Option<&Service>,
        slices: &[Arc<LeanSlice>],
    ) -> bool {
        if self.assigned == AssignedEvents::Every {
            return true;
        }
        if self.initial_pass {
            return false;
        }
        let (Some(whole), Some(svc)) = (self.whole.as_ref(), svc) else {
            return true;
        };
        let Ok(ip) = cluster_view::services::ingress_ips(svc) else {
            return true;
        };
        let Some(ip) = ip.first().map(|ip| config::gofmt::ip(ip.to_canonical())) else {
            return true;
        };
        let mut order: Vec<([u8; 32], &NodeFacts)> = self
            .nodes
            .values()
            .chain((!self.nodes.contains_key(&me.name)).then_some(me))
            .map(|n| {
                use sha2::{Digest, Sha256};
                let mut h = Sha256::new();
                h.update(n.name.as_bytes());
                h.update(b"#");
                h.update(ip.as_bytes());
                (h.finalize().into(), n)
            })
            .collect();
        order.sort_unstable_by_key(|a| a.0);
        let first = order
            .into_iter()
            .map(|(_, n)| n)
            .find(|n| bgp::decide(whole, n, Some(svc), slices, &self.options).is_ok());
        first.is_none_or(|n| n.name == me.name)
    }

    /// Sends the sessions their changed routes.
    pub fn publish(&mut self) -> usize {
        self.bgp.publish()
    }

    /// The BGP half (session events, BFD, session statuses).
    pub fn bgp(&mut self) -> &mut BgpSpeaker<F, B> {
        &mut self.bgp
    }

    /// What to carry out since the last call.
    pub fn take_effects(&mut self) -> Effects {
        std::mem::take(&mut self.effects)
    }

    /// Ends every session (see [`BgpSpeaker::shutdown`]).
    pub fn shutdown(self) -> Vec<Closing> {
        self.bgp.shutdown()
    }
}
