//! The kinds the writer handles and what a caller asks for.

use std::collections::BTreeMap;
use std::fmt;

use config::api::v1beta1::{
    BGPSessionStatus, ConfigurationState, ConfigurationStateStatus, IPAddressPool,
    ServiceBGPStatus, ServiceL2Status,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::NamespaceResourceScope;
use kube::core::object::HasStatus;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A namespaced object whose status the writer writes.
///
/// Implemented for `ConfigurationState`, `ServiceL2Status`, `ServiceBGPStatus`,
/// `BGPSessionStatus` and `IPAddressPool` (status only).
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

    /// Adjusts `desired` to what is on the server where a difference is not
    /// worth a write (e.g. keeps a condition's `lastTransitionTime` while its
    /// status is unchanged). Pure; called before every comparison.
    fn carry_over(_desired: &mut Self::Status, _observed: &Self::Status) {}
}

impl StatusObject for ConfigurationState {
    const KIND: &'static str = "ConfigurationState";

    fn carry_over(desired: &mut ConfigurationStateStatus, observed: &ConfigurationStateStatus) {
        crate::configuration_state::carry_over_transition_times(desired, observed);
    }
}

impl StatusObject for ServiceL2Status {
    const KIND: &'static str = "ServiceL2Status";
}

impl StatusObject for ServiceBGPStatus {
    const KIND: &'static str = "ServiceBGPStatus";
}

impl StatusObject for BGPSessionStatus {
    const KIND: &'static str = "BGPSessionStatus";
}

impl StatusObject for IPAddressPool {
    const KIND: &'static str = "IPAddressPool";
    const OWNS_OBJECTS: bool = false;
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

/// What a caller wants an object to be: its status, plus the labels and
/// owner reference it is created with (they are written only when the
/// writer creates the object).
#[derive(Clone, Debug, PartialEq)]
pub struct Desired<S> {
    /// The status.
    pub status: S,
    /// Labels set when the object is created.
    pub labels: BTreeMap<String, String>,
    /// Owner reference set when the object is created (e.g. the writing Pod).
    pub owner: Option<OwnerReference>,
}

impl<S> Desired<S> {
    /// A status without labels or owner.
    pub fn new(status: S) -> Self {
        Self {
            status,
            labels: BTreeMap::new(),
            owner: None,
        }
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
