//! The speaker's layer-2 decisions against MetalLB's behaviour (speaker.md
//! 1.7, 3.1, 3.2, 8): reasons in upstream's order, the candidate set, the
//! election order (winners computed here with sha256 directly, not by the
//! code under test), shared IPs, preferences, interfaces.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cluster_view::endpoints::LeanSlice;
use config::Config;
use config::load::{LoadOptions, Loader};
use k8s_openapi::api::core::v1::{Node, Service};
use serde_json::json;
use sha2::{Digest, Sha256};
use speaker::decide::NodeFacts;
use speaker::decide::l2::{Cluster, Interfaces, Options, Reason, decide};

/// A node of the test cluster.
struct N {
    name: &'static str,
    labels: &'static [(&'static str, &'static str)],
    unavailable: bool,
}

const fn n(name: &'static str, labels: &'static [(&'static str, &'static str)]) -> N {
    N {
        name,
        labels,
        unavailable: false,
    }
}

fn node_object(n: &N) -> Node {
    let labels: BTreeMap<String, String> = n
        .labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let status = if n.unavailable { "True" } else { "False" };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": n.name, "labels": labels},
        "status": {"conditions": [{"type": "NetworkUnavailable", "status": status}]},
    }))
    .unwrap()
}

struct World {
    config: Config,
    nodes: BTreeMap<String, NodeFacts>,
}

impl World {
    fn new(nodes: &[N], objects: &str) -> World {
        let mut l = Loader::new(LoadOptions::default());
        for n in nodes {
            l.add_str(
                &format!("{}.yaml", n.name),
                &serde_json::to_string(&node_object(n)).unwrap(),
            )
            .unwrap();
        }
        l.add_str("config.yaml", POOL).unwrap();
        l.add_str("extra.yaml", objects).unwrap();
        let config = config::parse(&l.finish().resources).unwrap();
        let nodes = nodes
            .iter()
            .map(|n| (n.name.to_owned(), NodeFacts::of(&node_object(n))))
            .collect();
        World { config, nodes }
    }

    fn cluster<'a>(&'a self, live: Option<&'a BTreeSet<String>>) -> Cluster<'a> {
        Cluster {
            nodes: &self.nodes,
            live,
        }
    }

    /// The nodes announcing `svc` (each one deciding for itself).
    fn announcers(
        &self,
        svc: &Service,
        slices: &[Arc<LeanSlice>],
        live: Option<&BTreeSet<String>>,
        options: &Options,
    ) -> Vec<String> {
        self.nodes
            .keys()
            .filter(|me| {
                decide(
                    &self.config,
                    me,
                    self.cluster(live),
                    Some(svc),
                    slices,
                    options,
                )
                .result
                .is_ok()
            })
            .cloned()
            .collect()
    }
}

const POOL: &str = r#"
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: pool, namespace: metallb-system}
spec: {addresses: [198.51.100.0/24, "2001:db8:5::/48"]}
"#;

const AD: &str = r#"
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: ad, namespace: metallb-system}
"#;

fn svc_named(
    name: &str,
    ips: &[&str],
    local: bool,
    annotations: &[(&str, &str)],
    labels: &[(&str, &str)],
) -> Service {
    let m = |kv: &[(&str, &str)]| {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>()
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "labels": m(labels), "annotations": m(annotations)},
        "spec": {"type": "LoadBalancer", "externalTrafficPolicy": if local {"Local"} else {"Cluster"}},
        "status": {"loadBalancer": {"ingress": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>()}},
    }))
    .unwrap()
}

fn svc(ips: &[&str]) -> Service {
    svc_named("web", ips, false, &[], &[])
}

/// Endpoints: (node, ready, serving, with an address).
fn slices(eps: &[(Option<&str>, bool, bool, bool)]) -> Vec<Arc<LeanSlice>> {
    let endpoints: Vec<_> = eps
        .iter()
        .map(|(node, ready, serving, addr)| {
            let mut e = json!({
                "addresses": if *addr { vec!["10.0.0.1"] } else { Vec::new() },
                "conditions": {"ready": ready, "serving": serving},
            });
            if let Some(n) = node {
                e["nodeName"] = json!(n);
            }
            e
        })
        .collect();
    vec![Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "web-x", "namespace": "default", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "endpoints": endpoints,
        }))
        .unwrap(),
    )]
}

fn ready_on(node: &str) -> Vec<Arc<LeanSlice>> {
    slices(&[(Some(node), true, true, true)])
}

/// The test's own election: sort by score descending, then by the sha256
/// of `node#ip` (the IP as Go prints it, written out by hand) ascending.
fn expected_order(nodes: &[(&str, i64)], go_ip: &str) -> Vec<String> {
    let mut v: Vec<(i64, Vec<u8>, String)> = nodes
        .iter()
        .map(|(n, score)| {
            let mut h = Sha256::new();
            h.update(n.as_bytes());
            h.update(b"#");
            h.update(go_ip.as_bytes());
            (-score, h.finalize().to_vec(), n.to_string())
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, _, n)| n).collect()
}

const FIVE: [N; 5] = [
    n("node-a", &[("rack", "a")]),
    n("node-b", &[("rack", "a")]),
    n("node-c", &[("rack", "b")]),
    n("node-d", &[("rack", "b")]),
    n("worker-10", &[("rack", "c")]),
];

fn names(ns: &[N]) -> Vec<(&str, i64)> {
    ns.iter().map(|n| (n.name, 0)).collect()
}

#[test]
fn the_winner_is_the_lowest_hash_for_every_address_form() {
    let w = World::new(&FIVE, AD);
    let ep = ready_on("node-a");
    // (ingress as written in the Service, as Go prints it)
    let table = [
        ("198.51.100.7", "198.51.100.7"),
        ("198.51.100.8", "198.51.100.8"),
        ("198.51.100.200", "198.51.100.200"),
        ("::ffff:198.51.100.9", "198.51.100.9"),
        ("2001:db8:5::1", "2001:db8:5::1"),
        ("2001:db8:5:0:0:0:0:a", "2001:db8:5::a"),
        ("2001:DB8:5::ABCD", "2001:db8:5::abcd"),
    ];
    let mut winners = BTreeSet::new();
    for (ingress, go_ip) in table {
        let s = svc(&[ingress]);
        let want = expected_order(&names(&FIVE), go_ip);
        let got = w.announcers(&s, &ep, None, &Options::default());
        assert_eq!(got, vec![want[0].clone()], "{ingress}");
        winners.insert(want[0].clone());
        // The whole order, as explain shows it, with the hash of each.
        let d = decide(
            &w.config,
            "node-a",
            w.cluster(None),
            Some(&s),
            &ep,
            &Options::default(),
        );
        let e = d.election.expect("election held");
        assert_eq!(e.ip, go_ip);
        let order: Vec<String> = e.candidates.iter().map(|c| c.node.clone()).collect();
        assert_eq!(order, want, "{ingress}");
        let first = &e.candidates[0];
        let mut h = Sha256::new();
        h.update(format!("{}#{go_ip}", first.node));
        assert_eq!(first.hash.as_slice(), h.finalize().as_slice());
        assert_eq!(e.next_after(&want[0]), Some(want[1].as_str()));
    }
    // The table is not degenerate: more than one node wins somewhere.
    assert!(winners.len() > 1, "{winners:?}");
}

#[test]
fn dual_stack_elects_on_the_first_address() {
    let w = World::new(&FIVE, AD);
    let ep = ready_on("node-a");
    let s = svc(&["2001:db8:5::1", "198.51.100.7"]);
    let want = expected_order(&names(&FIVE), "2001:db8:5::1");
    let got = w.announcers(&s, &ep, None, &Options::default());
    assert_eq!(got, vec![want[0].clone()]);
    let d = decide(
        &w.config,
        &want[0],
        w.cluster(None),
        Some(&s),
        &ep,
        &Options::default(),
    );
    assert_eq!(d.result.unwrap().ips.len(), 2);
}

#[test]
fn services_sharing_an_ip_elect_the_same_node() {
    let w = World::new(&FIVE, AD);
    let ep = ready_on("node-c");
    let shared = [("metallb.io/allow-shared-ip", "k")];
    for ip in ["198.51.100.7", "198.51.100.30", "2001:db8:5::7"] {
        let a = svc_named("web", &[ip], false, &shared, &[]);
        let b = svc_named("api", &[ip], false, &shared, &[]);
        let wa = w.announcers(&a, &ep, None, &Options::default());
        let wb = w.announcers(&b, &ep, None, &Options::default());
        assert_eq!(wa.len(), 1);
        assert_eq!(wa, wb, "{ip}");
    }
}

#[test]
fn preferences_come_before_the_hash_and_add_up_across_advertisements() {
    let ads = r#"
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: prefer-b, namespace: metallb-system}
spec:
  preferredNodeSelectors:
  - {weight: 10, preference: {matchLabels: {rack: b}}}
  - {weight: 5, preference: {matchLabels: {rack: c}}}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: prefer-c, namespace: metallb-system}
spec:
  preferredNodeSelectors:
  - {weight: 7, preference: {matchLabels: {rack: c}}}
"#;
    let w = World::new(&FIVE, ads);
    let ep = ready_on("node-a");
    for (ip, go_ip) in [
        ("198.51.100.7", "198.51.100.7"),
        ("198.51.100.8", "198.51.100.8"),
        ("2001:db8:5::1", "2001:db8:5::1"),
    ] {
        let s = svc(&[ip]);
        // rack c: 5 + 7 = 12, rack b: 10, rack a: 0.
        let scored = [
            ("node-a", 0),
            ("node-b", 0),
            ("node-c", 10),
            ("node-d", 10),
            ("worker-10", 12),
        ];
        let want = expected_order(&scored, go_ip);
        assert_eq!(want[0], "worker-10");
        let d = decide(
            &w.config,
            "node-a",
            w.cluster(None),
            Some(&s),
            &ep,
            &Options::default(),
        );
        let e = d.election.unwrap();
        let got: Vec<(String, i64)> = e
            .candidates
            .iter()
            .map(|c| (c.node.clone(), c.score))
            .collect();
        let want_scored: Vec<(String, i64)> = want
            .iter()
            .map(|n| {
                let s = scored.iter().find(|(m, _)| m == n).unwrap().1;
                (n.clone(), s)
            })
            .collect();
        assert_eq!(got, want_scored, "{ip}");
        assert_eq!(
            w.announcers(&s, &ep, None, &Options::default()),
            ["worker-10"]
        );
        // Without worker-10, rack b wins, in hash order between its two nodes.
        let live: BTreeSet<String> = ["node-a", "node-b", "node-c", "node-d"]
            .into_iter()
            .map(String::from)
            .collect();
        let want = expected_order(&scored[..4], go_ip);
        assert!(want[0] == "node-c" || want[0] == "node-d");
        assert_eq!(
            w.announcers(&s, &ep, Some(&live), &Options::default()),
            vec![want[0].clone()]
        );
    }
}

#[test]
fn a_preference_counts_only_where_its_advertisement_selects_the_node() {
    let ads = r#"
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: all, namespace: metallb-system}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: rack-a-only, namespace: metallb-system}
spec:
  nodeSelectors: [{matchLabels: {rack: a}}]
  preferredNodeSelectors:
  - {weight: 50, preference: {matchLabels: {rack: c}}}
  - {weight: 1, preference: {matchLabels: {rack: a}}}
"#;
    let w = World::new(&FIVE, ads);
    let d = decide(
        &w.config,
        "node-a",
        w.cluster(None),
        Some(&svc(&["198.51.100.7"])),
        &ready_on("node-a"),
        &Options::default(),
    );
    let scores: BTreeMap<String, i64> = d
        .election
        .unwrap()
        .candidates
        .into_iter()
        .map(|c| (c.node, c.score))
        .collect();
    assert_eq!(scores["worker-10"], 0);
    assert_eq!(scores["node-a"], 1);
    assert_eq!(scores["node-b"], 1);
    assert_eq!(scores["node-c"], 0);
}

#[test]
fn unavailable_and_excluded_nodes_are_not_candidates() {
    let nodes = [
        n("node-a", &[]),
        N {
            name: "node-b",
            labels: &[],
            unavailable: true,
        },
        n(
            "node-c",
            &[(
                "node.kubernetes.io/exclude-from-external-load-balancers",
                "",
            )],
        ),
        n("node-d", &[]),
    ];
    let w = World::new(&nodes, AD);
    let ep = ready_on("node-a");
    let candidates = |o: &Options| -> BTreeSet<String> {
        decide(
            &w.config,
            "node-a",
            w.cluster(None),
            Some(&svc(&["198.51.100.7"])),
            &ep,
            o,
        )
        .election
        .unwrap()
        .candidates
        .into_iter()
        .map(|c| c.node)
        .collect()
    };
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(candidates(&Options::default()), set(&["node-a", "node-d"]));
    let ignore = Options {
        ignore_exclude_lb: true,
        ..Options::default()
    };
    assert_eq!(candidates(&ignore), set(&["node-a", "node-c", "node-d"]));
    // Find addresses each excluded node would have won, and check that the
    // announcer is the next one in the test's own order.
    for i in 0..40 {
        let ip = format!("198.51.100.{}", 10 + i);
        let full = expected_order(
            &[("node-a", 0), ("node-b", 0), ("node-c", 0), ("node-d", 0)],
            &ip,
        );
        let filtered: Vec<&String> = full
            .iter()
            .filter(|n| *n == "node-a" || *n == "node-d")
            .collect();
        let got = w.announcers(&svc(&[&ip]), &ep, None, &Options::default());
        assert_eq!(got, vec![filtered[0].clone()], "{ip}");
    }
}

#[test]
fn node_selectors_of_matching_advertisements_restrict_the_candidates() {
    let ads = r#"
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: rack-b, namespace: metallb-system}
spec:
  nodeSelectors: [{matchLabels: {rack: b}}]
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: rack-c-for-api, namespace: metallb-system}
spec:
  nodeSelectors: [{matchLabels: {rack: c}}]
  serviceSelectors: [{matchLabels: {app: api}}]
"#;
    let w = World::new(&FIVE, ads);
    let ep = ready_on("node-a");
    for i in 0..20 {
        let ip = format!("198.51.100.{}", 40 + i);
        // web: rack b only (the rack-c ad does not select it).
        let web = svc_named("web", &[&ip], false, &[], &[]);
        let want = expected_order(&[("node-c", 0), ("node-d", 0)], &ip);
        assert_eq!(
            w.announcers(&web, &ep, None, &Options::default()),
            vec![want[0].clone()]
        );
        // api: racks b and c.
        let api = svc_named("api", &[&ip], false, &[], &[("app", "api")]);
        let want = expected_order(&[("node-c", 0), ("node-d", 0), ("worker-10", 0)], &ip);
        assert_eq!(
            w.announcers(&api, &ep, None, &Options::default()),
            vec![want[0].clone()]
        );
    }
    // A node no matching advertisement selects says so (before the election).
    let d = decide(
        &w.config,
        "node-a",
        w.cluster(None),
        Some(&svc(&["198.51.100.7"])),
        &ep,
        &Options::default(),
    );
    assert_eq!(d.result, Err(Reason::NoMatchingAdvertisement));
    assert_eq!(d.election, None);
}

#[test]
fn live_speakers_restrict_the_candidates() {
    let w = World::new(&FIVE, AD);
    let ep = ready_on("node-a");
    for i in 0..20 {
        let ip = format!("198.51.100.{}", 100 + i);
        let s = svc(&[&ip]);
        let all = expected_order(&names(&FIVE), &ip);
        // The winner is gone: the next one takes over.
        let live: BTreeSet<String> = all[1..].iter().cloned().collect();
        assert_eq!(
            w.announcers(&s, &ep, Some(&live), &Options::default()),
            vec![all[1].clone()]
        );
        // A non-winner gone: nothing moves.
        let live: BTreeSet<String> = all.iter().filter(|n| **n != all[2]).cloned().collect();
        assert_eq!(
            w.announcers(&s, &ep, Some(&live), &Options::default()),
            vec![all[0].clone()]
        );
        // A live speaker without a Node object is no candidate (no
        // advertisement selects an unknown node).
        let mut live: BTreeSet<String> = all.iter().cloned().collect();
        live.insert("ghost".into());
        let d = decide(
            &w.config,
            &all[0],
            w.cluster(Some(&live)),
            Some(&s),
            &ep,
            &Options::default(),
        );
        assert!(d.result.is_ok());
        assert_eq!(d.election.unwrap().candidates.len(), 5);
    }
    // Nobody live: nobody announces.
    let none = BTreeSet::new();
    assert!(
        w.announcers(
            &svc(&["198.51.100.7"]),
            &ep,
            Some(&none),
            &Options::default()
        )
        .is_empty()
    );
}

#[test]
fn local_traffic_policy_elects_among_nodes_with_a_serving_endpoint() {
    let w = World::new(&FIVE, AD);
    for i in 0..20 {
        let ip = format!("198.51.100.{}", 150 + i);
        let s = svc_named("web", &[&ip], true, &[], &[]);
        // Endpoints on node-b (ready), node-d (terminating but serving, no
        // address: layer 2 does not need one), worker-10 (not ready, not
        // serving), and one without a node name (counts as "somewhere").
        let ep = slices(&[
            (Some("node-b"), true, true, true),
            (Some("node-d"), false, true, false),
            (Some("worker-10"), false, false, true),
            (None, true, true, true),
        ]);
        let want = expected_order(&[("node-b", 0), ("node-d", 0)], &ip);
        assert_eq!(
            w.announcers(&s, &ep, None, &Options::default()),
            vec![want[0].clone()]
        );
    }
    let s = svc_named("web", &["198.51.100.7"], true, &[], &[]);
    // Only an endpoint without a node name: it serves, but no node hosts
    // it: nobody announces, after an election with no candidate.
    let ep = slices(&[(None, true, true, true)]);
    let d = decide(
        &w.config,
        "node-a",
        w.cluster(None),
        Some(&s),
        &ep,
        &Options::default(),
    );
    assert_eq!(d.result, Err(Reason::NotOwner));
    assert_eq!(d.election.unwrap().candidates, []);
    // No serving endpoint anywhere: notOwner before any election, whatever
    // the policy.
    let down = slices(&[(Some("node-a"), false, false, true)]);
    for local in [true, false] {
        let s = svc_named("web", &["198.51.100.7"], local, &[], &[]);
        let d = decide(
            &w.config,
            "node-a",
            w.cluster(None),
            Some(&s),
            &down,
            &Options::default(),
        );
        assert_eq!(d.result, Err(Reason::NotOwner));
        assert_eq!(d.election, None);
        assert!(
            w.announcers(&s, &down, None, &Options::default())
                .is_empty()
        );
    }
}

#[test]
fn reasons_come_in_upstreams_order() {
    let with_selector = r#"
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: selective, namespace: metallb-system}
spec:
  serviceSelectors: [{matchLabels: {app: web}}]
  nodeSelectors: [{matchLabels: {rack: b}}]
"#;
    let w = World::new(&FIVE, with_selector);
    let o = Options::default();
    let ep = ready_on("node-a");
    let d = |s: Option<&Service>, ep: &[Arc<LeanSlice>]| {
        decide(&w.config, "node-a", w.cluster(None), s, ep, &o).result
    };
    let reason = |s: Option<&Service>, ep: &[Arc<LeanSlice>]| d(s, ep).err();
    assert_eq!(reason(None, &ep), Some(Reason::ServiceDeleted));
    let mut cluster_ip = svc(&["198.51.100.7"]);
    cluster_ip.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
    assert_eq!(
        reason(Some(&cluster_ip), &ep),
        Some(Reason::NotLoadBalancer)
    );
    let mut classy = svc(&["198.51.100.7"]);
    classy.spec.as_mut().unwrap().load_balancer_class = Some("other".into());
    assert_eq!(
        reason(Some(&classy), &ep),
        Some(Reason::OtherLoadBalancerClass)
    );
    assert_eq!(reason(Some(&svc(&[])), &ep), Some(Reason::NoIpAllocated));
    assert_eq!(
        reason(Some(&svc(&["not-an-ip"])), &ep),
        Some(Reason::InvalidIp)
    );
    assert_eq!(
        reason(Some(&svc(&["203.0.113.1"])), &ep),
        Some(Reason::IpNotAllowed)
    );
    // No endpoint before the advertisement checks.
    let labelled =
        |ann: &[(&str, &str)]| svc_named("web", &["198.51.100.7"], false, ann, &[("app", "web")]);
    assert_eq!(
        reason(Some(&labelled(&[])), &slices(&[])),
        Some(Reason::NotOwner)
    );
    // Shared IP with a service selector, even an empty annotation value
    // and the deprecated key.
    for key in [
        "metallb.io/allow-shared-ip",
        "metallb.universe.tf/allow-shared-ip",
    ] {
        assert_eq!(
            reason(Some(&labelled(&[(key, "")])), &ep),
            Some(Reason::SharedIpWithServiceSelector)
        );
    }
    // node-a is not in rack b.
    assert_eq!(
        reason(Some(&labelled(&[])), &ep),
        Some(Reason::NoMatchingAdvertisement)
    );
    assert_eq!(
        Reason::SharedIpWithServiceSelector.as_str(),
        "sharedIPWithServiceSelector"
    );
    // A Service no advertisement selects: no matching advertisement.
    assert_eq!(
        reason(Some(&svc(&["198.51.100.7"])), &ep),
        Some(Reason::NoMatchingAdvertisement)
    );
}

#[test]
fn interfaces_are_the_union_over_this_nodes_advertisements() {
    let ads = r#"
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: one, namespace: metallb-system}
spec: {interfaces: [eth1, eth0]}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: two, namespace: metallb-system}
spec: {interfaces: [bond0, eth1]}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: all-on-rack-c, namespace: metallb-system}
spec:
  nodeSelectors: [{matchLabels: {rack: c}}]
"#;
    let w = World::new(&FIVE, ads);
    let ep = ready_on("node-a");
    let mut seen_only = false;
    let mut seen_all = false;
    for i in 0..40 {
        let ip = format!("198.51.100.{}", 180 + i);
        let s = svc(&[&ip]);
        let winner = expected_order(&names(&FIVE), &ip)[0].clone();
        let a = decide(
            &w.config,
            &winner,
            w.cluster(None),
            Some(&s),
            &ep,
            &Options::default(),
        )
        .result
        .unwrap();
        if winner == "worker-10" {
            // An advertisement of its own names no interface: all of them.
            assert_eq!(a.interfaces, Interfaces::All);
            assert!(a.interfaces.names().is_empty());
            seen_all = true;
        } else {
            assert_eq!(a.interfaces.names(), ["bond0", "eth0", "eth1"]);
            seen_only = true;
        }
    }
    assert!(seen_only && seen_all);
}

#[test]
fn a_metallb_speaker_among_the_candidates_takes_the_service_with_membership_on() {
    let ads = r#"
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: rack-b, namespace: metallb-system}
spec:
  nodeSelectors: [{matchLabels: {rack: b}}]
"#;
    let mut w = World::new(&FIVE, ads);
    let live: BTreeSet<String> = FIVE.iter().map(|n| n.name.to_owned()).collect();
    let ip = "198.51.100.60";
    let (web, local) = (
        svc_named("web", &[ip], false, &[], &[]),
        svc_named("web", &[ip], true, &[], &[]),
    );
    let ep_a = ready_on("node-a");
    let ep_c = ready_on("node-c");
    let want = expected_order(&[("node-c", 0), ("node-d", 0)], ip);
    // MetalLB's speaker on node-a, which no advertisement selects: nothing changes.
    w.nodes.get_mut("node-a").unwrap().metallb_speaker = true;
    assert_eq!(
        w.announcers(&web, &ep_a, Some(&live), &Options::default()),
        vec![want[0].clone()]
    );
    // On node-d, a candidate: nobody of ours answers, each says why, and the
    // election is still shown.
    w.nodes.get_mut("node-d").unwrap().metallb_speaker = true;
    assert!(
        w.announcers(&web, &ep_a, Some(&live), &Options::default())
            .is_empty()
    );
    for me in ["node-c", "node-d"] {
        let d = decide(
            &w.config,
            me,
            w.cluster(Some(&live)),
            Some(&web),
            &ep_a,
            &Options::default(),
        );
        assert_eq!(d.result, Err(Reason::MetalLbSpeakerCandidate), "{me}");
        assert_eq!(d.election.unwrap().winner(), Some(want[0].as_str()));
    }
    assert_eq!(
        Reason::MetalLbSpeakerCandidate.as_str(),
        "metallbSpeakerCandidate"
    );
    // Whatever our live set: MetalLB's speakers elect among themselves.
    let only_c = BTreeSet::from(["node-c".to_owned()]);
    assert!(
        w.announcers(&web, &ep_a, Some(&only_c), &Options::default())
            .is_empty()
    );
    // externalTrafficPolicy Local with the endpoint on node-c alone: node-d is
    // no candidate, node-c answers.
    assert_eq!(
        w.announcers(&local, &ep_c, Some(&live), &Options::default()),
        vec!["node-c".to_owned()]
    );
    // Membership off: both implementations elect among every known Node alike
    // (the same winner), nobody yields.
    assert_eq!(
        w.announcers(&web, &ep_a, None, &Options::default()),
        vec![want[0].clone()]
    );
}
