//! The node's speaker without sockets: fake sessions and a fake BFD record what
//! the speaker asks of them, scenario by scenario.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use bgp::state::FsmState;
use cluster_view::endpoints::LeanSlice;
use config::Config;
use config::load::{LoadOptions, Loader};
use k8s_openapi::api::core::v1::{Node, Service};
use serde_json::json;
use speaker::bgp_speaker::{BfdState, BgpSpeaker, PeerEvent, SessionId};
use speaker::config_state::Loaded;
use speaker::decide::NodeFacts;
use speaker::decide::bgp::Options;
use speaker::node::NodeSpeaker;
use tokio::sync::mpsc;

mod common;
use common::{FakeBfd, FakeFactory, Log};

const NODE: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node-1, labels: {rack: a}}
"#;

fn parse(yaml: &str) -> Result<Config, String> {
    let mut l = Loader::new(LoadOptions::default());
    l.add_str("node.yaml", NODE).unwrap();
    l.add_str("c.yaml", yaml).unwrap();
    config::parse(&l.finish().resources).map_err(|e| e.to_string())
}

fn config(peer_extra: &str, bfd_rx: u32) -> String {
    format!(
        r#"
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {{name: pool, namespace: metallb-system}}
spec: {{addresses: [198.51.100.0/24]}}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {{name: ad, namespace: metallb-system}}
---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {{name: fast, namespace: metallb-system}}
spec: {{receiveInterval: {bfd_rx}, transmitInterval: 50}}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {{name: r1, namespace: metallb-system}}
spec: {{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, sourceAddress: 192.0.2.11, bfdProfile: fast{peer_extra}}}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {{name: r2, namespace: metallb-system}}
spec: {{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.2}}
"#
    )
}

fn facts(labels: &[(&str, &str)]) -> NodeFacts {
    let n: Node = serde_json::from_value(json!({"metadata": {"name": "node-1",
        "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()}}))
    .unwrap();
    NodeFacts::of(&n)
}

fn svc(name: &str, ip: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"type": "LoadBalancer"},
        "status": {"loadBalancer": {"ingress": [{"ip": ip}]}},
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
    log: Log,
    node: NodeSpeaker<FakeFactory, FakeBfd>,
    _events: mpsc::Receiver<PeerEvent>,
}

impl Harness {
    fn new() -> Self {
        let log: Log = Arc::default();
        let (tx, rx) = mpsc::channel(16);
        let bgp = BgpSpeaker::new(
            "node-1",
            FakeFactory(log.clone()),
            FakeBfd(log.clone(), 0),
            tx,
        );
        Self {
            log,
            node: NodeSpeaker::new(Options::default(), bgp),
            _events: rx,
        }
    }

    /// The calls since the last take.
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

#[test]
fn services_wait_for_the_first_configuration() {
    let mut h = Harness::new();
    assert_eq!(
        h.node.service(
            "default/web",
            Some(&svc("web", "198.51.100.7")),
            &slices("web")
        ),
        None
    );
    let out = h.node.load(Err("bad".into()), facts(&[]));
    assert!(matches!(out.loaded, Loaded::Invalid(_)) && !out.reprocess_all);
    assert_eq!(h.take(), Vec::<String>::new());
}

#[tokio::test]
async fn sessions_routes_and_effects_follow_the_cluster() {
    let mut h = Harness::new();
    let out = h.node.load(parse(&config("", 50)), facts(&[("rack", "a")]));
    assert!(matches!(out.loaded, Loaded::Accepted) && out.reprocess_all);
    // Both sessions start with no route; BFD of r1 starts at once (sourceAddress known).
    assert_eq!(
        h.take(),
        [
            "r1#1 spawn 192.0.2.1:179",
            "bfd acquire 192.0.2.11->192.0.2.1 rx 50 = 1",
            "r2#2 spawn 192.0.2.2:179",
            "r1#1 set []",
            "r2#2 set []",
        ]
    );
    // A Service: its /32 to both peers, once; the effects say so.
    let web = svc("web", "198.51.100.7");
    let d = h
        .node
        .service("default/web", Some(&web), &slices("web"))
        .unwrap();
    assert_eq!((d.result, d.changed), (Ok(()), true));
    h.node.publish();
    assert_eq!(
        h.take(),
        ["r1#1 set [198.51.100.7/32]", "r2#2 set [198.51.100.7/32]"]
    );
    let fx = h.node.take_effects();
    assert_eq!(fx.node_assigned, ["default/web"]);
    assert_eq!(
        fx.service_status,
        BTreeMap::from([(
            "default/web".to_owned(),
            Some(vec!["r1".to_owned(), "r2".to_owned()])
        )])
    );
    assert_eq!(
        fx.announced_metric,
        [(
            "default/web".to_owned(),
            "198.51.100.7".parse().unwrap(),
            true
        )]
    );
    // The same again: nothing sent, no effect, no second event.
    let d = h
        .node
        .service("default/web", Some(&web), &slices("web"))
        .unwrap();
    assert_eq!((d.result, d.changed), (Ok(()), false));
    assert_eq!(h.node.publish(), 0);
    assert_eq!(h.take(), Vec::<String>::new());
    assert!(h.node.take_effects().is_empty());
    // A second Service changes the lists; the first is untouched in the effects.
    h.node.service(
        "default/api",
        Some(&svc("api", "198.51.100.8")),
        &slices("api"),
    );
    h.node.publish();
    assert_eq!(
        h.take(),
        [
            "r1#1 set [198.51.100.7/32 198.51.100.8/32]",
            "r2#2 set [198.51.100.7/32 198.51.100.8/32]"
        ]
    );
    let fx = h.node.take_effects();
    assert_eq!(fx.node_assigned, ["default/api"]);
    // The endpoints go: withdrawn, status object deleted, metric removed.
    h.node
        .service("default/api", Some(&svc("api", "198.51.100.8")), &[]);
    h.node.publish();
    assert_eq!(
        h.take(),
        ["r1#1 set [198.51.100.7/32]", "r2#2 set [198.51.100.7/32]"]
    );
    let fx = h.node.take_effects();
    assert_eq!(
        fx.service_status,
        BTreeMap::from([("default/api".to_owned(), None)])
    );
    assert_eq!(
        fx.announced_metric,
        [(
            "default/api".to_owned(),
            "198.51.100.8".parse().unwrap(),
            false
        )]
    );

    // An invalid configuration changes nothing.
    let out = h.node.load(Err("overlap".into()), facts(&[("rack", "a")]));
    assert!(matches!(out.loaded, Loaded::Invalid(_)) && !out.reprocess_all);
    assert_eq!(h.take(), Vec::<String>::new());

    // A BFD profile change: new parameters (a Poll), no BGP reset.
    let out = h
        .node
        .load(parse(&config("", 100)), facts(&[("rack", "a")]));
    assert!(out.closing.is_empty());
    assert_eq!(h.take(), ["bfd set 1 rx 100"]);

    // A timer change of r1: only r1 restarts (and gets its routes again).
    let out = h.node.load(
        parse(&config(", holdTime: 30s", 100)),
        facts(&[("rack", "a")]),
    );
    assert_eq!(out.closing.len(), 1);
    assert_eq!(
        h.take(),
        [
            "bfd release 1",
            "r1#1 close Deconfigured",
            "r1#3 spawn 192.0.2.1:179",
            "bfd acquire 192.0.2.11->192.0.2.1 rx 100 = 2",
            "r1#3 set [198.51.100.7/32]",
        ]
    );
}

#[tokio::test]
async fn bfd_down_holds_bgp_down_until_bfd_is_up() {
    let mut h = Harness::new();
    h.node.load(parse(&config("", 50)), facts(&[]));
    h.take();
    let bgp = h.node.bgp();
    let _ = bgp.take_status_changes();
    bgp.on_event(PeerEvent {
        id: SessionId {
            peer: "r1".into(),
            generation: 1,
        },
        state: FsmState::Established,
        last_error: None,
        local: Some(SocketAddr::new("192.0.2.11".parse().unwrap(), 40000)),
        held_down: false,
    });
    bgp.on_bfd(&[1], BfdState::Up, false);
    let st = bgp.take_status_changes();
    assert_eq!(st.len(), 1);
    let s = st[0].1.as_ref().unwrap();
    assert_eq!(
        (s.bgp_status.as_str(), s.bfd_status.as_str()),
        ("Established", "Up")
    );
    // Down: held down once, whatever the repeats; Init changes only the status.
    bgp.on_bfd(&[1], BfdState::Down, true);
    bgp.on_bfd(&[1], BfdState::Init, false);
    assert_eq!(h.take(), ["r1#1 hold_down BFD Down"]);
    let bgp = h.node.bgp();
    assert_eq!(bgp.status_of("r1").unwrap().bfd_status, "Init");
    bgp.on_bfd(&[1], BfdState::Up, false);
    assert_eq!(h.take(), ["r1#1 release"]);
    // Late events of an old session are ignored; r2 has no BFD.
    let bgp = h.node.bgp();
    bgp.on_event(PeerEvent {
        id: SessionId {
            peer: "r1".into(),
            generation: 99,
        },
        state: FsmState::Idle,
        last_error: Some("old".into()),
        local: None,
        held_down: false,
    });
    assert_eq!(bgp.status_of("r1").unwrap().bgp_status, "Established");
    assert_eq!(bgp.status_of("r2").unwrap().bfd_status, "N/A");
}

/// `config` with r2 given a BFD profile of its own at `rx` ms (`None`: none).
fn config_r2_bfd(rx: Option<u32>) -> String {
    let c = config("", 50);
    match rx {
        None => c,
        Some(rx) => {
            c.replace(
                "peerAddress: 192.0.2.2}",
                "peerAddress: 192.0.2.2, bfdProfile: r2p}",
            ) + &format!(
                r#"
---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {{name: r2p, namespace: metallb-system}}
spec: {{receiveInterval: {rx}, transmitInterval: {rx}}}
"#
            )
        }
    }
}

/// Attaching a BFD profile to a BGPPeer whose session is Established, changing
/// the profile's timers and detaching it touch BFD only: the session is neither
/// restarted nor held down, and BFD coming up through Down and Init (no client
/// action) does not hold it either. Only a BFD failure does, and detaching the
/// profile then lets the session come up.
#[tokio::test]
async fn attaching_changing_and_detaching_a_bfd_profile_keep_the_bgp_session() {
    let mut h = Harness::new();
    h.node.load(parse(&config_r2_bfd(None)), facts(&[]));
    h.take();
    let r2 = |state, local: Option<&str>| PeerEvent {
        id: SessionId {
            peer: "r2".into(),
            generation: 2,
        },
        state,
        last_error: None,
        local: local.map(|l| SocketAddr::new(l.parse().unwrap(), 40001)),
        held_down: false,
    };
    h.node
        .bgp()
        .on_event(r2(FsmState::Established, Some("192.0.2.11")));
    assert_eq!(h.take(), Vec::<String>::new());

    // Attach: a BFD session for the connection's addresses, nothing else.
    let out = h.node.load(parse(&config_r2_bfd(Some(50))), facts(&[]));
    assert!(out.closing.is_empty());
    assert_eq!(h.take(), ["bfd acquire 192.0.2.11->192.0.2.2 rx 50 = 2"]);
    let bgp = h.node.bgp();
    // The new BFD session comes up: Down, Init, Up, none a failure.
    for state in [BfdState::Down, BfdState::Init, BfdState::Up] {
        bgp.on_bfd(&[2], state, false);
        assert_eq!(bgp.status_of("r2").unwrap().bfd_status, state.as_str());
    }
    assert_eq!(bgp.status_of("r2").unwrap().bgp_status, "Established");
    assert_eq!(h.take(), Vec::<String>::new());

    // New timers: a Poll Sequence, nothing for BGP.
    let out = h.node.load(parse(&config_r2_bfd(Some(100))), facts(&[]));
    assert!(out.closing.is_empty());
    assert_eq!(h.take(), ["bfd set 2 rx 100"]);

    // Detach: the BFD client released, nothing for BGP.
    let out = h.node.load(parse(&config_r2_bfd(None)), facts(&[]));
    assert!(out.closing.is_empty());
    assert_eq!(h.take(), ["bfd release 2"]);
    assert_eq!(h.node.bgp().status_of("r2").unwrap().bfd_status, "N/A");

    // Attached again, a failure holds BGP down; detaching ends the hold.
    h.node.load(parse(&config_r2_bfd(Some(50))), facts(&[]));
    assert_eq!(h.take(), ["bfd acquire 192.0.2.11->192.0.2.2 rx 50 = 3"]);
    let bgp = h.node.bgp();
    bgp.on_bfd(&[3], BfdState::Up, false);
    bgp.on_bfd(&[3], BfdState::Down, true);
    assert_eq!(h.take(), ["r2#2 hold_down BFD Down"]);
    let out = h.node.load(parse(&config_r2_bfd(None)), facts(&[]));
    assert!(out.closing.is_empty());
    assert_eq!(h.take(), ["bfd release 3", "r2#2 release"]);
}

#[tokio::test]
async fn node_labels_start_and_stop_sessions_by_selector_only() {
    let mut h = Harness::new();
    let peers = config("", 50)
        + r#"
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: rack-b, namespace: metallb-system}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.3, nodeSelectors: [{matchLabels: {rack: b}}]}
"#;
    h.node.load(parse(&peers), facts(&[("rack", "a")]));
    let first = h.take();
    assert!(!first.iter().any(|l| l.contains("192.0.2.3")), "{first:?}");
    h.node.load(parse(&peers), facts(&[("rack", "b")]));
    let spawned = h.take();
    assert_eq!(spawned[0], "rack-b#3 spawn 192.0.2.3:179", "{spawned:?}");
    assert!(!spawned.iter().any(|l| l.contains("close")), "{spawned:?}");
    let status: Vec<String> = h
        .node
        .bgp()
        .take_status_changes()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert!(status.contains(&"rack-b".to_owned()));
    // Shutdown: a Cease for peers without graceful restart.
    let log_handle = h.log.clone();
    let closings = h.node.shutdown();
    assert_eq!(closings.len(), 3);
    let log = std::mem::take(&mut *log_handle.lock().unwrap());
    assert!(
        log.iter()
            .all(|l| l.contains("Shutdown") || l.contains("bfd release")),
        "{log:?}"
    );
}

#[tokio::test]
async fn a_peer_that_cannot_run_here_says_why_in_its_status() {
    let mut h = Harness::new();
    let cfg = config("", 50)
        + r#"
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: unnumbered, namespace: metallb-system}
spec: {myASN: 64513, peerASN: 64512, interface: eth0}
"#;
    let out = h.node.load(parse(&cfg), facts(&[]));
    assert_eq!(out.skipped.len(), 1);
    let changes = h.node.bgp().take_status_changes();
    let s = changes
        .iter()
        .find(|(p, _)| p == "unnumbered")
        .and_then(|(_, s)| s.clone())
        .unwrap();
    assert_eq!(s.bgp_status, "Idle");
    assert!(s.last_error.contains("not supported"), "{}", s.last_error);
    // Removed from the configuration: its status object goes.
    h.node.load(parse(&config("", 50)), facts(&[]));
    let changes = h.node.bgp().take_status_changes();
    assert!(
        changes.contains(&("unnumbered".to_owned(), None)),
        "{changes:?}"
    );
}

/// MetalLB's `SetConfig`: a configuration that leaves a Service announced from here with
/// an address in no pool is refused (the running one stays and goes on announcing); once
/// the Service is gone, the same configuration is accepted (issue 27).
#[tokio::test]
async fn a_configuration_orphaning_an_announced_service_is_refused() {
    let mut h = Harness::new();
    let running = config("", 50);
    assert!(matches!(
        h.node.load(parse(&running), facts(&[])).loaded,
        Loaded::Accepted
    ));
    let web = svc("web", "198.51.100.7");
    let d = h
        .node
        .service("default/web", Some(&web), &slices("web"))
        .unwrap();
    assert_eq!(d.result, Ok(()));
    h.node.publish();
    h.take();
    // The pool re-created with other addresses (a delete and a create between two
    // reads): 198.51.100.7 in no pool.
    let moved = running.replace("198.51.100.0/24", "203.0.113.0/24");
    let out = h.node.load(parse(&moved), facts(&[]));
    let Loaded::Invalid(e) = &out.loaded else {
        panic!("accepted: {:?}", out.loaded);
    };
    assert!(
        e.contains("default/web") && e.contains("198.51.100.7") && e.contains("no configuration"),
        "{e}"
    );
    assert!(h.node.refused_for_announced());
    assert!(h.node.tracker().stale());
    // Nothing is withdrawn: the running configuration still announces the Service.
    assert_eq!(h.take(), Vec::<String>::new());
    assert!(
        h.node
            .config()
            .unwrap()
            .pools
            .values()
            .any(|p| p.contains("198.51.100.7".parse().unwrap()))
    );
    let d = h
        .node
        .service("default/web", Some(&web), &slices("web"))
        .unwrap();
    assert_eq!((d.result, d.changed), (Ok(()), false));
    // The Service goes: the same configuration is accepted.
    h.node.service("default/web", None, &[]);
    h.node.publish();
    let out = h.node.load(parse(&moved), facts(&[]));
    assert!(matches!(out.loaded, Loaded::Accepted), "{:?}", out.loaded);
    assert!(!h.node.refused_for_announced());
}

/// The whole configuration with the Nodes node-1..node-5.
fn parse_whole(yaml: &str) -> Config {
    let mut l = Loader::new(LoadOptions::default());
    for i in 1..=5 {
        l.add_str(
            &format!("node{i}.yaml"),
            &format!(
                "apiVersion: v1\nkind: Node\nmetadata: {{name: node-{i}, labels: {{rack: a}}}}\n"
            ),
        )
        .unwrap();
    }
    l.add_str("c.yaml", yaml).unwrap();
    config::parse(&l.finish().resources).unwrap()
}

/// The first of node-1..node-5 in sha256(node#ip) order.
fn first_node(ip: &str) -> String {
    use sha2::{Digest, Sha256};
    (1..=5)
        .map(|i| format!("node-{i}"))
        .min_by_key(|n| {
            let h: [u8; 32] = Sha256::digest(format!("{n}#{ip}").as_bytes()).into();
            h
        })
        .unwrap()
}

#[test]
fn one_node_assigned_per_service_and_none_after_a_restart() {
    use speaker::node::AssignedEvents;
    let mut h = Harness::new();
    h.node.set_assigned_events(AssignedEvents::One);
    let nodes: BTreeMap<String, NodeFacts> = (1..=5)
        .map(|i| {
            let n: Node = serde_json::from_value(
                json!({"metadata": {"name": format!("node-{i}"), "labels": {"rack": "a"}}}),
            )
            .unwrap();
            (format!("node-{i}"), NodeFacts::of(&n))
        })
        .collect();
    h.node.set_nodes(nodes);
    h.node.set_whole_config(Some(parse_whole(&config("", 50))));
    h.node.load(parse(&config("", 50)), facts(&[("rack", "a")]));
    // the first pass after a (re)start: announced before, no event
    h.node.service(
        "default/old",
        Some(&svc("old", "198.51.100.200")),
        &slices("old"),
    );
    let fx = h.node.take_effects();
    assert!(fx.node_assigned.is_empty());
    assert_eq!(fx.service_status.len(), 1, "announced all the same");
    h.node.initial_pass_done();
    // addresses where node-1 comes first, and where it does not
    let mine: Vec<String> = (1..100)
        .map(|i| format!("198.51.100.{i}"))
        .filter(|ip| first_node(ip) == "node-1")
        .take(3)
        .collect();
    let others: Vec<String> = (1..100)
        .map(|i| format!("198.51.100.{i}"))
        .filter(|ip| first_node(ip) != "node-1")
        .take(3)
        .collect();
    assert_eq!((mine.len(), others.len()), (3, 3));
    for (i, ip) in mine.iter().chain(&others).enumerate() {
        let name = format!("s{i}");
        h.node.service(
            &format!("default/{name}"),
            Some(&svc(&name, ip)),
            &slices(&name),
        );
        let fx = h.node.take_effects();
        let sent = fx.node_assigned == [format!("default/{name}")];
        assert_eq!(sent, mine.contains(ip), "{ip}: first is {}", first_node(ip));
        assert!(sent || fx.node_assigned.is_empty());
    }
    // MetalLB's behaviour on request: every node, every time
    h.node.set_assigned_events(AssignedEvents::Every);
    let ip = &others[0];
    h.node
        .service("default/s0b", Some(&svc("s0b", ip)), &slices("s0b"));
    assert_eq!(h.node.take_effects().node_assigned, ["default/s0b"]);
}

/// A full pass decides, besides the cached Services, every Service the node
/// holds anything for: one not announced for a reason of the node (in its
/// NodeBGPStatus summary) and gone from the cache is reached too.
#[tokio::test]
async fn tracked_services_include_those_held_for_a_reason_of_the_node() {
    let mut h = Harness::new();
    let mut unavailable = facts(&[("rack", "a")]);
    unavailable.network_unavailable = true;
    let out = h.node.load(parse(&config("", 50)), unavailable);
    assert!(matches!(out.loaded, Loaded::Accepted));
    let web = svc("web", "198.51.100.7");
    let d = h
        .node
        .service("default/web", Some(&web), &slices("web"))
        .unwrap();
    assert_eq!(
        d.result,
        Err(speaker::decide::bgp::Reason::NodeNetworkUnavailable)
    );
    assert_eq!(h.node.announced().count(), 0);
    assert_eq!(h.node.tracked().collect::<Vec<_>>(), ["default/web"]);
    // Gone from the cache (deleted, or no longer a LoadBalancer): nothing held.
    h.node.service("default/web", None, &[]).unwrap();
    assert_eq!(h.node.tracked().count(), 0);
}
