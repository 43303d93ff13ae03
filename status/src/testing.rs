//! An in-memory [`StatusApi`] for tests of the writer and of its callers.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Mutex, MutexGuard};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube_edge::Class;

use crate::api::{ApiError, StatusApi};
use crate::object::{Desired, Labels, ObjectKey, Observed, StatusObject, is_subset};

/// One stored object.
#[derive(Clone, Debug, PartialEq)]
pub struct FakeObject<S> {
    /// Its labels.
    pub labels: Labels,
    /// Its first owner (the one the writer sets).
    pub owner: Option<OwnerReference>,
    /// Its status.
    pub status: S,
}

impl<S: Clone> FakeObject<S> {
    fn observed(&self) -> Observed<S> {
        Observed {
            status: self.status.clone(),
            labels: self.labels.clone(),
            owners: self.owner.iter().cloned().collect(),
            resource_version: None,
        }
    }
}

/// A request the fake received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// `get`.
    Get(ObjectKey),
    /// `list` of a namespace with a selector.
    List(String, Labels),
    /// `create` (by name, or `create_generated`: the name the fake gave).
    Create(ObjectKey),
    /// `apply_status`.
    Apply(ObjectKey),
    /// `apply_metadata`.
    ApplyMetadata(ObjectKey),
    /// `delete`.
    Delete(ObjectKey),
}

impl Call {
    /// The object concerned (`None` for a list).
    pub fn key(&self) -> Option<&ObjectKey> {
        match self {
            Call::Get(k)
            | Call::Create(k)
            | Call::Apply(k)
            | Call::ApplyMetadata(k)
            | Call::Delete(k) => Some(k),
            Call::List(..) => None,
        }
    }
}

#[derive(Debug)]
struct State<S> {
    objects: BTreeMap<ObjectKey, FakeObject<S>>,
    calls: Vec<Call>,
    failures: VecDeque<ApiError>,
    hang: BTreeSet<ObjectKey>,
    hang_all: bool,
    generated: u64,
    kind_missing: bool,
}

/// Objects in memory; requests are recorded, queued errors are returned
/// instead of acting, and requests for objects told to hang never answer.
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
                hang: BTreeSet::new(),
                hang_all: false,
                generated: 0,
                kind_missing: false,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State<S>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next `n` requests fail with `message` (a 500).
    pub fn fail_next(&self, n: usize, message: &str) {
        self.fail_next_with(n, 500, message);
    }

    /// The next `n` requests fail with the HTTP status `code`.
    pub fn fail_next_with(&self, n: usize, code: u16, message: &str) {
        let mut st = self.state();
        for _ in 0..n {
            st.failures.push_back(ApiError::new(
                "fake request",
                Class::of_code(code),
                Some(code),
                message,
            ));
        }
    }

    /// Requests for `key` do not answer until [`FakeApi::unhang`].
    pub fn hang(&self, key: ObjectKey) {
        self.state().hang.insert(key);
    }

    /// Every request from now on never answers.
    pub fn hang_all(&self) {
        self.state().hang_all = true;
    }

    /// The kind's CRD is missing (`true`) or installed again: answers as
    /// [`crate::KubeStatusApi`] does when the API server has no such
    /// resource (404): lists and creates fail with [`Class::NotFound`], a read
    /// finds nothing, a status or metadata write finds no object, a delete
    /// has nothing to delete. Stored objects are kept (and served again when
    /// the kind is back).
    pub fn set_kind_missing(&self, missing: bool) {
        self.state().kind_missing = missing;
    }

    /// Requests for `key` answer again (those waiting go on).
    pub fn unhang(&self, key: &ObjectKey) {
        self.state().hang.remove(key);
    }

    /// The object `key`, if it exists.
    pub fn object(&self, key: &ObjectKey) -> Option<FakeObject<S>> {
        self.state().objects.get(key).cloned()
    }

    /// Every object, by key.
    pub fn objects(&self) -> BTreeMap<ObjectKey, FakeObject<S>> {
        self.state().objects.clone()
    }

    /// Puts an object on the server (as another client would).
    pub fn insert(&self, key: ObjectKey, status: S) {
        self.insert_object(
            key,
            FakeObject {
                labels: Labels::new(),
                owner: None,
                status,
            },
        );
    }

    /// Puts an object with labels and an owner on the server.
    pub fn insert_object(&self, key: ObjectKey, object: FakeObject<S>) {
        self.state().objects.insert(key, object);
    }

    /// Deletes an object (as another client would).
    pub fn remove(&self, key: &ObjectKey) {
        self.state().objects.remove(key);
    }

    /// Every request so far.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// Write requests (create, apply, metadata, delete) so far.
    pub fn writes(&self) -> usize {
        self.calls()
            .iter()
            .filter(|c| !matches!(c, Call::Get(_) | Call::List(..)))
            .count()
    }

    async fn begin(&self, call: Call) -> Result<MutexGuard<'_, State<S>>, ApiError> {
        self.state().calls.push(call.clone());
        // Until unhung (checked every 10 ms of tokio's time).
        loop {
            let hangs = {
                let st = self.state();
                st.hang_all || call.key().is_some_and(|k| st.hang.contains(k))
            };
            if !hangs {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let mut st = self.state();
        match st.failures.pop_front() {
            Some(e) => Err(e),
            None => Ok(st),
        }
    }

    /// [`FakeApi::begin`] of a request that needs the kind: a 404 while it
    /// is missing.
    async fn begin_kind(&self, call: Call) -> Result<MutexGuard<'_, State<S>>, ApiError> {
        let st = self.begin(call).await?;
        if st.kind_missing {
            return Err(ApiError::new(
                "fake request",
                Class::NotFound,
                Some(404),
                "the server could not find the requested resource",
            ));
        }
        Ok(st)
    }

    /// [`FakeApi::begin`] of a request that finds nothing (`None`) while the
    /// kind is missing.
    async fn begin_object(&self, call: Call) -> Result<Option<MutexGuard<'_, State<S>>>, ApiError> {
        let st = self.begin(call).await?;
        Ok((!st.kind_missing).then_some(st))
    }
}

impl<K: StatusObject> StatusApi<K> for FakeApi<K::Status> {
    async fn get(&self, key: &ObjectKey) -> Result<Option<Observed<K::Status>>, ApiError> {
        let Some(st) = self.begin_object(Call::Get(key.clone())).await? else {
            return Ok(None);
        };
        Ok(st.objects.get(key).map(FakeObject::observed))
    }

    async fn list(
        &self,
        namespace: &str,
        selector: &Labels,
    ) -> Result<Vec<(ObjectKey, Observed<K::Status>)>, ApiError> {
        let st = self
            .begin_kind(Call::List(namespace.to_owned(), selector.clone()))
            .await?;
        Ok(st
            .objects
            .iter()
            .filter(|(k, o)| k.namespace == namespace && is_subset(selector, &o.labels))
            .map(|(k, o)| (k.clone(), o.observed()))
            .collect())
    }

    async fn create(
        &self,
        key: &ObjectKey,
        desired: &Desired<K::Status>,
    ) -> Result<Observed<K::Status>, ApiError> {
        let mut st = self.begin_kind(Call::Create(key.clone())).await?;
        let object = FakeObject {
            labels: desired.labels.clone(),
            owner: desired.owner.clone(),
            status: desired.status.clone(),
        };
        let observed = object.observed();
        st.objects.insert(key.clone(), object);
        Ok(observed)
    }

    async fn create_generated(
        &self,
        namespace: &str,
        name: Option<&str>,
        generate_name: &str,
        desired: &Desired<K::Status>,
    ) -> Result<(ObjectKey, Observed<K::Status>), ApiError> {
        if let Some(name) = name {
            let key = ObjectKey::new(namespace, name);
            if !self.state().objects.contains_key(&key) {
                let observed = StatusApi::<K>::create(self, &key, desired).await?;
                return Ok((key, observed));
            }
        }
        let n = {
            let mut st = self.state();
            st.generated += 1;
            st.generated
        };
        let key = ObjectKey::new(namespace, format!("{generate_name}{n:05}"));
        let observed = StatusApi::<K>::create(self, &key, desired).await?;
        Ok((key, observed))
    }

    async fn apply_status(
        &self,
        key: &ObjectKey,
        status: &K::Status,
    ) -> Result<Option<Observed<K::Status>>, ApiError> {
        let Some(mut st) = self.begin_object(Call::Apply(key.clone())).await? else {
            return Ok(None);
        };
        Ok(st.objects.get_mut(key).map(|o| {
            o.status = status.clone();
            o.observed()
        }))
    }

    async fn apply_metadata(
        &self,
        key: &ObjectKey,
        labels: &Labels,
        owner: Option<&OwnerReference>,
    ) -> Result<Option<Observed<K::Status>>, ApiError> {
        let Some(mut st) = self.begin_object(Call::ApplyMetadata(key.clone())).await? else {
            return Ok(None);
        };
        Ok(st.objects.get_mut(key).map(|o| {
            o.labels.extend(labels.clone());
            if let Some(owner) = owner {
                o.owner = Some(owner.clone());
            }
            o.observed()
        }))
    }

    async fn delete(&self, key: &ObjectKey) -> Result<(), ApiError> {
        if let Some(mut st) = self.begin_object(Call::Delete(key.clone())).await? {
            st.objects.remove(key);
        }
        Ok(())
    }
}
