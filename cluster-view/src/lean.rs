//! What the caches keep: every object is trimmed before it enters a cache
//! (the watch stream's objects, before the store and the change callbacks
//! see them), so a daemon holds what it reads and not the rest (issue 25,
//! "lean watches").
//!
//! What reads the cached objects (the speaker's decisions and loop, the
//! controller, its webhooks, `config::parse`, this crate's signals), and so
//! what is kept, by kind:
//!
//! - Node: `metadata.name`, `.labels` (node selectors, the
//!   exclude-from-load-balancers label, layer-2 preferences), `.uid` (the
//!   owner of the speaker's status objects); `status.conditions`:
//!   `NetworkUnavailable` (the speaker's decisions and signals), `Ready`
//!   and its `lastTransitionTime` (the controller's sweep of a NotReady
//!   node's status objects). Kept: exactly those, with `resourceVersion`
//!   and the deletion fields of the metadata.
//! - Service: `metadata` (name, namespace, uid, `resourceVersion` for
//!   conditional writes, labels for selectors, annotations), `spec` (type,
//!   class, traffic policy, ports, cluster IPs and families, requested
//!   addresses: the controller's allocation), `status.loadBalancer`. Kept:
//!   everything but the managed fields.
//! - EndpointSlice: `metadata.name`, `.namespace`, the
//!   `kubernetes.io/service-name` label; per endpoint `addresses` (whether
//!   there is one), `conditions` (ready, serving), `nodeName`. Kept: exactly
//!   that, decoded into [`crate::endpoints::LeanSlice`] (no trimming here:
//!   nothing else is decoded).
//! - ConfigMap: `bgpextras` only (whether it exists). Kept: every
//!   ConfigMap's `metadata`; the data of `bgpextras` only.
//! - Namespace, Secret, the metallb.io kinds: names and labels
//!   (Namespaces), data and type (Secrets), spec and generation (metallb.io
//!   kinds), labels and annotations (their change signal). Kept:
//!   everything but the managed fields.
//!
//! Dropped: `metadata.managedFields` and the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation of every
//! object (no daemon reads them; a Secret's last-applied annotation holds
//! its data once more); a Node's annotations, `spec` (pod CIDRs, taints,
//! provider ID), other conditions and the reason, message and heartbeat of
//! the two kept, and the rest of its `status` (addresses, capacity,
//! allocatable, node info, images, volumes, daemon endpoints, ...: the
//! images alone are most of a Node's bytes); of an EndpointSlice
//! everything but the above.
//!
//! A reader of a new field must keep it here first (the tests in
//! `tests/stored.rs` list what each kind keeps). The daemons never write a
//! cached object back whole (their writes are merge patches of the fields
//! they own), so nothing dropped here is ever dropped on the server.

use k8s_openapi::api::core::v1::{ConfigMap, Node, NodeCondition, NodeStatus, Service};
use kube::Resource;

use crate::view::BGP_EXTRAS;

/// The annotation `kubectl apply` keeps its last input in (a copy of the
/// object, dropped).
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops `metadata.managedFields` and the [`LAST_APPLIED`] annotation; the
/// trimming of every kind.
pub fn metadata<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// The Node conditions kept (the others are never read).
pub const NODE_CONDITIONS: [&str; 2] = ["Ready", crate::nodes::NETWORK_UNAVAILABLE];

/// A Node as the caches keep it: of its metadata the name, uid, labels,
/// `resourceVersion` and deletion (no annotations, owners, finalizers or
/// creation time); of its status the [`NODE_CONDITIONS`] alone, each with
/// its type, status and `lastTransitionTime` (no reason, message or
/// heartbeat).
pub fn node(node: &mut Node) {
    metadata(node);
    let meta = &mut node.metadata;
    meta.annotations = None;
    meta.owner_references = None;
    meta.finalizers = None;
    meta.generate_name = None;
    meta.creation_timestamp = None;
    node.spec = None;
    node.status = node.status.take().map(|s| NodeStatus {
        conditions: s.conditions.map(|all| {
            all.into_iter()
                .filter(|c| NODE_CONDITIONS.contains(&c.type_.as_str()))
                .map(|c| NodeCondition {
                    type_: c.type_,
                    status: c.status,
                    last_transition_time: c.last_transition_time,
                    ..NodeCondition::default()
                })
                .collect()
        }),
        ..NodeStatus::default()
    });
}

/// A Service as the caches keep it: [`metadata`] (the controller reads
/// most of the rest).
pub fn service(svc: &mut Service) {
    metadata(svc);
}

/// A ConfigMap as the caches keep it: [`metadata`], and the data of
/// [`BGP_EXTRAS`] alone (the only one read).
pub fn config_map(cm: &mut ConfigMap) {
    metadata(cm);
    if cm.metadata.name.as_deref() != Some(BGP_EXTRAS) {
        cm.data = None;
        cm.binary_data = None;
    }
}
