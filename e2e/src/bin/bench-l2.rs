//! bench-l2: layer-2 failover of the speaker (BENCHMARKS.md, "Speaker: layer-2
//! failover"), with MetalLB's own speaker (built by `lab/build-metallb`, memberlist on)
//! as the anchor in the same run, on the same lab, nodes, Services and faults.
//!
//! For each implementation and each speaker count it brings up the test kit's network
//! (node-1..N on one segment with the client), one speaker per node namespace with
//! membership as deployed (`--ml-bindaddr` = the node's address, `--ml-labels` finding
//! the speakers' Pods, whose `status.podIP` the benchmark writes, `--ml-secret-key-path`),
//! 100 LoadBalancer Services in layer 2 (ingress and EndpointSlices written by the
//! benchmark: no controller), and then, for each fault kind, N times: finds the node
//! answering the probe address (198.51.100.90) from the client, makes sure the client's
//! neighbour entry holds its MAC, applies the fault to that node, and times the first
//! `ip -ts monitor neigh` event in the client namespace that gives the address another
//! node's MAC. Then it undoes the fault (a new speaker process; a cut cable restored and
//! that node's speaker restarted) and waits until the old owner answers again (the hash
//! order), before the next round.
//!
//! Faults: `kill` (SIGKILL of the owner's speaker), `cut` (the owner's cable cut at the
//! switch with nftables, silently: no link event), `term` (SIGTERM: a clean hand-over).
//!
//! Also: datagrams per second per node (UDP `OutDatagrams` of each node namespace's
//! `/proc/net/snmp` over a quiet 20 s, which counts both implementations alike: their
//! membership is the only UDP a node sends in layer 2 mode), and with `--soak SECS`
//! (ours only) a soak under CPU load (two busy processes per core) counting takeovers,
//! path faults and owner changes of every Service address: none is expected.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use e2e::Lab;
use e2e::bench::Impl as Kind;
use e2e::l2bench::{L2Lab, with_service_cidr};
use serde_json::{Value, json};
use testkit::plan;
use testkit::process::Signal;

const USAGE: &str = "\
usage: bench-l2 [--impl ours|metallb|both] [--speakers 3,20] [--faults N]
                [--kinds kill,cut,term] [--services N] [--soak SECS]
                [--ours-bin DIR] [--metallb-bin DIR] [--out FILE]

Layer-2 failover against the lab (lab/cluster up, root, the test kit's tools), MetalLB's
speaker with memberlist as the anchor in the same run:
  --impl         which to run (default both: ours, then MetalLB)
  --speakers     speaker counts (default 3,20)
  --faults N     faults of each kind per speaker count (default 50)
  --kinds        fault kinds (default kill,cut,term)
  --services N   LoadBalancer Services in layer 2 (default 100, at most 200)
  --soak SECS    after the faults, ours only, the largest speaker count: SECS under CPU
                 load (two busy processes per core), counting takeovers (default 0: none)
  --ours-bin     directory of our speaker (default $CARGO_TARGET_DIR/release, else
                 <repo>/target/release)
  --metallb-bin  directory of MetalLB's (default: lab/build-metallb bindir)
  --out FILE     also write the figures as JSON";

/// An extra ServiceCIDR for the run's Services (bench-bgp's range, another name).
const SERVICE_CIDR: &str = "bench-l2";
const SERVICE_CIDR_RANGE: &str = "198.18.144.0/20";
/// The address whose owner is faulted.
const PROBE: &str = "198.51.100.90";
/// Longest failover waited for (MetalLB's memberlist takes about 5-7 s for a crash).
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(40);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Kill,
    Cut,
    Term,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Cut => "cut",
            Fault::Term => "term",
        }
    }
}

struct Opts {
    kinds: Vec<Kind>,
    speakers: Vec<usize>,
    faults: usize,
    fault_kinds: Vec<Fault>,
    services: usize,
    soak: u64,
    ours_bin: PathBuf,
    metallb_bin: PathBuf,
    out: Option<PathBuf>,
}

fn parse_opts(repo: &Path) -> Result<Opts> {
    let mut args = std::env::args().skip(1);
    let mut o = Opts {
        kinds: vec![Kind::Ours, Kind::Metallb],
        speakers: vec![3, 20],
        faults: 50,
        fault_kinds: vec![Fault::Kill, Fault::Cut, Fault::Term],
        services: 100,
        soak: 0,
        ours_bin: PathBuf::new(),
        metallb_bin: PathBuf::new(),
        out: None,
    };
    let mut ours_bin = None;
    let mut metallb_bin = None;
    while let Some(a) = args.next() {
        let mut val = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--impl" => {
                o.kinds = Kind::parse_list(&val()?, false)?;
            }
            "--speakers" => {
                o.speakers = val()?
                    .split(',')
                    .map(|s| s.parse().context("--speakers: numbers"))
                    .collect::<Result<_>>()?
            }
            "--faults" => o.faults = val()?.parse()?,
            "--kinds" => {
                o.fault_kinds = val()?
                    .split(',')
                    .map(|s| match s {
                        "kill" => Ok(Fault::Kill),
                        "cut" => Ok(Fault::Cut),
                        "term" => Ok(Fault::Term),
                        v => bail!("--kinds {v}: kill, cut or term"),
                    })
                    .collect::<Result<_>>()?
            }
            "--services" => o.services = val()?.parse()?,
            "--soak" => o.soak = val()?.parse()?,
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
        (1..=200).contains(&o.services),
        "--services: 1 to 200 (one /24)"
    );
    ensure!(
        o.speakers.iter().all(|n| (2..=40).contains(n)),
        "--speakers: 2 to 40 each"
    );
    o.ours_bin = e2e::bench::ours_bin_dir(repo, ours_bin);
    o.metallb_bin = e2e::bench::metallb_bin_dir(repo, metallb_bin)?;
    Ok(o)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = rt.block_on(run()) {
        eprintln!("bench-l2: {e:#}");
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
    let biggest = opts.speakers.iter().copied().max().unwrap_or(3);
    for &n in &opts.speakers {
        for &kind in &opts.kinds {
            let bin = match kind {
                Kind::Ours => opts.ours_bin.join("speaker"),
                Kind::Metallb => opts.metallb_bin.join("speaker"),
            };
            ensure!(bin.is_file(), "{} is missing", bin.display());
            eprintln!("bench-l2: === {} with {n} speakers ===", kind.name());
            let soak = if kind == Kind::Ours && n == biggest {
                opts.soak
            } else {
                0
            };
            let figures = bench(lab, kind, n, &bin, opts, soak).await?;
            println!(
                "FIGURES {} {n} {}",
                kind.name(),
                serde_json::to_string_pretty(&figures)?
            );
            all.insert(format!("{}-{n}", kind.name()), figures);
            if let Some(out) = &opts.out {
                std::fs::write(out, serde_json::to_vec_pretty(&Value::Object(all.clone()))?)?;
            }
        }
    }
    Ok(())
}

/// One implementation's lab: [`L2Lab`] and this benchmark's faults.
struct Bench<'a>(L2Lab<'a>);

impl<'a> std::ops::Deref for Bench<'a> {
    type Target = L2Lab<'a>;
    fn deref(&self) -> &L2Lab<'a> {
        &self.0
    }
}

impl std::ops::DerefMut for Bench<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

async fn bench(
    lab: &Lab,
    kind: Kind,
    nodes: usize,
    bin: &Path,
    opts: &Opts,
    soak: u64,
) -> Result<Value> {
    let mut b = Bench(L2Lab::up(lab, "bench-l2", kind, nodes, bin).await?);
    let result = b.run(opts, soak).await;
    b.0.down().await;
    result
}

/// The median and 99th percentile (nearest rank) of `v`, in ms.
fn stats(v: &[Duration]) -> Value {
    let mut ms: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    if ms.is_empty() {
        return json!({"n": 0});
    }
    let rank = |p: f64| ms[((p * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1];
    json!({
        "n": ms.len(),
        "median_ms": (rank(0.5) * 10.0).round() / 10.0,
        "p99_ms": (rank(0.99) * 10.0).round() / 10.0,
        "max_ms": (ms[ms.len() - 1] * 10.0).round() / 10.0,
        "min_ms": (ms[0] * 10.0).round() / 10.0,
    })
}

impl Bench<'_> {
    async fn run(&mut self, opts: &Opts, soak: u64) -> Result<Value> {
        let mut figures = serde_json::Map::new();
        // The probe first, then the others (198.51.100.100 on).
        let mut ips = vec![PROBE.to_owned()];
        for i in 0..opts.services.saturating_sub(1) {
            ips.push(format!("198.51.100.{}", 100 + i));
        }
        self.deploy(&ips).await?;
        let started = Instant::now();
        let first = self.owner(PROBE, Duration::from_secs(120)).await?;
        eprintln!(
            "bench-l2: {PROBE} answered by node-{first} {:.1} s after the speakers started",
            started.elapsed().as_secs_f64()
        );
        // Let the membership settle (MetalLB's memberlist joins in its own time).
        tokio::time::sleep(Duration::from_secs(10)).await;

        // Datagrams per second per node, quiet.
        let before: Vec<u64> = (1..=self.nodes)
            .map(|n| self.udp_out(n))
            .collect::<Result<_>>()?;
        let window = Duration::from_secs(20);
        tokio::time::sleep(window).await;
        let rates: Vec<f64> = (1..=self.nodes)
            .map(|n| Ok((self.udp_out(n)? - before[n - 1]) as f64 / window.as_secs_f64()))
            .collect::<Result<_>>()?;
        let mean = rates.iter().sum::<f64>() / rates.len() as f64;
        let max = rates.iter().copied().fold(0.0, f64::max);
        eprintln!("bench-l2: UDP datagrams per node per second: mean {mean:.1}, max {max:.1}");
        figures.insert(
            "udp_per_node_per_s".into(),
            json!({"mean": (mean * 10.0).round() / 10.0, "max": (max * 10.0).round() / 10.0}),
        );

        for &fault in &opts.fault_kinds {
            let mut times = Vec::new();
            let mut failures = Vec::new();
            for round in 0..opts.faults {
                match self.one_fault(fault).await {
                    Ok(t) => {
                        eprintln!(
                            "bench-l2: {} {} speakers {} #{round}: {:.1} ms",
                            self.kind.name(),
                            self.nodes,
                            fault.name(),
                            t.as_secs_f64() * 1e3
                        );
                        times.push(t);
                    }
                    Err(e) => {
                        eprintln!("bench-l2: {} #{round} failed: {e:#}", fault.name());
                        failures.push(format!("{e:#}"));
                        if failures.len() >= 10 {
                            eprintln!("bench-l2: {} failed 10 times: stopping it", fault.name());
                            break;
                        }
                    }
                }
            }
            let mut s = stats(&times);
            s["failed"] = json!(failures.len());
            eprintln!("bench-l2: {} {}: {s}", self.kind.name(), fault.name());
            figures.insert(fault.name().into(), s);
        }
        if soak > 0 {
            figures.insert("soak".into(), self.soak(&ips, soak).await?);
        }
        Ok(Value::Object(figures))
    }

    /// One fault of the probe's owner; returns the time from the fault to the client's
    /// neighbour event with another node's MAC. Undoes the fault and waits for the
    /// owner to answer again.
    async fn one_fault(&mut self, fault: Fault) -> Result<Duration> {
        let owner = self.owner(PROBE, Duration::from_secs(60)).await?;
        self.resolve(PROBE, owner).await?;
        // The successor's heartbeat (ours) arms within about 1 s of a (re)start.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let owner_mac = self
            .macs
            .iter()
            .find(|(_, v)| **v == owner)
            .map(|(m, _)| m.clone())
            .context("mac")?;
        // `ip -ts monitor neigh` in the client: each line read is timed here.
        let mut cmd = self.net.net.client().command("ip");
        cmd.args(["-ts", "monitor", "neigh", "dev", &self.client_if])
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut mon = cmd.spawn().context("ip monitor neigh")?;
        let stdout = mon.stdout.take().context("stdout")?;
        let (tx, rx) = mpsc::channel::<(Instant, String)>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        // `ip monitor` subscribes before it prints anything: give it a moment.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let at = Instant::now();
        let mut cut = None;
        match fault {
            Fault::Kill => {
                if let Some(c) = self.speakers[owner - 1].as_mut() {
                    c.signal(Signal::KILL);
                }
            }
            Fault::Term => {
                if let Some(c) = self.speakers[owner - 1].as_mut() {
                    c.signal(Signal::TERM);
                }
            }
            Fault::Cut => cut = Some(self.net.net.cut_cable(&plan::node_name(owner))?),
        }
        let probe = format!("{PROBE} ");
        let result = loop {
            let left = FAILOVER_TIMEOUT.saturating_sub(at.elapsed());
            match tokio::task::block_in_place(|| rx.recv_timeout(left)) {
                Ok((t, line)) => {
                    let l = line.to_ascii_lowercase();
                    if l.contains(&probe)
                        && let Some(mac) =
                            l.split_whitespace().skip_while(|w| *w != "lladdr").nth(1)
                        && mac != owner_mac
                        && self.macs.contains_key(mac)
                    {
                        break Ok(t.duration_since(at));
                    }
                }
                Err(_) => {
                    break Err(anyhow::anyhow!(
                        "no neighbour event moving {PROBE} off node-{owner} within {FAILOVER_TIMEOUT:?}; its log:\n{}",
                        self.speaker_log(owner)
                    ));
                }
            }
        };
        let _ = mon.kill();
        let _ = mon.wait();
        let _ = reader.join();
        // Undo: a new process (and the cable back).
        if let Some(c) = cut {
            c.restore()?;
        }
        if let Some(mut c) = self.speakers[owner - 1].take() {
            let _ =
                tokio::task::block_in_place(|| c.stop_with(Signal::KILL, Duration::from_secs(10)));
        }
        self.start_speaker(owner)?;
        // The old owner answers again (the hash order): the next round's starting point.
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let o = tokio::task::block_in_place(|| self.arp_owners(PROBE))?;
            if o == [owner] {
                break;
            }
            if Instant::now() > deadline {
                bail!("node-{owner} did not take {PROBE} back within 90 s (answers {o:?})");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        result
    }

    /// `secs` under CPU load with every speaker running: takeovers and owner changes of
    /// every address (ours only: the counters are ours).
    async fn soak(&mut self, ips: &[String], secs: u64) -> Result<Value> {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let mut busy = Vec::new();
        for _ in 0..2 * cores {
            busy.push(
                std::process::Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()?,
            );
        }
        let r = self.soak_inner(ips, secs).await;
        for mut b in busy {
            let _ = b.kill();
            let _ = b.wait();
        }
        r
    }

    async fn soak_inner(&mut self, ips: &[String], secs: u64) -> Result<Value> {
        let owners = |b: &Self| -> Result<BTreeMap<String, Vec<usize>>> {
            ips.iter()
                .map(|ip| Ok((ip.clone(), b.arp_owners(ip)?)))
                .collect()
        };
        let counters = |b: &Self| -> Result<(f64, f64)> {
            let (mut down, mut faults) = (0.0, 0.0);
            for n in 1..=b.nodes {
                let body = e2e::speakers::http_get_in_blocking(
                    b.net.net.node(n).name(),
                    7472,
                    "/metrics",
                )?;
                down +=
                    e2e::speakers::metric_value(&body, "metallb_rs_membership_owner_down_total")
                        .unwrap_or(0.0);
                faults +=
                    e2e::speakers::metric_value(&body, "metallb_rs_membership_path_faults_total")
                        .unwrap_or(0.0);
            }
            Ok((down, faults))
        };
        let start_owners = tokio::task::block_in_place(|| owners(self))?;
        let (down0, faults0) = tokio::task::block_in_place(|| counters(self))?;
        let started = Instant::now();
        let mut changes = 0usize;
        let mut last = start_owners.clone();
        let mut checks = 0usize;
        while started.elapsed() < Duration::from_secs(secs) {
            tokio::time::sleep(Duration::from_secs(20)).await;
            let now = tokio::task::block_in_place(|| owners(self))?;
            checks += 1;
            for (ip, o) in &now {
                if last.get(ip) != Some(o) {
                    changes += 1;
                    eprintln!(
                        "bench-l2: soak: {ip} answered by {:?}, was {:?}",
                        o,
                        last.get(ip)
                    );
                }
            }
            last = now;
        }
        let (down1, faults1) = tokio::task::block_in_place(|| counters(self))?;
        let doubled = last.values().filter(|o| o.len() > 1).count();
        let v = json!({
            "seconds": secs,
            "owner_checks": checks,
            "owner_changes": changes,
            "takeovers": down1 - down0,
            "path_faults": faults1 - faults0,
            "addresses_answered_twice_at_end": doubled,
        });
        eprintln!("bench-l2: soak: {v}");
        Ok(v)
    }
}
