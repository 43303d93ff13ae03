//! The decisions are the same on objects as the API server sends them and as
//! the caches keep them (`cluster_view::lean`: no managed fields, Nodes with
//! their conditions alone of their status, endpoints with their addresses,
//! conditions and node alone): the configuration, and every BGP and layer-2
//! decision of every node for every Service of a mixed cluster.

use std::collections::BTreeMap;
use std::sync::Arc;

use cluster_view::endpoints::LeanSlice;
use config::Config;
use config::load::{LoadOptions, Loader};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{Value, json};
use speaker::decide::NodeFacts;
use speaker::decide::bgp::{self, Options};
use speaker::decide::l2;

const CONFIG: &str = r#"
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: bgp, namespace: metallb-system}
spec: {addresses: [198.51.100.0/25]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: l2, namespace: metallb-system}
spec: {addresses: [198.51.100.128/25]}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: r1, namespace: metallb-system}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, nodeSelectors: [{matchLabels: {rack: a}}]}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: all, namespace: metallb-system}
spec: {ipAddressPools: [bgp]}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: rack-b, namespace: metallb-system}
spec: {ipAddressPools: [bgp], nodeSelectors: [{matchLabels: {rack: b}}], communities: ["64512:7"], serviceSelectors: [{matchLabels: {tier: front}}]}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: l2, namespace: metallb-system}
spec:
  ipAddressPools: [l2]
  nodeSelectors: [{matchExpressions: [{key: rack, operator: In, values: [a, b]}]}]
"#;

fn managed_fields() -> Value {
    json!([{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
            "time": "2026-11-29T08:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {"f:images": {}}}}])
}

/// A Node as a kubelet reports it.
fn node(n: usize, rack: &str, unavailable: bool, excluded: bool) -> Node {
    let mut labels = json!({"kubernetes.io/hostname": format!("node-{n}"), "rack": rack});
    if excluded {
        labels["node.kubernetes.io/exclude-from-external-load-balancers"] = json!("");
    }
    serde_json::from_value(json!({
        "metadata": {"name": format!("node-{n}"), "uid": format!("uid-{n}"), "labels": labels,
                     "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
                     "managedFields": managed_fields()},
        "spec": {"podCIDR": format!("10.244.{n}.0/24"), "taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok",
                 "lastTransitionTime": "2026-11-29T07:00:00Z"},
                {"type": "NetworkUnavailable", "status": if unavailable {"True"} else {"False"},
                 "reason": "r", "message": "m", "lastTransitionTime": "2026-11-29T07:00:00Z"},
            ],
            "addresses": [{"type": "InternalIP", "address": format!("192.0.2.{}", 10 + n)}],
            "capacity": {"cpu": "2"}, "allocatable": {"cpu": "2"},
            "images": [{"names": ["registry.example/app:v1"], "sizeBytes": 1}],
            "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "k",
                         "osImage": "o", "containerRuntimeVersion": "c", "kubeletVersion": "v1.37.2",
                         "kubeProxyVersion": "v1.37.2", "operatingSystem": "linux", "architecture": "amd64"},
        },
    }))
    .unwrap()
}

fn nodes() -> Vec<Node> {
    vec![
        node(1, "a", false, false),
        node(2, "a", true, false),
        node(3, "b", false, false),
        node(4, "b", false, true),
        node(5, "c", false, false),
    ]
}

/// A Service as the controller leaves it.
fn service(name: &str, ip: &str, local: bool, tier: &str, class: Option<&str>) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "demo", "uid": format!("uid-{name}"),
                     "labels": {"tier": tier},
                     "annotations": {"metallb.io/allow-shared-ip": "k",
                                     "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                     "managedFields": managed_fields()},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": class,
                 "externalTrafficPolicy": if local {"Local"} else {"Cluster"},
                 "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}],
                 "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "ipFamilies": ["IPv4"]},
        "status": {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"}]}},
    }))
    .unwrap()
}

/// A slice of `name` with endpoints (node, ready, serving, has an address).
fn slice(name: &str, eps: &[(&str, bool, bool, bool)]) -> EndpointSlice {
    let endpoints: Vec<Value> = eps
        .iter()
        .enumerate()
        .map(|(i, (node, ready, serving, address))| {
            json!({
                "addresses": if *address { vec![format!("10.0.0.{i}")] } else { vec![] },
                "conditions": {"ready": ready, "serving": serving, "terminating": !ready},
                "nodeName": node, "hostname": format!("h{i}"), "zone": "z",
                "targetRef": {"kind": "Pod", "namespace": "demo", "name": format!("p{i}"), "uid": "u"},
                "hints": {"forZones": [{"name": "z"}]},
            })
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-x"), "namespace": "demo",
                     "labels": {"kubernetes.io/service-name": name},
                     "managedFields": managed_fields()},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"port": 8080, "protocol": "TCP"}],
    }))
    .unwrap()
}

type Case = (Service, Vec<EndpointSlice>);

fn cases() -> Vec<Case> {
    vec![
        (
            service("bgp-cluster", "198.51.100.7", false, "back", None),
            vec![slice("bgp-cluster", &[("node-3", true, true, true)])],
        ),
        (
            service("bgp-front-local", "198.51.100.8", true, "front", None),
            vec![slice(
                "bgp-front-local",
                &[("node-1", true, true, true), ("node-3", false, true, true)],
            )],
        ),
        (
            service("bgp-no-address", "198.51.100.9", true, "front", None),
            vec![slice("bgp-no-address", &[("node-3", true, true, false)])],
        ),
        (
            service("bgp-not-serving", "198.51.100.10", false, "back", None),
            vec![slice("bgp-not-serving", &[("node-1", false, false, true)])],
        ),
        (
            service("other-class", "198.51.100.11", false, "back", Some("other")),
            vec![slice("other-class", &[("node-1", true, true, true)])],
        ),
        (
            service("l2-cluster", "198.51.100.130", false, "back", None),
            vec![slice("l2-cluster", &[("node-5", true, true, true)])],
        ),
        (
            service("l2-local", "198.51.100.131", true, "back", None),
            vec![slice(
                "l2-local",
                &[("node-3", true, true, false), ("node-4", true, true, true)],
            )],
        ),
        (
            service("outside", "203.0.113.1", false, "back", None),
            vec![slice("outside", &[("node-1", true, true, true)])],
        ),
    ]
}

fn parse(nodes: &[Node]) -> Config {
    let mut l = Loader::new(LoadOptions::default());
    l.add_str("c.yaml", CONFIG).unwrap();
    let mut r = l.finish().resources;
    r.nodes = nodes.iter().cloned().map(Arc::new).collect();
    config::parse(&r).unwrap()
}

fn cluster(facts: &BTreeMap<String, NodeFacts>) -> l2::Cluster<'_> {
    l2::Cluster {
        nodes: facts,
        live: None,
    }
}

fn trimmed_nodes() -> Vec<Node> {
    nodes()
        .into_iter()
        .map(|mut n| {
            cluster_view::lean::node(&mut n);
            n
        })
        .collect()
}

#[test]
fn every_decision_is_the_same_on_the_objects_the_caches_keep() {
    let (full_nodes, lean_nodes) = (nodes(), trimmed_nodes());
    assert_ne!(full_nodes, lean_nodes, "the trimming drops something");
    let (full_cfg, lean_cfg) = (parse(&full_nodes), parse(&lean_nodes));
    assert_eq!(full_cfg, lean_cfg);
    let facts = |nodes: &[Node]| -> BTreeMap<String, NodeFacts> {
        nodes
            .iter()
            .map(|n| {
                let f = NodeFacts::of(n);
                (f.name.clone(), f)
            })
            .collect()
    };
    let (full_facts, lean_facts) = (facts(&full_nodes), facts(&lean_nodes));
    assert_eq!(full_facts, lean_facts);
    assert!(lean_facts["node-2"].network_unavailable && lean_facts["node-4"].excluded_from_lb);

    let mut announced = 0;
    let mut elected = 0;
    for (svc, slices) in cases() {
        let mut lean_svc = svc.clone();
        cluster_view::lean::service(&mut lean_svc);
        assert_ne!(lean_svc, svc);
        // Slices: converted from the whole object, and decoded from its JSON as the
        // cache decodes them (nothing else read).
        let full_slices: Vec<Arc<LeanSlice>> = slices
            .iter()
            .map(|s| Arc::new(LeanSlice::from(s)))
            .collect();
        let lean_slices: Vec<Arc<LeanSlice>> = slices
            .iter()
            .map(|s| Arc::new(serde_json::from_value(serde_json::to_value(s).unwrap()).unwrap()))
            .collect();
        assert_eq!(full_slices, lean_slices);
        for options in [
            Options::default(),
            Options {
                lb_class: "other".into(),
                ignore_exclude_lb: true,
            },
        ] {
            for me in full_facts.keys() {
                let full = bgp::decide(
                    &full_cfg,
                    &full_facts[me],
                    Some(&svc),
                    &full_slices,
                    &options,
                );
                let lean = bgp::decide(
                    &lean_cfg,
                    &lean_facts[me],
                    Some(&lean_svc),
                    &lean_slices,
                    &options,
                );
                assert_eq!(full, lean, "bgp: {me} {:?}", svc.metadata.name);
                announced += usize::from(full.is_ok());
                let full = l2::decide(
                    &full_cfg,
                    me,
                    cluster(&full_facts),
                    Some(&svc),
                    &full_slices,
                    &options,
                );
                let lean = l2::decide(
                    &lean_cfg,
                    me,
                    cluster(&lean_facts),
                    Some(&lean_svc),
                    &lean_slices,
                    &options,
                );
                assert_eq!(full, lean, "layer 2: {me} {:?}", svc.metadata.name);
                elected += usize::from(full.result.is_ok());
            }
        }
    }
    // The cases decide both ways (not every Service withdrawn everywhere).
    assert!(announced > 0 && elected > 0, "{announced} {elected}");
}
