//! An in-memory [`StatusApi`] for tests of the writer and of its callers.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::api::{ApiError, StatusApi};
use crate::object::{Desired, ObjectKey, StatusObject};

/// One stored object.
#[derive(Clone, Debug, PartialEq)]
pub struct FakeObject<S> {
    /// Labels it was created with.
    pub labels: BTreeMap<String, String>,
    /// Owner it was created with.
    pub owner: Option<OwnerReference>,
    /// Its status.
    pub status: S,
}

/// A request the fake received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// `get`.
    Get(ObjectKey),
    /// `create`.
    Create(ObjectKey),
    /// `apply_status`.
    Apply(ObjectKey),
    /// `delete`.
    Delete(ObjectKey),
}

#[derive(Debug)]
struct State<S> {
    objects: BTreeMap<ObjectKey, FakeObject<S>>,
    calls: Vec<Call>,
    failures: VecDeque<ApiError>,
}

/// Objects in memory; requests are recorded, and queued errors are returned
/// instead of acting.
#[derive(Debug)]
pub struct FakeApi<S> {
    state: Mutex<State<S>>,
}

impl<S: Clone> Default for FakeApi<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S: Clone> FakeApi<S> {
    /// An empty server.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(State {
                objects: BTreeMap::new(),
                calls: Vec::new(),
                failures: VecDeque::new(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State<S>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next `n` requests fail with `message`.
    pub fn fail_next(&self, n: usize, message: &str) {
        let mut st = self.state();
        for _ in 0..n {
            st.failures.push_back(ApiError {
                code: Some(500),
                message: message.to_owned(),
            });
        }
    }

    /// The object `key`, if it exists.
    pub fn object(&self, key: &ObjectKey) -> Option<FakeObject<S>> {
        self.state().objects.get(key).cloned()
    }

    /// Puts an object on the server (as another client would).
    pub fn insert(&self, key: ObjectKey, status: S) {
        self.state().objects.insert(
            key,
            FakeObject {
                labels: BTreeMap::new(),
                owner: None,
                status,
            },
        );
    }

    /// Deletes an object (as another client would).
    pub fn remove(&self, key: &ObjectKey) {
        self.state().objects.remove(key);
    }

    /// Every request so far.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// Write requests (create, apply, delete) so far.
    pub fn writes(&self) -> usize {
        self.calls()
            .iter()
            .filter(|c| !matches!(c, Call::Get(_)))
            .count()
    }

    fn begin(&self, call: Call) -> Result<MutexGuard<'_, State<S>>, ApiError> {
        let mut st = self.state();
        st.calls.push(call);
        match st.failures.pop_front() {
            Some(e) => Err(e),
            None => Ok(st),
        }
    }
}

impl<K: StatusObject> StatusApi<K> for FakeApi<K::Status> {
    async fn get(&self, key: &ObjectKey) -> Result<Option<K::Status>, ApiError> {
        let st = self.begin(Call::Get(key.clone()))?;
        Ok(st.objects.get(key).map(|o| o.status.clone()))
    }

    async fn create(
        &self,
        key: &ObjectKey,
        desired: &Desired<K::Status>,
    ) -> Result<K::Status, ApiError> {
        let mut st = self.begin(Call::Create(key.clone()))?;
        st.objects.insert(
            key.clone(),
            FakeObject {
                labels: desired.labels.clone(),
                owner: desired.owner.clone(),
                status: desired.status.clone(),
            },
        );
        Ok(desired.status.clone())
    }

    async fn apply_status(
        &self,
        key: &ObjectKey,
        status: &K::Status,
    ) -> Result<Option<K::Status>, ApiError> {
        let mut st = self.begin(Call::Apply(key.clone()))?;
        Ok(st.objects.get_mut(key).map(|o| {
            o.status = status.clone();
            o.status.clone()
        }))
    }

    async fn delete(&self, key: &ObjectKey) -> Result<(), ApiError> {
        let mut st = self.begin(Call::Delete(key.clone()))?;
        st.objects.remove(key);
        Ok(())
    }
}
