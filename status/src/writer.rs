//! The writer: a shared [`Engine`] callers hand desired statuses to, and the
//! loop that runs its actions against a [`StatusApi`].

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::StreamExt;
use tokio::sync::Notify;

use crate::api::StatusApi;
use crate::clock::Clock;
use crate::engine::{Action, Engine, Outcome, Seen, SetResult, WriterConfig};
use crate::metrics::Metrics;
use crate::object::{Desired, ObjectKey, StatusObject};

struct Shared<K: StatusObject> {
    engine: Mutex<Engine<K>>,
    notify: Notify,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
}

/// The status writer of one kind. Cheap to clone; every method but
/// [`StatusWriter::run`] and [`StatusWriter::step`] returns at once.
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

impl<K: StatusObject> StatusWriter<K> {
    /// A writer with `config`'s timing, deciding with `clock`, counting in `metrics`.
    pub fn new(config: WriterConfig, clock: Arc<dyn Clock>, metrics: Metrics) -> Self {
        Self {
            shared: Arc::new(Shared {
                engine: Mutex::new(Engine::new(config)),
                notify: Notify::new(),
                clock,
                metrics,
            }),
        }
    }

    fn engine(&self) -> MutexGuard<'_, Engine<K>> {
        // The engine is left consistent by every method: a panic elsewhere
        // while holding the lock does not make it unusable.
        self.shared.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The caller wants `key` to be `desired`. Never blocks.
    pub fn set_desired(&self, key: ObjectKey, desired: Desired<K::Status>) {
        let r = self.engine().set_desired(key, desired);
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
            }
            SetResult::Pending => self.shared.notify.notify_one(),
        }
    }

    /// The caller no longer wants `key`: deleted when the writer owns such
    /// objects, else forgotten. Never blocks.
    pub fn remove(&self, key: &ObjectKey) {
        self.engine().remove(key);
        self.shared.notify.notify_one();
    }

    /// Deletes every object seen on the server that the caller has not asked
    /// for (see [`Engine::prune_unwanted`]). Returns how many.
    pub fn prune_unwanted(&self) -> usize {
        let n = self.engine().prune_unwanted();
        self.shared.notify.notify_one();
        n
    }

    /// Tells the writer what the server has (from a watch): `None` when the
    /// object is gone. Never blocks.
    pub fn observe(&self, key: ObjectKey, status: Option<K::Status>) {
        self.engine().observe(key, status);
        self.shared.notify.notify_one();
    }

    /// Tells the writer the complete list of objects on the server.
    pub fn observe_all(&self, objects: impl IntoIterator<Item = (ObjectKey, K::Status)>) {
        self.engine().observe_all(objects);
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

    /// Objects not yet as the caller wants them on the server.
    pub fn pending(&self) -> usize {
        self.engine().pending()
    }

    /// When the next action is due, by the writer's clock.
    pub fn next_deadline(&self) -> Option<std::time::Instant> {
        let now = self.shared.clock.now();
        self.engine().next_deadline(now)
    }

    /// Runs the actions due now against `api` (up to the configured number
    /// at once) and records their outcomes. Returns how many ran.
    pub async fn step<A: StatusApi<K>>(&self, api: &A) -> usize {
        let (actions, concurrency) = {
            let mut engine = self.engine();
            let now = self.shared.clock.now();
            (engine.poll(now), engine.config().concurrency.max(1))
        };
        let n = actions.len();
        futures_util::stream::iter(actions)
            .for_each_concurrent(concurrency, |action| async move {
                let outcome = self.execute(api, &action).await;
                let now = self.shared.clock.now();
                self.engine().complete(&action, outcome, now);
            })
            .await;
        n
    }

    async fn execute<A: StatusApi<K>>(
        &self,
        api: &A,
        action: &Action<K::Status>,
    ) -> Outcome<K::Status> {
        let m = &self.shared.metrics;
        let count = |op: &str, result: &str| {
            m.writes.with_label_values(&[K::KIND, op, result]).inc();
        };
        match action {
            Action::Fetch(key) => match api.get(key).await {
                Ok(s) => {
                    m.reads.with_label_values(&[K::KIND, "ok"]).inc();
                    Outcome::Fetched(s)
                }
                Err(e) => {
                    m.reads.with_label_values(&[K::KIND, "error"]).inc();
                    tracing::warn!(kind = K::KIND, object = %key, error = %e, "reading status object failed; retrying with backoff");
                    Outcome::Failed
                }
            },
            Action::Create(key, desired) => match api.create(key, desired).await {
                Ok(returned) => {
                    count("create", "ok");
                    tracing::debug!(kind = K::KIND, object = %key, "created status object");
                    Outcome::Written {
                        sent: desired.status.clone(),
                        returned,
                    }
                }
                Err(e) => {
                    count("create", "error");
                    tracing::warn!(kind = K::KIND, object = %key, error = %e, "creating status object failed; retrying with backoff");
                    Outcome::Failed
                }
            },
            Action::Apply(key, status) => match api.apply_status(key, status).await {
                Ok(Some(returned)) => {
                    count("apply", "ok");
                    tracing::debug!(kind = K::KIND, object = %key, "wrote status");
                    Outcome::Written {
                        sent: status.clone(),
                        returned,
                    }
                }
                Ok(None) => {
                    count("apply", "not_found");
                    tracing::info!(kind = K::KIND, object = %key, "status object is gone");
                    Outcome::NotFound
                }
                Err(e) => {
                    count("apply", "error");
                    tracing::warn!(kind = K::KIND, object = %key, error = %e, "writing status failed; retrying with backoff");
                    Outcome::Failed
                }
            },
            Action::Delete(key) => match api.delete(key).await {
                Ok(()) => {
                    count("delete", "ok");
                    tracing::debug!(kind = K::KIND, object = %key, "deleted status object");
                    Outcome::Deleted
                }
                Err(e) => {
                    count("delete", "error");
                    tracing::warn!(kind = K::KIND, object = %key, error = %e, "deleting status object failed; retrying with backoff");
                    Outcome::Failed
                }
            },
        }
    }

    /// Writes until `shutdown` completes: runs due actions, then sleeps until
    /// the next deadline or until a caller hands in something new. Use with
    /// the system clock (deadlines are slept on with tokio's timer).
    pub async fn run<A: StatusApi<K>>(&self, api: A, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            self.step(&api).await;
            let sleep = async {
                match self.next_deadline() {
                    Some(deadline) => {
                        let now = self.shared.clock.now();
                        tokio::time::sleep(deadline.saturating_duration_since(now)).await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = &mut shutdown => return,
                () = self.shared.notify.notified() => {}
                () = sleep => {}
            }
        }
    }
}
