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
    ///
    /// The recorder counts an event again (its series) when one of the same type,
    /// reason and action about the same object was published lately, whatever its
    /// message: a new message under the same reason only bumps the old event's count.
    pub async fn publish(&self, object: &ObjectReference, note: &Note, timeout: Duration) -> bool {
        self.publish_as(object, note, note.reason.replace(' ', ""), timeout)
            .await
    }

    /// [`Self::publish`], with an action of its own per message (`<reason>-<hash of
    /// the message>`): a new message is a new event, the same message a repeat of
    /// its own.
    pub async fn publish_distinct(
        &self,
        object: &ObjectReference,
        note: &Note,
        timeout: Duration,
    ) -> bool {
        self.publish_as(object, note, distinct_action(note), timeout)
            .await
    }

    async fn publish_as(
        &self,
        object: &ObjectReference,
        note: &Note,
        action: String,
        timeout: Duration,
    ) -> bool {
        let ev = Event {
            type_: if note.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: note.reason.clone(),
            note: Some(note.message.clone()),
            action,
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

/// `<reason>-<FNV-1a 32 of the message, hex>` (at most 128 bytes, the API's limit).
fn distinct_action(note: &Note) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in note.message.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    let mut reason = note.reason.replace(' ', "");
    reason.truncate(128 - 9);
    format!("{reason}-{h:08x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_distinct_action_follows_the_message_and_fits_the_limit() {
        let note = |reason: &str, message: &str| Note {
            warning: true,
            reason: reason.into(),
            message: message.into(),
        };
        let a = distinct_action(&note("NotAnnounceable", "one"));
        assert_eq!(a, distinct_action(&note("NotAnnounceable", "one")));
        assert_ne!(a, distinct_action(&note("NotAnnounceable", "two")));
        assert!(a.starts_with("NotAnnounceable-") && a.len() == "NotAnnounceable-".len() + 8);
        assert!(distinct_action(&note(&"x".repeat(300), "m")).len() <= 128);
    }
}
