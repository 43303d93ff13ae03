//! [`StatusApi`] against a Kubernetes API server, and a watch that keeps a
//! writer's view of the server current.

use std::marker::PhantomData;

use futures_util::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use crate::api::{ApiError, StatusApi};
use crate::object::{Desired, ObjectKey, StatusObject};
use crate::writer::StatusWriter;

/// Field manager of the controller's writes.
pub const FIELD_MANAGER_CONTROLLER: &str = "metallb-rs-controller";
/// Field manager of the speakers' writes.
pub const FIELD_MANAGER_SPEAKER: &str = "metallb-rs-speaker";

/// The writer's API calls through a kube [`Client`], with server-side apply
/// under one field manager (forcing ownership).
pub struct KubeStatusApi<K> {
    client: Client,
    field_manager: String,
    _kind: PhantomData<fn() -> K>,
}

impl<K> std::fmt::Debug for KubeStatusApi<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeStatusApi")
            .field("field_manager", &self.field_manager)
            .finish()
    }
}

impl<K> Clone for KubeStatusApi<K> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            field_manager: self.field_manager.clone(),
            _kind: PhantomData,
        }
    }
}

impl<K: StatusObject> KubeStatusApi<K> {
    /// Writes through `client` as `field_manager` (e.g. [`FIELD_MANAGER_CONTROLLER`]).
    pub fn new(client: Client, field_manager: impl Into<String>) -> Self {
        Self {
            client,
            field_manager: field_manager.into(),
            _kind: PhantomData,
        }
    }

    fn api(&self, key: &ObjectKey) -> Api<K> {
        Api::namespaced(self.client.clone(), &key.namespace)
    }

    fn params(&self) -> PatchParams {
        PatchParams::apply(&self.field_manager).force()
    }

    fn status_of(obj: K) -> K::Status {
        obj.status().cloned().unwrap_or_default()
    }

    fn status_patch(key: &ObjectKey, status: &K::Status) -> serde_json::Value {
        json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": { "name": key.name, "namespace": key.namespace },
            "status": status,
        })
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

impl<K: StatusObject> StatusApi<K> for KubeStatusApi<K> {
    async fn get(&self, key: &ObjectKey) -> Result<Option<K::Status>, ApiError> {
        Ok(self.api(key).get_opt(&key.name).await?.map(Self::status_of))
    }

    async fn create(
        &self,
        key: &ObjectKey,
        desired: &Desired<K::Status>,
    ) -> Result<K::Status, ApiError> {
        let api = self.api(key);
        let mut metadata = json!({
            "name": key.name,
            "namespace": key.namespace,
            "labels": desired.labels,
        });
        if let Some(owner) = &desired.owner {
            metadata["ownerReferences"] = json!([owner]);
        }
        let object = json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": metadata,
        });
        api.patch(&key.name, &self.params(), &Patch::Apply(object))
            .await?;
        let obj = api
            .patch_status(
                &key.name,
                &self.params(),
                &Patch::Apply(Self::status_patch(key, &desired.status)),
            )
            .await?;
        Ok(Self::status_of(obj))
    }

    async fn apply_status(
        &self,
        key: &ObjectKey,
        status: &K::Status,
    ) -> Result<Option<K::Status>, ApiError> {
        match self
            .api(key)
            .patch_status(
                &key.name,
                &self.params(),
                &Patch::Apply(Self::status_patch(key, status)),
            )
            .await
        {
            Ok(obj) => Ok(Some(Self::status_of(obj))),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn delete(&self, key: &ObjectKey) -> Result<(), ApiError> {
        match self
            .api(key)
            .delete(&key.name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Keeps `writer`'s view of the server current from a watch of `api` (which
/// must cover every object the writer manages): deletions make it re-create
/// objects it wants, and objects changed by others are written back. Runs
/// until the watch stream ends (it retries with kube's default backoff).
pub async fn watch_into<K: StatusObject>(
    writer: StatusWriter<K>,
    api: Api<K>,
    config: watcher::Config,
) {
    use kube::runtime::WatchStreamExt;
    use kube::runtime::watcher::Event;

    let stream = watcher(api, config).default_backoff();
    futures_util::pin_mut!(stream);
    let mut listing: Vec<(ObjectKey, K::Status)> = Vec::new();
    loop {
        match stream.try_next().await {
            Ok(Some(Event::Apply(obj))) => writer.observe(
                ObjectKey::of(&obj),
                Some(obj.status().cloned().unwrap_or_default()),
            ),
            Ok(Some(Event::Delete(obj))) => writer.observe(ObjectKey::of(&obj), None),
            Ok(Some(Event::Init)) => listing.clear(),
            Ok(Some(Event::InitApply(obj))) => {
                let key = ObjectKey::of(&obj);
                listing.push((key, obj.status().cloned().unwrap_or_default()));
            }
            Ok(Some(Event::InitDone)) => writer.observe_all(std::mem::take(&mut listing)),
            Ok(None) => return,
            Err(e) => tracing::warn!(kind = K::KIND, error = %e, "status watch failed; retrying"),
        }
    }
}

/// An owner reference to the Pod `namespace`/`name` when it exists (`None`
/// when it does not, e.g. when run outside a Pod).
pub async fn pod_owner_reference(
    client: Client,
    namespace: &str,
    name: &str,
) -> Result<Option<OwnerReference>, ApiError> {
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    Ok(pods.get_opt(name).await?.and_then(|pod| {
        let uid = pod.uid()?;
        Some(OwnerReference {
            api_version: Pod::api_version(&()).into_owned(),
            kind: Pod::kind(&()).into_owned(),
            name: pod.name_any(),
            uid,
            ..OwnerReference::default()
        })
    }))
}
