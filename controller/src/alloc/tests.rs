//! Unit tests: every rule and message, each with a valid twin.

use std::collections::BTreeMap;
use std::error::Error as _;
use std::net::IpAddr;

use config::selector::Selector;
use config::{AddressBlock, Config, Pool, ServiceAllocation};
use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::*;

fn pool(name: &str, addrs: &[&str]) -> Pool {
    let addresses: Vec<AddressBlock> = addrs
        .iter()
        .map(|a| AddressBlock {
            spec: (*a).to_owned(),
            cidrs: config::cidr::parse_addresses(a).unwrap(),
        })
        .collect();
    let mut cidrs: Vec<IpNet> = addresses.iter().flat_map(|b| b.cidrs.clone()).collect();
    cidrs.sort();
    Pool {
        name: name.to_owned(),
        labels: BTreeMap::new(),
        addresses,
        cidrs,
        auto_assign: true,
        avoid_buggy_ips: false,
        service_allocation: None,
        l2_advertisements: Vec::new(),
        bgp_advertisements: Vec::new(),
    }
}

fn avoid(mut p: Pool) -> Pool {
    p.avoid_buggy_ips = true;
    p
}

fn manual(mut p: Pool) -> Pool {
    p.auto_assign = false;
    p
}

fn selector(k: &str, v: &str) -> Selector {
    Selector::from_label_selector(&LabelSelector {
        match_labels: Some(BTreeMap::from([(k.to_owned(), v.to_owned())])),
        match_expressions: None,
    })
    .unwrap()
}

fn pinned(mut p: Pool, priority: i32, namespaces: &[&str], selectors: &[(&str, &str)]) -> Pool {
    p.service_allocation = Some(ServiceAllocation {
        priority,
        namespaces: namespaces.iter().map(|s| (*s).to_owned()).collect(),
        namespace_selectors: Vec::new(),
        service_selectors: selectors.iter().map(|(k, v)| selector(k, v)).collect(),
    });
    p
}

fn cfg(pools: Vec<Pool>) -> Config {
    Config {
        pools: pools.into_iter().map(|p| (p.name.clone(), p)).collect(),
        ..Config::default()
    }
}

fn allocator(pools: Vec<Pool>) -> Allocator {
    let mut a = Allocator::new();
    a.set_pools(&cfg(pools));
    a
}

fn svc(name: &str) -> Service {
    let mut s = Service::new("ns", name, ServiceFamily::Ipv4);
    s.ports = vec![Port::tcp(80)];
    s
}

fn svc6(name: &str) -> Service {
    Service {
        family: ServiceFamily::Ipv6,
        ..svc(name)
    }
}

fn dual(name: &str, policy: IpFamilyPolicy) -> Service {
    Service {
        family: ServiceFamily::Dual,
        ip_family_policy: policy,
        ..svc(name)
    }
}

fn shared(name: &str, key: &str, ports: Vec<Port>) -> Service {
    Service {
        sharing_key: key.to_owned(),
        ports,
        ..svc(name)
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn ips(v: &[&str]) -> Vec<IpAddr> {
    v.iter().map(|s| ip(s)).collect()
}

fn err<T: std::fmt::Debug>(r: Result<T, AllocError>) -> String {
    r.unwrap_err().to_string()
}

fn source(e: &AllocError) -> String {
    e.source().map(|s| s.to_string()).unwrap_or_default()
}

// ---------------------------------------------------------------- assign

#[test]
fn assign_is_idempotent_and_exclusive() {
    let mut a = allocator(vec![pool("p", &["10.0.0.0/30"])]);
    a.assign("ns/a", &svc("a"), &ips(&["10.0.0.1"])).unwrap();
    a.assign("ns/a", &svc("a"), &ips(&["10.0.0.1"])).unwrap();
    assert_eq!(a.ips("ns/a"), Some(&ips(&["10.0.0.1"])[..]));
    assert_eq!(a.pool("ns/a"), Some("p"));
    assert_eq!(
        err(a.assign("ns/b", &svc("b"), &ips(&["10.0.0.1"]))),
        "can't change sharing key for \"ns/b\", address also in use by ns/a"
    );
    a.assign("ns/b", &svc("b"), &ips(&["10.0.0.2"])).unwrap();
    // Moving to another address releases the first one.
    a.assign("ns/a", &svc("a"), &ips(&["10.0.0.3"])).unwrap();
    a.assign("ns/c", &svc("c"), &ips(&["10.0.0.1"])).unwrap();
    assert!(a.unassign("ns/c"));
    assert!(!a.unassign("ns/c"));
    a.assign("ns/d", &svc("d"), &ips(&["10.0.0.1"])).unwrap();
}

#[test]
fn not_allowed_in_config() {
    let mut a = allocator(vec![pool("p", &["10.0.0.0/30"])]);
    assert_eq!(
        err(a.assign("ns/a", &svc("a"), &ips(&["10.0.1.1"]))),
        "[\"10.0.1.1\"] is not allowed in config"
    );
    assert_eq!(
        err(a.assign("ns/a", &svc("a"), &[])),
        "[] is not allowed in config"
    );
    a.assign("ns/a", &svc("a"), &ips(&["10.0.0.1"])).unwrap();
    // An IPv4-mapped IPv6 address is the IPv4 address, as in Go.
    a.assign("ns/b", &svc("b"), &ips(&["::ffff:10.0.0.2"]))
        .unwrap();
    assert_eq!(a.ips("ns/b"), Some(&ips(&["10.0.0.2"])[..]));
}

#[test]
fn addresses_from_two_pools_are_not_allowed() {
    let mut a = allocator(vec![
        pool("p", &["10.0.0.0/30", "fd00::/126"]),
        pool("q", &["fd00:1::/126"]),
    ]);
    assert_eq!(
        err(a.assign(
            "ns/a",
            &dual("a", IpFamilyPolicy::RequireDualStack),
            &ips(&["10.0.0.1", "fd00:1::1"])
        )),
        "[\"10.0.0.1\" \"fd00:1::1\"] is not allowed in config"
    );
    a.assign(
        "ns/a",
        &dual("a", IpFamilyPolicy::RequireDualStack),
        &ips(&["10.0.0.1", "fd00::1"]),
    )
    .unwrap();
    assert_eq!(a.pool("ns/a"), Some("p"));
}

#[test]
fn buggy_addresses_are_not_in_avoid_buggy_pools() {
    let mut a = allocator(vec![
        avoid(pool("p", &["10.0.0.0/24"])),
        pool("q", &["10.0.1.0/24"]),
    ]);
    for bad in ["10.0.0.0", "10.0.0.255"] {
        assert_eq!(
            err(a.assign("ns/a", &svc("a"), &ips(&[bad]))),
            format!("[\"{bad}\"] is not allowed in config")
        );
        assert_eq!(a.pool_of(ip(bad)), None);
    }
    a.assign("ns/a", &svc("a"), &ips(&["10.0.0.254"])).unwrap();
    // Without avoidBuggyIPs, .0 and .255 are ordinary addresses.
    a.assign("ns/b", &svc("b"), &ips(&["10.0.1.0"])).unwrap();
    a.assign("ns/c", &svc("c"), &ips(&["10.0.1.255"])).unwrap();
    assert_eq!(a.pool_of(ip("10.0.1.255")), Some("q"));
}

#[test]
fn assign_checks_compatibility_but_not_auto_assign() {
    let mut a = allocator(vec![
        pinned(pool("ns-pool", &["10.0.0.0/30"]), 0, &["ns"], &[]),
        pinned(pool("sel-pool", &["10.0.1.0/30"]), 0, &[], &[("team", "a")]),
        pinned(pool("both", &["10.0.2.0/30"]), 0, &["ns"], &[("team", "a")]),
        manual(pool("manual", &["10.0.3.0/30"])),
    ]);
    let other_ns = Service::new("other", "x", ServiceFamily::Ipv4);
    assert_eq!(
        err(a.assign("other/x", &other_ns, &ips(&["10.0.0.1"]))),
        "pool ns-pool not compatible for ip assignment"
    );
    a.assign("ns/a", &svc("a"), &ips(&["10.0.0.1"])).unwrap();

    assert_eq!(
        err(a.assign("ns/b", &svc("b"), &ips(&["10.0.1.1"]))),
        "pool sel-pool not compatible for ip assignment"
    );
    let mut team = svc("b");
    team.labels.insert("team".into(), "a".into());
    a.assign("ns/b", &team, &ips(&["10.0.1.1"])).unwrap();

    // Both the namespace and a selector must match.
    let mut team_elsewhere = Service::new("other", "c", ServiceFamily::Ipv4);
    team_elsewhere.labels = team.labels.clone();
    assert_eq!(
        err(a.assign("other/c", &team_elsewhere, &ips(&["10.0.2.1"]))),
        "pool both not compatible for ip assignment"
    );
    assert_eq!(
        err(a.assign("ns/c", &svc("c"), &ips(&["10.0.2.1"]))),
        "pool both not compatible for ip assignment"
    );
    a.assign("ns/c", &team, &ips(&["10.0.2.1"])).unwrap();

    a.assign("ns/d", &svc("d"), &ips(&["10.0.3.1"])).unwrap();
}

#[test]
fn at_most_two_addresses_of_different_families() {
    let mut a = allocator(vec![pool("p", &["10.0.0.0/29", "fd00::/125"])]);
    let s = dual("a", IpFamilyPolicy::RequireDualStack);
    assert_eq!(
        err(a.assign("ns/a", &s, &ips(&["10.0.0.1", "10.0.0.2", "fd00::1"]))),
        "more than two addresses [\"10.0.0.1\" \"10.0.0.2\" \"fd00::1\"]"
    );
    assert_eq!(
        err(a.assign("ns/a", &s, &ips(&["10.0.0.1", "10.0.0.2"]))),
        "\"10.0.0.1\" \"10.0.0.2\" has the same family"
    );
    assert_eq!(
        err(a.assign("ns/a", &s, &ips(&["fd00::1", "fd00::2"]))),
        "\"fd00::1\" \"fd00::2\" has the same family"
    );
    assert!(a.is_empty());
    a.assign("ns/a", &s, &ips(&["fd00::1", "10.0.0.1"]))
        .unwrap();
    assert_eq!(a.len(), 1);
}

// ---------------------------------------------------------------- sharing

#[test]
fn sharing_requires_keys_on_both_sides() {
    let mut a = allocator(vec![pool("p", &["10.0.0.0/30"])]);
    let addr = ips(&["10.0.0.1"]);
    a.assign("ns/a", &shared("a", "", vec![Port::tcp(80)]), &addr)
        .unwrap();
    let e = a
        .assign("ns/b", &shared("b", "k", vec![Port::tcp(443)]), &addr)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "can't change sharing key for \"ns/b\", address also in use by ns/a"
    );
    assert_eq!(source(&e), "existing service does not allow sharing");

    let addr = ips(&["10.0.0.2"]);
    a.assign("ns/c", &shared("c", "k", vec![Port::tcp(80)]), &addr)
        .unwrap();
    let e = a
        .assign("ns/d", &shared("d", "", vec![Port::tcp(443)]), &addr)
        .unwrap_err();
    assert_eq!(source(&e), "new service does not allow sharing");
    // Valid twin: both have the key.
    a.assign("ns/d", &shared("d", "k", vec![Port::tcp(443)]), &addr)
        .unwrap();
    assert_eq!(
        a.services_on(addr[0]).collect::<Vec<_>>(),
        vec!["ns/c", "ns/d"]
    );
    assert_eq!(a.stats("p").unwrap().ipv4.in_use, 2);
}

#[test]
fn sharing_keys_must_match() {
    let mut a = allocator(vec![pool("p", &["10.0.0.0/30"])]);
    let addr = ips(&["10.0.0.1"]);
    a.assign("ns/a", &shared("a", "k", vec![Port::tcp(80)]), &addr)
        .unwrap();
    let e = a
        .assign("ns/b", &shared("b", "k2", vec![Port::tcp(443)]), &addr)
        .unwrap_err();
    assert_eq!(
        source(&e),
        "sharing key \"k2\" does not match existing sharing key \"k\""
    );
    assert!(matches!(
        e,
        AllocError::SharingKeyChange {
            reason: SharingError::SharingKey { .. },
            ..
        }
    ));
    a.assign("ns/b", &shared("b", "k", vec![Port::tcp(443)]), &addr)
        .unwrap();
}

#[test]
fn backend_keys_must_match() {
    let mut a = allocator(vec![pool("p", &["10.0.0.0/30"])]);
    let addr = ips(&["10.0.0.1"]);
    a.assign("ns/a", &shared("a", "k", vec![Port::tcp(80)]), &addr)
        .unwrap();
    let mut local = shared("b", "k", vec![Port::tcp(443)]);
    local.backend_key = backend_key(true, &BTreeMap::from([("app".into(), "x".into())]));
    let e = a.assign("ns/b", &local, &addr).unwrap_err();
    assert_eq!(
        source(&e),
        "backend key \"app=x\" does not match existing sharing key \"\""
    );
    // Both Local with the same selector share.
    let mut first = local.clone();
    first.name = "c".into();
    first.ports = vec![Port::tcp(80)];
    let addr2 = ips(&["10.0.0.2"]);
    a.assign("ns/c", &first, &addr2).unwrap();
    a.assign("ns/b", &local, &addr2).unwrap();
}

#[test]
fn ports_must_not_collide() {
    let mut a = allocator(vec![pool("p", &["10.0.0.0/30"])]);
    let addr = ips(&["10.0.0.1"]);
    a.assign("ns/a", &shared("a", "k", vec![Port::tcp(80)]), &addr)
        .unwrap();
    assert_eq!(
        err(a.assign(
            "ns/b",
            &shared("b", "k", vec![Port::tcp(443), Port::tcp(80)]),
            &addr
        )),
        "port TCP/80 is already in use on \"10.0.0.1\""
    );
    // Same number, other protocol: no collision.
    a.assign("ns/b", &shared("b", "k", vec![Port::udp(80)]), &addr)
        .unwrap();
    // A Service may change its own ports in place.
    a.assign(
        "ns/b",
        &shared("b", "k", vec![Port::udp(80), Port::udp(53)]),
        &addr,
    )
    .unwrap();
    // Released ports are free again.
    a.unassign("ns/a");
    a.assign("ns/c", &shared("c", "k", vec![Port::tcp(80)]), &addr)
        .unwrap();
}

#[test]
fn single_user_may_change_its_key() {
    let mut a = allocator(vec![pool("p", &["10.0.0.0/30"])]);
    let addr = ips(&["10.0.0.1"]);
    a.assign("ns/a", &shared("a", "k", vec![Port::tcp(80)]), &addr)
        .unwrap();
    a.assign("ns/a", &shared("a", "k2", vec![Port::tcp(80)]), &addr)
        .unwrap();
    a.assign("ns/a", &shared("a", "", vec![Port::tcp(80)]), &addr)
        .unwrap();
    a.assign("ns/a", &shared("a", "k", vec![Port::tcp(80)]), &addr)
        .unwrap();
    a.assign("ns/b", &shared("b", "k", vec![Port::tcp(81)]), &addr)
        .unwrap();
    a.assign("ns/c", &shared("c", "k", vec![Port::tcp(82)]), &addr)
        .unwrap();
    // Not any more: others are on it (sorted, comma-separated).
    let e = a
        .assign("ns/a", &shared("a", "k2", vec![Port::tcp(80)]), &addr)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "can't change sharing key for \"ns/a\", address also in use by ns/b,ns/c"
    );
    assert_eq!(
        source(&e),
        "sharing key \"k2\" does not match existing sharing key \"k\""
    );
    assert_eq!(a.assignment("ns/a").unwrap().sharing_key, "k");
    // The new key takes effect for newcomers after a change.
    a.unassign("ns/b");
    a.unassign("ns/c");
    a.assign("ns/a", &shared("a", "k2", vec![Port::tcp(80)]), &addr)
        .unwrap();
    assert!(
        a.assign("ns/d", &shared("d", "k", vec![Port::tcp(81)]), &addr)
            .is_err()
    );
    a.assign("ns/d", &shared("d", "k2", vec![Port::tcp(81)]), &addr)
        .unwrap();
}

#[test]
fn allocate_shares_an_address_below_the_lowest_free_one() {
    let mut a = allocator(vec![pool("p", &["10.0.0.0/29"])]);
    let k80 = shared("a", "k", vec![Port::tcp(80)]);
    assert_eq!(a.allocate("ns/a", &k80).unwrap(), ips(&["10.0.0.0"]));
    assert_eq!(a.allocate("ns/b", &svc("b")).unwrap(), ips(&["10.0.0.1"]));
    // Same key, other port: shares .0.
    let k443 = shared("c", "k", vec![Port::tcp(443)]);
    assert_eq!(a.allocate("ns/c", &k443).unwrap(), ips(&["10.0.0.0"]));
    // Same key, colliding port: the lowest free address.
    let k80b = shared("d", "k", vec![Port::tcp(80)]);
    assert_eq!(a.allocate("ns/d", &k80b).unwrap(), ips(&["10.0.0.2"]));
    // Now .0 (80, 443 taken) and .2 (80 taken) are shared under k: a
    // Service on 443 goes to .2, one on 80 and 443 to the free .3.
    let k443b = shared("e", "k", vec![Port::tcp(443)]);
    assert_eq!(a.allocate("ns/e", &k443b).unwrap(), ips(&["10.0.0.2"]));
    let both = shared("f", "k", vec![Port::tcp(80), Port::tcp(443)]);
    assert_eq!(a.allocate("ns/f", &both).unwrap(), ips(&["10.0.0.3"]));
    // Other keys and no key never share.
    let other = shared("g", "other", vec![Port::tcp(8080)]);
    assert_eq!(a.allocate("ns/g", &other).unwrap(), ips(&["10.0.0.4"]));
    assert_eq!(a.allocate("ns/h", &svc("h")).unwrap(), ips(&["10.0.0.5"]));
    let stats = a.stats("p").unwrap();
    assert_eq!(stats.ipv4.in_use, 6);
    assert_eq!(stats.ipv4.available, 2);
}

#[test]
fn shared_address_in_a_later_cidr_is_not_preferred_over_free_in_an_earlier_one() {
    let mut a = allocator(vec![pool("p", &["10.0.1.0/31", "10.0.0.0/31"])]);
    a.assign(
        "ns/a",
        &shared("a", "k", vec![Port::tcp(80)]),
        &ips(&["10.0.0.0"]),
    )
    .unwrap();
    let s = shared("b", "k", vec![Port::tcp(443)]);
    assert_eq!(a.allocate("ns/b", &s).unwrap(), ips(&["10.0.1.0"]));
    // Once the first CIDR is full (.0 holds b's port 443), the shared
    // address in the second wins over its free .1.
    a.allocate("ns/c", &svc("c")).unwrap();
    let s = shared("d", "k", vec![Port::tcp(443)]);
    assert_eq!(a.allocate("ns/d", &s).unwrap(), ips(&["10.0.0.0"]));
}

// ---------------------------------------------------------------- addresses

#[test]
fn allocation_walks_addresses_in_spec_order() {
    let mut a = allocator(vec![pool(
        "p",
        &["10.0.2.0/31", "10.0.1.7-10.0.1.9", "10.0.0.0/31"],
    )]);
    let got: Vec<IpAddr> = (0..7)
        .map(|i| a.allocate(&format!("ns/s{i}"), &svc("x")).unwrap()[0])
        .collect();
    assert_eq!(
        got,
        ips(&[
            "10.0.2.0", "10.0.2.1", "10.0.1.7", "10.0.1.8", "10.0.1.9", "10.0.0.0", "10.0.0.1"
        ])
    );
    assert_eq!(err(a.allocate("ns/s7", &svc("x"))), "no available IPs");
    // The lowest address freed is the next one given.
    a.unassign("ns/s3");
    a.unassign("ns/s1");
    assert_eq!(a.allocate("ns/n", &svc("n")).unwrap(), ips(&["10.0.2.1"]));
    assert_eq!(a.allocate("ns/m", &svc("m")).unwrap(), ips(&["10.0.1.8"]));
}

#[test]
fn avoid_buggy_ips_skips_0_and_255() {
    let mut a = allocator(vec![avoid(pool("p", &["10.0.0.254/31", "10.0.1.0/24"]))]);
    assert_eq!(a.allocate("ns/a", &svc("a")).unwrap(), ips(&["10.0.0.254"]));
    assert_eq!(a.allocate("ns/b", &svc("b")).unwrap(), ips(&["10.0.1.1"]));
    for i in 2..=254 {
        assert_eq!(
            a.allocate(&format!("ns/s{i}"), &svc("x")).unwrap(),
            ips(&[&format!("10.0.1.{i}")])
        );
    }
    assert_eq!(err(a.allocate("ns/z", &svc("z"))), "no available IPs");
    let st = a.stats("p").unwrap();
    assert_eq!(
        (st.ipv4.capacity, st.ipv4.in_use, st.ipv4.available),
        (255, 255, 0)
    );

    // Runs continue across the skipped addresses of a large pool.
    let mut a = allocator(vec![avoid(pool("p", &["10.0.0.0/16"]))]);
    for i in 0..1000 {
        a.allocate(&format!("ns/s{i}"), &svc("x")).unwrap();
    }
    // 1000 = 3 x 254 + 238: the next is 10.0.3.239.
    assert_eq!(a.allocate("ns/n", &svc("n")).unwrap(), ips(&["10.0.3.239"]));
}

#[test]
fn ipv6_and_huge_pools_allocate_at_once() {
    let mut a = allocator(vec![
        pool("v4", &["10.0.0.0/8"]),
        pool("v6", &["fd00::/64"]),
        pool("all", &["::/0"]),
    ]);
    a.set_pools(&cfg(vec![
        pool("v4", &["10.0.0.0/8"]),
        pool("v6", &["fd00::/64"]),
    ]));
    for i in 0..100 {
        a.allocate_from_pool(&format!("ns/v6-{i}"), &svc6("x"), "v6")
            .unwrap();
        a.allocate_from_pool(&format!("ns/v4-{i}"), &svc("x"), "v4")
            .unwrap();
    }
    assert_eq!(a.ips("ns/v6-99"), Some(&ips(&["fd00::63"])[..]));
    assert_eq!(a.ips("ns/v4-99"), Some(&ips(&["10.0.0.99"])[..]));
}

// ---------------------------------------------------------------- pools

#[test]
fn allocate_from_pool_by_name() {
    let mut a = allocator(vec![
        manual(pool("manual", &["10.0.0.0/31"])),
        pinned(pool("ns2-only", &["10.0.1.0/31"]), 0, &["ns2"], &[]),
        pool("v4", &["10.0.2.0/31"]),
    ]);
    assert_eq!(
        err(a.allocate_from_pool("ns/a", &svc("a"), "nope")),
        "unknown pool \"nope\""
    );
    // autoAssign is not checked.
    assert_eq!(
        a.allocate_from_pool("ns/a", &svc("a"), "manual").unwrap(),
        ips(&["10.0.0.0"])
    );
    // Compatibility is.
    assert_eq!(
        err(a.allocate_from_pool("ns/b", &svc("b"), "ns2-only")),
        "pool ns2-only not compatible for ip assignment"
    );
    let ns2 = Service::new("ns2", "b", ServiceFamily::Ipv4);
    assert_eq!(
        a.allocate_from_pool("ns2/b", &ns2, "ns2-only").unwrap(),
        ips(&["10.0.1.0"])
    );
    // A family the pool lacks, and an exhausted pool.
    assert_eq!(
        err(a.allocate_from_pool("ns/c", &svc6("c"), "v4")),
        "no available IPs in pool v4 for ipv6 IPFamily"
    );
    a.allocate_from_pool("ns/c", &svc("c"), "v4").unwrap();
    a.allocate_from_pool("ns/d", &svc("d"), "v4").unwrap();
    assert_eq!(
        err(a.allocate_from_pool("ns/e", &svc("e"), "v4")),
        "no available IPs in pool v4 for ipv4 IPFamily"
    );
    // An existing assignment is kept (whatever the pool named).
    assert_eq!(
        a.allocate_from_pool("ns/a", &svc("a"), "v4").unwrap(),
        ips(&["10.0.0.0"])
    );
}

#[test]
fn allocate_from_pool_rejects_an_assignment_of_the_wrong_family() {
    let mut a = allocator(vec![pool("p", &["10.0.0.0/30", "fd00::/126"])]);
    a.allocate_from_pool("ns/a", &svc("a"), "p").unwrap();
    assert_eq!(
        err(a.allocate_from_pool("ns/a", &svc6("a"), "p")),
        "IP for wrong family assigned alloc ipv4 service family ipv6"
    );
    // PreferDualStack accepts a single address for a dual Service.
    let prefer = dual("a", IpFamilyPolicy::PreferDualStack);
    assert_eq!(
        a.allocate_from_pool("ns/a", &prefer, "p").unwrap(),
        ips(&["10.0.0.0"])
    );
    let require = dual("a", IpFamilyPolicy::RequireDualStack);
    assert_eq!(
        err(a.allocate_from_pool("ns/a", &require, "p")),
        "IP for wrong family assigned alloc ipv4 service family dual"
    );
}

#[test]
fn allocate_prefers_pinned_pools_by_priority_then_name() {
    let pools = vec![
        pool("fallback", &["10.0.9.0/31"]),
        pinned(pool("prio0-b", &["10.0.3.0/32"]), 0, &["ns"], &[]),
        pinned(pool("prio0-a", &["10.0.2.0/32"]), 0, &[], &[("team", "a")]),
        pinned(pool("prio5", &["10.0.1.0/32"]), 5, &["ns"], &[]),
        pinned(pool("prio1-b", &["10.0.0.1/32"]), 1, &["ns"], &[]),
        pinned(
            pool("prio1-a", &["10.0.0.0/32"]),
            1,
            &["ns"],
            &[("team", "a")],
        ),
        pinned(pool("prio-neg", &["10.0.4.0/32"]), -3, &["ns"], &[]),
    ];
    let mut a = allocator(pools);
    let mut s = svc("x");
    s.labels.insert("team".into(), "a".into());
    let order: Vec<String> = (0..8)
        .map(|i| {
            let key = format!("ns/s{i}");
            a.allocate(&key, &s).unwrap();
            a.pool(&key).unwrap().to_owned()
        })
        .collect();
    // Priorities > 0 ascending (ties by name), then 0 and negative ones by
    // name, then the fallback.
    assert_eq!(
        order,
        [
            "prio1-a", "prio1-b", "prio5", "prio-neg", "prio0-a", "prio0-b", "fallback", "fallback"
        ]
    );
    assert_eq!(err(a.allocate("ns/s8", &s)), "no available IPs");
}

#[test]
fn pinned_pools_need_namespace_or_selector_match_and_auto_assign() {
    let mut a = allocator(vec![
        pinned(pool("team-b", &["10.0.0.0/32"]), 1, &[], &[("team", "b")]),
        pinned(pool("other-ns", &["10.0.1.0/32"]), 1, &["other"], &[]),
        manual(pinned(pool("manual", &["10.0.2.0/32"]), 1, &["ns"], &[])),
        pool("fallback", &["10.0.3.0/32"]),
    ]);
    a.allocate("ns/a", &svc("a")).unwrap();
    assert_eq!(a.pool("ns/a"), Some("fallback"));
    let mut b = svc("b");
    b.labels.insert("team".into(), "b".into());
    a.allocate("ns/b", &b).unwrap();
    assert_eq!(a.pool("ns/b"), Some("team-b"));
    let o = Service::new("other", "c", ServiceFamily::Ipv4);
    a.allocate("other/c", &o).unwrap();
    assert_eq!(a.pool("other/c"), Some("other-ns"));
    // No pinned pool left for ns, fallback full.
    assert_eq!(err(a.allocate("ns/d", &svc("d"))), "no available IPs");
}

#[test]
fn pools_with_service_allocation_are_never_fallback() {
    // Priority only: never pinned (no namespace, no selector), never in
    // the fallback: only reachable by name or address, as in MetalLB.
    let mut a = allocator(vec![
        pinned(pool("prio-only", &["10.0.0.0/30"]), 1, &[], &[]),
        pinned(pool("elsewhere", &["10.0.1.0/30"]), 1, &["other"], &[]),
        manual(pool("manual", &["10.0.2.0/30"])),
    ]);
    assert_eq!(err(a.allocate("ns/a", &svc("a"))), "no available IPs");
    a.allocate_from_pool("ns/a", &svc("a"), "prio-only")
        .unwrap();
    // The valid twin: a plain autoAssign pool.
    a.set_pools(&cfg(vec![
        pinned(pool("prio-only", &["10.0.0.0/30"]), 1, &[], &[]),
        pool("plain", &["10.0.3.0/30"]),
    ]));
    a.allocate("ns/b", &svc("b")).unwrap();
    assert_eq!(a.pool("ns/b"), Some("plain"));
}

#[test]
fn exhausted_pinned_pools_fall_back() {
    let mut a = allocator(vec![
        pinned(pool("mine", &["10.0.0.0/32"]), 0, &["ns"], &[]),
        pool("shared", &["10.0.1.0/32"]),
    ]);
    a.allocate("ns/a", &svc("a")).unwrap();
    a.allocate("ns/b", &svc("b")).unwrap();
    assert_eq!(a.pool("ns/a"), Some("mine"));
    assert_eq!(a.pool("ns/b"), Some("shared"));
    let e = a.allocate("ns/c", &svc("c")).unwrap_err();
    assert_eq!(e.to_string(), "no available IPs");
    assert_eq!(source(&e), "no suitable pool for ipv4 IPFamily");
}

#[test]
fn fallback_pools_are_tried_by_name() {
    let mut a = allocator(vec![
        pool("b", &["10.0.0.0/32"]),
        pool("a", &["10.0.1.0/32"]),
        manual(pool("0manual", &["10.0.2.0/32"])),
    ]);
    a.allocate("ns/x", &svc("x")).unwrap();
    a.allocate("ns/y", &svc("y")).unwrap();
    assert_eq!(a.pool("ns/x"), Some("a"));
    assert_eq!(a.pool("ns/y"), Some("b"));
}

#[test]
fn allocate_keeps_an_existing_assignment() {
    let mut a = allocator(vec![pool("p", &["10.0.0.0/30"])]);
    a.assign("ns/a", &svc("a"), &ips(&["10.0.0.2"])).unwrap();
    assert_eq!(a.allocate("ns/a", &svc("a")).unwrap(), ips(&["10.0.0.2"]));
    // It is re-checked: a compatible key change is applied.
    let s = shared("a", "k", vec![Port::tcp(80)]);
    assert_eq!(a.allocate("ns/a", &s).unwrap(), ips(&["10.0.0.2"]));
    assert_eq!(a.assignment("ns/a").unwrap().sharing_key, "k");
}

// ---------------------------------------------------------------- dual stack

#[test]
fn single_stack_takes_its_family() {
    let mut a = allocator(vec![pool("p", &["fd00::/126", "10.0.0.0/30"])]);
    assert_eq!(a.allocate("ns/a", &svc6("a")).unwrap(), ips(&["fd00::"]));
    assert_eq!(a.allocate("ns/b", &svc("b")).unwrap(), ips(&["10.0.0.0"]));
}

#[test]
fn require_dual_stack_needs_a_pool_with_both() {
    let mut a = allocator(vec![
        pool("a-v4", &["10.0.0.0/30"]),
        pool("b-both", &["10.0.1.0/30", "fd00:1::/126"]),
    ]);
    let s = dual("a", IpFamilyPolicy::RequireDualStack);
    assert_eq!(
        a.allocate("ns/a", &s).unwrap(),
        ips(&["10.0.1.0", "fd00:1::"])
    );
    let mut a = allocator(vec![
        pool("a-v4", &["10.0.0.0/30"]),
        pool("c-v6", &["fd00::/126"]),
    ]);
    let e = a.allocate("ns/a", &s).unwrap_err();
    assert_eq!(e.to_string(), "no available IPs");
    assert_eq!(source(&e), "no suitable pool for dual IPFamily");
    assert_eq!(
        err(a.allocate_from_pool("ns/a", &s, "a-v4")),
        "no available IPs in pool a-v4 for dual IPFamily"
    );
}

#[test]
fn prefer_dual_stack_prefers_both_then_the_primary_family() {
    let pools = vec![
        pool("a-v6", &["fd00::/126"]),
        pool("b-v4", &["10.0.0.0/30"]),
        pool("c-both", &["10.0.1.0/30", "fd00:1::/126"]),
    ];
    let mut a = allocator(pools.clone());
    let s = dual("a", IpFamilyPolicy::PreferDualStack);
    assert_eq!(
        a.allocate("ns/a", &s).unwrap(),
        ips(&["10.0.1.0", "fd00:1::"])
    );
    // Without a pool with both: the first pool with the primary family.
    let mut a = allocator(pools[..2].to_vec());
    assert_eq!(a.allocate("ns/a", &s).unwrap(), ips(&["10.0.0.0"]));
    let v6_first = Service {
        primary_family: IpFamily::V6,
        ..s.clone()
    };
    assert_eq!(a.allocate("ns/b", &v6_first).unwrap(), ips(&["fd00::"]));
    // Only the secondary family left: taken.
    let mut a = allocator(pools[..1].to_vec());
    assert_eq!(a.allocate("ns/a", &s).unwrap(), ips(&["fd00::"]));
}

#[test]
fn prefer_dual_stack_with_one_cluster_ip_takes_both_from_a_dual_pool() {
    // MetalLB's selectIPsForFamilyAndPolicy gives a PreferDualStack
    // Service both addresses whatever its cluster IPs; kept for parity.
    let mut a = allocator(vec![pool("p", &["10.0.0.0/30", "fd00::/126"])]);
    let s = Service {
        ip_family_policy: IpFamilyPolicy::PreferDualStack,
        ..svc("a")
    };
    assert_eq!(
        a.allocate("ns/a", &s).unwrap(),
        ips(&["10.0.0.0", "fd00::"])
    );
}

#[test]
fn additional_family_for_prefer_dual_stack() {
    let mut a = allocator(vec![
        pool("p", &["10.0.0.0/30", "fd00::/126"]),
        pool("v4", &["10.0.1.0/30"]),
    ]);
    let s = dual("a", IpFamilyPolicy::PreferDualStack);
    a.assign("ns/a", &s, &ips(&["10.0.0.1"])).unwrap();
    assert_eq!(
        a.allocate_from_pool_for_additional_family("ns/a", &s, ip("10.0.0.1"), "p")
            .unwrap(),
        ip("fd00::")
    );
    assert_eq!(a.ips("ns/a"), Some(&ips(&["10.0.0.1", "fd00::"])[..]));
    assert_eq!(
        err(a.allocate_from_pool_for_additional_family("ns/a", &s, ip("10.0.0.1"), "nope")),
        "unknown pool \"nope\""
    );
    a.assign("ns/b", &s, &ips(&["10.0.1.1"])).unwrap();
    assert_eq!(
        err(a.allocate_from_pool_for_additional_family("ns/b", &s, ip("10.0.1.1"), "v4")),
        "no available IPs in pool v4 for ipv6 IPFamily"
    );
    assert_eq!(a.ips("ns/b"), Some(&ips(&["10.0.1.1"])[..]));
}

// ---------------------------------------------------------------- allocate_ips

#[test]
fn allocate_ips_follows_requests() {
    let mut a = allocator(vec![
        pool("p", &["10.0.0.0/30"]),
        pool("q", &["10.0.1.0/30"]),
    ]);
    let mut s = svc("a");
    s.requested_ips = ips(&["10.0.0.2"]);
    assert_eq!(a.allocate_ips("ns/a", &s).unwrap(), ips(&["10.0.0.2"]));

    let mut b = svc6("b");
    b.requested_ips = ips(&["10.0.0.3"]);
    assert_eq!(
        err(a.allocate_ips("ns/b", &b)),
        "requested loadBalancer IP(s) [\"10.0.0.3\"] does not match the ipFamily of the service"
    );
    let mut c = svc("c");
    c.requested_ips = ips(&["10.0.0.3"]);
    c.address_pool = Some("q".into());
    assert_eq!(
        err(a.allocate_ips("ns/c", &c)),
        "requested loadBalancer IP(s) [\"10.0.0.3\"] is not compatible with requested address pool q"
    );
    assert!(a.assignment("ns/c").is_none());
    c.address_pool = Some("p".into());
    assert_eq!(a.allocate_ips("ns/c", &c).unwrap(), ips(&["10.0.0.3"]));

    let mut d = svc("d");
    d.requested_ips = ips(&["10.0.0.1", "10.0.0.3"]);
    assert_eq!(
        err(a.allocate_ips("ns/d", &d)),
        "IPFamilyForAddresses: same address family [\"10.0.0.1\" \"10.0.0.3\"]"
    );

    let mut e = svc("e");
    e.address_pool = Some("q".into());
    assert_eq!(a.allocate_ips("ns/e", &e).unwrap(), ips(&["10.0.1.0"]));
    e.address_pool = Some(String::new());
    assert_eq!(a.allocate_ips("ns/f", &e).unwrap(), ips(&["10.0.0.0"]));
}

// ---------------------------------------------------------------- set_pools

#[test]
fn set_pools_rehomes_and_drops() {
    let mut a = allocator(vec![
        pool("a", &["10.0.0.0/30"]),
        pool("b", &["10.0.1.0/30"]),
    ]);
    a.allocate_from_pool("ns/x", &svc("x"), "a").unwrap();
    a.allocate_from_pool("ns/y", &svc("y"), "b").unwrap();
    a.allocate_from_pool("ns/z", &svc("z"), "b").unwrap();
    a.take_changed_pools();
    // 10.0.0.0/30 moves to c; b shrinks so that .1 leaves every pool.
    let report = a.set_pools(&cfg(vec![
        pool("b", &["10.0.1.0/32"]),
        pool("c", &["10.0.0.0/30"]),
    ]));
    assert_eq!(
        report.rehomed,
        vec![("ns/x".to_string(), "a".to_string(), "c".to_string())]
    );
    assert_eq!(
        report.dropped,
        vec![("ns/z".to_string(), ips(&["10.0.1.1"]), "b".to_string())]
    );
    assert_eq!(report.removed_pools, vec!["a".to_string()]);
    assert_eq!(a.pool("ns/x"), Some("c"));
    assert_eq!(a.pool("ns/y"), Some("b"));
    assert!(a.assignment("ns/z").is_none());
    assert_eq!(a.stats("c").unwrap().ipv4.in_use, 1);
    assert_eq!(a.stats("b").unwrap().ipv4.in_use, 1);
    assert_eq!(a.stats("a"), None);
    assert_eq!(
        a.take_changed_pools().into_iter().collect::<Vec<_>>(),
        vec!["a", "b", "c"]
    );
    // The indexes were rebuilt: c's next address skips the re-homed one.
    assert_eq!(
        a.allocate_from_pool("ns/w", &svc("w"), "c").unwrap(),
        ips(&["10.0.0.1"])
    );
}

#[test]
fn set_pools_drops_addresses_made_buggy() {
    let mut a = allocator(vec![pool("p", &["10.0.0.0/30"])]);
    a.allocate("ns/x", &svc("x")).unwrap();
    a.allocate("ns/y", &svc("y")).unwrap();
    let report = a.set_pools(&cfg(vec![avoid(pool("p", &["10.0.0.0/30"]))]));
    assert_eq!(report.dropped.len(), 1);
    assert_eq!(report.dropped[0].0, "ns/x");
    assert!(report.rehomed.is_empty());
    assert_eq!(a.allocate("ns/x", &svc("x")).unwrap(), ips(&["10.0.0.2"]));
}

#[test]
fn set_pools_keeps_sharing_state() {
    let mut a = allocator(vec![pool("p", &["10.0.0.0/30"])]);
    a.allocate("ns/a", &shared("a", "k", vec![Port::tcp(80)]))
        .unwrap();
    a.allocate("ns/b", &shared("b", "k", vec![Port::tcp(443)]))
        .unwrap();
    a.set_pools(&cfg(vec![pool("q", &["10.0.0.0/29"])]));
    assert_eq!(a.services_on(ip("10.0.0.0")).count(), 2);
    assert_eq!(
        err(a.assign(
            "ns/c",
            &shared("c", "k", vec![Port::tcp(80)]),
            &ips(&["10.0.0.0"])
        )),
        "port TCP/80 is already in use on \"10.0.0.0\""
    );
    assert_eq!(
        a.allocate("ns/c", &shared("c", "k", vec![Port::tcp(8080)]))
            .unwrap(),
        ips(&["10.0.0.0"])
    );
    assert_eq!(a.stats("q").unwrap().ipv4.in_use, 1);
}

// ---------------------------------------------------------------- stats

#[test]
fn stats_count_distinct_addresses_per_family() {
    let mut a = allocator(vec![
        avoid(pool("p", &["10.0.0.0/24", "fd00::/120"])),
        pool("big", &["10.16.0.0/12", "fd01::/64"]),
        avoid(pool("eight", &["11.0.0.0/8"])),
        pool("huge", &["::/0"]),
    ]);
    let st = a.stats("p").unwrap();
    assert_eq!(
        st.ipv4,
        FamilyStats {
            capacity: 254,
            in_use: 0,
            available: 254
        }
    );
    assert_eq!(
        st.ipv6,
        FamilyStats {
            capacity: 256,
            in_use: 0,
            available: 256
        }
    );
    assert_eq!(st.total.capacity, 510);
    a.allocate_from_pool("ns/a", &dual("a", IpFamilyPolicy::RequireDualStack), "p")
        .unwrap();
    a.allocate_from_pool("ns/b", &shared("b", "k", vec![Port::tcp(1)]), "p")
        .unwrap();
    a.allocate_from_pool("ns/c", &shared("c", "k", vec![Port::tcp(2)]), "p")
        .unwrap();
    let st = a.stats("p").unwrap();
    assert_eq!(
        st.ipv4,
        FamilyStats {
            capacity: 254,
            in_use: 2,
            available: 252
        }
    );
    assert_eq!(
        st.ipv6,
        FamilyStats {
            capacity: 256,
            in_use: 1,
            available: 255
        }
    );
    assert_eq!(
        st.total,
        FamilyStats {
            capacity: 510,
            in_use: 3,
            available: 507
        }
    );
    a.unassign("ns/b");
    assert_eq!(a.stats("p").unwrap().ipv4.in_use, 2);
    a.unassign("ns/c");
    assert_eq!(a.stats("p").unwrap().ipv4.in_use, 1);

    let big = a.stats("big").unwrap();
    assert_eq!(big.ipv4.capacity, 1 << 20);
    assert_eq!(big.ipv6.capacity, i64::MAX);
    assert_eq!(big.ipv6.available, i64::MAX);
    assert_eq!(big.total.capacity, i64::MAX);
    let eight = a.stats("eight").unwrap();
    assert_eq!(eight.ipv4.capacity, (1 << 24) - 2 * (1 << 16));
    assert_eq!(a.stats("huge").unwrap().ipv6.capacity, i64::MAX);
    assert_eq!(a.all_stats().count(), 4);
}

#[test]
fn stats_are_exact_just_below_the_clamp() {
    let a = allocator(vec![pool("p", &["fd00::/66"]), pool("q", &["fd00:1::/65"])]);
    // MetalLB reports MaxInt64 from 62 host bits on; we are exact.
    assert_eq!(a.stats("p").unwrap().ipv6.capacity, 1 << 62);
    assert_eq!(a.stats("q").unwrap().ipv6.capacity, i64::MAX);
}

#[test]
fn changed_pools_are_reported() {
    let mut a = allocator(vec![
        pool("p", &["10.0.0.0/30"]),
        pool("q", &["10.0.1.0/30"]),
    ]);
    assert_eq!(a.take_changed_pools().len(), 2);
    assert!(a.take_changed_pools().is_empty());
    a.allocate_from_pool("ns/a", &svc("a"), "q").unwrap();
    assert_eq!(
        a.take_changed_pools().into_iter().collect::<Vec<_>>(),
        vec!["q"]
    );
    a.unassign("ns/a");
    assert_eq!(
        a.take_changed_pools().into_iter().collect::<Vec<_>>(),
        vec!["q"]
    );
}

// ---------------------------------------------------------------- restore

#[test]
fn restore_registers_dual_stack_services_first() {
    let mut a = allocator(vec![pool("p", &["10.0.0.0/30", "fd00::/126"])]);
    let report = a.restore(vec![
        ("ns/a".to_string(), svc("a"), ips(&["10.0.0.1"])),
        ("ns/none".to_string(), svc("none"), vec![]),
        (
            "ns/z".to_string(),
            dual("z", IpFamilyPolicy::RequireDualStack),
            ips(&["10.0.0.1", "fd00::1"]),
        ),
        ("ns/b".to_string(), svc("b"), ips(&["10.0.0.2"])),
        ("ns/c".to_string(), svc("c"), ips(&["10.9.0.2"])),
    ]);
    assert_eq!(report.restored, vec!["ns/z", "ns/b"]);
    let failed: Vec<(String, String)> = report
        .failed
        .iter()
        .map(|(k, e)| (k.clone(), e.to_string()))
        .collect();
    assert_eq!(
        failed,
        vec![
            (
                "ns/a".to_string(),
                "can't change sharing key for \"ns/a\", address also in use by ns/z".to_string()
            ),
            (
                "ns/c".to_string(),
                "[\"10.9.0.2\"] is not allowed in config".to_string()
            ),
        ]
    );
}

#[test]
fn restart_moves_no_address() {
    let pools = vec![
        avoid(pool("p", &["10.0.0.0/24", "fd00::/120"])),
        pinned(pool("q", &["10.0.1.0/24"]), 1, &["ns"], &[]),
    ];
    let mut a = allocator(pools.clone());
    let mut services = Vec::new();
    for i in 0..40 {
        let s = match i % 4 {
            0 => dual(&format!("s{i}"), IpFamilyPolicy::RequireDualStack),
            1 => shared(&format!("s{i}"), "k", vec![Port::tcp(i)]),
            2 => svc6(&format!("s{i}")),
            _ => Service::new("other", &format!("s{i}"), ServiceFamily::Ipv4),
        };
        let key = s.key();
        a.allocate(&key, &s).unwrap();
        services.push((key, s));
    }
    for i in [3, 7, 12] {
        a.unassign(&services[i].0);
    }
    let before: BTreeMap<String, Vec<IpAddr>> = a
        .assignments()
        .map(|(k, v)| (k.to_owned(), v.ips.clone()))
        .collect();

    let mut b = allocator(pools);
    let report = b.restore(
        services
            .iter()
            .rev()
            .filter_map(|(k, s)| before.get(k).map(|ips| (k.clone(), s.clone(), ips.clone()))),
    );
    assert!(report.failed.is_empty());
    let after: BTreeMap<String, Vec<IpAddr>> = b
        .assignments()
        .map(|(k, v)| (k.to_owned(), v.ips.clone()))
        .collect();
    assert_eq!(before, after);
    assert_eq!(a.stats("p"), b.stats("p"));
    assert_eq!(a.stats("q"), b.stats("q"));
    // New allocations after the restart fill the holes the same way.
    for i in [3, 7, 12] {
        let (k, s) = &services[i];
        assert_eq!(a.allocate(k, s).unwrap(), b.allocate(k, s).unwrap());
    }
}

// ---------------------------------------------------------------- helpers

#[test]
fn backend_key_is_labels_set_string() {
    let sel = BTreeMap::from([
        ("a".to_string(), "y".to_string()),
        ("a.b".to_string(), "x".to_string()),
        ("c".to_string(), "".to_string()),
    ]);
    // Sorted as "k=v" strings: "a.b=x" < "a=y".
    assert_eq!(backend_key(true, &sel), "a.b=x,a=y,c=");
    assert_eq!(backend_key(false, &sel), "");
    assert_eq!(backend_key(true, &BTreeMap::new()), "");
}

#[test]
fn families_of_addresses() {
    assert_eq!(
        ServiceFamily::for_addresses(&ips(&["10.0.0.1"])),
        Ok(ServiceFamily::Ipv4)
    );
    assert_eq!(
        ServiceFamily::for_addresses(&ips(&["fd00::1", "10.0.0.1"])),
        Ok(ServiceFamily::Dual)
    );
    assert_eq!(
        ServiceFamily::for_addresses(&ips(&["::ffff:10.0.0.1"])),
        Ok(ServiceFamily::Ipv4)
    );
    assert_eq!(
        ServiceFamily::for_addresses(&[]).unwrap_err().to_string(),
        "IPFamilyForAddresses: invalid ips length 0 []"
    );
    assert_eq!(
        ServiceFamily::for_addresses(&ips(&["fd00::1", "fd00::2", "10.0.0.1"]))
            .unwrap_err()
            .to_string(),
        "IPFamilyForAddresses: invalid ips length 3 [\"fd00::1\" \"fd00::2\" \"10.0.0.1\"]"
    );
    assert_eq!(Port::tcp(80).to_string(), "TCP/80");
    assert_eq!(svc("a").key(), "ns/a");
}
