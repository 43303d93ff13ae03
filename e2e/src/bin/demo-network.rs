//! The network half of `lab/demo`: brings up the test kit's lab topology (nodes, router,
//! client in network namespaces; testkit::Lab), starts FRR in `router` peering with every
//! node (AS 64512 <-> 64513), and prints what a user looks at: the router's BGP
//! neighbours and table, and the client's neighbour entry for a LoadBalancer IP. Then it
//! tears the topology down (the namespaces exist only while this runs).
//!
//!   demo-network --ip 198.51.100.1 [--settle SECONDS]
//!
//! Needs root and the kit's tools (frr, arping, ...; testkit::preflight says what is
//! missing). It takes the kit's lock, so it waits while a network test runs.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use testkit::{FrrConfig, LabOptions};

fn main() {
    if let Err(e) = run() {
        eprintln!("demo-network: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let mut ip: Option<Ipv4Addr> = None;
    let mut settle = 6u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--ip" => ip = Some(args.next().context("--ip needs an address")?.parse()?),
            "--settle" => settle = args.next().context("--settle needs seconds")?.parse()?,
            other => {
                bail!("unknown argument {other:?} (usage: demo-network --ip ADDR [--settle S])")
            }
        }
    }
    let ip = ip.context("usage: demo-network --ip ADDR [--settle S]")?;

    println!("taking the test kit's lock (waits while another network test runs)...");
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    let lab = testkit::Lab::up(&LabOptions {
        far: false,
        ..LabOptions::default()
    })?;
    println!(
        "network namespaces: {}",
        lab.topo
            .namespaces()
            .iter()
            .map(|n| n.name().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let router = lab.start_router(&FrrConfig::lab_router())?;
    println!(
        "FRR runs in `router` (AS 64512, 192.0.2.1), one neighbour per node (AS 64513); waiting {settle} s for sessions..."
    );
    std::thread::sleep(Duration::from_secs(settle));

    println!("\n$ vtysh -c 'show bgp summary'      (in the router's namespace)");
    println!("{}", router.vtysh(&["show bgp summary"])?.trim_end());
    let neighbors = router.bgp_neighbors()?;
    let established = neighbors
        .iter()
        .filter(|n| n.state == "Established")
        .count();
    println!(
        "=> {established} of {} BGP sessions established",
        neighbors.len()
    );

    println!("\n$ vtysh -c 'show bgp ipv4 unicast'  (the router's BGP table)");
    let table = router.vtysh(&["show bgp ipv4 unicast"])?;
    println!(
        "{}",
        if table.trim().is_empty() {
            "(empty)"
        } else {
            table.trim_end()
        }
    );
    let routes = router.routes_v4()?;
    let pool_routes: Vec<_> = routes
        .iter()
        .filter(|r| r.prefix.starts_with("198.51.100."))
        .map(|r| r.prefix.clone())
        .collect();
    println!(
        "=> routes to the service pool 198.51.100.0/24: {}",
        if pool_routes.is_empty() {
            "none".to_string()
        } else {
            pool_routes.join(", ")
        }
    );

    // The client reaches the pool on the L2 segment (as with MetalLB's layer 2 mode): an
    // on-link route, so the kernel asks for the address with ARP.
    let client = lab.client();
    let iface = lab.l2_iface("client").to_string();
    client.ip(&["route", "replace", "198.51.100.0/24", "dev", &iface])?;
    println!("\n$ arping -c 2 -I {iface} {ip}   (in the client's namespace, 192.0.2.100)");
    match client.arping(&iface, ip, 2) {
        Ok(mac) => println!("reply from {ip} [{mac}]"),
        Err(_) => println!("no reply"),
    }
    // A datagram makes the kernel resolve the address (3 probes, 1 s apart).
    client.run(
        "bash",
        &["-c", &format!("echo demo > /dev/udp/{ip}/9 || true")],
    )?;
    std::thread::sleep(Duration::from_millis(3500));
    println!("$ ip neigh show {ip}   (after sending it a datagram)");
    let entry = client
        .neighbors()?
        .into_iter()
        .find(|n| n.dst == IpAddr::V4(ip));
    match &entry {
        Some(n) => println!(
            "{} dev {} {}{}",
            n.dst,
            n.dev,
            n.lladdr
                .as_deref()
                .map(|l| format!("lladdr {l} "))
                .unwrap_or_default(),
            n.state.join(",")
        ),
        None => println!("(no neighbour entry for {ip})"),
    }
    let resolved = entry.as_ref().and_then(|n| n.lladdr.clone());
    println!(
        "=> {ip} {}",
        match resolved {
            Some(mac) => format!("resolves to {mac}"),
            None => "does not resolve: nobody answers ARP for it".to_string(),
        }
    );
    println!("\ntearing the network down");
    drop(router);
    drop(lab);
    Ok(())
}
