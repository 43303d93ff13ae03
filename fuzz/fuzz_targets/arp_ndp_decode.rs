//! Arbitrary bytes as a received Ethernet frame through the ARP and NDP
//! decoders and the responder: nothing may panic, a decoded ARP frame
//! re-encodes to the bytes it came from, and every reply the responder
//! builds is itself a valid frame (an ARP reply, or an NA with hop limit
//! 255 and a correct checksum).
#![no_main]

use std::net::{IpAddr, Ipv6Addr};

use arp_ndp::interfaces::{AllowedInterfaces, Interface};
use arp_ndp::packet::{
    ARP_FRAME_LEN, ArpFrame, ArpOp, EthernetHeader, Ipv6Header, MacAddr, NeighborAdvertisement,
    ReceivedNs,
};
use arp_ndp::responder::{Decision, OwnedIps, respond};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = EthernetHeader::decode(data);
    let _ = Ipv6Header::decode(data);
    let _ = NeighborAdvertisement::decode_frame(data);

    if let Ok(f) = ArpFrame::decode(data) {
        assert_eq!(f.encode(), data[..ARP_FRAME_LEN]);
    }
    let ns = ReceivedNs::decode(data);

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
