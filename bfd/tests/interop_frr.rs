//! Our BFD runtime against FRR 8.4's bfdd, in the test kit's lab.
//!
//! The runtime runs in this test process, but its thread enters the
//! namespace of `node-1` ([`Config::netns`]: `setns(CLONE_NEWNET)` on that
//! one thread, before it opens any socket), so every packet it sends or
//! receives stays in the lab. That keeps the watch, the event stream and
//! the thread's counters directly observable, and the thread's CPU
//! readable from `/proc/self/task/<tid>/stat`. FRR runs in `router` (single
//! hop) or `far` (multihop, through the router).
//!
//! Needs root; fails without it. Every test takes the kit's serial lock.
//! The `bench_*` functions are measurements for BENCHMARKS.md, compiled only
//! with the `bench-lab` feature:
//! `cargo test -p bfd --release --features bench-lab --test interop_frr -- --nocapture --test-threads=1 bench_`.
//! The probe test runs the `metallbctl` binary built beside this test
//! binary (`cargo test --workspace` builds it first).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use bfd::metrics::names;
use bfd::packet::{Diagnostic, State};
use bfd::runtime::{BfdEvent, monotonic_ns};
use bfd::session::ECHO_ACTIVE_MIN_RX_US;
use bfd::{Bfd, ClientAction, Config, Parameters, SessionKey, SessionStatus};
use prometheus::Registry;
use testkit::bird::{Bird, BirdConfig, BirdNeighbor};
use testkit::frr::FrrNeighbor;
use testkit::{BfdPeer, BfdProfile, Frr, FrrConfig, Lab, LabOptions, Netns, plan, wait_until};
use tokio::sync::{mpsc, watch};

const UP_TIMEOUT: Duration = Duration::from_secs(30);
/// Cut to Down on our side at 300 ms x 3 (0.9 s detection), on a loaded
/// 2-core CI machine.
const DOWN_BOUND: Duration = Duration::from_secs(3);
/// Detection measured from the last packet received may exceed the
/// detection time by this much.
const DETECTION_MARGIN_NS: u64 = 100_000_000;

fn n1v4() -> IpAddr {
    plan::node_v4(1).into()
}

fn n1v6() -> IpAddr {
    plan::node_v6(1).into()
}

fn netns_path(ns: &Netns) -> PathBuf {
    PathBuf::from("/run/netns").join(ns.name())
}

/// Our runtime, its thread inside `ns`.
fn start_bfd(ns: &Netns) -> Result<Bfd> {
    Ok(Bfd::start(Config {
        netns: Some(netns_path(ns)),
        require_ipv6: true,
        ..Config::default()
    })?)
}

fn params(interval_ms: u32, multiplier: u32) -> Parameters {
    Parameters {
        receive_interval_ms: interval_ms,
        transmit_interval_ms: interval_ms,
        detect_multiplier: multiplier,
        ..Parameters::default()
    }
}

/// An FRR `bfd` block with one peer per entry: (peer, local address,
/// interface, multihop), all with `profile`, plus `extra` lines per peer.
fn bfd_peers_block(
    peers: &[(IpAddr, IpAddr, Option<&str>, bool)],
    profile: &str,
    extra: &[&str],
) -> String {
    let mut s = String::from("bfd\n");
    for (peer, local, iface, multihop) in peers {
        s.push_str(&format!(" peer {peer}"));
        if *multihop {
            s.push_str(" multihop");
        }
        s.push_str(&format!(" local-address {local}"));
        if let Some(iface) = iface {
            s.push_str(&format!(" interface {iface}"));
        }
        s.push('\n');
        s.push_str(&format!("  profile {profile}\n"));
        for e in extra {
            s.push_str(&format!("  {e}\n"));
        }
        s.push_str(" exit\n");
    }
    s.push_str("exit\n");
    s
}

/// FRR in `router` with profile `fast` and single-hop peers on node-1's
/// addresses.
fn start_router(lab: &Lab, profile: BfdProfile, peers: &[IpAddr]) -> Result<Frr> {
    let iface = lab.l2_iface("router").to_string();
    let entries: Vec<(IpAddr, IpAddr, Option<&str>, bool)> = peers
        .iter()
        .map(|p| {
            let local: IpAddr = if p.is_ipv4() {
                plan::ROUTER_V4.into()
            } else {
                plan::ROUTER_V6.into()
            };
            (*p, local, Some(iface.as_str()), false)
        })
        .collect();
    let name = profile.name.clone();
    let config = FrrConfig::new("router", plan::ROUTER_AS, plan::ROUTER_V4)
        .bfd_profile(profile)
        .extra(&bfd_peers_block(&entries, &name, &[]));
    lab.start_router(&config)
}

fn single_hop_key(lab: &Lab, local: IpAddr, remote: IpAddr) -> SessionKey {
    SessionKey::single_hop(lab.l2_iface("node-1"), local, remote)
}

fn router_addr_for(local: IpAddr) -> IpAddr {
    if local.is_ipv4() {
        plan::ROUTER_V4.into()
    } else {
        plan::ROUTER_V6.into()
    }
}

/// Our `metallb_bfd_*` series for `peer` in the default VRF, by name; all
/// eight must be there.
fn our_metrics(registry: &Registry, peer: IpAddr) -> Result<BTreeMap<&'static str, f64>> {
    let peer = peer.to_string();
    let mut out = BTreeMap::new();
    for family in registry.gather() {
        let name = names::ALL
            .into_iter()
            .find(|n| *n == family.name())
            .with_context(|| format!("unexpected family {}", family.name()))?;
        for m in family.get_metric() {
            let labels: Vec<(&str, &str)> = m
                .get_label()
                .iter()
                .map(|l| (l.name(), l.value()))
                .collect();
            if labels == [("peer", peer.as_str()), ("vrf", "default")] {
                let v = if name == names::SESSION_UP {
                    m.get_gauge().get_value()
                } else {
                    m.get_counter().get_value()
                };
                out.insert(name, v);
            }
        }
    }
    ensure!(out.len() == names::ALL.len(), "series of {peer}: {out:?}");
    Ok(out)
}

/// Waits until our session is in `state`; returns its status.
fn wait_ours(
    rx: &watch::Receiver<SessionStatus>,
    state: State,
    timeout: Duration,
) -> Result<SessionStatus> {
    wait_until(timeout, Duration::from_millis(10), || {
        let s = rx.borrow().clone();
        if s.state == state {
            Ok(s)
        } else {
            Err(format!(
                "{} is {} (diag {:?})",
                s.key, s.state, s.local_diag
            ))
        }
    })
    .map_err(anyhow::Error::from)
    .with_context(|| format!("waiting for our session to be {state}"))
}

/// Waits until our session is Up with no Poll Sequence running, the given
/// transmit interval and detection time (µs).
fn wait_negotiated(
    rx: &watch::Receiver<SessionStatus>,
    tx_us: u64,
    detection_us: u64,
) -> Result<SessionStatus> {
    wait_until(Duration::from_secs(10), Duration::from_millis(10), || {
        let s = rx.borrow().clone();
        if s.state == State::Up
            && !s.poll_in_progress
            && s.tx_interval_us == tx_us
            && s.detection_time_us == detection_us
        {
            Ok(s)
        } else {
            Err(format!(
                "{} {}: poll {}, tx {} µs, detection {} µs",
                s.key, s.state, s.poll_in_progress, s.tx_interval_us, s.detection_time_us
            ))
        }
    })
    .map_err(anyhow::Error::from)
    .with_context(|| format!("waiting for tx {tx_us} µs, detection {detection_us} µs"))
}

/// Waits until FRR's peer `addr` is up and shows our timers as given (ms).
fn wait_frr_sees(frr: &Frr, addr: IpAddr, remote_rx_ms: u64, remote_tx_ms: u64) -> Result<BfdPeer> {
    wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        let p = frr_peer(frr, addr).map_err(|e| format!("{e:#}"))?;
        if p.status == "up"
            && p.remote_receive_interval_ms == Some(remote_rx_ms)
            && p.remote_transmit_interval_ms == Some(remote_tx_ms)
        {
            Ok(p)
        } else {
            Err(p.raw.to_string())
        }
    })
    .map_err(anyhow::Error::from)
    .with_context(|| {
        format!("waiting for FRR to see {addr} at rx {remote_rx_ms} / tx {remote_tx_ms} ms")
    })
}

fn frr_peer(frr: &Frr, addr: IpAddr) -> Result<BfdPeer> {
    frr.bfd_peers()?
        .into_iter()
        .find(|p| p.peer.parse::<IpAddr>().is_ok_and(|a| a == addr))
        .with_context(|| format!("FRR has no BFD peer {addr}"))
}

/// `session-down` (count of transitions from up) of FRR's peer `addr`.
fn frr_down_events(frr: &Frr, addr: IpAddr) -> Result<u64> {
    let v = frr.show_json("show bfd peers counters json")?;
    v.as_array()
        .into_iter()
        .flatten()
        .find(|p| p["peer"].as_str().and_then(|s| s.parse::<IpAddr>().ok()) == Some(addr))
        .and_then(|p| p["session-down"].as_u64())
        .with_context(|| format!("no counters for {addr}: {v}"))
}

/// FRR's name of our state, as `show bfd peers` prints it.
fn frr_status(state: State) -> &'static str {
    match state {
        State::AdminDown => "shutdown",
        State::Down => "down",
        State::Init => "init",
        State::Up => "up",
    }
}

/// At a checkpoint our watch and FRR agree on the state, and FRR received
/// our diagnostic.
fn agree(frr: &Frr, addr: IpAddr, ours: &watch::Receiver<SessionStatus>) -> Result<()> {
    wait_until(Duration::from_secs(5), Duration::from_millis(100), || {
        let s = ours.borrow().clone();
        let p = frr_peer(frr, addr).map_err(|e| format!("{e:#}"))?;
        let want_remote_diag = diag_name(s.local_diag);
        if p.status == frr_status(s.state)
            && p.remote_diagnostic.as_deref() == Some(want_remote_diag)
        {
            Ok(())
        } else {
            Err(format!(
                "ours {} diag {:?}; FRR {} remote-diagnostic {:?}: {}",
                s.state, s.local_diag, p.status, p.remote_diagnostic, p.raw
            ))
        }
    })
    .map_err(anyhow::Error::from)
    .with_context(|| format!("our watch and FRR disagree about {addr}"))
}

/// FRR's text for a diagnostic (`bfd/bfd.c` diag2str).
fn diag_name(d: Diagnostic) -> &'static str {
    match d {
        Diagnostic::None => "ok",
        Diagnostic::ControlDetectionTimeExpired => "control detection time expired",
        Diagnostic::EchoFunctionFailed => "echo function failed",
        Diagnostic::NeighborSignaledSessionDown => "neighbor signaled session down",
        Diagnostic::ForwardingPlaneReset => "forwarding plane reset",
        Diagnostic::PathDown => "path down",
        Diagnostic::ConcatenatedPathDown => "concatenated path down",
        Diagnostic::AdministrativelyDown => "administratively down",
        Diagnostic::ReverseConcatenatedPathDown => "reverse concatenated path down",
        Diagnostic::Reserved(_) => "unknown",
    }
}

/// The next event matching `want`, within `timeout` (others are dropped).
fn next_event(
    events: &mut mpsc::UnboundedReceiver<BfdEvent>,
    timeout: Duration,
    want: impl Fn(&BfdEvent) -> bool,
) -> Result<BfdEvent> {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    loop {
        match events.try_recv() {
            Ok(e) if want(&e) => return Ok(e),
            Ok(e) => seen.push(format!("{}: {} -> {}", e.key, e.change.from, e.change.to)),
            Err(mpsc::error::TryRecvError::Empty) => {
                if Instant::now() >= deadline {
                    bail!("no matching event within {timeout:?}; saw {seen:?}");
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => bail!("event stream: {e}"),
        }
    }
}

/// Transitions out of Up among the events queued so far.
fn downs_queued(events: &mut mpsc::UnboundedReceiver<BfdEvent>) -> Vec<String> {
    let mut r = Vec::new();
    while let Ok(e) = events.try_recv() {
        if e.change.from == State::Up {
            r.push(format!("{}: {:?}", e.key, e.change));
        }
    }
    r
}

/// Silent cut of node-1's cable: our side goes Down with diagnostic 1
/// within `bound`, detection (from the last packet received) within the
/// detection time + margin. Returns the detection time measured from the
/// last packet, ns.
fn cut_and_check_down(
    lab: &Lab,
    events: &mut mpsc::UnboundedReceiver<BfdEvent>,
    sessions: &[u32],
    bound: Duration,
) -> Result<(testkit::Cut, Vec<u64>)> {
    let _ = downs_queued(events);
    let before = monotonic_ns();
    let cut = lab.cut_cable("node-1")?;
    let mut detections = Vec::new();
    let mut downs = Vec::new();
    let deadline = Instant::now() + bound + Duration::from_secs(5);
    while downs.len() < sessions.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = next_event(events, left, |e| {
            sessions.contains(&e.discriminator)
                && e.change.to == State::Down
                && !downs
                    .iter()
                    .any(|d: &BfdEvent| d.discriminator == e.discriminator)
        })?;
        downs.push(e);
    }
    for e in downs {
        let took = Duration::from_nanos(e.change.at_ns.saturating_sub(before));
        ensure!(
            took < bound,
            "{}: Down {took:?} after the cut (bound {bound:?})",
            e.key
        );
        ensure!(
            e.change.diag == Diagnostic::ControlDetectionTimeExpired,
            "{}: diagnostic {:?}",
            e.key,
            e.change.diag
        );
        ensure!(e.client_action == ClientAction::Down, "{e:?}");
        let last_rx = e.status.last_rx_ns.context("no packet was ever received")?;
        let detection = e.change.at_ns - last_rx;
        // The detection time in force before the expiry reset the remote.
        let expected = u64::from(e.status.remote.detect_mult)
            * u64::from(
                e.status
                    .remote
                    .desired_min_tx_us
                    .max(e.status.params.receive_interval_us()),
            )
            * 1_000;
        ensure!(
            detection <= expected + DETECTION_MARGIN_NS,
            "{}: detected {detection} ns after the last packet (detection time {expected} ns)",
            e.key
        );
        eprintln!(
            "{}: Down {took:?} after the cut, {:.1} ms after the last packet (detection time {:.1} ms)",
            e.key,
            detection as f64 / 1e6,
            expected as f64 / 1e6
        );
        detections.push(detection);
    }
    Ok((cut, detections))
}

#[test]
fn single_hop_v4_v6_up_silent_cut_down_with_diag_1_and_recovery() -> Result<()> {
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    let lab = Lab::up(&LabOptions::default())?;
    let router = start_router(
        &lab,
        BfdProfile::new("fast", 300, 300, 3),
        &[n1v4(), n1v6()],
    )?;
    let bfd = start_bfd(lab.node(1))?;
    let registry = Registry::new();
    bfd::metrics::register(&registry, &bfd)?;
    let mut events = bfd.subscribe();
    let mut sessions = Vec::new();
    for local in [n1v4(), n1v6()] {
        let key = single_hop_key(&lab, local, router_addr_for(local));
        let (client, status) = bfd.acquire_blocking(key, params(300, 3))?;
        sessions.push((client, status, local));
    }
    for (_, status, local) in &sessions {
        wait_ours(status, State::Up, UP_TIMEOUT).with_context(|| router.logs(30))?;
        router.wait_bfd_status(*local, "up", UP_TIMEOUT)?;
        agree(&router, *local, status)?;
        // Negotiated (after the Poll Sequence leaving the 1 s slow rate):
        // 300 ms both ways, detection 900 ms.
        let s = wait_negotiated(status, 300_000, 900_000)?;
        wait_frr_sees(&router, *local, 300, 300)?;
        ensure!(s.counters.control_dropped == 0, "{s:?}");
        // MetalLB's metrics, labelled with FRR's address (no port).
        let m = our_metrics(&registry, router_addr_for(*local))?;
        ensure!(m[names::SESSION_UP] == 1.0, "{m:?}");
        ensure!(m[names::SESSION_UP_EVENTS] == 1.0, "{m:?}");
        ensure!(m[names::SESSION_DOWN_EVENTS] == 0.0, "{m:?}");
        ensure!(m[names::CONTROL_PACKET_INPUT] >= 2.0, "{m:?}");
        ensure!(m[names::CONTROL_PACKET_OUTPUT] >= 2.0, "{m:?}");
        ensure!(m[names::ECHO_PACKET_OUTPUT] == 0.0, "{m:?}");
    }
    let ids: Vec<u32> = sessions.iter().map(|s| s.1.borrow().local_discr).collect();

    // Silent cut at the switch: both of our sessions go Down (diag 1), and
    // FRR sees our silence likewise.
    let (cut, _) = cut_and_check_down(&lab, &mut events, &ids, DOWN_BOUND)?;
    for (_, status, local) in &sessions {
        router.wait_bfd_status(*local, "down", Duration::from_secs(10))?;
        let p = frr_peer(&router, *local)?;
        ensure!(
            p.diagnostic.as_deref() == Some("control detection time expired"),
            "FRR: {}",
            p.raw
        );
        let s = status.borrow().clone();
        ensure!(
            s.state == State::Down && s.local_diag == Diagnostic::ControlDetectionTimeExpired,
            "{s:?}"
        );
        let m = our_metrics(&registry, router_addr_for(*local))?;
        ensure!(m[names::SESSION_UP] == 0.0, "{m:?}");
        ensure!(m[names::SESSION_DOWN_EVENTS] == 1.0, "{m:?}");
    }

    // Restore: Up again on both sides, in agreement.
    cut.restore()?;
    for (_, status, local) in &sessions {
        wait_ours(status, State::Up, UP_TIMEOUT)?;
        router.wait_bfd_status(*local, "up", UP_TIMEOUT)?;
        agree(&router, *local, status)?;
        let m = our_metrics(&registry, router_addr_for(*local))?;
        ensure!(m[names::SESSION_UP] == 1.0, "{m:?}");
        ensure!(m[names::SESSION_UP_EVENTS] == 2.0, "{m:?}");
    }

    // Release: FRR hears AdminDown (its view: down, remote diagnostic 7).
    for (client, status, local) in sessions {
        bfd.release_blocking(client)?;
        router.wait_bfd_status(local, "down", Duration::from_secs(5))?;
        let p = frr_peer(&router, local)?;
        ensure!(
            p.remote_diagnostic.as_deref() == Some("administratively down"),
            "FRR: {}",
            p.raw
        );
        ensure!(
            status.has_changed().is_err(),
            "the watch closes with the session"
        );
    }
    // No stale peers: the released sessions' series are gone.
    ensure!(registry.gather().is_empty(), "{:?}", registry.gather());
    bfd.shutdown();
    Ok(())
}

#[test]
fn parameter_changes_on_either_side_keep_the_session_up() -> Result<()> {
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    let lab = Lab::up(&LabOptions::default())?;
    let router = start_router(&lab, BfdProfile::new("fast", 300, 300, 3), &[n1v4()])?;
    let bfd = start_bfd(lab.node(1))?;
    let mut events = bfd.subscribe();
    let key = single_hop_key(&lab, n1v4(), plan::ROUTER_V4.into());
    let (client, status) = bfd.acquire_blocking(key, params(300, 3))?;
    wait_ours(&status, State::Up, UP_TIMEOUT).with_context(|| router.logs(30))?;
    wait_negotiated(&status, 300_000, 900_000)?;
    wait_frr_sees(&router, n1v4(), 300, 300)?;
    let frr_downs = frr_down_events(&router, n1v4())?;
    let _ = downs_queued(&mut events);

    // Ours: 300 -> 100 ms by Poll Sequence; FRR shows the new remote
    // timers. FRR still asks for 300 ms, so the negotiated intervals stay.
    bfd.set_parameters_blocking(client, params(100, 3))?;
    wait_frr_sees(&router, n1v4(), 100, 100)?;
    let s = wait_negotiated(&status, 300_000, 900_000)?;
    ensure!(
        s.advertised_min_tx_us == 100_000 && s.advertised_min_rx_us == 100_000,
        "{s:?}"
    );
    agree(&router, n1v4(), &status)?;

    // FRR's profile: 300 -> 200 ms; our side follows (transmit interval is
    // the remote's Required Min RX, detection 3 x its Desired Min TX).
    router.configure(&[
        "bfd",
        "profile fast",
        "receive-interval 200",
        "transmit-interval 200",
    ])?;
    let s = wait_negotiated(&status, 200_000, 600_000)?;
    ensure!(
        s.remote.desired_min_tx_us == 200_000 && s.remote.required_min_rx_us == 200_000,
        "{s:?}"
    );
    // And back faster than us: FRR 50 ms, we stay at 100 ms.
    router.configure(&[
        "bfd",
        "profile fast",
        "receive-interval 50",
        "transmit-interval 50",
    ])?;
    wait_negotiated(&status, 100_000, 300_000)?;
    wait_frr_sees(&router, n1v4(), 100, 100)?;
    agree(&router, n1v4(), &status)?;

    // Multiplier change on our side.
    bfd.set_parameters_blocking(client, params(100, 5))?;
    wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        let p = frr_peer(&router, n1v4()).map_err(|e| format!("{e:#}"))?;
        (p.remote_detect_multiplier == Some(5))
            .then_some(())
            .ok_or(p.raw.to_string())
    })?;

    // No flap anywhere.
    let downs = downs_queued(&mut events);
    ensure!(downs.is_empty(), "our session left Up: {downs:?}");
    let s = status.borrow().clone();
    ensure!(s.state == State::Up && s.counters.down_events == 0, "{s:?}");
    ensure!(
        frr_down_events(&router, n1v4())? == frr_downs,
        "FRR saw the session go down"
    );
    bfd.release_blocking(client)?;
    Ok(())
}

/// FRR's bgpd installs a neighbor's BFD session without a source address
/// while the BGP session is not Established, and re-registers it with the
/// connection's source once it is (`bgp_peer_bfd_update_source`, from
/// `bgp_establish`): bfdd removes the old session with one Down packet of
/// diagnostic 3 (`_ptm_bfd_session_del`) and starts a new one. Our session
/// was Up with the old one (as when a BFD profile is attached, or the
/// speaker's `sourceAddress` starts BFD, before BGP is up): it goes Down and
/// Up again with the new one, and never tells its client (the BGP session
/// that has just come up) to go down. Node-1's BGP speaker is BIRD, without
/// BFD of its own: ours is the node's BFD.
#[test]
fn frr_re_registering_its_session_when_bgp_comes_up_is_no_failure() -> Result<()> {
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    let lab = Lab::up(&LabOptions::default())?;
    let config = FrrConfig::new("router", plan::ROUTER_AS, plan::ROUTER_V4)
        .bfd_profile(BfdProfile::new("fast", 100, 100, 3))
        .neighbor(FrrNeighbor::new(n1v4(), plan::NODE_AS).bfd_profile("fast"));
    let router = lab.start_router(&config)?;
    let bfd = start_bfd(lab.node(1))?;
    let mut events = bfd.subscribe();
    let key = single_hop_key(&lab, n1v4(), plan::ROUTER_V4.into());
    let (client, status) = bfd.acquire_blocking(key, params(100, 3))?;
    wait_ours(&status, State::Up, UP_TIMEOUT).with_context(|| router.logs(30))?;
    wait_negotiated(&status, 100_000, 300_000)?;
    let before = frr_peer(&router, n1v4())?;
    ensure!(
        before.status == "up" && before.local.is_none(),
        "FRR's session should be up without a local address (BGP is not up): {}",
        before.raw
    );
    let old_id = before.raw["id"].as_u64().context("FRR's discriminator")?;
    let _ = downs_queued(&mut events);

    let bird = Bird::start(
        lab.node(1),
        &BirdConfig::new(plan::NODE_AS, plan::node_v4(1)).neighbor(BirdNeighbor::new(
            "r1",
            plan::ROUTER_V4.into(),
            plan::ROUTER_AS,
        )),
    )?;
    router.wait_established(n1v4(), Duration::from_secs(30))?;
    let after = wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        let p = frr_peer(&router, n1v4()).map_err(|e| format!("{e:#}"))?;
        if p.status == "up" && p.local.is_some() && p.raw["id"].as_u64() != Some(old_id) {
            Ok(p)
        } else {
            Err(p.raw.to_string())
        }
    })
    .map_err(anyhow::Error::from)
    .with_context(|| {
        format!(
            "FRR's session re-registered with a source\n{}",
            router.logs(40)
        )
    })?;
    wait_ours(&status, State::Up, UP_TIMEOUT)?;
    wait_negotiated(&status, 100_000, 300_000)?;
    let new_id = after.raw["id"].as_u64().context("FRR's discriminator")?;
    ensure!(
        u64::from(status.borrow().remote.discr) == new_id,
        "ours answers FRR's new session {new_id}: {:?}",
        status.borrow().remote
    );

    // Our session did leave Up, once, for the removal (else FRR did not
    // re-register and this test shows nothing), and asked no client to go
    // down; the BGP session stayed up at the router.
    let mut seen = Vec::new();
    while let Ok(e) = events.try_recv() {
        seen.push(e);
    }
    let left_up: Vec<_> = seen.iter().filter(|e| e.change.from == State::Up).collect();
    ensure!(
        left_up.len() == 1 && left_up[0].change.cause == bfd::Cause::RemoteSessionRemoved,
        "one Up -> Down, for the removal: {left_up:?}"
    );
    ensure!(
        seen.iter().all(|e| e.client_action != ClientAction::Down),
        "a client would have been taken down: {seen:?}"
    );
    let back = seen
        .iter()
        .find(|e| e.change.to == State::Up)
        .context("no Up event")?;
    eprintln!(
        "FRR's session {old_id} removed and re-created as {new_id}: ours Down, Up again {:.1} ms later",
        (back.change.at_ns - left_up[0].change.at_ns) as f64 / 1e6
    );
    ensure!(
        router.bgp_neighbor_state(n1v4())?.as_deref() == Some("Established"),
        "the router's BGP session went down"
    );

    // A real failure afterwards is still one (silent cut: diagnostic 1,
    // client action Down).
    let local_discr = status.borrow().local_discr;
    let (_cut, _) = cut_and_check_down(&lab, &mut events, &[local_discr], DOWN_BOUND)?;
    bfd.release_blocking(client)?;
    bird.stop()?;
    Ok(())
}

#[test]
fn passive_mode_waits_for_frr_then_comes_up() -> Result<()> {
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    let lab = Lab::up(&LabOptions::default())?;
    // FRR starts without the peer.
    let router = lab.start_router(
        &FrrConfig::new("router", plan::ROUTER_AS, plan::ROUTER_V4)
            .bfd_profile(BfdProfile::new("fast", 300, 300, 3)),
    )?;
    let bfd = start_bfd(lab.node(1))?;
    let key = single_hop_key(&lab, n1v4(), plan::ROUTER_V4.into());
    let passive = Parameters {
        passive_mode: true,
        ..params(300, 3)
    };
    let (client, status) = bfd.acquire_blocking(key, passive)?;
    // A passive session sends nothing before it hears the remote.
    std::thread::sleep(Duration::from_secs(2));
    let s = status.borrow().clone();
    ensure!(
        s.state == State::Down && s.counters.control_out == 0,
        "{s:?}"
    );
    ensure!(bfd.stats().control_tx == 0, "{:?}", bfd.stats());

    // FRR (active) gets the peer: the session comes Up.
    let iface = lab.l2_iface("router").to_string();
    let peer = format!(
        "peer {} local-address {} interface {iface}",
        n1v4(),
        plan::ROUTER_V4
    );
    router.configure(&["bfd", &peer, "profile fast"])?;
    wait_ours(&status, State::Up, UP_TIMEOUT).with_context(|| router.logs(30))?;
    router.wait_bfd_status(n1v4(), "up", UP_TIMEOUT)?;
    wait_negotiated(&status, 300_000, 900_000)?;
    agree(&router, n1v4(), &status)?;
    bfd.release_blocking(client)?;
    Ok(())
}

#[test]
fn multihop_v4_v6_over_the_routed_segment() -> Result<()> {
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    let lab = Lab::up(&LabOptions::default())?;
    // FRR in `far`, one hop behind the router.
    let far4: IpAddr = plan::FAR_V4.into();
    let far6: IpAddr = plan::FAR_V6.into();
    let entries = [(n1v4(), far4, None, true), (n1v6(), far6, None, true)];
    let far = Frr::start(
        lab.far(),
        &FrrConfig::new("far", plan::FAR_AS, plan::FAR_V4)
            .bfd_profile(BfdProfile {
                minimum_ttl: Some(254),
                ..BfdProfile::new("fast", 300, 300, 3)
            })
            .extra(&bfd_peers_block(&entries, "fast", &[])),
    )?;
    let bfd = start_bfd(lab.node(1))?;
    let mut sessions = Vec::new();
    for (local, remote) in [(n1v4(), far4), (n1v6(), far6)] {
        let p = Parameters {
            minimum_ttl: 254,
            ..params(300, 3)
        };
        let (client, status) = bfd.acquire_blocking(SessionKey::multi_hop(local, remote), p)?;
        sessions.push((client, status, local));
    }
    for (_, status, local) in &sessions {
        wait_ours(status, State::Up, UP_TIMEOUT).with_context(|| far.logs(30))?;
        far.wait_bfd_status(*local, "up", UP_TIMEOUT)?;
        let s = wait_negotiated(status, 300_000, 900_000)?;
        ensure!(s.counters.control_dropped == 0, "{s:?}");
        let p = wait_frr_sees(&far, *local, 300, 300)?;
        ensure!(p.multihop, "{}", p.raw);
        agree(&far, *local, status)?;
    }

    for (client, _, _) in sessions {
        bfd.release_blocking(client)?;
    }
    Ok(())
}

/// FRR's counters of peer `addr` (`show bfd peers counters json`).
fn frr_counters(frr: &Frr, addr: IpAddr) -> Result<serde_json::Value> {
    let v = frr.show_json("show bfd peers counters json")?;
    v.as_array()
        .into_iter()
        .flatten()
        .find(|p| p["peer"].as_str().and_then(|s| s.parse::<IpAddr>().ok()) == Some(addr))
        .cloned()
        .with_context(|| format!("no counters for {addr}: {v}"))
}

/// Echo interval of the echo test, ms (ours and FRR's echo receive
/// interval): echo detection 3 x 100 ms.
const ECHO_MS: u32 = 100;

fn echo_params() -> Parameters {
    Parameters {
        echo_mode: true,
        echo_interval_ms: ECHO_MS,
        ..params(300, 3)
    }
}

/// Waits until our session is Up, runs echo, and `n` more of its echo
/// packets came back than `since`.
fn wait_echoes(
    rx: &watch::Receiver<SessionStatus>,
    since: u64,
    n: u64,
    timeout: Duration,
) -> Result<SessionStatus> {
    wait_until(timeout, Duration::from_millis(20), || {
        let s = rx.borrow().clone();
        if s.state == State::Up && s.echo_active && s.counters.echo_in >= since + n {
            Ok(s)
        } else {
            Err(format!(
                "{} {}: echo {}, echo in {} out {} dropped {}",
                s.key,
                s.state,
                s.echo_active,
                s.counters.echo_in,
                s.counters.echo_out,
                s.counters.echo_dropped
            ))
        }
    })
    .map_err(anyhow::Error::from)
    .with_context(|| format!("waiting for {n} echo packets back"))
}

/// A transition out of Up by echo failure: diagnostic 2, a failure for
/// the client, detected one echo detection time (+ margin) after the last
/// echo packet came back (or after `up_at`, when the session came Up and
/// echo started, if no echo came back since), while control packets still
/// arrived.
fn check_echo_failure(e: &BfdEvent, up_at: Option<u64>) -> Result<u64> {
    ensure!(
        e.change.to == State::Down
            && e.change.diag == Diagnostic::EchoFunctionFailed
            && e.change.cause == bfd::Cause::EchoFailed
            && e.client_action == ClientAction::Down,
        "not an echo failure: {e:?}"
    );
    let last_echo = e.status.last_echo_rx_ns.context("no echo ever came back")?;
    let detection = e.change.at_ns - last_echo.max(up_at.unwrap_or(0));
    let expected = 3 * u64::from(ECHO_MS) * 1_000_000;
    ensure!(
        detection >= expected && detection <= expected + DETECTION_MARGIN_NS,
        "Down {detection} ns after the last echo (echo detection time {expected} ns)"
    );
    // The control side was alive: its last packet came within the control
    // detection time that applied while echo ran (we ask the peer for at
    // most one control packet per ECHO_ACTIVE_MIN_RX_US then; the status in
    // the event is already the one after the transition, when echo stopped).
    let last_rx = e.status.last_rx_ns.context("no control packet")?;
    let remote = &e.status.remote;
    let echo_control_detection_ns = u64::from(remote.detect_mult)
        * u64::from(ECHO_ACTIVE_MIN_RX_US.max(remote.desired_min_tx_us))
        * 1_000;
    ensure!(
        e.change.at_ns - last_rx < echo_control_detection_ns,
        "control silent for {} ns (control detection time while echo ran: {echo_control_detection_ns} ns): {e:?}",
        e.change.at_ns - last_rx
    );
    Ok(detection)
}

/// Echo against FRR bfdd with `echo-mode` and `echo receive-interval`: Up
/// with echo (counters and metrics count), then only the echo packets the
/// router loops back are dropped (nftables on its forward path) while
/// control packets flow: Down with diagnostic 2 within the echo detection
/// time; the drop removed: Up again with echo; FRR withdraws its echo
/// receive interval: our echo stops, without a flap.
#[test]
fn echo_up_then_echo_loss_is_down_with_diag_2_and_recovery() -> Result<()> {
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    let lab = Lab::up(&LabOptions::default())?;
    // The router forwards and sends no redirects (the kit's router
    // namespace); node-1 does not forward, so it cannot return FRR's echo
    // packets and must not invite them.
    let router_if = lab.l2_iface("router").to_string();
    ensure!(lab.router().read_sysctl("net.ipv4.ip_forward")? == "1");
    ensure!(
        lab.router()
            .read_sysctl(&format!("net.ipv4.conf.{router_if}.send_redirects"))?
            == "0"
    );
    let node_if = lab.l2_iface("node-1").to_string();
    lab.node(1)
        .sysctl(&format!("net.ipv4.conf.{node_if}.forwarding"), "0")?;
    let router = start_router(
        &lab,
        BfdProfile {
            echo_mode: true,
            echo_interval_ms: Some(ECHO_MS),
            ..BfdProfile::new("fast", 300, 300, 3)
        },
        &[n1v4()],
    )?;
    let bfd = start_bfd(lab.node(1))?;
    let registry = Registry::new();
    bfd::metrics::register(&registry, &bfd)?;
    let mut events = bfd.subscribe();
    let key = single_hop_key(&lab, n1v4(), plan::ROUTER_V4.into());
    let (client, status) = bfd.acquire_blocking(key, echo_params())?;
    wait_ours(&status, State::Up, UP_TIMEOUT).with_context(|| router.logs(30))?;
    router.wait_bfd_status(n1v4(), "up", UP_TIMEOUT)?;

    // Echo runs at max(ours, FRR's Required Min Echo RX) = 100 ms, echo
    // detection 3 x 100 ms; control is slowed (we ask for 1 s, RFC 5880
    // §6.8.3) once the Poll Sequence is over.
    let started = Instant::now();
    let s = wait_echoes(&status, 0, 10, Duration::from_secs(10))
        .with_context(|| format!("{:?}", bfd.stats()))?;
    eprintln!(
        "echo running {:?} after Up; last RTT {:?} ns",
        started.elapsed(),
        s.last_echo_rtt_ns
    );
    ensure!(
        s.remote.required_min_echo_rx_us == ECHO_MS * 1_000
            && s.echo_tx_interval_us == u64::from(ECHO_MS) * 1_000
            && s.echo_detection_time_us == 3 * u64::from(ECHO_MS) * 1_000,
        "{s:?}"
    );
    ensure!(s.counters.echo_dropped == 0, "{s:?}");
    // We do not loop FRR's echo packets back (no forwarding here), so we
    // advertise no Required Min Echo RX and FRR, echo-mode or not, sends
    // none.
    ensure!(s.advertised_min_echo_rx_us == 0, "{s:?}");
    let p = wait_frr_sees(&router, n1v4(), 1_000, 300)?;
    ensure!(p.raw["remote-echo-receive-interval"] == 0, "{}", p.raw);
    let s = wait_negotiated(&status, 300_000, 3_000_000)?;
    ensure!(s.advertised_min_rx_us == 1_000_000, "{s:?}");
    agree(&router, n1v4(), &status)?;
    ensure!(frr_counters(&router, n1v4())?["echo-packet-output"] == 0);

    // Steady: echo packets keep coming back, counted by the metrics.
    let echo_in = status.borrow().counters.echo_in;
    std::thread::sleep(Duration::from_secs(2));
    let s = status.borrow().clone();
    ensure!(s.state == State::Up && s.counters.down_events == 0, "{s:?}");
    ensure!(s.counters.echo_in >= echo_in + 15, "{s:?}");
    let m = our_metrics(&registry, plan::ROUTER_V4.into())?;
    ensure!(
        m[names::ECHO_PACKET_OUTPUT] >= m[names::ECHO_PACKET_INPUT],
        "{m:?}"
    );
    ensure!(m[names::ECHO_PACKET_INPUT] >= 25.0, "{m:?}");
    let stats = bfd.stats();
    ensure!(
        stats.echo_tx as f64 == m[names::ECHO_PACKET_OUTPUT] && stats.echo_rx >= 25,
        "{stats:?} {m:?}"
    );

    // The router drops the echo packets it would loop back; control
    // packets, to and from its own address, are not forwarded and flow.
    let _ = downs_queued(&mut events);
    let frr_downs = frr_down_events(&router, n1v4())?;
    let before = monotonic_ns();
    let drop = testkit::cut::drop_forwarded_udp(lab.router(), bfd::path::ECHO_PORT)?;
    let e = next_event(&mut events, DOWN_BOUND + Duration::from_secs(5), |e| {
        e.change.from == State::Up
    })?;
    let took = Duration::from_nanos(e.change.at_ns.saturating_sub(before));
    let detection = check_echo_failure(&e, None)?;
    ensure!(took < DOWN_BOUND, "Down {took:?} after the drop");
    eprintln!(
        "echo loss: Down {took:?} after the drop, {:.1} ms after the last echo back \
         (echo detection time {} ms)",
        detection as f64 / 1e6,
        3 * ECHO_MS
    );
    let m = our_metrics(&registry, plan::ROUTER_V4.into())?;
    ensure!(
        m[names::SESSION_UP] == 0.0 && m[names::SESSION_DOWN_EVENTS] == 1.0,
        "{m:?}"
    );
    // FRR heard our Down (diagnostic 2).
    wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        let d = frr_down_events(&router, n1v4()).map_err(|e| format!("{e:#}"))?;
        (d > frr_downs)
            .then_some(())
            .ok_or(format!("FRR session-down {d}"))
    })?;
    // Control packets still flow: the session comes Up again through them,
    // and each time echo fails again (diagnostic 2, never 1).
    let up = next_event(&mut events, UP_TIMEOUT, |e| e.change.to == State::Up)
        .with_context(|| router.logs(30))?;
    let e = next_event(&mut events, DOWN_BOUND + Duration::from_secs(5), |e| {
        e.change.from == State::Up
    })?;
    let again = check_echo_failure(&e, Some(up.change.at_ns))?;
    eprintln!(
        "Up again through control packets, echo failed again {:.1} ms later",
        again as f64 / 1e6
    );

    // The drop removed: Up again, with echo, and it stays Up.
    drop.restore()?;
    let e = next_event(&mut events, UP_TIMEOUT, |e| e.change.to == State::Up)
        .with_context(|| router.logs(30))?;
    let echo_in = e.status.counters.echo_in;
    let s = wait_echoes(&status, echo_in, 10, Duration::from_secs(10))?;
    let downs = s.counters.down_events;
    std::thread::sleep(Duration::from_secs(2));
    let s = status.borrow().clone();
    ensure!(
        s.state == State::Up && s.counters.down_events == downs,
        "{s:?}; {:?}",
        downs_queued(&mut events)
    );
    router.wait_bfd_status(n1v4(), "up", UP_TIMEOUT)?;
    agree(&router, n1v4(), &status)?;

    // FRR stops accepting echo (`echo receive-interval disabled`): our
    // echo stops at once and control goes back to 300 ms, with no flap.
    let _ = downs_queued(&mut events);
    router.configure(&["bfd", "profile fast", "echo receive-interval disabled"])?;
    let s = wait_negotiated(&status, 300_000, 900_000)?;
    ensure!(
        !s.echo_active
            && s.remote.required_min_echo_rx_us == 0
            && s.advertised_min_rx_us == 300_000,
        "{s:?}"
    );
    let out = s.counters.echo_out;
    std::thread::sleep(Duration::from_millis(500));
    let s = status.borrow().clone();
    ensure!(s.counters.echo_out == out, "echo still sent: {s:?}");
    let downs = downs_queued(&mut events);
    ensure!(downs.is_empty(), "our session left Up: {downs:?}");
    wait_frr_sees(&router, n1v4(), 300, 300)?;
    bfd.release_blocking(client)?;
    Ok(())
}

// ---- helpers for many sessions ----

/// `n` addresses of node-1 for sessions: 192.0.2.101 on (the lab plan
/// leaves .101-.200 free).
fn session_addrs(n: usize) -> Vec<IpAddr> {
    assert!(n <= 100);
    (0..n)
        .map(|i| IpAddr::from([192, 0, 2, 101 + i as u8]))
        .collect()
}

fn add_session_addrs(lab: &Lab, locals: &[IpAddr]) -> Result<()> {
    let iface = lab.l2_iface("node-1").to_string();
    for l in locals {
        lab.node(1).add_addr(&iface, &format!("{l}/24"))?;
    }
    Ok(())
}

/// Adds single-hop peers (FRR side .1, through its L2 interface) with
/// profile `profile` to a running FRR, through `vtysh -f`.
fn add_frr_peers(lab: &Lab, router: &Frr, peers: &[IpAddr], profile: &str) -> Result<()> {
    let iface = lab.l2_iface("router").to_string();
    let entries: Vec<(IpAddr, IpAddr, Option<&str>, bool)> = peers
        .iter()
        .map(|p| (*p, router_addr_for(*p), Some(iface.as_str()), false))
        .collect();
    let file = router.dir().join("bench-peers.conf");
    std::fs::write(&file, bfd_peers_block(&entries, profile, &[]))?;
    router.apply_file(&file)
}

/// Waits until FRR has every peer in `peers` up, seeing our timers as
/// `ms` both ways (one `show bfd peers json` per poll).
fn wait_frr_all_up(frr: &Frr, peers: &[IpAddr], ms: u64) -> Result<()> {
    wait_until(Duration::from_secs(60), Duration::from_millis(250), || {
        let all = frr.bfd_peers().map_err(|e| format!("{e:#}"))?;
        let ready = peers
            .iter()
            .filter(|a| {
                all.iter().any(|p| {
                    p.peer.parse::<IpAddr>().is_ok_and(|x| x == **a)
                        && p.status == "up"
                        && p.remote_receive_interval_ms == Some(ms)
                        && p.remote_transmit_interval_ms == Some(ms)
                })
            })
            .count();
        if ready == peers.len() {
            Ok(())
        } else {
            Err(format!(
                "{ready} of {} FRR peers up at {ms} ms",
                peers.len()
            ))
        }
    })
    .map_err(anyhow::Error::from)
    .context("waiting for FRR's peers")
}

/// Sum of FRR's `session-down` counters over its peers.
fn frr_downs_total(frr: &Frr) -> Result<u64> {
    let v = frr.show_json("show bfd peers counters json")?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["session-down"].as_u64())
        .sum())
}

/// Acquires one 50 ms x 3 session per local address to the router and
/// waits for all of them (ours and FRR's) to be Up at 50 ms.
fn sessions_up_50ms(
    lab: &Lab,
    bfd: &Bfd,
    router: &Frr,
    locals: &[IpAddr],
) -> Result<Vec<watch::Receiver<SessionStatus>>> {
    let iface = lab.l2_iface("node-1").to_string();
    let mut out = Vec::new();
    for l in locals {
        let key = SessionKey::single_hop(iface.as_str(), *l, router_addr_for(*l));
        out.push(bfd.acquire_blocking(key, params(50, 3))?.1);
    }
    for status in &out {
        wait_ours(status, State::Up, UP_TIMEOUT).with_context(|| router.logs(30))?;
        wait_negotiated(status, 50_000, 150_000)?;
    }
    wait_frr_all_up(router, locals, 50)?;
    Ok(out)
}

fn our_downs_total(sessions: &[watch::Receiver<SessionStatus>]) -> u64 {
    sessions
        .iter()
        .map(|s| s.borrow().counters.down_events)
        .sum()
}

// ---- many sessions ----

/// 20 sessions at 50 ms x 3 to FRR for 10 s: 400 packets/s each way, fast
/// enough that the runtime takes its receiving socket out of the epoll set
/// and drains it on its own schedule (`RX_GATE_NS`), and sends periodic
/// packets early within their margin with other wakeups. No session goes
/// down on either side, and the thread wakes less often than packets come
/// and go.
#[test]
fn twenty_sessions_at_50ms_stay_up_with_fewer_wakeups_than_packets() -> Result<()> {
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    let lab = Lab::up(&LabOptions::default())?;
    let locals = session_addrs(20);
    add_session_addrs(&lab, &locals)?;
    let router = start_router(&lab, BfdProfile::new("fast", 50, 50, 3), &[])?;
    let bfd = start_bfd(lab.node(1))?;
    add_frr_peers(&lab, &router, &locals, "fast")?;
    let sessions = sessions_up_50ms(&lab, &bfd, &router, &locals)?;
    let frr_downs0 = frr_downs_total(&router)?;
    let stats0 = bfd.stats();
    std::thread::sleep(Duration::from_secs(10));
    let stats1 = bfd.stats();
    ensure!(
        our_downs_total(&sessions) == 0,
        "our sessions went down: {:?}",
        sessions
            .iter()
            .map(|s| s.borrow().clone())
            .collect::<Vec<_>>()
    );
    ensure!(
        frr_downs_total(&router)? == frr_downs0,
        "FRR saw sessions go down; {}",
        router.logs(30)
    );
    let (wakeups, tx, rx) = (
        stats1.wakeups - stats0.wakeups,
        stats1.control_tx - stats0.control_tx,
        stats1.control_rx - stats0.control_rx,
    );
    eprintln!(
        "20 sessions, 10 s: {wakeups} wakeups for {tx} sent and {rx} received; \
         receiving socket gated {} times",
        stats1.rx_gated - stats0.rx_gated
    );
    // About 4,000-4,600 each way in 10 s (intervals 75-100 % of 50 ms).
    ensure!(tx >= 3_500 && rx >= 3_500, "sent {tx}, received {rx}");
    ensure!(stats1.rx_gated > stats0.rx_gated, "never gated: {stats1:?}");
    ensure!(
        wakeups < tx + rx,
        "{wakeups} wakeups for {} packets",
        tx + rx
    );
    Ok(())
}

// ---- measurements (feature `bench-lab`) ----

#[cfg(feature = "bench-lab")]
mod bench {
    use super::*;
    use bfd::ControlPacket;
    use std::path::Path;
    use std::process::{Child, Command, Stdio};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{SystemTime, UNIX_EPOCH};
    use testkit::Capture;

    // ---- process figures ----

    /// utime and stime of a thread, in clock ticks, and its CPU time in ns
    /// from schedstat.
    fn thread_cpu(pid: u32, tid: i32) -> Result<(u64, u64, u64)> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat"))?;
        let (_, rest) = stat.rsplit_once(')').context("stat format")?;
        let f: Vec<&str> = rest.split_whitespace().collect();
        // rest starts at field 3; utime and stime are fields 14 and 15.
        let sched = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))?;
        Ok((f[11].parse()?, f[12].parse()?, schedstat_ns(&sched)?))
    }

    fn schedstat_ns(text: &str) -> Result<u64> {
        Ok(text
            .split_whitespace()
            .next()
            .context("schedstat format")?
            .parse()?)
    }

    /// CPU time of every thread of a process, ns (schedstat of each task).
    fn process_cpu_ns(pid: u32) -> Result<u64> {
        let mut total = 0;
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
            let path = task?.path().join("schedstat");
            // A thread may exit between the listing and the read.
            if let Ok(text) = std::fs::read_to_string(&path) {
                total += schedstat_ns(&text)?;
            }
        }
        Ok(total)
    }

    /// VmRSS of a process, KiB.
    fn rss_kib(pid: u32) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .context("no VmRSS")?
            .parse()
            .context("VmRSS")
    }

    fn loadavg() -> String {
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// CLOCK_REALTIME, ns (the clock of tcpdump's time stamps).
    fn wall_ns() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    }

    // ---- statistics ----

    /// Nearest-rank quantile of sorted values (`q` in 0-1): the value at
    /// rank ceil(q * n). With 50 samples p99 is the 50th, the maximum.
    fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
        let n = sorted.len();
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        sorted[rank - 1]
    }

    fn median(sorted: &[f64]) -> f64 {
        let n = sorted.len();
        if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        }
    }

    fn sorted(mut v: Vec<f64>) -> Vec<f64> {
        v.sort_by(f64::total_cmp);
        v
    }

    /// `min / median / p99 (nearest rank) / max` of ms values.
    fn ms_summary(v: &[f64]) -> String {
        let s = sorted(v.to_vec());
        format!(
            "min {:.1} ms, median {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            s[0],
            median(&s),
            nearest_rank(&s, 0.99),
            s[s.len() - 1]
        )
    }

    // ---- packets on the wire ----

    /// A BFD control packet in a capture.
    #[derive(Debug)]
    struct WirePacket {
        /// Kernel time stamp, CLOCK_REALTIME ns.
        at_ns: u64,
        src: IpAddr,
        dst: IpAddr,
        sport: u16,
        packet: ControlPacket,
    }

    /// The BFD control packets (UDP to 3784 / 4784 over IPv4 or IPv6 on
    /// Ethernet) of a pcap file.
    fn read_bfd_pcap(path: &Path) -> Result<Vec<WirePacket>> {
        let mut out = Vec::new();
        for r in testkit::pcap::read(path)? {
            if let Some((src, dst, sport, payload)) = udp_to_bfd(&r.data)
                && let Ok(packet) = ControlPacket::decode(payload)
            {
                out.push(WirePacket {
                    at_ns: r.ts_ns,
                    src,
                    dst,
                    sport,
                    packet,
                });
            }
        }
        Ok(out)
    }

    /// Source, destination, source port and payload of a UDP datagram to
    /// port 3784 or 4784 in an Ethernet frame.
    fn udp_to_bfd(frame: &[u8]) -> Option<(IpAddr, IpAddr, u16, &[u8])> {
        let ip = testkit::pcap::ip_in_ethernet(frame).filter(|ip| ip.protocol == 17)?;
        let udp = ip.payload;
        let sport = u16::from_be_bytes([*udp.first()?, *udp.get(1)?]);
        let dport = u16::from_be_bytes([*udp.get(2)?, *udp.get(3)?]);
        (dport == 3784 || dport == 4784).then_some((ip.src, ip.dst, sport, udp.get(8..)?))
    }

    /// What tcpdump said it dropped (its exit statistics in the capture's
    /// log), or `?`.
    fn capture_drops(ns: &Netns, pcap: &Path) -> String {
        let name = pcap
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let log = ns
            .state_dir()
            .join("logs")
            .join(format!("tcpdump-{name}.log"));
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .find(|l| l.contains("dropped by kernel"))
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or("?")
            .to_string()
    }

    fn capture_bfd(lab: &Lab, name: &str) -> Result<(Capture, PathBuf)> {
        let pcap = lab.router().state_dir().join(name);
        let iface = lab.l2_iface("router").to_string();
        let cap = Capture::start(lab.router(), &iface, &pcap, &["udp", "port", "3784"])?;
        Ok((cap, pcap))
    }

    // ---- CPU and RSS ----

    /// 10, 20 and 100 sessions at 50 ms x 3 with FRR in the router: CPU of
    /// our BFD thread and of FRR's bfdd over 30 s, the RSS each gains for
    /// the sessions, our TX lateness.
    #[test]
    fn bench_sessions_50ms_cpu_rss_and_tx_lateness() -> Result<()> {
        let _serial = testkit::serial()?;
        testkit::preflight()?;
        // `BFD_BENCH_SESSIONS=100` runs one size only.
        let sizes: Vec<usize> = match std::env::var("BFD_BENCH_SESSIONS") {
            Ok(v) => vec![v.parse().context("BFD_BENCH_SESSIONS")?],
            Err(_) => vec![10, 20, 100],
        };
        for n in sizes {
            ensure!((1..=100).contains(&n), "{n} sessions: 1-100");
            let lab = Lab::up(&LabOptions::default())?;
            let locals = session_addrs(n);
            add_session_addrs(&lab, &locals)?;
            // FRR with the profile but no peer: bfdd's RSS before the
            // sessions.
            let router = lab.start_router(
                &FrrConfig::new("router", plan::ROUTER_AS, plan::ROUTER_V4)
                    .bfd_profile(BfdProfile::new("fast", 50, 50, 3)),
            )?;
            let bfdd = router
                .pid(testkit::FrrDaemon::Bfdd)
                .context("no bfdd pid")?;
            let pid = std::process::id();
            std::thread::sleep(Duration::from_secs(1));
            let frr_rss0 = rss_kib(bfdd)?;
            let rss0 = rss_kib(pid)?;
            let bfd = start_bfd(lab.node(1))?;
            let rss_started = rss_kib(pid)?;
            add_frr_peers(&lab, &router, &locals, "fast")?;
            let sessions = sessions_up_50ms(&lab, &bfd, &router, &locals)?;
            let tid = bfd.stats().thread_id.context("no thread id")?;
            std::thread::sleep(Duration::from_secs(2));

            let window = Duration::from_secs(30);
            let load0 = loadavg();
            let rss1 = rss_kib(pid)?;
            let frr_rss1 = rss_kib(bfdd)?;
            let downs0 = our_downs_total(&sessions);
            let frr_downs0 = frr_downs_total(&router)?;
            let (u0, s0, ns0) = thread_cpu(pid, tid)?;
            let frr0 = process_cpu_ns(bfdd)?;
            let late0 = bfd.tx_lateness();
            let stats0 = bfd.stats();
            let start = Instant::now();
            std::thread::sleep(window);
            let elapsed = start.elapsed().as_secs_f64();
            let (u1, s1, ns1) = thread_cpu(pid, tid)?;
            let frr1 = process_cpu_ns(bfdd)?;
            let late = bfd.tx_lateness().since(&late0);
            let stats1 = bfd.stats();
            let rss2 = rss_kib(pid)?;
            let frr_rss2 = rss_kib(bfdd)?;
            let load1 = loadavg();
            let downs = our_downs_total(&sessions) - downs0;
            let frr_downs = frr_downs_total(&router)? - frr_downs0;

            let pct_ticks = |t: u64| t as f64 / 100.0 / elapsed * 100.0;
            let (cpu_user, cpu_sys) = (pct_ticks(u1 - u0), pct_ticks(s1 - s0));
            let cpu_sched = (ns1 - ns0) as f64 / 1e9 / elapsed * 100.0;
            let frr_cpu = (frr1 - frr0) as f64 / 1e9 / elapsed * 100.0;
            let q = |p: f64| late.quantile_us(p).map_or("-".into(), |v| v.to_string());
            eprintln!(
                "BENCH {n} sessions 50 ms x 3, {elapsed:.1} s (load {load0} -> {load1}): \
                 our BFD thread {cpu_sched:.3} % of a core (schedstat; stat ticks: {cpu_user:.2} % user, {cpu_sys:.2} % system); \
                 FRR bfdd (all threads, schedstat) {frr_cpu:.2} %; \
                 our RSS {rss0} KiB before start, {rss_started} started, {rss1} with the sessions, {rss2} after the window \
                 (+{} KiB for the sessions); FRR bfdd RSS {frr_rss0} KiB without peers, {frr_rss1} with them, {frr_rss2} after \
                 (+{} KiB); TX lateness over {} periodic packets: p50 <= {} us, p99 <= {} us, max <= {} us; \
                 wakeups {}, sent {}, received {}, tx errors {}; session downs during the window: ours {downs}, FRR's {frr_downs}",
                rss2 as i64 - rss_started as i64,
                frr_rss2 as i64 - frr_rss0 as i64,
                late.count(),
                q(0.5),
                q(0.99),
                q(1.0),
                stats1.wakeups - stats0.wakeups,
                stats1.control_tx - stats0.control_tx,
                stats1.control_rx - stats0.control_rx,
                stats1.tx_errors - stats0.tx_errors,
            );
            drop(sessions);
            drop(bfd);
            drop(router);
            lab.destroy()?;
        }
        Ok(())
    }

    // ---- detection ----

    const CUTS: usize = 50;

    /// 50 silent cuts of node-1's cable (at the switch, both directions)
    /// per interval, 300 ms and 50 ms x 3. Ours: the Down event's time
    /// minus the last packet our session received (its own time stamps).
    /// FRR's: from a capture on the router's interface (the cut is at the
    /// switch port, beyond it): FRR's first Down packet (bfdd sends one at
    /// once when detection expires) minus the last packet of ours that
    /// reached the router. Both also from the start of the cut (the first
    /// nft command; the rules take a few ms to be in place).
    #[test]
    fn bench_detection_time_50_silent_cuts() -> Result<()> {
        let _serial = testkit::serial()?;
        testkit::preflight()?;
        for interval in [300u32, 50] {
            let lab = Lab::up(&LabOptions::default())?;
            let router = start_router(
                &lab,
                BfdProfile::new("fast", interval, interval, 3),
                &[n1v4()],
            )?;
            let bfd = start_bfd(lab.node(1))?;
            let mut events = bfd.subscribe();
            let key = single_hop_key(&lab, n1v4(), plan::ROUTER_V4.into());
            let (_, status) = bfd.acquire_blocking(key, params(interval, 3))?;
            let (capture, pcap) = capture_bfd(&lab, &format!("detection-{interval}.pcap"))?;
            let tx = u64::from(interval) * 1_000;
            let detection_ms = 3.0 * f64::from(interval);
            // (from the last packet, from the cut), ms.
            let mut ours: Vec<(f64, f64)> = Vec::new();
            // (cut, restore), CLOCK_REALTIME ns.
            let mut windows = Vec::new();
            // How long installing the cut's rules took, ms.
            let mut cut_ms = Vec::new();
            let load0 = loadavg();
            let started = Instant::now();
            for i in 0..CUTS {
                ensure!(
                    started.elapsed() < Duration::from_secs(900),
                    "{i} cuts in {:?}: too slow",
                    started.elapsed()
                );
                wait_ours(&status, State::Up, UP_TIMEOUT).with_context(|| router.logs(30))?;
                wait_negotiated(&status, tx, 3 * tx)?;
                wait_frr_sees(&router, n1v4(), u64::from(interval), u64::from(interval))?;
                // A random phase against both sides' transmissions.
                std::thread::sleep(Duration::from_millis(
                    300 + u64::from(monotonic_ns() as u16 % 300),
                ));
                let _ = downs_queued(&mut events);
                let d = status.borrow().local_discr;
                let cut_wall = wall_ns();
                let before = monotonic_ns();
                let cut = lab.cut_cable("node-1")?;
                cut_ms.push((monotonic_ns() - before) as f64 / 1e6);
                let e = next_event(&mut events, DOWN_BOUND + Duration::from_secs(5), |e| {
                    e.discriminator == d && e.change.to == State::Down
                })?;
                ensure!(
                    e.change.diag == Diagnostic::ControlDetectionTimeExpired,
                    "{e:?}"
                );
                let last_rx = e.status.last_rx_ns.context("no packet was ever received")?;
                ours.push((
                    (e.change.at_ns - last_rx) as f64 / 1e6,
                    e.change.at_ns.saturating_sub(before) as f64 / 1e6,
                ));
                router.wait_bfd_status(n1v4(), "down", Duration::from_secs(10))?;
                let restore_wall = wall_ns();
                cut.restore()?;
                windows.push((cut_wall, restore_wall));
            }
            let took = started.elapsed();
            let load1 = loadavg();
            capture.stop()?;
            let drops = capture_drops(lab.router(), &pcap);
            let packets = read_bfd_pcap(&pcap)?;
            let (r, n): (IpAddr, IpAddr) = (plan::ROUTER_V4.into(), n1v4());
            let mut frr: Vec<(f64, f64)> = Vec::new();
            let mut frr_diags = BTreeMap::new();
            for (k, (cut, restore)) in windows.iter().enumerate() {
                let down = packets
                    .iter()
                    .find(|p| {
                        p.src == r
                            && p.dst == n
                            && p.at_ns > *cut
                            && p.at_ns < *restore
                            && p.packet.state == State::Down
                    })
                    .with_context(|| format!("cut {k}: no Down packet from FRR captured"))?;
                let last = packets
                    .iter()
                    .rfind(|p| p.src == n && p.dst == r && p.at_ns < down.at_ns)
                    .with_context(|| format!("cut {k}: no packet of ours before FRR's Down"))?;
                *frr_diags
                    .entry(format!("{:?}", down.packet.diag))
                    .or_insert(0u32) += 1;
                frr.push((
                    (down.at_ns - last.at_ns) as f64 / 1e6,
                    down.at_ns.saturating_sub(*cut) as f64 / 1e6,
                ));
            }
            let col = |v: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| -> Vec<f64> {
                v.iter().map(f).collect()
            };
            let ours_last = col(&ours, |x| x.0);
            let frr_last = col(&frr, |x| x.0);
            let target = detection_ms + 20.0;
            let verdict = |v: &[f64]| {
                let p99 = nearest_rank(&sorted(v.to_vec()), 0.99);
                if p99 <= target {
                    format!("p99 {p99:.1} ms <= {target:.0} ms: target met")
                } else {
                    format!("p99 {p99:.1} ms > {target:.0} ms: target MISSED")
                }
            };
            let list = |v: &[f64]| {
                sorted(v.to_vec())
                    .iter()
                    .map(|x| format!("{x:.1}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            eprintln!(
                "BENCH detection {interval} ms x 3 (detection time {detection_ms:.0} ms), {CUTS} silent cuts \
                 in {took:.0?} (load {load0} -> {load1}; capture drops {drops}):\n  \
                 ours from the last packet received: {}; {}\n  \
                 ours from the start of the cut: {}\n  \
                 FRR from the last packet of ours it got (wire): {}; {}\n  \
                 FRR from the start of the cut (wire): {}\n  \
                 installing the cut (3 nft rules in the switch namespace; the first drops \
                 node-1's frames, the last the router's to node-1): {}\n  \
                 FRR's diagnostics: {frr_diags:?}\n  \
                 ours, sorted: {}\n  FRR, sorted: {}",
                ms_summary(&ours_last),
                verdict(&ours_last),
                ms_summary(&col(&ours, |x| x.1)),
                ms_summary(&frr_last),
                verdict(&frr_last),
                ms_summary(&col(&frr, |x| x.1)),
                ms_summary(&cut_ms),
                list(&ours_last),
                list(&frr_last),
            );
            drop(bfd);
            drop(router);
            lab.destroy()?;
        }
        Ok(())
    }

    // ---- TX jitter ----

    /// Something that keeps both CPUs busy at normal priority for a bounded
    /// time.
    enum Hog {
        None,
        /// Two `sh` busy loops, one pinned to each CPU, each in a session
        /// of its own (another workload on the node; with autogroup
        /// scheduling each competes as its own group), ended by `timeout`
        /// at the latest.
        Processes(Vec<Child>),
        /// Two busy threads in this process, one pinned to each CPU (our
        /// own process busy elsewhere: same autogroup as our BFD thread).
        Threads(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>),
    }

    impl Hog {
        fn start(kind: &str, bound: Duration) -> Result<Hog> {
            let cpus = 0..2usize;
            match kind {
                "alone" => Ok(Hog::None),
                "processes" => {
                    let mut children = Vec::new();
                    for cpu in cpus {
                        let child = Command::new("setsid")
                            .args(["taskset", "-c", &cpu.to_string()])
                            .args(["timeout", &bound.as_secs().to_string()])
                            .args(["sh", "-c", "while :; do :; done"])
                            .stdin(Stdio::null())
                            .stdout(Stdio::null())
                            .stderr(Stdio::null())
                            .spawn()?;
                        children.push(child);
                    }
                    Ok(Hog::Processes(children))
                }
                "threads" => {
                    let stop = Arc::new(AtomicBool::new(false));
                    let deadline = Instant::now() + bound;
                    let mut threads = Vec::new();
                    for cpu in cpus {
                        let stop = Arc::clone(&stop);
                        threads.push(std::thread::spawn(move || {
                            let mut set = nix::sched::CpuSet::new();
                            if set.set(cpu).is_ok() {
                                let _ = nix::sched::sched_setaffinity(
                                    nix::unistd::Pid::from_raw(0),
                                    &set,
                                );
                            }
                            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                                for _ in 0..10_000 {
                                    std::hint::spin_loop();
                                }
                            }
                        }));
                    }
                    Ok(Hog::Threads(stop, threads))
                }
                other => bail!("unknown hog {other}"),
            }
        }

        fn stop(self) {
            match self {
                Hog::None => {}
                Hog::Processes(children) => {
                    for mut c in children {
                        // `timeout` passes SIGTERM on to its `sh`.
                        testkit::process::kill_pid(c.id(), testkit::process::Signal::TERM);
                        let _ = c.wait();
                    }
                }
                Hog::Threads(stop, threads) => {
                    stop.store(true, Ordering::Relaxed);
                    for t in threads {
                        let _ = t.join();
                    }
                }
            }
        }
    }

    /// Intervals between consecutive periodic packets (Up, neither Poll nor
    /// Final, both ends of the interval) of each flow (source address and
    /// port, destination), as % of `nominal_ms`.
    fn intervals_pct<'a>(
        packets: impl Iterator<Item = &'a WirePacket>,
        nominal_ms: f64,
    ) -> Vec<f64> {
        let mut flows: BTreeMap<(IpAddr, u16, IpAddr), Vec<&WirePacket>> = BTreeMap::new();
        for p in packets {
            flows.entry((p.src, p.sport, p.dst)).or_default().push(p);
        }
        let periodic =
            |p: &WirePacket| p.packet.state == State::Up && !p.packet.poll && !p.packet.final_;
        let mut out = Vec::new();
        for ps in flows.values() {
            for w in ps.windows(2) {
                if periodic(w[0]) && periodic(w[1]) {
                    out.push((w[1].at_ns - w[0].at_ns) as f64 / 1e6 / nominal_ms * 100.0);
                }
            }
        }
        out
    }

    fn jitter_summary(v: &[f64], band: (f64, f64)) -> String {
        if v.is_empty() {
            return "no intervals".into();
        }
        let s = sorted(v.to_vec());
        let below = s.iter().filter(|x| **x < band.0).count();
        let above = s.iter().filter(|x| **x > band.1).count();
        format!(
            "{} intervals, % of nominal: min {:.1}, p1 {:.1}, median {:.1}, p99 {:.1}, max {:.1}; \
             outside {:.0}-{:.0} %: {} below ({:.2} %), {} above ({:.2} %)",
            s.len(),
            s[0],
            nearest_rank(&s, 0.01),
            median(&s),
            nearest_rank(&s, 0.99),
            s[s.len() - 1],
            band.0,
            band.1,
            below,
            below as f64 * 100.0 / s.len() as f64,
            above,
            above as f64 * 100.0 / s.len() as f64,
        )
    }

    /// TX intervals of 20 sessions at 50 ms x 3, ours and FRR's, on the wire
    /// (a capture on the router's interface: ours as they arrive, FRR's as
    /// they leave), against RFC 5880 §6.8.7's 75-100 % of the interval;
    /// 20 s alone, 20 s beside a CPU hog of other processes and 20 s with
    /// the hog as threads of our own process.
    #[test]
    fn bench_tx_interval_jitter() -> Result<()> {
        let _serial = testkit::serial()?;
        testkit::preflight()?;
        let lab = Lab::up(&LabOptions::default())?;
        let locals = session_addrs(20);
        add_session_addrs(&lab, &locals)?;
        let router = start_router(&lab, BfdProfile::new("fast", 50, 50, 3), &locals)?;
        let bfd = start_bfd(lab.node(1))?;
        let sessions = sessions_up_50ms(&lab, &bfd, &router, &locals)?;
        std::thread::sleep(Duration::from_secs(2));
        let window = Duration::from_secs(20);
        let r: IpAddr = plan::ROUTER_V4.into();
        for kind in ["alone", "processes", "threads"] {
            let (capture, pcap) = capture_bfd(&lab, &format!("jitter-{kind}.pcap"))?;
            let downs0 = our_downs_total(&sessions);
            let frr_downs0 = frr_downs_total(&router)?;
            let late0 = bfd.tx_lateness();
            let hog = Hog::start(kind, window + Duration::from_secs(10))?;
            // Let the hog get going, then measure.
            std::thread::sleep(Duration::from_millis(500));
            let load0 = loadavg();
            let from = wall_ns();
            std::thread::sleep(window);
            let to = wall_ns();
            let load1 = loadavg();
            hog.stop();
            let late = bfd.tx_lateness().since(&late0);
            capture.stop()?;
            let drops = capture_drops(lab.router(), &pcap);
            let packets = read_bfd_pcap(&pcap)?;
            let inside = |p: &&WirePacket| p.at_ns >= from && p.at_ns <= to;
            let ours = intervals_pct(
                packets
                    .iter()
                    .filter(inside)
                    .filter(|p| p.dst == r && locals.contains(&p.src)),
                50.0,
            );
            let frr = intervals_pct(
                packets
                    .iter()
                    .filter(inside)
                    .filter(|p| p.src == r && locals.contains(&p.dst)),
                50.0,
            );
            let downs = our_downs_total(&sessions) - downs0;
            let frr_downs = frr_downs_total(&router)? - frr_downs0;
            let q = |p: f64| late.quantile_us(p).map_or("-".into(), |v| v.to_string());
            eprintln!(
                "BENCH TX jitter, 20 sessions 50 ms x 3, {window:?}, hog: {kind} (load {load0} -> {load1}; \
                 capture drops {drops}):\n  ours: {}\n  FRR:  {}\n  \
                 our TX lateness over {} packets: p50 <= {} us, p99 <= {} us, max <= {} us; \
                 session downs: ours {downs}, FRR's {frr_downs}",
                jitter_summary(&ours, (75.0, 100.0)),
                jitter_summary(&frr, (75.0, 100.0)),
                late.count(),
                q(0.5),
                q(0.99),
                q(1.0),
            );
        }
        drop(sessions);
        drop(bfd);
        drop(router);
        lab.destroy()?;
        Ok(())
    }

    #[test]
    fn bench_helpers_quantiles_and_pcap() -> Result<()> {
        let s = sorted((1..=50).map(f64::from).rev().collect());
        ensure!(nearest_rank(&s, 0.99) == 50.0 && nearest_rank(&s, 0.01) == 1.0);
        ensure!(median(&s) == 25.5 && nearest_rank(&s, 0.5) == 25.0);
        // One IPv4 BFD packet in a little-endian µs pcap.
        let mut frame = vec![0u8; 14];
        frame[12..14].copy_from_slice(&[0x08, 0x00]);
        let mut ip = vec![0x45, 0, 0, 52, 0, 0, 0, 0, 255, 17, 0, 0];
        ip.extend([192, 0, 2, 11, 192, 0, 2, 1]);
        frame.extend(ip);
        frame.extend([0xc0, 0x00, 0x0e, 0xc8, 0, 32, 0, 0]);
        let bfd = [
            0x20, 0xc0, 3, 24, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0xc3, 0x50, 0, 0, 0xc3, 0x50, 0, 0, 0,
            0,
        ];
        frame.extend(bfd);
        let mut file = Vec::new();
        file.extend(0xa1b2_c3d4u32.to_le_bytes());
        file.extend([2, 0, 4, 0]);
        file.extend([0u8; 8]);
        file.extend(65535u32.to_le_bytes());
        file.extend(1u32.to_le_bytes());
        file.extend(7u32.to_le_bytes());
        file.extend(250u32.to_le_bytes());
        file.extend((frame.len() as u32).to_le_bytes());
        file.extend((frame.len() as u32).to_le_bytes());
        file.extend(&frame);
        let path = std::env::temp_dir().join(format!("bfd-bench-{}.pcap", std::process::id()));
        std::fs::write(&path, &file)?;
        let got = read_bfd_pcap(&path);
        let _ = std::fs::remove_file(&path);
        let got = got?;
        ensure!(got.len() == 1, "{got:?}");
        let p = &got[0];
        ensure!(p.at_ns == 7_000_250_000 && p.sport == 0xc000, "{p:?}");
        ensure!(p.src == n1v4() && p.dst == IpAddr::from(plan::ROUTER_V4));
        ensure!(p.packet.state == State::Up && p.packet.desired_min_tx_us == 50_000);
        let pct = intervals_pct(got.iter(), 50.0);
        ensure!(pct.is_empty());
        Ok(())
    }
}

/// The `metallbctl` binary: `METALLBCTL` when set, else the one cargo built
/// beside this test binary (`target/<profile>/metallbctl`).
fn metallbctl_binary() -> Result<PathBuf> {
    if let Ok(p) = std::env::var("METALLBCTL") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .context("test binary has no target/<profile>/deps parent")?;
    let bin = dir.join("metallbctl");
    ensure!(
        bin.is_file(),
        "{} does not exist: build it first (`cargo build -p metallbctl`, or run `cargo test --workspace`), or set METALLBCTL",
        bin.display()
    );
    Ok(bin)
}

/// `metallbctl bfd-probe` against FRR, with echo (FRR advertises its
/// default echo receive interval, 50 ms; ours is 100 ms).
#[test]
fn bfd_probe_cli_against_frr() -> Result<()> {
    let bin = metallbctl_binary()?;
    let _serial = testkit::serial()?;
    testkit::preflight()?;
    let lab = Lab::up(&LabOptions::default())?;
    let router = start_router(&lab, BfdProfile::new("fast", 300, 300, 3), &[n1v4()])?;
    let mut c = lab.node(1).command(&bin);
    c.args(["bfd-probe", "--peer", "192.0.2.1", "--local", "192.0.2.11"])
        .args([
            "--interface",
            lab.l2_iface("node-1"),
            "--rx",
            "100",
            "--tx",
            "100",
        ])
        .args(["--echo", "--echo-interval", "100"])
        .args(["--duration", "30"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = c.spawn()?;
    std::thread::sleep(Duration::from_secs(4));
    // Ctrl-C (`ip netns exec` execs the probe: the pid is the probe's).
    testkit::process::kill_pid(child.id(), testkit::process::Signal::INT);
    let out = child.wait_with_output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout)?;
    eprintln!("{stdout}");
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let states: Vec<&str> = lines
        .iter()
        .filter(|l| l["event"] == "state")
        .filter_map(|l| l["state"].as_str())
        .collect();
    ensure!(states.contains(&"Up"), "{states:?}");
    ensure!(states.last() == Some(&"AdminDown"), "{states:?}");
    ensure!(
        lines
            .last()
            .is_some_and(|l| l["event"] == "stop" && l["reason"] == "SIGINT"),
        "{stdout}"
    );
    // The last update before the stop shows the negotiated intervals.
    ensure!(
        lines
            .iter()
            .any(|l| l["state"] == "Up" && l["tx_interval_ms"] == 300.0 && l["poll"] == false),
        "{stdout}"
    );
    // Echo ran at max(100 ms, FRR's 50 ms), and its packets came back.
    ensure!(
        lines.iter().any(|l| l["state"] == "Up"
            && l["echo"] == true
            && l["echo_tx_interval_ms"] == 100.0
            && l["remote_min_echo_rx_ms"] == 50.0),
        "{stdout}"
    );
    let last_state = lines
        .iter()
        .rev()
        .find(|l| l["event"] == "state")
        .context("no state line")?;
    ensure!(last_state["echo_in"].as_u64() >= Some(10), "{last_state}");
    router.wait_bfd_status(n1v4(), "down", Duration::from_secs(5))?;
    let p = frr_peer(&router, n1v4())?;
    ensure!(
        p.remote_diagnostic.as_deref() == Some("administratively down"),
        "{}",
        p.raw
    );
    Ok(())
}

#[test]
fn runtime_refuses_what_it_cannot_do() -> Result<()> {
    let _serial = testkit::serial()?;
    let lab = Lab::up(&LabOptions {
        nodes: 1,
        far: false,
    })?;
    let bfd = start_bfd(lab.node(1))?;
    let key = single_hop_key(&lab, n1v4(), plan::ROUTER_V4.into());
    // Echo mode is taken on any path but runs on single-hop IPv4 only; we
    // invite the peer's echo (non-zero Required Min Echo RX) only where the
    // kernel would return it: IPv4 forwarding on the interface.
    let echo = Parameters {
        echo_mode: true,
        ..Parameters::default()
    };
    let iface = lab.l2_iface("node-1").to_string();
    let forwarding = format!("net.ipv4.conf.{iface}.forwarding");
    lab.node(1).sysctl(&forwarding, "0")?;
    let v6 = single_hop_key(&lab, n1v6(), plan::ROUTER_V6.into());
    for k in [key.clone(), v6] {
        let (c, status) = bfd.acquire_blocking(k, echo)?;
        let s = status.borrow().clone();
        ensure!(
            s.params.echo_mode && s.advertised_min_echo_rx_us == 0,
            "{s:?}"
        );
        bfd.release_blocking(c)?;
    }
    // BFDProfile ranges.
    let e = bfd.acquire_blocking(key.clone(), params(5, 3)).unwrap_err();
    ensure!(e.to_string().contains("receiveInterval 5"), "{e}");
    // Shared sessions: two clients, one session; the watch stays until the
    // last release.
    let (a, status) = bfd.acquire_blocking(key.clone(), params(300, 3))?;
    let (b, _) = bfd.acquire_blocking(key.clone(), params(100, 3))?;
    ensure!(bfd.stats().sessions == 1, "{:?}", bfd.stats());
    ensure!(
        status.borrow().params.transmit_interval_ms == 100,
        "merged parameters"
    );
    bfd.release_blocking(b)?;
    ensure!(status.borrow().params.transmit_interval_ms == 300);
    bfd.release_blocking(a)?;
    ensure!(bfd.stats().sessions == 0);
    let e = bfd.release_blocking(a).unwrap_err();
    ensure!(e.to_string().contains("unknown client"), "{e}");
    // A second runtime in the same namespace finds the ports taken.
    let e = start_bfd(lab.node(1)).unwrap_err();
    ensure!(e.to_string().contains("3784"), "{e:#}");
    drop(bfd);
    // Once stopped, the port is free again.
    start_bfd(lab.node(1))?.shutdown();
    Ok(())
}
