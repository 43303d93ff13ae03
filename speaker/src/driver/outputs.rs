//! Where the loop's effects go: the status writers, the events queue and the
//! metrics (moved out of the binary with the loop, unchanged).

use std::sync::Arc;

use cluster_view::endpoints::LeanSlice;
use config::api::LABEL_PEER;
use config::api::v1beta1::{
    BGPSessionStatus, ConfigurationState, InterfaceInfo, MetalLBServiceL2Status, ServiceL2Status,
};
use config::api::{LABEL_SERVICE_NAME, LABEL_SERVICE_NAMESPACE};
use daemon::events::Note;
use daemon::k8s_metrics::K8sClientMetrics;
use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use status::configuration_state::{self, Component};
use status::{Desired, Labels, StatusWriter};

use crate::bgp_speaker::{BfdOps, SessionFactory};
use crate::bgp_status::BgpStatusOutput;
use crate::config_state::Loaded;
use crate::l2_speaker::L2Ops;
use crate::node::{LoadOutcome, NodeSpeaker};
use crate::warnings::{NodeWarnings, REASON_NOT_ANNOUNCEABLE};

/// Where the effects of a step go.
pub struct Outputs {
    /// This node.
    pub node: String,
    /// The MetalLB namespace.
    pub ns: String,
    /// Owner of the per-node status objects (the Node once known).
    pub owner: Option<OwnerReference>,
    /// ServiceBGPStatus / NodeBGPStatus.
    pub bgp_status: BgpStatusOutput,
    /// ServiceL2Status objects of this node.
    pub l2_status: StatusWriter<ServiceL2Status>,
    /// BGPSessionStatus objects of this node.
    pub session_status: StatusWriter<BGPSessionStatus>,
    /// What is published of the sessions that are not Established.
    pub sessions_down: crate::bgp_speaker::DownHold,
    /// `metallb_speaker_announced`.
    pub announced: crate::metrics::Announced,
    /// Events (`nodeAssigned`, `announceFailed`, `NotAnnounceable`), sent by
    /// a task of their own.
    pub events: tokio::sync::mpsc::Sender<(ObjectReference, Note)>,
}

/// The event target of the Service `key`.
pub fn service_ref(key: &str) -> ObjectReference {
    let (svc_ns, name) = key.split_once('/').unwrap_or(("", key));
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Service".into()),
        namespace: Some(svc_ns.to_owned()),
        name: Some(name.to_owned()),
        ..Default::default()
    }
}

fn service_identity(key: &str) -> Labels {
    let (svc_ns, name) = key.split_once('/').unwrap_or(("", key));
    Labels::from([
        (LABEL_SERVICE_NAME.to_owned(), name.to_owned()),
        (LABEL_SERVICE_NAMESPACE.to_owned(), svc_ns.to_owned()),
    ])
}

impl Outputs {
    /// Carries out what the speaker asks since the last call.
    pub fn apply<F: SessionFactory, B: BfdOps, L: L2Ops>(
        &mut self,
        speaker: &mut NodeSpeaker<F, B, L>,
    ) {
        let fx = speaker.take_effects();
        self.bgp_status
            .apply(fx.service_status, || speaker.bgp_summary());
        for (key, ip, on) in fx.announced_metric {
            self.announced.set(&key, "bgp", ip, on);
        }
        for (key, ip, on) in fx.l2_announced_metric {
            self.announced.set(&key, "layer2", ip, on);
        }
        for (key, interfaces) in fx.l2_status {
            let identity = service_identity(&key);
            match interfaces {
                Some(interfaces) => {
                    let (svc_ns, name) = key.split_once('/').unwrap_or(("", &key));
                    self.l2_status.set_labeled(
                        identity.clone(),
                        Desired::new(MetalLBServiceL2Status {
                            node: self.node.clone(),
                            service_name: name.to_owned(),
                            service_namespace: svc_ns.to_owned(),
                            interfaces: interfaces
                                .into_iter()
                                .map(|name| InterfaceInfo { name })
                                .collect(),
                        })
                        .owner(self.owner.clone()),
                    );
                    // The node field is immutable: the former owner's object goes.
                    self.l2_status.delete_others(identity);
                }
                None => self.l2_status.remove_labeled(identity),
            }
        }
        let assigned = |protocol: &str| Note {
            warning: false,
            reason: "nodeAssigned".into(),
            message: format!(
                "announcing from node {} with protocol {}",
                config::gofmt::quote(&self.node),
                config::gofmt::quote(protocol)
            ),
        };
        let notes = fx
            .node_assigned
            .into_iter()
            .map(|k| (k, assigned("bgp")))
            .chain(
                fx.l2_node_assigned
                    .into_iter()
                    .map(|k| (k, assigned("layer2"))),
            )
            .chain(fx.announce_failed.into_iter().map(|(k, ip)| {
                let note = Note {
                    warning: true,
                    reason: "announceFailed".into(),
                    message: format!(
                        "the interfaces specified by LB IP {} doesn't exist in assigned node {} with protocol \"layer2\"",
                        config::gofmt::quote(&config::gofmt::ip(ip)),
                        config::gofmt::quote(&self.node)
                    ),
                };
                tracing::warn!(service = k, %ip, "the interfaces of the address do not exist on this node");
                (k, note)
            }));
        for (key, note) in notes {
            if self.events.try_send((service_ref(&key), note)).is_err() {
                tracing::debug!(service = key, "event queue full: event dropped");
            }
        }
        for (peer, status) in speaker.bgp().take_status_changes() {
            let identity = Labels::from([(LABEL_PEER.to_owned(), peer.clone())]);
            match status {
                Some(s) => {
                    let (s, pace) = self.sessions_down.publish(&peer, s);
                    let mut desired = Desired::new(s).owner(self.owner.clone());
                    if let Some(interval) = pace {
                        desired = desired.min_interval(interval);
                    }
                    self.session_status.set_labeled(identity, desired)
                }
                None => {
                    self.sessions_down.remove(&peer);
                    self.session_status.remove_labeled(identity)
                }
            }
        }
        let _ = &self.ns;
    }
}

/// Reports the Service warnings of this node ([`crate::warnings`]): a Warning
/// event on the Service when one appears or changes, and whether the set changed
/// (the ConfigurationState follows).
pub(super) struct Judge<'a> {
    pub node: &'a str,
    pub whole: Option<&'a config::Config>,
    pub warnings: &'a mut NodeWarnings,
    pub events: &'a tokio::sync::mpsc::Sender<(ObjectReference, Note)>,
    pub changed: bool,
}

impl Judge<'_> {
    pub fn service(&mut self, key: &str, svc: Option<&Service>, slices: &[Arc<LeanSlice>]) {
        let found = match (self.whole, svc) {
            (Some(whole), Some(svc)) => {
                crate::warnings::local_endpoints_unselected(whole, key, svc, slices)
            }
            _ => None,
        };
        // Reported by the nodes that host the endpoints.
        let here = found
            .filter(|w| w.endpoint_nodes.contains(self.node))
            .map(|w| w.message);
        let (new, changed) = self.warnings.set(key, here);
        self.changed |= changed;
        if let Some(message) = new {
            tracing::warn!(service = key, warning = message, "Service not announceable");
            let note = Note {
                warning: true,
                reason: REASON_NOT_ANNOUNCEABLE.into(),
                message,
            };
            if self.events.try_send((service_ref(key), note)).is_err() {
                tracing::debug!(service = key, "event queue full: event dropped");
            }
        }
    }
}

/// What `speaker-<node>`'s ConfigurationState says: the configuration's outcome,
/// its warnings, and this node's Service warnings.
pub(super) struct StateReport {
    pub component: Component,
    pub ns: String,
    pub owner: Option<OwnerReference>,
    pub result: Result<(), String>,
    pub config_warnings: Vec<String>,
    /// Why BGP announcements are reported otherwise than configured.
    pub bgp_status_note: Option<String>,
    /// Its layer-2 membership view (membership on).
    pub membership: Option<config::api::v1beta1::Layer2Membership>,
}

impl StateReport {
    pub fn write(&self, writer: &StatusWriter<ConfigurationState>, services: &NodeWarnings) {
        let mut desired = configuration_state::desired(
            &self.component,
            &self.result,
            self.owner.clone(),
            configuration_state::now(),
        );
        let mut warnings = if self.result.is_ok() {
            self.config_warnings.clone()
        } else {
            Vec::new()
        };
        warnings.extend(self.bgp_status_note.clone());
        warnings.extend(services.messages());
        desired.status = configuration_state::with_warnings(
            desired.status,
            &warnings,
            configuration_state::now(),
        );
        desired.status.layer2_membership = self.membership.clone();
        writer.set_desired(self.component.key(&self.ns), desired);
    }
}

pub(super) fn log_decision(
    key: &str,
    protocol: &str,
    result: &Result<(), crate::decide::bgp::Reason>,
    changed: bool,
) {
    match (result, changed) {
        (Err(reason), true) => {
            tracing::info!(service = key, protocol, reason = %reason, "serviceWithdrawn")
        }
        (Ok(()), true) => tracing::info!(service = key, protocol, "serviceAnnounced"),
        (r, false) => tracing::debug!(service = key, protocol, result = ?r, "unchanged"),
    }
}

pub(super) fn report_config<F: SessionFactory, B: BfdOps, L: L2Ops>(
    speaker: &NodeSpeaker<F, B, L>,
    outcome: &LoadOutcome,
    metrics: &K8sClientMetrics,
) {
    match &outcome.loaded {
        Loaded::Accepted => {
            metrics.update_ok();
            if let Some(c) = speaker.config() {
                tracing::info!(
                    pools = c.pools.len(),
                    peers = c.peers.len(),
                    "configuration is valid and in force"
                );
            }
        }
        Loaded::Unchanged => {}
        Loaded::Invalid(e) => {
            metrics.update_error();
            if speaker.tracker().loaded() {
                tracing::error!(
                    error = e,
                    "configuration is invalid; keeping the last valid configuration"
                );
            } else {
                tracing::error!(
                    error = e,
                    "configuration is invalid; no valid configuration seen yet"
                );
            }
        }
    }
    metrics.config_loaded(speaker.tracker().loaded());
    metrics.config_stale(speaker.tracker().stale());
}
