//! How a node tells the cluster what it announces in BGP
//! (`--service-bgp-status`):
//!
//! - [`Mode::PerService`] (the default, MetalLB's shape): one ServiceBGPStatus
//!   per (Service, node) naming the peers. At 5,000 nodes and 10,000 Services
//!   that is 50 million objects, past etcd's 8 GiB.
//! - [`Mode::Summary`]: one `NodeBGPStatus` per node, named after it
//!   ([`Summary`]), holding only what the configuration and the Services do
//!   not tell: the peers in effect, the prefixes of `externalTrafficPolicy:
//!   Local` Services announced here (counts per pool and advertisement, and
//!   the Services up to a cap), and the Services an advertisement selects here
//!   that this node does not announce, with the reason. An
//!   `externalTrafficPolicy: Cluster` Service announced as the configuration
//!   says changes no node's object (a count or digest of every announced
//!   Service would make each Service created a write on every node), so
//!   creating one costs no status write at all; `metallbctl explain`
//!   derives it from the configuration. Written at most once per
//!   [`SUMMARY_MIN_WRITE_INTERVAL`] (changes in between coalesce).
//!
//! In per-service mode a node that would hold more than its cap
//! (`--service-bgp-status-max-per-node`) of ServiceBGPStatus objects switches
//! to the summary instead of filling etcd, loudly ([`BgpStatusOutput::switched`]:
//! a Warning log and a line in its ConfigurationState), and stays there until
//! it restarts.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use config::api::v1beta1::{
    MetalLBServiceBGPStatus, NodeBGPStatus, NodeBGPStatusStatus, PrefixCount, ServiceBGPStatus,
    ServiceException,
};
use config::api::{LABEL_SERVICE_NAME, LABEL_SERVICE_NAMESPACE};
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use status::{Desired, Labels, StatusWriter};

use crate::decide::bgp::{Announcement, Reason};

/// How BGP announcements are reported (`--service-bgp-status`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// One ServiceBGPStatus per (Service, node), as MetalLB.
    #[default]
    PerService,
    /// One NodeBGPStatus per node.
    Summary,
}

impl Mode {
    /// The flag's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::PerService => "per-service",
            Mode::Summary => "summary",
        }
    }
}

/// Default of `--service-bgp-status-max-per-node`.
pub const DEFAULT_MAX_PER_NODE: usize = 2000;

/// Default cap of the Services a NodeBGPStatus lists.
pub const DEFAULT_MAX_EXCEPTIONS: usize = 100;

/// At most one NodeBGPStatus write per node per this interval.
pub const SUMMARY_MIN_WRITE_INTERVAL: Duration = Duration::from_secs(5);

/// A Service this node reports one by one.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Exception {
    /// `externalTrafficPolicy: Local`, announced here.
    Local {
        pool: String,
        /// (advertisement, prefix) of each route.
        routes: Vec<(String, IpNet)>,
        peers: Vec<String>,
    },
    /// Selected here, not announced.
    Withdrawn(Reason),
}

/// The summary of one node: fed every decision ([`Summary::service`]),
/// read as a NodeBGPStatus status ([`Summary::status`]). Counts are kept as
/// decisions come, so a status costs O(cap), not O(Services).
#[derive(Debug)]
pub struct Summary {
    max_exceptions: usize,
    exceptions: BTreeMap<String, Exception>,
    local: usize,
    /// Services not announced for a reason of the node (not listed).
    node_wide: BTreeMap<String, Reason>,
    /// (pool, advertisement) -> prefix -> how many Local Services have it.
    prefixes: BTreeMap<(String, String), BTreeMap<IpNet, usize>>,
}

impl Default for Summary {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_EXCEPTIONS)
    }
}

impl Summary {
    /// An empty summary listing at most `max_exceptions` Services.
    pub fn new(max_exceptions: usize) -> Self {
        Self {
            max_exceptions,
            exceptions: BTreeMap::new(),
            local: 0,
            node_wide: BTreeMap::new(),
            prefixes: BTreeMap::new(),
        }
    }

    /// The decision for the Service `key` (`svc` `None`: deleted); `peers`:
    /// the BGPPeers it is sent to from here when announced.
    pub fn service(
        &mut self,
        key: &str,
        svc: Option<&Service>,
        decision: &Result<Announcement, Reason>,
        peers: &[String],
    ) {
        let local = svc.is_some_and(cluster_view::services::traffic_policy_local);
        let new = match decision {
            Ok(a) if local => Some(Exception::Local {
                pool: a.pool.clone(),
                routes: a
                    .routes
                    .iter()
                    .map(|r| (r.advertisement.clone(), r.prefix))
                    .collect(),
                peers: peers.to_vec(),
            }),
            Ok(_) => None,
            // Selected here, but the advertisements disagree.
            Err(r @ Reason::ConflictingAdvertisements) => Some(Exception::Withdrawn(*r)),
            // The node's own state: every selected Service alike, said once.
            Err(r @ (Reason::NodeNetworkUnavailable | Reason::NodeLabeledExcludeBalancers)) => {
                self.node_wide.insert(key.to_owned(), *r);
                None
            }
            // Not selected here, or the endpoints say it (derived from the
            // EndpointSlices; an ETP Cluster Service without endpoints yet
            // would otherwise be a write on every node).
            Err(_) => None,
        };
        if !matches!(
            decision,
            Err(Reason::NodeNetworkUnavailable | Reason::NodeLabeledExcludeBalancers)
        ) {
            self.node_wide.remove(key);
        }
        if self.exceptions.get(key) == new.as_ref() {
            return;
        }
        if let Some(old) = self.exceptions.remove(key) {
            self.count(&old, false);
        }
        if let Some(new) = new {
            self.count(&new, true);
            self.exceptions.insert(key.to_owned(), new);
        }
    }

    fn count(&mut self, e: &Exception, add: bool) {
        let Exception::Local { pool, routes, .. } = e else {
            return;
        };
        if add {
            self.local += 1;
        } else {
            self.local -= 1;
        }
        let distinct: BTreeSet<&(String, IpNet)> = routes.iter().collect();
        for (ad, prefix) in distinct {
            let k = (pool.clone(), ad.clone());
            let per = self.prefixes.entry(k.clone()).or_default();
            if add {
                *per.entry(*prefix).or_default() += 1;
            } else if let Some(n) = per.get_mut(prefix) {
                *n -= 1;
                if *n == 0 {
                    per.remove(prefix);
                }
            }
            if per.is_empty() {
                self.prefixes.remove(&k);
            }
        }
    }

    /// The Services this summary says something of (an exception, or not
    /// announced for a reason of the node).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.exceptions
            .keys()
            .chain(self.node_wide.keys())
            .map(String::as_str)
    }

    /// The NodeBGPStatus status of `node`, whose sessions are `peers`.
    pub fn status(&self, node: &str, peers: &[String]) -> NodeBGPStatusStatus {
        let mut peers = peers.to_vec();
        peers.sort();
        peers.dedup();
        let exceptions: Vec<ServiceException> = self
            .exceptions
            .iter()
            .take(self.max_exceptions)
            .map(|(key, e)| {
                let (ns, name) = key.split_once('/').unwrap_or(("", key));
                let mut x = ServiceException {
                    service_namespace: ns.to_owned(),
                    service_name: name.to_owned(),
                    ..Default::default()
                };
                match e {
                    Exception::Local { peers, .. } => {
                        x.announced = true;
                        x.peers = peers.clone();
                    }
                    Exception::Withdrawn(r) => x.reason = r.as_str().to_owned(),
                }
                x
            })
            .collect();
        let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
        NodeBGPStatusStatus {
            node: node.to_owned(),
            peers,
            withheld: self
                .node_wide
                .values()
                .map(|r| r.as_str())
                .min()
                .unwrap_or_default()
                .to_owned(),
            local_prefixes: self
                .prefixes
                .iter()
                .map(|((pool, ad), p)| PrefixCount {
                    pool: pool.clone(),
                    advertisement: ad.clone(),
                    prefixes: count(p.len()),
                })
                .collect(),
            local_services: count(self.local),
            withdrawn_services: count(self.exceptions.len() - self.local),
            exceptions_truncated: self.exceptions.len() > exceptions.len(),
            exceptions,
        }
    }
}

/// Where a node's BGP announcements are written: its ServiceBGPStatus objects
/// or its NodeBGPStatus, per [`Mode`], switching to the summary past the cap.
pub struct BgpStatusOutput {
    node: String,
    configured: Mode,
    mode: Mode,
    max_per_node: usize,
    /// Per-service mode: the Services with a ServiceBGPStatus wanted.
    per_service: BTreeSet<String>,
    svc_status: StatusWriter<ServiceBGPStatus>,
    node_status: StatusWriter<NodeBGPStatus>,
    owner: Option<OwnerReference>,
    last: Option<NodeBGPStatusStatus>,
    switched: Option<String>,
}

impl BgpStatusOutput {
    /// The output of `node` in `mode`, capped at `max_per_node` ServiceBGPStatus
    /// objects; the writers are label-keyed on the node.
    pub fn new(
        node: impl Into<String>,
        mode: Mode,
        max_per_node: usize,
        svc_status: StatusWriter<ServiceBGPStatus>,
        node_status: StatusWriter<NodeBGPStatus>,
    ) -> Self {
        Self {
            node: node.into(),
            configured: mode,
            mode,
            max_per_node,
            per_service: BTreeSet::new(),
            svc_status,
            node_status,
            owner: None,
            last: None,
            switched: None,
        }
    }

    /// The ownerReference of the objects written from now on.
    pub fn set_owner(&mut self, owner: Option<OwnerReference>) {
        if self.owner != owner {
            self.owner = owner;
            // the next status is set again, with the new owner
            self.last = None;
        }
    }

    /// The mode in force.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Why the mode in force is not the configured one (for the
    /// ConfigurationState), once switched.
    pub fn switched(&self) -> Option<&str> {
        self.switched.as_deref()
    }

    /// Carries out a step's changes: `service_status` (per Service key,
    /// `Some(peers)` to write, `None` to delete, [`crate::node::Effects`]),
    /// and the node's summary (asked for only in summary mode). Returns
    /// whether the mode switched in this call.
    pub fn apply(
        &mut self,
        service_status: BTreeMap<String, Option<Vec<String>>>,
        summary: impl FnOnce() -> NodeBGPStatusStatus,
    ) -> bool {
        let mut switched_now = false;
        if self.mode == Mode::PerService {
            // The count after this batch, before anything goes to the writer
            // (which writes from its own task as entries come): past the cap,
            // switch without creating objects only to delete them.
            let after =
                service_status
                    .iter()
                    .fold(self.per_service.len(), |n, (key, peers)| {
                        match (peers.is_some(), self.per_service.contains(key)) {
                            (true, false) => n + 1,
                            (false, true) => n - 1,
                            _ => n,
                        }
                    });
            if after > self.max_per_node {
                let message = format!(
                    "--service-bgp-status=per-service: this node would hold {after} ServiceBGPStatus objects, past its cap of {} (--service-bgp-status-max-per-node): switched to one NodeBGPStatus for this node until the speaker restarts",
                    self.max_per_node
                );
                tracing::warn!(
                    objects = after,
                    cap = self.max_per_node,
                    "ServiceBGPStatus cap reached: switching this node to the summary NodeBGPStatus"
                );
                for key in std::mem::take(&mut self.per_service) {
                    let (ns, name) = key.split_once('/').unwrap_or(("", &key));
                    self.svc_status.remove_labeled(service_identity(ns, name));
                }
                self.mode = Mode::Summary;
                self.switched = Some(message);
                switched_now = true;
            }
        }
        if self.mode == Mode::PerService {
            for (key, peers) in service_status {
                let (ns, name) = key.split_once('/').unwrap_or(("", &key));
                let identity = service_identity(ns, name);
                match peers {
                    Some(peers) => {
                        self.svc_status.set_labeled(
                            identity,
                            Desired::new(MetalLBServiceBGPStatus {
                                node: self.node.clone(),
                                service_name: name.to_owned(),
                                service_namespace: ns.to_owned(),
                                peers,
                            })
                            .owner(self.owner.clone()),
                        );
                        self.per_service.insert(key);
                    }
                    None => {
                        self.svc_status.remove_labeled(identity);
                        self.per_service.remove(&key);
                    }
                }
            }
        }
        if self.mode == Mode::Summary {
            let status = summary();
            if self.last.as_ref() != Some(&status) {
                self.node_status.set_labeled(
                    Labels::new(),
                    Desired::new(status.clone()).owner(self.owner.clone()),
                );
                self.last = Some(status);
            }
        }
        switched_now
    }

    /// The first full pass is done: objects of the node nobody asked for go
    /// (the other mode's, after a change of the flag).
    pub fn initial_sync_done(&self) {
        self.svc_status.initial_sync_done();
        self.node_status.initial_sync_done();
    }

    /// The configured mode.
    pub fn configured(&self) -> Mode {
        self.configured
    }
}

/// The ownerReference of a node's status objects: its Node (cluster-scoped, so a
/// namespaced dependent may name it), without `blockOwnerDeletion` (which would
/// need a permission on the Node's finalizers). A speaker restart changes no
/// owner; the Node's deletion garbage-collects them. `None` without a uid.
pub fn node_owner(node: &k8s_openapi::api::core::v1::Node) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.metadata.name.clone()?,
        uid: node.metadata.uid.clone()?,
        ..OwnerReference::default()
    })
}

fn service_identity(ns: &str, name: &str) -> Labels {
    Labels::from([
        (LABEL_SERVICE_NAME.to_owned(), name.to_owned()),
        (LABEL_SERVICE_NAMESPACE.to_owned(), ns.to_owned()),
    ])
}

#[cfg(test)]
mod tests;
