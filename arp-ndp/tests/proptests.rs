//! Properties: decoders never panic on arbitrary bytes (and whatever the
//! responder answers them with is a well-formed reply for the owned
//! address asked for), and what we encode decodes back to itself. (Decoded types are all `Copy`, so by
//! construction they own no heap memory: decoding allocates nothing.)

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};

use arp_ndp::interfaces::AllowedInterfaces;
use arp_ndp::packet::*;
use arp_ndp::responder::{Decision, OwnedIps, respond};
use common::*;
use proptest::prelude::*;

fn mac() -> impl Strategy<Value = MacAddr> {
    any::<[u8; 6]>().prop_map(MacAddr)
}

fn unicast_mac() -> impl Strategy<Value = MacAddr> {
    any::<[u8; 6]>().prop_map(|mut b| {
        b[0] &= 0xfe;
        b[5] |= 1;
        MacAddr(b)
    })
}

fn ipv6() -> impl Strategy<Value = Ipv6Addr> {
    any::<[u8; 16]>().prop_map(Ipv6Addr::from)
}

/// Frames that look like ours up to the ethertype, then arbitrary.
fn framed(ethertype: u16) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..200).prop_map(move |tail| {
        let mut f = Vec::with_capacity(14 + tail.len());
        f.extend_from_slice(&[0x33, 0x33, 0xff, 0, 0, 0x10]);
        f.extend_from_slice(&CLIENT_MAC.0);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(&tail);
        f
    })
}

fn everything_owned() -> OwnedIps {
    let mut o = OwnedIps::new();
    o.insert(ip("192.0.2.10"), AllowedInterfaces::all());
    o.insert(ip("2001:db8::10"), AllowedInterfaces::all());
    o
}

fn exercise(bytes: &[u8]) {
    let _ = EthernetHeader::decode(bytes);
    let _ = ArpFrame::decode(bytes);
    let _ = ArpPacket::decode(bytes);
    let _ = Ipv6Header::decode(bytes);
    let _ = ReceivedNs::decode(bytes);
    let _ = NeighborAdvertisement::decode_frame(bytes);
    let _ = NeighborAdvertisement::decode_icmp(bytes);
    // Oracle: whatever is answered is answered with a well-formed reply
    // for the owned address asked for.
    if let Decision::Reply { ip, frame } = respond(&everything_owned(), &eth0(), bytes) {
        match ip {
            std::net::IpAddr::V4(v4) => {
                let reply = ArpFrame::decode(&frame).expect("the ARP reply decodes");
                assert_eq!(reply.arp.op, ArpOp::Reply);
                assert_eq!((reply.arp.sender_mac, reply.arp.sender_ip), (OUR_MAC, v4));
            }
            std::net::IpAddr::V6(v6) => {
                let (_, _, na) =
                    NeighborAdvertisement::decode_frame(&frame).expect("the NA decodes");
                assert_eq!((na.target, na.target_lla), (v6, Some(OUR_MAC)));
                assert!(na.override_flag && !na.router, "{na:?}");
            }
        }
    }
    let _ = icmpv6_checksum(Ipv6Addr::UNSPECIFIED, ALL_NODES, bytes);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        exercise(&bytes);
    }

    #[test]
    fn arbitrary_arp_payloads_never_panic(f in framed(ETHERTYPE_ARP)) {
        exercise(&f);
    }

    #[test]
    fn arbitrary_ipv6_payloads_never_panic(f in framed(ETHERTYPE_IPV6)) {
        exercise(&f);
    }

    /// An NS whose header and checksum are right but whose body is random:
    /// reaches the option parser and the responder's deeper branches.
    #[test]
    fn valid_ns_header_random_body(
        target in ipv6(),
        body in proptest::collection::vec(any::<u8>(), 0..80),
        dad in any::<bool>(),
    ) {
        let src = if dad { Ipv6Addr::UNSPECIFIED } else { v6(1) };
        let dst = solicited_node_multicast(target);
        let mut icmp = vec![135, 0, 0, 0, 0, 0, 0, 0];
        icmp.extend_from_slice(&target.octets());
        icmp.extend_from_slice(&body);
        let c = icmpv6_checksum(src, dst, &icmp);
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        let mut f = Vec::new();
        EthernetHeader { dst: ipv6_multicast_mac(dst), src: CLIENT_MAC, ethertype: ETHERTYPE_IPV6 }
            .encode_into(&mut f);
        Ipv6Header {
            traffic_class: 0, flow_label: 0, payload_len: icmp.len() as u16,
            next_header: 58, hop_limit: 255, src, dst,
        }.encode_into(&mut f);
        f.extend_from_slice(&icmp);
        exercise(&f);
    }

    /// Extension headers in front of a valid NS: padding-only Hop-by-Hop
    /// and Destination Options headers (1 to 4 of them, any length) leave
    /// the decoded solicitation as it was; one Fragment header anywhere in
    /// the chain drops it; and arbitrary extension header bytes never
    /// panic.
    #[test]
    fn extension_headers_in_front_of_a_valid_ns(
        target in ipv6(),
        units in proptest::collection::vec(0u8..4, 1..=MAX_EXTENSION_HEADERS),
        fragment_at in proptest::option::of(0usize..MAX_EXTENSION_HEADERS),
        junk in proptest::collection::vec(any::<u8>(), 0..64),
        junk_kind in prop_oneof![Just(0u8), Just(43), Just(44), Just(60)],
    ) {
        prop_assume!(!target.is_multicast());
        let ns = NeighborSolicitation::resolve_frame(CLIENT_MAC, v6(1), target);
        let plain = ReceivedNs::decode(&ns).unwrap();
        // Pad1 bytes fill each header: Hdr Ext Len, then zeros.
        let mut headers: Vec<(u8, Vec<u8>)> = units
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let kind = if i == 0 { IPPROTO_HOPOPTS } else { IPPROTO_DSTOPTS };
                let mut body = vec![0u8; (usize::from(*u) + 1) * 8 - 1];
                body[0] = *u;
                (kind, body)
            })
            .collect();
        let rx = ReceivedNs::decode(&with_ext_headers(&ns, &headers)).unwrap();
        prop_assert_eq!(rx.ns, plain.ns);
        prop_assert_eq!((rx.ip.src, rx.ip.dst, rx.eth), (plain.ip.src, plain.ip.dst, plain.eth));
        if let Some(at) = fragment_at {
            headers.insert(at.min(headers.len()), (IPPROTO_FRAGMENT, vec![0; 7]));
            headers.truncate(MAX_EXTENSION_HEADERS);
            if headers.iter().any(|h| h.0 == IPPROTO_FRAGMENT) {
                prop_assert!(ReceivedNs::decode(&with_ext_headers(&ns, &headers)).is_err());
            }
        }
        let mut body = junk;
        if body.is_empty() {
            body.push(0);
        }
        exercise(&with_ext_headers(&ns, &[(junk_kind, body)]));
    }

    #[test]
    fn arp_round_trip(
        request in any::<bool>(),
        eth_dst in mac(), eth_src in mac(),
        sha in mac(), tha in mac(),
        spa in any::<[u8; 4]>(), tpa in any::<[u8; 4]>(),
    ) {
        let f = ArpFrame {
            eth_dst, eth_src,
            arp: ArpPacket {
                op: if request { ArpOp::Request } else { ArpOp::Reply },
                sender_mac: sha, sender_ip: Ipv4Addr::from(spa),
                target_mac: tha, target_ip: Ipv4Addr::from(tpa),
            },
        };
        let bytes = f.encode();
        prop_assert_eq!(bytes.len(), ARP_FRAME_LEN);
        prop_assert_eq!(ArpFrame::decode(&bytes), Ok(f));
    }

    #[test]
    fn ns_round_trip(src_mac in unicast_mac(), src in ipv6(), target in ipv6()) {
        prop_assume!(!target.is_multicast() && !src.is_unspecified());
        let f = NeighborSolicitation::resolve_frame(src_mac, src, target);
        let rx = ReceivedNs::decode(&f).unwrap();
        prop_assert_eq!(rx.ns.target, target);
        prop_assert_eq!(rx.ns.source_lla, Some(src_mac));
        prop_assert_eq!(rx.ip.src, src);
    }

    #[test]
    fn na_round_trip(
        r in any::<bool>(), s in any::<bool>(), o in any::<bool>(),
        target in ipv6(), lla in proptest::option::of(mac()),
        src in ipv6(), dst in ipv6(),
    ) {
        let na = NeighborAdvertisement {
            router: r, solicited: s, override_flag: o, target, target_lla: lla,
        };
        let f = na.encode_frame(CLIENT_MAC, OUR_MAC, src, dst);
        let (_, ip6, back) = NeighborAdvertisement::decode_frame(&f).unwrap();
        prop_assert_eq!(back, na);
        prop_assert_eq!((ip6.src, ip6.dst, ip6.hop_limit), (src, dst, 255));
    }

    /// Any single bit flip in the ICMPv6 part of a valid NS is caught (by
    /// the checksum, or by a field check before it).
    #[test]
    fn checksum_catches_single_bit_flips(bit in 0usize..(32 * 8)) {
        let mut f = NeighborSolicitation::resolve_frame(CLIENT_MAC, v6(1), v6(0x10));
        f[54 + bit / 8] ^= 1 << (bit % 8);
        prop_assert!(ReceivedNs::decode(&f).is_err());
    }

    /// Oracle of the responder on NDP: a valid solicitation for an owned
    /// target, from any unicast source, is answered with a frame that
    /// decodes (checksum verified by the decoder) as a Neighbor
    /// Advertisement with S=1, O=1, R=0, the target and our MAC, sent back
    /// to the solicitor.
    #[test]
    fn a_valid_ns_for_an_owned_target_gets_a_solicited_override_na(
        src_mac in unicast_mac(), src in ipv6(),
    ) {
        prop_assume!(!src.is_multicast() && !src.is_unspecified());
        let target: Ipv6Addr = "2001:db8::10".parse().unwrap();
        let ns = NeighborSolicitation::resolve_frame(src_mac, src, target);
        let Decision::Reply { ip, frame } = respond(&everything_owned(), &eth0(), &ns) else {
            return Err(TestCaseError::fail("not answered"));
        };
        prop_assert_eq!(ip, std::net::IpAddr::V6(target));
        let (eth, ip6, na) = NeighborAdvertisement::decode_frame(&frame)
            .map_err(|e| TestCaseError::fail(format!("reply does not decode: {e}")))?;
        prop_assert!(na.solicited && na.override_flag && !na.router, "{:?}", na);
        prop_assert_eq!(na.target, target);
        prop_assert_eq!(na.target_lla, Some(OUR_MAC));
        prop_assert_eq!((eth.src, eth.dst), (OUR_MAC, src_mac));
        prop_assert_eq!((ip6.dst, ip6.hop_limit), (src, 255));
    }

    /// Oracle of the responder on ARP: a who-has for an owned address from
    /// any unicast sender is answered with a frame that decodes as an ARP
    /// reply from our MAC for that address, to the asker.
    #[test]
    fn a_who_has_for_an_owned_address_gets_a_reply_to_the_asker(
        sha in unicast_mac(), spa in any::<[u8; 4]>(),
    ) {
        let target: Ipv4Addr = "192.0.2.10".parse().unwrap();
        let spa = Ipv4Addr::from(spa);
        prop_assume!(!spa.is_unspecified() && spa != target);
        let request = ArpFrame {
            eth_dst: MacAddr([0xff; 6]),
            eth_src: sha,
            arp: ArpPacket {
                op: ArpOp::Request,
                sender_mac: sha, sender_ip: spa,
                target_mac: MacAddr([0; 6]), target_ip: target,
            },
        };
        let Decision::Reply { ip, frame } = respond(&everything_owned(), &eth0(), &request.encode()) else {
            return Err(TestCaseError::fail("not answered"));
        };
        prop_assert_eq!(ip, std::net::IpAddr::V4(target));
        let reply = ArpFrame::decode(&frame)
            .map_err(|e| TestCaseError::fail(format!("reply does not decode: {e}")))?;
        prop_assert_eq!(reply.arp.op, ArpOp::Reply);
        prop_assert_eq!((reply.arp.sender_mac, reply.arp.sender_ip), (OUR_MAC, target));
        prop_assert_eq!((reply.arp.target_mac, reply.arp.target_ip), (sha, spa));
        prop_assert_eq!((reply.eth_src, reply.eth_dst), (OUR_MAC, sha));
    }

    /// Solicited-node group and its MAC agree with the low 24 bits.
    #[test]
    fn solicited_node_properties(a in ipv6()) {
        let g = solicited_node_multicast(a);
        prop_assert!(is_solicited_node_multicast(g));
        prop_assert_eq!(&g.octets()[13..], &a.octets()[13..]);
        let m = ipv6_multicast_mac(g);
        prop_assert_eq!(&m.0[..3], &[0x33, 0x33, 0xff]);
        prop_assert_eq!(&m.0[3..], &a.octets()[13..]);
    }
}
