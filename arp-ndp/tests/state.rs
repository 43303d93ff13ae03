//! The state from memory: announced-on interfaces, counters, group
//! memberships, and the Prometheus metrics.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use arp_ndp::announce::AnnounceConfig;
use arp_ndp::interfaces::AllowedInterfaces;
use arp_ndp::metrics::Metrics;
use arp_ndp::packet::*;
use arp_ndp::responder::DropReason;
use arp_ndp::state::{IpCounters, L2State, MembershipChange};
use common::*;
use prometheus::Registry;
use prometheus::proto::MetricType;

/// (name, type, labels, value) of one gathered metric.
type Sample = (String, MetricType, Vec<(String, String)>, f64);

fn arp_request_for(target: &str) -> Vec<u8> {
    ArpFrame::request(
        CLIENT_MAC,
        Ipv4Addr::new(192, 0, 2, 1),
        target.parse().unwrap(),
    )
    .encode()
}

fn two_ifaces() -> Vec<arp_ndp::interfaces::Interface> {
    vec![eth0(), iface("eth1", 3, OTHER_MAC)]
}

#[test]
fn announced_on_follows_allow_list_and_eligibility() {
    let t0 = Instant::now();
    let mut s = L2State::new(AnnounceConfig::default());
    s.set_interfaces(t0, two_ifaces());
    s.own(t0, ip("192.0.2.10"), AllowedInterfaces::all());
    s.own(
        t0,
        ip("192.0.2.11"),
        AllowedInterfaces::only(["eth1", "eth9"]),
    );
    assert_eq!(s.announced_on(&ip("192.0.2.10")), ["eth0", "eth1"]);
    assert_eq!(s.announced_on(&ip("192.0.2.11")), ["eth1"]);
    assert!(s.announced_on(&ip("192.0.2.12")).is_empty());
    // eth1 disappears: the IPs follow.
    s.set_interfaces(t0, vec![eth0()]);
    assert_eq!(s.announced_on(&ip("192.0.2.10")), ["eth0"]);
    assert!(s.announced_on(&ip("192.0.2.11")).is_empty());
    s.disown(&ip("192.0.2.10"));
    assert!(s.announced_on(&ip("192.0.2.10")).is_empty());
}

#[test]
fn counters_per_ip() {
    let t0 = Instant::now();
    let mut s = L2State::new(AnnounceConfig::default());
    s.set_interfaces(t0, two_ifaces());
    s.own(t0, ip("192.0.2.10"), AllowedInterfaces::only(["eth0"]));
    // Burst: 2 ARP frames per round on one interface.
    assert_eq!(s.poll(t0).len(), 2);
    // Answered on eth0.
    assert!(
        s.handle_frame("eth0", &arp_request_for("192.0.2.10"))
            .reply_frame()
            .is_some()
    );
    // Received but not answered on eth1 (not allowed): counted as received.
    let d = s.handle_frame("eth1", &arp_request_for("192.0.2.10"));
    assert_eq!(d.drop_reason(), Some(DropReason::InterfaceNotAllowed));
    // Not ours: not counted per IP.
    s.handle_frame("eth0", &arp_request_for("192.0.2.99"));
    // Unknown interface.
    let d = s.handle_frame("eth7", &arp_request_for("192.0.2.10"));
    assert_eq!(d.drop_reason(), Some(DropReason::InterfaceNotEligible));
    assert_eq!(
        s.counters(&ip("192.0.2.10")),
        IpCounters {
            requests_received: 2,
            responses_sent: 1,
            gratuitous_sent: 2
        }
    );
    assert_eq!(s.counters(&ip("192.0.2.99")), IpCounters::default());
    assert_eq!(s.drops().get(DropReason::NotOwned), 1);
    assert_eq!(s.drops().get(DropReason::InterfaceNotAllowed), 1);
    assert_eq!(s.drops().get(DropReason::InterfaceNotEligible), 1);
}

#[test]
fn resync_of_unchanged_ip_sends_nothing() {
    let t0 = Instant::now();
    let mut s = L2State::new(AnnounceConfig::default());
    s.set_interfaces(t0, two_ifaces());
    s.own(t0, ip("192.0.2.10"), AllowedInterfaces::all());
    assert_eq!(s.poll(t0).len(), 4);
    while let Some(w) = s.next_wakeup() {
        s.poll(w);
    }
    let t = t0 + Duration::from_secs(10);
    assert!(s.poll(t).is_empty());
    s.own(t, ip("192.0.2.10"), AllowedInterfaces::all());
    s.set_interfaces(t, two_ifaces());
    assert!(s.poll(t).is_empty());
    assert_eq!(s.next_wakeup(), None);
    // A new interface bursts again (on the whole new set).
    let mut three = two_ifaces();
    three.push(iface("eth2", 4, MacAddr([2, 0, 0, 0, 0, 0x22])));
    s.set_interfaces(t, three);
    assert_eq!(s.poll(t).len(), 6);
}

#[test]
fn solicited_node_memberships_are_refcounted() {
    let t0 = Instant::now();
    let mut s = L2State::new(AnnounceConfig::default());
    s.set_interfaces(t0, vec![eth0()]);
    let g = solicited_node_multicast(v6(0x10));
    let join = MembershipChange::Join {
        ifindex: 2,
        interface: "eth0".into(),
        group: g,
    };
    // 2001:db8::10 and 2001:db8:1::10 share the low 24 bits, so the group.
    assert_eq!(
        s.own(t0, ip("2001:db8::10"), AllowedInterfaces::all()),
        [join]
    );
    assert_eq!(
        s.own(t0, ip("2001:db8:1::10"), AllowedInterfaces::all()),
        []
    );
    assert_eq!(s.own(t0, ip("192.0.2.10"), AllowedInterfaces::all()), []);
    assert_eq!(s.disown(&ip("2001:db8::10")), []);
    assert_eq!(
        s.disown(&ip("2001:db8:1::10")),
        [MembershipChange::Leave {
            ifindex: 2,
            interface: "eth0".into(),
            group: g
        }]
    );
    assert!(s.memberships().is_empty());
}

#[test]
fn memberships_follow_interfaces_and_allow_lists() {
    let t0 = Instant::now();
    let mut s = L2State::new(AnnounceConfig::default());
    s.set_interfaces(t0, vec![eth0()]);
    s.own(t0, ip("2001:db8::10"), AllowedInterfaces::only(["eth1"]));
    assert!(s.memberships().is_empty(), "not allowed on eth0");
    let g = solicited_node_multicast(v6(0x10));
    let changes = s.set_interfaces(t0, two_ifaces());
    assert_eq!(
        changes,
        [MembershipChange::Join {
            ifindex: 3,
            interface: "eth1".into(),
            group: g
        }]
    );
    let changes = s.set_interfaces(t0, vec![eth0()]);
    assert_eq!(
        changes,
        [MembershipChange::Leave {
            ifindex: 3,
            interface: "eth1".into(),
            group: g
        }]
    );
}

#[test]
fn ndp_request_counted_and_answered() {
    let t0 = Instant::now();
    let mut s = L2State::new(AnnounceConfig::default());
    s.set_interfaces(t0, vec![eth0()]);
    s.own(t0, ip("2001:db8::10"), AllowedInterfaces::all());
    assert_eq!(s.poll(t0).len(), 1);
    let ns = NeighborSolicitation::resolve_frame(CLIENT_MAC, v6(1), v6(0x10));
    assert!(s.handle_frame("eth0", &ns).reply_frame().is_some());
    assert_eq!(
        s.counters(&ip("2001:db8::10")),
        IpCounters {
            requests_received: 1,
            responses_sent: 1,
            gratuitous_sent: 1
        }
    );
}

#[test]
fn metrics_names_types_and_labels() {
    let registry = Registry::new();
    let metrics = Metrics::register(&registry).unwrap();
    let t0 = Instant::now();
    let mut s = L2State::new(AnnounceConfig::default()).with_metrics(metrics);
    s.set_interfaces(t0, vec![eth0()]);
    s.own(t0, ip("192.0.2.10"), AllowedInterfaces::all());
    s.poll(t0);
    s.handle_frame("eth0", &arp_request_for("192.0.2.10"));

    let families = registry.gather();
    let mut seen: Vec<Sample> = families
        .iter()
        .flat_map(|f| {
            f.get_metric().iter().map(move |m| {
                (
                    f.name().to_owned(),
                    f.get_field_type(),
                    m.get_label()
                        .iter()
                        .map(|l| (l.name().to_owned(), l.value().to_owned()))
                        .collect(),
                    m.get_counter().get_value(),
                )
            })
        })
        .collect();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    let label = vec![("ip".to_owned(), "192.0.2.10".to_owned())];
    assert_eq!(
        seen,
        [
            (
                "metallb_layer2_gratuitous_sent".to_owned(),
                MetricType::COUNTER,
                label.clone(),
                2.0
            ),
            (
                "metallb_layer2_requests_received".to_owned(),
                MetricType::COUNTER,
                label.clone(),
                1.0
            ),
            (
                "metallb_layer2_responses_sent".to_owned(),
                MetricType::COUNTER,
                label,
                1.0
            ),
        ]
    );
    // Registering twice on one registry is refused, not duplicated.
    assert!(Metrics::register(&registry).is_err());
    // IPv6 label format.
    let r2 = Registry::new();
    let m2 = Metrics::register(&r2).unwrap();
    m2.gratuitous_sent(IpAddr::V6(v6(0x10)), 3);
    let f = r2.gather();
    assert_eq!(f[0].get_metric()[0].get_label()[0].value(), "2001:db8::10");
}
