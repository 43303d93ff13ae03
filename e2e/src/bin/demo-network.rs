//! The network half of `lab/demo`: brings up the test kit's lab topology (nodes, router,
//! client in network namespaces; testkit::Lab), starts FRR in `router` peering with every
//! node (AS 64512 <-> 64513), and prints what a user looks at: the router's BGP
//! neighbours and table, and the client's neighbour entry for a LoadBalancer IP. Then it
//! tears the topology down (the namespaces exist only while this runs).
//!
//! It checks what it shows: FRR runs with one neighbour per node address and answers,
//! and the client's probe of the IP ran. With `--run-speaker` it starts the speaker
//! binary in every node namespace (as the DaemonSet's hostNetwork Pods; each reaches the
//! lab's API server through a relay on the node's own 127.0.0.1, with the kubeconfig
//! given) and shows the speakers' status objects with `--kubectl`. With
//! `--expect-speaker` the speaker's BGP promises are checked too: every IPv4 session
//! Established and the router's route to the IP; with `--expect-l2` the client
//! resolving the IP (the L2 mode). Each check is printed; the exit status is 1 when a
//! checked promise does not hold.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use e2e::speakers::http_get_in_blocking;
use testkit::apiproxy::ApiProxy;
use testkit::{FrrConfig, LabOptions, NsChild, plan};

const USAGE: &str = "\
usage: demo-network --ip ADDR [--settle SECONDS] [--run-speaker --kubeconfig PATH
                    --speaker-bin PATH [--namespace NS] [--kubectl PATH]
                    [--metallbctl PATH [--explain NS/NAME]]
                    [--ml-labels LABELS [--ml-key-dir DIR]]]
                    [--expect-speaker] [--expect-l2] [--expect-failover]

The network half of lab/demo, in the test kit's network namespaces (needs root and the
kit's tools: scripts/setup --demo installs them):
  --ip ADDR          the LoadBalancer IP to look for (router's table, client's ARP)
  --settle SECONDS   how long to give the BGP sessions before looking (default 6)
  --run-speaker      start the speaker (--speaker-bin) in every node namespace, with
                     --node-name node-N and KUBECONFIG=--kubeconfig (its API server URL,
                     https://127.0.0.1:PORT, is relayed from each node's 127.0.0.1:PORT
                     to the root namespace's), METALLB_NAMESPACE=--namespace (default
                     metallb-system); waits for each speaker's /readyz
  --kubeconfig PATH  the speakers' kubeconfig (a speaker ServiceAccount token)
  --speaker-bin PATH the speaker binary
  --namespace NS     the speakers' configuration namespace (default metallb-system)
  --kubectl PATH     with --run-speaker: show `kubectl get bgpsessionstatuses,
                     servicebgpstatuses,servicel2statuses,configurationstates -n NS`
                     while they run (with
                     the KUBECONFIG of this process's environment)
  --metallbctl PATH  with --run-speaker: show `metallbctl status -n NS` while they run
                     (same KUBECONFIG); with --expect-speaker, check that it lists every
                     speaker Valid and a Service with ADDR announced
  --explain NS/NAME  with --metallbctl: show `metallbctl explain service NS/NAME` while
                     they run; with --expect-speaker, check that it exits 0 (announced)
                     and that its layer-2 winner is the node the client resolves ADDR to
  --expect-speaker   also check the speaker's BGP promises: every IPv4 session
                     Established and a route to ADDR in the router (without it they are
                     shown, not checked)
  --expect-l2        also check that ADDR resolves on the client (a node answers ARP;
                     the L2 mode)
  --ml-labels LABELS with --run-speaker: membership among the speakers (each with
                     --ml-bindaddr <its node's address> --ml-labels LABELS: the speaker
                     Pods with those labels must exist with their node's address as
                     status.podIP)
  --ml-key-dir DIR   with --ml-labels: --ml-secret-key-path DIR (DIR/secretkey)
  --expect-failover  with --ml-labels: kill (SIGKILL) the speaker that answers ADDR and
                     check that another node answers it within 2 s, the client's
                     neighbour entry moved by its gratuitous ARP
Exit status: 0 every check held, 1 a check failed or the network could not be set up.";

/// One check of what the demo shows. `promised` checks decide the exit status; the others
/// are shown with what was seen (the speaker's, until lab/demo runs it).
struct Check {
    what: String,
    promised: bool,
    held: bool,
    seen: String,
}

#[derive(Default)]
struct Checks(Vec<Check>);

impl Checks {
    fn add(
        &mut self,
        promised: bool,
        what: impl Into<String>,
        held: bool,
        seen: impl Into<String>,
    ) {
        let c = Check {
            what: what.into(),
            promised,
            held,
            seen: seen.into(),
        };
        let tag = match (c.promised, c.held) {
            (true, true) => "ok",
            (true, false) => "FAILED",
            (false, true) => "holds (not checked)",
            (false, false) => "does not hold (not checked)",
        };
        println!("check: {}: {tag} ({})", c.what, c.seen);
        self.0.push(c);
    }

    fn failed(&self) -> Vec<&Check> {
        self.0.iter().filter(|c| c.promised && !c.held).collect()
    }
}

fn main() {
    match run() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("demo-network: {e:#}");
            std::process::exit(1);
        }
    }
}

/// Ok(true) when every promised check held.
fn run() -> Result<bool> {
    let mut ip: Option<Ipv4Addr> = None;
    let mut settle = 6u64;
    let mut expect_speaker = false;
    let mut expect_l2 = false;
    let mut run_speaker = false;
    let mut kubeconfig: Option<String> = None;
    let mut speaker_bin: Option<String> = None;
    let mut kubectl: Option<String> = None;
    let mut metallbctl: Option<String> = None;
    let mut explain: Option<String> = None;
    let mut namespace = "metallb-system".to_string();
    let mut ml_labels: Option<String> = None;
    let mut ml_key_dir: Option<String> = None;
    let mut expect_failover = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--ip" => ip = Some(args.next().context("--ip needs an address")?.parse()?),
            "--settle" => settle = args.next().context("--settle needs seconds")?.parse()?,
            "--expect-speaker" => expect_speaker = true,
            "--expect-l2" => expect_l2 = true,
            "--run-speaker" => run_speaker = true,
            "--kubeconfig" => kubeconfig = Some(args.next().context("--kubeconfig needs a path")?),
            "--speaker-bin" => {
                speaker_bin = Some(args.next().context("--speaker-bin needs a path")?)
            }
            "--kubectl" => kubectl = Some(args.next().context("--kubectl needs a path")?),
            "--metallbctl" => metallbctl = Some(args.next().context("--metallbctl needs a path")?),
            "--explain" => explain = Some(args.next().context("--explain needs NS/NAME")?),
            "--namespace" => namespace = args.next().context("--namespace needs a name")?,
            "--ml-labels" => ml_labels = Some(args.next().context("--ml-labels needs labels")?),
            "--ml-key-dir" => ml_key_dir = Some(args.next().context("--ml-key-dir needs a path")?),
            "--expect-failover" => expect_failover = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(true);
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let ip = ip.with_context(|| format!("--ip is required\n{USAGE}"))?;
    let speaker_setup = if run_speaker {
        let kubeconfig = kubeconfig.context("--run-speaker needs --kubeconfig")?;
        let bin = speaker_bin.context("--run-speaker needs --speaker-bin")?;
        let port = api_port(&kubeconfig)?;
        Some((kubeconfig, bin, port))
    } else {
        None
    };
    let mut checks = Checks::default();

    println!("taking the test kit's lock (waits while another network test runs)...");
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    let lab = testkit::Lab::up(&LabOptions {
        far: false,
        ..LabOptions::default()
    })?;
    println!(
        "network namespaces: {}",
        lab.topo
            .namespaces()
            .iter()
            .map(|n| n.name().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let router = lab.start_router(&FrrConfig::lab_router())?;
    println!("FRR runs in `router` (AS 64512, 192.0.2.1), one neighbour per node (AS 64513)");
    // Dropped (speakers stopped, relays closed) before the namespaces go.
    let mut speakers: Vec<NsChild> = Vec::new();
    let mut proxies: Vec<ApiProxy> = Vec::new();
    if let Some((kubeconfig, bin, port)) = &speaker_setup {
        for n in 1..=lab.nodes() {
            let ns = lab.node(n);
            proxies.push(ApiProxy::start(ns, *port, *port)?);
            let node = plan::node_name(n);
            let log = ns.state_dir().join("speaker.log");
            let mut cmd = ns.command(bin);
            cmd.args([
                "--log-format",
                "text",
                "--node-name",
                &node,
                "--health-probe-port",
                &SPEAKER_HEALTH_PORT.to_string(),
                "--port",
                "0",
            ]);
            if let Some(labels) = &ml_labels {
                cmd.args([
                    "--ml-bindaddr",
                    &plan::node_v4(n).to_string(),
                    "--ml-labels",
                    labels,
                ]);
                if let Some(dir) = &ml_key_dir {
                    cmd.args(["--ml-secret-key-path", dir]);
                }
            }
            cmd.env("KUBECONFIG", kubeconfig)
                .env("METALLB_NAMESPACE", &namespace)
                .env("METALLB_NODE_NAME", &node)
                .env("METALLB_HOST", plan::node_v4(n).to_string());
            println!(
                "$ ip netns exec {} speaker --node-name {node} ...   (log {})",
                ns.name(),
                log.display()
            );
            speakers.push(NsChild::spawn_logged(cmd, &log)?);
        }
        for (i, sp) in speakers.iter_mut().enumerate() {
            let ns = lab.node(i + 1).name().to_string();
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            let ready = loop {
                if !sp.is_running() {
                    break false;
                }
                match http_get_in_blocking(&ns, SPEAKER_HEALTH_PORT, "/readyz") {
                    Ok(r) if r.starts_with("HTTP/1.1 200 ") => break true,
                    _ if std::time::Instant::now() > deadline => break false,
                    _ => std::thread::sleep(Duration::from_millis(200)),
                }
            };
            checks.add(
                true,
                format!(
                    "the speaker of node-{} is ready (/readyz in its namespace)",
                    i + 1
                ),
                ready,
                if ready {
                    "200".to_string()
                } else {
                    format!("not ready within 30 s; its log:\n{}", sp.log())
                },
            );
        }
    }
    if speaker_setup.is_some() {
        // Sessions and the route, as soon as they are there (at most `settle` + 10 s).
        println!(
            "waiting (at most {} s) for the sessions and the route...",
            settle + 10
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(settle + 10);
        let want = format!("{ip}/32");
        while std::time::Instant::now() < deadline {
            let up = router
                .bgp_neighbors()
                .map(|n| {
                    n.iter()
                        .filter(|n| n.addr.is_ipv4() && n.state == "Established")
                        .count()
                })
                .unwrap_or(0);
            let routed = router
                .route(&want)
                .map(|r| r.len() >= lab.nodes())
                .unwrap_or(false);
            if up == lab.nodes() && routed {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    } else {
        println!("waiting {settle} s for sessions...");
        std::thread::sleep(Duration::from_secs(settle));
    }

    println!("\n$ vtysh -c 'show bgp summary'      (in the router's namespace)");
    println!("{}", router.vtysh(&["show bgp summary"])?.trim_end());
    let neighbors = router.bgp_neighbors()?;
    let node_addrs: Vec<IpAddr> = (1..=plan::NODES)
        .flat_map(|n| [plan::node_v4(n).into(), plan::node_v6(n).into()])
        .collect();
    let configured: Vec<IpAddr> = neighbors.iter().map(|n| n.addr).collect();
    let missing: Vec<String> = node_addrs
        .iter()
        .filter(|a| !configured.contains(a))
        .map(ToString::to_string)
        .collect();
    checks.add(
        true,
        "FRR in the router has a BGP neighbour (AS 64513) per node address",
        missing.is_empty() && neighbors.iter().all(|n| n.remote_as == Some(plan::NODE_AS)),
        if missing.is_empty() {
            format!("{} neighbours", neighbors.len())
        } else {
            format!("missing {}", missing.join(", "))
        },
    );
    let v4: Vec<_> = neighbors.iter().filter(|n| n.addr.is_ipv4()).collect();
    let established = v4.iter().filter(|n| n.state == "Established").count();
    checks.add(
        expect_speaker,
        "every node's IPv4 session is Established (a speaker per node)",
        established == plan::NODES && v4.len() == plan::NODES,
        format!(
            "{established} of {} Established; states: {}",
            v4.len(),
            v4.iter()
                .map(|n| format!("{} {}", n.addr, n.state))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );

    println!("\n$ vtysh -c 'show bgp ipv4 unicast'  (the router's BGP table)");
    let table = router.vtysh(&["show bgp ipv4 unicast"])?;
    println!(
        "{}",
        if table.trim().is_empty() {
            "(empty)"
        } else {
            table.trim_end()
        }
    );
    let routes = router.routes_v4()?;
    let pool_routes: Vec<_> = routes
        .iter()
        .filter(|r| r.prefix.starts_with("198.51.100."))
        .map(|r| r.prefix.clone())
        .collect();
    let want = format!("{ip}/32");
    checks.add(
        expect_speaker,
        format!("the router holds a route to {want}"),
        pool_routes.contains(&want),
        format!(
            "routes to the pool {}: {}",
            plan::POOL_V4,
            if pool_routes.is_empty() {
                "none".to_string()
            } else {
                pool_routes.join(", ")
            }
        ),
    );

    // The client reaches the pool on the L2 segment (as with MetalLB's layer 2 mode): an
    // on-link route, so the kernel asks for the address with ARP.
    let client = lab.client();
    let iface = lab.l2_iface("client").to_string();
    client.ip(&["route", "replace", plan::POOL_V4, "dev", &iface])?;
    println!("\n$ arping -c 2 -I {iface} {ip}   (in the client's namespace, 192.0.2.100)");
    match client.arping(&iface, ip, 2) {
        Ok(mac) => println!("reply from {ip} [{mac}]"),
        Err(_) => println!("no reply"),
    }
    // A datagram makes the kernel resolve the address (3 probes, 1 s apart).
    client.run(
        "bash",
        &["-c", &format!("echo demo > /dev/udp/{ip}/9 || true")],
    )?;
    std::thread::sleep(Duration::from_millis(3500));
    println!("$ ip neigh show {ip}   (after sending it a datagram)");
    let entry = client
        .neighbors()?
        .into_iter()
        .find(|n| n.dst == IpAddr::V4(ip));
    match &entry {
        Some(n) => println!(
            "{} dev {} {}{}",
            n.dst,
            n.dev,
            n.lladdr
                .as_deref()
                .map(|l| format!("lladdr {l} "))
                .unwrap_or_default(),
            n.state.join(",")
        ),
        None => println!("(no neighbour entry for {ip})"),
    }
    // The kernel made an entry for the address: the probe reached the segment.
    checks.add(
        true,
        format!("the client asked the L2 segment for {ip} (a neighbour entry exists)"),
        entry.is_some(),
        match &entry {
            Some(n) => n.state.join(","),
            None => "no entry".to_string(),
        },
    );
    let resolved = entry.as_ref().and_then(|n| n.lladdr.clone());
    checks.add(
        expect_l2,
        format!("the client resolves {ip} (a node answers ARP)"),
        resolved.is_some(),
        match resolved {
            Some(mac) => format!("resolves to {mac}"),
            None => "does not resolve: nobody answers ARP for it".to_string(),
        },
    );
    if speaker_setup.is_some() {
        if let Some(kubectl) = &kubectl {
            let what =
                "bgpsessionstatuses,servicebgpstatuses,servicel2statuses,configurationstates";
            println!("\n$ kubectl get {what} -n {namespace}   (while the speakers run)");
            let out = std::process::Command::new(kubectl)
                .args(["get", what, "-n", &namespace])
                .output()
                .with_context(|| format!("running {kubectl}"))?;
            print!("{}", String::from_utf8_lossy(&out.stdout));
            eprint!("{}", String::from_utf8_lossy(&out.stderr));
        }
        if let Some(metallbctl) = &metallbctl {
            show_metallbctl(
                metallbctl,
                &namespace,
                ip,
                explain.as_deref(),
                speakers.len(),
                expect_speaker,
                &mut checks,
            )?;
        }
        if ml_labels.is_some() {
            failover(
                &lab,
                &mut speakers,
                ip,
                expect_failover,
                kubectl.as_deref(),
                &namespace,
                &mut checks,
            )?;
        }
        println!("\nstopping the speakers (SIGTERM: each sends the router a Cease)");
    }
    for sp in speakers.drain(..) {
        let _ = sp.stop();
    }
    drop(proxies);
    println!("\ntearing the network down");
    drop(router);
    drop(lab);

    let failed = checks.failed();
    if failed.is_empty() {
        println!(
            "demo-network: {} checks held{}",
            checks.0.iter().filter(|c| c.promised).count(),
            match (expect_speaker, expect_l2) {
                (true, true) => "",
                (true, false) => " (the L2 answer is shown, not checked: --expect-l2)",
                _ => " (the speaker's are shown, not checked: --expect-speaker, --expect-l2)",
            }
        );
        Ok(true)
    } else {
        for c in &failed {
            eprintln!("demo-network: FAILED: {} ({})", c.what, c.seen);
        }
        Ok(false)
    }
}

/// Kills the speaker answering `ip` and times the move of the client's neighbour entry
/// to another node (its gratuitous ARP).
fn failover(
    lab: &testkit::Lab,
    speakers: &mut [NsChild],
    ip: Ipv4Addr,
    promised: bool,
    kubectl: Option<&str>,
    namespace: &str,
    checks: &mut Checks,
) -> Result<()> {
    let client = lab.client();
    let mut macs = std::collections::BTreeMap::new();
    for n in 1..=lab.nodes() {
        let node = plan::node_name(n);
        macs.insert(
            lab.node(n).mac(lab.l2_iface(&node))?.to_ascii_lowercase(),
            n,
        );
    }
    let entry = |client: &testkit::Netns| -> Option<String> {
        client
            .neighbors()
            .ok()?
            .into_iter()
            .find(|n| n.dst == IpAddr::V4(ip))
            .and_then(|n| n.lladdr)
            .map(|l| l.to_ascii_lowercase())
    };
    let Some(owner) = entry(client).and_then(|m| macs.get(&m).copied()) else {
        checks.add(
            promised,
            format!("failover: a node answers {ip} before the fault"),
            false,
            "the client's neighbour entry names no node".to_string(),
        );
        return Ok(());
    };
    println!(
        "\nfailover: node-{owner} answers {ip}; killing its speaker (SIGKILL: a crash, nothing is said to the others)"
    );
    let at = std::time::Instant::now();
    speakers[owner - 1].signal(testkit::process::Signal::KILL);
    let moved = loop {
        if let Some(n) = entry(client).and_then(|m| macs.get(&m).copied())
            && n != owner
        {
            break Some((n, at.elapsed()));
        }
        if at.elapsed() > Duration::from_secs(5) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    match moved {
        Some((n, took)) => println!(
            "failover: the client's neighbour entry for {ip} moved to node-{n}'s MAC {:.0} ms after the kill (its gratuitous ARP; the client asked nothing)",
            took.as_secs_f64() * 1e3
        ),
        None => println!("failover: the client's neighbour entry did not move within 5 s"),
    }
    println!("$ ip neigh show {ip}   (in the client's namespace)");
    println!(
        "{}",
        client.ip(&["neigh", "show", &ip.to_string()])?.trim_end()
    );
    checks.add(
        promised,
        format!("failover: another node answers {ip} within 2 s of the owner's crash"),
        moved.is_some_and(|(_, t)| t < Duration::from_secs(2)),
        match moved {
            Some((n, t)) => format!(
                "node-{owner} -> node-{n} in {:.0} ms",
                t.as_secs_f64() * 1e3
            ),
            None => "no move within 5 s".to_string(),
        },
    );
    if let Some(kubectl) = kubectl {
        // The new owner's status write goes through the API server after the takeover.
        std::thread::sleep(Duration::from_secs(1));
        println!("\n$ kubectl get servicel2statuses -n {namespace}   (after the failover)");
        let out = std::process::Command::new(kubectl)
            .args(["get", "servicel2statuses", "-n", namespace, "-o", "wide"])
            .output()
            .with_context(|| format!("running {kubectl}"))?;
        print!("{}", String::from_utf8_lossy(&out.stdout));
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// The speakers' probe port, inside each node namespace.
const SPEAKER_HEALTH_PORT: u16 = 17472;

/// The port of the kubeconfig's API server (`https://127.0.0.1:PORT`), which the relays
/// listen on in each node namespace.
fn api_port(kubeconfig: &str) -> Result<u16> {
    let text =
        std::fs::read_to_string(kubeconfig).with_context(|| format!("reading {kubeconfig}"))?;
    let server = text
        .lines()
        .find_map(|l| {
            let l = l.trim().trim_start_matches('"');
            l.strip_prefix("server:")
                .or_else(|| l.strip_prefix("server\":"))
                .map(|v| v.trim().trim_matches(|c| c == '"' || c == ',').to_string())
        })
        .with_context(|| format!("no server in {kubeconfig}"))?;
    let rest = server
        .strip_prefix("https://127.0.0.1:")
        .with_context(|| format!("{kubeconfig}: server {server}, not https://127.0.0.1:PORT"))?;
    rest.trim_end_matches('/')
        .parse()
        .with_context(|| format!("{kubeconfig}: the port of {server}"))
}

/// `metallbctl status -n NS` and, with `explain`, `metallbctl explain service
/// NS/NAME`, shown while the speakers run, then checked (promised with
/// `expect`): every speaker's ConfigurationState Valid and a Service holding
/// `ip` announced; the explanation announced (exit 0) with the layer-2 winner
/// that `status` names as the announcing node.
fn show_metallbctl(
    metallbctl: &str,
    namespace: &str,
    ip: Ipv4Addr,
    explain: Option<&str>,
    speakers: usize,
    expect: bool,
    checks: &mut Checks,
) -> Result<()> {
    let run = |args: &[&str]| -> Result<(Option<i32>, String)> {
        let out = std::process::Command::new(metallbctl)
            .args(args)
            .output()
            .with_context(|| format!("running {metallbctl}"))?;
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        Ok((
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ))
    };
    println!("\n$ metallbctl status -n {namespace}   (while the speakers run)");
    let (_, text) = run(&["status", "-n", namespace])?;
    print!("{text}");
    let (code, json) = run(&["status", "-n", namespace, "-o", "json"])?;
    let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
    let valid = v["components"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            c["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("speaker-"))
                && c["result"] == "Valid"
        })
        .count();
    checks.add(
        expect,
        "metallbctl status: every speaker's configuration Valid".to_string(),
        code == Some(0) && valid == speakers,
        format!("exit {code:?}, {valid} of {speakers} speakers Valid"),
    );
    let svc = v["services"].as_array().into_iter().flatten().find(|s| {
        s["ips"]
            .as_array()
            .is_some_and(|ips| ips.iter().any(|i| i == &serde_json::json!(ip.to_string())))
    });
    let announcers: Vec<String> = [("bgp", "bgp"), ("l2", "layer2")]
        .into_iter()
        .flat_map(|(field, proto)| {
            svc.and_then(|s| s[field].as_object())
                .into_iter()
                .flatten()
                .map(move |(node, _)| format!("{node} ({proto})"))
        })
        .collect();
    checks.add(
        expect,
        format!("metallbctl status: the Service with {ip} and who announces it"),
        svc.is_some() && !announcers.is_empty(),
        match svc {
            Some(s) => format!("{} announced by {}", s["service"], announcers.join(", ")),
            None => format!("no Service with {ip}"),
        },
    );
    let Some(key) = explain else { return Ok(()) };
    println!("\n$ metallbctl explain service {key} -n {namespace}   (while the speakers run)");
    let (_, text) = run(&["explain", "service", key, "-n", namespace])?;
    print!("{text}");
    let (code, json) = run(&["explain", "service", key, "-n", namespace, "-o", "json"])?;
    let e: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
    let winner = e["l2"]["election"]["candidates"][0]["node"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let l2_by_status: Vec<&String> = announcers
        .iter()
        .filter(|a| a.ends_with("(layer2)"))
        .collect();
    checks.add(
        expect,
        format!(
            "metallbctl explain service {key}: announced, its L2 election winner the node \
             ServiceL2Status names"
        ),
        code == Some(0) && !winner.is_empty() && l2_by_status == [&format!("{winner} (layer2)")],
        format!("exit {code:?}, election winner {winner:?}, status says {l2_by_status:?}"),
    );
    Ok(())
}
