//! The objects a configuration is made of, as read from the API server or
//! from files: MetalLB's `ClusterResources`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Secret};

use crate::api::{v1beta1, v1beta2};

/// Everything `parse` reads. Lists need not be sorted: `parse` sorts them by
/// name first, as MetalLB's reconcilers do.
///
/// Objects are shared (`Arc`), as a watch cache hands them out, so building
/// a `Resources` from the caches copies pointers, not objects.
///
/// `Debug` shows Secrets by name only: their data are BGP passwords.
#[derive(Clone, Default)]
pub struct Resources {
    /// `IPAddressPool`s.
    pub pools: Vec<Arc<v1beta1::IPAddressPool>>,
    /// `BGPPeer`s, v1beta1 ones already converted with [`convert_bgp_peer`].
    pub peers: Vec<Arc<v1beta2::BGPPeer>>,
    /// `BFDProfile`s.
    pub bfd_profiles: Vec<Arc<v1beta1::BFDProfile>>,
    /// `BGPAdvertisement`s.
    pub bgp_advertisements: Vec<Arc<v1beta1::BGPAdvertisement>>,
    /// `L2Advertisement`s.
    pub l2_advertisements: Vec<Arc<v1beta1::L2Advertisement>>,
    /// `Community` alias lists.
    pub communities: Vec<Arc<v1beta1::Community>>,
    /// Secrets of the MetalLB namespace (BGP passwords).
    pub secrets: Vec<Arc<Secret>>,
    /// The cluster's Nodes (node selectors of peers and advertisements).
    pub nodes: Vec<Arc<Node>>,
    /// The cluster's Namespaces (namespace selectors of pools).
    pub namespaces: Vec<Arc<Namespace>>,
    /// The `bgpextras` ConfigMap, when present (FRR-only; warned about).
    pub bgp_extras: Option<Arc<ConfigMap>>,
}

impl std::fmt::Debug for Resources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secret_names: Vec<String> = self
            .secrets
            .iter()
            .map(|s| s.metadata.name.clone().unwrap_or_default())
            .collect();
        f.debug_struct("Resources")
            .field("pools", &self.pools)
            .field("peers", &self.peers)
            .field("bfd_profiles", &self.bfd_profiles)
            .field("bgp_advertisements", &self.bgp_advertisements)
            .field("l2_advertisements", &self.l2_advertisements)
            .field("communities", &self.communities)
            .field("secrets", &secret_names)
            .field("nodes", &self.nodes)
            .field("namespaces", &self.namespaces)
            .field("bgp_extras", &self.bgp_extras)
            .finish()
    }
}

/// Converts a deprecated v1beta1 BGPPeer to v1beta2 for the parser: the
/// conversion webhook's mapping ([`crate::conversion::bgp_peer_to_v1beta2`]),
/// then v1beta1's meaning of zero values made explicit.
///
/// Unlike MetalLB's conversion, a zero `holdTime`/`keepaliveTime` means
/// "unset" (MetalLB materialises it as an explicit 0s, which disables
/// keepalives), and `peerPort: 0` means 179.
pub fn convert_bgp_peer(old: &v1beta1::BGPPeer) -> v1beta2::BGPPeer {
    let mut p = crate::conversion::bgp_peer_to_v1beta2(old);
    let nonzero = |d: &mut Option<crate::api::Duration>| {
        if d.as_ref().is_some_and(|d| d.as_nanos() == 0) {
            *d = None;
        }
    };
    nonzero(&mut p.spec.hold_time);
    nonzero(&mut p.spec.keepalive_time);
    if p.spec.port == 0 {
        p.spec.port = 179;
    }
    p.status = None;
    p
}
