//! The lab topology comes up as specified and goes away completely.
//! Needs root; takes the kit's serial lock.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use testkit::process::{pid_alive, wait_pid_gone};
use testkit::{Lab, LabOptions, Netns, plan};

/// What the root namespace and the kit's global state look like.
#[derive(Debug, PartialEq, Eq)]
struct RootState {
    links: BTreeSet<String>,
    nft: String,
    netns: BTreeSet<String>,
    frr_pathspaces: BTreeSet<String>,
}

fn root_state() -> Result<RootState> {
    let links = testkit::cmd::run(&mut testkit::cmd::command("ip", &["-o", "link", "show"]))?
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|n| n.trim().split('@').next().unwrap_or("").to_string())
        .collect();
    let nft = testkit::cmd::run(&mut testkit::cmd::command("nft", &["list", "ruleset"]))?;
    let netns = Netns::list()?.into_iter().collect();
    let frr_pathspaces = std::fs::read_dir("/run/frr")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    Ok(RootState {
        links,
        nft,
        netns,
        frr_pathspaces,
    })
}

#[test]
fn topology_up_down_leaves_nothing_behind() -> Result<()> {
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    let before = root_state()?;

    let lab = Lab::up(&LabOptions::default())?;
    let prefix = lab.topo.prefix().to_string();
    ensure!(testkit::cleanup::is_prefix(&prefix), "odd prefix {prefix}");

    // Namespaces: all of the plan, all with the run prefix.
    let names: BTreeSet<String> = lab
        .topo
        .namespaces()
        .iter()
        .map(|n| n.name().to_string())
        .collect();
    for short in [
        "sw", "router", "router2", "node-1", "node-2", "node-3", "client", "far",
    ] {
        ensure!(
            names.contains(&format!("{prefix}-{short}")),
            "namespace {prefix}-{short} missing: {names:?}"
        );
    }

    // Nothing in the root namespace but the netns handles.
    let during = root_state()?;
    ensure!(
        during.links == before.links,
        "root links changed: {:?} -> {:?}",
        before.links,
        during.links
    );
    ensure!(during.nft == before.nft, "root nftables ruleset changed");
    lab.topo.check_root_namespace()?;

    // Interface names carry the prefix and fit IFNAMSIZ.
    for ns in lab.topo.namespaces() {
        for l in ns.link_names()? {
            if l == "lo" {
                continue;
            }
            ensure!(
                l.starts_with(&format!("{prefix}-")),
                "interface {l} in {} lacks the prefix",
                ns.name()
            );
            ensure!(l.len() <= 15, "interface {l} is too long");
        }
    }

    // The bridge lives in the switch namespace, with snooping and a querier.
    let sw = lab.topo.switch().context("no switch")?;
    let br = lab.topo.bridge(testkit::lab::L2);
    let d = sw.ip_json(&["-d", "link", "show", "dev", br])?;
    let info = &d[0]["linkinfo"]["info_data"];
    ensure!(
        info["mcast_snooping"].as_u64() == Some(1),
        "snooping off: {info}"
    );
    ensure!(
        info["mcast_querier"].as_u64() == Some(1),
        "querier off: {info}"
    );

    // IPv6 without DAD: the addresses are usable at once, none tentative.
    let node1 = lab.node(1);
    let if1 = lab.l2_iface("node-1");
    ensure!(node1.read_sysctl(&format!("net.ipv6.conf.{if1}.accept_dad"))? == "0");
    ensure!(node1.read_sysctl("net.ipv6.conf.default.dad_transmits")? == "0");
    let addrs = node1.ip_json(&["addr", "show", "dev", if1])?;
    let flags = addrs.to_string();
    ensure!(!flags.contains("tentative"), "tentative addresses: {flags}");
    let have = node1.addrs(if1)?;
    ensure!(
        have.contains(&format!("{}/24", plan::node_v4(1)).parse()?)
            && have.contains(&format!("{}/64", plan::node_v6(1)).parse()?),
        "node-1 addresses: {have:?}"
    );

    // The router forwards, sends no redirects; nodes route to `far` via it.
    let router = lab.router();
    ensure!(router.read_sysctl("net.ipv4.ip_forward")? == "1");
    ensure!(router.read_sysctl("net.ipv6.conf.all.forwarding")? == "1");
    ensure!(router.read_sysctl("net.ipv4.conf.all.send_redirects")? == "0");
    let rif = lab.l2_iface("router");
    ensure!(router.read_sysctl(&format!("net.ipv4.conf.{rif}.send_redirects"))? == "0");
    let via = node1.ip(&["route", "get", &plan::FAR_V4.to_string()])?;
    ensure!(
        via.contains(&format!("via {}", plan::ROUTER_V4)),
        "node-1 route to far: {via}"
    );
    let via = lab
        .far()
        .ip(&["route", "get", &plan::node_v4(1).to_string()])?;
    ensure!(
        via.contains(&format!("via {}", plan::ROUTER_ROUTED_V4)),
        "far route to node-1: {via}"
    );

    // Leave things behind on purpose: a detached process, a cut (nft table),
    // a capture, an FRR instance.
    node1.sh("setsid sleep 600 </dev/null >/dev/null 2>&1 &")?;
    let cut = node1.cut_interface(if1)?;
    std::mem::forget(cut);
    let cap = lab.client().capture(
        lab.l2_iface("client"),
        &lab.topo.state_dir().join("x.pcap"),
        &[],
    )?;
    std::mem::forget(cap);
    let frr = lab.start_router(&testkit::FrrConfig::lab_router())?;
    let frr_pid = frr.pid(testkit::FrrDaemon::Bgpd).context("bgpd pid")?;
    std::mem::forget(frr);
    let mut pids = Vec::new();
    for ns in lab.topo.namespaces() {
        pids.extend(ns.pids()?);
    }
    ensure!(
        pids.len() >= 5,
        "expected leftover processes, found {pids:?}"
    );
    ensure!(pids.contains(&frr_pid));
    let state_dir = lab.topo.state_dir().to_path_buf();

    lab.destroy()?;

    for p in &pids {
        ensure!(
            wait_pid_gone(*p, Duration::from_secs(5)),
            "pid {p} survived"
        );
    }
    ensure!(!pids.iter().any(|p| pid_alive(*p)));
    let after = root_state()?;
    ensure!(
        after == before,
        "root state differs after teardown:\nbefore {before:#?}\nafter {after:#?}"
    );
    ensure!(!state_dir.exists(), "{} left", state_dir.display());
    ensure!(
        !Path::new(testkit::cleanup::STATE_ROOT)
            .join("owners")
            .join(&prefix)
            .exists(),
        "owner record left"
    );
    ensure!(
        !Path::new(&format!("/var/tmp/frr/bgpd.{frr_pid}")).exists(),
        "FRR crash dir left"
    );
    Ok(())
}

#[test]
fn stale_runs_are_cleaned_up() -> Result<()> {
    let _serial = testkit::serial()?;
    // Fake a crashed run: a namespace with a process, a state dir, and an
    // owner record naming a pid that no longer exists.
    let mut dead = std::process::Command::new("true").spawn()?;
    let dead_pid = dead.id();
    dead.wait()?;
    let prefix = format!("mlb{}", (std::process::id() + 5000) % 10000);
    ensure!(
        !testkit::cleanup::owner_alive(&prefix),
        "prefix {prefix} is in use"
    );
    let owners = Path::new(testkit::cleanup::STATE_ROOT).join("owners");
    std::fs::create_dir_all(&owners)?;
    std::fs::write(owners.join(&prefix), format!("{dead_pid} 1\n"))?;
    let name = format!("{prefix}-node-1");
    testkit::cmd::run(&mut testkit::cmd::command("ip", &["netns", "add", &name]))?;
    let ns = Netns::existing(&name);
    ns.sh("setsid sleep 600 </dev/null >/dev/null 2>&1 &")?;
    let leftover = testkit::wait_until(Duration::from_secs(10), Duration::from_millis(20), || {
        ns.pids()
            .map_err(|e| e.to_string())?
            .first()
            .copied()
            .ok_or("no pid yet".to_string())
    })?;
    std::fs::create_dir_all(testkit::cleanup::state_dir(&prefix))?;

    let removed = testkit::cleanup_stale()?;
    ensure!(removed.contains(&prefix), "not removed: {removed:?}");
    ensure!(!ns.exists(), "namespace {name} left");
    ensure!(
        wait_pid_gone(leftover, Duration::from_secs(5)),
        "process {leftover} left"
    );
    ensure!(!testkit::cleanup::state_dir(&prefix).exists());
    ensure!(!owners.join(&prefix).exists());
    Ok(())
}

#[test]
fn processes_run_inside_the_namespace_and_die_with_their_handle() -> Result<()> {
    let _serial = testkit::serial()?;
    let topo = testkit::TopologySpec::new("procs")
        .namespace("a")
        .namespace("b")
        .link("ab", ("a", &["192.0.2.21/24"]), ("b", &["192.0.2.22/24"]))
        .create()?;
    let a = topo.ns("a");
    let netns_inode = |pid: u32| std::fs::read_link(format!("/proc/{pid}/ns/net")).ok();
    let own = a.run("readlink", &["/proc/self/ns/net"])?;

    // Blocking flavour: a shell with a child; dropping the handle kills both.
    let child = a.spawn("sh", &["-c", "sleep 600 & wait"])?;
    let pid = child.pid();
    // `ip netns exec` enters the namespace, then execs the program.
    testkit::wait_until(Duration::from_secs(10), Duration::from_millis(10), || {
        let now = netns_inode(pid).map(|p| p.to_string_lossy().into_owned());
        if now.as_deref() == Some(own.trim()) {
            Ok(())
        } else {
            Err(format!("child's namespace is {now:?}, want {}", own.trim()))
        }
    })?;
    let in_ns = testkit::wait_until(Duration::from_secs(10), Duration::from_millis(20), || {
        let p = a.pids().map_err(|e| e.to_string())?;
        if p.len() >= 2 {
            Ok(p)
        } else {
            Err(format!("pids {p:?}"))
        }
    })?;
    drop(child);
    for p in in_ns {
        ensure!(
            wait_pid_gone(p, Duration::from_secs(5)),
            "pid {p} survived its handle"
        );
    }

    // Async flavour.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let child = a.spawn_async("sleep", &["600"])?;
        let pid = child.pid();
        ensure!(pid_alive(pid));
        let status = child.stop(Duration::from_secs(5)).await?;
        ensure!(!status.success());
        ensure!(wait_pid_gone(pid, Duration::from_secs(5)));
        let child = a.spawn_async("sleep", &["600"])?;
        let pid = child.pid();
        drop(child);
        ensure!(
            wait_pid_gone(pid, Duration::from_secs(5)),
            "async child survived drop"
        );
        Ok(())
    })?;

    // The link works (ARP across the veth) and addresses outside the plan
    // are refused.
    let mac_b = topo.ns("b").mac(topo.iface("b", "ab"))?;
    ensure!(a.arping(topo.iface("a", "ab"), "192.0.2.22".parse()?, 3)? == mac_b);
    ensure!(a.add_addr(topo.iface("a", "ab"), "10.1.2.3/24").is_err());
    ensure!(a.add_route("0.0.0.0/0", "192.0.2.22".parse()?).is_err());
    ensure!(
        testkit::TopologySpec::new("bad")
            .namespace("x")
            .segment("s", &[("x", &["172.16.0.1/24"])])
            .create()
            .is_err()
    );
    topo.destroy()?;
    Ok(())
}

/// Two hosts owning one address on one segment (a split brain): the kit's ARP
/// probes see both answers. `arping -c 1 -w 1` would print only the first, so
/// a test built on it could never fail on a double answer (issue 24).
#[test]
fn two_hosts_answering_one_address_are_both_seen() -> Result<()> {
    let _serial = testkit::serial()?;
    let topo = testkit::TopologySpec::new("dual")
        .namespace("client")
        .namespace("a")
        .namespace("b")
        .segment(
            "lan",
            &[
                ("client", &["192.0.2.30/24"]),
                ("a", &["192.0.2.31/24"]),
                ("b", &["192.0.2.32/24"]),
            ],
        )
        .create()?;
    let cif = topo.iface("client", "lan").to_owned();
    let (a, b) = (topo.ns("a"), topo.ns("b"));
    let mac_a = a.mac(topo.iface("a", "lan"))?;
    let mac_b = b.mac(topo.iface("b", "lan"))?;
    let client = topo.ns("client");
    let shared: std::net::Ipv4Addr = "192.0.2.40".parse()?;
    // One owner: one answer, and arping resolves it.
    a.add_addr(topo.iface("a", "lan"), "192.0.2.40/32")?;
    ensure!(client.arping(&cif, shared, 3)? == mac_a);
    // Two owners: both answers counted; arping refuses to pick one.
    b.add_addr(topo.iface("b", "lan"), "192.0.2.40/32")?;
    let mut macs = client.arp_replies(&cif, Some("192.0.2.30".parse()?), shared, 1)?;
    macs.sort();
    macs.dedup();
    let mut want = vec![mac_a.clone(), mac_b.clone()];
    want.sort();
    ensure!(macs == want, "replies from {macs:?}, want {want:?}");
    let err = client
        .arping(&cif, shared, 1)
        .err()
        .context("arping resolved an address two hosts answer")?;
    ensure!(format!("{err:#}").contains("answered by"), "{err:#}");
    topo.destroy()?;
    Ok(())
}
