//! Service-level combinations that cannot overlap: an `externalTrafficPolicy:
//! Local` Service whose serving endpoints run only on nodes that no
//! advertisement of its pool selects. MetalLB accepts it and announces the
//! address from nowhere. Pure: the speaker turns it into a Warning event on
//! the Service and a condition of its ConfigurationState (on the nodes that
//! host the endpoints), `metallbctl explain` into a warning line.
//!
//! Judged on the whole configuration (every speaker's view of it parsed as
//! one, not this node's share), so every speaker reaches the same verdict.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use cluster_view::endpoints::LeanSlice;
use cluster_view::{endpoints, services};
use config::Config;
use k8s_openapi::api::core::v1::Service;

use crate::decide::l2;

/// The reason of the Warning event (the controller's for pools, too).
pub const REASON_NOT_ANNOUNCEABLE: &str = "NotAnnounceable";

/// An `externalTrafficPolicy: Local` Service nothing announces because its
/// endpoints run only where no advertisement selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalUnselected {
    /// The nodes hosting its serving endpoints (where the warning is reported).
    pub endpoint_nodes: BTreeSet<String>,
    /// The warning, naming the Service, the pool and the fields to change.
    pub message: String,
}

/// The warning for Service `key` (`namespace/name`), when it applies: a
/// LoadBalancer Service with `externalTrafficPolicy: Local`, an address in a
/// pool of `config`, at least one advertisement of that pool selecting the
/// Service (none at all is the pool's own warning), serving endpoints on
/// some node, and none of those nodes selected by any of those
/// advertisements (layer 2 counts endpoints without addresses, BGP does not,
/// as MetalLB).
pub fn local_endpoints_unselected(
    config: &Config,
    key: &str,
    svc: &Service,
    slices: &[Arc<LeanSlice>],
) -> Option<LocalUnselected> {
    if !services::is_load_balancer(svc) || !services::traffic_policy_local(svc) {
        return None;
    }
    let ip: IpAddr = svc
        .status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .iter()
        .find_map(|i| i.ip.as_deref()?.parse().ok())?;
    let pool = config.pool_for(ip.to_canonical())?;
    let l2_ads = l2::ads_for_service(config, pool, svc);
    let empty = BTreeMap::new();
    let labels = svc.metadata.labels.as_ref().unwrap_or(&empty);
    let bgp_ads: Vec<_> = config
        .bgp_advertisements
        .iter()
        .filter(|a| pool.bgp_advertisements.contains(&a.name))
        .filter(|a| {
            a.service_selectors.is_empty() || a.service_selectors.iter().any(|s| s.matches(labels))
        })
        .collect();
    if l2_ads.is_empty() && bgp_ads.is_empty() {
        return None;
    }
    let l2_endpoints =
        endpoints::nodes_with_serving_endpoints(slices, endpoints::Addresses::NotRequired);
    let bgp_endpoints =
        endpoints::nodes_with_serving_endpoints(slices, endpoints::Addresses::Required);
    let l2_selected: BTreeSet<&String> = l2_ads.iter().flat_map(|a| &a.nodes).collect();
    let bgp_selected: BTreeSet<&String> = bgp_ads.iter().flat_map(|a| &a.nodes).collect();
    let l2_reaches = !l2_ads.is_empty() && l2_endpoints.iter().any(|n| l2_selected.contains(n));
    let bgp_reaches = !bgp_ads.is_empty() && bgp_endpoints.iter().any(|n| bgp_selected.contains(n));
    let endpoint_nodes: BTreeSet<String> = match (l2_ads.is_empty(), bgp_ads.is_empty()) {
        (false, true) => l2_endpoints,
        (true, false) => bgp_endpoints,
        _ => l2_endpoints.union(&bgp_endpoints).cloned().collect(),
    };
    if l2_reaches || bgp_reaches || endpoint_nodes.is_empty() {
        return None;
    }
    let kinds = match (l2_ads.is_empty(), bgp_ads.is_empty()) {
        (false, true) => "L2Advertisement",
        (true, false) => "BGPAdvertisement",
        _ => "L2Advertisement or BGPAdvertisement",
    };
    let mut selected: BTreeSet<&String> = l2_selected;
    selected.extend(bgp_selected);
    let selected = if selected.is_empty() {
        "no node".to_owned()
    } else {
        selected
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let message = format!(
        "Service {key} has spec.externalTrafficPolicy Local and its endpoints run only on {}, \
         which no {kinds} of IPAddressPool {} selects (they select {selected}): nothing announces \
         it ({kinds} spec.nodeSelectors, or where its Pods run)",
        endpoint_nodes
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        pool.name,
    );
    Some(LocalUnselected {
        endpoint_nodes,
        message,
    })
}

/// The Service warnings one node reports, by Service key: what changed when
/// a Service is decided again.
#[derive(Debug, Default)]
pub struct NodeWarnings {
    by_service: BTreeMap<String, String>,
}

impl NodeWarnings {
    /// Records the warning of Service `key` on this node (`None`: it has
    /// none, or it does not concern this node). Returns the new warning when
    /// it appeared or changed (to publish as an event), and whether the set
    /// changed at all (the ConfigurationState follows).
    pub fn set(&mut self, key: &str, now: Option<String>) -> (Option<String>, bool) {
        match now {
            Some(m) => {
                if self.by_service.get(key) == Some(&m) {
                    (None, false)
                } else {
                    self.by_service.insert(key.to_owned(), m.clone());
                    (Some(m), true)
                }
            }
            None => (None, self.by_service.remove(key).is_some()),
        }
    }

    /// The warnings, in Service order.
    pub fn messages(&self) -> Vec<String> {
        self.by_service.values().cloned().collect()
    }

    /// The Services warned about.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.by_service.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests;
