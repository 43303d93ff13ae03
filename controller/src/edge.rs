//! The controller's writes to Services: `status.loadBalancer.ingress`
//! through the status subresource, the `metallb.io/ip-allocated-from-pool`
//! annotation with a merge patch (never an update, so a concurrent spec edit
//! by the user is never overwritten with a stale copy), and MetalLB's events.

use k8s_openapi::api::core::v1::Service as KubeService;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::service::{Event, ServiceUpdate};

/// The name events are reported under (MetalLB's process name).
pub const REPORTING_CONTROLLER: &str = "metallb-controller";

/// Writes Services and their events.
#[derive(Clone)]
pub struct ServiceEdge {
    client: Client,
    recorder: Recorder,
}

/// The JSON merge patch of the status subresource setting `ips` (an empty
/// list clears the ingress).
pub fn status_patch(ips: &[std::net::IpAddr]) -> Value {
    if ips.is_empty() {
        return json!({"status": {"loadBalancer": {"ingress": null}}});
    }
    let ingress: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip.to_string()})).collect();
    json!({"status": {"loadBalancer": {"ingress": ingress}}})
}

/// The JSON merge patch of the annotations (`None` removes one).
pub fn annotations_patch(update: &ServiceUpdate) -> Value {
    let annotations: serde_json::Map<String, Value> = update
        .annotations
        .iter()
        .map(|(k, v)| (k.clone(), v.as_ref().map_or(Value::Null, |v| json!(v))))
        .collect();
    json!({"metadata": {"annotations": annotations}})
}

impl ServiceEdge {
    /// Writes through `client`; events name `instance` (e.g. the Pod) as
    /// the reporting instance.
    pub fn new(client: Client, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: REPORTING_CONTROLLER.into(),
            instance,
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
        }
    }

    /// Makes `update` on `svc`: the status first (what the speakers act
    /// on), then the annotations. Returns the object as the server last
    /// answered, or `None` when the Service no longer exists.
    pub async fn write(
        &self,
        svc: &KubeService,
        update: &ServiceUpdate,
    ) -> Result<Option<KubeService>, kube::Error> {
        let ns = svc.namespace().unwrap_or_default();
        let api: Api<KubeService> = Api::namespaced(self.client.clone(), &ns);
        let name = svc.name_any();
        let params = PatchParams::default();
        let mut last = None;
        if let Some(ips) = &update.ingress {
            match api
                .patch_status(&name, &params, &Patch::Merge(status_patch(ips)))
                .await
            {
                Ok(s) => last = Some(s),
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        if !update.annotations.is_empty() {
            match api
                .patch(&name, &params, &Patch::Merge(annotations_patch(update)))
                .await
            {
                Ok(s) => last = Some(s),
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(last)
    }

    /// Publishes `events` about `svc` (failures are logged: an event is
    /// not worth a retry).
    pub async fn publish(&self, svc: &KubeService, events: &[Event]) {
        let reference = svc.object_ref(&());
        for e in events {
            let ev = KubeEvent {
                type_: if e.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: e.reason.into(),
                note: Some(e.message.clone()),
                action: e.reason.replace(' ', ""),
                secondary: None,
            };
            if let Err(err) = self.recorder.publish(&ev, &reference).await {
                tracing::warn!(service = %format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any()), reason = e.reason, error = %err, "publishing an event failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn patches() {
        assert_eq!(
            status_patch(&[
                "198.51.100.1".parse().unwrap(),
                "2001:db8:100::1".parse().unwrap()
            ]),
            json!({"status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.1"}, {"ip": "2001:db8:100::1"}]}}})
        );
        assert_eq!(
            status_patch(&[]),
            json!({"status": {"loadBalancer": {"ingress": null}}})
        );
        let u = ServiceUpdate {
            ingress: None,
            annotations: BTreeMap::from([
                ("metallb.io/ip-allocated-from-pool".into(), Some("a".into())),
                ("metallb.universe.tf/ip-allocated-from-pool".into(), None),
            ]),
        };
        assert_eq!(
            annotations_patch(&u),
            json!({"metadata": {"annotations": {
                "metallb.io/ip-allocated-from-pool": "a",
                "metallb.universe.tf/ip-allocated-from-pool": null
            }}})
        );
    }
}
