//! The speaker's BGP decisions against MetalLB's behaviour (speaker.md 2.1-2.4):
//! reasons in upstream's order, routes, per-peer merging, sessions.

use std::sync::Arc;

use cluster_view::endpoints::LeanSlice;
use config::load::{LoadOptions, Loader};
use config::{Community, Config};
use k8s_openapi::api::core::v1::{Node, Service};
use serde_json::json;
use speaker::decide::NodeFacts;
use speaker::decide::bgp::{Options, Reason, decide, for_peer};
use speaker::decide::sessions::sessions;

const NODES: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node-1, labels: {rack: a}}
---
apiVersion: v1
kind: Node
metadata: {name: node-2, labels: {rack: b}}
"#;

const BASE: &str = r#"
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: pool, namespace: metallb-system}
spec: {addresses: [198.51.100.0/24, "2001:db8:5::/48"]}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: r1, namespace: metallb-system}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: r2, namespace: metallb-system}
spec: {myASN: 64513, peerASN: 64513, peerAddress: 192.0.2.2, nodeSelectors: [{matchLabels: {rack: b}}]}
"#;

fn config(extra: &str) -> Config {
    let mut l = Loader::new(LoadOptions::default());
    l.add_str("nodes.yaml", NODES).unwrap();
    l.add_str("base.yaml", BASE).unwrap();
    l.add_str("extra.yaml", extra).unwrap();
    config::parse(&l.finish().resources).unwrap()
}

fn node(name: &str, labels: &[(&str, &str)]) -> NodeFacts {
    let n: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<std::collections::BTreeMap<_,_>>()},
    }))
    .unwrap();
    NodeFacts::of(&n)
}

fn node1() -> NodeFacts {
    node("node-1", &[("rack", "a")])
}

fn svc(ips: &[&str], local: bool, labels: &[(&str, &str)]) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default",
            "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<std::collections::BTreeMap<_,_>>()},
        "spec": {"type": "LoadBalancer", "externalTrafficPolicy": if local {"Local"} else {"Cluster"}},
        "status": {"loadBalancer": {"ingress": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>()}},
    }))
    .unwrap()
}

/// One slice with one endpoint on `node` (ready unless `ready` is false).
fn slice(node: &str, ready: bool) -> Vec<Arc<LeanSlice>> {
    vec![Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "web-x", "namespace": "default", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "nodeName": node, "conditions": {"ready": ready}}],
        }))
        .unwrap(),
    )]
}

const AD: &str = r#"
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: ad, namespace: metallb-system}
"#;

#[test]
fn a_service_is_announced_as_host_routes_to_every_peer() {
    let cfg = config(AD);
    let a = decide(
        &cfg,
        &node1(),
        Some(&svc(&["198.51.100.7"], false, &[])),
        &slice("node-2", true),
        &Options::default(),
    )
    .unwrap();
    assert_eq!(a.pool, "pool");
    assert_eq!(a.routes.len(), 1);
    assert_eq!(a.routes[0].prefix.to_string(), "198.51.100.7/32");
    assert_eq!(a.routes[0].local_pref, None);
    assert!(a.routes[0].peers.is_empty());
    // Sent to the peers running here (r2 runs on rack b only).
    assert_eq!(a.peers(["r1"]), ["r1"]);
}

/// Go parses `::ffff:a.b.c.d` as the IPv4 address it maps: the pool check, the route
/// (a /32 in IPv4 unicast, not a /128) and the status name the IPv4 address, as in
/// layer 2 (issue 27).
#[test]
fn an_ipv4_mapped_ingress_is_announced_as_ipv4() {
    let cfg = config(AD);
    let a = decide(
        &cfg,
        &node1(),
        Some(&svc(&["::ffff:198.51.100.7"], false, &[])),
        &slice("node-2", true),
        &Options::default(),
    )
    .unwrap();
    assert_eq!(
        a.ips,
        vec!["198.51.100.7".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(a.routes.len(), 1);
    assert_eq!(a.routes[0].prefix.to_string(), "198.51.100.7/32");
}

/// Upstream's speaker case "Conflicting local prefs - different ads match same
/// service": an advertisement for every Service (LOCAL_PREF 100) and one with a service
/// selector (LOCAL_PREF 200) both select a Service on this node: the same /32 to the
/// same peer with two LOCAL_PREFs, so the Service is withdrawn here with
/// `conflictingAdvertisements` (before, both were announced). A Service the selector
/// does not match is announced.
#[test]
fn advertisements_with_different_local_prefs_for_one_service_conflict() {
    let cfg = config(
        r#"
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: ad1, namespace: metallb-system}
spec: {localPref: 100}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: ad2, namespace: metallb-system}
spec: {localPref: 200, serviceSelectors: [{matchLabels: {app: nginx}}]}
"#,
    );
    let ep = slice("node-2", true);
    let o = Options::default();
    let nginx = svc(&["198.51.100.7"], false, &[("app", "nginx")]);
    let r = decide(&cfg, &node1(), Some(&nginx), &ep, &o);
    assert_eq!(r.err(), Some(Reason::ConflictingAdvertisements));
    assert_eq!(
        Reason::ConflictingAdvertisements.as_str(),
        "conflictingAdvertisements"
    );
    let other = svc(&["198.51.100.8"], false, &[("app", "other")]);
    let a = decide(&cfg, &node1(), Some(&other), &ep, &o).unwrap();
    assert_eq!(a.routes.len(), 1);
    assert_eq!(a.routes[0].local_pref, Some(100));
    // Same LOCAL_PREF, or different peers: no conflict.
    let same = config(
        r#"
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: ad1, namespace: metallb-system}
spec: {localPref: 100, peers: [r1]}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: ad2, namespace: metallb-system}
spec: {localPref: 200, peers: [r2], serviceSelectors: [{matchLabels: {app: nginx}}]}
"#,
    );
    assert!(decide(&same, &node1(), Some(&nginx), &ep, &o).is_ok());
}

#[test]
fn reasons_come_in_upstreams_order() {
    let cfg = config(AD);
    let n = node1();
    let o = Options::default();
    let ep = slice("node-2", true);
    let d = |s: Option<&Service>, slices: &[Arc<LeanSlice>], n: &NodeFacts, o: &Options| {
        decide(&cfg, n, s, slices, o).err()
    };
    assert_eq!(d(None, &ep, &n, &o), Some(Reason::ServiceDeleted));
    let mut cluster_ip = svc(&["198.51.100.7"], false, &[]);
    cluster_ip.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
    assert_eq!(
        d(Some(&cluster_ip), &ep, &n, &o),
        Some(Reason::NotLoadBalancer)
    );
    let mut classy = svc(&["198.51.100.7"], false, &[]);
    classy.spec.as_mut().unwrap().load_balancer_class = Some("other".into());
    assert_eq!(
        d(Some(&classy), &ep, &n, &o),
        Some(Reason::OtherLoadBalancerClass)
    );
    assert_eq!(
        d(Some(&svc(&[], false, &[])), &ep, &n, &o),
        Some(Reason::NoIpAllocated)
    );
    assert_eq!(
        d(Some(&svc(&["nope"], false, &[])), &ep, &n, &o),
        Some(Reason::InvalidIp)
    );
    assert_eq!(
        d(Some(&svc(&["203.0.113.1"], false, &[])), &ep, &n, &o),
        Some(Reason::IpNotAllowed)
    );
    // Available and excluded nodes.
    let mut down = node1();
    down.network_unavailable = true;
    down.excluded_from_lb = true;
    let s = svc(&["198.51.100.7"], false, &[]);
    assert_eq!(
        d(Some(&s), &ep, &down, &o),
        Some(Reason::NodeNetworkUnavailable)
    );
    let mut excluded = node1();
    excluded.excluded_from_lb = true;
    assert_eq!(
        d(Some(&s), &ep, &excluded, &o),
        Some(Reason::NodeLabeledExcludeBalancers)
    );
    let ignore = Options {
        ignore_exclude_lb: true,
        ..Options::default()
    };
    assert_eq!(d(Some(&s), &ep, &excluded, &ignore), None);
    // Endpoints: Local needs one here; Cluster one anywhere; not ready does not count.
    let local = svc(&["198.51.100.7"], true, &[]);
    assert_eq!(d(Some(&local), &ep, &n, &o), Some(Reason::NoLocalEndpoints));
    assert_eq!(d(Some(&local), &slice("node-1", true), &n, &o), None);
    assert_eq!(
        d(Some(&s), &slice("node-2", false), &n, &o),
        Some(Reason::NoEndpoints)
    );
    assert_eq!(d(Some(&s), &[], &n, &o), Some(Reason::NoEndpoints));
    // Availability is checked before endpoints.
    assert_eq!(
        d(Some(&s), &[], &down, &o),
        Some(Reason::NodeNetworkUnavailable)
    );
}

#[test]
fn advertisements_select_nodes_and_services() {
    let cfg = config(
        r#"
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: rack-b, namespace: metallb-system}
spec: {nodeSelectors: [{matchLabels: {rack: b}}]}
"#,
    );
    let s = svc(&["198.51.100.7"], false, &[]);
    let ep = slice("node-1", true);
    assert_eq!(
        decide(&cfg, &node1(), Some(&s), &ep, &Options::default()).err(),
        Some(Reason::NotOwner)
    );
    let node2 = node("node-2", &[("rack", "b")]);
    assert!(decide(&cfg, &node2, Some(&s), &ep, &Options::default()).is_ok());

    let cfg = config(
        r#"
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: web-only, namespace: metallb-system}
spec: {serviceSelectors: [{matchLabels: {app: web}}]}
"#,
    );
    assert_eq!(
        decide(&cfg, &node1(), Some(&s), &ep, &Options::default()).err(),
        Some(Reason::NoMatchingAdvertisement)
    );
    let web = svc(&["198.51.100.7"], false, &[("app", "web")]);
    assert!(decide(&cfg, &node1(), Some(&web), &ep, &Options::default()).is_ok());
}

#[test]
fn aggregation_local_pref_communities_and_peers() {
    let cfg = config(
        r#"
apiVersion: metallb.io/v1beta1
kind: Community
metadata: {name: c, namespace: metallb-system}
spec: {communities: [{name: gold, value: "64512:300"}]}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: agg, namespace: metallb-system}
spec:
  aggregationLength: 24
  aggregationLengthV6: 64
  localPref: 150
  communities: [gold, "64512:200", "large:64512:1:2"]
  peers: [r2]
"#,
    );
    let s = svc(&["198.51.100.7", "2001:db8:5::7"], false, &[]);
    let a = decide(
        &cfg,
        &node1(),
        Some(&s),
        &slice("x", true),
        &Options::default(),
    )
    .unwrap();
    let prefixes: Vec<String> = a.routes.iter().map(|r| r.prefix.to_string()).collect();
    assert_eq!(prefixes, ["198.51.100.0/24", "2001:db8:5::/64"]);
    assert_eq!(a.routes[0].local_pref, Some(150));
    assert_eq!(
        a.routes[0].communities,
        [
            Community::Standard(64512, 200),
            Community::Standard(64512, 300),
            Community::Large(64512, 1, 2)
        ]
    );
    assert_eq!(a.routes[0].peers, ["r2"]);
    // Only r2 gets it; r1 nothing.
    assert!(for_peer("r1", &a.routes).is_empty());
    let ads = for_peer("r2", &a.routes);
    assert_eq!(ads.len(), 2);
    assert_eq!(ads[0].local_pref, Some(150));
    assert_eq!(ads[0].communities.len(), 2);
    assert_eq!(ads[0].large_communities.len(), 1);
}

#[test]
fn duplicate_prefixes_merge_first_local_pref_and_union_of_communities() {
    let cfg = config(
        r#"
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: a1, namespace: metallb-system}
spec: {communities: ["64512:1"], localPref: 100, serviceSelectors: [{matchLabels: {app: a}}]}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: a2, namespace: metallb-system}
spec: {communities: ["64512:2"], localPref: 200, serviceSelectors: [{matchLabels: {app: b}}]}
"#,
    );
    let ep = slice("x", true);
    let a = decide(
        &cfg,
        &node1(),
        Some(&svc(&["198.51.100.7"], false, &[("app", "a")])),
        &ep,
        &Options::default(),
    )
    .unwrap();
    let b = decide(
        &cfg,
        &node1(),
        Some(&svc(&["198.51.100.7"], false, &[("app", "b")])),
        &ep,
        &Options::default(),
    )
    .unwrap();
    let ads = for_peer("r1", a.routes.iter().chain(&b.routes));
    assert_eq!(ads.len(), 1, "{ads:?}");
    assert_eq!(ads[0].prefix.to_string(), "198.51.100.7/32");
    assert_eq!(ads[0].local_pref, Some(100));
    assert_eq!(ads[0].communities.len(), 2);
}

#[test]
fn sessions_run_by_node_selector_and_keep_secrets_out_of_debug() {
    let cfg = config(
        r#"
apiVersion: v1
kind: Secret
metadata: {name: pw, namespace: metallb-system}
type: kubernetes.io/basic-auth
stringData: {password: s3cr3t-value}
---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {name: fast, namespace: metallb-system}
spec: {receiveInterval: 50, transmitInterval: 50, detectMultiplier: 3}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: r3, namespace: metallb-system}
spec: {myASN: 64513, peerASN: 64514, peerAddress: 192.0.2.3, holdTime: 9s, bfdProfile: fast, passwordSecret: {name: pw}, enableGracefulRestart: true, ebgpMultiHop: true}
"#,
    );
    let (a, skipped) = sessions(&cfg, &node1());
    assert!(skipped.is_empty());
    assert_eq!(a.keys().collect::<Vec<_>>(), ["r1", "r3"]);
    let (b, _) = sessions(&cfg, &node("node-2", &[("rack", "b")]));
    assert_eq!(b.keys().collect::<Vec<_>>(), ["r1", "r2", "r3"]);
    let r3 = &a["r3"];
    assert_eq!(r3.bgp.peer.to_string(), "192.0.2.3:179");
    assert_eq!(r3.bgp.fsm.hold_time, Some(9));
    assert_eq!(r3.bgp.fsm.keepalive_time, Some(3));
    assert!(r3.bgp.ebgp_multihop);
    assert!(r3.graceful_restart && r3.bgp.fsm.graceful_restart.is_some());
    assert_eq!(r3.bgp.password.as_deref(), Some("s3cr3t-value"));
    let bfd = r3.bfd.as_ref().unwrap();
    assert_eq!((bfd.params.receive_interval_ms, bfd.multihop), (50, true));
    let debug = format!("{r3:?}");
    assert!(!debug.contains("s3cr3t"), "{debug}");
    // An unchanged BGPPeer gives an equal session spec (no reset).
    assert_eq!(sessions(&cfg, &node1()).0["r1"].bgp, a["r1"].bgp);
}
