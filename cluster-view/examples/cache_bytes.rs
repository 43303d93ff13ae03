//! Heap bytes each cached object holds, per kind, as the caches keep it
//! (issue 25): objects shaped as `bench-scale` generates them (a Node with
//! 50 images and 4 conditions, a Service with 5 labels and a port, an
//! EndpointSlice of 5 endpoints), decoded and trimmed as the reflectors do,
//! `N` of each kept alive, the allocator's live bytes counted.
//!
//! `cargo run --release -p cluster-view --example cache_bytes [N]`

use std::sync::Arc;

use cluster_view::endpoints::LeanSlice;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use serde_json::{Value, json};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

fn live() -> isize {
    dhat::HeapStats::get().curr_bytes as isize
}

fn node_name(i: usize) -> String {
    format!("bench-scale-worker-{i:05}.rack-{:03}.dc1.example", i / 40)
}

fn node(i: usize) -> Value {
    let name = node_name(i);
    let images: Vec<Value> = (0..50)
        .map(|k| {
            json!({"names": [format!("registry.example/app-{k}@sha256:{:064x}", i * 1000 + k)],
                        "sizeBytes": 10_000_000})
        })
        .collect();
    let cond = |t: &str, s: &str, reason: &str| {
        json!({"type": t, "status": s, "reason": reason, "message": format!("kubelet reports {reason}"),
               "lastHeartbeatTime": "2026-11-28T20:00:00Z", "lastTransitionTime": "2026-11-28T10:00:00Z"})
    };
    json!({
        "metadata": {
            "name": name, "uid": format!("{i:08x}-0000-4000-8000-000000000000"), "resourceVersion": "12345",
            "creationTimestamp": "2026-11-28T10:00:00Z",
            "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "m5.2xlarge",
                "topology.kubernetes.io/region": "region-1",
                "topology.kubernetes.io/zone": format!("zone-{}", i % 3),
                "rack": format!("rack-{:03}", i / 40),
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                            "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {"podCIDR": "10.64.0.0/24", "providerID": format!("bench://{name}")},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "198.19.128.1"}],
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID"),
                cond("Ready", "True", "KubeletReady"),
            ],
            "images": images,
        },
    })
}

fn service(i: usize) -> Value {
    let name = format!("svc-{i:05}");
    json!({
        "metadata": {"name": name, "namespace": "bench", "uid": format!("{i:08x}-1111-4000-8000-000000000000"),
                     "resourceVersion": "23456", "creationTimestamp": "2026-11-28T10:00:00Z",
                     "labels": {"app.kubernetes.io/name": format!("app-{}", i % 100),
                                "app.kubernetes.io/instance": name,
                                "app.kubernetes.io/managed-by": "bench-scale",
                                "team": format!("team-{}", i % 7), "tier": "frontend"},
                     "annotations": {"bench-scale.metallb-rs.io/owner": format!("team-{}", i % 7)}},
        "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Cluster",
                 "allocateLoadBalancerNodePorts": false, "clusterIP": "10.96.0.10",
                 "clusterIPs": ["10.96.0.10"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                 "internalTrafficPolicy": "Cluster", "sessionAffinity": "None",
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "198.18.0.1", "ipMode": "VIP"}]}},
    })
}

fn slice(i: usize) -> Value {
    let name = format!("svc-{:05}", i / 3);
    let endpoints: Vec<Value> = (0..5)
        .map(|e| {
            let node = (i * 5 + e) * 7919 % 5000;
            json!({"addresses": [format!("10.64.{}.{}", node % 256, 2 + e)],
                   "conditions": {"ready": true, "serving": true, "terminating": false},
                   "nodeName": node_name(node), "zone": "zone-1",
                   "targetRef": {"kind": "Pod", "namespace": "bench", "name": format!("{name}-pod-{e}"),
                                 "uid": "00000000-2222-2222-2222-222222222222"}})
        })
        .collect();
    json!({
        "metadata": {"name": format!("{name}-{}", i % 3), "namespace": "bench", "resourceVersion": "34567",
                     "uid": "00000000-3333-4000-8000-000000000000",
                     "labels": {"kubernetes.io/service-name": name,
                                "endpointslice.kubernetes.io/managed-by": "bench-scale.metallb-rs.io"}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
    })
}

/// Live heap bytes per object of `n` objects made by `make`, kept alive together.
fn per_object<T>(n: usize, json: impl Fn(usize) -> Value, make: impl Fn(Value) -> T) -> isize {
    let inputs: Vec<Value> = (0..n).map(&json).collect();
    let before = live();
    let kept: Vec<Arc<T>> = inputs.iter().map(|v| Arc::new(make(v.clone()))).collect();
    let after = live();
    drop(kept);
    (after - before) / n as isize
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let node_bytes = per_object(n, node, |v| {
        let mut o: Node = serde_json::from_value(v).unwrap();
        cluster_view::lean::node(&mut o);
        o
    });
    let service_bytes = per_object(n, service, |v| {
        let mut o: Service = serde_json::from_value(v).unwrap();
        cluster_view::lean::service(&mut o);
        o
    });
    // As cached before `LeanSlice` (the API type, its ports and per endpoint all but the
    // addresses, conditions and node dropped).
    let whole_slice_bytes = per_object(n, slice, |v| {
        let mut o: EndpointSlice = serde_json::from_value(v).unwrap();
        cluster_view::lean::metadata(&mut o);
        o.ports = None;
        for e in o.endpoints.iter_mut().flatten() {
            *e = Endpoint {
                addresses: std::mem::take(&mut e.addresses),
                conditions: e.conditions.take(),
                node_name: e.node_name.take(),
                ..Endpoint::default()
            };
        }
        o
    });
    let slice_bytes = per_object(n, slice, |v| {
        serde_json::from_value::<LeanSlice>(v).unwrap()
    });
    println!("heap bytes per cached object ({n} of each):");
    println!("  Node          {node_bytes:>6}");
    println!("  Service       {service_bytes:>6}");
    println!(
        "  EndpointSlice {slice_bytes:>6} (as the API type, trimmed as before: {whole_slice_bytes})"
    );
}
