//! The runtime's Prometheus metrics, end to end over 127.0.0.1: no network
//! namespace, no privilege, no other BFD implementation.
//!
//! The runtime listens on 3784 / 4784 of the test's own network namespace
//! (one runtime per process: this file holds one test). Its session is
//! multihop 127.0.0.1 -> 127.0.0.1 in passive mode; the peer is this test,
//! sending control packets built with the crate's codec from a UDP socket
//! on 127.0.0.1 with TTL 255. Passive mode keeps the session from ever
//! talking to itself: it sends nothing until it has heard the test's
//! discriminator, and then every packet it sends (to its own port 4784)
//! carries that discriminator as Your Discriminator, which matches no
//! session and is dropped.

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use bfd::metrics::names;
use bfd::packet::{ControlPacket, Diagnostic, State};
use bfd::path::CONTROL_PORT_MULTI_HOP;
use bfd::{Bfd, Config, Parameters, SessionKey, SessionStatus};
use prometheus::Registry;
use prometheus::proto::{MetricFamily, MetricType};
use tokio::sync::watch;

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// The test playing the remote system.
struct FakePeer {
    socket: UdpSocket,
    discr: u32,
}

impl FakePeer {
    fn new(avoid: u32) -> Result<FakePeer> {
        let socket = UdpSocket::bind((LOCALHOST, 0))?;
        // Multihop sessions accept TTL >= 254 (the default minimumTtl).
        socket.set_ttl(255)?;
        Ok(FakePeer {
            socket,
            discr: avoid.wrapping_add(1).max(1),
        })
    }

    fn send(&self, state: State, diag: Diagnostic, your_discr: u32) -> Result<()> {
        let packet = ControlPacket {
            diag,
            state,
            poll: false,
            final_: false,
            control_plane_independent: false,
            demand: false,
            multipoint: false,
            detect_mult: 3,
            my_discr: self.discr,
            your_discr,
            // 10 s: a detection time of 30 s, so the session never expires
            // while the test runs, and it sends no packet more.
            desired_min_tx_us: 10_000_000,
            required_min_rx_us: 300_000,
            required_min_echo_rx_us: 0,
            auth: None,
        };
        let mut buf = [0u8; bfd::packet::MAX_PACKET_LEN];
        let len = packet.encode(&mut buf)?;
        self.socket
            .send_to(&buf[..len], (LOCALHOST, CONTROL_PORT_MULTI_HOP))?;
        Ok(())
    }
}

fn wait_state(rx: &watch::Receiver<SessionStatus>, state: State) -> Result<SessionStatus> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = rx.borrow().clone();
        if s.state == state {
            return Ok(s);
        }
        if Instant::now() >= deadline {
            bail!("session is {} (not {state}): {s:?}", s.state);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `name -> value` of the series with exactly the labels `peer`, `vrf`;
/// every family must be one of MetalLB's, typed as MetalLB types it, and
/// carry only these two labels.
fn series(families: &[MetricFamily], peer: &str, vrf: &str) -> Result<Vec<(String, f64)>> {
    let mut out = Vec::new();
    for f in families {
        ensure!(
            names::ALL.contains(&f.name()),
            "unexpected family {}",
            f.name()
        );
        let want_type = if f.name() == names::SESSION_UP {
            MetricType::GAUGE
        } else {
            MetricType::COUNTER
        };
        ensure!(f.get_field_type() == want_type, "{} type", f.name());
        for m in f.get_metric() {
            let labels: Vec<(&str, &str)> = m
                .get_label()
                .iter()
                .map(|l| (l.name(), l.value()))
                .collect();
            ensure!(
                labels.len() == 2 && labels[0].0 == "peer" && labels[1].0 == "vrf",
                "{}: labels {labels:?}",
                f.name()
            );
            if labels[0].1 == peer && labels[1].1 == vrf {
                let value = if want_type == MetricType::GAUGE {
                    m.get_gauge().get_value()
                } else {
                    m.get_counter().get_value()
                };
                out.push((f.name().to_owned(), value));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// All eight series of one session, by name.
fn scrape(registry: &Registry, peer: &str, vrf: &str) -> Result<Vec<(String, f64)>> {
    let got = series(&registry.gather(), peer, vrf)?;
    let mut names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    let mut want = names::ALL.to_vec();
    want.sort_unstable();
    ensure!(names == want, "series of {peer} / {vrf}: {got:?}");
    Ok(got)
}

fn value(got: &[(String, f64)], name: &str) -> f64 {
    got.iter()
        .find(|(n, _)| n == name)
        .map_or(f64::NAN, |(_, v)| *v)
}

#[test]
fn metrics_follow_a_session_up_down_and_removal() -> Result<()> {
    let bfd = Bfd::start(Config::default())
        .context("starting the runtime (is something else on UDP 3784 / 4784?)")?;
    let registry = Registry::new();
    bfd::metrics::register(&registry, &bfd)?;
    // Registering twice on one registry is refused (same names).
    ensure!(bfd::metrics::register(&registry, &bfd).is_err());
    ensure!(registry.gather().is_empty(), "no session, no series");

    let key = SessionKey::multi_hop(LOCALHOST, LOCALHOST);
    let passive = Parameters {
        passive_mode: true,
        ..Parameters::default()
    };
    let (client, status) = bfd.acquire_in_vrf_blocking(key.clone(), passive, Some("red"))?;
    let ours = status.borrow().local_discr;
    let peer = FakePeer::new(ours)?;

    // Created: every series exists at 0, session down.
    let got = scrape(&registry, "127.0.0.1", "red")?;
    ensure!(
        got.iter().all(|(_, v)| *v == 0.0),
        "a new passive session: {got:?}"
    );

    // Down -> Init (the peer's Down), Init -> Up (the peer's Up).
    peer.send(State::Down, Diagnostic::None, 0)?;
    wait_state(&status, State::Init)?;
    peer.send(State::Up, Diagnostic::None, ours)?;
    let up = wait_state(&status, State::Up)?;
    let got = scrape(&registry, "127.0.0.1", "red")?;
    ensure!(value(&got, names::SESSION_UP) == 1.0, "{got:?}");
    ensure!(value(&got, names::CONTROL_PACKET_INPUT) == 2.0, "{got:?}");
    ensure!(value(&got, names::SESSION_UP_EVENTS) == 1.0, "{got:?}");
    ensure!(value(&got, names::SESSION_DOWN_EVENTS) == 0.0, "{got:?}");
    // It has sent since it heard the peer (to its own port 4784, where the
    // packets match no session), and never more than the session made.
    let sent = value(&got, names::CONTROL_PACKET_OUTPUT);
    ensure!(
        sent >= 1.0 && sent <= status.borrow().counters.control_out as f64,
        "{got:?} vs {:?}",
        status.borrow().counters
    );
    ensure!(up.counters.control_dropped == 0, "{:?}", up.counters);
    for name in [
        names::ECHO_PACKET_INPUT,
        names::ECHO_PACKET_OUTPUT,
        names::ZEBRA_NOTIFICATIONS,
    ] {
        ensure!(value(&got, name) == 0.0, "{name}: {got:?}");
    }

    // The peer signals Down: Up -> Down (diag 3), one down event.
    peer.send(State::Down, Diagnostic::PathDown, ours)?;
    let down = wait_state(&status, State::Down)?;
    ensure!(
        down.local_diag == Diagnostic::NeighborSignaledSessionDown,
        "{down:?}"
    );
    let got = scrape(&registry, "127.0.0.1", "red")?;
    ensure!(value(&got, names::SESSION_UP) == 0.0, "{got:?}");
    ensure!(value(&got, names::CONTROL_PACKET_INPUT) == 3.0, "{got:?}");
    ensure!(value(&got, names::SESSION_UP_EVENTS) == 1.0, "{got:?}");
    ensure!(value(&got, names::SESSION_DOWN_EVENTS) == 1.0, "{got:?}");
    ensure!(value(&got, names::CONTROL_PACKET_OUTPUT) >= sent, "{got:?}");

    // Released: the session and every one of its series are gone.
    bfd.release_blocking(client)?;
    ensure!(
        registry.gather().is_empty(),
        "series left: {:?}",
        registry.gather()
    );

    // The same path acquired without a VRF: the default VRF's label, and
    // counters from 0 (a new session).
    let (client, _status) = bfd.acquire_blocking(key, passive)?;
    let got = scrape(&registry, "127.0.0.1", "default")?;
    ensure!(got.iter().all(|(_, v)| *v == 0.0), "{got:?}");
    ensure!(series(&registry.gather(), "127.0.0.1", "red")?.is_empty());
    bfd.release_blocking(client)?;

    // A stopped runtime has no series (and the scrape does not wait).
    let handle = bfd.handle();
    let (_client, _status) =
        handle.acquire_blocking(SessionKey::multi_hop(LOCALHOST, LOCALHOST), passive)?;
    ensure!(!registry.gather().is_empty());
    bfd.shutdown();
    let started = Instant::now();
    ensure!(registry.gather().is_empty());
    ensure!(
        started.elapsed() < bfd::metrics::SCRAPE_TIMEOUT,
        "the scrape waited for a stopped runtime"
    );
    Ok(())
}
