//! bench-bgp: the BGP benchmarks of the speaker (BENCHMARKS.md, "Speaker: Service to
//! route (BGP)"), with MetalLB's own controller and speaker (native BGP, built by
//! `lab/build-metallb`) as the anchor in the same run, on the same lab, nodes and routers.
//!
//! For each implementation in turn it brings up the test kit's network (node-1..3, FRR
//! routers), runs the implementation's controller (in the `client` namespace) and one
//! speaker per node namespace, all reaching the lab's API server through
//! `testkit::apiproxy`, with the same metallb.io objects, and measures:
//!
//! a. Service created -> /32 received by the FRR router at 192.0.2.1 (bgpd's
//!    `debug bgp updates in` log, microsecond timestamps), Services created one after
//!    another, each with a ready EndpointSlice created before it; with the audit log's
//!    timestamps of the controller's status write in between;
//! c. 1,000 Services created at once (8 clients): time until the router has them from every
//!    node, the status writes per second of the speakers and controller during the burst
//!    and at rest (30 s), and the status objects;
//! b. the speakers restarted with 4 peers (FRR in router, router2, client, and far as a
//!    multihop peer): time from the start to every prefix at every router from every
//!    node, UPDATEs received by the routers, RSS and CPU time of each speaker.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use e2e::bench::Impl as Kind;
use e2e::{Lab, NodeNetwork};
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};
use testkit::apiproxy::ApiProxy;
use testkit::process::Signal;
use testkit::{Frr, FrrConfig, FrrNeighbor, LabOptions, NsChild, plan};

const USAGE: &str = "\
usage: bench-bgp [--impl ours|metallb|both] [--latency N] [--burst N] [--phases abc]
                 [--ours-bin DIR] [--metallb-bin DIR] [--out FILE]

The BGP benchmarks of the speaker against the lab (lab/cluster up, root, the test kit's
tools), MetalLB's controller and speaker as the anchor in the same run:
  --impl         which to run (default both: ours, then MetalLB)
  --latency N    Services created one after another (phase a; default 200)
  --burst N      Services created at once (phase c; default 1000)
  --phases abc   which phases (default abc; b needs c's Services)
  --ours-bin     directory of our controller and speaker (default
                 $CARGO_TARGET_DIR/release, else <repo>/target/release)
  --metallb-bin  directory of MetalLB's (default: lab/build-metallb bindir)
  --out FILE     also write the figures as JSON";

const LAT_POOL: &str = "198.51.100.0/24";
const BURST_POOL: &str = "198.18.0.0/22";
const NODES: usize = 3;
const SERVICE_CIDR: &str = "bench-bgp";
const SERVICE_CIDR_RANGE: &str = "198.18.128.0/20";

struct Opts {
    kinds: Vec<Kind>,
    latency: usize,
    burst: usize,
    phases: String,
    ours_bin: PathBuf,
    metallb_bin: PathBuf,
    out: Option<PathBuf>,
}

fn parse_opts(repo: &Path) -> Result<Opts> {
    let mut args = std::env::args().skip(1);
    let mut kinds = vec![Kind::Ours, Kind::Metallb];
    let (mut latency, mut burst) = (200, 1000);
    let mut phases = "abc".to_string();
    let mut ours_bin = None;
    let mut metallb_bin = None;
    let mut out = None;
    while let Some(a) = args.next() {
        let mut val = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--impl" => {
                kinds = Kind::parse_list(&val()?, false)?;
            }
            "--latency" => latency = val()?.parse()?,
            "--burst" => burst = val()?.parse()?,
            "--phases" => phases = val()?,
            "--ours-bin" => ours_bin = Some(PathBuf::from(val()?)),
            "--metallb-bin" => metallb_bin = Some(PathBuf::from(val()?)),
            "--out" => out = Some(PathBuf::from(val()?)),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => bail!("unknown argument {a}\n{USAGE}"),
        }
    }
    ensure!(
        burst <= 1000,
        "--burst at most 1000 (the burst pool is a /22)"
    );
    ensure!(latency <= 250, "--latency at most 250 (the pool is a /24)");
    let ours_bin = e2e::bench::ours_bin_dir(repo, ours_bin);
    let metallb_bin = e2e::bench::metallb_bin_dir(repo, metallb_bin)?;
    Ok(Opts {
        kinds,
        latency,
        burst,
        phases,
        ours_bin,
        metallb_bin,
        out,
    })
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = rt.block_on(run()) {
        eprintln!("bench-bgp: {e:#}");
        std::process::exit(1);
    }
}

async fn run() -> Result<()> {
    let lab = Lab::connect().await?;
    let opts = parse_opts(lab.repo())?;
    // The lab's cluster IPs (203.0.113.128/25) hold 126 Services: an extra ServiceCIDR
    // from the benchmark range for the run's 1,200 (API objects only: nothing routes
    // or configures cluster IPs in the lab). Removed at the end.
    let cidrs = Api::<ServiceCIDR>::all(lab.client.clone());
    if cidrs.get_opt(SERVICE_CIDR).await?.is_none() {
        cidrs
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": SERVICE_CIDR},
                    "spec": {"cidrs": [SERVICE_CIDR_RANGE]},
                }))?,
            )
            .await?;
    }
    let result = bench_all(&lab, &opts).await;
    let _ = cidrs.delete(SERVICE_CIDR, &DeleteParams::default()).await;
    result
}

async fn bench_all(lab: &Lab, opts: &Opts) -> Result<()> {
    let mut all = serde_json::Map::new();
    for &kind in &opts.kinds {
        let (controller, speaker) = match kind {
            Kind::Ours => (
                opts.ours_bin.join("controller"),
                opts.ours_bin.join("speaker"),
            ),
            Kind::Metallb => (
                opts.metallb_bin.join("controller"),
                opts.metallb_bin.join("speaker"),
            ),
        };
        for b in [&controller, &speaker] {
            ensure!(b.is_file(), "{} is missing", b.display());
        }
        eprintln!("bench-bgp: === {} ===", kind.name());
        let figures = bench(lab, kind, &controller, &speaker, opts).await?;
        println!(
            "FIGURES {} {}",
            kind.name(),
            serde_json::to_string_pretty(&figures)?
        );
        all.insert(kind.name().into(), figures);
    }
    if let Some(out) = &opts.out {
        std::fs::write(out, serde_json::to_vec_pretty(&Value::Object(all))?)?;
    }
    Ok(())
}

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

fn parse_rfc3339(ts: &str) -> Option<i64> {
    let (d, t) = ts.split_once('T')?;
    parse_ts(d, t)
}

/// Follows a growing text file from an offset.
struct Tail {
    path: PathBuf,
    offset: u64,
    partial: String,
}

impl Tail {
    fn from_end(path: &Path) -> Tail {
        let offset = std::fs::metadata(path).map_or(0, |m| m.len());
        Tail {
            path: path.to_path_buf(),
            offset,
            partial: String::new(),
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
}

/// A prefix received by bgpd, from its `debug bgp updates in` log:
/// `2026/11/26 20:40:01.123456 BGP: [XXXXX-XXXXX] 192.0.2.11 rcvd 198.51.100.1/32`
/// (`[XXXXX-XXXXX]` stands for FRR's message id; see the tests below).
#[derive(Clone, Debug)]
struct Rcvd {
    at_us: i64,
    peer: String,
    prefix: String,
}

fn parse_rcvd(line: &str) -> Option<Rcvd> {
    let mut words = line.split_whitespace();
    let (date, time) = (words.next()?, words.next()?);
    let at_us = parse_ts(date, time)?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let i = words.iter().position(|w| *w == "rcvd")?;
    let prefix = words.get(i + 1)?;
    if !prefix.starts_with(|c: char| c.is_ascii_digit()) || !prefix.contains('/') {
        return None;
    }
    if line.contains("withdrawn") || line.contains("DENIED") {
        return None;
    }
    let peer = words.get(i.checked_sub(1)?)?;
    let peer = peer.split('(').next().unwrap_or(peer);
    Some(Rcvd {
        at_us,
        peer: peer.to_owned(),
        prefix: prefix.trim_end_matches(',').to_owned(),
    })
}

/// One of the four routers of phase b.
struct Router {
    name: &'static str,
    asn: u32,
    addr: IpAddr,
    multihop: bool,
    frr: Frr,
}

fn start_router(
    net: &NodeNetwork,
    ns: &'static str,
    asn: u32,
    addr: IpAddr,
    multihop: bool,
) -> Result<Router> {
    let id = match addr {
        IpAddr::V4(a) => a,
        IpAddr::V6(_) => bail!("IPv4 router ids only"),
    };
    // bgpd's own log file (the one of the command line gets no sub-second timestamps).
    let log = net.net.ns(ns).state_dir().join("frr/bench.log");
    let mut c = FrrConfig::new(ns, asn, id)
        .extra(&format!("log file {} debugging", log.display()))
        .extra("log timestamp precision 6")
        .extra("debug bgp updates in");
    for n in 1..=NODES {
        let mut nb = FrrNeighbor::new(plan::node_v4(n).into(), plan::NODE_AS);
        nb.connect_retry = Some(1);
        if multihop {
            nb = nb.ebgp_multihop(4);
        }
        c = c.neighbor(nb);
    }
    let frr = Frr::start(net.net.ns(ns), &c).with_context(|| format!("FRR in {ns}"))?;
    Ok(Router {
        name: ns,
        asn,
        addr,
        multihop,
        frr,
    })
}

impl Router {
    fn log(&self) -> PathBuf {
        self.frr.dir().join("bench.log")
    }

    /// (state, prefixes received) per neighbor address.
    fn summary(&self) -> Result<BTreeMap<String, (String, u64)>> {
        let v = self.frr.show_json("show bgp ipv4 unicast summary json")?;
        let mut out = BTreeMap::new();
        if let Some(peers) = v["peers"].as_object() {
            for (addr, p) in peers {
                out.insert(
                    addr.clone(),
                    (
                        p["state"].as_str().unwrap_or_default().to_owned(),
                        p["pfxRcd"].as_u64().unwrap_or(0),
                    ),
                );
            }
        }
        Ok(out)
    }

    /// UPDATEs received per neighbor address.
    fn updates_received(&self) -> Result<BTreeMap<String, u64>> {
        let v = self.frr.show_json("show bgp neighbors json")?;
        let mut out = BTreeMap::new();
        if let Some(o) = v.as_object() {
            for (addr, n) in o {
                out.insert(
                    addr.clone(),
                    n["messageStats"]["updatesRecv"].as_u64().unwrap_or(0),
                );
            }
        }
        Ok(out)
    }
}

/// RSS, peak RSS (kB) and CPU seconds (user + system) of a process.
fn proc_stats(pid: u32) -> Result<(u64, u64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the command.
    let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    Ok((kb("VmRSS:"), kb("VmHWM:"), ticks as f64 / 100.0))
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn summary_ms(mut v: Vec<f64>) -> Value {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    json!({
        "n": v.len(),
        "median_ms": (pct(&v, 50.0) * 10.0).round() / 10.0,
        "p90_ms": (pct(&v, 90.0) * 10.0).round() / 10.0,
        "p99_ms": (pct(&v, 99.0) * 10.0).round() / 10.0,
        "max_ms": (pct(&v, 100.0) * 10.0).round() / 10.0,
    })
}

/// One audit-log write.
#[derive(Clone, Debug)]
struct Write {
    user: String,
    verb: String,
    resource: String,
    name: String,
    labels: BTreeMap<String, String>,
    received_us: i64,
    done_us: i64,
    code: i64,
}

fn audit_writes(path: &Path, from: u64) -> Result<Vec<Write>> {
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(from))?;
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v["stage"] != "ResponseComplete" {
            continue;
        }
        let o = &v["objectRef"];
        let mut resource = o["resource"].as_str().unwrap_or_default().to_owned();
        if let Some(s) = o["subresource"].as_str() {
            resource = format!("{resource}/{s}");
        }
        let labels = v["requestObject"]["metadata"]["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        out.push(Write {
            user: v["user"]["username"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            verb: v["verb"].as_str().unwrap_or_default().to_owned(),
            resource,
            name: o["name"].as_str().unwrap_or_default().to_owned(),
            labels,
            received_us: v["requestReceivedTimestamp"]
                .as_str()
                .and_then(parse_rfc3339)
                .unwrap_or(0),
            done_us: v["stageTimestamp"]
                .as_str()
                .and_then(parse_rfc3339)
                .unwrap_or(0),
            code: v["responseStatus"]["code"].as_i64().unwrap_or(0),
        });
    }
    Ok(out)
}

fn audit_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Writes of `user` between two instants, per `verb resource`.
fn count_writes(writes: &[Write], user: &str, from_us: i64, to_us: i64) -> (usize, Value) {
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    let mut n = 0;
    for w in writes
        .iter()
        .filter(|w| w.user == user && w.received_us >= from_us && w.received_us < to_us)
    {
        n += 1;
        *per.entry(format!("{} {}", w.verb, w.resource)).or_default() += 1;
    }
    (n, json!(per))
}

struct Bench<'a> {
    lab: &'a Lab,
    kind: Kind,
    speaker_bin: PathBuf,
    net: NodeNetwork,
    routers: Vec<Router>,
    cfg_ns: String,
    svc_ns: String,
    dir: PathBuf,
    speaker_kubeconfig: PathBuf,
    speaker_user: String,
    controller_user: String,
    speakers: Vec<NsChild>,
    audit: PathBuf,
}

async fn bench(
    lab: &Lab,
    kind: Kind,
    controller_bin: &Path,
    speaker_bin: &Path,
    opts: &Opts,
) -> Result<Value> {
    let port = lab.api_port()?;
    // The test kit's lock (one network user at a time): with TESTKIT_LOCK_TIMEOUT=0 each
    // attempt is one try, repeated here every 5 ms for up to 30 minutes.
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
        "bench-bgp: network up after {:.1} s waiting for the test kit's lock",
        waiting.elapsed().as_secs_f64()
    );
    let client_proxy = ApiProxy::start(net.net.client(), port, port)?;
    let suffix = e2e::unique_suffix();
    let cfg_ns = format!("bench-{}-cfg-{suffix}", kind.name());
    let svc_ns = format!("bench-{}-svc-{suffix}", kind.name());
    let dir = std::env::temp_dir().join(format!("bench-bgp-{}-{suffix}", kind.name()));
    std::fs::create_dir_all(&dir)?;
    eprintln!("bench-bgp: logs in {}", dir.display());
    let nsapi = Api::<Namespace>::all(lab.client.clone());
    for ns in [&cfg_ns, &svc_ns] {
        nsapi
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
            )
            .await?;
    }
    let mut routers = vec![start_router(
        &net,
        "router",
        plan::ROUTER_AS,
        plan::ROUTER_V4.into(),
        false,
    )?];
    let mut bench = Bench {
        lab,
        kind,
        speaker_bin: speaker_bin.to_path_buf(),
        routers: Vec::new(),
        cfg_ns: cfg_ns.clone(),
        svc_ns: svc_ns.clone(),
        dir: dir.clone(),
        speaker_kubeconfig: PathBuf::new(),
        speaker_user: String::new(),
        controller_user: String::new(),
        speakers: Vec::new(),
        audit: lab.env.state_dir.join("audit/audit.log"),
        net,
    };
    routers.push(start_router(
        &bench.net,
        "router2",
        plan::ROUTER2_AS,
        plan::ROUTER2_V4.into(),
        false,
    )?);
    routers.push(start_router(
        &bench.net,
        "client",
        64516,
        plan::CLIENT_V4.into(),
        false,
    )?);
    routers.push(start_router(
        &bench.net,
        "far",
        plan::FAR_AS,
        plan::FAR_V4.into(),
        true,
    )?);
    bench.routers = routers;

    let result = bench.run(controller_bin, opts).await;
    // Teardown, whatever happened.
    for s in &mut bench.speakers {
        let _ = s.stop_with(Signal::TERM, Duration::from_secs(10));
    }
    drop(client_proxy);
    let crbs = Api::<ClusterRoleBinding>::all(lab.client.clone());
    for sa in ["controller", "speaker"] {
        let _ = crbs
            .delete(&format!("bench:{cfg_ns}:{sa}"), &DeleteParams::default())
            .await;
    }
    // The speaker Pods first, at once: no kubelet confirms a graceful delete.
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
        let left =
            nsapi.get_opt(&svc_ns).await?.is_some() || nsapi.get_opt(&cfg_ns).await?.is_some();
        if !left {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let Bench { net, routers, .. } = bench;
    tokio::task::block_in_place(move || {
        for r in routers {
            let _ = r.frr.stop();
        }
        drop(net);
    });
    result
}

impl Bench<'_> {
    async fn count(&self, kind: &str) -> Result<usize> {
        Ok(self
            .metallb(kind)
            .list(&ListParams::default())
            .await?
            .items
            .len())
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

    fn start_speaker(&self, n: usize) -> Result<NsChild> {
        let node = plan::node_name(n);
        let pod = format!("speaker-{node}");
        let level = std::env::var("BENCH_SPEAKER_LOG_LEVEL").unwrap_or_else(|_| "info".into());
        let kc = self.speaker_kubeconfig.to_str().context("path")?;
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
                    "--log-level",
                    &level,
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
                    "--log-level",
                    &level,
                ]);
                cmd.env("METALLB_BGP_TYPE", "native");
            }
        }
        cmd.env("KUBECONFIG", kc)
            .env("METALLB_NAMESPACE", &self.cfg_ns)
            .env("METALLB_POD_NAME", &pod)
            .env("METALLB_NODE_NAME", &node);
        let log = self.dir.join(format!("speaker-{node}.log"));
        NsChild::spawn_logged(cmd, &log).with_context(|| format!("speaker in {node}"))
    }

    async fn create_slice(&self, name: &str, node: usize) -> Result<()> {
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"generateName": format!("{name}-"), "namespace": self.svc_ns,
                         "labels": {"kubernetes.io/service-name": name,
                                    "endpointslice.kubernetes.io/managed-by": "bench-bgp.metallb-rs.io"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [plan::node_v4(node).to_string()],
                           "conditions": {"ready": true, "serving": true, "terminating": false},
                           "nodeName": plan::node_name(node)}],
            "ports": [{"name": "tcp-80", "protocol": "TCP", "port": 8080}],
        }))?;
        Api::<EndpointSlice>::namespaced(self.lab.client.clone(), &self.svc_ns)
            .create(&PostParams::default(), &slice)
            .await
            .with_context(|| format!("EndpointSlice for {name}"))?;
        Ok(())
    }

    fn service(&self, name: &str, pool: Option<&str>) -> Result<Service> {
        let mut meta = json!({"name": name, "namespace": self.svc_ns});
        if let Some(p) = pool {
            meta["annotations"] = json!({"metallb.io/address-pool": p});
        }
        Ok(serde_json::from_value(json!({
            "metadata": meta,
            "spec": {"type": "LoadBalancer", "selector": {"app": name},
                     "ports": [{"name": "tcp-80", "protocol": "TCP", "port": 80, "targetPort": 8080}]},
        }))?)
    }

    /// Waits until every router in `routers` has `want` prefixes from every node over an
    /// Established session; returns when, or fails after `timeout` with what it saw.
    async fn wait_prefixes(&self, routers: usize, want: u64, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut seen = Vec::new();
            let mut ok = true;
            for r in &self.routers[..routers] {
                let s = r.summary()?;
                for n in 1..=NODES {
                    let a = plan::node_v4(n).to_string();
                    let (state, pfx) = s.get(&a).cloned().unwrap_or_default();
                    if state != "Established" || pfx != want {
                        ok = false;
                    }
                    seen.push(format!("{}<-{a} {state} {pfx}", r.name));
                }
            }
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("not every router has {want} prefixes: {}", seen.join(", "));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn run(&mut self, controller_bin: &Path, opts: &Opts) -> Result<Value> {
        let mut figures = serde_json::Map::new();
        let (ckc, cuser) = self.account("controller").await?;
        let (skc, suser) = self.account("speaker").await?;
        self.speaker_kubeconfig = skc;
        self.speaker_user = suser.clone();
        self.controller_user = cuser.clone();
        for n in 1..=NODES {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("speaker-{}", plan::node_name(n)), "namespace": self.cfg_ns,
                             "labels": {"app": "metallb", "component": "speaker"}},
                "spec": {"nodeName": plan::node_name(n), "hostNetwork": true,
                         // Deleted at once with its namespace (no kubelet to confirm).
                         "terminationGracePeriodSeconds": 0,
                         "serviceAccountName": "speaker", "automountServiceAccountToken": false,
                         "containers": [{"name": "speaker", "image": "bench.invalid/speaker"}]},
            }))?;
            Api::<Pod>::namespaced(self.lab.client.clone(), &self.cfg_ns)
                .create(&PostParams::default(), &pod)
                .await?;
        }
        self.create_metallb("IPAddressPool", "lat", json!({"addresses": [LAT_POOL]}))
            .await?;
        self.create_metallb(
            "IPAddressPool",
            "burst",
            json!({"addresses": [BURST_POOL], "autoAssign": false}),
        )
        .await?;
        self.create_metallb(
            "BGPPeer",
            "router",
            json!({"myASN": plan::NODE_AS, "peerASN": plan::ROUTER_AS, "peerAddress": plan::ROUTER_V4.to_string()}),
        )
        .await?;
        self.create_metallb("BGPAdvertisement", "all", json!({}))
            .await?;

        // The controller, in the client namespace.
        let ckc_s = ckc.to_str().context("path")?.to_owned();
        let mut cmd = self.net.net.client().command(controller_bin);
        cmd.args(self.kind.controller_args(&self.cfg_ns));
        cmd.env("KUBECONFIG", &ckc_s)
            .env("METALLB_NAMESPACE", &self.cfg_ns)
            .env("METALLB_POD_NAME", "controller");
        let mut controller = NsChild::spawn_logged(cmd, &self.dir.join("controller.log"))?;

        for n in 1..=NODES {
            let s = self.start_speaker(n)?;
            self.speakers.push(s);
        }
        self.wait_prefixes(1, 0, Duration::from_secs(60))
            .await
            .context("sessions to the router")?;

        let mut tail = Tail::from_end(&self.routers[0].log());
        let svcs = Api::<Service>::namespaced(self.lab.client.clone(), &self.svc_ns);
        // Warm-up: one Service to the router, not counted.
        self.create_slice("warmup", 1).await?;
        svcs.create(&PostParams::default(), &self.service("warmup", None)?)
            .await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen: BTreeSet<String> = BTreeSet::new();
        'warm: loop {
            if let Some(r) = tail.lines().iter().find_map(|l| parse_rcvd(l)) {
                seen.insert(r.prefix);
                break 'warm;
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(self.routers[0].log()).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                bail!(
                    "the warm-up Service never reached the router; table {:?}; bgpd.log ends:\n{}",
                    self.routers[0].frr.vtysh(&["show bgp ipv4 unicast"]),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let _ = tail.lines();

        // a. Services one after another.
        if opts.phases.contains('a') {
            let audit_from = audit_len(&self.audit);
            let mut samples: Vec<(String, i64, String, i64, i64)> = Vec::new();
            for i in 0..opts.latency {
                let name = format!("lat-{i:03}");
                self.create_slice(&name, 1).await?;
                let t0 = now_us();
                svcs.create(&PostParams::default(), &self.service(&name, None)?)
                    .await?;
                let deadline = Instant::now() + Duration::from_secs(20);
                let mut prefix: Option<(String, i64)> = None;
                let mut peers: HashMap<String, i64> = HashMap::new();
                loop {
                    for r in tail.lines().iter().filter_map(|l| parse_rcvd(l)) {
                        if prefix.is_none() && !seen.contains(&r.prefix) {
                            seen.insert(r.prefix.clone());
                            prefix = Some((r.prefix.clone(), r.at_us));
                        }
                        if prefix.as_ref().is_some_and(|(p, _)| *p == r.prefix) {
                            peers.entry(r.peer.clone()).or_insert(r.at_us);
                        }
                    }
                    if peers.len() >= NODES {
                        break;
                    }
                    if Instant::now() > deadline {
                        bail!(
                            "{name}: not at the router from every node after 20 s ({prefix:?}, {peers:?})"
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let (p, first) = prefix.context("prefix")?;
                let all = peers.values().copied().max().unwrap_or(first);
                samples.push((name, t0, p, first, all));
            }
            // Check the prefixes against the Services' addresses, and the audit log's
            // stage timestamps in between.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let writes = audit_writes(&self.audit, audit_from)?;
            let mut to_first = Vec::new();
            let mut to_all = Vec::new();
            let mut create_api = Vec::new();
            let mut to_status = Vec::new();
            let mut status_to_router = Vec::new();
            let mut to_last_ctrl = Vec::new();
            let mut last_ctrl_to_router = Vec::new();
            let mut router_to_speaker_status = Vec::new();
            let mut mismatched = 0;
            for (name, t0, p, first, all) in &samples {
                let svc = svcs.get(name).await?;
                let ip = svc
                    .status
                    .and_then(|s| s.load_balancer)
                    .and_then(|l| l.ingress)
                    .and_then(|i| i.into_iter().next())
                    .and_then(|i| i.ip)
                    .unwrap_or_default();
                if format!("{ip}/32") != *p {
                    mismatched += 1;
                }
                to_first.push((first - t0) as f64 / 1000.0);
                to_all.push((all - t0) as f64 / 1000.0);
                let created = writes
                    .iter()
                    .find(|w| w.name == *name && w.resource == "services" && w.verb == "create");
                let status = writes.iter().find(|w| {
                    w.name == *name && w.user == cuser && w.resource == "services/status"
                });
                let last_ctrl = writes
                    .iter()
                    .filter(|w| {
                        w.name == *name && w.user == cuser && w.resource.starts_with("services")
                    })
                    .map(|w| w.done_us)
                    .max();
                if let Some(c) = created {
                    create_api.push((c.done_us - t0) as f64 / 1000.0);
                }
                if let Some(s) = status {
                    to_status.push((s.done_us - t0) as f64 / 1000.0);
                    status_to_router.push((first - s.done_us) as f64 / 1000.0);
                }
                let speaker_status = writes
                    .iter()
                    .filter(|w| {
                        w.user == suser && w.labels.get("metallb.io/service-name") == Some(name)
                    })
                    .map(|w| w.done_us)
                    .min();
                if let Some(s) = speaker_status {
                    router_to_speaker_status.push((s - first) as f64 / 1000.0);
                }
                if let Some(l) = last_ctrl {
                    to_last_ctrl.push((l - t0) as f64 / 1000.0);
                    last_ctrl_to_router.push((first - l) as f64 / 1000.0);
                }
            }
            let ctrl_writes: Vec<String> = writes
                .iter()
                .filter(|w| w.user == cuser && w.name == "lat-000")
                .map(|w| format!("{} {} {}", w.verb, w.resource, w.code))
                .collect();
            figures.insert(
                "a_latency".into(),
                json!({
                    "services": samples.len(),
                    "prefix_not_the_service_ip": mismatched,
                    "create_to_router_first_node": summary_ms(to_first),
                    "create_to_router_all_nodes": summary_ms(to_all),
                    "create_call_to_api_response_complete": summary_ms(create_api),
                    "create_to_controller_status_write_complete": summary_ms(to_status),
                    "controller_status_write_to_router": summary_ms(status_to_router),
                    "create_to_last_controller_service_write": summary_ms(to_last_ctrl),
                    "last_controller_service_write_to_router": summary_ms(last_ctrl_to_router),
                    "router_to_first_speaker_servicebgpstatus_write": summary_ms(router_to_speaker_status),
                    "controller_writes_of_one_service_in_order": ctrl_writes,
                }),
            );
            eprintln!("bench-bgp: a: {}", figures["a_latency"]);
        }

        // c. A burst of Services at once, with the speakers running.
        let base = (if opts.phases.contains('a') {
            opts.latency
        } else {
            0
        } + 1) as u64;
        let mut total = base;
        if opts.phases.contains('c') || opts.phases.contains('b') {
            let audit_from = audit_len(&self.audit);
            let t_start = now_us();
            let started = Instant::now();
            let this = Arc::new((self.lab.client.clone(), self.svc_ns.clone()));
            let mut tasks = Vec::new();
            let per = opts.burst.div_ceil(8);
            for t in 0..8 {
                let names: Vec<String> = (t * per..((t + 1) * per).min(opts.burst))
                    .map(|i| format!("burst-{i:04}"))
                    .collect();
                let slices: Vec<EndpointSlice> = names
                    .iter()
                    .enumerate()
                    .map(|(i, name)| {
                        let node = 1 + (i % NODES);
                        serde_json::from_value(json!({
                            "metadata": {"generateName": format!("{name}-"), "namespace": self.svc_ns,
                                         "labels": {"kubernetes.io/service-name": name,
                                                    "endpointslice.kubernetes.io/managed-by": "bench-bgp.metallb-rs.io"}},
                            "addressType": "IPv4",
                            "endpoints": [{"addresses": [plan::node_v4(node).to_string()],
                                           "conditions": {"ready": true, "serving": true, "terminating": false},
                                           "nodeName": plan::node_name(node)}],
                            "ports": [{"name": "tcp-80", "protocol": "TCP", "port": 8080}],
                        }))
                    })
                    .collect::<Result<_, _>>()?;
                let services: Vec<Service> = names
                    .iter()
                    .map(|n| self.service(n, Some("burst")))
                    .collect::<Result<_>>()?;
                let this = this.clone();
                tasks.push(tokio::spawn(async move {
                    let (client, ns) = &*this;
                    let sl = Api::<EndpointSlice>::namespaced(client.clone(), ns);
                    let sv = Api::<Service>::namespaced(client.clone(), ns);
                    for (slice, svc) in slices.iter().zip(&services) {
                        sl.create(&PostParams::default(), slice).await?;
                        sv.create(&PostParams::default(), svc).await?;
                    }
                    anyhow::Ok(())
                }));
            }
            for t in tasks {
                t.await??;
            }
            let created_s = started.elapsed().as_secs_f64();
            total = base + opts.burst as u64;
            self.wait_prefixes(1, total, Duration::from_secs(300))
                .await
                .context("the burst at the router")?;
            let converged_s = started.elapsed().as_secs_f64();
            let t_done = now_us();
            let objects_at_done = json!({
                "servicebgpstatuses": self.count("ServiceBGPStatus").await?,
                "bgpsessionstatuses": self.count("BGPSessionStatus").await?,
            });
            let stats_done: Vec<Value> = self
                .speakers
                .iter()
                .map(|s| {
                    proc_stats(s.pid())
                        .map(|(r, h, c)| json!({"rss_kb": r, "hwm_kb": h, "cpu_s": c}))
                })
                .collect::<Result<_>>()?;
            tokio::time::sleep(Duration::from_secs(30)).await;
            let t_rest = now_us();
            let objects_at_rest = json!({
                "servicebgpstatuses": self.count("ServiceBGPStatus").await?,
                "bgpsessionstatuses": self.count("BGPSessionStatus").await?,
            });
            let writes = audit_writes(&self.audit, audit_from)?;
            let (sb, sb_per) = count_writes(&writes, &suser, t_start, t_done);
            let (sr, sr_per) = count_writes(&writes, &suser, t_done, t_rest);
            let (cb, cb_per) = count_writes(&writes, &cuser, t_start, t_done);
            let (cr, cr_per) = count_writes(&writes, &cuser, t_done, t_rest);
            let last_speaker_write = writes
                .iter()
                .filter(|w| w.user == suser)
                .map(|w| w.received_us)
                .max()
                .map(|t| (t - t_start) as f64 / 1e6);
            let burst_s = (t_done - t_start) as f64 / 1e6;
            let rest_s = (t_rest - t_done) as f64 / 1e6;
            figures.insert(
                "c_burst".into(),
                json!({
                    "services": opts.burst,
                    "created_s": created_s,
                    "all_at_router_from_every_node_s": converged_s,
                    "speaker_writes_burst": sb,
                    "speaker_writes_burst_per_s": sb as f64 / burst_s,
                    "speaker_writes_burst_by_kind": sb_per,
                    "speaker_writes_rest_30s": sr,
                    "speaker_writes_rest_by_kind": sr_per,
                    "speaker_last_write_after_s": last_speaker_write,
                    "controller_writes_burst": cb,
                    "controller_writes_burst_per_s": cb as f64 / burst_s,
                    "controller_writes_burst_by_kind": cb_per,
                    "controller_writes_rest_30s": cr,
                    "controller_writes_rest_by_kind": cr_per,
                    "rest_window_s": rest_s,
                    "objects_when_all_at_router": objects_at_done,
                    "objects_at_rest": objects_at_rest,
                    "speakers_when_all_at_router": stats_done,
                }),
            );
            eprintln!("bench-bgp: c: {}", figures["c_burst"]);
        }

        // b. Restart the speakers with 4 peers.
        if opts.phases.contains('b') {
            for s in &mut self.speakers {
                s.stop_with(Signal::TERM, Duration::from_secs(15))?;
            }
            self.speakers.clear();
            for (name, r) in [("router2", 1), ("client", 2), ("far", 3)] {
                let r = &self.routers[r];
                let mut spec = json!({"myASN": plan::NODE_AS, "peerASN": r.asn, "peerAddress": r.addr.to_string()});
                if r.multihop {
                    spec["ebgpMultiHop"] = json!(true);
                }
                self.create_metallb("BGPPeer", name, spec).await?;
            }
            // Every router has nothing from the nodes (sessions down, routes gone).
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let mut pfx = 0;
                for r in &self.routers {
                    pfx += r.summary()?.values().map(|(_, p)| *p).sum::<u64>();
                }
                if pfx == 0 {
                    break;
                }
                ensure!(
                    Instant::now() < deadline,
                    "routes left after the speakers stopped"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let before: Vec<BTreeMap<String, u64>> = self
                .routers
                .iter()
                .map(Router::updates_received)
                .collect::<Result<_>>()?;
            let audit_from = audit_len(&self.audit);
            let t0 = now_us();
            let started = Instant::now();
            for n in 1..=NODES {
                let s = self.start_speaker(n)?;
                self.speakers.push(s);
            }
            self.wait_prefixes(4, total, Duration::from_secs(300))
                .await
                .context("convergence with 4 peers")?;
            let converged_s = started.elapsed().as_secs_f64();
            let t_conv = now_us();
            let stats_conv: Vec<Value> = self
                .speakers
                .iter()
                .map(|s| {
                    proc_stats(s.pid())
                        .map(|(r, h, c)| json!({"rss_kb": r, "hwm_kb": h, "cpu_s": c}))
                })
                .collect::<Result<_>>()?;
            let mut updates = serde_json::Map::new();
            let mut updates_total = 0;
            for (r, b) in self.routers.iter().zip(&before) {
                let now = r.updates_received()?;
                let mut per = serde_json::Map::new();
                for n in 1..=NODES {
                    let a = plan::node_v4(n).to_string();
                    let d = now.get(&a).copied().unwrap_or(0) - b.get(&a).copied().unwrap_or(0);
                    updates_total += d;
                    per.insert(a, json!(d));
                }
                updates.insert(r.name.into(), Value::Object(per));
            }
            tokio::time::sleep(Duration::from_secs(20)).await;
            let t_rest = now_us();
            let stats_rest: Vec<Value> = self
                .speakers
                .iter()
                .map(|s| {
                    proc_stats(s.pid())
                        .map(|(r, h, c)| json!({"rss_kb": r, "hwm_kb": h, "cpu_s": c}))
                })
                .collect::<Result<_>>()?;
            let writes = audit_writes(&self.audit, audit_from)?;
            let (sc, sc_per) = count_writes(&writes, &suser, t0, t_conv);
            let (sr, sr_per) = count_writes(&writes, &suser, t_conv, t_rest);
            let last_speaker_write = writes
                .iter()
                .filter(|w| w.user == suser)
                .map(|w| w.received_us)
                .max()
                .map(|t| (t - t0) as f64 / 1e6);
            figures.insert(
                "b_restart_4_peers".into(),
                json!({
                    "services": total,
                    "peers_per_node": 4,
                    "start_to_every_prefix_at_every_router_from_every_node_s": converged_s,
                    "updates_received_by_routers_total": updates_total,
                    "updates_received_by_router_per_node": updates,
                    "speakers_at_convergence": stats_conv,
                    "speakers_20s_later": stats_rest,
                    "speaker_writes_until_convergence": sc,
                    "speaker_writes_until_convergence_by_kind": sc_per,
                    "speaker_writes_20s_after": sr,
                    "speaker_writes_20s_after_by_kind": sr_per,
                    "speaker_last_write_after_start_s": last_speaker_write,
                }),
            );
            eprintln!("bench-bgp: b: {}", figures["b_restart_4_peers"]);
        }
        controller.stop_with(Signal::TERM, Duration::from_secs(10))?;
        Ok(Value::Object(figures))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rcvd_lines_are_parsed_and_withdrawals_are_not() {
        let r = parse_rcvd(
            "2026/11/26 20:40:01.123456 BGP: [PXVXG-TFNNT] 192.0.2.11(node-1) rcvd 198.51.100.1/32 IPv4 unicast",
        )
        .unwrap();
        assert_eq!(
            (r.peer.as_str(), r.prefix.as_str()),
            ("192.0.2.11", "198.51.100.1/32")
        );
        let later = parse_rcvd(
            "2026/11/26 20:40:01.123789 BGP: [PXVXG-TFNNT] 192.0.2.11 rcvd 198.51.100.1/32",
        )
        .unwrap();
        assert_eq!(later.at_us - r.at_us, 333);
        assert!(parse_rcvd("2026/11/26 20:40:01.123456 BGP: [X] 192.0.2.11 rcvd UPDATE about 198.51.100.1/32 -- withdrawn").is_none());
        assert!(parse_rcvd("2026/11/26 20:40:01.123456 BGP: [X] 192.0.2.11 rcvd UPDATE w/ attr: nexthop 192.0.2.11").is_none());
    }
}
