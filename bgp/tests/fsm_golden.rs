//! Golden replay of the session FSM: per scenario, a recorded event log
//! (`tests/golden/<scenario>.jsonl`: the configuration on the first line,
//! then one line per input with the outputs it produced) is read back,
//! its inputs are replayed into a fresh FSM from the log's configuration,
//! and the outputs must equal the recorded ones, field by field. A change
//! in behaviour shows as a diff of the log; when it is intended, re-record
//! with `METALLB_BLESS_GOLDEN=1 cargo test -p bgp --test fsm_golden` and
//! review the diff. A missing log fails (it is never created silently).
//!
//! The scenarios are written below as input scripts; the test also checks
//! that each log's inputs are still the script's, so a log cannot drift
//! from the scenario it claims to record.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use bgp::fsm::{CeaseSubcode, Config, ConnId, Input, Output, PeerAs, Session};
use bgp::wire::{Capability, Family, HoldTime, Message, Notification, Open};
use serde_json::{Value, json};

const A1: ConnId = ConnId::active(1);
const A2: ConnId = ConnId::active(2);
const P1: ConnId = ConnId::passive(1);
const LOCAL_AS: u32 = 64513;
const PEER_AS: u32 = 64512;

fn local() -> SocketAddr {
    "192.0.2.11:40000".parse().unwrap()
}

fn remote() -> SocketAddr {
    "192.0.2.1:179".parse().unwrap()
}

fn acked(conn: ConnId) -> Input {
    Input::TcpCrAcked {
        conn,
        local: local(),
        remote: remote(),
        interface_v4: Some(Ipv4Addr::new(192, 0, 2, 11)),
    }
}

fn open(asn: u32, caps: Vec<Capability>) -> Message {
    Message::Open(Open::new(
        asn,
        HoldTime::new(9).unwrap(),
        Ipv4Addr::new(192, 0, 2, 1),
        caps,
    ))
}

fn peer_caps() -> Vec<Capability> {
    vec![
        Capability::Multiprotocol(Family::IPV4_UNICAST),
        Capability::Multiprotocol(Family::IPV6_UNICAST),
        Capability::RouteRefresh,
        Capability::FourOctetAs(PEER_AS),
    ]
}

fn rx(conn: ConnId, message: Message) -> Input {
    Input::MessageReceived { conn, message }
}

fn config() -> Config {
    let mut c = Config::new(LOCAL_AS, PeerAs::Fixed(PEER_AS), "node-1");
    c.hold_time = Some(9);
    c
}

/// Establish, keepalives both ways, the peer goes silent: hold timer
/// expiry, restart after the IdleHold delay.
fn established_then_hold_expiry() -> (Config, Vec<Input>) {
    (
        config(),
        vec![
            Input::ManualStart,
            acked(A1),
            rx(A1, open(PEER_AS, peer_caps())),
            rx(A1, Message::Keepalive),
            Input::KeepaliveTimerExpired { conn: A1 },
            Input::UpdateSent { conn: A1 },
            rx(A1, Message::Keepalive),
            Input::HoldTimerExpired { conn: A1 },
            Input::IdleHoldTimerExpired,
        ],
    )
}

/// A connection collision: our attempt and the peer's connection both
/// reach OpenSent; the peer's higher identifier wins.
fn collision() -> (Config, Vec<Input>) {
    (
        config(),
        vec![
            Input::ManualStart,
            Input::ConnectRetryTimerExpired,
            acked(A2),
            Input::TcpConnectionConfirmed {
                conn: P1,
                local: "192.0.2.11:179".parse().unwrap(),
                remote: "192.0.2.1:50000".parse().unwrap(),
                interface_v4: None,
            },
            rx(P1, open(PEER_AS, peer_caps())),
            rx(A2, open(PEER_AS, peer_caps())),
            rx(P1, Message::Keepalive),
        ],
    )
}

/// OPENs refused: AS_TRANS in the capability, then a wrong AS; the
/// connect retry schedule grows.
fn open_refusals() -> (Config, Vec<Input>) {
    (
        config(),
        vec![
            Input::ManualStart,
            acked(A1),
            rx(A1, open(23456, vec![Capability::FourOctetAs(23456)])),
            Input::IdleHoldTimerExpired,
            acked(ConnId::active(2)),
            rx(
                ConnId::active(2),
                open(65000, vec![Capability::FourOctetAs(65000)]),
            ),
            Input::IdleHoldTimerExpired,
        ],
    )
}

/// A peer that rejects the session with a NOTIFICATION each time it is
/// Established: the restarts are damped (1, 2, 4 s), then a stable session
/// forgets it.
fn notification_damping() -> (Config, Vec<Input>) {
    let mut inputs = vec![Input::ManualStart];
    for seq in 1..=3u64 {
        let c = ConnId::active(seq);
        if seq > 1 {
            inputs.push(Input::IdleHoldTimerExpired);
        }
        inputs.extend([
            acked(c),
            rx(c, open(PEER_AS, peer_caps())),
            rx(c, Message::Keepalive),
            rx(
                c,
                Message::Notification(Notification::MalformedAttributeList),
            ),
        ]);
    }
    let c = ConnId::active(4);
    inputs.extend([
        Input::IdleHoldTimerExpired,
        acked(c),
        rx(c, open(PEER_AS, peer_caps())),
        rx(c, Message::Keepalive),
        Input::StableTimerExpired,
        rx(
            c,
            Message::Notification(Notification::MalformedAttributeList),
        ),
    ]);
    (config(), inputs)
}

/// BFD gating: hold-down with Cease/BFD Down (inside a Hard Reset, the N
/// bit negotiated), every start ignored while held, release.
fn hold_down_and_release() -> (Config, Vec<Input>) {
    let mut c = config();
    c.enable_graceful_restart(120, true, false);
    let mut caps = peer_caps();
    caps.push(Capability::GracefulRestart(bgp::wire::GracefulRestart {
        flags: bgp::wire::GracefulRestart::NOTIFICATION,
        restart_time: 120,
        families: vec![],
    }));
    (
        c,
        vec![
            Input::ManualStart,
            acked(A1),
            rx(A1, open(PEER_AS, caps)),
            rx(A1, Message::Keepalive),
            Input::HoldDown {
                reason: "BFD down".into(),
                cease: CeaseSubcode::BfdDown,
            },
            Input::IdleHoldTimerExpired,
            Input::AutomaticStart,
            Input::ManualStart,
            Input::Release,
            acked(A2),
        ],
    )
}

/// RFC 9687: output waits, progress restarts the SendHoldTimer, then none
/// for the SendHoldTime.
fn send_hold_expiry() -> (Config, Vec<Input>) {
    (
        config(),
        vec![
            Input::ManualStart,
            acked(A1),
            rx(A1, open(PEER_AS, peer_caps())),
            rx(A1, Message::Keepalive),
            Input::SendProgress {
                conn: A1,
                waiting: true,
            },
            Input::SendProgress {
                conn: A1,
                waiting: true,
            },
            Input::SendHoldTimerExpired { conn: A1 },
        ],
    )
}

type Scenario = fn() -> (Config, Vec<Input>);

const SCENARIOS: [(&str, Scenario); 6] = [
    ("established_then_hold_expiry", established_then_hold_expiry),
    ("collision", collision),
    ("open_refusals", open_refusals),
    ("notification_damping", notification_damping),
    ("hold_down_and_release", hold_down_and_release),
    ("send_hold_expiry", send_hold_expiry),
];

fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.jsonl"))
}

/// The log of running `inputs` from `config`.
fn record(config: &Config, inputs: &[Input]) -> String {
    let mut fsm = Session::new(config.clone()).unwrap();
    let mut log = serde_json::to_string(&json!({ "config": config })).unwrap();
    log.push('\n');
    for input in inputs {
        let out: Vec<Output> = fsm.process(input.clone());
        log.push_str(&serde_json::to_string(&json!({ "in": input, "out": out })).unwrap());
        log.push('\n');
    }
    log
}

#[test]
fn recorded_logs_replay_to_the_recorded_outputs() {
    let bless = std::env::var_os("METALLB_BLESS_GOLDEN").is_some();
    for (name, scenario) in SCENARIOS {
        let (config, inputs) = scenario();
        let file = path(name);
        if bless {
            std::fs::write(&file, record(&config, &inputs)).unwrap();
        }
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (record it with METALLB_BLESS_GOLDEN=1)",
                file.display()
            )
        });
        let mut lines = text.lines();
        let head: Value = serde_json::from_str(lines.next().expect("config line")).unwrap();
        let logged_config: Config = serde_json::from_value(head["config"].clone()).unwrap();
        assert_eq!(logged_config, config, "{name}: the log's configuration");
        let mut fsm = Session::new(logged_config).unwrap();
        let mut replayed_inputs = Vec::new();
        for (i, line) in lines.enumerate() {
            let entry: Value = serde_json::from_str(line).unwrap();
            let input: Input = serde_json::from_value(entry["in"].clone())
                .unwrap_or_else(|e| panic!("{name} line {}: {e}", i + 2));
            let out = serde_json::to_value(fsm.process(input.clone())).unwrap();
            assert_eq!(
                out,
                entry["out"],
                "{name}, input {} ({:?}): outputs differ from the log",
                i + 1,
                input
            );
            replayed_inputs.push(input);
        }
        assert_eq!(replayed_inputs, inputs, "{name}: the log's inputs");
    }
}

/// The logs say what the scenarios are about (so that a re-recording that
/// lost the point is noticed): spot checks on the recorded outputs.
#[test]
fn the_logs_show_what_their_scenarios_are_about() {
    let read = |name: &str| std::fs::read_to_string(path(name)).unwrap();
    let damping = read("notification_damping");
    for secs in [1, 2, 4] {
        assert!(
            damping.contains(&format!(
                r#"{{"duration":{{"nanos":0,"secs":{secs}}},"output":"set_timer","timer":"idle_hold"}}"#
            )),
            "IdleHold {secs} s in {damping}"
        );
    }
    assert!(damping.contains(r#""timer":"stable""#));
    let refusals = read("open_refusals");
    // Two refusals, each in its `send` and its `session_down`.
    assert_eq!(refusals.matches("Bad Peer AS").count(), 4, "{refusals}");
    assert!(read("collision").contains("Connection Collision Resolution"));
    let held = read("hold_down_and_release");
    assert!(held.contains("Hard Reset"), "{held}");
    assert!(read("send_hold_expiry").contains("Send Hold Timer Expired"));
    assert!(read("established_then_hold_expiry").contains("Hold Timer Expired"));
}
