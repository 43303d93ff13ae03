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

// ---- measurements (feature `bench-lab`) ----

#[cfg(feature = "bench-lab")]
mod bench {
    use super::*;

    /// utime + stime of a thread, in clock ticks, and its CPU time in ns from
    /// schedstat.
    fn thread_cpu(pid: u32, tid: i32) -> Result<(u64, u64)> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat"))?;
        let (_, rest) = stat.rsplit_once(')').context("stat format")?;
        let f: Vec<&str> = rest.split_whitespace().collect();
        // rest starts at field 3; utime and stime are fields 14 and 15.
        let ticks = f[11].parse::<u64>()? + f[12].parse::<u64>()?;
        let sched = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))?;
        let ns = sched
            .split_whitespace()
            .next()
            .context("schedstat format")?
            .parse()?;
        Ok((ticks, ns))
    }

    fn process_cpu_ticks(pid: u32) -> Result<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        let (_, rest) = stat.rsplit_once(')').context("stat format")?;
        let f: Vec<&str> = rest.split_whitespace().collect();
        Ok(f[11].parse::<u64>()? + f[12].parse::<u64>()?)
    }

    const CLOCK_TICKS_PER_S: f64 = 100.0;

    #[test]
    fn bench_ten_sessions_50ms_cpu_and_tx_lateness() -> Result<()> {
        let _serial = testkit::serial()?;
        testkit::preflight()?;
        let lab = Lab::up(&LabOptions::default())?;
        let iface = lab.l2_iface("node-1").to_string();
        let locals: Vec<IpAddr> = (201..=210u8)
            .map(|h| IpAddr::from([192, 0, 2, h]))
            .collect();
        for l in &locals {
            lab.node(1).add_addr(&iface, &format!("{l}/24"))?;
        }
        let router = start_router(&lab, BfdProfile::new("fast", 50, 50, 3), &locals)?;
        let bfd = start_bfd(lab.node(1))?;
        let mut sessions = Vec::new();
        for l in &locals {
            let key = SessionKey::single_hop(iface.as_str(), *l, plan::ROUTER_V4.into());
            sessions.push(bfd.acquire_blocking(key, params(50, 3))?);
        }
        for (_, status) in &sessions {
            wait_ours(status, State::Up, UP_TIMEOUT).with_context(|| router.logs(30))?;
            wait_negotiated(status, 50_000, 150_000)?;
        }
        for l in &locals {
            router.wait_bfd_status(*l, "up", UP_TIMEOUT)?;
        }
        let pid = std::process::id();
        let tid = bfd.stats().thread_id.context("no thread id")?;
        let bfdd = router
            .pid(testkit::FrrDaemon::Bfdd)
            .context("no bfdd pid")?;
        std::thread::sleep(Duration::from_secs(2));

        let window = Duration::from_secs(30);
        let (t0, ns0) = thread_cpu(pid, tid)?;
        let frr0 = process_cpu_ticks(bfdd)?;
        let late0 = bfd.tx_lateness();
        let stats0 = bfd.stats();
        let start = Instant::now();
        std::thread::sleep(window);
        let elapsed = start.elapsed().as_secs_f64();
        let (t1, ns1) = thread_cpu(pid, tid)?;
        let frr1 = process_cpu_ticks(bfdd)?;
        let late = bfd.tx_lateness().since(&late0);
        let stats1 = bfd.stats();

        for (_, status) in &sessions {
            let s = status.borrow().clone();
            ensure!(s.state == State::Up && s.counters.down_events == 0, "{s:?}");
        }
        let cpu_stat = (t1 - t0) as f64 / CLOCK_TICKS_PER_S / elapsed * 100.0;
        let cpu_sched = (ns1 - ns0) as f64 / 1e9 / elapsed * 100.0;
        let frr_cpu = (frr1 - frr0) as f64 / CLOCK_TICKS_PER_S / elapsed * 100.0;
        let q = |p: f64| late.quantile_us(p).map_or("-".into(), |v| v.to_string());
        eprintln!(
            "BENCH 10 sessions 50 ms x 3, {elapsed:.1} s: our thread CPU {cpu_stat:.2} % of a core \
             (stat ticks), {cpu_sched:.3} % (schedstat); FRR bfdd process {frr_cpu:.2} %; \
             TX lateness over {} periodic packets: p50 <= {} us, p99 <= {} us, max <= {} us; \
             wakeups {}, sent {}, received {}, tx errors {}",
            late.count(),
            q(0.5),
            q(0.99),
            q(1.0),
            stats1.wakeups - stats0.wakeups,
            stats1.control_tx - stats0.control_tx,
            stats1.control_rx - stats0.control_rx,
            stats1.tx_errors - stats0.tx_errors,
        );
        Ok(())
    }

    #[test]
    fn bench_detection_time_after_silent_cut() -> Result<()> {
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
            let tx = u64::from(interval) * 1_000;
            let mut samples = Vec::new();
            for _ in 0..10 {
                wait_ours(&status, State::Up, UP_TIMEOUT).with_context(|| router.logs(30))?;
                wait_negotiated(&status, tx, 3 * tx)?;
                // A random phase against the remote's transmissions.
                std::thread::sleep(Duration::from_millis(
                    500 + u64::from(monotonic_ns() as u16 % 300),
                ));
                let d = status.borrow().local_discr;
                let (cut, detections) = cut_and_check_down(&lab, &mut events, &[d], DOWN_BOUND)?;
                samples.push(detections[0]);
                cut.restore()?;
            }
            samples.sort_unstable();
            let ms = |ns: u64| ns as f64 / 1e6;
            eprintln!(
                "BENCH detection {interval} ms x 3 (detection time {} ms), 10 silent cuts, \
                 from the last packet received: min {:.1} ms, median {:.1} ms, max {:.1} ms; all {:?}",
                3 * interval,
                ms(samples[0]),
                ms((samples[4] + samples[5]) / 2),
                ms(samples[9]),
                samples
                    .iter()
                    .map(|&s| (ms(s) * 10.0).round() / 10.0)
                    .collect::<Vec<_>>()
            );
            drop(bfd);
            drop(router);
            lab.destroy()?;
        }
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
