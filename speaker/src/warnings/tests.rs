use super::*;

use config::load::{LoadOptions, Loader};
use serde_json::json;

/// Three nodes: edge-1 and edge-2 (`role: edge`), worker-1 (`role: worker`).
const NODES: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: edge-1, labels: {role: edge}}
---
apiVersion: v1
kind: Node
metadata: {name: edge-2, labels: {role: edge}}
---
apiVersion: v1
kind: Node
metadata: {name: worker-1, labels: {role: worker}}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: pool, namespace: metallb-system}
spec: {addresses: [198.51.100.0/24]}
"#;

fn config(objects: &str) -> Config {
    let mut l = Loader::new(LoadOptions::default());
    l.add_str("nodes.yaml", NODES).unwrap();
    l.add_str("objects.yaml", objects).unwrap();
    config::parse(&l.finish().resources).unwrap()
}

fn l2_ad(selector: &str) -> String {
    format!(
        "---\napiVersion: metallb.io/v1beta1\nkind: L2Advertisement\n\
         metadata: {{name: l2, namespace: metallb-system}}\n\
         spec: {{ipAddressPools: [pool], nodeSelectors: [{{matchLabels: {{role: {selector}}}}}]}}\n"
    )
}

fn bgp_ad(selector: &str) -> String {
    format!(
        "---\napiVersion: metallb.io/v1beta1\nkind: BGPAdvertisement\n\
         metadata: {{name: bgp, namespace: metallb-system}}\n\
         spec: {{ipAddressPools: [pool], nodeSelectors: [{{matchLabels: {{role: {selector}}}}}]}}\n"
    )
}

fn service(policy: &str, labels: serde_json::Value) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "demo", "labels": labels},
        "spec": {"type": "LoadBalancer", "externalTrafficPolicy": policy},
        "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}]}},
    }))
    .unwrap()
}

/// Ready endpoints on `nodes`, with or without an address.
fn endpoints_on(nodes: &[&str], with_address: bool) -> Vec<Arc<LeanSlice>> {
    let eps: Vec<_> = nodes
        .iter()
        .map(|n| {
            json!({
                "addresses": if with_address { vec!["10.0.0.1"] } else { Vec::new() },
                "conditions": {"ready": true, "serving": true},
                "nodeName": n,
            })
        })
        .collect();
    vec![Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "web-x", "namespace": "demo",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "endpoints": eps,
        }))
        .unwrap(),
    )]
}

fn check(cfg: &Config, svc: &Service, slices: &[Arc<LeanSlice>]) -> Option<LocalUnselected> {
    local_endpoints_unselected(cfg, "demo/web", svc, slices)
}

#[test]
fn layer2_pods_only_where_the_advertisement_does_not_select_are_warned() {
    let cfg = config(&l2_ad("edge"));
    let local = service("Local", json!({}));
    let w = check(&cfg, &local, &endpoints_on(&["worker-1"], true)).expect("warned");
    assert_eq!(w.endpoint_nodes, BTreeSet::from(["worker-1".to_owned()]));
    assert_eq!(
        w.message,
        "Service demo/web has spec.externalTrafficPolicy Local and its endpoints run only on \
         worker-1, which no L2Advertisement of IPAddressPool pool selects (they select edge-1, \
         edge-2): nothing announces it (L2Advertisement spec.nodeSelectors, or where its Pods \
         run)"
    );
    // Layer 2 counts an endpoint without an address (MetalLB): still warned.
    assert!(check(&cfg, &local, &endpoints_on(&["worker-1"], false)).is_some());

    // Not warned: one endpoint on a selected node; the Cluster policy; no endpoint
    // at all (noEndpoints is another reason); an address in no pool.
    assert_eq!(
        check(&cfg, &local, &endpoints_on(&["worker-1", "edge-2"], true)),
        None
    );
    let cluster = service("Cluster", json!({}));
    assert_eq!(
        check(&cfg, &cluster, &endpoints_on(&["worker-1"], true)),
        None
    );
    assert_eq!(check(&cfg, &local, &[]), None);
    let mut elsewhere = local.clone();
    elsewhere
        .status
        .as_mut()
        .unwrap()
        .load_balancer
        .as_mut()
        .unwrap()
        .ingress = Some(vec![
        serde_json::from_value(json!({"ip": "203.0.113.1"})).unwrap(),
    ]);
    assert_eq!(
        check(&cfg, &elsewhere, &endpoints_on(&["worker-1"], true)),
        None
    );
    // Fixed by the selector: the advertisement selects the workers.
    assert_eq!(
        check(
            &config(&l2_ad("worker")),
            &local,
            &endpoints_on(&["worker-1"], true)
        ),
        None
    );
}

#[test]
fn bgp_counts_only_endpoints_with_addresses_and_both_modes_must_miss() {
    let cfg = config(&bgp_ad("edge"));
    let local = service("Local", json!({}));
    let w = check(&cfg, &local, &endpoints_on(&["worker-1"], true)).expect("warned");
    assert!(
        w.message
            .contains("no BGPAdvertisement of IPAddressPool pool selects")
            && w.message.contains("BGPAdvertisement spec.nodeSelectors"),
        "{}",
        w.message
    );
    // An endpoint without an address does not count in BGP: nothing to warn about
    // (the Service has no endpoint in BGP's sense).
    assert_eq!(
        check(&cfg, &local, &endpoints_on(&["worker-1"], false)),
        None
    );

    // Both modes: warned only when neither reaches a node with an endpoint.
    let both = config(&format!("{}{}", l2_ad("edge"), bgp_ad("edge")));
    let w = check(&both, &local, &endpoints_on(&["worker-1"], true)).expect("warned");
    assert!(
        w.message
            .contains("no L2Advertisement or BGPAdvertisement of IPAddressPool pool selects"),
        "{}",
        w.message
    );
    let l2_reaches = config(&format!("{}{}", l2_ad("worker"), bgp_ad("edge")));
    assert_eq!(
        check(&l2_reaches, &local, &endpoints_on(&["worker-1"], true)),
        None
    );
}

#[test]
fn advertisements_that_do_not_select_the_service_are_another_warning() {
    // The only advertisement selects other Services: no advertisement applies,
    // which is not this combination (the Service's reasons say noMatchingAdvertisement).
    let cfg = config(
        "apiVersion: metallb.io/v1beta1\nkind: L2Advertisement\n\
         metadata: {name: l2, namespace: metallb-system}\n\
         spec: {ipAddressPools: [pool], nodeSelectors: [{matchLabels: {role: edge}}],\n\
         serviceSelectors: [{matchLabels: {app: other}}]}\n",
    );
    let local = service("Local", json!({}));
    assert_eq!(
        check(&cfg, &local, &endpoints_on(&["worker-1"], true)),
        None
    );
    // A Service it selects is warned.
    let selected = service("Local", json!({"app": "other"}));
    assert!(check(&cfg, &selected, &endpoints_on(&["worker-1"], true)).is_some());
}

#[test]
fn node_warnings_report_changes_once() {
    let mut w = NodeWarnings::default();
    assert_eq!(w.set("demo/a", None), (None, false));
    assert_eq!(w.set("demo/a", Some("x".into())), (Some("x".into()), true));
    assert_eq!(w.set("demo/a", Some("x".into())), (None, false));
    assert_eq!(w.set("demo/a", Some("y".into())), (Some("y".into()), true));
    assert_eq!(w.set("demo/b", Some("z".into())), (Some("z".into()), true));
    assert_eq!(w.messages(), ["y", "z"]);
    assert_eq!(w.set("demo/a", None), (None, true));
    assert_eq!(w.keys().collect::<Vec<_>>(), ["demo/b"]);
    assert_eq!(w.set("demo/b", None), (None, true));
    assert!(w.messages().is_empty());
}
