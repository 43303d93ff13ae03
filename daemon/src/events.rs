//! Kubernetes events (events.k8s.io) with a deadline: a slow API server delays an
//! event, never the loop that reports it, and a failure is logged, not retried (an
//! event is not worth a retry).

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// One event about an object, with MetalLB's reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// Warning (else Normal).
    pub warning: bool,
    /// MetalLB's reason, e.g. `IPAllocated`, `nodeAssigned`.
    pub reason: String,
    /// MetalLB's message.
    pub message: String,
}

/// Publishes events as one reporting controller (MetalLB's process name) and instance.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl Events {
    /// Events of `controller` (e.g. `metallb-controller`, `metallb-speaker`) from
    /// `instance` (the Pod, or the node).
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Self {
        Self {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: controller.into(),
                    instance,
                },
            ),
        }
    }

    /// Publishes `note` about `object` within `timeout`; returns whether it was.
    pub async fn publish(&self, object: &ObjectReference, note: &Note, timeout: Duration) -> bool {
        let ev = Event {
            type_: if note.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: note.reason.clone(),
            note: Some(note.message.clone()),
            action: note.reason.replace(' ', ""),
            secondary: None,
        };
        let what = format!(
            "{}/{}",
            object.namespace.as_deref().unwrap_or_default(),
            object.name.as_deref().unwrap_or_default()
        );
        match tokio::time::timeout(timeout, self.recorder.publish(&ev, object)).await {
            Ok(Ok(())) => true,
            Ok(Err(err)) => {
                tracing::warn!(object = what, reason = note.reason, error = %err, "publishing an event failed");
                false
            }
            Err(_) => {
                tracing::warn!(object = what, reason = note.reason, timeout = ?timeout, "publishing an event timed out");
                false
            }
        }
    }
}
