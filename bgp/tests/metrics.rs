//! MetalLB's metric names, types and labels, exactly; and that a session's
//! state moves the right series.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::SystemTime;

use bgp::metrics::{BgpMetrics, DEFAULT_VRF, peer_label};
use bgp::rib_out::{AdjRibOut, Advertisement, SessionContext};
use bgp::state::{FsmState, MessageCounters, SessionState};
use bgp::wire::{Capabilities, MessageType, negotiate};
use prometheus::Registry;
use prometheus::proto::{MetricFamily, MetricType};

/// name -> (type, label names)
fn expected() -> BTreeMap<&'static str, (MetricType, Vec<&'static str>)> {
    use MetricType::{COUNTER, GAUGE};
    let p = vec!["peer"];
    let pv = vec!["peer", "vrf"];
    BTreeMap::from([
        ("metallb_bgp_session_up", (GAUGE, p.clone())),
        ("metallb_bgp_updates_total", (COUNTER, p.clone())),
        ("metallb_bgp_announced_prefixes_total", (GAUGE, p.clone())),
        ("metallb_bgp_pending_prefixes_total", (GAUGE, p)),
        ("metallb_bgp_opens_sent", (COUNTER, pv.clone())),
        ("metallb_bgp_opens_received", (COUNTER, pv.clone())),
        ("metallb_bgp_notifications_sent", (COUNTER, pv.clone())),
        ("metallb_bgp_updates_total_received", (COUNTER, pv.clone())),
        ("metallb_bgp_keepalives_sent", (COUNTER, pv.clone())),
        ("metallb_bgp_keepalives_received", (COUNTER, pv.clone())),
        ("metallb_bgp_route_refresh_sent", (COUNTER, pv.clone())),
        ("metallb_bgp_total_sent", (COUNTER, pv.clone())),
        ("metallb_bgp_total_received", (COUNTER, pv)),
    ])
}

fn families(registry: &Registry) -> BTreeMap<String, MetricFamily> {
    registry
        .gather()
        .into_iter()
        .map(|f| (f.name().to_owned(), f))
        .collect()
}

/// The value of `name` for the series whose labels are `labels`.
fn value(registry: &Registry, name: &str, labels: &[(&str, &str)]) -> f64 {
    let fams = families(registry);
    let fam = fams
        .get(name)
        .unwrap_or_else(|| panic!("{name} not exported"));
    let m = fam
        .get_metric()
        .iter()
        .find(|m| {
            let got: Vec<(&str, &str)> = m
                .get_label()
                .iter()
                .map(|l| (l.name(), l.value()))
                .collect();
            labels.iter().all(|l| got.contains(l)) && got.len() == labels.len()
        })
        .unwrap_or_else(|| panic!("{name}{labels:?} not exported"));
    match fam.get_field_type() {
        MetricType::COUNTER => m.get_counter().get_value(),
        MetricType::GAUGE => m.get_gauge().get_value(),
        other => panic!("{name} is {other:?}"),
    }
}

#[test]
fn names_types_and_labels_are_metallbs() {
    let registry = Registry::new();
    let metrics = BgpMetrics::register(&registry).unwrap();
    let _s = metrics.session("192.0.2.1:179", None);
    let fams = families(&registry);
    let got: BTreeMap<&str, (MetricType, Vec<&str>)> = fams
        .values()
        .map(|f| {
            let metric = &f.get_metric()[0];
            let labels = metric.get_label().iter().map(|l| l.name()).collect();
            (f.name(), (f.get_field_type(), labels))
        })
        .collect();
    assert_eq!(got, expected());
    for f in fams.values() {
        assert!(!f.help().is_empty(), "{} has no help", f.name());
        assert_eq!(f.get_metric().len(), 1);
    }
    // The text exposition carries the same names and types.
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap();
    assert!(text.contains("# TYPE metallb_bgp_session_up gauge"));
    assert!(text.contains("# TYPE metallb_bgp_updates_total counter"));
    assert!(text.contains("metallb_bgp_opens_sent{peer=\"192.0.2.1:179\",vrf=\"default\"} 0"));
    // Registering twice on one registry is an error, not a panic.
    assert!(BgpMetrics::register(&registry).is_err());
}

#[test]
fn peer_label_is_addr_port() {
    assert_eq!(
        peer_label(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            179
        )),
        "192.0.2.1:179"
    );
    assert_eq!(
        peer_label(SocketAddr::new(
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
            1179
        )),
        "[2001:db8::1]:1179"
    );
}

#[test]
fn session_state_moves_the_right_series() {
    let registry = Registry::new();
    let metrics = BgpMetrics::register(&registry).unwrap();
    let peer = "192.0.2.1:179";
    let other = "192.0.2.2:179";
    let mut sm = metrics.session(peer, None);
    let mut om = metrics.session(other, Some("red"));
    assert_eq!(sm.vrf(), DEFAULT_VRF);
    let p = [("peer", peer)];
    let pv = [("peer", peer), ("vrf", "default")];

    let t0 = SystemTime::UNIX_EPOCH;
    let mut state = SessionState::new(peer, t0);
    let mut rib = AdjRibOut::new();
    rib.set_advertisements((1..=3).map(|i| Advertisement::host(Ipv4Addr::new(10, 0, 0, i).into())));
    state.rib_out = rib.state();
    sm.update(&state);
    assert_eq!(value(&registry, "metallb_bgp_session_up", &p), 0.0);
    assert_eq!(
        value(&registry, "metallb_bgp_pending_prefixes_total", &p),
        3.0
    );
    assert_eq!(
        value(&registry, "metallb_bgp_announced_prefixes_total", &p),
        0.0
    );

    // OPEN, KEEPALIVE each way, Established, the initial sync drained.
    state.transition(FsmState::OpenSent, t0);
    state.sent.record(MessageType::Open);
    state.received.record(MessageType::Open);
    state.transition(FsmState::OpenConfirm, t0);
    state.sent.record(MessageType::Keepalive);
    state.received.record(MessageType::Keepalive);
    state.transition(FsmState::Established, t0);
    rib.on_session_up();
    let none = Capabilities::default();
    let ctx = SessionContext::new(
        negotiate(&none, &none),
        65000,
        false,
        Ipv4Addr::new(192, 0, 2, 10).into(),
    );
    for m in rib.drain(&ctx) {
        state.sent.record_encoded(&m);
    }
    state.rib_out = rib.state();
    sm.update(&state);
    assert_eq!(value(&registry, "metallb_bgp_session_up", &p), 1.0);
    assert_eq!(
        value(&registry, "metallb_bgp_announced_prefixes_total", &p),
        3.0
    );
    assert_eq!(
        value(&registry, "metallb_bgp_pending_prefixes_total", &p),
        0.0
    );
    // One UPDATE with the three prefixes and the IPv4 End-of-RIB.
    assert_eq!(value(&registry, "metallb_bgp_updates_total", &p), 2.0);
    assert_eq!(value(&registry, "metallb_bgp_opens_sent", &pv), 1.0);
    assert_eq!(value(&registry, "metallb_bgp_opens_received", &pv), 1.0);
    assert_eq!(value(&registry, "metallb_bgp_keepalives_sent", &pv), 1.0);
    assert_eq!(
        value(&registry, "metallb_bgp_keepalives_received", &pv),
        1.0
    );
    assert_eq!(value(&registry, "metallb_bgp_total_sent", &pv), 4.0);
    assert_eq!(value(&registry, "metallb_bgp_total_received", &pv), 2.0);
    assert_eq!(
        value(&registry, "metallb_bgp_updates_total_received", &pv),
        0.0
    );
    assert_eq!(value(&registry, "metallb_bgp_notifications_sent", &pv), 0.0);
    assert_eq!(value(&registry, "metallb_bgp_route_refresh_sent", &pv), 0.0);

    // Updating with the same state adds nothing; more messages add more.
    sm.update(&state);
    assert_eq!(value(&registry, "metallb_bgp_updates_total", &p), 2.0);
    state.received.record_n(MessageType::Update, 5);
    state.sent.record(MessageType::RouteRefresh);
    state.sent.record(MessageType::Notification);
    state.transition(FsmState::Idle, t0);
    rib.reset();
    state.rib_out = rib.state();
    sm.update(&state);
    assert_eq!(value(&registry, "metallb_bgp_session_up", &p), 0.0);
    assert_eq!(
        value(&registry, "metallb_bgp_announced_prefixes_total", &p),
        0.0
    );
    assert_eq!(
        value(&registry, "metallb_bgp_pending_prefixes_total", &p),
        3.0
    );
    assert_eq!(
        value(&registry, "metallb_bgp_updates_total_received", &pv),
        5.0
    );
    assert_eq!(value(&registry, "metallb_bgp_route_refresh_sent", &pv), 1.0);
    assert_eq!(value(&registry, "metallb_bgp_notifications_sent", &pv), 1.0);
    assert_eq!(value(&registry, "metallb_bgp_total_sent", &pv), 6.0);

    // A new state object (counters went down) counts from zero again and
    // keeps the Prometheus counter monotonic.
    let mut fresh = SessionState::new(peer, t0);
    fresh.sent = MessageCounters::default();
    fresh.sent.record(MessageType::Open);
    sm.update(&fresh);
    assert_eq!(value(&registry, "metallb_bgp_total_sent", &pv), 7.0);
    fresh.sent.record(MessageType::Open);
    sm.update(&fresh);
    assert_eq!(value(&registry, "metallb_bgp_opens_sent", &pv), 2.0);
    assert_eq!(value(&registry, "metallb_bgp_total_sent", &pv), 8.0);

    // The other session's series did not move.
    let ov = [("peer", other), ("vrf", "red")];
    assert_eq!(value(&registry, "metallb_bgp_total_sent", &ov), 0.0);
    om.update(&SessionState::new(other, t0));
    assert_eq!(
        value(&registry, "metallb_bgp_session_up", &[("peer", other)]),
        0.0
    );

    // De-configuring removes the session's series only.
    sm.remove();
    let fams = families(&registry);
    for f in fams.values() {
        assert!(
            f.get_metric()
                .iter()
                .all(|m| m.get_label().iter().all(|l| l.value() != peer)),
            "{} still has {peer}",
            f.name()
        );
    }
    assert_eq!(
        value(&registry, "metallb_bgp_session_up", &[("peer", other)]),
        0.0
    );
}
