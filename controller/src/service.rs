//! What the controller does with one LoadBalancer Service: MetalLB's
//! `SetBalancer` and `convergeBalancer` (reference 2.4) over the pure
//! [`Allocator`], with Kubernetes' `Service` as input and, as output, the
//! writes and events the binary carries out. No I/O.
//!
//! [`ServiceReconciler::sync`] takes the Service as the API server last
//! showed it (or `None` once deleted) and returns a [`Sync`]: the new
//! `status.loadBalancer.ingress` and `metallb.io/ip-allocated-from-pool`
//! when they differ from the object's, MetalLB's events, and whether every
//! Service must be processed again ([`SyncState::ReprocessAll`], e.g. after
//! an address was released). [`reprocess_order`] is MetalLB's order for that:
//! Services that already have addresses first, so a restart moves none.
//!
//! Departures from MetalLB, on purpose:
//! - the deprecated `metallb.universe.tf/*` annotations of a Service get
//!   MetalLB's Warning event but are not deleted from the Service (MetalLB
//!   deletes them when it writes, which silently drops a user's
//!   `allow-shared-ip` and can cost a shared Service its address on the next
//!   pass); only the deprecated `ip-allocated-from-pool`, ours, is removed;
//! - `AdditionalAssignFailed` (a PreferDualStack Service whose pool has no
//!   address of the other family) is reported once per message, not on every
//!   pass;
//! - ingress entries are compared by address only (the API server defaults
//!   `ipMode`, which would otherwise look like a change on every pass).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use config::Config;
use config::gofmt::quote;
use k8s_openapi::api::core::v1::Service as KubeService;

use crate::alloc::{
    self, AllocError, Allocator, IpFamily, IpFamilyPolicy, Port, ServiceFamily, SetPoolsReport,
};

/// `metallb.io/address-pool`.
pub const ANNOTATION_ADDRESS_POOL: &str = "metallb.io/address-pool";
/// `metallb.io/loadBalancerIPs`.
pub const ANNOTATION_LOAD_BALANCER_IPS: &str = "metallb.io/loadBalancerIPs";
/// `metallb.io/ip-allocated-from-pool` (written by the controller).
pub const ANNOTATION_IP_ALLOCATED_FROM_POOL: &str = "metallb.io/ip-allocated-from-pool";
/// `metallb.io/allow-shared-ip`.
pub const ANNOTATION_ALLOW_SHARED_IP: &str = "metallb.io/allow-shared-ip";
/// The prefix of the deprecated annotations.
pub const DEPRECATED_ANNOTATION_PREFIX: &str = "metallb.universe.tf";
const DEPRECATED_ADDRESS_POOL: &str = "metallb.universe.tf/address-pool";
const DEPRECATED_LOAD_BALANCER_IPS: &str = "metallb.universe.tf/loadBalancerIPs";
const DEPRECATED_IP_ALLOCATED_FROM_POOL: &str = "metallb.universe.tf/ip-allocated-from-pool";
const DEPRECATED_ALLOW_SHARED_IP: &str = "metallb.universe.tf/allow-shared-ip";

/// An event about a Service (MetalLB's `Infof` is Normal, `Errorf` Warning).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Warning (else Normal).
    pub warning: bool,
    /// MetalLB's reason, e.g. `IPAllocated`.
    pub reason: &'static str,
    /// MetalLB's message.
    pub message: String,
}

impl Event {
    fn normal(reason: &'static str, message: String) -> Event {
        Event {
            warning: false,
            reason,
            message,
        }
    }

    fn warning(reason: &'static str, message: String) -> Event {
        Event {
            warning: true,
            reason,
            message,
        }
    }
}

/// MetalLB's `SyncState` of a Service pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncState {
    /// Done.
    Success,
    /// Failed in a way that only another event can fix (e.g. no address
    /// left): no retry until then.
    ErrorNoRetry,
    /// Every Service must be processed again (an address was released, or
    /// a sharing key changed).
    ReprocessAll,
}

/// What must change on the Service object. Each field is `Some` only when
/// the object on the server differs from what it should be.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceUpdate {
    /// The new `status.loadBalancer.ingress` addresses (empty: clear).
    pub ingress: Option<Vec<IpAddr>>,
    /// Annotations to set (`Some(value)`) or remove (`None`).
    pub annotations: BTreeMap<String, Option<String>>,
}

impl ServiceUpdate {
    /// Whether nothing needs writing.
    pub fn is_empty(&self) -> bool {
        self.ingress.is_none() && self.annotations.is_empty()
    }
}

/// The outcome of [`ServiceReconciler::sync`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sync {
    /// The writes to make (nothing when [`ServiceUpdate::is_empty`]).
    pub update: ServiceUpdate,
    /// Events to emit about the Service, in order.
    pub events: Vec<Event>,
    /// What to do next.
    pub state: SyncState,
}

/// `namespace/name`, MetalLB's key of a Service.
pub fn key_of(svc: &KubeService) -> String {
    format!(
        "{}/{}",
        svc.metadata.namespace.as_deref().unwrap_or_default(),
        svc.metadata.name.as_deref().unwrap_or_default()
    )
}

pub use cluster_view::services::ingress_ips;

fn ingress_count(svc: &KubeService) -> usize {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map_or(0, |i| {
            i.iter()
                .filter(|e| e.ip.as_deref().is_some_and(|s| !s.is_empty()))
                .count()
        })
}

/// MetalLB's order for processing every Service: those with the most
/// ingress addresses first (existing assignments are registered before
/// anything new is allocated), then by key.
pub fn reprocess_order<'a>(
    services: impl IntoIterator<Item = &'a KubeService>,
) -> Vec<&'a KubeService> {
    let mut all: Vec<(usize, String, &KubeService)> = services
        .into_iter()
        .map(|s| (ingress_count(s), key_of(s), s))
        .collect();
    all.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    all.into_iter().map(|(_, _, s)| s).collect()
}

/// MetalLB's `valueForAnnotation`: the stable key when present (even
/// empty), else the deprecated one, else "".
fn annotation<'a>(
    annotations: &'a BTreeMap<String, String>,
    stable: &str,
    deprecated: &str,
) -> &'a str {
    annotations
        .get(stable)
        .or_else(|| annotations.get(deprecated))
        .map_or("", String::as_str)
}

fn family_policy(svc: &KubeService) -> IpFamilyPolicy {
    match svc
        .spec
        .as_ref()
        .and_then(|s| s.ip_family_policy.as_deref())
    {
        Some("PreferDualStack") => IpFamilyPolicy::PreferDualStack,
        Some("RequireDualStack") => IpFamilyPolicy::RequireDualStack,
        _ => IpFamilyPolicy::SingleStack,
    }
}

/// `spec.clusterIPs`, or `[spec.clusterIP]` (MetalLB's `ForService` input).
fn cluster_ips(svc: &KubeService) -> Vec<String> {
    let Some(spec) = svc.spec.as_ref() else {
        return Vec::new();
    };
    match spec.cluster_ips.as_ref() {
        Some(ips) if !ips.is_empty() => ips.clone(),
        _ => spec
            .cluster_ip
            .iter()
            .filter(|s| !s.is_empty())
            .cloned()
            .collect(),
    }
}

/// Go's `%v` of a `[]string`: `[a b]`.
fn go_list(items: &[String]) -> String {
    format!("[{}]", items.join(" "))
}

/// MetalLB's `ipfamily.ForService`.
fn service_family(svc: &KubeService) -> Result<ServiceFamily, String> {
    let ips = cluster_ips(svc);
    let mut parsed = Vec::with_capacity(ips.len());
    for s in &ips {
        parsed.push(
            s.parse::<IpAddr>()
                .map_err(|_| format!("invalid cluster IP {}", quote(s)))?,
        );
    }
    ServiceFamily::for_addresses(&parsed).map_err(|e| e.to_string())
}

/// MetalLB's `getDesiredLbIPs`: the addresses asked for with
/// `metallb.io/loadBalancerIPs` or `spec.loadBalancerIP` (empty: none).
fn desired_ips(
    svc: &KubeService,
    annotations: &BTreeMap<String, String>,
) -> Result<Vec<IpAddr>, String> {
    let from_annotation = annotation(
        annotations,
        ANNOTATION_LOAD_BALANCER_IPS,
        DEPRECATED_LOAD_BALANCER_IPS,
    );
    let from_spec = svc
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_ip.as_deref())
        .unwrap_or_default();
    match (from_annotation.is_empty(), from_spec.is_empty()) {
        (true, true) => Ok(Vec::new()),
        (false, false) => Err(format!(
            "service can not have both {ANNOTATION_LOAD_BALANCER_IPS} and svc.Spec.LoadBalancerIP"
        )),
        (false, true) => {
            let mut ips = Vec::new();
            for part in from_annotation.split(',') {
                let ip = part.trim().parse::<IpAddr>().map_err(|_| {
                    format!(
                        "invalid {ANNOTATION_LOAD_BALANCER_IPS}: {}",
                        quote(from_annotation)
                    )
                })?;
                ips.push(ip.to_canonical());
            }
            ServiceFamily::for_addresses(&ips).map_err(|e| e.to_string())?;
            Ok(ips)
        }
        (true, false) => from_spec
            .parse::<IpAddr>()
            .map(|ip| vec![ip.to_canonical()])
            .map_err(|_| format!("invalid spec.loadBalancerIP {}", quote(from_spec))),
    }
}

/// The allocator's description of a Service (family from the cluster IPs,
/// `Ipv4` when they are unusable: such a Service never reaches allocation).
pub fn describe(svc: &KubeService) -> alloc::Service {
    let annotations = svc.metadata.annotations.clone().unwrap_or_default();
    let spec = svc.spec.clone().unwrap_or_default();
    let primary_family = match spec
        .ip_families
        .as_ref()
        .and_then(|f| f.first())
        .map(String::as_str)
    {
        Some("IPv6") => IpFamily::V6,
        _ => IpFamily::V4,
    };
    let etp_local = spec.external_traffic_policy.as_deref() == Some("Local");
    let pool = annotation(
        &annotations,
        ANNOTATION_ADDRESS_POOL,
        DEPRECATED_ADDRESS_POOL,
    );
    alloc::Service {
        namespace: svc.metadata.namespace.clone().unwrap_or_default(),
        name: svc.metadata.name.clone().unwrap_or_default(),
        labels: svc.metadata.labels.clone().unwrap_or_default(),
        family: service_family(svc).unwrap_or_default(),
        ip_family_policy: family_policy(svc),
        primary_family,
        requested_ips: desired_ips(svc, &annotations).unwrap_or_default(),
        address_pool: (!pool.is_empty()).then(|| pool.to_owned()),
        sharing_key: sharing_key(&annotations).to_owned(),
        backend_key: alloc::backend_key(etp_local, &spec.selector.unwrap_or_default()),
        ports: spec
            .ports
            .unwrap_or_default()
            .iter()
            .map(|p| Port::new(p.protocol.clone().unwrap_or_else(|| "TCP".into()), p.port))
            .collect(),
    }
}

/// MetalLB's `SharingKey`: the stable annotation when present (even
/// empty), else the deprecated one.
fn sharing_key(annotations: &BTreeMap<String, String>) -> &str {
    annotation(
        annotations,
        ANNOTATION_ALLOW_SHARED_IP,
        DEPRECATED_ALLOW_SHARED_IP,
    )
}

pub use cluster_view::services::handles_class;

/// The working copy of what the controller manages on one Service.
struct Working {
    key: String,
    ips: Vec<IpAddr>,
    annotations: BTreeMap<String, String>,
    events: Vec<Event>,
}

/// Allocation state and MetalLB's per-Service logic.
#[derive(Debug, Default)]
pub struct ServiceReconciler {
    alloc: Allocator,
    /// Whether a configuration was set (MetalLB skips Services until then).
    config_loaded: bool,
    /// Whether that configuration has at least one pool.
    has_pools: bool,
    /// The last `AdditionalAssignFailed` message per Service.
    additional_failed: HashMap<String, String>,
}

/// The sharing and backend keys of a Service's allocation (MetalLB's
/// `AllocationKey`).
fn allocation_key(a: &Allocator, key: &str) -> Option<(String, String)> {
    a.assignment(key)
        .map(|x| (x.sharing_key.clone(), x.backend_key.clone()))
}

impl ServiceReconciler {
    /// A reconciler with no configuration (every Service is skipped).
    pub fn new() -> Self {
        Self::default()
    }

    /// The allocator (counters, assignments).
    pub fn allocator(&self) -> &Allocator {
        &self.alloc
    }

    /// The allocator, to take its changed-pool set.
    pub fn allocator_mut(&mut self) -> &mut Allocator {
        &mut self.alloc
    }

    /// Whether a configuration was set.
    pub fn config_loaded(&self) -> bool {
        self.config_loaded
    }

    /// MetalLB's `SetPools`: use the pools of a valid configuration. Every
    /// Service must then be processed again.
    pub fn set_config(&mut self, config: &Config) -> SetPoolsReport {
        self.config_loaded = true;
        self.has_pools = !config.pools.is_empty();
        self.alloc.set_pools(config)
    }

    /// MetalLB's `SetBalancer` for the Service `key` as last seen (`None`:
    /// deleted). Only Services of the controller's class may be passed.
    pub fn sync(&mut self, key: &str, svc: Option<&KubeService>) -> Sync {
        let Some(svc) = svc else {
            self.additional_failed.remove(key);
            let state = if self.alloc.unassign(key) {
                SyncState::ReprocessAll
            } else {
                SyncState::Success
            };
            return Sync {
                update: ServiceUpdate::default(),
                events: Vec::new(),
                state,
            };
        };
        if !self.config_loaded {
            return Sync {
                update: ServiceUpdate::default(),
                events: Vec::new(),
                state: SyncState::Success,
            };
        }
        let original_annotations = svc.metadata.annotations.clone().unwrap_or_default();
        let original_ips = ingress_ips(svc);
        let prev_ips: Vec<IpAddr> = self
            .alloc
            .ips(key)
            .map(<[IpAddr]>::to_vec)
            .unwrap_or_default();
        let prev_key = allocation_key(&self.alloc, key);

        let mut w = Working {
            key: key.to_owned(),
            ips: original_ips.clone().unwrap_or_default(),
            annotations: original_annotations.clone(),
            events: Vec::new(),
        };
        let mut state = match self.converge(&mut w, svc) {
            Ok(()) => SyncState::Success,
            Err(()) => SyncState::ErrorNoRetry,
        };
        // A Service that changed its sharing or backend key in place may
        // have made room for, or taken it from, others.
        let new_key = allocation_key(&self.alloc, key);
        if prev_key.is_some() && new_key.is_some() && prev_key != new_key {
            state = SyncState::ReprocessAll;
        }

        let ips_changed = match &original_ips {
            Ok(orig) => orig != &w.ips,
            Err(_) => true,
        };
        let mut update = ServiceUpdate::default();
        if ips_changed {
            update.ingress = Some(w.ips.clone());
        }
        for (k, v) in &w.annotations {
            if original_annotations.get(k) != Some(v) {
                update.annotations.insert(k.clone(), Some(v.clone()));
            }
        }
        for k in original_annotations.keys() {
            if !w.annotations.contains_key(k) {
                update.annotations.insert(k.clone(), None);
            }
        }
        if update.is_empty() {
            return Sync {
                update,
                events: w.events,
                state,
            };
        }
        // MetalLB reports deprecated annotations only when it writes.
        for k in original_annotations.keys() {
            if k.starts_with(DEPRECATED_ANNOTATION_PREFIX) {
                w.events.push(Event::warning(
                    "deprecatedAnnotation",
                    format!("Service uses deprecated annotation {k}"),
                ));
            }
        }
        if !prev_ips.is_empty()
            && self.alloc.assignment(key).is_none()
            && self.alloc.pool_for(&prev_ips).is_some()
        {
            state = SyncState::ReprocessAll;
        }
        Sync {
            update,
            events: w.events,
            state,
        }
    }

    /// MetalLB's `clearServiceState`.
    fn clear(&mut self, w: &mut Working) {
        self.alloc.unassign(&w.key);
        w.annotations.remove(ANNOTATION_IP_ALLOCATED_FROM_POOL);
        w.annotations.remove(DEPRECATED_IP_ALLOCATED_FROM_POOL);
        w.ips.clear();
    }

    /// MetalLB's `convergeBalancer`; `Err` is its `ErrConverge`.
    fn converge(&mut self, w: &mut Working, svc: &KubeService) -> Result<(), ()> {
        let spec = svc.spec.clone().unwrap_or_default();
        if spec.type_.as_deref() != Some("LoadBalancer") {
            self.clear(w);
            return Ok(());
        }
        if !self.has_pools {
            self.clear(w);
            return Err(());
        }
        let cluster = cluster_ips(svc);
        if cluster.is_empty() {
            self.clear(w);
            return Err(());
        }
        let policy = family_policy(svc);
        if policy == IpFamilyPolicy::RequireDualStack
            && spec.cluster_ips.as_ref().map_or(0, Vec::len) < 2
        {
            w.events.push(Event::warning(
                "not enough clusterips",
                format!(
                    "Service requires dual stack but not enough clusterips {}",
                    go_list(spec.cluster_ips.as_deref().unwrap_or_default())
                ),
            ));
            self.clear(w);
            return Err(());
        }
        let desc = describe(svc);
        let mut lb_ips = match ingress_ips(svc) {
            Ok(ips) => ips
                .into_iter()
                .map(|ip| ip.to_canonical())
                .collect::<Vec<_>>(),
            Err(bad) => {
                w.events.push(Event::warning(
                    "nolbIPsIPFamily",
                    format!(
                        "Failed to retrieve LBIPs IPFamily for {}: invalid address {}",
                        quote_strs(std::slice::from_ref(&bad)),
                        quote(&bad)
                    ),
                ));
                self.clear(w);
                Vec::new()
            }
        };
        if lb_ips.is_empty() {
            self.clear(w);
        } else {
            let lb_family = match ServiceFamily::for_addresses(&lb_ips) {
                Ok(f) => Some(f),
                Err(e) => {
                    w.events.push(Event::warning(
                        "nolbIPsIPFamily",
                        format!(
                            "Failed to retrieve LBIPs IPFamily for {}: {e}",
                            alloc::quote_list(&lb_ips)
                        ),
                    ));
                    None
                }
            };
            let cluster_family = match service_family(svc) {
                Ok(f) => f,
                Err(e) => {
                    w.events.push(Event::warning(
                        "noclusterIPsIPFamily",
                        format!(
                            "Failed to retrieve ClusterIPs IPFamily for {} {}: {e}",
                            quote_strs(spec.cluster_ips.as_deref().unwrap_or_default()),
                            spec.cluster_ip.as_deref().unwrap_or_default()
                        ),
                    ));
                    return Err(());
                }
            };
            if family_changed(lb_family, cluster_family, policy) {
                self.clear(w);
                lb_ips.clear();
            }
        }

        if !lb_ips.is_empty() {
            if let Err(e) = self.alloc.assign(&w.key, &desc, &lb_ips) {
                w.events.push(Event::normal(
                    "ClearAssignment",
                    format!(
                        "current IP for {} not allowed by config, will attempt for new IP assignment: {e}",
                        quote(&w.key)
                    ),
                ));
                self.clear(w);
                lb_ips.clear();
            }
            let desired_pool = desc.address_pool.as_deref().unwrap_or_default();
            if !lb_ips.is_empty()
                && !desired_pool.is_empty()
                && self.alloc.pool(&w.key) != Some(desired_pool)
            {
                self.clear(w);
                lb_ips.clear();
            }
            let desired = match desired_ips(svc, &w.annotations) {
                Ok(d) => d,
                Err(e) => {
                    w.events.push(Event::warning(
                        "LoadBalancerFailed",
                        format!("invalid requested loadbalancer IPs: {e}"),
                    ));
                    return Err(());
                }
            };
            if !desired.is_empty() && !same_ips(&lb_ips, &desired) {
                self.clear(w);
                lb_ips.clear();
            }
        }

        if lb_ips.len() == 1 && policy == IpFamilyPolicy::PreferDualStack {
            let pool = self.alloc.pool(&w.key).unwrap_or_default().to_owned();
            match self
                .alloc
                .allocate_from_pool_for_additional_family(&w.key, &desc, lb_ips[0], &pool)
            {
                Ok(ip) => {
                    self.additional_failed.remove(&w.key);
                    lb_ips.push(ip);
                    w.events.push(Event::normal(
                        "IPAllocated",
                        format!("Assigned additional IP {}", quote(&ip.to_string())),
                    ));
                }
                Err(e) => {
                    let message = format!("cannot assign additional IP in PreferDualStack: {e}");
                    if self.additional_failed.get(&w.key) != Some(&message) {
                        self.additional_failed
                            .insert(w.key.clone(), message.clone());
                        w.events
                            .push(Event::normal("AdditionalAssignFailed", message));
                    }
                }
            }
        }

        if lb_ips.is_empty() {
            match self.allocate(&w.key, svc, &desc) {
                Ok(ips) => {
                    w.events.push(Event::normal(
                        "IPAllocated",
                        format!("Assigned IP {}", alloc::quote_list(&ips)),
                    ));
                    lb_ips = ips;
                }
                Err(e) => {
                    w.events.push(Event::warning(
                        "AllocationFailed",
                        format!("Failed to allocate IP for {}: {e}", quote(&w.key)),
                    ));
                    return Err(());
                }
            }
        }

        let Some(pool) = self.alloc.pool(&w.key).map(str::to_owned) else {
            w.events.push(Event::warning(
                "InternalError",
                "allocated an IP that has no pool".to_owned(),
            ));
            self.clear(w);
            return Err(());
        };
        w.ips = lb_ips;
        w.annotations
            .insert(ANNOTATION_IP_ALLOCATED_FROM_POOL.to_owned(), pool);
        w.annotations.remove(DEPRECATED_IP_ALLOCATED_FROM_POOL);
        Ok(())
    }

    /// MetalLB's controller `allocateIPs`.
    fn allocate(
        &mut self,
        key: &str,
        svc: &KubeService,
        desc: &alloc::Service,
    ) -> Result<Vec<IpAddr>, String> {
        service_family(svc)?;
        let annotations = svc.metadata.annotations.clone().unwrap_or_default();
        desired_ips(svc, &annotations)?;
        self.alloc
            .allocate_ips(key, desc)
            .map_err(|e: AllocError| e.to_string())
    }
}

/// Go's `%q` of a `[]string`.
fn quote_strs(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| quote(s)).collect();
    format!("[{}]", quoted.join(" "))
}

/// MetalLB's `serviceFamilyChanged` (`None`: the addresses have no family).
fn family_changed(
    lb: Option<ServiceFamily>,
    cluster: ServiceFamily,
    policy: IpFamilyPolicy,
) -> bool {
    let Some(lb) = lb else {
        return true;
    };
    if lb == cluster {
        return false;
    }
    !(cluster == ServiceFamily::Dual && policy == IpFamilyPolicy::PreferDualStack)
}

/// MetalLB's `isEqualIPs`: the same addresses in any order.
fn same_ips(a: &[IpAddr], b: &[IpAddr]) -> bool {
    let mut a: Vec<IpAddr> = a.iter().map(IpAddr::to_canonical).collect();
    let mut b: Vec<IpAddr> = b.iter().map(IpAddr::to_canonical).collect();
    a.sort();
    b.sort();
    a == b
}

#[cfg(test)]
mod tests;
