//! The controller's loop: one task owns the configuration, the allocator and
//! the Service queue, so nothing is shared and every decision is made on one
//! consistent view.
//!
//! Inputs: configuration changes (pools, communities, namespaces), Service
//! events (a key per changed or deleted Service; a re-list asks for a full
//! pass), leadership, and retry deadlines. Outputs: the `ConfigurationState`
//! and `IPAddressPool` statuses (through the status writers), Service writes
//! and events (through [`ServiceEdge`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use config::api::v1beta1::{Community, ConfigurationState, IPAddressPool, IPAddressPoolStatus};
use controller::edge::ServiceEdge;
use controller::metrics::ControllerMetrics;
use controller::pool_reconciler::{self, Pass, PoolReconciler};
use controller::service::{self, ServiceReconciler, SyncState};
use k8s_openapi::api::core::v1::{Namespace, Service as KubeService};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use status::configuration_state::{self, Component};
use status::{Desired, ObjectKey, StatusWriter};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

/// A change seen on the Service watch.
#[derive(Debug)]
pub enum ServiceEvent {
    /// The Service `namespace/name` changed or was deleted.
    Changed(String),
    /// The watch listed everything again: process every Service.
    Relisted,
}

/// How many full passes may follow each other before the loop waits for
/// the next event (a pass that keeps asking for another one is a bug; this
/// keeps it from spinning).
const MAX_CHAINED_PASSES: usize = 3;
const RETRY_MIN: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// What the loop reads.
pub struct Inputs {
    pub pools: Store<IPAddressPool>,
    pub communities: Store<Community>,
    pub namespaces: Store<Namespace>,
    pub services: Store<KubeService>,
    pub config_changed: Arc<Notify>,
    pub service_events: mpsc::UnboundedReceiver<ServiceEvent>,
    pub leader: watch::Receiver<bool>,
}

/// What the loop writes through.
pub struct Outputs {
    pub namespace: String,
    pub owner: Option<OwnerReference>,
    pub state_writer: StatusWriter<ConfigurationState>,
    pub pool_writer: StatusWriter<IPAddressPool>,
    pub edge: ServiceEdge,
    pub ready: Arc<AtomicBool>,
    pub lb_class: String,
    pub metrics: ControllerMetrics,
}

/// A Service write the store has not caught up with yet: the object the
/// server answered, and the resourceVersion the store had before it.
struct Written {
    before: Option<String>,
    object: KubeService,
}

struct Retry {
    at: Instant,
    failures: u32,
}

pub struct Driver {
    inp: Inputs,
    out: Outputs,
    pools: PoolReconciler,
    services: ServiceReconciler,
    pending: BTreeSet<String>,
    full_pass: bool,
    written: HashMap<String, Written>,
    retries: BTreeMap<String, Retry>,
    first_pass_done: bool,
}

impl Driver {
    pub fn new(inp: Inputs, out: Outputs) -> Self {
        Self {
            inp,
            out,
            pools: PoolReconciler::new(),
            services: ServiceReconciler::new(),
            pending: BTreeSet::new(),
            full_pass: true,
            written: HashMap::new(),
            retries: BTreeMap::new(),
            first_pass_done: false,
        }
    }

    /// Runs until the inputs end (never in practice).
    pub async fn run(mut self) -> anyhow::Result<()> {
        self.inp.pools.wait_until_ready().await?;
        self.inp.communities.wait_until_ready().await?;
        self.inp.namespaces.wait_until_ready().await?;
        self.inp.services.wait_until_ready().await?;
        let mut leader = *self.inp.leader.borrow_and_update();
        if leader {
            tracing::info!("leading: allocating");
        } else {
            tracing::info!("not leading: waiting for the lease before allocating");
        }
        self.reconcile_config(leader);
        loop {
            if leader {
                self.process().await;
            } else {
                self.pending.clear();
                self.retries.clear();
            }
            self.update_pool_statuses(leader);
            if !self.out.ready.load(Ordering::Acquire) && (self.first_pass_done || !leader) {
                // Ready once the first full pass over existing Services is
                // done (a standby is ready as soon as its configuration is).
                self.out.ready.store(true, Ordering::Release);
                tracing::info!(first_pass = self.first_pass_done, "ready");
            }
            let next_retry = self.retries.values().map(|r| r.at).min();
            tokio::select! {
                _ = self.inp.config_changed.notified() => {
                    // Let a burst (e.g. `kubectl apply` of many objects) settle.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    self.reconcile_config(leader);
                }
                ev = self.inp.service_events.recv() => {
                    let Some(ev) = ev else { return Ok(()) };
                    self.take(ev);
                    while let Ok(ev) = self.inp.service_events.try_recv() {
                        self.take(ev);
                    }
                }
                changed = self.inp.leader.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    let now = *self.inp.leader.borrow_and_update();
                    if now != leader {
                        leader = now;
                        self.leadership_changed(leader);
                    }
                }
                _ = sleep_until(next_retry) => {
                    let now = Instant::now();
                    let due: Vec<String> = self.retries.iter().filter(|(_, r)| r.at <= now).map(|(k, _)| k.clone()).collect();
                    self.pending.extend(due);
                }
            }
        }
    }

    fn take(&mut self, ev: ServiceEvent) {
        match ev {
            ServiceEvent::Changed(key) => {
                self.pending.insert(key);
            }
            ServiceEvent::Relisted => self.full_pass = true,
        }
    }

    fn leadership_changed(&mut self, leader: bool) {
        if leader {
            tracing::info!("became leader: rebuilding the allocation from Service status");
            // Start from what the Services say, as after a restart.
            self.services = ServiceReconciler::new();
            if let Some(cfg) = self.pools.last_valid() {
                self.services.set_config(cfg);
            }
            self.written.clear();
            self.full_pass = true;
        } else {
            tracing::warn!("lost the lease: allocation stopped");
            self.services = ServiceReconciler::new();
            self.written.clear();
            self.pending.clear();
            self.retries.clear();
        }
    }

    /// Parses the pool configuration, reports it, and applies a new valid
    /// one to the allocator (then every Service is processed again).
    fn reconcile_config(&mut self, leader: bool) {
        let resources = pool_reconciler::resources(
            self.inp
                .pools
                .state()
                .iter()
                .map(|p| (**p).clone())
                .collect(),
            self.inp
                .communities
                .state()
                .iter()
                .map(|c| (**c).clone())
                .collect(),
            self.inp
                .namespaces
                .state()
                .iter()
                .map(|n| (**n).clone())
                .collect(),
        );
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
            if leader {
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
        }
    }

    /// The Service as last known: our own write when the store has not
    /// caught up with it yet.
    fn current(&mut self, key: &str) -> Option<KubeService> {
        let (ns, name) = key.split_once('/')?;
        let stored = self
            .inp
            .services
            .get(&ObjectRef::<KubeService>::new(name).within(ns));
        if let Some(w) = self.written.get(key) {
            let stale = match &stored {
                Some(s) => s.resource_version() == w.before,
                None => false,
            };
            if stale {
                return Some(w.object.clone());
            }
            self.written.remove(key);
        }
        stored.map(|s| (*s).clone())
    }

    async fn process(&mut self) {
        if !self.services.config_loaded() {
            // MetalLB skips Services until a configuration is loaded: that
            // is the whole pass.
            self.pending.clear();
            self.first_pass_done = true;
            return;
        }
        let mut passes = 0;
        loop {
            if self.full_pass {
                self.full_pass = false;
                if passes < MAX_CHAINED_PASSES {
                    passes += 1;
                    self.full_pass_once().await;
                    continue;
                }
                tracing::warn!(
                    passes,
                    "full passes keep asking for another; waiting for the next event"
                );
            }
            let Some(key) = self.pending.pop_first() else {
                break;
            };
            self.sync_one(&key).await;
        }
    }

    /// Every Service once: deleted ones first (they free addresses), then
    /// MetalLB's order (those with addresses first).
    async fn full_pass_once(&mut self) {
        let all: Vec<KubeService> = self
            .inp
            .services
            .state()
            .iter()
            .map(|s| (**s).clone())
            .collect();
        let present: BTreeSet<String> = all.iter().map(service::key_of).collect();
        let mut keys: Vec<String> = self
            .services
            .allocator()
            .assignments()
            .map(|(k, _)| k.to_owned())
            .filter(|k| !present.contains(k))
            .collect();
        keys.sort();
        keys.extend(
            service::reprocess_order(all.iter())
                .into_iter()
                .map(service::key_of),
        );
        self.pending.clear();
        for key in keys {
            self.sync_one(&key).await;
        }
        self.first_pass_done = true;
    }

    async fn sync_one(&mut self, key: &str) {
        self.retries.remove(key);
        let svc = self.current(key);
        let svc = svc.filter(|s| service::handles_class(s, &self.out.lb_class));
        let outcome = self.services.sync(key, svc.as_ref());
        match outcome.state {
            SyncState::ReprocessAll => self.full_pass = true,
            SyncState::ErrorNoRetry => self.out.metrics.update_error(),
            SyncState::Success => {}
        }
        let Some(svc) = svc else {
            self.written.remove(key);
            return;
        };
        for e in &outcome.events {
            if e.warning {
                tracing::warn!(service = key, reason = e.reason, "{}", e.message);
            } else {
                tracing::info!(service = key, reason = e.reason, "{}", e.message);
            }
        }
        self.out.edge.publish(&svc, &outcome.events).await;
        if outcome.state != SyncState::ErrorNoRetry {
            self.out.metrics.update_ok();
        }
        if outcome.update.is_empty() {
            return;
        }
        match self.out.edge.write(&svc, &outcome.update).await {
            Ok(Some(object)) => {
                tracing::info!(service = key, ingress = ?outcome.update.ingress, "updated service object");
                self.written.insert(
                    key.to_owned(),
                    Written {
                        before: svc.resource_version(),
                        object,
                    },
                );
            }
            Ok(None) => {
                // Deleted meanwhile: its delete event releases the address.
                self.written.remove(key);
            }
            Err(e) => {
                self.out.metrics.update_error();
                let failures = self.retries.get(key).map_or(0, |r| r.failures) + 1;
                let delay = RETRY_MIN
                    .saturating_mul(1 << failures.min(6))
                    .min(RETRY_MAX);
                tracing::warn!(service = key, error = %e, retry_in = ?delay, "writing the Service failed; keeping its assignment and retrying");
                self.retries.insert(
                    key.to_owned(),
                    Retry {
                        at: Instant::now() + delay,
                        failures,
                    },
                );
            }
        }
    }

    /// Pool status for every pool whose counters changed (the writer
    /// coalesces bursts to one write per pool per second).
    fn update_pool_statuses(&mut self, leader: bool) {
        if !leader {
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

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
