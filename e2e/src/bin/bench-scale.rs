//! bench-scale: issue 25's scale harness (BENCHMARKS.md, "Scale"). API objects only, no
//! kubelet: against the lab's real API server it generates Nodes with realistic status
//! (addresses, conditions, 50 images), LoadBalancer Services without selectors and their
//! EndpointSlices (5 endpoints each, on the generated Nodes), with bounded concurrency,
//! then, for each implementation (ours, MetalLB v0.15.2 built by `lab/build-metallb`):
//!
//! 1. its controller (in the test kit's `client` namespace, through an API relay): time until
//!    every Service has an address from a 198.18.0.0/15 pool, CPU and RSS;
//! 2. one speaker as a BGP node (node-1's namespace, through its API relay) with 4 BGPPeers
//!    at addresses of the node's segment where nothing answers (192.0.2.201-204: the
//!    sessions never come up; the speaker does its whole decision pass and keeps retrying
//!    the connections inside the namespace): RSS (peak, settled), CPU of the first pass,
//!    time to `/readyz` (ours) and to a quiet CPU (both), API bytes (the namespace's loopback
//!    to the relay), API writes by
//!    kind (audit log) during the first pass and over a window at rest;
//!
//! and, once, etcd's growth (`etcd_mvcc_db_total_size_in_bytes`) for the generated objects
//! and per N ServiceBGPStatus objects written as the status writer writes them (create,
//! then a server-side apply of the status subresource).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use e2e::bench::Impl as Kind;
use e2e::{Audit, AuditFilter, Lab, NodeNetwork};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::apiproxy::ApiProxy;
use testkit::process::Signal;
use testkit::{LabOptions, NsChild};

const USAGE: &str = "\
usage: bench-scale [--impl ours|metallb|both|none] [--keep] [--reuse] [--nodes N] [--services N] [--slices N]
                   [--bgp-status N] [--concurrency N] [--rest S] [--alloc-timeout S]
                   [--pass-timeout S] [--ours-bin DIR]
                   [--metallb-bin DIR] [--out FILE] [--speaker-arg A] [--speaker-env K=V]
                   [--skip-controller] [--node-bgp-status N] [--node-bgp-exceptions K]

Issue 25's scale harness against the lab (lab/cluster up, root, the test kit's tools):
  --impl         which to run (default both: ours, then MetalLB v0.15.2; none: only
                 generate and measure etcd)
  --keep         keep the generated objects (namespace bench-scale-svc, the Nodes)
  --reuse        use the objects a --keep run left (same sizes), generate nothing
  --nodes N      generated Nodes (default 5000)
  --services N   LoadBalancer Services (default 10000)
  --slices N     EndpointSlices per Service (default 3: 30,000 for 10,000 Services)
  --bgp-status N ServiceBGPStatus objects created for etcd's growth (default 100000; 0: none)
  --concurrency  requests in flight while generating (default 32)
  --rest S       seconds of the at-rest window (default 60)
  --alloc-timeout S  the controller's bound to allocate every Service (default 600)
  --pass-timeout S   the speaker's bound for its first pass (default 600)
  --ours-bin     directory of our controller and speaker (default
                 $CARGO_TARGET_DIR/release, else <repo>/target/release)
  --metallb-bin  directory of MetalLB's (default: lab/build-metallb bindir)
  --out FILE     also write the figures as JSON
  --speaker-arg A  one more argument for our speaker (repeatable), e.g.
                 --speaker-arg=--service-bgp-status=summary
  --speaker-env K=V  one more environment variable for the speaker (repeatable), e.g.
                 --speaker-env MALLOC_ARENA_MAX=2
  --skip-controller  with --reuse: no controller; the speaker runs with the addresses a
                 previous run allocated (nothing released)
  --node-bgp-status N  NodeBGPStatus objects (one per generated Node, as the speaker's
                 summary mode writes them) and 4 BGPSessionStatus per such Node, created
                 for etcd's growth per object (default 0: none; at most --nodes)
  --node-bgp-exceptions K  Services each NodeBGPStatus lists (externalTrafficPolicy
                 Local, announced to the 4 peers; default 100, the speaker's cap)";

/// The pool of the benchmark (198.18.0.0/15 is the benchmarking prefix): 65,536 addresses.
const POOL: &str = "198.18.0.0/16";
/// The cluster IPs of the generated Services (the lab's own range holds 126).
const SERVICE_CIDR: &str = "bench-scale";
const SERVICE_CIDR_RANGE: &str = "198.19.0.0/17";
/// BGPPeers on node-1's segment where nothing answers.
const PEERS: [&str; 4] = ["192.0.2.201", "192.0.2.202", "192.0.2.203", "192.0.2.204"];
const SPEAKER_NODE: usize = 1;

struct Opts {
    kinds: Vec<Kind>,
    nodes: usize,
    services: usize,
    slices: usize,
    bgp_status: usize,
    concurrency: usize,
    rest: u64,
    keep: bool,
    reuse: bool,
    alloc_timeout: u64,
    pass_timeout: u64,
    ours_bin: PathBuf,
    metallb_bin: PathBuf,
    out: Option<PathBuf>,
    /// More arguments for our speaker (e.g. `--service-bgp-status=summary`).
    speaker_args: Vec<String>,
    /// More environment variables for the speaker (e.g. `MALLOC_ARENA_MAX=2`).
    speaker_env: Vec<(String, String)>,
    /// No controller: the speaker runs with the addresses a previous run left.
    skip_controller: bool,
    /// NodeBGPStatus objects (and 4 BGPSessionStatus each) for etcd's growth.
    node_bgp_status: usize,
    /// Services each of those NodeBGPStatus lists.
    node_bgp_exceptions: usize,
}

fn parse_opts(repo: &Path) -> Result<Opts> {
    let mut args = std::env::args().skip(1);
    let mut o = Opts {
        kinds: vec![Kind::Ours, Kind::Metallb],
        nodes: 5000,
        services: 10_000,
        slices: 3,
        bgp_status: 100_000,
        concurrency: 32,
        rest: 60,
        keep: false,
        reuse: false,
        alloc_timeout: 600,
        pass_timeout: 600,
        ours_bin: PathBuf::new(),
        metallb_bin: PathBuf::new(),
        out: None,
        speaker_args: Vec::new(),
        speaker_env: Vec::new(),
        skip_controller: false,
        node_bgp_status: 0,
        node_bgp_exceptions: 100,
    };
    let (mut ours_bin, mut metallb_bin) = (None, None);
    while let Some(a) = args.next() {
        let mut val = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--impl" => {
                o.kinds = Kind::parse_list(&val()?, true)?;
            }
            "--nodes" => o.nodes = val()?.parse()?,
            "--services" => o.services = val()?.parse()?,
            "--slices" => o.slices = val()?.parse()?,
            "--bgp-status" => o.bgp_status = val()?.parse()?,
            "--concurrency" => o.concurrency = val()?.parse()?,
            "--rest" => o.rest = val()?.parse()?,
            "--keep" => o.keep = true,
            "--reuse" => o.reuse = true,
            "--alloc-timeout" => o.alloc_timeout = val()?.parse()?,
            "--pass-timeout" => o.pass_timeout = val()?.parse()?,
            "--ours-bin" => ours_bin = Some(PathBuf::from(val()?)),
            "--metallb-bin" => metallb_bin = Some(PathBuf::from(val()?)),
            "--out" => o.out = Some(PathBuf::from(val()?)),
            "--speaker-arg" => o.speaker_args.push(val()?),
            "--speaker-env" => {
                let kv = val()?;
                let (k, v) = kv
                    .split_once('=')
                    .with_context(|| format!("--speaker-env {kv}: not K=V"))?;
                o.speaker_env.push((k.to_owned(), v.to_owned()));
            }
            "--skip-controller" => o.skip_controller = true,
            "--node-bgp-status" => o.node_bgp_status = val()?.parse()?,
            "--node-bgp-exceptions" => o.node_bgp_exceptions = val()?.parse()?,
            // (the value starts with `--`: `--speaker-arg=--flag=value` reads better)
            a if a.starts_with("--speaker-arg=") => {
                o.speaker_args.push(a["--speaker-arg=".len()..].to_owned());
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => bail!("unknown argument {a}\n{USAGE}"),
        }
    }
    // Bounded: the cluster IP range is a /17, the pool a /16, node addresses a /17.
    ensure!(
        (1..=30_000).contains(&o.services),
        "--services 1..=30000 (cluster IPs from a /17)"
    );
    ensure!((1..=30_000).contains(&o.nodes), "--nodes 1..=30000");
    ensure!((1..=10).contains(&o.slices), "--slices 1..=10");
    ensure!(o.bgp_status <= 200_000, "--bgp-status at most 200000");
    ensure!(
        o.node_bgp_status <= o.nodes,
        "--node-bgp-status at most --nodes (one per generated Node)"
    );
    ensure!(
        o.node_bgp_exceptions <= 2000,
        "--node-bgp-exceptions at most 2000"
    );
    ensure!(
        !o.skip_controller || o.reuse,
        "--skip-controller needs --reuse (addresses a previous run allocated)"
    );
    ensure!((1..=128).contains(&o.concurrency), "--concurrency 1..=128");
    ensure!(o.rest <= 600, "--rest at most 600 s");
    ensure!(o.alloc_timeout <= 1800, "--alloc-timeout at most 1800 s");
    ensure!(o.pass_timeout <= 1800, "--pass-timeout at most 1800 s");
    o.ours_bin = e2e::bench::ours_bin_dir(repo, ours_bin);
    o.metallb_bin = e2e::bench::metallb_bin_dir(repo, metallb_bin)?;
    Ok(o)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = rt.block_on(run()) {
        eprintln!("bench-scale: {e:#}");
        std::process::exit(1);
    }
}

async fn run() -> Result<()> {
    let lab = Lab::connect().await?;
    let opts = parse_opts(lab.repo())?;
    for k in &opts.kinds {
        let dir = match k {
            Kind::Ours => &opts.ours_bin,
            Kind::Metallb => &opts.metallb_bin,
        };
        for b in ["controller", "speaker"] {
            ensure!(
                dir.join(b).is_file(),
                "{} is missing ({} binaries)",
                dir.join(b).display(),
                k.name()
            );
        }
    }
    let figures = bench_all(&lab, &opts).await?;
    let text = serde_json::to_string_pretty(&figures)?;
    println!("{text}");
    if let Some(out) = &opts.out {
        std::fs::write(out, &text)?;
    }
    Ok(())
}

/// Runs `count` calls of `f(i)` with at most `concurrency` in flight; fails on the first
/// error (after the calls in flight end).
async fn bounded<F, Fut>(count: usize, concurrency: usize, f: F) -> Result<()>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let f = Arc::new(f);
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..concurrency.min(count) {
        let (next, f) = (next.clone(), f.clone());
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<(), anyhow::Error>(());
                }
                // Retries a request the API server turned away for load (429, timeouts).
                let mut tries = 0;
                loop {
                    match f(i).await {
                        Ok(()) => break,
                        Err(e) if tries < 5 => {
                            tries += 1;
                            eprintln!("bench-scale: item {i}: {e:#} (retry {tries})");
                            tokio::time::sleep(Duration::from_millis(500 * tries)).await;
                        }
                        Err(e) => return Err(e.context(format!("item {i}"))),
                    }
                }
            }
        });
    }
    let mut first_err = None;
    while let Some(r) = set.join_next().await {
        if let Err(e) = r.context("a generator task panicked").and_then(|r| r) {
            next.store(count, Ordering::Relaxed);
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// etcd's `etcd_mvcc_db_total_size_in_bytes` and `..._in_use_in_bytes` (the lab's etcd
/// serves plain HTTP on 127.0.0.1:LAB_ETCD_PORT).
async fn etcd_db_size() -> Result<(u64, u64)> {
    let port = std::env::var("LAB_ETCD_PORT").unwrap_or_else(|_| "12379".into());
    let out = tokio::process::Command::new("curl")
        .args(["-sf", &format!("http://127.0.0.1:{port}/metrics")])
        .output()
        .await
        .context("curl etcd /metrics")?;
    ensure!(
        out.status.success(),
        "etcd /metrics on port {port}: {}",
        out.status
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let get = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map(|v| v as u64)
            .with_context(|| format!("{name} not in etcd's metrics"))
    };
    Ok((
        get("etcd_mvcc_db_total_size_in_bytes")?,
        get("etcd_mvcc_db_total_size_in_use_in_bytes")?,
    ))
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
    let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    Ok((kb("VmRSS:"), kb("VmHWM:"), ticks as f64 / 100.0))
}

/// Bytes through the loopback of a namespace (the API relay's client side: a process's
/// API traffic, both directions, TLS included; lo counts each packet once as received).
fn lo_bytes(ns: &testkit::Netns) -> Result<u64> {
    let dev = ns.run("cat", &["/proc/net/dev"])?;
    dev.lines()
        .find_map(|l| l.trim_start().strip_prefix("lo:"))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("no lo in /proc/net/dev")
}

fn node_name(i: usize) -> String {
    // 40 characters, as the review's sizes assume.
    format!("bench-scale-worker-{i:05}.rack-{:03}.dc1.example", i / 40)
}

/// 198.19.128.0/17: node addresses (never used on any link).
fn node_ip(i: usize) -> String {
    format!("198.19.{}.{}", 128 + i / 250, 1 + i % 250)
}

fn node_object(i: usize) -> Result<Node> {
    let name = node_name(i);
    let images: Vec<Value> = (0..50)
        .map(|k| {
            json!({
                "names": [
                    format!("registry.example/team-{}/app-{k}@sha256:{:064x}", k % 7, (i as u128) * 1000 + k as u128),
                    format!("registry.example/team-{}/app-{k}:v1.{k}.{}", k % 7, i % 10),
                ],
                "sizeBytes": 10_000_000 + 1_000 * k as i64,
            })
        })
        .collect();
    let cond = |t: &str, s: &str, reason: &str| {
        json!({"type": t, "status": s, "reason": reason, "message": format!("kubelet reports {reason}"),
               "lastHeartbeatTime": "2026-11-28T20:00:00Z", "lastTransitionTime": "2026-11-28T10:00:00Z"})
    };
    Ok(serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "m5.2xlarge",
                "topology.kubernetes.io/region": "region-1",
                "topology.kubernetes.io/zone": format!("zone-{}", i % 3),
                "rack": format!("rack-{:03}", i / 40),
                "bench-scale.metallb-rs.io/generated": "true",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"podCIDR": format!("10.{}.{}.0/24", 64 + i / 256, i % 256), "providerID": format!("bench://{name}")},
        "status": {
            "addresses": [{"type": "InternalIP", "address": node_ip(i)}, {"type": "Hostname", "address": name}],
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"},
            "allocatable": {"cpu": "7800m", "memory": "31Gi", "pods": "110", "ephemeral-storage": "95Gi"},
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID"),
                cond("Ready", "True", "KubeletReady"),
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": format!("{i:032x}"), "systemUUID": format!("{i:08x}-0000-0000-0000-000000000000"),
                         "bootID": format!("{i:08x}-1111-1111-1111-111111111111"), "kernelVersion": "6.1.0",
                         "osImage": "Debian GNU/Linux 12", "containerRuntimeVersion": "containerd://1.7.0",
                         "kubeletVersion": "v1.37.2", "kubeProxyVersion": "", "operatingSystem": "linux",
                         "architecture": "amd64"},
            "images": images,
        },
    }))?)
}

struct Objects<'a> {
    lab: &'a Lab,
    opts: &'a Opts,
    svc_ns: String,
}

impl Objects<'_> {
    fn service_name(i: usize) -> String {
        format!("svc-{i:05}")
    }

    /// Nodes, then Services, then EndpointSlices; returns figures.
    async fn generate(&self) -> Result<Value> {
        let mut fig = serde_json::Map::new();
        let conc = self.opts.concurrency;
        let t = Instant::now();
        let nodes = Api::<Node>::all(self.lab.client.clone());
        let n = self.opts.nodes;
        // Nodes a failed run left are kept (all of them there: nothing to do).
        let have = nodes
            .list_metadata(
                &ListParams::default().labels("bench-scale.metallb-rs.io/generated=true"),
            )
            .await?
            .items
            .len();
        fig.insert("nodes_existing".into(), json!(have));
        if have != n {
            let nodes = nodes.clone();
            bounded(n, conc, move |i| {
                let nodes = nodes.clone();
                async move {
                    let node = node_object(i)?;
                    match nodes.create(&PostParams::default(), &node).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
                        Err(e) => return Err(e.into()),
                    }
                    // A Node's status is kept on create, but write it as the kubelet does
                    // in case the server dropped it.
                    let status = json!({"status": serde_json::to_value(&node.status)?});
                    nodes
                        .patch_status(
                            &node_name(i),
                            &PatchParams::default(),
                            &Patch::Merge(&status),
                        )
                        .await?;
                    Ok(())
                }
            })
            .await
            .context("generating Nodes")?;
        }
        fig.insert("nodes_s".into(), json!(t.elapsed().as_secs_f64()));
        let sample = nodes.get(&node_name(0)).await?;
        fig.insert(
            "node_json_bytes".into(),
            json!(serde_json::to_vec(&sample)?.len()),
        );
        ensure!(
            sample
                .status
                .as_ref()
                .and_then(|s| s.images.as_ref())
                .map(Vec::len)
                == Some(50),
            "the generated Node lost its images"
        );

        let t = Instant::now();
        let svcs = Api::<Service>::namespaced(self.lab.client.clone(), &self.svc_ns);
        {
            let svcs = svcs.clone();
            bounded(self.opts.services, conc, move |i| {
                let svcs = svcs.clone();
                async move {
                    let name = Objects::service_name(i);
                    let svc: Service = serde_json::from_value(json!({
                        "metadata": {"name": name,
                                     "labels": {"app.kubernetes.io/name": format!("app-{}", i % 100),
                                                "app.kubernetes.io/instance": name,
                                                "app.kubernetes.io/managed-by": "bench-scale",
                                                "team": format!("team-{}", i % 7), "tier": "frontend"},
                                     "annotations": {"bench-scale.metallb-rs.io/owner": format!("team-{}", i % 7)}},
                        // No selector: the harness writes the EndpointSlices.
                        "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Cluster",
                                 // The NodePort range holds 2,768.
                                 "allocateLoadBalancerNodePorts": false,
                                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]},
                    }))?;
                    match svcs.create(&PostParams::default(), &svc).await {
                        Ok(_) => Ok(()),
                        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                        Err(e) => Err(e.into()),
                    }
                }
            })
            .await
            .context("generating Services")?;
        }
        fig.insert("services_s".into(), json!(t.elapsed().as_secs_f64()));

        let t = Instant::now();
        let slices = Api::<EndpointSlice>::namespaced(self.lab.client.clone(), &self.svc_ns);
        let per = self.opts.slices;
        let nodes_n = self.opts.nodes;
        bounded(self.opts.services * per, conc, move |k| {
            let slices = slices.clone();
            async move {
                let (i, j) = (k / per, k % per);
                let name = Objects::service_name(i);
                let endpoints: Vec<Value> = (0..5)
                    .map(|e| {
                        let pod = i * per * 5 + j * 5 + e;
                        let node = (pod * 7919) % nodes_n;
                        json!({"addresses": [format!("10.{}.{}.{}", 64 + node / 256, node % 256, 2 + pod % 250)],
                               "conditions": {"ready": true, "serving": true, "terminating": false},
                               "nodeName": node_name(node),
                               "zone": format!("zone-{}", node % 3),
                               "targetRef": {"kind": "Pod", "namespace": "bench", "name": format!("{name}-pod-{j}-{e}"),
                                             "uid": format!("{pod:08x}-2222-2222-2222-222222222222")}})
                    })
                    .collect();
                let slice: EndpointSlice = serde_json::from_value(json!({
                    "metadata": {"name": format!("{name}-{j}"),
                                 "labels": {"kubernetes.io/service-name": name,
                                            "endpointslice.kubernetes.io/managed-by": "bench-scale.metallb-rs.io"}},
                    "addressType": "IPv4",
                    "endpoints": endpoints,
                    "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
                }))?;
                match slices.create(&PostParams::default(), &slice).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
        })
        .await
        .context("generating EndpointSlices")?;
        fig.insert("slices_s".into(), json!(t.elapsed().as_secs_f64()));
        Ok(Value::Object(fig))
    }

    /// Services with an address in their status.
    async fn allocated(&self) -> Result<usize> {
        let svcs = Api::<Service>::namespaced(self.lab.client.clone(), &self.svc_ns);
        let mut n = 0;
        let mut lp = ListParams::default().limit(2000);
        loop {
            let page = svcs.list(&lp).await?;
            n += page
                .items
                .iter()
                .filter(|s| {
                    s.status
                        .as_ref()
                        .and_then(|s| s.load_balancer.as_ref())
                        .and_then(|l| l.ingress.as_ref())
                        .is_some_and(|i| !i.is_empty())
                })
                .count();
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(c) => lp = lp.continue_token(&c),
                None => return Ok(n),
            }
        }
    }

    /// Clears every Service's addresses (between implementations).
    async fn release_all(&self) -> Result<()> {
        let svcs = Api::<Service>::namespaced(self.lab.client.clone(), &self.svc_ns);
        bounded(self.opts.services, self.opts.concurrency, move |i| {
            let svcs = svcs.clone();
            async move {
                let name = Objects::service_name(i);
                svcs.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"status": {"loadBalancer": {"ingress": null}}})),
                )
                .await?;
                // Our controller's and MetalLB's record of the allocation.
                svcs.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"metadata": {"annotations": {
                        "metallb.io/ip-allocated-from-pool": null,
                        "metallb.universe.tf/ip-allocated-from-pool": null}}})),
                )
                .await?;
                Ok(())
            }
        })
        .await
    }
}

/// ServiceBGPStatus objects written as the status writer writes them (create, then a
/// server-side apply of the status), in a namespace of their own; returns etcd's growth.
/// Creates `obj` (already there: kept) and server-side applies its `status` as the
/// speaker's status writers do.
async fn create_with_status(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    kind: &str,
    status: Value,
) -> Result<()> {
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let name = obj
        .metadata
        .name
        .as_deref()
        .context("the object has no name")?;
    let status = json!({"apiVersion": "metallb.io/v1beta1", "kind": kind, "status": status});
    api.patch_status(
        name,
        &PatchParams::apply("metallb-rs-speaker").force(),
        &Patch::Apply(&status),
    )
    .await?;
    Ok(())
}

async fn bgp_status_growth(lab: &Lab, opts: &Opts, ns: &str) -> Result<Value> {
    let n = opts.bgp_status;
    let before = etcd_db_size().await?;
    let t = Instant::now();
    let api = lab.metallb(&lab.client, ns, "ServiceBGPStatus");
    let ns_s = ns.to_string();
    let nodes = opts.nodes.max(1);
    bounded(n, opts.concurrency, move |i| {
        let (api, ns) = (api.clone(), ns_s.clone());
        async move {
            let node = node_name(i % nodes);
            let svc = Objects::service_name(i / nodes);
            let name = format!("{svc}-{:x}", i);
            let obj: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "metallb.io/v1beta1", "kind": "ServiceBGPStatus",
                "metadata": {"name": name, "namespace": ns,
                             "labels": {"metallb.io/node": node, "metallb.io/service-name": svc,
                                        "metallb.io/service-namespace": "bench-scale-svc"}},
            }))?;
            let status = json!({"node": node, "serviceName": svc, "serviceNamespace": "bench-scale-svc",
                                "peers": ["tor-a-peer", "tor-b-peer"]});
            create_with_status(&api, &obj, "ServiceBGPStatus", status).await
        }
    })
    .await
    .context("creating ServiceBGPStatus objects")?;
    let secs = t.elapsed().as_secs_f64();
    // Let etcd's backend commit (its batch interval is 100 ms).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = etcd_db_size().await?;
    let sample = lab
        .metallb(&lab.client, ns, "ServiceBGPStatus")
        .get(&format!("{}-{:x}", Objects::service_name(0), 0))
        .await?;
    let grow = after.0.saturating_sub(before.0);
    let grow_in_use = after.1.saturating_sub(before.1);
    Ok(json!({
        "objects": n,
        "create_and_status_s": secs,
        "object_json_bytes": serde_json::to_vec(&sample)?.len(),
        "db_total_before": before.0, "db_total_after": after.0,
        "db_in_use_before": before.1, "db_in_use_after": after.1,
        "db_total_growth_bytes_per_object": grow as f64 / n.max(1) as f64,
        "db_in_use_growth_bytes_per_object": grow_in_use as f64 / n.max(1) as f64,
    }))
}

/// The speaker's summary-mode status objects of `opts.node_bgp_status` generated Nodes, as
/// its status writer writes them (create with the node label and the Node as owner, then a
/// server-side apply of the status), in a namespace of their own: one NodeBGPStatus listing
/// `opts.node_bgp_exceptions` Services, and one BGPSessionStatus per peer (4, down). Returns
/// etcd's growth per object of each kind.
async fn node_bgp_status_growth(lab: &Lab, opts: &Opts, ns: &str) -> Result<Value> {
    let n = opts.node_bgp_status;
    let uids: Arc<std::collections::BTreeMap<String, String>> = Arc::new(
        Api::<Node>::all(lab.client.clone())
            .list_metadata(
                &ListParams::default().labels("bench-scale.metallb-rs.io/generated=true"),
            )
            .await?
            .items
            .into_iter()
            .filter_map(|m| Some((m.metadata.name?, m.metadata.uid?)))
            .collect(),
    );
    let peers: Vec<String> = (0..PEERS.len()).map(|k| format!("tor-{k}")).collect();
    let k = opts.node_bgp_exceptions;
    let exceptions: Vec<Value> = (0..k)
        .map(|j| {
            json!({"serviceNamespace": "bench-scale-svc", "serviceName": Objects::service_name(j),
                   "announced": true, "peers": peers})
        })
        .collect();
    let owner = move |node: &str| -> Value {
        match uids.get(node) {
            Some(uid) => json!([{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}]),
            None => json!([]),
        }
    };
    let mut fig = serde_json::Map::new();
    fig.insert("objects".into(), json!(n));
    fig.insert("exceptions_each".into(), json!(k));
    // (kind, objects per node)
    for (kind, per) in [("NodeBGPStatus", 1), ("BGPSessionStatus", PEERS.len())] {
        let before = etcd_db_size().await?;
        let t = Instant::now();
        let api = lab.metallb(&lab.client, ns, kind);
        let (ns_s, owner, peers, exceptions) = (
            ns.to_string(),
            owner.clone(),
            peers.clone(),
            exceptions.clone(),
        );
        let name_of = move |i: usize| -> (String, String, usize) {
            let node = node_name(i / per);
            match kind {
                "NodeBGPStatus" => (node.clone(), node, 0),
                _ => (format!("{node}-tor-{}", i % per), node, i % per),
            }
        };
        bounded(n * per, opts.concurrency, move |i| {
            let (api, ns) = (api.clone(), ns_s.clone());
            let (name, node, peer) = name_of(i);
            let mut labels = json!({"metallb.io/node": node});
            let status = if kind == "NodeBGPStatus" {
                json!({"node": node, "peers": peers,
                       "localPrefixes": if k > 0 {
                           json!([{"pool": "bench", "advertisement": "all", "prefixes": k}])
                       } else {
                           json!([])
                       },
                       "localServices": k, "exceptions": exceptions})
            } else {
                labels["metallb.io/peer"] = json!(peers[peer]);
                json!({"node": node, "peer": peers[peer], "bgpStatus": "Active", "bfdStatus": "N/A",
                       "lastTransitionTime": "2026-11-29T19:00:00Z",
                       "lastError": format!("connect to {}:179: Connection refused (os error 111)", PEERS[peer])})
            };
            let obj = json!({"apiVersion": "metallb.io/v1beta1", "kind": kind,
                             "metadata": {"name": name, "namespace": ns, "labels": labels,
                                          "ownerReferences": owner(&node)}});
            async move {
                let obj: DynamicObject = serde_json::from_value(obj)?;
                create_with_status(&api, &obj, kind, status).await
            }
        })
        .await
        .with_context(|| format!("creating {kind} objects"))?;
        let secs = t.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = etcd_db_size().await?;
        let sample = lab
            .metallb(&lab.client, ns, kind)
            .get(&name_of(0).0)
            .await?;
        let objects = (n * per).max(1) as f64;
        fig.insert(
            kind.into(),
            json!({"objects": n * per, "create_and_status_s": secs,
                   "object_json_bytes": serde_json::to_vec(&sample)?.len(),
                   "db_total_before": before.0, "db_total_after": after.0,
                   "db_in_use_before": before.1, "db_in_use_after": after.1,
                   "db_total_growth_bytes_per_object": after.0.saturating_sub(before.0) as f64 / objects,
                   "db_in_use_growth_bytes_per_object": after.1.saturating_sub(before.1) as f64 / objects}),
        );
    }
    Ok(Value::Object(fig))
}

async fn bench_all(lab: &Lab, opts: &Opts) -> Result<Value> {
    let mut figs = serde_json::Map::new();
    figs.insert(
        "sizes".into(),
        json!({"nodes": opts.nodes, "services": opts.services,
               "endpointslices": opts.services * opts.slices, "bgp_status": opts.bgp_status}),
    );
    let suffix = e2e::unique_suffix();
    let svc_ns = "bench-scale-svc".to_string();
    let etcd_ns = format!("bench-scale-etcd-{suffix}");
    let nsapi = Api::<Namespace>::all(lab.client.clone());
    for ns in [&svc_ns, &etcd_ns] {
        if opts.reuse && *ns == svc_ns {
            ensure!(
                nsapi.get_opt(ns).await?.is_some(),
                "--reuse: no namespace {ns} (run with --keep first)"
            );
            continue;
        }
        // A run that failed left the generated objects: they are reused (409s).
        match nsapi
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("creating namespace {ns}")),
        }
    }
    let cidrs = Api::<ServiceCIDR>::all(lab.client.clone());
    if cidrs.get_opt(SERVICE_CIDR).await?.is_none() {
        cidrs
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": SERVICE_CIDR},
                                               "spec": {"cidrs": [SERVICE_CIDR_RANGE]}}))?,
            )
            .await?;
    }
    // The lab runs no service-cidr-controller (no Ready condition): the API server's
    // allocator takes the range from its informer, and a Service created before that is
    // retried by `bounded`.

    let objects = Objects {
        lab,
        opts,
        svc_ns: svc_ns.clone(),
    };
    if opts.reuse {
        let svcs = Api::<Service>::namespaced(lab.client.clone(), &svc_ns)
            .list_metadata(&ListParams::default())
            .await?
            .items
            .len();
        ensure!(
            svcs == opts.services,
            "--reuse: {svcs} Services in {svc_ns}, not --services {}",
            opts.services
        );
        // Addresses a previous run left (kept for the speaker with --skip-controller).
        if !opts.skip_controller {
            objects.release_all().await?;
        }
    }
    let e0 = etcd_db_size().await?;
    let gen_fig = if opts.reuse {
        json!({"reused": true})
    } else {
        objects.generate().await?
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let e1 = etcd_db_size().await?;
    let mut gen_fig = gen_fig;
    gen_fig["etcd_db_total_before"] = json!(e0.0);
    gen_fig["etcd_db_total_after"] = json!(e1.0);
    gen_fig["etcd_db_in_use_growth"] = json!(e1.1.saturating_sub(e0.1));
    eprintln!("bench-scale: generated {gen_fig}");
    figs.insert("generate".into(), gen_fig);

    if opts.bgp_status > 0 {
        let g = bgp_status_growth(lab, opts, &etcd_ns).await?;
        eprintln!("bench-scale: etcd {g}");
        figs.insert("etcd_bgp_status".into(), g);
    }
    if opts.node_bgp_status > 0 {
        let g = node_bgp_status_growth(lab, opts, &etcd_ns).await?;
        eprintln!("bench-scale: etcd summary mode {g}");
        figs.insert("etcd_node_bgp_status".into(), g);
    }

    for (i, kind) in opts.kinds.iter().enumerate() {
        if i > 0 && !opts.skip_controller {
            objects.release_all().await?;
        }
        let bin = match kind {
            Kind::Ours => &opts.ours_bin,
            Kind::Metallb => &opts.metallb_bin,
        };
        let f = bench_impl(lab, opts, &objects, *kind, bin).await;
        let f = f.with_context(|| format!("{} run", kind.name()))?;
        eprintln!("bench-scale: {} {f}", kind.name());
        figs.insert(kind.name().into(), f);
    }
    let _ = nsapi.delete(&etcd_ns, &DeleteParams::default()).await;
    if !opts.keep {
        let _ = nsapi.delete(&svc_ns, &DeleteParams::default()).await;
        let _ = Api::<Node>::all(lab.client.clone())
            .delete_collection(
                &DeleteParams::default(),
                &ListParams::default().labels("bench-scale.metallb-rs.io/generated=true"),
            )
            .await;
    }
    Ok(Value::Object(figs))
}

/// Samples a process every 200 ms until its CPU has been quiet (< 2 % of a core) for
/// `quiet` or `max` passes; returns (seconds to the start of the quiet, peak RSS kB, CPU
/// seconds then, and when `ready` answered first, with the CPU seconds then), and `trace`
/// filled with a sample a second: [seconds, RSS kB, CPU seconds].
async fn first_pass(
    pid: u32,
    quiet: Duration,
    max: Duration,
    mut ready: impl FnMut() -> bool,
    trace: &mut Vec<Value>,
) -> Result<(f64, u64, f64, Option<(f64, f64)>)> {
    let t0 = Instant::now();
    let mut next_sample = 0.0;
    let mut last_busy = Instant::now();
    let mut last_cpu = 0.0;
    let mut peak = 0;
    let mut ready_at = None;
    let mut cpu_at_quiet = 0.0;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (rss, hwm, cpu) = proc_stats(pid).context("the process exited")?;
        peak = peak.max(hwm).max(rss);
        let t = t0.elapsed().as_secs_f64();
        if t >= next_sample {
            trace.push(json!([(t * 10.0).round() / 10.0, rss, cpu]));
            next_sample = t.floor() + 1.0;
        }
        if cpu - last_cpu > 0.004 {
            last_busy = Instant::now();
            cpu_at_quiet = cpu;
        }
        last_cpu = cpu;
        if ready_at.is_none() && ready() {
            ready_at = Some((t0.elapsed().as_secs_f64(), cpu));
        }
        if last_busy.elapsed() >= quiet && (ready_at.is_some() || t0.elapsed() > max) {
            let done = last_busy.duration_since(t0).as_secs_f64();
            return Ok((done, peak, cpu_at_quiet, ready_at));
        }
        if t0.elapsed() > max {
            return Ok((t0.elapsed().as_secs_f64(), peak, cpu, ready_at));
        }
    }
}

async fn account(lab: &Lab, ns: &str, dir: &Path, name: &str) -> Result<(PathBuf, String)> {
    e2e::bench::admin_account(lab, ns, dir, name).await
}

fn writes_json(c: &e2e::AuditCount) -> Value {
    let mut m = serde_json::Map::new();
    for (verb, res, n) in c.rows() {
        m.insert(format!("{verb} {res}"), json!(n));
    }
    json!({"total": c.total, "by_kind": m})
}

async fn bench_impl(
    lab: &Lab,
    opts: &Opts,
    objects: &Objects<'_>,
    kind: Kind,
    bin: &Path,
) -> Result<Value> {
    let port = lab.api_port()?;
    let net: NodeNetwork =
        tokio::task::block_in_place(|| lab.node_network(&LabOptions::default()))?;
    let client_proxy = ApiProxy::start(net.net.client(), port, port)?;
    let suffix = e2e::unique_suffix();
    let cfg_ns = format!("bench-scale-{}-{suffix}", kind.name());
    let dir = std::env::temp_dir().join(format!("bench-scale-{}-{suffix}", kind.name()));
    std::fs::create_dir_all(&dir)?;
    eprintln!("bench-scale: {} logs in {}", kind.name(), dir.display());
    let nsapi = Api::<Namespace>::all(lab.client.clone());
    nsapi
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": cfg_ns}}))?,
        )
        .await?;
    let mut procs: Vec<NsChild> = Vec::new();
    let r = bench_impl_in(
        lab, opts, objects, kind, bin, &net, &cfg_ns, &dir, &mut procs,
    )
    .await;
    for p in &mut procs {
        let _ = p.stop_with(Signal::TERM, Duration::from_secs(10));
    }
    drop(client_proxy);
    let crbs = Api::<ClusterRoleBinding>::all(lab.client.clone());
    for sa in ["controller", "speaker"] {
        let _ = crbs
            .delete(&format!("bench:{cfg_ns}:{sa}"), &DeleteParams::default())
            .await;
    }
    let _ = Api::<Pod>::namespaced(lab.client.clone(), &cfg_ns)
        .delete(
            &format!("speaker-node-{SPEAKER_NODE}"),
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await;
    let _ = nsapi.delete(&cfg_ns, &DeleteParams::default()).await;
    tokio::task::block_in_place(move || drop(net));
    r
}

#[allow(clippy::too_many_arguments)]
async fn bench_impl_in(
    lab: &Lab,
    opts: &Opts,
    objects: &Objects<'_>,
    kind: Kind,
    bin: &Path,
    net: &NodeNetwork,
    cfg_ns: &str,
    dir: &Path,
    procs: &mut Vec<NsChild>,
) -> Result<Value> {
    let mut fig = serde_json::Map::new();
    let audit: Audit = lab.audit();
    let (ckc, cuser) = account(lab, cfg_ns, dir, "controller").await?;
    let (skc, suser) = account(lab, cfg_ns, dir, "speaker").await?;
    let node = format!("node-{SPEAKER_NODE}");
    let pod = format!("speaker-{node}");
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": pod, "namespace": cfg_ns,
                     "labels": {"app": "metallb", "component": "speaker"}},
        "spec": {"nodeName": node, "hostNetwork": true, "terminationGracePeriodSeconds": 0,
                 "serviceAccountName": "speaker", "automountServiceAccountToken": false,
                 "containers": [{"name": "speaker", "image": "bench.invalid/speaker"}]},
    }))?;
    Api::<Pod>::namespaced(lab.client.clone(), cfg_ns)
        .create(&PostParams::default(), &p)
        .await?;
    let create = |kind_: &str, name: &str, spec: Value| {
        let version = if kind_ == "BGPPeer" {
            "v1beta2"
        } else {
            "v1beta1"
        };
        let obj = json!({"apiVersion": format!("metallb.io/{version}"), "kind": kind_,
                         "metadata": {"name": name, "namespace": cfg_ns}, "spec": spec});
        let api = lab.metallb(&lab.client, cfg_ns, kind_);
        let what = format!("{kind_} {name}");
        async move {
            let obj: DynamicObject = serde_json::from_value(obj)?;
            api.create(&PostParams::default(), &obj)
                .await
                .with_context(|| format!("creating {what}"))?;
            Ok::<(), anyhow::Error>(())
        }
    };
    create("IPAddressPool", "bench", json!({"addresses": [POOL]})).await?;
    for (k, peer) in PEERS.iter().enumerate() {
        create(
            "BGPPeer",
            &format!("tor-{k}"),
            json!({"myASN": testkit::plan::NODE_AS, "peerASN": 64600 + k as u32, "peerAddress": peer}),
        )
        .await?;
    }
    create("BGPAdvertisement", "all", json!({})).await?;

    // 1. The controller (none with --skip-controller: the addresses are there).
    let cpid = if opts.skip_controller {
        None
    } else {
        let mark = audit.mark().await?;
        let mut cmd = net.net.client().command(bin.join("controller"));
        cmd.args(kind.controller_args(cfg_ns));
        cmd.env("KUBECONFIG", &ckc)
            .env("METALLB_NAMESPACE", cfg_ns)
            .env("METALLB_POD_NAME", "controller");
        let clo0 = lo_bytes(net.net.client())?;
        let t0 = Instant::now();
        procs.push(NsChild::spawn_logged(cmd, &dir.join("controller.log"))?);
        let cpid = procs[0].pid();
        let want = opts.services;
        let mut peak = 0;
        let mut allocated;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let (rss, hwm, _) = proc_stats(cpid).context("the controller exited")?;
            peak = peak.max(hwm).max(rss);
            allocated = objects.allocated().await?;
            if allocated >= want || t0.elapsed() > Duration::from_secs(opts.alloc_timeout) {
                break;
            }
        }
        let alloc_s = t0.elapsed().as_secs_f64();
        let (rss, hwm, cpu) = proc_stats(cpid)?;
        let clo = lo_bytes(net.net.client())? - clo0;
        let writes = audit
            .count(Some(mark), &AuditFilter::user(cuser.clone()))
            .await?;
        fig.insert(
            "controller".into(),
            json!({"allocated": allocated, "of": want, "time_to_allocate_all_s": alloc_s,
               "cpu_s": cpu, "rss_kb": rss, "peak_rss_kb": peak.max(hwm), "api_bytes_lo": clo,
               "writes": writes_json(&writes)}),
        );
        eprintln!(
            "bench-scale: {} controller {}",
            kind.name(),
            fig["controller"]
        );
        if allocated < want {
            eprintln!(
                "bench-scale: {} controller: only {allocated} of {want} Services allocated after {} s; \
             the speaker runs with those",
                kind.name(),
                opts.alloc_timeout
            );
        }
        Some(cpid)
    };

    // 2. One speaker, node-1, BGP with 4 unreachable peers.
    let mark = audit.mark().await?;
    let ns = net.net.node(SPEAKER_NODE);
    let mut cmd = ns.command(bin.join("speaker"));
    match kind {
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
            cmd.args(&opts.speaker_args);
        }
        Kind::Metallb => {
            cmd.args([
                "--node-name",
                &node,
                "--pod-name",
                &pod,
                "--namespace",
                cfg_ns,
                "--host",
                "127.0.0.1",
                "--port",
                "7472",
                "--log-level",
                "info",
            ]);
            cmd.env("METALLB_BGP_TYPE", "native");
        }
    }
    for (k, v) in &opts.speaker_env {
        cmd.env(k, v);
    }
    cmd.env("KUBECONFIG", &skc)
        .env("METALLB_NAMESPACE", cfg_ns)
        .env("METALLB_POD_NAME", &pod)
        .env("METALLB_NODE_NAME", &node);
    let slo0 = lo_bytes(ns)?;
    procs.push(NsChild::spawn_logged(cmd, &dir.join("speaker.log"))?);
    let spid = procs.last().context("the speaker")?.pid();
    let readyz = |ns: &testkit::Netns| {
        let out = ns
            .command("curl")
            .args(["-sf", "-m", "1", "http://127.0.0.1:7473/readyz"])
            .output();
        out.is_ok_and(|o| o.status.success())
    };
    let start_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64();
    let mut trace = Vec::new();
    let (pass_s, peak, cpu, ready_s) = first_pass(
        spid,
        Duration::from_secs(5),
        Duration::from_secs(opts.pass_timeout),
        || kind == Kind::Ours && readyz(ns),
        &mut trace,
    )
    .await?;
    let (rss_pass, _, _) = proc_stats(spid)?;
    let slo_pass = lo_bytes(ns)? - slo0;
    let pass_writes = audit
        .count(Some(mark), &AuditFilter::user(suser.clone()))
        .await?;
    // At rest.
    let mark = audit.mark().await?;
    let cpu_rest0 = proc_stats(spid)?.2;
    tokio::time::sleep(Duration::from_secs(opts.rest)).await;
    let (rss_settled, hwm, cpu_end) = proc_stats(spid)?;
    let slo_end = lo_bytes(ns)? - slo0;
    let rest_writes = audit
        .count(Some(mark), &AuditFilter::user(suser.clone()))
        .await?;
    fig.insert(
        "speaker".into(),
        json!({"first_pass_s": pass_s, "ready_s": ready_s.map(|r| r.0),
               "cpu_at_ready_s": ready_s.map(|r| r.1), "first_pass_cpu_s": cpu,
               "service_bgp_status_objects": lab.metallb(&lab.client, cfg_ns, "ServiceBGPStatus")
                   .list_metadata(&ListParams::default()).await?.items.len(),
               "node_bgp_status_objects": lab.metallb(&lab.client, cfg_ns, "NodeBGPStatus")
                   .list_metadata(&ListParams::default()).await?.items.len(),
               "rss_after_pass_kb": rss_pass, "peak_rss_kb": peak.max(hwm),
               "settled_rss_kb": rss_settled, "api_bytes_lo_first_pass": slo_pass,
               "api_bytes_lo_total": slo_end,
               "writes_first_pass": writes_json(&pass_writes),
               "rest_s": opts.rest, "cpu_at_rest_s": cpu_end - cpu_rest0,
               "writes_at_rest": writes_json(&rest_writes),
               "trace": {"start_unix": start_unix, "samples": trace}}),
    );
    if let (Some(cpid), Some(c)) = (cpid, fig.get_mut("controller")) {
        let (crss, chwm, ccpu) = proc_stats(cpid)?;
        c["cpu_end_s"] = json!(ccpu);
        c["settled_rss_kb"] = json!(crss);
        c["peak_rss_end_kb"] = json!(chwm);
    }
    Ok(Value::Object(fig))
}
