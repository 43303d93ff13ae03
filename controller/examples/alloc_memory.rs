//! CPU time and memory of allocating N Services from one pool, as the
//! controller holds them (the allocator's state only; the Kubernetes objects
//! are the API server's and the reflector's).
//!
//! Run: `cargo run --release -p controller --example alloc_memory`
//! Each case runs in a fresh child process so that the resident-set figures
//! of one do not include the heap left over by another.

use std::process::Command;
use std::time::Instant;

#[path = "../benches/common/mod.rs"]
mod common;

use common::{config, services};
use controller::alloc::{Allocator, ServiceFamily};

/// `(VmRSS, VmHWM)` in KiB from /proc/self/status.
fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// User + system CPU time of this process, in seconds (clock ticks of 10 ms).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of stat, i.e. 11 and 12 after ')'.
    (ticks(11) + ticks(12)) as f64 / 100.0
}

fn run_case(cidr: &str, family: ServiceFamily, n: usize) {
    let cfg = config(cidr);
    let services = services(n, family);
    let mut a = Allocator::new();
    a.set_pools(&cfg);
    let (rss0, _) = rss_kib();
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    for (k, s) in &services {
        a.allocate(k, s).expect("allocation");
    }
    let wall = t0.elapsed();
    let cpu = cpu_seconds() - cpu0;
    let (rss1, hwm) = rss_kib();
    assert_eq!(a.len(), n);
    println!(
        "| {n} | {cidr} | {:.0} ms | {:.2} s | {:.1} MiB | {:.0} B | {:.1} MiB |",
        wall.as_secs_f64() * 1e3,
        cpu,
        (rss1.saturating_sub(rss0)) as f64 / 1024.0,
        (rss1.saturating_sub(rss0)) as f64 * 1024.0 / n as f64,
        hwm as f64 / 1024.0,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, cidr, n] = &args[..] {
        let family = if cidr.contains(':') {
            ServiceFamily::Ipv6
        } else {
            ServiceFamily::Ipv4
        };
        run_case(cidr, family, n.parse().expect("count"));
        return;
    }
    println!("| Services | pool | wall | CPU (user+sys) | RSS growth | per Service | peak RSS |");
    println!("|---|---|---|---|---|---|---|");
    let me = std::env::current_exe().expect("own path");
    // Documentation and benchmark ranges only: a /15 of 198.18.0.0/15 holds
    // 131,072 addresses; 2001:db8:100::/64 is inside 2001:db8::/32.
    for cidr in ["198.18.0.0/15", "2001:db8:100::/64"] {
        for n in ["10000", "100000"] {
            let st = Command::new(&me).args([cidr, n]).status().expect("child");
            assert!(st.success());
        }
    }
}
