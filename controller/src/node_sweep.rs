//! The per-node status objects of nodes that are gone: a speaker writes
//! ServiceBGPStatus, ServiceL2Status, BGPSessionStatus and NodeBGPStatus
//! objects labelled `metallb.io/node=<node>` and owned by its Node, so a
//! deleted Node's objects are garbage-collected. A node that stays NotReady
//! keeps its Node (and, a DaemonSet's Pod tolerating it, its speaker Pod):
//! its objects would claim announcements that stopped. The leading
//! controller deletes them once the node has been NotReady for longer than
//! `--node-status-grace-period` (5 min by default), once per NotReady spell
//! (a speaker still running there writes them again, once), and those of a
//! Node it saw deleted (objects a former version owned by the Pod).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use tokio::sync::watch;

use crate::leader::Leadership;

/// Default of `--node-status-grace-period`.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(300);

/// How often the Nodes are looked at.
pub const PERIOD: Duration = Duration::from_secs(30);

/// The plural names of the per-node status kinds.
pub const KINDS: [&str; 4] = [
    "servicebgpstatuses",
    "servicel2statuses",
    "bgpsessionstatuses",
    "nodebgpstatuses",
];

/// Deletes the per-node status objects of one node.
pub trait NodeStatusApi: Send + Sync {
    /// Deletes every object of [`KINDS`] labelled `metallb.io/node=<node>`.
    fn delete_node_status(&self, node: &str) -> impl Future<Output = Result<(), String>> + Send;
}

/// Since when `node` is NotReady (its Ready condition is not `True`), or
/// `None` while Ready (or without a Ready condition: not yet reported).
pub fn not_ready_since(node: &Node) -> Option<SystemTime> {
    let ready = node
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    if ready.status == "True" {
        return None;
    }
    Some(
        ready
            .last_transition_time
            .as_ref()
            .map_or(SystemTime::UNIX_EPOCH, |t| SystemTime::from(t.0)),
    )
}

/// Which nodes' status objects are due for deletion, from one look at the
/// Nodes to the next.
#[derive(Debug)]
pub struct Sweeper {
    grace: Duration,
    /// Nodes seen at the last look.
    known: BTreeSet<String>,
    /// Nodes swept in their current NotReady spell (since when).
    swept: BTreeMap<String, SystemTime>,
    /// Deleted Nodes whose sweep failed (tried again).
    gone: BTreeSet<String>,
}

/// Why a node's objects go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Due {
    /// The Node was deleted.
    Deleted(String),
    /// NotReady since then.
    NotReady(String, SystemTime),
}

impl Due {
    /// The node.
    pub fn node(&self) -> &str {
        match self {
            Due::Deleted(n) | Due::NotReady(n, _) => n,
        }
    }
}

impl Sweeper {
    /// A sweeper with the grace period `grace`.
    pub fn new(grace: Duration) -> Self {
        Self {
            grace,
            known: BTreeSet::new(),
            swept: BTreeMap::new(),
            gone: BTreeSet::new(),
        }
    }

    /// The nodes due at `now`, given every Node now.
    pub fn due(&mut self, nodes: &[Arc<Node>], now: SystemTime) -> Vec<Due> {
        let current: BTreeSet<String> = nodes.iter().map(|n| n.name_any()).collect();
        let mut out = Vec::new();
        for gone in self.known.difference(&current) {
            self.gone.insert(gone.clone());
        }
        // a Node created again under the same name is a new node
        self.gone.retain(|n| !current.contains(n));
        out.extend(self.gone.iter().cloned().map(Due::Deleted));
        self.swept.retain(|n, _| current.contains(n));
        for node in nodes {
            let name = node.name_any();
            match not_ready_since(node) {
                None => {
                    self.swept.remove(&name);
                }
                Some(since) => {
                    let long = now.duration_since(since).is_ok_and(|d| d >= self.grace);
                    if long && self.swept.get(&name) != Some(&since) {
                        out.push(Due::NotReady(name, since));
                    }
                }
            }
        }
        self.known = current;
        out
    }

    /// The sweep of `due` succeeded (else it is tried again at the next look).
    pub fn done(&mut self, due: &Due) {
        match due {
            Due::Deleted(n) => {
                self.gone.remove(n);
            }
            Due::NotReady(n, since) => {
                self.swept.insert(n.clone(), *since);
            }
        }
    }
}

/// Looks at the Nodes every [`PERIOD`] while this controller leads and
/// deletes the status objects of the nodes due; returns when `shutdown`
/// completes.
pub async fn run<A: NodeStatusApi>(
    api: A,
    nodes: impl Fn() -> Vec<Arc<Node>> + Send,
    mut leader: watch::Receiver<Leadership>,
    grace: Duration,
    period: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let mut sweeper = Sweeper::new(grace);
    tokio::pin!(shutdown);
    loop {
        if leader.borrow_and_update().is_leader() {
            for due in sweeper.due(&nodes(), SystemTime::now()) {
                match api.delete_node_status(due.node()).await {
                    Ok(()) => {
                        match &due {
                            Due::Deleted(n) => {
                                tracing::info!(node = n, "Node deleted: its status objects deleted")
                            }
                            Due::NotReady(n, _) => tracing::warn!(
                                node = n,
                                grace_s = grace.as_secs(),
                                "Node NotReady for longer than the grace period: its status objects (ServiceBGPStatus, ServiceL2Status, BGPSessionStatus, NodeBGPStatus) deleted"
                            ),
                        }
                        sweeper.done(&due);
                    }
                    Err(e) => {
                        tracing::warn!(
                            node = due.node(),
                            error = e,
                            "deleting a node's status objects failed; tried again"
                        )
                    }
                }
            }
        }
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(period) => {}
            r = leader.changed() => {
                if r.is_err() {
                    return;
                }
            }
        }
    }
}

/// [`NodeStatusApi`] on a real API server: one `deletecollection` per kind
/// with the label selector `metallb.io/node=<node>` in `namespace`.
#[derive(Clone)]
pub struct KubeNodeStatusApi {
    client: kube::Client,
    namespace: String,
}

impl KubeNodeStatusApi {
    /// Deletes in `namespace`.
    pub fn new(client: kube::Client, namespace: impl Into<String>) -> Self {
        Self {
            client,
            namespace: namespace.into(),
        }
    }
}

impl NodeStatusApi for KubeNodeStatusApi {
    async fn delete_node_status(&self, node: &str) -> Result<(), String> {
        use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
        use kube::discovery::ApiResource;
        let lp = ListParams::default().labels(&format!("{}={node}", config::api::LABEL_NODE));
        for plural in KINDS {
            let ar = ApiResource {
                group: "metallb.io".into(),
                version: "v1beta1".into(),
                api_version: "metallb.io/v1beta1".into(),
                kind: String::new(),
                plural: plural.into(),
            };
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &self.namespace, &ar);
            let r = tokio::time::timeout(
                kube_edge::REQUEST_TIMEOUT,
                api.delete_collection(&DeleteParams::default(), &lp),
            )
            .await;
            match r {
                Ok(Ok(_)) => {}
                // a kind not installed (MetalLB's CRDs lack the metallb-rs ones)
                Ok(Err(kube::Error::Api(s))) if s.code == 404 => {}
                Ok(Err(e)) => return Err(format!("{plural}: {e}")),
                Err(_) => return Err(format!("{plural}: no answer in time")),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
