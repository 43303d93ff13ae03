//! Differential property test of the allocator against a reference model
//! written the MetalLB way (a port of `internal/allocator`: maps keyed by
//! address, and a sequential scan of every address of every CIDR), on small
//! pools (/28, /124, /29, a summarised range, /31) with random
//! avoidBuggyIPs, autoAssign, serviceAllocation, sharing keys and ports.
//!
//! After every operation: both give the same result (addresses or error
//! text) and the same assignments; no address is held by two Services that
//! may not share it; the counters equal a brute-force recount.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use config::selector::Selector;
use config::{AddressBlock, Config, Pool, ServiceAllocation};
use controller::alloc::{Allocator, IpFamily, IpFamilyPolicy, Port, Service, ServiceFamily};
use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use proptest::prelude::*;

// ------------------------------------------------------------ the model

type Key = (String, String);

#[derive(Clone, Debug, PartialEq, Eq)]
struct MAlloc {
    pool: String,
    ips: Vec<IpAddr>,
    ports: Vec<Port>,
    key: Key,
}

#[derive(Default)]
struct Model {
    pools: BTreeMap<String, Pool>,
    allocated: BTreeMap<String, MAlloc>,
    sharing_key_for_ip: HashMap<IpAddr, Key>,
    ports_in_use: HashMap<IpAddr, HashMap<Port, String>>,
    services_on_ip: HashMap<IpAddr, BTreeSet<String>>,
}

fn family(ip: IpAddr) -> IpFamily {
    match ip {
        IpAddr::V4(_) => IpFamily::V4,
        IpAddr::V6(_) => IpFamily::V6,
    }
}

fn buggy(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V4(v4) if matches!(v4.octets()[3], 0 | 255))
}

fn quote_ips(ips: &[IpAddr]) -> String {
    let v: Vec<String> = ips.iter().map(|ip| format!("\"{ip}\"")).collect();
    format!("[{}]", v.join(" "))
}

/// Every address of a CIDR, in order (the pools here are small).
fn addresses(net: &IpNet) -> Vec<IpAddr> {
    match net {
        IpNet::V4(n) => (u32::from(n.network())..=u32::from(n.broadcast()))
            .map(|v| IpAddr::from(std::net::Ipv4Addr::from(v)))
            .collect(),
        IpNet::V6(n) => (u128::from(n.network())..=u128::from(n.broadcast()))
            .map(|v| IpAddr::from(std::net::Ipv6Addr::from(v)))
            .collect(),
    }
}

fn pool_contains(p: &Pool, ip: IpAddr) -> bool {
    if p.avoid_buggy_ips && buggy(ip) {
        return false;
    }
    p.cidrs.iter().any(|c| c.contains(&ip))
}

fn compatible(p: &Pool, svc: &Service) -> bool {
    let Some(sa) = &p.service_allocation else {
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

fn sharing_ok(existing: &Key, new: &Key) -> bool {
    !existing.0.is_empty() && !new.0.is_empty() && existing == new
}

#[derive(Clone, Copy, Default)]
struct MCandidate {
    v4: Option<IpAddr>,
    v6: Option<IpAddr>,
}

impl MCandidate {
    fn get(&self, f: ServiceFamily) -> Option<IpAddr> {
        match f {
            ServiceFamily::Ipv4 => self.v4,
            ServiceFamily::Ipv6 => self.v6,
            ServiceFamily::Dual => None,
        }
    }
}

fn fam_of(ips: &[IpAddr]) -> ServiceFamily {
    match ips {
        [ip] => match family(*ip) {
            IpFamily::V4 => ServiceFamily::Ipv4,
            IpFamily::V6 => ServiceFamily::Ipv6,
        },
        _ => ServiceFamily::Dual,
    }
}

impl Model {
    fn pool_for(&self, ips: &[IpAddr]) -> Option<String> {
        if ips.is_empty() {
            return None;
        }
        self.pools
            .values()
            .find(|p| ips.iter().all(|ip| pool_contains(p, *ip)))
            .map(|p| p.name.clone())
    }

    fn set_pools(&mut self, cfg: &Config) -> Vec<String> {
        self.pools = cfg.pools.clone();
        let mut dropped = Vec::new();
        let svcs: Vec<String> = self.allocated.keys().cloned().collect();
        for svc in svcs {
            let mut alloc = self.allocated[&svc].clone();
            match self.pool_for(&alloc.ips) {
                None => {
                    self.unassign(&svc);
                    dropped.push(svc);
                }
                Some(p) if p != alloc.pool => {
                    self.unassign(&svc);
                    alloc.pool = p;
                    self.assign_internal(&svc, alloc);
                }
                Some(_) => {}
            }
        }
        dropped
    }

    fn assign_internal(&mut self, svc: &str, alloc: MAlloc) {
        self.unassign(svc);
        for ip in &alloc.ips {
            self.sharing_key_for_ip.insert(*ip, alloc.key.clone());
            let ports = self.ports_in_use.entry(*ip).or_default();
            for p in &alloc.ports {
                ports.insert(p.clone(), svc.to_owned());
            }
            self.services_on_ip
                .entry(*ip)
                .or_default()
                .insert(svc.to_owned());
        }
        self.allocated.insert(svc.to_owned(), alloc);
    }

    fn unassign(&mut self, svc: &str) -> bool {
        let Some(al) = self.allocated.remove(svc) else {
            return false;
        };
        for ip in &al.ips {
            if let Some(ports) = self.ports_in_use.get_mut(ip) {
                for p in &al.ports {
                    assert_eq!(ports.get(p).map(String::as_str), Some(svc), "incoherent");
                    ports.remove(p);
                }
            }
            let on = self.services_on_ip.get_mut(ip).unwrap();
            on.remove(svc);
            if on.is_empty() {
                self.services_on_ip.remove(ip);
                self.ports_in_use.remove(ip);
                self.sharing_key_for_ip.remove(ip);
            }
        }
        true
    }

    fn check_sharing(
        &self,
        svc: &str,
        ip: IpAddr,
        ports: &[Port],
        key: &Key,
    ) -> Result<(), String> {
        if let Some(existing) = self.sharing_key_for_ip.get(&ip) {
            if !sharing_ok(existing, key) {
                let others: Vec<&str> = self.services_on_ip[&ip]
                    .iter()
                    .map(String::as_str)
                    .filter(|s| *s != svc)
                    .collect();
                if !others.is_empty() {
                    return Err(format!(
                        "can't change sharing key for \"{svc}\", address also in use by {}",
                        others.join(",")
                    ));
                }
            }
            for p in ports {
                if let Some(cur) = self.ports_in_use.get(&ip).and_then(|m| m.get(p))
                    && cur != svc
                {
                    return Err(format!("port {p} is already in use on \"{ip}\""));
                }
            }
        }
        Ok(())
    }

    fn assign(&mut self, svc_key: &str, svc: &Service, ips: &[IpAddr]) -> Result<(), String> {
        let ips: Vec<IpAddr> = ips.iter().map(IpAddr::to_canonical).collect();
        let Some(pool) = self.pool_for(&ips) else {
            return Err(format!("{} is not allowed in config", quote_ips(&ips)));
        };
        if !compatible(&self.pools[&pool], svc) {
            return Err(format!("pool {pool} not compatible for ip assignment"));
        }
        if ips.len() > 2 {
            return Err(format!("more than two addresses {}", quote_ips(&ips)));
        }
        if ips.len() == 2 && family(ips[0]) == family(ips[1]) {
            return Err(format!("\"{}\" \"{}\" has the same family", ips[0], ips[1]));
        }
        let key = (svc.sharing_key.clone(), svc.backend_key.clone());
        for ip in &ips {
            self.check_sharing(svc_key, *ip, &svc.ports, &key)?;
        }
        self.assign_internal(
            svc_key,
            MAlloc {
                pool,
                ips,
                ports: svc.ports.clone(),
                key,
            },
        );
        Ok(())
    }

    /// `getIPFromCIDR`: the sequential scan.
    fn ip_from_cidr(
        &self,
        net: &IpNet,
        avoid: bool,
        svc_key: &str,
        svc: &Service,
    ) -> Option<IpAddr> {
        let key = (svc.sharing_key.clone(), svc.backend_key.clone());
        addresses(net).into_iter().find(|ip| {
            !(avoid && buggy(*ip)) && self.check_sharing(svc_key, *ip, &svc.ports, &key).is_ok()
        })
    }

    fn free_ips(&self, pool: &Pool, svc_key: &str, svc: &Service) -> MCandidate {
        let mut c = MCandidate::default();
        for net in pool.addresses.iter().flat_map(|b| b.cidrs.iter()) {
            let slot = match net {
                IpNet::V4(_) => &mut c.v4,
                IpNet::V6(_) => &mut c.v6,
            };
            if slot.is_some() {
                continue;
            }
            *slot = self.ip_from_cidr(net, pool.avoid_buggy_ips, svc_key, svc);
        }
        c
    }

    fn select(
        c: MCandidate,
        pool: &str,
        fam: ServiceFamily,
        policy: IpFamilyPolicy,
    ) -> Result<Vec<IpAddr>, String> {
        let r = match policy {
            IpFamilyPolicy::SingleStack => c.get(fam).map(|ip| vec![ip]),
            IpFamilyPolicy::RequireDualStack => match (c.v4, c.v6) {
                (Some(a), Some(b)) => Some(vec![a, b]),
                _ => None,
            },
            IpFamilyPolicy::PreferDualStack => match (c.v4, c.v6) {
                (Some(a), Some(b)) => Some(vec![a, b]),
                (Some(a), None) | (None, Some(a)) => Some(vec![a]),
                _ => None,
            },
        };
        r.ok_or_else(|| format!("no available IPs in pool {pool} for {fam} IPFamily"))
    }

    fn find_best(
        &self,
        pools: &[String],
        svc_key: &str,
        svc: &Service,
    ) -> Result<(String, MCandidate), String> {
        let (primary, secondary) = match svc.primary_family {
            IpFamily::V4 => (ServiceFamily::Ipv4, ServiceFamily::Ipv6),
            IpFamily::V6 => (ServiceFamily::Ipv6, ServiceFamily::Ipv4),
        };
        let mut pc = None;
        let mut sc = None;
        for name in pools {
            let c = self.free_ips(&self.pools[name], svc_key, svc);
            if c.get(svc.family).is_some() {
                return Ok((name.clone(), c));
            }
            let (p, s) = (c.get(primary), c.get(secondary));
            if p.is_some() && s.is_some() {
                return Ok((name.clone(), c));
            }
            if !(svc.ip_family_policy == IpFamilyPolicy::PreferDualStack
                && svc.family == ServiceFamily::Dual)
            {
                continue;
            }
            if p.is_some() && pc.is_none() {
                pc = Some((name.clone(), c));
            }
            if s.is_some() && sc.is_none() {
                sc = Some((name.clone(), c));
            }
        }
        pc.or(sc)
            .ok_or_else(|| format!("no suitable pool for {} IPFamily", svc.family))
    }

    fn allocate_from_pools(
        &mut self,
        pools: &[String],
        svc_key: &str,
        svc: &Service,
    ) -> Result<Vec<IpAddr>, String> {
        let (name, c) = self.find_best(pools, svc_key, svc)?;
        let ips = Self::select(c, &name, svc.family, svc.ip_family_policy)?;
        self.assign(svc_key, svc, &ips)?;
        Ok(ips)
    }

    fn allocate(&mut self, svc_key: &str, svc: &Service) -> Result<Vec<IpAddr>, String> {
        if let Some(a) = self.allocated.get(svc_key) {
            let ips = a.ips.clone();
            self.assign(svc_key, svc, &ips)?;
            return Ok(ips);
        }
        let rank = |p: &Pool| match &p.service_allocation {
            Some(sa) if sa.priority > 0 => (0, sa.priority),
            _ => (1, 0),
        };
        let mut pinned: Vec<&Pool> = Vec::new();
        for p in self.pools.values() {
            let Some(sa) = &p.service_allocation else {
                continue;
            };
            let by_ns = sa.namespaces.contains(&svc.namespace);
            let by_sel = !sa.service_selectors.is_empty();
            if (by_ns || by_sel) && p.auto_assign && compatible(p, svc) {
                pinned.push(p);
            }
        }
        pinned.sort_by(|a, b| rank(a).cmp(&rank(b)).then(a.name.cmp(&b.name)));
        let pinned: Vec<String> = pinned.iter().map(|p| p.name.clone()).collect();
        if let Ok(ips) = self.allocate_from_pools(&pinned, svc_key, svc) {
            return Ok(ips);
        }
        let all: Vec<String> = self
            .pools
            .values()
            .filter(|p| p.auto_assign && p.service_allocation.is_none())
            .map(|p| p.name.clone())
            .collect();
        self.allocate_from_pools(&all, svc_key, svc)
            .map_err(|_| "no available IPs".to_string())
    }

    fn allocate_from_pool(
        &mut self,
        svc_key: &str,
        svc: &Service,
        pool: &str,
    ) -> Result<Vec<IpAddr>, String> {
        if let Some(a) = self.allocated.get(svc_key) {
            let ips = a.ips.clone();
            let f = fam_of(&ips);
            if svc.ip_family_policy != IpFamilyPolicy::PreferDualStack && f != svc.family {
                return Err(format!(
                    "IP for wrong family assigned alloc {f} service family {}",
                    svc.family
                ));
            }
            self.assign(svc_key, svc, &ips)?;
            return Ok(ips);
        }
        let Some(p) = self.pools.get(pool) else {
            return Err(format!("unknown pool \"{pool}\""));
        };
        let c = self.free_ips(p, svc_key, svc);
        let ips = Self::select(c, pool, svc.family, svc.ip_family_policy)?;
        self.assign(svc_key, svc, &ips)?;
        Ok(ips)
    }

    fn additional(
        &mut self,
        svc_key: &str,
        svc: &Service,
        existing: IpAddr,
        pool: &str,
    ) -> Result<IpAddr, String> {
        let add = match family(existing) {
            IpFamily::V4 => ServiceFamily::Ipv6,
            IpFamily::V6 => ServiceFamily::Ipv4,
        };
        let Some(p) = self.pools.get(pool) else {
            return Err(format!("unknown pool \"{pool}\""));
        };
        let c = self.free_ips(p, svc_key, svc);
        let ip = Self::select(c, pool, add, IpFamilyPolicy::SingleStack)?[0];
        self.assign(svc_key, svc, &[existing, ip])?;
        Ok(ip)
    }
}

// ------------------------------------------------------------ inputs

/// The address blocks pools are built from (never overlapping: block 0 is
/// either a /28 or the /29 inside it).
const BLOCKS: [&str; 7] = [
    "10.0.0.0/28",
    "10.0.0.240/28",
    "fd00::/124",
    "fd00::100/124",
    "10.0.1.3-10.0.1.9",
    "10.0.2.0/31",
    // 10.0.3.255/32 and 10.0.4.0/31: buggy ends with avoidBuggyIPs.
    "10.0.3.255-10.0.4.1",
];
const POOLS: [&str; 3] = ["a", "b", "c"];
const KEYS: [&str; 8] = [
    "ns1/s0", "ns1/s1", "ns1/s2", "ns2/s3", "ns2/s4", "ns1/s5", "ns2/s6", "ns1/s7",
];

#[derive(Clone, Debug)]
struct PoolAttrs {
    avoid: bool,
    auto_assign: bool,
    reversed: bool,
    /// None, or (priority, pinned to ns1, selector team=a).
    sa: Option<(i32, bool, bool)>,
}

#[derive(Clone, Debug)]
struct Layout {
    /// Owner of each block (index into POOLS, 3 = no pool).
    owners: [usize; 7],
    small_first_block: bool,
    attrs: [PoolAttrs; 3],
}

fn selector_team_a() -> Selector {
    Selector::from_label_selector(&LabelSelector {
        match_labels: Some(BTreeMap::from([("team".to_string(), "a".to_string())])),
        match_expressions: None,
    })
    .unwrap()
}

impl Layout {
    fn config(&self) -> Config {
        let mut pools = BTreeMap::new();
        for (pi, name) in POOLS.iter().enumerate() {
            let mut specs: Vec<&str> = (0..BLOCKS.len())
                .filter(|b| self.owners[*b] == pi)
                .map(|b| {
                    if b == 0 && self.small_first_block {
                        "10.0.0.0/29"
                    } else {
                        BLOCKS[b]
                    }
                })
                .collect();
            if specs.is_empty() {
                continue;
            }
            let attrs = &self.attrs[pi];
            if attrs.reversed {
                specs.reverse();
            }
            let addresses: Vec<AddressBlock> = specs
                .iter()
                .map(|s| AddressBlock {
                    spec: (*s).to_owned(),
                    cidrs: config::cidr::parse_addresses(s).unwrap(),
                })
                .collect();
            let mut cidrs: Vec<IpNet> = addresses.iter().flat_map(|b| b.cidrs.clone()).collect();
            cidrs.sort();
            let service_allocation = attrs.sa.map(|(priority, ns, sel)| ServiceAllocation {
                priority,
                namespaces: if ns {
                    BTreeSet::from(["ns1".to_string()])
                } else {
                    BTreeSet::new()
                },
                namespace_selectors: Vec::new(),
                service_selectors: if sel {
                    vec![selector_team_a()]
                } else {
                    Vec::new()
                },
            });
            pools.insert(
                (*name).to_owned(),
                Pool {
                    name: (*name).to_owned(),
                    labels: BTreeMap::new(),
                    addresses,
                    cidrs,
                    auto_assign: attrs.auto_assign,
                    avoid_buggy_ips: attrs.avoid,
                    service_allocation,
                    l2_advertisements: Vec::new(),
                    bgp_advertisements: Vec::new(),
                },
            );
        }
        Config {
            pools,
            ..Config::default()
        }
    }
}

fn pool_attrs() -> impl Strategy<Value = PoolAttrs> {
    (
        any::<bool>(),
        prop::bool::weighted(0.85),
        any::<bool>(),
        prop::option::weighted(0.4, (0..3i32, any::<bool>(), any::<bool>())),
    )
        .prop_map(|(avoid, auto_assign, reversed, sa)| PoolAttrs {
            avoid,
            auto_assign,
            reversed,
            sa,
        })
}

fn layout() -> impl Strategy<Value = Layout> {
    (
        prop::array::uniform7(0..4usize),
        any::<bool>(),
        prop::array::uniform3(pool_attrs()),
    )
        .prop_map(|(owners, small_first_block, attrs)| Layout {
            owners,
            small_first_block,
            attrs,
        })
}

fn all_ports() -> Vec<Port> {
    vec![Port::tcp(80), Port::tcp(443), Port::udp(53)]
}

fn service(idx: usize) -> impl Strategy<Value = Service> {
    (
        0..3usize,
        0..5usize,
        prop::option::weighted(0.2, 0..2usize),
        0..3usize,
        any::<bool>(),
        prop::bool::weighted(0.2),
        prop::sample::subsequence(all_ports(), 0..=3),
    )
        .prop_map(
            move |(team, fam_policy, prefer_single, sharing, v6_first, local, ports)| {
                let (ns, name) = KEYS[idx].split_once('/').unwrap();
                let (family, policy) = match fam_policy {
                    0 | 1 => (ServiceFamily::Ipv4, IpFamilyPolicy::SingleStack),
                    2 => (ServiceFamily::Ipv6, IpFamilyPolicy::SingleStack),
                    3 => (ServiceFamily::Dual, IpFamilyPolicy::PreferDualStack),
                    _ => (ServiceFamily::Dual, IpFamilyPolicy::RequireDualStack),
                };
                let policy = if prefer_single.is_some() && family != ServiceFamily::Dual {
                    IpFamilyPolicy::PreferDualStack
                } else {
                    policy
                };
                let mut s = Service::new(ns, name, family);
                s.ip_family_policy = policy;
                s.primary_family = if v6_first { IpFamily::V6 } else { IpFamily::V4 };
                match team {
                    0 => {}
                    1 => {
                        s.labels.insert("team".into(), "a".into());
                    }
                    _ => {
                        s.labels.insert("team".into(), "b".into());
                    }
                }
                s.sharing_key = ["", "k1", "k2"][sharing].to_owned();
                if local {
                    s.backend_key = "app=x".into();
                }
                s.ports = ports;
                s
            },
        )
}

/// Addresses to request: pool addresses (including .0/.255) and strays.
fn any_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        (0u32..16).prop_map(|i| IpAddr::from([10, 0, 0, i as u8])),
        (240u32..256).prop_map(|i| IpAddr::from([10, 0, 0, i as u8])),
        (0u32..12).prop_map(|i| IpAddr::from([10, 0, 1, i as u8])),
        (0u32..2).prop_map(|i| IpAddr::from([10, 0, 2, i as u8])),
        Just(IpAddr::from([10, 0, 3, 255])),
        (0u32..2).prop_map(|i| IpAddr::from([10, 0, 4, i as u8])),
        (0u128..16).prop_map(|i| IpAddr::from(std::net::Ipv6Addr::from(0xfd00_u128 << 112 | i))),
        (0u128..16)
            .prop_map(|i| IpAddr::from(std::net::Ipv6Addr::from(0xfd00_u128 << 112 | 0x100 | i))),
        Just(IpAddr::from([192, 0, 2, 1])),
    ]
}

#[derive(Clone, Debug)]
enum Op {
    Allocate(usize, Service),
    AllocateFromPool(usize, Service, &'static str),
    Assign(usize, Service, Vec<IpAddr>),
    AllocateIps(usize, Service, Vec<IpAddr>, Option<&'static str>),
    Additional(usize, Service, &'static str),
    Unassign(usize),
    SetPools(Layout),
}

fn op() -> impl Strategy<Value = Op> {
    let idx = 0..KEYS.len();
    let pool = prop::sample::select(vec!["a", "b", "c", "zz"]);
    prop_oneof![
        6 => idx.clone().prop_flat_map(|i| service(i).prop_map(move |s| Op::Allocate(i, s))),
        2 => (idx.clone(), pool.clone()).prop_flat_map(|(i, p)| service(i)
            .prop_map(move |s| Op::AllocateFromPool(i, s, p))),
        2 => (idx.clone(), prop::collection::vec(any_ip(), 0..=3)).prop_flat_map(|(i, ips)| service(i)
            .prop_map(move |s| Op::Assign(i, s, ips.clone()))),
        1 => (idx.clone(), prop::collection::vec(any_ip(), 0..=2), prop::option::of(pool.clone()))
            .prop_flat_map(|(i, ips, p)| service(i)
            .prop_map(move |s| Op::AllocateIps(i, s, ips.clone(), p))),
        1 => (idx.clone(), pool).prop_flat_map(|(i, p)| service(i)
            .prop_map(move |s| Op::Additional(i, s, p))),
        3 => idx.prop_map(Op::Unassign),
        1 => layout().prop_map(Op::SetPools),
    ]
}

// ------------------------------------------------------------ checks

fn show<T: std::fmt::Debug>(r: Result<T, impl ToString>) -> Result<String, String> {
    r.map(|v| format!("{v:?}")).map_err(|e| e.to_string())
}

fn check_state(a: &Allocator, m: &Model) -> Result<(), TestCaseError> {
    // Same assignments.
    let got: BTreeMap<String, MAlloc> = a
        .assignments()
        .map(|(k, v)| {
            (
                k.to_owned(),
                MAlloc {
                    pool: v.pool.clone(),
                    ips: v.ips.clone(),
                    ports: v.ports.clone(),
                    key: (v.sharing_key.clone(), v.backend_key.clone()),
                },
            )
        })
        .collect();
    prop_assert_eq!(&got, &m.allocated);

    // No address held by two Services that may not share it.
    let mut users: BTreeMap<IpAddr, Vec<&MAlloc>> = BTreeMap::new();
    for al in got.values() {
        for ip in &al.ips {
            users.entry(*ip).or_default().push(al);
        }
    }
    for (ip, us) in &users {
        if us.len() < 2 {
            continue;
        }
        let mut seen = BTreeSet::new();
        for u in us {
            prop_assert!(!u.key.0.is_empty(), "{} shared without a key", ip);
            prop_assert_eq!(&u.key, &us[0].key, "{} shared under two keys", ip);
            for p in &u.ports {
                prop_assert!(seen.insert(p.clone()), "{} port {} twice", ip, p);
            }
        }
        let a_users: Vec<&str> = a.services_on(*ip).collect();
        prop_assert_eq!(a_users.len(), us.len());
    }

    // Counters equal a brute-force recount.
    for (name, p) in &m.pools {
        let st = a.stats(name).expect("stats of a pool");
        let mut cap = [0i64; 2];
        for net in &p.cidrs {
            for ip in addresses(net) {
                if pool_contains(p, ip) {
                    cap[usize::from(family(ip) == IpFamily::V6)] += 1;
                }
            }
        }
        let mut used = [BTreeSet::new(), BTreeSet::new()];
        for al in m.allocated.values().filter(|al| &al.pool == name) {
            for ip in &al.ips {
                used[usize::from(family(*ip) == IpFamily::V6)].insert(*ip);
            }
        }
        let in_use = [used[0].len() as i64, used[1].len() as i64];
        prop_assert_eq!(
            (st.ipv4.capacity, st.ipv4.in_use, st.ipv4.available),
            (cap[0], in_use[0], cap[0] - in_use[0]),
            "pool {} ipv4",
            name
        );
        prop_assert_eq!(
            (st.ipv6.capacity, st.ipv6.in_use, st.ipv6.available),
            (cap[1], in_use[1], cap[1] - in_use[1]),
            "pool {} ipv6",
            name
        );
        prop_assert_eq!(st.total.in_use, in_use[0] + in_use[1]);
        prop_assert_eq!(st.total.capacity, cap[0] + cap[1]);
        let services = m.allocated.values().filter(|al| &al.pool == name).count();
        prop_assert_eq!(
            a.service_count(name),
            Some(services),
            "pool {} services",
            name
        );
    }
    prop_assert_eq!(a.all_stats().count(), m.pools.len());
    Ok(())
}

fn run(initial: Layout, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut a = Allocator::new();
    let mut m = Model::default();
    let cfg = initial.config();
    a.set_pools(&cfg);
    m.set_pools(&cfg);
    for op in ops {
        match op {
            Op::Allocate(i, s) => {
                let k = KEYS[i];
                prop_assert_eq!(show(a.allocate(k, &s)), show(m.allocate(k, &s)));
            }
            Op::AllocateFromPool(i, s, p) => {
                let k = KEYS[i];
                prop_assert_eq!(
                    show(a.allocate_from_pool(k, &s, p)),
                    show(m.allocate_from_pool(k, &s, p))
                );
            }
            Op::Assign(i, s, ips) => {
                let k = KEYS[i];
                prop_assert_eq!(show(a.assign(k, &s, &ips)), show(m.assign(k, &s, &ips)));
            }
            Op::AllocateIps(i, mut s, ips, p) => {
                let k = KEYS[i];
                s.requested_ips = ips;
                s.address_pool = p.map(str::to_owned);
                let got = show(a.allocate_ips(k, &s));
                // The model of controller allocateIPs, on the model's ops.
                let want = if !s.requested_ips.is_empty() {
                    match ServiceFamily::for_addresses(&s.requested_ips) {
                        Err(e) => Err(e.to_string()),
                        Ok(f) if f != s.family => Err(format!(
                            "requested loadBalancer IP(s) {} does not match the ipFamily of the service",
                            quote_ips(&s.requested_ips)
                        )),
                        Ok(_) => match m.assign(k, &s, &s.requested_ips.clone()) {
                            Err(e) => Err(e),
                            Ok(()) => match p {
                                Some(p) if m.allocated[k].pool != p => {
                                    m.unassign(k);
                                    Err(format!(
                                        "requested loadBalancer IP(s) {} is not compatible with requested address pool {p}",
                                        quote_ips(&s.requested_ips)
                                    ))
                                }
                                _ => Ok(format!("{:?}", s.requested_ips)),
                            },
                        },
                    }
                } else if let Some(p) = p {
                    show(m.allocate_from_pool(k, &s, p))
                } else {
                    show(m.allocate(k, &s))
                };
                prop_assert_eq!(got, want);
            }
            Op::Additional(i, s, p) => {
                let k = KEYS[i];
                // MetalLB calls it for a Service holding one address; a
                // Service holding both exercises its own addresses as
                // candidates.
                if let Some(al) = m.allocated.get(k) {
                    let existing = al.ips[0];
                    prop_assert_eq!(
                        show(a.allocate_from_pool_for_additional_family(k, &s, existing, p)),
                        show(m.additional(k, &s, existing, p))
                    );
                }
            }
            Op::Unassign(i) => {
                let k = KEYS[i];
                prop_assert_eq!(a.unassign(k), m.unassign(k));
            }
            Op::SetPools(l) => {
                let cfg = l.config();
                let report = a.set_pools(&cfg);
                let dropped: Vec<String> = report.dropped.iter().map(|d| d.0.clone()).collect();
                prop_assert_eq!(dropped, m.set_pools(&cfg));
            }
        }
        check_state(&a, &m)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn allocator_matches_sequential_scan_model(
        initial in layout(),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        run(initial, ops)?;
    }
}

/// Many Services on one small dual pool, so that pools fill up and sharing
/// candidates pile up below the lowest free address.
#[test]
fn crowded_pool_matches_model() {
    let layout = Layout {
        owners: [0, 0, 0, 3, 3, 3, 3],
        small_first_block: true,
        attrs: std::array::from_fn(|_| PoolAttrs {
            avoid: true,
            auto_assign: true,
            reversed: false,
            sa: None,
        }),
    };
    let mut ops = Vec::new();
    for round in 0..4 {
        for (i, k) in KEYS.iter().enumerate() {
            let (ns, name) = k.split_once('/').unwrap();
            let mut s = Service::new(ns, name, ServiceFamily::Ipv4);
            s.sharing_key = if (i + round) % 3 == 0 {
                String::new()
            } else {
                "k1".into()
            };
            s.ports = vec![Port::tcp(80 + ((i + round) % 2) as i32)];
            ops.push(Op::Allocate(i, s));
        }
        ops.push(Op::Unassign(round * 2));
    }
    run(layout, ops).unwrap();
}
