//! The configuration as one node sees it.

use std::sync::Arc;

use config::Resources;
use config::selector::Selector;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether an object with `selectors` applies to a node with `labels`: no selector
/// means every node, else any selector matching (MetalLB's `filterByNode`). An
/// invalid selector is an error naming the object.
fn applies(
    selectors: &[LabelSelector],
    labels: &std::collections::BTreeMap<String, String>,
    what: &str,
) -> Result<bool, String> {
    if selectors.is_empty() {
        return Ok(true);
    }
    for s in selectors {
        let sel = Selector::from_label_selector(s).map_err(|e| format!("{what}: {}", e.0))?;
        if sel.matches(labels) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `resources` without the BGPPeers and BGPAdvertisements whose node selectors do
/// not match `node` (L2Advertisements are all kept: every speaker needs all of them
/// to compute the same election).
pub fn for_node(mut resources: Resources, node: &Node) -> Result<Resources, String> {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let keep_peer = |p: &Arc<config::api::v1beta2::BGPPeer>| {
        applies(
            &p.spec.node_selectors,
            &labels,
            &format!("BGPPeer {}", p.metadata.name.as_deref().unwrap_or_default()),
        )
    };
    let mut peers = Vec::with_capacity(resources.peers.len());
    for p in resources.peers {
        if keep_peer(&p)? {
            peers.push(p);
        }
    }
    resources.peers = peers;
    let mut ads = Vec::with_capacity(resources.bgp_advertisements.len());
    for a in resources.bgp_advertisements {
        let what = format!(
            "BGPAdvertisement {}",
            a.metadata.name.as_deref().unwrap_or_default()
        );
        if applies(&a.spec.node_selectors, &labels, &what)? {
            ads.push(a);
        }
    }
    resources.bgp_advertisements = ads;
    Ok(resources)
}

#[cfg(test)]
mod tests {
    use super::*;
    use config::api::{v1beta1, v1beta2};
    use kube::api::ObjectMeta;

    fn node(labels: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("node-1".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn sel(k: &str, v: &str) -> LabelSelector {
        LabelSelector {
            match_labels: Some([(k.to_string(), v.to_string())].into()),
            match_expressions: None,
        }
    }

    fn peer(name: &str, selectors: Vec<LabelSelector>) -> Arc<v1beta2::BGPPeer> {
        Arc::new(v1beta2::BGPPeer {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: v1beta2::BGPPeerSpec {
                node_selectors: selectors,
                ..Default::default()
            },
            status: None,
        })
    }

    fn ad(name: &str, selectors: Vec<LabelSelector>) -> Arc<v1beta1::BGPAdvertisement> {
        Arc::new(v1beta1::BGPAdvertisement {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: v1beta1::BGPAdvertisementSpec {
                node_selectors: selectors,
                ..Default::default()
            },
            status: None,
        })
    }

    fn names<T: kube::Resource>(v: &[Arc<T>]) -> Vec<String> {
        v.iter()
            .map(|o| o.meta().name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn peers_and_bgp_advertisements_of_other_nodes_are_left_out() {
        let r = Resources {
            peers: vec![
                peer("all", vec![]),
                peer("rack-a", vec![sel("rack", "a")]),
                peer("rack-b", vec![sel("rack", "b")]),
                peer("a-or-b", vec![sel("rack", "b"), sel("rack", "a")]),
            ],
            bgp_advertisements: vec![ad("all", vec![]), ad("rack-b", vec![sel("rack", "b")])],
            l2_advertisements: vec![Arc::new(v1beta1::L2Advertisement {
                metadata: ObjectMeta {
                    name: Some("elsewhere".into()),
                    ..Default::default()
                },
                spec: v1beta1::L2AdvertisementSpec {
                    node_selectors: vec![sel("rack", "b")],
                    ..Default::default()
                },
                status: None,
            })],
            ..Resources::default()
        };
        let f = for_node(r, &node(&[("rack", "a")])).unwrap();
        assert_eq!(names(&f.peers), ["all", "rack-a", "a-or-b"]);
        assert_eq!(names(&f.bgp_advertisements), ["all"]);
        // L2 advertisements are kept whatever their selectors.
        assert_eq!(names(&f.l2_advertisements), ["elsewhere"]);
    }

    #[test]
    fn an_invalid_selector_is_an_error_naming_the_object() {
        let bad = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "rack".into(),
                    operator: "Sometimes".into(),
                    values: None,
                },
            ]),
        };
        let r = Resources {
            peers: vec![peer("odd", vec![bad])],
            ..Resources::default()
        };
        let e = for_node(r, &node(&[])).unwrap_err();
        assert!(e.starts_with("BGPPeer odd: "), "{e}");
    }
}
