use std::net::IpAddr;

use super::*;
use crate::packet::{Diagnostic, State};
use crate::session::Timer;

const MS: u64 = 1_000_000;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn eth0() -> SessionKey {
    SessionKey::single_hop("eth0", ip("10.0.0.1"), ip("10.0.0.2"))
}

fn multihop() -> SessionKey {
    SessionKey::multi_hop(ip("10.0.0.1"), ip("10.9.0.2"))
}

fn meta(key: &SessionKey) -> RxMeta<'_> {
    RxMeta {
        hop: key.hop,
        interface: key.interface.as_deref(),
        source: key.remote,
        destination: key.local,
        ttl: 255,
    }
}

fn packet(state: State, your_discr: u32) -> ControlPacket {
    ControlPacket {
        diag: Diagnostic::None,
        state,
        poll: false,
        final_: false,
        control_plane_independent: false,
        demand: false,
        multipoint: false,
        detect_mult: 3,
        my_discr: 77,
        your_discr,
        desired_min_tx_us: 300_000,
        required_min_rx_us: 300_000,
        required_min_echo_rx_us: 0,
        auth: None,
    }
}

fn sends(actions: &[Action]) -> Vec<ControlPacket> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::SendControl(p) => Some(*p),
            _ => None,
        })
        .collect()
}

#[test]
fn acquire_creates_and_starts_a_session() {
    let mut r = Registry::new(1);
    let a = r.acquire(eth0(), Parameters::default(), 0).unwrap();
    assert!(a.created);
    assert_ne!(a.discriminator, 0);
    assert_eq!(r.find(&eth0()), Some(a.discriminator));
    assert_eq!(r.client_session(a.client), Some(a.discriminator));
    let s = r.session(a.discriminator).unwrap();
    assert_eq!(s.state(), State::Down);
    assert_eq!(s.local_discr(), a.discriminator);
    let sent = sends(&a.actions);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].my_discr, a.discriminator);
    assert_eq!(r.len(), 1);
}

#[test]
fn initial_events_apply_before_the_first_packet_of_a_new_session_only() {
    let echo = Parameters {
        echo_mode: true,
        ..Parameters::default()
    };
    let mut r = Registry::new(1);
    let a = r
        .acquire_with(eth0(), echo, &[Event::EchoLoopback(false)], 0)
        .unwrap();
    let sent = sends(&a.actions);
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].required_min_echo_rx_us, 0,
        "the first packet says it"
    );
    assert!(!r.session(a.discriminator).unwrap().echo_loopback());
    // An existing session is not told again.
    let b = r
        .acquire_with(eth0(), echo, &[Event::EchoLoopback(true)], MS)
        .unwrap();
    assert!(!b.created);
    assert!(!r.session(a.discriminator).unwrap().echo_loopback());
    // Without it: the echo interval, as before.
    let c = r.acquire(multihop(), echo, 0).unwrap();
    assert_eq!(sends(&c.actions)[0].required_min_echo_rx_us, 0, "multihop");
    let key = SessionKey::single_hop("eth1", ip("10.0.1.1"), ip("10.0.1.2"));
    let d = r.acquire(key, echo, 0).unwrap();
    assert_eq!(sends(&d.actions)[0].required_min_echo_rx_us, 50_000);
}

#[test]
fn sessions_on_distinct_paths_get_distinct_discriminators() {
    let mut r = Registry::new(1);
    let mut seen = std::collections::HashSet::new();
    for i in 0..200u8 {
        let key = SessionKey::single_hop("eth0", ip("10.0.0.1"), IpAddr::from([10, 1, 0, i]));
        let a = r.acquire(key, Parameters::default(), 0).unwrap();
        assert!(a.created);
        assert_ne!(a.discriminator, 0);
        assert!(seen.insert(a.discriminator));
    }
    assert_eq!(r.len(), 200);
    // Deterministic for a seed.
    let mut r2 = Registry::new(1);
    let key = SessionKey::single_hop("eth0", ip("10.0.0.1"), IpAddr::from([10, 1, 0, 0]));
    assert_eq!(
        r2.acquire(key.clone(), Parameters::default(), 0)
            .unwrap()
            .discriminator,
        r.find(&key).unwrap()
    );
}

#[test]
fn clients_share_a_session_by_reference_count() {
    let mut r = Registry::new(2);
    let a = r.acquire(eth0(), Parameters::default(), 0).unwrap();
    let fast = Parameters {
        transmit_interval_ms: 50,
        receive_interval_ms: 50,
        echo_mode: true,
        ..Default::default()
    };
    let b = r.acquire(eth0(), fast, MS).unwrap();
    assert!(!b.created);
    assert_eq!(b.discriminator, a.discriminator);
    assert_ne!(a.client, b.client);
    assert_eq!(r.client_count(a.discriminator), 2);
    assert_eq!(r.len(), 1);
    // The session runs with the merged (most demanding) parameters.
    let params = *r.session(a.discriminator).unwrap().params();
    assert_eq!(
        params,
        Parameters::merge([&Parameters::default(), &fast]).unwrap()
    );
    assert_eq!((params.receive_interval_ms, params.echo_mode), (50, true));
    // Same parameters again: nothing to do.
    let c = r.acquire(eth0(), Parameters::default(), 2 * MS).unwrap();
    assert!(c.actions.is_empty());
    assert_eq!(r.client_count(a.discriminator), 3);

    // Releasing the demanding client re-merges.
    let rel = r.release(b.client, 3 * MS).unwrap();
    assert!(!rel.removed);
    assert_eq!(
        *r.session(a.discriminator).unwrap().params(),
        Parameters::default()
    );
    let rel = r.release(a.client, 4 * MS).unwrap();
    assert!(!rel.removed && rel.actions.is_empty());
    // The last release shuts down: one AdminDown packet, every timer off.
    let rel = r.release(c.client, 5 * MS).unwrap();
    assert!(rel.removed);
    let sent = sends(&rel.actions);
    assert_eq!(sent.len(), 1);
    assert_eq!(
        (sent[0].state, sent[0].diag),
        (State::AdminDown, Diagnostic::AdministrativelyDown)
    );
    assert!(rel.actions.contains(&Action::CancelTimer(Timer::Tx)));
    assert!(r.is_empty());
    assert_eq!(r.find(&eth0()), None);
    assert_eq!(
        r.release(c.client, 6 * MS),
        Err(RegistryError::UnknownClient(c.client))
    );
    // A new acquire creates a fresh session.
    assert!(
        r.acquire(eth0(), Parameters::default(), 7 * MS)
            .unwrap()
            .created
    );
}

#[test]
fn set_parameters_re_merges() {
    let mut r = Registry::new(3);
    let a = r.acquire(eth0(), Parameters::default(), 0).unwrap();
    let (discr, _) = r
        .set_parameters(
            a.client,
            Parameters {
                detect_multiplier: 5,
                ..Default::default()
            },
            MS,
        )
        .unwrap();
    assert_eq!(discr, a.discriminator);
    assert_eq!(r.session(discr).unwrap().params().detect_multiplier, 5);
    assert_eq!(
        r.set_parameters(ClientId(999), Parameters::default(), MS),
        Err(RegistryError::UnknownClient(ClientId(999)))
    );
}

#[test]
fn invalid_parameters_are_refused() {
    let mut r = Registry::new(4);
    let bad = Parameters {
        detect_multiplier: 1,
        ..Default::default()
    };
    assert!(matches!(
        r.acquire(eth0(), bad, 0),
        Err(RegistryError::InvalidParameters(_))
    ));
    assert!(r.is_empty());
    let a = r.acquire(eth0(), Parameters::default(), 0).unwrap();
    let err = r
        .set_parameters(
            a.client,
            Parameters {
                minimum_ttl: 255,
                ..Default::default()
            },
            0,
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid parameters: minimumTtl 255 is out of range 1..=254"
    );
}

#[test]
fn demux_by_your_discriminator() {
    let mut r = Registry::new(5);
    let a = r.acquire(eth0(), Parameters::default(), 0).unwrap();
    r.acquire(multihop(), Parameters::default(), 0).unwrap();
    let bytes = packet(State::Down, a.discriminator).to_vec();
    let (discr, _) = r.receive_control(&bytes, &meta(&eth0()), MS).unwrap();
    assert_eq!(discr, a.discriminator);
    assert_eq!(r.session(discr).unwrap().state(), State::Init);
    // Unknown discriminator.
    let bytes = packet(State::Up, 12345).to_vec();
    assert_eq!(
        r.receive_control(&bytes, &meta(&eth0()), MS),
        Err(RxDrop::UnknownDiscriminator(12345))
    );
    assert_eq!(r.counters().control_unknown_discriminator, 1);
}

#[test]
fn demux_by_path_only_for_zero_your_discriminator() {
    let mut r = Registry::new(6);
    let a = r.acquire(eth0(), Parameters::default(), 0).unwrap();
    let m = r.acquire(multihop(), Parameters::default(), 0).unwrap();
    for state in [State::Down, State::AdminDown] {
        let bytes = packet(state, 0).to_vec();
        assert_eq!(
            r.receive_control(&bytes, &meta(&eth0()), MS).unwrap().0,
            a.discriminator
        );
    }
    // Up/Init with Your Discriminator 0 never reach a session.
    let bytes = packet(State::Up, 0).to_vec();
    assert_eq!(
        r.receive_control(&bytes, &meta(&eth0()), MS),
        Err(RxDrop::Malformed(PacketError::ZeroYourDiscriminator {
            state: State::Up
        }))
    );
    // Multihop sessions not bound to an interface match any ingress.
    let key = multihop();
    let on_eth3 = RxMeta {
        interface: Some("eth3"),
        ..meta(&key)
    };
    let bytes = packet(State::Down, 0).to_vec();
    assert_eq!(
        r.receive_control(&bytes, &on_eth3, MS).unwrap().0,
        m.discriminator
    );
    // A single-hop session does not match another interface or source.
    let key = eth0();
    let on_eth1 = RxMeta {
        interface: Some("eth1"),
        ..meta(&key)
    };
    assert_eq!(
        r.receive_control(&bytes, &on_eth1, MS),
        Err(RxDrop::UnknownPath)
    );
    let other = RxMeta {
        source: ip("10.0.0.3"),
        ..meta(&key)
    };
    assert_eq!(
        r.receive_control(&bytes, &other, MS),
        Err(RxDrop::UnknownPath)
    );
    assert_eq!(r.counters().control_unknown_path, 2);
}

#[test]
fn wrong_path_type_or_interface_is_dropped() {
    let mut r = Registry::new(7);
    let a = r.acquire(eth0(), Parameters::default(), 0).unwrap();
    let bytes = packet(State::Down, a.discriminator).to_vec();
    let key = eth0();
    let as_multihop = RxMeta {
        hop: Hop::MultiHop,
        ..meta(&key)
    };
    assert_eq!(
        r.receive_control(&bytes, &as_multihop, MS),
        Err(RxDrop::WrongPath(a.discriminator))
    );
    let on_eth1 = RxMeta {
        interface: Some("eth1"),
        ..meta(&key)
    };
    assert_eq!(
        r.receive_control(&bytes, &on_eth1, MS),
        Err(RxDrop::WrongPath(a.discriminator))
    );
    assert_eq!(r.counters().control_wrong_path, 2);
    assert_eq!(r.session(a.discriminator).unwrap().state(), State::Down);
}

#[test]
fn ttl_is_checked_by_the_session() {
    let mut r = Registry::new(8);
    let a = r.acquire(eth0(), Parameters::default(), 0).unwrap();
    let bytes = packet(State::Down, 0).to_vec();
    let key = eth0();
    let low_ttl = RxMeta {
        ttl: 254,
        ..meta(&key)
    };
    let (discr, actions) = r.receive_control(&bytes, &low_ttl, MS).unwrap();
    assert!(actions.is_empty());
    let s = r.session(discr).unwrap();
    assert_eq!((s.state(), s.counters().control_dropped), (State::Down, 1));
    assert_eq!(discr, a.discriminator);
}

#[test]
fn malformed_and_authenticated_packets_are_counted() {
    let mut r = Registry::new(9);
    r.acquire(eth0(), Parameters::default(), 0).unwrap();
    let key = eth0();
    assert_eq!(
        r.receive_control(&[0x20, 0x40], &meta(&key), MS),
        Err(RxDrop::Malformed(PacketError::Truncated { len: 2 }))
    );
    let mut bytes = packet(State::Down, 0).to_vec();
    bytes[1] |= 0x04;
    bytes[3] = 28;
    bytes.extend_from_slice(&[1, 4, 0, b'k']);
    assert_eq!(
        r.receive_control(&bytes, &meta(&key), MS),
        Err(RxDrop::Authenticated(
            crate::packet::AuthType::SimplePassword
        ))
    );
    assert_eq!(r.counters().control_malformed, 1);
    assert_eq!(r.counters().control_authenticated, 1);
}

#[test]
fn echo_demux() {
    let mut r = Registry::new(10);
    let a = r
        .acquire(
            eth0(),
            Parameters {
                echo_mode: true,
                ..Default::default()
            },
            0,
        )
        .unwrap();
    let d = a.discriminator;
    // Bring it Up with a remote that accepts echo.
    let key = eth0();
    let mut p = packet(State::Down, 0);
    p.required_min_echo_rx_us = 50_000;
    r.receive_control(&p.to_vec(), &meta(&key), MS).unwrap();
    p.state = State::Up;
    p.your_discr = d;
    let (_, actions) = r.receive_control(&p.to_vec(), &meta(&key), 2 * MS).unwrap();
    let echo = actions
        .iter()
        .find_map(|a| match a {
            Action::SendEcho(e) => Some(*e),
            _ => None,
        })
        .unwrap();
    assert_eq!(r.receive_echo(&echo.to_bytes(), 3 * MS).unwrap().0, d);
    assert_eq!(r.session(d).unwrap().counters().echo_in, 1);
    let foreign = EchoPacket {
        discriminator: d.wrapping_add(1).max(1),
        ..echo
    };
    assert_eq!(
        r.receive_echo(&foreign.to_bytes(), 3 * MS),
        Err(RxDrop::UnknownDiscriminator(foreign.discriminator))
    );
    assert_eq!(
        r.receive_echo(b"nonsense", 3 * MS),
        Err(RxDrop::MalformedEcho(EchoError::Truncated { len: 8 }))
    );
    assert_eq!(r.counters().echo_unknown_discriminator, 1);
    assert_eq!(r.counters().echo_malformed, 1);
}

#[test]
fn events_by_discriminator() {
    let mut r = Registry::new(11);
    let a = r.acquire(eth0(), Parameters::default(), 0).unwrap();
    let actions = r.handle(a.discriminator, Event::AdminDown, MS).unwrap();
    assert_eq!(sends(&actions)[0].state, State::AdminDown);
    assert_eq!(r.handle(a.discriminator ^ 1, Event::AdminUp, MS), None);
    assert_eq!(r.sessions().count(), 1);
}

/// Two registries exchanging encoded packets come Up.
#[test]
fn two_registries_handshake_over_bytes() {
    let ka = eth0();
    let kb = SessionKey::single_hop("eth9", ip("10.0.0.2"), ip("10.0.0.1"));
    let mut ra = Registry::new(100);
    let mut rb = Registry::new(200);
    let a = ra.acquire(ka.clone(), Parameters::default(), 0).unwrap();
    let b = rb.acquire(kb.clone(), Parameters::default(), 0).unwrap();
    let mut to_b: Vec<Vec<u8>> = sends(&a.actions)
        .iter()
        .map(ControlPacket::to_vec)
        .collect();
    let mut to_a: Vec<Vec<u8>> = sends(&b.actions)
        .iter()
        .map(ControlPacket::to_vec)
        .collect();
    let mut now = MS;
    for _ in 0..4 {
        for bytes in std::mem::take(&mut to_b) {
            let (_, actions) = rb.receive_control(&bytes, &meta(&kb), now).unwrap();
            to_a.extend(sends(&actions).iter().map(ControlPacket::to_vec));
        }
        for bytes in std::mem::take(&mut to_a) {
            let (_, actions) = ra.receive_control(&bytes, &meta(&ka), now).unwrap();
            to_b.extend(sends(&actions).iter().map(ControlPacket::to_vec));
        }
        // Periodic packets.
        now += 1000 * MS;
        for (r, d, out) in [
            (&mut ra, a.discriminator, &mut to_b),
            (&mut rb, b.discriminator, &mut to_a),
        ] {
            let actions = r.handle(d, Event::TimerExpired(Timer::Tx), now).unwrap();
            out.extend(sends(&actions).iter().map(ControlPacket::to_vec));
        }
    }
    assert_eq!(ra.session(a.discriminator).unwrap().state(), State::Up);
    assert_eq!(rb.session(b.discriminator).unwrap().state(), State::Up);
    assert_eq!(
        ra.session(a.discriminator).unwrap().remote().discr,
        b.discriminator
    );
}

/// A flood of valid packets for one session: it accepts
/// `MAX_CONTROL_PER_SECOND` a second, the rest are counted and dropped
/// before it sees them; another session is not affected.
#[test]
fn control_packets_are_capped_per_session_per_second() {
    let mut r = Registry::new(13);
    let a = r.acquire(eth0(), Parameters::default(), 0).unwrap();
    let m = r.acquire(multihop(), Parameters::default(), 0).unwrap();
    let flood = 4 * MAX_CONTROL_PER_SECOND;
    let bytes = packet(State::Down, a.discriminator).to_vec();
    let mut accepted = 0;
    for i in 0..flood {
        // All within 0.9 s.
        let now = MS + u64::from(i) * (900 * MS / u64::from(flood));
        match r.receive_control(&bytes, &meta(&eth0()), now) {
            Ok(_) => accepted += 1,
            Err(e) => assert_eq!(e, RxDrop::RateLimited(a.discriminator)),
        }
    }
    assert_eq!(accepted, MAX_CONTROL_PER_SECOND);
    let dropped = u64::from(flood - MAX_CONTROL_PER_SECOND);
    assert_eq!(r.counters().control_rate_limited, dropped);
    assert_eq!(r.rate_limited(a.discriminator), dropped);
    assert_eq!(
        r.session(a.discriminator).unwrap().counters().control_in,
        u64::from(MAX_CONTROL_PER_SECOND)
    );
    // The other session still hears its peer.
    let bytes_m = packet(State::Down, m.discriminator).to_vec();
    assert!(
        r.receive_control(&bytes_m, &meta(&multihop()), 500 * MS)
            .is_ok()
    );
    assert_eq!(r.rate_limited(m.discriminator), 0);
    // The next second accepts again.
    assert!(
        r.receive_control(&bytes, &meta(&eth0()), 1_001 * MS)
            .is_ok()
    );
}
