//! One watch of one kind into one cache, in a task of its own that ends
//! when the [`Reflector`] is dropped, with readiness, health, and a re-list
//! on demand; objects trimmed before they are cached ([`crate::lean`]), and
//! a selection the API server may refuse (then every object is watched).

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::lean;

/// What a reflector saw, handed to its change callback after the cache was
/// updated (so the cache already holds `new`, or no longer holds a deleted
/// object, when the callback runs).
#[derive(Debug)]
pub enum Change<'a, K> {
    /// An object was added (`old` is `None`) or modified (`old` is the
    /// version the cache held before).
    Applied {
        /// The previous version, if the cache had one.
        old: Option<&'a K>,
        /// The new version.
        new: &'a K,
    },
    /// An object was deleted.
    Deleted(&'a K),
    /// A list completed and replaced the whole cache: anything may have
    /// changed (objects added, modified or deleted while the watch was
    /// down are not told one by one).
    Listed,
}

/// The reflector's task has ended (the reflector was dropped).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the {kind} watch has stopped")]
pub struct Stopped {
    /// The kind watched.
    pub kind: String,
}

/// A snapshot of a reflector's health.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    /// The kind watched.
    pub kind: String,
    /// Whether the first list is done.
    pub ready: bool,
    /// Lists completed since the start (the first one, the watcher's own
    /// re-lists after an expired resource version, and [`Reflector::relist`]s).
    pub lists_completed: u64,
    /// Whether the watch's last word was an error (it is retrying with
    /// backoff): set by an error, cleared by the next event or list.
    pub failing: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct Progress {
    /// Lists completed.
    lists: u64,
    /// The highest re-list request whose list has completed.
    served: u64,
}

#[derive(Debug)]
struct Shared {
    kind: String,
    /// Re-list requests so far (a generation number).
    requested: AtomicU64,
    wake: Notify,
    failing: AtomicBool,
}

/// Aborts the task when dropped.
#[derive(Debug)]
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Slowest retry of a failed watch: the next attempt after an outage ends
/// comes at most this long (plus jitter) after the API server answers again.
pub const WATCH_BACKOFF_MAX: Duration = Duration::from_secs(8);

/// How a failed watch retries: 0.4 s doubling to [`WATCH_BACKOFF_MAX`],
/// each delay jittered up to twice itself, reset by any event (kube's `StreamBackoff`). kube's default
/// (client-go's: 0.8 s to 30 s, reset only after 2 min) kept the speakers'
/// watches away 15-75 s after a 10-20 s API server outage (issue 27,
/// bench-bgp-faults); a restarted API server also answers 403 for a few
/// seconds while its authorizer's cache fills, which the doubling counts
/// as more failures. A refused connection costs an API server nothing, and
/// a busy one answers 429, after which each watch waits up to 8 s more.
pub fn watch_backoff() -> kube::runtime::watcher::ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(400))
        .with_max_delay(WATCH_BACKOFF_MAX)
        .with_factor(2.0)
        .without_max_times()
        .with_jitter()
        .into()
}

/// A watch of one kind feeding a cache ([`Store`]), run by a task of its own
/// (spawned on the current Tokio runtime) that ends when this is dropped.
///
/// The watch retries with [`watch_backoff`] (0.4 s doubling to 8 s,
/// jittered, from the start again after any event); a re-list replaces the
/// cache atomically when it completes, so readers never see a half-listed
/// cache.
#[derive(Debug)]
pub struct Reflector<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    shared: Arc<Shared>,
    progress: watch::Receiver<Progress>,
    _task: AbortOnDrop,
}

impl<K> Reflector<K>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug + Send + Sync + 'static,
{
    /// Starts watching `api` with `config`, calling `on_change` for every
    /// change once the cache holds it (with the cache, for callbacks that
    /// index its objects). `on_change` runs in the reflector's task: keep it
    /// short (signal a queue, update an index). Objects are cached without
    /// their managed fields ([`lean::metadata`]).
    pub fn new(
        api: Api<K>,
        config: watcher::Config,
        on_change: impl FnMut(Change<'_, K>, &Store<K>) + Send + 'static,
    ) -> Self {
        Self::with_trim(api, config, lean::metadata::<K>, on_change)
    }

    /// [`Reflector::new`], with `trim` applied to every object before the
    /// cache and `on_change` see it (what a cache keeps of its kind:
    /// [`lean`]).
    pub fn with_trim(
        api: Api<K>,
        config: watcher::Config,
        trim: fn(&mut K),
        on_change: impl FnMut(Change<'_, K>, &Store<K>) + Send + 'static,
    ) -> Self {
        Self::with_fallback(api, config, None, trim, on_change)
    }

    /// [`Reflector::with_trim`], watching with `config` unless the API
    /// server rejects its list as a bad request (a field selector it does
    /// not support, e.g. `spec.type` of Services before Kubernetes had it):
    /// then with `fallback`, for the reflector's life (said once, as a
    /// warning).
    pub fn with_fallback(
        api: Api<K>,
        config: watcher::Config,
        fallback: Option<watcher::Config>,
        trim: fn(&mut K),
        on_change: impl FnMut(Change<'_, K>, &Store<K>) + Send + 'static,
    ) -> Self {
        let writer = Writer::<K>::default();
        let store = writer.as_reader();
        let shared = Arc::new(Shared {
            kind: K::kind(&()).into_owned(),
            requested: AtomicU64::new(0),
            wake: Notify::new(),
            failing: AtomicBool::new(false),
        });
        let (progress_tx, progress) = watch::channel(Progress::default());
        let task = tokio::spawn(run(
            api,
            Selection {
                config,
                fallback,
                trim,
            },
            writer,
            shared.clone(),
            progress_tx,
            on_change,
        ));
        Self {
            store,
            shared,
            progress,
            _task: AbortOnDrop(task),
        }
    }

    /// A reflector that signals nothing.
    pub fn quiet(api: Api<K>, config: watcher::Config) -> Self {
        Self::new(api, config, |_, _| {})
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Reflector<K> {
    /// The cache (cheap to clone; readers share it with the task).
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// The kind watched.
    pub fn kind(&self) -> &str {
        &self.shared.kind
    }

    /// Whether the first list is done.
    pub fn is_ready(&self) -> bool {
        self.progress.borrow().lists > 0
    }

    /// Waits for the first list.
    pub fn ready(&self) -> impl Future<Output = Result<(), Stopped>> + Send + 'static {
        let mut rx = self.progress.clone();
        let stopped = self.stopped();
        async move {
            rx.wait_for(|p| p.lists > 0)
                .await
                .map(|_| ())
                .map_err(|_| stopped)
        }
    }

    /// Lists completed so far (an epoch: it grows by one per list).
    pub fn lists_completed(&self) -> u64 {
        self.progress.borrow().lists
    }

    /// Whether the watch is failing (retrying with backoff); see
    /// [`Health::failing`].
    pub fn failing(&self) -> bool {
        self.shared.failing.load(Ordering::Relaxed)
    }

    /// A snapshot of the reflector's health.
    pub fn health(&self) -> Health {
        Health {
            kind: self.shared.kind.clone(),
            ready: self.is_ready(),
            lists_completed: self.lists_completed(),
            failing: self.failing(),
        }
    }

    fn stopped(&self) -> Stopped {
        Stopped {
            kind: self.shared.kind.clone(),
        }
    }

    /// Asks for a fresh list now (the watch restarts at once, even from a
    /// backoff) and returns a future that completes when a list started
    /// after this call has replaced the cache. Requests made while one is
    /// pending share its list. The future waits as long as the API server
    /// is unreachable: put a deadline on it. It fails only when the
    /// reflector is dropped.
    pub fn relist(&self) -> impl Future<Output = Result<(), Stopped>> + Send + 'static {
        let generation = self.shared.requested.fetch_add(1, Ordering::SeqCst) + 1;
        self.shared.wake.notify_one();
        let mut rx = self.progress.clone();
        let stopped = self.stopped();
        async move {
            rx.wait_for(|p| p.served >= generation)
                .await
                .map(|_| ())
                .map_err(|_| stopped)
        }
    }
}

/// Whether the API server refused the list itself as a bad request (400):
/// the answer to a field selector it does not know ("field label not
/// supported").
fn list_refused(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 400)
}

/// What a reflector watches and keeps.
struct Selection<K> {
    config: watcher::Config,
    /// Watched with instead, when the API server refuses `config`.
    fallback: Option<watcher::Config>,
    trim: fn(&mut K),
}

async fn run<K>(
    api: Api<K>,
    selection: Selection<K>,
    mut writer: Writer<K>,
    shared: Arc<Shared>,
    progress: watch::Sender<Progress>,
    mut on_change: impl FnMut(Change<'_, K>, &Store<K>) + Send + 'static,
) where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug + Send + Sync + 'static,
{
    let store = writer.as_reader();
    let kind = shared.kind.clone();
    let Selection {
        mut config,
        mut fallback,
        trim,
    } = selection;
    loop {
        // Every request up to this generation is served by the list this
        // stream starts with (it starts after they were made).
        let generation = shared.requested.load(Ordering::SeqCst);
        let mut stream = watcher(api.clone(), config.clone())
            .modify(trim)
            .backoff(watch_backoff())
            .boxed();
        loop {
            let event = tokio::select! {
                biased;
                () = shared.wake.notified() => {
                    if shared.requested.load(Ordering::SeqCst) > generation {
                        tracing::debug!(kind, "re-list requested: restarting the watch");
                        break;
                    }
                    continue;
                }
                event = stream.next() => event,
            };
            let Some(event) = event else {
                // The watcher never ends by itself; start another one if it does.
                break;
            };
            let event = match event {
                Ok(e) => e,
                Err(e) if fallback.is_some() && list_refused(&e) => {
                    tracing::warn!(
                        kind,
                        field_selector = config.field_selector.as_deref().unwrap_or_default(),
                        error = %e,
                        "the API server refuses this selection: watching without it"
                    );
                    config = fallback.take().expect("checked");
                    break;
                }
                Err(e) => {
                    if !shared.failing.swap(true, Ordering::Relaxed) {
                        tracing::warn!(kind, error = %e, "watch failed; retrying with backoff");
                    } else {
                        tracing::debug!(kind, error = %e, "watch still failing");
                    }
                    continue;
                }
            };
            if shared.failing.swap(false, Ordering::Relaxed) {
                tracing::info!(kind, "watch recovered");
            }
            match &event {
                watcher::Event::Apply(obj) => {
                    let old = store.get(&ObjectRef::from_obj(obj));
                    writer.apply_watcher_event(&event);
                    on_change(
                        Change::Applied {
                            old: old.as_deref(),
                            new: obj,
                        },
                        &store,
                    );
                }
                watcher::Event::Delete(obj) => {
                    writer.apply_watcher_event(&event);
                    on_change(Change::Deleted(obj), &store);
                }
                watcher::Event::Init | watcher::Event::InitApply(_) => {
                    writer.apply_watcher_event(&event);
                }
                watcher::Event::InitDone => {
                    writer.apply_watcher_event(&event);
                    on_change(Change::Listed, &store);
                    progress.send_modify(|p| {
                        p.lists += 1;
                        p.served = p.served.max(generation);
                    });
                    tracing::debug!(kind, objects = store.len(), "listed");
                }
            }
        }
    }
}

#[cfg(test)]
mod backoff_tests {
    use kube::runtime::utils::Backoff;

    use super::*;

    /// A watch failing through a long outage retries at most every 16 s
    /// (8 s jittered up to twice), and from 0.4-0.8 s again after an event.
    #[test]
    fn a_failing_watch_retries_within_seconds_however_long_the_outage() {
        for _ in 0..50 {
            let mut b = watch_backoff();
            let first = b.next().unwrap();
            assert!(first >= Duration::from_millis(400) && first <= Duration::from_millis(800));
            let later: Vec<Duration> = (0..40).map(|_| b.next().unwrap()).collect();
            assert!(
                later.iter().all(|d| *d <= 2 * WATCH_BACKOFF_MAX),
                "{later:?}"
            );
            assert!(
                later[10..].iter().all(|d| *d >= WATCH_BACKOFF_MAX),
                "{later:?}"
            );
            b.reset();
            assert!(b.next().unwrap() <= Duration::from_millis(800));
        }
    }
}
