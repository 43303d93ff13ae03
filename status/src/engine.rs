//! The writer's decisions, free of I/O and of the system clock: what to
//! write, when, coalescing and backoff. Every method takes `now`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::object::{Desired, ObjectKey, StatusObject};

/// Timing of the writer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriterConfig {
    /// At most one write (create or status apply) per object per interval;
    /// changes within it are coalesced and the last one is written. Default 1 s.
    pub min_write_interval: Duration,
    /// Delay before the first retry after an API error; doubled after each
    /// further error. Default 500 ms.
    pub initial_backoff: Duration,
    /// Longest delay between retries. Default 60 s.
    pub max_backoff: Duration,
    /// API requests in flight at once (for different objects). Default 8.
    pub concurrency: usize,
}

impl Default for WriterConfig {
    fn default() -> Self {
        Self {
            min_write_interval: Duration::from_secs(1),
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(60),
            concurrency: 8,
        }
    }
}

impl WriterConfig {
    /// The delay before retrying after `failures` consecutive errors (>= 1).
    pub fn backoff(&self, failures: u32) -> Duration {
        let factor = 1u32
            .checked_shl(failures.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.initial_backoff
            .checked_mul(factor)
            .unwrap_or(self.max_backoff)
            .min(self.max_backoff)
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

#[derive(Debug)]
struct Entry<S> {
    want: Want<S>,
    seen: Seen<S>,
    /// The status last written successfully while `seen` is that write's
    /// response: a server that normalises a value does not cause rewrites.
    acked: Option<S>,
    last_write: Option<Instant>,
    failures: u32,
    retry_at: Option<Instant>,
    in_flight: bool,
}

impl<S> Entry<S> {
    fn new() -> Self {
        Self {
            want: Want::Unset,
            seen: Seen::Unknown,
            acked: None,
            last_write: None,
            failures: 0,
            retry_at: None,
            in_flight: false,
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
    /// Delete the object.
    Delete(ObjectKey),
}

impl<S> Action<S> {
    /// The object concerned.
    pub fn key(&self) -> &ObjectKey {
        match self {
            Action::Fetch(k) | Action::Create(k, _) | Action::Apply(k, _) | Action::Delete(k) => k,
        }
    }
}

/// How an [`Action`] went.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome<S> {
    /// `Fetch`: the object's status, or `None` when it does not exist.
    Fetched(Option<S>),
    /// `Create` or `Apply`: the sent status and the status the server returned.
    Written {
        /// What was sent.
        sent: S,
        /// What the server answered.
        returned: S,
    },
    /// `Apply` on an object that does not exist.
    NotFound,
    /// `Delete` done (or the object was already gone).
    Deleted,
    /// An API error: retried with backoff.
    Failed,
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

/// The decision state of one writer (one kind).
#[derive(Debug)]
pub struct Engine<K: StatusObject> {
    config: WriterConfig,
    entries: BTreeMap<ObjectKey, Entry<K::Status>>,
}

impl<K: StatusObject> Engine<K> {
    /// An engine with no objects.
    pub fn new(config: WriterConfig) -> Self {
        Self {
            config,
            entries: BTreeMap::new(),
        }
    }

    /// The timing in use.
    pub fn config(&self) -> &WriterConfig {
        &self.config
    }

    /// The caller wants `key` to be `desired`.
    pub fn set_desired(&mut self, key: ObjectKey, desired: Desired<K::Status>) -> SetResult {
        let entry = self.entries.entry(key).or_insert_with(Entry::new);
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
            self.entries.remove(key);
            return;
        }
        let entry = self.entries.entry(key.clone()).or_insert_with(Entry::new);
        entry.want = Want::Delete;
        // A delete is not held back by the rate limit or earlier failures.
        entry.retry_at = None;
        entry.failures = 0;
        self.gc(key);
    }

    /// Marks every object seen on the server and not wanted by the caller for
    /// deletion (kinds that own their objects). Call once the caller has
    /// handed in everything it wants, e.g. after its first full pass.
    pub fn prune_unwanted(&mut self) -> usize {
        if !K::OWNS_OBJECTS {
            return 0;
        }
        let mut n = 0;
        for entry in self.entries.values_mut() {
            if entry.want == Want::Unset && matches!(entry.seen, Seen::Present(_)) {
                entry.want = Want::Delete;
                n += 1;
            }
        }
        n
    }

    /// The object as seen on the server (a watch event or a list): `None`
    /// when it does not exist.
    pub fn observe(&mut self, key: ObjectKey, status: Option<K::Status>) {
        let seen = match status {
            Some(s) => Seen::Present(s),
            None => Seen::Absent,
        };
        let entry = self.entries.entry(key.clone()).or_insert_with(Entry::new);
        if entry.seen != seen {
            entry.acked = None;
            entry.seen = seen;
        }
        self.gc(&key);
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

    /// Objects whose server state differs from what the caller wants.
    pub fn pending(&self) -> usize {
        self.entries
            .values()
            .filter(|e| e.in_flight || Self::action_for(e).is_some())
            .count()
    }

    /// The actions due at `now`; each object is then in flight until
    /// [`Engine::complete`].
    pub fn poll(&mut self, now: Instant) -> Vec<Action<K::Status>> {
        let mut out = Vec::new();
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
            entry.in_flight = true;
            out.push(match kind {
                Kind::Fetch => Action::Fetch(key.clone()),
                Kind::Create(d) => Action::Create(key.clone(), d),
                Kind::Apply(s) => Action::Apply(key.clone(), s),
                Kind::Delete => Action::Delete(key.clone()),
            });
        }
        out
    }

    /// When the next action is due (`None`: nothing to do until something
    /// changes); `now` when one is due already.
    pub fn next_deadline(&self, now: Instant) -> Option<Instant> {
        self.entries
            .values()
            .filter(|e| !e.in_flight)
            .filter_map(|e| {
                Self::action_for(e)
                    .map(|k| Self::due(&self.config, e, &k).map_or(now, |d| d.max(now)))
            })
            .min()
    }

    /// Records how an action of [`Engine::poll`] went.
    pub fn complete(
        &mut self,
        action: &Action<K::Status>,
        outcome: Outcome<K::Status>,
        now: Instant,
    ) {
        let key = action.key().clone();
        let Some(entry) = self.entries.get_mut(&key) else {
            return;
        };
        entry.in_flight = false;
        match outcome {
            Outcome::Fetched(status) => {
                entry.failures = 0;
                entry.retry_at = None;
                let seen = match status {
                    Some(s) => Seen::Present(s),
                    None => Seen::Absent,
                };
                if entry.seen != seen {
                    entry.acked = None;
                    entry.seen = seen;
                }
            }
            Outcome::Written { sent, returned } => {
                entry.failures = 0;
                entry.retry_at = None;
                entry.last_write = Some(now);
                entry.seen = Seen::Present(returned);
                entry.acked = Some(sent);
            }
            Outcome::NotFound | Outcome::Deleted => {
                entry.failures = 0;
                entry.retry_at = None;
                entry.seen = Seen::Absent;
                entry.acked = None;
            }
            Outcome::Failed => {
                entry.failures = entry.failures.saturating_add(1);
                entry.retry_at = Some(now + self.config.backoff(entry.failures));
                if matches!(action, Action::Create(..)) {
                    // The object may exist without its status: read it again.
                    entry.seen = Seen::Unknown;
                    entry.acked = None;
                }
            }
        }
        self.gc(&key);
    }

    fn gc(&mut self, key: &ObjectKey) {
        if let Some(e) = self.entries.get(key)
            && !e.in_flight
            && e.seen == Seen::Absent
            && matches!(e.want, Want::Delete | Want::Unset)
        {
            self.entries.remove(key);
        }
    }

    fn action_for(entry: &Entry<K::Status>) -> Option<Kind<K::Status>> {
        match (&entry.want, &entry.seen) {
            (Want::Unset, _) => None,
            (Want::Keep(_), Seen::Unknown) => Some(Kind::Fetch),
            (Want::Keep(d), Seen::Absent) => K::OWNS_OBJECTS.then(|| Kind::Create(d.clone())),
            (Want::Keep(d), Seen::Present(s)) => {
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
        let mut due: Option<Instant> = entry.retry_at;
        if matches!(kind, Kind::Create(_) | Kind::Apply(_))
            && let Some(last) = entry.last_write
        {
            let allowed = last + config.min_write_interval;
            due = Some(due.map_or(allowed, |d| d.max(allowed)));
        }
        due
    }
}

enum Kind<S> {
    Fetch,
    Create(Desired<S>),
    Apply(S),
    Delete,
}
