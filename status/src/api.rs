//! The I/O edge: the few API calls the writer makes.

use std::future::Future;

use crate::object::{Desired, ObjectKey, StatusObject};

/// An API request that failed (retried with backoff by the writer).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// HTTP status code, when the server answered.
    pub code: Option<u16>,
    /// What went wrong.
    pub message: String,
}

impl ApiError {
    /// An error with a message and no status code.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            code: None,
            message: message.into(),
        }
    }
}

impl From<kube::Error> for ApiError {
    fn from(e: kube::Error) -> Self {
        let code = match &e {
            kube::Error::Api(s) => Some(s.code),
            _ => None,
        };
        Self {
            code,
            message: e.to_string(),
        }
    }
}

/// The API calls of a writer of kind `K`. [`crate::KubeStatusApi`] makes them
/// against a server; [`crate::testing::FakeApi`] keeps objects in memory.
pub trait StatusApi<K: StatusObject>: Send + Sync {
    /// Reads an object: `None` when it does not exist; the default status
    /// when it has none.
    fn get(
        &self,
        key: &ObjectKey,
    ) -> impl Future<Output = Result<Option<K::Status>, ApiError>> + Send;

    /// Creates the object with the labels and owner of `desired`, then writes
    /// its status through the status subresource. Returns the status the
    /// server answered with.
    fn create(
        &self,
        key: &ObjectKey,
        desired: &Desired<K::Status>,
    ) -> impl Future<Output = Result<K::Status, ApiError>> + Send;

    /// Writes the status (server-side apply on the status subresource):
    /// `None` when the object does not exist.
    fn apply_status(
        &self,
        key: &ObjectKey,
        status: &K::Status,
    ) -> impl Future<Output = Result<Option<K::Status>, ApiError>> + Send;

    /// Deletes the object; an object already gone is not an error.
    fn delete(&self, key: &ObjectKey) -> impl Future<Output = Result<(), ApiError>> + Send;
}
