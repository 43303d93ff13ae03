//! The kinds the writer handles and what a caller asks for.

use std::collections::BTreeMap;
use std::fmt;

use config::api::v1beta1::{
    BGPSessionStatus, ConfigurationState, ConfigurationStateStatus, IPAddressPool, NodeBGPStatus,
    ServiceBGPStatus, ServiceL2Status,
};
use config::api::{LABEL_NODE, LABEL_PEER};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::NamespaceResourceScope;
use kube::core::object::HasStatus;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A namespaced object whose status the writer writes.
///
/// Implemented for `ConfigurationState`, `ServiceL2Status`, `ServiceBGPStatus`,
/// `BGPSessionStatus`, `NodeBGPStatus` and `IPAddressPool` (status only).
pub trait StatusObject:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + HasStatus<
        Status: Clone
                    + PartialEq
                    + Default
                    + fmt::Debug
                    + Serialize
                    + DeserializeOwned
                    + Send
                    + Sync
                    + 'static,
    > + Clone
    + fmt::Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The `kind` label value of the metrics.
    const KIND: &'static str;

    /// Whether the writer owns the objects themselves: it creates them when
    /// they are missing and deletes them when no longer wanted. False for
    /// `IPAddressPool`, whose objects belong to the user (only the status is
    /// written, and only while the pool exists).
    const OWNS_OBJECTS: bool = true;

    /// `generateName` of a new object of this kind identified by the labels
    /// `identity` (label-keyed writers, see [`crate::LabelScope`]). The API
    /// server appends 5 random characters (and cuts a prefix longer than 58
    /// characters).
    fn generate_name(_identity: &Labels) -> String {
        format!("{}-", Self::KIND.to_ascii_lowercase())
    }

    /// The name a new object identified by `identity` is created with when
    /// no object of that name exists (`None`: the server names it from
    /// [`StatusObject::generate_name`], which is also the fallback when the
    /// name is taken by an object of another identity).
    fn name(_identity: &Labels) -> Option<String> {
        None
    }

    /// Cuts fields of `status` to the lengths the CRD allows, so the API
    /// server does not reject the write forever. Called on every desired
    /// status handed in.
    fn limit(_status: &mut Self::Status) {}

    /// Adjusts `desired` to what is on the server where a difference is not
    /// worth a write (e.g. keeps a condition's `lastTransitionTime` while its
    /// status is unchanged). Pure; called before every comparison.
    fn carry_over(_desired: &mut Self::Status, _observed: &Self::Status) {}
}

impl StatusObject for ConfigurationState {
    const KIND: &'static str = "ConfigurationState";

    fn limit(status: &mut ConfigurationStateStatus) {
        for c in &mut status.conditions {
            truncate(&mut c.message, MAX_CONDITION_MESSAGE);
        }
        // No maxLength in the CRD, but the object must stay well below the
        // API server's request size limit: same bound as the condition.
        truncate(&mut status.last_error, MAX_CONDITION_MESSAGE);
        truncate(&mut status.error_summary, MAX_CONDITION_MESSAGE);
    }

    fn carry_over(desired: &mut ConfigurationStateStatus, observed: &ConfigurationStateStatus) {
        crate::configuration_state::carry_over_transition_times(desired, observed);
    }
}

impl StatusObject for ServiceL2Status {
    const KIND: &'static str = "ServiceL2Status";

    /// MetalLB's `l2-`.
    fn generate_name(_identity: &Labels) -> String {
        "l2-".to_owned()
    }
}

impl StatusObject for ServiceBGPStatus {
    const KIND: &'static str = "ServiceBGPStatus";

    /// MetalLB's `bgp-`.
    fn generate_name(_identity: &Labels) -> String {
        "bgp-".to_owned()
    }
}

impl StatusObject for BGPSessionStatus {
    const KIND: &'static str = "BGPSessionStatus";

    /// `<node>-<peer>-` (see [`StatusObject::name`]; the server cuts it to
    /// 58 characters and appends 5 random ones): used only when the
    /// name `<node>-<peer>` is taken by another pair's object (node `a-b`
    /// with peer `c` and node `a` with peer `b-c`) or too long.
    fn generate_name(identity: &Labels) -> String {
        let base = session_name(identity);
        if base.is_empty() {
            "bgpsession-".to_owned()
        } else {
            format!("{base}-")
        }
    }

    /// `<node>-<peer>` (from the labels `metallb.io/node` and
    /// `metallb.io/peer`, lowercased, characters a name cannot hold turned
    /// into `-`): stable for the object's life and the same after a restart.
    /// The identity is the labels: a writer adopts the existing object of a
    /// (node, peer) whatever its name, so a name never changes while the
    /// object lives, whatever other pairs appear.
    fn name(identity: &Labels) -> Option<String> {
        let name = session_name(identity);
        (!name.is_empty() && name.len() <= MAX_NAME).then_some(name)
    }
}

impl StatusObject for NodeBGPStatus {
    const KIND: &'static str = "NodeBGPStatus";

    /// Named after its node ([`StatusObject::name`]); this prefix is the
    /// fallback when that name is taken by another node's object.
    fn generate_name(_identity: &Labels) -> String {
        "nodebgp-".to_owned()
    }

    /// The node's name (the label `metallb.io/node`).
    fn name(identity: &Labels) -> Option<String> {
        identity
            .get(LABEL_NODE)
            .filter(|n| !n.is_empty() && n.len() <= MAX_NAME)
            .cloned()
    }
}

/// The longest object name (a DNS subdomain).
const MAX_NAME: usize = 253;

/// `<node>-<peer>` as a DNS subdomain, or empty.
fn session_name(identity: &Labels) -> String {
    let part = |k: &str| {
        identity
            .get(k)
            .map(|v| {
                v.chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                            c.to_ascii_lowercase()
                        } else {
                            '-'
                        }
                    })
                    .collect::<String>()
            })
            .unwrap_or_default()
    };
    let base = format!("{}-{}", part(LABEL_NODE), part(LABEL_PEER));
    // Every dot-separated part of a subdomain starts and ends alphanumeric.
    base.split('.')
        .map(|l| l.trim_matches('-'))
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(".")
}

impl StatusObject for IPAddressPool {
    const KIND: &'static str = "IPAddressPool";
    const OWNS_OBJECTS: bool = false;
}

/// Labels of an object.
pub type Labels = BTreeMap<String, String>;

/// `maxLength` of `metav1.Condition.message` in the CRDs.
pub const MAX_CONDITION_MESSAGE: usize = 32768;

/// What ends a truncated text.
pub const TRUNCATION_MARKER: &str = "… (truncated)";

/// Cuts `text` to at most `max_chars` characters (the unit of a CRD's
/// `maxLength`), on a character boundary, ending with [`TRUNCATION_MARKER`].
/// Returns whether it was cut.
pub fn truncate(text: &mut String, max_chars: usize) -> bool {
    if text.chars().count() <= max_chars {
        return false;
    }
    let marker = TRUNCATION_MARKER.chars().count();
    let keep = max_chars.saturating_sub(marker);
    let cut = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
    text.truncate(cut);
    if marker <= max_chars {
        text.push_str(TRUNCATION_MARKER);
    }
    true
}

/// An object as read from the server: its status and the metadata the
/// writer manages.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed<S> {
    /// The status (the default when it has none).
    pub status: S,
    /// `metadata.labels`.
    pub labels: Labels,
    /// `metadata.ownerReferences`.
    pub owners: Vec<OwnerReference>,
    /// `metadata.resourceVersion` when it is a number (as etcd's revisions
    /// are): an observation older than one already seen is stale and
    /// ignored (e.g. the watch's event of a create arriving after the
    /// answer of the status write that followed it).
    pub resource_version: Option<u64>,
}

impl<S> Observed<S> {
    /// A status without labels or owners.
    pub fn status(status: S) -> Self {
        Self {
            status,
            labels: Labels::new(),
            owners: Vec::new(),
            resource_version: None,
        }
    }
}

impl<K: StatusObject> From<&K> for Observed<K::Status> {
    fn from(obj: &K) -> Self {
        Self {
            status: obj.status().cloned().unwrap_or_default(),
            labels: obj.labels().clone(),
            owners: obj.owner_references().to_vec(),
            resource_version: obj.resource_version().and_then(|v| v.parse().ok()),
        }
    }
}

/// The objects a label-keyed writer manages (`ServiceL2Status`,
/// `ServiceBGPStatus`, `BGPSessionStatus` of one node): those in `namespace`
/// whose labels include `selector` (e.g. `metallb.io/node=<node>`). Each is
/// identified by a set of labels, not by its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelScope {
    /// Namespace of the objects.
    pub namespace: String,
    /// Labels every object of the scope has (merged into every identity).
    pub selector: Labels,
}

impl LabelScope {
    /// The objects of `namespace` labelled `metallb.io/node=<node>`.
    pub fn node(namespace: impl Into<String>, node: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            selector: Labels::from([(LABEL_NODE.to_owned(), node.into())]),
        }
    }

    /// Whether `labels` are in the scope.
    pub fn contains(&self, labels: &Labels) -> bool {
        is_subset(&self.selector, labels)
    }
}

/// A label selector (`k=v,k2=v2`) of `labels`.
pub fn selector_string(labels: &Labels) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether every label of `part` is in `whole` with the same value.
pub fn is_subset(part: &Labels, whole: &Labels) -> bool {
    part.iter().all(|(k, v)| whole.get(k) == Some(v))
}

/// Namespace and name of one object (the kind is the writer's).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectKey {
    /// The object `namespace`/`name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of an object read from the API.
    pub fn of<K: Resource>(obj: &K) -> Self {
        Self::new(obj.namespace().unwrap_or_default(), obj.name_any())
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What a caller wants an object to be: its status, plus labels and an owner
/// reference. The labels and the owner are set at creation, and reconciled
/// on an existing object (server-side apply of its metadata) when the server
/// lacks one of the labels or the owner (kinds the writer owns only).
#[derive(Clone, Debug, PartialEq)]
pub struct Desired<S> {
    /// The status.
    pub status: S,
    /// Labels the object must have (others' labels are left alone).
    pub labels: BTreeMap<String, String>,
    /// Owner reference the object must have (e.g. the writing Pod); `None`
    /// leaves the owners alone.
    pub owner: Option<OwnerReference>,
    /// At most one write of this object per this interval while this status
    /// is wanted (changes within it are coalesced, the last one written),
    /// when longer than the writer's `min_write_interval`: for statuses that
    /// churn without news (e.g. a session down between connect attempts).
    /// The status wanted next decides its own pace: one without it goes out
    /// at the writer's pace.
    pub min_interval: Option<std::time::Duration>,
}

impl<S> Desired<S> {
    /// A status without labels or owner.
    pub fn new(status: S) -> Self {
        Self {
            status,
            labels: BTreeMap::new(),
            owner: None,
            min_interval: None,
        }
    }

    /// Sets [`Desired::min_interval`].
    pub fn min_interval(mut self, interval: std::time::Duration) -> Self {
        self.min_interval = Some(interval);
        self
    }

    /// Adds a label.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Sets the owner reference.
    pub fn owner(mut self, owner: Option<OwnerReference>) -> Self {
        self.owner = owner;
        self
    }
}
