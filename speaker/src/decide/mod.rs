//! The speaker's decisions, pure: the same inputs give the same decisions on
//! every node, in the daemon and in `metallbctl explain` (no tokio, no
//! socket, no API call here).
//!
//! - [`bgp`]: per Service, announce or not (MetalLB's reasons, in its
//!   order) and the routes; per peer, the merged advertisements;
//! - [`l2`]: per Service, the layer-2 election (the ordered candidates,
//!   the winner) and, on the winner, the interfaces;
//! - [`sessions`]: which BGPPeers run on this node and how (the bgp crate's
//!   peer configuration, the BFD parameters).

pub mod bgp;
pub mod l2;
pub mod sessions;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;

/// What the decisions need to know of the own Node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// The node's name (`--node-name`).
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// `NetworkUnavailable=True`.
    pub network_unavailable: bool,
    /// Labelled `node.kubernetes.io/exclude-from-external-load-balancers`.
    pub excluded_from_lb: bool,
    /// A MetalLB speaker (another implementation, e.g. during a migration)
    /// runs on the node (Ready or started). MetalLB's speakers elect layer-2
    /// owners among themselves and do not see this implementation's: while
    /// one of them is a candidate of a Service, this implementation's
    /// speakers leave the Service to them (membership on), so that no
    /// address is answered by two nodes ([`l2::Prepared::metallb`]).
    pub metallb_speaker: bool,
}

impl NodeFacts {
    /// The facts of `node`.
    pub fn of(node: &Node) -> Self {
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            network_unavailable: cluster_view::nodes::network_unavailable(node),
            excluded_from_lb: cluster_view::nodes::excluded_from_lb(node),
            metallb_speaker: false,
        }
    }
}
