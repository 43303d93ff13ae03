//! Inputs and outputs of the session FSM serialize and read back equal,
//! and a recorded log of inputs replays to the same outputs.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use bgp::fsm::{
    CeaseSubcode, Config, ConnId, DisabledFamily, DownReason, FsmEvent, FsmState, Input,
    NotificationEvent, Output, PeerAs, RequiredCapability, ResendCause, Session, Timer,
};
use bgp::state::FamilyDisabled;
use bgp::wire::{
    Aggregator, AsPath, Bytes, Capability, Community, ErrorSite, Family, GracefulRestart,
    GracefulRestartFamily, HoldTime, LargeCommunity, Message, MpReach, MpUnreach, NextHop,
    Notification, Open, Origin, PathAttribute, RawAttribute, RouteRefresh, RouteRefreshSubtype,
    UnknownCapability, Update, UpdateError,
};

const A1: ConnId = ConnId::active(1);
const P1: ConnId = ConnId::passive(1);

fn round_trip_input(input: &Input) {
    let json = serde_json::to_string(input).unwrap();
    let back: Input = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(&back, input, "{json}");
}

fn round_trip_output(output: &Output) {
    let json = serde_json::to_string(output).unwrap();
    let back: Output = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(&back, output, "{json}");
}

fn gr() -> GracefulRestart {
    GracefulRestart {
        flags: GracefulRestart::RESTART_STATE | GracefulRestart::NOTIFICATION,
        restart_time: 120,
        families: vec![GracefulRestartFamily {
            family: Family::IPV6_UNICAST,
            flags: GracefulRestartFamily::FORWARDING_STATE,
        }],
    }
}

fn rich_open() -> Message {
    Message::Open(Open::new(
        4_200_000_000,
        HoldTime::new(30).unwrap(),
        Ipv4Addr::new(10, 0, 0, 9),
        vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::Multiprotocol(Family::IPV6_UNICAST),
            Capability::RouteRefresh,
            Capability::RouteRefreshOld,
            Capability::EnhancedRouteRefresh,
            Capability::FourOctetAs(4_200_000_000),
            Capability::GracefulRestart(gr()),
            Capability::ExtendedMessage,
            Capability::ExtendedNextHop(vec![bgp::wire::ExtendedNextHop::new(
                Family::IPV4_UNICAST,
                bgp::wire::Afi::IPV6,
            )]),
            Capability::Unknown(UnknownCapability {
                code: 73,
                value: Bytes::from_static(b"\x04node"),
            }),
        ],
    ))
}

fn rich_update() -> Message {
    Message::Update(Update {
        withdrawn: vec!["198.51.100.0/24".parse().unwrap()],
        attributes: vec![
            PathAttribute::Origin(Origin::Igp),
            PathAttribute::AsPath(AsPath::sequence([64512, 4_200_000_000])),
            PathAttribute::NextHop(Ipv4Addr::new(192, 0, 2, 1)),
            PathAttribute::MultiExitDisc(5),
            PathAttribute::LocalPref(100),
            PathAttribute::AtomicAggregate,
            PathAttribute::Aggregator(Aggregator {
                asn: 4_200_000_000,
                address: Ipv4Addr::new(192, 0, 2, 2),
            }),
            PathAttribute::Communities(vec![Community::new(64512, 7), Community::NO_EXPORT]),
            PathAttribute::LargeCommunities(vec![LargeCommunity {
                global_admin: 4_200_000_000,
                local_data1: 1,
                local_data2: 2,
            }]),
            PathAttribute::As4Path(AsPath::sequence([4_200_000_000])),
            PathAttribute::MpReach(MpReach {
                family: Family::IPV6_UNICAST,
                next_hop: NextHop::V6 {
                    global: "2001:db8::1".parse().unwrap(),
                    link_local: Some("fe80::1".parse().unwrap()),
                },
                nlri: vec!["2001:db8:1::/48".parse().unwrap()],
            }),
            PathAttribute::MpUnreach(MpUnreach {
                family: Family::IPV6_UNICAST,
                withdrawn: vec!["2001:db8:2::/48".parse().unwrap()],
            }),
            PathAttribute::Other(RawAttribute {
                flags: 0xe0,
                type_code: 99,
                value: Bytes::from_static(&[1, 2, 3]),
            }),
        ],
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
    })
}

fn all_inputs() -> Vec<Input> {
    let local: SocketAddr = "10.0.0.1:40000".parse().unwrap();
    let remote: SocketAddr = "[2001:db8::2]:179".parse().unwrap();
    vec![
        Input::ManualStart,
        Input::AutomaticStart,
        Input::ManualStop {
            reason: "operator".into(),
        },
        Input::AdminShutdown {
            message: "maintenance ü".into(),
        },
        Input::Deconfigured,
        Input::PlannedRestart {
            message: "upgrade".into(),
            hard: true,
        },
        Input::Reset {
            reason: "BFD down".into(),
        },
        Input::HoldDown {
            reason: "BFD down".into(),
            cease: CeaseSubcode::OtherConfigurationChange,
        },
        Input::Release,
        Input::ConnectRetryTimerExpired,
        Input::IdleHoldTimerExpired,
        Input::HoldTimerExpired { conn: A1 },
        Input::KeepaliveTimerExpired { conn: P1 },
        Input::TcpCrAcked {
            conn: A1,
            local,
            remote,
            interface_v4: Some(Ipv4Addr::new(10, 0, 0, 1)),
        },
        Input::TcpConnectionConfirmed {
            conn: P1,
            local,
            remote,
            interface_v4: None,
        },
        Input::TcpConnectionFails { conn: A1 },
        Input::MessageReceived {
            conn: A1,
            message: rich_open(),
        },
        Input::MessageReceived {
            conn: A1,
            message: rich_update(),
        },
        Input::MessageReceived {
            conn: A1,
            message: Message::Update(Update::end_of_rib(Family::IPV6_UNICAST)),
        },
        Input::MessageReceived {
            conn: A1,
            message: Message::Keepalive,
        },
        Input::MessageReceived {
            conn: A1,
            message: Message::RouteRefresh(RouteRefresh {
                family: Family::IPV6_UNICAST,
                subtype: RouteRefreshSubtype::EndOfRefresh,
            }),
        },
        Input::MessageReceived {
            conn: A1,
            message: Message::Notification(Notification::hard_reset(
                Notification::administrative_shutdown("bye"),
            )),
        },
        Input::DecodeError {
            conn: P1,
            notification: Notification::BadMessageLength { length: 5000 },
        },
        Input::DecodeError {
            conn: P1,
            notification: Notification::Other {
                code: 9,
                subcode: 3,
                data: Bytes::from_static(&[1]),
            },
        },
        Input::UpdateSent { conn: A1 },
        Input::SendProgress {
            conn: A1,
            waiting: true,
        },
        Input::SendHoldTimerExpired { conn: P1 },
        Input::StableTimerExpired,
    ]
}

#[test]
fn every_input_round_trips() {
    for input in all_inputs() {
        round_trip_input(&input);
    }
}

#[test]
fn every_output_round_trips() {
    // Outputs of a whole session life, plus the kinds it does not produce.
    let mut config = Config::new(64512, PeerAs::Fixed(4_200_000_000), "node-1");
    config.graceful_restart = Some(gr());
    let mut s = Session::new(config).unwrap();
    let mut outputs = Vec::new();
    for input in [
        Input::ManualStart,
        Input::TcpCrAcked {
            conn: A1,
            local: "10.0.0.1:40000".parse().unwrap(),
            remote: "10.0.0.2:179".parse().unwrap(),
            interface_v4: None,
        },
        Input::MessageReceived {
            conn: A1,
            message: rich_open(),
        },
        Input::MessageReceived {
            conn: A1,
            message: Message::Keepalive,
        },
        Input::MessageReceived {
            conn: A1,
            message: Message::RouteRefresh(RouteRefresh::request(Family::IPV4_UNICAST)),
        },
        Input::PlannedRestart {
            message: "upgrade".into(),
            hard: false,
        },
    ] {
        outputs.extend(s.process(input));
    }
    assert!(outputs.iter().any(|o| matches!(o, Output::Negotiated(_))));
    outputs.extend([
        Output::CancelTimer {
            timer: Timer::Keepalive { conn: P1 },
        },
        Output::SetTimer {
            timer: Timer::IdleHold,
            duration: Duration::from_millis(1500),
        },
        Output::StateChanged {
            from: FsmState::OpenSent,
            to: FsmState::Active,
            reason: FsmEvent::TcpConnectionFails,
        },
        Output::SessionDown {
            conn: P1,
            reason: DownReason::UnexpectedMessage { message_type: 2 },
            notification: Some(NotificationEvent::received(Notification::BfdDown)),
            was_established: false,
        },
        Output::SessionDown {
            conn: A1,
            reason: DownReason::HeldDown {
                reason: "BFD down".into(),
                cease: CeaseSubcode::BfdDown,
            },
            notification: Some(NotificationEvent::sent(Notification::hard_reset(
                Notification::BfdDown,
            ))),
            was_established: true,
        },
        Output::SendInitialUpdates {
            conn: A1,
            families: vec![Family::IPV6_UNICAST],
            cause: ResendCause::RouteRefresh,
        },
        Output::Send {
            conn: A1,
            message: rich_update(),
        },
    ]);
    for output in &outputs {
        round_trip_output(output);
    }
}

#[test]
fn negotiated_output_is_readable_json() {
    let mut s = Session::new(Config::new(64512, PeerAs::Fixed(4_200_000_000), "n")).unwrap();
    s.process(Input::ManualStart);
    s.process(Input::TcpCrAcked {
        conn: A1,
        local: "10.0.0.1:40000".parse().unwrap(),
        remote: "10.0.0.2:179".parse().unwrap(),
        interface_v4: None,
    });
    let caps = vec![
        Capability::Multiprotocol(Family::IPV4_UNICAST),
        Capability::FourOctetAs(4_200_000_000),
    ];
    let out = s.process(Input::MessageReceived {
        conn: A1,
        message: Message::Open(Open::new(
            4_200_000_000,
            HoldTime::DEFAULT,
            Ipv4Addr::new(10, 0, 0, 9),
            caps,
        )),
    });
    let negotiated = out
        .iter()
        .find(|o| matches!(o, Output::Negotiated(_)))
        .unwrap();
    let json = serde_json::to_value(negotiated).unwrap();
    assert_eq!(json["output"], "negotiated");
    assert_eq!(json["hold_time"], 90);
    assert_eq!(json["negotiated"]["families"][0], "ipv4-unicast");
    assert_eq!(
        json["families_disabled"][0],
        serde_json::json!({
            "family": "ipv6-unicast",
            "reason": {"reason": "not_supported_by_peer"},
            "text": "peer did not offer MP IPv6 unicast",
        })
    );
    // The NOTIFICATION text is there for people, and ignored when read.
    let sent = serde_json::to_value(Output::Send {
        conn: A1,
        message: Message::Notification(Notification::BadPeerAs),
    })
    .unwrap();
    assert_eq!(sent["message"]["type"], "notification");
    assert_eq!(sent["message"]["text"], "OPEN Message Error/Bad Peer AS");
    let _ = DisabledFamily {
        family: Family::IPV6_UNICAST,
        reason: FamilyDisabled::NotSupportedByPeer,
        text: String::new(),
    };
}

#[test]
fn config_round_trips() {
    let mut c = Config::new(64512, PeerAs::External, "node-1");
    c.local_as = Some(65100);
    c.hold_time = Some(30);
    c.graceful_restart = Some(gr());
    c.required_capabilities = vec![
        RequiredCapability::Multiprotocol(Family::IPV6_UNICAST),
        RequiredCapability::FourOctetAs,
    ];
    let json = serde_json::to_string(&c).unwrap();
    let back: Config = serde_json::from_str(&json).unwrap();
    assert_eq!(back, c);
}

#[test]
fn impossible_values_are_refused_when_read() {
    // An OPEN with hold time 1 cannot exist: reading it fails, it does not
    // panic or produce something else.
    let json = r#"{"input":"message_received","conn":{"role":"active","seq":1},
        "message":{"type":"open","version":4,"my_as":1,"hold_time":1,
        "bgp_id":"10.0.0.1","parameters":[]}}"#;
    assert!(serde_json::from_str::<Input>(json).is_err());
    let json = r#"{"input":"decode_error","conn":{"role":"active","seq":1},
        "notification":{"code":1,"subcode":1,"data":"zz"}}"#;
    assert!(serde_json::from_str::<Input>(json).is_err());
}

#[test]
fn a_recorded_input_log_replays_to_the_same_outputs() {
    let config = Config::new(64512, PeerAs::Fixed(64513), "node-1");
    let script = vec![
        Input::ManualStart,
        Input::ConnectRetryTimerExpired,
        Input::TcpCrAcked {
            conn: ConnId::active(2),
            local: "10.0.0.1:40000".parse().unwrap(),
            remote: "10.0.0.2:179".parse().unwrap(),
            interface_v4: None,
        },
        Input::TcpConnectionConfirmed {
            conn: P1,
            local: "10.0.0.1:179".parse().unwrap(),
            remote: "10.0.0.2:50000".parse().unwrap(),
            interface_v4: None,
        },
        Input::MessageReceived {
            conn: P1,
            message: Message::Open(Open::new(
                64513,
                HoldTime::DEFAULT,
                Ipv4Addr::new(10, 0, 0, 9),
                vec![Capability::FourOctetAs(64513)],
            )),
        },
        Input::MessageReceived {
            conn: P1,
            message: Message::Keepalive,
        },
        Input::KeepaliveTimerExpired { conn: P1 },
        Input::HoldTimerExpired { conn: P1 },
        // Our connection, still in OpenSent, now carries the session.
        Input::TcpConnectionFails {
            conn: ConnId::active(2),
        },
        Input::ConnectRetryTimerExpired,
    ];
    // Record: one JSON line per input, one per output.
    let mut live = Session::new(config.clone()).unwrap();
    let mut input_log = String::new();
    let mut output_log = String::new();
    for input in &script {
        input_log.push_str(&serde_json::to_string(input).unwrap());
        input_log.push('\n');
        for o in live.process(input.clone()) {
            output_log.push_str(&serde_json::to_string(&o).unwrap());
            output_log.push('\n');
        }
    }
    assert_eq!(live.state(), FsmState::Connect);
    // Replay from the log alone.
    let mut replay = Session::new(config).unwrap();
    let mut replayed = String::new();
    for line in input_log.lines() {
        let input: Input = serde_json::from_str(line).unwrap();
        for o in replay.process(input) {
            replayed.push_str(&serde_json::to_string(&o).unwrap());
            replayed.push('\n');
        }
    }
    assert_eq!(replayed, output_log);
    assert!(output_log.contains("\"output\":\"established\""));
}
