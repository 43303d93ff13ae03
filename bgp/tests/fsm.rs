//! The session state machine: the RFC 4271 section 8.2.2 state x event
//! table, collisions, timers, connect retry, ASN and identifier checks,
//! the router ID rule and the closing behaviours.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use bgp::fsm::{
    CeaseSubcode, Config, ConnId, Direction, DownReason, FsmEvent, FsmState, Input,
    OPEN_SENT_HOLD_TIME, Output, PeerAs, RequiredCapability, ResendCause, Role, Session, Timer,
    collision_winner, crc32, router_id,
};
use bgp::state::FamilyDisabled;
use bgp::wire::{
    AS_TRANS, Afi, Bytes, Capability, ErrorSite, Family, GracefulRestart, GracefulRestartFamily,
    HoldTime, Message, Notification, Open, RouteRefresh, RouteRefreshSubtype, Safi, Update,
    UpdateError,
};

const LOCAL_AS: u32 = 64512;
const PEER_AS: u32 = 64513;
const OUR_ID: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const PEER_ID_HIGH: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 9);
const PEER_ID_LOW: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 0);

fn local() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(OUR_ID), 40000)
}

fn remote() -> SocketAddr {
    "10.0.0.2:179".parse().unwrap()
}

fn config() -> Config {
    Config::new(LOCAL_AS, PeerAs::Fixed(PEER_AS), "node-1")
}

fn session(config: Config) -> Session {
    Session::new(config).expect("valid config")
}

/// The peer's capabilities: both unicast families, 4-octet AS, route
/// refresh.
fn peer_caps(asn: u32) -> Vec<Capability> {
    vec![
        Capability::Multiprotocol(Family::IPV4_UNICAST),
        Capability::Multiprotocol(Family::IPV6_UNICAST),
        Capability::RouteRefresh,
        Capability::FourOctetAs(asn),
    ]
}

fn open_from(asn: u32, id: Ipv4Addr, hold: u16, caps: Vec<Capability>) -> Message {
    Message::Open(Open::new(asn, HoldTime::new(hold).unwrap(), id, caps))
}

fn peer_open(id: Ipv4Addr) -> Message {
    open_from(PEER_AS, id, 90, peer_caps(PEER_AS))
}

fn tcp_acked(conn: ConnId) -> Input {
    Input::TcpCrAcked {
        conn,
        local: local(),
        remote: remote(),
        interface_v4: None,
    }
}

fn tcp_confirmed(conn: ConnId) -> Input {
    Input::TcpConnectionConfirmed {
        conn,
        local: local(),
        remote: SocketAddr::new(remote().ip(), 50123),
        interface_v4: None,
    }
}

fn received(conn: ConnId, message: Message) -> Input {
    Input::MessageReceived { conn, message }
}

const A1: ConnId = ConnId::active(1);
const A2: ConnId = ConnId::active(2);
const P1: ConnId = ConnId::passive(1);
const P2: ConnId = ConnId::passive(2);

/// Notifications sent, with the connection.
fn sent(out: &[Output]) -> Vec<(ConnId, Notification)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send {
                conn,
                message: Message::Notification(n),
            } => Some((*conn, n.clone())),
            _ => None,
        })
        .collect()
}

fn sent_messages(out: &[Output], conn: ConnId) -> Vec<Message> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send { conn: c, message } if *c == conn => Some(message.clone()),
            _ => None,
        })
        .collect()
}

fn closed(out: &[Output]) -> Vec<ConnId> {
    out.iter()
        .filter_map(|o| match o {
            Output::CloseConnection { conn } => Some(*conn),
            _ => None,
        })
        .collect()
}

fn timer_set(out: &[Output], timer: Timer) -> Option<Duration> {
    out.iter().rev().find_map(|o| match o {
        Output::SetTimer { timer: t, duration } if *t == timer => Some(*duration),
        _ => None,
    })
}

fn timer_cancelled(out: &[Output], timer: Timer) -> bool {
    out.iter()
        .any(|o| matches!(o, Output::CancelTimer { timer: t } if *t == timer))
}

fn connects(out: &[Output]) -> Vec<ConnId> {
    out.iter()
        .filter_map(|o| match o {
            Output::Connect { conn } => Some(*conn),
            _ => None,
        })
        .collect()
}

fn negotiated(out: &[Output]) -> Option<bgp::fsm::SessionParams> {
    out.iter().find_map(|o| match o {
        Output::Negotiated(p) => Some((**p).clone()),
        _ => None,
    })
}

fn session_down(out: &[Output]) -> Option<Output> {
    out.iter()
        .find(|o| matches!(o, Output::SessionDown { .. }))
        .cloned()
}

fn our_open(out: &[Output], conn: ConnId) -> Open {
    sent_messages(out, conn)
        .into_iter()
        .find_map(|m| match m {
            Message::Open(o) => Some(o),
            _ => None,
        })
        .expect("an OPEN was sent")
}

/// Drives a fresh session with `config` to `state` over connection A1
/// (Active is reached the RFC way: OpenSent, then the connection fails).
fn at(config: Config, state: FsmState) -> Session {
    let mut s = session(config);
    let steps: &[Input] = match state {
        FsmState::Idle => &[],
        FsmState::Connect => &[Input::ManualStart],
        FsmState::Active => &[
            Input::ManualStart,
            tcp_acked(A1),
            Input::TcpConnectionFails { conn: A1 },
        ],
        FsmState::OpenSent => &[Input::ManualStart, tcp_acked(A1)],
        FsmState::OpenConfirm => &[
            Input::ManualStart,
            tcp_acked(A1),
            received(A1, peer_open(PEER_ID_HIGH)),
        ],
        FsmState::Established => &[
            Input::ManualStart,
            tcp_acked(A1),
            received(A1, peer_open(PEER_ID_HIGH)),
            received(A1, Message::Keepalive),
        ],
    };
    for input in steps {
        s.process(input.clone());
    }
    assert_eq!(s.state(), state, "setup");
    s
}

// ----------------------------------------------------------------------
// The state x event table (RFC 4271 section 8.2.2)
// ----------------------------------------------------------------------

/// The events of RFC 4271 section 8.1 we implement (plus ROUTE-REFRESH and
/// the closing inputs), each applied to connection A1 where it needs one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    ManualStart,        // 1
    ManualStop,         // 2
    AutomaticStart,     // 3
    AutomaticStop,      // 8 (Reset: BFD down)
    ConnectRetryExpiry, // 9
    HoldExpiry,         // 10
    KeepaliveExpiry,    // 11
    IdleHoldExpiry,     // 13
    TcpCrAcked,         // 16
    TcpConfirmed,       // 17
    TcpFails,           // 18
    BgpOpen,            // 19
    BgpHeaderErr,       // 21
    BgpOpenMsgErr,      // 22
    NotifMsgVerErr,     // 24
    NotifMsg,           // 25
    KeepAliveMsg,       // 26
    UpdateMsg,          // 27
    UpdateMsgErr,       // 28
    RouteRefresh,
}

const EVENTS: [Ev; 20] = [
    Ev::ManualStart,
    Ev::ManualStop,
    Ev::AutomaticStart,
    Ev::AutomaticStop,
    Ev::ConnectRetryExpiry,
    Ev::HoldExpiry,
    Ev::KeepaliveExpiry,
    Ev::IdleHoldExpiry,
    Ev::TcpCrAcked,
    Ev::TcpConfirmed,
    Ev::TcpFails,
    Ev::BgpOpen,
    Ev::BgpHeaderErr,
    Ev::BgpOpenMsgErr,
    Ev::NotifMsgVerErr,
    Ev::NotifMsg,
    Ev::KeepAliveMsg,
    Ev::UpdateMsg,
    Ev::UpdateMsgErr,
    Ev::RouteRefresh,
];

const STATES: [FsmState; 6] = [
    FsmState::Idle,
    FsmState::Connect,
    FsmState::Active,
    FsmState::OpenSent,
    FsmState::OpenConfirm,
    FsmState::Established,
];

fn input_of(ev: Ev) -> Input {
    match ev {
        Ev::ManualStart => Input::ManualStart,
        Ev::ManualStop => Input::ManualStop {
            reason: "test".into(),
        },
        Ev::AutomaticStart => Input::AutomaticStart,
        Ev::AutomaticStop => Input::Reset {
            reason: "BFD down".into(),
        },
        Ev::ConnectRetryExpiry => Input::ConnectRetryTimerExpired,
        Ev::HoldExpiry => Input::HoldTimerExpired { conn: A1 },
        Ev::KeepaliveExpiry => Input::KeepaliveTimerExpired { conn: A1 },
        Ev::IdleHoldExpiry => Input::IdleHoldTimerExpired,
        Ev::TcpCrAcked => tcp_acked(A1),
        Ev::TcpConfirmed => tcp_confirmed(P1),
        Ev::TcpFails => Input::TcpConnectionFails { conn: A1 },
        Ev::BgpOpen => received(A1, peer_open(PEER_ID_HIGH)),
        Ev::BgpHeaderErr => Input::DecodeError {
            conn: A1,
            notification: Notification::ConnectionNotSynchronized,
        },
        Ev::BgpOpenMsgErr => Input::DecodeError {
            conn: A1,
            notification: Notification::UnsupportedOptionalParameter,
        },
        Ev::NotifMsgVerErr => received(
            A1,
            Message::Notification(Notification::UnsupportedVersionNumber { version: 4 }),
        ),
        Ev::NotifMsg => received(A1, Message::Notification(Notification::CeaseUnspecific)),
        Ev::KeepAliveMsg => received(A1, Message::Keepalive),
        Ev::UpdateMsg => received(
            A1,
            Message::Update(Update::end_of_rib(Family::IPV4_UNICAST)),
        ),
        Ev::UpdateMsgErr => Input::DecodeError {
            conn: A1,
            notification: Notification::MalformedAttributeList,
        },
        Ev::RouteRefresh => received(
            A1,
            Message::RouteRefresh(RouteRefresh::request(Family::IPV4_UNICAST)),
        ),
    }
}

/// Output kinds a row asserts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum K {
    /// No output at all (the event is ignored).
    Nothing,
    /// Output::Connect.
    Dial,
    /// Some connection closed.
    Close,
    /// Our OPEN sent.
    Open,
    /// A KEEPALIVE sent.
    Keepalive,
    Negotiated,
    /// Output::Established.
    Up,
    InitialUpdates,
    SetConnectRetry,
    SetHold,
    SetKeepalive,
    SetIdleHold,
    SessionDown,
}

struct Row {
    next: FsmState,
    /// The NOTIFICATION sent, if any (none sent otherwise).
    notification: Option<Notification>,
    kinds: &'static [K],
}

fn row(next: FsmState, notification: Option<Notification>, kinds: &'static [K]) -> Row {
    Row {
        next,
        notification,
        kinds,
    }
}

/// The expected outcome of each state x event pair. Comments give the RFC
/// 4271 8.2.2 rule, or the reading documented in `bgp::fsm` where a row
/// cannot occur (timers not set, connections not held).
fn expected(state: FsmState, ev: Ev) -> Row {
    use FsmState::*;
    use K::*;
    let fsm = |t: u8| match state {
        OpenSent => Notification::FsmUnexpectedInOpenSent { message_type: t },
        OpenConfirm => Notification::FsmUnexpectedInOpenConfirm { message_type: t },
        _ => Notification::FsmUnexpectedInEstablished { message_type: t },
    };
    let cease = Notification::AdministrativeShutdown { message: None };
    match (state, ev) {
        // Idle: start events connect; every other event is ignored, and a
        // connection is refused.
        (Idle, Ev::ManualStart | Ev::AutomaticStart) => {
            row(Connect, None, &[K::Dial, SetConnectRetry])
        }
        (Idle, Ev::TcpCrAcked | Ev::TcpConfirmed) => row(Idle, None, &[Close]),
        (Idle, _) => row(Idle, None, &[Nothing]),

        // Connect.
        (Connect, Ev::ManualStart | Ev::AutomaticStart) => row(Connect, None, &[Nothing]),
        (Connect, Ev::ManualStop) => row(Idle, None, &[Close]),
        // AutomaticStop: Idle, ConnectRetryCounter + 1, automatic restart.
        (Connect, Ev::AutomaticStop) => row(Idle, None, &[Close, SetIdleHold]),
        // Drop the attempt, restart the timer, connect again.
        (Connect, Ev::ConnectRetryExpiry) => row(Connect, None, &[Close, K::Dial, SetConnectRetry]),
        // Tcp_CR_Acked / TcpConnectionConfirmed: OPEN, hold timer 4 min.
        (Connect, Ev::TcpCrAcked) => row(OpenSent, None, &[K::Open, SetHold]),
        (Connect | Active, Ev::TcpConfirmed) => row(OpenSent, None, &[K::Open, SetHold]),
        // TcpConnectionFails: Idle (then the automatic restart).
        (Connect, Ev::TcpFails) => row(Idle, None, &[SetIdleHold]),
        // Timers not set; messages on no connection.
        (Connect, _) => row(Connect, None, &[Nothing]),

        // Active.
        (Active, Ev::ManualStart | Ev::AutomaticStart) => row(Active, None, &[Nothing]),
        (Active, Ev::ManualStop) => row(Idle, None, &[]),
        (Active, Ev::AutomaticStop) => row(Idle, None, &[SetIdleHold]),
        (Active, Ev::ConnectRetryExpiry) => row(Connect, None, &[K::Dial, SetConnectRetry]),
        // A1 is the connection that failed: a late report is refused.
        (Active, Ev::TcpCrAcked) => row(Active, None, &[Close]),
        (Active, _) => row(Active, None, &[Nothing]),

        // OpenSent, OpenConfirm, Established: stops send Cease.
        (OpenSent | OpenConfirm | Established, Ev::ManualStart | Ev::AutomaticStart) => {
            row(state, None, &[Nothing])
        }
        (OpenSent | OpenConfirm | Established, Ev::ManualStop) => {
            row(Idle, Some(cease), &[Close, SessionDown])
        }
        (OpenSent | OpenConfirm | Established, Ev::AutomaticStop) => row(
            Idle,
            Some(Notification::BfdDown),
            &[Close, SessionDown, SetIdleHold],
        ),
        (OpenSent | OpenConfirm | Established, Ev::HoldExpiry) => row(
            Idle,
            Some(Notification::HoldTimerExpired),
            &[Close, SessionDown, SetIdleHold],
        ),
        // A connection in OpenSent tracks a second connection (6.8).
        (OpenSent | OpenConfirm | Established, Ev::TcpConfirmed) => {
            row(state, None, &[K::Open, SetHold])
        }
        // A1 already carries the session: a repeated report is ignored.
        (OpenSent | OpenConfirm | Established, Ev::TcpCrAcked) => row(state, None, &[Nothing]),
        (OpenSent | OpenConfirm | Established, Ev::BgpHeaderErr) => row(
            Idle,
            Some(Notification::ConnectionNotSynchronized),
            &[Close, SessionDown],
        ),
        (OpenSent | OpenConfirm | Established, Ev::BgpOpenMsgErr) => row(
            Idle,
            Some(Notification::UnsupportedOptionalParameter),
            &[Close, SessionDown],
        ),
        // A received NOTIFICATION is never answered.
        (OpenSent | OpenConfirm | Established, Ev::NotifMsgVerErr | Ev::NotifMsg) => {
            row(Idle, None, &[Close, SessionDown])
        }

        // OpenSent.
        (OpenSent, Ev::TcpFails) => row(Active, None, &[Close, SessionDown, SetConnectRetry]),
        (OpenSent, Ev::BgpOpen) => row(
            OpenConfirm,
            None,
            &[Negotiated, K::Keepalive, SetHold, SetKeepalive],
        ),
        (OpenSent, Ev::KeepAliveMsg) => row(Idle, Some(fsm(4)), &[Close, SessionDown]),
        (OpenSent | OpenConfirm, Ev::UpdateMsg | Ev::UpdateMsgErr) => {
            row(Idle, Some(fsm(2)), &[Close, SessionDown])
        }
        (OpenSent | OpenConfirm, Ev::RouteRefresh) => {
            row(Idle, Some(fsm(5)), &[Close, SessionDown])
        }
        (OpenSent, _) => row(OpenSent, None, &[Nothing]),

        // OpenConfirm.
        (OpenConfirm | Established, Ev::KeepaliveExpiry) => {
            row(state, None, &[K::Keepalive, SetKeepalive])
        }
        (OpenConfirm | Established, Ev::TcpFails) => {
            row(Idle, None, &[Close, SessionDown, SetIdleHold])
        }
        (OpenConfirm | Established, Ev::BgpOpen) => row(Idle, Some(fsm(1)), &[Close, SessionDown]),
        (OpenConfirm, Ev::KeepAliveMsg) => row(Established, None, &[Up, InitialUpdates, SetHold]),
        (OpenConfirm, _) => row(OpenConfirm, None, &[Nothing]),

        // Established.
        (Established, Ev::KeepAliveMsg | Ev::UpdateMsg) => row(Established, None, &[SetHold]),
        (Established, Ev::UpdateMsgErr) => row(
            Idle,
            Some(Notification::MalformedAttributeList),
            &[Close, SessionDown],
        ),
        (Established, Ev::RouteRefresh) => row(Established, None, &[SetHold, InitialUpdates]),
        (Established, _) => row(Established, None, &[Nothing]),
    }
}

fn has_kind(out: &[Output], k: K) -> bool {
    match k {
        K::Nothing => out.is_empty(),
        K::Dial => !connects(out).is_empty(),
        K::Close => !closed(out).is_empty(),
        K::Open => out.iter().any(|o| {
            matches!(
                o,
                Output::Send {
                    message: Message::Open(_),
                    ..
                }
            )
        }),
        K::Keepalive => out.iter().any(|o| {
            matches!(
                o,
                Output::Send {
                    message: Message::Keepalive,
                    ..
                }
            )
        }),
        K::Negotiated => negotiated(out).is_some(),
        K::Up => out.iter().any(|o| matches!(o, Output::Established { .. })),
        K::InitialUpdates => out
            .iter()
            .any(|o| matches!(o, Output::SendInitialUpdates { .. })),
        K::SetConnectRetry => timer_set(out, Timer::ConnectRetry).is_some(),
        K::SetHold => out.iter().any(|o| {
            matches!(
                o,
                Output::SetTimer {
                    timer: Timer::Hold { .. },
                    ..
                }
            )
        }),
        K::SetKeepalive => out.iter().any(|o| {
            matches!(
                o,
                Output::SetTimer {
                    timer: Timer::Keepalive { .. },
                    ..
                }
            )
        }),
        K::SetIdleHold => timer_set(out, Timer::IdleHold).is_some(),
        K::SessionDown => session_down(out).is_some(),
    }
}

#[test]
fn every_state_and_event_of_rfc4271_section_8_2_2() {
    let mut checked = 0;
    for state in STATES {
        for ev in EVENTS {
            let mut s = at(config(), state);
            let out = s.process(input_of(ev));
            let want = expected(state, ev);
            let ctx = format!("{state:?} x {ev:?}: {out:#?}");
            assert_eq!(s.state(), want.next, "next state, {ctx}");
            let notifications: Vec<Notification> = sent(&out).into_iter().map(|(_, n)| n).collect();
            match &want.notification {
                Some(n) => assert_eq!(notifications, vec![n.clone()], "NOTIFICATION, {ctx}"),
                None => assert!(notifications.is_empty(), "no NOTIFICATION, {ctx}"),
            }
            for k in want.kinds {
                assert!(has_kind(&out, *k), "{k:?} expected, {ctx}");
            }
            // A change of state is always reported, with the event.
            let changes: Vec<_> = out
                .iter()
                .filter_map(|o| match o {
                    Output::StateChanged { from, to, .. } => Some((*from, *to)),
                    _ => None,
                })
                .collect();
            if want.next != state {
                assert_eq!(changes.last().map(|c| c.1), Some(want.next), "{ctx}");
                assert_eq!(changes.first().map(|c| c.0), Some(state), "{ctx}");
            } else {
                assert!(changes.is_empty(), "{ctx}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, STATES.len() * EVENTS.len());
}

#[test]
fn connect_retry_counter_follows_the_rfc() {
    // Errors count; ManualStop and a start reset.
    let mut s = at(config(), FsmState::Established);
    s.process(Input::HoldTimerExpired { conn: A1 });
    assert_eq!(s.connect_retry_counter(), 1);
    // NotifMsgVerErr in OpenSent does not count.
    let mut s = at(config(), FsmState::OpenSent);
    s.process(received(
        A1,
        Message::Notification(Notification::UnsupportedVersionNumber { version: 4 }),
    ));
    assert_eq!(s.connect_retry_counter(), 0);
    let mut s = at(config(), FsmState::OpenConfirm);
    s.process(Input::ManualStop { reason: "x".into() });
    assert_eq!(s.connect_retry_counter(), 0);
}

#[test]
fn state_changes_name_the_event() {
    let mut s = session(config());
    let out = s.process(Input::ManualStart);
    assert!(out.contains(&Output::StateChanged {
        from: FsmState::Idle,
        to: FsmState::Connect,
        reason: FsmEvent::ManualStart,
    }));
    assert_eq!(FsmEvent::ManualStart.number(), Some(1));
    assert_eq!(FsmEvent::UpdateMsgErr.number(), Some(28));
    assert_eq!(FsmEvent::RouteRefreshMsg.number(), None);
    s.process(tcp_acked(A1));
    let out = s.process(received(A1, open_from(65000, PEER_ID_HIGH, 90, vec![])));
    assert!(out.contains(&Output::StateChanged {
        from: FsmState::OpenSent,
        to: FsmState::Idle,
        reason: FsmEvent::BgpOpenMsgErr,
    }));
}

#[test]
fn passive_tcp_establishment_waits_in_active() {
    let mut c = config();
    c.passive_tcp_establishment = true;
    let mut s = session(c);
    let out = s.process(Input::ManualStart);
    assert_eq!(s.state(), FsmState::Active);
    assert!(connects(&out).is_empty());
    assert!(out.contains(&Output::StateChanged {
        from: FsmState::Idle,
        to: FsmState::Active,
        reason: FsmEvent::ManualStartWithPassiveTcpEstablishment,
    }));
    let out = s.process(tcp_confirmed(P1));
    assert_eq!(s.state(), FsmState::OpenSent);
    assert_eq!(
        timer_set(&out, Timer::Hold { conn: P1 }),
        Some(OPEN_SENT_HOLD_TIME)
    );
    assert!(timer_cancelled(&out, Timer::ConnectRetry));
}

#[test]
fn full_handshake_outputs_in_order() {
    let mut s = session(config());
    let out = s.process(Input::ManualStart);
    assert_eq!(connects(&out), vec![A1]);
    let out = s.process(tcp_acked(A1));
    let open = our_open(&out, A1);
    assert_eq!(open.bgp_id, OUR_ID, "the session's local IPv4 address");
    assert_eq!(
        timer_set(&out, Timer::Hold { conn: A1 }),
        Some(Duration::from_secs(240))
    );
    let out = s.process(received(A1, peer_open(PEER_ID_HIGH)));
    // Negotiated comes before the KEEPALIVE: the driver switches codec
    // contexts first.
    let neg = out
        .iter()
        .position(|o| matches!(o, Output::Negotiated(_)))
        .unwrap();
    let ka = out
        .iter()
        .position(|o| {
            matches!(
                o,
                Output::Send {
                    message: Message::Keepalive,
                    ..
                }
            )
        })
        .unwrap();
    assert!(neg < ka);
    let p = negotiated(&out).unwrap();
    assert_eq!(p.peer_as, PEER_AS);
    assert!(!p.ibgp);
    assert!(!p.decode.ibgp);
    assert!(p.decode.four_octet_as && p.encode.four_octet_as);
    assert_eq!(p.peer_id, PEER_ID_HIGH);
    assert_eq!(p.local_id, OUR_ID);
    assert!(p.families_disabled.is_empty());
    let out = s.process(received(A1, Message::Keepalive));
    assert_eq!(
        out.iter()
            .filter(|o| matches!(
                o,
                Output::StateChanged { .. }
                    | Output::Established { .. }
                    | Output::SendInitialUpdates { .. }
            ))
            .cloned()
            .collect::<Vec<_>>(),
        vec![
            Output::StateChanged {
                from: FsmState::OpenConfirm,
                to: FsmState::Established,
                reason: FsmEvent::KeepAliveMsg,
            },
            Output::Established { conn: A1 },
            Output::SendInitialUpdates {
                conn: A1,
                families: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
                cause: ResendCause::Established,
            },
        ]
    );
    assert_eq!(s.params().unwrap().conn, A1);
}

// ----------------------------------------------------------------------
// Collisions (RFC 4271 6.8)
// ----------------------------------------------------------------------

/// OpenSent on A1, the peer's connection P1 tracked.
fn colliding() -> Session {
    let mut s = at(config(), FsmState::OpenSent);
    let out = s.process(tcp_confirmed(P1));
    assert!(matches!(our_open(&out, P1), Open { .. }));
    assert_eq!(s.connections().len(), 2);
    s
}

fn collision_cease(out: &[Output], loser: ConnId) {
    assert_eq!(
        sent(out),
        vec![(loser, Notification::ConnectionCollisionResolution)]
    );
    assert_eq!(closed(out), vec![loser]);
    assert!(session_down(out).is_none(), "the session goes on: {out:#?}");
}

#[test]
fn collision_our_identifier_higher_keeps_our_connection() {
    // The peer's OPEN arrives first on its own connection.
    // It moves P1 to OpenConfirm: A1, still in OpenSent, is compared when
    // its own OPEN arrives (RFC 4271 6.8 examines OpenConfirm connections).
    let mut s = colliding();
    let out = s.process(received(P1, peer_open(PEER_ID_LOW)));
    assert!(sent(&out).is_empty());
    assert_eq!(s.state(), FsmState::OpenConfirm);
    let out = s.process(received(A1, peer_open(PEER_ID_LOW)));
    collision_cease(&out, P1);
    assert_eq!(s.connections(), vec![(A1, FsmState::OpenConfirm)]);

    // The other way round: OPEN on ours first, then on the peer's.
    let mut s = colliding();
    s.process(received(A1, peer_open(PEER_ID_LOW)));
    assert_eq!(s.state(), FsmState::OpenConfirm);
    let out = s.process(received(P1, peer_open(PEER_ID_LOW)));
    collision_cease(&out, P1);
    assert_eq!(s.connections(), vec![(A1, FsmState::OpenConfirm)]);
}

#[test]
fn collision_our_identifier_lower_keeps_the_peers_connection() {
    let mut s = colliding();
    s.process(received(P1, peer_open(PEER_ID_HIGH)));
    let out = s.process(received(A1, peer_open(PEER_ID_HIGH)));
    collision_cease(&out, A1);
    assert!(
        negotiated(&out).is_none(),
        "the losing OPEN is not negotiated"
    );
    assert_eq!(s.connections(), vec![(P1, FsmState::OpenConfirm)]);

    // Ours in OpenConfirm already, the peer's OPEN then wins.
    let mut s = colliding();
    s.process(received(A1, peer_open(PEER_ID_HIGH)));
    let out = s.process(received(P1, peer_open(PEER_ID_HIGH)));
    collision_cease(&out, A1);
    assert!(timer_cancelled(&out, Timer::Hold { conn: A1 }));
    assert!(timer_cancelled(&out, Timer::Keepalive { conn: A1 }));
    assert_eq!(s.connections(), vec![(P1, FsmState::OpenConfirm)]);
    s.process(received(P1, Message::Keepalive));
    assert_eq!(s.state(), FsmState::Established);
}

#[test]
fn collision_established_connection_always_wins() {
    // Ours Established, the peer (higher identifier) connects again.
    let mut s = at(config(), FsmState::Established);
    let out = s.process(tcp_confirmed(P1));
    our_open(&out, P1);
    let out = s.process(received(P1, peer_open(PEER_ID_HIGH)));
    collision_cease(&out, P1);
    assert_eq!(s.state(), FsmState::Established);
    assert_eq!(s.connections(), vec![(A1, FsmState::Established)]);

    // The peer's connection Established (our identifier higher), then our
    // attempt completes late: refused, the session stays.
    let mut s = session(config());
    s.process(Input::ManualStart);
    s.process(tcp_confirmed(P1));
    s.process(received(P1, peer_open(PEER_ID_LOW)));
    let out = s.process(received(P1, Message::Keepalive));
    assert_eq!(s.state(), FsmState::Established);
    assert_eq!(closed(&out), vec![A1], "our pending attempt is abandoned");
    let out = s.process(tcp_acked(A1));
    assert_eq!(closed(&out), vec![A1]);
    assert_eq!(s.connections(), vec![(P1, FsmState::Established)]);
}

#[test]
fn collision_equal_identifiers_larger_as_wins() {
    assert_eq!(collision_winner(OUR_ID, OUR_ID, 65002, 65001), Role::Active);
    assert_eq!(
        collision_winner(OUR_ID, OUR_ID, 65001, 65002),
        Role::Passive
    );
    // eBGP peer with our identifier (allowed by RFC 6286): PEER_AS is
    // larger, so its connection wins.
    let mut s = colliding();
    s.process(received(A1, peer_open(OUR_ID)));
    let out = s.process(received(P1, peer_open(OUR_ID)));
    collision_cease(&out, A1);
    assert!(negotiated(&out).is_some());
}

#[test]
fn a_new_inbound_connection_replaces_an_unfinished_one() {
    let mut s = session(config());
    s.process(Input::ManualStart);
    s.process(tcp_confirmed(P1));
    let out = s.process(tcp_confirmed(P2));
    assert_eq!(closed(&out), vec![P1]);
    assert_eq!(s.connections(), vec![(P2, FsmState::OpenSent)]);
    // Events about P1 are now ignored.
    assert!(s.process(received(P1, peer_open(PEER_ID_HIGH))).is_empty());
    // A passive id reported as our own connection is a driver bug: closed.
    let out = s.process(tcp_acked(ConnId::passive(9)));
    assert_eq!(closed(&out), vec![ConnId::passive(9)]);
}

#[test]
fn losing_the_last_connection_of_a_collision_pair_reports_the_session() {
    let mut s = colliding();
    let out = s.process(Input::TcpConnectionFails { conn: P1 });
    assert!(session_down(&out).is_none());
    assert_eq!(s.state(), FsmState::OpenSent);
    let out = s.process(Input::TcpConnectionFails { conn: A1 });
    assert!(session_down(&out).is_some());
    assert_eq!(s.state(), FsmState::Active);
}

// ----------------------------------------------------------------------
// Timers
// ----------------------------------------------------------------------

fn negotiate_with(config: Config, peer_hold: u16) -> (Session, Vec<Output>) {
    let mut s = at(config, FsmState::OpenSent);
    let out = s.process(received(
        A1,
        open_from(PEER_AS, PEER_ID_HIGH, peer_hold, peer_caps(PEER_AS)),
    ));
    (s, out)
}

#[test]
fn hold_time_is_the_smaller_and_keepalive_a_third() {
    let (_, out) = negotiate_with(config(), 30);
    let p = negotiated(&out).unwrap();
    assert_eq!((p.hold_time, p.keepalive_time), (30, 10));
    assert_eq!(
        timer_set(&out, Timer::Hold { conn: A1 }),
        Some(Duration::from_secs(30))
    );
    assert_eq!(
        timer_set(&out, Timer::Keepalive { conn: A1 }),
        Some(Duration::from_secs(10))
    );
    // Default 90 against 180.
    let (_, out) = negotiate_with(config(), 180);
    let p = negotiated(&out).unwrap();
    assert_eq!((p.hold_time, p.keepalive_time), (90, 30));
    // Our OPEN offers the default 90.
    let mut s = session(config());
    s.process(Input::ManualStart);
    let out = s.process(tcp_acked(A1));
    assert_eq!(our_open(&out, A1).hold_time.seconds(), 90);
}

#[test]
fn hold_time_zero_disables_both_timers() {
    let mut c = config();
    c.hold_time = Some(0);
    let (mut s, out) = negotiate_with(c, 90);
    let p = negotiated(&out).unwrap();
    assert_eq!((p.hold_time, p.keepalive_time), (0, 0));
    assert!(timer_set(&out, Timer::Keepalive { conn: A1 }).is_none());
    // OpenConfirm keeps a guard timer (see below).
    assert_eq!(
        timer_set(&out, Timer::Hold { conn: A1 }),
        Some(OPEN_SENT_HOLD_TIME)
    );
    let out = s.process(received(A1, Message::Keepalive));
    assert_eq!(s.state(), FsmState::Established);
    assert!(timer_cancelled(&out, Timer::Hold { conn: A1 }));
    assert!(timer_set(&out, Timer::Hold { conn: A1 }).is_none());
    assert!(s.armed_timers().is_empty(), "{:?}", s.armed_timers());
    // The peer's 0 does the same.
    let (_, out) = negotiate_with(config(), 0);
    assert_eq!(negotiated(&out).unwrap().hold_time, 0);
}

/// Hold time 0 negotiated: a peer that never sends its KEEPALIVE cannot
/// keep the session in OpenConfirm for ever; OpenSent's hold time guards
/// OpenConfirm and expires as a hold timer does.
#[test]
fn hold_time_zero_keeps_a_guard_timer_in_open_confirm() {
    let mut c = config();
    c.hold_time = Some(0);
    let (mut s, out) = negotiate_with(c, 90);
    assert_eq!(s.state(), FsmState::OpenConfirm);
    assert_eq!(
        timer_set(&out, Timer::Hold { conn: A1 }),
        Some(OPEN_SENT_HOLD_TIME)
    );
    assert!(s.armed_timers().contains(&Timer::Hold { conn: A1 }));
    let out = s.process(Input::HoldTimerExpired { conn: A1 });
    assert_eq!(sent(&out), vec![(A1, Notification::HoldTimerExpired)]);
    assert_eq!(closed(&out), vec![A1]);
    assert_eq!(s.state(), FsmState::Idle);
}

/// An OPEN body as the wire carries it.
fn open_body(version: u8, my_as: u16, hold: u16, id: [u8; 4], params: &[u8]) -> Bytes {
    let mut b = vec![version];
    b.extend_from_slice(&my_as.to_be_bytes());
    b.extend_from_slice(&hold.to_be_bytes());
    b.extend_from_slice(&id);
    b.push(u8::try_from(params.len()).unwrap());
    b.extend_from_slice(params);
    Bytes::from(b)
}

/// Feeds the codec's verdict on a malformed OPEN to a session in OpenSent
/// and returns what it sent.
fn refuse_open(body: Bytes) -> (Session, Vec<(ConnId, Notification)>) {
    let notification = Open::decode(body).expect_err("the codec refuses it");
    let mut s = at(config(), FsmState::OpenSent);
    let out = s.process(Input::DecodeError {
        conn: A1,
        notification,
    });
    assert_eq!(s.state(), FsmState::Idle);
    (s, sent(&out))
}

#[test]
fn peer_hold_time_of_one_second_is_unacceptable() {
    let (_, sent) = refuse_open(open_body(4, 64513, 1, [10, 0, 0, 9], &[]));
    assert_eq!(sent, vec![(A1, Notification::UnacceptableHoldTime)]);
    let (_, sent) = refuse_open(open_body(4, 64513, 2, [10, 0, 0, 9], &[]));
    assert_eq!(sent, vec![(A1, Notification::UnacceptableHoldTime)]);
}

#[test]
fn configured_keepalive_smaller_than_a_third_wins() {
    let mut c = config();
    c.keepalive_time = Some(5);
    let (_, out) = negotiate_with(c.clone(), 90);
    assert_eq!(negotiated(&out).unwrap().keepalive_time, 5);
    // Larger than a third of the negotiated hold time: the third.
    c.keepalive_time = Some(60);
    let (_, out) = negotiate_with(c, 30);
    assert_eq!(negotiated(&out).unwrap().keepalive_time, 10);
}

#[test]
fn keepalive_timer_and_update_sent() {
    let mut s = at(config(), FsmState::Established);
    let out = s.process(Input::KeepaliveTimerExpired { conn: A1 });
    assert_eq!(sent_messages(&out, A1), vec![Message::Keepalive]);
    assert_eq!(
        timer_set(&out, Timer::Keepalive { conn: A1 }),
        Some(Duration::from_secs(30))
    );
    // Writing an UPDATE restarts the keepalive timer.
    let out = s.process(Input::UpdateSent { conn: A1 });
    assert_eq!(
        out,
        vec![Output::SetTimer {
            timer: Timer::Keepalive { conn: A1 },
            duration: Duration::from_secs(30)
        }]
    );
    // A stale expiry (cancelled timer) is ignored.
    let out = s.process(Input::KeepaliveTimerExpired { conn: A2 });
    assert!(out.is_empty());
}

#[test]
fn hold_timer_expiry_sends_hold_timer_expired() {
    let mut s = at(config(), FsmState::Established);
    let out = s.process(Input::HoldTimerExpired { conn: A1 });
    assert_eq!(sent(&out), vec![(A1, Notification::HoldTimerExpired)]);
    assert_eq!(
        session_down(&out),
        Some(Output::SessionDown {
            conn: A1,
            reason: DownReason::HoldTimerExpired,
            notification: Some(bgp::fsm::NotificationEvent::sent(
                Notification::HoldTimerExpired
            )),
            was_established: true,
        })
    );
    assert_eq!(s.state(), FsmState::Idle);
    // Received messages restart the hold timer.
    let mut s = at(config(), FsmState::Established);
    let out = s.process(received(A1, Message::Keepalive));
    assert_eq!(
        timer_set(&out, Timer::Hold { conn: A1 }),
        Some(Duration::from_secs(90))
    );
}

/// RFC 9687: output waiting for the socket arms the SendHoldTimer, every
/// write that makes progress restarts it, an empty queue stops it; its
/// expiry closes with Send Hold Timer Expired (8/0) and goes Idle, from
/// OpenSent, OpenConfirm and Established alike.
#[test]
fn send_hold_timer_runs_while_output_waits_and_expires_to_idle() {
    let waiting = |conn| Input::SendProgress {
        conn,
        waiting: true,
    };
    // Default: max(8 min, 2 x hold time); the negotiated hold time once
    // known (90 s here), ours before.
    let mut s = at(config(), FsmState::Established);
    let out = s.process(waiting(A1));
    assert_eq!(
        timer_set(&out, Timer::SendHold { conn: A1 }),
        Some(Duration::from_secs(480))
    );
    // Progress with output still waiting restarts it.
    let out = s.process(waiting(A1));
    assert_eq!(
        timer_set(&out, Timer::SendHold { conn: A1 }),
        Some(Duration::from_secs(480))
    );
    // Everything written: stopped, and a late expiry is stale.
    let out = s.process(Input::SendProgress {
        conn: A1,
        waiting: false,
    });
    assert!(timer_cancelled(&out, Timer::SendHold { conn: A1 }));
    assert!(
        s.process(Input::SendHoldTimerExpired { conn: A1 })
            .is_empty()
    );
    assert_eq!(s.state(), FsmState::Established);

    let mut c = config();
    c.hold_time = Some(300);
    let mut s = at(c.clone(), FsmState::OpenSent);
    let out = s.process(waiting(A1));
    assert_eq!(
        timer_set(&out, Timer::SendHold { conn: A1 }),
        Some(Duration::from_secs(600))
    );

    c.send_hold_time = Some(2);
    for state in [
        FsmState::OpenSent,
        FsmState::OpenConfirm,
        FsmState::Established,
    ] {
        let mut s = at(c.clone(), state);
        let out = s.process(waiting(A1));
        assert_eq!(
            timer_set(&out, Timer::SendHold { conn: A1 }),
            Some(Duration::from_secs(2)),
            "{state:?}"
        );
        let out = s.process(Input::SendHoldTimerExpired { conn: A1 });
        assert_eq!(
            sent(&out),
            vec![(A1, Notification::SendHoldTimerExpired)],
            "{state:?}"
        );
        assert!(closed(&out).contains(&A1), "{state:?}");
        assert_eq!(s.state(), FsmState::Idle, "{state:?}");
        assert_eq!(s.connect_retry_counter(), 1, "{state:?}");
        if state == FsmState::Established {
            assert_eq!(
                session_down(&out),
                Some(Output::SessionDown {
                    conn: A1,
                    reason: DownReason::SendHoldTimerExpired,
                    notification: Some(bgp::fsm::NotificationEvent::sent(
                        Notification::SendHoldTimerExpired
                    )),
                    was_established: true,
                })
            );
        }
    }
    // Closing a connection stops its SendHoldTimer.
    let mut s = at(c.clone(), FsmState::Established);
    s.process(waiting(A1));
    let out = s.process(Input::TcpConnectionFails { conn: A1 });
    assert!(timer_cancelled(&out, Timer::SendHold { conn: A1 }));
    assert!(!s.armed_timers().contains(&Timer::SendHold { conn: A1 }));
    // 0 is refused.
    c.send_hold_time = Some(0);
    assert!(matches!(
        Session::new(c),
        Err(bgp::fsm::ConfigError::SendHoldTimeZero)
    ));
}

// ----------------------------------------------------------------------
// Connect retry
// ----------------------------------------------------------------------

fn retry_delays(mut s: Session, n: usize) -> Vec<u64> {
    let out = s.process(Input::ManualStart);
    let mut delays = vec![timer_set(&out, Timer::ConnectRetry).unwrap().as_secs()];
    for _ in 1..n {
        let out = s.process(Input::ConnectRetryTimerExpired);
        assert_eq!(connects(&out).len(), 1, "a new attempt each time");
        assert_eq!(closed(&out).len(), 1, "the old attempt abandoned");
        delays.push(timer_set(&out, Timer::ConnectRetry).unwrap().as_secs());
    }
    delays
}

/// The ConnectRetry timer bounding a handshake follows the 1, 2, 4... s
/// schedule but gives each handshake at least MIN_HANDSHAKE_TIME (3 s):
/// a 1 s bound abandoned every attempt before the kernel's first SYN
/// retransmission (after 1 s). Issue 13, Low list.
#[test]
fn connect_retry_exponential_schedule() {
    assert_eq!(bgp::fsm::MIN_HANDSHAKE_TIME, Duration::from_secs(3));
    assert_eq!(
        retry_delays(session(config()), 8),
        vec![3, 3, 4, 8, 16, 30, 30, 30]
    );
    // Passive: no handshake of ours to bound, the schedule as it is.
    let mut c = config();
    c.passive_tcp_establishment = true;
    let mut s = session(c);
    let out = s.process(Input::ManualStart);
    assert_eq!(s.state(), FsmState::Active);
    assert_eq!(
        timer_set(&out, Timer::ConnectRetry),
        Some(Duration::from_secs(1))
    );
}

#[test]
fn connect_retry_fixed_connect_time() {
    let mut c = config();
    c.connect_time = Some(10);
    assert_eq!(retry_delays(session(c), 4), vec![10, 10, 10, 10]);
}

#[test]
fn refused_connections_back_off_through_idle_hold() {
    let mut s = session(config());
    let mut delays = Vec::new();
    let mut out = s.process(Input::ManualStart);
    for _ in 0..7 {
        let conn = connects(&out)[0];
        out = s.process(Input::TcpConnectionFails { conn });
        assert_eq!(s.state(), FsmState::Idle);
        delays.push(timer_set(&out, Timer::IdleHold).unwrap().as_secs());
        out = s.process(Input::IdleHoldTimerExpired);
        assert_eq!(s.state(), FsmState::Connect);
    }
    assert_eq!(delays, vec![1, 2, 4, 8, 16, 30, 30]);
}

#[test]
fn connect_retry_schedule_resets_on_established() {
    let mut s = session(config());
    let mut out = s.process(Input::ManualStart);
    for _ in 0..4 {
        let conn = connects(&out)[0];
        s.process(Input::TcpConnectionFails { conn });
        out = s.process(Input::IdleHoldTimerExpired);
    }
    assert_eq!(
        timer_set(&out, Timer::ConnectRetry),
        Some(Duration::from_secs(16))
    );
    let conn = connects(&out)[0];
    s.process(tcp_acked(conn));
    s.process(received(conn, peer_open(PEER_ID_HIGH)));
    s.process(received(conn, Message::Keepalive));
    assert_eq!(s.state(), FsmState::Established);
    let out = s.process(Input::TcpConnectionFails { conn });
    assert_eq!(
        timer_set(&out, Timer::IdleHold),
        Some(Duration::from_secs(1))
    );
    let out = s.process(Input::IdleHoldTimerExpired);
    assert_eq!(
        timer_set(&out, Timer::ConnectRetry),
        Some(bgp::fsm::MIN_HANDSHAKE_TIME)
    );
}

#[test]
fn no_automatic_restart_when_not_allowed_or_stopped() {
    let mut c = config();
    c.allow_automatic_start = false;
    let mut s = at(c, FsmState::Established);
    let out = s.process(Input::HoldTimerExpired { conn: A1 });
    assert!(timer_set(&out, Timer::IdleHold).is_none());
    // Stopping cancels a pending automatic restart.
    let mut s = at(config(), FsmState::Established);
    s.process(Input::TcpConnectionFails { conn: A1 });
    assert!(s.armed_timers().contains(&Timer::IdleHold));
    let out = s.process(Input::ManualStop { reason: "x".into() });
    assert!(timer_cancelled(&out, Timer::IdleHold));
    assert!(s.process(Input::IdleHoldTimerExpired).is_empty());
    assert_eq!(s.state(), FsmState::Idle);
}

// ----------------------------------------------------------------------
// ASN, identifier, capabilities
// ----------------------------------------------------------------------

fn open_outcome(config: Config, open: Message) -> (Session, Vec<Output>) {
    let mut s = at(config, FsmState::OpenSent);
    let out = s.process(received(A1, open));
    (s, out)
}

#[test]
fn fixed_peer_as_mismatch_is_bad_peer_as() {
    let (s, out) = open_outcome(
        config(),
        open_from(65000, PEER_ID_HIGH, 90, peer_caps(65000)),
    );
    assert_eq!(sent(&out), vec![(A1, Notification::BadPeerAs)]);
    assert_eq!(s.state(), FsmState::Idle);
    match session_down(&out) {
        Some(Output::SessionDown { reason, .. }) => assert_eq!(reason, DownReason::OpenRejected),
        other => panic!("{other:?}"),
    }
}

#[test]
fn dynamic_asn_internal_and_external() {
    let internal = Config::new(LOCAL_AS, PeerAs::Internal, "n");
    let external = Config::new(LOCAL_AS, PeerAs::External, "n");
    let ours = open_from(LOCAL_AS, PEER_ID_HIGH, 90, peer_caps(LOCAL_AS));
    let theirs = peer_open(PEER_ID_HIGH);

    let (s, out) = open_outcome(internal.clone(), ours.clone());
    assert_eq!(s.state(), FsmState::OpenConfirm);
    let p = negotiated(&out).unwrap();
    assert!(p.ibgp && p.decode.ibgp);
    assert_eq!(p.peer_as, LOCAL_AS);
    let (_, out) = open_outcome(internal, theirs.clone());
    assert_eq!(sent(&out), vec![(A1, Notification::BadPeerAs)]);

    let (s, out) = open_outcome(external.clone(), theirs);
    assert_eq!(s.state(), FsmState::OpenConfirm);
    assert!(!negotiated(&out).unwrap().ibgp);
    let (_, out) = open_outcome(external, ours);
    assert_eq!(sent(&out), vec![(A1, Notification::BadPeerAs)]);
}

#[test]
fn dynamic_asn_uses_the_four_octet_capability_and_as_trans_otherwise() {
    let big = 4_200_000_000;
    let internal = Config::new(big, PeerAs::Internal, "n");
    // My AS carries AS_TRANS; the capability carries the real AS.
    let open = open_from(big, PEER_ID_HIGH, 90, peer_caps(big));
    match &open {
        Message::Open(o) => assert_eq!(o.my_as, AS_TRANS),
        _ => unreachable!(),
    }
    let (s, _) = open_outcome(internal.clone(), open);
    assert_eq!(s.state(), FsmState::OpenConfirm);
    // Without the capability the peer's AS is AS_TRANS itself.
    let two_octet = Message::Open(Open {
        my_as: AS_TRANS,
        ..match open_from(1, PEER_ID_HIGH, 90, vec![]) {
            Message::Open(o) => o,
            _ => unreachable!(),
        }
    });
    let (_, out) = open_outcome(internal, two_octet.clone());
    assert_eq!(sent(&out), vec![(A1, Notification::BadPeerAs)]);
    let (s, out) = open_outcome(
        Config::new(LOCAL_AS, PeerAs::Fixed(u32::from(AS_TRANS)), "n"),
        two_octet,
    );
    assert_eq!(s.state(), FsmState::OpenConfirm);
    let p = negotiated(&out).unwrap();
    assert!(!p.negotiated.four_octet_as);
    assert!(!p.encode.four_octet_as);
}

#[test]
fn local_asn_is_sent_in_place_of_my_asn() {
    let mut c = Config::new(LOCAL_AS, PeerAs::Internal, "n");
    c.local_as = Some(65100);
    let mut s = session(c.clone());
    s.process(Input::ManualStart);
    let out = s.process(tcp_acked(A1));
    let open = our_open(&out, A1);
    assert_eq!(open.my_as, 65100);
    assert_eq!(open.asn(), 65100);
    assert!(
        open.capabilities()
            .any(|c| *c == Capability::FourOctetAs(65100))
    );
    // Internal means the peer is in the AS we present.
    let (s, out) = open_outcome(c, open_from(65100, PEER_ID_HIGH, 90, peer_caps(65100)));
    assert_eq!(s.state(), FsmState::OpenConfirm);
    let p = negotiated(&out).unwrap();
    assert_eq!((p.local_as, p.ibgp), (65100, true));
}

#[test]
fn as_trans_in_our_open_above_65535() {
    let c = Config::new(4_200_000_000, PeerAs::Fixed(PEER_AS), "n");
    let mut s = session(c);
    s.process(Input::ManualStart);
    let out = s.process(tcp_acked(A1));
    let open = our_open(&out, A1);
    assert_eq!(open.my_as, AS_TRANS);
    assert!(
        open.capabilities()
            .any(|c| *c == Capability::FourOctetAs(4_200_000_000))
    );
    assert_eq!(open.asn(), 4_200_000_000);
}

#[test]
fn bad_bgp_identifier() {
    // iBGP peer with our identifier.
    let internal = Config::new(LOCAL_AS, PeerAs::Internal, "n");
    let (_, out) = open_outcome(
        internal,
        open_from(LOCAL_AS, OUR_ID, 90, peer_caps(LOCAL_AS)),
    );
    assert_eq!(sent(&out), vec![(A1, Notification::BadBgpIdentifier)]);
    // An eBGP peer may share it (RFC 6286).
    let (s, _) = open_outcome(config(), peer_open(OUR_ID));
    assert_eq!(s.state(), FsmState::OpenConfirm);
    // Zero, as the codec sees it, and as the FSM double-checks it.
    let (_, sent_) = refuse_open(open_body(4, 64513, 90, [0, 0, 0, 0], &[]));
    assert_eq!(sent_, vec![(A1, Notification::BadBgpIdentifier)]);
    let (_, out) = open_outcome(config(), peer_open(Ipv4Addr::UNSPECIFIED));
    assert_eq!(sent(&out), vec![(A1, Notification::BadBgpIdentifier)]);
}

#[test]
fn unsupported_version_and_optional_parameter() {
    let (_, sent_) = refuse_open(open_body(3, 64513, 90, [10, 0, 0, 9], &[]));
    let expected = Notification::UnsupportedVersionNumber { version: 4 };
    assert_eq!(expected.data().as_ref(), &[0, 4], "our version as data");
    assert_eq!(sent_, vec![(A1, expected)]);
    let (_, sent_) = refuse_open(open_body(4, 64513, 90, [10, 0, 0, 9], &[1, 2, 0, 0]));
    assert_eq!(
        sent_,
        vec![(A1, Notification::UnsupportedOptionalParameter)]
    );
}

#[test]
fn missing_required_capability_is_unsupported_capability() {
    let mut c = config();
    c.required_capabilities = vec![
        RequiredCapability::GracefulRestart,
        RequiredCapability::RouteRefresh,
    ];
    let (_, out) = open_outcome(c.clone(), peer_open(PEER_ID_HIGH));
    // Route refresh is offered; graceful restart is missing and listed.
    assert_eq!(
        sent(&out),
        vec![(
            A1,
            Notification::UnsupportedCapability {
                capabilities: Bytes::from_static(&[64, 2, 0, 0]),
            }
        )]
    );
    // Nothing is required by default.
    let (s, _) = open_outcome(config(), open_from(PEER_AS, PEER_ID_HIGH, 90, vec![]));
    assert_eq!(s.state(), FsmState::OpenConfirm);
}

#[test]
fn peer_without_mp_ipv6_gets_no_ipv6_and_state_says_why() {
    let caps = vec![
        Capability::Multiprotocol(Family::IPV4_UNICAST),
        Capability::FourOctetAs(PEER_AS),
    ];
    let (mut s, out) = open_outcome(config(), open_from(PEER_AS, PEER_ID_HIGH, 90, caps));
    let p = negotiated(&out).unwrap();
    assert_eq!(p.families(), &[Family::IPV4_UNICAST]);
    assert_eq!(p.families_disabled.len(), 1);
    let d = &p.families_disabled[0];
    assert_eq!(d.family, Family::IPV6_UNICAST);
    assert_eq!(d.reason, FamilyDisabled::NotSupportedByPeer);
    assert_eq!(d.text, "peer did not offer MP IPv6 unicast");
    let out = s.process(received(A1, Message::Keepalive));
    assert!(out.contains(&Output::SendInitialUpdates {
        conn: A1,
        families: vec![Family::IPV4_UNICAST],
        cause: ResendCause::Established,
    }));
    // A ROUTE-REFRESH for the family the session does not carry is ignored.
    let out = s.process(received(
        A1,
        Message::RouteRefresh(RouteRefresh::request(Family::IPV6_UNICAST)),
    ));
    assert!(!has_kind(&out, K::InitialUpdates));
    // So are the RFC 7313 demarcations.
    let out = s.process(received(
        A1,
        Message::RouteRefresh(RouteRefresh {
            family: Family::IPV4_UNICAST,
            subtype: RouteRefreshSubtype::BeginningOfRefresh,
        }),
    ));
    assert!(!has_kind(&out, K::InitialUpdates));
    assert_eq!(s.state(), FsmState::Established);
}

#[test]
fn rfc7606_session_reset_and_treat_as_withdraw() {
    // An NLRI field that does not parse resets the session.
    let mut s = at(config(), FsmState::Established);
    let bad = Update {
        errors: vec![UpdateError {
            site: ErrorSite::Nlri,
            notification: Notification::InvalidNetworkField,
        }],
        ..Update::default()
    };
    let out = s.process(received(A1, Message::Update(bad)));
    assert_eq!(sent(&out), vec![(A1, Notification::InvalidNetworkField)]);
    assert!(out.contains(&Output::StateChanged {
        from: FsmState::Established,
        to: FsmState::Idle,
        reason: FsmEvent::UpdateMsgErr,
    }));
    // A malformed ORIGIN is treat-as-withdraw: the session stays.
    let mut s = at(config(), FsmState::Established);
    let withdraw = Update {
        nlri: vec!["192.0.2.0/24".parse().unwrap()],
        errors: vec![UpdateError {
            site: ErrorSite::Attribute {
                type_code: 1,
                flags: 0x40,
            },
            notification: Notification::InvalidOriginAttribute {
                attribute: Bytes::from_static(&[0x40, 1, 1, 7]),
            },
        }],
        ..Update::default()
    };
    let out = s.process(received(A1, Message::Update(withdraw)));
    assert!(sent(&out).is_empty());
    assert_eq!(s.state(), FsmState::Established);
}

// ----------------------------------------------------------------------
// Router ID
// ----------------------------------------------------------------------

#[test]
fn router_id_rules() {
    let configured = Ipv4Addr::new(192, 0, 2, 1);
    let local_v4 = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7));
    let local_v6 = IpAddr::V6("2001:db8::7".parse::<Ipv6Addr>().unwrap());
    let iface = Ipv4Addr::new(203, 0, 113, 9);
    assert_eq!(
        router_id(Some(configured), Some(local_v4), Some(iface), "n"),
        configured
    );
    assert_eq!(
        router_id(None, Some(local_v4), Some(iface), "n"),
        Ipv4Addr::new(198, 51, 100, 7)
    );
    assert_eq!(router_id(None, Some(local_v6), Some(iface), "n"), iface);
    // An IPv4-mapped local address is IPv4.
    let mapped = IpAddr::V6(Ipv4Addr::new(198, 51, 100, 8).to_ipv6_mapped());
    assert_eq!(
        router_id(None, Some(mapped), None, "n"),
        Ipv4Addr::new(198, 51, 100, 8)
    );
    // CRC32 of the node name, laid out little-endian like MetalLB.
    // Reference: python3 -c 'import zlib; print(zlib.crc32(b"node-1"))'
    // prints 334634079 (0x13f21c5f).
    const CRC_NODE_1: u32 = 334_634_079;
    assert_eq!(crc32(b"node-1"), CRC_NODE_1);
    let id = router_id(None, Some(local_v6), None, "node-1");
    assert_eq!(id, Ipv4Addr::from(CRC_NODE_1.to_le_bytes()));
    assert_eq!(id, Ipv4Addr::new(95, 28, 242, 19));
    assert!(!id.is_unspecified());
    // Never 0.0.0.0: the empty name has CRC 0.
    assert_eq!(crc32(b""), 0);
    assert!(!router_id(None, None, None, "").is_unspecified());
}

#[test]
fn session_uses_the_router_id_rule_per_connection() {
    // IPv6 session, no routerID: the interface's IPv4, reported by the
    // driver with the connection.
    let mut s = session(config());
    s.process(Input::ManualStart);
    let out = s.process(Input::TcpCrAcked {
        conn: A1,
        local: "[2001:db8::1]:40000".parse().unwrap(),
        remote: "[2001:db8::2]:179".parse().unwrap(),
        interface_v4: Some(Ipv4Addr::new(203, 0, 113, 9)),
    });
    assert_eq!(our_open(&out, A1).bgp_id, Ipv4Addr::new(203, 0, 113, 9));
    // Configured wins.
    let mut c = config();
    c.router_id = Some(Ipv4Addr::new(192, 0, 2, 1));
    let mut s = session(c);
    s.process(Input::ManualStart);
    let out = s.process(tcp_acked(A1));
    assert_eq!(our_open(&out, A1).bgp_id, Ipv4Addr::new(192, 0, 2, 1));
}

// ----------------------------------------------------------------------
// Closing
// ----------------------------------------------------------------------

/// A configuration offering graceful restart, with or without the N bit.
fn gr_config(n_bit: bool) -> Config {
    let mut c = config();
    c.graceful_restart = Some(gr(n_bit));
    c
}

fn gr(n_bit: bool) -> GracefulRestart {
    GracefulRestart {
        flags: if n_bit {
            GracefulRestart::NOTIFICATION
        } else {
            0
        },
        restart_time: 120,
        families: vec![GracefulRestartFamily {
            family: Family::IPV4_UNICAST,
            flags: GracefulRestartFamily::FORWARDING_STATE,
        }],
    }
}

/// Established with a peer offering graceful restart (N bit as given).
fn established_gr(ours: Option<bool>, theirs: Option<bool>) -> Session {
    let mut c = config();
    c.graceful_restart = ours.map(gr);
    let mut s = at(c, FsmState::OpenSent);
    let mut caps = peer_caps(PEER_AS);
    if let Some(n) = theirs {
        caps.push(Capability::GracefulRestart(gr(n)));
    }
    s.process(received(A1, open_from(PEER_AS, PEER_ID_HIGH, 90, caps)));
    s.process(received(A1, Message::Keepalive));
    assert_eq!(s.state(), FsmState::Established);
    s
}

fn stop_with(mut s: Session, input: Input) -> (Session, Vec<Output>) {
    let out = s.process(input);
    assert_eq!(s.state(), FsmState::Idle);
    assert_eq!(closed(&out), vec![A1]);
    (s, out)
}

#[test]
fn deconfigure_sends_peer_deconfigured_and_stays_idle() {
    let (s, out) = stop_with(at(config(), FsmState::Established), Input::Deconfigured);
    assert_eq!(sent(&out), vec![(A1, Notification::PeerDeconfigured)]);
    assert!(timer_set(&out, Timer::IdleHold).is_none());
    assert!(s.armed_timers().is_empty());
    match session_down(&out) {
        Some(Output::SessionDown {
            reason,
            notification: Some(n),
            was_established,
            ..
        }) => {
            assert_eq!(reason, DownReason::Deconfigured);
            assert_eq!(n.direction, Direction::Sent);
            assert!(was_established);
        }
        other => panic!("{other:?}"),
    }
    // With the N bit: Hard Reset, so the peer drops our routes at once.
    let (_, out) = stop_with(established_gr(Some(true), Some(true)), Input::Deconfigured);
    assert_eq!(
        sent(&out),
        vec![(A1, Notification::hard_reset(Notification::PeerDeconfigured))]
    );
}

#[test]
fn admin_shutdown_carries_the_rfc9003_message() {
    let (_, out) = stop_with(
        at(config(), FsmState::Established),
        Input::AdminShutdown {
            message: "maintenance".into(),
        },
    );
    let n = Notification::AdministrativeShutdown {
        message: Some("maintenance".into()),
    };
    assert_eq!(n.data().as_ref(), b"\x0bmaintenance");
    assert_eq!(sent(&out), vec![(A1, n.clone())]);
    assert_eq!(
        n.to_string(),
        "Cease/Administrative Shutdown: \"maintenance\""
    );
    // N bit: wrapped in Hard Reset.
    let (_, out) = stop_with(
        established_gr(Some(true), Some(true)),
        Input::AdminShutdown {
            message: "maintenance".into(),
        },
    );
    assert_eq!(sent(&out), vec![(A1, Notification::hard_reset(n))]);
    // The N bit counts only when both sides set it.
    let (_, out) = stop_with(established_gr(Some(true), Some(false)), Input::Deconfigured);
    assert_eq!(sent(&out), vec![(A1, Notification::PeerDeconfigured)]);
}

#[test]
fn planned_restart_with_graceful_restart() {
    let restart = |hard| Input::PlannedRestart {
        message: "upgrade".into(),
        hard,
    };
    // GR negotiated without the N bit: no NOTIFICATION at all.
    let (_, out) = stop_with(established_gr(Some(false), Some(false)), restart(false));
    assert!(sent(&out).is_empty());
    match session_down(&out) {
        Some(Output::SessionDown { notification, .. }) => assert_eq!(notification, None),
        other => panic!("{other:?}"),
    }
    // With the N bit: Administrative Reset (not Hard Reset): the peer keeps
    // our routes (RFC 8538).
    let (_, out) = stop_with(established_gr(Some(true), Some(true)), restart(false));
    assert_eq!(
        sent(&out),
        vec![(A1, Notification::administrative_reset("upgrade"))]
    );
    // Asked to reset hard: Hard Reset with the N bit, plain Cease without.
    let (_, out) = stop_with(established_gr(Some(true), Some(true)), restart(true));
    assert_eq!(
        sent(&out),
        vec![(
            A1,
            Notification::hard_reset(Notification::administrative_reset("upgrade"))
        )]
    );
    let (_, out) = stop_with(established_gr(Some(false), Some(false)), restart(true));
    assert_eq!(
        sent(&out),
        vec![(A1, Notification::administrative_reset("upgrade"))]
    );
    // Without graceful restart the peer is told.
    let (_, out) = stop_with(established_gr(None, Some(true)), restart(false));
    assert_eq!(
        sent(&out),
        vec![(A1, Notification::administrative_reset("upgrade"))]
    );
    // The negotiated GR and N bit are in the Negotiated output.
    let mut s = at(gr_config(true), FsmState::OpenSent);
    let mut caps = peer_caps(PEER_AS);
    caps.push(Capability::GracefulRestart(gr(true)));
    let out = s.process(received(A1, open_from(PEER_AS, PEER_ID_HIGH, 90, caps)));
    assert!(negotiated(&out).unwrap().notification_gr());
}

/// Our graceful restart capability in `open`.
fn gr_of(open: &Open) -> GracefulRestart {
    open.capabilities()
        .into_iter()
        .find_map(|c| match c {
            Capability::GracefulRestart(gr) => Some(gr.clone()),
            _ => None,
        })
        .expect("a graceful restart capability")
}

#[test]
fn restart_state_bit_until_the_first_established() {
    let mut c = config();
    c.enable_graceful_restart(30, true, true);
    let mut s = session(c);
    assert!(s.restart_state());
    s.process(Input::ManualStart);
    let out = s.process(tcp_acked(A1));
    let ours = gr_of(&our_open(&out, A1));
    // R and N, restart time, both families with the F bit.
    assert!(ours.restart_state() && ours.notification());
    assert_eq!(ours.restart_time, 30);
    assert_eq!(
        ours.families,
        vec![
            GracefulRestartFamily {
                family: Family::IPV4_UNICAST,
                flags: GracefulRestartFamily::FORWARDING_STATE,
            },
            GracefulRestartFamily {
                family: Family::IPV6_UNICAST,
                flags: GracefulRestartFamily::FORWARDING_STATE,
            },
        ]
    );
    // An attempt that fails before Established keeps the R bit.
    s.process(Input::TcpConnectionFails { conn: A1 });
    s.process(Input::ConnectRetryTimerExpired);
    let out = s.process(tcp_acked(A2));
    assert!(gr_of(&our_open(&out, A2)).restart_state());
    let mut caps = peer_caps(PEER_AS);
    caps.push(Capability::GracefulRestart(gr(true)));
    s.process(received(A2, open_from(PEER_AS, PEER_ID_HIGH, 90, caps)));
    s.process(received(A2, Message::Keepalive));
    assert_eq!(s.state(), FsmState::Established);
    assert!(!s.restart_state());
    // The next session is a reconnection, not a restart: no R bit, the
    // rest unchanged.
    s.process(Input::TcpConnectionFails { conn: A2 });
    let a3 = connects(&s.process(Input::IdleHoldTimerExpired))
        .pop()
        .expect("a new attempt");
    let out = s.process(tcp_acked(a3));
    let ours = gr_of(&our_open(&out, a3));
    assert!(!ours.restart_state());
    assert!(ours.notification());
    assert!(ours.families.iter().all(|f| f.forwarding_state()));
    // A speaker that did not restart never sends it.
    let mut c = config();
    c.enable_graceful_restart(30, false, false);
    let mut s = session(c);
    assert!(!s.restart_state());
    s.process(Input::ManualStart);
    let out = s.process(tcp_acked(A1));
    let ours = gr_of(&our_open(&out, A1));
    assert!(!ours.restart_state() && !ours.notification());
}

#[test]
fn planned_restart_leaves_nothing_to_resend_and_stays_idle() {
    // Graceful close: no NOTIFICATION, no automatic restart (the process
    // is going away), and the Adj-RIB-Out is reported void.
    let (s, out) = stop_with(
        established_gr(Some(false), Some(false)),
        Input::PlannedRestart {
            message: "upgrade".into(),
            hard: false,
        },
    );
    assert!(sent(&out).is_empty());
    assert!(s.armed_timers().is_empty());
    match session_down(&out) {
        Some(Output::SessionDown {
            reason,
            notification: None,
            was_established: true,
            ..
        }) => assert_eq!(
            reason,
            DownReason::PlannedRestart {
                message: "upgrade".into(),
                hard: false
            }
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn reset_sends_bfd_down_and_restarts() {
    let mut s = at(config(), FsmState::Established);
    let out = s.process(Input::Reset {
        reason: "BFD down".into(),
    });
    assert_eq!(sent(&out), vec![(A1, Notification::BfdDown)]);
    assert_eq!(Notification::BfdDown.subcode(), 10);
    // The NOTIFICATION goes before the close, both in this one batch.
    let send = out
        .iter()
        .position(|o| matches!(o, Output::Send { .. }))
        .unwrap();
    let close = out
        .iter()
        .position(|o| matches!(o, Output::CloseConnection { .. }))
        .unwrap();
    assert!(send < close);
    assert_eq!(s.state(), FsmState::Idle);
    assert_eq!(s.connect_retry_counter(), 1);
    assert_eq!(
        timer_set(&out, Timer::IdleHold),
        Some(Duration::from_secs(1))
    );
    let out = s.process(Input::IdleHoldTimerExpired);
    assert_eq!(s.state(), FsmState::Connect);
    assert_eq!(connects(&out).len(), 1);
    assert!(out.contains(&Output::StateChanged {
        from: FsmState::Idle,
        to: FsmState::Connect,
        reason: FsmEvent::IdleHoldTimerExpires,
    }));
}

#[test]
fn reset_wraps_bfd_down_in_hard_reset_with_the_n_bit() {
    // RFC 8538: a plain Cease with the N bit negotiated would leave our
    // routes at the peer as stale, over a path BFD declared broken.
    let mut s = established_gr(Some(true), Some(true));
    let out = s.process(Input::Reset {
        reason: "BFD down".into(),
    });
    assert_eq!(
        sent(&out),
        vec![(A1, Notification::hard_reset(Notification::BfdDown))]
    );
    // Still the automatic stop: the session comes back by itself.
    assert!(timer_set(&out, Timer::IdleHold).is_some());
    // Only when both sides set the N bit.
    let mut s = established_gr(Some(true), Some(false));
    let out = s.process(Input::Reset {
        reason: "BFD down".into(),
    });
    assert_eq!(sent(&out), vec![(A1, Notification::BfdDown)]);
}

fn hold_down(cease: CeaseSubcode) -> Input {
    Input::HoldDown {
        reason: "BFD down".into(),
        cease,
    }
}

#[test]
fn hold_down_stays_idle_until_released() {
    let mut s = at(config(), FsmState::Established);
    let out = s.process(hold_down(CeaseSubcode::BfdDown));
    // Cease with the caller's subcode, then the close; no restart armed.
    assert_eq!(sent(&out), vec![(A1, Notification::BfdDown)]);
    assert_eq!(closed(&out), vec![A1]);
    assert_eq!(s.state(), FsmState::Idle);
    assert!(s.held_down());
    assert!(timer_set(&out, Timer::IdleHold).is_none());
    assert!(s.armed_timers().is_empty(), "{:?}", s.armed_timers());
    match session_down(&out) {
        Some(Output::SessionDown {
            reason,
            was_established: true,
            ..
        }) => assert_eq!(
            reason,
            DownReason::HeldDown {
                reason: "BFD down".into(),
                cease: CeaseSubcode::BfdDown
            }
        ),
        other => panic!("{other:?}"),
    }
    assert!(out.contains(&Output::StateChanged {
        from: FsmState::Established,
        to: FsmState::Idle,
        reason: FsmEvent::ManualStop,
    }));
    // Nothing starts it but the release: not a start, not the (stale)
    // IdleHold expiry that used to bring it back a second later, not a
    // reset; a connection from the peer is closed without an OPEN.
    for input in [
        Input::IdleHoldTimerExpired,
        Input::ManualStart,
        Input::AutomaticStart,
        Input::ConnectRetryTimerExpired,
        Input::Reset {
            reason: "again".into(),
        },
        hold_down(CeaseSubcode::AdministrativeShutdown),
    ] {
        let out = s.process(input.clone());
        assert!(connects(&out).is_empty(), "{input:?}: {out:?}");
        assert!(sent(&out).is_empty(), "{input:?}: {out:?}");
        assert_eq!(s.state(), FsmState::Idle, "{input:?}");
        assert!(s.armed_timers().is_empty(), "{input:?}");
    }
    let out = s.process(tcp_confirmed(P1));
    assert_eq!(closed(&out), vec![P1]);
    assert!(sent_messages(&out, P1).is_empty());
    assert_eq!(s.state(), FsmState::Idle);
    // The release is a manual start: a fresh connect retry schedule (its
    // first handshake bounded by MIN_HANDSHAKE_TIME).
    let out = s.process(Input::Release);
    assert!(!s.held_down());
    assert_eq!(s.state(), FsmState::Connect);
    assert_eq!(connects(&out), vec![A2]);
    assert_eq!(
        timer_set(&out, Timer::ConnectRetry),
        Some(bgp::fsm::MIN_HANDSHAKE_TIME)
    );
    assert!(out.contains(&Output::StateChanged {
        from: FsmState::Idle,
        to: FsmState::Connect,
        reason: FsmEvent::ManualStart,
    }));
    // A release of a session that is not held changes nothing.
    assert!(s.process(Input::Release).is_empty());
    assert_eq!(s.state(), FsmState::Connect);
}

#[test]
fn hold_down_sends_the_callers_cease_in_hard_reset_with_the_n_bit() {
    let subcodes = [
        (CeaseSubcode::Unspecific, 0),
        (CeaseSubcode::AdministrativeShutdown, 2),
        (CeaseSubcode::PeerDeconfigured, 3),
        (CeaseSubcode::AdministrativeReset, 4),
        (CeaseSubcode::ConnectionRejected, 5),
        (CeaseSubcode::OtherConfigurationChange, 6),
        (CeaseSubcode::OutOfResources, 8),
        (CeaseSubcode::BfdDown, 10),
    ];
    for (cease, subcode) in subcodes {
        assert_eq!(cease.subcode(), subcode, "{cease:?}");
        let n = cease.notification();
        assert_eq!((n.code(), n.subcode()), (6, subcode), "{cease:?}");
        assert!(n.data().is_empty(), "{cease:?}");
        // N bit on both sides: Hard Reset whose data starts with the cause.
        let (_, out) = stop_with(established_gr(Some(true), Some(true)), hold_down(cease));
        let hard = Notification::hard_reset(n.clone());
        assert_eq!(sent(&out), vec![(A1, hard.clone())], "{cease:?}");
        assert_eq!((hard.code(), hard.subcode()), (6, 9));
        assert_eq!(hard.data().as_ref(), &[6, subcode], "{cease:?}");
        // Not both: the plain Cease.
        for (ours, theirs) in [(Some(true), Some(false)), (Some(false), Some(true))] {
            let (_, out) = stop_with(established_gr(ours, theirs), hold_down(cease));
            assert_eq!(sent(&out), vec![(A1, n.clone())], "{cease:?}");
        }
    }
    assert_eq!(CeaseSubcode::default(), CeaseSubcode::BfdDown);
}

#[test]
fn hold_down_before_established_and_while_waiting_to_restart() {
    // Connect, with an attempt under way: abandoned, no NOTIFICATION.
    let mut s = at(config(), FsmState::Connect);
    let out = s.process(hold_down(CeaseSubcode::BfdDown));
    assert_eq!(closed(&out), vec![A1]);
    assert!(sent(&out).is_empty());
    assert_eq!(s.state(), FsmState::Idle);
    assert!(s.armed_timers().is_empty());
    // The attempt completing late is refused.
    let out = s.process(tcp_acked(A1));
    assert_eq!(closed(&out), vec![A1]);
    assert!(sent_messages(&out, A1).is_empty());
    // Idle after an error, the automatic restart armed: the hold-down
    // cancels it.
    let mut s = at(config(), FsmState::Established);
    let out = s.process(Input::TcpConnectionFails { conn: A1 });
    assert!(timer_set(&out, Timer::IdleHold).is_some());
    let out = s.process(hold_down(CeaseSubcode::BfdDown));
    assert!(timer_cancelled(&out, Timer::IdleHold));
    assert!(s.armed_timers().is_empty());
    assert!(connects(&s.process(Input::IdleHoldTimerExpired)).is_empty());
    assert_eq!(s.state(), FsmState::Idle);
    // Active (passive establishment): released into Active again.
    let mut c = config();
    c.passive_tcp_establishment = true;
    let mut s = session(c);
    s.process(Input::ManualStart);
    assert_eq!(s.state(), FsmState::Active);
    s.process(hold_down(CeaseSubcode::BfdDown));
    assert_eq!(s.state(), FsmState::Idle);
    let out = s.process(Input::Release);
    assert_eq!(s.state(), FsmState::Active);
    assert!(connects(&out).is_empty());
    assert!(out.contains(&Output::StateChanged {
        from: FsmState::Idle,
        to: FsmState::Active,
        reason: FsmEvent::ManualStartWithPassiveTcpEstablishment,
    }));
}

#[test]
fn manual_stop_sends_cease_and_needs_a_start() {
    let (mut s, out) = stop_with(
        at(config(), FsmState::OpenConfirm),
        Input::ManualStop {
            reason: "operator".into(),
        },
    );
    assert_eq!(
        sent(&out),
        vec![(A1, Notification::AdministrativeShutdown { message: None })]
    );
    assert!(s.armed_timers().is_empty());
    let out = s.process(Input::ManualStart);
    assert_eq!(s.state(), FsmState::Connect);
    assert_eq!(connects(&out), vec![A2]);
}

#[test]
fn stopping_with_two_connections_closes_both() {
    let mut s = colliding();
    let out = s.process(Input::Deconfigured);
    assert_eq!(
        sent(&out),
        vec![
            (A1, Notification::PeerDeconfigured),
            (P1, Notification::PeerDeconfigured)
        ]
    );
    assert_eq!(closed(&out).len(), 2);
    assert_eq!(
        out.iter()
            .filter(|o| matches!(o, Output::SessionDown { .. }))
            .count(),
        1
    );
    assert!(s.connections().is_empty());
}

#[test]
fn config_is_validated() {
    let mut c = config();
    c.hold_time = Some(1);
    assert!(Session::new(c).is_err());
    let ipv6_only = {
        let mut c = config();
        c.families = vec![Family::new(Afi::IPV6, Safi::UNICAST)];
        c
    };
    assert!(Session::new(ipv6_only).is_ok());
}

// ----------------------------------------------------------------------
// Graceful restart: the peer restarted (RFC 4724 section 4.2)
// ----------------------------------------------------------------------

/// The peer restarts while our session is still Established (its old
/// connection not yet closed, our hold timer running): with graceful
/// restart negotiated, its valid OPEN on a new connection ends the old
/// session and the new one carries on to Established.
#[test]
fn a_restarted_graceful_restart_peer_replaces_the_established_session() {
    let mut s = established_gr(Some(false), Some(false));
    let out = s.process(tcp_confirmed(P1));
    our_open(&out, P1);
    let mut caps = peer_caps(PEER_AS);
    caps.push(Capability::GracefulRestart(gr(false)));
    let out = s.process(received(P1, open_from(PEER_AS, PEER_ID_HIGH, 90, caps)));
    assert_eq!(
        sent(&out),
        vec![(A1, Notification::ConnectionCollisionResolution)]
    );
    assert_eq!(closed(&out), vec![A1]);
    assert!(timer_cancelled(&out, Timer::Hold { conn: A1 }));
    match session_down(&out) {
        Some(Output::SessionDown {
            conn,
            reason,
            was_established,
            ..
        }) => {
            assert_eq!(conn, A1);
            assert_eq!(reason, DownReason::PeerRestarted);
            assert!(was_established);
        }
        other => panic!("{other:?}"),
    }
    assert!(negotiated(&out).is_some(), "the new OPEN is negotiated");
    assert_eq!(s.connections(), vec![(P1, FsmState::OpenConfirm)]);
    assert_eq!(s.state(), FsmState::OpenConfirm);
    let out = s.process(received(P1, Message::Keepalive));
    assert_eq!(s.state(), FsmState::Established);
    assert!(out.iter().any(|o| matches!(
        o,
        Output::SendInitialUpdates {
            conn: P1,
            cause: ResendCause::Established,
            ..
        }
    )));

    // Without graceful restart negotiated (we offer it, the peer does
    // not), the Established connection still wins.
    let mut s = established_gr(Some(false), None);
    s.process(tcp_confirmed(P1));
    let out = s.process(received(P1, peer_open(PEER_ID_HIGH)));
    collision_cease(&out, P1);
    assert_eq!(s.connections(), vec![(A1, FsmState::Established)]);

    // An OPEN refused by the checks (wrong AS) ends only the new
    // connection.
    let mut s = established_gr(Some(false), Some(false));
    s.process(tcp_confirmed(P1));
    let mut wrong = peer_caps(64999);
    wrong.push(Capability::GracefulRestart(gr(false)));
    let out = s.process(received(P1, open_from(64999, PEER_ID_HIGH, 90, wrong)));
    assert_eq!(sent(&out), vec![(P1, Notification::BadPeerAs)]);
    assert_eq!(s.connections(), vec![(A1, FsmState::Established)]);
}

/// RFC 6793: AS_TRANS as the 4-octet AS capability's value names no AS,
/// and the 2-octet My AS must agree with the capability (the AS itself
/// when it fits, AS_TRANS when it does not). Issue 13, Low list.
#[test]
fn as_trans_in_the_capability_and_a_disagreeing_my_as_are_bad_peer_as() {
    let trans = u32::from(AS_TRANS);
    let with_my_as = |my_as: u16, cap: u32| {
        Message::Open(Open {
            my_as,
            ..match open_from(cap, PEER_ID_HIGH, 90, peer_caps(cap)) {
                Message::Open(o) => o,
                _ => unreachable!(),
            }
        })
    };
    // The peer configured as AS 23456 with the capability saying so.
    let (s, out) = open_outcome(
        Config::new(LOCAL_AS, PeerAs::Fixed(trans), "n"),
        with_my_as(AS_TRANS, trans),
    );
    assert_eq!(sent(&out), vec![(A1, Notification::BadPeerAs)]);
    assert_eq!(s.state(), FsmState::Idle);
    // Dynamic external peers too.
    let (_, out) = open_outcome(
        Config::new(LOCAL_AS, PeerAs::External, "n"),
        with_my_as(AS_TRANS, trans),
    );
    assert_eq!(sent(&out), vec![(A1, Notification::BadPeerAs)]);
    // A 2-octet AS in the capability with another My AS.
    let (_, out) = open_outcome(config(), with_my_as(65000, PEER_AS));
    assert_eq!(sent(&out), vec![(A1, Notification::BadPeerAs)]);
    let (_, out) = open_outcome(config(), with_my_as(AS_TRANS, PEER_AS));
    assert_eq!(sent(&out), vec![(A1, Notification::BadPeerAs)]);
    // A 4-octet AS with a My AS other than AS_TRANS.
    let big = 4_200_000_000;
    let (_, out) = open_outcome(
        Config::new(LOCAL_AS, PeerAs::Fixed(big), "n"),
        with_my_as(64999, big),
    );
    assert_eq!(sent(&out), vec![(A1, Notification::BadPeerAs)]);
    // The consistent forms are accepted.
    let (s, _) = open_outcome(
        Config::new(LOCAL_AS, PeerAs::Fixed(big), "n"),
        with_my_as(AS_TRANS, big),
    );
    assert_eq!(s.state(), FsmState::OpenConfirm);
    let (s, _) = open_outcome(config(), with_my_as(PEER_AS as u16, PEER_AS));
    assert_eq!(s.state(), FsmState::OpenConfirm);
}

/// Restart damping: each session ended by a NOTIFICATION (received or
/// sent) doubles the least delay of the automatic restart (1, 2, 4... s,
/// capped); an Established session that lasts RESTART_DAMPING_FORGET
/// (Timer::Stable) or a manual start clears it. Issue 13, Low list.
#[test]
fn notifications_damp_restarts_until_a_stable_session_or_a_manual_start() {
    use bgp::fsm::{RESTART_DAMPING_FORGET, RESTART_DAMPING_MAX, restart_damping_delay};
    let mut s = at(config(), FsmState::Established);
    let mut conn_seq = 1u64;
    // Brings the session from Idle (restart due) back to Established on a
    // new connection.
    let reestablish = |s: &mut Session, seq: u64| -> Vec<Output> {
        let c = ConnId::active(seq);
        s.process(Input::IdleHoldTimerExpired);
        s.process(tcp_acked(c));
        s.process(received(c, peer_open(PEER_ID_HIGH)));
        let out = s.process(received(c, Message::Keepalive));
        assert_eq!(s.state(), FsmState::Established);
        out
    };
    let mut delays = Vec::new();
    for round in 0..8 {
        let c = ConnId::active(conn_seq);
        let out = if round % 2 == 0 {
            s.process(received(
                c,
                Message::Notification(Notification::MalformedAttributeList),
            ))
        } else {
            // Our own NOTIFICATION (hold timer expiry) counts too.
            s.process(Input::HoldTimerExpired { conn: c })
        };
        assert_eq!(s.state(), FsmState::Idle, "round {round}");
        assert!(timer_cancelled(&out, Timer::Stable) || round == 0);
        delays.push(timer_set(&out, Timer::IdleHold).expect("restart scheduled"));
        conn_seq += 1;
        let out = reestablish(&mut s, conn_seq);
        assert_eq!(
            timer_set(&out, Timer::Stable),
            Some(RESTART_DAMPING_FORGET),
            "a damped session is watched for stability"
        );
    }
    let secs: Vec<u64> = delays.iter().map(Duration::as_secs).collect();
    assert_eq!(secs, [1, 2, 4, 8, 16, 32, 64, 120]);
    assert_eq!(restart_damping_delay(40), RESTART_DAMPING_MAX);
    assert_eq!(s.restart_damping(), 8);

    // Stable for long enough: forgotten; the next error restarts after 1 s.
    s.process(Input::StableTimerExpired);
    assert_eq!(s.restart_damping(), 0);
    let out = s.process(received(
        ConnId::active(conn_seq),
        Message::Notification(Notification::MalformedAttributeList),
    ));
    assert_eq!(
        timer_set(&out, Timer::IdleHold),
        Some(Duration::from_secs(1))
    );
    // A stale expiry (the timer was cancelled with the session) changes
    // nothing.
    s.process(Input::StableTimerExpired);
    assert_eq!(s.restart_damping(), 1);

    // A manual start clears it too.
    s.process(Input::ManualStop {
        reason: "test".into(),
    });
    s.process(Input::ManualStart);
    assert_eq!(s.restart_damping(), 0);
    // Without damping, Established arms no stability timer.
    let mut s = at(config(), FsmState::OpenConfirm);
    let out = s.process(received(A1, Message::Keepalive));
    assert_eq!(s.state(), FsmState::Established);
    assert_eq!(timer_set(&out, Timer::Stable), None);
}

/// Restart damping counts failures only: a peer that ends the session with
/// an administrative Cease (a router restarted or reconfigured) again and
/// again is not damped; a Cease that reports a failure, or a Hard Reset for
/// an error, is.
#[test]
fn administrative_ceases_do_not_damp_restarts() {
    let mut s = at(config(), FsmState::Established);
    let mut seq = 1u64;
    let mut end_and_come_back = |s: &mut Session, n: Notification| -> Option<Duration> {
        let out = s.process(received(ConnId::active(seq), Message::Notification(n)));
        assert_eq!(s.state(), FsmState::Idle);
        let delay = timer_set(&out, Timer::IdleHold);
        seq += 1;
        let c = ConnId::active(seq);
        s.process(Input::IdleHoldTimerExpired);
        s.process(tcp_acked(c));
        s.process(received(c, peer_open(PEER_ID_HIGH)));
        s.process(received(c, Message::Keepalive));
        assert_eq!(s.state(), FsmState::Established);
        delay
    };
    for round in 0..3 {
        for n in [
            Notification::administrative_shutdown("bird restarting"),
            Notification::administrative_reset(""),
            Notification::PeerDeconfigured,
            Notification::OtherConfigurationChange,
            Notification::CeaseUnspecific,
            Notification::hard_reset(Notification::administrative_reset("")),
        ] {
            let what = n.to_string();
            let d = end_and_come_back(&mut s, n);
            assert_eq!(s.restart_damping(), 0, "round {round}: {what}");
            assert!(
                d.is_none_or(|d| d <= Duration::from_secs(1)),
                "round {round}: {what}: {d:?}"
            );
        }
    }
    // Failures still count.
    for (i, n) in [
        Notification::BfdDown,
        Notification::OutOfResources,
        Notification::hard_reset(Notification::MalformedAttributeList),
    ]
    .into_iter()
    .enumerate()
    {
        end_and_come_back(&mut s, n);
        assert_eq!(s.restart_damping(), i as u32 + 1);
    }
}

/// RFC 4271 section 10: ConnectRetry, IdleHold and Keepalive are jittered
/// to 75-100 %; Hold, SendHold and Stable are exact.
#[test]
fn jitter_applies_to_connect_retry_idle_hold_and_keepalive_only() {
    use bgp::session::jittered;
    let d = Duration::from_secs(30);
    let mut seen = std::collections::BTreeSet::new();
    for draw in 0..2000u64 {
        let x = draw.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for t in [
            Timer::ConnectRetry,
            Timer::IdleHold,
            Timer::Keepalive { conn: A1 },
        ] {
            let j = jittered(t, d, x);
            assert!(j >= d * 3 / 4 && j <= d, "{t:?}: {j:?}");
            seen.insert(j);
        }
        for t in [
            Timer::Hold { conn: A1 },
            Timer::SendHold { conn: A1 },
            Timer::Stable,
        ] {
            assert_eq!(jittered(t, d, x), d);
        }
    }
    assert!(seen.len() > 100, "{} distinct delays", seen.len());
    assert!(seen.iter().any(|j| *j < d * 4 / 5));
    assert!(seen.iter().any(|j| *j > d * 19 / 20));
}
