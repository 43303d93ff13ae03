//! A quick timing check (not a benchmark; see `benches/alloc.rs`): large
//! pools allocate without scanning, so even a debug build gives 100,000
//! addresses from an IPv6 /64 and 10,000 from an IPv4 /12 (and from an
//! avoidBuggyIPs /8) in well under the generous bound.

use std::time::{Duration, Instant};

use config::{AddressBlock, Config, Pool};
use controller::alloc::{Allocator, Port, Service, ServiceFamily};

const BOUND: Duration = Duration::from_secs(20);

fn allocator(cidr: &str, avoid_buggy_ips: bool) -> Allocator {
    let net = cidr.parse().unwrap();
    let pool = Pool {
        name: "pool".into(),
        labels: Default::default(),
        addresses: vec![AddressBlock {
            spec: cidr.into(),
            cidrs: vec![net],
        }],
        cidrs: vec![net],
        auto_assign: true,
        avoid_buggy_ips,
        service_allocation: None,
        l2_advertisements: Vec::new(),
        bgp_advertisements: Vec::new(),
    };
    let mut a = Allocator::new();
    a.set_pools(&Config {
        pools: [("pool".to_string(), pool)].into(),
        ..Config::default()
    });
    a
}

fn fill(a: &mut Allocator, n: usize, family: ServiceFamily) -> Duration {
    let start = Instant::now();
    for i in 0..n {
        let mut s = Service::new("t", &format!("s{i}"), family);
        s.ports = vec![Port::tcp(80)];
        a.allocate(&s.key(), &s).unwrap();
    }
    start.elapsed()
}

#[test]
fn large_pools_allocate_quickly() {
    let mut v6 = allocator("fd00::/64", false);
    let t6 = fill(&mut v6, 100_000, ServiceFamily::Ipv6);
    assert_eq!(
        v6.ips("t/s99999"),
        Some(&["fd00::1:869f".parse().unwrap()][..])
    );
    assert_eq!(v6.stats("pool").unwrap().ipv6.in_use, 100_000);

    let mut v4 = allocator("10.0.0.0/12", false);
    let t4 = fill(&mut v4, 10_000, ServiceFamily::Ipv4);
    assert_eq!(
        v4.ips("t/s9999"),
        Some(&["10.0.39.15".parse().unwrap()][..])
    );

    let mut v8 = allocator("10.0.0.0/8", true);
    let t8 = fill(&mut v8, 10_000, ServiceFamily::Ipv4);
    // 10,000 = 39 x 254 + 94: the last one is 10.0.39.94.
    assert_eq!(
        v8.ips("t/s9999"),
        Some(&["10.0.39.94".parse().unwrap()][..])
    );

    eprintln!(
        "100,000 from a /64: {t6:?}; 10,000 from a /12: {t4:?}; 10,000 from an avoidBuggyIPs /8: {t8:?}"
    );
    assert!(t6 < BOUND, "{t6:?}");
    assert!(t4 < BOUND, "{t4:?}");
    assert!(t8 < BOUND, "{t8:?}");

    // Freeing and reallocating in the middle is as quick.
    let start = Instant::now();
    for i in (0..100_000).step_by(2) {
        v6.unassign(&format!("t/s{i}"));
    }
    let refill = fill(&mut v6, 50_000, ServiceFamily::Ipv6);
    assert_eq!(v6.ips("t/s0"), Some(&["fd00::".parse().unwrap()][..]));
    assert!(start.elapsed() < BOUND, "{refill:?}");
}
