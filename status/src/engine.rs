//! The writer's decisions, free of I/O and of the system clock: what to
//! write, when, coalescing, backoff, the request budget, and (label-keyed
//! writers) which object stands for which identity. Every method takes `now`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube_edge::{Backoff, Class, TokenBucket};

use crate::object::{Desired, LabelScope, Labels, ObjectKey, Observed, StatusObject, is_subset};

/// Timing of the writer.
#[derive(Clone, Debug, PartialEq)]
pub struct WriterConfig {
    /// At most one write (create, metadata or status apply) per object per
    /// interval; changes within it are coalesced and the last one is
    /// written. Default 1 s.
    pub min_write_interval: Duration,
    /// Backoff after API errors, per object: exponential with jitter for
    /// transient errors, a slow pace for permanent ones (400, 403, 422),
    /// none for a conflict (the object is read again). kube-edge's default.
    pub backoff: Backoff,
    /// API requests in flight at once (for different objects). Default 8.
    pub concurrency: usize,
    /// Longest time one action (one request; up to three for a create) may
    /// take before it counts as failed ([`Class::Timeout`]) and is retried.
    /// Default three times [`kube_edge::REQUEST_TIMEOUT`] (the edge bounds
    /// each request by that).
    pub request_timeout: Duration,
}

impl Default for WriterConfig {
    fn default() -> Self {
        Self {
            min_write_interval: Duration::from_secs(1),
            backoff: Backoff::default(),
            concurrency: 8,
            request_timeout: 3 * kube_edge::REQUEST_TIMEOUT,
        }
    }
}

/// What the caller wants for one object.
#[derive(Clone, Debug, PartialEq)]
enum Want<S> {
    /// Nothing: the object was only seen (it is deleted by `prune_unwanted`).
    Unset,
    /// This status.
    Keep(Desired<S>),
    /// The object deleted.
    Delete,
}

/// What the writer last knew of the object on the server.
#[derive(Clone, Debug, PartialEq)]
pub enum Seen<S> {
    /// Not read yet (or unknown after a failed create).
    Unknown,
    /// The object does not exist.
    Absent,
    /// The object exists with this status (the default when it has none).
    Present(S),
}

/// Labels and owners of an object on the server.
#[derive(Clone, Debug, PartialEq, Default)]
struct Meta {
    labels: Labels,
    owners: Vec<OwnerReference>,
}

/// The metadata the caller wants (its labels and owner).
#[derive(Clone, Debug, PartialEq)]
struct MetaWant {
    labels: Labels,
    owner: Option<OwnerReference>,
}

/// Failures in a row and when the next attempt is due.
#[derive(Clone, Debug, Default, PartialEq)]
struct Pace {
    failures: u32,
    retry_at: Option<Instant>,
    last_class: Option<Class>,
}

impl Pace {
    fn succeeded(&mut self) {
        *self = Pace::default();
    }

    /// A read succeeded and a write is still due: it is due at once, but
    /// the failures in a row are kept (a read writes nothing: a create or a
    /// write that keeps failing around successful reads backs off further).
    fn read(&mut self) {
        self.retry_at = None;
    }

    fn failed(&mut self, class: Class, backoff: &Backoff, now: Instant) {
        self.failures = self.failures.saturating_add(1);
        let class_for_delay = match class {
            // A conflict is read again at once; conflicts in a row back off.
            Class::Conflict if self.failures > 1 => Class::Transient,
            // A request that fails with a 404 (not a named object's absence,
            // which the edge answers as `None`) lacks its resource or its
            // namespace, e.g. a CRD not installed: retrying at once would
            // spend the whole budget on it (review H3). Backs off like a
            // transient error: doubling, jittered, capped.
            Class::NotFound => Class::Transient,
            other => other,
        };
        self.retry_at = Some(now + backoff.delay(self.failures, class_for_delay));
        self.last_class = Some(class);
    }
}

#[derive(Debug)]
struct Entry<S> {
    want: Want<S>,
    seen: Seen<S>,
    /// Labels and owners on the server; `None` while unknown.
    meta: Option<Meta>,
    /// The status last written successfully while `seen` is that write's
    /// response: a server that normalises a value does not cause rewrites.
    acked: Option<S>,
    /// The metadata last applied successfully (same purpose).
    meta_acked: Option<MetaWant>,
    last_write: Option<Instant>,
    pace: Pace,
    in_flight: bool,
    /// Label-keyed writers: the identity this object stands for.
    identity: Option<Labels>,
    /// The newest `resourceVersion` seen of the object (observations and
    /// write answers); older observations are stale and ignored.
    resource_version: Option<u64>,
    /// What this entry adds to [`Engine::pending`] and [`Engine::failed`]
    /// (kept up to date by [`Engine::recount`]).
    counted: Counted,
}

/// An entry's part of the counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counted {
    pending: bool,
    failed: bool,
}

/// Objects pending and failed, kept as entries change (O(1) per change
/// instead of a scan of every entry per gauge refresh: review R12).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    pending: usize,
    failed: usize,
}

impl Counts {
    fn add(&mut self, c: Counted) {
        self.pending += usize::from(c.pending);
        self.failed += usize::from(c.failed);
    }

    fn sub(&mut self, c: Counted) {
        self.pending -= usize::from(c.pending);
        self.failed -= usize::from(c.failed);
    }
}

impl<S> Entry<S> {
    fn new() -> Self {
        Self {
            want: Want::Unset,
            seen: Seen::Unknown,
            meta: None,
            acked: None,
            meta_acked: None,
            last_write: None,
            pace: Pace::default(),
            in_flight: false,
            identity: None,
            resource_version: None,
            counted: Counted::default(),
        }
    }

    /// Whether an observation at `rv` is older than what is known (and must
    /// be ignored); otherwise records it as the newest.
    fn stale(&mut self, rv: Option<u64>) -> bool {
        match (rv, self.resource_version) {
            (Some(rv), Some(known)) if rv < known => true,
            (Some(rv), _) => {
                self.resource_version = Some(rv);
                false
            }
            (None, _) => false,
        }
    }
}

/// A request for the API edge.
#[derive(Clone, Debug, PartialEq)]
pub enum Action<S> {
    /// Read the object.
    Fetch(ObjectKey),
    /// Create the object (labels, owner), then write its status.
    Create(ObjectKey, Desired<S>),
    /// Write the status (server-side apply on the status subresource).
    Apply(ObjectKey, S),
    /// Write the labels and owner (server-side apply of the metadata).
    ApplyMetadata(ObjectKey, Labels, Option<OwnerReference>),
    /// Delete the object.
    Delete(ObjectKey),
    /// List the objects of `namespace` whose labels include `selector`.
    List {
        /// Namespace.
        namespace: String,
        /// Labels the objects have.
        selector: Labels,
    },
    /// Create an object named by the server for `identity` (label-keyed
    /// writers), then write its status.
    CreateGenerated {
        /// The labels that identify it.
        identity: Labels,
        /// Namespace.
        namespace: String,
        /// `metadata.name` when free ([`StatusObject::name`]).
        name: Option<String>,
        /// `metadata.generateName` otherwise.
        generate_name: String,
        /// Its status, labels (including `identity`) and owner.
        desired: Desired<S>,
    },
}

impl<S> Action<S> {
    /// The object concerned (`None` for a list or a create by the server's
    /// name).
    pub fn key(&self) -> Option<&ObjectKey> {
        match self {
            Action::Fetch(k)
            | Action::Create(k, _)
            | Action::Apply(k, _)
            | Action::ApplyMetadata(k, _, _)
            | Action::Delete(k) => Some(k),
            Action::List { .. } | Action::CreateGenerated { .. } => None,
        }
    }
}

/// How an [`Action`] went.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome<S> {
    /// `Fetch`: the object, or `None` when it does not exist.
    Fetched(Option<Observed<S>>),
    /// `Create`, `Apply` or `ApplyMetadata`: the sent status (for
    /// `ApplyMetadata`, the one last seen) and the object the server returned.
    Written {
        /// What was sent.
        sent: S,
        /// What the server answered.
        returned: Observed<S>,
    },
    /// `CreateGenerated`: the new object's key, the sent status and the
    /// object the server returned.
    Created {
        /// The name the server gave.
        key: ObjectKey,
        /// What was sent.
        sent: S,
        /// What the server answered.
        returned: Observed<S>,
    },
    /// `List`: the objects found.
    Listed(Vec<(ObjectKey, Observed<S>)>),
    /// `Apply` or `ApplyMetadata` on an object that does not exist.
    NotFound,
    /// `Delete` done (or the object was already gone).
    Deleted,
    /// An API error of this class: a conflict is read again at once, other
    /// errors are retried with backoff.
    Failed(Class),
}

/// Result of handing in a desired status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetResult {
    /// Nothing to write: the server already has it (a skip).
    Unchanged,
    /// A write is due now or later.
    Pending,
    /// A write was pending and its value is replaced (coalesced).
    Coalesced,
}

/// A desired identity with no object yet (label-keyed writers).
#[derive(Debug)]
struct Unbound<S> {
    desired: Desired<S>,
    pace: Pace,
    in_flight: bool,
}

/// A list in progress or due.
#[derive(Debug, Default)]
struct ListState {
    pace: Pace,
    in_flight: bool,
}

/// State of a label-keyed writer.
#[derive(Debug)]
struct LabelState<S> {
    scope: LabelScope,
    /// The scope's objects have been listed since the start (or since
    /// `forget_all`): only then are objects created (no duplicates).
    listed: bool,
    list: ListState,
    /// The caller has handed in its first full desired set.
    synced: bool,
    bound: BTreeMap<Labels, ObjectKey>,
    unbound: BTreeMap<Labels, Unbound<S>>,
    /// Lists of other selectors whose objects outside the scope are deleted
    /// (e.g. other nodes' objects of a service).
    sweeps: BTreeMap<Labels, ListState>,
    /// Objects of the scope seen on the server that stand for no identity
    /// (yet), found by their labels: see [`Unclaimed`].
    unclaimed: Unclaimed,
    /// Identities in `unbound` whose last create failed.
    unbound_failed: usize,
    /// Objects adopted (the watch's event of our own create) while that
    /// create is in flight, by the identity the create is for: they wait for
    /// its answer even if the identity is removed meanwhile.
    awaiting: BTreeMap<Labels, ObjectKey>,
}

impl<S> LabelState<S> {
    fn remove_unbound(&mut self, id: &Labels) -> Option<Unbound<S>> {
        let u = self.unbound.remove(id)?;
        self.unbound_failed -= usize::from(u.pace.failures > 0);
        Some(u)
    }
}

/// The label names of an identity (e.g. the node, the service's name and
/// namespace): identities of one writer have the same few.
type LabelNames = Vec<String>;

fn label_names(identity: &Labels) -> LabelNames {
    identity.keys().cloned().collect()
}

/// `labels` cut to `names`; `None` when one is missing. An identity of
/// `names` is a subset of `labels` iff it equals this.
fn project(names: &LabelNames, labels: &Labels) -> Option<Labels> {
    names
        .iter()
        .map(|n| labels.get(n).map(|v| (n.clone(), v.clone())))
        .collect()
}

/// Objects of the scope that stand for no identity (an earlier run's, not
/// asked for yet), indexed by the labels of every identity name set asked
/// for: an identity asked for after the object was seen adopts it in
/// O(log n) (review H5), whatever came first.
#[derive(Debug, Default)]
struct Unclaimed {
    labels: BTreeMap<ObjectKey, Labels>,
    by_names: BTreeMap<LabelNames, BTreeMap<Labels, std::collections::BTreeSet<ObjectKey>>>,
}

impl Unclaimed {
    fn insert(&mut self, key: &ObjectKey, labels: &Labels) {
        if self.labels.get(key) == Some(labels) {
            return;
        }
        self.remove(key);
        for (names, index) in &mut self.by_names {
            if let Some(p) = project(names, labels) {
                index.entry(p).or_default().insert(key.clone());
            }
        }
        self.labels.insert(key.clone(), labels.clone());
    }

    fn remove(&mut self, key: &ObjectKey) {
        let Some(labels) = self.labels.remove(key) else {
            return;
        };
        for (names, index) in &mut self.by_names {
            if let Some(p) = project(names, &labels)
                && let Some(keys) = index.get_mut(&p)
            {
                keys.remove(key);
                if keys.is_empty() {
                    index.remove(&p);
                }
            }
        }
    }

    /// Indexes by `names` too (once per name set: O(n) the first time).
    fn index_names(&mut self, names: &LabelNames) {
        if self.by_names.contains_key(names) {
            return;
        }
        let mut index: BTreeMap<Labels, std::collections::BTreeSet<ObjectKey>> = BTreeMap::new();
        for (key, labels) in &self.labels {
            if let Some(p) = project(names, labels) {
                index.entry(p).or_default().insert(key.clone());
            }
        }
        self.by_names.insert(names.clone(), index);
    }

    /// The objects whose labels include `identity` (its names indexed).
    fn candidates(&self, identity: &Labels) -> impl Iterator<Item = &ObjectKey> {
        self.by_names
            .get(&label_names(identity))
            .and_then(|index| index.get(identity))
            .into_iter()
            .flatten()
    }
}

/// The decision state of one writer (one kind).
#[derive(Debug)]
pub struct Engine<K: StatusObject> {
    config: WriterConfig,
    entries: BTreeMap<ObjectKey, Entry<K::Status>>,
    labeled: Option<LabelState<K::Status>>,
    epoch: u64,
    /// The sum of the entries' [`Counted`].
    counts: Counts,
}

impl<K: StatusObject> Engine<K> {
    /// An engine with no objects, keyed by name.
    pub fn new(config: WriterConfig) -> Self {
        Self {
            config,
            entries: BTreeMap::new(),
            labeled: None,
            epoch: 0,
            counts: Counts::default(),
        }
    }

    /// An engine for the objects of `scope`, each identified by its labels
    /// ([`Engine::set_labeled`]); the name-keyed methods work as well.
    pub fn labeled(config: WriterConfig, scope: LabelScope) -> Self {
        let mut e = Self::new(config);
        e.labeled = Some(LabelState {
            scope,
            listed: false,
            list: ListState::default(),
            synced: false,
            bound: BTreeMap::new(),
            unbound: BTreeMap::new(),
            sweeps: BTreeMap::new(),
            unclaimed: Unclaimed::default(),
            unbound_failed: 0,
            awaiting: BTreeMap::new(),
        });
        e
    }

    /// The timing in use.
    pub fn config(&self) -> &WriterConfig {
        &self.config
    }

    /// Increases with every [`Engine::forget_all`]: outcomes of actions
    /// polled before must not be recorded.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The caller wants `key` to be `desired`.
    pub fn set_desired(&mut self, key: ObjectKey, mut desired: Desired<K::Status>) -> SetResult {
        K::limit(&mut desired.status);
        let entry = self.entries.entry(key.clone()).or_insert_with(Entry::new);
        let r = Self::set_entry(entry, desired);
        self.recount(&key);
        r
    }

    fn set_entry(entry: &mut Entry<K::Status>, desired: Desired<K::Status>) -> SetResult {
        let was_pending = Self::action_for(entry).is_some();
        if let Want::Keep(old) = &entry.want
            && *old == desired
        {
            return if was_pending {
                SetResult::Pending
            } else {
                SetResult::Unchanged
            };
        }
        entry.want = Want::Keep(desired);
        // A permanent error is retried at once when the input changes.
        if entry.pace.last_class == Some(Class::Permanent) {
            entry.pace.retry_at = None;
        }
        match (Self::action_for(entry).is_some(), was_pending) {
            (false, _) => SetResult::Unchanged,
            (true, true) => SetResult::Coalesced,
            (true, false) => SetResult::Pending,
        }
    }

    /// The caller no longer wants `key`: it is deleted (kinds that own their
    /// objects) or forgotten (`IPAddressPool`).
    pub fn remove(&mut self, key: &ObjectKey) {
        if !K::OWNS_OBJECTS {
            self.drop_entry(key);
            return;
        }
        let entry = self.entries.entry(key.clone()).or_insert_with(Entry::new);
        entry.want = Want::Delete;
        // A delete is not held back by the rate limit or earlier failures.
        entry.pace.succeeded();
        if let Some(id) = entry.identity.take()
            && let Some(l) = &mut self.labeled
            && l.bound.get(&id) == Some(key)
        {
            l.bound.remove(&id);
        }
        self.gc(key);
    }

    /// Marks every object seen on the server and not wanted by the caller for
    /// deletion (kinds that own their objects). Call once the caller has
    /// handed in everything it wants, e.g. after its first full pass.
    pub fn prune_unwanted(&mut self) -> usize {
        if !K::OWNS_OBJECTS {
            return 0;
        }
        let mut marked = Vec::new();
        for (key, entry) in &mut self.entries {
            if entry.want == Want::Unset && matches!(entry.seen, Seen::Present(_)) {
                entry.want = Want::Delete;
                marked.push(key.clone());
            }
        }
        for key in &marked {
            self.recount(key);
        }
        marked.len()
    }

    /// Drops every desired status and everything known of the server
    /// (label-keyed writers list again), without deleting anything; actions
    /// in flight are disowned (see [`Engine::epoch`]). For a leader that
    /// lost its lease: it writes nothing more. Returns how many objects were
    /// wanted.
    pub fn forget_all(&mut self) -> usize {
        let wanted = self
            .entries
            .values()
            .filter(|e| matches!(e.want, Want::Keep(_) | Want::Delete))
            .count()
            + self.labeled.as_ref().map_or(0, |l| l.unbound.len());
        self.entries.clear();
        self.counts = Counts::default();
        if let Some(l) = &mut self.labeled {
            l.unbound_failed = 0;
            l.listed = false;
            l.list = ListState::default();
            l.synced = false;
            l.bound.clear();
            l.unbound.clear();
            l.awaiting.clear();
            l.sweeps.clear();
            l.unclaimed = Unclaimed::default();
        }
        self.epoch += 1;
        wanted
    }

    /// Actions in flight will not complete (their futures were dropped, e.g.
    /// at shutdown): they are decided again from what is known.
    pub fn abandon_in_flight(&mut self) {
        let mut abandoned = Vec::new();
        for (key, entry) in &mut self.entries {
            if entry.in_flight {
                entry.in_flight = false;
                // A write may or may not have happened: read again.
                entry.seen = Seen::Unknown;
                entry.acked = None;
                abandoned.push(key.clone());
            }
        }
        for key in &abandoned {
            self.gc(key);
        }
        if let Some(l) = &mut self.labeled {
            l.list.in_flight = false;
            l.awaiting.clear();
            for u in l.unbound.values_mut() {
                u.in_flight = false;
            }
            for s in l.sweeps.values_mut() {
                s.in_flight = false;
            }
        }
    }

    /// The object as seen on the server (a watch event or a list): `None`
    /// when it does not exist. Its metadata stays as last known.
    pub fn observe(&mut self, key: ObjectKey, status: Option<K::Status>) {
        let entry = self.entries.entry(key.clone()).or_insert_with(Entry::new);
        Self::record_seen(entry, status);
        self.gc(&key);
    }

    /// The object as seen on the server with its labels and owners (a watch
    /// event or a list): `None` when it does not exist. Label-keyed writers
    /// adopt an object of their scope for the identity it has.
    pub fn observe_object(&mut self, key: ObjectKey, object: Option<Observed<K::Status>>) {
        let entry = self.entries.entry(key.clone()).or_insert_with(Entry::new);
        match object {
            None => {
                Self::record_seen(entry, None);
                entry.meta = None;
            }
            Some(o) => {
                if entry.stale(o.resource_version) {
                    tracing::trace!(kind = K::KIND, object = %key, "stale observation ignored");
                    return;
                }
                Self::record_seen(entry, Some(o.status));
                entry.meta = Some(Meta {
                    labels: o.labels,
                    owners: o.owners,
                });
                self.classify(&key);
            }
        }
        self.gc(&key);
    }

    fn record_seen(entry: &mut Entry<K::Status>, status: Option<K::Status>) {
        let seen = match status {
            Some(s) => Seen::Present(s),
            None => Seen::Absent,
        };
        if entry.seen != seen {
            entry.acked = None;
            entry.seen = seen;
        }
    }

    /// Label-keyed writers: decides what an object of the scope not wanted
    /// by name stands for: the object of a wanted identity (adopted), a
    /// duplicate (deleted), or nothing (deleted once the caller's first full
    /// desired set is in).
    fn classify(&mut self, key: &ObjectKey) {
        let Some(l) = &mut self.labeled else {
            return;
        };
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        let Some(meta) = &entry.meta else {
            return;
        };
        if key.namespace != l.scope.namespace
            || !l.scope.contains(&meta.labels)
            || entry.identity.is_some()
            || matches!(entry.want, Want::Keep(_))
            || entry.seen == Seen::Absent
        {
            return;
        }
        let labels = &meta.labels;
        // The identities this object can stand for: its labels cut to each
        // name set asked for (no scan of the identities).
        let ids: Vec<Labels> = l
            .unclaimed
            .by_names
            .keys()
            .filter_map(|names| project(names, labels))
            .collect();
        if let Some(id) = ids.iter().find(|id| l.unbound.contains_key(*id)).cloned() {
            // Adopt it (e.g. after a restart, or the watch's event of our
            // own create ahead of its answer).
            let u = l.remove_unbound(&id).expect("found above");
            entry.identity = Some(id.clone());
            entry.want = Want::Keep(u.desired);
            entry.pace.succeeded();
            // Our own create (or another object) seen while our create is
            // in flight: nothing is written to it before that create's
            // answer (which writes the status, or names an extra object).
            entry.in_flight = u.in_flight;
            if u.in_flight {
                l.awaiting.insert(id.clone(), key.clone());
            }
            l.bound.insert(id, key.clone());
        } else if ids
            .iter()
            .any(|id| l.bound.get(id).is_some_and(|k| k != key))
        {
            // Another object stands for the same identity.
            entry.want = Want::Delete;
        } else if l.synced && l.listed {
            entry.want = Want::Delete;
        }
    }

    /// A complete list of the objects on the server (e.g. a watch's initial
    /// list): every known object not in it is absent.
    pub fn observe_all(&mut self, objects: impl IntoIterator<Item = (ObjectKey, K::Status)>) {
        let mut listed: BTreeMap<ObjectKey, K::Status> = objects.into_iter().collect();
        let keys: Vec<ObjectKey> = self.entries.keys().cloned().collect();
        for key in keys {
            let status = listed.remove(&key);
            self.observe(key, status);
        }
        for (key, status) in listed {
            self.observe(key, Some(status));
        }
    }

    /// [`Engine::observe_all`] with labels and owners.
    pub fn observe_all_objects(
        &mut self,
        objects: impl IntoIterator<Item = (ObjectKey, Observed<K::Status>)>,
    ) {
        let mut listed: BTreeMap<ObjectKey, Observed<K::Status>> = objects.into_iter().collect();
        let keys: Vec<ObjectKey> = self.entries.keys().cloned().collect();
        for key in keys {
            let object = listed.remove(&key);
            if object.is_none() && self.entries.get(&key).is_some_and(|e| e.in_flight) {
                continue;
            }
            self.observe_object(key, object);
        }
        for (key, object) in listed {
            self.observe_object(key, Some(object));
        }
    }

    /// The status of `key` last seen on the server.
    pub fn seen(&self, key: &ObjectKey) -> Option<&Seen<K::Status>> {
        self.entries.get(key).map(|e| &e.seen)
    }

    /// The status the caller wants for `key`.
    pub fn desired(&self, key: &ObjectKey) -> Option<&Desired<K::Status>> {
        match self.entries.get(key).map(|e| &e.want) {
            Some(Want::Keep(d)) => Some(d),
            _ => None,
        }
    }

    // ----- label-keyed writers

    /// Label-keyed writers: the caller wants the object identified by
    /// `identity` (merged with the scope's selector) to be `desired` (whose
    /// labels get the identity's). The object is the one of the scope with
    /// these labels, adopted from a list of the scope; created with the
    /// kind's `generateName` when none exists.
    ///
    /// # Panics
    /// On a name-keyed engine.
    pub fn set_labeled(&mut self, identity: Labels, mut desired: Desired<K::Status>) -> SetResult {
        let l = self.labeled.as_mut().expect("a label-keyed writer");
        let mut id = identity;
        id.extend(l.scope.selector.clone());
        desired.labels.extend(id.clone());
        K::limit(&mut desired.status);
        if let Some(key) = l.bound.get(&id).cloned()
            && let Some(entry) = self.entries.get_mut(&key)
        {
            let r = Self::set_entry(entry, desired);
            self.recount(&key);
            return r;
        }
        l.bound.remove(&id);
        l.unclaimed.index_names(&label_names(&id));
        if !l.unbound.contains_key(&id) {
            // An object of the scope seen before (the list at start comes
            // first in the daemon) stands for it: adopted, not created again.
            let found = l
                .unclaimed
                .candidates(&id)
                .find(|k| self.entries.get(*k).is_some_and(Self::adoptable))
                .cloned();
            if let Some(key) = found {
                let entry = self.entries.get_mut(&key).expect("found above");
                entry.identity = Some(id.clone());
                entry.want = Want::Unset;
                entry.pace.succeeded();
                l.bound.insert(id, key.clone());
                l.unclaimed.remove(&key);
                let r = Self::set_entry(entry, desired);
                self.recount(&key);
                return r;
            }
        }
        match l.unbound.get_mut(&id) {
            Some(u) if u.desired == desired => SetResult::Pending,
            Some(u) => {
                u.desired = desired;
                if u.pace.last_class == Some(Class::Permanent) {
                    u.pace.retry_at = None;
                }
                SetResult::Coalesced
            }
            None => {
                l.unbound.insert(
                    id,
                    Unbound {
                        desired,
                        pace: Pace::default(),
                        in_flight: false,
                    },
                );
                SetResult::Pending
            }
        }
    }

    /// Label-keyed writers: the caller no longer wants the object of
    /// `identity`: it is deleted.
    pub fn remove_labeled(&mut self, identity: Labels) {
        let Some(l) = &mut self.labeled else {
            return;
        };
        let mut id = identity;
        id.extend(l.scope.selector.clone());
        l.remove_unbound(&id);
        if let Some(key) = l.bound.remove(&id) {
            if let Some(e) = self.entries.get_mut(&key) {
                e.identity = None;
            }
            self.remove(&key);
        }
    }

    /// Label-keyed writers: the caller has handed in its first full desired
    /// set: objects of the scope it did not ask for are deleted (now, or
    /// once the scope is listed), and so are those that appear later.
    pub fn initial_sync_done(&mut self) {
        let Some(l) = &mut self.labeled else {
            return;
        };
        l.synced = true;
        if l.listed {
            self.prune_scope();
        }
    }

    fn prune_scope(&mut self) {
        let Some(l) = &self.labeled else {
            return;
        };
        let mut marked = Vec::new();
        for (key, e) in &mut self.entries {
            if e.want == Want::Unset
                && e.identity.is_none()
                && matches!(e.seen, Seen::Present(_))
                && key.namespace == l.scope.namespace
                && e.meta.as_ref().is_some_and(|m| l.scope.contains(&m.labels))
            {
                e.want = Want::Delete;
                marked.push(key.clone());
            }
        }
        for key in &marked {
            self.recount(key);
        }
    }

    /// Label-keyed writers: deletes the objects of the namespace whose
    /// labels include `selector` and that are outside the scope, e.g. other
    /// nodes' `ServiceL2Status` of a service this node now announces
    /// (`selector`: the service's name and namespace labels).
    pub fn delete_others(&mut self, selector: Labels) {
        if let Some(l) = &mut self.labeled {
            l.sweeps.entry(selector).or_default();
        }
    }

    /// Label-keyed writers: the name of the object of `identity`, once it is
    /// known (adopted or created).
    pub fn labeled_key(&self, identity: &Labels) -> Option<&ObjectKey> {
        let l = self.labeled.as_ref()?;
        let mut id = identity.clone();
        id.extend(l.scope.selector.clone());
        l.bound.get(&id)
    }

    /// Label-keyed writers: whether the caller said its first full desired
    /// set is in.
    pub fn synced(&self) -> bool {
        self.labeled.as_ref().is_some_and(|l| l.synced)
    }

    // ----- the actions

    /// Objects whose server state differs from what the caller wants
    /// (including identities without an object yet). O(1).
    pub fn pending(&self) -> usize {
        self.counts.pending + self.labeled.as_ref().map_or(0, |l| l.unbound.len())
    }

    /// Objects (and identities without an object) whose last request
    /// failed. O(1).
    pub fn failed(&self) -> usize {
        self.counts.failed
            + self.labeled.as_ref().map_or(0, |l| {
                l.unbound_failed + usize::from(l.list.pace.failures > 0)
            })
    }

    /// [`Engine::pending`] and [`Engine::failed`] counted from scratch
    /// (tests check the counts kept against it).
    #[cfg(test)]
    pub(crate) fn counts_scanned(&self) -> (usize, usize) {
        let pending = self
            .entries
            .values()
            .filter(|e| e.in_flight || Self::action_for(e).is_some())
            .count()
            + self.labeled.as_ref().map_or(0, |l| l.unbound.len());
        let failed = self
            .entries
            .values()
            .filter(|e| e.pace.failures > 0)
            .count()
            + self.labeled.as_ref().map_or(0, |l| {
                l.unbound.values().filter(|u| u.pace.failures > 0).count()
                    + usize::from(l.list.pace.failures > 0)
            });
        (pending, failed)
    }

    /// The actions due at `now`; each object is then in flight until
    /// [`Engine::complete`].
    pub fn poll(&mut self, now: Instant) -> Vec<Action<K::Status>> {
        self.poll_within(now, &mut TokenBucket::unlimited(), usize::MAX)
    }

    /// The actions due at `now`, at most `max`, each taking a token of
    /// `budget` (none is taken past the first that is missing).
    pub fn poll_within(
        &mut self,
        now: Instant,
        budget: &mut TokenBucket,
        max: usize,
    ) -> Vec<Action<K::Status>> {
        self.poll_with(now, max, || budget.try_take(now))
    }

    /// The actions due at `now`, at most `max`, each taken only when `take`
    /// says so (none is asked for past the first refusal).
    pub fn poll_with(
        &mut self,
        now: Instant,
        max: usize,
        mut take: impl FnMut() -> bool,
    ) -> Vec<Action<K::Status>> {
        let mut out = Vec::new();
        let mut room = |out: &Vec<Action<K::Status>>| out.len() < max && take();
        if let Some(l) = &mut self.labeled {
            if !l.listed && !l.list.in_flight && l.list.pace.retry_at.is_none_or(|t| t <= now) {
                if !room(&out) {
                    return out;
                }
                l.list.in_flight = true;
                out.push(Action::List {
                    namespace: l.scope.namespace.clone(),
                    selector: l.scope.selector.clone(),
                });
            }
            for (selector, s) in &mut l.sweeps {
                if s.in_flight || s.pace.retry_at.is_some_and(|t| t > now) {
                    continue;
                }
                if !room(&out) {
                    return out;
                }
                s.in_flight = true;
                out.push(Action::List {
                    namespace: l.scope.namespace.clone(),
                    selector: selector.clone(),
                });
            }
            if l.listed {
                for (id, u) in &mut l.unbound {
                    if u.in_flight || u.pace.retry_at.is_some_and(|t| t > now) {
                        continue;
                    }
                    if !room(&out) {
                        return out;
                    }
                    u.in_flight = true;
                    out.push(Action::CreateGenerated {
                        identity: id.clone(),
                        namespace: l.scope.namespace.clone(),
                        name: K::name(id),
                        generate_name: K::generate_name(id),
                        desired: u.desired.clone(),
                    });
                }
            }
        }
        for (key, entry) in &mut self.entries {
            if entry.in_flight {
                continue;
            }
            let Some(kind) = Self::action_for(entry) else {
                continue;
            };
            if Self::due(&self.config, entry, &kind).is_some_and(|due| due > now) {
                continue;
            }
            if !room(&out) {
                return out;
            }
            entry.in_flight = true;
            out.push(match kind {
                Kind::Fetch => Action::Fetch(key.clone()),
                Kind::Create(d) => Action::Create(key.clone(), d),
                Kind::Apply(s) => Action::Apply(key.clone(), s),
                Kind::ApplyMetadata(m) => Action::ApplyMetadata(key.clone(), m.labels, m.owner),
                Kind::Delete => Action::Delete(key.clone()),
            });
        }
        out
    }

    /// When the next action is due (`None`: nothing to do until something
    /// changes); `now` when one is due already. Ignores the request budget.
    pub fn next_deadline(&self, now: Instant) -> Option<Instant> {
        let at = |p: &Pace| p.retry_at.map_or(now, |t| t.max(now));
        let labeled = self.labeled.iter().flat_map(|l| {
            let list = (!l.listed && !l.list.in_flight).then(|| at(&l.list.pace));
            let sweeps = l
                .sweeps
                .values()
                .filter(|s| !s.in_flight)
                .map(|s| at(&s.pace));
            let creates = l
                .unbound
                .values()
                .filter(|u| l.listed && !u.in_flight)
                .map(|u| at(&u.pace));
            list.into_iter().chain(sweeps).chain(creates)
        });
        self.entries
            .values()
            .filter(|e| !e.in_flight)
            .filter_map(|e| {
                Self::action_for(e)
                    .map(|k| Self::due(&self.config, e, &k).map_or(now, |d| d.max(now)))
            })
            .chain(labeled)
            .min()
    }

    /// Records how an action of [`Engine::poll`] went.
    pub fn complete(
        &mut self,
        action: &Action<K::Status>,
        outcome: Outcome<K::Status>,
        now: Instant,
    ) {
        match action {
            Action::List {
                namespace,
                selector,
            } => return self.complete_list(namespace, selector, outcome, now),
            Action::CreateGenerated { identity, .. } => {
                return self.complete_generated(identity, outcome, now);
            }
            _ => {}
        }
        let Some(key) = action.key().cloned() else {
            return;
        };
        let backoff = self.config.backoff;
        let Some(entry) = self.entries.get_mut(&key) else {
            return;
        };
        entry.in_flight = false;
        match outcome {
            Outcome::Fetched(object) => {
                if let Some(o) = &object {
                    entry.resource_version = o.resource_version.or(entry.resource_version);
                }
                Self::record_seen(entry, object.as_ref().map(|o| o.status.clone()));
                entry.meta = object.map(|o| Meta {
                    labels: o.labels,
                    owners: o.owners,
                });
                if Self::action_for(entry).is_some() {
                    entry.pace.read();
                } else {
                    // Nothing to write: the object is as wanted.
                    entry.pace.succeeded();
                }
            }
            Outcome::Written { sent, returned } => {
                entry.pace.succeeded();
                entry.last_write = Some(now);
                // A write's answer is the newest state there is.
                entry.resource_version = returned.resource_version.or(entry.resource_version);
                match action {
                    Action::ApplyMetadata(_, labels, owner) => {
                        Self::record_seen(entry, Some(returned.status));
                        entry.meta_acked = Some(MetaWant {
                            labels: labels.clone(),
                            owner: owner.clone(),
                        });
                    }
                    _ => {
                        entry.seen = Seen::Present(returned.status);
                        entry.acked = Some(sent);
                        if matches!(action, Action::Create(..)) {
                            entry.meta_acked = None;
                        }
                    }
                }
                entry.meta = Some(Meta {
                    labels: returned.labels,
                    owners: returned.owners,
                });
            }
            Outcome::Created { .. } | Outcome::Listed(_) => {}
            Outcome::NotFound | Outcome::Deleted => {
                entry.pace.succeeded();
                entry.seen = Seen::Absent;
                entry.meta = None;
                entry.acked = None;
                entry.meta_acked = None;
            }
            Outcome::Failed(class) => {
                entry.pace.failed(class, &backoff, now);
                if matches!(action, Action::Create(..)) && class == Class::NotFound {
                    // The kind (or namespace) is missing: nothing was
                    // created, and a read would find nothing either.
                    entry.seen = Seen::Absent;
                } else if matches!(action, Action::Create(..)) || class == Class::Conflict {
                    // The object may exist (or changed): read it again.
                    entry.seen = Seen::Unknown;
                    entry.acked = None;
                    entry.meta_acked = None;
                }
            }
        }
        self.gc(&key);
    }

    fn complete_list(
        &mut self,
        namespace: &str,
        selector: &Labels,
        outcome: Outcome<K::Status>,
        now: Instant,
    ) {
        let backoff = self.config.backoff;
        let Some(l) = &mut self.labeled else {
            return;
        };
        let own = namespace == l.scope.namespace && *selector == l.scope.selector;
        let objects = match outcome {
            Outcome::Listed(objects) => objects,
            Outcome::Failed(class) => {
                let state = if own {
                    Some(&mut l.list)
                } else {
                    l.sweeps.get_mut(selector)
                };
                if let Some(s) = state {
                    s.in_flight = false;
                    // The scope's own list gates every create of the writer:
                    // a refusal (403) is retried as a transient error, not at
                    // the 5-minute pace of a write refused. A returning API
                    // server refuses with 403 for seconds while its RBAC
                    // cache fills; a speaker started meanwhile wrote no
                    // status for a new Service for 5 minutes (bench-bgp-faults
                    // etcd-compact with --sabotage, issue 27 item 3).
                    let class = match class {
                        Class::Permanent if own => Class::Transient,
                        other => other,
                    };
                    s.pace.failed(class, &backoff, now);
                }
                return;
            }
            _ => return,
        };
        if own {
            l.list = ListState::default();
            l.listed = true;
            let synced = l.synced;
            let scope = l.scope.clone();
            // Everything of the scope not listed is gone.
            let gone: Vec<ObjectKey> = self
                .entries
                .iter()
                .filter(|(k, e)| {
                    !e.in_flight
                        && k.namespace == scope.namespace
                        && e.meta.as_ref().is_some_and(|m| scope.contains(&m.labels))
                        && !objects.iter().any(|(o, _)| o == *k)
                })
                .map(|(k, _)| k.clone())
                .collect();
            for key in gone {
                self.observe_object(key, None);
            }
            for (key, object) in objects {
                self.observe_object(key, Some(object));
            }
            if synced {
                self.prune_scope();
            }
        } else {
            l.sweeps.remove(selector);
            let scope = l.scope.clone();
            for (key, object) in objects {
                let outside = !scope.contains(&object.labels);
                self.observe_object(key.clone(), Some(object));
                if outside
                    && K::OWNS_OBJECTS
                    && let Some(e) = self.entries.get_mut(&key)
                    && !matches!(e.want, Want::Keep(_))
                {
                    e.want = Want::Delete;
                    self.recount(&key);
                }
            }
        }
    }

    fn complete_generated(&mut self, identity: &Labels, outcome: Outcome<K::Status>, now: Instant) {
        let backoff = self.config.backoff;
        let Some(l) = &mut self.labeled else {
            return;
        };
        // An object adopted for `identity` while this create was in flight
        // waited for it (see `classify`), whether the identity is still wanted
        // or not.
        let waited = l
            .awaiting
            .remove(identity)
            .or_else(|| l.bound.get(identity).cloned());
        if let Some(e) = waited.as_ref().and_then(|k| self.entries.get_mut(k)) {
            e.in_flight = false;
        }
        match outcome {
            Outcome::Created {
                key,
                sent,
                returned,
            } => {
                let wanted = l.remove_unbound(identity).map(|u| u.desired);
                let bound_to = l.bound.get(identity).cloned();
                let entry = self.entries.entry(key.clone()).or_insert_with(Entry::new);
                entry.resource_version = returned.resource_version.or(entry.resource_version);
                entry.seen = Seen::Present(returned.status);
                entry.acked = Some(sent);
                entry.meta = Some(Meta {
                    labels: returned.labels,
                    owners: returned.owners,
                });
                entry.last_write = Some(now);
                entry.pace.succeeded();
                match (wanted, bound_to) {
                    (_, Some(k)) if k == key => {}
                    // Adopted another object meanwhile: this one is extra.
                    (_, Some(_)) | (None, None) => {
                        entry.identity = None;
                        entry.want = Want::Delete;
                    }
                    (Some(desired), None) => {
                        entry.identity = Some(identity.clone());
                        entry.want = Want::Keep(desired);
                        l.bound.insert(identity.clone(), key.clone());
                    }
                }
                self.gc(&key);
            }
            Outcome::Failed(class) => {
                if let Some(u) = l.unbound.get_mut(identity) {
                    u.in_flight = false;
                    l.unbound_failed += usize::from(u.pace.failures == 0);
                    u.pace.failed(class, &backoff, now);
                }
            }
            _ => {
                if let Some(u) = l.unbound.get_mut(identity) {
                    u.in_flight = false;
                }
            }
        }
        if let Some(k) = waited {
            self.gc(&k);
        }
    }

    fn gc(&mut self, key: &ObjectKey) {
        if let Some(e) = self.entries.get(key)
            && !e.in_flight
            && e.seen == Seen::Absent
            && matches!(e.want, Want::Delete | Want::Unset)
        {
            self.drop_entry(key);
        } else {
            self.recount(key);
        }
        self.reindex(key);
    }

    /// Forgets the entry of `key` (and its part of the counts).
    fn drop_entry(&mut self, key: &ObjectKey) {
        if let Some(e) = self.entries.remove(key) {
            self.counts.sub(e.counted);
        }
    }

    /// Brings the counts up to date with the entry of `key` (call after
    /// every change of it): O(1), one comparison of its statuses.
    fn recount(&mut self, key: &ObjectKey) {
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        let now = Counted {
            pending: e.in_flight || Self::action_for(e).is_some(),
            failed: e.pace.failures > 0,
        };
        let was = std::mem::replace(&mut e.counted, now);
        if was != now {
            self.counts.sub(was);
            self.counts.add(now);
        }
    }

    /// Label-keyed writers: keeps [`Unclaimed`] up to date with the entry
    /// of `key` (call after every change of its identity, want, status
    /// seen or labels).
    fn reindex(&mut self, key: &ObjectKey) {
        let Some(l) = &mut self.labeled else {
            return;
        };
        match self.entries.get(key) {
            Some(e)
                if Self::adoptable(e)
                    && key.namespace == l.scope.namespace
                    && let Some(m) = &e.meta
                    && l.scope.contains(&m.labels) =>
            {
                l.unclaimed.insert(key, &m.labels);
            }
            _ => l.unclaimed.remove(key),
        }
    }

    /// Whether an identity asked for may take this object of its scope: it
    /// exists, stands for no identity, and is neither wanted by name nor
    /// being deleted (a delete not sent yet is called off).
    fn adoptable(e: &Entry<K::Status>) -> bool {
        e.identity.is_none()
            && matches!(e.seen, Seen::Present(_))
            && match e.want {
                Want::Unset => true,
                Want::Delete => !e.in_flight,
                Want::Keep(_) => false,
            }
    }

    fn meta_action(entry: &Entry<K::Status>, d: &Desired<K::Status>) -> Option<MetaWant> {
        if !K::OWNS_OBJECTS {
            return None;
        }
        let meta = entry.meta.as_ref()?;
        let labels_ok = is_subset(&d.labels, &meta.labels);
        let owner_ok = d
            .owner
            .as_ref()
            .is_none_or(|o| meta.owners.iter().any(|m| m.uid == o.uid));
        if labels_ok && owner_ok {
            return None;
        }
        let want = MetaWant {
            labels: d.labels.clone(),
            owner: d.owner.clone(),
        };
        // Written already: the server keeps something else (do not loop).
        (entry.meta_acked.as_ref() != Some(&want)).then_some(want)
    }

    fn action_for(entry: &Entry<K::Status>) -> Option<Kind<K::Status>> {
        match (&entry.want, &entry.seen) {
            (Want::Unset, _) => None,
            (Want::Keep(_), Seen::Unknown) => Some(Kind::Fetch),
            (Want::Keep(d), Seen::Absent) => K::OWNS_OBJECTS.then(|| Kind::Create(d.clone())),
            (Want::Keep(d), Seen::Present(s)) => {
                if let Some(m) = Self::meta_action(entry, d) {
                    return Some(Kind::ApplyMetadata(m));
                }
                let mut want = d.status.clone();
                K::carry_over(&mut want, s);
                if want == *s || entry.acked.as_ref() == Some(&want) {
                    None
                } else {
                    Some(Kind::Apply(want))
                }
            }
            (Want::Delete, Seen::Absent) => None,
            (Want::Delete, _) => Some(Kind::Delete),
        }
    }

    /// When `kind` may run; `None`: at once.
    fn due(
        config: &WriterConfig,
        entry: &Entry<K::Status>,
        kind: &Kind<K::Status>,
    ) -> Option<Instant> {
        let mut due: Option<Instant> = entry.pace.retry_at;
        if matches!(
            kind,
            Kind::Create(_) | Kind::Apply(_) | Kind::ApplyMetadata(_)
        ) && let Some(last) = entry.last_write
        {
            let interval = match &entry.want {
                Want::Keep(d) => d.min_interval.map_or(config.min_write_interval, |i| {
                    i.max(config.min_write_interval)
                }),
                _ => config.min_write_interval,
            };
            let allowed = last + interval;
            due = Some(due.map_or(allowed, |d| d.max(allowed)));
        }
        due
    }
}

enum Kind<S> {
    Fetch,
    Create(Desired<S>),
    Apply(S),
    ApplyMetadata(MetaWant),
    Delete,
}
