//! `ConfigurationState`: the names, labels and statuses MetalLB's components
//! report their configuration with.

use std::collections::BTreeMap;
use std::fmt::Display;

use config::api::v1beta1::{
    CONDITION_CONFIG_RECONCILER_VALID, CONDITION_POOL_RECONCILER_VALID, ConfigurationResult,
    ConfigurationStateStatus, REASON_CONFIGURATION_ERROR, REASON_RECONCILED,
};
use config::api::{LABEL_COMPONENT_TYPE, LABEL_NODE_NAME};
use config::names;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;

use crate::object::{Desired, ObjectKey};

/// The component a `ConfigurationState` belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Component {
    /// The controller: `controller`, condition `poolReconcilerValid`.
    Controller,
    /// The speaker of a node: `speaker-<node>`, condition `configReconcilerValid`.
    Speaker {
        /// The node's name.
        node: String,
    },
}

impl Component {
    /// The object's name.
    pub fn name(&self) -> String {
        match self {
            Component::Controller => names::CONTROLLER_CONFIGURATION_STATE.to_owned(),
            Component::Speaker { node } => names::speaker_configuration_state(node),
        }
    }

    /// The object's key in `namespace`.
    pub fn key(&self, namespace: &str) -> ObjectKey {
        ObjectKey::new(namespace, self.name())
    }

    /// `metallb.io/component-type`, and `metallb.io/node-name` for speakers.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::new();
        match self {
            Component::Controller => {
                labels.insert(LABEL_COMPONENT_TYPE.to_owned(), "controller".to_owned());
            }
            Component::Speaker { node } => {
                labels.insert(LABEL_COMPONENT_TYPE.to_owned(), "speaker".to_owned());
                labels.insert(LABEL_NODE_NAME.to_owned(), node.clone());
            }
        }
        labels
    }

    /// The condition type the component reports.
    pub fn condition_type(&self) -> &'static str {
        match self {
            Component::Controller => CONDITION_POOL_RECONCILER_VALID,
            Component::Speaker { .. } => CONDITION_CONFIG_RECONCILER_VALID,
        }
    }
}

/// `now` to the second, as the API server stores condition times (a finer
/// time would differ from what the server returns).
pub fn now() -> Time {
    Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// The status of a component whose configuration loaded.
pub fn valid(component: &Component, now: Time) -> ConfigurationStateStatus {
    ConfigurationStateStatus {
        result: Some(ConfigurationResult::Valid),
        last_error: String::new(),
        error_summary: String::new(),
        conditions: vec![Condition {
            type_: component.condition_type().to_owned(),
            status: "True".to_owned(),
            reason: REASON_RECONCILED.to_owned(),
            message: String::new(),
            last_transition_time: now,
            observed_generation: None,
        }],
        layer2_membership: None,
    }
}

/// The status of a component whose configuration is invalid (or that failed
/// otherwise): `configuration error: <error>`.
pub fn invalid(component: &Component, error: &dyn Display, now: Time) -> ConfigurationStateStatus {
    let message = format!("configuration error: {error}");
    ConfigurationStateStatus {
        result: Some(ConfigurationResult::Invalid),
        last_error: message.clone(),
        error_summary: message.clone(),
        conditions: vec![Condition {
            type_: component.condition_type().to_owned(),
            status: "False".to_owned(),
            reason: REASON_CONFIGURATION_ERROR.to_owned(),
            message,
            last_transition_time: now,
            observed_generation: None,
        }],
        layer2_membership: None,
    }
}

/// The condition type of configuration warnings (selector combinations that
/// cannot overlap, `config::overlap`): present with status `True` while
/// there are warnings; it never makes the configuration `Invalid`.
pub const CONDITION_WARNINGS: &str = "ConfigurationWarnings";
/// Its reason.
pub const REASON_SELECTORS_CANNOT_OVERLAP: &str = "SelectorsCannotOverlap";

/// `status` with a [`CONDITION_WARNINGS`] condition listing `warnings`
/// (none: unchanged). The condition's message is cut to the CRD's limit by
/// the writer.
pub fn with_warnings(
    mut status: ConfigurationStateStatus,
    warnings: &[String],
    now: Time,
) -> ConfigurationStateStatus {
    if !warnings.is_empty() {
        status.conditions.push(Condition {
            type_: CONDITION_WARNINGS.to_owned(),
            status: "True".to_owned(),
            reason: REASON_SELECTORS_CANNOT_OVERLAP.to_owned(),
            message: warnings.join("; "),
            last_transition_time: now,
            observed_generation: None,
        });
    }
    status
}

/// [`valid`] or [`invalid`] from the outcome of loading a configuration.
pub fn from_result<E: Display>(
    component: &Component,
    result: &Result<(), E>,
    now: Time,
) -> ConfigurationStateStatus {
    match result {
        Ok(()) => valid(component, now),
        Err(e) => invalid(component, e, now),
    }
}

/// What to hand the writer: the status of `result`, the component's labels,
/// and `owner` (the writing Pod, only when it exists: see
/// [`crate::pod_owner_reference`]).
pub fn desired<E: Display>(
    component: &Component,
    result: &Result<(), E>,
    owner: Option<OwnerReference>,
    now: Time,
) -> Desired<ConfigurationStateStatus> {
    Desired {
        status: from_result(component, result, now),
        labels: component.labels(),
        owner,
        min_interval: None,
    }
}

/// Keeps each condition's `lastTransitionTime` from `observed` while its
/// status is unchanged: the time changes only with the status (MetalLB
/// rewrites it on every reconcile).
pub fn carry_over_transition_times(
    desired: &mut ConfigurationStateStatus,
    observed: &ConfigurationStateStatus,
) {
    for c in &mut desired.conditions {
        if let Some(o) = observed
            .conditions
            .iter()
            .find(|o| o.type_ == c.type_ && o.status == c.status)
        {
            c.last_transition_time = o.last_transition_time.clone();
        }
    }
}
