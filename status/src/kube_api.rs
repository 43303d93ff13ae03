//! [`StatusApi`] against a Kubernetes API server, and a watch that keeps a
//! writer's view of the server current.

use std::marker::PhantomData;
use std::time::Duration;

use futures_util::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use kube_edge::Class;

use crate::api::{ApiError, StatusApi};
use crate::object::{Desired, Labels, ObjectKey, Observed, StatusObject, selector_string};
use crate::writer::StatusWriter;

/// Field manager of the controller's writes.
pub const FIELD_MANAGER_CONTROLLER: &str = "metallb-rs-controller";
/// Field manager of the speakers' writes.
pub const FIELD_MANAGER_SPEAKER: &str = "metallb-rs-speaker";

/// The writer's API calls through a kube [`Client`], with server-side apply
/// under one field manager (forcing ownership), each request with a deadline
/// ([`kube_edge::call`]).
pub struct KubeStatusApi<K> {
    client: Client,
    field_manager: String,
    timeout: Duration,
    _kind: PhantomData<fn() -> K>,
}

impl<K> std::fmt::Debug for KubeStatusApi<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeStatusApi")
            .field("field_manager", &self.field_manager)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl<K> Clone for KubeStatusApi<K> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            field_manager: self.field_manager.clone(),
            timeout: self.timeout,
            _kind: PhantomData,
        }
    }
}

impl<K: StatusObject> KubeStatusApi<K> {
    /// Writes through `client` as `field_manager` (e.g. [`FIELD_MANAGER_CONTROLLER`]),
    /// each request bounded by [`kube_edge::REQUEST_TIMEOUT`].
    pub fn new(client: Client, field_manager: impl Into<String>) -> Self {
        Self {
            client,
            field_manager: field_manager.into(),
            timeout: kube_edge::REQUEST_TIMEOUT,
            _kind: PhantomData,
        }
    }

    /// Bounds each request by `timeout` instead.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn api(&self, namespace: &str) -> Api<K> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn params(&self) -> PatchParams {
        PatchParams::apply(&self.field_manager).force()
    }

    fn status_patch(key: &ObjectKey, status: &K::Status) -> serde_json::Value {
        json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": { "name": key.name, "namespace": key.namespace },
            "status": status,
        })
    }

    fn metadata(labels: &Labels, owner: Option<&OwnerReference>) -> serde_json::Value {
        let mut metadata = json!({ "labels": labels });
        if let Some(owner) = owner {
            metadata["ownerReferences"] = json!([owner]);
        }
        metadata
    }

    /// Sets labels and owner on the object `key` whose uid is `uid` (never
    /// on another object of the same name): a JSON merge patch, so the
    /// labels are added to the object's others and the owner replaces every
    /// earlier one (a restarted speaker's Pod replaces the old Pod, whoever
    /// set it: a POST, an apply or another client).
    async fn apply_metadata_of(
        &self,
        key: &ObjectKey,
        uid: Option<String>,
        labels: &Labels,
        owner: Option<&OwnerReference>,
    ) -> Result<Observed<K::Status>, ApiError> {
        let mut metadata = json!({ "labels": labels });
        metadata["ownerReferences"] = json!(owner.map(|o| vec![o.clone()]).unwrap_or_default());
        if let Some(uid) = uid {
            metadata["uid"] = json!(uid);
        }
        let patch = json!({ "metadata": metadata });
        let params = PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..PatchParams::default()
        };
        let obj = kube_edge::call(
            self.timeout,
            || format!("writing {} metadata {key}", K::plural(&())),
            self.api(&key.namespace)
                .patch(&key.name, &params, &Patch::Merge(patch)),
        )
        .await?;
        Ok(Observed::from(&obj))
    }

    /// POSTs a new object named `name`, or by the server from
    /// `generate_name`, with the labels and owner of `desired`.
    async fn post(
        &self,
        namespace: &str,
        name: Option<&str>,
        generate_name: &str,
        desired: &Desired<K::Status>,
    ) -> Result<K, ApiError> {
        let what = || match name {
            Some(name) => format!("creating {} {namespace}/{name}", K::plural(&())),
            None => format!("creating {} {namespace}/{generate_name}*", K::plural(&())),
        };
        let mut metadata = Self::metadata(&desired.labels, desired.owner.as_ref());
        metadata["namespace"] = json!(namespace);
        match name {
            Some(name) => metadata["name"] = json!(name),
            None => metadata["generateName"] = json!(generate_name),
        }
        let object: K = serde_json::from_value(json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": metadata,
        }))
        .map_err(|e| ApiError::new(what(), Class::Permanent, None, e.to_string()))?;
        let params = PostParams {
            field_manager: Some(self.field_manager.clone()),
            ..PostParams::default()
        };
        kube_edge::call(
            self.timeout,
            what,
            self.api(namespace).create(&params, &object),
        )
        .await
    }

    async fn write_status(
        &self,
        key: &ObjectKey,
        status: &K::Status,
    ) -> Result<Observed<K::Status>, ApiError> {
        let obj = kube_edge::call(
            self.timeout,
            || format!("applying {}/status {key}", K::plural(&())),
            self.api(&key.namespace).patch_status(
                &key.name,
                &self.params(),
                &Patch::Apply(Self::status_patch(key, status)),
            ),
        )
        .await?;
        Ok(Observed::from(&obj))
    }
}

fn gone_is_none<T>(r: Result<T, ApiError>) -> Result<Option<T>, ApiError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.class == Class::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

impl<K: StatusObject> StatusApi<K> for KubeStatusApi<K> {
    async fn get(&self, key: &ObjectKey) -> Result<Option<Observed<K::Status>>, ApiError> {
        let obj = kube_edge::call(
            self.timeout,
            || format!("reading {} {key}", K::plural(&())),
            self.api(&key.namespace).get_opt(&key.name),
        )
        .await?;
        Ok(obj.as_ref().map(Observed::from))
    }

    async fn list(
        &self,
        namespace: &str,
        selector: &Labels,
    ) -> Result<Vec<(ObjectKey, Observed<K::Status>)>, ApiError> {
        let selector = selector_string(selector);
        let list = kube_edge::call(
            self.timeout,
            || format!("listing {} in {namespace} ({selector})", K::plural(&())),
            self.api(namespace)
                .list(&ListParams::default().labels(&selector)),
        )
        .await?;
        Ok(list
            .items
            .iter()
            .map(|o| (ObjectKey::of(o), Observed::from(o)))
            .collect())
    }

    async fn create(
        &self,
        key: &ObjectKey,
        desired: &Desired<K::Status>,
    ) -> Result<Observed<K::Status>, ApiError> {
        let mut metadata = Self::metadata(&desired.labels, desired.owner.as_ref());
        metadata["name"] = json!(key.name);
        metadata["namespace"] = json!(key.namespace);
        let object = json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": metadata,
        });
        kube_edge::call(
            self.timeout,
            || format!("creating {} {key}", K::plural(&())),
            self.api(&key.namespace)
                .patch(&key.name, &self.params(), &Patch::Apply(object)),
        )
        .await?;
        self.write_status(key, &desired.status).await
    }

    async fn create_generated(
        &self,
        namespace: &str,
        name: Option<&str>,
        generate_name: &str,
        desired: &Desired<K::Status>,
    ) -> Result<(ObjectKey, Observed<K::Status>), ApiError> {
        // One POST with the labels and the owner, then the status: two
        // writes per new object. A later owner replaces the whole
        // `ownerReferences` list ([`KubeStatusApi::apply_metadata_of`]).
        let created = match name {
            Some(name) => match self
                .post(namespace, Some(name), generate_name, desired)
                .await
            {
                // Taken by an object of another identity: a generated name.
                Err(e) if e.class == Class::Conflict => {
                    tracing::debug!(
                        kind = K::KIND,
                        object = %format!("{namespace}/{name}"),
                        "name taken by another object; creating with generateName"
                    );
                    self.post(namespace, None, generate_name, desired).await?
                }
                other => other?,
            },
            None => self.post(namespace, None, generate_name, desired).await?,
        };
        let key = ObjectKey::of(&created);
        let returned = self.write_status(&key, &desired.status).await?;
        Ok((key, returned))
    }

    async fn apply_status(
        &self,
        key: &ObjectKey,
        status: &K::Status,
    ) -> Result<Option<Observed<K::Status>>, ApiError> {
        gone_is_none(self.write_status(key, status).await)
    }

    async fn apply_metadata(
        &self,
        key: &ObjectKey,
        labels: &Labels,
        owner: Option<&OwnerReference>,
    ) -> Result<Option<Observed<K::Status>>, ApiError> {
        // The object must exist: an apply would create a missing one.
        let Some(current) = kube_edge::call(
            self.timeout,
            || format!("reading {} {key}", K::plural(&())),
            self.api(&key.namespace).get_opt(&key.name),
        )
        .await?
        else {
            return Ok(None);
        };
        gone_is_none(
            self.apply_metadata_of(key, current.uid(), labels, owner)
                .await,
        )
    }

    async fn delete(&self, key: &ObjectKey) -> Result<(), ApiError> {
        gone_is_none(
            kube_edge::call(
                self.timeout,
                || format!("deleting {} {key}", K::plural(&())),
                self.api(&key.namespace)
                    .delete(&key.name, &DeleteParams::default()),
            )
            .await,
        )
        .map(|_| ())
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
    let mut listing: Vec<(ObjectKey, Observed<K::Status>)> = Vec::new();
    loop {
        match stream.try_next().await {
            Ok(Some(Event::Apply(obj))) => {
                writer.observe_object(ObjectKey::of(&obj), Some(Observed::from(&obj)));
            }
            Ok(Some(Event::Delete(obj))) => writer.observe_object(ObjectKey::of(&obj), None),
            Ok(Some(Event::Init)) => listing.clear(),
            Ok(Some(Event::InitApply(obj))) => {
                listing.push((ObjectKey::of(&obj), Observed::from(&obj)));
            }
            Ok(Some(Event::InitDone)) => {
                writer.observe_all_objects(std::mem::take(&mut listing));
            }
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
    let pod = kube_edge::call(
        kube_edge::REQUEST_TIMEOUT,
        || format!("reading pods {namespace}/{name}"),
        pods.get_opt(name),
    )
    .await?;
    Ok(pod.and_then(|pod| {
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

/// The ownerReference of a daemon's own Pod for its status objects: from `pod_uid`
/// (the downward API: no read needed) when given, else one read of `namespace/pod_name`;
/// `None` (logged) without a Pod name or when the read fails.
pub async fn own_pod_owner(
    client: Client,
    namespace: &str,
    pod_name: &str,
    pod_uid: &str,
) -> Option<OwnerReference> {
    if pod_name.is_empty() {
        tracing::warn!("no --pod-name / METALLB_POD_NAME: the status objects get no owner");
        return None;
    }
    if !pod_uid.is_empty() {
        return Some(OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: pod_name.to_owned(),
            uid: pod_uid.to_owned(),
            ..OwnerReference::default()
        });
    }
    match pod_owner_reference(client, namespace, pod_name).await {
        Ok(Some(o)) => Some(o),
        Ok(None) => {
            tracing::warn!(
                pod = pod_name,
                "--pod-name names no existing Pod; the status objects get no owner"
            );
            None
        }
        Err(e) => {
            tracing::warn!(pod = pod_name, error = %e, "reading the own Pod failed (set METALLB_POD_UID to need no read); the status objects get no owner");
            None
        }
    }
}
