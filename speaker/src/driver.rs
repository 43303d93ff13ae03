//! The speaker's loop, without its edge: one task owns the node's speaker
//! ([`NodeSpeaker`]), reads the cluster through a [`View`], the live speakers
//! through [`Liveness`] (and the membership protocol behind [`Member`] once
//! [`Join`] made this speaker a member), BGP session and BFD events from
//! their channels, and carries out the effects through [`Outputs`] (status
//! writers, events, metrics) and the speaker's drivers (sessions, claims).
//! The binary builds the client, the sockets, the membership, the BFD
//! runtime and the servers, and hands them in; tests hand in fakes
//! (`tests/driver.rs`).
//!
//! A turn of the loop: a pending configuration is loaded (an invalid one
//! keeps the last good one and is reported in the ConfigurationState and
//! `metallb_k8s_client_config_*`); the layer-2 responder starts with the
//! first L2Advertisement (fatal when it cannot); membership starts once this
//! speaker can claim; then the Services to decide: every one after a
//! configuration or Node change, the changed ones otherwise, and, after a
//! change of the live speakers, only the layer-2 Services whose candidates
//! include a node that joined or left, the lost owners' first, from the
//! per-Service election orders the speaker caches
//! ([`NodeSpeaker::decide_live`]). Then it waits for the next change,
//! beating the heartbeat.

mod outputs;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use cluster_view::endpoints::LeanSlice;
use cluster_view::{Batch, Changes, ClusterView};
use config::Resources;
use config::api::v1beta1::ConfigurationState;
use daemon::health::Heartbeat;
use daemon::k8s_metrics::K8sClientMetrics;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::runtime::reflector::{ObjectRef, Store};
use status::StatusWriter;
use status::configuration_state::Component;
use tokio::sync::{mpsc, watch};

use outputs::{Judge, StateReport, log_decision, report_config};
pub use outputs::{Outputs, service_ref};

use crate::bgp_speaker::{BfdOps, BfdState, PeerEvent, SessionFactory};
use crate::config_state::Loaded;
use crate::decide::NodeFacts;
use crate::l2_speaker::L2Ops;
use crate::liveness::{LiveSender, Liveness};
use crate::node::NodeSpeaker;
use crate::warnings::NodeWarnings;

/// The cluster as the loop reads it (the daemon's [`ClusterView`]).
pub trait View {
    /// Completes once every watch has listed.
    fn ready(&self) -> impl Future<Output = anyhow::Result<()>>;
    /// The Node cache, if Nodes are watched.
    fn nodes(&self) -> Option<Store<Node>>;
    /// The Service cache, if Services are watched.
    fn services(&self) -> Option<Store<Service>>;
    /// The configuration inputs.
    fn resources(&self) -> Resources;
    /// The EndpointSlices of the Service `key`.
    fn endpoint_slices_of(&self, key: &str) -> Vec<Arc<LeanSlice>>;
    /// Configuration change signals.
    fn config_changes(&self) -> &Changes;
    /// Service change signals (by key).
    fn service_changes(&self) -> &Changes;
}

impl View for ClusterView {
    async fn ready(&self) -> anyhow::Result<()> {
        Ok(ClusterView::ready(self).await?)
    }
    fn nodes(&self) -> Option<Store<Node>> {
        ClusterView::nodes(self).map(|r| r.store())
    }
    fn services(&self) -> Option<Store<Service>> {
        ClusterView::services(self).map(|r| r.store())
    }
    fn resources(&self) -> Resources {
        ClusterView::resources(self)
    }
    fn endpoint_slices_of(&self, key: &str) -> Vec<Arc<LeanSlice>> {
        ClusterView::endpoint_slices_of(self, key)
    }
    fn config_changes(&self) -> &Changes {
        ClusterView::config_changes(self)
    }
    fn service_changes(&self) -> &Changes {
        ClusterView::service_changes(self)
    }
}

/// The membership protocol once this speaker is a member.
pub trait Member {
    /// The live speakers (this one included).
    fn live(&self) -> watch::Receiver<BTreeSet<String>>;
    /// Whether this speaker is self-fenced.
    fn fenced(&self) -> watch::Receiver<bool>;
    /// The owners whose loss this speaker must learn of fast.
    fn watch_owners(&self, owners: BTreeSet<String>);
    /// The next event; `None` once the protocol stopped. Cancel-safe.
    fn next_event(&mut self) -> impl Future<Output = Option<membership::Event>>;
    /// Leaves (tells the others), within `deadline`.
    fn leave(self, deadline: Duration) -> impl Future<Output = ()>;
}

/// How this speaker becomes a member (started once it can claim: watches
/// listed, a configuration, its responder running when layer 2 is wanted).
pub trait Join {
    /// The membership it joins.
    type Member: Member;
    /// Starts the protocol and waits (bounded) to learn the other members.
    fn join(self) -> impl Future<Output = anyhow::Result<Self::Member>>;
}

/// No membership (`--ml-bindaddr`/`--ml-labels` not set): never joined.
pub enum NoMembership {}

impl Member for NoMembership {
    fn live(&self) -> watch::Receiver<BTreeSet<String>> {
        match *self {}
    }
    fn fenced(&self) -> watch::Receiver<bool> {
        match *self {}
    }
    fn watch_owners(&self, _: BTreeSet<String>) {
        match *self {}
    }
    async fn next_event(&mut self) -> Option<membership::Event> {
        match *self {}
    }
    async fn leave(self, _: Duration) {
        match self {}
    }
}

impl Join for NoMembership {
    type Member = NoMembership;
    async fn join(self) -> anyhow::Result<NoMembership> {
        match self {}
    }
}

/// The layer-2 responder's task: ends when the responder stops.
pub type L2Task = tokio::task::JoinHandle<Result<(), arp_ndp::linux::DriverError>>;

/// Starts the layer-2 responder and hands it to the speaker's `L` (the
/// daemon: `arp_ndp::linux::start`, then [`crate::l2_edge::EdgeL2::set_handle`]).
pub trait L2Start<L> {
    /// Starts it; the error says why not (fatal for the speaker).
    fn start(&mut self, ops: &mut L) -> impl Future<Output = Result<L2Task, String>>;
}

/// The probes the loop feeds.
#[derive(Clone)]
pub struct Probes {
    /// Set once every watch has listed (`/readyz`).
    pub ready: Arc<AtomicBool>,
    /// Beaten at every turn and while idle (`/healthz`).
    pub heartbeat: Arc<Heartbeat>,
}

/// Everything the loop is made of.
pub struct Parts<V, F: SessionFactory, B: BfdOps, L: L2Ops, J, S> {
    /// This node.
    pub node: String,
    /// The MetalLB namespace.
    pub ns: String,
    /// The cluster.
    pub view: V,
    /// The node's speaker (with its session factory, BFD and layer-2 ops).
    pub speaker: NodeSpeaker<F, B, L>,
    /// Starts the layer-2 responder with the first L2Advertisement.
    pub l2_start: S,
    /// How to join the membership (`None`: membership off, every known
    /// Node counts as live).
    pub join: Option<J>,
    /// The sessions' events (the receiving end of the speaker's sender).
    pub peer_events: mpsc::Receiver<PeerEvent>,
    /// The BFD runtime's events.
    pub bfd_events: mpsc::UnboundedReceiver<bfd::BfdEvent>,
    /// Where the effects go.
    pub out: Outputs,
    /// Its ConfigurationState `speaker-<node>`.
    pub state_writer: StatusWriter<ConfigurationState>,
    /// `metallb_k8s_client_config_*`.
    pub metrics: K8sClientMetrics,
    /// The probes.
    pub probes: Probes,
    /// The nodes where a MetalLB speaker Pod (another implementation) is
    /// running (Ready or started) (`None`: not watched). With membership on, this node leaves
    /// the layer-2 Services they are candidates of to them
    /// ([`NodeFacts::metallb_speaker`]).
    pub metallb_speakers: Option<watch::Receiver<BTreeSet<String>>>,
}

/// The loop (see the module documentation).
pub struct Driver<V, F: SessionFactory, B: BfdOps, L: L2Ops, J: Join, S> {
    p: Parts<V, F, B, L, J, S>,
    ml: Option<J::Member>,
    liveness: Liveness,
    _live_tx: LiveSender,
    l2_task: Option<L2Task>,
}

/// Every known Node's facts (the layer-2 candidates); `metallb`: the nodes
/// running a MetalLB speaker.
fn node_facts(nodes: &Store<Node>, metallb: &BTreeSet<String>) -> BTreeMap<String, NodeFacts> {
    nodes
        .state()
        .iter()
        .map(|n| {
            let mut f = NodeFacts::of(n);
            f.metallb_speaker = metallb.contains(&f.name);
            (f.name.clone(), f)
        })
        .collect()
}

/// MetalLB's speakers (a migration in progress) and those this node yields to.
struct MetalLbYield {
    /// The nodes of MetalLB's speaker Pods.
    pods: BTreeSet<String>,
    /// Those this node yields to: not the live members of our membership (a
    /// node that is one runs ours, whatever its Pod looks like).
    to: BTreeSet<String>,
}

impl MetalLbYield {
    /// Recomputes [`MetalLbYield::to`] with the live speakers `live`
    /// (`None`: membership off, every one); whether it changed (then said in
    /// the log).
    fn update(&mut self, live: Option<&BTreeSet<String>>) -> bool {
        let to: BTreeSet<String> = match live {
            Some(l) => self.pods.difference(l).cloned().collect(),
            None => self.pods.clone(),
        };
        if to == self.to {
            return false;
        }
        tracing::info!(
            nodes = ?to,
            "MetalLB's speakers: this node leaves the layer-2 Services they are candidates of to them"
        );
        let ours: Vec<&String> = self.pods.difference(&to).collect();
        if !ours.is_empty() {
            tracing::warn!(
                nodes = ?ours,
                "speaker Pods that look like MetalLB's on nodes whose speaker is a member of ours: taken for ours (give our Pods the label metallb-rs/component)"
            );
        }
        self.to = to;
        true
    }
}

fn on_bfd<F: SessionFactory, B: BfdOps, L: L2Ops>(
    speaker: &mut NodeSpeaker<F, B, L>,
    ev: &bfd::BfdEvent,
) {
    let state = match ev.status.state {
        bfd::State::Up => BfdState::Up,
        bfd::State::Down => BfdState::Down,
        bfd::State::Init => BfdState::Init,
        bfd::State::AdminDown => BfdState::AdminDown,
    };
    let clients: Vec<u64> = ev.clients.iter().map(|c| c.0).collect();
    let down = ev.client_action == bfd::ClientAction::Down;
    speaker.bgp().on_bfd(&clients, state, down);
}

/// Logs a membership event (the live set and the fence, the state, come through
/// [`Liveness`]'s watches).
fn on_membership(ev: membership::Event) {
    use membership::Event;
    match ev {
        Event::OwnerDown { node, after_ns } => {
            tracing::info!(
                owner = node,
                detected_after_ms = after_ns / 1_000_000,
                "owner down (heartbeat lost, no helper reached it): taking over its layer-2 addresses"
            );
        }
        Event::PathFault { node } => {
            tracing::warn!(
                owner = node,
                "heartbeat with the owner lost but another speaker reaches it: path fault, nothing moves"
            );
        }
        Event::HeartbeatUp { node } => {
            tracing::debug!(owner = node, "heartbeat with the owner up");
        }
        Event::OwnerBack { node } => {
            tracing::info!(owner = node, "owner back");
        }
        Event::WatcherUp { node } => {
            tracing::debug!(
                watcher = node,
                "heartbeat with a speaker watching this one up"
            );
        }
        Event::Rejoined { generation } => {
            tracing::warn!(
                generation,
                "the other speakers had declared this one down: rejoined"
            );
        }
        Event::Fence(on) => {
            // the state itself comes through the membership's fence watch
            // (`Liveness`); this is the log line
            if on {
                tracing::warn!(
                    "no majority of the speakers answers: self-fenced, layer-2 addresses are not answered"
                );
            } else {
                tracing::info!("a majority of the speakers answers again: fence lifted");
            }
        }
        Event::LiveChanged(_) => {}
    }
}

impl<V, F, B, L, J, S> Driver<V, F, B, L, J, S>
where
    V: View,
    F: SessionFactory,
    B: BfdOps,
    L: L2Ops,
    J: Join,
    S: L2Start<L>,
{
    /// The loop, not started.
    pub fn new(parts: Parts<V, F, B, L, J, S>) -> Self {
        // The live speakers: the membership's once joined (none before: this node
        // claims nothing until it joins), or "every known Node" without it.
        let (live_tx, liveness) = if parts.join.is_some() {
            Liveness::joining()
        } else {
            Liveness::memberlist_disabled()
        };
        Self {
            p: parts,
            ml: None,
            liveness,
            _live_tx: live_tx,
            l2_task: None,
        }
    }

    /// The node's speaker (tests look at it between turns).
    pub fn speaker(&self) -> &NodeSpeaker<F, B, L> {
        &self.p.speaker
    }

    /// Runs until an error ends it (the membership or the responder stopped,
    /// the responder could not start, a watch that is not watched).
    pub async fn run(&mut self) -> anyhow::Result<()> {
        let Self {
            p,
            ml,
            liveness,
            l2_task,
            ..
        } = self;
        let Parts {
            node,
            ns,
            view,
            speaker,
            l2_start,
            join,
            peer_events: peer_rx,
            bfd_events,
            out,
            state_writer: writer,
            metrics,
            probes,
            metallb_speakers,
        } = p;
        let (ready, heartbeat) = (&probes.ready, &probes.heartbeat);
        let component = Component::Speaker { node: node.clone() };
        let owner = out.owner.clone();
        // Beat while the watches list (the API server may be slow or away).
        {
            let ready_fut = view.ready();
            tokio::pin!(ready_fut);
            loop {
                tokio::select! {
                    r = &mut ready_fut => { r?; break; }
                    _ = tokio::time::sleep(Duration::from_secs(5)) => heartbeat.beat(),
                }
            }
        }
        ready.store(true, Ordering::Release);
        tracing::info!("watches ready");
        speaker.set_live(liveness.current());
        let nodes = view.nodes().context("the view watches Nodes")?;
        let services = view.services().context("the view watches Services")?;
        let mut watched_owners = BTreeSet::new();
        let mut synced = false;
        let mut config_pending = true;
        // The whole configuration (every node's share): Service warnings are judged on it.
        let mut whole: Option<config::Config> = None;
        let mut node_warnings = NodeWarnings::default();
        let mut state = StateReport {
            component,
            ns: ns.clone(),
            owner,
            result: Ok(()),
            config_warnings: Vec::new(),
            bgp_status_note: None,
            membership: None,
        };
        let mut batch: Option<Batch> = None;
        // The nodes of MetalLB's speaker Pods, and those this node yields to: not
        // the live members of our membership (a node that is one runs ours, whatever
        // its Pod's labels: speakers of ours deployed without the label never yield
        // to each other).
        let mut metallb = MetalLbYield {
            pods: metallb_speakers
                .as_mut()
                .map(|r| r.borrow_and_update().clone())
                .unwrap_or_default(),
            to: BTreeSet::new(),
        };
        metallb.update(speaker.live());
        let mut refresh_nodes = false;
        loop {
            heartbeat.beat();
            let mut all = false;
            let mut keys: Vec<String> = Vec::new();
            if config_pending {
                config_pending = false;
                refresh_nodes = true;
                match nodes.get(&ObjectRef::new(node)) {
                    None => {
                        tracing::warn!(node, "its Node object does not exist (yet): waiting");
                    }
                    Some(me) => {
                        // The per-node status objects belong to the Node: a restart
                        // changes no owner, the Node's deletion collects them.
                        if let Some(o) = crate::bgp_status::node_owner(&me)
                            && out.owner.as_ref() != Some(&o)
                        {
                            out.owner = Some(o.clone());
                            out.bgp_status.set_owner(Some(o));
                        }
                        let parsed = crate::node_config::for_node(view.resources(), &me)
                            .and_then(|r| config::parse(&r).map_err(|e| e.to_string()));
                        let outcome = speaker.load(parsed, NodeFacts::of(&me));
                        report_config(speaker, &outcome, metrics);
                        // The responder starts with the first L2Advertisement.
                        let wants_l2 = speaker
                            .config()
                            .is_some_and(|c| !c.l2_advertisements.is_empty());
                        if wants_l2 && l2_task.is_none() {
                            // Tried again on the next configuration change when it fails.
                            let start = tokio::time::timeout(
                                Duration::from_secs(10),
                                l2_start.start(speaker.l2().ops()),
                            )
                            .await;
                            match start {
                                Ok(Ok(task)) => {
                                    tracing::info!("layer-2 responder started");
                                    *l2_task = Some(task);
                                    all = true;
                                }
                                // Fatal, as MetalLB's speaker: a node that cannot answer
                                // must not stay a live member that wins addresses (its
                                // share would go dark); it leaves, the others answer.
                                Ok(Err(e)) => anyhow::bail!(
                                    "the layer-2 responder cannot start (CAP_NET_RAW?): {e}"
                                ),
                                Err(_) => {
                                    anyhow::bail!("the layer-2 responder did not start within 10 s")
                                }
                            }
                        }
                        // This speaker can claim now (watches listed, a configuration,
                        // its responder running when layer 2 is wanted): it becomes a
                        // member, and a candidate, only from here.
                        if ml.is_none()
                            && speaker.config().is_some()
                            && let Some(j) = join.take()
                        {
                            let m = j.join().await?;
                            *liveness = Liveness::membership(m.live(), m.fenced());
                            speaker.set_live(liveness.current());
                            metallb.update(speaker.live());
                            *ml = Some(m);
                            all = true;
                        }
                        for s in &outcome.skipped {
                            tracing::error!(
                                peer = s.peer,
                                reason = s.why,
                                "BGPPeer cannot run on this node"
                            );
                        }
                        // Ended sessions flush their Cease on their own (bounded).
                        for c in outcome.closing {
                            tokio::spawn(c);
                        }
                        state.result = match &outcome.loaded {
                            Loaded::Invalid(e) => Err(e.clone()),
                            _ => Ok(()),
                        };
                        // Selector combinations that cannot overlap, judged on the
                        // whole configuration (not this node's share of it), which
                        // also judges the Services (`crate::warnings`).
                        if state.result.is_ok() {
                            let all_objects = view.resources();
                            let parsed = config::parse(&all_objects).ok();
                            let warnings = parsed
                                .as_ref()
                                .map(|c| config::overlap::selector_warnings(c, &all_objects.nodes))
                                .unwrap_or_default();
                            state.config_warnings =
                                warnings.iter().map(ToString::to_string).collect();
                            if !state.config_warnings.is_empty() {
                                tracing::warn!(warnings = ?state.config_warnings, "configuration warnings");
                            }
                            if parsed != whole {
                                whole = parsed;
                                speaker.set_whole_config(whole.clone());
                                all = true;
                            }
                        } else {
                            state.config_warnings.clear();
                        }
                        state.write(writer, &node_warnings);
                        all |= outcome.reprocess_all;
                    }
                }
            }
            // The batch the wait took, and whatever came since.
            for b in [batch.take(), view.service_changes().take()]
                .into_iter()
                .flatten()
            {
                match b {
                    Batch::All => all = true,
                    Batch::Keys(k) => keys.extend(k),
                }
            }
            keys.sort();
            keys.dedup();
            let refresh = std::mem::take(&mut refresh_nodes);
            if all || refresh {
                all |= speaker.set_nodes(node_facts(&nodes, &metallb.to));
            }
            if speaker.config().is_some() {
                let started = std::time::Instant::now();
                // A change of the live speakers: the layer-2 Services whose
                // candidates include a node that joined or left, the lost
                // owners' first (before any other work of the turn).
                let mut n = 0;
                if !all {
                    let lookup = |key: &str| {
                        let (ns, name) = key.split_once('/').unwrap_or(("", key));
                        let svc = services.get(&ObjectRef::new(name).within(ns));
                        (svc, view.endpoint_slices_of(key))
                    };
                    for d in speaker.decide_live(lookup) {
                        log_decision(&d.key, "layer2", &d.result, d.changed);
                        n += 1;
                    }
                }
                let every: Vec<String>;
                let todo: &[String] = if all {
                    let mut v: Vec<String> = services
                        .state()
                        .iter()
                        .map(|s| cluster_view::service_key(s))
                        .collect();
                    // Services this node holds anything for or warned about, gone
                    // from the cache (deleted, or no longer LoadBalancers).
                    v.extend(speaker.tracked().map(str::to_owned));
                    v.extend(node_warnings.keys().map(str::to_owned));
                    v.sort();
                    v.dedup();
                    every = v;
                    &every
                } else {
                    &keys
                };
                let mut judge = Judge {
                    node,
                    whole: whole.as_ref(),
                    warnings: &mut node_warnings,
                    events: &out.events,
                    changed: false,
                };
                for key in todo {
                    let (ns, name) = key.split_once('/').unwrap_or(("", key));
                    let svc = services.get(&ObjectRef::new(name).within(ns));
                    let slices = view.endpoint_slices_of(key);
                    // MetalLB's log lines, on changes only.
                    if let Some(d) = speaker.service(key, svc.as_deref(), &slices) {
                        log_decision(key, "bgp", &d.result, d.changed);
                        log_decision(key, "layer2", &d.l2, d.l2_changed);
                    }
                    judge.service(key, svc.as_deref(), &slices);
                }
                n += todo.len();
                if all {
                    // a full pass decided every Service with the live set in force
                    speaker.decide_live_done();
                }
                if judge.changed {
                    state.write(writer, &node_warnings);
                }
                let sent = speaker.publish();
                if n > 0 {
                    tracing::debug!(
                        services = n,
                        sessions_updated = sent,
                        took_us = started.elapsed().as_micros() as u64,
                        "services decided"
                    );
                }
                out.apply(speaker);
                let note = out.bgp_status.switched().map(str::to_owned);
                if note != state.bgp_status_note {
                    state.bgp_status_note = note;
                    state.write(writer, &node_warnings);
                }
                if let Some(m) = ml.as_ref() {
                    let owners = speaker.watched_owners();
                    if owners != watched_owners {
                        tracing::debug!(?owners, "watching the owners this node takes over from");
                        m.watch_owners(owners.clone());
                        watched_owners = owners;
                    }
                }
                if n > 0 && speaker.refused_for_announced() {
                    // The refused configuration may fit now that Services moved: it is
                    // loaded again at the next change (MetalLB retries it too).
                    config_pending = true;
                }
                if all && !synced {
                    // The first full pass: objects of this node nobody wants go.
                    synced = true;
                    out.bgp_status.initial_sync_done();
                    speaker.initial_pass_done();
                    out.session_status.initial_sync_done();
                    out.l2_status.initial_sync_done();
                }
            }
            // The membership view explain elects with, on changes (coalesced by
            // the writer: one write a second at most).
            // (Not before a configuration: the state written would claim one.)
            let membership = liveness.report();
            if speaker.config().is_some() && membership != state.membership {
                state.membership = membership;
                state.write(writer, &node_warnings);
            }
            // Wait for the next change, beating while idle.
            loop {
                tokio::select! {
                    _ = view.config_changes().next() => {
                        // Let a burst (`kubectl apply` of many objects) settle.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        config_pending = true;
                        break;
                    }
                    b = view.service_changes().next() => {
                        batch = Some(b);
                        break;
                    }
                    Some(ev) = peer_rx.recv() => {
                        speaker.bgp().on_event(ev);
                        while let Ok(ev) = peer_rx.try_recv() {
                            speaker.bgp().on_event(ev);
                        }
                        out.apply(speaker);
                    }
                    Some(ev) = bfd_events.recv() => {
                        on_bfd(speaker, &ev);
                        out.apply(speaker);
                    }
                    live = liveness.changed() => {
                        tracing::debug!(?live, "live speakers");
                        // (the Services it changes are decided at the next turn)
                        let changed = speaker.set_live(live);
                        if !metallb.pods.is_empty() && metallb.update(speaker.live()) {
                            refresh_nodes = true;
                            break;
                        }
                        // (a change while fenced changes no decision, but the view)
                        if changed || liveness.report() != state.membership {
                            break;
                        }
                    }
                    ev = async { ml.as_mut().expect("guarded").next_event().await }, if ml.is_some() => {
                        let Some(ev) = ev else {
                            anyhow::bail!("the membership protocol stopped");
                        };
                        if let membership::Event::WatcherUp { node: watcher } = &ev {
                            // It may have answered for this node's addresses meanwhile.
                            let n = speaker.l2().reannounce();
                            if n > 0 {
                                tracing::info!(watcher, addresses = n, "a speaker watching this one is back: announcing its layer-2 addresses again");
                            }
                        }
                        // the live set and the fence come through `liveness`
                        on_membership(ev);
                    }
                    r = async { l2_task.as_mut().expect("guarded").await }, if l2_task.is_some() => {
                        *l2_task = None;
                        tracing::error!(result = ?r.map(|r| r.map_err(|e| e.to_string())), "the layer-2 responder stopped");
                        anyhow::bail!("the layer-2 responder stopped");
                    }
                    r = async { metallb_speakers.as_mut().expect("guarded").changed().await }, if metallb_speakers.is_some() => {
                        let Some(rx) = metallb_speakers.as_mut().filter(|_| r.is_ok()) else {
                            // The watch ended (its owner stopped): the last set stays.
                            *metallb_speakers = None;
                            continue;
                        };
                        metallb.pods = rx.borrow_and_update().clone();
                        if metallb.update(speaker.live()) {
                            refresh_nodes = true;
                            break;
                        }
                    }
                    _ = tokio::time::sleep(Duration::from_secs(5)) => heartbeat.beat(),
                }
            }
        }
    }

    /// Stops: layer 2 first (stop answering, then tell the other speakers,
    /// whose next candidate takes over at once: no moment with two nodes
    /// answering), then the sessions (graceful-restart peers keep our
    /// routes, the others get a Cease; bounded: MetalLB's manifests give the
    /// Pod 2 s after SIGTERM). Returns the view and the outputs, for the
    /// edge to drop once its writers are told to stop.
    pub async fn shutdown(mut self) -> (V, Outputs) {
        if let Some(m) = self.ml.take() {
            if let Some(t) = self.l2_task.take() {
                t.abort();
            }
            let started = std::time::Instant::now();
            m.leave(Duration::from_millis(500)).await;
            tracing::info!(
                took_ms = started.elapsed().as_millis() as u64,
                "left the membership"
            );
        }
        let Parts {
            view, speaker, out, ..
        } = self.p;
        let ending = speaker.shutdown();
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            futures_util::future::join_all(ending),
        )
        .await;
        (view, out)
    }
}
