//! Shared by the lab tests that own many IPs (`lab_scale.rs`) and the lab
//! benchmarks (`bench_lab.rs`, feature `bench-lab`): the driver on a thread
//! inside a namespace (its thread id kept, for CPU accounting), a raw
//! client on the client namespace's lab interface, address lists and
//! `/proc` readers.
//!
//! The raw client sends requests through this crate's own
//! [`PacketSocket`] (bound to the client's interface; never read, its
//! small receive queue fills with other hosts' requests and then drops) and
//! receives on a second, unbound `AF_PACKET` socket for all protocols with
//! `SO_TIMESTAMPNS`: it sees the client's own outgoing requests (the kernel
//! copies them to `ETH_P_ALL` taps, stamped as they go out of the
//! interface) and the incoming replies, stamped as they come in. A
//! round-trip time is the difference of the two kernel stamps, so the
//! client's own scheduling is not in it. No unsafe code: binding goes
//! through the crate's audited module, the receive side through `nix`.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use std::io::{self, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail, ensure};
use arp_ndp::interfaces::AllowedInterfaces;
use arp_ndp::linux::{DriverConfig, L2Handle, PacketSocket, Protocol};
use arp_ndp::packet::{
    ArpFrame, ArpOp, ETHERTYPE_ARP, ETHERTYPE_IPV6, MacAddr, NeighborAdvertisement,
    NeighborSolicitation, ReceivedNs, solicited_node_multicast,
};
use nix::sys::socket::{ControlMessageOwned, LinkAddr, MsgFlags, recvmsg, setsockopt, sockopt};
use socket2::{Domain, SockFilter, Socket, Type};
use testkit::{Lab, LabOptions, Netns};

/// Owned IPv4 addresses: `198.18.0.1` on, from the benchmark prefix
/// 198.18.0.0/15 (RFC 2544); assigned nowhere.
pub const OWNED_V4_BASE: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);
/// Owned IPv6 addresses: `2001:db8:100::1` on, inside 2001:db8:100::/116.
pub const OWNED_V6_BASE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0);
/// Addresses configured on node-1 for the kernel to answer (the anchor):
/// `198.18.8.1` on and `2001:db8:101::1` on.
pub const KERNEL_V4_BASE: Ipv4Addr = Ipv4Addr::new(198, 18, 8, 0);
pub const KERNEL_V6_BASE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x101, 0, 0, 0, 0, 0);

/// `n` addresses after `base` (`base + 1` to `base + n`), IPv4 then IPv6.
/// Refuses anything outside 198.18.0.0/15 and 2001:db8::/32.
pub fn addresses(v4_base: Ipv4Addr, v6_base: Ipv6Addr, n: u32) -> (Vec<IpAddr>, Vec<IpAddr>) {
    let v4: Vec<IpAddr> = (1..=n)
        .map(|i| IpAddr::V4(Ipv4Addr::from(u32::from(v4_base) + i)))
        .collect();
    let v6: Vec<IpAddr> = (1..=n)
        .map(|i| IpAddr::V6(Ipv6Addr::from(u128::from(v6_base) + u128::from(i))))
        .collect();
    for ip in v4.iter().chain(&v6) {
        assert!(bench_range(*ip), "{ip} is outside the benchmark ranges");
    }
    (v4, v6)
}

/// 198.18.0.0/15 or 2001:db8::/32.
pub fn bench_range(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => u32::from(a) >> 17 == u32::from(Ipv4Addr::new(198, 18, 0, 0)) >> 17,
        IpAddr::V6(a) => a.segments()[..2] == [0x2001, 0xdb8],
    }
}

/// The lab with one node and the client, no `far` namespace.
pub fn lab() -> anyhow::Result<Lab> {
    Lab::up(&LabOptions {
        nodes: 1,
        far: false,
    })
}

/// Runs `f` on a new thread that entered `ns`'s network namespace; sockets
/// it creates belong to that namespace.
pub fn in_netns<T: Send + 'static>(
    ns: &Netns,
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    let path = format!("/run/netns/{}", ns.name());
    let p = path.clone();
    thread::spawn(move || {
        enter(&p)?;
        f()
    })
    .join()
    .map_err(|_| anyhow::anyhow!("thread in {path} panicked"))?
}

/// Enters the namespace `/run/netns/<name>` in this thread.
fn enter(path: &str) -> anyhow::Result<()> {
    let name = path.strip_prefix("/run/netns/").unwrap_or(path);
    testkit::netns::enter_thread(name)
}

/// The driver on its own thread inside a namespace (a current-thread tokio
/// runtime: the socket readers, netlink and the main task all run on this
/// one thread, so its CPU time is the responder's). Stopped on drop.
pub struct Responder {
    pub handle: L2Handle,
    /// Kernel thread id, for `/proc/self/task/<tid>`.
    pub tid: i32,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Responder {
    pub fn start(ns: &Netns) -> anyhow::Result<Responder> {
        let path = format!("/run/netns/{}", ns.name());
        let (tx, rx) = mpsc::channel();
        let thread = thread::spawn(move || {
            if let Err(e) = enter(&path) {
                let _ = tx.send(Err(format!("{e:#}")));
                return;
            }
            let tid = rustix::thread::gettid().as_raw_nonzero().get();
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
                let _ = tx.send(Ok((handle, tid, stop_tx)));
                tokio::select! {
                    _ = stop_rx => {}
                    r = task => panic!("driver ended: {r:?}"),
                }
            });
        });
        let (handle, tid, stop) = rx
            .recv_timeout(Duration::from_secs(10))
            .context("the driver did not start within 10 s")?
            .map_err(anyhow::Error::msg)
            .context("driver start")?;
        Ok(Responder {
            handle,
            tid,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Owns every IP of `ips` on every interface.
    pub fn own_all(&self, ips: &[IpAddr]) -> anyhow::Result<()> {
        for ip in ips {
            self.handle.own(*ip, AllowedInterfaces::all())?;
        }
        Ok(())
    }

    /// Sum of the counters of `ips`: (requests received, responses sent,
    /// gratuitous packets sent).
    pub fn totals(&self, ips: &[IpAddr]) -> (u64, u64, u64) {
        ips.iter().fold((0, 0, 0), |(r, s, g), ip| {
            let c = self.handle.counters(ip);
            (
                r + c.requests_received,
                s + c.responses_sent,
                g + c.gratuitous_sent,
            )
        })
    }

    /// The driver thread's CPU time and context switches so far.
    pub fn cpu(&self) -> anyhow::Result<ThreadCpu> {
        ThreadCpu::read(self.tid)
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

/// A thread's time on CPU (`/proc/self/task/<tid>/schedstat`, in ns) and
/// context switches (`status`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadCpu {
    pub on_cpu_ns: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
}

impl ThreadCpu {
    pub fn read(tid: i32) -> anyhow::Result<ThreadCpu> {
        let dir = format!("/proc/self/task/{tid}");
        let sched = std::fs::read_to_string(format!("{dir}/schedstat"))?;
        let on_cpu_ns = sched
            .split_whitespace()
            .next()
            .context("empty schedstat")?
            .parse()?;
        let status = std::fs::read_to_string(format!("{dir}/status"))?;
        Ok(ThreadCpu {
            on_cpu_ns,
            voluntary_switches: status_field(&status, "voluntary_ctxt_switches")?,
            involuntary_switches: status_field(&status, "nonvoluntary_ctxt_switches")?,
        })
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &ThreadCpu) -> ThreadCpu {
        ThreadCpu {
            on_cpu_ns: self.on_cpu_ns - earlier.on_cpu_ns,
            voluntary_switches: self.voluntary_switches - earlier.voluntary_switches,
            involuntary_switches: self.involuntary_switches - earlier.involuntary_switches,
        }
    }
}

fn status_field(status: &str, name: &str) -> anyhow::Result<u64> {
    let l = status
        .lines()
        .find(|l| l.split(':').next() == Some(name))
        .with_context(|| format!("no {name} in status"))?;
    Ok(l.split_whitespace().nth(1).context("no value")?.parse()?)
}

/// This process's user + system CPU time, all threads (`/proc/self/stat`,
/// in clock ticks of 10 ms).
pub fn process_cpu() -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Fields after the command name (which may contain spaces).
    let rest = &stat[stat.rfind(')').context("bad stat")? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>()? + f[12].parse::<u64>()?;
    Ok(Duration::from_millis(ticks * 10))
}

/// This process's resident set (VmRSS) and its peak (VmHWM), in KiB.
pub fn rss_kib() -> anyhow::Result<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kib = |name: &str| -> anyhow::Result<u64> {
        let l = status
            .lines()
            .find(|l| l.starts_with(name))
            .with_context(|| format!("no {name}"))?;
        Ok(l.split_whitespace().nth(1).context("no value")?.parse()?)
    };
    Ok((kib("VmRSS:")?, kib("VmHWM:")?))
}

/// The solicited-node groups `ns` has joined on `ifname`
/// (`/proc/net/igmp6`).
pub fn joined_groups(ns: &Netns, ifname: &str) -> anyhow::Result<BTreeSet<Ipv6Addr>> {
    let text = ns.run("cat", &["/proc/net/igmp6"])?;
    let mut r = BTreeSet::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 3 || f[1] != ifname || f[2].len() != 32 {
            continue;
        }
        let v = u128::from_str_radix(f[2], 16)?;
        r.insert(Ipv6Addr::from(v));
    }
    Ok(r)
}

/// The solicited-node groups of the IPv6 addresses in `ips`.
pub fn groups_of(ips: &[IpAddr]) -> BTreeSet<Ipv6Addr> {
    ips.iter()
        .filter_map(|ip| match ip {
            IpAddr::V6(a) => Some(solicited_node_multicast(*a)),
            IpAddr::V4(_) => None,
        })
        .collect()
}

/// Waits until the switch's MDB lists every group of `groups` on `ns`'s
/// port (the snooping switch then forwards their solicitations to it).
pub fn wait_snooped(
    lab: &Lab,
    ns: &str,
    groups: &BTreeSet<Ipv6Addr>,
    timeout: Duration,
) -> anyhow::Result<()> {
    let port = lab.topo.port(testkit::lab::L2, ns).to_owned();
    testkit::wait_until(timeout, Duration::from_millis(500), || {
        let mdb = lab.topo.mdb().map_err(|e| format!("{e:#}"))?;
        let have: BTreeSet<Ipv6Addr> = mdb
            .iter()
            .filter(|e| e.port == port)
            .filter_map(|e| match e.group {
                IpAddr::V6(g) => Some(g),
                IpAddr::V4(_) => None,
            })
            .collect();
        let missing = groups.difference(&have).count();
        if missing == 0 {
            Ok(())
        } else {
            Err(format!(
                "{missing} of {} groups not snooped on {port}",
                groups.len()
            ))
        }
    })?;
    Ok(())
}

/// Configures `ips` on `ns`'s interface `ifname` in one `ip -batch` (IPv4
/// /32, IPv6 /128 without DAD), for the kernel to answer. Benchmark
/// ranges only.
pub fn configure_addresses(ns: &Netns, ifname: &str, ips: &[IpAddr]) -> anyhow::Result<()> {
    let mut batch = String::new();
    for ip in ips {
        ensure!(bench_range(*ip), "{ip} is outside the benchmark ranges");
        match ip {
            IpAddr::V4(a) => batch.push_str(&format!("addr add {a}/32 dev {ifname}\n")),
            IpAddr::V6(a) => batch.push_str(&format!("addr add {a}/128 dev {ifname} nodad\n")),
        }
    }
    let path = ns.state_dir().join("bench-addresses.batch");
    std::fs::write(&path, batch)?;
    ns.ip(&["-batch", &path.to_string_lossy()])?;
    Ok(())
}

/// The receive socket's timeout: [`Client::recv`] overshoots its deadline
/// by at most this.
const RX_STEP: Duration = Duration::from_millis(5);

/// What the client's receive socket accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxFilter {
    /// ARP and ICMPv6 Neighbor Solicitations / Advertisements, both ways
    /// (the client's own requests as they leave, for their time stamps).
    RequestsAndReplies,
    /// Only incoming ARP replies and Neighbor Advertisements.
    RepliesOnly,
}

// Classic BPF (linux/filter.h).
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
const ANC_PKTTYPE: u32 = 0xffff_f000 + 4;
const PACKET_OUTGOING: u8 = 4;
const ACCEPT: u32 = 0x0004_0000;

fn filter(f: RxFilter) -> Vec<SockFilter> {
    let arp = u32::from(ETHERTYPE_ARP);
    let ipv6 = u32::from(ETHERTYPE_IPV6);
    match f {
        RxFilter::RequestsAndReplies => vec![
            SockFilter::new(LD_H_ABS, 0, 0, 12),      // 0: ethertype
            SockFilter::new(JEQ_K, 6, 0, arp),        // 1: ARP -> 8
            SockFilter::new(JEQ_K, 0, 6, ipv6),       // 2: else -> 9
            SockFilter::new(LD_B_ABS, 0, 0, 14 + 6),  // 3: next header
            SockFilter::new(JEQ_K, 0, 4, 58),         // 4: not ICMPv6 -> 9
            SockFilter::new(LD_B_ABS, 0, 0, 14 + 40), // 5: ICMPv6 type
            SockFilter::new(JEQ_K, 1, 0, 135),        // 6: NS -> 8
            SockFilter::new(JEQ_K, 0, 1, 136),        // 7: NA -> 8, else 9
            SockFilter::new(RET_K, 0, 0, ACCEPT),     // 8
            SockFilter::new(RET_K, 0, 0, 0),          // 9
        ],
        RxFilter::RepliesOnly => vec![
            SockFilter::new(LD_B_ABS, 0, 0, ANC_PKTTYPE), // 0
            SockFilter::new(JEQ_K, 10, 0, u32::from(PACKET_OUTGOING)), // 1: -> 12
            SockFilter::new(LD_H_ABS, 0, 0, 12),          // 2: ethertype
            SockFilter::new(JEQ_K, 5, 0, arp),            // 3: ARP -> 9
            SockFilter::new(JEQ_K, 0, 7, ipv6),           // 4: else -> 12
            SockFilter::new(LD_B_ABS, 0, 0, 14 + 6),      // 5: next header
            SockFilter::new(JEQ_K, 0, 5, 58),             // 6: -> 12
            SockFilter::new(LD_B_ABS, 0, 0, 14 + 40),     // 7: ICMPv6 type
            SockFilter::new(JEQ_K, 2, 3, 136),            // 8: NA -> 11, else 12
            SockFilter::new(LD_H_ABS, 0, 0, 20),          // 9: ARP operation
            SockFilter::new(JEQ_K, 0, 1, 2),              // 10: reply -> 11, else 12
            SockFilter::new(RET_K, 0, 0, ACCEPT),         // 11
            SockFilter::new(RET_K, 0, 0, 0),              // 12
        ],
    }
}

/// A frame the client saw, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packet {
    ArpRequest {
        target: Ipv4Addr,
    },
    ArpReply {
        ip: Ipv4Addr,
        mac: MacAddr,
        to: Ipv4Addr,
    },
    Solicitation {
        target: Ipv6Addr,
    },
    Advertisement {
        ip: Ipv6Addr,
        mac: Option<MacAddr>,
        solicited: bool,
        override_flag: bool,
    },
    Other,
}

impl Packet {
    pub fn decode(frame: &[u8]) -> Packet {
        if frame.len() < 14 {
            return Packet::Other;
        }
        match u16::from_be_bytes([frame[12], frame[13]]) {
            ETHERTYPE_ARP => match ArpFrame::decode(frame) {
                Ok(f) if f.arp.op == ArpOp::Request => Packet::ArpRequest {
                    target: f.arp.target_ip,
                },
                Ok(f) => Packet::ArpReply {
                    ip: f.arp.sender_ip,
                    mac: f.arp.sender_mac,
                    to: f.arp.target_ip,
                },
                Err(_) => Packet::Other,
            },
            ETHERTYPE_IPV6 => {
                if let Ok((_, _, na)) = NeighborAdvertisement::decode_frame(frame) {
                    Packet::Advertisement {
                        ip: na.target,
                        mac: na.target_lla,
                        solicited: na.solicited,
                        override_flag: na.override_flag,
                    }
                } else if let Ok(ns) = ReceivedNs::decode(frame) {
                    Packet::Solicitation {
                        target: ns.ns.target,
                    }
                } else {
                    Packet::Other
                }
            }
            _ => Packet::Other,
        }
    }

    /// The address a request asks for.
    pub fn request_for(&self) -> Option<IpAddr> {
        match self {
            Packet::ArpRequest { target } => Some(IpAddr::V4(*target)),
            Packet::Solicitation { target } => Some(IpAddr::V6(*target)),
            _ => None,
        }
    }

    /// The address a reply answers for, and the MAC it gives.
    pub fn reply_for(&self) -> Option<(IpAddr, Option<MacAddr>)> {
        match self {
            Packet::ArpReply { ip, mac, .. } => Some((IpAddr::V4(*ip), Some(*mac))),
            Packet::Advertisement { ip, mac, .. } => Some((IpAddr::V6(*ip), *mac)),
            _ => None,
        }
    }
}

/// One frame on the client's lab interface.
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    /// Kernel time stamp (`SO_TIMESTAMPNS`, CLOCK_REALTIME).
    pub at: SystemTime,
    /// The client sent it.
    pub outgoing: bool,
    pub packet: Packet,
}

/// The raw client on the client namespace's lab interface.
pub struct Client {
    arp_tx: PacketSocket,
    ndp_tx: PacketSocket,
    rx: Socket,
    // Dropped after the sockets registered with it.
    _rt: tokio::runtime::Runtime,
    pub ifindex: u32,
    pub mac: MacAddr,
    pub v4: Ipv4Addr,
    pub v6: Ipv6Addr,
    /// Frames the receive socket dropped (`SO_RXQ_OVFL`), as last seen.
    pub rx_dropped: std::sync::atomic::AtomicU32,
}

impl Client {
    pub fn open(lab: &Lab) -> anyhow::Result<Client> {
        let ifname = lab.l2_iface("client").to_owned();
        let link = lab.client().ip_json(&["link", "show", "dev", &ifname])?;
        let ifindex = u32::try_from(link[0]["ifindex"].as_u64().context("ifindex")?)?;
        let mac: MacAddr = lab.client().mac(&ifname)?.parse()?;
        let (arp_tx, ndp_tx, rx, rt) = in_netns(lab.client(), move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()?;
            let (arp_tx, ndp_tx) = {
                let _g = rt.enter();
                (
                    PacketSocket::open(ifindex, Protocol::Arp)?,
                    PacketSocket::open(ifindex, Protocol::Ndp)?,
                )
            };
            let eth_p_all = i32::from(u16::try_from(libc::ETH_P_ALL)?.to_be());
            let rx = Socket::new(
                Domain::PACKET,
                Type::RAW.cloexec(),
                Some(socket2::Protocol::from(eth_p_all)),
            )?;
            Ok((arp_tx, ndp_tx, rx, rt))
        })?;
        rx.attach_filter(&filter(RxFilter::RequestsAndReplies))?;
        setsockopt(&rx, sockopt::RcvBufForce, &(16 << 20))?;
        setsockopt(&rx, sockopt::ReceiveTimestampns, &true)?;
        setsockopt(&rx, sockopt::RxqOvfl, &1)?;
        // `recv` waits in steps of this, up to its own deadline.
        rx.set_read_timeout(Some(RX_STEP))?;
        let c = Client {
            arp_tx,
            ndp_tx,
            rx,
            _rt: rt,
            ifindex,
            mac,
            v4: testkit::plan::CLIENT_V4,
            v6: testkit::plan::CLIENT_V6,
            rx_dropped: Default::default(),
        };
        c.drain()?;
        Ok(c)
    }

    pub fn set_filter(&self, f: RxFilter) -> anyhow::Result<()> {
        self.rx.attach_filter(&filter(f))?;
        self.drain()
    }

    /// The request for `ip`: a broadcast who-has from the client's address,
    /// or a solicitation to the solicited-node group with the source
    /// link-layer option, as the kernel sends them.
    pub fn request(&self, ip: IpAddr) -> Vec<u8> {
        match ip {
            IpAddr::V4(a) => ArpFrame::request(self.mac, self.v4, a).encode(),
            IpAddr::V6(a) => NeighborSolicitation::resolve_frame(self.mac, self.v6, a),
        }
    }

    /// Sends a frame made by [`request`](Self::request).
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
        if ethertype == ETHERTYPE_ARP {
            self.arp_tx.send(frame)
        } else {
            self.ndp_tx.send(frame)
        }
    }

    /// Discards what is queued.
    pub fn drain(&self) -> anyhow::Result<()> {
        let mut buf = [0u8; 2048];
        while self.recv_flags(&mut buf, MsgFlags::MSG_DONTWAIT)?.is_some() {}
        Ok(())
    }

    /// The next frame on the lab interface, or `None` after `timeout`.
    pub fn recv(&self, timeout: Duration) -> anyhow::Result<Option<Seen>> {
        let deadline = Instant::now() + timeout;
        let mut buf = [0u8; 2048];
        loop {
            if Instant::now() >= deadline {
                return Ok(None);
            }
            if let Some(Some(s)) = self.recv_flags(&mut buf, MsgFlags::empty())? {
                return Ok(Some(s));
            }
        }
    }

    /// One `recvmsg`: `None` when nothing came (timeout or would block),
    /// `Some(None)` for a frame of another interface.
    fn recv_flags(&self, buf: &mut [u8], flags: MsgFlags) -> anyhow::Result<Option<Option<Seen>>> {
        let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec, u32);
        let mut iov = [IoSliceMut::new(buf)];
        let msg = match recvmsg::<LinkAddr>(self.rx.as_raw_fd(), &mut iov, Some(&mut cmsg), flags) {
            Ok(m) => m,
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => return Ok(None),
            Err(e) => bail!("recvmsg: {e}"),
        };
        let n = msg.bytes;
        let addr = msg.address;
        let mut at = None;
        for c in msg.cmsgs()? {
            match c {
                ControlMessageOwned::ScmTimestampns(ts) => {
                    at = Some(
                        SystemTime::UNIX_EPOCH
                            + Duration::new(
                                u64::try_from(ts.tv_sec())?,
                                u32::try_from(ts.tv_nsec())?,
                            ),
                    );
                }
                ControlMessageOwned::RxqOvfl(d) => {
                    self.rx_dropped
                        .store(d, std::sync::atomic::Ordering::Relaxed);
                }
                _ => {}
            }
        }
        let Some(addr) = addr else {
            return Ok(Some(None));
        };
        if addr.ifindex() != self.ifindex as usize {
            return Ok(Some(None));
        }
        let at = at.context("no SO_TIMESTAMPNS control message")?;
        let packet = Packet::decode(&iov[0][..n]);
        Ok(Some(Some(Seen {
            at,
            outgoing: addr.pkttype() == PACKET_OUTGOING,
            packet,
        })))
    }
}

/// The value at quantile `q` (0..=1) of sorted `v` (nearest rank, rounding
/// up).
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).ceil() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Microseconds with one decimal, for the output.
pub fn us(d: Duration) -> String {
    format!("{:.1} us", d.as_secs_f64() * 1e6)
}

/// Per IP, the answers seen: the MAC given, and whether the answer was
/// addressed as it should be (an ARP reply to the client's address; an NA
/// with Solicited and Override set).
pub type Answers = BTreeMap<IpAddr, Vec<(Option<MacAddr>, bool)>>;

/// Sends one request for each of `ips`, `pace` apart, and collects the
/// replies until `grace` after the last one.
pub fn ask_each(
    client: &Client,
    ips: &[IpAddr],
    pace: Duration,
    grace: Duration,
) -> anyhow::Result<Answers> {
    client.set_filter(RxFilter::RepliesOnly)?;
    let mut answers = Answers::new();
    let mut record = |s: Seen| {
        let flags_ok = match s.packet {
            Packet::Advertisement {
                solicited,
                override_flag,
                ..
            } => solicited && override_flag,
            Packet::ArpReply { to, .. } => to == client.v4,
            _ => false,
        };
        if let Some((ip, mac)) = s.packet.reply_for() {
            answers.entry(ip).or_default().push((mac, flags_ok));
        }
    };
    for ip in ips {
        client.send(&client.request(*ip))?;
        let until = Instant::now() + pace;
        while let Some(s) = client.recv(until.saturating_duration_since(Instant::now()))? {
            record(s);
        }
    }
    let until = Instant::now() + grace;
    while let Some(s) = client.recv(until.saturating_duration_since(Instant::now()))? {
        record(s);
    }
    Ok(answers)
}
