//! The Linux edge against the Linux kernel's own ARP and ND, in network
//! namespaces each test creates and deletes: a node running the responder
//! and a client, joined by veth pairs. Needs root; fails (does not skip)
//! without it. Tests take the project's cross-process namespace lock, so
//! they run one at a time here and against other crates' namespace tests.
//!
//! Addresses: node 192.0.2.2 / 2001:db8::2, client 192.0.2.1 /
//! 2001:db8::1, service IPs 192.0.2.10 and 2001:db8::10 (owned, assigned
//! nowhere), second link 203.0.113.0/24, VLAN 100 198.51.100.0/24.

use std::fs::{File, OpenOptions};
use std::net::IpAddr;
use std::process::{Command, Output};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use arp_ndp::interfaces::{AllowedInterfaces, ExcludeList};
use arp_ndp::linux::{DriverConfig, L2Handle};

mod common;

/// The lock shared with `testkit::serial()` (same path, same flock).
const LOCK_PATH: &str = "/run/metallb-testkit.lock";

fn serial() -> File {
    assert!(
        rustix::process::geteuid().is_root(),
        "the namespace tests need root (CAP_NET_ADMIN and CAP_NET_RAW)"
    );
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_PATH)
        .expect("open the namespace test lock");
    f.lock().expect("take the namespace test lock");
    f
}

fn run(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"))
}

fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Two namespaces and a veth pair `eth0`<->`eth0`; deleted on drop.
struct Topology {
    node: String,
    cli: String,
    _lock: File,
}

impl Topology {
    fn new(tag: &str) -> Topology {
        let lock = serial();
        let t = Topology {
            node: format!("arpndp-{tag}-n"),
            cli: format!("arpndp-{tag}-c"),
            _lock: lock,
        };
        for ns in [&t.node, &t.cli] {
            // Leftovers of a crashed run (we hold the lock: nobody else
            // uses these names).
            let _ = run(&["ip", "netns", "del", ns]);
            ok(&["ip", "netns", "add", ns]);
            ok(&[
                "ip",
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.accept_dad=0",
                "net.ipv6.conf.default.accept_dad=0",
            ]);
            ok(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        t.link("eth0");
        ok(&[
            "ip",
            "-n",
            &t.node,
            "addr",
            "add",
            "192.0.2.2/24",
            "dev",
            "eth0",
        ]);
        ok(&[
            "ip",
            "-n",
            &t.node,
            "addr",
            "add",
            "2001:db8::2/64",
            "dev",
            "eth0",
            "nodad",
        ]);
        ok(&[
            "ip",
            "-n",
            &t.cli,
            "addr",
            "add",
            "192.0.2.1/24",
            "dev",
            "eth0",
        ]);
        ok(&[
            "ip",
            "-n",
            &t.cli,
            "addr",
            "add",
            "2001:db8::1/64",
            "dev",
            "eth0",
            "nodad",
        ]);
        t
    }

    /// A veth pair named `dev` on both sides, up.
    fn link(&self, dev: &str) {
        ok(&[
            "ip", "-n", &self.node, "link", "add", dev, "type", "veth", "peer", "name", dev,
            "netns", &self.cli,
        ]);
        ok(&["ip", "-n", &self.node, "link", "set", dev, "up"]);
        ok(&["ip", "-n", &self.cli, "link", "set", dev, "up"]);
    }

    fn node_mac(&self, dev: &str) -> String {
        ok(&[
            "ip",
            "netns",
            "exec",
            &self.node,
            "cat",
            &format!("/sys/class/net/{dev}/address"),
        ])
        .trim()
        .to_owned()
    }

    /// `arping` from the client; the MAC that answered, if any.
    fn arping(&self, dev: &str, src: &str, target: &str) -> Option<String> {
        let o = run(&[
            "ip", "netns", "exec", &self.cli, "arping", "-c", "1", "-w", "2", "-I", dev, "-s", src,
            target,
        ]);
        let out = String::from_utf8_lossy(&o.stdout);
        out.lines()
            .find(|l| l.contains("reply from"))
            .and_then(|l| Some(l.split('[').nth(1)?.split(']').next()?.to_lowercase()))
    }

    /// `ndisc6` from the client; the target link-layer address, if any.
    fn ndisc6(&self, target: &str) -> Option<String> {
        let o = run(&[
            "ip", "netns", "exec", &self.cli, "ndisc6", "-1", "-n", "-r", "3", "-w", "700", target,
            "eth0",
        ]);
        let out = String::from_utf8_lossy(&o.stdout);
        out.lines()
            .find(|l| l.contains("Target link-layer address"))
            .and_then(|l| Some(l.split(": ").nth(1)?.trim().to_lowercase()))
    }

    fn client_neigh(&self, ip: &str) -> String {
        ok(&["ip", "-n", &self.cli, "neigh", "show", ip])
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in [&self.node, &self.cli] {
            let _ = run(&["ip", "netns", "del", ns]);
        }
    }
}

/// The driver running in a thread inside the node namespace.
struct Responder {
    handle: L2Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Responder {
    fn start(ns: &str, cfg: DriverConfig) -> Responder {
        let name = ns.to_string();
        let (tx, rx) = mpsc::channel();
        let thread = thread::spawn(move || {
            testkit::netns::enter_thread(&name).expect("setns");
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let (handle, task) = arp_ndp::linux::start(cfg).await.expect("driver starts");
                let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
                tx.send((handle, stop_tx)).unwrap();
                tokio::select! {
                    _ = stop_rx => {}
                    r = task => panic!("driver ended: {r:?}"),
                }
            });
        });
        let (handle, stop) = rx.recv_timeout(Duration::from_secs(10)).expect("driver up");
        Responder {
            handle,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    fn own(&self, ip: &str, allowed: AllowedInterfaces) {
        let ip: IpAddr = ip.parse().unwrap();
        self.handle.own(ip, allowed).unwrap();
        // Let the driver take it before the test sends anything.
        wait_for(
            || !self.handle.announced_on(&ip).is_empty(),
            "the driver to own the IP",
        );
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn wait_for(mut f: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn arping_and_ndisc6_get_our_mac_and_kernel_learns_it() {
    let t = Topology::new("basic");
    let mac = t.node_mac("eth0");
    let r = Responder::start(&t.node, DriverConfig::default());
    r.own("192.0.2.10", AllowedInterfaces::all());
    r.own("2001:db8::10", AllowedInterfaces::all());

    assert_eq!(
        t.arping("eth0", "192.0.2.1", "192.0.2.10").as_deref(),
        Some(mac.as_str())
    );
    assert_eq!(t.ndisc6("2001:db8::10").as_deref(), Some(mac.as_str()));
    // Other IPs get no answer.
    assert_eq!(t.arping("eth0", "192.0.2.1", "192.0.2.11"), None);
    assert_eq!(t.ndisc6("2001:db8::11"), None);

    // The client kernel's own resolution: a UDP datagram to the service
    // makes it resolve the neighbour first (bash's /dev/udp; no ping on
    // the test machines).
    for ip in ["192.0.2.10", "2001:db8::10"] {
        ok(&[
            "ip",
            "netns",
            "exec",
            &t.cli,
            "bash",
            "-c",
            &format!("echo x > /dev/udp/{ip}/9"),
        ]);
        wait_for(
            || t.client_neigh(ip).contains(&mac),
            "the client kernel to resolve",
        );
    }

    // The solicited-node group is joined on the node (MLD follows).
    let igmp6 = ok(&["ip", "netns", "exec", &t.node, "cat", "/proc/net/igmp6"]);
    assert!(
        igmp6.contains("ff0200000000000000000001ff000010"),
        "{igmp6}"
    );

    let c = r.handle.counters(&"192.0.2.10".parse().unwrap());
    assert!(c.requests_received >= 2 && c.responses_sent >= 2, "{c:?}");
    assert_eq!(
        c.gratuitous_sent % 2,
        0,
        "ARP rounds are request + reply: {c:?}"
    );
    assert_eq!(
        r.handle.announced_on(&"192.0.2.10".parse().unwrap()),
        ["eth0"]
    );

    // Disowned: no more answers, group left.
    r.handle.disown("192.0.2.10".parse().unwrap()).unwrap();
    r.handle.disown("2001:db8::10".parse().unwrap()).unwrap();
    thread::sleep(Duration::from_millis(100));
    assert_eq!(t.arping("eth0", "192.0.2.1", "192.0.2.10"), None);
    let igmp6 = ok(&["ip", "netns", "exec", &t.node, "cat", "/proc/net/igmp6"]);
    assert!(
        !igmp6.contains("ff0200000000000000000001ff000010"),
        "{igmp6}"
    );
}

#[test]
fn gratuitous_burst_moves_the_client_to_our_mac() {
    let t = Topology::new("garp");
    let mac = t.node_mac("eth0");
    // The client still caches the previous owner's MAC.
    for ip in ["192.0.2.10", "2001:db8::10"] {
        ok(&[
            "ip",
            "-n",
            &t.cli,
            "neigh",
            "replace",
            ip,
            "lladdr",
            "02:00:00:00:00:99",
            "dev",
            "eth0",
            "nud",
            "stale",
        ]);
    }
    let r = Responder::start(&t.node, DriverConfig::default());
    r.own("192.0.2.10", AllowedInterfaces::all());
    r.own("2001:db8::10", AllowedInterfaces::all());
    wait_for(
        || t.client_neigh("192.0.2.10").contains(&mac),
        "the IPv4 entry to move",
    );
    wait_for(
        || t.client_neigh("2001:db8::10").contains(&mac),
        "the IPv6 entry to move",
    );
}

/// Sends one raw Ethernet frame out of the client's `eth0` (python3's
/// AF_PACKET support: the test kernel may lack the 8021q module, so a VLAN
/// device cannot be relied on to produce tagged frames).
fn inject(t: &Topology, frame: &[u8]) {
    let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
    let script = format!(
        "import socket; s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); \
         s.bind(('eth0', 0)); s.send(bytes.fromhex('{hex}'))"
    );
    ok(&["ip", "netns", "exec", &t.cli, "python3", "-c", &script]);
}

#[test]
fn frames_from_another_vlan_are_not_answered() {
    use arp_ndp::packet::{ArpFrame, MacAddr};
    let t = Topology::new("vlan");
    let r = Responder::start(&t.node, DriverConfig::default());
    r.own("198.51.100.10", AllowedInterfaces::all());
    let ip: IpAddr = "198.51.100.10".parse().unwrap();
    let request = ArpFrame::request(
        MacAddr([2, 0, 0, 0, 0, 1]),
        "198.51.100.1".parse().unwrap(),
        "198.51.100.10".parse().unwrap(),
    )
    .encode();
    // Tagged for VLAN 100. The node has no VLAN 100 device: Linux strips
    // the tag, marks the frame PACKET_OTHERHOST and still delivers it to
    // ETH_P_ARP sockets on eth0 (checked by hand with a plain packet
    // socket); our socket filter drops it.
    let mut tagged = request.clone();
    tagged.splice(12..12, [0x81, 0x00, 0x00, 0x64]);
    inject(&t, &tagged);
    thread::sleep(Duration::from_millis(300));
    assert_eq!(r.handle.counters(&ip).requests_received, 0);
    // The same request untagged on the same wire: answered.
    inject(&t, &request);
    wait_for(
        || r.handle.counters(&ip).responses_sent == 1,
        "the untagged request's answer",
    );
    assert_eq!(r.handle.counters(&ip).requests_received, 1);
}

#[test]
fn allow_list_and_exclusion_are_honoured() {
    let t = Topology::new("allow");
    t.link("eth1");
    ok(&[
        "ip",
        "-n",
        &t.cli,
        "addr",
        "add",
        "203.0.113.1/24",
        "dev",
        "eth1",
    ]);
    let mac1 = t.node_mac("eth1");
    {
        let r = Responder::start(&t.node, DriverConfig::default());
        r.own("192.0.2.10", AllowedInterfaces::only(["eth1"]));
        assert_eq!(t.arping("eth0", "192.0.2.1", "192.0.2.10"), None);
        assert_eq!(
            t.arping("eth1", "203.0.113.1", "192.0.2.10").as_deref(),
            Some(mac1.as_str())
        );
        assert_eq!(
            r.handle.announced_on(&"192.0.2.10".parse().unwrap()),
            ["eth1"]
        );
    }
    let r = Responder::start(
        &t.node,
        DriverConfig {
            exclude: ExcludeList::from_patterns(&["^eth1$"]).unwrap(),
            ..DriverConfig::default()
        },
    );
    r.own("192.0.2.10", AllowedInterfaces::all());
    assert_eq!(t.arping("eth1", "203.0.113.1", "192.0.2.10"), None);
    assert!(t.arping("eth0", "192.0.2.1", "192.0.2.10").is_some());
    let names: Vec<String> = r.handle.interfaces().into_iter().map(|i| i.name).collect();
    assert_eq!(
        names,
        ["eth0"],
        "lo is excluded by default, eth1 by the list"
    );
}

#[test]
fn interface_added_after_start_is_picked_up() {
    let t = Topology::new("hotplug");
    let r = Responder::start(&t.node, DriverConfig::default());
    r.own("192.0.2.10", AllowedInterfaces::all());
    t.link("eth1");
    ok(&[
        "ip",
        "-n",
        &t.cli,
        "addr",
        "add",
        "203.0.113.1/24",
        "dev",
        "eth1",
    ]);
    let mac1 = t.node_mac("eth1");
    let ip: IpAddr = "192.0.2.10".parse().unwrap();
    wait_for(
        || r.handle.announced_on(&ip).len() == 2,
        "eth1 to be announced on",
    );
    assert_eq!(
        t.arping("eth1", "203.0.113.1", "192.0.2.10").as_deref(),
        Some(mac1.as_str())
    );
}

/// Sends `frame` out of the client's `eth0` from an `ETH_P_IPV6` packet
/// socket and returns the first solicited Neighbor Advertisement that
/// socket then receives within `wait` (the socket is open before the send,
/// so the answer cannot be missed), or `None`.
fn solicit(t: &Topology, frame: &[u8], wait: Duration) -> Option<Vec<u8>> {
    let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
    let script = [
        "import select, socket, time".to_owned(),
        "s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x86dd))".to_owned(),
        "s.bind(('eth0', 0x86dd))".to_owned(),
        format!("s.send(bytes.fromhex('{hex}'))"),
        format!("end = time.time() + {}", wait.as_secs_f64()),
        "while time.time() < end:".to_owned(),
        "    r, _, _ = select.select([s], [], [], max(0, end - time.time()))".to_owned(),
        "    if not r: break".to_owned(),
        "    data, addr = s.recvfrom(65535)".to_owned(),
        // A solicited NA (type 136, S set) right after the fixed header,
        // not our own: the gratuitous burst's unsolicited NAs do not count.
        "    if addr[2] != socket.PACKET_OUTGOING and len(data) > 58 and data[20] == 58 \\"
            .to_owned(),
        "            and data[54] == 136 and data[58] & 0x40:".to_owned(),
        "        print(data.hex()); break".to_owned(),
    ]
    .join("\n");
    let out = ok(&["ip", "netns", "exec", &t.cli, "python3", "-c", &script]);
    out.lines().find_map(|l| {
        let f = common::hex(l);
        arp_ndp::packet::NeighborAdvertisement::decode_frame(&f)
            .is_ok_and(|(_, _, na)| na.solicited)
            .then_some(f)
    })
}

#[test]
fn solicitation_behind_extension_headers_is_answered() {
    use arp_ndp::packet::{
        IPPROTO_DSTOPTS, IPPROTO_FRAGMENT, IPPROTO_HOPOPTS, MacAddr, NeighborAdvertisement,
        NeighborSolicitation,
    };
    let t = Topology::new("exthdr");
    let mac: MacAddr = t.node_mac("eth0").parse().unwrap();
    let cli_mac: MacAddr = ok(&[
        "ip",
        "netns",
        "exec",
        &t.cli,
        "cat",
        "/sys/class/net/eth0/address",
    ])
    .trim()
    .parse()
    .unwrap();
    let r = Responder::start(&t.node, DriverConfig::default());
    r.own("2001:db8::10", AllowedInterfaces::all());
    let ip: IpAddr = "2001:db8::10".parse().unwrap();
    let ns = NeighborSolicitation::resolve_frame(
        cli_mac,
        common::v6(1),
        "2001:db8::10".parse().unwrap(),
    );

    // Fragmented (RFC 6980): the socket filter drops it, so it is not even
    // counted as a request, and nothing answers.
    let frag = common::with_ext_headers(&ns, &[(IPPROTO_FRAGMENT, vec![0; 7])]);
    assert_eq!(solicit(&t, &frag, Duration::from_millis(500)), None);
    assert_eq!(r.handle.counters(&ip).requests_received, 0);

    // Behind Hop-by-Hop (PadN), then behind Destination Options: both pass
    // the kernel-side filter and the decoder, and are answered with our
    // MAC, Solicited and Override set.
    let mut answered = 0;
    for headers in [
        vec![(IPPROTO_HOPOPTS, common::padn_body())],
        vec![(IPPROTO_DSTOPTS, common::padn_body())],
    ] {
        let f = common::with_ext_headers(&ns, &headers);
        let na = solicit(&t, &f, Duration::from_secs(3))
            .unwrap_or_else(|| panic!("no answer to the NS behind {headers:?}"));
        let (eth, ip6, na) = NeighborAdvertisement::decode_frame(&na).unwrap();
        assert_eq!((eth.src, eth.dst), (mac, cli_mac));
        assert_eq!(ip6.dst, common::v6(1));
        assert_eq!(
            na.target,
            "2001:db8::10".parse::<std::net::Ipv6Addr>().unwrap()
        );
        assert_eq!(na.target_lla, Some(mac));
        assert!(na.solicited && na.override_flag);
        answered += 1;
        assert_eq!(r.handle.counters(&ip).responses_sent, answered);
    }
    assert_eq!(r.handle.counters(&ip).requests_received, 2);
}

/// Deletes a namespace on drop.
struct Netns(&'static str);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "del", self.0]);
    }
}

/// The interface watcher with the smallest notification buffer the kernel
/// allows, in a namespace of its own, while `ip -batch` makes 500 address
/// changes, adds a link and deletes one, and the watcher's runtime is
/// blocked (its netlink connection task cannot read): the kernel drops
/// notifications, among them the last ones. The watcher must notice
/// (ENOBUFS, seen as an overrun on the stream), re-dump, and end up with
/// exactly what a fresh dump shows. Without the re-dump the new link
/// would never appear.
#[test]
fn netlink_overflow_is_detected_and_the_table_redumped() {
    use arp_ndp::linux::{InterfaceWatcher, WatchOptions};
    const NS: &str = "arpndp-ovf-n";
    let _lock = serial();
    let _ = run(&["ip", "netns", "del", NS]);
    ok(&["ip", "netns", "add", NS]);
    let _ns = Netns(NS);
    // veth pairs: the test kernel may have no dummy driver.
    for dev in ["gone", "churn"] {
        ok(&[
            "ip",
            "-n",
            NS,
            "link",
            "add",
            &format!("{dev}0"),
            "type",
            "veth",
            "peer",
            "name",
            &format!("{dev}1"),
        ]);
    }
    ok(&[
        "ip",
        "-n",
        NS,
        "addr",
        "add",
        "192.0.2.1/32",
        "dev",
        "gone0",
    ]);
    let mut batch = String::new();
    let mut expected: Vec<IpAddr> = Vec::new();
    for net in ["198.51.100", "203.0.113"] {
        for i in 1..=250 {
            batch.push_str(&format!("addr add {net}.{i}/32 dev churn0\n"));
            expected.push(format!("{net}.{i}").parse().unwrap());
        }
    }
    batch.push_str("link add late0 type veth peer name late1\nlink set late0 up\nlink del gone0\n");
    let batch_path = std::env::temp_dir().join(format!("arpndp-ovf-{}.batch", std::process::id()));
    std::fs::write(&batch_path, batch).unwrap();

    let name = NS.to_string();
    let batch_file = batch_path.display().to_string();
    let outcome = thread::spawn(move || {
        testkit::netns::enter_thread(&name).expect("setns");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut w = InterfaceWatcher::start_with(WatchOptions {
                receive_buffer: Some(1),
            })
            .await
            .expect("watcher starts");
            let names = |w: &InterfaceWatcher| -> Vec<String> {
                w.table()
                    .descriptions()
                    .into_iter()
                    .map(|d| d.name)
                    .collect()
            };
            assert!(names(&w).contains(&"gone0".to_owned()));
            assert_eq!(w.overflows(), 0);
            // Blocking call on purpose: nothing reads the socket meanwhile.
            ok(&["ip", "-n", NS, "-batch", &batch_file]);
            let converged = |w: &InterfaceWatcher| {
                let d = w.table().descriptions();
                let churn = d.iter().find(|d| d.name == "churn0");
                d.iter().any(|d| d.name == "late0")
                    && !d.iter().any(|d| d.name.starts_with("gone"))
                    && churn.is_some_and(|c| expected.iter().all(|a| c.addresses.contains(a)))
            };
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while !converged(&w) {
                match tokio::time::timeout_at(deadline, w.changed()).await {
                    Ok(r) => r.expect("notification stream"),
                    Err(_) => panic!(
                        "the table never caught up ({} overflows seen): {:?}",
                        w.overflows(),
                        names(&w)
                    ),
                }
            }
            assert!(w.overflows() >= 1, "the overflow was not detected");
            let fresh = InterfaceWatcher::start().await.expect("a fresh dump");
            assert_eq!(w.table(), fresh.table());
            w.overflows()
        })
    })
    .join();
    let _ = std::fs::remove_file(&batch_path);
    let overflows = outcome.unwrap_or_else(|e| std::panic::resume_unwind(e));
    eprintln!("netlink overflows seen: {overflows}");
}

/// Two Services sharing one IP (`allow-shared-ip`): releasing one leaves
/// the IP answered and its group joined; releasing the last ends both.
#[test]
fn shared_ip_answered_until_its_last_owner_releases_it() {
    let t = Topology::new("shared");
    let mac = t.node_mac("eth0");
    let r = Responder::start(&t.node, DriverConfig::default());
    let (v4, v6): (IpAddr, IpAddr) = (
        "192.0.2.10".parse().unwrap(),
        "2001:db8::10".parse().unwrap(),
    );
    let group = "ff0200000000000000000001ff000010";
    let igmp6 = || ok(&["ip", "netns", "exec", &t.node, "cat", "/proc/net/igmp6"]);
    for owner in ["default/a", "default/b"] {
        for ip in [v4, v6] {
            r.handle.claim(owner, ip, AllowedInterfaces::all()).unwrap();
        }
    }
    wait_for(
        || r.handle.owners(&v6) == ["default/a", "default/b"],
        "both claims",
    );
    assert_eq!(
        t.arping("eth0", "192.0.2.1", "192.0.2.10").as_deref(),
        Some(mac.as_str())
    );

    r.handle.release_owner("default/a").unwrap();
    wait_for(|| r.handle.owners(&v4) == ["default/b"], "ns/a released");
    assert_eq!(
        t.arping("eth0", "192.0.2.1", "192.0.2.10").as_deref(),
        Some(mac.as_str()),
        "still answered for default/b"
    );
    assert_eq!(t.ndisc6("2001:db8::10").as_deref(), Some(mac.as_str()));
    assert!(igmp6().contains(group), "group kept: {}", igmp6());

    for ip in [v4, v6] {
        r.handle.release("default/b", ip).unwrap();
    }
    wait_for(
        || r.handle.owners(&v4).is_empty() && r.handle.owners(&v6).is_empty(),
        "the last release",
    );
    assert_eq!(t.arping("eth0", "192.0.2.1", "192.0.2.10"), None);
    assert_eq!(t.ndisc6("2001:db8::10"), None);
    assert!(!igmp6().contains(group), "group left: {}", igmp6());
}

/// One interface's sockets failing (here ENOBUFS, injected, twice) does
/// not stop the driver from starting and answering on the others; the
/// failed interface is listed with its error and retried with backoff
/// until it answers too.
#[test]
fn a_failing_interface_does_not_stop_the_driver_and_is_retried() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    let t = Topology::new("ifacefail");
    t.link("eth1");
    ok(&[
        "ip",
        "-n",
        &t.cli,
        "addr",
        "add",
        "203.0.113.1/24",
        "dev",
        "eth1",
    ]);
    let failures = Arc::new(AtomicU32::new(0));
    let counted = failures.clone();
    let cfg = DriverConfig {
        open_fault: Some(arp_ndp::linux::OpenFault(Arc::new(move |name: &str| {
            (name == "eth1" && counted.fetch_add(1, Ordering::SeqCst) < 2)
                .then(|| std::io::Error::from_raw_os_error(nix::libc::ENOBUFS))
        }))),
        ..DriverConfig::default()
    };
    let started = Instant::now();
    let r = Responder::start(&t.node, cfg);
    let ip: IpAddr = "192.0.2.10".parse().unwrap();
    r.handle.own(ip, AllowedInterfaces::all()).unwrap();
    wait_for(
        || !r.handle.announced_on(&ip).is_empty(),
        "eth0 to announce",
    );
    let failed = r.handle.failed_interfaces();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].name, "eth1");
    assert!(failed[0].error.contains("buffer"), "{failed:?}");
    assert_eq!(
        t.arping("eth0", "192.0.2.1", "192.0.2.10").as_deref(),
        Some(t.node_mac("eth0").as_str())
    );
    // Retried after 1 s, then 2 s: answering on eth1 too.
    wait_for(
        || r.handle.announced_on(&ip).len() == 2,
        "eth1 to be retried and announced on",
    );
    assert!(started.elapsed() >= Duration::from_secs(3));
    assert_eq!(failures.load(Ordering::SeqCst), 3);
    assert!(r.handle.failed_interfaces().is_empty());
    assert_eq!(
        t.arping("eth1", "203.0.113.1", "192.0.2.10").as_deref(),
        Some(t.node_mac("eth1").as_str())
    );
}

fn wait_within(limit: Duration, mut f: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// Issue 13 item 2. The client side is a bridge with multicast snooping
/// (fast leave on the node's port, so an MLD Done removes the entry at
/// once), which learns the node's solicited-node groups from its MLD
/// reports. The node's `net.core.optmem_max` (per network namespace since
/// Linux 6.9) is lowered after the packet sockets are open, so that one
/// membership socket holds one group: joins are refused and
/// moved to further sockets (IPv6 refuses with ENOMEM, not ENOBUFS), and
/// all four groups are joined. Then the
/// limit is cut to 0: a fifth group cannot be joined anywhere, is listed
/// and counted. One joined address is removed: every other group stays in
/// the kernel (`/proc/net/igmp6`) and in the bridge's MDB, and the other
/// addresses are answered. The limit restored, the fifth group is joined
/// by its retry and answered.
#[test]
fn a_failed_group_join_is_retried_and_a_leave_keeps_the_other_groups() {
    let t = Topology::new("groups");
    let cli = |args: &[&str]| {
        let mut v = vec!["ip", "-n", t.cli.as_str()];
        v.extend_from_slice(args);
        ok(&v)
    };
    cli(&["addr", "flush", "dev", "eth0"]);
    cli(&[
        "link",
        "add",
        "br0",
        "type",
        "bridge",
        "mcast_snooping",
        "1",
        "mcast_router",
        "1",
    ]);
    cli(&["link", "set", "eth0", "master", "br0"]);
    cli(&["addr", "add", "2001:db8::1/64", "dev", "br0", "nodad"]);
    cli(&["link", "set", "br0", "up"]);
    wait_for(
        || !cli(&["link", "show", "br0"]).contains("NO-CARRIER"),
        "the bridge's carrier",
    );
    ok(&[
        "bridge",
        "-n",
        &t.cli,
        "link",
        "set",
        "dev",
        "eth0",
        "fastleave",
        "on",
    ]);
    let optmem = |v: &str| {
        ok(&[
            "ip",
            "netns",
            "exec",
            &t.node,
            "sysctl",
            "-qw",
            &format!("net.core.optmem_max={v}"),
        ]);
    };
    let registry = prometheus::Registry::new();
    let metrics = arp_ndp::metrics::Metrics::register(&registry).unwrap();
    let r = Responder::start(
        &t.node,
        DriverConfig {
            metrics: Some(metrics),
            ..DriverConfig::default()
        },
    );
    let mac = t.node_mac("eth0");
    // One membership (56 bytes on x86_64) fits, two do not.
    optmem("100");

    let groups = |ips: &[u16]| -> Vec<(String, String)> {
        ips.iter()
            .map(|i| {
                (
                    format!("ff0200000000000000000001ff0000{i:02x}"),
                    format!("grp ff02::1:ff00:{i:x} "),
                )
            })
            .collect()
    };
    let igmp6 = || ok(&["ip", "netns", "exec", &t.node, "cat", "/proc/net/igmp6"]);
    let mdb = || ok(&["bridge", "-n", &t.cli, "mdb", "show", "dev", "br0"]);
    let ndisc6 = |target: &str| {
        let o = run(&[
            "ip", "netns", "exec", &t.cli, "ndisc6", "-1", "-n", "-r", "3", "-w", "700", target,
            "br0",
        ]);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        out.lines()
            .find(|l| l.contains("Target link-layer address"))
            .and_then(|l| Some(l.split(": ").nth(1)?.trim().to_lowercase()))
    };
    let failures = || {
        registry
            .gather()
            .iter()
            .filter(|f| f.name() == arp_ndp::metrics::GROUP_JOIN_FAILURES)
            .flat_map(|f| f.get_metric().iter().map(|m| m.get_counter().get_value()))
            .sum::<f64>()
    };

    for i in 0x10..=0x13 {
        r.own(&format!("2001:db8::{i:x}"), AllowedInterfaces::all());
    }
    wait_for(|| r.handle.joined_groups().len() == 4, "four groups joined");
    let joined = r.handle.joined_groups();
    let sockets: std::collections::BTreeSet<usize> = joined.iter().map(|(_, s)| *s).collect();
    assert!(sockets.len() > 1, "spread over sockets: {joined:?}");
    assert!(r.handle.failed_groups().is_empty());
    assert!(r.handle.group_join_failures() >= 1);
    assert_eq!(failures(), r.handle.group_join_failures() as f64);
    for (hex, grp) in groups(&[0x10, 0x11, 0x12, 0x13]) {
        assert!(igmp6().contains(&hex), "{hex} joined: {}", igmp6());
        wait_for(|| mdb().contains(&grp), &format!("{grp} in the MDB"));
    }

    for i in 0x10..=0x13 {
        let target = format!("2001:db8::{i:x}");
        assert_eq!(ndisc6(&target).as_deref(), Some(mac.as_str()), "{target}");
    }

    // Nothing can be joined any more.
    optmem("0");
    let before = r.handle.group_join_failures();
    r.own("2001:db8::14", AllowedInterfaces::all());
    wait_for(
        || r.handle.failed_groups().len() == 1,
        "the fifth group to fail",
    );
    let failed = r.handle.failed_groups();
    assert_eq!(
        failed[0].group,
        "ff02::1:ff00:14".parse::<std::net::Ipv6Addr>().unwrap()
    );
    assert!(failed[0].error.contains("optmem_max"), "{failed:?}");
    assert!(r.handle.group_join_failures() > before);
    assert_eq!(failures(), r.handle.group_join_failures() as f64);

    // One joined address goes.
    r.handle.disown("2001:db8::10".parse().unwrap()).unwrap();
    let (gone_hex, gone_grp) = groups(&[0x10]).remove(0);
    wait_for(
        || !igmp6().contains(&gone_hex),
        "the removed address's group left",
    );
    wait_for(
        || !mdb().contains(&gone_grp),
        "the MDB entry removed (fast leave)",
    );
    // Give a wrongly closed socket's MLD Done time to reach the bridge.
    thread::sleep(Duration::from_millis(500));
    for (hex, grp) in groups(&[0x11, 0x12, 0x13]) {
        assert!(igmp6().contains(&hex), "{hex} still joined: {}", igmp6());
        assert!(mdb().contains(&grp), "{grp} still in the MDB: {}", mdb());
    }
    for i in 0x11..=0x13 {
        let target = format!("2001:db8::{i:x}");
        assert_eq!(ndisc6(&target).as_deref(), Some(mac.as_str()), "{target}");
    }
    assert_eq!(ndisc6("2001:db8::10"), None);

    // The limit restored: the retry (at most 1.25 * 2^n s, n the failures
    // so far) joins the fifth group.
    optmem("131072");
    let (hex, grp) = groups(&[0x14]).remove(0);
    wait_within(
        Duration::from_secs(40),
        || r.handle.failed_groups().is_empty() && igmp6().contains(&hex),
        "the fifth group joined by its retry",
    );
    wait_for(|| mdb().contains(&grp), "the fifth group in the MDB");
    assert_eq!(ndisc6("2001:db8::14").as_deref(), Some(mac.as_str()));
}
