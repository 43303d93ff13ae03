//! Codec vectors, built by hand from the RFC 826 and RFC 4861 layouts.
//! ICMPv6 checksums were computed independently (python3, RFC 8200 8.1
//! pseudo-header, one's complement sum) and are pinned here.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};

use arp_ndp::packet::*;
use common::*;

// ---------------------------------------------------------------- ARP

/// Who-has 192.0.2.10 tell 192.0.2.1, from 02:00:00:00:00:01, broadcast.
const ARP_REQUEST: &str = "
    ff ff ff ff ff ff | 02 00 00 00 00 01 | 08 06
    00 01 | 08 00 | 06 | 04 | 00 01
    02 00 00 00 00 01 | c0 00 02 01
    00 00 00 00 00 00 | c0 00 02 0a";

/// 192.0.2.10 is-at 02:00:00:00:00:aa, unicast to the requester.
const ARP_REPLY: &str = "
    02 00 00 00 00 01 | 02 00 00 00 00 aa | 08 06
    00 01 | 08 00 | 06 | 04 | 00 02
    02 00 00 00 00 aa | c0 00 02 0a
    02 00 00 00 00 01 | c0 00 02 01";

#[test]
fn arp_request_decodes() {
    let f = ArpFrame::decode(&hex(ARP_REQUEST)).unwrap();
    assert_eq!(f.eth_dst, MacAddr::BROADCAST);
    assert_eq!(f.eth_src, CLIENT_MAC);
    assert_eq!(
        f.arp,
        ArpPacket {
            op: ArpOp::Request,
            sender_mac: CLIENT_MAC,
            sender_ip: Ipv4Addr::new(192, 0, 2, 1),
            target_mac: MacAddr::ZERO,
            target_ip: Ipv4Addr::new(192, 0, 2, 10),
        }
    );
}

#[test]
fn arp_request_encodes() {
    let f = ArpFrame::request(
        CLIENT_MAC,
        Ipv4Addr::new(192, 0, 2, 1),
        Ipv4Addr::new(192, 0, 2, 10),
    );
    assert_eq!(f.encode(), hex(ARP_REQUEST));
    assert_eq!(f.encode().len(), ARP_FRAME_LEN);
}

#[test]
fn arp_reply_encodes_and_decodes() {
    let req = ArpFrame::decode(&hex(ARP_REQUEST)).unwrap();
    let reply = ArpFrame::reply_to(&req.arp, OUR_MAC);
    assert_eq!(reply.encode(), hex(ARP_REPLY));
    assert_eq!(ArpFrame::decode(&hex(ARP_REPLY)).unwrap(), reply);
}

#[test]
fn gratuitous_arp_request_and_reply_forms() {
    let ip = Ipv4Addr::new(192, 0, 2, 10);
    let req = ArpFrame::gratuitous(ArpOp::Request, OUR_MAC, ip).encode();
    assert_eq!(
        req,
        hex("ff ff ff ff ff ff | 02 00 00 00 00 aa | 08 06
             00 01 08 00 06 04 00 01
             02 00 00 00 00 aa | c0 00 02 0a
             ff ff ff ff ff ff | c0 00 02 0a")
    );
    let rep = ArpFrame::gratuitous(ArpOp::Reply, OUR_MAC, ip).encode();
    assert_eq!(
        rep,
        hex("ff ff ff ff ff ff | 02 00 00 00 00 aa | 08 06
             00 01 08 00 06 04 00 02
             02 00 00 00 00 aa | c0 00 02 0a
             ff ff ff ff ff ff | c0 00 02 0a")
    );
}

#[test]
fn arp_padded_to_minimum_frame_decodes() {
    let mut f = hex(ARP_REQUEST);
    f.resize(60, 0);
    assert_eq!(ArpFrame::decode(&f).unwrap().arp.op, ArpOp::Request);
}

#[test]
fn arp_truncated() {
    let f = hex(ARP_REQUEST);
    for n in 0..f.len() {
        assert!(
            matches!(
                ArpFrame::decode(&f[..n]),
                Err(DecodeError::Truncated { .. })
            ),
            "length {n}"
        );
    }
}

#[test]
fn arp_wrong_hardware_type() {
    let mut f = hex(ARP_REQUEST);
    f[15] = 6; // IEEE 802
    assert_eq!(ArpFrame::decode(&f), Err(DecodeError::ArpHardwareType(6)));
}

#[test]
fn arp_wrong_protocol_type() {
    let mut f = hex(ARP_REQUEST);
    f[16] = 0x86;
    f[17] = 0xdd;
    assert_eq!(
        ArpFrame::decode(&f),
        Err(DecodeError::ArpProtocolType(0x86dd))
    );
}

#[test]
fn arp_wrong_address_lengths() {
    let mut f = hex(ARP_REQUEST);
    f[18] = 8;
    assert_eq!(
        ArpFrame::decode(&f),
        Err(DecodeError::ArpAddressLength { hlen: 8, plen: 4 })
    );
}

#[test]
fn arp_unknown_operation() {
    let mut f = hex(ARP_REQUEST);
    f[21] = 3; // RARP request
    assert_eq!(ArpFrame::decode(&f), Err(DecodeError::ArpOperation(3)));
}

#[test]
fn arp_vlan_tagged() {
    let mut f = hex(ARP_REQUEST);
    // Insert an 802.1Q tag (VID 100) after the MACs.
    f.splice(12..12, [0x81, 0x00, 0x00, 0x64]);
    assert_eq!(
        ArpFrame::decode(&f),
        Err(DecodeError::VlanTagged(ETHERTYPE_VLAN))
    );
}

#[test]
fn not_arp_ethertype() {
    let mut f = hex(ARP_REQUEST);
    f[12] = 0x08;
    f[13] = 0x00;
    assert_eq!(ArpFrame::decode(&f), Err(DecodeError::Ethertype(0x0800)));
}

// ---------------------------------------------------------------- MAC

#[test]
fn mac_parse_and_display() {
    let m: MacAddr = "02:00:00:00:00:aa".parse().unwrap();
    assert_eq!(m, OUR_MAC);
    assert_eq!(m.to_string(), "02:00:00:00:00:aa");
    assert!("02:00:00:00:00".parse::<MacAddr>().is_err());
    assert!("02:00:00:00:00:aa:bb".parse::<MacAddr>().is_err());
    assert!("02:00:00:00:00:zz".parse::<MacAddr>().is_err());
    assert!(MacAddr::BROADCAST.is_multicast() && !MacAddr::BROADCAST.is_unicast());
    assert!(!MacAddr::ZERO.is_unicast());
    assert!(OUR_MAC.is_unicast());
}

// ---------------------------------------------------------------- NDP

/// NS from 2001:db8::1 (02:00:00:00:00:01) for 2001:db8::10, to its
/// solicited-node group, with a source link-layer option. Checksum 0x1c0b.
const NS: &str = "
    33 33 ff 00 00 10 | 02 00 00 00 00 01 | 86 dd
    60 00 00 00 | 00 20 | 3a | ff
    20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 01
    ff 02 00 00 00 00 00 00 00 00 00 01 ff 00 00 10
    87 | 00 | 1c 0b | 00 00 00 00
    20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 10
    01 | 01 | 02 00 00 00 00 01";

/// The solicited NA answering it from fe80::aa (02:00:00:00:00:aa):
/// S and O set, target link-layer option. Checksum 0xb84b.
const NA: &str = "
    02 00 00 00 00 01 | 02 00 00 00 00 aa | 86 dd
    60 00 00 00 | 00 20 | 3a | ff
    fe 80 00 00 00 00 00 00 00 00 00 00 00 00 00 aa
    20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 01
    88 | 00 | b8 4b | 60 00 00 00
    20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 10
    02 | 01 | 02 00 00 00 00 aa";

/// Unsolicited NA for 2001:db8::10 to ff02::1: O only. Checksum 0x2702.
const UNSOLICITED_NA: &str = "
    33 33 00 00 00 01 | 02 00 00 00 00 aa | 86 dd
    60 00 00 00 | 00 20 | 3a | ff
    fe 80 00 00 00 00 00 00 00 00 00 00 00 00 00 aa
    ff 02 00 00 00 00 00 00 00 00 00 00 00 00 00 01
    88 | 00 | 27 02 | 20 00 00 00
    20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 10
    02 | 01 | 02 00 00 00 00 aa";

#[test]
fn checksum_independent_vectors() {
    let ns = hex(NS);
    let icmp = &ns[54..];
    let mut zeroed = icmp.to_vec();
    zeroed[2] = 0;
    zeroed[3] = 0;
    assert_eq!(
        icmpv6_checksum(v6(1), "ff02::1:ff00:10".parse().unwrap(), &zeroed),
        0x1c0b
    );
    assert!(icmpv6_checksum_ok(
        v6(1),
        "ff02::1:ff00:10".parse().unwrap(),
        icmp
    ));
    // Odd length (echo request with one data byte), python3: 0x6711.
    assert_eq!(
        icmpv6_checksum(v6(1), v6(2), &hex("80 00 00 00 12 34 00 01 ab")),
        0x6711
    );
}

#[test]
fn ns_decodes() {
    let rx = ReceivedNs::decode(&hex(NS)).unwrap();
    assert_eq!(rx.eth.dst, MacAddr([0x33, 0x33, 0xff, 0, 0, 0x10]));
    assert_eq!(rx.eth.src, CLIENT_MAC);
    assert_eq!(rx.ip.hop_limit, 255);
    assert_eq!(rx.ip.src, v6(1));
    assert_eq!(rx.ip.dst, "ff02::1:ff00:10".parse::<Ipv6Addr>().unwrap());
    assert_eq!(
        rx.ns,
        NeighborSolicitation {
            target: v6(0x10),
            source_lla: Some(CLIENT_MAC)
        }
    );
    assert!(!rx.is_dad());
}

#[test]
fn ns_encodes() {
    assert_eq!(
        NeighborSolicitation::resolve_frame(CLIENT_MAC, v6(1), v6(0x10)),
        hex(NS)
    );
}

#[test]
fn na_encodes_and_decodes() {
    let na = NeighborAdvertisement {
        router: false,
        solicited: true,
        override_flag: true,
        target: v6(0x10),
        target_lla: Some(OUR_MAC),
    };
    assert_eq!(
        na.encode_frame(CLIENT_MAC, OUR_MAC, ll(0xaa), v6(1)),
        hex(NA)
    );
    let (eth, ip, back) = NeighborAdvertisement::decode_frame(&hex(NA)).unwrap();
    assert_eq!(back, na);
    assert_eq!((eth.dst, eth.src), (CLIENT_MAC, OUR_MAC));
    assert_eq!((ip.src, ip.dst, ip.hop_limit), (ll(0xaa), v6(1), 255));
    assert_eq!(hex(NA).len(), NA_FRAME_LEN);
}

#[test]
fn unsolicited_na_vector() {
    let na = NeighborAdvertisement {
        router: false,
        solicited: false,
        override_flag: true,
        target: v6(0x10),
        target_lla: Some(OUR_MAC),
    };
    assert_eq!(
        na.encode_frame(ipv6_multicast_mac(ALL_NODES), OUR_MAC, ll(0xaa), ALL_NODES),
        hex(UNSOLICITED_NA)
    );
}

#[test]
fn solicited_node_address_and_mac() {
    let a: Ipv6Addr = "2001:db8::1:2345:6789".parse().unwrap();
    let g = solicited_node_multicast(a);
    assert_eq!(g, "ff02::1:ff45:6789".parse::<Ipv6Addr>().unwrap());
    assert!(is_solicited_node_multicast(g));
    assert!(!is_solicited_node_multicast(ALL_NODES));
    assert!(!is_solicited_node_multicast(a));
    assert_eq!(
        ipv6_multicast_mac(g),
        MacAddr([0x33, 0x33, 0xff, 0x45, 0x67, 0x89])
    );
    assert_eq!(
        ipv6_multicast_mac(ALL_NODES).to_string(),
        "33:33:00:00:00:01"
    );
}

#[test]
fn ipv6_padding_is_ignored_and_overrun_refused() {
    let mut f = hex(NS);
    f.extend_from_slice(&[0; 10]);
    assert!(ReceivedNs::decode(&f).is_ok());
    let f = hex(NS);
    assert_eq!(
        ReceivedNs::decode(&f[..f.len() - 1]),
        Err(NsInvalid::Decode(DecodeError::Ipv6PayloadLength {
            declared: 32,
            available: 31
        }))
    );
}

// ------------------------------------------- RFC 4861 7.1.1, one per check

/// Rewrites the ICMPv6 checksum of a frame after a mutation.
fn fix_checksum(f: &mut [u8]) {
    let (_, payload) = EthernetHeader::decode(f).unwrap();
    let (ip, _) = Ipv6Header::decode(payload).unwrap();
    let icmp = &mut f[54..];
    icmp[2] = 0;
    icmp[3] = 0;
    let c = icmpv6_checksum(ip.src, ip.dst, icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
}

#[test]
fn ns_hop_limit_not_255() {
    let mut f = hex(NS);
    f[21] = 64; // hop limit is not covered by the checksum
    assert_eq!(ReceivedNs::decode(&f), Err(NsInvalid::HopLimit(64)));
}

#[test]
fn ns_bad_checksum() {
    let mut f = hex(NS);
    f[57] ^= 0x01;
    assert_eq!(ReceivedNs::decode(&f), Err(NsInvalid::Checksum));
}

#[test]
fn ns_code_not_zero() {
    let mut f = hex(NS);
    f[55] = 1;
    fix_checksum(&mut f);
    assert_eq!(ReceivedNs::decode(&f), Err(NsInvalid::Code(1)));
}

#[test]
fn ns_icmp_shorter_than_24() {
    let ns = NeighborSolicitation {
        target: v6(0x10),
        source_lla: None,
    };
    let mut f = ns.encode_frame(CLIENT_MAC, OUR_MAC, v6(1), v6(0x10), 255);
    f.truncate(14 + 40 + 20);
    f[19] = 20; // payload length
    fix_checksum(&mut f);
    assert_eq!(ReceivedNs::decode(&f), Err(NsInvalid::TooShort(20)));
}

#[test]
fn ns_multicast_target() {
    let ns = NeighborSolicitation {
        target: ALL_NODES,
        source_lla: Some(CLIENT_MAC),
    };
    let f = ns.encode_frame(OUR_MAC, CLIENT_MAC, v6(1), v6(0x10), 255);
    assert_eq!(
        ReceivedNs::decode(&f),
        Err(NsInvalid::MulticastTarget(ALL_NODES))
    );
}

#[test]
fn ns_option_length_zero() {
    let mut f = hex(NS);
    f[79] = 0;
    fix_checksum(&mut f);
    assert_eq!(
        ReceivedNs::decode(&f),
        Err(NsInvalid::OptionLength { kind: 1, len: 0 })
    );
}

#[test]
fn ns_option_running_past_the_end() {
    let mut f = hex(NS);
    f[79] = 2; // 16 octets, only 8 present
    fix_checksum(&mut f);
    assert_eq!(
        ReceivedNs::decode(&f),
        Err(NsInvalid::OptionLength { kind: 1, len: 2 })
    );
}

#[test]
fn ns_option_single_trailing_byte() {
    let mut f = hex(NS);
    f.push(0x0e); // one stray option byte (nonce type, no length)
    f[19] += 1;
    fix_checksum(&mut f);
    assert_eq!(
        ReceivedNs::decode(&f),
        Err(NsInvalid::OptionLength { kind: 14, len: 0 })
    );
}

#[test]
fn ns_lla_option_wrong_size() {
    let mut f = hex(NS);
    f[79] = 2;
    f.extend_from_slice(&[0; 8]);
    f[19] += 8;
    fix_checksum(&mut f);
    assert_eq!(
        ReceivedNs::decode(&f),
        Err(NsInvalid::LinkLayerOptionLength(2))
    );
}

#[test]
fn ns_unknown_options_are_skipped() {
    let mut f = hex(NS);
    // A nonce option (type 14, 8 octets) before the source LLA option.
    f.splice(78..78, hex("0e 01 01 02 03 04 05 06"));
    f[19] += 8;
    fix_checksum(&mut f);
    let rx = ReceivedNs::decode(&f).unwrap();
    assert_eq!(rx.ns.source_lla, Some(CLIENT_MAC));
}

#[test]
fn dad_probe_must_go_to_solicited_node_group() {
    let ns = NeighborSolicitation {
        target: v6(0x10),
        source_lla: None,
    };
    let f = ns.encode_frame(OUR_MAC, CLIENT_MAC, Ipv6Addr::UNSPECIFIED, v6(0x10), 255);
    assert_eq!(
        ReceivedNs::decode(&f),
        Err(NsInvalid::DadNotToSolicitedNode(v6(0x10)))
    );
}

#[test]
fn dad_probe_must_not_carry_source_lla() {
    let g = solicited_node_multicast(v6(0x10));
    let ns = NeighborSolicitation {
        target: v6(0x10),
        source_lla: Some(CLIENT_MAC),
    };
    let f = ns.encode_frame(
        ipv6_multicast_mac(g),
        CLIENT_MAC,
        Ipv6Addr::UNSPECIFIED,
        g,
        255,
    );
    assert_eq!(ReceivedNs::decode(&f), Err(NsInvalid::DadWithSourceLla));
}

#[test]
fn valid_dad_probe() {
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
    assert!(ReceivedNs::decode(&f).unwrap().is_dad());
}

#[test]
fn not_a_solicitation() {
    assert_eq!(
        ReceivedNs::decode(&hex(NA)),
        Err(NsInvalid::Decode(DecodeError::Icmpv6Type(136)))
    );
    let mut f = hex(NS);
    f[20] = 17; // UDP
    assert_eq!(
        ReceivedNs::decode(&f),
        Err(NsInvalid::Decode(DecodeError::NextHeader(17)))
    );
    let mut f = hex(NS);
    f[14] = 0x45;
    assert_eq!(
        ReceivedNs::decode(&f),
        Err(NsInvalid::Decode(DecodeError::IpVersion(4)))
    );
}

#[test]
fn ns_truncated_anywhere() {
    let f = hex(NS);
    for n in 0..f.len() {
        assert!(ReceivedNs::decode(&f[..n]).is_err(), "length {n}");
    }
}

// ------------------------------------------------ IPv6 extension headers
//
// The three frames below were also decoded by `tcpdump -nn -vvv` from a
// pcap file: "HBH (padn) [icmp6 sum ok] ... neighbor solicitation, who
// has 2001:db8::10", "DSTOPT (pad1)(pad1)(opt_type 0x1e: len=10) [icmp6
// sum ok]", "frag (0x12345678:0|32)".

/// The NS above behind a Hop-by-Hop Options header holding one PadN
/// option (4 bytes of padding): payload length 40, next header 0, the
/// Hop-by-Hop header's next header 58. The ICMPv6 message and its
/// checksum are unchanged (the pseudo-header's length is the ICMPv6
/// length, 32).
const NS_BEHIND_HOP_BY_HOP: &str = "
    33 33 ff 00 00 10 | 02 00 00 00 00 01 | 86 dd
    60 00 00 00 | 00 28 | 00 | ff
    20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 01
    ff 02 00 00 00 00 00 00 00 00 00 01 ff 00 00 10
    3a | 00 | 01 04 00 00 00 00
    87 | 00 | 1c 0b | 00 00 00 00
    20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 10
    01 | 01 | 02 00 00 00 00 01";

/// The NS behind a 16-byte Destination Options header: Pad1, Pad1, an
/// unknown option of type 0x1e (action bits 00: skip it) with 10 bytes of
/// data.
const NS_BEHIND_DESTINATION_OPTIONS: &str = "
    33 33 ff 00 00 10 | 02 00 00 00 00 01 | 86 dd
    60 00 00 00 | 00 30 | 3c | ff
    20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 01
    ff 02 00 00 00 00 00 00 00 00 00 01 ff 00 00 10
    3a | 01 | 00 00 1e 0a 01 02 03 04 05 06 07 08 09 0a
    87 | 00 | 1c 0b | 00 00 00 00
    20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 10
    01 | 01 | 02 00 00 00 00 01";

/// The NS as the first fragment (offset 0, M set) behind a Fragment
/// header.
const NS_FRAGMENT: &str = "
    33 33 ff 00 00 10 | 02 00 00 00 00 01 | 86 dd
    60 00 00 00 | 00 28 | 2c | ff
    20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 01
    ff 02 00 00 00 00 00 00 00 00 00 01 ff 00 00 10
    3a | 00 | 00 01 | 12 34 56 78
    87 | 00 | 1c 0b | 00 00 00 00
    20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 10
    01 | 01 | 02 00 00 00 00 01";

fn decoded_ns(rx: &ReceivedNs) -> (Ipv6Addr, Ipv6Addr, NeighborSolicitation) {
    (rx.ip.src, rx.ip.dst, rx.ns)
}

#[test]
fn ns_behind_hop_by_hop_with_padn() {
    let f = hex(NS_BEHIND_HOP_BY_HOP);
    assert_eq!(f, with_ext_headers(&hex(NS), &[(0, padn_body())]));
    let rx = ReceivedNs::decode(&f).unwrap();
    let plain = ReceivedNs::decode(&hex(NS)).unwrap();
    assert_eq!(decoded_ns(&rx), decoded_ns(&plain));
    assert_eq!(rx.ip.next_header, IPPROTO_HOPOPTS);
    // Ethernet padding after it is still ignored.
    let mut padded = f.clone();
    padded.extend_from_slice(&[0; 6]);
    assert!(ReceivedNs::decode(&padded).is_ok());
}

#[test]
fn ns_behind_destination_options() {
    let f = hex(NS_BEHIND_DESTINATION_OPTIONS);
    let rx = ReceivedNs::decode(&f).unwrap();
    assert_eq!(rx.ns.target, v6(0x10));
    assert_eq!(rx.ns.source_lla, Some(CLIENT_MAC));
    // The same with a discard-if-unrecognised option type (0x9e): dropped.
    let mut f = f;
    f[58] = 0x9e;
    assert_eq!(
        ReceivedNs::decode(&f),
        Err(NsInvalid::Decode(DecodeError::UnrecognizedOption {
            header: IPPROTO_DSTOPTS,
            option: 0x9e
        }))
    );
}

#[test]
fn ns_behind_every_allowed_header() {
    let routing = vec![0, 0, 0, 0, 0, 0, 0]; // type 0, segments left 0
    let f = with_ext_headers(
        &hex(NS),
        &[
            (IPPROTO_HOPOPTS, padn_body()),
            (IPPROTO_DSTOPTS, padn_body()),
            (IPPROTO_ROUTING, routing.clone()),
            (IPPROTO_DSTOPTS, padn_body()),
        ],
    );
    assert_eq!(ReceivedNs::decode(&f).unwrap().ns.target, v6(0x10));
    // A routing header with segments left: not ours yet.
    let mut pending = routing;
    pending[2] = 1;
    let f = with_ext_headers(&hex(NS), &[(IPPROTO_ROUTING, pending)]);
    assert_eq!(
        ReceivedNs::decode(&f),
        Err(NsInvalid::Decode(DecodeError::RoutingSegmentsLeft(1)))
    );
    // Hop-by-Hop anywhere but first.
    let f = with_ext_headers(
        &hex(NS),
        &[
            (IPPROTO_DSTOPTS, padn_body()),
            (IPPROTO_HOPOPTS, padn_body()),
        ],
    );
    assert_eq!(
        ReceivedNs::decode(&f),
        Err(NsInvalid::Decode(DecodeError::HopByHopNotFirst))
    );
}

#[test]
fn fragmented_ns_is_dropped() {
    assert_eq!(
        ReceivedNs::decode(&hex(NS_FRAGMENT)),
        Err(NsInvalid::Decode(DecodeError::Fragmented))
    );
    // An atomic fragment (offset 0, M clear) too, and behind Hop-by-Hop.
    let mut atomic = hex(NS_FRAGMENT);
    atomic[57] = 0;
    assert_eq!(
        ReceivedNs::decode(&atomic),
        Err(NsInvalid::Decode(DecodeError::Fragmented))
    );
    let f = with_ext_headers(
        &hex(NS),
        &[
            (IPPROTO_HOPOPTS, padn_body()),
            (IPPROTO_FRAGMENT, vec![0, 0, 0, 0, 0, 0, 0]),
        ],
    );
    assert_eq!(
        ReceivedNs::decode(&f),
        Err(NsInvalid::Decode(DecodeError::Fragmented))
    );
}

#[test]
fn truncated_extension_headers_are_dropped() {
    let f = hex(NS_BEHIND_HOP_BY_HOP);
    // Cut anywhere (the payload length then overruns the frame).
    for n in 0..f.len() {
        assert!(ReceivedNs::decode(&f[..n]).is_err(), "length {n}");
    }
    // The payload length itself ends inside the Hop-by-Hop header.
    for len in 0..8u8 {
        let mut g = f.clone();
        g[18] = 0;
        g[19] = len;
        assert!(
            matches!(
                ReceivedNs::decode(&g),
                Err(NsInvalid::Decode(DecodeError::Truncated {
                    what: "IPv6 extension header",
                    ..
                }))
            ),
            "payload length {len}"
        );
    }
    // Hdr Ext Len says 16 bytes; the payload ends after 8 + 32.
    let mut g = f.clone();
    g[55] = 1;
    assert!(ReceivedNs::decode(&g).is_err());
    // An option running past the end of its header.
    let mut g = f;
    g[57] = 5;
    assert_eq!(
        ReceivedNs::decode(&g),
        Err(NsInvalid::Decode(DecodeError::Truncated {
            what: "IPv6 option",
            need: 7,
            got: 6
        }))
    );
}

#[test]
fn too_many_extension_headers_are_dropped() {
    let four = vec![(IPPROTO_DSTOPTS, padn_body()); MAX_EXTENSION_HEADERS];
    assert!(ReceivedNs::decode(&with_ext_headers(&hex(NS), &four)).is_ok());
    let five = vec![(IPPROTO_DSTOPTS, padn_body()); MAX_EXTENSION_HEADERS + 1];
    assert_eq!(
        ReceivedNs::decode(&with_ext_headers(&hex(NS), &five)),
        Err(NsInvalid::Decode(DecodeError::TooManyExtensionHeaders(
            MAX_EXTENSION_HEADERS
        )))
    );
    // A long chain within the payload limit costs a bounded walk: a
    // thousand headers stop at the fifth.
    let many = vec![(IPPROTO_DSTOPTS, padn_body()); 1000];
    assert_eq!(
        ReceivedNs::decode(&with_ext_headers(&hex(NS), &many)),
        Err(NsInvalid::Decode(DecodeError::TooManyExtensionHeaders(
            MAX_EXTENSION_HEADERS
        )))
    );
}

#[test]
fn other_protocols_behind_extension_headers_are_not_solicitations() {
    let mut f = hex(NS_BEHIND_HOP_BY_HOP);
    f[54] = 17; // UDP after the Hop-by-Hop header
    assert_eq!(
        ReceivedNs::decode(&f),
        Err(NsInvalid::Decode(DecodeError::NextHeader(17)))
    );
}

#[test]
fn na_behind_hop_by_hop_decodes() {
    let f = with_ext_headers(&hex(NA), &[(IPPROTO_HOPOPTS, padn_body())]);
    let (_, _, na) = NeighborAdvertisement::decode_frame(&f).unwrap();
    assert_eq!(na.target, v6(0x10));
    let f = with_ext_headers(&hex(NA), &[(IPPROTO_FRAGMENT, vec![0; 7])]);
    assert_eq!(
        NeighborAdvertisement::decode_frame(&f),
        Err(NsInvalid::Decode(DecodeError::Fragmented))
    );
}
