//! Lab measurements of the bgp issue for BENCHMARKS.md ("BGP in the lab
//! against FRR and BIRD"): our speaker, BIRD 2 and FRR 8.4 (configured the
//! way MetalLB's FRR mode does, with `frr-reload.py`) announcing to and
//! withdrawing from one FRR receiver, in the same run. Compiled only with
//! the `bench-lab` feature:
//!
//! `cargo test -p bgp --release --features bench-lab --test bench_lab -- --nocapture --test-threads=1`
//!
//! Needs root; fails without it. Every test takes the kit's serial lock and
//! builds its own topology: namespace `spk` (the speaker under test, AS
//! 64513, 192.0.2.21 / 2001:db8:0:1::21) and `rcv` (FRR, AS 64512,
//! 192.0.2.1 / 2001:db8:0:1::1, passive neighbours) on one veth. Prefixes
//! come from the benchmark ranges only: 198.18.0.0/15 and 2001:db8:18::/48.
//!
//! `bench_lab_convergence`, per speaker, per family (one eBGP session over
//! IPv4 for IPv4 /32, one over IPv6 for IPv6 /128), per job (add 1, 1,000,
//! 10,000 from nothing; withdraw 1, 1,000, 10,000 to nothing):
//! - t0: ours, just before [`Session::set_advertisements`]; BIRD, when
//!   `birdc configure` is started (bird.conf already written); FRR, when
//!   MetalLB's reload sequence is started (`frr-reload.py --test`, then
//!   `frr-reload.py --reload --overwrite`, new frr.conf already written);
//! - wire: the pcap timestamp (tcpdump on the speaker's end of the veth) of
//!   the segment carrying the end of the last UPDATE with the job's
//!   prefixes; the TCP stream is reassembled and every UPDATE decoded with
//!   [`bgp::wire::Update::decode`];
//! - RIB: when the receiver's `show bgp <afi> unicast summary json` first
//!   shows the full count (`pfxRcd`), polled back to back with a 5 ms pause
//!   (the poll period is printed);
//! - UPDATE count and fill: each UPDATE's limit is its prefixes plus what
//!   its free bytes (4096 minus its length) would hold (5 bytes per /32, 17
//!   per /128), so each speaker is judged against its own attributes.
//!
//! Knobs for partial runs: `BGP_BENCH_SPEAKERS` (comma-separated, default
//! `ours,ours4096,bird,frr`; `ours4096` is ours without the extended message
//! capability), `BGP_BENCH_FAMILIES` (`v4` or `v6`), `BGP_BENCH_SIZES`
//! (default `1,1000,10000`), `BGP_BENCH_DUMP` (print every UPDATE seen).
//!
//! `bench_lab_rss`: 10 sessions (10 address pairs 192.0.2.20x -> 192.0.2.10x)
//! each announcing the same 10,000 /32: our speaker (a separate process, this
//! binary re-executed in `spk` as `helper_rss_speaker`), BIRD and FRR's bgpd,
//! resident set before and after.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, ensure};
use bgp::fsm::{Config, PeerAs};
use bgp::rib_out::Advertisement;
use bgp::session::{PeerConfig, Session};
use bgp::wire::{Bytes, DecodeContext, PathAttribute, Prefix, Update};
use ipnet::IpNet;
use testkit::{Bird, Frr, FrrConfig, FrrDaemon, FrrNeighbor, NsChild, Topology, TopologySpec};

const SPK_AS: u32 = 64513;
const RCV_AS: u32 = 64512;
const SPK_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 21);
const RCV_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const SPK_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 0x21);
const RCV_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 1);
/// RFC 2544's benchmark range (198.18.0.0/15); prefix i is base + i.
const BENCH_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);
/// A /48 of the documentation range for the IPv6 prefixes.
const BENCH_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x18, 0, 0, 0, 0, 0);
const MAX_MESSAGE: usize = 4096;
const MAX_EXTENDED_MESSAGE: usize = 65535;
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(90);
/// Bound on one job (adds and withdrawals of every size); FRR's reload path
/// may not finish 10,000 withdrawals within it, which is then reported.
const JOB_CAP: Duration = Duration::from_secs(180);
const POLL_PAUSE: Duration = Duration::from_millis(5);
const FRR_RELOAD: &str = "/usr/lib/frr/frr-reload.py";
const RSS_ENV: &str = "BGP_BENCH_RSS_HELPER";
const RSS_SESSIONS: u8 = 10;
const RSS_PREFIXES: usize = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fam {
    V4,
    V6,
}

impl Fam {
    fn idx(self) -> usize {
        match self {
            Fam::V4 => 0,
            Fam::V6 => 1,
        }
    }
    fn afi(self) -> &'static str {
        match self {
            Fam::V4 => "ipv4",
            Fam::V6 => "ipv6",
        }
    }
    fn label(self) -> &'static str {
        match self {
            Fam::V4 => "IPv4 /32",
            Fam::V6 => "IPv6 /128",
        }
    }
    fn spk(self) -> IpAddr {
        match self {
            Fam::V4 => SPK_V4.into(),
            Fam::V6 => SPK_V6.into(),
        }
    }
    fn rcv(self) -> IpAddr {
        match self {
            Fam::V4 => RCV_V4.into(),
            Fam::V6 => RCV_V6.into(),
        }
    }
    /// Bytes one host prefix takes in NLRI / withdrawn routes.
    fn prefix_bytes(self) -> usize {
        match self {
            Fam::V4 => 5,
            Fam::V6 => 17,
        }
    }
    /// Host prefix number `i` (1-based) of the benchmark range.
    fn prefix(self, i: usize) -> IpNet {
        match self {
            Fam::V4 => IpNet::from(IpAddr::from(Ipv4Addr::from(u32::from(BENCH_V4) + i as u32))),
            Fam::V6 => IpNet::from(IpAddr::from(Ipv6Addr::from(
                u128::from(BENCH_V6) + i as u128,
            ))),
        }
    }
    fn prefixes(self, n: usize) -> Vec<IpNet> {
        (1..=n).map(|i| self.prefix(i)).collect()
    }
    fn is_bench(self, p: &Prefix) -> bool {
        let range: IpNet = match self {
            Fam::V4 => "198.18.0.0/15".parse().expect("static"),
            Fam::V6 => "2001:db8:18::/48".parse().expect("static"),
        };
        range.contains(&p.addr())
    }
}

fn wall_secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn vm_rss_kb(pid: u32) -> Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS")
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

// ------------------------------------------------------------ topology

fn topology() -> Result<Topology> {
    TopologySpec::new("bgpbench")
        .namespace("spk")
        .namespace("rcv")
        .link(
            "wire",
            ("spk", &["192.0.2.21/24", "2001:db8:0:1::21/64"]),
            ("rcv", &["192.0.2.1/24", "2001:db8:0:1::1/64"]),
        )
        .create()
}

// ------------------------------------------------------------ speakers

/// Our sessions, run in this process on one thread inside `spk` (a
/// current-thread tokio runtime: every socket is created there).
struct Ours {
    sessions: Vec<Session>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

type Started = Result<(Vec<Session>, tokio::sync::oneshot::Sender<()>)>;

impl Ours {
    fn start(ns: &testkit::Netns, peers: Vec<PeerConfig>) -> Result<Ours> {
        let (tx, rx) = std::sync::mpsc::channel::<Started>();
        let ns = ns.clone();
        let thread = std::thread::spawn(move || {
            let rt = ns.enter_this_thread().and_then(|()| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(anyhow::Error::from)
            });
            let rt = match rt {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            rt.block_on(async move {
                let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
                let sessions: Result<Vec<Session>> = peers
                    .into_iter()
                    .map(|p| Session::spawn(p, None).map_err(anyhow::Error::from))
                    .collect();
                let _ = tx.send(sessions.map(|s| (s, stop_tx)));
                let _ = stop_rx.await;
            });
        });
        let (sessions, stop) = rx.recv().context("our speaker thread ended")??;
        Ok(Ours {
            sessions,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    fn stop(mut self) {
        self.sessions.clear();
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn our_peer(local: IpAddr, peer: IpAddr) -> PeerConfig {
    let mut fsm = Config::new(SPK_AS, PeerAs::Fixed(RCV_AS), "spk");
    fsm.connect_time = Some(2);
    let mut p = PeerConfig::new(fsm, SocketAddr::new(peer, 179));
    p.source = Some(local);
    p
}

fn bird_conf(log: &Path, counts: [usize; 2]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "log \"{}\" all;", log.display());
    let _ = writeln!(s, "router id {SPK_V4};");
    let _ = writeln!(s, "protocol device {{ }}");
    for (fam, name) in [(Fam::V4, "static4"), (Fam::V6, "static6")] {
        let _ = writeln!(s, "protocol static {name} {{\n  {};", fam.afi());
        for p in fam.prefixes(counts[fam.idx()]) {
            let _ = writeln!(s, "  route {p} blackhole;");
        }
        let _ = writeln!(s, "}}");
    }
    for fam in [Fam::V4, Fam::V6] {
        let st = if fam == Fam::V4 { "static4" } else { "static6" };
        let _ = writeln!(
            s,
            "protocol bgp rcv{} {{\n  local {} as {SPK_AS};\n  neighbor {} as {RCV_AS};\n  \
             connect delay time 1;\n  connect retry time 2;\n  {} {{ import none; export where proto = \"{st}\"; }};\n}}",
            fam.idx(),
            fam.spk(),
            fam.rcv(),
            fam.afi()
        );
    }
    s
}

/// BIRD for the RSS measurement: 10 sessions exporting one static table.
fn bird_rss_conf(log: &Path, prefixes: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "log \"{}\" all;", log.display());
    let _ = writeln!(s, "router id {SPK_V4};");
    let _ = writeln!(s, "protocol device {{ }}");
    let _ = writeln!(s, "protocol static static4 {{\n  ipv4;");
    for p in Fam::V4.prefixes(prefixes) {
        let _ = writeln!(s, "  route {p} blackhole;");
    }
    let _ = writeln!(s, "}}");
    for i in 1..=RSS_SESSIONS {
        let _ = writeln!(
            s,
            "protocol bgp rss{i} {{\n  local {} as {SPK_AS};\n  neighbor {} as {RCV_AS};\n  \
             connect delay time 1;\n  connect retry time 2;\n  ipv4 {{ import none; export where proto = \"static4\"; }};\n}}",
            rss_local(i),
            rss_peer(i)
        );
    }
    s
}

/// frr.conf of the FRR speaker, as `show running-config` prints it (so
/// frr-reload.py finds no spurious difference).
fn frr_conf(neighbors: &[(IpAddr, Option<IpAddr>)], counts: [usize; 2]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "frr defaults traditional");
    let _ = writeln!(s, "hostname spk");
    let _ = writeln!(s, "!");
    let _ = writeln!(s, "router bgp {SPK_AS}");
    let _ = writeln!(s, " bgp router-id {SPK_V4}");
    let _ = writeln!(s, " no bgp ebgp-requires-policy");
    let _ = writeln!(s, " no bgp default ipv4-unicast");
    let _ = writeln!(s, " no bgp network import-check");
    for (peer, source) in neighbors {
        let _ = writeln!(s, " neighbor {peer} remote-as {RCV_AS}");
        let _ = writeln!(s, " neighbor {peer} timers connect 2");
        if let Some(src) = source {
            let _ = writeln!(s, " neighbor {peer} update-source {src}");
        }
    }
    for fam in [Fam::V4, Fam::V6] {
        let peers: Vec<&IpAddr> = neighbors
            .iter()
            .map(|(p, _)| p)
            .filter(|p| p.is_ipv4() == (fam == Fam::V4))
            .collect();
        if peers.is_empty() {
            continue;
        }
        let _ = writeln!(s, " !");
        let _ = writeln!(s, " address-family {} unicast", fam.afi());
        for p in fam.prefixes(counts[fam.idx()]) {
            let _ = writeln!(s, "  network {p}");
        }
        for p in peers {
            let _ = writeln!(s, "  neighbor {p} activate");
        }
        let _ = writeln!(s, " exit-address-family");
    }
    let _ = writeln!(s, "exit");
    let _ = writeln!(s, "!");
    s
}

fn frr_speaker_neighbors() -> Vec<(IpAddr, Option<IpAddr>)> {
    vec![(RCV_V4.into(), None), (RCV_V6.into(), None)]
}

enum Speaker {
    /// Our sessions; true: without the extended message capability.
    Ours(Ours, bool),
    Bird(Bird),
    Frr {
        frr: Frr,
        neighbors: Vec<(IpAddr, Option<IpAddr>)>,
        reload: bool,
    },
}

/// What applying a new desired set started.
struct Applied {
    t0: Instant,
    wall0: SystemTime,
    child: Option<Cmd>,
}

/// A command (birdc, the reload script) in its own process group, waited
/// for by a thread so its exit time is exact.
struct Cmd {
    pid: u32,
    what: String,
    log: std::path::PathBuf,
    done: std::sync::mpsc::Receiver<(Instant, std::io::Result<std::process::ExitStatus>)>,
}

impl Cmd {
    fn spawn(mut c: Command, log: &Path) -> Result<Cmd> {
        use std::os::unix::process::CommandExt;
        let what = testkit::cmd::describe(&c);
        let f = std::fs::File::create(log)?;
        c.stdout(f.try_clone()?)
            .stderr(f)
            .stdin(std::process::Stdio::null())
            .process_group(0);
        let mut child = c.spawn().with_context(|| format!("starting {what}"))?;
        let pid = child.id();
        let (tx, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let s = child.wait();
            let _ = tx.send((Instant::now(), s));
        });
        Ok(Cmd {
            pid,
            what,
            log: log.to_path_buf(),
            done,
        })
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill(&self) {
        testkit::process::kill_group(self.pid, testkit::process::Signal::TERM);
        std::thread::sleep(Duration::from_secs(2));
        testkit::process::kill_group(self.pid, testkit::process::Signal::KILL);
    }
}

impl Speaker {
    fn name(&self) -> &'static str {
        match self {
            Speaker::Ours(_, false) => "ours",
            Speaker::Ours(_, true) => "ours, extended messages off",
            Speaker::Bird(_) => "BIRD 2.0.12",
            Speaker::Frr { reload: true, .. } => "FRR 8.4 (frr-reload.py)",
            Speaker::Frr { reload: false, .. } => "FRR 8.4 (vtysh -f)",
        }
    }

    fn start(kind: &str, ns: &testkit::Netns) -> Result<Speaker> {
        Ok(match kind {
            "ours" | "ours4096" => {
                let mut peers = vec![
                    our_peer(SPK_V4.into(), RCV_V4.into()),
                    our_peer(SPK_V6.into(), RCV_V6.into()),
                ];
                let small = kind == "ours4096";
                for p in &mut peers {
                    p.fsm.extended_message = !small;
                }
                Speaker::Ours(Ours::start(ns, peers)?, small)
            }
            "bird" => {
                let log = ns.state_dir().join("bird").join("bird.log");
                Speaker::Bird(Bird::start_raw(ns, &bird_conf(&log, [0, 0]))?)
            }
            _ => {
                let neighbors = frr_speaker_neighbors();
                let frr = Frr::start_raw(
                    ns,
                    &frr_conf(&neighbors, [0, 0]),
                    &[FrrDaemon::Zebra, FrrDaemon::Bgpd],
                )?;
                Speaker::Frr {
                    frr,
                    neighbors,
                    reload: Path::new(FRR_RELOAD).exists(),
                }
            }
        })
    }

    /// Makes the desired set `counts` (prefixes 1..=n of each family);
    /// `changed` is the family whose count changes.
    fn apply(
        &mut self,
        ns: &testkit::Netns,
        changed: Fam,
        from: usize,
        counts: [usize; 2],
    ) -> Result<Applied> {
        match self {
            Speaker::Ours(o, _) => {
                let ads: Vec<Advertisement> = changed
                    .prefixes(counts[changed.idx()])
                    .into_iter()
                    .map(Advertisement::new)
                    .collect();
                let t0 = Instant::now();
                let wall0 = SystemTime::now();
                o.sessions[changed.idx()].set_advertisements(ads)?;
                Ok(Applied {
                    t0,
                    wall0,
                    child: None,
                })
            }
            Speaker::Bird(b) => {
                let log = b.dir().join("bird.log");
                std::fs::write(b.dir().join("bird.conf"), bird_conf(&log, counts))?;
                let mut c = ns.command("birdc");
                c.arg("-s").arg(b.socket()).arg("configure");
                let out = b.dir().join("configure.log");
                let t0 = Instant::now();
                let wall0 = SystemTime::now();
                let child = Cmd::spawn(c, &out)?;
                Ok(Applied {
                    t0,
                    wall0,
                    child: Some(child),
                })
            }
            Speaker::Frr {
                frr,
                neighbors,
                reload,
            } => {
                let dir = frr.dir().to_path_buf();
                let file = dir.join("new.conf");
                std::fs::write(&file, frr_conf(neighbors, counts))?;
                let log = dir.join("reload.log");
                let c = if *reload {
                    reload_command(ns, &dir, &file)
                } else {
                    // frr-reload.py missing: the delta through vtysh -f.
                    let delta = dir.join("delta.conf");
                    std::fs::write(&delta, frr_delta(changed, from, counts[changed.idx()]))?;
                    let mut c = ns.command("vtysh");
                    c.arg("--vty_socket").arg(&dir).arg("-f").arg(&delta);
                    c
                };
                let t0 = Instant::now();
                let wall0 = SystemTime::now();
                let child = Cmd::spawn(c, &log)?;
                Ok(Applied {
                    t0,
                    wall0,
                    child: Some(child),
                })
            }
        }
    }

    /// Forces the state `counts` after a job hit its bound (FRR only: one
    /// `vtysh -f` of the whole delta from `from`).
    fn force(
        &mut self,
        ns: &testkit::Netns,
        changed: Fam,
        from: usize,
        counts: [usize; 2],
    ) -> Result<()> {
        if let Speaker::Frr { frr, .. } = self {
            let delta = frr.dir().join("force.conf");
            std::fs::write(&delta, frr_delta(changed, from, counts[changed.idx()]))?;
            let mut c = ns.command("vtysh");
            c.arg("--vty_socket").arg(frr.dir()).arg("-f").arg(&delta);
            // Lines already applied answer with "% ..."; not an error here.
            let _ = testkit::cmd::output(&mut c)?;
        }
        Ok(())
    }

    fn stop(self) -> Result<()> {
        match self {
            Speaker::Ours(o, _) => o.stop(),
            Speaker::Bird(b) => b.stop()?,
            Speaker::Frr { frr, .. } => frr.stop()?,
        }
        Ok(())
    }
}

/// MetalLB's reload sequence (its frr-reloader.sh): check with `--test`,
/// then apply with `--reload --overwrite`.
fn reload_command(ns: &testkit::Netns, dir: &Path, file: &Path) -> Command {
    let d = dir.display();
    let common = format!(
        "--stdout --bindir /usr/bin --confdir {d} --rundir {d} --vty_socket {d} {}",
        file.display()
    );
    let script = format!(
        "/usr/bin/python3 {FRR_RELOAD} --test {common} > {d}/reload-test.out 2>&1 && \
         /usr/bin/python3 {FRR_RELOAD} --reload --overwrite {common}"
    );
    let mut c = ns.command("sh");
    c.args(["-c", &script]);
    c
}

/// `network` lines for prefixes `from+1..=to` of `fam` when `to > from`,
/// else `no network` lines for `to+1..=from`.
fn frr_delta(fam: Fam, from: usize, to: usize) -> String {
    let mut s = format!(
        "router bgp {SPK_AS}\n address-family {} unicast\n",
        fam.afi()
    );
    let (range, no) = if to > from {
        (from + 1..=to, "")
    } else {
        (to + 1..=from, "no ")
    };
    for i in range {
        let _ = writeln!(s, "  {no}network {}", fam.prefix(i));
    }
    s.push_str(" exit-address-family\nexit\n");
    s
}

// ------------------------------------------------------------ receiver

fn receiver_config(neighbors: &[IpAddr]) -> FrrConfig {
    let mut c = FrrConfig::new("rcv", RCV_AS, RCV_V4);
    for n in neighbors {
        c = c.neighbor(FrrNeighbor::new(*n, SPK_AS).passive());
    }
    c
}

/// `pfxRcd` of `peer` in the receiver's summary of `fam`.
fn pfx_rcd(rcv: &Frr, fam: Fam, peer: IpAddr) -> Result<u64> {
    let v = rcv.show_json(&format!("show bgp {} unicast summary json", fam.afi()))?;
    let peers = if v["peers"].is_object() {
        &v["peers"]
    } else {
        &v[format!("{}Unicast", fam.afi())]["peers"]
    };
    Ok(peers[peer.to_string()]["pfxRcd"].as_u64().unwrap_or(0))
}

/// The largest message the session with `peer` allows, as the receiver
/// reports the extended message capability (RFC 8654).
fn max_message(rcv: &Frr, peer: IpAddr) -> Result<usize> {
    let v = rcv.show_json(&format!("show bgp neighbors {peer} json"))?;
    let caps = &v[peer.to_string()]["neighborCapabilities"];
    Ok(match caps["extendedMessage"].as_str() {
        Some("advertisedAndReceived") => MAX_EXTENDED_MESSAGE,
        _ => MAX_MESSAGE,
    })
}

fn wait_count(rcv: &Frr, fam: Fam, peer: IpAddr, want: u64, timeout: Duration) -> Result<()> {
    testkit::wait_until(timeout, Duration::from_millis(100), || {
        match pfx_rcd(rcv, fam, peer) {
            Ok(n) if n == want => Ok(()),
            Ok(n) => Err(format!("{peer}: {n} prefixes, want {want}")),
            Err(e) => Err(format!("{e:#}")),
        }
    })
    .map_err(anyhow::Error::from)
}

// ------------------------------------------------------------ pcap

struct Segment {
    seq: u32,
    ts: f64,
    payload: Vec<u8>,
}

/// TCP segments with a payload from `src`, per (src port, dst, dst port).
fn tcp_flows(
    records: &[testkit::pcap::Record],
    src: IpAddr,
) -> BTreeMap<(u16, IpAddr, u16), Vec<Segment>> {
    let mut flows: BTreeMap<(u16, IpAddr, u16), Vec<Segment>> = BTreeMap::new();
    for r in records {
        let Some(ip) = testkit::pcap::ip_in_ethernet(&r.data) else {
            continue;
        };
        let tcp = ip.payload;
        if ip.protocol != 6 || ip.src != src || tcp.len() < 20 {
            continue;
        }
        let sport = u16::from_be_bytes([tcp[0], tcp[1]]);
        let dport = u16::from_be_bytes([tcp[2], tcp[3]]);
        let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
        let off = usize::from(tcp[12] >> 4) * 4;
        if tcp.len() <= off {
            continue;
        }
        flows
            .entry((sport, ip.dst, dport))
            .or_default()
            .push(Segment {
                seq,
                ts: r.ts_ns as f64 / 1e9,
                payload: tcp[off..].to_vec(),
            });
    }
    flows
}

/// One BGP message off the wire: the time of the segment carrying its last
/// byte, and the message.
struct WireMessage {
    ts: f64,
    bytes: Vec<u8>,
}

/// Reassembles one direction of a connection (first transmission of each
/// byte wins) and cuts it into BGP messages. A capture gap ends it.
fn bgp_messages(segs: &[Segment]) -> Vec<WireMessage> {
    let Some(first) = segs.first() else {
        return Vec::new();
    };
    let base = first.seq;
    let mut v: Vec<(i64, f64, &[u8])> = segs
        .iter()
        .map(|s| {
            (
                i64::from(s.seq.wrapping_sub(base) as i32),
                s.ts,
                s.payload.as_slice(),
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut stream: Vec<u8> = Vec::new();
    let mut ends: Vec<(usize, f64)> = Vec::new();
    let mut cur = v[0].0;
    for (off, ts, data) in v {
        let end = off + data.len() as i64;
        if end <= cur {
            continue;
        }
        if off > cur {
            break; // gap in the capture
        }
        stream.extend_from_slice(&data[(cur - off) as usize..]);
        cur = end;
        ends.push((stream.len(), ts));
    }
    let marker = [0xffu8; 16];
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + 19 <= stream.len() {
        if stream[pos..pos + 16] != marker {
            match stream[pos + 1..]
                .windows(16)
                .position(|w| w == marker.as_slice())
            {
                Some(p) => {
                    pos += 1 + p;
                    continue;
                }
                None => break,
            }
        }
        let len = usize::from(u16::from_be_bytes([stream[pos + 16], stream[pos + 17]]));
        if len < 19 || pos + len > stream.len() {
            break;
        }
        let end = pos + len;
        let k = ends.partition_point(|(e, _)| *e < end);
        let ts = ends.get(k).map_or(f64::NAN, |(_, t)| *t);
        out.push(WireMessage {
            ts,
            bytes: stream[pos..end].to_vec(),
        });
        pos = end;
    }
    out
}

/// What one UPDATE carried of the benchmark prefixes.
struct UpdateInfo {
    ts: f64,
    len: usize,
    announced: usize,
    withdrawn: usize,
}

fn updates_from(path: &Path, fam: Fam) -> Result<Vec<UpdateInfo>> {
    let frames = testkit::pcap::read(path)?;
    let ctx = DecodeContext {
        four_octet_as: true,
        ..DecodeContext::default()
    };
    let mut r = Vec::new();
    for segs in tcp_flows(&frames, fam.spk()).values() {
        for m in bgp_messages(segs) {
            if m.bytes[18] != 2 {
                continue;
            }
            let u = Update::decode(Bytes::copy_from_slice(&m.bytes[19..]), &ctx)
                .map_err(|n| anyhow::anyhow!("UPDATE on the wire does not decode: {n:?}"))?;
            let mut announced = u.nlri.iter().filter(|p| fam.is_bench(p)).count();
            let mut withdrawn = u.withdrawn.iter().filter(|p| fam.is_bench(p)).count();
            for a in &u.attributes {
                match a {
                    PathAttribute::MpReach(m) => {
                        announced += m.nlri.iter().filter(|p| fam.is_bench(p)).count()
                    }
                    PathAttribute::MpUnreach(m) => {
                        withdrawn += m.withdrawn.iter().filter(|p| fam.is_bench(p)).count()
                    }
                    _ => {}
                }
            }
            r.push(UpdateInfo {
                ts: m.ts,
                len: m.bytes.len(),
                announced,
                withdrawn,
            });
        }
    }
    r.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    Ok(r)
}

/// `tcpdump -w` of BGP on the speaker's end of the veth, with a 64 MiB
/// capture buffer: with the kit's default (2 MiB) a burst of 10,000 IPv6
/// prefixes in 4096-byte segments lost packets ("dropped by kernel").
struct Capture {
    child: NsChild,
    path: std::path::PathBuf,
    log: std::path::PathBuf,
}

impl Capture {
    fn start(ns: &testkit::Netns, iface: &str, path: &Path) -> Result<Capture> {
        let log = path.with_extension("log");
        let mut c = ns.command("tcpdump");
        c.args(["-i", iface, "-w"])
            .arg(path)
            .args(["-U", "-n", "-Z", "root", "--immediate-mode", "-B", "65536"])
            .args(["tcp", "port", "179"]);
        let mut child = NsChild::spawn_logged(c, &log)?;
        testkit::wait_until(Duration::from_secs(20), Duration::from_millis(20), || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("listening on") {
                Ok(())
            } else if !child.is_running() {
                Err(format!("tcpdump exited: {text}"))
            } else {
                Err("not listening yet".to_string())
            }
        })
        .map_err(anyhow::Error::from)?;
        Ok(Capture {
            child,
            path: path.to_path_buf(),
            log,
        })
    }

    /// Stops tcpdump (SIGINT flushes the file) a quarter second after the
    /// last frame of interest; fails when the kernel dropped any packet.
    fn stop(mut self) -> Result<std::path::PathBuf> {
        std::thread::sleep(Duration::from_millis(250));
        self.child
            .stop_with(testkit::process::Signal::INT, Duration::from_secs(10))?;
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let dropped = text
            .lines()
            .find(|l| l.contains("dropped by kernel"))
            .and_then(|l| l.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        ensure!(dropped == 0, "the capture lost packets: {text}");
        Ok(self.path)
    }
}

// ------------------------------------------------------------ jobs

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Add,
    Withdraw,
}

struct JobResult {
    speaker: &'static str,
    fam: Fam,
    kind: Kind,
    n: usize,
    /// The command (birdc / reload) returned, ms after t0.
    cmd_ms: Option<f64>,
    first_wire_ms: Option<f64>,
    wire_ms: Option<f64>,
    /// The receiver showed the full count (upper bound), ms after t0.
    rib_ms: Option<f64>,
    /// From the start of the previous poll (which did not show it) to
    /// `rib_ms`: where in time the receiver got there.
    rib_window_ms: Option<f64>,
    /// Median time between two polls.
    poll_ms: f64,
    /// Where the receiver was when the job hit its bound.
    reached: u64,
    updates: usize,
    on_wire: usize,
    max_per_update: usize,
    /// Fill of every UPDATE but the least-filled one (the remainder), %.
    fill_pct: Option<f64>,
    /// The fewest UPDATEs that could carry the job at the observed limit.
    min_updates: usize,
    limit: usize,
    /// 4096, or 65535 with RFC 8654 extended messages negotiated.
    max_message: usize,
}

impl JobResult {
    fn line(&self) -> String {
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1} ms"));
        let what = match self.kind {
            Kind::Add => "add",
            Kind::Withdraw => "withdraw",
        };
        format!(
            "BENCH {} {what} {} {}: cmd {} wire first {} last {} rib {} (window {}, poll period {:.1} ms{}); \
             {} UPDATEs (min {} at limit {}, max message {}), {} prefixes on the wire, max {} per UPDATE, fill {}",
            self.speaker,
            self.n,
            self.fam.label(),
            ms(self.cmd_ms),
            ms(self.first_wire_ms),
            ms(self.wire_ms),
            ms(self.rib_ms),
            ms(self.rib_window_ms),
            self.poll_ms,
            if self.rib_ms.is_none() {
                format!(", NOT DONE within the bound: receiver at {}", self.reached)
            } else {
                String::new()
            },
            self.updates,
            self.min_updates,
            self.limit,
            self.max_message,
            self.on_wire,
            self.max_per_update,
            self.fill_pct
                .map_or("-".to_string(), |f| format!("{f:.1} %")),
        )
    }
}

#[allow(clippy::too_many_arguments)]
fn run_job(
    speaker: &mut Speaker,
    topo: &Topology,
    rcv: &Frr,
    fam: Fam,
    counts: &mut [usize; 2],
    to: usize,
    seq: usize,
) -> Result<JobResult> {
    let spk = topo.ns("spk");
    let from = counts[fam.idx()];
    let kind = if to > from { Kind::Add } else { Kind::Withdraw };
    let n = from.abs_diff(to);
    let iface = topo.iface("spk", "wire").to_string();
    let pcap = spk.state_dir().join(format!("job-{seq}.pcap"));
    let capture = Capture::start(spk, &iface, &pcap)?;
    std::thread::sleep(Duration::from_millis(200));
    counts[fam.idx()] = to;
    let mut applied = speaker.apply(spk, fam, from, *counts)?;
    let want = to as u64;
    let peer = fam.spk();
    let mut polls: Vec<f64> = Vec::new();
    let mut prev_start = 0.0;
    let mut rib = None;
    let mut cmd_ms = None;
    let mut cmd_status = None;
    let mut reached;
    let mut check_cmd = |applied: &Applied, cmd_ms: &mut Option<f64>| {
        if let Some(c) = &applied.child
            && cmd_ms.is_none()
            && let Ok((t, st)) = c.done.try_recv()
        {
            *cmd_ms = Some((t - applied.t0).as_secs_f64() * 1e3);
            cmd_status = Some(st);
        }
    };
    loop {
        let start = applied.t0.elapsed().as_secs_f64() * 1e3;
        let count = pfx_rcd(rcv, fam, peer)?;
        let done = applied.t0.elapsed().as_secs_f64() * 1e3;
        check_cmd(&applied, &mut cmd_ms);
        polls.push(start);
        reached = count;
        if count == want {
            rib = Some((done, done - prev_start));
            break;
        }
        prev_start = start;
        if applied.t0.elapsed() > JOB_CAP {
            break;
        }
        std::thread::sleep(POLL_PAUSE);
    }
    // The command's own end (bounded by what is left of the cap, at least 30 s).
    if applied.child.is_some() {
        let left = JOB_CAP
            .saturating_sub(applied.t0.elapsed())
            .max(Duration::from_secs(30));
        let deadline = Instant::now() + left;
        while cmd_ms.is_none() && Instant::now() < deadline {
            check_cmd(&applied, &mut cmd_ms);
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    if let Some(c) = applied.child.take() {
        match cmd_status.take() {
            Some(Ok(status)) if status.success() => {}
            Some(other) => {
                eprintln!(
                    "BENCH note: {} ended with {other:?}: {}",
                    c.what,
                    tail(&c.log(), 20)
                );
            }
            None => {
                eprintln!(
                    "BENCH note: {} still running after the bound; stopped",
                    c.what
                );
                c.kill();
            }
        }
    }
    if rib.is_none() {
        speaker.force(spk, fam, from, *counts)?;
        wait_count(rcv, fam, peer, want, Duration::from_secs(120))
            .context("forcing the state after the bound")?;
    }
    let path = capture.stop()?;
    let ups = updates_from(&path, fam)?;
    let max_message = max_message(rcv, peer)?;
    if std::env::var_os("BGP_BENCH_DUMP").is_some() {
        for u in &ups {
            eprintln!(
                "  UPDATE at {:.1} ms: {} bytes, {} announced, {} withdrawn",
                (u.ts - wall_secs(applied.wall0)) * 1e3,
                u.len,
                u.announced,
                u.withdrawn
            );
        }
    }
    let wall0 = wall_secs(applied.wall0);
    // When the bound was hit, what the speaker sent by then (the rest was
    // forced with `vtysh -f`).
    let cutoff = match rib {
        Some(_) => f64::INFINITY,
        None => wall0 + JOB_CAP.as_secs_f64(),
    };
    let carrying: Vec<&UpdateInfo> = ups
        .iter()
        .filter(|u| u.ts <= cutoff)
        .filter(|u| match kind {
            Kind::Add => u.announced > 0,
            Kind::Withdraw => u.withdrawn > 0,
        })
        .collect();
    let count_of = |u: &UpdateInfo| match kind {
        Kind::Add => u.announced,
        Kind::Withdraw => u.withdrawn,
    };
    let on_wire: usize = carrying.iter().map(|u| count_of(u)).sum();
    let limits: Vec<(usize, usize)> = carrying
        .iter()
        .map(|u| {
            let c = count_of(u);
            (
                c,
                c + max_message.saturating_sub(u.len) / fam.prefix_bytes(),
            )
        })
        .collect();
    let limit = limits.iter().map(|l| l.1).max().unwrap_or(0);
    let fill_pct = if limits.len() >= 2 {
        let mut l = limits.clone();
        l.sort_by_key(|(c, _)| *c);
        let (c, lim) = l[1..]
            .iter()
            .fold((0usize, 0usize), |a, b| (a.0 + b.0, a.1 + b.1));
        Some(c as f64 * 100.0 / lim as f64)
    } else {
        None
    };
    let mut p: Vec<f64> = polls.windows(2).map(|w| w[1] - w[0]).collect();
    p.sort_by(f64::total_cmp);
    let poll_ms = p.get(p.len() / 2).copied().unwrap_or(0.0);
    let r = JobResult {
        speaker: speaker.name(),
        fam,
        kind,
        n,
        cmd_ms,
        first_wire_ms: carrying.first().map(|u| (u.ts - wall0) * 1e3),
        wire_ms: carrying.last().map(|u| (u.ts - wall0) * 1e3),
        rib_ms: rib.map(|r| r.0),
        rib_window_ms: rib.map(|r| r.1),
        poll_ms,
        reached,
        updates: carrying.len(),
        on_wire,
        max_per_update: carrying.iter().map(|u| count_of(u)).max().unwrap_or(0),
        fill_pct,
        min_updates: if limit > 0 { n.div_ceil(limit) } else { 0 },
        limit,
        max_message,
    };
    eprintln!("{} [load {}]", r.line(), load_average());
    Ok(r)
}

fn tail(text: &str, lines: usize) -> String {
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

fn wait_speaker_established(rcv: &Frr, peers: &[IpAddr]) -> Result<()> {
    for p in peers {
        rcv.wait_established(*p, ESTABLISH_TIMEOUT)
            .with_context(|| rcv.logs(20))?;
    }
    Ok(())
}

fn wait_speaker_gone(rcv: &Frr, peers: &[IpAddr]) -> Result<()> {
    testkit::wait_until(Duration::from_secs(60), Duration::from_millis(200), || {
        let n = rcv.bgp_neighbors().map_err(|e| format!("{e:#}"))?;
        let up: Vec<String> = n
            .iter()
            .filter(|n| peers.contains(&n.addr) && n.state == "Established")
            .map(|n| n.addr.to_string())
            .collect();
        if up.is_empty() {
            Ok(())
        } else {
            Err(format!("still Established: {up:?}"))
        }
    })
    .map_err(anyhow::Error::from)
}

fn table(results: &[JobResult]) -> String {
    let mut s = String::new();
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    let _ = writeln!(
        s,
        "| job | speaker | command returned (ms) | last UPDATE on the wire (ms) | receiver holds it (ms; window) | UPDATEs (fewest possible) | max prefixes per UPDATE (limit; max message) | fill |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
    for r in results {
        let what = match r.kind {
            Kind::Add => "add",
            Kind::Withdraw => "withdraw",
        };
        let rib = match r.rib_ms {
            Some(v) => format!("{v:.1}; {:.0}", r.rib_window_ms.unwrap_or(0.0)),
            None => format!("not within {} s ({} left)", JOB_CAP.as_secs(), r.reached),
        };
        let _ = writeln!(
            s,
            "| {what} {} {} | {} | {} | {} | {rib} | {} ({}) | {} ({}; {}) | {} |",
            r.n,
            r.fam.label(),
            r.speaker,
            ms(r.cmd_ms),
            ms(r.wire_ms),
            r.updates,
            r.min_updates,
            r.max_per_update,
            r.limit,
            r.max_message,
            r.fill_pct.map_or("-".to_string(), |f| format!("{f:.1} %")),
        );
    }
    s
}

/// Announce and withdraw 1, 1,000 and 10,000 host prefixes of each family
/// with each speaker, one after the other, against the same receiver.
#[test]
fn bench_lab_convergence() -> Result<()> {
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    let kinds: Vec<String> = std::env::var("BGP_BENCH_SPEAKERS")
        .unwrap_or_else(|_| "ours,ours4096,bird,frr".into())
        .split(',')
        .map(str::to_owned)
        .collect();
    let fams: Vec<Fam> = match std::env::var("BGP_BENCH_FAMILIES").as_deref() {
        Ok("v4") => vec![Fam::V4],
        Ok("v6") => vec![Fam::V6],
        _ => vec![Fam::V4, Fam::V6],
    };
    let sizes: Vec<usize> = std::env::var("BGP_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 1_000, 10_000]);
    eprintln!(
        "BENCH start {:?}, load {}, frr-reload.py present: {}",
        SystemTime::now(),
        load_average(),
        Path::new(FRR_RELOAD).exists()
    );
    let topo = topology()?;
    let spk_peers: Vec<IpAddr> = vec![SPK_V4.into(), SPK_V6.into()];
    let rcv = Frr::start(topo.ns("rcv"), &receiver_config(&spk_peers))?;
    let etc_frr = std::fs::metadata("/etc/frr/frr.conf")
        .and_then(|m| m.modified())
        .ok();
    let mut results = Vec::new();
    let mut seq = 0;
    for kind in &kinds {
        let mut speaker = Speaker::start(kind, topo.ns("spk"))?;
        wait_speaker_established(&rcv, &spk_peers)?;
        std::thread::sleep(Duration::from_secs(2));
        let mut counts = [0usize; 2];
        for &fam in &fams {
            for &n in &sizes {
                for to in [n, 0] {
                    seq += 1;
                    let r = run_job(&mut speaker, &topo, &rcv, fam, &mut counts, to, seq)
                        .with_context(|| format!("{} {} -> {to}", speaker.name(), fam.label()))?;
                    results.push(r);
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
        speaker.stop()?;
        wait_speaker_gone(&rcv, &spk_peers)?;
    }
    let after = std::fs::metadata("/etc/frr/frr.conf")
        .and_then(|m| m.modified())
        .ok();
    ensure!(
        etc_frr == after,
        "/etc/frr/frr.conf was touched by the reload path"
    );
    eprintln!(
        "BENCH done {:?}, load {}\n{}",
        SystemTime::now(),
        load_average(),
        table(&results)
    );
    Ok(())
}

// ------------------------------------------------------------ RSS

fn rss_local(i: u8) -> IpAddr {
    IpAddr::from([192, 0, 2, 200 + i])
}

fn rss_peer(i: u8) -> IpAddr {
    IpAddr::from([192, 0, 2, 100 + i])
}

/// Our speaker for the RSS measurement, in its own process in `spk` (see
/// the module documentation). Without the variable it returns at once.
#[test]
fn helper_rss_speaker() {
    let Ok(spec) = std::env::var(RSS_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run_rss_helper(&spec)).unwrap();
}

fn own_rss_kb() -> u64 {
    vm_rss_kb(std::process::id()).unwrap_or(0)
}

async fn run_rss_helper(spec: &str) -> Result<()> {
    use bgp::fsm::FsmState;
    let v: serde_json::Value = serde_json::from_str(spec)?;
    let sessions_n = v["sessions"].as_u64().context("sessions")? as u8;
    let prefixes = v["prefixes"].as_u64().context("prefixes")? as usize;
    println!(
        "{}",
        serde_json::json!({"event": "start", "rss_kb": own_rss_kb()})
    );
    let sessions: Vec<Session> = (1..=sessions_n)
        .map(|i| Session::spawn(our_peer(rss_local(i), rss_peer(i)), None))
        .collect::<Result<_, _>>()?;
    let deadline = Instant::now() + ESTABLISH_TIMEOUT;
    while !sessions
        .iter()
        .all(|s| s.state().borrow().fsm_state == FsmState::Established)
    {
        ensure!(Instant::now() < deadline, "sessions not Established");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    println!(
        "{}",
        serde_json::json!({"event": "baseline", "rss_kb": own_rss_kb()})
    );
    let ads: Vec<Advertisement> = Fam::V4
        .prefixes(prefixes)
        .into_iter()
        .map(Advertisement::new)
        .collect();
    let t0 = Instant::now();
    for s in &sessions {
        s.set_advertisements(ads.clone())?;
    }
    drop(ads);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done = sessions.iter().all(|s| {
            let st = s.state().borrow().clone();
            st.rib_out.pending_prefixes == 0
                && st
                    .rib_out
                    .families
                    .iter()
                    .any(|f| f.prefixes_advertised == prefixes)
        });
        if done {
            break;
        }
        ensure!(Instant::now() < deadline, "not all advertised");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "{}",
        serde_json::json!({"event": "advertised", "ms": t0.elapsed().as_secs_f64() * 1e3,
            "rss_kb": own_rss_kb()})
    );
    // Stays up until the test stops it (SIGTERM).
    tokio::time::sleep(Duration::from_secs(600)).await;
    Ok(())
}

fn helper_event(child: &NsChild, event: &str, timeout: Duration) -> Result<serde_json::Value> {
    testkit::wait_until(timeout, Duration::from_millis(100), || {
        child
            .log()
            .lines()
            // The first line starts with libtest's "test helper_rss_speaker ... ".
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l[l.find('{')?..]).ok())
            .find(|e| e["event"] == event)
            .ok_or_else(|| format!("no {event} yet"))
    })
    .map_err(|e| anyhow::anyhow!("{e}; helper log:\n{}", child.log()))
}

/// 10 sessions x 10,000 IPv4 /32: resident set of ours, BIRD and FRR's bgpd.
#[test]
fn bench_lab_rss() -> Result<()> {
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    eprintln!("BENCH rss start, load {}", load_average());
    let topo = topology()?;
    let spk = topo.ns("spk");
    let rcv_ns = topo.ns("rcv");
    for i in 1..=RSS_SESSIONS {
        spk.add_addr(topo.iface("spk", "wire"), &format!("{}/24", rss_local(i)))?;
        rcv_ns.add_addr(topo.iface("rcv", "wire"), &format!("{}/24", rss_peer(i)))?;
    }
    let locals: Vec<IpAddr> = (1..=RSS_SESSIONS).map(rss_local).collect();
    let rcv = Frr::start(rcv_ns, &receiver_config(&locals))?;
    let want = RSS_PREFIXES as u64;
    let wait_all = |what: &str| -> Result<Duration> {
        let t = Instant::now();
        for l in &locals {
            wait_count(&rcv, Fam::V4, *l, want, Duration::from_secs(180))
                .with_context(|| format!("{what}: receiver counts"))?;
        }
        Ok(t.elapsed())
    };
    let mut lines = Vec::new();

    // Ours: a separate process.
    {
        let exe = std::env::current_exe()?;
        let mut cmd = spk.command(&exe);
        cmd.args([
            "--exact",
            "helper_rss_speaker",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            RSS_ENV,
            serde_json::json!({"sessions": RSS_SESSIONS, "prefixes": RSS_PREFIXES}).to_string(),
        );
        let mut child = NsChild::spawn_logged(cmd, &spk.state_dir().join("rss-helper.log"))?;
        let start = helper_event(&child, "start", Duration::from_secs(30))?;
        let base = helper_event(&child, "baseline", ESTABLISH_TIMEOUT)?;
        let adv = helper_event(&child, "advertised", Duration::from_secs(180))?;
        let rib = wait_all("ours")?;
        std::thread::sleep(Duration::from_secs(2));
        let after = vm_rss_kb(child.pid())?;
        let (s, b) = (
            start["rss_kb"].as_u64().unwrap_or(0),
            base["rss_kb"].as_u64().unwrap_or(0),
        );
        lines.push(format!(
            "| ours (this test binary re-executed, 2 tokio workers) | {s} kB | {b} kB | {after} kB | {} kB | all written {:.0} ms after the calls; receiver done {:.1} s after that |",
            after.saturating_sub(b),
            adv["ms"].as_f64().unwrap_or(0.0),
            rib.as_secs_f64()
        ));
        child.stop_with(testkit::process::Signal::TERM, Duration::from_secs(5))?;
        wait_speaker_gone(&rcv, &locals)?;
    }
    // BIRD: same routes, 10 protocols.
    {
        let log = spk.state_dir().join("bird").join("bird.log");
        let bird = Bird::start_raw(spk, &bird_rss_conf(&log, 0))?;
        let pid = bird.pid().context("no BIRD pid")?;
        let start = vm_rss_kb(pid)?;
        wait_speaker_established(&rcv, &locals)?;
        std::thread::sleep(Duration::from_secs(2));
        let base = vm_rss_kb(pid)?;
        std::fs::write(
            bird.dir().join("bird.conf"),
            bird_rss_conf(&bird.dir().join("bird.log"), RSS_PREFIXES),
        )?;
        let t = Instant::now();
        let out = bird.birdc("configure")?;
        ensure!(out.contains("Reconfigured"), "birdc configure: {out}");
        let call = t.elapsed();
        wait_all("BIRD")?;
        let rib = t.elapsed();
        std::thread::sleep(Duration::from_secs(2));
        let after = vm_rss_kb(pid)?;
        lines.push(format!(
            "| BIRD 2.0.12 (`bird`) | {start} kB | {base} kB | {after} kB | {} kB | `birdc configure` took {:.2} s; receiver done {:.1} s after it was started |",
            after.saturating_sub(base),
            call.as_secs_f64(),
            rib.as_secs_f64()
        ));
        bird.stop()?;
        wait_speaker_gone(&rcv, &locals)?;
    }
    // FRR: 10 neighbours, one update group.
    {
        let neighbors: Vec<(IpAddr, Option<IpAddr>)> = (1..=RSS_SESSIONS)
            .map(|i| (rss_peer(i), Some(rss_local(i))))
            .collect();
        let frr = Frr::start_raw(
            spk,
            &frr_conf(&neighbors, [0, 0]),
            &[FrrDaemon::Zebra, FrrDaemon::Bgpd],
        )?;
        let pid = frr.pid(FrrDaemon::Bgpd).context("no bgpd pid")?;
        let zebra = frr.pid(FrrDaemon::Zebra).context("no zebra pid")?;
        let start = vm_rss_kb(pid)?;
        wait_speaker_established(&rcv, &locals)?;
        std::thread::sleep(Duration::from_secs(2));
        let base = vm_rss_kb(pid)?;
        let file = frr.dir().join("rss.conf");
        std::fs::write(&file, frr_delta(Fam::V4, 0, RSS_PREFIXES))?;
        let t = Instant::now();
        frr.apply_file(&file)?;
        let applied = t.elapsed();
        wait_all("FRR")?;
        let rib = t.elapsed();
        std::thread::sleep(Duration::from_secs(2));
        let after = vm_rss_kb(pid)?;
        lines.push(format!(
            "| FRR 8.4 bgpd (config by `vtysh -f`) | {start} kB | {base} kB | {after} kB | {} kB | `vtysh -f` took {:.1} s; receiver done {:.1} s after it was started; zebra beside it {} kB |",
            after.saturating_sub(base),
            applied.as_secs_f64(),
            rib.as_secs_f64(),
            vm_rss_kb(zebra)?
        ));
        frr.stop()?;
    }
    eprintln!(
        "BENCH rss done, load {}\n| speaker | RSS at start | RSS, 10 sessions up, no prefixes | RSS, 10 x 10,000 advertised | growth | note |\n|---|---|---|---|---|---|\n{}",
        load_average(),
        lines.join("\n")
    );
    Ok(())
}
