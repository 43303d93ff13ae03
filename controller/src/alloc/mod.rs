//! LoadBalancer IP allocation: MetalLB's `internal/allocator` as a pure
//! library (no Kubernetes types; Services are described by [`Service`]).
//!
//! Behaviour follows MetalLB v0.16 (reference sections 2.3, 2.4 and 3):
//!
//! - **Explicit addresses** ([`Allocator::assign`]): the pool containing all
//!   of them, compatible with the Service, at most two of different
//!   families, and the sharing rules on each. `autoAssign` is not checked.
//! - **A named pool** ([`Allocator::allocate_from_pool`]).
//! - **Automatic** ([`Allocator::allocate`]): the pinned pools (those whose
//!   `serviceAllocation` names the Service's namespace or has service
//!   selectors, with `autoAssign` and compatible with the Service), sorted by
//!   priority (> 0 ascending, then 0; a negative priority counts as 0), then
//!   the `autoAssign` pools without `serviceAllocation`; ties are broken by
//!   pool name (MetalLB's order is random there: ours is deterministic on
//!   purpose). A pool whose `serviceAllocation` names neither a namespace
//!   nor a service selector is thus only reachable by name or address, as
//!   in MetalLB. Whatever failed, the error is `no available IPs` (the
//!   pool-level reason is its `source()`).
//! - **Sharing** (MetalLB's `checkSharing`): when the sharing rules fail
//!   (`existing service does not allow sharing`, `new service does not allow
//!   sharing`, `sharing key %q does not match ...`, `backend key %q does not
//!   match ...`) and other Services hold the address, the error is MetalLB's
//!   `can't change sharing key for %q, address also in use by %s`, with the
//!   rule as [`AllocError::SharingKeyChange`]'s `reason`/`source()`; a
//!   Service alone on its address may change its keys in place. Then no
//!   port may be held by another Service (`port TCP/80 is already in use on
//!   %q`).
//! - **The address chosen** in a pool is MetalLB's: `spec.addresses` in
//!   order, the CIDRs of each entry in order; per family the lowest usable
//!   address of the first CIDR that has one, where usable means free, or
//!   used by Services this one may share with (same non-empty sharing key,
//!   same backend key, no common port), or held by this Service alone; `.0`
//!   and `.255` are never part of an avoidBuggyIPs pool.
//!
//! MetalLB finds that address by walking the CIDR one address at a time.
//! Here each CIDR keeps its used addresses as maximal runs in a `BTreeMap`
//! (with avoidBuggyIPs, in a space without the .0/.255 addresses, so runs
//! span them), so the lowest free address is one range query, O(log n) in
//! the number of used addresses; shareable addresses come from an index by
//! sharing key, and only those below the lowest free one are looked at
//! (each one passed over is an address of the same key whose ports
//! collide). A /8 or a /64 allocates as fast as a /29.
//!
//! Stats ([`Allocator::stats`]) are exact up to `i64::MAX` and clamped above
//! it; MetalLB instead reports `MaxInt64` as soon as one CIDR has 62 or more
//! host bits. Both agree on everything else.
//!
//! Departures from MetalLB, all in cases MetalLB gets wrong or leaves to
//! chance: the state of an address lives as long as any Service holds it
//! (MetalLB forgets an address's sharing key when its port list empties,
//! which only Services without ports can reach); the Services named in
//! `can't change sharing key` are sorted; assigning no address at all is
//! `"[]" is not allowed in config` (MetalLB records an empty assignment in
//! a random pool).

mod error;
mod space;
mod types;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use config::gofmt::quote;
use config::{Config, Pool};

pub use error::{AllocError, FamilyError, SharingError};
pub use types::{Assignment, IpFamily, IpFamilyPolicy, Port, Service, ServiceFamily, backend_key};

use space::{CidrIndex, capacity, from_u128, is_buggy_v4, to_u128};

/// Go's `%q` of a slice of addresses: `["192.0.2.1" "2001:db8::1"]`.
pub fn quote_list(ips: &[IpAddr]) -> String {
    let quoted: Vec<String> = ips.iter().map(|ip| quote(&ip.to_string())).collect();
    format!("[{}]", quoted.join(" "))
}

/// Addresses and counts of one pool and family, or of the whole pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FamilyStats {
    /// Usable addresses (`metallb_allocator_addresses_total`).
    pub capacity: i64,
    /// Distinct addresses assigned (`..._addresses_in_use_total`,
    /// `status.assignedIPv4/6`).
    pub in_use: i64,
    /// `capacity - in_use` (`status.availableIPv4/6`).
    pub available: i64,
}

impl FamilyStats {
    fn new(capacity: u128, in_use: u128) -> FamilyStats {
        FamilyStats {
            capacity: clamp(capacity),
            in_use: clamp(in_use),
            available: clamp(capacity.saturating_sub(in_use)),
        }
    }
}

/// The counters of one pool. Every value is exact up to `i64::MAX` and
/// clamped to it above (MetalLB reports `i64::MAX` for any CIDR with 62 or
/// more host bits and subtracts from that; we differ from it only in being
/// exact below the clamp).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Both families.
    pub total: FamilyStats,
    /// IPv4.
    pub ipv4: FamilyStats,
    /// IPv6.
    pub ipv6: FamilyStats,
}

fn clamp(v: u128) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// What [`Allocator::set_pools`] did to existing assignments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetPoolsReport {
    /// Services whose addresses no pool contains any more: unassigned, to be
    /// allocated again. `(service, addresses, former pool)`, by service.
    pub dropped: Vec<(String, Vec<IpAddr>, String)>,
    /// Services whose addresses now belong to another pool:
    /// `(service, former pool, new pool)`, by service.
    pub rehomed: Vec<(String, String, String)>,
    /// Pools that no longer exist (their stats should be deleted).
    pub removed_pools: Vec<String>,
}

/// What [`Allocator::restore`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Services registered with their addresses, in the order registered.
    pub restored: Vec<String>,
    /// Services whose addresses could not be registered (the caller clears
    /// them and allocates again), in the order tried.
    pub failed: Vec<(String, AllocError)>,
}

/// A sharing key and a backend key (MetalLB's `key`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Key {
    sharing: String,
    backend: String,
}

impl Key {
    fn of(svc: &Service) -> Key {
        Key {
            sharing: svc.sharing_key.clone(),
            backend: svc.backend_key.clone(),
        }
    }
}

/// MetalLB's `sharingOK`.
fn sharing_ok(existing: &Key, new: &Key) -> Result<(), SharingError> {
    if existing.sharing.is_empty() {
        return Err(SharingError::ExistingDoesNotAllow);
    }
    if new.sharing.is_empty() {
        return Err(SharingError::NewDoesNotAllow);
    }
    if existing.sharing != new.sharing {
        return Err(SharingError::SharingKey {
            new: new.sharing.clone(),
            existing: existing.sharing.clone(),
        });
    }
    if existing.backend != new.backend {
        return Err(SharingError::BackendKey {
            new: new.backend.clone(),
            existing: existing.backend.clone(),
        });
    }
    Ok(())
}

/// Who uses one address.
#[derive(Clone, Debug)]
struct IpUse {
    /// The key of the Services on it (all equal but during a single user's
    /// key change); MetalLB's `sharingKeyForIP`.
    key: Key,
    /// `servicesOnIP`.
    services: BTreeSet<String>,
    /// `portsInUse`: port -> Service.
    ports: HashMap<Port, String>,
}

/// A pool with its per-CIDR indexes and counters.
#[derive(Clone, Debug)]
struct PoolState {
    pool: Pool,
    /// In allocation order: `spec.addresses`, then each entry's CIDRs.
    cidrs: Vec<CidrIndex>,
    capacity: [u128; 2],
    in_use: [u128; 2],
    /// Services holding addresses of the pool.
    services: usize,
}

impl PoolState {
    fn new(pool: &Pool) -> PoolState {
        let mut cidrs = Vec::new();
        let mut cap = [0u128; 2];
        for block in &pool.addresses {
            for net in &block.cidrs {
                let c = CidrIndex::new(*net, pool.avoid_buggy_ips);
                let i = c.family.index();
                cap[i] = cap[i].saturating_add(capacity(net, pool.avoid_buggy_ips));
                cidrs.push(c);
            }
        }
        PoolState {
            pool: pool.clone(),
            cidrs,
            capacity: cap,
            in_use: [0; 2],
            services: 0,
        }
    }

    fn cidr_mut(&mut self, family: IpFamily, v: u128) -> Option<&mut CidrIndex> {
        self.cidrs.iter_mut().find(|c| c.holds(family, v))
    }

    fn stats(&self) -> PoolStats {
        let [c4, c6] = self.capacity;
        let [u4, u6] = self.in_use;
        PoolStats {
            total: FamilyStats::new(c4.saturating_add(c6), u4 + u6),
            ipv4: FamilyStats::new(c4, u4),
            ipv6: FamilyStats::new(c6, u6),
        }
    }
}

/// MetalLB's `isPoolCompatibleWithService`.
fn compatible(pool: &Pool, svc: &Service) -> bool {
    let Some(sa) = &pool.service_allocation else {
        return true;
    };
    if !sa.namespaces.is_empty() && !sa.namespaces.contains(&svc.namespace) {
        return false;
    }
    if !sa.service_selectors.is_empty() {
        return sa.service_selectors.iter().any(|s| s.matches(&svc.labels));
    }
    true
}

/// The sort key of `sortPools`: priority > 0 ascending, then the rest
/// (0, and negative priorities, which MetalLB orders arbitrarily), then by
/// name.
fn priority_rank(pool: &Pool) -> (u8, i32) {
    match &pool.service_allocation {
        Some(sa) if sa.priority > 0 => (0, sa.priority),
        _ => (1, 0),
    }
}

/// The best addresses of one pool for a Service (MetalLB's `Allocation`).
#[derive(Clone, Copy, Debug)]
struct Candidate<'a> {
    pool: &'a str,
    ips: [Option<IpAddr>; 2],
}

impl Candidate<'_> {
    fn get(&self, family: ServiceFamily) -> Option<IpAddr> {
        family.single().and_then(|f| self.ips[f.index()])
    }

    /// `selectIPsForFamilyAndPolicy`.
    fn select(
        &self,
        family: ServiceFamily,
        policy: IpFamilyPolicy,
    ) -> Result<Vec<IpAddr>, AllocError> {
        let [v4, v6] = self.ips;
        let ips = match policy {
            IpFamilyPolicy::SingleStack => self.get(family).map(|ip| vec![ip]),
            IpFamilyPolicy::RequireDualStack => v4.zip(v6).map(|(a, b)| vec![a, b]),
            IpFamilyPolicy::PreferDualStack => match (v4, v6) {
                (Some(a), Some(b)) => Some(vec![a, b]),
                (Some(a), None) | (None, Some(a)) => Some(vec![a]),
                (None, None) => None,
            },
        };
        ips.ok_or_else(|| AllocError::NoAvailableIpsInPool {
            pool: self.pool.to_owned(),
            family,
        })
    }
}

/// Tracks pools and the addresses Services hold in them.
#[derive(Clone, Debug, Default)]
pub struct Allocator {
    pools: BTreeMap<String, PoolState>,
    allocs: HashMap<String, Assignment>,
    ips: HashMap<IpAddr, IpUse>,
    /// Addresses in use by sharing key (non-empty keys only), per family.
    shared: HashMap<Key, [BTreeSet<u128>; 2]>,
    /// Pools whose counters may have changed since the last
    /// [`take_changed_pools`](Allocator::take_changed_pools).
    changed: BTreeSet<String>,
}

impl Allocator {
    /// An allocator with no pools.
    pub fn new() -> Allocator {
        Allocator::default()
    }

    /// MetalLB's `SetPools`: use the pools of `config`. Each existing
    /// assignment moves to the pool that now contains all its addresses, or
    /// is dropped when none does (the caller allocates those Services
    /// again). Sharing and compatibility are not re-checked, as in MetalLB.
    pub fn set_pools(&mut self, config: &Config) -> SetPoolsReport {
        let mut report = SetPoolsReport::default();
        for name in self.pools.keys() {
            if !config.pools.contains_key(name) {
                report.removed_pools.push(name.clone());
                self.changed.insert(name.clone());
            }
        }
        let mut allocs: Vec<(String, Assignment)> = self.allocs.drain().collect();
        allocs.sort_by(|a, b| a.0.cmp(&b.0));
        self.ips.clear();
        self.shared.clear();
        self.pools = config
            .pools
            .iter()
            .map(|(name, p)| (name.clone(), PoolState::new(p)))
            .collect();
        for (svc, mut a) in allocs {
            let Some(pool) = self.pool_containing(&a.ips) else {
                report.dropped.push((svc, a.ips, a.pool));
                continue;
            };
            if pool != a.pool {
                report
                    .rehomed
                    .push((svc.clone(), a.pool.clone(), pool.to_owned()));
                a.pool = pool.to_owned();
            }
            self.record(svc, a);
        }
        self.changed.extend(self.pools.keys().cloned());
        report
    }

    /// The names of the pools in use.
    pub fn pool_names(&self) -> impl Iterator<Item = &str> {
        self.pools.keys().map(String::as_str)
    }

    /// MetalLB's `Assign`: give `ips` to the Service (idempotent; also how
    /// an existing assignment is re-checked against the configuration).
    pub fn assign(
        &mut self,
        svc_key: &str,
        svc: &Service,
        ips: &[IpAddr],
    ) -> Result<(), AllocError> {
        let ips: Vec<IpAddr> = ips.iter().map(IpAddr::to_canonical).collect();
        if ips.is_empty() {
            return Err(AllocError::NotAllowed(ips));
        }
        let Some(pool) = self.pool_containing(&ips) else {
            return Err(AllocError::NotAllowed(ips));
        };
        let pool = pool.to_owned();
        if !compatible(&self.pools[&pool].pool, svc) {
            return Err(AllocError::PoolNotCompatible(pool));
        }
        if ips.len() > 2 {
            return Err(AllocError::TooManyAddresses(ips));
        }
        if let [a, b] = ips[..]
            && IpFamily::of(a) == IpFamily::of(b)
        {
            return Err(AllocError::SameFamily(a, b));
        }
        let key = Key::of(svc);
        for ip in &ips {
            self.check_sharing(svc_key, *ip, &key, &svc.ports)?;
        }
        self.record(
            svc_key.to_owned(),
            Assignment {
                pool,
                ips,
                ports: svc.ports.clone(),
                sharing_key: key.sharing,
                backend_key: key.backend,
            },
        );
        Ok(())
    }

    /// MetalLB's `Unassign`: release the Service's addresses. Returns
    /// whether it had any.
    pub fn unassign(&mut self, svc_key: &str) -> bool {
        let Some(a) = self.allocs.remove(svc_key) else {
            return false;
        };
        for ip in &a.ips {
            let Some(u) = self.ips.get_mut(ip) else {
                continue;
            };
            u.services.remove(svc_key);
            for p in &a.ports {
                if u.ports.get(p).is_some_and(|s| s == svc_key) {
                    u.ports.remove(p);
                }
            }
            if !u.services.is_empty() {
                continue;
            }
            // The last user is gone: the address is free.
            let key = std::mem::take(&mut u.key);
            self.ips.remove(ip);
            let (family, v) = (IpFamily::of(*ip), to_u128(*ip));
            if let Some(p) = self.pools.get_mut(&a.pool) {
                if let Some(c) = p.cidr_mut(family, v) {
                    c.mark_free(v);
                }
                p.in_use[family.index()] -= 1;
            }
            unshare(&mut self.shared, &key, family, v);
        }
        if let Some(p) = self.pools.get_mut(&a.pool) {
            p.services -= 1;
            self.changed.insert(a.pool);
        }
        true
    }

    /// MetalLB's `AllocateFromPool`: addresses from the named pool
    /// (`autoAssign` is not checked; compatibility is). A Service that
    /// already has addresses keeps them, whatever the pool.
    pub fn allocate_from_pool(
        &mut self,
        svc_key: &str,
        svc: &Service,
        pool: &str,
    ) -> Result<Vec<IpAddr>, AllocError> {
        if let Some(a) = self.allocs.get(svc_key) {
            let ips = a.ips.clone();
            let allocated = ServiceFamily::for_addresses(&ips)?;
            if svc.ip_family_policy != IpFamilyPolicy::PreferDualStack && allocated != svc.family {
                return Err(AllocError::WrongFamily {
                    allocated,
                    service: svc.family,
                });
            }
            self.assign(svc_key, svc, &ips)?;
            return Ok(ips);
        }
        let Some(state) = self.pools.get(pool) else {
            return Err(AllocError::UnknownPool(pool.to_owned()));
        };
        let ips = self
            .candidate(state, svc_key, svc)
            .select(svc.family, svc.ip_family_policy)?;
        self.assign(svc_key, svc, &ips)?;
        Ok(ips)
    }

    /// MetalLB's `AllocateFromPoolForAdditionalFamily`: for a
    /// PreferDualStack Service holding `existing` only, an address of the
    /// other family from `pool`; the Service then holds both.
    pub fn allocate_from_pool_for_additional_family(
        &mut self,
        svc_key: &str,
        svc: &Service,
        existing: IpAddr,
        pool: &str,
    ) -> Result<IpAddr, AllocError> {
        let existing = existing.to_canonical();
        let additional = IpFamily::of(existing).other();
        let Some(state) = self.pools.get(pool) else {
            return Err(AllocError::UnknownPool(pool.to_owned()));
        };
        let ip = self
            .candidate(state, svc_key, svc)
            .select(additional.into(), IpFamilyPolicy::SingleStack)?[0];
        self.assign(svc_key, svc, &[existing, ip])?;
        Ok(ip)
    }

    /// MetalLB's `Allocate`: a Service that already has addresses keeps
    /// them (re-checked); otherwise the pinned pools, then the fallback
    /// pools, then `no available IPs`.
    pub fn allocate(&mut self, svc_key: &str, svc: &Service) -> Result<Vec<IpAddr>, AllocError> {
        if let Some(a) = self.allocs.get(svc_key) {
            let ips = a.ips.clone();
            self.assign(svc_key, svc, &ips)?;
            return Ok(ips);
        }
        let pinned = self.pinned_pools(svc);
        let first = match self.allocate_from_pools(&pinned, svc_key, svc) {
            Ok(ips) => return Ok(ips),
            Err(e) => e,
        };
        let fallback: Vec<String> = self
            .pools
            .values()
            .filter(|p| p.pool.auto_assign && p.pool.service_allocation.is_none())
            .map(|p| p.pool.name.clone())
            .collect();
        match self.allocate_from_pools(&fallback, svc_key, svc) {
            Ok(ips) => Ok(ips),
            Err(e) => Err(AllocError::no_available(Some(if fallback.is_empty() {
                first
            } else {
                e
            }))),
        }
    }

    /// MetalLB's controller `allocateIPs`: the requested addresses if any
    /// (of the Service's family, and in the requested pool if one is
    /// named), else the requested pool, else [`allocate`](Self::allocate).
    pub fn allocate_ips(
        &mut self,
        svc_key: &str,
        svc: &Service,
    ) -> Result<Vec<IpAddr>, AllocError> {
        let pool = svc.address_pool.as_deref().filter(|p| !p.is_empty());
        if !svc.requested_ips.is_empty() {
            let ips: Vec<IpAddr> = svc.requested_ips.iter().map(IpAddr::to_canonical).collect();
            if ServiceFamily::for_addresses(&ips)? != svc.family {
                return Err(AllocError::RequestedFamilyMismatch(ips));
            }
            self.assign(svc_key, svc, &ips)?;
            if let Some(pool) = pool
                && self.pool(svc_key) != Some(pool)
            {
                self.unassign(svc_key);
                return Err(AllocError::RequestedPoolMismatch {
                    ips,
                    pool: pool.to_owned(),
                });
            }
            return Ok(ips);
        }
        if let Some(pool) = pool {
            return self.allocate_from_pool(svc_key, svc, pool);
        }
        self.allocate(svc_key, svc)
    }

    /// Rebuild state on start from the Services that already have addresses
    /// (`status.loadBalancer.ingress`): each is [`assign`](Self::assign)ed,
    /// those with the most addresses first (MetalLB's reprocess order), then
    /// by service key, before anything new is allocated, so that a restart
    /// moves no address. Entries without addresses are ignored.
    pub fn restore<I>(&mut self, existing: I) -> RestoreReport
    where
        I: IntoIterator<Item = (String, Service, Vec<IpAddr>)>,
    {
        let mut items: Vec<_> = existing
            .into_iter()
            .filter(|(_, _, ips)| !ips.is_empty())
            .collect();
        items.sort_by(|a, b| b.2.len().cmp(&a.2.len()).then_with(|| a.0.cmp(&b.0)));
        let mut report = RestoreReport::default();
        for (key, svc, ips) in items {
            match self.assign(&key, &svc, &ips) {
                Ok(()) => report.restored.push(key),
                Err(e) => report.failed.push((key, e)),
            }
        }
        report
    }

    /// The Service's assignment.
    pub fn assignment(&self, svc_key: &str) -> Option<&Assignment> {
        self.allocs.get(svc_key)
    }

    /// Every assignment, in no particular order.
    pub fn assignments(&self) -> impl Iterator<Item = (&str, &Assignment)> {
        self.allocs.iter().map(|(k, a)| (k.as_str(), a))
    }

    /// The number of Services holding addresses.
    pub fn len(&self) -> usize {
        self.allocs.len()
    }

    /// Whether no Service holds an address.
    pub fn is_empty(&self) -> bool {
        self.allocs.is_empty()
    }

    /// The Service's addresses (MetalLB's `IPs`).
    pub fn ips(&self, svc_key: &str) -> Option<&[IpAddr]> {
        self.allocs.get(svc_key).map(|a| a.ips.as_slice())
    }

    /// The pool of the Service's addresses (MetalLB's `Pool`).
    pub fn pool(&self, svc_key: &str) -> Option<&str> {
        self.allocs.get(svc_key).map(|a| a.pool.as_str())
    }

    /// The pool containing `ip` (not counting .0/.255 of avoidBuggyIPs
    /// pools).
    pub fn pool_of(&self, ip: IpAddr) -> Option<&str> {
        self.pool_containing(&[ip.to_canonical()])
    }

    /// The pool containing all of `ips` (MetalLB's `PoolForIP`).
    pub fn pool_for(&self, ips: &[IpAddr]) -> Option<&str> {
        let ips: Vec<IpAddr> = ips.iter().map(IpAddr::to_canonical).collect();
        self.pool_containing(&ips)
    }

    /// The Services holding `ip`, sorted.
    pub fn services_on(&self, ip: IpAddr) -> impl Iterator<Item = &str> {
        self.ips
            .get(&ip.to_canonical())
            .into_iter()
            .flat_map(|u| u.services.iter().map(String::as_str))
    }

    /// The counters of a pool.
    pub fn stats(&self, pool: &str) -> Option<PoolStats> {
        self.pools.get(pool).map(PoolState::stats)
    }

    /// The number of Services holding addresses of a pool (kept as they
    /// come and go: no scan).
    pub fn service_count(&self, pool: &str) -> Option<usize> {
        self.pools.get(pool).map(|p| p.services)
    }

    /// The counters of every pool, by name.
    pub fn all_stats(&self) -> impl Iterator<Item = (&str, PoolStats)> {
        self.pools.iter().map(|(n, p)| (n.as_str(), p.stats()))
    }

    /// The pools whose counters may have changed since the last call
    /// (MetalLB's `countersChangedCallback`: every assign, unassign and
    /// set_pools), including removed ones.
    pub fn take_changed_pools(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.changed)
    }

    fn pool_containing(&self, ips: &[IpAddr]) -> Option<&str> {
        if ips.is_empty() {
            return None;
        }
        self.pools
            .values()
            .find(|p| ips.iter().all(|ip| p.pool.contains(*ip)))
            .map(|p| p.pool.name.as_str())
    }

    /// MetalLB's `checkSharing`.
    fn check_sharing(
        &self,
        svc_key: &str,
        ip: IpAddr,
        key: &Key,
        ports: &[Port],
    ) -> Result<(), AllocError> {
        let Some(u) = self.ips.get(&ip) else {
            return Ok(());
        };
        if let Err(reason) = sharing_ok(&u.key, key) {
            let others: Vec<String> = u
                .services
                .iter()
                .filter(|s| *s != svc_key)
                .cloned()
                .collect();
            if !others.is_empty() {
                return Err(AllocError::SharingKeyChange {
                    service: svc_key.to_owned(),
                    others,
                    reason,
                });
            }
        }
        for p in ports {
            if u.ports.get(p).is_some_and(|s| s != svc_key) {
                return Err(AllocError::PortInUse {
                    port: p.clone(),
                    ip,
                });
            }
        }
        Ok(())
    }

    /// `check_sharing(..).is_ok()` without building errors.
    fn may_use(&self, svc_key: &str, ip: IpAddr, key: &Key, ports: &[Port]) -> bool {
        let Some(u) = self.ips.get(&ip) else {
            return true;
        };
        if sharing_ok(&u.key, key).is_err() && u.services.iter().any(|s| s != svc_key) {
            return false;
        }
        ports
            .iter()
            .all(|p| u.ports.get(p).is_none_or(|s| s == svc_key))
    }

    /// Record an assignment that is known to be allowed (MetalLB's
    /// internal `assign`).
    fn record(&mut self, svc_key: String, a: Assignment) {
        self.unassign(&svc_key);
        let key = Key {
            sharing: a.sharing_key.clone(),
            backend: a.backend_key.clone(),
        };
        let mut pool = self.pools.get_mut(&a.pool);
        for ip in &a.ips {
            let (family, v) = (IpFamily::of(*ip), to_u128(*ip));
            match self.ips.get_mut(ip) {
                Some(u) => {
                    if u.key != key {
                        unshare(&mut self.shared, &u.key, family, v);
                        share(&mut self.shared, &key, family, v);
                        u.key = key.clone();
                    }
                    u.services.insert(svc_key.clone());
                    for p in &a.ports {
                        u.ports.insert(p.clone(), svc_key.clone());
                    }
                }
                None => {
                    let u = IpUse {
                        key: key.clone(),
                        services: BTreeSet::from([svc_key.clone()]),
                        ports: a
                            .ports
                            .iter()
                            .map(|p| (p.clone(), svc_key.clone()))
                            .collect(),
                    };
                    self.ips.insert(*ip, u);
                    share(&mut self.shared, &key, family, v);
                    if let Some(p) = pool.as_deref_mut() {
                        if let Some(c) = p.cidr_mut(family, v) {
                            c.mark_used(v);
                        }
                        p.in_use[family.index()] += 1;
                    }
                }
            }
        }
        if let Some(p) = pool {
            p.services += 1;
        }
        self.changed.insert(a.pool.clone());
        self.allocs.insert(svc_key, a);
    }

    /// `pinnedPoolsForService`, sorted and without duplicates.
    fn pinned_pools(&self, svc: &Service) -> Vec<String> {
        let mut pools: Vec<&Pool> = self
            .pools
            .values()
            .map(|p| &p.pool)
            .filter(|p| {
                p.service_allocation.as_ref().is_some_and(|sa| {
                    sa.namespaces.contains(&svc.namespace) || !sa.service_selectors.is_empty()
                }) && p.auto_assign
                    && compatible(p, svc)
            })
            .collect();
        pools.sort_by(|a, b| {
            priority_rank(a)
                .cmp(&priority_rank(b))
                .then_with(|| a.name.cmp(&b.name))
        });
        pools.into_iter().map(|p| p.name.clone()).collect()
    }

    /// `allocateFromPools`: the best pool, its addresses for the policy,
    /// assigned.
    fn allocate_from_pools(
        &mut self,
        pools: &[String],
        svc_key: &str,
        svc: &Service,
    ) -> Result<Vec<IpAddr>, AllocError> {
        let ips = self
            .find_best_pool(pools, svc_key, svc)?
            .select(svc.family, svc.ip_family_policy)?;
        self.assign(svc_key, svc, &ips)?;
        Ok(ips)
    }

    /// `findBestPoolForService`.
    fn find_best_pool(
        &self,
        pools: &[String],
        svc_key: &str,
        svc: &Service,
    ) -> Result<Candidate<'_>, AllocError> {
        let primary = svc.primary_family;
        let prefer_dual = svc.ip_family_policy == IpFamilyPolicy::PreferDualStack
            && svc.family == ServiceFamily::Dual;
        let mut primary_candidate = None;
        let mut secondary_candidate = None;
        for name in pools {
            let Some(state) = self.pools.get(name) else {
                continue;
            };
            let c = self.candidate(state, svc_key, svc);
            if c.get(svc.family).is_some() {
                return Ok(c);
            }
            let p = c.ips[primary.index()];
            let s = c.ips[primary.other().index()];
            if p.is_some() && s.is_some() {
                return Ok(c);
            }
            if !prefer_dual {
                continue;
            }
            if p.is_some() && primary_candidate.is_none() {
                primary_candidate = Some(c);
            }
            if s.is_some() && secondary_candidate.is_none() {
                secondary_candidate = Some(c);
            }
        }
        primary_candidate
            .or(secondary_candidate)
            .ok_or(AllocError::NoSuitablePool(svc.family))
    }

    /// `getFreeIPsFromPool`: per family, the lowest usable address of the
    /// first CIDR (in allocation order) that has one.
    fn candidate<'a>(&self, state: &'a PoolState, svc_key: &str, svc: &Service) -> Candidate<'a> {
        let key = Key::of(svc);
        let mut ips = [None, None];
        for c in &state.cidrs {
            let slot = &mut ips[c.family.index()];
            if slot.is_some() {
                continue;
            }
            *slot = self
                .first_usable(c, svc_key, &key, &svc.ports)
                .map(|v| from_u128(c.family, v));
        }
        Candidate {
            pool: &state.pool.name,
            ips,
        }
    }

    /// `getIPFromCIDR`: the lowest address of the CIDR that is free, shared
    /// compatibly, or this Service's own; never a scan of the CIDR.
    fn first_usable(
        &self,
        c: &CidrIndex,
        svc_key: &str,
        key: &Key,
        ports: &[Port],
    ) -> Option<u128> {
        let mut best = c.first_free();
        // This Service's own addresses (it may keep or re-key them).
        if let Some(a) = self.allocs.get(svc_key) {
            for ip in &a.ips {
                let v = to_u128(*ip);
                if c.holds(IpFamily::of(*ip), v)
                    && best.is_none_or(|b| v < b)
                    && self.may_use(svc_key, *ip, key, ports)
                {
                    best = Some(v);
                }
            }
        }
        // Addresses shared under the same key, below the best so far.
        if !key.sharing.is_empty()
            && let Some(sets) = self.shared.get(key)
        {
            let upper = match best {
                Some(0) => None,
                Some(b) => Some((b - 1).min(c.last)),
                None => Some(c.last),
            };
            if let Some(upper) = upper.filter(|u| *u >= c.first) {
                for v in sets[c.family.index()].range(c.first..=upper) {
                    if c.avoid && is_buggy_v4(*v) {
                        continue;
                    }
                    if self.may_use(svc_key, from_u128(c.family, *v), key, ports) {
                        best = Some(*v);
                        break;
                    }
                }
            }
        }
        best
    }
}

fn share(shared: &mut HashMap<Key, [BTreeSet<u128>; 2]>, key: &Key, family: IpFamily, v: u128) {
    if key.sharing.is_empty() {
        return;
    }
    shared.entry(key.clone()).or_default()[family.index()].insert(v);
}

fn unshare(shared: &mut HashMap<Key, [BTreeSet<u128>; 2]>, key: &Key, family: IpFamily, v: u128) {
    if let Some(sets) = shared.get_mut(key) {
        sets[family.index()].remove(&v);
        if sets.iter().all(BTreeSet::is_empty) {
            shared.remove(key);
        }
    }
}
