//! bench-bgp-faults: the fault suite of issue 27 item 3 for the BGP path and the API
//! server (BENCHMARKS.md, "Speaker: BGP and API server faults"), with MetalLB's own
//! controller and speaker (v0.15.2, native BGP) as the anchor on the same lab, routers,
//! objects and faults.
//!
//! For each implementation it brings up the test kit's network (node-1..3, FRR in
//! `router` peering with every node, hold time 9 s on both sides), the implementation's
//! controller (client namespace) and one speaker per node namespace, all reaching the
//! lab's API server through `testkit::apiproxy`; an IPAddressPool, a BGPPeer, a
//! BGPAdvertisement and `--services` LoadBalancer Services (one ready endpoint each).
//! Before each round it waits until the router's table is exactly the Services' /32s
//! from every node. Faults (`--faults`, each `--rounds` times):
//! - `quiet`: nothing for 10 s (the baseline of every figure);
//! - `api-kill`: the API server SIGKILLed (clients get connection refused: watches break
//!   and must re-list), started again after `--api-down` s with its own command line;
//! - `api-freeze`: the API server SIGSTOPped `--freeze` s (default 60), then continued
//!   (`--freeze-rounds` times);
//! - `router-restart`: FRR in `router` stopped and started again (its config unchanged);
//! - `cut`: node-1's cable cut silently (a bridge drop rule in the switch) until the
//!   router's hold timer expires, plus 2 s, then restored;
//! - `flap`: the router resets node-1's session (`clear bgp`) 10 times, 1 s apart;
//! - `speaker-restart-api-down`: the API server SIGKILLed, node-1's speaker SIGKILLed
//!   and started again at once, the API server started `--api-down-long` s later (ours
//!   with graceful restart on the BGPPeer, the router in helper mode; MetalLB's native
//!   mode refuses graceful restart and runs without);
//! - `bird-restart`: the router is BIRD 2 for this fault (FRR stopped, BIRD started in
//!   `router` with the same neighbors, timers and graceful-restart helper; the round
//!   waits for every /32 at BIRD first), BIRD stopped and started again; re-announce is
//!   from BIRD's session up to the last /32 of the node (BIRD's `debug protocols` trace);
//!   FRR is back for the next fault;
//! - `bfd-cut`: ours with a BFDProfile (100 ms x 3) on the BGPPeer and `neighbor X bfd
//!   profile` at FRR (both stay on for later faults), then `cut`: the figure is the cut to
//!   the router's session down. MetalLB's native mode has no BFD: its round is `cut` on
//!   the hold timer;
//! - `etcd-compact`: etcd compacted at its current revision, then the API server
//!   SIGKILLed and started again at once, so that every watch resumes from a compacted
//!   resourceVersion (410 Gone: list again); the restarted API server also audits lists,
//!   so the re-lists per user are counted;
//! - `lease-loss`: `LEASE_BURST` new Services, and once the controller has allocated the
//!   first of them the bench takes its Lease (another holder, renewed now) before it
//!   creates the rest; the controller must stop writing once it learns (its next renewal),
//!   never write after its renew deadline, take the Lease back when it expires and
//!   allocate the rest, no address twice. MetalLB's controller has no leader election:
//!   its round is the burst alone.
//!
//! Per round: the router's withdrawals per node (bgpd's `debug bgp updates in` log) and
//! session downs (`bgp log-neighbor-changes`), the router's prefix counts sampled every
//! 100 ms (the lowest seen per node), the Services' addresses before and after (an
//! address that changed is a moved IP), the writes of the speakers and the controller
//! (audit log) from the fault to convergence plus 10 s, and the time from the fault's end
//! to convergence: the router's table exactly the Services' /32s from every node, a probe
//! Service created at the fault's end announced from every node, and every Service's
//! ServiceBGPStatus (one per node, naming the peer) and nothing else. Invariants
//! (violations counted): for the API faults no withdrawal and no session down at the
//! router, no IP moved, status converged, no write storm (more speaker writes than two
//! per Service per node); for all faults, no stale route once converged; lease-loss also
//! no address given twice and no write of the controller after it learned of the loss or
//! after its renew deadline, until it leads again. `etcd-compact` and `lease-loss` count
//! as API faults.
//! `--sabotage` SIGKILLs node-1's speaker in the middle of each API fault, to show that
//! the checks see a withdrawal, and (with lease-loss) starts our controller on another
//! Lease than the one lease-loss takes, unfenced: the checks must see its writes.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use e2e::apiserver::{ApiServer, wait_api};
use e2e::bench::Impl as Kind;
use e2e::{Lab, NodeNetwork};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::apiproxy::ApiProxy;
use testkit::netns::Netns;
use testkit::process::{Signal, kill_pid};
use testkit::{
    Bird, BirdConfig, BirdNeighbor, Frr, FrrConfig, FrrNeighbor, LabOptions, NsChild, plan,
};

const USAGE: &str = "\
usage: bench-bgp-faults [--impl ours|metallb|both] [--rounds R] [--freeze-rounds R]
                        [--faults LIST] [--services N] [--api-down SECS] [--freeze SECS]
                        [--api-down-long SECS] [--sabotage] [--ours-bin DIR]
                        [--metallb-bin DIR] [--out FILE]

The BGP and API-server fault suite against the lab (lab/cluster up, root, the test kit's
tools), MetalLB's controller and speaker (native BGP) as the anchor in the same run:
  --impl            which to run (default both: ours, then MetalLB)
  --rounds R        rounds of each fault (default 3)
  --freeze-rounds R rounds of api-freeze (default 1)
  --faults LIST     default quiet,api-kill,api-freeze,router-restart,cut,flap,
                    speaker-restart-api-down,bird-restart,bfd-cut,etcd-compact,
                    lease-loss
  --services N      LoadBalancer Services (default 20, at most 100)
  --api-down SECS   how long api-kill keeps the API server down (default 10)
  --freeze SECS     how long api-freeze stops it (default 60)
  --api-down-long SECS  speaker-restart-api-down's outage (default 20)
  --sabotage        SIGKILL node-1's speaker during each API fault (the checks must
                    then report withdrawals); with lease-loss, our controller holds
                    another Lease (unfenced: the checks must report its writes)
  --ours-bin        directory of our controller and speaker (default
                    $CARGO_TARGET_DIR/release, else <repo>/target/release)
  --metallb-bin     directory of MetalLB's (default: lab/build-metallb bindir)
  --out FILE        also write the figures as JSON";

const POOL: &str = "198.51.100.0/24";
const NODES: usize = 3;
const SERVICE_CIDR: &str = "bench-bgp-faults";
const SERVICE_CIDR_RANGE: &str = "198.18.192.0/20";
/// The BGPPeer's and the router's hold time and keepalive.
const HOLD_S: u32 = 9;
const KEEPALIVE_S: u32 = 3;
/// Services created by each lease-loss round (they stay).
const LEASE_BURST: usize = 30;
/// Our controller's Lease and the holder the bench writes into it.
const LEASE_NAME: &str = "metallb-rs-controller";
const THIEF: &str = "bench-bgp-faults-thief";
/// With `--sabotage`, our controller holds this Lease instead (lease-loss takes the
/// other one, which it ignores: the checks must see its writes).
const SABOTAGE_LEASE: &str = "bench-bgp-faults-sabotage";
/// Our controller's renew deadline (client-go's default): no write after it.
const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// The BFD profile of bfd-cut (ms, ms, multiplier).
const BFD: (u32, u32, u32) = (100, 100, 3);
/// Longest wait for convergence after a fault.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(180);
/// Audit writes are counted until convergence plus this.
const WRITES_AFTER: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Quiet,
    ApiKill,
    ApiFreeze,
    RouterRestart,
    Cut,
    Flap,
    SpeakerRestartApiDown,
    BirdRestart,
    BfdCut,
    EtcdCompact,
    LeaseLoss,
}

const ALL_FAULTS: [Fault; 11] = [
    Fault::Quiet,
    Fault::ApiKill,
    Fault::ApiFreeze,
    Fault::RouterRestart,
    Fault::Cut,
    Fault::Flap,
    Fault::SpeakerRestartApiDown,
    Fault::BirdRestart,
    Fault::BfdCut,
    Fault::EtcdCompact,
    Fault::LeaseLoss,
];

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Quiet => "quiet",
            Fault::ApiKill => "api-kill",
            Fault::ApiFreeze => "api-freeze",
            Fault::RouterRestart => "router-restart",
            Fault::Cut => "cut",
            Fault::Flap => "flap",
            Fault::SpeakerRestartApiDown => "speaker-restart-api-down",
            Fault::BirdRestart => "bird-restart",
            Fault::BfdCut => "bfd-cut",
            Fault::EtcdCompact => "etcd-compact",
            Fault::LeaseLoss => "lease-loss",
        }
    }

    fn parse(s: &str) -> Result<Fault> {
        ALL_FAULTS
            .into_iter()
            .find(|f| f.name() == s)
            .with_context(|| format!("unknown fault {s}"))
    }

    /// Only the API server is away: nothing may be withdrawn.
    fn api_only(self) -> bool {
        matches!(
            self,
            Fault::Quiet
                | Fault::ApiKill
                | Fault::ApiFreeze
                | Fault::EtcdCompact
                | Fault::LeaseLoss
        )
    }
}

struct Opts {
    kinds: Vec<Kind>,
    rounds: usize,
    freeze_rounds: usize,
    faults: Vec<Fault>,
    services: usize,
    api_down: Duration,
    freeze: Duration,
    api_down_long: Duration,
    sabotage: bool,
    ours_bin: PathBuf,
    metallb_bin: PathBuf,
    out: Option<PathBuf>,
}

fn parse_opts(repo: &Path) -> Result<Opts> {
    let mut args = std::env::args().skip(1);
    let mut o = Opts {
        kinds: vec![Kind::Ours, Kind::Metallb],
        rounds: 3,
        freeze_rounds: 1,
        faults: ALL_FAULTS.to_vec(),
        services: 20,
        api_down: Duration::from_secs(10),
        freeze: Duration::from_secs(60),
        api_down_long: Duration::from_secs(20),
        sabotage: false,
        ours_bin: PathBuf::new(),
        metallb_bin: PathBuf::new(),
        out: None,
    };
    let (mut ours_bin, mut metallb_bin) = (None, None);
    while let Some(a) = args.next() {
        let mut val = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--impl" => o.kinds = Kind::parse_list(&val()?, false)?,
            "--rounds" => o.rounds = val()?.parse()?,
            "--freeze-rounds" => o.freeze_rounds = val()?.parse()?,
            "--faults" => o.faults = val()?.split(',').map(Fault::parse).collect::<Result<_>>()?,
            "--services" => o.services = val()?.parse()?,
            "--api-down" => o.api_down = Duration::from_secs(val()?.parse()?),
            "--freeze" => o.freeze = Duration::from_secs(val()?.parse()?),
            "--api-down-long" => o.api_down_long = Duration::from_secs(val()?.parse()?),
            "--sabotage" => o.sabotage = true,
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
    ensure!(
        (1..=100).contains(&o.services),
        "--services 1 to 100 (the pool is a /24 and each round adds a probe Service)"
    );
    ensure!(o.rounds >= 1 && o.rounds <= 30, "--rounds 1 to 30");
    ensure!(o.freeze <= Duration::from_secs(300), "--freeze at most 300");
    let rounds_of = |f: Fault| {
        if f == Fault::ApiFreeze {
            o.freeze_rounds
        } else {
            o.rounds
        }
    };
    let probes: usize = o.faults.iter().map(|&f| rounds_of(f)).sum();
    let bursts = o.faults.iter().filter(|&&f| f == Fault::LeaseLoss).count() * o.rounds;
    ensure!(
        o.services + probes + bursts * LEASE_BURST <= 250,
        "{} Services + {probes} probes + {bursts} x {LEASE_BURST} lease-loss Services: more \
         than the pool (a /24) holds",
        o.services
    );
    o.ours_bin = e2e::bench::ours_bin_dir(repo, ours_bin);
    o.metallb_bin = e2e::bench::metallb_bin_dir(repo, metallb_bin)?;
    Ok(o)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = rt.block_on(run()) {
        eprintln!("bench-bgp-faults: {e:#}");
        std::process::exit(1);
    }
}

async fn run() -> Result<()> {
    let lab = Lab::connect().await?;
    let opts = parse_opts(lab.repo())?;
    // The lab's cluster IPs (203.0.113.128/25) hold 126 Services: an extra ServiceCIDR
    // from the benchmark range (API objects only). Removed at the end.
    e2e::l2bench::with_service_cidr(&lab, SERVICE_CIDR, SERVICE_CIDR_RANGE, async || {
        run_all(&lab, &opts).await
    })
    .await
}

async fn run_all(lab: &Lab, opts: &Opts) -> Result<()> {
    let mut all = serde_json::Map::new();
    let mut rows = Vec::new();
    for &kind in &opts.kinds {
        let dir = match kind {
            Kind::Ours => &opts.ours_bin,
            Kind::Metallb => &opts.metallb_bin,
        };
        let (controller, speaker) = (dir.join("controller"), dir.join("speaker"));
        for b in [&controller, &speaker] {
            ensure!(b.is_file(), "{} is missing", b.display());
        }
        eprintln!("bench-bgp-faults: === {} ===", kind.name());
        let figures = bench(lab, kind, &controller, &speaker, opts).await?;
        for (fault, v) in figures.as_object().into_iter().flatten() {
            rows.push((kind.name(), fault.clone(), v["summary"].clone()));
        }
        all.insert(kind.name().into(), figures);
        if let Some(out) = &opts.out {
            std::fs::write(out, serde_json::to_vec_pretty(&Value::Object(all.clone()))?)?;
        }
    }
    println!("{}", table(&rows));
    Ok(())
}

// --- time and logs ----------------------------------------------------------------------

/// Microseconds since the epoch.
fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// `2026-11-26T20:40:01.123456Z` or `2026/11/26` + `20:40:01.123456` (UTC) to
/// microseconds since the epoch.
fn parse_ts(date: &str, time: &str) -> Option<i64> {
    let mut d = date.split(['-', '/']).map(|p| p.parse::<i64>().ok());
    let (y, mo, da) = (d.next()??, d.next()??, d.next()??);
    let time = time.trim_end_matches('Z');
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (h, mi, s) = (t.next()??, t.next()??, t.next()??);
    let mut us_s: String = frac.chars().take(6).collect();
    while us_s.len() < 6 {
        us_s.push('0');
    }
    let us: i64 = us_s.parse().ok()?;
    Some(((days_from_civil(y, mo, da) * 86400 + h * 3600 + mi * 60 + s) * 1_000_000) + us)
}

/// What bgpd logged about a neighbor (`debug bgp updates in`, `bgp log-neighbor-changes`,
/// `log timestamp precision 6`).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Event {
    /// `... 192.0.2.11(node-1) rcvd 198.51.100.7/32 IPv4 unicast`
    Rcvd(String),
    /// `... 192.0.2.11(node-1) rcvd UPDATE about 198.51.100.7/32 IPv4 unicast -- withdrawn`
    Withdrawn(String),
    /// `%ADJCHANGE: neighbor 192.0.2.11(node-1) in vrf default Up`
    Up,
    /// `%ADJCHANGE: neighbor 192.0.2.11(node-1) in vrf default Down ...`
    Down,
}

#[derive(Clone, Debug)]
struct Logged {
    at_us: i64,
    peer: String,
    event: Event,
}

fn strip_peer(w: &str) -> String {
    w.split('(').next().unwrap_or(w).to_owned()
}

fn parse_event(line: &str) -> Option<Logged> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at_us = parse_ts(words.first()?, words.get(1)?)?;
    if let Some(i) = words.iter().position(|w| w.ends_with("ADJCHANGE:")) {
        let peer = strip_peer(words.get(i + 2)?);
        let event = if words.contains(&"Up") {
            Event::Up
        } else if words.contains(&"Down") {
            Event::Down
        } else {
            return None;
        };
        return Some(Logged { at_us, peer, event });
    }
    let i = words.iter().position(|w| *w == "rcvd")?;
    let peer = strip_peer(words.get(i.checked_sub(1)?)?);
    if line.contains("withdrawn") {
        let j = words.iter().position(|w| *w == "about")?;
        let prefix = words.get(j + 1)?.trim_end_matches(',').to_owned();
        return Some(Logged {
            at_us,
            peer,
            event: Event::Withdrawn(prefix),
        });
    }
    let prefix = words.get(i + 1)?;
    if !prefix.starts_with(|c: char| c.is_ascii_digit()) || !prefix.contains('/') {
        return None;
    }
    if line.contains("DENIED") {
        return None;
    }
    Some(Logged {
        at_us,
        peer,
        event: Event::Rcvd(prefix.trim_end_matches(',').to_owned()),
    })
}

/// BIRD's protocol name for node `n`.
fn bird_proto(n: usize) -> String {
    format!("node{n}")
}

/// What BIRD traced about a neighbor (`debug protocols { states, routes }`, `timeformat
/// log "%F %T.%6f"`): `2026-11-29 12:00:01.123456 <TRACE> node1: State changed to up`,
/// `... <TRACE> node1.ipv4 > added [best] 198.51.100.7/32 unicast`, `... > removed ...`.
fn parse_bird_event(line: &str) -> Option<Logged> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at_us = parse_ts(words.first()?, words.get(1)?)?;
    let i = words.iter().position(|w| *w == "<TRACE>")?;
    let proto = words.get(i + 1)?;
    let name = proto.trim_end_matches(':');
    let name = name.split('.').next()?;
    let n: usize = name.strip_prefix("node")?.parse().ok()?;
    let peer = plan::node_v4(n).to_string();
    let rest = &words[i + 2..];
    if rest.starts_with(&["State", "changed", "to"]) {
        let event = match rest.get(3) {
            Some(&"up") => Event::Up,
            Some(&"down") => Event::Down,
            _ => return None,
        };
        return Some(Logged { at_us, peer, event });
    }
    if rest.first() != Some(&">") {
        return None;
    }
    let prefix = rest
        .iter()
        .find(|w| w.contains('/') && w.starts_with(|c: char| c.is_ascii_digit()))?
        .to_string();
    let event = match rest.get(1) {
        Some(&"added") | Some(&"updated") => Event::Rcvd(prefix),
        Some(&"removed") => Event::Withdrawn(prefix),
        _ => return None,
    };
    Some(Logged { at_us, peer, event })
}

/// Reads a growing text file from an offset.
struct Tail {
    path: PathBuf,
    offset: u64,
    partial: String,
    /// BIRD's trace, else bgpd's log.
    bird: bool,
}

impl Tail {
    fn from_end(path: &Path) -> Tail {
        let offset = std::fs::metadata(path).map_or(0, |m| m.len());
        Tail {
            path: path.to_path_buf(),
            offset,
            partial: String::new(),
            bird: false,
        }
    }

    fn lines(&mut self) -> Vec<String> {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return Vec::new();
        };
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut buf = Vec::new();
        if f.read_to_end(&mut buf).is_err() {
            return Vec::new();
        }
        self.offset += buf.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&buf));
        let mut out = Vec::new();
        while let Some(i) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=i).collect();
            out.push(line.trim_end().to_owned());
        }
        out
    }

    fn events(&mut self) -> Vec<Logged> {
        let parse = if self.bird {
            parse_bird_event
        } else {
            parse_event
        };
        self.lines().iter().filter_map(|l| parse(l)).collect()
    }
}

const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// Writes of `user` in the audit log from byte `from`, between two instants (µs).
fn audit_writes(
    path: &Path,
    from: u64,
    user: &str,
    from_us: i64,
    to_us: i64,
) -> Result<(usize, BTreeMap<String, usize>)> {
    audit_count(path, from, user, from_us, to_us, &WRITE_VERBS)
}

/// One audited request: when (µs), verb, resource(/subresource), response code.
#[derive(Clone, Debug)]
struct Audited {
    at_us: i64,
    verb: String,
    what: String,
    name: String,
    code: i64,
}

/// The requests of `user` with one of `verbs` in the audit log from byte `from`.
fn audit_requests(path: &Path, from: u64, user: &str, verbs: &[&str]) -> Result<Vec<Audited>> {
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(from))?;
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let verb = v["verb"].as_str().unwrap_or_default();
        if v["stage"] != "ResponseComplete"
            || v["user"]["username"] != user
            || !verbs.contains(&verb)
        {
            continue;
        }
        let at_us = v["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.split_once('T'))
            .and_then(|(d, t)| parse_ts(d, t))
            .unwrap_or(0);
        let o = &v["objectRef"];
        let mut what = o["resource"].as_str().unwrap_or_default().to_owned();
        if let Some(sub) = o["subresource"].as_str() {
            what = format!("{what}/{sub}");
        }
        out.push(Audited {
            at_us,
            verb: verb.to_owned(),
            what,
            name: o["name"].as_str().unwrap_or_default().to_owned(),
            code: v["responseStatus"]["code"].as_i64().unwrap_or(0),
        });
    }
    Ok(out)
}

/// Requests of `user` with one of `verbs` between two instants (µs), and per kind.
fn audit_count(
    path: &Path,
    from: u64,
    user: &str,
    from_us: i64,
    to_us: i64,
    verbs: &[&str],
) -> Result<(usize, BTreeMap<String, usize>)> {
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(from))?;
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    let mut n = 0;
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v["stage"] != "ResponseComplete"
            || v["user"]["username"] != user
            || !verbs.contains(&v["verb"].as_str().unwrap_or_default())
        {
            continue;
        }
        let at = v["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.split_once('T'))
            .and_then(|(d, t)| parse_ts(d, t))
            .unwrap_or(0);
        if at >= from_us && at < to_us {
            n += 1;
            let o = &v["objectRef"];
            let mut what = format!(
                "{} {}",
                v["verb"].as_str().unwrap_or_default(),
                o["resource"].as_str().unwrap_or_default()
            );
            if let Some(sub) = o["subresource"].as_str() {
                what = format!("{what}/{sub}");
            }
            *per.entry(what).or_default() += 1;
        }
    }
    Ok((n, per))
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

// --- the router ---------------------------------------------------------------------------

fn router_config(log: &Path, graceful: bool) -> FrrConfig {
    let mut c = FrrConfig::new("router", plan::ROUTER_AS, plan::ROUTER_V4)
        .extra(&format!("log file {} debugging", log.display()))
        .extra("log timestamp precision 6")
        .extra("debug bgp updates in");
    for n in 1..=NODES {
        let mut nb =
            FrrNeighbor::new(plan::node_v4(n).into(), plan::NODE_AS).timers(KEEPALIVE_S, HOLD_S);
        nb.connect_retry = Some(1);
        if graceful {
            nb = nb.extra("graceful-restart");
        }
        c = c.neighbor(nb);
    }
    c
}

/// BIRD in `router` as FRR is configured (same neighbors, timers, graceful-restart
/// helper), tracing session states and routes to `log` with microseconds.
fn bird_config(log: &Path, graceful: bool) -> Result<String> {
    let mut c = BirdConfig::new(plan::ROUTER_AS, plan::ROUTER_V4);
    for n in 1..=NODES {
        let mut nb = BirdNeighbor::new(&bird_proto(n), plan::node_v4(n).into(), plan::NODE_AS)
            .timers(HOLD_S, KEEPALIVE_S);
        if graceful {
            nb = nb.graceful_restart();
        }
        c = c.neighbor(nb);
    }
    c.validate()?;
    let text = c.render(log);
    let anchor = "timeformat protocol iso long;\n";
    ensure!(text.contains(anchor), "BIRD config without {anchor:?}");
    Ok(text.replacen(
        anchor,
        &format!("{anchor}timeformat log \"%F %T.%6f\";\ndebug protocols {{ states, routes }};\n"),
        1,
    ))
}

/// POSTs to etcd's JSON gateway (the lab's etcd: plain HTTP on 127.0.0.1).
fn etcd_post(endpoint: &str, path: &str, body: &Value) -> Result<Value> {
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "30", "-X", "POST"])
        .arg(format!("{endpoint}{path}"))
        .arg("-d")
        .arg(body.to_string())
        .output()
        .context("curl")?;
    ensure!(
        out.status.success(),
        "etcd {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("etcd {path}: {}", String::from_utf8_lossy(&out.stdout)))?;
    ensure!(
        v.get("error").is_none() && v.get("code").is_none(),
        "etcd {path}: {v}"
    );
    Ok(v)
}

/// etcd's current revision.
fn etcd_revision(endpoint: &str) -> Result<i64> {
    let v = etcd_post(
        endpoint,
        "/v3/kv/range",
        &json!({"key": "AA==", "limit": 1}),
    )?;
    let r = &v["header"]["revision"];
    r.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| r.as_i64())
        .with_context(|| format!("no revision in {v}"))
}

/// The router's view, read with vtysh from any thread.
#[derive(Clone)]
struct RouterView {
    ns: Netns,
    dir: PathBuf,
}

impl RouterView {
    fn show(&self, command: &str) -> Result<Value> {
        let mut c = self.ns.command("vtysh");
        c.arg("--vty_socket").arg(&self.dir).arg("-c").arg(command);
        let out = c.output()?;
        ensure!(out.status.success(), "vtysh {command}: {}", out.status);
        Ok(serde_json::from_slice(&out.stdout)?)
    }

    /// (state, prefixes received) per neighbor address.
    fn summary(&self) -> Result<BTreeMap<String, (String, u64)>> {
        let v = self.show("show bgp ipv4 unicast summary json")?;
        let mut out = BTreeMap::new();
        for (addr, p) in v["peers"].as_object().into_iter().flatten() {
            out.insert(
                addr.clone(),
                (
                    p["state"].as_str().unwrap_or_default().to_owned(),
                    p["pfxRcd"].as_u64().unwrap_or(0),
                ),
            );
        }
        Ok(out)
    }

    /// Prefixes per neighbor address (every path, valid or stale).
    fn table(&self) -> Result<BTreeMap<String, BTreeSet<String>>> {
        let v = self.show("show bgp ipv4 unicast json")?;
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (prefix, paths) in v["routes"].as_object().into_iter().flatten() {
            for p in paths.as_array().into_iter().flatten() {
                let peer = p["peerId"].as_str().unwrap_or_default().to_owned();
                out.entry(peer).or_default().insert(prefix.clone());
            }
        }
        Ok(out)
    }

    /// Stale paths (graceful restart) per neighbor address.
    fn stale(&self) -> Result<BTreeMap<String, usize>> {
        let v = self.show("show bgp ipv4 unicast json")?;
        let mut out: BTreeMap<String, usize> = BTreeMap::new();
        for (_, paths) in v["routes"].as_object().into_iter().flatten() {
            for p in paths.as_array().into_iter().flatten() {
                if p["stale"].as_bool() == Some(true) {
                    *out.entry(p["peerId"].as_str().unwrap_or_default().to_owned())
                        .or_default() += 1;
                }
            }
        }
        Ok(out)
    }
}

/// Samples the router every 100 ms from a thread: the lowest prefix count and the states
/// seen per neighbor, and the most stale paths.
struct Sampler {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<SamplerSeen>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default, Clone, Debug)]
struct SamplerSeen {
    samples: u64,
    errors: u64,
    min_pfx: BTreeMap<String, u64>,
    not_established: BTreeMap<String, u64>,
    max_stale: BTreeMap<String, usize>,
}

impl Sampler {
    fn start(view: RouterView, with_stale: bool) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(SamplerSeen::default()));
        let thread = std::thread::spawn({
            let (stop, seen) = (stop.clone(), seen.clone());
            move || {
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let r = view.summary();
                    let st = if with_stale { view.stale().ok() } else { None };
                    {
                        let mut s = seen.lock().unwrap();
                        s.samples += 1;
                        match r {
                            Ok(m) => {
                                for (peer, (state, pfx)) in m {
                                    let e = s.min_pfx.entry(peer.clone()).or_insert(pfx);
                                    *e = (*e).min(pfx);
                                    if state != "Established" {
                                        *s.not_established.entry(peer).or_default() += 1;
                                    }
                                }
                            }
                            Err(_) => s.errors += 1,
                        }
                        for (peer, n) in st.into_iter().flatten() {
                            let e = s.max_stale.entry(peer).or_default();
                            *e = (*e).max(n);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100).saturating_sub(t.elapsed()));
                }
            }
        });
        Sampler {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> SamplerSeen {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.seen.lock().unwrap().clone()
    }
}

// --- the API server -------------------------------------------------------------------------

/// Continues a stopped process when dropped (also when a round fails mid-freeze).
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

// --- the bench ------------------------------------------------------------------------------

struct Bench<'a> {
    lab: &'a Lab,
    kind: Kind,
    speaker_bin: PathBuf,
    net: NodeNetwork,
    frr: Option<Frr>,
    router_restarts: usize,
    graceful: bool,
    cfg_ns: String,
    svc_ns: String,
    dir: PathBuf,
    speaker_kubeconfig: PathBuf,
    speaker_user: String,
    controller_user: String,
    speakers: Vec<Option<NsChild>>,
    audit: PathBuf,
    api: ApiServer,
    probes: usize,
    speaker_exits: usize,
    /// BIRD in `router` instead of FRR (bird-restart rounds).
    bird: Option<Bird>,
    bird_runs: usize,
    /// Services created by lease-loss rounds.
    extra_services: usize,
    /// The API server was restarted with lists in its audit policy.
    lists_audited: bool,
}

async fn bench(
    lab: &Lab,
    kind: Kind,
    controller_bin: &Path,
    speaker_bin: &Path,
    opts: &Opts,
) -> Result<Value> {
    let port = lab.api_port()?;
    let waiting = Instant::now();
    let net = loop {
        match tokio::task::block_in_place(|| lab.node_network(&LabOptions::default())) {
            Ok(n) => break n,
            Err(e)
                if format!("{e:#}").contains("is still held")
                    && waiting.elapsed() < Duration::from_secs(1800) =>
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => return Err(e),
        }
    };
    eprintln!(
        "bench-bgp-faults: network up after {:.1} s waiting for the test kit's lock",
        waiting.elapsed().as_secs_f64()
    );
    e2e::speakers::ensure_nodes(lab, NODES).await?;
    let client_proxy = ApiProxy::start(net.net.client(), port, port)?;
    let suffix = e2e::unique_suffix();
    let cfg_ns = format!("bgpf-{}-cfg-{suffix}", kind.name());
    let svc_ns = format!("bgpf-{}-svc-{suffix}", kind.name());
    let dir = std::env::temp_dir().join(format!("bench-bgp-faults-{}-{suffix}", kind.name()));
    std::fs::create_dir_all(&dir)?;
    eprintln!("bench-bgp-faults: logs in {}", dir.display());
    let nsapi = Api::<Namespace>::all(lab.client.clone());
    for ns in [&cfg_ns, &svc_ns] {
        nsapi
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
            )
            .await?;
    }
    // Graceful restart: ours only (MetalLB's native mode refuses it).
    let graceful = kind == Kind::Ours;
    let log = net.net.ns("router").state_dir().join("frr/bench.log");
    let frr = Frr::start(net.net.ns("router"), &router_config(&log, graceful))
        .context("FRR in router")?;
    let mut bench = Bench {
        lab,
        kind,
        speaker_bin: speaker_bin.to_path_buf(),
        net,
        frr: Some(frr),
        router_restarts: 0,
        graceful,
        cfg_ns: cfg_ns.clone(),
        svc_ns: svc_ns.clone(),
        dir,
        speaker_kubeconfig: PathBuf::new(),
        speaker_user: String::new(),
        controller_user: String::new(),
        speakers: (0..NODES).map(|_| None).collect(),
        audit: lab.env.state_dir.join("audit/audit.log"),
        api: ApiServer::new(lab)?,
        probes: 0,
        speaker_exits: 0,
        bird: None,
        bird_runs: 0,
        extra_services: 0,
        lists_audited: false,
    };
    let result = bench.run(controller_bin, opts).await;
    // Teardown, whatever happened (the API server is up again: every fault restores it).
    let _ = wait_api(lab).await;
    for s in bench.speakers.iter_mut().flatten() {
        let _ = s.stop_with(Signal::TERM, Duration::from_secs(10));
    }
    drop(client_proxy);
    let crbs = Api::<ClusterRoleBinding>::all(lab.client.clone());
    for sa in ["controller", "speaker"] {
        let _ = crbs
            .delete(&format!("bench:{cfg_ns}:{sa}"), &DeleteParams::default())
            .await;
    }
    let pods = Api::<Pod>::namespaced(lab.client.clone(), &cfg_ns);
    for n in 1..=NODES {
        let _ = pods
            .delete(
                &format!("speaker-{}", plan::node_name(n)),
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                },
            )
            .await;
    }
    for ns in [&svc_ns, &cfg_ns] {
        let _ = nsapi.delete(ns, &DeleteParams::default()).await;
    }
    let deadline = Instant::now() + Duration::from_secs(240);
    while Instant::now() < deadline {
        let left = matches!(nsapi.get_opt(&svc_ns).await, Ok(Some(_)))
            || matches!(nsapi.get_opt(&cfg_ns).await, Ok(Some(_)));
        if !left {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let Bench { net, frr, bird, .. } = bench;
    tokio::task::block_in_place(move || {
        if let Some(b) = bird {
            let _ = b.stop();
        }
        if let Some(f) = frr {
            let _ = f.stop();
        }
        drop(net);
    });
    result
}

/// What a round saw before its fault.
struct Before {
    ips: BTreeMap<String, String>,
}

impl Bench<'_> {
    fn view(&self) -> RouterView {
        RouterView {
            ns: self.net.net.ns("router").clone(),
            dir: self.net.net.ns("router").state_dir().join("frr"),
        }
    }

    fn router_log(&self) -> PathBuf {
        self.net.net.ns("router").state_dir().join("frr/bench.log")
    }

    fn metallb(&self, kind: &str) -> Api<DynamicObject> {
        self.lab.metallb(&self.lab.client, &self.cfg_ns, kind)
    }

    async fn create_metallb(&self, kind: &str, name: &str, spec: Value) -> Result<()> {
        e2e::bench::create_metallb(self.lab, &self.cfg_ns, kind, name, spec).await
    }

    /// A ServiceAccount bound to cluster-admin (the same rights for both implementations)
    /// and a kubeconfig with its token; returns (kubeconfig, audit user).
    async fn account(&self, name: &str) -> Result<(PathBuf, String)> {
        e2e::bench::admin_account(self.lab, &self.cfg_ns, &self.dir, name).await
    }

    fn start_speaker(&mut self, n: usize) -> Result<()> {
        let node = plan::node_name(n);
        let pod = format!("speaker-{node}");
        let kc = self.speaker_kubeconfig.to_str().context("path")?.to_owned();
        let ns = self.net.net.node(n);
        let mut cmd = ns.command(&self.speaker_bin);
        match self.kind {
            Kind::Ours => {
                cmd.args([
                    "--log-format",
                    "text",
                    "--node-name",
                    &node,
                    "--health-probe-port",
                    "7473",
                    "--port",
                    "7472",
                    "--metrics-bind-address",
                    "127.0.0.1",
                    "--metrics-insecure-http",
                ]);
            }
            Kind::Metallb => {
                cmd.args([
                    "--node-name",
                    &node,
                    "--pod-name",
                    &pod,
                    "--namespace",
                    &self.cfg_ns,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "7472",
                ]);
                cmd.env("METALLB_BGP_TYPE", "native");
            }
        }
        cmd.env("KUBECONFIG", kc)
            .env("METALLB_NAMESPACE", &self.cfg_ns)
            .env("METALLB_POD_NAME", &pod)
            .env("METALLB_NODE_NAME", &node);
        let log = self.dir.join(format!("speaker-{node}.log"));
        let child =
            NsChild::spawn_logged(cmd, &log).with_context(|| format!("speaker in {node}"))?;
        self.speakers[n - 1] = Some(child);
        Ok(())
    }

    fn kill_speaker(&mut self, n: usize) -> Result<()> {
        if let Some(mut s) = self.speakers[n - 1].take() {
            s.stop_with(Signal::KILL, Duration::from_secs(5))?;
        }
        Ok(())
    }

    async fn create_service(&self, name: &str, node: usize) -> Result<()> {
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-slice"), "namespace": self.svc_ns,
                         "labels": {"kubernetes.io/service-name": name,
                                    "endpointslice.kubernetes.io/managed-by": "bench-bgp-faults.metallb-rs.io"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [plan::node_v4(node).to_string()],
                           "conditions": {"ready": true, "serving": true, "terminating": false},
                           "nodeName": plan::node_name(node)}],
            "ports": [{"name": "tcp-80", "protocol": "TCP", "port": 8080}],
        }))?;
        // Named: a create retried after a failed Service create finds it there.
        match Api::<EndpointSlice>::namespaced(self.lab.client.clone(), &self.svc_ns)
            .create(&PostParams::default(), &slice)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("EndpointSlice for {name}")),
        }
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": self.svc_ns},
            "spec": {"type": "LoadBalancer", "selector": {"app": name},
                     "ports": [{"name": "tcp-80", "protocol": "TCP", "port": 80, "targetPort": 8080}]},
        }))?;
        Api::<Service>::namespaced(self.lab.client.clone(), &self.svc_ns)
            .create(&PostParams::default(), &svc)
            .await
            .with_context(|| format!("Service {name}"))?;
        Ok(())
    }

    /// Service name -> its first ingress address (Services without one left out).
    async fn ips(&self) -> Result<BTreeMap<String, String>> {
        let list = Api::<Service>::namespaced(self.lab.client.clone(), &self.svc_ns)
            .list(&ListParams::default())
            .await?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|s| {
                let ip = s.status?.load_balancer?.ingress?.into_iter().next()?.ip?;
                Some((s.metadata.name?, ip))
            })
            .collect())
    }

    /// Whether the state is converged: every Service (`want` of them) has an address,
    /// the router has exactly their /32s from every node over Established sessions, and
    /// every Service has one ServiceBGPStatus per node naming a peer, and there are no
    /// others. `Err` says what is missing.
    async fn converged(&self, want: usize) -> Result<std::result::Result<(), String>> {
        let ips = self.ips().await?;
        if ips.len() != want {
            return Ok(Err(format!(
                "{} of {want} Services have an address",
                ips.len()
            )));
        }
        let expected: BTreeSet<String> = ips.values().map(|ip| format!("{ip}/32")).collect();
        let (summary, table) = tokio::task::block_in_place(|| self.router_state())?;
        for n in 1..=NODES {
            let a = plan::node_v4(n).to_string();
            let state = summary.get(&a).map(|s| s.0.as_str()).unwrap_or("absent");
            if state != "Established" {
                return Ok(Err(format!("router<-{a} {state}")));
            }
            let got = table.get(&a).cloned().unwrap_or_default();
            if got != expected {
                let missing = expected.difference(&got).count();
                let stale: Vec<&String> = got.difference(&expected).collect();
                return Ok(Err(format!(
                    "router<-{a}: {missing} missing, stale {stale:?}"
                )));
            }
        }
        if table
            .keys()
            .any(|peer| !(1..=NODES).any(|n| plan::node_v4(n).to_string() == *peer))
        {
            return Ok(Err(format!("paths from unknown peers: {:?}", table.keys())));
        }
        let statuses = self
            .metallb("ServiceBGPStatus")
            .list(&ListParams::default())
            .await?;
        let mut got: BTreeMap<(String, String), usize> = BTreeMap::new();
        let mut bad = 0;
        for s in &statuses.items {
            let st = &s.data["status"];
            let peers = st["peers"].as_array().map_or(0, |p| p.len());
            if peers == 0 || st["serviceNamespace"] != self.svc_ns.as_str() {
                bad += 1;
            }
            *got.entry((
                st["serviceName"].as_str().unwrap_or_default().to_owned(),
                st["node"].as_str().unwrap_or_default().to_owned(),
            ))
            .or_default() += 1;
        }
        let mut want_status = BTreeMap::new();
        for svc in ips.keys() {
            for n in 1..=NODES {
                want_status.insert((svc.clone(), plan::node_name(n)), 1usize);
            }
        }
        if got != want_status || bad > 0 {
            return Ok(Err(format!(
                "ServiceBGPStatus: {} objects ({bad} without peers), {} wanted",
                statuses.items.len(),
                want_status.len()
            )));
        }
        Ok(Ok(()))
    }

    /// Starts again every speaker that exited, as the kubelet would (at once here: the
    /// kubelet's back-off would add 10 s and more); counted in `speaker_exits`.
    fn supervise(&mut self) -> Result<()> {
        for n in 1..=NODES {
            let exited = match self.speakers[n - 1].as_mut() {
                Some(c) => !c.is_running(),
                None => false,
            };
            if exited {
                eprintln!(
                    "bench-bgp-faults: {}'s speaker exited: started again",
                    plan::node_name(n)
                );
                self.speaker_exits += 1;
                self.start_speaker(n)?;
            }
        }
        Ok(())
    }

    /// Sleeps `d`, supervising the speakers.
    async fn sleep_supervised(&mut self, d: Duration) -> Result<()> {
        let until = Instant::now() + d;
        while Instant::now() < until {
            self.supervise()?;
            tokio::time::sleep(Duration::from_millis(200).min(until - Instant::now())).await;
        }
        Ok(())
    }

    /// Waits for [`Bench::converged`] (supervising the speakers); returns when.
    async fn wait_converged(&mut self, want: usize, timeout: Duration) -> Result<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            self.supervise()?;
            match self.converged(want).await {
                Ok(Ok(())) => return Ok(Instant::now()),
                Ok(Err(why)) if Instant::now() > deadline => {
                    bail!("not converged after {timeout:?}: {why}")
                }
                Err(e) if Instant::now() > deadline => {
                    bail!("not converged after {timeout:?}: {e:#}")
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    fn want(&self, opts: &Opts) -> usize {
        opts.services + self.probes + self.extra_services
    }

    /// (state, prefixes received) and the prefixes per neighbor address, from FRR or,
    /// in a bird-restart round, from BIRD.
    #[allow(clippy::type_complexity)]
    fn router_state(
        &self,
    ) -> Result<(
        BTreeMap<String, (String, u64)>,
        BTreeMap<String, BTreeSet<String>>,
    )> {
        let Some(bird) = &self.bird else {
            let view = self.view();
            return Ok((view.summary()?, view.table()?));
        };
        let mut summary = BTreeMap::new();
        for p in bird.protocols()?.into_iter().filter(|p| p.proto == "BGP") {
            if let Some(a) = p.neighbor_address.clone() {
                summary.insert(a, (p.bgp_state.clone().unwrap_or(p.info.clone()), 0));
            }
        }
        let mut table: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for r in bird.routes()? {
            if let Some(n) = (1..=NODES).find(|&n| bird_proto(n) == r.protocol) {
                table
                    .entry(plan::node_v4(n).to_string())
                    .or_default()
                    .insert(r.prefix);
            }
        }
        Ok((summary, table))
    }

    fn bird_log(&self) -> PathBuf {
        self.net.net.ns("router").state_dir().join("bird/bird.log")
    }

    /// Starts BIRD in `router` (its earlier log kept aside).
    fn start_bird(&mut self) -> Result<()> {
        let ns = self.net.net.ns("router").clone();
        let dir = ns.state_dir().join("bird");
        if dir.exists() {
            self.bird_runs += 1;
            let keep = self.dir.join(format!("bird-{}.log", self.bird_runs));
            let _ = std::fs::copy(dir.join("bird.log"), keep);
            std::fs::remove_dir_all(&dir)?;
        }
        let text = bird_config(&dir.join("bird.log"), self.graceful)?;
        self.bird = Some(Bird::start_raw(&ns, &text).context("BIRD in router")?);
        Ok(())
    }

    /// Starts FRR in `router` (its earlier log kept aside).
    fn start_frr(&mut self) -> Result<()> {
        let dir = self.net.net.ns("router").state_dir().join("frr");
        if dir.exists() {
            self.router_restarts += 1;
            let keep = self
                .dir
                .join(format!("router-{}.log", self.router_restarts));
            let _ = std::fs::copy(dir.join("bench.log"), keep);
            std::fs::remove_dir_all(&dir)?;
        }
        let frr = Frr::start(
            self.net.net.ns("router"),
            &router_config(&self.router_log(), self.graceful),
        )?;
        self.frr = Some(frr);
        Ok(())
    }

    /// FRR out, BIRD in.
    fn swap_to_bird(&mut self) -> Result<()> {
        if let Some(f) = self.frr.take() {
            f.stop()?;
        }
        self.start_bird()
    }

    /// BIRD out (its log kept aside), FRR in.
    fn swap_to_frr(&mut self) -> Result<()> {
        if let Some(b) = self.bird.take() {
            b.stop()?;
            self.bird_runs += 1;
            let keep = self.dir.join(format!("bird-{}.log", self.bird_runs));
            let _ = std::fs::copy(self.bird_log(), keep);
        }
        self.start_frr()
    }

    /// Stops BIRD, keeps its log aside, starts it again with the same configuration.
    fn restart_bird(&mut self, tail: &mut Tail, events: &mut Vec<Logged>) -> Result<()> {
        events.extend(tail.events());
        if let Some(b) = self.bird.take() {
            b.stop()?;
        }
        self.start_bird()?;
        *tail = Tail {
            path: self.bird_log(),
            offset: 0,
            partial: String::new(),
            bird: true,
        };
        Ok(())
    }

    /// Ours: a BFDProfile on the BGPPeer and `neighbor X bfd profile` at FRR, then every
    /// node's BFD session up at the router.
    async fn enable_bfd(&mut self) -> Result<()> {
        let (rx, tx, mult) = BFD;
        let profile = "bench-bfd";
        let existing = self.metallb("BFDProfile").get_opt(profile).await?;
        if existing.is_none() {
            self.create_metallb(
                "BFDProfile",
                profile,
                json!({"receiveInterval": rx, "transmitInterval": tx, "detectMultiplier": mult}),
            )
            .await?;
        }
        self.metallb("BGPPeer")
            .patch(
                "router",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"bfdProfile": profile}})),
            )
            .await
            .context("BGPPeer bfdProfile")?;
        let frr = self.frr.as_ref().context("FRR is not running")?;
        let mut lines = vec![
            "bfd".to_owned(),
            format!("profile {profile}"),
            format!("receive-interval {rx}"),
            format!("transmit-interval {tx}"),
            format!("detect-multiplier {mult}"),
            "exit".to_owned(),
            "exit".to_owned(),
            format!("router bgp {}", plan::ROUTER_AS),
        ];
        for n in 1..=NODES {
            lines.push(format!(
                "neighbor {} bfd profile {profile}",
                plan::node_v4(n)
            ));
        }
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        tokio::task::block_in_place(|| {
            frr.configure(&refs)?;
            for n in 1..=NODES {
                frr.wait_bfd_status(plan::node_v4(n).into(), "up", Duration::from_secs(60))?;
            }
            anyhow::Ok(())
        })
    }

    /// Every node's BFD session up at the router on the profile's timers, for 3 s on end.
    async fn wait_bfd_settled(&self) -> Result<()> {
        let frr = self.frr.as_ref().context("FRR is not running")?;
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut since: Option<Instant> = None;
        loop {
            let peers = tokio::task::block_in_place(|| frr.bfd_peers())?;
            let ok = (1..=NODES).all(|n| {
                let a = plan::node_v4(n).to_string();
                peers.iter().any(|p| {
                    p.peer == a
                        && p.status == "up"
                        && p.transmit_interval_ms == Some(u64::from(BFD.1))
                        && p.remote_transmit_interval_ms == Some(u64::from(BFD.0))
                })
            });
            match (ok, since) {
                (true, Some(t)) if t.elapsed() >= Duration::from_secs(3) => return Ok(()),
                (true, None) => since = Some(Instant::now()),
                (false, _) => since = None,
                _ => {}
            }
            ensure!(
                Instant::now() < deadline,
                "BFD not settled at the router: {:?}",
                peers
                    .iter()
                    .map(|p| (
                        &p.peer,
                        &p.status,
                        p.transmit_interval_ms,
                        p.remote_transmit_interval_ms
                    ))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Cuts node-1's cable until the router's session with it is down, + 2 s; records
    /// the time from the cut to the session down as `hold_expiry_ms` (BFD or hold timer).
    async fn cut_node1(
        &mut self,
        tail: &mut Tail,
        events: &mut Vec<Logged>,
        extra: &mut serde_json::Map<String, Value>,
        fault_us: i64,
    ) -> Result<Instant> {
        let cut = self.net.net.cut_cable(&plan::node_name(1))?;
        let a = plan::node_v4(1).to_string();
        let deadline = Instant::now() + Duration::from_secs(u64::from(HOLD_S) * 3);
        let down = loop {
            events.extend(tail.events());
            if let Some(e) = events
                .iter()
                .find(|e| e.peer == a && e.event == Event::Down)
            {
                break e.at_us;
            }
            ensure!(
                Instant::now() < deadline,
                "the router never saw node-1's session go down"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        extra.insert(
            "hold_expiry_ms".into(),
            json!((down - fault_us) as f64 / 1000.0),
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        cut.restore()?;
        Ok(Instant::now())
    }

    async fn run(&mut self, controller_bin: &Path, opts: &Opts) -> Result<Value> {
        let (ckc, cuser) = self.account("controller").await?;
        let (skc, suser) = self.account("speaker").await?;
        self.speaker_kubeconfig = skc;
        self.speaker_user = suser;
        self.controller_user = cuser;
        for n in 1..=NODES {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("speaker-{}", plan::node_name(n)), "namespace": self.cfg_ns,
                             "labels": {"app": "metallb", "component": "speaker"}},
                "spec": {"nodeName": plan::node_name(n), "hostNetwork": true,
                         "terminationGracePeriodSeconds": 0,
                         "serviceAccountName": "speaker", "automountServiceAccountToken": false,
                         "containers": [{"name": "speaker", "image": "bench.invalid/speaker"}]},
            }))?;
            Api::<Pod>::namespaced(self.lab.client.clone(), &self.cfg_ns)
                .create(&PostParams::default(), &pod)
                .await?;
        }
        self.create_metallb("IPAddressPool", "pool", json!({"addresses": [POOL]}))
            .await?;
        let mut peer = json!({
            "myASN": plan::NODE_AS, "peerASN": plan::ROUTER_AS,
            "peerAddress": plan::ROUTER_V4.to_string(),
            // No keepaliveTime: MetalLB's native mode refuses it (hold / 3 on both).
            "holdTime": format!("{HOLD_S}s"),
        });
        if self.graceful {
            peer["enableGracefulRestart"] = json!(true);
        }
        self.create_metallb("BGPPeer", "router", peer).await?;
        self.create_metallb("BGPAdvertisement", "all", json!({}))
            .await?;
        for i in 0..opts.services {
            self.create_service(&format!("svc-{i:03}"), 1 + i % NODES)
                .await?;
        }

        let ckc_s = ckc.to_str().context("path")?.to_owned();
        let mut cmd = self.net.net.client().command(controller_bin);
        cmd.args(self.kind.controller_args(&self.cfg_ns));
        if self.kind == Kind::Ours && opts.sabotage && opts.faults.contains(&Fault::LeaseLoss) {
            // Unfenced: it holds another Lease than the one lease-loss takes.
            cmd.args(["--leader-elect-resource-name", SABOTAGE_LEASE]);
        }
        cmd.env("KUBECONFIG", &ckc_s)
            .env("METALLB_NAMESPACE", &self.cfg_ns)
            .env("METALLB_POD_NAME", "controller");
        let mut controller = NsChild::spawn_logged(cmd, &self.dir.join("controller.log"))?;
        for n in 1..=NODES {
            self.start_speaker(n)?;
        }
        let t = Instant::now();
        self.wait_converged(self.want(opts), Duration::from_secs(120))
            .await
            .context("initial convergence")?;
        eprintln!(
            "bench-bgp-faults: {} Services at the router from {NODES} nodes after {:.1} s",
            opts.services,
            t.elapsed().as_secs_f64()
        );

        let mut figures = serde_json::Map::new();
        for &fault in &opts.faults {
            let rounds = if fault == Fault::ApiFreeze {
                opts.freeze_rounds
            } else {
                opts.rounds
            };
            let mut per = Vec::new();
            for r in 0..rounds {
                let v = self
                    .round(fault, opts)
                    .await
                    .with_context(|| format!("{} round {}", fault.name(), r + 1))?;
                eprintln!(
                    "bench-bgp-faults: {} {} round {}: {v}",
                    self.kind.name(),
                    fault.name(),
                    r + 1
                );
                per.push(v);
            }
            figures.insert(
                fault.name().into(),
                json!({"summary": summarise(&per), "rounds": per}),
            );
        }
        controller.stop_with(Signal::TERM, Duration::from_secs(10))?;
        Ok(Value::Object(figures))
    }

    async fn round(&mut self, fault: Fault, opts: &Opts) -> Result<Value> {
        let bfd = fault == Fault::BfdCut && self.kind == Kind::Ours;
        if fault == Fault::BirdRestart {
            tokio::task::block_in_place(|| self.swap_to_bird())?;
        }
        if bfd {
            self.enable_bfd().await?;
            // Enabling resets no session (before the fix in `bfd` a router re-registering
            // its BFD session as BGP came up did), but a fresh BFD session starts on slow
            // timers (1 s): the cut must come once the sessions are up and BFD is up on
            // its 100 ms timers at the router.
            self.wait_converged(self.want(opts), Duration::from_secs(120))
                .await
                .context("after enabling BFD")?;
            self.wait_bfd_settled().await?;
        }
        let r = self.round_inner(fault, opts).await;
        if fault == Fault::BirdRestart {
            tokio::task::block_in_place(|| self.swap_to_frr())?;
        }
        let mut v = r?;
        if fault == Fault::BfdCut {
            v["bfd"] = json!(bfd.then(|| format!("{}ms x {}", BFD.0, BFD.2)));
        }
        Ok(v)
    }

    async fn round_inner(&mut self, fault: Fault, opts: &Opts) -> Result<Value> {
        self.wait_converged(self.want(opts), Duration::from_secs(120))
            .await
            .context("before the round")?;
        let before = Before {
            ips: self.ips().await?,
        };
        let audit_from = file_len(&self.audit);
        let exits_before = self.speaker_exits;
        let mut tail = if self.bird.is_some() {
            let mut t = Tail::from_end(&self.bird_log());
            t.bird = true;
            t
        } else {
            Tail::from_end(&self.router_log())
        };
        let mut events: Vec<Logged> = Vec::new();
        let sampler = Sampler::start(
            self.view(),
            fault == Fault::SpeakerRestartApiDown && self.graceful,
        );
        let fault_us = now_us();
        let t0 = Instant::now();
        let mut extra = serde_json::Map::new();
        // The fault; `end` is when it is undone (the API server answers again, the router
        // is back, the cable restored).
        let end: Instant = match fault {
            Fault::Quiet => {
                tokio::time::sleep(Duration::from_secs(10)).await;
                Instant::now()
            }
            Fault::ApiKill => {
                self.api.kill()?;
                self.sabotage(opts, opts.api_down / 2).await?;
                tokio::time::sleep(opts.api_down.saturating_sub(t0.elapsed())).await;
                let restart = Instant::now();
                self.api.start()?;
                let up = wait_api(self.lab).await?;
                extra.insert("api_start_ms".into(), json!(ms(up.duration_since(restart))));
                up
            }
            Fault::ApiFreeze => {
                let stopped = Stopped::stop(self.api.pid()?);
                self.sabotage(opts, opts.freeze / 2).await?;
                tokio::time::sleep(opts.freeze.saturating_sub(t0.elapsed())).await;
                drop(stopped);
                wait_api(self.lab).await?
            }
            Fault::RouterRestart => {
                self.restart_router(&mut tail, &mut events)?;
                Instant::now()
            }
            Fault::Cut | Fault::BfdCut => {
                self.cut_node1(&mut tail, &mut events, &mut extra, fault_us)
                    .await?
            }
            Fault::Flap => {
                let view = self.view();
                let a = plan::node_v4(1).to_string();
                for _ in 0..10 {
                    let t = Instant::now();
                    tokio::task::block_in_place(|| {
                        let mut c = view.ns.command("vtysh");
                        c.arg("--vty_socket")
                            .arg(&view.dir)
                            .arg("-c")
                            .arg(format!("clear bgp {a}"));
                        let out = c.output()?;
                        ensure!(out.status.success(), "clear bgp: {}", out.status);
                        anyhow::Ok(())
                    })?;
                    tokio::time::sleep(Duration::from_secs(1).saturating_sub(t.elapsed())).await;
                }
                Instant::now()
            }
            Fault::SpeakerRestartApiDown => {
                self.api.kill()?;
                self.kill_speaker(1)?;
                self.start_speaker(1)?;
                self.sleep_supervised(opts.api_down_long.saturating_sub(t0.elapsed()))
                    .await?;
                // What the router holds of node-1 just before the API server comes back.
                let view = self.view();
                let (pfx, stale) =
                    tokio::task::block_in_place(|| anyhow::Ok((view.summary()?, view.stale()?)))?;
                let a = plan::node_v4(1).to_string();
                extra.insert(
                    "node1_at_api_back".into(),
                    json!({"state": pfx.get(&a).map(|p| p.0.clone()),
                           "pfx": pfx.get(&a).map(|p| p.1), "stale": stale.get(&a)}),
                );
                self.api.start()?;
                wait_api(self.lab).await?
            }
            Fault::BirdRestart => {
                tokio::task::block_in_place(|| self.restart_bird(&mut tail, &mut events))?;
                Instant::now()
            }
            Fault::EtcdCompact => {
                let etcd = self
                    .api
                    .arg("--etcd-servers")
                    .and_then(|e| e.split(',').next())
                    .context("the API server's --etcd-servers")?
                    .to_owned();
                let rev = tokio::task::block_in_place(|| {
                    let rev = etcd_revision(&etcd)?;
                    etcd_post(
                        &etcd,
                        "/v3/kv/compaction",
                        &json!({"revision": rev.to_string(), "physical": true}),
                    )?;
                    anyhow::Ok(rev)
                })?;
                extra.insert("compacted_revision".into(), json!(rev));
                if !self.lists_audited {
                    self.audit_lists()?;
                }
                self.api.kill()?;
                self.sabotage(opts, Duration::from_millis(500)).await?;
                let restart = Instant::now();
                self.api.start()?;
                let up = wait_api(self.lab).await?;
                extra.insert("api_start_ms".into(), json!(ms(up.duration_since(restart))));
                up
            }
            Fault::LeaseLoss => self.lease_loss(opts, &mut extra).await?,
        };
        // A probe Service created once the fault is undone: served again end to end.
        self.probes += 1;
        let probe = format!("probe-{:03}", self.probes);
        // Retried: a restarted API server's cluster-IP allocator answers "range is full"
        // until it has synced (seconds).
        let created = loop {
            match self.create_service(&probe, 1 + self.probes % NODES).await {
                Ok(()) => break Instant::now(),
                Err(e) if end.elapsed() < Duration::from_secs(60) => {
                    eprintln!("bench-bgp-faults: {probe}: {e:#}: again");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => return Err(e),
            }
        };
        extra.insert(
            "probe_created_ms".into(),
            json!(ms(created.duration_since(end))),
        );
        let converged = self
            .wait_converged(self.want(opts), CONVERGE_TIMEOUT)
            .await?;
        tokio::time::sleep(WRITES_AFTER).await;
        let seen = sampler.finish();
        let done_us = now_us();
        events.extend(tail.events());
        let after = self.ips().await?;

        // Per node: withdrawals and session downs at the router, over the whole round.
        let mut withdrawn = 0usize;
        let mut downs = 0usize;
        let mut ups = 0usize;
        let mut rcvd_node1 = 0usize;
        for e in &events {
            if !(1..=NODES).any(|n| plan::node_v4(n).to_string() == e.peer) {
                continue;
            }
            match &e.event {
                Event::Withdrawn(_) => withdrawn += 1,
                Event::Down => downs += 1,
                Event::Up => ups += 1,
                Event::Rcvd(_) if e.peer == plan::node_v4(1).to_string() => rcvd_node1 += 1,
                Event::Rcvd(_) => {}
            }
        }
        let low: u64 = (1..=NODES)
            .map(|n| {
                seen.min_pfx
                    .get(&plan::node_v4(n).to_string())
                    .copied()
                    .unwrap_or(0)
            })
            .min()
            .unwrap_or(0);
        let moved: Vec<String> = before
            .ips
            .iter()
            .filter(|(name, ip)| after.get(*name) != Some(*ip))
            .map(|(name, ip)| format!("{name} {ip}->{:?}", after.get(name)))
            .collect();
        let (speaker_writes, speaker_per) = audit_writes(
            &self.audit,
            audit_from,
            &self.speaker_user,
            fault_us,
            done_us,
        )?;
        let (controller_writes, controller_per) = audit_writes(
            &self.audit,
            audit_from,
            &self.controller_user,
            fault_us,
            done_us,
        )?;
        // The probe costs one status object per node (and perhaps one rewrite each).
        let storm = speaker_writes > 2 * (NODES * (self.want(opts)));
        let mut violations = Vec::new();
        if fault.api_only() {
            if withdrawn > 0 {
                violations.push(format!("{withdrawn} withdrawals at the router"));
            }
            if downs > 0 {
                violations.push(format!("{downs} session downs at the router"));
            }
            if low < opts.services as u64 + self.probes as u64 - 1 {
                violations.push(format!("prefix count fell to {low} at the router"));
            }
        }
        if !moved.is_empty() {
            violations.push(format!("moved: {moved:?}"));
        }
        if storm {
            violations.push(format!("write storm: {speaker_writes} speaker writes"));
        }
        let mut v = json!({
            "fault_ms": ms(end.duration_since(t0)),
            "converge_ms": ms(converged.duration_since(end)),
            "withdrawn": withdrawn,
            "session_downs": downs,
            "session_ups": ups,
            "node1_updates_rcvd": rcvd_node1,
            "min_prefixes": low,
            "moved": moved.len(),
            "speaker_writes": speaker_writes,
            "speaker_writes_per": speaker_per,
            "controller_writes": controller_writes,
            "controller_writes_per": controller_per,
            "speaker_exits": self.speaker_exits - exits_before,
            "samples": seen.samples,
            "sample_errors": seen.errors,
            "max_stale": seen.max_stale,
            "violations": violations,
        });
        for (k, x) in extra {
            v[k] = x;
        }
        if matches!(fault, Fault::RouterRestart | Fault::BirdRestart) {
            v["reannounce_ms"] = reannounce(&events, fault_us, &self.ips().await?);
            // When each node's session came up again, from the restart.
            let mut up = serde_json::Map::new();
            for n in 1..=NODES {
                let a = plan::node_v4(n).to_string();
                let at = events
                    .iter()
                    .filter(|e| e.peer == a && e.event == Event::Up && e.at_us >= fault_us)
                    .map(|e| e.at_us)
                    .next_back();
                up.insert(
                    plan::node_name(n),
                    json!(at.map(|t| (t - fault_us) as f64 / 1000.0)),
                );
            }
            v["session_up_ms"] = Value::Object(up);
        }
        if fault == Fault::EtcdCompact {
            let (s, sp) = audit_count(
                &self.audit,
                audit_from,
                &self.speaker_user,
                fault_us,
                done_us,
                &["list"],
            )?;
            let (c, cp) = audit_count(
                &self.audit,
                audit_from,
                &self.controller_user,
                fault_us,
                done_us,
                &["list"],
            )?;
            v["relists"] = json!([s, c]);
            v["relists_speakers_per"] = json!(sp);
            v["relists_controller_per"] = json!(cp);
        }
        if fault == Fault::LeaseLoss {
            let reqs =
                audit_requests(&self.audit, audit_from, &self.controller_user, &WRITE_VERBS)?;
            let (figures, bad) = lease_checks(
                &after,
                &reqs,
                v["steal_us"].as_i64(),
                v["regain_us"].as_i64(),
            );
            for (k, x) in figures {
                v[k] = x;
            }
            if let Some(list) = v["violations"].as_array_mut() {
                list.extend(bad.into_iter().map(Value::from));
            }
        }
        Ok(v)
    }

    /// With `--sabotage`, SIGKILLs node-1's speaker `after` into an API fault (and starts
    /// it again): the checks must then see its routes withdrawn.
    async fn sabotage(&mut self, opts: &Opts, after: Duration) -> Result<()> {
        if !opts.sabotage {
            return Ok(());
        }
        tokio::time::sleep(after).await;
        eprintln!("bench-bgp-faults: sabotage: SIGKILL node-1's speaker");
        self.kill_speaker(1)?;
        self.start_speaker(1)
    }

    /// Stops FRR, keeps its log aside, starts it again with the same configuration.
    fn restart_router(&mut self, tail: &mut Tail, events: &mut Vec<Logged>) -> Result<()> {
        events.extend(tail.events());
        if let Some(f) = self.frr.take() {
            f.stop()?;
        }
        self.start_frr()?;
        *tail = Tail {
            path: self.router_log(),
            offset: 0,
            partial: String::new(),
            bird: false,
        };
        Ok(())
    }

    /// The API server's audit policy with lists recorded too (metadata), for the next
    /// start: the re-lists after etcd-compact are counted per user.
    fn audit_lists(&mut self) -> Result<()> {
        let cur = self
            .api
            .arg("--audit-policy-file")
            .context("the API server's --audit-policy-file")?;
        let text = std::fs::read_to_string(cur)?;
        let anchor = "- level: None";
        ensure!(text.contains(anchor), "audit policy without {anchor:?}");
        let text = text.replacen(
            anchor,
            "- level: Metadata\n  verbs: [list]\n- level: None",
            1,
        );
        let path = self.dir.join("audit-policy-lists.yaml");
        std::fs::write(&path, text)?;
        self.api
            .set_arg("--audit-policy-file", path.to_str().context("path")?);
        self.lists_audited = true;
        Ok(())
    }

    /// lease-loss: `LEASE_BURST` Services; once the first third is being served, ours'
    /// Lease is taken (another holder, renewed now), then the rest are created. Returns
    /// when ours leads again (MetalLB: when the Services are created).
    async fn lease_loss(
        &mut self,
        opts: &Opts,
        extra: &mut serde_json::Map<String, Value>,
    ) -> Result<Instant> {
        let base = self.extra_services;
        let names: Vec<String> = (0..LEASE_BURST)
            .map(|i| format!("burst-{:03}", base + i))
            .collect();
        self.extra_services += LEASE_BURST;
        let first = LEASE_BURST / 3;
        for (i, name) in names.iter().enumerate().take(first) {
            self.create_service(name, 1 + i % NODES).await?;
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        let served = loop {
            let ips = self.ips().await?;
            let n = names.iter().filter(|n| ips.contains_key(*n)).count();
            if n > 0 {
                break n;
            }
            ensure!(Instant::now() < deadline, "no burst Service got an address");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        extra.insert("allocated_at_steal".into(), json!(served));
        let leases = Api::<Lease>::namespaced(self.lab.client.clone(), &self.cfg_ns);
        let mut steal_us = None;
        if self.kind == Kind::Ours {
            if opts.sabotage && leases.get_opt(LEASE_NAME).await?.is_none() {
                // Nobody holds it: the bench makes it, for the controller to ignore.
                let l: Lease = serde_json::from_value(json!({
                    "metadata": {"name": LEASE_NAME, "namespace": self.cfg_ns},
                    "spec": {"holderIdentity": "bench-sabotage", "leaseDurationSeconds": 15},
                }))?;
                leases.create(&PostParams::default(), &l).await?;
            }
            let mut l = leases
                .get(LEASE_NAME)
                .await
                .context("the controller's Lease")?;
            let spec = l.spec.get_or_insert_default();
            extra.insert("holder".into(), json!(spec.holder_identity));
            let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
            spec.holder_identity = Some(THIEF.into());
            spec.acquire_time = Some(now.clone());
            spec.renew_time = Some(now);
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            leases
                .replace(LEASE_NAME, &PostParams::default(), &l)
                .await
                .context("taking the Lease")?;
            let at = now_us();
            steal_us = Some(at);
            extra.insert("steal_us".into(), json!(at));
        }
        let steal = Instant::now();
        // Half of the rest at once (allocations in flight at the loss), half after the
        // old term's renew deadline (nobody may allocate them until the Lease is back).
        let second = first + (LEASE_BURST - first) / 2;
        for (i, name) in names.iter().enumerate().take(second).skip(first) {
            self.create_service(name, 1 + i % NODES).await?;
        }
        tokio::time::sleep(
            (RENEW_DEADLINE + Duration::from_secs(1)).saturating_sub(steal.elapsed()),
        )
        .await;
        for (i, name) in names.iter().enumerate().skip(second) {
            self.create_service(name, 1 + i % NODES).await?;
        }
        if steal_us.is_none() {
            return Ok(Instant::now());
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let mut l = leases.get(LEASE_NAME).await?;
            if opts.sabotage && steal.elapsed() > Duration::from_secs(20) {
                // The unfenced controller never takes it back: the bench hands it on.
                if let Some(spec) = l.spec.as_mut() {
                    spec.holder_identity = Some("bench-sabotage-returned".into());
                }
                l = leases
                    .replace(LEASE_NAME, &PostParams::default(), &l)
                    .await?;
            }
            let holder = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
            if holder != THIEF {
                extra.insert("regain_us".into(), json!(now_us()));
                extra.insert("regain_seen_ms".into(), json!(ms(steal.elapsed())));
                extra.insert("new_holder".into(), json!(holder));
                return Ok(Instant::now());
            }
            ensure!(
                Instant::now() < deadline,
                "the controller never took its Lease back"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// lease-loss's checks, from the Services' addresses after the round and the
/// controller's audited writes: figures, and violations (an address given twice; a write
/// after the steal + the renew deadline before the controller holds the Lease again).
/// `steal_us` / `seen_back_us` (when the bench took the Lease / saw it back) are `None`
/// for MetalLB (no Lease).
fn lease_checks(
    ips: &BTreeMap<String, String>,
    reqs: &[Audited],
    steal_us: Option<i64>,
    seen_back_us: Option<i64>,
) -> (serde_json::Map<String, Value>, Vec<String>) {
    let mut figures = serde_json::Map::new();
    let mut bad = Vec::new();
    let mut seen: BTreeMap<&String, Vec<&String>> = BTreeMap::new();
    for (name, ip) in ips {
        seen.entry(ip).or_default().push(name);
    }
    let twice: Vec<String> = seen
        .iter()
        .filter(|(_, n)| n.len() > 1)
        .map(|(ip, n)| format!("{ip}: {n:?}"))
        .collect();
    if !twice.is_empty() {
        bad.push(format!("addresses given twice: {twice:?}"));
    }
    let (Some(steal), Some(seen_back)) = (steal_us, seen_back_us) else {
        return (figures, bad);
    };
    let ours_lease = |r: &&Audited| r.what == "leases" && r.name == LEASE_NAME && r.at_us >= steal;
    // Back: its first successful write of the Lease after the steal (the bench's poll
    // sees it some ms later); else when the bench saw it.
    let regain = reqs
        .iter()
        .filter(ours_lease)
        .filter(|r| (200..300).contains(&r.code))
        .map(|r| r.at_us)
        .min()
        .unwrap_or(seen_back);
    // Told: its first write of the Lease after the steal (a 409: renewal lost).
    let learned = reqs
        .iter()
        .filter(ours_lease)
        .map(|r| r.at_us)
        .min()
        .unwrap_or(regain);
    let others: Vec<&Audited> = reqs
        .iter()
        .filter(|r| r.what != "leases" && r.at_us >= steal && r.at_us < regain)
        .collect();
    let after_learned = others.iter().filter(|r| r.at_us > learned).count();
    let deadline = steal + RENEW_DEADLINE.as_micros() as i64;
    let after_deadline = others.iter().filter(|r| r.at_us >= deadline).count();
    figures.insert("regain_ms".into(), json!((regain - steal) as f64 / 1000.0));
    figures.insert("writes_after_steal".into(), json!(others.len()));
    figures.insert("writes_after_failed_renewal".into(), json!(after_learned));
    figures.insert(
        "last_write_after_steal_ms".into(),
        json!(
            others
                .iter()
                .map(|r| (r.at_us - steal) as f64 / 1000.0)
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
        ),
    );
    figures.insert(
        "learned_ms".into(),
        json!((learned - steal) as f64 / 1000.0),
    );
    figures.insert(
        "lease_writes_until_regain".into(),
        json!(
            reqs.iter()
                .filter(ours_lease)
                .filter(|r| r.at_us <= regain)
                .map(|r| format!("{} {}", r.verb, r.code))
                .collect::<Vec<_>>()
        ),
    );
    // Writes after a failed renewal are still in the old term (it ends at the renew
    // deadline, client-go's rule, or when the leader reads another holder): counted, not
    // a violation.
    if after_deadline > 0 {
        bad.push(format!(
            "{after_deadline} controller writes after the renew deadline"
        ));
    }
    (figures, bad)
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// Per node: from the router's session Up (the last one after `from_us`) to the last
/// of the Services' /32s received from that node after it (ms), or null.
fn reannounce(events: &[Logged], from_us: i64, ips: &BTreeMap<String, String>) -> Value {
    let want: BTreeSet<String> = ips.values().map(|ip| format!("{ip}/32")).collect();
    let mut out = serde_json::Map::new();
    for n in 1..=NODES {
        let a = plan::node_v4(n).to_string();
        let up = events
            .iter()
            .filter(|e| e.peer == a && e.event == Event::Up && e.at_us >= from_us)
            .map(|e| e.at_us)
            .next_back();
        let Some(up) = up else {
            out.insert(plan::node_name(n), Value::Null);
            continue;
        };
        let mut got = BTreeSet::new();
        let mut last = None;
        for e in events.iter().filter(|e| e.peer == a && e.at_us >= up) {
            if let Event::Rcvd(p) = &e.event
                && want.contains(p)
                && got.insert(p.clone())
                && got.len() == want.len()
            {
                last = Some(e.at_us);
                break;
            }
        }
        out.insert(
            plan::node_name(n),
            last.map_or(Value::Null, |l| json!((l - up) as f64 / 1000.0)),
        );
    }
    Value::Object(out)
}

/// Per fault: rounds, the sum of violations, and median/max of the main figures.
fn summarise(rounds: &[Value]) -> Value {
    let nums = |key: &str| -> Vec<f64> {
        let mut v: Vec<f64> = rounds.iter().filter_map(|r| r[key].as_f64()).collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        v
    };
    let med_max = |v: Vec<f64>| -> Value {
        if v.is_empty() {
            return Value::Null;
        }
        json!([v[v.len() / 2], v[v.len() - 1]])
    };
    let sum = |key: &str| -> f64 { rounds.iter().filter_map(|r| r[key].as_f64()).sum() };
    let violations: usize = rounds
        .iter()
        .map(|r| r["violations"].as_array().map_or(0, |v| v.len()))
        .sum();
    let mut reann: Vec<f64> = rounds
        .iter()
        .flat_map(|r| {
            r["reannounce_ms"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(_, v)| v.as_f64())
                .collect::<Vec<_>>()
        })
        .collect();
    reann.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    json!({
        "rounds": rounds.len(),
        "violations": violations,
        "converge_ms": med_max(nums("converge_ms")),
        "withdrawn": sum("withdrawn"),
        "session_downs": sum("session_downs"),
        "moved": sum("moved"),
        "speaker_writes": med_max(nums("speaker_writes")),
        "controller_writes": med_max(nums("controller_writes")),
        "hold_expiry_ms": med_max(nums("hold_expiry_ms")),
        "reannounce_ms": med_max(reann),
        "node1_updates_rcvd": med_max(nums("node1_updates_rcvd")),
        "session_ups": med_max(nums("session_ups")),
        "relists": rounds
            .iter()
            .filter_map(|r| r["relists"].as_array().cloned())
            .collect::<Vec<_>>(),
        "regain_ms": med_max(nums("regain_ms")),
        "writes_after_steal": med_max(nums("writes_after_steal")),
        "writes_after_failed_renewal": med_max(nums("writes_after_failed_renewal")),
        "last_write_after_steal_ms": med_max(nums("last_write_after_steal_ms")),
    })
}

fn table(rows: &[(&str, String, Value)]) -> String {
    let f = |v: &Value| -> String {
        match v {
            Value::Array(a) if a.len() == 2 => format!("{} / {}", a[0], a[1]),
            Value::Null => "-".into(),
            v => v.to_string(),
        }
    };
    let mut s = String::from(
        "| impl | fault | rounds | violations | converge ms (median / max) | withdrawn | session downs | moved | speaker writes (median / max) | controller writes | cut -> session down ms | re-announce ms | node-1 UPDATEs | re-lists (speakers, controller) per round | Lease: regained ms / writes after the loss / last one ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (k, fault, v) in rows {
        s.push_str(&format!(
            "| {k} | {fault} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} |\n",
            v["rounds"],
            v["violations"],
            f(&v["converge_ms"]),
            v["withdrawn"],
            v["session_downs"],
            v["moved"],
            f(&v["speaker_writes"]),
            f(&v["controller_writes"]),
            f(&v["hold_expiry_ms"]),
            f(&v["reannounce_ms"]),
            f(&v["node1_updates_rcvd"]),
            v["relists"],
            f(&v["regain_ms"]),
            f(&v["writes_after_steal"]),
            f(&v["last_write_after_steal_ms"]),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bgpd_lines_are_parsed() {
        let r = parse_event(
            "2026/11/26 20:40:01.123456 BGP: [PXVXG-TFNNT] 192.0.2.11(node-1) rcvd 198.51.100.1/32 IPv4 unicast",
        )
        .unwrap();
        assert_eq!(r.peer, "192.0.2.11");
        assert_eq!(r.event, Event::Rcvd("198.51.100.1/32".into()));
        let w = parse_event("2026/11/26 20:40:01.123789 BGP: [X] 192.0.2.12(node-2) rcvd UPDATE about 198.51.100.1/32 IPv4 unicast -- withdrawn").unwrap();
        assert_eq!(w.peer, "192.0.2.12");
        assert_eq!(w.event, Event::Withdrawn("198.51.100.1/32".into()));
        assert_eq!(w.at_us - r.at_us, 333);
        let up = parse_event("2026/11/26 20:40:02.000000 BGP: [M59KS-A3ZXZ] %ADJCHANGE: neighbor 192.0.2.13(Unknown) in vrf default Up").unwrap();
        assert_eq!((up.peer.as_str(), up.event), ("192.0.2.13", Event::Up));
        let down = parse_event("2026/11/26 20:40:02.000000 BGP: [N6SHM-ZXSQ9] %ADJCHANGE: neighbor 192.0.2.13(Unknown) in vrf default Down BGP Notification send").unwrap();
        assert_eq!(down.event, Event::Down);
        assert!(parse_event("2026/11/26 20:40:01.123456 BGP: [X] 192.0.2.11 rcvd UPDATE w/ attr: nexthop 192.0.2.11").is_none());
    }

    #[test]
    fn reannounce_is_from_the_last_up_to_the_last_prefix() {
        let ips: BTreeMap<String, String> = [("a", "198.51.100.1"), ("b", "198.51.100.2")]
            .into_iter()
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .collect();
        let e = |at_us, peer: &str, event| Logged {
            at_us,
            peer: peer.to_owned(),
            event,
        };
        let events = vec![
            e(1_000, "192.0.2.11", Event::Up),
            e(2_000, "192.0.2.11", Event::Down),
            e(10_000, "192.0.2.11", Event::Up),
            e(11_000, "192.0.2.11", Event::Rcvd("198.51.100.1/32".into())),
            e(12_000, "192.0.2.11", Event::Rcvd("198.51.100.1/32".into())),
            e(13_500, "192.0.2.11", Event::Rcvd("198.51.100.2/32".into())),
        ];
        let r = reannounce(&events, 0, &ips);
        assert_eq!(r["node-1"], json!(3.5));
        assert_eq!(r["node-2"], Value::Null);
    }

    #[test]
    fn bird_trace_lines_are_parsed() {
        let up = parse_bird_event("2026-11-29 12:30:01.123456 <TRACE> node2: State changed to up")
            .unwrap();
        assert_eq!((up.peer.as_str(), up.event), ("192.0.2.12", Event::Up));
        let r = parse_bird_event(
            "2026-11-29 12:30:01.123789 <TRACE> node2.ipv4 > added [best] 198.51.100.7/32 unicast",
        )
        .unwrap();
        assert_eq!(r.event, Event::Rcvd("198.51.100.7/32".into()));
        assert_eq!(r.at_us - up.at_us, 333);
        let w = parse_bird_event(
            "2026-11-29 12:30:02.000000 <TRACE> node1.ipv4 > removed [sole] 198.51.100.7/32 unicast",
        )
        .unwrap();
        assert_eq!(
            (w.peer.as_str(), w.event),
            ("192.0.2.11", Event::Withdrawn("198.51.100.7/32".into()))
        );
        assert!(
            parse_bird_event("2026-11-29 12:30:02.000000 <TRACE> static4: State changed to up")
                .is_none()
        );
        assert!(
            parse_bird_event("2026-11-29 12:30:02.000000 <TRACE> node1: State changed to start")
                .is_none()
        );
    }

    #[test]
    fn lease_checks_see_late_writes_and_double_addresses() {
        let w = |at_s: f64, what: &str, name: &str, code: i64| Audited {
            at_us: (at_s * 1e6) as i64,
            verb: "update".into(),
            what: what.into(),
            name: name.into(),
            code,
        };
        let ips: BTreeMap<String, String> = [("a", "198.51.100.1"), ("b", "198.51.100.2")]
            .into_iter()
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .collect();
        // Fenced: in-term writes, a 409, silence, the Lease back at 18 s, writes again.
        let fenced = vec![
            w(100.5, "services/status", "a", 200),
            w(101.0, "leases", LEASE_NAME, 409),
            w(101.5, "services/status", "b", 200),
            w(118.0, "leases", LEASE_NAME, 200),
            w(118.1, "services/status", "c", 200),
        ];
        let (f, bad) = lease_checks(&ips, &fenced, Some(100_000_000), Some(118_050_000));
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(f["regain_ms"], json!(18000.0));
        assert_eq!(f["writes_after_steal"], json!(2));
        assert_eq!(f["writes_after_failed_renewal"], json!(1));
        assert_eq!(f["learned_ms"], json!(1000.0));
        // Unfenced: a write 12 s after the steal, before the Lease is back; and one
        // address given to two Services.
        let mut late = fenced.clone();
        late.insert(3, w(112.0, "services/status", "d", 200));
        let mut twice = ips.clone();
        twice.insert("c".into(), "198.51.100.1".into());
        let (_, bad) = lease_checks(&twice, &late, Some(100_000_000), Some(118_050_000));
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(bad[0].starts_with("addresses given twice"), "{bad:?}");
        assert!(
            bad[1].contains("1 controller writes after the renew deadline"),
            "{bad:?}"
        );
        // MetalLB: no Lease, only the address check.
        let (f, bad) = lease_checks(&ips, &late, None, None);
        assert!(f.is_empty() && bad.is_empty());
    }

    #[test]
    fn faults_parse_by_name() {
        for f in ALL_FAULTS {
            assert_eq!(Fault::parse(f.name()).unwrap(), f);
        }
        assert!(Fault::parse("meteor").is_err());
    }
}
