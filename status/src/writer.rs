//! The writer: a shared [`Engine`] callers hand desired statuses to, and the
//! loop that runs its actions against a [`StatusApi`].

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use kube_edge::Class;
use tokio::sync::Notify;

use crate::api::StatusApi;
use crate::budget::{Share, WriteBudget};
use crate::clock::Clock;
use crate::engine::{Action, Engine, Outcome, Seen, SetResult, WriterConfig};
use crate::metrics::Metrics;
use crate::object::{Desired, LabelScope, Labels, ObjectKey, Observed, StatusObject};

struct Shared<K: StatusObject> {
    engine: Mutex<Engine<K>>,
    notify: Notify,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    budget: Share,
    /// Turns of [`StatusWriter::run`]'s loop (tests: a writer waiting for
    /// its turn of the budget must sleep, not spin).
    #[cfg(test)]
    turns: std::sync::atomic::AtomicU64,
}

/// The status writer of one kind. Cheap to clone; every method but
/// [`StatusWriter::run`] and [`StatusWriter::step`] returns at once.
///
/// Name-keyed ([`StatusWriter::new`]: `ConfigurationState`, `IPAddressPool`)
/// or label-keyed ([`StatusWriter::labeled`]: a speaker's
/// `ServiceL2Status`, `ServiceBGPStatus`, `BGPSessionStatus`).
pub struct StatusWriter<K: StatusObject> {
    shared: Arc<Shared<K>>,
}

impl<K: StatusObject> Clone for StatusWriter<K> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<K: StatusObject> std::fmt::Debug for StatusWriter<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusWriter")
            .field("kind", &K::KIND)
            .finish()
    }
}

type Done<S> = (Action<S>, Outcome<S>, u64);

impl<K: StatusObject> StatusWriter<K> {
    /// A writer with `config`'s timing, deciding with `clock`, counting in
    /// `metrics`, with a budget of its own (client-go's default).
    pub fn new(config: WriterConfig, clock: Arc<dyn Clock>, metrics: Metrics) -> Self {
        Self::with_engine(Engine::new(config), clock, metrics, WriteBudget::default())
    }

    /// A label-keyed writer of the objects of `scope` (see
    /// [`StatusWriter::set_labeled`]), taking its requests from `budget`
    /// (share one between the writers of a process).
    pub fn labeled(
        config: WriterConfig,
        scope: LabelScope,
        clock: Arc<dyn Clock>,
        metrics: Metrics,
        budget: WriteBudget,
    ) -> Self {
        Self::with_engine(Engine::labeled(config, scope), clock, metrics, budget)
    }

    fn with_engine(
        engine: Engine<K>,
        clock: Arc<dyn Clock>,
        metrics: Metrics,
        budget: WriteBudget,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                engine: Mutex::new(engine),
                notify: Notify::new(),
                clock,
                metrics,
                budget: budget.share(),
                #[cfg(test)]
                turns: std::sync::atomic::AtomicU64::new(0),
            }),
        }
    }

    /// A name-keyed writer taking its requests from `budget` (share one
    /// between the writers of a process).
    pub fn with_budget(
        config: WriterConfig,
        clock: Arc<dyn Clock>,
        metrics: Metrics,
        budget: WriteBudget,
    ) -> Self {
        Self::with_engine(Engine::new(config), clock, metrics, budget)
    }

    fn engine(&self) -> MutexGuard<'_, Engine<K>> {
        // The engine is left consistent by every method: a panic elsewhere
        // while holding the lock does not make it unusable.
        self.shared.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn counted(&self, r: SetResult) {
        match r {
            SetResult::Unchanged => {
                self.shared
                    .metrics
                    .skips
                    .with_label_values(&[K::KIND])
                    .inc();
            }
            SetResult::Coalesced => {
                self.shared
                    .metrics
                    .coalesced
                    .with_label_values(&[K::KIND])
                    .inc();
                self.shared.notify.notify_one();
            }
            SetResult::Pending => self.shared.notify.notify_one(),
        }
        self.refresh_gauges();
    }

    fn refresh_gauges(&self) {
        let (pending, failed) = {
            let e = self.engine();
            (e.pending(), e.failed())
        };
        let m = &self.shared.metrics;
        m.pending
            .with_label_values(&[K::KIND])
            .set(i64::try_from(pending).unwrap_or(i64::MAX));
        m.failed
            .with_label_values(&[K::KIND])
            .set(i64::try_from(failed).unwrap_or(i64::MAX));
    }

    /// The caller wants `key` to be `desired`. Never blocks.
    pub fn set_desired(&self, key: ObjectKey, desired: Desired<K::Status>) {
        let r = self.engine().set_desired(key, desired);
        self.counted(r);
    }

    /// The caller no longer wants `key`: deleted when the writer owns such
    /// objects, else forgotten. Never blocks.
    pub fn remove(&self, key: &ObjectKey) {
        self.engine().remove(key);
        self.shared.notify.notify_one();
        self.refresh_gauges();
    }

    /// Deletes every object seen on the server that the caller has not asked
    /// for (see [`Engine::prune_unwanted`]). Returns how many.
    pub fn prune_unwanted(&self) -> usize {
        let n = self.engine().prune_unwanted();
        self.shared.notify.notify_one();
        n
    }

    /// Drops every desired status and cancels pending writes, deleting
    /// nothing: requests in flight are abandoned by [`StatusWriter::run`]
    /// and their outcomes ignored. For a leader that lost its lease, so it
    /// writes nothing more (hand in desired statuses again when leading
    /// again). Returns how many objects were wanted.
    pub fn forget_all(&self) -> usize {
        let n = self.engine().forget_all();
        self.shared.notify.notify_one();
        self.refresh_gauges();
        n
    }

    /// Tells the writer what the server has (from a watch): `None` when the
    /// object is gone. Never blocks.
    pub fn observe(&self, key: ObjectKey, status: Option<K::Status>) {
        self.engine().observe(key, status);
        self.shared.notify.notify_one();
    }

    /// Tells the writer what the server has, with labels and owners (from a
    /// watch): `None` when the object is gone. Never blocks.
    pub fn observe_object(&self, key: ObjectKey, object: Option<Observed<K::Status>>) {
        self.engine().observe_object(key, object);
        self.shared.notify.notify_one();
    }

    /// Tells the writer the complete list of objects on the server.
    pub fn observe_all(&self, objects: impl IntoIterator<Item = (ObjectKey, K::Status)>) {
        self.engine().observe_all(objects);
        self.shared.notify.notify_one();
    }

    /// [`StatusWriter::observe_all`] with labels and owners.
    pub fn observe_all_objects(
        &self,
        objects: impl IntoIterator<Item = (ObjectKey, Observed<K::Status>)>,
    ) {
        self.engine().observe_all_objects(objects);
        self.shared.notify.notify_one();
    }

    /// The status of `key` last seen on the server (`None`: absent or unknown).
    pub fn observed(&self, key: &ObjectKey) -> Option<K::Status> {
        match self.engine().seen(key) {
            Some(Seen::Present(s)) => Some(s.clone()),
            _ => None,
        }
    }

    /// What the caller last asked for `key`.
    pub fn desired(&self, key: &ObjectKey) -> Option<Desired<K::Status>> {
        self.engine().desired(key).cloned()
    }

    /// Label-keyed writers: the caller wants the object identified by the
    /// labels `identity` (the scope's selector is added; e.g. for a
    /// `ServiceL2Status`: `metallb.io/service-name`,
    /// `metallb.io/service-namespace`) to be `desired`. The existing object
    /// with these labels is adopted (found by a list of the scope at start,
    /// or by [`StatusWriter::observe_object`], before or after this call:
    /// one that matches costs no write); one is created with the
    /// kind's `generateName` when none exists. Never blocks.
    ///
    /// # Panics
    /// On a name-keyed writer.
    pub fn set_labeled(&self, identity: Labels, desired: Desired<K::Status>) {
        let r = self.engine().set_labeled(identity, desired);
        self.counted(r);
    }

    /// Label-keyed writers: the object of `identity` is no longer wanted: it
    /// is deleted. Never blocks.
    pub fn remove_labeled(&self, identity: Labels) {
        self.engine().remove_labeled(identity);
        self.shared.notify.notify_one();
        self.refresh_gauges();
    }

    /// Label-keyed writers: the caller has handed in its first full desired
    /// set (e.g. after its first pass over every Service at start): objects
    /// of the scope it did not ask for are deleted, now and when they
    /// appear. Before this call, none is deleted (they may be wanted still).
    pub fn initial_sync_done(&self) {
        self.engine().initial_sync_done();
        self.shared.notify.notify_one();
    }

    /// Label-keyed writers: deletes the objects whose labels include
    /// `selector` and are outside the writer's scope, e.g. other nodes'
    /// `ServiceL2Status` of a service this node now announces (`selector`:
    /// `metallb.io/service-name` and `metallb.io/service-namespace`).
    pub fn delete_others(&self, selector: Labels) {
        self.engine().delete_others(selector);
        self.shared.notify.notify_one();
    }

    /// Label-keyed writers: the object standing for `identity`, once known.
    pub fn labeled_key(&self, identity: &Labels) -> Option<ObjectKey> {
        self.engine().labeled_key(identity).cloned()
    }

    /// Turns of the `run` loop so far.
    #[cfg(test)]
    pub(crate) fn turns(&self) -> u64 {
        self.shared.turns.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Objects not yet as the caller wants them on the server.
    pub fn pending(&self) -> usize {
        self.engine().pending()
    }

    /// Objects whose last request failed (retried with backoff).
    pub fn failed(&self) -> usize {
        self.engine().failed()
    }

    /// When the next action is due, by the writer's clock (including the
    /// wait for the request budget).
    pub fn next_deadline(&self) -> Option<Instant> {
        let now = self.shared.clock.now();
        let next = self.engine().next_deadline(now)?;
        if next > now {
            return Some(next);
        }
        Some(self.shared.budget.next_available(now))
    }

    fn poll(&self, max: usize) -> (Vec<Action<K::Status>>, u64) {
        let mut engine = self.engine();
        let now = self.shared.clock.now();
        let mut turn = self.shared.budget.turn(now);
        (engine.poll_with(now, max, || turn.take()), engine.epoch())
    }

    fn record(&self, action: &Action<K::Status>, outcome: Outcome<K::Status>, epoch: u64) {
        {
            let mut engine = self.engine();
            // Outcomes of actions polled before a `forget_all` are not ours.
            if engine.epoch() == epoch {
                let now = self.shared.clock.now();
                engine.complete(action, outcome, now);
            }
        }
        self.refresh_gauges();
    }

    /// Runs the actions due now against `api` (up to the configured number
    /// at once, within the request budget, each bounded by
    /// [`WriterConfig::request_timeout`]) and records their outcomes.
    /// Returns how many ran.
    pub async fn step<A: StatusApi<K>>(&self, api: &A) -> usize {
        let (actions, epoch) = self.poll(usize::MAX);
        let concurrency = self.engine().config().concurrency.max(1);
        let n = actions.len();
        futures_util::stream::iter(actions)
            .for_each_concurrent(concurrency, |action| async move {
                let (action, outcome, epoch) = self.execute(api, action, epoch).await;
                self.record(&action, outcome, epoch);
            })
            .await;
        n
    }

    async fn execute<A: StatusApi<K>>(
        &self,
        api: &A,
        action: Action<K::Status>,
        epoch: u64,
    ) -> Done<K::Status> {
        let timeout = self.engine().config().request_timeout;
        let outcome = match tokio::time::timeout(timeout, self.request(api, &action)).await {
            Ok(outcome) => outcome,
            Err(_) => {
                let op = op_of(&action);
                if op == "read" {
                    self.count_read("error");
                } else {
                    self.count(op, "error");
                }
                tracing::warn!(kind = K::KIND, op, object = %target(&action), timeout = ?timeout, "status request got no answer in time; retrying with backoff");
                Outcome::Failed(Class::Timeout)
            }
        };
        (action, outcome, epoch)
    }

    fn count(&self, op: &str, result: &str) {
        self.shared
            .metrics
            .writes
            .with_label_values(&[K::KIND, op, result])
            .inc();
    }

    fn count_read(&self, result: &str) {
        self.shared
            .metrics
            .reads
            .with_label_values(&[K::KIND, result])
            .inc();
    }

    fn failed_request(
        &self,
        action: &Action<K::Status>,
        e: &kube_edge::ApiFailure,
    ) -> Outcome<K::Status> {
        let op = op_of(action);
        if op == "read" {
            self.count_read("error");
        } else {
            self.count(op, "error");
        }
        let object = target(action);
        match e.class {
            Class::Conflict => {
                tracing::info!(kind = K::KIND, op, %object, error = %e, "status object changed meanwhile; reading it again")
            }
            Class::Permanent => {
                tracing::error!(kind = K::KIND, op, %object, error = %e, "status request refused; retrying at a slow pace (or when the status changes)")
            }
            _ => {
                tracing::warn!(kind = K::KIND, op, %object, error = %e, "status request failed; retrying with backoff")
            }
        }
        Outcome::Failed(e.class)
    }

    async fn request<A: StatusApi<K>>(
        &self,
        api: &A,
        action: &Action<K::Status>,
    ) -> Outcome<K::Status> {
        match action {
            Action::Fetch(key) => match api.get(key).await {
                Ok(o) => {
                    self.count_read("ok");
                    Outcome::Fetched(o)
                }
                Err(e) => self.failed_request(action, &e),
            },
            Action::List {
                namespace,
                selector,
            } => match api.list(namespace, selector).await {
                Ok(objects) => {
                    self.count_read("ok");
                    Outcome::Listed(objects)
                }
                Err(e) => self.failed_request(action, &e),
            },
            Action::Create(key, desired) => match api.create(key, desired).await {
                Ok(returned) => {
                    self.count("create", "ok");
                    tracing::debug!(kind = K::KIND, object = %key, "created status object");
                    Outcome::Written {
                        sent: desired.status.clone(),
                        returned,
                    }
                }
                Err(e) => self.failed_request(action, &e),
            },
            Action::CreateGenerated {
                namespace,
                name,
                generate_name,
                desired,
                ..
            } => match api
                .create_generated(namespace, name.as_deref(), generate_name, desired)
                .await
            {
                Ok((key, returned)) => {
                    self.count("create", "ok");
                    tracing::debug!(kind = K::KIND, object = %key, "created status object");
                    Outcome::Created {
                        key,
                        sent: desired.status.clone(),
                        returned,
                    }
                }
                Err(e) => self.failed_request(action, &e),
            },
            Action::Apply(key, status) => match api.apply_status(key, status).await {
                Ok(Some(returned)) => {
                    self.count("apply", "ok");
                    tracing::debug!(kind = K::KIND, object = %key, "wrote status");
                    Outcome::Written {
                        sent: status.clone(),
                        returned,
                    }
                }
                Ok(None) => {
                    self.count("apply", "not_found");
                    tracing::info!(kind = K::KIND, object = %key, "status object is gone");
                    Outcome::NotFound
                }
                Err(e) => self.failed_request(action, &e),
            },
            Action::ApplyMetadata(key, labels, owner) => {
                match api.apply_metadata(key, labels, owner.as_ref()).await {
                    Ok(Some(returned)) => {
                        self.count("metadata", "ok");
                        tracing::info!(kind = K::KIND, object = %key, "updated labels and owner of status object");
                        Outcome::Written {
                            sent: returned.status.clone(),
                            returned,
                        }
                    }
                    Ok(None) => {
                        self.count("metadata", "not_found");
                        Outcome::NotFound
                    }
                    Err(e) => self.failed_request(action, &e),
                }
            }
            Action::Delete(key) => match api.delete(key).await {
                Ok(()) => {
                    self.count("delete", "ok");
                    tracing::debug!(kind = K::KIND, object = %key, "deleted status object");
                    Outcome::Deleted
                }
                Err(e) => self.failed_request(action, &e),
            },
        }
    }

    /// Writes until `shutdown` completes: starts due actions as slots free
    /// up (a request that hangs holds one slot until its deadline, never the
    /// others), then sleeps until the next deadline, a finished request or
    /// a caller handing in something new. Returns as soon as `shutdown`
    /// completes, abandoning requests in flight. Use with the system clock
    /// (deadlines are slept on with tokio's timer).
    pub async fn run<A: StatusApi<K>>(&self, api: A, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let api = &api;
        let concurrency = self.engine().config().concurrency.max(1);
        let mut in_flight = FuturesUnordered::new();
        let mut epoch = self.engine().epoch();
        loop {
            #[cfg(test)]
            self.shared
                .turns
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            {
                let mut engine = self.engine();
                if engine.epoch() != epoch {
                    // forget_all: what is in flight is no longer wanted.
                    in_flight.clear();
                    engine.abandon_in_flight();
                    epoch = engine.epoch();
                }
            }
            let room = concurrency.saturating_sub(in_flight.len());
            if room > 0 {
                let (actions, e) = self.poll(room);
                for action in actions {
                    in_flight.push(self.execute(api, action, e));
                }
            }
            let full = in_flight.len() >= concurrency;
            let sleep = async {
                match self.next_deadline().filter(|_| !full) {
                    Some(deadline) => {
                        let now = self.shared.clock.now();
                        tokio::time::sleep(deadline.saturating_duration_since(now)).await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                biased;
                () = &mut shutdown => {
                    drop(in_flight);
                    self.engine().abandon_in_flight();
                    self.refresh_gauges();
                    return;
                }
                Some((action, outcome, e)) = in_flight.next(), if !in_flight.is_empty() => {
                    self.record(&action, outcome, e);
                }
                () = self.shared.notify.notified() => {}
                () = sleep => {}
            }
        }
    }
}

fn op_of<S>(action: &Action<S>) -> &'static str {
    match action {
        Action::Fetch(_) | Action::List { .. } => "read",
        Action::Create(..) | Action::CreateGenerated { .. } => "create",
        Action::Apply(..) => "apply",
        Action::ApplyMetadata(..) => "metadata",
        Action::Delete(_) => "delete",
    }
}

fn target<S>(action: &Action<S>) -> String {
    match action {
        Action::List {
            namespace,
            selector,
        } => format!(
            "{namespace}/ ({})",
            crate::object::selector_string(selector)
        ),
        Action::CreateGenerated {
            namespace,
            name: Some(name),
            ..
        } => format!("{namespace}/{name}"),
        Action::CreateGenerated {
            namespace,
            generate_name,
            ..
        } => format!("{namespace}/{generate_name}*"),
        other => other.key().map(ToString::to_string).unwrap_or_default(),
    }
}
