//! The controller's loop: one task owns the configuration, the allocator and
//! the Service queue, so nothing is shared and every decision is made on one
//! consistent view.
//!
//! Inputs: configuration changes (pools, communities, namespaces; with
//! [`OverlapInputs`], also peers, BFD profiles, advertisements and Nodes, for
//! the `NotAnnounceable` warnings on Services), Service
//! changes (keys, or a full pass after a re-list, coalesced by
//! [`ServiceChanges`]), leadership ([`Leadership`]: a term and its end), and
//! retry deadlines. Outputs: the `ConfigurationState` and `IPAddressPool`
//! statuses (through the status writers), Service writes and events (through
//! [`ServiceApi`]).
//!
//! What keeps it safe at the edge:
//!
//! - every request has a deadline, never longer than what is left of the
//!   leadership term it is made for; a write is made only while the term it
//!   was decided in still holds (fenced by term number and end), and only on
//!   the `resourceVersion` the decision was based on (409: re-read and decide
//!   again);
//! - a failed write backs off per Service (exponential with jitter; minutes
//!   for a permanent 4xx such as a webhook's denial or missing RBAC), the
//!   Service keeps its assignment, and an identical batch of events is not
//!   published again;
//! - a new term starts from a fresh list of the Services, not from a store
//!   that may be stale; a lost term drops every pending write, every desired
//!   pool status and the allocator's gauges;
//! - the loop beats a [`Heartbeat`] at every turn and every Service, so
//!   `/healthz` fails when it is wedged.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use config::api::v1beta1::{
    BFDProfile, BGPAdvertisement, Community, ConfigurationState, IPAddressPool,
    IPAddressPoolStatus, L2Advertisement,
};
use config::api::v1beta2::BGPPeer;
use k8s_openapi::api::core::v1::{Namespace, Node, Service as KubeService};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube_edge::{Backoff, Class, Retries};
use status::configuration_state::{self, Component};
use status::{Desired, ObjectKey, StatusWriter};
use tokio::sync::watch;

use crate::edge::ServiceApi;
use crate::leader::Leadership;
use crate::metrics::ControllerMetrics;
use crate::pool_reconciler::{self, Pass, PoolReconciler};
use crate::service::{self, Event, ServiceReconciler, SyncState};
use daemon::health::Heartbeat;

/// What changed among the Services since the last call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Services (`namespace/name`) that changed or were deleted.
    pub keys: BTreeSet<String>,
    /// Every Service must be processed (a re-list, or too many keys to keep).
    pub full: bool,
}

/// The Service changes the loop consumes: coalesced by key, never an
/// unbounded queue.
pub trait ServiceChanges: Send {
    /// Waits for changes and takes all of them; `None` when the source ended.
    fn next(&mut self) -> impl Future<Output = Option<Changes>> + Send;

    /// Asks for a fresh list of every Service; completes once the Service
    /// store holds a list made after the call.
    fn relist(&mut self) -> impl Future<Output = ()> + Send;
}

/// Timing of the loop.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Deadline of one API request (less when the term ends sooner).
    pub request_timeout: Duration,
    /// Backoff of failed Service writes.
    pub backoff: Backoff,
    /// The loop turns at least this often (to beat the heartbeat).
    pub tick: Duration,
    /// Delay of a full pass deferred because passes kept asking for more.
    pub deferred_pass: Duration,
    /// Pause after a configuration change, to let a burst settle.
    pub settle: Duration,
    /// How often a new term waiting for its fresh list checks that it still
    /// leads (and says it is waiting); the list goes on meanwhile.
    pub relist_timeout: Duration,
    /// How many full passes may follow each other before the loop defers the
    /// next one by `deferred_pass` (a pass that keeps asking for another one
    /// is a bug; this keeps it from spinning, never from running).
    pub max_chained_passes: usize,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            request_timeout: kube_edge::REQUEST_TIMEOUT,
            backoff: Backoff::default(),
            tick: Duration::from_secs(5),
            deferred_pass: Duration::from_secs(1),
            settle: Duration::from_millis(50),
            relist_timeout: Duration::from_secs(30),
            max_chained_passes: 3,
        }
    }
}

/// Conflicts in a row on one Service before it backs off like a failure.
const MAX_CONFLICTS: u32 = 3;

/// What the loop reads.
pub struct Inputs<C> {
    pub pools: Store<IPAddressPool>,
    pub communities: Store<Community>,
    pub namespaces: Store<Namespace>,
    pub services: Store<KubeService>,
    /// Coalesced changes of the pools, communities and namespaces (and of
    /// `overlap`'s kinds when given).
    pub config_changed: cluster_view::Changes,
    pub service_changes: C,
    pub leader: watch::Receiver<Leadership>,
    /// The rest of the configuration and the Nodes, to warn on the Services
    /// whose pool no advertisement can announce (`None`: no such events).
    pub overlap: Option<OverlapInputs>,
}

/// What the selector warnings (`config::overlap`) are computed from, with
/// the pools, communities and namespaces.
pub struct OverlapInputs {
    pub peers: Store<BGPPeer>,
    pub bfd_profiles: Store<BFDProfile>,
    pub bgp_advertisements: Store<BGPAdvertisement>,
    pub l2_advertisements: Store<L2Advertisement>,
    pub nodes: Store<Node>,
}

/// The reason of the Warning event on a Service whose pool's addresses are
/// not announced, or not to every peer meant, because selectors cannot
/// overlap (`config::overlap::selector_warnings`).
pub const REASON_NOT_ANNOUNCEABLE: &str = "NotAnnounceable";

/// What the loop writes through.
pub struct Outputs<A> {
    pub namespace: String,
    pub owner: Option<OwnerReference>,
    pub state_writer: StatusWriter<ConfigurationState>,
    pub pool_writer: StatusWriter<IPAddressPool>,
    pub api: A,
    pub ready: Arc<AtomicBool>,
    pub heartbeat: Arc<Heartbeat>,
    pub lb_class: String,
    pub metrics: ControllerMetrics,
}

/// A Service write the store has not caught up with yet (or a fresher read
/// after a conflict): the object, and the resourceVersion the store had
/// before it.
struct Written {
    before: Option<String>,
    object: Arc<KubeService>,
}

/// Why a pass stopped early.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    /// The term the pass acts for is over: write nothing more.
    TermOver,
}

pub struct Driver<C, A> {
    inp: Inputs<C>,
    out: Outputs<A>,
    timing: Timing,
    pools: PoolReconciler,
    services: ServiceReconciler,
    /// The term the loop acts for (`None`: standing by).
    term: Option<u64>,
    pending: BTreeSet<String>,
    full_pass: bool,
    /// A full pass deferred to this instant.
    deferred_until: Option<tokio::time::Instant>,
    written: HashMap<String, Written>,
    retries: Retries<String>,
    conflicts: HashMap<String, u32>,
    /// The last batch of events published per Service.
    published: HashMap<String, Vec<Event>>,
    /// The selector warnings of the current configuration, by pool.
    pool_warnings: BTreeMap<String, Vec<String>>,
    /// The `NotAnnounceable` events published per Service (no entry: none
    /// stands), so that each is published once per change.
    warned: HashMap<String, Vec<Event>>,
    first_pass_done: bool,
}

/// The `NotAnnounceable` events of a Service whose address comes from
/// `pool`, given the selector warnings by pool.
pub fn not_announceable(pool: Option<&str>, by_pool: &BTreeMap<String, Vec<String>>) -> Vec<Event> {
    let Some(pool) = pool else { return Vec::new() };
    by_pool
        .get(pool)
        .into_iter()
        .flatten()
        .map(|w| Event {
            warning: true,
            reason: REASON_NOT_ANNOUNCEABLE,
            message: format!("its address comes from IPAddressPool {pool}: {w}"),
        })
        .collect()
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

impl<C: ServiceChanges, A: ServiceApi> Driver<C, A> {
    pub fn new(inp: Inputs<C>, out: Outputs<A>, timing: Timing) -> Self {
        Self {
            inp,
            out,
            timing,
            pools: PoolReconciler::new(),
            services: ServiceReconciler::new(),
            term: None,
            pending: BTreeSet::new(),
            full_pass: true,
            deferred_until: None,
            written: HashMap::new(),
            retries: Retries::new(timing.backoff),
            conflicts: HashMap::new(),
            published: HashMap::new(),
            pool_warnings: BTreeMap::new(),
            warned: HashMap::new(),
            first_pass_done: false,
        }
    }

    /// Runs until the inputs end (never in practice).
    pub async fn run(mut self) -> anyhow::Result<()> {
        self.inp.pools.wait_until_ready().await?;
        self.inp.communities.wait_until_ready().await?;
        self.inp.namespaces.wait_until_ready().await?;
        self.inp.services.wait_until_ready().await?;
        if let Some(o) = &self.inp.overlap {
            o.peers.wait_until_ready().await?;
            o.bfd_profiles.wait_until_ready().await?;
            o.bgp_advertisements.wait_until_ready().await?;
            o.l2_advertisements.wait_until_ready().await?;
            o.nodes.wait_until_ready().await?;
        }
        self.out.heartbeat.beat();
        let leadership = *self.inp.leader.borrow_and_update();
        self.reconcile_config();
        if leadership.is_leader() {
            self.start_term(leadership.term).await;
        } else {
            tracing::info!("not leading: waiting for the lease before allocating");
        }
        loop {
            self.out.heartbeat.beat();
            if self.term.is_none() {
                let l = *self.inp.leader.borrow();
                if l.leads(l.term, now()) {
                    self.start_term(l.term).await;
                }
            }
            if self.term.is_some() {
                if self.process().await == Err(Stop::TermOver) {
                    self.end_term("the lease term ended during a pass");
                }
            } else {
                self.pending.clear();
                self.retries.clear();
            }
            self.update_pool_statuses();
            if !self.out.ready.load(Ordering::Acquire)
                && (self.first_pass_done || self.term.is_none())
            {
                // Ready once the first full pass over existing Services is
                // done (a standby is ready as soon as its configuration is).
                self.out.ready.store(true, Ordering::Release);
                tracing::info!(first_pass = self.first_pass_done, "ready");
            }
            let next_retry = self
                .retries
                .next_due_after(now())
                .map(tokio::time::Instant::from_std);
            let wake = [next_retry, self.deferred_until]
                .into_iter()
                .flatten()
                .min();
            tokio::select! {
                _ = self.inp.config_changed.next() => {
                    // Let a burst (e.g. `kubectl apply` of many objects) settle.
                    tokio::time::sleep(self.timing.settle).await;
                    self.reconcile_config();
                }
                changes = self.inp.service_changes.next() => {
                    let Some(changes) = changes else { return Ok(()) };
                    self.pending.extend(changes.keys);
                    self.full_pass |= changes.full;
                }
                changed = self.inp.leader.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    let l = *self.inp.leader.borrow_and_update();
                    match (self.term, l.is_leader()) {
                        (Some(t), true) if t == l.term => {} // a renewal
                        (Some(_), true) => {
                            self.end_term("a new lease term began");
                            self.start_term(l.term).await;
                        }
                        // Started at the top of the loop.
                        (None, true) => {}
                        (Some(_), false) => self.end_term("lost the lease"),
                        (None, false) => {}
                    }
                }
                _ = sleep_until(wake) => {
                    let at = now();
                    self.pending.extend(self.retries.due(at));
                    if self.deferred_until.is_some_and(|d| d <= tokio::time::Instant::from_std(at)) {
                        self.deferred_until = None;
                    }
                }
                _ = tokio::time::sleep(self.timing.tick) => {}
            }
        }
    }

    /// A new term: start over from a fresh list of the Services (the store
    /// may be stale: its watch can be in backoff), as after a restart. When
    /// the list does not come in time, the term is not started (the loop
    /// tries again).
    async fn start_term(&mut self, term: u64) {
        tracing::info!(
            term,
            "leading: waiting for a fresh list of the Services before allocating"
        );
        // The list goes on as long as the term lasts: asking again would
        // restart the watch and cut the list in progress (at 100k Services
        // a list may take longer than `relist_timeout`).
        let started = tokio::time::Instant::now();
        let relist = self.inp.service_changes.relist();
        tokio::pin!(relist);
        loop {
            tokio::select! {
                () = &mut relist => break,
                () = tokio::time::sleep(self.timing.relist_timeout) => {
                    // waiting on the API server is not a wedged loop
                    self.out.heartbeat.beat();
                    if !self.inp.leader.borrow().leads(term, now()) {
                        tracing::warn!(term, "the lease term ended before the list came");
                        return;
                    }
                    tracing::warn!(
                        term,
                        waited = ?started.elapsed(),
                        "still waiting for the list of the Services (the API server away, or a large cluster); it goes on"
                    );
                }
            }
        }
        // The term may have ended while listing.
        if !self.inp.leader.borrow().leads(term, now()) {
            tracing::warn!(term, "the lease term ended before the list came");
            return;
        }
        tracing::info!(
            term,
            "rebuilding the allocation from the Services' status; allocating"
        );
        self.term = Some(term);
        self.services = ServiceReconciler::new();
        if let Some(cfg) = self.pools.last_valid() {
            self.services.set_config(cfg);
        }
        self.written.clear();
        self.conflicts.clear();
        self.published.clear();
        self.warned.clear();
        self.full_pass = true;
    }

    /// The end of a term: nothing decided in it is written any more.
    fn end_term(&mut self, why: &str) {
        if let Some(term) = self.term.take() {
            tracing::warn!(term, reason = why, "allocation stopped");
        }
        // Forget every desired pool status (nothing is deleted; a write in
        // flight is abandoned) and the allocator's gauges: the next leader
        // owns them.
        for pool in self.services.allocator().pool_names() {
            self.out.metrics.remove_pool(pool);
        }
        self.out.pool_writer.forget_all();
        self.services = ServiceReconciler::new();
        self.written.clear();
        self.pending.clear();
        self.retries.clear();
        self.conflicts.clear();
        self.published.clear();
        self.warned.clear();
        self.deferred_until = None;
    }

    /// What is left of the current term (`None`: it is over, or none).
    fn fence(&self) -> Option<Duration> {
        let term = self.term?;
        self.inp.leader.borrow().remaining(term, now())
    }

    /// The deadline of the next request: the request timeout, or what is
    /// left of the term when less.
    fn deadline(&self) -> Result<Duration, Stop> {
        let left = self.fence().ok_or(Stop::TermOver)?;
        Ok(left.min(self.timing.request_timeout))
    }

    /// Parses the pool configuration, reports it, and applies a new valid
    /// one to the allocator (then every Service is processed again).
    fn reconcile_config(&mut self) {
        let pools = self.inp.pools.state();
        // The writer of the pools' status learns what the server holds from the
        // same cache (no second watch of the pools).
        self.out
            .pool_writer
            .observe_all_objects(pools.iter().map(|p| {
                (
                    ObjectKey::new(
                        p.metadata.namespace.clone().unwrap_or_default(),
                        p.metadata.name.clone().unwrap_or_default(),
                    ),
                    status::Observed::status(p.status.clone().unwrap_or_default()),
                )
            }));
        let resources = pool_reconciler::resources(
            pools,
            self.inp.communities.state(),
            self.inp.namespaces.state(),
        );
        self.reconcile_warnings(&resources);
        let before = self.pools.last_valid().cloned();
        let result = match self.pools.reconcile(&resources) {
            Pass::Unchanged => None,
            Pass::Valid => {
                let pools = self.pools.last_valid().map_or(0, |c| c.pools.len());
                tracing::info!(pools, "configuration is valid");
                Some(Ok(()))
            }
            Pass::Invalid(e) => {
                if self.pools.last_valid().is_some() {
                    tracing::error!(
                        error = e,
                        "configuration is invalid; keeping the last valid configuration"
                    );
                } else {
                    tracing::error!(
                        error = e,
                        "configuration is invalid; no valid configuration seen yet"
                    );
                }
                Some(Err(e))
            }
        };
        if let Some(result) = &result {
            self.out.metrics.config_stale(result.is_err());
            self.out
                .metrics
                .config_loaded(self.pools.last_valid().is_some());
        }
        if let Some(result) = result {
            let component = Component::Controller;
            self.out.state_writer.set_desired(
                component.key(&self.out.namespace),
                configuration_state::desired(
                    &component,
                    &result,
                    self.out.owner.clone(),
                    configuration_state::now(),
                ),
            );
        }
        let after = self.pools.last_valid();
        if after.is_some() && (after != before.as_ref() || !self.services.config_loaded()) {
            let cfg = after.cloned().unwrap_or_default();
            if self.term.is_some() {
                let report = self.services.set_config(&cfg);
                for (svc, ips, pool) in &report.dropped {
                    tracing::info!(
                        service = svc,
                        ?ips,
                        pool,
                        "addresses left every pool; the Service is allocated again"
                    );
                }
            }
            self.full_pass = true;
            // A new configuration is worth trying what failed before.
            self.retries.clear();
        }
    }

    /// The Service as last known: our own write (or a fresher read) when
    /// the store has not caught up with it yet.
    fn current(&mut self, key: &str) -> Option<Arc<KubeService>> {
        let (ns, name) = key.split_once('/')?;
        let stored = self
            .inp
            .services
            .get(&ObjectRef::<KubeService>::new(name).within(ns));
        if let Some(w) = self.written.get(key) {
            let stale = match &stored {
                Some(s) => s.resource_version() == w.before,
                None => w.before.is_none(),
            };
            if stale {
                return Some(w.object.clone());
            }
            self.written.remove(key);
        }
        stored
    }

    async fn process(&mut self) -> Result<(), Stop> {
        if !self.services.config_loaded() {
            // MetalLB skips Services until a configuration is loaded: that
            // is the whole pass.
            self.pending.clear();
            self.first_pass_done = true;
            return Ok(());
        }
        let mut passes = 0;
        loop {
            if self.full_pass && self.deferred_until.is_none() {
                if passes < self.timing.max_chained_passes {
                    self.full_pass = false;
                    passes += 1;
                    self.full_pass_once().await?;
                    continue;
                }
                // Deferred, never dropped: the flag stays set.
                self.deferred_until = Some(tokio::time::Instant::now() + self.timing.deferred_pass);
                tracing::warn!(
                    passes,
                    retry_in = ?self.timing.deferred_pass,
                    "full passes keep asking for another; deferring the next one"
                );
            }
            let Some(key) = self.pending.pop_first() else {
                return Ok(());
            };
            if self.retries.waiting(&key, now()) {
                // Its backoff decides when it is tried again.
                continue;
            }
            self.sync_one(&key).await?;
        }
    }

    /// Every Service once: deleted ones first (they free addresses), then
    /// MetalLB's order (those with addresses first).
    async fn full_pass_once(&mut self) -> Result<(), Stop> {
        // the store's Arcs: no Service is copied (at 100k Services a deep
        // copy of each was most of a full pass's memory)
        let all: Vec<Arc<KubeService>> = self.inp.services.state();
        let present: BTreeSet<String> = all.iter().map(|s| service::key_of(s)).collect();
        let mut keys: Vec<String> = self
            .services
            .allocator()
            .assignments()
            .map(|(k, _)| k.to_owned())
            .filter(|k| !present.contains(k))
            .collect();
        keys.sort();
        keys.extend(
            service::reprocess_order(all.iter().map(|s| s.as_ref()))
                .into_iter()
                .map(service::key_of),
        );
        self.pending.clear();
        let at = now();
        for key in keys {
            if self.retries.waiting(&key, at) {
                continue;
            }
            self.sync_one(&key).await?;
        }
        self.first_pass_done = true;
        Ok(())
    }

    async fn sync_one(&mut self, key: &str) -> Result<(), Stop> {
        self.out.heartbeat.beat();
        if self.fence().is_none() {
            return Err(Stop::TermOver);
        }
        let svc = self.current(key);
        let svc = svc.filter(|s| service::handles_class(s, &self.out.lb_class));
        let outcome = self.services.sync(key, svc.as_deref());
        match outcome.state {
            SyncState::ReprocessAll => self.full_pass = true,
            SyncState::ErrorNoRetry => self.out.metrics.update_error(),
            SyncState::Success => {}
        }
        let Some(svc) = svc else {
            self.written.remove(key);
            self.retries.succeeded(&key.to_owned());
            self.conflicts.remove(key);
            self.published.remove(key);
            self.warned.remove(key);
            return Ok(());
        };
        for e in &outcome.events {
            if e.warning {
                tracing::warn!(service = key, reason = e.reason, "{}", e.message);
            } else {
                tracing::info!(service = key, reason = e.reason, "{}", e.message);
            }
        }
        if !outcome.events.is_empty() && self.published.get(key) != Some(&outcome.events) {
            let timeout = self.deadline()?;
            self.out.api.publish(&svc, &outcome.events, timeout).await;
            self.published
                .insert(key.to_owned(), outcome.events.clone());
        }
        self.warn_not_announceable(key, &svc).await?;
        if outcome.state != SyncState::ErrorNoRetry {
            self.out.metrics.update_ok();
        }
        if outcome.update.is_empty() {
            self.retries.succeeded(&key.to_owned());
            self.conflicts.remove(key);
            return Ok(());
        }
        let timeout = self.deadline()?;
        match self.out.api.write(&svc, &outcome.update, timeout).await {
            Ok(Some(object)) => {
                tracing::info!(service = key, ingress = ?outcome.update.ingress, "updated service object");
                self.written.insert(
                    key.to_owned(),
                    Written {
                        before: self.stored_version(key),
                        object: Arc::new(object),
                    },
                );
                self.retries.succeeded(&key.to_owned());
                self.conflicts.remove(key);
            }
            Ok(None) => {
                // Deleted meanwhile: its delete event releases the address.
                self.written.remove(key);
                self.retries.succeeded(&key.to_owned());
            }
            Err(e) if e.class == Class::Conflict => {
                let n = self.conflicts.entry(key.to_owned()).or_default();
                *n += 1;
                if *n > MAX_CONFLICTS {
                    self.conflicts.remove(key);
                    self.failed(key, Class::Transient, &e.to_string());
                    return Ok(());
                }
                tracing::info!(service = key, error = %e, "the Service changed since it was read; reading it again");
                self.reread(key).await?;
                self.pending.insert(key.to_owned());
            }
            Err(e) => {
                self.failed(key, e.class, &e.to_string());
            }
        }
        Ok(())
    }

    /// Publishes the `NotAnnounceable` events of the Service `key`: one per
    /// selector warning of the pool its address comes from, once per change
    /// of that set (nothing when it empties: the last events age out).
    async fn warn_not_announceable(&mut self, key: &str, svc: &KubeService) -> Result<(), Stop> {
        let want = not_announceable(self.services.allocator().pool(key), &self.pool_warnings);
        if self.warned.get(key).map_or(want.is_empty(), |w| *w == want) {
            return Ok(());
        }
        if want.is_empty() {
            tracing::info!(service = key, "its pool can be announced again");
            self.warned.remove(key);
            return Ok(());
        }
        for e in &want {
            tracing::warn!(service = key, reason = e.reason, "{}", e.message);
        }
        let timeout = self.deadline()?;
        self.out.api.publish(svc, &want, timeout).await;
        self.warned.insert(key.to_owned(), want);
        Ok(())
    }

    /// The selector warnings by pool, from the whole configuration (when
    /// `overlap` is given); a change makes every Service be processed again.
    fn reconcile_warnings(&mut self, base: &config::Resources) {
        let Some(o) = &self.inp.overlap else { return };
        let resources = config::Resources {
            peers: o.peers.state(),
            bfd_profiles: o.bfd_profiles.state(),
            bgp_advertisements: o.bgp_advertisements.state(),
            l2_advertisements: o.l2_advertisements.state(),
            nodes: o.nodes.state(),
            ..base.clone()
        };
        let resources = config::overlap::with_placeholder_secrets(resources, &self.out.namespace);
        // An invalid configuration is the ConfigurationStates' business.
        let by_pool = config::parse(&resources)
            .map(|c| {
                let w = config::overlap::selector_warnings(&c, &resources.nodes);
                config::overlap::by_pool(&c, &w)
            })
            .unwrap_or_default();
        if by_pool != self.pool_warnings {
            tracing::info!(pools = by_pool.len(), "pools no node can announce changed");
            self.pool_warnings = by_pool;
            self.full_pass = true;
        }
    }

    /// The resourceVersion the store has of `key`.
    fn stored_version(&self, key: &str) -> Option<String> {
        let (ns, name) = key.split_once('/')?;
        self.inp
            .services
            .get(&ObjectRef::<KubeService>::new(name).within(ns))
            .and_then(|s| s.resource_version())
    }

    /// Reads `key` from the server, so the next decision is made on it.
    async fn reread(&mut self, key: &str) -> Result<(), Stop> {
        let Some((ns, name)) = key.split_once('/') else {
            return Ok(());
        };
        let timeout = self.deadline()?;
        match self.out.api.get(ns, name, timeout).await {
            Ok(Some(fresh)) => {
                self.written.insert(
                    key.to_owned(),
                    Written {
                        before: self.stored_version(key),
                        object: Arc::new(fresh),
                    },
                );
            }
            Ok(None) => {
                self.written.remove(key);
            }
            Err(e) => self.failed(key, e.class, &e.to_string()),
        }
        Ok(())
    }

    fn failed(&mut self, key: &str, class: Class, error: &str) {
        self.out.metrics.update_error();
        let delay = self.retries.failed(key.to_owned(), class, now());
        if class == Class::Permanent {
            tracing::error!(service = key, error, retry_in = ?delay, "writing the Service was refused; keeping its assignment and retrying rarely");
        } else {
            tracing::warn!(service = key, error, retry_in = ?delay, "writing the Service failed; keeping its assignment and retrying");
        }
    }

    /// Pool status for every pool whose counters changed (the writer
    /// coalesces bursts to one write per pool per second).
    fn update_pool_statuses(&mut self) {
        if self.term.is_none() {
            return;
        }
        let changed = self.services.allocator_mut().take_changed_pools();
        if changed.is_empty() {
            return;
        }
        for pool in changed {
            let key = ObjectKey::new(self.out.namespace.clone(), pool.clone());
            match self.services.allocator().stats(&pool) {
                Some(stats) => {
                    let n = self.services.allocator().service_count(&pool).unwrap_or(0);
                    self.out.metrics.set_pool(&pool, &stats, n);
                    self.out.pool_writer.set_desired(
                        key,
                        Desired::new(IPAddressPoolStatus {
                            assigned_ipv4: stats.ipv4.in_use,
                            assigned_ipv6: stats.ipv6.in_use,
                            available_ipv4: stats.ipv4.available,
                            available_ipv6: stats.ipv6.available,
                        }),
                    );
                }
                None => {
                    self.out.metrics.remove_pool(&pool);
                    self.out.pool_writer.remove(&key);
                }
            }
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
