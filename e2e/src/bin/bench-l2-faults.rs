//! bench-l2-faults: the layer-2 fault suite of issue 24 (BENCHMARKS.md, "Speaker:
//! layer-2 faults"), with MetalLB's own speaker (v0.15.2, memberlist on) as the anchor
//! on the same lab, nodes, Services and faults.
//!
//! For each implementation (ours without and, with `--fence`, with `--ml-self-fence`;
//! MetalLB) it brings up N speakers with membership as deployed and L2 Services, IPv4
//! and IPv6 ones (single-stack each, one address each: [`e2e::l2bench::L2Lab`]), then
//! runs a prober in the client namespace for the whole run: a thread in that namespace
//! with two `AF_PACKET` sockets that every 20 ms sends one ARP request per IPv4 address
//! and one Neighbor Solicitation (to the solicited-node group, as a resolving host
//! does) per IPv6 address, and records, per address and 20 ms slot, EVERY node MAC
//! that answered or claimed the address in that slot (ARP replies and gratuitous ARP;
//! Neighbor Advertisements, solicited or not). A slot with no MAC is dark; one with two
//! or more distinct MACs is double. Of the double slots, those with two answers at
//! once are overlap ([`Overlap`]: two nodes answered the slot's request, one answered
//! after another's frame, or one claimed again after another's); a move inside a slot
//! (the old node answered the slot's request, then the new one claimed) is double, not
//! overlap. A slot whose requests did not go out (the prober was late) is unprobed and
//! counted in none. Figures are per family.
//!
//! Faults (the owner is the node answering 198.51.100.90, the successor the next node
//! in the election's order for it), each `--rounds` times, with the speakers settled
//! (every address answered by one node for 3 s) before each round:
//! - `quiet`: nothing for 10 s (the prober's noise floor);
//! - `kill`: the owner's speaker SIGKILLed and started again at once, the API server up;
//! - `term`: the owner's speaker SIGTERMed and started again once it has exited (at
//!   most [`TERM_GRACE`], then SIGKILL; the time it took is `term_exit_ms`);
//! - `cut`: the owner's cable cut silently for 5 s, then restored;
//! - `nonowner-cut`: the cable of a node that is neither the owner nor the successor
//!   (the third in the election's order for 198.51.100.90) cut for 5 s: its own
//!   addresses are an owner cut, the others must not move (`split`: figures for the
//!   cut node's own addresses and for the others, per family);
//! - `flap`: the owner's cable cut for 1 s and restored for 1 s, 10 times;
//! - `sabotage` (not in the default list: the prober's own check): for 5 s a node other
//!   than its owner holds 198.51.100.90, and one other than its owner the first IPv6
//!   address, on its interface (its kernel answers ARP / NS for it): both must count
//!   about 5 s double, else the prober cannot see two answers;
//! - `restart-api-away`: the API server SIGSTOPped, the owner's speaker SIGKILLed and
//!   started again at once, the API server continued 15 s later (issue 24 item 1);
//! - `restart-api-killed`: the same with the API server SIGKILLed (connection refused)
//!   and started again 15 s later with its own command line (`e2e::apiserver`);
//! - `partition`: the owner's UDP port 7946 dropped (in and out) for 15 s, its clients
//!   still reach it (item 2);
//! - `stall`: the owner's speaker SIGSTOPped for 0.6 s, 5 times 5 s apart (item 4);
//! - `watcher-flap`: the successor's cable cut for 2 s (item 3: nothing should move;
//!   `split` as for `nonowner-cut`);
//! - `long-cut`: the owner's cable cut for 20 s, then restored (item 5: the rejoin);
//! - `flood`: 10 s of UDP datagrams (64 bytes of garbage) to the owner's port 7946 from
//!   the client namespace at `--flood-rate` per second (item 6);
//! - `two-speakers-loss`: in a lab of its own with only two speakers, 5 % of the UDP
//!   datagrams to port 7946 dropped at random for 60 s as they leave each node
//!   (nftables in the node namespaces: each direction loses 5 %); nothing should move.
//! - `soak` (not in the default list: `--soak SECS`, 600 by default): the speakers
//!   CPU-starved and 1 % of the datagrams to port 7946 lost at every node for SECS:
//!   the speakers in a cgroup (v1 `cpu`) of their own with `cpu.shares` `--soak-shares`
//!   (102 by default: what the kubelet gives a container requesting the chart's 100m),
//!   beside two busy loops per core in another with 1024 (issue 24 item 9: not in the
//!   same cgroup); nothing should move. The speakers' CPU time is reported.
//!
//! A speaker that exits during an API server fault is started again at once (the
//! kubelet's part, without its back-off), counted in `speaker_restarts`.
//!
//! `--gap` idles before each round: our membership damps an owner that came back
//! after a takeover for 60 s (more confirmation rounds), so cut rounds closer than
//! that measure a flapping owner, not a first cut.
//!
//! Each round is measured from the fault to `--post` seconds after it is undone: per
//! address ms dark, ms double, owner changes (a change of the one answering node), the
//! time from the fault to the final owner (the start of the last run of slots answered
//! by it alone). Over the rounds of a fault, per family: p50, p99 (nearest rank) and
//! max of the worst address's dark and double ms (`dark_worst_ms`, `double_worst_ms`;
//! for a `split`, also of the cut node's own addresses and of the others). Network: only the lab's addresses (`testkit::plan`), counts and times
//! bounded.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use arp_ndp::packet::{
    ArpFrame, ArpOp, ETHERTYPE_ARP, ETHERTYPE_IPV6, ICMPV6_NEIGHBOR_ADVERTISEMENT, IPPROTO_ICMPV6,
    MacAddr, NeighborAdvertisement, NeighborSolicitation,
};
use e2e::Lab;
use e2e::apiserver::{ApiServer, wait_api};
use e2e::bench::Impl as Kind;
use e2e::l2bench::{L2Lab, hash_order, with_service_cidr};
use netsys::packet::{PacketSocket, SockFilter};
use serde_json::{Value, json};
use testkit::plan;
use testkit::process::{Signal, kill_pid};

const USAGE: &str = "\
usage: bench-l2-faults [--impl ours|metallb|both] [--fence | --ml-self-fence]
                       [--speakers N] [--services N] [--services6 N] [--rounds R]
                       [--faults LIST]
                       [--post SECS] [--gap SECS] [--flood-rate N] [--soak SECS] [--soak-shares N]
                       [--ours-bin DIR]
                       [--metallb-bin DIR] [--out FILE]

The layer-2 fault suite against the lab (lab/cluster up, root, the test kit's tools),
MetalLB's speaker with memberlist as the anchor in the same run:
  --impl           which to run (default both: ours, then MetalLB)
  --fence          ours twice: without, then with --ml-self-fence
  --ml-self-fence  ours with --ml-self-fence only
  --speakers N     speakers (default 3, 2 to 8)
  --services N     IPv4 L2 Services, one address each (default 12, 2 to 50)
  --services6 N    IPv6 L2 Services, one address each (default 12, 0 to 50)
  --rounds R       rounds of each fault (default 3)
  --faults LIST    default quiet,kill,term,cut,nonowner-cut,flap,restart-api-away,
                   restart-api-killed,partition,stall,watcher-flap,long-cut,flood,
                   two-speakers-loss (also: sabotage, the prober's check; soak);
                   two-speakers-loss runs in a 2-speaker lab of its own; nonowner-cut
                   needs 3 speakers or more
  --post SECS      measured after each fault is undone (default 20)
  --gap SECS       idle before each round (default 0; 61 lets the membership forget a
                   cut owner's earlier flaps: its damping memory is 60 s)
  --flood-rate N   datagrams per second of the flood (default 20000, at most 50000)
  --soak SECS      length of the soak fault (default 600, at most 3600)
  --soak-shares N  cpu.shares of the speakers' cgroup in the soak (default 102, 2 to 1024)
  --ours-bin       directory of our speaker (default $CARGO_TARGET_DIR/release, else
                   <repo>/target/release)
  --metallb-bin    directory of MetalLB's (default: lab/build-metallb bindir)
  --out FILE       also write the figures as JSON";

/// An extra ServiceCIDR for the run's Services.
const SERVICE_CIDR: &str = "bench-l2-faults";
const SERVICE_CIDR_RANGE: &str = "198.18.176.0/20";
/// The address whose owner is faulted.
const PROBE: &str = "198.51.100.90";
/// The first IPv6 address (the pool is `plan::POOL_V6`, 2001:db8:100::/120).
const PROBE6: &str = "2001:db8:100::90";
/// `term`: how long the owner's speaker may take to exit before it is SIGKILLed.
const TERM_GRACE: Duration = Duration::from_secs(10);
/// `cut` and `nonowner-cut`: how long the cable stays cut.
const CUT_FOR: Duration = Duration::from_secs(5);
/// `flap`: cut for the first, restored for the second, [`FLAPS`] times.
const FLAP_CUT: Duration = Duration::from_secs(1);
const FLAP_UP: Duration = Duration::from_secs(1);
const FLAPS: usize = 10;
/// How long the API server stays away (`restart-api-*`).
const API_AWAY: Duration = Duration::from_secs(15);
/// `two-speakers-loss`: the loss and how long it lasts.
const LOSS_PERCENT: u8 = 5;
const LOSS_FOR: Duration = Duration::from_secs(60);
/// `soak`: the loss at every node.
const SOAK_LOSS_PERCENT: u8 = 1;
/// `sabotage`: how long a second node holds the addresses.
const SABOTAGE_FOR: Duration = Duration::from_secs(5);
/// The prober's period: one request per address per slot.
const SLOT: Duration = Duration::from_millis(20);
const SLOT_MS: u64 = 20;
/// The membership port of both implementations.
const MEMBERLIST_PORT: u16 = 7946;
/// How long every address must be answered by one node before a round.
const SETTLED: Duration = Duration::from_secs(3);
/// Longest wait for that.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(120);
/// The flood's length and payload.
const FLOOD_FOR: Duration = Duration::from_secs(10);
const FLOOD_PAYLOAD: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Quiet,
    Sabotage,
    Kill,
    Term,
    Cut,
    NonownerCut,
    Flap,
    RestartApiAway,
    RestartApiKilled,
    Partition,
    Stall,
    WatcherFlap,
    LongCut,
    Flood,
    TwoSpeakersLoss,
    Soak,
}

const ALL_FAULTS: [Fault; 16] = [
    Fault::Quiet,
    Fault::Sabotage,
    Fault::Kill,
    Fault::Term,
    Fault::Cut,
    Fault::NonownerCut,
    Fault::Flap,
    Fault::RestartApiAway,
    Fault::RestartApiKilled,
    Fault::Partition,
    Fault::Stall,
    Fault::WatcherFlap,
    Fault::LongCut,
    Fault::Flood,
    Fault::TwoSpeakersLoss,
    Fault::Soak,
];

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Quiet => "quiet",
            Fault::Sabotage => "sabotage",
            Fault::Kill => "kill",
            Fault::Term => "term",
            Fault::Cut => "cut",
            Fault::NonownerCut => "nonowner-cut",
            Fault::Flap => "flap",
            Fault::RestartApiAway => "restart-api-away",
            Fault::RestartApiKilled => "restart-api-killed",
            Fault::Partition => "partition",
            Fault::Stall => "stall",
            Fault::WatcherFlap => "watcher-flap",
            Fault::LongCut => "long-cut",
            Fault::Flood => "flood",
            Fault::TwoSpeakersLoss => "two-speakers-loss",
            Fault::Soak => "soak",
        }
    }

    /// The speakers its lab has: `two-speakers-loss` 2, the others `--speakers`.
    fn speakers(self, default: usize) -> usize {
        match self {
            Fault::TwoSpeakersLoss => 2,
            _ => default,
        }
    }

    fn parse(s: &str) -> Result<Fault> {
        ALL_FAULTS
            .into_iter()
            .find(|f| f.name() == s)
            .with_context(|| format!("--faults {s}: one of {:?}", ALL_FAULTS.map(Fault::name)))
    }
}

/// One implementation as run: ours with or without the self-fence, or MetalLB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Variant {
    kind: Kind,
    fence: bool,
}

impl Variant {
    fn name(self) -> &'static str {
        match (self.kind, self.fence) {
            (Kind::Ours, false) => "ours",
            (Kind::Ours, true) => "ours-fence",
            (Kind::Metallb, _) => "metallb",
        }
    }
}

struct Opts {
    variants: Vec<Variant>,
    speakers: usize,
    services: usize,
    services6: usize,
    rounds: usize,
    faults: Vec<Fault>,
    post: Duration,
    gap: Duration,
    flood_rate: u32,
    soak: Duration,
    soak_shares: u64,
    ours_bin: PathBuf,
    metallb_bin: PathBuf,
    out: Option<PathBuf>,
}

fn parse_opts(repo: &Path) -> Result<Opts> {
    let mut args = std::env::args().skip(1);
    let mut kinds = vec![Kind::Ours, Kind::Metallb];
    let mut fence = (true, false); // (without, with)
    let mut o = Opts {
        variants: Vec::new(),
        speakers: 3,
        services: 12,
        services6: 12,
        rounds: 3,
        faults: ALL_FAULTS
            .into_iter()
            .filter(|f| *f != Fault::Sabotage && *f != Fault::Soak)
            .collect(),
        post: Duration::from_secs(20),
        gap: Duration::ZERO,
        flood_rate: 20_000,
        soak: Duration::from_secs(600),
        soak_shares: 102,
        ours_bin: PathBuf::new(),
        metallb_bin: PathBuf::new(),
        out: None,
    };
    let mut ours_bin = None;
    let mut metallb_bin = None;
    while let Some(a) = args.next() {
        let mut val = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--impl" => kinds = Kind::parse_list(&val()?, false)?,
            "--fence" => fence = (true, true),
            "--ml-self-fence" => fence = (false, true),
            "--speakers" => o.speakers = val()?.parse().context("--speakers")?,
            "--services" => o.services = val()?.parse().context("--services")?,
            "--services6" => o.services6 = val()?.parse().context("--services6")?,
            "--rounds" => o.rounds = val()?.parse().context("--rounds")?,
            "--faults" => o.faults = val()?.split(',').map(Fault::parse).collect::<Result<_>>()?,
            "--post" => o.post = Duration::from_secs(val()?.parse().context("--post")?),
            "--gap" => o.gap = Duration::from_secs(val()?.parse().context("--gap")?),
            "--flood-rate" => o.flood_rate = val()?.parse().context("--flood-rate")?,
            "--soak" => o.soak = Duration::from_secs(val()?.parse().context("--soak")?),
            "--soak-shares" => o.soak_shares = val()?.parse().context("--soak-shares")?,
            "--ours-bin" => ours_bin = Some(PathBuf::from(val()?)),
            "--metallb-bin" => metallb_bin = Some(PathBuf::from(val()?)),
            "--out" => o.out = Some(PathBuf::from(val()?)),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => bail!("unknown argument {a}\n{USAGE}"),
        }
    }
    ensure!((2..=8).contains(&o.speakers), "--speakers: 2 to 8");
    ensure!((2..=50).contains(&o.services), "--services: 2 to 50");
    ensure!(o.services6 <= 50, "--services6: 0 to 50");
    ensure!((1..=50).contains(&o.rounds), "--rounds: 1 to 50");
    ensure!(o.post <= Duration::from_secs(120), "--post: at most 120 s");
    ensure!(o.gap <= Duration::from_secs(600), "--gap: at most 600 s");
    ensure!(
        (1..=50_000).contains(&o.flood_rate),
        "--flood-rate: 1 to 50000 per second"
    );
    ensure!(
        (Duration::from_secs(10)..=Duration::from_secs(3600)).contains(&o.soak),
        "--soak: 10 to 3600 s"
    );
    ensure!(
        (2..=1024).contains(&o.soak_shares),
        "--soak-shares: 2 to 1024"
    );
    for kind in kinds {
        match kind {
            Kind::Ours => {
                if fence.0 {
                    o.variants.push(Variant { kind, fence: false });
                }
                if fence.1 {
                    o.variants.push(Variant { kind, fence: true });
                }
            }
            Kind::Metallb => o.variants.push(Variant { kind, fence: false }),
        }
    }
    o.ours_bin = e2e::bench::ours_bin_dir(repo, ours_bin);
    if o.variants.iter().any(|v| v.kind == Kind::Metallb) {
        o.metallb_bin = e2e::bench::metallb_bin_dir(repo, metallb_bin)?;
    }
    Ok(o)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = rt.block_on(run()) {
        eprintln!("bench-l2-faults: {e:#}");
        std::process::exit(1);
    }
}

async fn run() -> Result<()> {
    let lab = Lab::connect().await?;
    let opts = parse_opts(lab.repo())?;
    with_service_cidr(&lab, SERVICE_CIDR, SERVICE_CIDR_RANGE, async || {
        run_all(&lab, &opts).await
    })
    .await
}

async fn run_all(lab: &Lab, opts: &Opts) -> Result<()> {
    let mut all = serde_json::Map::new();
    let mut rows = Vec::new();
    // One lab per number of speakers the faults need (`two-speakers-loss`: 2).
    let mut groups: Vec<(usize, Vec<Fault>)> = Vec::new();
    for &f in &opts.faults {
        let n = f.speakers(opts.speakers);
        match groups.iter_mut().find(|(k, _)| *k == n) {
            Some((_, v)) => v.push(f),
            None => groups.push((n, vec![f])),
        }
    }
    for &variant in &opts.variants {
        let bin = match variant.kind {
            Kind::Ours => opts.ours_bin.join("speaker"),
            Kind::Metallb => opts.metallb_bin.join("speaker"),
        };
        ensure!(bin.is_file(), "{} is missing", bin.display());
        let mut of_variant = serde_json::Map::new();
        for (speakers, faults) in &groups {
            eprintln!(
                "bench-l2-faults: === {} with {speakers} speakers: {:?} ===",
                variant.name(),
                faults.iter().map(|f| f.name()).collect::<Vec<_>>()
            );
            let mut l = L2Lab::up(lab, "bench-l2-faults", variant.kind, *speakers, &bin).await?;
            if variant.fence {
                l.speaker_args.push("--ml-self-fence".into());
            }
            let mut b = Bench {
                l,
                prober: None,
                flood_rate: opts.flood_rate,
                soak: opts.soak,
                soak_shares: opts.soak_shares,
            };
            let result = b.run(opts, faults).await;
            if let Some(p) = b.prober.take() {
                let _ = tokio::task::block_in_place(|| p.stop());
            }
            let dir = b.l.dir.clone();
            b.l.down().await;
            let figures = result?;
            eprintln!(
                "bench-l2-faults: speaker logs of {} in {}",
                variant.name(),
                dir.display()
            );
            for f in faults {
                let Some(v) = figures["faults"].get(f.name()) else {
                    continue;
                };
                for fam in FAMILIES {
                    if let Some(sv) = v["summary"].get(fam) {
                        rows.push((variant.name(), f.name(), fam, sv.clone()));
                    }
                }
            }
            println!("{}", table(&rows));
            println!("{}", percentile_table(&rows));
            of_variant.insert(format!("{speakers}-speakers"), figures);
            all.insert(variant.name().into(), Value::Object(of_variant.clone()));
            if let Some(out) = &opts.out {
                std::fs::write(out, serde_json::to_vec_pretty(&Value::Object(all.clone()))?)?;
            }
        }
    }
    Ok(())
}

/// The address families figures are given for, as the JSON names them.
const FAMILIES: [&str; 2] = ["IPv4", "IPv6"];

fn family(a: IpAddr) -> &'static str {
    if a.is_ipv4() {
        FAMILIES[0]
    } else {
        FAMILIES[1]
    }
}

/// What the prober recorded since it started.
struct ProbeLog {
    start: Instant,
    /// Per slot: whether its requests went out.
    sent: Vec<bool>,
    /// Per address, per slot: the nodes that answered or claimed it (bit n-1 for node
    /// n; bit 7 for a MAC that is no node's).
    seen: Vec<Vec<u8>>,
    /// Per address, per slot: two answers at once ([`Overlap`]).
    overlap: Vec<Vec<bool>>,
    send_errors: u64,
}

/// The prober: a thread in the client namespace (see the module).
struct Prober {
    log: Arc<Mutex<ProbeLog>>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<()>>,
}

const OTHER_MAC: u8 = 0x80;

/// Classic BPF: accept (the whole frame) an untagged IPv6 frame whose fixed header's
/// next header is ICMPv6 and whose ICMPv6 type is a Neighbor Advertisement, drop the
/// rest. (An NA behind extension headers is dropped: no responder sends one.)
fn na_filter() -> [SockFilter; 8] {
    const LD_H_ABS: u16 = 0x28;
    const LD_B_ABS: u16 = 0x30;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    [
        SockFilter::stmt(LD_H_ABS, 12),
        SockFilter::jump(JEQ_K, u32::from(ETHERTYPE_IPV6), 0, 5),
        SockFilter::stmt(LD_B_ABS, 14 + 6),
        SockFilter::jump(JEQ_K, u32::from(IPPROTO_ICMPV6), 0, 3),
        SockFilter::stmt(LD_B_ABS, 14 + 40),
        SockFilter::jump(JEQ_K, u32::from(ICMPV6_NEIGHBOR_ADVERTISEMENT), 0, 1),
        SockFilter::stmt(RET_K, 0xffff),
        SockFilter::stmt(RET_K, 0),
    ]
}

/// The prober's two sockets in the client namespace.
struct Sockets {
    arp: PacketSocket,
    ndp: PacketSocket,
}

impl Prober {
    fn start(
        netns: &str,
        ifindex: u32,
        mac: MacAddr,
        addrs: Vec<IpAddr>,
        macs: BTreeMap<[u8; 6], usize>,
    ) -> Result<Prober> {
        for a in &addrs {
            ensure!(
                plan::is_allowed_addr(*a),
                "probe address {a} is outside the lab's ranges"
            );
        }
        ensure!(
            macs.values().all(|n| (1..=7).contains(n)),
            "at most 7 nodes"
        );
        let log = Arc::new(Mutex::new(ProbeLog {
            start: Instant::now(),
            sent: Vec::new(),
            seen: vec![Vec::new(); addrs.len()],
            overlap: vec![Vec::new(); addrs.len()],
            send_errors: 0,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        let netns = netns.to_owned();
        let thread = std::thread::spawn({
            let (log, stop) = (log.clone(), stop.clone());
            move || -> Result<()> {
                let open = || -> Result<Sockets> {
                    testkit::netns::enter_thread(&netns)?;
                    // Every frame of the bound ethertype (ARP).
                    let accept_all = [SockFilter::stmt(0x06, 0xffff)];
                    let arp = PacketSocket::open(ifindex, ETHERTYPE_ARP, &accept_all)
                        .context("AF_PACKET socket (ARP) in the client namespace")?;
                    let ndp = PacketSocket::open(ifindex, ETHERTYPE_IPV6, &na_filter())
                        .context("AF_PACKET socket (IPv6 NA) in the client namespace")?;
                    Ok(Sockets { arp, ndp })
                };
                let socks = match open() {
                    Ok(s) => {
                        let _ = ready_tx.send(Ok(()));
                        s
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(anyhow::anyhow!("{e:#}")));
                        return Err(e);
                    }
                };
                probe_loop(&socks, mac, &addrs, &macs, &log, &stop);
                Ok(())
            }
        });
        ready_rx
            .recv_timeout(Duration::from_secs(10))
            .context("the prober did not start")??;
        // Its clock: from the first slot on.
        Ok(Prober { log, stop, thread })
    }

    fn stop(self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the prober panicked"))?
    }

    /// Copies of `sent` and each address's slots from `from` to `to` (who answered or
    /// claimed, and whether that was an [`Overlap`]).
    fn window(&self, from: Instant, to: Instant) -> (Vec<bool>, Vec<Vec<u8>>, Vec<Vec<bool>>) {
        let log = self.log.lock().expect("probe log");
        let slot = |t: Instant| {
            (t.saturating_duration_since(log.start).as_nanos() / SLOT.as_nanos()) as usize
        };
        let (a, b) = (slot(from), slot(to).min(log.sent.len()));
        let a = a.min(b);
        (
            log.sent[a..b].to_vec(),
            log.seen.iter().map(|s| s[a..b].to_vec()).collect(),
            log.overlap.iter().map(|s| s[a..b].to_vec()).collect(),
        )
    }

    fn send_errors(&self) -> u64 {
        self.log.lock().expect("probe log").send_errors
    }
}

/// The claim a frame makes, if any: (the address, the MAC claiming it, whether it
/// answers a request). ARP: a reply or a gratuitous request (sender = target), an
/// answer when a reply whose target is not the address itself (not gratuitous); IPv6:
/// a Neighbor Advertisement, solicited or not, its target link-layer address (else the
/// frame's source), an answer when solicited. Not our own frames.
fn claim_of(frame: &[u8], ours: MacAddr) -> Option<(IpAddr, MacAddr, bool)> {
    if let Ok(f) = ArpFrame::decode(frame) {
        let a = f.arp;
        let gratuitous = a.sender_ip == a.target_ip;
        let claim = a.op == ArpOp::Reply || (a.op == ArpOp::Request && gratuitous);
        let answer = a.op == ArpOp::Reply && !gratuitous;
        return (claim && a.sender_mac != ours).then_some((
            a.sender_ip.into(),
            a.sender_mac,
            answer,
        ));
    }
    let (eth, _, na) = NeighborAdvertisement::decode_frame(frame).ok()?;
    let mac = na.target_lla.unwrap_or(eth.src);
    (eth.src != ours && mac != ours).then_some((na.target.into(), mac, na.solicited))
}

/// Two answers at once within one slot, as opposed to a move inside it (which
/// `double` also counts: the old node answered the slot's request, then the new one
/// claimed; the request goes out at the slot's start): two nodes answered the
/// request, a node answered after another's frame in the slot, or a node claimed
/// again after another's (A, B, A).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Overlap {
    slot: usize,
    /// The nodes that answered a request in the slot.
    answered: u8,
    /// The last to answer or claim.
    last: u8,
}

impl Overlap {
    /// Records a claim by `bit` (`answer`: to a request) in `slot`, `seen` the slot's
    /// claimers before it; whether the slot is now an overlap.
    fn claim(&mut self, slot: usize, seen: u8, bit: u8, answer: bool) -> bool {
        if self.slot != slot {
            *self = Overlap {
                slot,
                ..Overlap::default()
            };
        }
        let after_other = self.last != 0 && self.last != bit;
        let overlap = after_other && (answer || seen & bit != 0);
        if answer {
            self.answered |= bit;
        }
        self.last = bit;
        overlap || self.answered.count_ones() >= 2
    }
}

fn probe_loop(
    socks: &Sockets,
    mac: MacAddr,
    addrs: &[IpAddr],
    macs: &BTreeMap<[u8; 6], usize>,
    log: &Mutex<ProbeLog>,
    stop: &AtomicBool,
) {
    let requests: Vec<(&PacketSocket, Vec<u8>)> = addrs
        .iter()
        .map(|a| match a {
            IpAddr::V4(a) => (
                &socks.arp,
                ArpFrame::request(mac, plan::CLIENT_V4, *a).encode(),
            ),
            IpAddr::V6(a) => (
                &socks.ndp,
                NeighborSolicitation::resolve_frame(mac, plan::CLIENT_V6, *a),
            ),
        })
        .collect();
    let start = log.lock().expect("probe log").start;
    let mut buf = [0u8; 512];
    let mut overlaps = vec![Overlap::default(); addrs.len()];
    while !stop.load(Ordering::Relaxed) {
        let now = (start.elapsed().as_nanos() / SLOT.as_nanos()) as usize;
        let due = {
            let mut l = log.lock().expect("probe log");
            if now >= l.sent.len() {
                // Slots missed while late stay unprobed.
                while l.sent.len() < now {
                    l.sent.push(false);
                    for s in l.seen.iter_mut() {
                        s.push(0);
                    }
                    for s in l.overlap.iter_mut() {
                        s.push(false);
                    }
                }
                l.sent.push(true);
                for s in l.seen.iter_mut() {
                    s.push(0);
                }
                for s in l.overlap.iter_mut() {
                    s.push(false);
                }
                true
            } else {
                false
            }
        };
        if due {
            let mut errors = 0;
            for (sock, r) in &requests {
                if sock.send(r).is_err() {
                    errors += 1;
                }
            }
            if errors > 0 {
                log.lock().expect("probe log").send_errors += errors;
            }
        }
        for sock in [&socks.arp, &socks.ndp] {
            while let Ok(n) = sock.recv(&mut buf) {
                let Some((ip, claimer, answer)) = claim_of(&buf[..n], mac) else {
                    continue;
                };
                let Some(i) = addrs.iter().position(|x| *x == ip) else {
                    continue;
                };
                let bit = macs.get(&claimer.0).map_or(OTHER_MAC, |n| 1u8 << (n - 1));
                let mut l = log.lock().expect("probe log");
                let k = ((start.elapsed().as_nanos() / SLOT.as_nanos()) as usize)
                    .min(l.sent.len().saturating_sub(1));
                let Some(&before) = l.seen[i].get(k) else {
                    continue;
                };
                if overlaps[i].claim(k, before, bit, answer) {
                    l.overlap[i][k] = true;
                }
                l.seen[i][k] = before | bit;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One address over one round.
#[derive(Debug, Default, PartialEq)]
struct AddrFigures {
    dark_ms: u64,
    double_ms: u64,
    /// Of `double_ms`, slots of two answers at once ([`Overlap`]).
    overlap_ms: u64,
    unprobed_ms: u64,
    changes: u32,
    /// The node answering alone at the end (None: dark, double or another MAC).
    final_owner: Option<usize>,
    /// From the fault to the start of the last run of slots answered by the final
    /// owner alone (the whole window when none).
    to_final_ms: u64,
}

fn node_of(bits: u8) -> Option<usize> {
    (bits.count_ones() == 1 && bits != OTHER_MAC).then(|| bits.trailing_zeros() as usize + 1)
}

fn analyse(sent: &[bool], seen: &[u8], overlap: &[bool]) -> AddrFigures {
    let mut f = AddrFigures::default();
    let mut last: Option<u8> = None;
    for (i, (s, &bits)) in sent.iter().zip(seen).enumerate() {
        if !s {
            f.unprobed_ms += SLOT_MS;
            continue;
        }
        if overlap.get(i).copied().unwrap_or(false) {
            f.overlap_ms += SLOT_MS;
        }
        match bits.count_ones() {
            0 => f.dark_ms += SLOT_MS,
            1 => {
                if last.is_some_and(|l| l != bits) {
                    f.changes += 1;
                }
                last = Some(bits);
            }
            _ => f.double_ms += SLOT_MS,
        }
    }
    let end = sent
        .iter()
        .zip(seen)
        .rev()
        .find(|(s, _)| **s)
        .map(|(_, b)| *b);
    f.final_owner = end.and_then(node_of);
    f.to_final_ms = match end.filter(|b| node_of(*b).is_some()) {
        Some(fin) => {
            let last_other = sent
                .iter()
                .zip(seen)
                .rposition(|(s, b)| *s && *b != fin)
                .map_or(0, |i| i + 1);
            last_other as u64 * SLOT_MS
        }
        None => sent.len() as u64 * SLOT_MS,
    };
    f
}

/// Continues a stopped process when dropped (also when a round fails mid-stop).
struct Stopped(u32);

impl Stopped {
    fn stop(pid: u32) -> Stopped {
        kill_pid(pid, Signal::STOP);
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        kill_pid(self.0, Signal::CONT);
    }
}

struct Bench<'a> {
    l: L2Lab<'a>,
    prober: Option<Prober>,
    flood_rate: u32,
    soak: Duration,
    soak_shares: u64,
}

/// What a round starts from.
struct Before {
    owners: Vec<Option<usize>>,
    owner: usize,
    successor: usize,
}

impl Bench<'_> {
    fn prober(&self) -> &Prober {
        self.prober.as_ref().expect("the prober runs")
    }

    async fn run(&mut self, opts: &Opts, fault_list: &[Fault]) -> Result<Value> {
        let ips = addresses(opts.services, opts.services6);
        self.l.deploy(&ips).await?;
        let started = Instant::now();
        let first = self.l.owner(PROBE, Duration::from_secs(120)).await?;
        eprintln!(
            "bench-l2-faults: {PROBE} answered by node-{first} {:.1} s after the speakers started",
            started.elapsed().as_secs_f64()
        );
        // Let the membership settle (MetalLB's memberlist joins in its own time).
        tokio::time::sleep(Duration::from_secs(10)).await;
        let client = self.l.net.net.client();
        let link = client.ip_json(&["link", "show", "dev", &self.l.client_if])?;
        let ifindex = link[0]["ifindex"]
            .as_u64()
            .context("the client's ifindex")? as u32;
        let mac = parse_mac(&client.mac(&self.l.client_if)?)?;
        let macs = self
            .l
            .macs
            .iter()
            .map(|(m, n)| Ok((parse_mac(m)?.0, *n)))
            .collect::<Result<_>>()?;
        let addrs = ips
            .iter()
            .map(|a| a.parse::<IpAddr>().map_err(Into::into))
            .collect::<Result<Vec<_>>>()?;
        self.prober = Some(Prober::start(client.name(), ifindex, mac, addrs, macs)?);

        let mut faults = serde_json::Map::new();
        for &fault in fault_list {
            let mut rounds = Vec::new();
            let mut failures = Vec::new();
            for round in 0..opts.rounds {
                tokio::time::sleep(opts.gap).await;
                match self.round(fault, &ips, opts.post).await {
                    Ok(r) => {
                        eprintln!(
                            "bench-l2-faults: {} {} #{round}: {}",
                            self.l.kind.name(),
                            fault.name(),
                            r["summary"]
                        );
                        rounds.push(r);
                    }
                    Err(e) => {
                        eprintln!("bench-l2-faults: {} #{round} failed: {e:#}", fault.name());
                        failures.push(format!("{e:#}"));
                    }
                }
            }
            let mut summary = serde_json::Map::new();
            for fam in FAMILIES {
                if ips.iter().any(|ip| is_family(ip, fam)) {
                    summary.insert(fam.into(), summarise(&rounds, fam));
                }
            }
            let mut v = json!({"summary": summary, "rounds": rounds});
            v["failed"] = json!(failures.len());
            v["failures"] = json!(failures);
            faults.insert(fault.name().into(), v);
        }
        Ok(json!({
            "speakers": self.l.nodes,
            "addresses": ips,
            "probe": PROBE,
            "probe6": PROBE6,
            "prober_send_errors": self.prober().send_errors(),
            "logs": self.l.dir,
            "faults": faults,
        }))
    }

    /// Waits until every address is answered by one node (the same one) in every
    /// probed slot for [`SETTLED`]; restarts a speaker that exited, first.
    async fn settle(&mut self, ips: &[String]) -> Result<Before> {
        for n in 1..=self.l.nodes {
            let exited = self.l.speakers[n - 1]
                .as_mut()
                .is_none_or(|c| !c.is_running());
            if exited {
                eprintln!(
                    "bench-l2-faults: node-{n}'s speaker is not running; its log:\n{}",
                    self.l.speaker_log(n)
                );
                self.l.start_speaker(n)?;
            }
        }
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = Instant::now();
            let (sent, seen, _) = self.prober().window(now - SETTLED, now);
            let probed = sent.iter().filter(|s| **s).count();
            let owners: Vec<Option<usize>> = seen
                .iter()
                .map(|slots| {
                    let mut it = sent.iter().zip(slots).filter(|(s, _)| **s).map(|(_, b)| *b);
                    let first = it.next()?;
                    (it.all(|b| b == first)).then_some(first).and_then(node_of)
                })
                .collect();
            let enough = probed as u128 * SLOT.as_millis() >= SETTLED.as_millis() * 8 / 10;
            if enough && owners.iter().all(Option::is_some) {
                let owner = owners[0].context("probe owner")?;
                let successor = hash_order(self.l.nodes, PROBE)
                    .into_iter()
                    .find(|n| *n != owner)
                    .context("successor")?;
                return Ok(Before {
                    owners,
                    owner,
                    successor,
                });
            }
            if Instant::now() > deadline {
                let unsettled: Vec<&String> = ips
                    .iter()
                    .zip(&owners)
                    .filter(|(_, o)| o.is_none())
                    .map(|(ip, _)| ip)
                    .collect();
                bail!(
                    "not settled after {SETTLE_TIMEOUT:?}: {unsettled:?} not answered by one node"
                );
            }
        }
    }

    /// `percent` % of the datagrams to the membership port dropped as they leave
    /// every node (nftables in the node namespaces).
    fn lose_membership(&self, percent: u8) -> Result<Vec<testkit::cut::Cut>> {
        (1..=self.l.nodes)
            .map(|n| {
                let node = plan::node_name(n);
                testkit::cut::lose_udp(
                    self.l.net.net.node(n),
                    self.l.net.net.l2_iface(&node),
                    MEMBERLIST_PORT,
                    percent,
                )
            })
            .collect()
    }

    async fn round(&mut self, fault: Fault, ips: &[String], post: Duration) -> Result<Value> {
        let before = self.settle(ips).await?;
        let expected = hash_order(self.l.nodes, PROBE)[0];
        let (owner, successor) = (before.owner, before.successor);
        // The node whose cable a `split` fault cuts: its own addresses are reported
        // apart from the others'.
        let cut_node = match fault {
            Fault::WatcherFlap => Some(successor),
            Fault::NonownerCut => Some(
                hash_order(self.l.nodes, PROBE)
                    .into_iter()
                    .find(|n| *n != owner && *n != successor)
                    .context("nonowner-cut needs 3 speakers or more")?,
            ),
            _ => None,
        };
        let t0 = Instant::now();
        // The wall clock of the fault, to find it in the speakers' logs.
        let t0_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let mut extra = json!({});
        match fault {
            Fault::Quiet => tokio::time::sleep(Duration::from_secs(10)).await,
            Fault::Sabotage => {
                // The IPv4 probe and the first IPv6 address, each on a node that does
                // not answer it: its kernel answers too.
                let mut held = Vec::new();
                for i in [Some(0), ips.iter().position(|ip| is_family(ip, "IPv6"))]
                    .into_iter()
                    .flatten()
                {
                    let other = (1..=self.l.nodes)
                        .find(|n| Some(*n) != before.owners[i])
                        .context("a second node")?;
                    let ip: IpAddr = ips[i].parse()?;
                    let len = if ip.is_ipv4() { 32 } else { 128 };
                    let node = plan::node_name(other);
                    held.push(HeldAddr::add(
                        self.l.net.net.node(other),
                        self.l.net.net.l2_iface(&node),
                        &format!("{ip}/{len}"),
                    )?);
                    extra["sabotage"][&ips[i]] = json!(other);
                }
                tokio::time::sleep(SABOTAGE_FOR).await;
                for h in held {
                    h.remove()?;
                }
            }
            Fault::Kill => {
                self.kill_speaker(owner)?;
                self.l.start_speaker(owner)?;
            }
            Fault::Term => {
                let mut c = self.l.speakers[owner - 1]
                    .take()
                    .context("the owner's speaker")?;
                let status = tokio::task::block_in_place(|| c.stop_with(Signal::TERM, TERM_GRACE))?;
                extra["term_exit_ms"] = json!(t0.elapsed().as_millis() as u64);
                extra["term_status"] = json!(status.to_string());
                self.l.start_speaker(owner)?;
            }
            Fault::Cut | Fault::NonownerCut => {
                let node = if fault == Fault::Cut {
                    owner
                } else {
                    cut_node.context("the node to cut")?
                };
                let cut = self.l.net.net.cut_cable(&plan::node_name(node))?;
                tokio::time::sleep(CUT_FOR).await;
                cut.restore()?;
            }
            Fault::Flap => {
                for _ in 0..FLAPS {
                    let cut = self.l.net.net.cut_cable(&plan::node_name(owner))?;
                    tokio::time::sleep(FLAP_CUT).await;
                    cut.restore()?;
                    tokio::time::sleep(FLAP_UP).await;
                }
            }
            Fault::RestartApiAway => {
                let pid_file = self.l.lab.env.state_dir.join("run/kube-apiserver.pid");
                let pid: u32 = std::fs::read_to_string(&pid_file)
                    .with_context(|| format!("reading {}", pid_file.display()))?
                    .trim()
                    .parse()?;
                let frozen = Stopped::stop(pid);
                self.kill_speaker(owner)?;
                self.l.start_speaker(owner)?;
                let restarts = self.sleep_supervised(API_AWAY).await?;
                drop(frozen);
                extra["speaker_restarts"] = json!(restarts);
            }
            Fault::RestartApiKilled => {
                let api = ApiServer::new(self.l.lab)?;
                tokio::task::block_in_place(|| api.kill())?;
                let down = ApiDown {
                    api: &api,
                    down: true,
                };
                self.kill_speaker(owner)?;
                self.l.start_speaker(owner)?;
                let restarts = self
                    .sleep_supervised(API_AWAY.saturating_sub(t0.elapsed()))
                    .await?;
                let restart = Instant::now();
                down.start()?;
                let up = wait_api(self.l.lab).await?;
                extra["speaker_restarts"] = json!(restarts);
                extra["api_killed_ms"] = json!(restart.duration_since(t0).as_millis() as u64);
                extra["api_start_ms"] = json!(up.duration_since(restart).as_millis() as u64);
            }
            Fault::Partition => {
                let cut =
                    testkit::cut::drop_local_udp(self.l.net.net.node(owner), MEMBERLIST_PORT)?;
                tokio::time::sleep(Duration::from_secs(15)).await;
                cut.restore()?;
            }
            Fault::Stall => {
                let pid = self.l.speakers[owner - 1]
                    .as_ref()
                    .context("the owner's speaker")?
                    .pid();
                for i in 0..5 {
                    let stopped = Stopped::stop(pid);
                    tokio::time::sleep(Duration::from_millis(600)).await;
                    drop(stopped);
                    if i < 4 {
                        tokio::time::sleep(Duration::from_millis(4400)).await;
                    }
                }
            }
            Fault::WatcherFlap => {
                let cut = self.l.net.net.cut_cable(&plan::node_name(successor))?;
                tokio::time::sleep(Duration::from_secs(2)).await;
                cut.restore()?;
            }
            Fault::LongCut => {
                let cut = self.l.net.net.cut_cable(&plan::node_name(owner))?;
                tokio::time::sleep(Duration::from_secs(20)).await;
                cut.restore()?;
            }
            Fault::Flood => {
                let target = SocketAddr::new(plan::node_v4(owner).into(), MEMBERLIST_PORT);
                let netns = self.l.net.net.client().name().to_owned();
                let rate = self.flood_rate;
                // A thread of its own: it enters the client namespace for good.
                let t = std::thread::spawn(move || flood(&netns, target, rate));
                let sent = tokio::task::block_in_place(|| t.join())
                    .map_err(|_| anyhow::anyhow!("the flood panicked"))??;
                extra["flood_datagrams"] = json!(sent);
            }
            Fault::TwoSpeakersLoss => {
                ensure!(
                    self.l.nodes == 2,
                    "two-speakers-loss needs a lab of 2 speakers, not {}",
                    self.l.nodes
                );
                let lossy = self.lose_membership(LOSS_PERCENT)?;
                let before_out: Vec<u64> = (1..=self.l.nodes)
                    .map(|n| self.l.udp_out(n))
                    .collect::<Result<_>>()?;
                tokio::time::sleep(LOSS_FOR).await;
                let after_out: Vec<u64> = (1..=self.l.nodes)
                    .map(|n| self.l.udp_out(n))
                    .collect::<Result<_>>()?;
                extra["loss_per_node"] = restore_losses(lossy)?;
                extra["udp_out_during_loss"] = json!(
                    after_out
                        .iter()
                        .zip(&before_out)
                        .map(|(a, b)| a - b)
                        .collect::<Vec<_>>()
                );
            }
            Fault::Soak => {
                let pids: Vec<u32> = self
                    .l
                    .speakers
                    .iter()
                    .map(|c| c.as_ref().map(|c| c.pid()).context("a speaker"))
                    .collect::<Result<_>>()?;
                let cpu_before: Vec<f64> = pids
                    .iter()
                    .map(|p| cpu_seconds(*p))
                    .collect::<Result<_>>()?;
                let starved = CpuStarved::start(&pids, self.soak_shares)?;
                let lossy = self.lose_membership(SOAK_LOSS_PERCENT)?;
                tokio::time::sleep(self.soak).await;
                let cpu_after: Vec<f64> = pids
                    .iter()
                    .map(|p| cpu_seconds(*p))
                    .collect::<Result<_>>()?;
                extra["loss_per_node"] = restore_losses(lossy)?;
                let busy_cpu = starved.stop()?;
                extra["soak_s"] = json!(self.soak.as_secs());
                extra["speaker_cpu_shares"] = json!(self.soak_shares);
                extra["speaker_cpu_s"] = json!(
                    cpu_after
                        .iter()
                        .zip(&cpu_before)
                        .map(|(a, b)| ((a - b) * 100.0).round() / 100.0)
                        .collect::<Vec<_>>()
                );
                extra["busy_loops_cpu_s"] = json!((busy_cpu * 100.0).round() / 100.0);
            }
        }
        let undone = t0.elapsed();
        tokio::time::sleep(post).await;
        let (sent, seen, overlap) = self.prober().window(t0, Instant::now());
        let mut per_addr = Vec::new();
        let mut figures = Vec::new();
        for (i, ip) in ips.iter().enumerate() {
            let f = analyse(&sent, &seen[i], &overlap[i]);
            per_addr.push(json!({
                "ip": ip,
                "before": before.owners[i],
                "final": f.final_owner,
                "dark_ms": f.dark_ms,
                "double_ms": f.double_ms,
                "overlap_ms": f.overlap_ms,
                "changes": f.changes,
                "to_final_ms": f.to_final_ms,
                "unprobed_ms": f.unprobed_ms,
            }));
            figures.push(f);
        }
        let mut summary = serde_json::Map::new();
        for fam in FAMILIES {
            let idx: Vec<usize> = (0..ips.len())
                .filter(|i| is_family(&ips[*i], fam))
                .collect();
            if idx.is_empty() {
                continue;
            }
            // The family's probe: the first of its addresses the faulted owner answered
            // before (198.51.100.90 for IPv4), else its first.
            let probe = idx
                .iter()
                .copied()
                .find(|i| before.owners[*i] == Some(owner))
                .unwrap_or(idx[0]);
            let fs: Vec<&AddrFigures> = idx.iter().map(|i| &figures[*i]).collect();
            let mut fam_summary = json!({
                    "addresses": idx.len(),
                    "probe": ips[probe],
                    "dark_sum_ms": fs.iter().map(|f| f.dark_ms).sum::<u64>(),
                    "dark_max_ms": fs.iter().map(|f| f.dark_ms).max().unwrap_or(0),
                    "double_sum_ms": fs.iter().map(|f| f.double_ms).sum::<u64>(),
                    "double_max_ms": fs.iter().map(|f| f.double_ms).max().unwrap_or(0),
                    "overlap_sum_ms": fs.iter().map(|f| f.overlap_ms).sum::<u64>(),
                    "overlap_max_ms": fs.iter().map(|f| f.overlap_ms).max().unwrap_or(0),
                    "changes": fs.iter().map(|f| f.changes).sum::<u32>(),
                    "probe_changes": figures[probe].changes,
                    "probe_to_final_ms": figures[probe].to_final_ms,
                    "max_to_final_ms": fs.iter().map(|f| f.to_final_ms).max().unwrap_or(0),
                    "unprobed_ms": fs.iter().map(|f| f.unprobed_ms).max().unwrap_or(0),
            });
            if let Some(c) = cut_node {
                let (own, others): (Vec<usize>, Vec<usize>) =
                    idx.iter().partition(|i| before.owners[**i] == Some(c));
                fam_summary["split"] = json!({
                    "cut_node": c,
                    "own": part_figures(&own, &figures),
                    "others": part_figures(&others, &figures),
                });
            }
            summary.insert(fam.into(), fam_summary);
        }
        let mut r = json!({
            "owner": owner,
            "t0_unix": (t0_unix * 1000.0).round() / 1000.0,
            "expected_owner": expected,
            "successor": successor,
            "fault_ms": undone.as_millis() as u64,
            "window_ms": sent.len() as u64 * SLOT_MS,
            "summary": summary,
            "addresses": per_addr,
        });
        if let Value::Object(m) = extra {
            for (k, v) in m {
                r[k] = v;
            }
        }
        Ok(r)
    }

    /// SIGKILLs node `n`'s speaker (its process group) and reaps it.
    fn kill_speaker(&mut self, n: usize) -> Result<()> {
        if let Some(mut c) = self.l.speakers[n - 1].take() {
            tokio::task::block_in_place(|| c.stop_with(Signal::KILL, Duration::from_secs(5)))?;
        }
        Ok(())
    }

    /// Starts again every speaker that exited, as the kubelet would (at once here: the
    /// kubelet's back-off would add 10 s and more); returns how many.
    fn supervise(&mut self) -> Result<usize> {
        let mut started = 0;
        for n in 1..=self.l.nodes {
            let exited = self.l.speakers[n - 1]
                .as_mut()
                .is_some_and(|c| !c.is_running());
            if exited {
                let log = self.l.speaker_log(n);
                let tail: Vec<&str> = log.lines().rev().take(2).collect();
                eprintln!(
                    "bench-l2-faults: node-{n}'s speaker exited: started again; its last lines:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
                self.l.start_speaker(n)?;
                started += 1;
            }
        }
        Ok(started)
    }

    /// Sleeps `d`, supervising the speakers every 200 ms; returns how many it started.
    async fn sleep_supervised(&mut self, d: Duration) -> Result<usize> {
        let until = Instant::now() + d;
        let mut started = 0;
        loop {
            started += self.supervise()?;
            let now = Instant::now();
            if now >= until {
                return Ok(started);
            }
            tokio::time::sleep(Duration::from_millis(200).min(until - now)).await;
        }
    }
}

/// The API server killed: started again by [`ApiDown::start`] or, if a round fails
/// before, when dropped.
struct ApiDown<'a> {
    api: &'a ApiServer,
    down: bool,
}

impl ApiDown<'_> {
    fn start(mut self) -> Result<()> {
        self.down = false;
        self.api.start()
    }
}

impl Drop for ApiDown<'_> {
    fn drop(&mut self) {
        if self.down
            && let Err(e) = self.api.start()
        {
            eprintln!("bench-l2-faults: could not start the API server again: {e:#}");
        }
    }
}

/// An address a node holds on its interface (`sabotage`); removed by
/// [`HeldAddr::remove`] or when dropped.
struct HeldAddr {
    ns: testkit::Netns,
    iface: String,
    addr: String,
    held: bool,
}

impl HeldAddr {
    fn add(ns: &testkit::Netns, iface: &str, addr: &str) -> Result<HeldAddr> {
        ns.add_addr(iface, addr)?;
        Ok(HeldAddr {
            ns: ns.clone(),
            iface: iface.to_owned(),
            addr: addr.to_owned(),
            held: true,
        })
    }

    fn remove(mut self) -> Result<()> {
        self.held = false;
        self.ns.del_addr(&self.iface, &self.addr)
    }
}

impl Drop for HeldAddr {
    fn drop(&mut self) {
        if self.held {
            let _ = self.ns.del_addr(&self.iface, &self.addr);
        }
    }
}

/// The run's addresses: `v4` IPv4 ones (198.51.100.90, then .100 on) and `v6` IPv6
/// ones (2001:db8:100::90, then ::a0 on), in the pool's ranges.
fn addresses(v4: usize, v6: usize) -> Vec<String> {
    let mut ips = vec![PROBE.to_owned()];
    ips.extend((0..v4.saturating_sub(1)).map(|i| format!("198.51.100.{}", 100 + i)));
    if v6 > 0 {
        ips.push(PROBE6.to_owned());
        ips.extend((0..v6 - 1).map(|i| format!("2001:db8:100::{:x}", 0xa0 + i)));
    }
    ips
}

fn is_family(ip: &str, fam: &str) -> bool {
    ip.parse::<IpAddr>().is_ok_and(|a| family(a) == fam)
}

/// `rate` datagrams per second of 64 bytes of garbage to `target` for [`FLOOD_FOR`],
/// from a thread in `netns`; returns how many went out.
/// Ends the losses of [`Bench::lose_membership`]; per node, the datagrams to the
/// port seen and dropped.
fn restore_losses(lossy: Vec<testkit::cut::Cut>) -> Result<Value> {
    let mut lost = Vec::new();
    for c in lossy {
        let (seen, dropped) = testkit::cut::loss_counters(&c)?;
        lost.push(json!({"to_7946": seen, "dropped": dropped}));
        c.restore()?;
    }
    Ok(json!(lost))
}

/// CPU seconds (user + system) a process used so far.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // pid (comm) state ppid ...: utime and stime are fields 14 and 15
    let rest = stat.rsplit_once(") ").context("/proc/PID/stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 =
        f.get(11).context("utime")?.parse::<f64>()? + f.get(12).context("stime")?.parse::<f64>()?;
    // USER_HZ is 100 on Linux
    Ok(ticks / 100.0)
}

/// The soak's CPU starvation: the speakers in a cgroup v1 `cpu` group of their own
/// with low `cpu.shares`, two busy loops per core in another with the default 1024.
/// Undone (loops killed, speakers moved back, groups removed) by `stop` or on drop.
struct CpuStarved {
    root: PathBuf,
    speakers: Vec<u32>,
    busy: Vec<std::process::Child>,
    done: bool,
}

impl CpuStarved {
    const CPU: &'static str = "/sys/fs/cgroup/cpu";

    fn start(speakers: &[u32], shares: u64) -> Result<CpuStarved> {
        let root = Path::new(Self::CPU).join(format!("bench-l2-faults-{}", std::process::id()));
        for dir in [root.clone(), root.join("speakers"), root.join("busy")] {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("creating {} (cgroup v1 cpu, root)", dir.display()))?;
        }
        let mut s = CpuStarved {
            root,
            speakers: speakers.to_vec(),
            busy: Vec::new(),
            done: false,
        };
        std::fs::write(s.root.join("speakers/cpu.shares"), shares.to_string())?;
        std::fs::write(s.root.join("busy/cpu.shares"), "1024")?;
        for pid in speakers {
            std::fs::write(s.root.join("speakers/cgroup.procs"), pid.to_string())
                .with_context(|| format!("moving speaker {pid} into the soak's cgroup"))?;
        }
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        for _ in 0..2 * cores {
            let child = std::process::Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .context("a busy loop")?;
            std::fs::write(s.root.join("busy/cgroup.procs"), child.id().to_string())?;
            s.busy.push(child);
        }
        Ok(s)
    }

    /// Undoes it; the busy loops' CPU seconds.
    fn stop(mut self) -> Result<f64> {
        let busy: f64 = self
            .busy
            .iter()
            .map(|c| cpu_seconds(c.id()).unwrap_or(0.0))
            .sum();
        self.undo()?;
        Ok(busy)
    }

    fn undo(&mut self) -> Result<()> {
        if self.done {
            return Ok(());
        }
        self.done = true;
        for mut b in self.busy.drain(..) {
            let _ = b.kill();
            let _ = b.wait();
        }
        let top = Path::new(Self::CPU).join("cgroup.procs");
        for pid in &self.speakers {
            // gone already if it exited
            let _ = std::fs::write(&top, pid.to_string());
        }
        for dir in [
            self.root.join("speakers"),
            self.root.join("busy"),
            self.root.clone(),
        ] {
            std::fs::remove_dir(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        Ok(())
    }
}

impl Drop for CpuStarved {
    fn drop(&mut self) {
        if let Err(e) = self.undo() {
            eprintln!("bench-l2-faults: soak cleanup: {e:#}");
        }
    }
}

fn flood(netns: &str, target: SocketAddr, rate: u32) -> Result<u64> {
    ensure!(
        plan::is_allowed_addr(target.ip()),
        "flood target {target} is outside the lab's ranges"
    );
    ensure!(rate <= 50_000, "flood rate {rate} above 50000/s");
    testkit::netns::enter_thread(netns)?;
    let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).context("flood socket")?;
    let mut payload = [0u8; FLOOD_PAYLOAD];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ u64::from(std::process::id());
    let start = Instant::now();
    let mut sent = 0u64;
    let total = u64::from(rate) * FLOOD_FOR.as_secs();
    while sent < total && start.elapsed() < FLOOD_FOR + Duration::from_secs(1) {
        // Paced per millisecond.
        let due = (start.elapsed().as_micros() as u64 * u64::from(rate) / 1_000_000).min(total);
        while sent < due {
            for b in payload.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b.copy_from_slice(&x.to_le_bytes()[..b.len()]);
            }
            let _ = sock.send_to(&payload, target);
            sent += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(sent)
}

fn parse_mac(s: &str) -> Result<MacAddr> {
    let v: Vec<u8> = s
        .split(':')
        .map(|h| u8::from_str_radix(h, 16))
        .collect::<Result<_, _>>()
        .with_context(|| format!("MAC {s}"))?;
    let a: [u8; 6] = v.try_into().map_err(|_| anyhow::anyhow!("MAC {s}"))?;
    Ok(MacAddr(a))
}

/// The figures of some of a round's addresses (`idx`): the cut node's own or the
/// others (`split`).
fn part_figures(idx: &[usize], figures: &[AddrFigures]) -> Value {
    let fs: Vec<&AddrFigures> = idx.iter().map(|i| &figures[*i]).collect();
    json!({
        "addresses": fs.len(),
        "dark_sum_ms": fs.iter().map(|f| f.dark_ms).sum::<u64>(),
        "dark_max_ms": fs.iter().map(|f| f.dark_ms).max().unwrap_or(0),
        "double_sum_ms": fs.iter().map(|f| f.double_ms).sum::<u64>(),
        "double_max_ms": fs.iter().map(|f| f.double_ms).max().unwrap_or(0),
        "overlap_max_ms": fs.iter().map(|f| f.overlap_ms).max().unwrap_or(0),
        "changes": fs.iter().map(|f| f.changes).sum::<u32>(),
    })
}

/// The `p`-th percentile of `v` by nearest rank: the smallest value such that at
/// least `p` % of the values are at or below it (the value of rank ceil(p/100 * n)).
fn nearest_rank(v: &[f64], p: f64) -> Option<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        return None;
    }
    let rank = ((p / 100.0 * n as f64).ceil() as usize).clamp(1, n);
    Some(s[rank - 1])
}

/// p50, p99 (nearest rank) and max of `v`, with how many values.
fn percentiles(v: &[f64]) -> Value {
    let p = |q| nearest_rank(v, q).map_or(Value::Null, |x| json!(x));
    json!({"n": v.len(), "p50": p(50.0), "p99": p(99.0), "max": p(100.0)})
}

/// Over the rounds of one fault, for one address family: sums as the mean per round,
/// maxima as the maximum; the worst address's dark and double ms as percentiles (and,
/// for a `split` fault, those of the cut node's own addresses and of the others).
fn summarise(rounds: &[Value], fam: &str) -> Value {
    let get = |k: &str| -> Vec<f64> {
        rounds
            .iter()
            .filter_map(|r| r["summary"][fam][k].as_f64())
            .collect()
    };
    let mean = |k: &str| {
        let v = get(k);
        if v.is_empty() {
            Value::Null
        } else {
            json!((v.iter().sum::<f64>() / v.len() as f64 * 10.0).round() / 10.0)
        }
    };
    let max = |k: &str| {
        get(k)
            .into_iter()
            .reduce(f64::max)
            .map_or(Value::Null, |m| json!(m))
    };
    let at = |path: &[&str]| -> Vec<f64> {
        rounds
            .iter()
            .filter_map(|r| path.iter().fold(&r["summary"][fam], |v, k| &v[*k]).as_f64())
            .collect()
    };
    let mean_of = |v: Vec<f64>| {
        if v.is_empty() {
            Value::Null
        } else {
            json!((v.iter().sum::<f64>() / v.len() as f64 * 10.0).round() / 10.0)
        }
    };
    let mut s = json!({
        "rounds": rounds.len(),
        "dark_worst_ms": percentiles(&get("dark_max_ms")),
        "double_worst_ms": percentiles(&get("double_max_ms")),
        "overlap_worst_ms": percentiles(&get("overlap_max_ms")),
        "addresses": max("addresses"),
        "dark_sum_ms": mean("dark_sum_ms"),
        "dark_max_ms": max("dark_max_ms"),
        "double_sum_ms": mean("double_sum_ms"),
        "double_max_ms": max("double_max_ms"),
        "changes": mean("changes"),
        "probe_changes": mean("probe_changes"),
        "probe_to_final_ms": max("probe_to_final_ms"),
        "max_to_final_ms": max("max_to_final_ms"),
        "unprobed_ms": max("unprobed_ms"),
        "not_expected_owner": rounds.iter().filter(|r| r["owner"] != r["expected_owner"]).count(),
    });
    for part in ["own", "others"] {
        let dark = at(&["split", part, "dark_max_ms"]);
        if dark.is_empty() {
            continue;
        }
        s["split"][part] = json!({
            "addresses": at(&["split", part, "addresses"]).into_iter().reduce(f64::max),
            "dark_worst_ms": percentiles(&dark),
            "double_worst_ms": percentiles(&at(&["split", part, "double_max_ms"])),
            "overlap_worst_ms": percentiles(&at(&["split", part, "overlap_max_ms"])),
            "changes": mean_of(at(&["split", part, "changes"])),
        });
    }
    s
}

/// The percentiles over the rounds: per implementation, fault and family, all its
/// addresses and, for a `split` fault, the cut node's own and the others.
fn percentile_table(rows: &[(&str, &str, &str, Value)]) -> String {
    let line = |c: [&str; 15]| {
        let mut l = format!(
            "{:<11} {:<18} {:<4} {:<6} {:>2}",
            c[0], c[1], c[2], c[3], c[4]
        );
        for cell in &c[5..] {
            l += &format!(" {cell:>7}");
        }
        l + "\n"
    };
    let mut s = line([
        "impl", "fault", "fam", "addrs", "R", "dark", "dark", "dark", "double", "double", "double",
        "overlap", "overlap", "overlap", "changes",
    ]);
    s += &line([
        "", "", "", "", "", "p50 ms", "p99 ms", "max ms", "p50 ms", "p99 ms", "max ms", "p50 ms",
        "p99 ms", "max ms", "/round",
    ]);
    // Whole milliseconds without a fraction.
    let f = |v: &Value| match v.as_f64() {
        None => "-".to_owned(),
        Some(x) if x.fract() == 0.0 => format!("{x:.0}"),
        Some(x) => x.to_string(),
    };
    for (variant, fault, fam, v) in rows {
        let fam = if *fam == "IPv4" { "v4" } else { "v6" };
        let mut parts = vec![("all", v)];
        for part in ["own", "others"] {
            if !v["split"][part].is_null() {
                parts.push((part, &v["split"][part]));
            }
        }
        for (part, p) in parts {
            let (d, x, o) = (
                &p["dark_worst_ms"],
                &p["double_worst_ms"],
                &p["overlap_worst_ms"],
            );
            s += &line([
                variant,
                fault,
                fam,
                part,
                &f(&v["rounds"]),
                &f(&d["p50"]),
                &f(&d["p99"]),
                &f(&d["max"]),
                &f(&x["p50"]),
                &f(&x["p99"]),
                &f(&x["max"]),
                &f(&o["p50"]),
                &f(&o["p99"]),
                &f(&o["max"]),
                &f(&p["changes"]),
            ]);
        }
    }
    s
}

fn table(rows: &[(&str, &str, &str, Value)]) -> String {
    let line = |c: [&str; 13]| {
        format!(
            "{:<11} {:<18} {:<4} {:>2} {:>9} {:>9} {:>10} {:>10} {:>7} {:>6} {:>9} {:>9} {:>8}\n",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11], c[12]
        )
    };
    let mut s = line([
        "impl",
        "fault",
        "fam",
        "R",
        "dark sum",
        "dark max",
        "double sum",
        "double max",
        "changes",
        "probe",
        "t-final",
        "t-final",
        "unprobed",
    ]);
    s += &line([
        "", "", "", "", "ms/round", "ms/addr", "ms/round", "ms/addr", "/round", "chg", "probe ms",
        "max ms", "max ms",
    ]);
    let f = |v: &Value| match v {
        Value::Null => "-".to_owned(),
        v => v.to_string(),
    };
    for (variant, fault, fam, v) in rows {
        let cells = [
            "rounds",
            "dark_sum_ms",
            "dark_max_ms",
            "double_sum_ms",
            "double_max_ms",
            "changes",
            "probe_changes",
            "probe_to_final_ms",
            "max_to_final_ms",
            "unprobed_ms",
        ]
        .map(|k| f(&v[k]));
        let fam = if *fam == "IPv4" { "v4" } else { "v6" };
        s += &line([
            variant, fault, fam, &cells[0], &cells[1], &cells[2], &cells[3], &cells[4], &cells[5],
            &cells[6], &cells[7], &cells[8], &cells[9],
        ]);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dark_double_changes_and_the_final_owner() {
        // node-1, dark twice, both, node-2 then an unprobed slot and node-2.
        let sent = [true, true, true, true, true, false, true];
        let seen = [0b01, 0, 0, 0b11, 0b10, 0, 0b10];
        let f = analyse(&sent, &seen, &[false, false, false, true]);
        assert_eq!(
            f,
            AddrFigures {
                dark_ms: 40,
                double_ms: 20,
                overlap_ms: 20,
                unprobed_ms: 20,
                changes: 1,
                final_owner: Some(2),
                to_final_ms: 80,
            }
        );
        // Nothing happened: no change, final at once.
        let f = analyse(&[true; 3], &[0b100; 3], &[]);
        assert_eq!((f.changes, f.to_final_ms, f.final_owner), (0, 0, Some(3)));
        // Still double at the end: no final owner, the whole window.
        let f = analyse(&[true; 2], &[0b01, 0b11], &[]);
        assert_eq!((f.final_owner, f.to_final_ms), (None, 40));
        // A MAC that is no node's counts as a second answer.
        let f = analyse(&[true], &[0b01 | OTHER_MAC], &[false]);
        assert_eq!((f.double_ms, f.overlap_ms), (20, 0));
    }

    #[test]
    fn claims_of_arp_and_neighbor_advertisements() {
        let ours = MacAddr([2, 0, 0, 0, 0, 0x64]);
        let node = MacAddr([2, 0, 0, 0, 0, 0x11]);
        let v4: Ipv4Addr = PROBE.parse().unwrap();
        let v6: std::net::Ipv6Addr = PROBE6.parse().unwrap();
        // An ARP reply, a gratuitous request; not our own request.
        let mut reply = ArpFrame::request(node, v4, plan::CLIENT_V4);
        reply.arp.op = ArpOp::Reply;
        assert_eq!(
            claim_of(&reply.encode(), ours),
            Some((IpAddr::V4(v4), node, true))
        );
        let garp = ArpFrame::gratuitous(ArpOp::Request, node, v4);
        assert_eq!(
            claim_of(&garp.encode(), ours),
            Some((IpAddr::V4(v4), node, false))
        );
        // A gratuitous reply claims without answering.
        let greply = ArpFrame::gratuitous(ArpOp::Reply, node, v4);
        assert_eq!(
            claim_of(&greply.encode(), ours),
            Some((IpAddr::V4(v4), node, false))
        );
        let req = ArpFrame::request(ours, plan::CLIENT_V4, v4);
        assert_eq!(claim_of(&req.encode(), ours), None);
        // A solicited NA (its target link-layer address), an unsolicited one without
        // the option (the frame's source), our own solicitation (none).
        let na = |solicited, lla: Option<MacAddr>| NeighborAdvertisement {
            router: false,
            solicited,
            override_flag: true,
            target: v6,
            target_lla: lla,
        };
        let solicited =
            na(true, Some(node)).encode_frame(ours, node, plan::node_v6(1), plan::CLIENT_V6);
        assert_eq!(
            claim_of(&solicited, ours),
            Some((IpAddr::V6(v6), node, true))
        );
        let unsolicited = na(false, None).encode_frame(
            MacAddr([0x33, 0x33, 0, 0, 0, 1]),
            node,
            plan::node_v6(1),
            arp_ndp::packet::ALL_NODES,
        );
        assert_eq!(
            claim_of(&unsolicited, ours),
            Some((IpAddr::V6(v6), node, false))
        );
        let ns = NeighborSolicitation::resolve_frame(ours, plan::CLIENT_V6, v6);
        assert_eq!(claim_of(&ns, ours), None);
        // A corrupted checksum is no answer (a host would drop it).
        let mut bad = solicited.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert_eq!(claim_of(&bad, ours), None);
    }

    #[test]
    fn addresses_are_in_the_pool_per_family() {
        let ips = addresses(3, 3);
        assert_eq!(
            ips,
            [
                PROBE,
                "198.51.100.100",
                "198.51.100.101",
                PROBE6,
                "2001:db8:100::a0",
                "2001:db8:100::a1"
            ]
        );
        let pool6: std::net::Ipv6Addr = "2001:db8:100::".parse().unwrap();
        for ip in addresses(50, 50) {
            match ip.parse::<IpAddr>().unwrap() {
                IpAddr::V4(a) => assert_eq!(a.octets()[..3], [198, 51, 100]),
                IpAddr::V6(a) => assert_eq!(a.octets()[..15], pool6.octets()[..15]),
            }
        }
        assert_eq!(addresses(2, 0), [PROBE, "198.51.100.100"]);
        assert!(is_family(PROBE6, "IPv6") && is_family(PROBE, "IPv4"));
    }

    #[test]
    fn faults_parse_by_name() {
        for f in ALL_FAULTS {
            assert_eq!(Fault::parse(f.name()).unwrap(), f);
        }
        assert!(Fault::parse("nonsense").is_err());
    }

    #[test]
    fn an_overlap_is_two_answers_at_once_not_a_move() {
        let (a, b) = (0b01u8, 0b10u8);
        // A move inside a slot: A answers the request, B claims (gratuitous), B
        // answers its own again: double, no overlap.
        let mut o = Overlap::default();
        assert!(!o.claim(5, 0, a, true));
        assert!(!o.claim(5, a, b, false));
        assert!(!o.claim(5, a | b, b, false));
        // Both answer the same request: overlap.
        let mut o = Overlap::default();
        assert!(!o.claim(6, 0, a, true));
        assert!(o.claim(6, a, b, true));
        // B claims, then A (the old one) claims again: overlap (A, B, A).
        let mut o = Overlap::default();
        assert!(!o.claim(7, 0, a, true));
        assert!(!o.claim(7, a, b, false));
        assert!(o.claim(7, a | b, a, false));
        // B claims, then A answers the slot's request: overlap.
        let mut o = Overlap::default();
        assert!(!o.claim(9, 0, b, false));
        assert!(o.claim(9, b, a, true));
        // Both answer, B after its own claim: overlap.
        let mut o = Overlap::default();
        assert!(!o.claim(10, 0, a, true));
        assert!(!o.claim(10, a, b, false));
        assert!(o.claim(10, a | b, b, true));
        // A new slot starts afresh: A in slot 7, B in slot 8.
        assert!(!o.claim(8, 0, b, true));
        assert!(!o.claim(8, b, b, true));
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        // 30 rounds: p50 is the 15th, p99 the 30th (ceil(29.7)).
        let v: Vec<f64> = (1..=30).rev().map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 50.0), Some(15.0));
        assert_eq!(nearest_rank(&v, 99.0), Some(30.0));
        assert_eq!(nearest_rank(&v, 100.0), Some(30.0));
        // 200 values: p99 is the 198th, not the max.
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 99.0), Some(198.0));
        assert_eq!(nearest_rank(&[7.0], 50.0), Some(7.0));
        assert_eq!(nearest_rank(&[], 50.0), None);
        assert_eq!(
            percentiles(&[20.0, 0.0, 460.0]),
            json!({"n": 3, "p50": 20.0, "p99": 460.0, "max": 460.0})
        );
    }

    #[test]
    fn summary_percentiles_and_split_over_rounds() {
        let round = |dark: u64, own: u64, others: u64| {
            json!({"owner": 2, "expected_owner": 2, "summary": {"IPv4": {
                "dark_max_ms": dark, "double_max_ms": 0, "overlap_max_ms": 0, "changes": 2,
                "split": {"cut_node": 3,
                    "own": {"addresses": 4, "dark_max_ms": own, "double_max_ms": 20, "changes": 2},
                    "others": {"addresses": 8, "dark_max_ms": others, "double_max_ms": 0, "changes": 0}},
            }}})
        };
        let rounds = [round(500, 500, 0), round(440, 440, 20), round(460, 460, 0)];
        let s = summarise(&rounds, "IPv4");
        assert_eq!(s["dark_worst_ms"]["p50"], json!(460.0));
        assert_eq!(s["dark_worst_ms"]["p99"], json!(500.0));
        assert_eq!(s["split"]["others"]["dark_worst_ms"]["max"], json!(20.0));
        assert_eq!(s["split"]["own"]["double_worst_ms"]["p50"], json!(20.0));
        assert_eq!(s["split"]["own"]["changes"], json!(2.0));
        // No split without one in the rounds.
        assert!(summarise(&rounds, "IPv6")["split"].is_null());
        let t = percentile_table(&[("ours", "nonowner-cut", "IPv4", s)]);
        assert_eq!(t.lines().count(), 5, "{t}");
        assert!(t.lines().any(|l| l.contains(" others ")), "{t}");
    }

    #[test]
    fn macs_parse() {
        assert_eq!(
            parse_mac("02:00:5e:10:00:01").unwrap(),
            MacAddr([2, 0, 0x5e, 0x10, 0, 1])
        );
        assert!(parse_mac("02:00").is_err());
    }
}
