//! The responder's decisions: one test per answer form and per drop
//! reason.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use arp_ndp::interfaces::AllowedInterfaces;
use arp_ndp::packet::*;
use arp_ndp::responder::{Decision, DropCounters, DropReason, OwnedIps, respond};
use common::*;

fn owned(ips: &[&str]) -> OwnedIps {
    let mut o = OwnedIps::new();
    for i in ips {
        o.insert(ip(i), AllowedInterfaces::all());
    }
    o
}

fn arp_request_for(target: &str) -> Vec<u8> {
    ArpFrame::request(
        CLIENT_MAC,
        Ipv4Addr::new(192, 0, 2, 1),
        target.parse().unwrap(),
    )
    .encode()
}

fn drop_reason(d: &Decision) -> DropReason {
    d.drop_reason().expect("expected a drop")
}

// ---------------------------------------------------------------- ARP

#[test]
fn arp_request_for_owned_ip_gets_unicast_reply() {
    let d = respond(
        &owned(&["192.0.2.10"]),
        &eth0(),
        &arp_request_for("192.0.2.10"),
    );
    let Decision::Reply { ip: got, frame } = d else {
        panic!("no reply: {d:?}")
    };
    assert_eq!(got, ip("192.0.2.10"));
    let r = ArpFrame::decode(&frame).unwrap();
    assert_eq!(r.eth_dst, CLIENT_MAC);
    assert_eq!(r.eth_src, OUR_MAC);
    assert_eq!(r.arp.op, ArpOp::Reply);
    assert_eq!(r.arp.sender_mac, OUR_MAC);
    assert_eq!(r.arp.sender_ip, Ipv4Addr::new(192, 0, 2, 10));
    assert_eq!(r.arp.target_mac, CLIENT_MAC);
    assert_eq!(r.arp.target_ip, Ipv4Addr::new(192, 0, 2, 1));
}

#[test]
fn arp_request_unicast_to_our_mac_is_answered() {
    let mut f = ArpFrame::decode(&arp_request_for("192.0.2.10")).unwrap();
    f.eth_dst = OUR_MAC;
    let d = respond(&owned(&["192.0.2.10"]), &eth0(), &f.encode());
    assert!(d.reply_frame().is_some(), "{d:?}");
}

#[test]
fn arp_probe_is_answered_to_the_prober() {
    // RFC 5227 probe: sender IP 0.0.0.0. The reply tells the prober the
    // address is taken.
    let f = ArpFrame::request(
        CLIENT_MAC,
        Ipv4Addr::UNSPECIFIED,
        "192.0.2.10".parse().unwrap(),
    );
    let d = respond(&owned(&["192.0.2.10"]), &eth0(), &f.encode());
    let r = ArpFrame::decode(d.reply_frame().unwrap()).unwrap();
    assert_eq!(r.eth_dst, CLIENT_MAC);
    assert_eq!(r.arp.target_ip, Ipv4Addr::UNSPECIFIED);
}

#[test]
fn drop_arp_not_owned() {
    let d = respond(
        &owned(&["192.0.2.10"]),
        &eth0(),
        &arp_request_for("192.0.2.11"),
    );
    assert_eq!(
        d,
        Decision::Drop {
            reason: DropReason::NotOwned,
            ip: Some(ip("192.0.2.11"))
        }
    );
}

#[test]
fn drop_arp_interface_not_allowed() {
    let mut o = OwnedIps::new();
    o.insert(ip("192.0.2.10"), AllowedInterfaces::only(["eth1"]));
    let d = respond(&o, &eth0(), &arp_request_for("192.0.2.10"));
    assert_eq!(drop_reason(&d), DropReason::InterfaceNotAllowed);
    // ... and answered on the allowed one.
    let eth1 = iface("eth1", 3, OUR_MAC);
    assert!(
        respond(&o, &eth1, &arp_request_for("192.0.2.10"))
            .reply_frame()
            .is_some()
    );
}

#[test]
fn drop_arp_interface_not_eligible() {
    let mut i = eth0();
    i.arp = false;
    let d = respond(&owned(&["192.0.2.10"]), &i, &arp_request_for("192.0.2.10"));
    assert_eq!(drop_reason(&d), DropReason::InterfaceNotEligible);
}

#[test]
fn drop_arp_reply() {
    let reply = ArpFrame::reply_to(
        &ArpFrame::decode(&arp_request_for("192.0.2.10"))
            .unwrap()
            .arp,
        OTHER_MAC,
    );
    let d = respond(&owned(&["192.0.2.10"]), &eth0(), &reply.encode());
    assert_eq!(drop_reason(&d), DropReason::NotRequest);
    // Gratuitous replies from someone else too.
    let g = ArpFrame::gratuitous(ArpOp::Reply, OTHER_MAC, "192.0.2.10".parse().unwrap());
    assert_eq!(
        drop_reason(&respond(&owned(&["192.0.2.10"]), &eth0(), &g.encode())),
        DropReason::NotRequest
    );
}

#[test]
fn drop_arp_wrong_destination_mac() {
    let mut f = ArpFrame::decode(&arp_request_for("192.0.2.10")).unwrap();
    f.eth_dst = OTHER_MAC;
    let d = respond(&owned(&["192.0.2.10"]), &eth0(), &f.encode());
    assert_eq!(drop_reason(&d), DropReason::WrongDestination);
}

#[test]
fn drop_arp_vlan_tagged_on_parent() {
    let mut f = arp_request_for("192.0.2.10");
    f.splice(12..12, [0x81, 0x00, 0x00, 0x64]);
    let d = respond(&owned(&["192.0.2.10"]), &eth0(), &f);
    assert_eq!(drop_reason(&d), DropReason::OtherVlan);
    let mut f = arp_request_for("192.0.2.10");
    f.splice(12..12, [0x88, 0xa8, 0x00, 0x64]);
    let d = respond(&owned(&["192.0.2.10"]), &eth0(), &f);
    assert_eq!(drop_reason(&d), DropReason::OtherVlan);
}

#[test]
fn drop_arp_invalid() {
    let o = owned(&["192.0.2.10"]);
    let f = arp_request_for("192.0.2.10");
    assert_eq!(
        drop_reason(&respond(&o, &eth0(), &f[..30])),
        DropReason::Invalid
    );
    assert_eq!(
        drop_reason(&respond(&o, &eth0(), &f[..5])),
        DropReason::Invalid
    );
    let mut bad = f.clone();
    bad[15] = 6; // hardware type
    assert_eq!(
        drop_reason(&respond(&o, &eth0(), &bad)),
        DropReason::Invalid
    );
    // A multicast sender hardware address would get a multicast reply.
    let mut f = ArpFrame::decode(&f).unwrap();
    f.arp.sender_mac = MacAddr::BROADCAST;
    assert_eq!(
        drop_reason(&respond(&o, &eth0(), &f.encode())),
        DropReason::Invalid
    );
}

#[test]
fn drop_own_frames() {
    let g = ArpFrame::gratuitous(ArpOp::Request, OUR_MAC, "192.0.2.10".parse().unwrap());
    let d = respond(&owned(&["192.0.2.10"]), &eth0(), &g.encode());
    assert_eq!(drop_reason(&d), DropReason::FromSelf);
}

// ---------------------------------------------------------------- NDP

fn ns_frame() -> Vec<u8> {
    NeighborSolicitation::resolve_frame(CLIENT_MAC, v6(1), v6(0x10))
}

#[test]
fn ns_for_owned_ip_gets_solicited_override_na() {
    let d = respond(&owned(&["2001:db8::10"]), &eth0(), &ns_frame());
    let Decision::Reply { ip: got, frame } = d else {
        panic!("no reply: {d:?}")
    };
    assert_eq!(got, IpAddr::V6(v6(0x10)));
    let (eth, ip6, na) = NeighborAdvertisement::decode_frame(&frame).unwrap();
    assert_eq!(eth.dst, CLIENT_MAC);
    assert_eq!(eth.src, OUR_MAC);
    assert_eq!(ip6.src, v6(0x10), "from the target, as Linux does");
    assert_eq!(ip6.dst, v6(1));
    assert_eq!(ip6.hop_limit, 255);
    assert_eq!(
        na,
        NeighborAdvertisement {
            router: false,
            solicited: true,
            override_flag: true,
            target: v6(0x10),
            target_lla: Some(OUR_MAC),
        }
    );
}

#[test]
fn ns_without_source_lla_is_answered_to_frame_source_mac() {
    // A unicast reachability probe: to our MAC and the target address,
    // no source link-layer option.
    let ns = NeighborSolicitation {
        target: v6(0x10),
        source_lla: None,
    };
    let f = ns.encode_frame(OUR_MAC, CLIENT_MAC, v6(1), v6(0x10), 255);
    let d = respond(&owned(&["2001:db8::10"]), &eth0(), &f);
    let (eth, ip6, na) = NeighborAdvertisement::decode_frame(d.reply_frame().unwrap()).unwrap();
    assert_eq!(eth.dst, CLIENT_MAC);
    assert_eq!(ip6.dst, v6(1));
    assert!(na.solicited && na.override_flag);
}

#[test]
fn source_lla_option_wins_over_frame_source() {
    let ns = NeighborSolicitation {
        target: v6(0x10),
        source_lla: Some(OTHER_MAC),
    };
    let g = solicited_node_multicast(v6(0x10));
    let f = ns.encode_frame(ipv6_multicast_mac(g), CLIENT_MAC, v6(1), g, 255);
    let d = respond(&owned(&["2001:db8::10"]), &eth0(), &f);
    let (eth, _, _) = NeighborAdvertisement::decode_frame(d.reply_frame().unwrap()).unwrap();
    assert_eq!(eth.dst, OTHER_MAC);
}

#[test]
fn dad_probe_gets_na_to_all_nodes() {
    let g = solicited_node_multicast(v6(0x10));
    let ns = NeighborSolicitation {
        target: v6(0x10),
        source_lla: None,
    };
    let f = ns.encode_frame(
        ipv6_multicast_mac(g),
        CLIENT_MAC,
        Ipv6Addr::UNSPECIFIED,
        g,
        255,
    );
    let d = respond(&owned(&["2001:db8::10"]), &eth0(), &f);
    let (eth, ip6, na) = NeighborAdvertisement::decode_frame(d.reply_frame().unwrap()).unwrap();
    assert_eq!(ip6.dst, ALL_NODES);
    assert_eq!(eth.dst, MacAddr([0x33, 0x33, 0, 0, 0, 1]));
    assert!(
        !na.solicited,
        "RFC 4861 7.2.4: Solicited clear for DAD answers"
    );
    assert!(na.override_flag);
}

#[test]
fn ns_behind_hop_by_hop_is_answered_like_a_plain_one() {
    let o = owned(&["2001:db8::10"]);
    let plain = respond(&o, &eth0(), &ns_frame());
    let f = with_ext_headers(&ns_frame(), &[(IPPROTO_HOPOPTS, padn_body())]);
    let d = respond(&o, &eth0(), &f);
    assert_eq!(d, plain, "the same NA, without extension headers");
    let (_, ip6, _) = NeighborAdvertisement::decode_frame(d.reply_frame().unwrap()).unwrap();
    assert_eq!(ip6.next_header, 58);
}

#[test]
fn fragmented_or_too_deep_ns_is_invalid() {
    let o = owned(&["2001:db8::10"]);
    let frag = with_ext_headers(&ns_frame(), &[(IPPROTO_FRAGMENT, vec![0; 7])]);
    assert_eq!(
        drop_reason(&respond(&o, &eth0(), &frag)),
        DropReason::Invalid
    );
    let deep = with_ext_headers(
        &ns_frame(),
        &vec![(IPPROTO_DSTOPTS, padn_body()); MAX_EXTENSION_HEADERS + 1],
    );
    assert_eq!(
        drop_reason(&respond(&o, &eth0(), &deep)),
        DropReason::Invalid
    );
    let mut udp = with_ext_headers(&ns_frame(), &[(IPPROTO_HOPOPTS, padn_body())]);
    udp[54] = 17;
    assert_eq!(
        drop_reason(&respond(&o, &eth0(), &udp)),
        DropReason::NotRequest
    );
}

#[test]
fn drop_ns_not_owned() {
    let d = respond(&owned(&["2001:db8::11"]), &eth0(), &ns_frame());
    assert_eq!(drop_reason(&d), DropReason::NotOwned);
}

#[test]
fn drop_ns_interface_not_allowed() {
    let mut o = OwnedIps::new();
    o.insert(ip("2001:db8::10"), AllowedInterfaces::only(["eth1"]));
    let d = respond(&o, &eth0(), &ns_frame());
    assert_eq!(drop_reason(&d), DropReason::InterfaceNotAllowed);
}

#[test]
fn drop_ns_interface_not_eligible() {
    let mut i = eth0();
    i.ndp = false;
    let d = respond(&owned(&["2001:db8::10"]), &i, &ns_frame());
    assert_eq!(drop_reason(&d), DropReason::InterfaceNotEligible);
}

#[test]
fn drop_ns_bad_hop_limit() {
    let ns = NeighborSolicitation {
        target: v6(0x10),
        source_lla: Some(CLIENT_MAC),
    };
    let g = solicited_node_multicast(v6(0x10));
    let f = ns.encode_frame(ipv6_multicast_mac(g), CLIENT_MAC, v6(1), g, 64);
    let d = respond(&owned(&["2001:db8::10"]), &eth0(), &f);
    assert_eq!(drop_reason(&d), DropReason::Invalid);
}

#[test]
fn drop_na_and_other_ipv6_as_not_request() {
    let na = NeighborAdvertisement {
        router: false,
        solicited: false,
        override_flag: true,
        target: v6(0x10),
        target_lla: Some(OTHER_MAC),
    }
    .encode_frame(
        ipv6_multicast_mac(ALL_NODES),
        OTHER_MAC,
        ll(0x77),
        ALL_NODES,
    );
    let d = respond(&owned(&["2001:db8::10"]), &eth0(), &na);
    assert_eq!(drop_reason(&d), DropReason::NotRequest);
}

#[test]
fn drop_ns_wrong_destination_mac() {
    let ns = NeighborSolicitation {
        target: v6(0x10),
        source_lla: None,
    };
    // Unicast to someone else's MAC (seen in promiscuous mode).
    let f = ns.encode_frame(OTHER_MAC, CLIENT_MAC, v6(1), v6(0x10), 255);
    let d = respond(&owned(&["2001:db8::10"]), &eth0(), &f);
    assert_eq!(drop_reason(&d), DropReason::WrongDestination);
    // To the solicited-node group of another address.
    let g = solicited_node_multicast(v6(0x11));
    let ns = NeighborSolicitation {
        target: v6(0x10),
        source_lla: Some(CLIENT_MAC),
    };
    let f = ns.encode_frame(ipv6_multicast_mac(g), CLIENT_MAC, v6(1), g, 255);
    let d = respond(&owned(&["2001:db8::10"]), &eth0(), &f);
    assert_eq!(drop_reason(&d), DropReason::WrongDestination);
}

#[test]
fn drop_ns_vlan_tagged() {
    let mut f = ns_frame();
    f.splice(12..12, [0x81, 0x00, 0x00, 0x64]);
    let d = respond(&owned(&["2001:db8::10"]), &eth0(), &f);
    assert_eq!(drop_reason(&d), DropReason::OtherVlan);
}

#[test]
fn drop_ns_from_multicast_source() {
    let ns = NeighborSolicitation {
        target: v6(0x10),
        source_lla: None,
    };
    let f = ns.encode_frame(OUR_MAC, CLIENT_MAC, ALL_NODES, v6(0x10), 255);
    let d = respond(&owned(&["2001:db8::10"]), &eth0(), &f);
    assert_eq!(drop_reason(&d), DropReason::Invalid);
}

#[test]
fn other_ethertypes_are_not_requests() {
    let mut f = arp_request_for("192.0.2.10");
    f[12] = 0x08;
    f[13] = 0x00;
    let d = respond(&owned(&["192.0.2.10"]), &eth0(), &f);
    assert_eq!(drop_reason(&d), DropReason::NotRequest);
}

#[test]
fn drop_counters_count_per_reason() {
    let mut c = DropCounters::default();
    c.record(DropReason::NotOwned);
    c.record(DropReason::NotOwned);
    c.record(DropReason::Invalid);
    assert_eq!(c.get(DropReason::NotOwned), 2);
    assert_eq!(c.get(DropReason::Invalid), 1);
    assert_eq!(c.get(DropReason::OtherVlan), 0);
    assert_eq!(c.iter().map(|(_, n)| n).sum::<u64>(), 3);
    let names: Vec<_> = DropReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        names,
        [
            "not_owned",
            "interface_not_allowed",
            "interface_not_eligible",
            "not_request",
            "wrong_destination",
            "other_vlan",
            "from_self",
            "invalid"
        ]
    );
}
