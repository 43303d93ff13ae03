//! Allocation throughput: `allocate/{ipv4_12,ipv6_64}/N` gives N Services
//! (single stack, no sharing, one TCP port each) an address from a single
//! IPv4 /12 or IPv6 /64 pool, starting from an empty allocator. The service
//! keys and descriptions are built outside the measurement.
//!
//! `restore/ipv6_64/N` re-registers N existing assignments (a restart).
//!
//! Run: `cargo bench -p controller --bench alloc -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::net::IpAddr;

mod common;

use common::{config, services};
use controller::alloc::{Allocator, Service, ServiceFamily};
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const SIZES: [usize; 2] = [10_000, 100_000];

fn allocate(c: &mut Criterion) {
    let mut g = c.benchmark_group("allocate");
    g.sample_size(10);
    for (name, cidr, family) in [
        ("ipv4_12", "10.0.0.0/12", ServiceFamily::Ipv4),
        ("ipv6_64", "fd00::/64", ServiceFamily::Ipv6),
    ] {
        let cfg = config(cidr);
        for n in SIZES {
            let svcs = services(n, family);
            g.throughput(Throughput::Elements(n as u64));
            g.bench_with_input(BenchmarkId::new(name, n), &svcs, |b, svcs| {
                b.iter_batched(
                    || {
                        let mut a = Allocator::new();
                        a.set_pools(&cfg);
                        a
                    },
                    |mut a| {
                        for (key, s) in svcs {
                            black_box(a.allocate(key, s).unwrap());
                        }
                        a
                    },
                    BatchSize::LargeInput,
                );
            });
        }
    }
    g.finish();
}

fn restore(c: &mut Criterion) {
    let mut g = c.benchmark_group("restore");
    g.sample_size(10);
    let cfg = config("fd00::/64");
    for n in SIZES {
        let mut a = Allocator::new();
        a.set_pools(&cfg);
        let existing: Vec<(String, Service, Vec<IpAddr>)> = services(n, ServiceFamily::Ipv6)
            .into_iter()
            .map(|(k, s)| {
                let ips = a.allocate(&k, &s).unwrap();
                (k, s, ips)
            })
            .collect();
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new("ipv6_64", n), &existing, |b, existing| {
            b.iter_batched(
                || {
                    let mut a = Allocator::new();
                    a.set_pools(&cfg);
                    (a, existing.clone())
                },
                |(mut a, existing)| {
                    let report = a.restore(existing);
                    assert!(report.failed.is_empty());
                    a
                },
                BatchSize::LargeInput,
            );
        });
    }
    g.finish();
}

criterion_group!(benches, allocate, restore);
criterion_main!(benches);
