//! The controller's writes to Services: `status.loadBalancer.ingress`
//! through the status subresource, the `metallb.io/ip-allocated-from-pool`
//! annotation with a merge patch (never an update, so a concurrent spec edit
//! by the user is never overwritten with a stale copy), and MetalLB's events.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service as KubeService;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use kube_edge::{ApiFailure, Class};
use serde_json::{Value, json};

use crate::service::{Event, ServiceUpdate};

/// The name events are reported under (MetalLB's process name).
pub const REPORTING_CONTROLLER: &str = "metallb-controller";

/// Writes Services and their events.
#[derive(Clone)]
pub struct ServiceEdge {
    client: Client,
    events: daemon::events::Events,
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

/// The Service API the driver writes through ([`ServiceEdge`] against a
/// server; a fake in tests). Every call is bounded by the `timeout` given.
pub trait ServiceApi: Send + Sync {
    /// Makes `update` on `svc`, conditional on `svc`'s `resourceVersion` (a
    /// Service changed since it was read fails with [`Class::Conflict`]):
    /// the status first (what the speakers act on), then the annotations.
    /// Returns the object as the server last answered, or `None` when the
    /// Service no longer exists.
    fn write(
        &self,
        svc: &KubeService,
        update: &ServiceUpdate,
        timeout: Duration,
    ) -> impl Future<Output = Result<Option<KubeService>, ApiFailure>> + Send;

    /// Reads the Service `namespace/name` (`None`: it does not exist).
    fn get(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<Option<KubeService>, ApiFailure>> + Send;

    /// Publishes `events` about `svc` (failures are logged: an event is not
    /// worth a retry).
    fn publish(
        &self,
        svc: &KubeService,
        events: &[Event],
        timeout: Duration,
    ) -> impl Future<Output = ()> + Send;
}

/// A JSON merge patch made conditional on `resource_version` (the API
/// server rejects it with 409 when the object changed since).
pub fn conditional(mut patch: Value, resource_version: Option<&str>) -> Value {
    if let Some(rv) = resource_version {
        patch["metadata"]["resourceVersion"] = json!(rv);
    }
    patch
}

impl ServiceEdge {
    /// Writes through `client`; events name `instance` (e.g. the Pod) as
    /// the reporting instance.
    pub fn new(client: Client, instance: Option<String>) -> Self {
        Self {
            events: daemon::events::Events::new(client.clone(), REPORTING_CONTROLLER, instance),
            client,
        }
    }
}

impl ServiceApi for ServiceEdge {
    async fn write(
        &self,
        svc: &KubeService,
        update: &ServiceUpdate,
        timeout: Duration,
    ) -> Result<Option<KubeService>, ApiFailure> {
        let ns = svc.namespace().unwrap_or_default();
        let api: Api<KubeService> = Api::namespaced(self.client.clone(), &ns);
        let name = svc.name_any();
        let params = PatchParams::default();
        let started = tokio::time::Instant::now();
        let left = || timeout.saturating_sub(started.elapsed());
        let mut rv = svc.resource_version();
        let mut last = None;
        if let Some(ips) = &update.ingress {
            let patch = conditional(status_patch(ips), rv.as_deref());
            match kube_edge::call(
                left(),
                || format!("patching services/status {ns}/{name}"),
                api.patch_status(&name, &params, &Patch::Merge(patch)),
            )
            .await
            {
                Ok(s) => {
                    rv = s.resource_version();
                    last = Some(s);
                }
                Err(e) if e.class == Class::NotFound => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        if !update.annotations.is_empty() {
            let patch = conditional(annotations_patch(update), rv.as_deref());
            match kube_edge::call(
                left(),
                || format!("patching services {ns}/{name}"),
                api.patch(&name, &params, &Patch::Merge(patch)),
            )
            .await
            {
                Ok(s) => last = Some(s),
                Err(e) if e.class == Class::NotFound => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(last)
    }

    async fn get(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<Option<KubeService>, ApiFailure> {
        let api: Api<KubeService> = Api::namespaced(self.client.clone(), namespace);
        kube_edge::call(
            timeout,
            || format!("getting services {namespace}/{name}"),
            api.get_opt(name),
        )
        .await
    }

    async fn publish(&self, svc: &KubeService, events: &[Event], timeout: Duration) {
        let reference = svc.object_ref(&());
        let started = tokio::time::Instant::now();
        for e in events {
            let note = daemon::events::Note {
                warning: e.warning,
                reason: e.reason.into(),
                message: e.message.clone(),
            };
            let left = timeout.saturating_sub(started.elapsed());
            if e.reason == crate::driver::REASON_NOT_ANNOUNCEABLE {
                // Each warning its own event (the recorder would count a new one
                // as a repeat of the last).
                self.events.publish_distinct(&reference, &note, left).await;
            } else {
                self.events.publish(&reference, &note, left).await;
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
            conditional(status_patch(&[]), Some("42")),
            json!({"metadata": {"resourceVersion": "42"}, "status": {"loadBalancer": {"ingress": null}}})
        );
        assert_eq!(
            annotations_patch(&u),
            json!({"metadata": {"annotations": {
                "metallb.io/ip-allocated-from-pool": "a",
                "metallb.universe.tf/ip-allocated-from-pool": null
            }}})
        );
    }
}
