//! Selector combinations that cannot overlap: a configuration MetalLB accepts
//! but under which some addresses are never announced, or some peers never
//! receive anything. Each is a [`Warning`] naming the object and the field to
//! change; none makes a configuration invalid.
//!
//! They need the cluster's Nodes (node selectors are judged against them):
//! without Nodes there is nothing to say. Service-level combinations (an
//! `externalTrafficPolicy: Local` Service whose endpoints run only on nodes
//! no advertisement selects) need Services and endpoints and are the
//! speaker's `explain`'s business.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::{Config, ObjectRef, Peer, Resources, Warning};

/// `resources` with, in place of its Secrets, one `kubernetes.io/basic-auth`
/// Secret of namespace `ns` per BGPPeer `spec.passwordSecret` name, holding a
/// value used for nothing: selectors can be judged without reading a
/// password (what `metallbctl explain` and the controller's warnings do,
/// neither of which may read Secrets). A bad Secret still shows in the
/// speakers' ConfigurationState.
pub fn with_placeholder_secrets(mut resources: Resources, ns: &str) -> Resources {
    let names: BTreeSet<String> = resources
        .peers
        .iter()
        .filter_map(|p| p.spec.password_secret.as_ref()?.name.clone())
        .collect();
    resources.secrets = names
        .into_iter()
        .map(|name| {
            Arc::new(Secret {
                metadata: ObjectMeta {
                    name: Some(name),
                    namespace: Some(ns.to_owned()),
                    ..ObjectMeta::default()
                },
                type_: Some("kubernetes.io/basic-auth".into()),
                data: Some(BTreeMap::from([(
                    "password".to_owned(),
                    ByteString(b"not-read".to_vec()),
                )])),
                ..Secret::default()
            })
        })
        .collect();
    resources
}

/// The `warnings` that leave a pool's addresses unannounced, by pool name,
/// each as `Kind name: message`: a warning about the pool itself, or about
/// an advertisement of the pool (a BGPPeer's own warning concerns its
/// sessions, not a pool: when it leaves a pool unannounced, the
/// advertisement's warning says so).
pub fn by_pool(config: &Config, warnings: &[Warning]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for w in warnings {
        let pools: Vec<&String> = match w.object.kind.as_str() {
            "IPAddressPool" => config
                .pools
                .keys()
                .filter(|p| **p == w.object.name)
                .collect(),
            "L2Advertisement" => config
                .l2_advertisements
                .iter()
                .filter(|a| a.name == w.object.name)
                .flat_map(|a| &a.pools)
                .collect(),
            "BGPAdvertisement" => config
                .bgp_advertisements
                .iter()
                .filter(|a| a.name == w.object.name)
                .flat_map(|a| &a.pools)
                .collect(),
            _ => Vec::new(),
        };
        for p in pools {
            let line = format!("{} {}: {}", w.object.kind, w.object.name, w.message);
            let v = out.entry(p.clone()).or_default();
            if !v.contains(&line) {
                v.push(line);
            }
        }
    }
    out
}

/// Whether `peer`'s session runs on a node with `labels` (no selector: on
/// every node).
fn runs_on(peer: &Peer, labels: &BTreeMap<String, String>) -> bool {
    peer.node_selectors.is_empty() || peer.selects_node(labels)
}

fn list(names: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    names
        .into_iter()
        .map(|n| n.as_ref().to_owned())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The warnings of `config` for the cluster's `nodes` (none without Nodes).
pub fn selector_warnings(config: &Config, nodes: &[Arc<Node>]) -> Vec<Warning> {
    let mut out = Vec::new();
    if nodes.is_empty() {
        return out;
    }
    let labels: BTreeMap<String, BTreeMap<String, String>> = nodes
        .iter()
        .filter_map(|n| {
            Some((
                n.metadata.name.clone()?,
                n.metadata.labels.clone().unwrap_or_default(),
            ))
        })
        .collect();
    let warn = |kind: &str, name: &str, message: String| Warning {
        object: ObjectRef::new(kind, name),
        message,
    };

    for pool in config.pools.values() {
        if pool.l2_advertisements.is_empty() && pool.bgp_advertisements.is_empty() {
            out.push(warn(
                "IPAddressPool",
                &pool.name,
                "no L2Advertisement or BGPAdvertisement selects this pool (their \
                 spec.ipAddressPools / spec.ipAddressPoolSelectors): its addresses are \
                 assigned to Services but never announced"
                    .into(),
            ));
        }
    }

    for peer in &config.peers {
        if !peer.node_selectors.is_empty() && !labels.values().any(|l| peer.selects_node(l)) {
            out.push(warn(
                "BGPPeer",
                &peer.name,
                format!(
                    "spec.nodeSelectors match none of the {} Nodes: no node opens this session",
                    labels.len()
                ),
            ));
        }
    }

    for ad in &config.l2_advertisements {
        if ad.nodes.is_empty() {
            out.push(warn(
                "L2Advertisement",
                &ad.name,
                format!(
                    "spec.nodeSelectors match none of the {} Nodes: no node answers for \
                     pool(s) {}",
                    labels.len(),
                    list(&ad.pools)
                ),
            ));
        }
    }

    for ad in &config.bgp_advertisements {
        if ad.nodes.is_empty() {
            out.push(warn(
                "BGPAdvertisement",
                &ad.name,
                format!(
                    "spec.nodeSelectors match none of the {} Nodes: no node announces \
                     pool(s) {}",
                    labels.len(),
                    list(&ad.pools)
                ),
            ));
            continue;
        }
        let on_ad_nodes = |p: &Peer| {
            ad.nodes
                .iter()
                .any(|n| labels.get(n).is_some_and(|l| runs_on(p, l)))
        };
        // Each named peer must run on one of the advertisement's nodes.
        let mut unreachable = BTreeSet::new();
        for name in &ad.peers {
            if let Some(p) = config.peers.iter().find(|p| &p.name == name)
                && !on_ad_nodes(p)
            {
                unreachable.insert(name.clone());
                out.push(warn(
                    "BGPAdvertisement",
                    &ad.name,
                    format!(
                        "spec.peers names BGPPeer {name}, whose spec.nodeSelectors match none \
                         of the nodes this advertisement selects ({}): nothing is sent to \
                         {name}",
                        list(&ad.nodes)
                    ),
                ));
            }
        }
        // Some peer must run on its nodes (the named ones, or any).
        let any = config
            .peers
            .iter()
            .filter(|p| ad.peers.is_empty() || ad.peers.contains(&p.name))
            .any(on_ad_nodes);
        if !any && unreachable.len() < ad.peers.len().max(1) {
            out.push(warn(
                "BGPAdvertisement",
                &ad.name,
                format!(
                    "no BGPPeer{} runs on the nodes it selects ({}): pool(s) {} are not \
                     announced (BGPPeer spec.nodeSelectors or this advertisement's \
                     spec.nodeSelectors)",
                    if ad.peers.is_empty() {
                        String::new()
                    } else {
                        format!(" of spec.peers ({})", list(&ad.peers))
                    },
                    list(&ad.nodes),
                    list(&ad.pools)
                ),
            ));
        }
    }
    out
}
