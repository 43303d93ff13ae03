//! The network half of `lab/demo`: brings up the test kit's lab topology (nodes, router,
//! client in network namespaces; testkit::Lab), starts FRR in `router` peering with every
//! node (AS 64512 <-> 64513), and prints what a user looks at: the router's BGP
//! neighbours and table, and the client's neighbour entry for a LoadBalancer IP. Then it
//! tears the topology down (the namespaces exist only while this runs).
//!
//! It checks what it shows: FRR runs with one neighbour per node address and answers,
//! and the client's probe of the IP ran. With `--expect-speaker` (for when lab/demo runs
//! the speaker in the node namespaces) the speaker's promises are checked too: every IPv4
//! session Established, the router holds a route to the IP, the client resolves it. Each
//! check is printed; the exit status is 1 when a checked promise does not hold.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use testkit::{FrrConfig, LabOptions, plan};

const USAGE: &str = "\
usage: demo-network --ip ADDR [--settle SECONDS] [--expect-speaker]

The network half of lab/demo, in the test kit's network namespaces (needs root and the
kit's tools: scripts/setup --demo installs them):
  --ip ADDR          the LoadBalancer IP to look for (router's table, client's ARP)
  --settle SECONDS   how long to give the BGP sessions before looking (default 6)
  --expect-speaker   also check what the speaker promises: every IPv4 session
                     Established, a route to ADDR in the router, ADDR resolving on the
                     client (without it these are shown, not checked: lab/demo runs no
                     speaker yet)
Exit status: 0 every check held, 1 a check failed or the network could not be set up.";

/// One check of what the demo shows. `promised` checks decide the exit status; the others
/// are shown with what was seen (the speaker's, until lab/demo runs it).
struct Check {
    what: String,
    promised: bool,
    held: bool,
    seen: String,
}

#[derive(Default)]
struct Checks(Vec<Check>);

impl Checks {
    fn add(
        &mut self,
        promised: bool,
        what: impl Into<String>,
        held: bool,
        seen: impl Into<String>,
    ) {
        let c = Check {
            what: what.into(),
            promised,
            held,
            seen: seen.into(),
        };
        let tag = match (c.promised, c.held) {
            (true, true) => "ok",
            (true, false) => "FAILED",
            (false, true) => "holds (not checked)",
            (false, false) => "does not hold (not checked: no speaker)",
        };
        println!("check: {}: {tag} ({})", c.what, c.seen);
        self.0.push(c);
    }

    fn failed(&self) -> Vec<&Check> {
        self.0.iter().filter(|c| c.promised && !c.held).collect()
    }
}

fn main() {
    match run() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("demo-network: {e:#}");
            std::process::exit(1);
        }
    }
}

/// Ok(true) when every promised check held.
fn run() -> Result<bool> {
    let mut ip: Option<Ipv4Addr> = None;
    let mut settle = 6u64;
    let mut expect_speaker = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--ip" => ip = Some(args.next().context("--ip needs an address")?.parse()?),
            "--settle" => settle = args.next().context("--settle needs seconds")?.parse()?,
            "--expect-speaker" => expect_speaker = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(true);
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let ip = ip.with_context(|| format!("--ip is required\n{USAGE}"))?;
    let mut checks = Checks::default();

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
    let node_addrs: Vec<IpAddr> = (1..=plan::NODES)
        .flat_map(|n| [plan::node_v4(n).into(), plan::node_v6(n).into()])
        .collect();
    let configured: Vec<IpAddr> = neighbors.iter().map(|n| n.addr).collect();
    let missing: Vec<String> = node_addrs
        .iter()
        .filter(|a| !configured.contains(a))
        .map(ToString::to_string)
        .collect();
    checks.add(
        true,
        "FRR in the router has a BGP neighbour (AS 64513) per node address",
        missing.is_empty() && neighbors.iter().all(|n| n.remote_as == Some(plan::NODE_AS)),
        if missing.is_empty() {
            format!("{} neighbours", neighbors.len())
        } else {
            format!("missing {}", missing.join(", "))
        },
    );
    let v4: Vec<_> = neighbors.iter().filter(|n| n.addr.is_ipv4()).collect();
    let established = v4.iter().filter(|n| n.state == "Established").count();
    checks.add(
        expect_speaker,
        "every node's IPv4 session is Established (a speaker per node)",
        established == plan::NODES && v4.len() == plan::NODES,
        format!(
            "{established} of {} Established; states: {}",
            v4.len(),
            v4.iter()
                .map(|n| format!("{} {}", n.addr, n.state))
                .collect::<Vec<_>>()
                .join(", ")
        ),
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
    let want = format!("{ip}/32");
    checks.add(
        expect_speaker,
        format!("the router holds a route to {want}"),
        pool_routes.contains(&want),
        format!(
            "routes to the pool {}: {}",
            plan::POOL_V4,
            if pool_routes.is_empty() {
                "none".to_string()
            } else {
                pool_routes.join(", ")
            }
        ),
    );

    // The client reaches the pool on the L2 segment (as with MetalLB's layer 2 mode): an
    // on-link route, so the kernel asks for the address with ARP.
    let client = lab.client();
    let iface = lab.l2_iface("client").to_string();
    client.ip(&["route", "replace", plan::POOL_V4, "dev", &iface])?;
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
    // The kernel made an entry for the address: the probe reached the segment.
    checks.add(
        true,
        format!("the client asked the L2 segment for {ip} (a neighbour entry exists)"),
        entry.is_some(),
        match &entry {
            Some(n) => n.state.join(","),
            None => "no entry".to_string(),
        },
    );
    let resolved = entry.as_ref().and_then(|n| n.lladdr.clone());
    checks.add(
        expect_speaker,
        format!("the client resolves {ip} (a node answers ARP)"),
        resolved.is_some(),
        match resolved {
            Some(mac) => format!("resolves to {mac}"),
            None => "does not resolve: nobody answers ARP for it".to_string(),
        },
    );
    println!("\ntearing the network down");
    drop(router);
    drop(lab);

    let failed = checks.failed();
    if failed.is_empty() {
        println!(
            "demo-network: {} checks held{}",
            checks.0.iter().filter(|c| c.promised).count(),
            if expect_speaker {
                ""
            } else {
                " (the speaker's are shown, not checked: --expect-speaker)"
            }
        );
        Ok(true)
    } else {
        for c in &failed {
            eprintln!("demo-network: FAILED: {} ({})", c.what, c.seen);
        }
        Ok(false)
    }
}
