//! The speaker's loop ([`speaker::driver`]) without sockets or an API server:
//! a fake cluster view (stores the test fills, change signals it fires), a
//! fake membership (a watch of the live set the test changes), fake BGP
//! sessions and BFD (`common`), a fake layer-2 responder recording claims,
//! and the real status writers (not run: what they would write is read from
//! their desired state).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arp_ndp::interfaces::AllowedInterfaces;
use cluster_view::Changes;
use cluster_view::endpoints::LeanSlice;
use common::{FakeBfd, FakeFactory, Log};
use config::Resources;
use config::api::v1beta1::{
    ConfigurationState, MetalLBServiceBGPStatus, MetalLBServiceL2Status, ServiceBGPStatus,
    ServiceL2Status,
};
use config::api::{LABEL_SERVICE_NAME, LABEL_SERVICE_NAMESPACE};
use config::load::{LoadOptions, Loader};
use daemon::events::Note;
use daemon::health::Heartbeat;
use daemon::k8s_metrics::K8sClientMetrics;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Service};
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::watcher;
use serde_json::json;
use speaker::bgp_speaker::BgpSpeaker;
use speaker::bgp_status::{BgpStatusOutput, Mode};
use speaker::decide::NodeFacts;
use speaker::decide::bgp::Options;
use speaker::decide::l2;
use speaker::driver::{
    Driver, Join, L2Start, L2Task, Member, NoMembership, Outputs, Parts, Probes, View,
};
use speaker::l2_speaker::L2Ops;
use speaker::node::NodeSpeaker;
use status::configuration_state::Component;
use status::testing::FakeApi;
use status::{LabelScope, Labels, StatusWriter, SystemClock, WriteBudget, WriterConfig};
use tokio::sync::{mpsc, watch};

const NS: &str = "metallb-system";
const ME: &str = "node-1";

// ---- the cluster view ----

#[derive(Clone)]
struct Cluster {
    resources: Arc<Mutex<Resources>>,
    _nodes: Arc<Mutex<Writer<Node>>>,
    services: Arc<Mutex<Writer<Service>>>,
    slices: Arc<Mutex<BTreeMap<String, Vec<Arc<LeanSlice>>>>>,
    config: Changes,
    svc: Changes,
}

struct FakeView {
    c: Cluster,
    nodes: Store<Node>,
    services: Store<Service>,
}

impl View for FakeView {
    async fn ready(&self) -> anyhow::Result<()> {
        Ok(())
    }
    fn nodes(&self) -> Option<Store<Node>> {
        Some(self.nodes.clone())
    }
    fn services(&self) -> Option<Store<Service>> {
        Some(self.services.clone())
    }
    fn resources(&self) -> Resources {
        self.c.resources.lock().unwrap().clone()
    }
    fn endpoint_slices_of(&self, key: &str) -> Vec<Arc<LeanSlice>> {
        self.c
            .slices
            .lock()
            .unwrap()
            .get(key)
            .cloned()
            .unwrap_or_default()
    }
    fn config_changes(&self) -> &Changes {
        &self.c.config
    }
    fn service_changes(&self) -> &Changes {
        &self.c.svc
    }
}

fn listed<K>(objects: Vec<K>) -> (Store<K>, Writer<K>)
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let (store, mut w) = reflector::store::<K>();
    w.apply_watcher_event(&watcher::Event::Init);
    for o in objects {
        w.apply_watcher_event(&watcher::Event::InitApply(o));
    }
    w.apply_watcher_event(&watcher::Event::InitDone);
    (store, w)
}

const NODES: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node-1}
---
apiVersion: v1
kind: Node
metadata: {name: node-2}
"#;

const CONFIG: &str = r#"
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: pool, namespace: metallb-system}
spec: {addresses: [198.51.100.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: l2, namespace: metallb-system}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: bgp, namespace: metallb-system}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: r1, namespace: metallb-system}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1}
"#;

/// A pool whose address is not one: the configuration is invalid.
const INVALID: &str = r#"
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: pool, namespace: metallb-system}
spec: {addresses: [not-an-address]}
"#;

fn resources(config: &str) -> Resources {
    let mut l = Loader::new(LoadOptions::default());
    l.add_str("nodes.yaml", NODES).unwrap();
    l.add_str("config.yaml", config).unwrap();
    l.finish().resources
}

fn svc(name: &str, ip: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"type": "LoadBalancer"},
        "status": {"loadBalancer": {"ingress": [{"ip": ip}]}},
    }))
    .unwrap()
}

fn slice(name: &str) -> Arc<LeanSlice> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-x"), "namespace": "default",
                "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "nodeName": "node-2"}],
        }))
        .unwrap(),
    )
}

impl Cluster {
    fn set_config(&self, config: &str) {
        *self.resources.lock().unwrap() = resources(config);
        self.config.all();
    }
    fn add_service(&self, s: Service) {
        let name = s.metadata.name.clone().unwrap();
        let key = format!("default/{name}");
        self.slices
            .lock()
            .unwrap()
            .insert(key.clone(), vec![slice(&name)]);
        self.services
            .lock()
            .unwrap()
            .apply_watcher_event(&watcher::Event::Apply(s));
        self.svc.key(key);
    }
    fn delete_service(&self, name: &str) {
        let key = format!("default/{name}");
        let s = svc(name, "198.51.100.1");
        self.slices.lock().unwrap().remove(&key);
        self.services
            .lock()
            .unwrap()
            .apply_watcher_event(&watcher::Event::Delete(s));
        self.svc.key(key);
    }
}

// ---- layer 2, membership ----

use common::Claims;

#[derive(Clone, Default)]
struct FakeL2 {
    running: Arc<AtomicBool>,
    claims: Claims,
}

impl L2Ops for FakeL2 {
    fn running(&self) -> bool {
        self.running.load(std::sync::atomic::Ordering::SeqCst)
    }
    fn interfaces(&self) -> BTreeSet<String> {
        BTreeSet::from(["eth0".to_owned()])
    }
    fn claim(&mut self, owner: &str, ip: IpAddr, _: AllowedInterfaces) {
        common::claim(&self.claims, owner, ip);
    }
    fn release(&mut self, owner: &str, ip: IpAddr) {
        common::release(&self.claims, owner, ip);
    }
}

/// Starts the fake responder (or fails, as a node without CAP_NET_RAW).
struct FakeStart {
    fail: Option<String>,
}

impl L2Start<FakeL2> for FakeStart {
    async fn start(&mut self, ops: &mut FakeL2) -> Result<L2Task, String> {
        if let Some(e) = &self.fail {
            return Err(e.clone());
        }
        ops.running.store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(tokio::spawn(std::future::pending()))
    }
}

struct FakeJoin {
    live: watch::Receiver<BTreeSet<String>>,
    fenced: watch::Receiver<bool>,
    owners: Arc<Mutex<BTreeSet<String>>>,
}

struct FakeMember(FakeJoin);

impl Join for FakeJoin {
    type Member = FakeMember;
    async fn join(self) -> anyhow::Result<FakeMember> {
        Ok(FakeMember(self))
    }
}

impl Member for FakeMember {
    fn live(&self) -> watch::Receiver<BTreeSet<String>> {
        self.0.live.clone()
    }
    fn fenced(&self) -> watch::Receiver<bool> {
        self.0.fenced.clone()
    }
    fn watch_owners(&self, owners: BTreeSet<String>) {
        *self.0.owners.lock().unwrap() = owners;
    }
    async fn next_event(&mut self) -> Option<membership::Event> {
        std::future::pending().await
    }
    async fn leave(self, _: Duration) {}
}

// ---- the harness ----

struct Harness<J: Join> {
    driver: Driver<FakeView, FakeFactory, FakeBfd, FakeL2, J, FakeStart>,
    cluster: Cluster,
    log: Log,
    claims: Claims,
    state: StatusWriter<ConfigurationState>,
    l2_status: Arc<FakeApi<MetalLBServiceL2Status>>,
    svc_status: Arc<FakeApi<MetalLBServiceBGPStatus>>,
    events: mpsc::Receiver<(ObjectReference, Note)>,
    registry: prometheus::Registry,
    _peer_tx: mpsc::Sender<speaker::bgp_speaker::PeerEvent>,
    _bfd_tx: mpsc::UnboundedSender<bfd::BfdEvent>,
}

fn harness<J: Join>(join: Option<J>, l2_fail: Option<&str>) -> Harness<J> {
    harness_with(join, l2_fail, None)
}

/// [`harness`], with the nodes of MetalLB's speakers from `metallb`.
fn harness_with<J: Join>(
    join: Option<J>,
    l2_fail: Option<&str>,
    metallb: Option<watch::Receiver<BTreeSet<String>>>,
) -> Harness<J> {
    let res = resources(CONFIG);
    let nodes: Vec<Node> = res.nodes.iter().map(|n| (**n).clone()).collect();
    let (node_store, node_w) = listed(nodes);
    let (svc_store, svc_w) = listed(Vec::new());
    let cluster = Cluster {
        resources: Arc::new(Mutex::new(res)),
        _nodes: Arc::new(Mutex::new(node_w)),
        services: Arc::new(Mutex::new(svc_w)),
        slices: Arc::default(),
        config: Changes::new(100),
        svc: Changes::new(100),
    };
    let registry = prometheus::Registry::new();
    let sm = status::Metrics::register(&registry).unwrap();
    let budget = WriteBudget::new(20.0, 30);
    let scope = LabelScope::node(NS, ME);
    let labeled = || {
        (
            WriterConfig::default(),
            scope.clone(),
            Arc::new(SystemClock) as Arc<dyn status::Clock>,
            sm.clone(),
            budget.clone(),
        )
    };
    let (a, b, c, d, e) = labeled();
    let svc_status: StatusWriter<ServiceBGPStatus> = StatusWriter::labeled(a, b, c, d, e);
    let (a, b, c, d, e) = labeled();
    let node_status = StatusWriter::labeled(a, b, c, d, e);
    let (a, b, c, d, e) = labeled();
    let l2_status: StatusWriter<ServiceL2Status> = StatusWriter::labeled(a, b, c, d, e);
    let (a, b, c, d, e) = labeled();
    let session_status = StatusWriter::labeled(a, b, c, d, e);
    let state = StatusWriter::with_budget(
        WriterConfig::default(),
        Arc::new(SystemClock),
        sm.clone(),
        budget.clone(),
    );
    let (event_tx, events) = mpsc::channel(1024);
    let log: Log = Arc::default();
    let (peer_tx, peer_rx) = mpsc::channel(16);
    let (bfd_tx, bfd_rx) = mpsc::unbounded_channel();
    let l2 = FakeL2::default();
    let claims = l2.claims.clone();
    let speaker = NodeSpeaker::new(
        Options::default(),
        BgpSpeaker::new(
            ME,
            FakeFactory(log.clone()),
            FakeBfd(log.clone(), 0),
            peer_tx.clone(),
        ),
    )
    .with_l2(l2);
    let out = Outputs {
        node: ME.into(),
        ns: NS.into(),
        owner: None,
        bgp_status: BgpStatusOutput::new(
            ME,
            Mode::PerService,
            1000,
            svc_status.clone(),
            node_status,
        ),
        l2_status: l2_status.clone(),
        session_status,
        sessions_down: Default::default(),
        announced: speaker::metrics::Announced::register(&registry, ME).unwrap(),
        events: event_tx,
    };
    let view = FakeView {
        c: cluster.clone(),
        nodes: node_store,
        services: svc_store,
    };
    let driver = Driver::new(Parts {
        node: ME.into(),
        ns: NS.into(),
        view,
        speaker,
        l2_start: FakeStart {
            fail: l2_fail.map(str::to_owned),
        },
        join,
        peer_events: peer_rx,
        bfd_events: bfd_rx,
        out,
        state_writer: state.clone(),
        metrics: K8sClientMetrics::register(&registry).unwrap(),
        probes: Probes {
            ready: Arc::new(AtomicBool::new(false)),
            heartbeat: Arc::new(Heartbeat::new()),
        },
        metallb_speakers: metallb,
    });
    Harness {
        driver,
        cluster,
        log,
        claims,
        state,
        l2_status: serve(&l2_status),
        svc_status: serve(&svc_status),
        events,
        registry,
        _peer_tx: peer_tx,
        _bfd_tx: bfd_tx,
    }
}

impl<J: Join> Harness<J> {
    /// Runs the loop while `scenario` runs; the loop must not end first.
    async fn run<T>(&mut self, scenario: impl Future<Output = T>) -> T {
        tokio::select! {
            r = self.driver.run() => panic!("the loop ended: {r:?}"),
            t = scenario => t,
        }
    }
}

/// Waits (5 s at most) until `f` holds.
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not reached within 5 s: {what}");
}

fn identity(name: &str) -> Labels {
    Labels::from([
        (LABEL_SERVICE_NAME.to_owned(), name.to_owned()),
        (LABEL_SERVICE_NAMESPACE.to_owned(), "default".to_owned()),
    ])
}

/// The fake server of a status writer: the writer runs against it.
fn serve<K: status::StatusObject>(w: &StatusWriter<K>) -> Arc<FakeApi<K::Status>> {
    let api = Arc::new(FakeApi::new());
    let (w, a) = (w.clone(), api.clone());
    tokio::spawn(async move { w.run(a, std::future::pending()).await });
    api
}

/// Whether the server holds an object for the Service `name`.
fn has<S: Clone>(api: &FakeApi<S>, name: &str) -> bool {
    let id = identity(name);
    api.objects()
        .values()
        .any(|o| id.iter().all(|(k, v)| o.labels.get(k) == Some(v)))
}

fn claimed(c: &Claims) -> BTreeSet<String> {
    c.lock()
        .unwrap()
        .values()
        .flat_map(|o| o.iter().cloned())
        .collect()
}

fn last_set(log: &Log) -> Option<String> {
    log.lock()
        .unwrap()
        .iter()
        .rev()
        .find(|l| l.starts_with("r1#") && l.contains(" set "))
        .cloned()
}

/// The layer-2 winner of `s` among `live` (`None`: every known Node), by
/// `decide::l2` itself.
fn winner(s: &Service, live: Option<&BTreeSet<String>>) -> Option<String> {
    let res = resources(CONFIG);
    let cfg = config::parse(&res).unwrap();
    let nodes: BTreeMap<String, NodeFacts> = res
        .nodes
        .iter()
        .map(|n| (n.metadata.name.clone().unwrap(), NodeFacts::of(n)))
        .collect();
    let name = s.metadata.name.clone().unwrap();
    let d = l2::decide(
        &cfg,
        ME,
        l2::Cluster {
            nodes: &nodes,
            live,
        },
        Some(s),
        &[slice(&name)],
        &Options::default(),
    );
    d.election.and_then(|e| e.winner().map(str::to_owned))
}

/// Services web-N at 198.51.100.N until one is won by `a` and one by `b`.
fn two_services(live: Option<&BTreeSet<String>>) -> (Service, Service) {
    let mut mine = None;
    let mut theirs = None;
    for i in 10..60 {
        let s = svc(&format!("web-{i}"), &format!("198.51.100.{i}"));
        match winner(&s, live).as_deref() {
            Some(ME) if mine.is_none() => mine = Some(s),
            Some("node-2") if theirs.is_none() => theirs = Some(s),
            _ => {}
        }
    }
    (mine.unwrap(), theirs.unwrap())
}

fn name(s: &Service) -> String {
    s.metadata.name.clone().unwrap()
}

#[tokio::test]
async fn the_first_pass_announces_what_decide_says() {
    let mut h = harness::<NoMembership>(None, None);
    let (mine, theirs) = two_services(None);
    h.cluster.add_service(mine.clone());
    h.cluster.add_service(theirs.clone());
    let (claims, log, l2s, bgps) = (
        h.claims.clone(),
        h.log.clone(),
        h.l2_status.clone(),
        h.svc_status.clone(),
    );
    let (m, t) = (name(&mine), name(&theirs));
    h.run(async {
        until("the layer-2 claim of this node's Service", || {
            claimed(&claims) == BTreeSet::from([format!("default/{m}")])
        })
        .await;
        until("both routes to r1", || {
            last_set(&log).is_some_and(|l| {
                l.contains(&format!("{}/32", mine_ip(&mine)))
                    && l.contains(&format!("{}/32", mine_ip(&theirs)))
            })
        })
        .await;
        until("statuses", || {
            has(&l2s, &m) && !has(&l2s, &t) && has(&bgps, &m) && has(&bgps, &t)
        })
        .await;
    })
    .await;
    // nodeAssigned: layer 2 for the won Service, BGP for both.
    let mut notes = Vec::new();
    while let Ok((r, n)) = h.events.try_recv() {
        notes.push((r.name.unwrap(), n.reason, n.message));
    }
    assert!(
        notes
            .iter()
            .any(|(n, r, msg)| *n == m && r == "nodeAssigned" && msg.contains("layer2")),
        "{notes:?}"
    );
    assert!(
        !notes
            .iter()
            .any(|(n, _, msg)| *n == t && msg.contains("layer2")),
        "{notes:?}"
    );
}

fn mine_ip(s: &Service) -> String {
    s.status
        .as_ref()
        .unwrap()
        .load_balancer
        .as_ref()
        .unwrap()
        .ingress
        .as_ref()
        .unwrap()[0]
        .ip
        .clone()
        .unwrap()
}

#[tokio::test]
async fn a_lost_owner_s_layer_2_service_moves_to_this_node() {
    let both: BTreeSet<String> = [ME, "node-2"].iter().map(|s| s.to_string()).collect();
    let (live_tx, live) = watch::channel(both.clone());
    let (_fence_tx, fenced) = watch::channel(false);
    let owners = Arc::new(Mutex::new(BTreeSet::new()));
    let join = FakeJoin {
        live,
        fenced,
        owners: owners.clone(),
    };
    let mut h = harness(Some(join), None);
    let (mine, theirs) = two_services(Some(&both));
    h.cluster.add_service(mine.clone());
    h.cluster.add_service(theirs.clone());
    let (claims, l2s) = (h.claims.clone(), h.l2_status.clone());
    let (m, t) = (name(&mine), name(&theirs));
    h.run(async {
        until("this node's Service claimed, node-2 watched", || {
            claimed(&claims) == BTreeSet::from([format!("default/{m}")])
                && owners.lock().unwrap().contains("node-2")
        })
        .await;
        assert!(!has(&l2s, &t));
        // node-2 is lost: its Service moves here.
        live_tx.send_replace(BTreeSet::from([ME.to_owned()]));
        until("node-2's Service claimed here", || {
            claimed(&claims) == BTreeSet::from([format!("default/{m}"), format!("default/{t}")])
        })
        .await;
        until("its ServiceL2Status", || has(&l2s, &t)).await;
        // node-2 is back: it goes back.
        live_tx.send_replace(both.clone());
        until("node-2's Service released, its status gone", || {
            claimed(&claims) == BTreeSet::from([format!("default/{m}")]) && !has(&l2s, &t)
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn a_ready_metallb_speaker_candidate_takes_the_layer_2_services_and_gives_them_back() {
    let both: BTreeSet<String> = [ME, "node-2"].iter().map(|s| s.to_string()).collect();
    let me_only = BTreeSet::from([ME.to_owned()]);
    // node-2 runs MetalLB's speaker: our membership holds this node alone.
    let (live_tx, live) = watch::channel(me_only.clone());
    let (_fence_tx, fenced) = watch::channel(false);
    let join = FakeJoin {
        live,
        fenced,
        owners: Arc::default(),
    };
    let (metallb_tx, metallb) = watch::channel(BTreeSet::new());
    let mut h = harness_with(Some(join), None, Some(metallb));
    let (mine, theirs) = two_services(Some(&both));
    h.cluster.add_service(mine.clone());
    h.cluster.add_service(theirs.clone());
    let (claims, l2s, log) = (h.claims.clone(), h.l2_status.clone(), h.log.clone());
    let (m, t) = (name(&mine), name(&theirs));
    let all_mine = BTreeSet::from([format!("default/{m}"), format!("default/{t}")]);
    let routes = |log: &Log| {
        last_set(log).is_some_and(|l| {
            l.contains(&format!("{}/32", mine_ip(&mine)))
                && l.contains(&format!("{}/32", mine_ip(&theirs)))
        })
    };
    h.run(async {
        until("both Services claimed (the only live speaker)", || {
            claimed(&claims) == all_mine && has(&l2s, &m) && has(&l2s, &t)
        })
        .await;
        // MetalLB's speaker Ready on node-2, a candidate of both: this node lets go.
        metallb_tx.send_replace(BTreeSet::from(["node-2".to_owned()]));
        until("nothing claimed, no ServiceL2Status", || {
            claimed(&claims).is_empty() && !has(&l2s, &m) && !has(&l2s, &t)
        })
        .await;
        // BGP is not concerned (both implementations' routes are fine side by side).
        assert!(routes(&log), "{:?}", last_set(&log));
        // A node that is no candidate (unknown here) changes nothing.
        metallb_tx.send_replace(BTreeSet::from(["node-9".to_owned()]));
        until("both claimed again", || claimed(&claims) == all_mine).await;
        metallb_tx.send_replace(BTreeSet::from(["node-2".to_owned()]));
        until("let go again", || claimed(&claims).is_empty()).await;
        // node-2 turns out to be a member of ours (a speaker of ours without the
        // label): taken for ours, the election among both is back.
        live_tx.send_replace(both.clone());
        until("this node's Service claimed, node-2's not", || {
            claimed(&claims) == BTreeSet::from([format!("default/{m}")])
        })
        .await;
        // node-2 leaves our membership while its Pod still looks like MetalLB's:
        // yield again.
        live_tx.send_replace(me_only.clone());
        until("let go a third time", || claimed(&claims).is_empty()).await;
        // MetalLB's Pod gone (deleted, or not Ready): both are this node's.
        metallb_tx.send_replace(BTreeSet::new());
        until("both claimed at the end", || claimed(&claims) == all_mine).await;
    })
    .await;
}

fn metric(registry: &prometheus::Registry, name: &str) -> Option<f64> {
    registry
        .gather()
        .into_iter()
        .find(|f| f.name() == name)
        .map(|f| f.get_metric()[0].get_gauge().get_value())
}

#[tokio::test]
async fn an_invalid_configuration_keeps_the_last_good_one_and_says_so() {
    let mut h = harness::<NoMembership>(None, None);
    let (mine, theirs) = two_services(None);
    h.cluster.add_service(mine.clone());
    h.cluster.add_service(theirs.clone());
    let (claims, log, state, cluster) = (
        h.claims.clone(),
        h.log.clone(),
        h.state.clone(),
        h.cluster.clone(),
    );
    let m = name(&mine);
    let key = Component::Speaker { node: ME.into() }.key(NS);
    let error =
        |state: &StatusWriter<ConfigurationState>| state.desired(&key).map(|d| d.status.last_error);
    let registry = h.registry.clone();
    let routes_before = h
        .run(async {
            until("announced", || {
                claimed(&claims).contains(&format!("default/{m}"))
                    && last_set(&log).is_some_and(|l| l.contains("/32"))
            })
            .await;
            assert_eq!(error(&state), Some(String::new()));
            let routes = last_set(&log);
            cluster.set_config(INVALID);
            until("the error reported", || {
                error(&state).is_some_and(|e| e.contains("not-an-address"))
            })
            .await;
            routes
        })
        .await;
    assert_eq!(
        metric(&registry, "metallb_k8s_client_config_stale_bool"),
        Some(1.0)
    );
    assert_eq!(
        metric(&registry, "metallb_k8s_client_config_loaded_bool"),
        Some(1.0)
    );
    // Nothing withdrawn: the last good configuration is in force.
    assert!(claimed(&h.claims).contains(&format!("default/{m}")));
    assert_eq!(last_set(&h.log), routes_before);
    assert_eq!(h.driver.speaker().config().map(|c| c.pools.len()), Some(1));
}

#[tokio::test]
async fn a_deleted_service_is_withdrawn() {
    let mut h = harness::<NoMembership>(None, None);
    let (mine, theirs) = two_services(None);
    h.cluster.add_service(mine.clone());
    h.cluster.add_service(theirs.clone());
    let (claims, log, l2s, bgps, cluster) = (
        h.claims.clone(),
        h.log.clone(),
        h.l2_status.clone(),
        h.svc_status.clone(),
        h.cluster.clone(),
    );
    let m = name(&mine);
    let (ip, other_ip) = (mine_ip(&mine), mine_ip(&theirs));
    h.run(async {
        until("announced", || {
            claimed(&claims).contains(&format!("default/{m}"))
                && has(&l2s, &m)
                && has(&bgps, &m)
                && last_set(&log).is_some_and(|l| l.contains(&format!("{ip}/32")))
        })
        .await;
        cluster.delete_service(&m);
        until("withdrawn everywhere", || {
            claimed(&claims).is_empty()
                && !has(&l2s, &m)
                && !has(&bgps, &m)
                && last_set(&log).is_some_and(|l| {
                    !l.contains(&format!("{ip}/32")) && l.contains(&format!("{other_ip}/32"))
                })
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn a_responder_that_cannot_start_ends_the_loop() {
    let mut h = harness::<NoMembership>(None, Some("operation not permitted"));
    let r = tokio::time::timeout(Duration::from_secs(5), h.driver.run())
        .await
        .expect("the loop ends");
    let e = format!("{:#}", r.unwrap_err());
    assert!(
        e.contains("the layer-2 responder cannot start (CAP_NET_RAW?): operation not permitted"),
        "{e}"
    );
}
