//! State machine tests: single sessions driven by hand-made packets, and
//! pairs of sessions talking through a simulated link (`Sim`) that fires
//! timers exactly as the actions armed them.

use std::net::IpAddr;

use super::*;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;
const LOCAL: u32 = 0x1111_1111;
const REMOTE: u32 = 0x2222_2222;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn key() -> SessionKey {
    SessionKey::single_hop("eth0", ip("10.0.0.1"), ip("10.0.0.2"))
}

fn new_session(params: Parameters) -> Session {
    Session::new(key(), LOCAL, params, 42)
}

fn started(params: Parameters) -> Session {
    let mut s = new_session(params);
    s.start(0);
    s
}

/// A packet from the remote (FRR defaults once Up).
fn remote(state: State) -> ControlPacket {
    ControlPacket {
        diag: Diagnostic::None,
        state,
        poll: false,
        final_: false,
        control_plane_independent: false,
        demand: false,
        multipoint: false,
        detect_mult: 3,
        my_discr: REMOTE,
        your_discr: if state == State::Down { 0 } else { LOCAL },
        desired_min_tx_us: 300_000,
        required_min_rx_us: 300_000,
        required_min_echo_rx_us: 0,
        auth: None,
    }
}

fn rx(s: &mut Session, packet: ControlPacket, now: u64) -> Vec<Action> {
    s.handle(
        Event::Received {
            packet,
            source: ip("10.0.0.2"),
            ttl: 255,
        },
        now,
    )
}

fn sent(actions: &[Action]) -> Vec<ControlPacket> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::SendControl(p) => Some(*p),
            _ => None,
        })
        .collect()
}

fn changes(actions: &[Action]) -> Vec<StateChange> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::StateChanged(c) => Some(*c),
            _ => None,
        })
        .collect()
}

fn armed(actions: &[Action], timer: Timer) -> Option<u64> {
    actions.iter().rev().find_map(|a| match a {
        Action::ArmTimer {
            timer: t, at_ns, ..
        } if *t == timer => Some(*at_ns),
        _ => None,
    })
}

fn cancelled(actions: &[Action], timer: Timer) -> bool {
    actions.contains(&Action::CancelTimer(timer))
}

/// A session brought Up by the remote: Down -> Init -> Up.
fn up(params: Parameters) -> Session {
    let mut s = started(params);
    rx(&mut s, remote(State::Down), 10 * MS);
    rx(&mut s, remote(State::Up), 20 * MS);
    assert_eq!(s.state(), State::Up);
    s
}

/// A session in the given state.
fn in_state(state: State) -> Session {
    match state {
        State::AdminDown => {
            let mut s = started(Parameters::default());
            s.handle(Event::AdminDown, MS);
            s
        }
        State::Down => started(Parameters::default()),
        State::Init => {
            let mut s = started(Parameters::default());
            rx(&mut s, remote(State::Down), MS);
            s
        }
        State::Up => up(Parameters::default()),
    }
}

// ---- lifecycle ----

#[test]
fn a_new_session_is_admin_down_and_silent() {
    let s = new_session(Parameters::default());
    assert_eq!(s.state(), State::AdminDown);
    assert_eq!(s.next_deadline(), None);
    assert!(!s.status().transmitting);
}

#[test]
fn start_sends_a_slow_down_packet_and_arms_tx() {
    let mut s = new_session(Parameters::default());
    let actions = s.start(0);
    let change = changes(&actions)[0];
    assert_eq!(
        (change.from, change.to, change.cause),
        (State::AdminDown, State::Down, Cause::AdminUp)
    );
    assert_eq!(change.client_action(), ClientAction::None);
    let packets = sent(&actions);
    assert_eq!(packets.len(), 1);
    let p = packets[0];
    assert_eq!(
        (p.state, p.diag, p.my_discr, p.your_discr),
        (State::Down, Diagnostic::None, LOCAL, 0)
    );
    assert_eq!(p.desired_min_tx_us, 1_000_000, "at least 1 s while not Up");
    assert_eq!(p.required_min_rx_us, 300_000);
    assert_eq!(p.required_min_echo_rx_us, 0);
    assert_eq!(p.detect_mult, 3);
    assert!(!p.poll && !p.final_ && !p.control_plane_independent && !p.demand);
    let at = armed(&actions, Timer::Tx).unwrap();
    assert!((750 * MS..=SEC).contains(&at), "{at}");
    assert_eq!(s.deadline(Timer::Detect), None);
    // The packet passes our own reception checks.
    assert_eq!(ControlPacket::decode(&p.to_vec()), Ok(p));
}

#[test]
fn zero_discriminator_is_replaced() {
    assert_eq!(
        Session::new(key(), 0, Parameters::default(), 1).local_discr(),
        1
    );
}

// ---- RFC 5880 §6.8.6 state table ----

#[test]
fn state_table() {
    use State::*;
    // (local, received) -> (new state, diag if changed)
    let table = [
        (AdminDown, AdminDown, AdminDown, None),
        (AdminDown, Down, AdminDown, None),
        (AdminDown, Init, AdminDown, None),
        (AdminDown, Up, AdminDown, None),
        (Down, AdminDown, Down, None),
        (Down, Down, Init, Some(Diagnostic::None)),
        (Down, Init, Up, Some(Diagnostic::None)),
        (Down, Up, Down, None),
        (
            Init,
            AdminDown,
            Down,
            Some(Diagnostic::NeighborSignaledSessionDown),
        ),
        (Init, Down, Init, None),
        (Init, Init, Up, Some(Diagnostic::None)),
        (Init, Up, Up, Some(Diagnostic::None)),
        (
            Up,
            AdminDown,
            Down,
            Some(Diagnostic::NeighborSignaledSessionDown),
        ),
        (
            Up,
            Down,
            Down,
            Some(Diagnostic::NeighborSignaledSessionDown),
        ),
        (Up, Init, Up, None),
        (Up, Up, Up, None),
    ];
    for (local, received, expected, diag) in table {
        let mut s = in_state(local);
        assert_eq!(s.state(), local);
        let actions = rx(&mut s, remote(received), 50 * MS);
        assert_eq!(s.state(), expected, "{local} + {received}");
        let c = changes(&actions);
        match diag {
            None => assert!(c.is_empty(), "{local} + {received}: {c:?}"),
            Some(diag) => {
                assert_eq!(c.len(), 1);
                assert_eq!(
                    (c[0].from, c[0].to, c[0].diag),
                    (local, expected, diag),
                    "{local} + {received}"
                );
                assert_eq!(c[0].cause, Cause::Received(received));
                assert_eq!(s.local_diag(), diag);
            }
        }
        // The remote's fields are recorded in every state (§6.8.6).
        assert_eq!(s.remote().discr, REMOTE);
        assert_eq!(s.remote().state, received);
    }
}

#[test]
fn admin_down_discards_without_arming_detection() {
    let mut s = in_state(State::AdminDown);
    let actions = rx(&mut s, remote(State::Up), 50 * MS);
    assert_eq!(armed(&actions, Timer::Detect), None);
    assert!(sent(&actions).is_empty());
    assert_eq!(s.deadline(Timer::Detect), None);
}

#[test]
fn three_way_handshake() {
    let mut s = started(Parameters::default());
    let a = rx(&mut s, remote(State::Down), 100 * MS);
    assert_eq!(s.state(), State::Init);
    assert_eq!(changes(&a)[0].client_action(), ClientAction::None);
    // Detection: remote mult 3 x max(our RX 300 ms, remote TX 300 ms).
    assert_eq!(armed(&a, Timer::Detect), Some(100 * MS + 900 * MS));
    let a = rx(&mut s, remote(State::Init), 200 * MS);
    assert_eq!(s.state(), State::Up);
    let c = changes(&a)[0];
    assert_eq!(
        (c.from, c.to, c.client_action()),
        (State::Init, State::Up, ClientAction::Up)
    );
    assert_eq!(s.counters().up_events, 1);
    // Reaching Up starts a Poll for the switch to the fast rate, which
    // applies at once (a faster TX is safe).
    assert!(s.poll_in_progress());
    assert_eq!(s.tx_interval_us(), 300_000);
    assert!(s.deadline(Timer::Tx).unwrap() <= 200 * MS + 300 * MS);
}

#[test]
fn your_discriminator_is_the_remote_s_after_first_packet() {
    let mut s = started(Parameters::default());
    rx(&mut s, remote(State::Down), 10 * MS);
    let a = s.handle(Event::TimerExpired(Timer::Tx), SEC);
    let p = sent(&a)[0];
    assert_eq!((p.state, p.your_discr), (State::Init, REMOTE));
}

// ---- detection ----

#[test]
fn detection_expiry_takes_up_down_with_diag_1() {
    let mut s = up(Parameters::default());
    let deadline = s.deadline(Timer::Detect).unwrap();
    assert_eq!(deadline, 20 * MS + 900 * MS);
    // A stale expiry (before the deadline) is ignored.
    assert!(
        s.handle(Event::TimerExpired(Timer::Detect), deadline - 1)
            .is_empty()
    );
    assert_eq!(s.state(), State::Up);
    let a = s.handle(Event::TimerExpired(Timer::Detect), deadline);
    let c = changes(&a)[0];
    assert_eq!(
        (c.from, c.to, c.diag, c.cause),
        (
            State::Up,
            State::Down,
            Diagnostic::ControlDetectionTimeExpired,
            Cause::DetectionTimeExpired
        )
    );
    assert_eq!(c.client_action(), ClientAction::Down);
    assert_eq!(
        s.remote().discr,
        0,
        "§6.8.1: forgotten after a detection time"
    );
    assert_eq!(s.counters().down_events, 1);
    // Packets now say Down, diag 1, Your Discriminator 0, slow TX.
    let a = s.handle(
        Event::TimerExpired(Timer::Tx),
        s.deadline(Timer::Tx).unwrap().max(deadline),
    );
    let p = sent(&a)[0];
    assert_eq!(
        (p.state, p.diag, p.your_discr, p.desired_min_tx_us),
        (
            State::Down,
            Diagnostic::ControlDetectionTimeExpired,
            0,
            1_000_000
        )
    );
    // The diagnostic is cleared once Up again.
    rx(&mut s, remote(State::Down), 2 * SEC);
    rx(&mut s, remote(State::Up), 2 * SEC + MS);
    assert_eq!((s.state(), s.local_diag()), (State::Up, Diagnostic::None));
}

#[test]
fn detection_expiry_in_init_goes_down_and_in_down_forgets_the_remote() {
    let mut s = in_state(State::Init);
    let d = s.deadline(Timer::Detect).unwrap();
    let a = s.handle(Event::TimerExpired(Timer::Detect), d);
    assert_eq!(changes(&a)[0].to, State::Down);
    assert_eq!(changes(&a)[0].client_action(), ClientAction::None);
    let mut s = started(Parameters::default());
    rx(&mut s, remote(State::AdminDown), MS);
    let d = s.deadline(Timer::Detect).unwrap();
    let a = s.handle(Event::TimerExpired(Timer::Detect), d);
    assert!(changes(&a).is_empty());
    assert_eq!(s.remote().discr, 0);
}

#[test]
fn every_packet_re_arms_the_detection_timer() {
    let mut s = up(Parameters::default());
    for i in 1..10u64 {
        let a = rx(&mut s, remote(State::Up), 20 * MS + i * 250 * MS);
        assert_eq!(
            armed(&a, Timer::Detect),
            Some(20 * MS + i * 250 * MS + 900 * MS)
        );
    }
}

#[test]
fn detection_time_uses_remote_mult_and_the_slower_of_our_rx_and_their_tx() {
    let mut s = up(Parameters::default());
    let p = ControlPacket {
        detect_mult: 5,
        desired_min_tx_us: 500_000,
        ..remote(State::Up)
    };
    let a = rx(&mut s, p, SEC);
    assert_eq!(s.detection_time_us(), 2_500_000);
    assert_eq!(armed(&a, Timer::Detect), Some(SEC + 2_500 * MS));
    let p = ControlPacket {
        detect_mult: 2,
        desired_min_tx_us: 100_000,
        ..remote(State::Up)
    };
    rx(&mut s, p, 2 * SEC);
    assert_eq!(s.detection_time_us(), 600_000);
}

// ---- RFC 5882: remote AdminDown ----

#[test]
fn remote_admin_down_is_diag_3_without_client_action() {
    let mut s = up(Parameters::default());
    let a = rx(
        &mut s,
        ControlPacket {
            diag: Diagnostic::AdministrativelyDown,
            ..remote(State::AdminDown)
        },
        SEC,
    );
    let c = changes(&a)[0];
    assert_eq!(
        (c.to, c.diag, c.cause),
        (
            State::Down,
            Diagnostic::NeighborSignaledSessionDown,
            Cause::Received(State::AdminDown)
        )
    );
    assert_eq!(c.client_action(), ClientAction::None);
    assert_eq!(s.remote().diag, Diagnostic::AdministrativelyDown);
    // More AdminDown packets keep us Down (not Init).
    rx(&mut s, remote(State::AdminDown), SEC + 100 * MS);
    assert_eq!(s.state(), State::Down);
    // But a remote Down (it detected a failure) is a failure for the client.
    let mut s = up(Parameters::default());
    let a = rx(&mut s, remote(State::Down), SEC);
    assert_eq!(changes(&a)[0].client_action(), ClientAction::Down);
}

/// FRR's bfdd removing a session whose last client deregistered it (bgpd
/// re-registering a neighbor's session with the BGP connection's source
/// address once BGP is Established, or `no neighbor X bfd`): one Down with
/// diagnostic 3, addressed to us, then nothing. We signalled no Down, so
/// the remote detected no failure: no client action (the BGP session it
/// would take down has just come up).
#[test]
fn a_remote_removing_its_session_is_no_failure() {
    let mut s = up(Parameters::default());
    let removed = ControlPacket {
        diag: Diagnostic::NeighborSignaledSessionDown,
        your_discr: LOCAL,
        ..remote(State::Down)
    };
    let a = rx(&mut s, removed, SEC);
    let c = changes(&a)[0];
    assert_eq!(
        (c.from, c.to, c.diag, c.cause, c.client_action()),
        (
            State::Up,
            State::Down,
            Diagnostic::NeighborSignaledSessionDown,
            Cause::RemoteSessionRemoved,
            ClientAction::None
        )
    );
    assert_eq!(s.counters().down_events, 1);
    // Every other diagnostic of a Down while Up is a failure the remote
    // detected (or at least not one we can rule out).
    for diag in [
        Diagnostic::None,
        Diagnostic::ControlDetectionTimeExpired,
        Diagnostic::EchoFunctionFailed,
        Diagnostic::ForwardingPlaneReset,
        Diagnostic::PathDown,
        Diagnostic::ConcatenatedPathDown,
        Diagnostic::ReverseConcatenatedPathDown,
    ] {
        for your_discr in [0, LOCAL] {
            let mut s = up(Parameters::default());
            let a = rx(
                &mut s,
                ControlPacket {
                    diag,
                    your_discr,
                    ..remote(State::Down)
                },
                SEC,
            );
            let c = changes(&a)[0];
            assert_eq!(
                (c.cause, c.client_action()),
                (Cause::Received(State::Down), ClientAction::Down),
                "{diag:?}, your discriminator {your_discr:#x}"
            );
        }
    }
    // Outside Up it changes nothing (RFC 5880 §6.8.6: Init stays Init).
    let mut s = in_state(State::Init);
    assert!(changes(&rx(&mut s, removed, SEC)).is_empty());
    assert_eq!(s.state(), State::Init);
}

/// A remote that replaces its session (FRR's bgpd re-registers the BFD
/// session of a neighbor with the connection's source address once BGP is
/// Established: bfdd deletes the old session without a packet and the new
/// one, another discriminator, starts Down): the Down of a session that has
/// never been Up with us is no path failure; BGP must not be taken down.
#[test]
fn a_remote_s_new_session_signalling_down_is_no_failure() {
    let mut s = up(Parameters::default());
    let fresh = ControlPacket {
        my_discr: REMOTE + 1,
        ..remote(State::Down)
    };
    let a = rx(&mut s, fresh, SEC);
    let c = changes(&a)[0];
    assert_eq!(
        (c.from, c.to, c.diag, c.cause, c.client_action()),
        (
            State::Up,
            State::Down,
            Diagnostic::NeighborSignaledSessionDown,
            Cause::RemoteSessionReplaced,
            ClientAction::None
        )
    );
    // We now answer the new session (Your Discriminator), which comes Up
    // through the three-way handshake.
    assert_eq!(s.remote().discr, REMOTE + 1);
    rx(&mut s, fresh, SEC + 10 * MS);
    assert_eq!(s.state(), State::Init);
    let a = rx(
        &mut s,
        ControlPacket {
            my_discr: REMOTE + 1,
            ..remote(State::Up)
        },
        SEC + 20 * MS,
    );
    assert_eq!(changes(&a)[0].client_action(), ClientAction::Up);
    // The same session saying Down (it stopped hearing us, §6.8.1: it then
    // sends Your Discriminator 0) is a failure, with or without diag.
    for diag in [Diagnostic::None, Diagnostic::ControlDetectionTimeExpired] {
        let mut s = up(Parameters::default());
        let a = rx(
            &mut s,
            ControlPacket {
                diag,
                ..remote(State::Down)
            },
            SEC,
        );
        let c = changes(&a)[0];
        assert_eq!(
            (c.cause, c.client_action()),
            (Cause::Received(State::Down), ClientAction::Down)
        );
    }
    // So is a Down that names us, whatever its own discriminator.
    let mut s = up(Parameters::default());
    let a = rx(
        &mut s,
        ControlPacket {
            my_discr: REMOTE + 1,
            your_discr: LOCAL,
            ..remote(State::Down)
        },
        SEC,
    );
    assert_eq!(changes(&a)[0].client_action(), ClientAction::Down);
}

#[test]
fn client_action_rules() {
    use State::*;
    let c = |from, to, cause| StateChange {
        from,
        to,
        diag: Diagnostic::None,
        cause,
        at_ns: 0,
    };
    assert_eq!(
        c(Init, Up, Cause::Received(Up)).client_action(),
        ClientAction::Up
    );
    assert_eq!(
        c(Down, Up, Cause::Received(Init)).client_action(),
        ClientAction::Up
    );
    assert_eq!(
        c(Up, AdminDown, Cause::AdminDown).client_action(),
        ClientAction::None
    );
    assert_eq!(
        c(Up, Down, Cause::Received(AdminDown)).client_action(),
        ClientAction::None
    );
    assert_eq!(
        c(Up, Down, Cause::Received(Down)).client_action(),
        ClientAction::Down
    );
    assert_eq!(
        c(Up, Down, Cause::DetectionTimeExpired).client_action(),
        ClientAction::Down
    );
    assert_eq!(
        c(Up, Down, Cause::EchoFailed).client_action(),
        ClientAction::Down
    );
    assert_eq!(
        c(Init, Down, Cause::DetectionTimeExpired).client_action(),
        ClientAction::None
    );
    assert_eq!(
        c(AdminDown, Down, Cause::AdminUp).client_action(),
        ClientAction::None
    );
    assert_eq!(
        c(Up, Down, Cause::RemoteSessionReplaced).client_action(),
        ClientAction::None
    );
    assert_eq!(
        c(Up, Down, Cause::RemoteSessionRemoved).client_action(),
        ClientAction::None
    );
}

// ---- local AdminDown ----

#[test]
fn local_admin_down_sends_admin_down_packets_then_stops() {
    let mut s = up(Parameters::default());
    let a = s.handle(Event::AdminDown, SEC);
    let c = changes(&a)[0];
    assert_eq!(
        (c.from, c.to, c.diag, c.client_action()),
        (
            State::Up,
            State::AdminDown,
            Diagnostic::AdministrativelyDown,
            ClientAction::None
        )
    );
    assert_eq!(s.counters().down_events, 1);
    let p = sent(&a);
    assert_eq!(p.len(), 1, "one AdminDown packet at once");
    assert_eq!(
        (p[0].state, p[0].diag, p[0].your_discr),
        (State::AdminDown, Diagnostic::AdministrativelyDown, REMOTE)
    );
    assert!(cancelled(&a, Timer::Detect));
    // Then periodic ones, slow, until the remote's Detect Mult (3) in all.
    let mut n = 1;
    while let Some(at) = s.deadline(Timer::Tx) {
        let a = s.handle(Event::TimerExpired(Timer::Tx), at);
        n += sent(&a).len();
        assert!(
            sent(&a)
                .iter()
                .all(|p| p.state == State::AdminDown && p.desired_min_tx_us == 1_000_000)
        );
        assert!(n <= 3);
    }
    assert_eq!(n, 3);
    assert_eq!(s.next_deadline(), None);
    // Admin up: Down, slow packets again; diagnostic 7 is cleared (the
    // session is no longer administratively down; issue 13, Low list).
    let a = s.handle(Event::AdminUp, 10 * SEC);
    let c = changes(&a)[0];
    assert_eq!((c.to, c.diag), (State::Down, Diagnostic::None));
    assert_eq!(s.local_diag(), Diagnostic::None);
    let p = sent(&a)[0];
    assert_eq!((p.state, p.diag), (State::Down, Diagnostic::None));
}

#[test]
fn shutdown_cancels_every_timer() {
    let mut s = up(echo_params());
    rx(
        &mut s,
        ControlPacket {
            required_min_echo_rx_us: 50_000,
            ..remote(State::Up)
        },
        30 * MS,
    );
    assert!(s.echo_active());
    let a = s.shutdown(SEC);
    assert_eq!(sent(&a).len(), 1);
    for t in Timer::ALL {
        assert!(cancelled(&a, t), "{t:?}");
    }
    assert_eq!(s.next_deadline(), None);
}

// ---- transmission ----

#[test]
fn poll_is_answered_at_once_with_final() {
    let mut s = up(Parameters::default());
    let tx_deadline = s.deadline(Timer::Tx);
    let a = rx(
        &mut s,
        ControlPacket {
            poll: true,
            ..remote(State::Up)
        },
        SEC,
    );
    let p = sent(&a);
    assert_eq!(p.len(), 1);
    assert!(p[0].final_ && !p[0].poll);
    // The periodic schedule is not disturbed.
    assert_eq!(s.deadline(Timer::Tx), tx_deadline);
}

#[test]
fn final_answers_poll_even_while_our_own_poll_runs() {
    let mut s = up(Parameters::default());
    assert!(s.poll_in_progress());
    let a = rx(
        &mut s,
        ControlPacket {
            poll: true,
            ..remote(State::Up)
        },
        30 * MS,
    );
    assert!(sent(&a).iter().all(|p| p.final_ && !p.poll));
    let a = s.handle(
        Event::TimerExpired(Timer::Tx),
        s.deadline(Timer::Tx).unwrap(),
    );
    assert!(sent(&a)[0].poll);
}

#[test]
fn no_periodic_tx_while_remote_min_rx_is_zero() {
    let mut s = up(Parameters::default());
    let a = rx(
        &mut s,
        ControlPacket {
            required_min_rx_us: 0,
            ..remote(State::Up)
        },
        SEC,
    );
    assert!(cancelled(&a, Timer::Tx));
    assert!(!s.status().transmitting);
    // Still answers a Poll.
    let a = rx(
        &mut s,
        ControlPacket {
            required_min_rx_us: 0,
            poll: true,
            ..remote(State::Up)
        },
        2 * SEC,
    );
    assert!(sent(&a)[0].final_);
    // Resumes when the remote asks again.
    let a = rx(&mut s, remote(State::Up), 3 * SEC);
    assert_eq!(
        sent(&a).len(),
        1,
        "nothing sent for a while: one packet at once"
    );
    assert!(armed(&a, Timer::Tx).is_some());
}

#[test]
fn remote_demand_mode_stops_periodic_tx_when_both_up() {
    let mut s = up(Parameters::default());
    // Let our Poll finish first.
    rx(
        &mut s,
        ControlPacket {
            final_: true,
            ..remote(State::Up)
        },
        30 * MS,
    );
    let a = rx(
        &mut s,
        ControlPacket {
            demand: true,
            ..remote(State::Up)
        },
        SEC,
    );
    assert!(cancelled(&a, Timer::Tx));
    let a = rx(&mut s, remote(State::Up), 2 * SEC);
    assert!(armed(&a, Timer::Tx).is_some());
}

#[test]
fn tx_interval_is_max_of_ours_and_remote_rx() {
    let mut s = up(Parameters {
        transmit_interval_ms: 50,
        ..Default::default()
    });
    rx(
        &mut s,
        ControlPacket {
            final_: true,
            ..remote(State::Up)
        },
        30 * MS,
    );
    assert_eq!(s.tx_interval_us(), 300_000);
    let a = rx(
        &mut s,
        ControlPacket {
            required_min_rx_us: 20_000,
            ..remote(State::Up)
        },
        40 * MS,
    );
    assert_eq!(s.tx_interval_us(), 50_000);
    // The pending deadline moves into the new, shorter band.
    let at = armed(&a, Timer::Tx).unwrap();
    let last = s.last_tx.unwrap();
    assert!(
        (last + 37_500_000..=last + 50 * MS).contains(&at) || at == 40 * MS,
        "{at}"
    );
    // And back out when the remote asks for fewer packets.
    let a = rx(
        &mut s,
        ControlPacket {
            required_min_rx_us: 2_000_000,
            ..remote(State::Up)
        },
        41 * MS,
    );
    let at = armed(&a, Timer::Tx).unwrap();
    let last = s.last_tx.unwrap();
    assert!(at >= last + 1_500 * MS, "{at} vs last {last}");
}

#[test]
fn ttl_source_and_discriminator_checks() {
    let mut s = started(Parameters::default());
    let bad_ttl = s.handle(
        Event::Received {
            packet: remote(State::Down),
            source: ip("10.0.0.2"),
            ttl: 254,
        },
        MS,
    );
    assert!(bad_ttl.is_empty());
    let bad_source = s.handle(
        Event::Received {
            packet: remote(State::Down),
            source: ip("10.0.0.3"),
            ttl: 255,
        },
        MS,
    );
    assert!(bad_source.is_empty());
    let wrong_discr = rx(
        &mut s,
        ControlPacket {
            your_discr: 99,
            ..remote(State::Down)
        },
        MS,
    );
    assert!(wrong_discr.is_empty());
    let authenticated = rx(
        &mut s,
        ControlPacket::parse(&with_auth(&remote(State::Down))).unwrap(),
        MS,
    );
    assert!(authenticated.is_empty());
    assert_eq!(s.counters().control_dropped, 4);
    assert_eq!(s.counters().control_in, 0);
    assert_eq!(s.state(), State::Down);

    let multihop = SessionKey::multi_hop(ip("10.0.0.1"), ip("10.0.9.2"));
    let mut s = Session::new(
        multihop,
        LOCAL,
        Parameters {
            minimum_ttl: 250,
            ..Default::default()
        },
        1,
    );
    s.start(0);
    let ev = |ttl| Event::Received {
        packet: remote(State::Down),
        source: ip("10.0.9.2"),
        ttl,
    };
    assert!(s.handle(ev(249), MS).is_empty());
    assert_eq!(s.state(), State::Down);
    s.handle(ev(250), MS);
    assert_eq!(s.state(), State::Init);
}

fn with_auth(p: &ControlPacket) -> Vec<u8> {
    let mut bytes = p.to_vec();
    bytes[1] |= 0x04;
    bytes[3] = 28;
    bytes.extend_from_slice(&[1, 4, 1, b'x']);
    bytes
}

#[test]
fn stale_tx_expiry_is_ignored() {
    let mut s = started(Parameters::default());
    let at = s.deadline(Timer::Tx).unwrap();
    assert!(s.handle(Event::TimerExpired(Timer::Tx), at - 1).is_empty());
    assert!(s.handle(Event::TimerExpired(Timer::EchoTx), at).is_empty());
}

#[test]
fn mult_one_jitter_band() {
    // A Detect Mult of 1 (outside BFDProfile's range, allowed by the RFC):
    // 75-90 % of the interval.
    let mut s = started(Parameters {
        detect_multiplier: 1,
        ..Default::default()
    });
    let mut last = 0;
    for _ in 0..500 {
        let at = s.deadline(Timer::Tx).unwrap();
        assert!(
            (last + 750 * MS..=last + 900 * MS).contains(&at),
            "{}",
            at - last
        );
        s.handle(Event::TimerExpired(Timer::Tx), at);
        last = at;
    }
}

/// The edge may send a periodic packet up to `early_ns` before its
/// deadline (delivering the expiry as if at the deadline). Whether every
/// packet goes out at its deadline, as early as allowed, or anything in
/// between, the intervals on the wire stay inside 75-100 % (75-90 % with a
/// Detect Mult of 1), and the margin is 2 ms at 50 ms (4 % below that).
#[test]
fn early_delivery_keeps_the_wire_interval_inside_the_jitter_band() {
    for (mult, interval_ms, high_pct) in [(3u8, 50u64, 100u64), (1, 50, 90), (3, 10, 100)] {
        let mut s = up(Parameters {
            transmit_interval_ms: interval_ms as u32,
            receive_interval_ms: interval_ms as u32,
            detect_multiplier: u32::from(mult),
            ..Default::default()
        });
        let a = rx(
            &mut s,
            ControlPacket {
                final_: true,
                desired_min_tx_us: (interval_ms * 1_000) as u32,
                required_min_rx_us: (interval_ms * 1_000) as u32,
                ..remote(State::Up)
            },
            30 * MS,
        );
        assert_eq!(s.tx_interval_us(), interval_ms * 1_000);
        let interval = interval_ms * MS;
        let margin = crate::session::tx_margin_ns(interval);
        assert_eq!(margin, (2 * MS).min(interval / 25));
        let mut armed_tx = a.iter().rev().find_map(|x| match x {
            Action::ArmTimer {
                timer: Timer::Tx,
                at_ns,
                early_ns,
            } => Some((*at_ns, *early_ns)),
            _ => None,
        });
        let mut wire: Vec<u64> = Vec::new();
        let mut rng = crate::rng::SplitMix64::new(u64::from(mult) * interval_ms);
        let mut early_seen = 0;
        for _ in 0..2_000 {
            let (at, early) = armed_tx.expect("Tx armed");
            assert!(early <= margin, "early {early} > margin {margin}");
            early_seen += u64::from(early > 0);
            // The edge picks any moment in [at - early, at].
            let sent_at = match rng.next_u32() % 3 {
                0 => at,
                1 => at - early,
                _ => at - early / 2,
            };
            let out = s.handle(Event::TimerExpired(Timer::Tx), at);
            assert_eq!(sent(&out).len(), 1, "one periodic packet");
            wire.push(sent_at);
            armed_tx = out.iter().rev().find_map(|x| match x {
                Action::ArmTimer {
                    timer: Timer::Tx,
                    at_ns,
                    early_ns,
                } => Some((*at_ns, *early_ns)),
                _ => None,
            });
        }
        assert!(early_seen > 1_900, "the margin is offered: {early_seen}");
        for w in wire.windows(2) {
            let d = w[1] - w[0];
            assert!(
                d >= interval * 3 / 4 && d <= interval * high_pct / 100,
                "mult {mult}, {interval_ms} ms: interval {d} outside the band"
            );
        }
    }
}

// ---- parameters and Poll/Final ----

fn finish_poll(s: &mut Session, now: u64) {
    rx(
        s,
        ControlPacket {
            final_: true,
            ..remote(State::Up)
        },
        now,
    );
    assert!(!s.poll_in_progress());
}

#[test]
fn slower_tx_applies_only_after_final() {
    let mut s = up(Parameters::default());
    finish_poll(&mut s, 30 * MS);
    let a = s.handle(
        Event::ParametersChanged(Parameters {
            transmit_interval_ms: 1000,
            ..Default::default()
        }),
        SEC,
    );
    assert!(s.poll_in_progress());
    assert!(
        sent(&a).is_empty(),
        "the Poll goes out with the next periodic packet"
    );
    assert_eq!(s.tx_interval_us(), 300_000, "old TX until Final");
    let a = s.handle(
        Event::TimerExpired(Timer::Tx),
        s.deadline(Timer::Tx).unwrap(),
    );
    let p = sent(&a)[0];
    assert!(p.poll);
    assert_eq!(p.desired_min_tx_us, 1_000_000);
    finish_poll(&mut s, 2 * SEC);
    assert_eq!(s.tx_interval_us(), 1_000_000);
    assert_eq!(s.state(), State::Up);
}

#[test]
fn faster_tx_applies_at_once() {
    let mut s = up(Parameters::default());
    finish_poll(&mut s, 30 * MS);
    rx(
        &mut s,
        ControlPacket {
            required_min_rx_us: 10_000,
            ..remote(State::Up)
        },
        40 * MS,
    );
    s.handle(
        Event::ParametersChanged(Parameters {
            transmit_interval_ms: 100,
            ..Default::default()
        }),
        SEC,
    );
    assert!(s.poll_in_progress());
    assert_eq!(s.tx_interval_us(), 100_000);
}

#[test]
fn shorter_rx_applies_to_detection_only_after_final() {
    let mut s = up(Parameters::default());
    finish_poll(&mut s, 30 * MS);
    rx(
        &mut s,
        ControlPacket {
            desired_min_tx_us: 50_000,
            ..remote(State::Up)
        },
        40 * MS,
    );
    assert_eq!(s.detection_time_us(), 900_000);
    s.handle(
        Event::ParametersChanged(Parameters {
            receive_interval_ms: 100,
            ..Default::default()
        }),
        SEC,
    );
    assert_eq!(s.detection_time_us(), 900_000, "old RX until Final");
    let a = s.handle(
        Event::TimerExpired(Timer::Tx),
        s.deadline(Timer::Tx).unwrap(),
    );
    assert_eq!(sent(&a)[0].required_min_rx_us, 100_000);
    let a = rx(
        &mut s,
        ControlPacket {
            final_: true,
            desired_min_tx_us: 50_000,
            ..remote(State::Up)
        },
        2 * SEC,
    );
    assert_eq!(s.detection_time_us(), 300_000);
    assert_eq!(armed(&a, Timer::Detect), Some(2 * SEC + 300 * MS));
}

#[test]
fn longer_rx_applies_to_detection_at_once() {
    let mut s = up(Parameters::default());
    finish_poll(&mut s, 30 * MS);
    let a = s.handle(
        Event::ParametersChanged(Parameters {
            receive_interval_ms: 2000,
            ..Default::default()
        }),
        SEC,
    );
    assert_eq!(s.detection_time_us(), 6_000_000);
    assert_eq!(armed(&a, Timer::Detect), Some(30 * MS + 6 * SEC));
}

#[test]
fn a_change_during_a_poll_needs_a_second_final() {
    let mut s = up(Parameters::default());
    finish_poll(&mut s, 30 * MS);
    s.handle(
        Event::ParametersChanged(Parameters {
            transmit_interval_ms: 500,
            ..Default::default()
        }),
        SEC,
    );
    s.handle(
        Event::ParametersChanged(Parameters {
            transmit_interval_ms: 800,
            ..Default::default()
        }),
        SEC + MS,
    );
    rx(
        &mut s,
        ControlPacket {
            final_: true,
            ..remote(State::Up)
        },
        SEC + 2 * MS,
    );
    assert!(
        s.poll_in_progress(),
        "the first Final may answer a packet with 500 ms"
    );
    assert_eq!(s.tx_interval_us(), 300_000);
    finish_poll(&mut s, SEC + 3 * MS);
    assert_eq!(s.tx_interval_us(), 800_000);
}

#[test]
fn changes_while_not_up_apply_at_once_without_poll() {
    let mut s = started(Parameters::default());
    s.handle(
        Event::ParametersChanged(Parameters {
            receive_interval_ms: 50,
            detect_multiplier: 5,
            ..Default::default()
        }),
        SEC,
    );
    assert!(!s.poll_in_progress());
    let a = s.handle(
        Event::TimerExpired(Timer::Tx),
        s.deadline(Timer::Tx).unwrap(),
    );
    let p = sent(&a)[0];
    assert_eq!(
        (
            p.required_min_rx_us,
            p.detect_mult,
            p.desired_min_tx_us,
            p.poll
        ),
        (50_000, 5, 1_000_000, false)
    );
    // A desired TX above 1 s is advertised as is.
    s.handle(
        Event::ParametersChanged(Parameters {
            transmit_interval_ms: 2000,
            ..Default::default()
        }),
        2 * SEC,
    );
    assert_eq!(s.status().advertised_min_tx_us, 2_000_000);
}

#[test]
fn a_final_without_a_poll_is_ignored() {
    let mut s = up(Parameters::default());
    finish_poll(&mut s, 30 * MS);
    rx(
        &mut s,
        ControlPacket {
            final_: true,
            ..remote(State::Up)
        },
        40 * MS,
    );
    assert!(!s.poll_in_progress());
    assert_eq!(s.state(), State::Up);
}

// ---- passive mode ----

#[test]
fn passive_sends_nothing_until_the_remote_is_heard() {
    let mut s = new_session(Parameters {
        passive_mode: true,
        ..Default::default()
    });
    let a = s.start(0);
    assert_eq!(changes(&a)[0].to, State::Down);
    assert!(sent(&a).is_empty());
    assert_eq!(s.deadline(Timer::Tx), None);
    let a = rx(&mut s, remote(State::Down), SEC);
    assert_eq!(s.state(), State::Init);
    let p = sent(&a);
    assert_eq!(p.len(), 1);
    assert_eq!((p[0].state, p[0].your_discr), (State::Init, REMOTE));
    assert!(armed(&a, Timer::Tx).is_some());
    // Silent again once the remote is forgotten.
    let a = s.handle(
        Event::TimerExpired(Timer::Detect),
        s.deadline(Timer::Detect).unwrap(),
    );
    assert!(cancelled(&a, Timer::Tx));
    // Passive AdminDown with nobody to tell: nothing sent.
    let a = s.handle(Event::AdminDown, 10 * SEC);
    assert!(sent(&a).is_empty());
}

// ---- echo ----

fn echo_params() -> Parameters {
    Parameters {
        echo_mode: true,
        ..Default::default()
    }
}

fn echo_up() -> (Session, Vec<Action>) {
    let mut s = up(echo_params());
    let a = rx(
        &mut s,
        ControlPacket {
            required_min_echo_rx_us: 20_000,
            ..remote(State::Up)
        },
        30 * MS,
    );
    (s, a)
}

fn echoes(actions: &[Action]) -> Vec<EchoPacket> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::SendEcho(e) => Some(*e),
            _ => None,
        })
        .collect()
}

#[test]
fn echo_rx_is_advertised_only_with_echo_mode_on_single_hop_ipv4() {
    let s = started(echo_params());
    assert_eq!(s.status().advertised_min_echo_rx_us, 50_000);
    let s = started(Parameters::default());
    assert_eq!(s.status().advertised_min_echo_rx_us, 0);
    let v6 = SessionKey::single_hop("eth0", ip("fd00::1"), ip("fd00::2"));
    assert_eq!(
        Session::new(v6, 1, echo_params(), 1)
            .status()
            .advertised_min_echo_rx_us,
        0
    );
    let mh = SessionKey::multi_hop(ip("10.0.0.1"), ip("10.0.9.2"));
    assert_eq!(
        Session::new(mh, 1, echo_params(), 1)
            .status()
            .advertised_min_echo_rx_us,
        0
    );
}

#[test]
fn echo_starts_when_up_and_the_remote_accepts_echo() {
    // Up, but the remote advertises no echo RX: no echo.
    let mut s = up(echo_params());
    assert!(!s.echo_active());
    // Not Up: no echo even if the remote accepts it.
    let mut d = started(echo_params());
    rx(
        &mut d,
        ControlPacket {
            required_min_echo_rx_us: 20_000,
            ..remote(State::Down)
        },
        MS,
    );
    assert!(!d.echo_active());
    // Up and accepted: echo at max(50 ms, 20 ms), detection 3 x 50 ms.
    let a = rx(
        &mut s,
        ControlPacket {
            required_min_echo_rx_us: 20_000,
            ..remote(State::Up)
        },
        30 * MS,
    );
    assert!(s.echo_active());
    let e = echoes(&a);
    assert_eq!(
        e,
        vec![EchoPacket {
            discriminator: LOCAL,
            sequence: 0,
            tx_time_ns: 30 * MS
        }]
    );
    assert_eq!(armed(&a, Timer::EchoTx), Some(80 * MS));
    assert_eq!(armed(&a, Timer::EchoDetect), Some(30 * MS + 150 * MS));
    // The remote's minimum wins when larger.
    rx(
        &mut s,
        ControlPacket {
            required_min_echo_rx_us: 70_000,
            ..remote(State::Up)
        },
        40 * MS,
    );
    assert_eq!(s.echo_tx_interval_us(), 70_000);
    assert_eq!(s.deadline(Timer::EchoTx), Some(100 * MS));
    assert_eq!(s.echo_detection_time_us(), 210_000);
}

#[test]
fn echo_never_runs_on_multihop_or_ipv6() {
    for key in [
        SessionKey::multi_hop(ip("10.0.0.1"), ip("10.0.0.2")),
        SessionKey::single_hop("eth0", ip("fd00::1"), ip("fd00::2")),
    ] {
        let remote_ip = key.remote;
        let mut s = Session::new(key, LOCAL, echo_params(), 3);
        s.start(0);
        let ev = |p| Event::Received {
            packet: p,
            source: remote_ip,
            ttl: 255,
        };
        s.handle(ev(remote(State::Down)), MS);
        s.handle(
            ev(ControlPacket {
                required_min_echo_rx_us: 50_000,
                ..remote(State::Up)
            }),
            2 * MS,
        );
        assert_eq!(s.state(), State::Up);
        assert!(!s.echo_active());
    }
}

#[test]
fn echo_slows_control_rx_and_stops_when_the_remote_withdraws() {
    let (mut s, _) = echo_up();
    assert_eq!(
        s.status().advertised_min_rx_us,
        1_000_000,
        "§6.8.3: control slowed while echo runs"
    );
    assert!(s.poll_in_progress());
    // Longer RX applies at once: detection on control is now 3 x 1 s.
    assert_eq!(s.detection_time_us(), 3_000_000);
    let a = rx(&mut s, remote(State::Up), 100 * MS);
    assert!(!s.echo_active());
    assert!(cancelled(&a, Timer::EchoTx) && cancelled(&a, Timer::EchoDetect));
    assert_eq!(s.status().advertised_min_rx_us, 300_000);
    // The shorter RX waits for the Final.
    assert_eq!(s.detection_time_us(), 3_000_000);
    // Echo start and stop both came during a Poll: it takes two Finals.
    rx(
        &mut s,
        ControlPacket {
            final_: true,
            ..remote(State::Up)
        },
        200 * MS,
    );
    assert_eq!(s.detection_time_us(), 3_000_000);
    finish_poll(&mut s, 300 * MS);
    assert_eq!(s.detection_time_us(), 900_000);
}

#[test]
fn echo_loss_is_down_with_diag_2() {
    let (mut s, _) = echo_up();
    // Echoes come back for a while.
    let mut now = 30 * MS;
    for _ in 0..10 {
        now = s.deadline(Timer::EchoTx).unwrap();
        let a = s.handle(Event::TimerExpired(Timer::EchoTx), now);
        let e = echoes(&a)[0];
        s.handle(Event::EchoReceived(e), now + MS);
        // Keep the control side alive too.
        rx(
            &mut s,
            ControlPacket {
                required_min_echo_rx_us: 20_000,
                ..remote(State::Up)
            },
            now + MS,
        );
    }
    assert_eq!(s.counters().echo_in, 10);
    assert_eq!(s.deadline(Timer::EchoDetect), Some(now + MS + 150 * MS));
    // Then they stop: Down, diag 2, a failure for the client.
    let at = s.deadline(Timer::EchoDetect).unwrap();
    let a = s.handle(Event::TimerExpired(Timer::EchoDetect), at);
    let c = changes(&a)[0];
    assert_eq!(
        (c.from, c.to, c.diag, c.cause),
        (
            State::Up,
            State::Down,
            Diagnostic::EchoFunctionFailed,
            Cause::EchoFailed
        )
    );
    assert_eq!(c.client_action(), ClientAction::Down);
    assert!(!s.echo_active());
    assert!(cancelled(&a, Timer::EchoTx));
    let p = sent(&a);
    assert!(p.is_empty() || p[0].diag == Diagnostic::EchoFunctionFailed);
}

#[test]
fn foreign_or_stale_echoes_are_dropped() {
    let (mut s, a) = echo_up();
    let e = echoes(&a)[0];
    s.handle(
        Event::EchoReceived(EchoPacket {
            discriminator: 5,
            ..e
        }),
        31 * MS,
    );
    s.handle(
        Event::EchoReceived(EchoPacket {
            sequence: 5000,
            ..e
        }),
        31 * MS,
    );
    assert_eq!(s.counters().echo_dropped, 2);
    let before = s.deadline(Timer::EchoDetect);
    let a = s.handle(Event::EchoReceived(e), 32 * MS);
    assert_eq!(s.counters().echo_in, 1);
    assert_ne!(armed(&a, Timer::EchoDetect), before);
    assert_eq!(s.status().last_echo_rtt_ns, Some(2 * MS));
    assert_eq!(s.status().last_echo_rx_ns, Some(32 * MS));
    // Not running: dropped.
    let mut idle = up(echo_params());
    idle.handle(
        Event::EchoReceived(EchoPacket {
            discriminator: LOCAL,
            ..e
        }),
        SEC,
    );
    assert_eq!(idle.counters().echo_dropped, 1);
}

#[test]
fn disabling_echo_mode_stops_echo_without_a_flap() {
    let (mut s, _) = echo_up();
    let a = s.handle(Event::ParametersChanged(Parameters::default()), 40 * MS);
    assert!(!s.echo_active());
    assert!(changes(&a).is_empty());
    assert_eq!(s.status().advertised_min_echo_rx_us, 0);
}

#[test]
fn no_echo_without_echo_mode_even_if_the_remote_accepts_it() {
    let mut s = up(Parameters::default());
    let mut now = 30 * MS;
    for _ in 0..20 {
        let a = rx(
            &mut s,
            ControlPacket {
                required_min_echo_rx_us: 50_000,
                ..remote(State::Up)
            },
            now,
        );
        assert!(echoes(&a).is_empty());
        assert_eq!(armed(&a, Timer::EchoTx), None);
        assert_eq!(armed(&a, Timer::EchoDetect), None);
        now += 100 * MS;
    }
    assert!(!s.echo_active());
    let st = s.status();
    assert_eq!(st.advertised_min_echo_rx_us, 0);
    assert_eq!((st.echo_tx_interval_us, st.echo_detection_time_us), (0, 0));
    assert_eq!(st.advertised_min_rx_us, 300_000, "control not slowed");
    assert_eq!(
        (s.deadline(Timer::EchoTx), s.deadline(Timer::EchoDetect)),
        (None, None)
    );
    assert_eq!(s.counters().echo_out, 0);
}

#[test]
fn enabling_echo_mode_while_up_starts_echo_without_a_flap() {
    let mut s = up(Parameters::default());
    rx(
        &mut s,
        ControlPacket {
            required_min_echo_rx_us: 50_000,
            ..remote(State::Up)
        },
        30 * MS,
    );
    assert!(!s.echo_active());
    let a = s.handle(Event::ParametersChanged(echo_params()), 40 * MS);
    assert!(changes(&a).is_empty());
    assert!(s.echo_active());
    assert_eq!(echoes(&a).len(), 1, "the first echo goes at once");
    assert_eq!(armed(&a, Timer::EchoTx), Some(90 * MS));
    assert_eq!(armed(&a, Timer::EchoDetect), Some(40 * MS + 150 * MS));
}

#[test]
fn echo_detection_time_is_our_multiplier_times_the_echo_interval() {
    // Ours 5, the remote's 3: echo detection uses ours (the packets are
    // ours), control detection the remote's.
    let p = Parameters {
        detect_multiplier: 5,
        echo_interval_ms: 40,
        ..echo_params()
    };
    let mut s = up(p);
    let a = rx(
        &mut s,
        ControlPacket {
            required_min_echo_rx_us: 20_000,
            ..remote(State::Up)
        },
        30 * MS,
    );
    assert_eq!(s.echo_detection_time_us(), 200_000);
    assert_eq!(s.status().echo_detection_time_us, 200_000);
    assert_eq!(armed(&a, Timer::EchoDetect), Some(30 * MS + 200 * MS));
    // Nothing comes back: Down with diagnostic 2 exactly then, while the
    // control side is still alive.
    let at = s.deadline(Timer::EchoDetect).unwrap();
    assert!(s.deadline(Timer::Detect).unwrap() > at);
    let before = s.handle(Event::TimerExpired(Timer::EchoDetect), at - 1);
    assert!(changes(&before).is_empty(), "not before its time");
    let a = s.handle(Event::TimerExpired(Timer::EchoDetect), at);
    let c = changes(&a);
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].to, c[0].diag),
        (State::Down, Diagnostic::EchoFunctionFailed)
    );
    assert_eq!(s.local_diag(), Diagnostic::EchoFunctionFailed);
}

#[test]
fn without_loopback_we_invite_no_echo_but_still_send_ours() {
    let mut s = started(echo_params());
    assert!(s.echo_loopback());
    assert_eq!(s.status().advertised_min_echo_rx_us, 50_000);
    let a = s.handle(Event::EchoLoopback(false), MS);
    assert!(a.iter().all(|a| !matches!(a, Action::StateChanged(_))));
    assert!(!s.echo_loopback());
    assert_eq!(s.status().advertised_min_echo_rx_us, 0);
    // The packets we send say so.
    rx(&mut s, remote(State::Down), 10 * MS);
    let a = rx(&mut s, remote(State::Up), 20 * MS);
    assert_eq!(s.state(), State::Up);
    let deadline = s.deadline(Timer::Tx).unwrap();
    let a = [a, s.handle(Event::TimerExpired(Timer::Tx), deadline)].concat();
    let p = sent(&a);
    assert!(!p.is_empty());
    assert!(p.iter().all(|p| p.required_min_echo_rx_us == 0), "{p:?}");
    // Our own echo depends on the remote's value only.
    let a = rx(
        &mut s,
        ControlPacket {
            required_min_echo_rx_us: 20_000,
            ..remote(State::Up)
        },
        deadline + MS,
    );
    assert!(s.echo_active());
    assert_eq!(echoes(&a).len(), 1);
    // Forwarding back on: advertised again, no flap, echo unchanged.
    let a = s.handle(Event::EchoLoopback(true), deadline + 2 * MS);
    assert!(changes(&a).is_empty());
    assert_eq!(s.status().advertised_min_echo_rx_us, 50_000);
    assert!(s.echo_active());
    // Without echo mode the flag changes nothing.
    let mut plain = started(Parameters::default());
    plain.handle(Event::EchoLoopback(true), MS);
    assert_eq!(plain.status().advertised_min_echo_rx_us, 0);
}

// ---- serde ----

#[test]
fn events_and_actions_serialise() {
    let (mut s, actions) = echo_up();
    let json = serde_json::to_string(&actions).unwrap();
    assert_eq!(serde_json::from_str::<Vec<Action>>(&json).unwrap(), actions);
    let ev = Event::Received {
        packet: remote(State::Up),
        source: ip("10.0.0.2"),
        ttl: 255,
    };
    let json = serde_json::to_string(&ev).unwrap();
    assert_eq!(serde_json::from_str::<Event>(&json).unwrap(), ev);
    let status = s.status();
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["state"], "Up");
    assert_eq!(json["params"]["echoMode"], true);
    s.handle(Event::AdminDown, SEC);
}

// ---- two sessions on a simulated link ----

enum Msg {
    Control(Vec<u8>),
    Echo([u8; EchoPacket::LEN]),
}

struct Node {
    session: Session,
    timers: [Option<u64>; 4],
    changes: Vec<StateChange>,
    tx: Vec<(u64, ControlPacket)>,
}

/// Two sessions joined by a link with a fixed latency. Packets go through
/// the codec; timers fire at the deadlines the actions armed (and the test
/// asserts those always match the session's own view).
struct Sim {
    now: u64,
    nodes: Vec<Node>,
    flight: Vec<(u64, usize, Msg)>,
    /// Drop everything node i sends.
    cut: [bool; 2],
    /// Node i's echo packets come back (the other's forwarding plane).
    echo_loop: [bool; 2],
    latency: u64,
}

impl Sim {
    fn new(a: Parameters, b: Parameters) -> Sim {
        let ka = SessionKey::single_hop("eth0", ip("10.0.0.1"), ip("10.0.0.2"));
        let kb = SessionKey::single_hop("eth1", ip("10.0.0.2"), ip("10.0.0.1"));
        Sim {
            now: 0,
            nodes: vec![
                Node {
                    session: Session::new(ka, 0xa, a, 1),
                    timers: [None; 4],
                    changes: vec![],
                    tx: vec![],
                },
                Node {
                    session: Session::new(kb, 0xb, b, 2),
                    timers: [None; 4],
                    changes: vec![],
                    tx: vec![],
                },
            ],
            flight: vec![],
            cut: [false; 2],
            echo_loop: [true; 2],
            latency: MS,
        }
    }

    fn event(&mut self, i: usize, event: Event) {
        let actions = self.nodes[i].session.handle(event, self.now);
        self.apply(i, actions);
    }

    fn apply(&mut self, i: usize, actions: Vec<Action>) {
        let now = self.now;
        for action in actions {
            let node = &mut self.nodes[i];
            match action {
                Action::SendControl(p) => {
                    node.tx.push((now, p));
                    if !self.cut[i] {
                        self.flight
                            .push((now + self.latency, 1 - i, Msg::Control(p.to_vec())));
                    }
                }
                Action::SendEcho(e) => {
                    if self.echo_loop[i] {
                        self.flight
                            .push((now + 2 * self.latency, i, Msg::Echo(e.to_bytes())));
                    }
                }
                Action::ArmTimer { timer, at_ns, .. } => {
                    assert!(at_ns >= now, "{timer:?} armed in the past");
                    node.timers[timer.index()] = Some(at_ns);
                }
                Action::CancelTimer(timer) => node.timers[timer.index()] = None,
                Action::StateChanged(c) => node.changes.push(c),
            }
        }
        let node = &self.nodes[i];
        for t in Timer::ALL {
            assert_eq!(
                node.timers[t.index()],
                node.session.deadline(t),
                "{t:?} at {now}"
            );
        }
    }

    fn run_until(&mut self, end: u64) {
        loop {
            let flight = self
                .flight
                .iter()
                .enumerate()
                .min_by_key(|(_, f)| f.0)
                .map(|(k, f)| (f.0, k));
            let timer = (0..2)
                .flat_map(|i| Timer::ALL.into_iter().map(move |t| (i, t)))
                .filter_map(|(i, t)| self.nodes[i].timers[t.index()].map(|at| (at, i, t)))
                .min();
            match (flight, timer) {
                (Some((at, k)), timer) if at <= end && timer.is_none_or(|(tat, ..)| at <= tat) => {
                    self.now = at;
                    let (_, to, msg) = self.flight.remove(k);
                    let event = match msg {
                        Msg::Control(bytes) => Event::Received {
                            packet: ControlPacket::decode(&bytes).unwrap(),
                            source: self.nodes[to].session.key().remote,
                            ttl: 255,
                        },
                        Msg::Echo(bytes) => {
                            Event::EchoReceived(EchoPacket::decode(&bytes).unwrap())
                        }
                    };
                    self.event(to, event);
                }
                (_, Some((at, i, t))) if at <= end => {
                    self.now = at;
                    self.nodes[i].timers[t.index()] = None;
                    self.event(i, Event::TimerExpired(t));
                }
                _ => break,
            }
        }
        self.now = end;
    }

    fn state(&self, i: usize) -> State {
        self.nodes[i].session.state()
    }

    fn both_up(&self) -> bool {
        self.state(0) == State::Up && self.state(1) == State::Up
    }

    /// Periodic (non-Final) transmission gaps of node i after `since`.
    fn gaps(&self, i: usize, since: u64) -> Vec<u64> {
        let times: Vec<u64> = self.nodes[i]
            .tx
            .iter()
            .filter(|(t, p)| *t >= since && !p.final_)
            .map(|(t, _)| *t)
            .collect();
        times.windows(2).map(|w| w[1] - w[0]).collect()
    }

    fn start_both(&mut self) {
        self.event(0, Event::AdminUp);
        self.run_until(10 * MS);
        self.event(1, Event::AdminUp);
    }
}

#[test]
fn sim_handshake_comes_up_from_either_side_starting_first() {
    for first in [0, 1] {
        let mut sim = Sim::new(Parameters::default(), Parameters::default());
        sim.event(first, Event::AdminUp);
        sim.run_until(1500 * MS);
        sim.event(1 - first, Event::AdminUp);
        sim.run_until(5 * SEC);
        assert!(sim.both_up());
        for node in &sim.nodes {
            let s = &node.session;
            assert!(!s.poll_in_progress());
            assert_eq!(s.tx_interval_us(), 300_000);
            assert_eq!(s.detection_time_us(), 900_000);
            assert_eq!(node.changes.last().unwrap().to, State::Up);
            assert_eq!(node.changes.iter().filter(|c| c.to == State::Up).count(), 1);
            assert_eq!(s.counters().control_dropped, 0);
        }
    }
}

#[test]
fn sim_slow_then_fast_tx_with_jitter() {
    let mut sim = Sim::new(Parameters::default(), Parameters::default());
    sim.event(0, Event::AdminUp);
    sim.run_until(20 * SEC);
    // Alone: 1 s slow rate, jittered to 75-100 %.
    let gaps = sim.gaps(0, 0);
    assert!(gaps.len() >= 19);
    assert!(
        gaps.iter().all(|g| (750 * MS..=SEC).contains(g)),
        "{gaps:?}"
    );
    sim.event(1, Event::AdminUp);
    sim.run_until(30 * SEC);
    assert!(sim.both_up());
    let gaps = sim.gaps(0, 25 * SEC);
    assert!(gaps.len() > 15);
    assert!(
        gaps.iter().all(|g| (225 * MS..=300 * MS).contains(g)),
        "{gaps:?}"
    );
}

#[test]
fn sim_silent_cut_is_detected_within_detection_time() {
    let mut sim = Sim::new(Parameters::default(), Parameters::default());
    sim.start_both();
    sim.run_until(5 * SEC);
    assert!(sim.both_up());
    sim.cut[1] = true;
    sim.run_until(7 * SEC);
    let a = &sim.nodes[0];
    let down = a.changes.last().unwrap();
    assert_eq!(
        (down.to, down.diag, down.client_action()),
        (
            State::Down,
            Diagnostic::ControlDetectionTimeExpired,
            ClientAction::Down
        )
    );
    let last_rx = a.session.status().last_rx_ns.unwrap();
    assert_eq!(
        down.at_ns - last_rx,
        900 * MS,
        "exactly one detection time after the last packet"
    );
    // B hears A's Down (diag 1) and goes Down with diag 3 (then Init, as
    // A's Down packets keep coming and its own do not get through).
    let b = sim.nodes[1]
        .changes
        .iter()
        .find(|c| c.from == State::Up)
        .unwrap();
    assert_eq!(
        (b.to, b.diag, b.client_action()),
        (
            State::Down,
            Diagnostic::NeighborSignaledSessionDown,
            ClientAction::Down
        )
    );
    // Recovery.
    sim.cut[1] = false;
    sim.run_until(12 * SEC);
    assert!(sim.both_up());
}

#[test]
fn sim_parameter_changes_never_flap() {
    let mut sim = Sim::new(Parameters::default(), Parameters::default());
    sim.start_both();
    sim.run_until(5 * SEC);
    assert!(sim.both_up());
    let ups = [sim.nodes[0].changes.len(), sim.nodes[1].changes.len()];
    let fast = Parameters {
        transmit_interval_ms: 50,
        receive_interval_ms: 50,
        detect_multiplier: 3,
        ..Default::default()
    };
    let slow = Parameters {
        transmit_interval_ms: 2000,
        receive_interval_ms: 2000,
        detect_multiplier: 2,
        ..Default::default()
    };
    let mut t = 5 * SEC;
    for (i, p) in [
        (0, fast),
        (1, fast),
        (0, slow),
        (1, slow),
        (0, fast),
        (1, fast),
        (1, Parameters::default()),
        (0, slow),
    ] {
        sim.event(i, Event::ParametersChanged(p));
        t += 7 * SEC;
        sim.run_until(t);
        assert!(sim.both_up());
        assert!(
            !sim.nodes[0].session.poll_in_progress() && !sim.nodes[1].session.poll_in_progress()
        );
    }
    assert_eq!(
        [sim.nodes[0].changes.len(), sim.nodes[1].changes.len()],
        ups,
        "no state change at all"
    );
    // Final: A slow (2 s, mult 2), B default (300 ms, mult 3).
    let (a, b) = (&sim.nodes[0].session, &sim.nodes[1].session);
    assert_eq!(a.tx_interval_us(), 2_000_000);
    assert_eq!(
        b.tx_interval_us(),
        2_000_000,
        "B sends no faster than A's RX"
    );
    assert_eq!(a.detection_time_us(), 3 * 2_000_000);
    assert_eq!(b.detection_time_us(), 2 * 2_000_000);
}

#[test]
fn sim_remote_admin_down_and_back() {
    let mut sim = Sim::new(Parameters::default(), Parameters::default());
    sim.start_both();
    sim.run_until(5 * SEC);
    sim.event(1, Event::AdminDown);
    sim.run_until(15 * SEC);
    let a = sim.nodes[0].changes.last().unwrap();
    assert_eq!(
        (a.to, a.diag, a.client_action()),
        (
            State::Down,
            Diagnostic::NeighborSignaledSessionDown,
            ClientAction::None
        )
    );
    assert_eq!(sim.state(0), State::Down);
    assert_eq!(sim.state(1), State::AdminDown);
    let admin_down_sent = sim.nodes[1]
        .tx
        .iter()
        .filter(|(_, p)| p.state == State::AdminDown)
        .count();
    assert_eq!(admin_down_sent, 3);
    sim.event(1, Event::AdminUp);
    sim.run_until(20 * SEC);
    assert!(sim.both_up());
}

/// Node 1 does what FRR's bfdd does when bgpd re-registers a neighbor's
/// session with the BGP connection's source address: the old session sends
/// one Down (diagnostic 3) and is freed, a new one (another discriminator)
/// starts. Node 0 goes Down, comes Up with the new session, and never tells
/// its client to go down; a cut afterwards still does.
#[test]
fn sim_remote_session_removed_and_re_created_is_no_failure() {
    let mut sim = Sim::new(Parameters::default(), Parameters::default());
    sim.start_both();
    sim.run_until(5 * SEC);
    assert!(sim.both_up());
    let before = sim.nodes[0].changes.len();
    let old = sim.nodes[1].session.status();
    let goodbye = ControlPacket {
        diag: Diagnostic::NeighborSignaledSessionDown,
        state: State::Down,
        poll: false,
        final_: false,
        control_plane_independent: false,
        demand: false,
        multipoint: false,
        detect_mult: old.params.detect_mult(),
        my_discr: old.local_discr,
        your_discr: old.remote.discr,
        desired_min_tx_us: old.advertised_min_tx_us,
        required_min_rx_us: old.advertised_min_rx_us,
        required_min_echo_rx_us: 0,
        auth: None,
    };
    sim.flight
        .push((sim.now + sim.latency, 0, Msg::Control(goodbye.to_vec())));
    let kb = sim.nodes[1].session.key().clone();
    sim.nodes[1].session = Session::new(kb, 0xc, Parameters::default(), 3);
    sim.nodes[1].timers = [None; 4];
    sim.event(1, Event::AdminUp);
    sim.run_until(10 * SEC);
    assert!(sim.both_up());
    let a = &sim.nodes[0].changes[before..];
    assert_eq!(
        (a[0].from, a[0].to, a[0].cause, a[0].at_ns),
        (
            State::Up,
            State::Down,
            Cause::RemoteSessionRemoved,
            5 * SEC + MS
        ),
        "{a:?}"
    );
    assert_eq!(a.last().unwrap().to, State::Up, "{a:?}");
    assert!(
        a.iter().all(|c| c.client_action() != ClientAction::Down),
        "{a:?}"
    );
    assert_eq!(sim.nodes[0].session.remote().discr, 0xc);
    sim.cut[1] = true;
    sim.run_until(12 * SEC);
    assert_eq!(
        sim.nodes[0].changes.last().unwrap().client_action(),
        ClientAction::Down
    );
}

/// Node 1 replaces its session as FRR's bfdd does when bgpd re-registers
/// it (a new discriminator, the old one gone without a packet): node 0
/// goes Down and Up again with the new session, and never tells its client
/// to go down.
#[test]
fn sim_remote_session_replaced_is_no_failure() {
    let mut sim = Sim::new(Parameters::default(), Parameters::default());
    sim.start_both();
    sim.run_until(5 * SEC);
    assert!(sim.both_up());
    let before = sim.nodes[0].changes.len();
    let kb = sim.nodes[1].session.key().clone();
    sim.nodes[1].session = Session::new(kb, 0xc, Parameters::default(), 3);
    sim.nodes[1].timers = [None; 4];
    sim.event(1, Event::AdminUp);
    sim.run_until(10 * SEC);
    assert!(sim.both_up());
    let a = &sim.nodes[0].changes[before..];
    assert_eq!(
        (a[0].from, a[0].to, a[0].cause, a[0].at_ns),
        (
            State::Up,
            State::Down,
            Cause::RemoteSessionReplaced,
            5 * SEC + MS
        ),
        "at the new session's first packet: {a:?}"
    );
    assert_eq!(a.last().unwrap().to, State::Up, "{a:?}");
    assert_eq!(a.iter().filter(|c| c.to == State::Up).count(), 1, "{a:?}");
    assert!(
        a.iter().all(|c| c.client_action() != ClientAction::Down),
        "{a:?}"
    );
    assert_eq!(sim.nodes[0].session.remote().discr, 0xc);
    // A real failure afterwards is still one.
    sim.cut[1] = true;
    sim.run_until(12 * SEC);
    assert_eq!(
        sim.nodes[0].changes.last().unwrap().client_action(),
        ClientAction::Down
    );
}

#[test]
fn sim_passive_meets_active_but_not_passive() {
    let passive = Parameters {
        passive_mode: true,
        ..Default::default()
    };
    let mut sim = Sim::new(passive, Parameters::default());
    sim.start_both();
    sim.run_until(5 * SEC);
    assert!(sim.both_up());
    let first_tx = sim.nodes[0].tx[0].0;
    let first_rx = sim.nodes[1].tx[0].0 + sim.latency;
    assert_eq!(
        first_tx, first_rx,
        "the passive side speaks when first spoken to"
    );

    let mut sim = Sim::new(passive, passive);
    sim.start_both();
    sim.run_until(10 * SEC);
    assert_eq!((sim.state(0), sim.state(1)), (State::Down, State::Down));
    assert!(sim.nodes.iter().all(|n| n.tx.is_empty()));
}

#[test]
fn sim_echo_runs_and_its_loss_is_diag_2() {
    let mut sim = Sim::new(echo_params(), echo_params());
    sim.start_both();
    sim.run_until(5 * SEC);
    assert!(sim.both_up());
    for node in &sim.nodes {
        let s = &node.session;
        assert!(s.echo_active());
        let st = s.status();
        assert_eq!(st.advertised_min_rx_us, 1_000_000);
        assert_eq!(st.echo_tx_interval_us, 50_000);
        assert_eq!(st.echo_detection_time_us, 150_000);
        assert!(st.counters.echo_in > 20);
    }
    // Both sides slowed control to 1 s.
    assert_eq!(sim.nodes[0].session.tx_interval_us(), 1_000_000);
    // B's forwarding plane stops looping A's echoes back.
    sim.echo_loop[0] = false;
    let cut_at = sim.now;
    sim.run_until(6 * SEC);
    let a = sim.nodes[0]
        .changes
        .iter()
        .find(|c| c.at_ns > cut_at)
        .unwrap();
    assert_eq!(
        (a.to, a.diag, a.cause),
        (
            State::Down,
            Diagnostic::EchoFunctionFailed,
            Cause::EchoFailed
        )
    );
    assert!(
        a.at_ns - cut_at <= 150 * MS + 2 * MS,
        "{}",
        a.at_ns - cut_at
    );
    assert_eq!(a.client_action(), ClientAction::Down);
    // B learns it through A's Down.
    assert_eq!(sim.state(1), State::Down);
    assert_eq!(
        sim.nodes[1].session.remote().diag,
        Diagnostic::EchoFunctionFailed
    );
    // With control alone (A without echo now), they come back Up.
    sim.event(0, Event::ParametersChanged(Parameters::default()));
    sim.run_until(10 * SEC);
    assert!(sim.both_up());
    assert!(!sim.nodes[0].session.echo_active());
    // A no longer advertises an echo RX, so B must stop echoing too.
    assert_eq!(sim.nodes[0].session.status().advertised_min_echo_rx_us, 0);
    assert!(!sim.nodes[1].session.echo_active());
}

#[test]
fn sim_at_50ms_detects_within_150ms() {
    let p = Parameters {
        transmit_interval_ms: 50,
        receive_interval_ms: 50,
        ..Default::default()
    };
    let mut sim = Sim::new(p, p);
    sim.start_both();
    sim.run_until(5 * SEC);
    assert!(sim.both_up());
    assert_eq!(sim.nodes[0].session.detection_time_us(), 150_000);
    let gaps = sim.gaps(0, 3 * SEC);
    assert!(
        gaps.iter().all(|g| (37_500_000..=50 * MS).contains(g)),
        "{gaps:?}"
    );
    sim.cut[1] = true;
    sim.run_until(6 * SEC);
    let down = sim.nodes[0].changes.last().unwrap();
    assert_eq!(down.diag, Diagnostic::ControlDetectionTimeExpired);
    assert_eq!(
        down.at_ns - sim.nodes[0].session.status().last_rx_ns.unwrap(),
        150 * MS
    );
}

// ---- random event sequences ----

mod random {
    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Step {
        Packet {
            state: u8,
            poll: bool,
            fin: bool,
            demand: bool,
            mult: u8,
            tx_ms: u16,
            rx_ms: u16,
            echo_ms: u16,
            ttl_ok: bool,
        },
        Fire(u8),
        Echo(u8),
        AdminUp,
        AdminDown,
        Params {
            tx: u32,
            rx: u32,
            mult: u32,
            echo: bool,
            passive: bool,
        },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0u8..4, any::<(bool, bool, bool)>(), 1u8..6, 0u16..400, 0u16..400, 0u16..100, proptest::bool::weighted(0.9))
                .prop_map(|(state, (poll, fin, demand), mult, tx_ms, rx_ms, echo_ms, ttl_ok)| Step::Packet {
                    state, poll, fin: fin && !poll, demand, mult, tx_ms, rx_ms, echo_ms, ttl_ok
                }),
            4 => (0u8..4).prop_map(Step::Fire),
            1 => (0u8..4).prop_map(Step::Echo),
            1 => Just(Step::AdminUp),
            1 => Just(Step::AdminDown),
            1 => (10u32..2000, 10u32..2000, 1u32..6, any::<bool>(), any::<bool>())
                .prop_map(|(tx, rx, mult, echo, passive)| Step::Params { tx, rx, mult, echo, passive }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Whatever happens: every packet we send passes our own reception
        /// checks, timers are never armed in the past, the action stream
        /// mirrors the session's timers, Up implies a known remote, and echo
        /// runs only when allowed.
        #[test]
        fn invariants_hold(steps in proptest::collection::vec(step(), 1..120), gaps in proptest::collection::vec(0u64..400, 120)) {
            let mut s = new_session(Parameters { echo_mode: true, ..Default::default() });
            let mut timers = [None; 4];
            let mut now = 0u64;
            let mut sent_echoes: Vec<EchoPacket> = vec![];
            let mut actions = s.start(now);
            for (i, step) in steps.into_iter().enumerate() {
                for action in &actions {
                    match action {
                        Action::SendControl(p) => {
                            prop_assert_eq!(ControlPacket::decode(&p.to_vec()), Ok(*p));
                            prop_assert_eq!(p.my_discr, LOCAL);
                        }
                        Action::SendEcho(e) => sent_echoes.push(*e),
                        Action::ArmTimer { timer, at_ns, .. } => {
                            prop_assert!(*at_ns >= now);
                            timers[timer.index()] = Some(*at_ns);
                        }
                        Action::CancelTimer(timer) => timers[timer.index()] = None,
                        Action::StateChanged(c) => {
                            prop_assert_ne!(c.from, c.to);
                            prop_assert_eq!(c.to, s.state());
                        }
                    }
                }
                for t in Timer::ALL {
                    prop_assert_eq!(timers[t.index()], s.deadline(t));
                }
                if s.state() == State::Up {
                    prop_assert_ne!(s.remote().discr, 0);
                    prop_assert!(s.params().transmit_interval_us() == s.status().advertised_min_tx_us);
                } else {
                    prop_assert!(s.status().advertised_min_tx_us >= SLOW_TX_INTERVAL_US);
                    prop_assert!(!s.poll_in_progress());
                }
                if s.echo_active() {
                    prop_assert_eq!(s.state(), State::Up);
                    prop_assert_ne!(s.remote().required_min_echo_rx_us, 0);
                }
                now += gaps[i] * MS;
                let event = match step {
                    Step::Packet { state, poll, fin, demand, mult, tx_ms, rx_ms, echo_ms, ttl_ok } => {
                        let state = State::from_bits(state);
                        let packet = ControlPacket {
                            poll,
                            final_: fin,
                            demand,
                            detect_mult: mult,
                            desired_min_tx_us: u32::from(tx_ms) * 1000,
                            required_min_rx_us: u32::from(rx_ms) * 1000,
                            required_min_echo_rx_us: u32::from(echo_ms) * 1000,
                            ..remote(state)
                        };
                        Event::Received { packet, source: ip("10.0.0.2"), ttl: if ttl_ok { 255 } else { 254 } }
                    }
                    Step::Fire(t) => {
                        let timer = Timer::ALL[usize::from(t)];
                        match s.deadline(timer) {
                            Some(at) => {
                                // Fire it, late if time has passed it already.
                                now = now.max(at);
                                timers[timer.index()] = None;
                                Event::TimerExpired(timer)
                            }
                            None => Event::TimerExpired(timer),
                        }
                    }
                    Step::Echo(k) => match sent_echoes.iter().rev().nth(usize::from(k)) {
                        Some(e) => Event::EchoReceived(*e),
                        None => Event::EchoReceived(EchoPacket { discriminator: LOCAL, sequence: 9, tx_time_ns: 0 }),
                    },
                    Step::AdminUp => Event::AdminUp,
                    Step::AdminDown => Event::AdminDown,
                    Step::Params { tx, rx, mult, echo, passive } => Event::ParametersChanged(Parameters {
                        transmit_interval_ms: tx,
                        receive_interval_ms: rx,
                        detect_multiplier: mult,
                        echo_mode: echo,
                        passive_mode: passive,
                        ..Default::default()
                    }),
                };
                // Timers that passed without being fired: fire them first, in order.
                while let Some((timer, at)) = s.next_deadline().filter(|&(_, at)| at < now) {
                    timers[timer.index()] = None;
                    let out = s.handle(Event::TimerExpired(timer), at);
                    for action in &out {
                        match action {
                            Action::ArmTimer { timer, at_ns, .. } => {
                                prop_assert!(*at_ns >= at, "{:?} armed at {} < {}", timer, at_ns, at);
                                timers[timer.index()] = Some(*at_ns);
                            }
                            Action::CancelTimer(timer) => timers[timer.index()] = None,
                            Action::SendControl(p) => prop_assert!(ControlPacket::decode(&p.to_vec()).is_ok()),
                            Action::SendEcho(e) => sent_echoes.push(*e),
                            Action::StateChanged(_) => {}
                        }
                    }
                    if s.deadline(timer) == Some(at) {
                        prop_assert!(false, "{:?} did not move after firing", timer);
                    }
                }
                actions = s.handle(event, now);
            }
        }
    }
}
