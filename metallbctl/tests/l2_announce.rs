//! `metallbctl l2-announce`, run as a process in the project lab
//! (`testkit`: node-1, node-2 and the client on the MLD-snooping bridge).
//! Needs root; fails (does not skip) without it.
//!
//! Service IPs: 198.51.100.10 and 2001:db8:100::10 (owned, assigned
//! nowhere); the client gets on-link routes to the pools.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use arp_ndp::packet::{ArpFrame, ETHERTYPE_ARP, MacAddr};
use netsys::packet::{PacketSocket, SockFilter};
use serde_json::Value;
use testkit::{Lab, LabOptions, NsChild};

const V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0x10);
const BIN: &str = env!("CARGO_BIN_EXE_metallbctl");

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

fn announce_args<'a>(iface: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["l2-announce", "--interface", iface, "--ip", "198.51.100.10"];
    a.extend(["--ip", "2001:db8:100::10"]);
    a.extend(extra);
    a
}

/// The JSON lines of a log or stdout (other lines, from stderr, skipped).
fn events(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

fn of_kind<'a>(ev: &'a [Value], kind: &str) -> Vec<&'a Value> {
    ev.iter().filter(|e| e["event"] == kind).collect()
}

fn run_in(ns: &testkit::Netns, args: &[&str]) -> anyhow::Result<testkit::cmd::Output> {
    let mut c: Command = ns.command(BIN);
    c.args(args);
    testkit::cmd::output_timeout(&mut c, Duration::from_secs(30)).context("running metallbctl")
}

#[test]
fn l2_announce_answers_refuses_a_live_ip_and_reports() -> anyhow::Result<()> {
    let _serial = testkit::serial()?;
    let lab = lab()?;
    let (if1, if2, cif) = (
        lab.l2_iface("node-1").to_owned(),
        lab.l2_iface("node-2").to_owned(),
        lab.l2_iface("client").to_owned(),
    );
    let mac1 = lab.node(1).mac(&if1)?;
    let mac2 = lab.node(2).mac(&if2)?;

    // node-1 announces until interrupted.
    let mut n1: NsChild = lab.node(1).spawn(BIN, &announce_args(&if1, &[]))?;
    testkit::wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        let ev = events(&n1.log());
        if of_kind(&ev, "owned").len() == 2 {
            Ok(())
        } else {
            Err(format!("log so far:\n{}", n1.log()))
        }
    })?;
    assert_eq!(lab.client().arping(&cif, V4, 1)?, mac1);
    assert_eq!(lab.client().ndisc(&cif, V6, 3)?, mac1);

    // node-2 asks the segment first and refuses: node-1 answers.
    let out = run_in(lab.node(2), &announce_args(&if2, &["--duration", "5s"]))?;
    let (stdout, stderr) = (&out.stdout, &out.stderr);
    ensure!(
        out.status.code() == Some(1),
        "expected a refusal (exit 1): {:?}\n{stdout}\n{stderr}",
        out.status
    );
    let ev = events(stdout);
    let probes = of_kind(&ev, "probe");
    ensure!(probes.len() == 2, "{stdout}");
    for p in probes {
        ensure!(p["answered_by"] == mac1.as_str(), "probe: {p}");
    }
    ensure!(of_kind(&ev, "owned").is_empty(), "{stdout}");
    ensure!(stderr.contains("--force"), "{stderr}");

    // Ctrl-C on node-1: counters and a clean stop.
    n1.signal(testkit::process::Signal::INT);
    let status = n1
        .wait_timeout(Duration::from_secs(5))?
        .with_context(|| format!("node-1 did not stop on SIGINT; its log:\n{}", n1.log()))?;
    ensure!(status.success(), "node-1 exit: {status:?}\n{}", n1.log());
    let ev = events(&n1.log());
    let requests = of_kind(&ev, "request");
    let answered = |ip: IpAddr| {
        requests
            .iter()
            .filter(|r| r["ip"] == ip.to_string() && r["answered"] == true)
            .count() as u64
    };
    // arping + ndisc6, and node-2's probes.
    ensure!(
        answered(V4.into()) >= 2 && answered(V6.into()) >= 2,
        "{ev:#?}"
    );
    let grat = of_kind(&ev, "gratuitous");
    ensure!(
        grat.iter().any(|g| g["packet"] == "arp-request")
            && grat.iter().any(|g| g["packet"] == "arp-reply")
            && grat.iter().any(|g| g["packet"] == "unsolicited-na"),
        "{grat:#?}"
    );
    for c in of_kind(&ev, "counters") {
        let ip: IpAddr = c["ip"].as_str().context("ip")?.parse()?;
        ensure!(c["requests_received"] == answered(ip), "{c}");
        ensure!(c["responses_sent"] == answered(ip), "{c}");
        let g = grat.iter().filter(|g| g["ip"] == ip.to_string()).count();
        ensure!(c["gratuitous_sent"] == g, "{c} vs {g} gratuitous lines");
    }
    ensure!(of_kind(&ev, "counters").len() == 2, "{ev:#?}");
    let stopped = of_kind(&ev, "stopped");
    ensure!(
        stopped.len() == 1 && stopped[0]["reason"] == "interrupt",
        "{ev:#?}"
    );

    // Now nobody answers: node-2 takes the IPs for two seconds.
    let mut n2 = lab
        .node(2)
        .spawn(BIN, &announce_args(&if2, &["--duration", "3s"]))?;
    testkit::wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        if of_kind(&events(&n2.log()), "owned").len() == 2 {
            Ok(())
        } else {
            Err(n2.log())
        }
    })?;
    assert_eq!(lab.client().arping(&cif, V4, 1)?, mac2);
    assert_eq!(lab.client().ndisc(&cif, V6, 3)?, mac2);
    let status = n2
        .wait_timeout(Duration::from_secs(10))?
        .context("node-2 did not stop after --duration")?;
    ensure!(status.success(), "{status:?}\n{}", n2.log());
    let ev = events(&n2.log());
    for p in of_kind(&ev, "probe") {
        ensure!(p["answered_by"].is_null(), "probe: {p}");
    }
    ensure!(
        of_kind(&ev, "stopped")[0]["reason"] == "duration",
        "{ev:#?}"
    );
    Ok(())
}

#[test]
fn l2_announce_force_takes_a_live_ip() -> anyhow::Result<()> {
    let _serial = testkit::serial()?;
    let lab = lab()?;
    let (if1, if2, cif) = (
        lab.l2_iface("node-1").to_owned(),
        lab.l2_iface("node-2").to_owned(),
        lab.l2_iface("client").to_owned(),
    );
    let mac2 = lab.node(2).mac(&if2)?;
    let _n1 = lab
        .node(1)
        .spawn(BIN, &announce_args(&if1, &["--duration", "20s"]))?;
    testkit::wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        if of_kind(&events(&_n1.log()), "owned").len() == 2 {
            Ok(())
        } else {
            Err(_n1.log())
        }
    })?;
    // Make the client kernel hold node-1's MAC, then force node-2 in.
    for ip in ["198.51.100.10", "2001:db8:100::10"] {
        lab.client()
            .run("bash", &["-c", &format!("echo x > /dev/udp/{ip}/9")])?;
    }
    let mut n2 = lab
        .node(2)
        .spawn(BIN, &announce_args(&if2, &["--duration", "3s", "--force"]))?;
    testkit::wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        let n = lab.client().neighbors().map_err(|e| e.to_string())?;
        let moved = |ip: IpAddr| {
            n.iter()
                .any(|e| e.dst == ip && e.lladdr.as_deref() == Some(mac2.as_str()))
        };
        if moved(V4.into()) && moved(V6.into()) {
            Ok(())
        } else {
            Err(format!("{n:?}\n{}", n2.log()))
        }
    })?;
    let _ = cif;
    let status = n2
        .wait_timeout(Duration::from_secs(10))?
        .context("node-2 did not stop")?;
    ensure!(status.success(), "{status:?}\n{}", n2.log());
    let ev = events(&n2.log());
    ensure!(of_kind(&ev, "owned").len() == 2, "{ev:#?}");
    ensure!(
        of_kind(&ev, "probe")
            .iter()
            .all(|p| p["answered_by"].is_string()),
        "{ev:#?}"
    );
    Ok(())
}

/// ARP requests for `target` from the client, one every 500 us, until `stop`:
/// a thread in the client's namespace with an `AF_PACKET` socket. Returns once
/// the socket is open; `sent` counts the requests.
fn flood(
    lab: &Lab,
    target: Ipv4Addr,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) -> anyhow::Result<std::thread::JoinHandle<anyhow::Result<()>>> {
    let cif = lab.l2_iface("client").to_owned();
    let client = lab.client();
    let link = client.ip_json(&["link", "show", "dev", &cif])?;
    let ifindex = link[0]["ifindex"]
        .as_u64()
        .context("the client's ifindex")? as u32;
    let mac: MacAddr = client
        .mac(&cif)?
        .parse()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let netns = client.name().to_owned();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || -> anyhow::Result<()> {
        let open = || -> anyhow::Result<PacketSocket> {
            testkit::netns::enter_thread(&netns)?;
            // Sends only: a filter that accepts nothing.
            Ok(PacketSocket::open(
                ifindex,
                ETHERTYPE_ARP,
                &[SockFilter::stmt(0x06, 0)],
            )?)
        };
        let sock = match open() {
            Ok(s) => {
                let _ = ready_tx.send(Ok(()));
                s
            }
            Err(e) => {
                let _ = ready_tx.send(Err(anyhow::anyhow!("{e:#}")));
                return Err(e);
            }
        };
        let frame = ArpFrame::request(mac, testkit::plan::CLIENT_V4, target).encode();
        while !stop.load(Ordering::Relaxed) {
            sock.send(&frame).context("sending an ARP request")?;
            sent.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_micros(500));
        }
        Ok(())
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .context("the flood did not start")??;
    Ok(thread)
}

/// SIGINT stops `l2-announce` while it answers a flood of requests: its loop
/// is busy with one request after another, and a signal delivered between two
/// of its turns must not be lost (it was, 7 times in 20, while the loop made a
/// new Ctrl-C listener per turn). Ten rounds: a lost signal fails it with
/// near certainty.
#[test]
fn l2_announce_stops_on_sigint_while_answering_a_flood() -> anyhow::Result<()> {
    const ROUNDS: usize = 10;
    let _serial = testkit::serial()?;
    let lab = lab()?;
    let if1 = lab.l2_iface("node-1").to_owned();
    for round in 1..=ROUNDS {
        let mut n1: NsChild = lab.node(1).spawn(BIN, &announce_args(&if1, &[]))?;
        testkit::wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
            if of_kind(&events(&n1.log()), "owned").len() == 2 {
                Ok(())
            } else {
                Err(n1.log())
            }
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let flooder = flood(&lab, V4, stop.clone(), sent.clone())?;
        // Until it answers the flood (its loop busy), at most 5 s.
        let busy_by = Instant::now() + Duration::from_secs(5);
        while of_kind(&events(&n1.log()), "request").len() < 100 {
            if Instant::now() > busy_by {
                stop.store(true, Ordering::Relaxed);
                bail!(
                    "round {round}: node-1 logged under 100 requests of {} sent:\n{}",
                    sent.load(Ordering::Relaxed),
                    n1.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        n1.signal(testkit::process::Signal::INT);
        let status = n1.wait_timeout(Duration::from_secs(5));
        stop.store(true, Ordering::Relaxed);
        flooder
            .join()
            .map_err(|_| anyhow::anyhow!("the flood thread panicked"))??;
        let status = status?.with_context(|| {
            format!(
                "round {round}/{ROUNDS}: node-1 did not stop within 5 s of SIGINT \
                 ({} requests sent)",
                sent.load(Ordering::Relaxed)
            )
        })?;
        ensure!(status.success(), "round {round}: exit {status:?}");
        let ev = events(&n1.log());
        let stopped = of_kind(&ev, "stopped");
        ensure!(
            stopped.len() == 1 && stopped[0]["reason"] == "interrupt",
            "round {round}: {stopped:?}"
        );
    }
    Ok(())
}
