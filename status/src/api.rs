//! The I/O edge: the few API calls the writer makes.

use std::future::Future;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::object::{Desired, Labels, ObjectKey, Observed, StatusObject};

/// An API request that failed: kube-edge's one classification of API errors
/// (the writer re-reads on a conflict, retries transient errors with
/// exponential backoff and permanent ones at a slow pace).
pub type ApiError = kube_edge::ApiFailure;

/// Objects found by a list: key and object.
pub type Listed<S> = Vec<(ObjectKey, Observed<S>)>;

/// The API calls of a writer of kind `K`. [`crate::KubeStatusApi`] makes them
/// against a server; [`crate::testing::FakeApi`] keeps objects in memory.
/// The writer bounds each call with [`crate::WriterConfig::request_timeout`].
pub trait StatusApi<K: StatusObject>: Send + Sync {
    /// Reads an object: `None` when it does not exist; the default status
    /// when it has none.
    fn get(
        &self,
        key: &ObjectKey,
    ) -> impl Future<Output = Result<Option<Observed<K::Status>>, ApiError>> + Send;

    /// Lists the objects of `namespace` whose labels include `selector`.
    fn list(
        &self,
        namespace: &str,
        selector: &Labels,
    ) -> impl Future<Output = Result<Listed<K::Status>, ApiError>> + Send;

    /// Creates the object `key` with the labels and owner of `desired`, then
    /// writes its status through the status subresource. Returns the object
    /// the server answered with.
    fn create(
        &self,
        key: &ObjectKey,
        desired: &Desired<K::Status>,
    ) -> impl Future<Output = Result<Observed<K::Status>, ApiError>> + Send;

    /// Creates an object in `namespace` named `name` or, when that name is
    /// taken (or `None`), by the server from `generate_name`, with the labels
    /// and owner of `desired` (one request), then writes its status. Returns
    /// its key and the object the server answered with.
    fn create_generated(
        &self,
        namespace: &str,
        name: Option<&str>,
        generate_name: &str,
        desired: &Desired<K::Status>,
    ) -> impl Future<Output = Result<(ObjectKey, Observed<K::Status>), ApiError>> + Send;

    /// Writes the status (server-side apply on the status subresource):
    /// `None` when the object does not exist.
    fn apply_status(
        &self,
        key: &ObjectKey,
        status: &K::Status,
    ) -> impl Future<Output = Result<Option<Observed<K::Status>>, ApiError>> + Send;

    /// Server-side apply of the object's labels and owner reference (the
    /// object is neither deleted nor re-created): `None` when it does not
    /// exist.
    fn apply_metadata(
        &self,
        key: &ObjectKey,
        labels: &Labels,
        owner: Option<&OwnerReference>,
    ) -> impl Future<Output = Result<Option<Observed<K::Status>>, ApiError>> + Send;

    /// Deletes the object; an object already gone is not an error.
    fn delete(&self, key: &ObjectKey) -> impl Future<Output = Result<(), ApiError>> + Send;
}

impl<K: StatusObject, A: StatusApi<K>> StatusApi<K> for std::sync::Arc<A> {
    fn get(
        &self,
        key: &ObjectKey,
    ) -> impl Future<Output = Result<Option<Observed<K::Status>>, ApiError>> + Send {
        (**self).get(key)
    }

    fn list(
        &self,
        namespace: &str,
        selector: &Labels,
    ) -> impl Future<Output = Result<Listed<K::Status>, ApiError>> + Send {
        (**self).list(namespace, selector)
    }

    fn create(
        &self,
        key: &ObjectKey,
        desired: &Desired<K::Status>,
    ) -> impl Future<Output = Result<Observed<K::Status>, ApiError>> + Send {
        (**self).create(key, desired)
    }

    fn create_generated(
        &self,
        namespace: &str,
        name: Option<&str>,
        generate_name: &str,
        desired: &Desired<K::Status>,
    ) -> impl Future<Output = Result<(ObjectKey, Observed<K::Status>), ApiError>> + Send {
        (**self).create_generated(namespace, name, generate_name, desired)
    }

    fn apply_status(
        &self,
        key: &ObjectKey,
        status: &K::Status,
    ) -> impl Future<Output = Result<Option<Observed<K::Status>>, ApiError>> + Send {
        (**self).apply_status(key, status)
    }

    fn apply_metadata(
        &self,
        key: &ObjectKey,
        labels: &Labels,
        owner: Option<&OwnerReference>,
    ) -> impl Future<Output = Result<Option<Observed<K::Status>>, ApiError>> + Send {
        (**self).apply_metadata(key, labels, owner)
    }

    fn delete(&self, key: &ObjectKey) -> impl Future<Output = Result<(), ApiError>> + Send {
        (**self).delete(key)
    }
}
