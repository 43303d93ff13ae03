//! The node's speaker in layer 2 without sockets: a fake responder records
//! the claims, scenario by scenario (takeover, release, shared address,
//! invalid configuration, missing interface).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use arp_ndp::interfaces::AllowedInterfaces;
use cluster_view::endpoints::LeanSlice;
use config::Config;
use config::load::{LoadOptions, Loader};
use k8s_openapi::api::core::v1::{Node, Service};
use serde_json::json;
use speaker::bgp_speaker::{
    BfdClient, BfdOps, BgpSpeaker, Closing, PeerEvent, PeerSession, SessionFactory, SessionId,
};
use speaker::config_state::Loaded;
use speaker::decide::NodeFacts;
use speaker::decide::bgp::Options;
use speaker::decide::sessions::{BfdSpec, SessionSpec};
use speaker::l2_speaker::L2Ops;
use speaker::node::NodeSpeaker;
use tokio::sync::mpsc;

/// What the fake responder holds: per address, the owners and their lists.
#[derive(Default)]
struct Responder {
    claims: BTreeMap<IpAddr, BTreeMap<String, AllowedInterfaces>>,
    interfaces: BTreeSet<String>,
    calls: Vec<String>,
}

#[derive(Clone, Default)]
struct FakeL2(Arc<Mutex<Responder>>);

impl L2Ops for FakeL2 {
    fn interfaces(&self) -> BTreeSet<String> {
        self.0.lock().unwrap().interfaces.clone()
    }
    fn claim(&mut self, owner: &str, ip: IpAddr, allowed: AllowedInterfaces) {
        let mut r = self.0.lock().unwrap();
        r.calls.push(format!("claim {owner} {ip} {:?}", allowed.0));
        r.claims
            .entry(ip)
            .or_default()
            .insert(owner.to_owned(), allowed);
    }
    fn reannounce(&mut self) {
        self.0.lock().unwrap().calls.push("reannounce".into());
    }
    fn release(&mut self, owner: &str, ip: IpAddr) {
        let mut r = self.0.lock().unwrap();
        r.calls.push(format!("release {owner} {ip}"));
        if let Some(c) = r.claims.get_mut(&ip) {
            c.remove(owner);
            if c.is_empty() {
                r.claims.remove(&ip);
            }
        }
    }
}

impl FakeL2 {
    fn take_calls(&self) -> Vec<String> {
        std::mem::take(&mut self.0.lock().unwrap().calls)
    }
    /// Whether the address is answered (some owner claims it).
    fn answered(&self, ip: &str) -> bool {
        self.0
            .lock()
            .unwrap()
            .claims
            .contains_key(&ip.parse().unwrap())
    }
}

struct NoSessions;

impl SessionFactory for NoSessions {
    fn spawn(
        &mut self,
        _: SessionId,
        _: &SessionSpec,
        _: mpsc::Sender<PeerEvent>,
    ) -> Result<Box<dyn PeerSession>, String> {
        Err("no BGP in these tests".into())
    }
}

struct NoBfd;

impl BfdOps for NoBfd {
    fn acquire(
        &mut self,
        _: IpAddr,
        _: IpAddr,
        _: &BfdSpec,
        _: Option<&str>,
    ) -> Result<BfdClient, String> {
        Err("no BFD".into())
    }
    fn set_parameters(&mut self, _: BfdClient, _: &BfdSpec) -> Result<(), String> {
        Ok(())
    }
    fn release(&mut self, _: BfdClient) {}
}

const NODES: [&str; 3] = ["node-1", "node-2", "node-3"];

fn node_object(name: &str) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }))
    .unwrap()
}

fn parse(yaml: &str) -> Result<Config, String> {
    let mut l = Loader::new(LoadOptions::default());
    for n in NODES {
        l.add_str(
            &format!("{n}.yaml"),
            &serde_json::to_string(&node_object(n)).unwrap(),
        )
        .unwrap();
    }
    l.add_str("c.yaml", yaml).unwrap();
    config::parse(&l.finish().resources).map_err(|e| e.to_string())
}

fn config(interfaces: &str) -> String {
    format!(
        r#"
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {{name: pool, namespace: metallb-system}}
spec: {{addresses: [198.51.100.0/24, "2001:db8:5::/64"]}}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {{name: l2, namespace: metallb-system}}
spec: {{interfaces: [{interfaces}]}}
"#
    )
}

fn svc(name: &str, ips: &[&str]) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default",
            "annotations": {"metallb.io/allow-shared-ip": "k"}},
        "spec": {"type": "LoadBalancer"},
        "status": {"loadBalancer": {"ingress": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>()}},
    }))
    .unwrap()
}

fn slices(name: &str) -> Vec<Arc<LeanSlice>> {
    vec![Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-x"), "namespace": "default", "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "nodeName": "node-2"}],
        }))
        .unwrap(),
    )]
}

struct Harness {
    l2: FakeL2,
    node: NodeSpeaker<NoSessions, NoBfd, FakeL2>,
    _events: mpsc::Receiver<PeerEvent>,
}

impl Harness {
    fn new(yaml: &str, interfaces: &[&str]) -> Self {
        let (tx, rx) = mpsc::channel(16);
        let bgp = BgpSpeaker::new("node-1", NoSessions, NoBfd, tx);
        let l2 = FakeL2::default();
        l2.0.lock().unwrap().interfaces = interfaces.iter().map(|s| s.to_string()).collect();
        let mut node = NodeSpeaker::new(Options::default(), bgp).with_l2(l2.clone());
        let facts: BTreeMap<String, NodeFacts> = NODES
            .iter()
            .map(|n| (n.to_string(), NodeFacts::of(&node_object(n))))
            .collect();
        assert!(node.set_nodes(facts.clone()));
        assert!(!node.set_nodes(facts.clone()));
        let out = node.load(parse(yaml), facts["node-1"].clone());
        assert!(matches!(out.loaded, Loaded::Accepted) && out.reprocess_all);
        Harness {
            l2,
            node,
            _events: rx,
        }
    }

    fn decide(&mut self, name: &str, ips: &[&str]) {
        self.node.service(
            &format!("default/{name}"),
            Some(&svc(name, ips)),
            &slices(name),
        );
    }
}

fn live(nodes: &[&str]) -> Option<BTreeSet<String>> {
    Some(nodes.iter().map(|s| s.to_string()).collect())
}

/// An address node-1 does not win with every node live but wins once
/// `gone` is not live (found with the election itself: the order is
/// checked against an independent hash in `decide_l2.rs`).
fn address_where_node1_is_second() -> (String, String) {
    let cfg = parse(&config("")).unwrap();
    let facts: BTreeMap<String, NodeFacts> = NODES
        .iter()
        .map(|n| (n.to_string(), NodeFacts::of(&node_object(n))))
        .collect();
    for i in 1..250 {
        let ip = format!("198.51.100.{i}");
        let d = speaker::decide::l2::decide(
            &cfg,
            "node-1",
            speaker::decide::l2::Cluster {
                nodes: &facts,
                live: None,
            },
            Some(&svc("web", &[&ip])),
            &slices("web"),
            &Options::default(),
        );
        let e = d.election.unwrap();
        if e.candidates[1].node == "node-1" {
            return (ip, e.candidates[0].node.clone());
        }
    }
    panic!("no address puts node-1 second");
}

#[test]
fn takeover_and_release_follow_the_live_speakers() {
    let (ip, first) = address_where_node1_is_second();
    let mut h = Harness::new(&config(""), &["eth0"]);
    let all = live(&NODES);
    assert!(h.node.set_live(all.clone()));
    h.decide("web", &[&ip]);
    assert_eq!(h.l2.take_calls(), Vec::<String>::new());
    assert!(h.node.take_effects().is_empty());
    // node-1 is next: its fast path watches the owner.
    assert_eq!(
        h.node.watched_owners(),
        BTreeSet::from([first.clone()]),
        "the owner a successor watches"
    );

    // The owner is gone: node-1 takes over.
    let without: Vec<&str> = NODES.iter().copied().filter(|n| *n != first).collect();
    assert!(h.node.set_live(live(&without)));
    assert!(!h.node.set_live(live(&without)));
    h.decide("web", &[&ip]);
    assert_eq!(h.l2.take_calls(), [format!("claim default/web {ip} {{}}")]);
    // The owner now: it watches nobody for this Service.
    assert_eq!(h.node.watched_owners(), BTreeSet::new());
    let fx = h.node.take_effects();
    assert_eq!(fx.l2_node_assigned, ["default/web"]);
    assert_eq!(
        fx.l2_status,
        BTreeMap::from([("default/web".to_owned(), Some(Vec::new()))])
    );
    assert_eq!(
        fx.l2_announced_metric,
        [("default/web".to_owned(), ip.parse().unwrap(), true)]
    );
    assert!(fx.node_assigned.is_empty() && fx.service_status.is_empty());
    // A re-sync changes nothing: no claim, no effect, no second event.
    h.decide("web", &[&ip]);
    assert_eq!(h.l2.take_calls(), Vec::<String>::new());
    assert!(h.node.take_effects().is_empty());
    assert_eq!(h.node.announced().collect::<Vec<_>>(), ["default/web"]);
    // A watcher's heartbeat is back: the held address is announced again.
    assert_eq!(h.node.l2().reannounce(), 1);
    assert_eq!(h.l2.take_calls(), ["reannounce"]);

    // The owner is back (the hash moves it back): node-1 releases.
    assert!(h.node.set_live(all));
    h.decide("web", &[&ip]);
    assert_eq!(h.l2.take_calls(), [format!("release default/web {ip}")]);
    // Holding nothing, nothing is announced again.
    assert_eq!(h.node.l2().reannounce(), 0);
    assert_eq!(h.l2.take_calls(), Vec::<String>::new());
    assert!(!h.l2.answered(&ip));
    let fx = h.node.take_effects();
    assert_eq!(
        fx.l2_status,
        BTreeMap::from([("default/web".to_owned(), None)])
    );
    assert_eq!(
        fx.l2_announced_metric,
        [("default/web".to_owned(), ip.parse().unwrap(), false)]
    );
    assert!(fx.l2_node_assigned.is_empty());

    // A second takeover is a second transition: a second event.
    h.node.set_live(live(&without));
    h.decide("web", &[&ip]);
    assert_eq!(h.node.take_effects().l2_node_assigned, ["default/web"]);
    assert_eq!(h.l2.take_calls(), [format!("claim default/web {ip} {{}}")]);
    // Deleted: released.
    h.node.service("default/web", None, &[]);
    assert_eq!(h.l2.take_calls(), [format!("release default/web {ip}")]);
    assert_eq!(h.node.announced().count(), 0);
    // Back with every speaker live, then deleted: nothing is watched any more.
    h.node.set_live(live(&NODES));
    h.decide("web", &[&ip]);
    assert_eq!(h.node.watched_owners(), BTreeSet::from([first.clone()]));
    h.node.service("default/web", None, &[]);
    assert_eq!(h.node.watched_owners(), BTreeSet::new());
}

#[test]
fn a_shared_address_stays_answered_until_its_last_service_goes() {
    let mut h = Harness::new(&config(""), &["eth0"]);
    // Alone, node-1 wins everything.
    h.node.set_live(live(&["node-1"]));
    h.decide("web", &["198.51.100.7"]);
    h.decide("api", &["198.51.100.7", "2001:db8:5::7"]);
    assert_eq!(
        h.l2.take_calls(),
        [
            "claim default/web 198.51.100.7 {}",
            "claim default/api 198.51.100.7 {}",
            "claim default/api 2001:db8:5::7 {}",
        ]
    );
    let fx = h.node.take_effects();
    assert_eq!(fx.l2_node_assigned, ["default/web", "default/api"]);
    assert_eq!(fx.l2_status.len(), 2);
    // web's endpoints go: only web's claim is released, the address is
    // still answered for api.
    h.node
        .service("default/web", Some(&svc("web", &["198.51.100.7"])), &[]);
    assert_eq!(h.l2.take_calls(), ["release default/web 198.51.100.7"]);
    assert!(h.l2.answered("198.51.100.7"));
    let fx = h.node.take_effects();
    assert_eq!(
        fx.l2_status,
        BTreeMap::from([("default/web".to_owned(), None)])
    );
    // api changes one address: the old one released, the new one claimed,
    // the status unchanged.
    h.decide("api", &["198.51.100.7", "2001:db8:5::8"]);
    assert_eq!(
        h.l2.take_calls(),
        [
            "claim default/api 2001:db8:5::8 {}",
            "release default/api 2001:db8:5::7",
        ]
    );
    let fx = h.node.take_effects();
    assert!(fx.l2_status.is_empty() && fx.l2_node_assigned.is_empty());
    assert_eq!(
        fx.l2_announced_metric,
        [
            (
                "default/api".to_owned(),
                "2001:db8:5::7".parse().unwrap(),
                false
            ),
            (
                "default/api".to_owned(),
                "2001:db8:5::8".parse().unwrap(),
                true
            ),
        ]
    );
    h.node.service("default/api", None, &[]);
    assert!(!h.l2.answered("198.51.100.7"));
}

#[test]
fn an_invalid_configuration_keeps_the_claims() {
    let mut h = Harness::new(&config(""), &["eth0"]);
    h.node.set_live(live(&["node-1"]));
    h.decide("web", &["198.51.100.7"]);
    h.l2.take_calls();
    h.node.take_effects();
    let facts = NodeFacts::of(&node_object("node-1"));
    let out = h.node.load(Err("overlapping pools".into()), facts);
    assert!(matches!(out.loaded, Loaded::Invalid(_)) && !out.reprocess_all);
    // Re-deciding under the last good configuration changes nothing.
    h.decide("web", &["198.51.100.7"]);
    assert_eq!(h.l2.take_calls(), Vec::<String>::new());
    assert!(h.node.take_effects().is_empty());
    assert!(h.l2.answered("198.51.100.7"));
    // A valid configuration without the advertisement withdraws.
    let facts = NodeFacts::of(&node_object("node-1"));
    let no_ad = r#"
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: pool, namespace: metallb-system}
spec: {addresses: [198.51.100.0/24]}
"#;
    let out = h.node.load(parse(no_ad), facts);
    assert!(out.reprocess_all);
    h.decide("web", &["198.51.100.7"]);
    assert_eq!(h.l2.take_calls(), ["release default/web 198.51.100.7"]);
}

#[test]
fn missing_interfaces_fail_the_address_until_they_exist() {
    let mut h = Harness::new(&config("eth9, eth1"), &["eth0", "lo"]);
    h.node.set_live(live(&["node-1"]));
    h.decide("web", &["198.51.100.7"]);
    assert_eq!(h.l2.take_calls(), Vec::<String>::new());
    let fx = h.node.take_effects();
    assert_eq!(
        fx.announce_failed,
        [("default/web".to_owned(), "198.51.100.7".parse().unwrap())]
    );
    // As MetalLB: still "announced" (metric, event), but no status object.
    assert_eq!(fx.l2_node_assigned, ["default/web"]);
    assert_eq!(fx.l2_announced_metric.len(), 1);
    assert!(fx.l2_status.is_empty());
    assert_eq!(h.node.l2().failing().collect::<Vec<_>>(), ["default/web"]);
    // Once, not on every pass.
    h.decide("web", &["198.51.100.7"]);
    assert!(h.node.take_effects().is_empty());
    // One of the interfaces appears: claimed on the advertisement's list,
    // the status names both, sorted.
    h.l2.0.lock().unwrap().interfaces.insert("eth1".into());
    h.decide("web", &["198.51.100.7"]);
    assert_eq!(
        h.l2.take_calls(),
        ["claim default/web 198.51.100.7 {\"eth1\", \"eth9\"}"]
    );
    let fx = h.node.take_effects();
    assert_eq!(
        fx.l2_status,
        BTreeMap::from([(
            "default/web".to_owned(),
            Some(vec!["eth1".to_owned(), "eth9".to_owned()])
        )])
    );
    assert!(fx.announce_failed.is_empty() && fx.l2_node_assigned.is_empty());
    assert_eq!(h.node.l2().failing().count(), 0);
}

#[test]
fn closing_is_not_needed_without_bgp() {
    // The BGP half stays idle in layer-2-only configurations.
    let h = Harness::new(&config(""), &["eth0"]);
    let c: Vec<Closing> = h.node.shutdown();
    assert!(c.is_empty());
}

/// A responder that is not running (no `CAP_NET_RAW`): nothing claimed, no status
/// object, no `announceFailed`; the desired state (metric, event) still says so, and
/// the claims come once it runs and the Service is decided again.
#[derive(Clone, Default)]
struct Stopped {
    inner: FakeL2,
    running: Arc<Mutex<bool>>,
}

impl L2Ops for Stopped {
    fn running(&self) -> bool {
        *self.running.lock().unwrap()
    }
    fn interfaces(&self) -> BTreeSet<String> {
        self.inner.interfaces()
    }
    fn claim(&mut self, owner: &str, ip: IpAddr, allowed: AllowedInterfaces) {
        self.inner.claim(owner, ip, allowed)
    }
    fn release(&mut self, owner: &str, ip: IpAddr) {
        self.inner.release(owner, ip)
    }
}

#[test]
fn nothing_is_claimed_or_reported_while_the_responder_does_not_run() {
    let (tx, _rx) = mpsc::channel(16);
    let bgp = BgpSpeaker::new("node-1", NoSessions, NoBfd, tx);
    let l2 = Stopped::default();
    let mut node = NodeSpeaker::new(Options::default(), bgp).with_l2(l2.clone());
    let facts = NodeFacts::of(&node_object("node-1"));
    node.set_nodes(BTreeMap::from([("node-1".to_owned(), facts.clone())]));
    node.load(parse(&config("eth9")), facts);
    let web = svc("web", &["198.51.100.7"]);
    node.service("default/web", Some(&web), &slices("web"));
    assert_eq!(l2.inner.take_calls(), Vec::<String>::new());
    let fx = node.take_effects();
    assert!(fx.l2_status.is_empty() && fx.announce_failed.is_empty());
    assert_eq!(fx.l2_node_assigned, ["default/web"]);
    // It runs, with the interface: the next decision claims and reports.
    *l2.running.lock().unwrap() = true;
    l2.inner.0.lock().unwrap().interfaces.insert("eth9".into());
    node.service("default/web", Some(&web), &slices("web"));
    assert_eq!(
        l2.inner.take_calls(),
        ["claim default/web 198.51.100.7 {\"eth9\"}"]
    );
    let fx = node.take_effects();
    assert_eq!(
        fx.l2_status,
        BTreeMap::from([("default/web".to_owned(), Some(vec!["eth9".to_owned()]))])
    );
    assert!(fx.l2_node_assigned.is_empty());
}
