//! Selector combinations that cannot overlap (`config::overlap`): each warning
//! with a configuration that triggers it and one that does not.

mod common;

use common::objs;
use config::overlap::selector_warnings;

const NODES: &str = "---
apiVersion: v1
kind: Node
metadata: {name: edge-1, labels: {role: edge, zone: a}}
---
apiVersion: v1
kind: Node
metadata: {name: edge-2, labels: {role: edge, zone: b}}
---
apiVersion: v1
kind: Node
metadata: {name: worker-1, labels: {role: worker, zone: a}}
";

fn obj(kind: &str, version: &str, name: &str, spec: &str) -> String {
    format!(
        "---\napiVersion: metallb.io/{version}\nkind: {kind}\nmetadata: {{name: {name}}}\nspec: {spec}\n"
    )
}

fn pool(name: &str) -> String {
    obj(
        "IPAddressPool",
        "v1beta1",
        name,
        "{addresses: [198.51.100.0/28]}",
    )
}

/// A BGPPeer `name` at 192.0.2.<last octet of a hash of the name>.
fn peer(name: &str, extra: &str) -> String {
    let host = 1 + name.bytes().map(u32::from).sum::<u32>() % 200;
    obj(
        "BGPPeer",
        "v1beta2",
        name,
        &format!("{{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.{host}{extra}}}"),
    )
}

/// The warnings of `yaml` (with the three Nodes) as `Kind/name: message` lines.
fn warnings(yaml: &str) -> Vec<String> {
    let r = objs(&format!("{NODES}{yaml}"));
    let config = config::parse(&r).unwrap_or_else(|e| panic!("{e}"));
    selector_warnings(&config, &r.nodes)
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn assert_one(yaml: &str, prefix: &str, words: &str) {
    let w = warnings(yaml);
    assert!(
        w.len() == 1 && w[0].starts_with(prefix) && w[0].contains(words),
        "want one warning {prefix}..{words}, got {w:#?}"
    );
}

#[test]
fn a_pool_no_advertisement_selects() {
    assert_one(&pool("lonely"), "IPAddressPool/lonely", "never announced");
    let ok = [
        pool("p"),
        obj("L2Advertisement", "v1beta1", "l2", "{ipAddressPools: [p]}"),
    ]
    .concat();
    assert_eq!(warnings(&ok), Vec::<String>::new());
}

#[test]
fn a_peer_whose_node_selectors_match_no_node() {
    let base = [
        pool("p"),
        obj(
            "BGPAdvertisement",
            "v1beta1",
            "adv",
            "{ipAddressPools: [p]}",
        ),
    ]
    .concat();
    assert_one(
        &format!(
            "{base}{}{}",
            peer("r1", ""),
            peer("r2", ", nodeSelectors: [{matchLabels: {role: spine}}]")
        ),
        "BGPPeer/r2",
        "spec.nodeSelectors match none of the 3 Nodes",
    );
    let ok = format!(
        "{base}{}",
        peer("r2", ", nodeSelectors: [{matchLabels: {role: edge}}]")
    );
    assert_eq!(warnings(&ok), Vec::<String>::new());
}

#[test]
fn an_advertisement_whose_node_selectors_match_no_node() {
    let l2 = [
        pool("p"),
        obj(
            "L2Advertisement",
            "v1beta1",
            "l2",
            "{ipAddressPools: [p], nodeSelectors: [{matchLabels: {zone: c}}]}",
        ),
    ]
    .concat();
    assert_one(&l2, "L2Advertisement/l2", "no node answers for pool(s) p");
    let bgp = [
        pool("p"),
        peer("r1", ""),
        obj(
            "BGPAdvertisement",
            "v1beta1",
            "adv",
            "{ipAddressPools: [p], nodeSelectors: [{matchLabels: {zone: c}}]}",
        ),
    ]
    .concat();
    assert_one(&bgp, "BGPAdvertisement/adv", "no node announces pool(s) p");
    let ok = l2.replace("zone: c", "zone: a");
    assert_eq!(warnings(&ok), Vec::<String>::new());
}

#[test]
fn advertisement_peers_that_run_on_none_of_its_nodes() {
    // The advertisement selects the workers; r-edge runs on edge nodes only.
    let yaml = |ad_nodes: &str| {
        [
            pool("p"),
            peer("r-any", ""),
            peer("r-edge", ", nodeSelectors: [{matchLabels: {role: edge}}]"),
            obj(
                "BGPAdvertisement",
                "v1beta1",
                "adv",
                &format!(
                    "{{ipAddressPools: [p], peers: [r-any, r-edge], nodeSelectors: [{{matchLabels: {{role: {ad_nodes}}}}}]}}"
                ),
            ),
        ]
        .concat()
    };
    assert_one(
        &yaml("worker"),
        "BGPAdvertisement/adv",
        "spec.peers names BGPPeer r-edge, whose spec.nodeSelectors match none of the nodes this advertisement selects (worker-1)",
    );
    assert_eq!(warnings(&yaml("edge")), Vec::<String>::new());
}

#[test]
fn an_advertisement_no_peer_runs_for() {
    let yaml = |peer_role: &str| {
        [
            pool("p"),
            peer(
                "r-edge",
                &format!(", nodeSelectors: [{{matchLabels: {{role: {peer_role}}}}}]"),
            ),
            obj(
                "BGPAdvertisement",
                "v1beta1",
                "adv",
                "{ipAddressPools: [p], nodeSelectors: [{matchLabels: {role: worker}}]}",
            ),
        ]
        .concat()
    };
    assert_one(
        &yaml("edge"),
        "BGPAdvertisement/adv",
        "no BGPPeer runs on the nodes it selects (worker-1): pool(s) p are not announced",
    );
    assert_eq!(warnings(&yaml("worker")), Vec::<String>::new());
}

#[test]
fn without_nodes_there_is_nothing_to_say() {
    let r = objs(&pool("lonely"));
    let config = config::parse(&r).unwrap();
    assert!(selector_warnings(&config, &r.nodes).is_empty());
}

#[test]
fn warnings_are_grouped_by_the_pools_they_leave_unannounced() {
    let yaml = format!(
        "{}{}{}{}{}{}",
        pool("lonely"),
        obj(
            "IPAddressPool",
            "v1beta1",
            "edge",
            "{addresses: [198.51.100.16/28]}"
        ),
        obj(
            "IPAddressPool",
            "v1beta1",
            "fine",
            "{addresses: [198.51.100.32/28]}"
        ),
        peer("spine", ", nodeSelectors: [{matchLabels: {role: nowhere}}]"),
        obj(
            "L2Advertisement",
            "v1beta1",
            "nowhere",
            "{ipAddressPools: [edge], nodeSelectors: [{matchLabels: {role: nowhere}}]}"
        ),
        obj(
            "L2Advertisement",
            "v1beta1",
            "everywhere",
            "{ipAddressPools: [fine]}"
        ),
    );
    let r = objs(&format!("{NODES}{yaml}"));
    let config = config::parse(&r).unwrap_or_else(|e| panic!("{e}"));
    let w = selector_warnings(&config, &r.nodes);
    let by = config::overlap::by_pool(&config, &w);
    assert_eq!(
        by.keys().collect::<Vec<_>>(),
        ["edge", "lonely"],
        "a BGPPeer's warning is not a pool's; pool fine has none: {by:?}"
    );
    assert!(by["lonely"][0].starts_with("IPAddressPool lonely: no L2Advertisement"));
    assert!(
        by["edge"][0].starts_with("L2Advertisement nowhere: spec.nodeSelectors match none"),
        "{by:?}"
    );
}

#[test]
fn placeholder_secrets_stand_in_for_referenced_password_secrets() {
    let yaml = format!(
        "{}{}",
        pool("p"),
        peer("spine", ", passwordSecret: {name: bgp-pass}")
    );
    let r = objs(&format!("{NODES}{yaml}"));
    let e = config::parse(&r).expect_err("the Secret is missing");
    assert!(e.to_string().contains("secret ref not found"), "{e}");
    let r = config::overlap::with_placeholder_secrets(r, "metallb-system");
    assert_eq!(r.secrets.len(), 1);
    config::parse(&r).unwrap_or_else(|e| panic!("{e}"));
}
