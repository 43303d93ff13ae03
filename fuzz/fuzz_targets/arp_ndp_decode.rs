//! Arbitrary bytes as a received Ethernet frame through the ARP and NDP
//! decoders and the responder: nothing may panic, a decoded ARP frame
//! re-encodes to the bytes it came from, and every reply the responder
//! builds is itself a valid frame (an ARP reply, or an NA with hop limit
//! 255 and a correct checksum). The IPv6 extension header walk: on the
//! bytes as they come, and for every frame that decodes as a solicitation,
//! the same frame behind a Hop-by-Hop header (padding only) must decode to
//! the same solicitation, and behind a Fragment header must not decode.
#![no_main]

use std::net::{IpAddr, Ipv6Addr};

use arp_ndp::interfaces::{AllowedInterfaces, Interface};
use arp_ndp::packet::{
    ARP_FRAME_LEN, ArpFrame, ArpOp, DecodeError, EthernetHeader, IPPROTO_FRAGMENT,
    IPPROTO_HOPOPTS, Ipv6Header, MacAddr, NeighborAdvertisement, NsInvalid, ReceivedNs,
    upper_layer,
};
use arp_ndp::responder::{Decision, OwnedIps, respond};
use libfuzzer_sys::fuzz_target;

/// `frame` (a decodable IPv6 frame) with one 8-byte extension header of
/// type `kind` and body `body` inserted after the fixed header.
fn insert_ext(frame: &[u8], kind: u8, body: [u8; 7]) -> Option<Vec<u8>> {
    let len = u16::from_be_bytes([frame[18], frame[19]]).checked_add(8)?;
    let mut out = frame[..54].to_vec();
    out[18..20].copy_from_slice(&len.to_be_bytes());
    out[20] = kind;
    out.push(frame[20]);
    out.extend_from_slice(&body);
    out.extend_from_slice(&frame[54..]);
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    if let Some((&next, rest)) = data.split_first() {
        if let Ok((_, upper)) = upper_layer(next, rest) {
            assert!(upper.len() <= rest.len());
        }
    }
    let _ = EthernetHeader::decode(data);
    let _ = Ipv6Header::decode(data);
    let _ = NeighborAdvertisement::decode_frame(data);

    if let Ok(f) = ArpFrame::decode(data) {
        assert_eq!(f.encode(), data[..ARP_FRAME_LEN]);
    }
    let ns = ReceivedNs::decode(data);
    if let Ok(rx) = &ns {
        // Hdr Ext Len 0, PadN of four.
        if let Some(f) = insert_ext(data, IPPROTO_HOPOPTS, [0, 1, 4, 0, 0, 0, 0]) {
            match ReceivedNs::decode(&f) {
                // Behind Hop-by-Hop the walk limit may be exceeded.
                Err(NsInvalid::Decode(
                    DecodeError::TooManyExtensionHeaders(_) | DecodeError::HopByHopNotFirst,
                )) => {}
                Ok(behind) => {
                    assert_eq!(behind.ns, rx.ns);
                    assert_eq!((behind.ip.src, behind.ip.dst), (rx.ip.src, rx.ip.dst));
                    assert_eq!(behind.eth, rx.eth);
                }
                Err(e) => panic!("the NS behind Hop-by-Hop no longer decodes: {e}"),
            }
        }
        if let Some(f) = insert_ext(data, IPPROTO_FRAGMENT, [0, 0, 0, 0, 0, 0, 0]) {
            assert_eq!(
                ReceivedNs::decode(&f),
                Err(NsInvalid::Decode(DecodeError::Fragmented))
            );
        }
    }

    // Own whatever the frame asks for, so the reply paths are reached.
    let mut owned = OwnedIps::new();
    if let Ok(f) = ArpFrame::decode(data) {
        owned.insert(IpAddr::V4(f.arp.target_ip), AllowedInterfaces::all());
    }
    if let Ok(rx) = &ns {
        owned.insert(IpAddr::V6(rx.ns.target), AllowedInterfaces::all());
    }
    let iface = Interface {
        index: 2,
        name: "eth0".into(),
        mac: MacAddr([0x02, 0, 0, 0, 0, 0xaa]),
        link_local: Some(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0xaa)),
        arp: true,
        ndp: true,
    };
    if let Decision::Reply { ip, frame } = respond(&owned, &iface, data) {
        match ip {
            IpAddr::V4(v4) => {
                let r = ArpFrame::decode(&frame).expect("our ARP reply decodes");
                assert_eq!(r.arp.op, ArpOp::Reply);
                assert_eq!(r.arp.sender_ip, v4);
                assert!(r.eth_dst.is_unicast());
            }
            IpAddr::V6(v6) => {
                let (_, ip6, na) =
                    NeighborAdvertisement::decode_frame(&frame).expect("our NA is valid");
                assert_eq!(ip6.hop_limit, 255);
                assert_eq!(na.target, v6);
                assert!(na.override_flag);
                assert_eq!(na.target_lla, Some(iface.mac));
            }
        }
    }
});
