//! `metallbctl bgp-probe`, run as a process in node-1 of the project lab
//! (`testkit`) against each router the project supports: FRR, BIRD 2 and
//! GoBGP. What an operator checks before deploying: the router accepts the
//! node's session, receives the prefixes with the communities given, and
//! drops them when the probe is interrupted (withdrawals, then Cease).
//! Needs root; fails (does not skip) without it.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context, ensure};
use serde_json::Value;
use testkit::plan;
use testkit::process::Signal;
use testkit::{Family, L2Router, Lab, LabOptions, Neighbor, NsChild, Router, RouterKind};

const BIN: &str = env!("CARGO_BIN_EXE_metallbctl");
/// Generous for a loaded 2-core machine (BIRD and GoBGP retry every 5 s).
const TIMEOUT: Duration = Duration::from_secs(60);
const PREFIXES: [&str; 2] = ["198.51.100.41/32", "198.51.100.42/32"];

/// The JSON lines of the probe's output (stderr lines skipped).
/// The probe's JSON lines, its first `current` line counted as the events it
/// summarises (the session may move before the probe subscribes).
fn events(text: &str) -> Vec<Value> {
    testkit::session_log::json_events(text)
}

fn router_prefixes(router: &Router) -> Result<Vec<String>, String> {
    let mut have: Vec<String> = router
        .routes(Family::Ipv4)
        .map_err(|e| format!("{e:#}"))?
        .into_iter()
        .map(|r| r.prefix)
        .collect();
    have.sort();
    have.dedup();
    Ok(have)
}

fn probe_against(kind: RouterKind) -> anyhow::Result<()> {
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    let lab = Lab::up(&LabOptions {
        nodes: 1,
        far: false,
    })?;
    let node: IpAddr = plan::node_v4(1).into();
    let at = L2Router::of(kind);
    let router = lab.start_l2_router(&at.config().neighbor(Neighbor::new(node, plan::NODE_AS)))?;
    let peer = at.addr(Family::Ipv4).to_string();
    let (my_asn, peer_asn) = (plan::NODE_AS.to_string(), at.asn.to_string());
    let mut args = vec![
        "bgp-probe",
        "--peer",
        &peer,
        "--my-asn",
        &my_asn,
        "--peer-asn",
        &peer_asn,
        "--hold-time",
        "9s",
        "--community",
        "64513:100",
    ];
    for p in PREFIXES {
        args.extend(["--prefix", p]);
    }
    let mut probe: NsChild = lab.node(1).spawn(BIN, &args)?;

    router
        .wait_established(node, TIMEOUT)
        .with_context(|| format!("probe output:\n{}", probe.log()))?;
    testkit::wait_until(TIMEOUT, Duration::from_millis(250), || {
        let have = router_prefixes(&router)?;
        if have == PREFIXES {
            Ok(())
        } else {
            Err(format!("{} has {have:?}", kind.name()))
        }
    })
    .with_context(|| format!("probe output:\n{}", probe.log()))?;

    // What the operator reads: Established, then the negotiated session.
    let ev = events(&probe.log());
    ensure!(
        ev.iter()
            .any(|e| e["event"] == "state_changed" && e["to"] == "Established"),
        "no Established line:\n{}",
        probe.log()
    );
    let negotiated = ev
        .iter()
        .find(|e| e["event"] == "negotiated")
        .with_context(|| format!("no negotiated line:\n{}", probe.log()))?;
    ensure!(
        negotiated["peer_as"] == at.asn && negotiated["hold_time"] == 9,
        "negotiated: {negotiated}"
    );

    // Ctrl-C: withdrawn, then the session closed, exit 0.
    let status = probe.stop_with(Signal::INT, Duration::from_secs(15))?;
    let log = probe.log();
    ensure!(status.success(), "probe exited {status}:\n{log}");
    let ev = events(&log);
    ensure!(
        ev.iter()
            .any(|e| e["event"] == "stopping" && e["signal"] == "SIGINT")
            && ev.last().is_some_and(|e| e["event"] == "stopped"),
        "stop lines missing:\n{log}"
    );
    testkit::wait_until(TIMEOUT, Duration::from_millis(250), || {
        let have = router_prefixes(&router)?;
        if have.is_empty() {
            Ok(())
        } else {
            Err(format!("{} still has {have:?}", kind.name()))
        }
    })
    .with_context(|| log.clone())?;
    Ok(())
}

#[test]
fn bgp_probe_against_frr() -> anyhow::Result<()> {
    probe_against(RouterKind::Frr)
}

#[test]
fn bgp_probe_against_bird() -> anyhow::Result<()> {
    probe_against(RouterKind::Bird)
}

#[test]
fn bgp_probe_against_gobgp() -> anyhow::Result<()> {
    probe_against(RouterKind::Gobgp)
}
