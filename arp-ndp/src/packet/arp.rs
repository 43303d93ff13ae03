//! ARP for IPv4 over Ethernet (RFC 826), and its gratuitous forms
//! (RFC 5227 section 3 "ARP announcement" and the reply form).
//!
//! Layout of the 28-byte ARP payload:
//!
//! ```text
//!  0      2      4    5    6      8          14         18         24         28
//!  | htype | ptype |hlen|plen| oper | sha (6)  | spa (4)  | tha (6)  | tpa (4)  |
//!  |   1   | 0800  | 6  | 4  | 1/2  |          |          |          |          |
//! ```

use std::net::Ipv4Addr;

use super::DecodeError;
use super::ethernet::{ETH_HEADER_LEN, ETHERTYPE_ARP, EthernetHeader, MacAddr};

/// Length of the ARP payload for IPv4 over Ethernet.
pub const ARP_LEN: usize = 28;
/// Ethernet header plus ARP payload. We send frames of this length
/// unpadded; the NIC (or veth) pads to the 60-byte minimum.
pub const ARP_FRAME_LEN: usize = ETH_HEADER_LEN + ARP_LEN;

const HTYPE_ETHERNET: u16 = 1;
const PTYPE_IPV4: u16 = 0x0800;

/// ARP operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArpOp {
    Request,
    Reply,
}

impl ArpOp {
    /// The wire value (1 or 2).
    pub const fn code(self) -> u16 {
        match self {
            ArpOp::Request => 1,
            ArpOp::Reply => 2,
        }
    }
}

/// An ARP packet for IPv4 over Ethernet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpPacket {
    pub op: ArpOp,
    pub sender_mac: MacAddr,
    pub sender_ip: Ipv4Addr,
    pub target_mac: MacAddr,
    pub target_ip: Ipv4Addr,
}

impl ArpPacket {
    /// Decodes the ARP payload (after the Ethernet header). Bytes after the
    /// 28th (Ethernet padding) are ignored.
    pub fn decode(b: &[u8]) -> Result<ArpPacket, DecodeError> {
        if b.len() < ARP_LEN {
            return Err(DecodeError::Truncated {
                what: "ARP packet",
                need: ARP_LEN,
                got: b.len(),
            });
        }
        let htype = u16::from_be_bytes([b[0], b[1]]);
        if htype != HTYPE_ETHERNET {
            return Err(DecodeError::ArpHardwareType(htype));
        }
        let ptype = u16::from_be_bytes([b[2], b[3]]);
        if ptype != PTYPE_IPV4 {
            return Err(DecodeError::ArpProtocolType(ptype));
        }
        if b[4] != 6 || b[5] != 4 {
            return Err(DecodeError::ArpAddressLength {
                hlen: b[4],
                plen: b[5],
            });
        }
        let op = match u16::from_be_bytes([b[6], b[7]]) {
            1 => ArpOp::Request,
            2 => ArpOp::Reply,
            other => return Err(DecodeError::ArpOperation(other)),
        };
        Ok(ArpPacket {
            op,
            sender_mac: MacAddr::from_slice(&b[8..14]),
            sender_ip: Ipv4Addr::new(b[14], b[15], b[16], b[17]),
            target_mac: MacAddr::from_slice(&b[18..24]),
            target_ip: Ipv4Addr::new(b[24], b[25], b[26], b[27]),
        })
    }

    /// The 28 payload bytes.
    pub fn encode(&self) -> [u8; ARP_LEN] {
        let mut b = [0u8; ARP_LEN];
        b[0..2].copy_from_slice(&HTYPE_ETHERNET.to_be_bytes());
        b[2..4].copy_from_slice(&PTYPE_IPV4.to_be_bytes());
        b[4] = 6;
        b[5] = 4;
        b[6..8].copy_from_slice(&self.op.code().to_be_bytes());
        b[8..14].copy_from_slice(&self.sender_mac.0);
        b[14..18].copy_from_slice(&self.sender_ip.octets());
        b[18..24].copy_from_slice(&self.target_mac.0);
        b[24..28].copy_from_slice(&self.target_ip.octets());
        b
    }
}

/// An Ethernet frame carrying ARP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpFrame {
    pub eth_dst: MacAddr,
    pub eth_src: MacAddr,
    pub arp: ArpPacket,
}

impl ArpFrame {
    /// Decodes a whole Ethernet frame. VLAN-tagged frames are refused with
    /// [`DecodeError::VlanTagged`].
    pub fn decode(frame: &[u8]) -> Result<ArpFrame, DecodeError> {
        let (eth, payload) = EthernetHeader::decode_expect(frame, ETHERTYPE_ARP)?;
        Ok(ArpFrame {
            eth_dst: eth.dst,
            eth_src: eth.src,
            arp: ArpPacket::decode(payload)?,
        })
    }

    /// The 42-byte frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ARP_FRAME_LEN);
        EthernetHeader {
            dst: self.eth_dst,
            src: self.eth_src,
            ethertype: ETHERTYPE_ARP,
        }
        .encode_into(&mut out);
        out.extend_from_slice(&self.arp.encode());
        out
    }

    /// The reply to `request` from an interface with MAC `our_mac`: unicast
    /// to the requester's hardware address (as Linux and MetalLB do), sender
    /// = (`our_mac`, the requested IP), target = the requester.
    pub fn reply_to(request: &ArpPacket, our_mac: MacAddr) -> ArpFrame {
        ArpFrame {
            eth_dst: request.sender_mac,
            eth_src: our_mac,
            arp: ArpPacket {
                op: ArpOp::Reply,
                sender_mac: our_mac,
                sender_ip: request.target_ip,
                target_mac: request.sender_mac,
                target_ip: request.sender_ip,
            },
        }
    }

    /// A gratuitous ARP in `op` form: sender IP = target IP = `ip`, sender
    /// hardware address `mac`, target hardware address broadcast, to the
    /// Ethernet broadcast address. This is byte for byte what MetalLB sends
    /// (`arp.NewPacket(op, mac, ip, ethernet.Broadcast, ip)`); RFC 5227
    /// suggests a zero target hardware address in the request form, but
    /// receivers ignore the field in requests.
    pub fn gratuitous(op: ArpOp, mac: MacAddr, ip: Ipv4Addr) -> ArpFrame {
        ArpFrame {
            eth_dst: MacAddr::BROADCAST,
            eth_src: mac,
            arp: ArpPacket {
                op,
                sender_mac: mac,
                sender_ip: ip,
                target_mac: MacAddr::BROADCAST,
                target_ip: ip,
            },
        }
    }

    /// A who-has request for `target` (used by tests and by probes).
    pub fn request(our_mac: MacAddr, our_ip: Ipv4Addr, target: Ipv4Addr) -> ArpFrame {
        ArpFrame {
            eth_dst: MacAddr::BROADCAST,
            eth_src: our_mac,
            arp: ArpPacket {
                op: ArpOp::Request,
                sender_mac: our_mac,
                sender_ip: our_ip,
                target_mac: MacAddr::ZERO,
                target_ip: target,
            },
        }
    }
}
