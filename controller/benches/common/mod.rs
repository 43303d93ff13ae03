//! What the allocation benchmarks and the `alloc_memory` example share: one pool of
//! one CIDR, and N single-stack Services with one TCP port each.

use config::{AddressBlock, Config, Pool};
use controller::alloc::{Port, Service, ServiceFamily};

/// A configuration with one auto-assigned pool `pool` holding `cidr`.
pub fn config(cidr: &str) -> Config {
    let net = cidr.parse().expect("benchmark CIDR");
    let pool = Pool {
        name: "pool".into(),
        labels: Default::default(),
        addresses: vec![AddressBlock {
            spec: cidr.into(),
            cidrs: vec![net],
        }],
        cidrs: vec![net],
        auto_assign: true,
        avoid_buggy_ips: false,
        service_allocation: None,
        l2_advertisements: Vec::new(),
        bgp_advertisements: Vec::new(),
    };
    Config {
        pools: [("pool".to_string(), pool)].into(),
        ..Config::default()
    }
}

/// `n` Services `bench/svc-<i>` of `family`, with their keys.
pub fn services(n: usize, family: ServiceFamily) -> Vec<(String, Service)> {
    (0..n)
        .map(|i| {
            let mut s = Service::new("bench", &format!("svc-{i}"), family);
            s.ports = vec![Port::tcp(80)];
            (s.key(), s)
        })
        .collect()
}
