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

/// Two Services sharing one IP (`allow-shared-ip`): the IP stays answered
/// until the last one releases it, on the union of their allow-lists.
#[test]
fn shared_ip_is_owned_until_its_last_claim_is_released() {
    let t0 = Instant::now();
    let mut s = L2State::new(AnnounceConfig::default());
    s.set_interfaces(t0, two_ifaces());
    let shared = ip("192.0.2.10");
    let req = arp_request_for("192.0.2.10");
    s.claim(t0, "ns/a", shared, AllowedInterfaces::only(["eth0"]));
    s.claim(t0, "ns/b", shared, AllowedInterfaces::only(["eth1"]));
    assert_eq!(s.owners(&shared), ["ns/a", "ns/b"]);
    assert_eq!(s.announced_on(&shared), ["eth0", "eth1"], "union of lists");
    assert!(s.handle_frame("eth1", &req).reply_frame().is_some());

    // ns/b goes: eth1 is no longer wanted by anyone, eth0 still is.
    s.release(t0, "ns/b", &shared);
    assert_eq!(s.owners(&shared), ["ns/a"]);
    assert_eq!(s.announced_on(&shared), ["eth0"]);
    assert!(s.handle_frame("eth0", &req).reply_frame().is_some());
    assert_eq!(
        s.handle_frame("eth1", &req).drop_reason(),
        Some(DropReason::InterfaceNotAllowed)
    );
    // Releasing what was never claimed, or twice, changes nothing.
    s.release(t0, "ns/b", &shared);
    s.release(t0, "ns/zzz", &shared);
    assert_eq!(s.announced_on(&shared), ["eth0"]);

    s.release(t0, "ns/a", &shared);
    assert!(s.owners(&shared).is_empty());
    assert!(!s.owned().contains(&shared));
    assert!(s.announced_on(&shared).is_empty());
    assert_eq!(
        s.handle_frame("eth0", &req).drop_reason(),
        Some(DropReason::NotOwned)
    );
}

/// A claim allowing every interface makes the union every interface; a
/// second claim that leaves the union as it was sends nothing.
#[test]
fn claims_union_and_quiet_repeats() {
    let t0 = Instant::now();
    let mut s = L2State::new(AnnounceConfig::default());
    s.set_interfaces(t0, two_ifaces());
    let shared = ip("192.0.2.20");
    s.claim(t0, "ns/a", shared, AllowedInterfaces::all());
    assert_eq!(s.poll(t0).len(), 4, "first claim bursts on both");
    while let Some(w) = s.next_wakeup() {
        s.poll(w);
    }
    let later = t0 + Duration::from_secs(10);
    s.claim(later, "ns/b", shared, AllowedInterfaces::only(["eth1"]));
    assert_eq!(s.announced_on(&shared), ["eth0", "eth1"]);
    assert!(s.poll(later).is_empty(), "union unchanged: nothing sent");
    s.claim(later, "ns/a", shared, AllowedInterfaces::all());
    assert!(s.poll(later).is_empty(), "repeat: nothing sent");
    // ns/a narrows to eth0: with ns/b's eth1 the union is unchanged.
    s.claim(later, "ns/a", shared, AllowedInterfaces::only(["eth0"]));
    assert_eq!(s.announced_on(&shared), ["eth0", "eth1"]);
    assert!(s.poll(later).is_empty(), "union unchanged: nothing sent");
    assert_eq!(s.next_wakeup(), None);
}

/// `release_owner` drops every IP of a Service; IPs shared with another
/// Service stay, and IPv6 groups are left only with their last address.
#[test]
fn release_owner_keeps_shared_ips_and_groups() {
    let t0 = Instant::now();
    let mut s = L2State::new(AnnounceConfig::default());
    s.set_interfaces(t0, vec![eth0()]);
    let g = solicited_node_multicast(v6(0x10));
    let join = MembershipChange::Join {
        ifindex: 2,
        interface: "eth0".into(),
        group: g,
    };
    let leave = MembershipChange::Leave {
        ifindex: 2,
        interface: "eth0".into(),
        group: g,
    };
    assert_eq!(
        s.claim(t0, "ns/a", ip("2001:db8::10"), AllowedInterfaces::all()),
        [join]
    );
    s.claim(t0, "ns/a", ip("192.0.2.30"), AllowedInterfaces::all());
    assert_eq!(
        s.claim(t0, "ns/b", ip("2001:db8::10"), AllowedInterfaces::all()),
        []
    );
    assert_eq!(s.release_owner(t0, "ns/a"), [], "ns/b still holds the v6");
    assert!(!s.owned().contains(&ip("192.0.2.30")));
    assert!(s.owned().contains(&ip("2001:db8::10")));
    assert_eq!(s.release_owner(t0, "ns/b"), [leave]);
    assert!(s.owned().is_empty());
    assert!(s.memberships().is_empty());
}

/// `disown` ends every claim on the IP; `own` is the unnamed claim.
#[test]
fn disown_ends_every_claim() {
    let t0 = Instant::now();
    let mut s = L2State::new(AnnounceConfig::default());
    s.set_interfaces(t0, vec![eth0()]);
    let a = ip("192.0.2.40");
    s.own(t0, a, AllowedInterfaces::all());
    s.claim(t0, "ns/a", a, AllowedInterfaces::all());
    assert_eq!(s.owners(&a), ["", "ns/a"]);
    s.disown(&a);
    assert!(s.owners(&a).is_empty());
    assert!(!s.owned().contains(&a));
    // A release after the disown is a no-op.
    assert_eq!(s.release(t0, "ns/a", &a), []);
}

mod claim_model {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[derive(Debug, Clone)]
    enum Op {
        Claim(usize, usize, Option<usize>),
        Release(usize, usize),
        ReleaseOwner(usize),
    }

    const OWNERS: [&str; 3] = ["ns/a", "ns/b", "ns/c"];
    const IFACES: [&str; 2] = ["eth0", "eth1"];

    fn ips() -> [IpAddr; 3] {
        [ip("192.0.2.50"), ip("2001:db8::50"), ip("2001:db8:1::50")]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..3usize, 0..3usize, proptest::option::of(0..2usize))
                .prop_map(|(o, i, f)| Op::Claim(o, i, f)),
            (0..3usize, 0..3usize).prop_map(|(o, i)| Op::Release(o, i)),
            (0..3usize).prop_map(Op::ReleaseOwner),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Against a model: an IP is owned iff some claim remains, on the
        /// union of the claims' interfaces; memberships are those of the
        /// owned IPv6 addresses on their interfaces.
        #[test]
        fn claims_match_model(ops in proptest::collection::vec(op(), 1..40)) {
            let t0 = Instant::now();
            let mut s = L2State::new(AnnounceConfig::default());
            s.set_interfaces(t0, two_ifaces());
            // ip -> owner -> interfaces (None: all)
            let mut model: BTreeMap<IpAddr, BTreeMap<&str, Option<&str>>> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Claim(o, i, f) => {
                        let allowed = f.map_or_else(AllowedInterfaces::all, |f| AllowedInterfaces::only([IFACES[f]]));
                        s.claim(t0, OWNERS[o], ips()[i], allowed);
                        model.entry(ips()[i]).or_default().insert(OWNERS[o], f.map(|f| IFACES[f]));
                    }
                    Op::Release(o, i) => {
                        s.release(t0, OWNERS[o], &ips()[i]);
                        if let Some(m) = model.get_mut(&ips()[i]) {
                            m.remove(OWNERS[o]);
                        }
                    }
                    Op::ReleaseOwner(o) => {
                        s.release_owner(t0, OWNERS[o]);
                        for m in model.values_mut() {
                            m.remove(OWNERS[o]);
                        }
                    }
                }
                model.retain(|_, m| !m.is_empty());
                let mut groups = BTreeSet::new();
                for ip in ips() {
                    let Some(m) = model.get(&ip) else {
                        prop_assert!(!s.owned().contains(&ip));
                        prop_assert!(s.announced_on(&ip).is_empty());
                        prop_assert!(s.owners(&ip).is_empty());
                        continue;
                    };
                    let want: Vec<String> = if m.values().any(Option::is_none) {
                        IFACES.iter().map(|s| s.to_string()).collect()
                    } else {
                        m.values().flatten().map(|s| s.to_string()).collect::<BTreeSet<_>>().into_iter().collect()
                    };
                    prop_assert_eq!(s.announced_on(&ip), want.clone());
                    prop_assert_eq!(s.owners(&ip), m.keys().map(|s| s.to_string()).collect::<Vec<_>>());
                    if let IpAddr::V6(v6) = ip {
                        for name in &want {
                            groups.insert((name.clone(), solicited_node_multicast(v6)));
                        }
                    }
                }
                let have: BTreeSet<(String, std::net::Ipv6Addr)> =
                    s.memberships().into_iter().map(|(_, n, g)| (n, g)).collect();
                prop_assert_eq!(have, groups);
            }
        }
    }
}

/// `reannounce`: every owned address gets a new burst on its interfaces, counted
/// like the first; nothing changes for addresses released before.
#[test]
fn reannounce_sends_a_new_burst_for_every_owned_address() {
    let t0 = Instant::now();
    let mut s = L2State::new(AnnounceConfig::default());
    s.set_interfaces(t0, two_ifaces());
    s.own(t0, ip("192.0.2.10"), AllowedInterfaces::only(["eth0"]));
    s.own(t0, ip("192.0.2.11"), AllowedInterfaces::all());
    s.own(t0, ip("192.0.2.12"), AllowedInterfaces::all());
    s.disown(&ip("192.0.2.12"));
    // 2 frames per round and interface: eth0 for .10, eth0 and eth1 for .11.
    assert_eq!(s.poll(t0).len(), 6);
    let quiet = t0 + Duration::from_secs(30);
    let mut t = t0;
    while t < quiet {
        t += Duration::from_millis(100);
        s.poll(t);
    }
    assert!(s.poll(quiet).is_empty(), "the first burst is over");
    assert_eq!(s.counters(&ip("192.0.2.10")).gratuitous_sent, 10);

    assert_eq!(s.reannounce(quiet), 2, "the two owned addresses");
    let out = s.poll(quiet);
    let mut sent: Vec<(String, IpAddr)> = out.iter().map(|o| (o.interface.clone(), o.ip)).collect();
    sent.dedup();
    assert_eq!(
        sent,
        [
            ("eth0".to_owned(), ip("192.0.2.10")),
            ("eth0".to_owned(), ip("192.0.2.11")),
            ("eth1".to_owned(), ip("192.0.2.11")),
        ]
    );
    assert_eq!(s.counters(&ip("192.0.2.10")).gratuitous_sent, 12);
    // Nothing owned: nothing to announce.
    s.disown(&ip("192.0.2.10"));
    s.disown(&ip("192.0.2.11"));
    assert_eq!(s.reannounce(quiet), 0);
}
