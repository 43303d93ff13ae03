//! The driver in the project lab (`testkit`): node-1, node-2 and the
//! client on the switch namespace's bridge, which has MLD snooping and a
//! querier on. Needs root; fails (does not skip) without it. Each test
//! takes `testkit::serial()`, so it runs alone among the namespace tests
//! of every crate.
//!
//! Service IPs (owned, assigned nowhere): 198.51.100.10 and
//! 2001:db8:100::10, from the lab's pools; the client gets on-link routes
//! to the pools so its kernel resolves them on the L2 segment.
//!
//! The driver runs on a thread that entered the node's namespace with
//! `setns` (a current-thread tokio runtime on it), not as a spawned
//! `metallbctl l2-announce`: an integration test of this crate cannot ask
//! cargo for another package's binary (`CARGO_BIN_EXE_*` is per package),
//! so a binary found next to the test executable may be missing or stale
//! after `cargo test -p arp-ndp`; in-process, the code under test is
//! always the code just built, the counters are read exactly through the
//! `L2Handle` instead of parsed from output, and stopping a node is
//! deterministic (the runtime is dropped: sockets closed, groups left).
//! The command itself is tested end to end in `metallbctl`'s tests, where
//! cargo builds and names the binary.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use arp_ndp::interfaces::AllowedInterfaces;
use arp_ndp::linux::{DriverConfig, GratuitousEvent, L2Handle};
use arp_ndp::packet::solicited_node_multicast;
use arp_ndp::state::IpCounters;
use testkit::{Lab, LabOptions, Netns};

const V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0x10);
/// Bound on a takeover (the first gratuitous round does it in
/// milliseconds; generous for loaded CI machines).
const TAKEOVER_BOUND: Duration = Duration::from_secs(3);

fn ips() -> [IpAddr; 2] {
    [IpAddr::V4(V4), IpAddr::V6(V6)]
}

/// The driver on a thread inside a namespace; stopped on drop.
struct Node {
    handle: L2Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Node {
    fn start(ns: &Netns) -> anyhow::Result<Node> {
        let name = ns.name().to_owned();
        let (tx, rx) = mpsc::channel();
        let thread = thread::spawn(move || {
            testkit::netns::enter_thread(&name).expect("setns");
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let (handle, task) = match arp_ndp::linux::start(DriverConfig::default()).await {
                    Ok(v) => v,
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
                let _ = tx.send(Ok((handle, stop_tx)));
                tokio::select! {
                    _ = stop_rx => {}
                    r = task => panic!("driver ended: {r:?}"),
                }
            });
        });
        let (handle, stop) = rx
            .recv_timeout(Duration::from_secs(10))
            .context("the driver did not start within 10 s")?
            .map_err(anyhow::Error::msg)
            .context("driver start")?;
        Ok(Node {
            handle,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    fn own_all(&self) -> anyhow::Result<()> {
        for ip in ips() {
            self.handle.own(ip, AllowedInterfaces::all())?;
        }
        Ok(())
    }

    fn disown_all(&self) -> anyhow::Result<()> {
        for ip in ips() {
            self.handle.disown(ip)?;
        }
        Ok(())
    }

    fn counters(&self) -> BTreeMap<IpAddr, IpCounters> {
        ips()
            .into_iter()
            .map(|ip| (ip, self.handle.counters(&ip)))
            .collect()
    }

    /// Waits until the burst is over: 5 rounds, 2 ARP packets or 1 NA each.
    fn wait_burst_done(&self, base: &BTreeMap<IpAddr, IpCounters>) -> anyhow::Result<()> {
        testkit::wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
            let now = self.counters();
            let v4 = now[&IpAddr::V4(V4)].gratuitous_sent - base[&IpAddr::V4(V4)].gratuitous_sent;
            let v6 = now[&IpAddr::V6(V6)].gratuitous_sent - base[&IpAddr::V6(V6)].gratuitous_sent;
            if v4 >= 10 && v6 >= 5 {
                Ok(())
            } else {
                Err(format!("gratuitous sent so far: v4 {v4}, v6 {v6}"))
            }
        })?;
        Ok(())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `ip -ts monitor neigh` in the client: neighbour changes as they happen
/// (no polling), each stamped when its line arrives.
struct NeighMonitor {
    child: Child,
    lines: mpsc::Receiver<(Instant, String)>,
}

impl NeighMonitor {
    fn start(client: &Netns) -> anyhow::Result<NeighMonitor> {
        let mut c = client.command("ip");
        c.args(["-ts", "monitor", "neigh"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .stdin(Stdio::null());
        let mut child = c.spawn().context("ip monitor neigh")?;
        let out = child.stdout.take().context("ip monitor stdout")?;
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { return };
                if tx.send((Instant::now(), l)).is_err() {
                    return;
                }
            }
        });
        // `ip monitor` subscribes before printing anything; give it a
        // moment to open its netlink socket.
        thread::sleep(Duration::from_millis(200));
        Ok(NeighMonitor { child, lines })
    }

    /// Waits until `ip` shows `mac`; returns when the line arrived.
    fn wait_mac(&self, ip: IpAddr, mac: &str, timeout: Duration) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + timeout;
        let ip_s = format!("] {ip} dev ");
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((at, l)) => {
                    let l_lower = l.to_ascii_lowercase();
                    if l.contains(&ip_s)
                        && !l.contains("Deleted")
                        && l_lower.contains(&format!("lladdr {mac}"))
                    {
                        return Ok(at);
                    }
                    seen.push(l);
                }
                Err(_) => bail!("{ip} did not move to {mac} within {timeout:?}; saw {seen:#?}"),
            }
        }
    }

    /// Discards what was printed so far.
    fn drain(&self) {
        while self.lines.try_recv().is_ok() {}
    }
}

impl Drop for NeighMonitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lab with two nodes and on-link routes to the pools in the client.
fn lab() -> anyhow::Result<Lab> {
    let lab = Lab::up(&LabOptions {
        nodes: 2,
        far: false,
    })?;
    let cif = lab.l2_iface("client").to_owned();
    lab.client()
        .ip(&["route", "add", "198.51.100.0/24", "dev", &cif])?;
    lab.client()
        .ip(&["-6", "route", "add", "2001:db8:100::/120", "dev", &cif])?;
    Ok(lab)
}

fn client_mac(lab: &Lab, ip: IpAddr) -> anyhow::Result<Option<String>> {
    Ok(lab
        .client()
        .neighbors()?
        .into_iter()
        .find(|n| n.dst == ip)
        .and_then(|n| n.lladdr))
}

/// The client kernel resolves `ip` by itself: one UDP datagram (bash's
/// /dev/udp; no ping needed) makes it solicit first.
fn kernel_resolve(lab: &Lab, ip: IpAddr, mac: &str) -> anyhow::Result<()> {
    lab.client()
        .run("bash", &["-c", &format!("echo x > /dev/udp/{ip}/9")])?;
    testkit::wait_until(
        Duration::from_secs(5),
        Duration::from_millis(20),
        || match client_mac(lab, ip).map_err(|e| e.to_string())? {
            Some(m) if m == mac => Ok(()),
            other => Err(format!("client entry for {ip}: {other:?}")),
        },
    )?;
    Ok(())
}

/// Requests for our IPs in a capture, per IP (who-has / NS target).
fn requests_in(pcap: &std::path::Path, filter: &[&str]) -> anyhow::Result<(u64, u64)> {
    let text = testkit::capture::read_pcap(pcap, filter)?;
    let v4 = text
        .lines()
        .filter(|l| l.contains(&format!("Request who-has {V4} ")))
        .count() as u64;
    let v6 = text
        .lines()
        .filter(|l| l.contains(&format!("neighbor solicitation, who has {V6},")))
        .count() as u64;
    Ok((v4, v6))
}

#[test]
fn lab_node1_answers_snooped_then_node2_takes_over() -> anyhow::Result<()> {
    let _serial = testkit::serial()?;
    let lab = lab()?;
    let dir = lab.topo.state_dir().join("arp-ndp-lab");
    let (if1, if2, cif) = (
        lab.l2_iface("node-1").to_owned(),
        lab.l2_iface("node-2").to_owned(),
        lab.l2_iface("client").to_owned(),
    );
    let mac1 = lab.node(1).mac(&if1)?;
    let mac2 = lab.node(2).mac(&if2)?;
    let cmac = lab.client().mac(&cif)?;
    let from_client = ["ether", "src", cmac.as_str()];
    let ns_filter = ["icmp6", "and", "ip6[40]", "==", "135"];

    // Phase 1: node-1 owns both IPs.
    let cap_c = lab
        .client()
        .capture(&cif, &dir.join("client-1.pcap"), &["arp", "or", "icmp6"])?;
    let cap_n1 = lab
        .node(1)
        .capture(&if1, &dir.join("n1.pcap"), &ns_filter)?;
    let cap_n2 = lab
        .node(2)
        .capture(&if2, &dir.join("n2.pcap"), &ns_filter)?;
    let n1 = Node::start(lab.node(1))?;
    let owned_at = Instant::now();
    let base1 = n1.counters();
    n1.own_all()?;
    let group = solicited_node_multicast(V6);
    lab.topo
        .wait_joined("l2", "node-1", IpAddr::V6(group), Duration::from_secs(10))?;
    let igmp6 = lab.node(1).run("cat", &["/proc/net/igmp6"])?;
    ensure!(
        igmp6.contains("ff0200000000000000000001ff000010"),
        "node-1's /proc/net/igmp6 lacks {group}:\n{igmp6}"
    );
    ensure!(
        n1.handle.announced_on(&IpAddr::V4(V4)) == [if1.clone()],
        "announced_on: {:?}",
        n1.handle.announced_on(&IpAddr::V4(V4))
    );

    assert_eq!(lab.client().arping(&cif, V4, 1)?, mac1, "arping");
    assert_eq!(lab.client().ndisc(&cif, V6, 3)?, mac1, "ndisc6");
    for ip in ips() {
        kernel_resolve(&lab, ip, &mac1)?;
    }

    // Only node-1 received the solicitations (the group is snooped).
    let n1_pcap = cap_n1.stop()?;
    let n2_pcap = cap_n2.stop()?;
    let (_, ns_at_n1) = requests_in(&n1_pcap, &[])?;
    let (_, ns_at_n2) = requests_in(&n2_pcap, &[])?;
    ensure!(ns_at_n1 >= 2, "node-1 saw {ns_at_n1} NS for {V6}");
    ensure!(
        ns_at_n2 == 0,
        "node-2 saw {ns_at_n2} NS for {V6}: the bridge flooded the solicited-node group:\n{}",
        testkit::capture::read_pcap(&n2_pcap, &[])?
    );

    // Counters: every request the client sent was received and answered;
    // the burst was 5 rounds (2 ARP packets or 1 NA each).
    n1.wait_burst_done(&base1)?;
    ensure!(
        owned_at.elapsed() >= Duration::from_secs(4),
        "burst too short"
    );
    let client_pcap = cap_c.stop()?;
    let (req4, req6) = requests_in(&client_pcap, &from_client)?;
    let c = n1.counters();
    let (c4, c6) = (c[&IpAddr::V4(V4)], c[&IpAddr::V6(V6)]);
    eprintln!("node-1 counters: v4 {c4:?}, v6 {c6:?}; client sent v4 {req4}, v6 {req6}");
    ensure!(
        req4 >= 2 && req6 >= 2,
        "client requests: v4 {req4}, v6 {req6}"
    );
    assert_eq!(
        c4,
        IpCounters {
            requests_received: req4,
            responses_sent: req4,
            gratuitous_sent: 10,
        }
    );
    assert_eq!(
        c6,
        IpCounters {
            requests_received: req6,
            responses_sent: req6,
            gratuitous_sent: 5,
        }
    );

    // Phase 2: node-1 stops; node-2 takes the IPs. The client's entries
    // move to node-2's MAC from the gratuitous burst alone.
    drop(n1);
    for ip in ips() {
        ensure!(
            client_mac(&lab, ip)?.as_deref() == Some(mac1.as_str()),
            "client entry for {ip} changed before the takeover"
        );
    }
    let mon = NeighMonitor::start(lab.client())?;
    let cap_c = lab
        .client()
        .capture(&cif, &dir.join("client-2.pcap"), &["arp", "or", "icmp6"])?;
    let n2 = Node::start(lab.node(2))?;
    let base2 = n2.counters();
    mon.drain();
    let t0 = Instant::now();
    n2.own_all()?;
    for ip in ips() {
        let at = mon.wait_mac(ip, &mac2, TAKEOVER_BOUND)?;
        eprintln!("takeover of {ip}: {:?}", at - t0);
    }
    for ip in ips() {
        assert_eq!(
            client_mac(&lab, ip)?.as_deref(),
            Some(mac2.as_str()),
            "{ip}"
        );
    }
    n2.wait_burst_done(&base2)?;
    let client_pcap = cap_c.stop()?;
    let (req4, req6) = requests_in(&client_pcap, &from_client)?;
    ensure!(
        req4 == 0 && req6 == 0,
        "the client re-solicited (v4 {req4}, v6 {req6}): the move must come from the burst"
    );
    let c = n2.counters();
    for (ip, grat) in [(IpAddr::V4(V4), 10), (IpAddr::V6(V6), 5)] {
        assert_eq!(
            c[&ip],
            IpCounters {
                requests_received: 0,
                responses_sent: 0,
                gratuitous_sent: grat,
            },
            "node-2 counters for {ip}"
        );
    }
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).ceil() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Takeover time, measured: ownership alternates between node-1 and
/// node-2 (both drivers running, as speakers do: disown on one, own on
/// the other); the time is from the `own` call to the client's
/// `ip monitor neigh` line showing the new MAC. Ten typical samples (the
/// client's entries last changed over a second before), then ten worst
/// case ones (the entries re-resolved just before the move, inside the
/// kernel's 1 s ARP `locktime`, which a gratuitous ARP overrides). Prints
/// the figures.
#[test]
fn lab_takeover_time_samples() -> anyhow::Result<()> {
    const SAMPLES: usize = 10;
    let _serial = testkit::serial()?;
    let lab = lab()?;
    let macs = [
        lab.node(1).mac(lab.l2_iface("node-1"))?,
        lab.node(2).mac(lab.l2_iface("node-2"))?,
    ];
    let nodes = [Node::start(lab.node(1))?, Node::start(lab.node(2))?];
    nodes[0].own_all()?;
    for ip in ips() {
        kernel_resolve(&lab, ip, &macs[0])?;
    }
    let mon = NeighMonitor::start(lab.client())?;
    let mut owner = 0;
    for worst in [false, true] {
        let case = if worst { "worst case" } else { "typical" };
        let mut times: BTreeMap<IpAddr, Vec<Duration>> = BTreeMap::new();
        let mut both = Vec::new();
        let mut packets_before_change = Vec::new();
        for i in 0..SAMPLES {
            let (from, to) = (owner, 1 - owner);
            // Let the previous burst settle so each sample starts alike.
            thread::sleep(Duration::from_millis(1200));
            if worst {
                let cif = lab.l2_iface("client").to_owned();
                for ip in ips() {
                    lab.client()
                        .ip(&["neigh", "del", &ip.to_string(), "dev", &cif])?;
                    kernel_resolve(&lab, ip, &macs[from])?;
                }
            }
            let mut grat = nodes[to].handle.subscribe_gratuitous();
            nodes[from].disown_all()?;
            mon.drain();
            let t0 = Instant::now();
            nodes[to].own_all()?;
            let mut last = t0;
            for ip in ips() {
                let at = mon.wait_mac(ip, &macs[to], TAKEOVER_BOUND)?;
                times.entry(ip).or_default().push(at - t0);
                last = last.max(at);
            }
            owner = to;
            both.push(last - t0);
            // Events are published right after each send; let the driver
            // thread publish those sent before `last` (the next round is
            // 1.1 s away).
            thread::sleep(Duration::from_millis(100));
            let mut n = 0;
            while let Ok(GratuitousEvent { ip, .. }) = grat.try_recv() {
                ensure!(ips().contains(&ip));
                n += 1;
            }
            packets_before_change.push(n);
            eprintln!(
                "{case} sample {i}: node-{} -> node-{}: both moved in {:?}",
                from + 1,
                to + 1,
                last - t0
            );
        }
        times.insert(IpAddr::V4(Ipv4Addr::UNSPECIFIED), both);
        for (ip, t) in &mut times {
            t.sort();
            let what = if ip.is_unspecified() {
                "both IPs".to_owned()
            } else {
                ip.to_string()
            };
            eprintln!(
                "{case} takeover {what}: n={} median {:?} p99 {:?} min {:?} max {:?}",
                t.len(),
                percentile(t, 0.5),
                percentile(t, 0.99),
                t[0],
                t[t.len() - 1]
            );
            ensure!(percentile(t, 0.99) < Duration::from_secs(1), "p99 over 1 s");
        }
        eprintln!(
            "{case}: gratuitous packets sent (both IPs) within 100 ms of both entries moving: {packets_before_change:?}"
        );
        // One round (2 ARP packets + 1 NA) moved both entries.
        ensure!(
            packets_before_change.iter().all(|n| *n == 3),
            "{packets_before_change:?}"
        );
    }
    Ok(())
}

/// A snooping switch that forgot node-1's solicited-node group (node-1's
/// reports to the querier were lost while its cable was cut: the bench's
/// `flap` fault left two IPv6 addresses unanswered for 12 s to 2 min that
/// way) forwards the client's solicitations for the address only to the
/// group's other listeners: nobody answers until the next query (125 s). A
/// reannounce (what the speaker does when its watcher hears it again after
/// a cut) restates the groups with an MLDv2 report: the switch forwards to
/// node-1 again at once.
#[test]
fn lab_a_reannounce_restates_a_group_the_switch_forgot() -> anyhow::Result<()> {
    let _serial = testkit::serial()?;
    let lab = lab()?;
    let l2 = testkit::lab::L2;
    let sw = lab.topo.switch().context("the lab's switch")?;
    let br = lab.topo.bridge(l2).to_owned();
    let p1 = lab.topo.port(l2, "node-1").to_owned();
    let p2 = lab.topo.port(l2, "node-2").to_owned();
    let group = IpAddr::V6(solicited_node_multicast(V6));
    let group_s = group.to_string();
    let cif = lab.l2_iface("client").to_owned();
    let mac1 = lab.node(1).mac(lab.l2_iface("node-1"))?;

    let n1 = Node::start(lab.node(1))?;
    n1.own_all()?;
    // The kernel's own report when the driver joined.
    lab.topo
        .wait_joined(l2, "node-1", group, Duration::from_secs(5))?;
    // Another listener of the group (node-2's port, held by hand): with no
    // port left in it the switch would flood the group, not drop it.
    sw.run(
        "bridge",
        &[
            "mdb",
            "add",
            "dev",
            &br,
            "port",
            &p2,
            "grp",
            &group_s,
            "permanent",
        ],
    )?;
    ensure!(
        lab.client().ndisc(&cif, V6, 3)? == mac1,
        "node-1 answers first"
    );

    // The switch forgets node-1's membership: the solicitations go to node-2 only.
    sw.run(
        "bridge",
        &["mdb", "del", "dev", &br, "port", &p1, "grp", &group_s],
    )?;
    ensure!(
        !lab.topo
            .mdb()?
            .iter()
            .any(|e| e.port == p1 && e.group == group),
        "node-1's membership is still in the switch"
    );
    // Unanswered now (each try a 1 s wait); the querier's restart may take a
    // moment to hold.
    testkit::wait_until(
        Duration::from_secs(10),
        Duration::from_millis(10),
        || match lab.client().ndisc(&cif, V6, 1) {
            Err(_) => Ok(()),
            Ok(mac) => Err(format!(
                "the client's solicitation is still answered by {mac} (node-1: {mac1}) while \
                 the switch forgets node-1; its groups: {:?}",
                lab.topo.mdb()
            )),
        },
    )?;
    n1.handle.reannounce()?;
    lab.topo
        .wait_joined(l2, "node-1", group, Duration::from_secs(2))
        .context("the reannounce must restate node-1's group to the switch")?;
    ensure!(
        lab.client().ndisc(&cif, V6, 3)? == mac1,
        "node-1 answers again"
    );
    Ok(())
}
