//! `metallbctl l2-announce`, run as a process in the project lab
//! (`testkit`: node-1, node-2 and the client on the MLD-snooping bridge).
//! Needs root; fails (does not skip) without it.
//!
//! Service IPs: 198.51.100.10 and 2001:db8:100::10 (owned, assigned
//! nowhere); the client gets on-link routes to the pools.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, ensure};
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
        .context("node-1 did not stop on SIGINT")?;
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
