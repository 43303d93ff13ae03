//! Echo packets on the wire (RFC 5880 §6.4, RFC 5881 §4; single-hop IPv4
//! only): the Ethernet / IPv4 / UDP frame around an [`EchoPacket`], the
//! checks a frame must pass when it comes back, and the classic BPF filter
//! that catches it. Pure: no sockets; the runtime sends and receives the
//! frames on an `AF_PACKET` socket (`netsys::PacketSocket`).
//!
//! An echo packet is addressed to ourselves: IPv4 source and destination
//! are our address on the interface, UDP destination port 3785, a source
//! port in 49152-65535, TTL 255; the Ethernet destination is the peer's
//! MAC. The peer's forwarding plane routes it back to us (TTL 254); our
//! kernel would drop it as a martian (a packet from one of its own
//! addresses), so it is caught on the packet socket before the IP layer,
//! whose filter ([`echo_filter`]) passes only frames for our host carrying
//! an unfragmented UDP datagram to port 3785 from and to our address.
//! User space then checks every header again ([`decode_returned`]).

use std::net::Ipv4Addr;

use netsys::SockFilter;
use thiserror::Error;

use crate::packet::{EchoError, EchoPacket};
use crate::path::ECHO_PORT;

/// An Ethernet (MAC) address.
pub type MacAddr = [u8; 6];

/// `ETH_P_IP`.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
const ETH_LEN: usize = 14;
const IPV4_LEN: usize = 20;
const UDP_LEN: usize = 8;
/// Length of the frames we send: Ethernet, IPv4 (no options), UDP, echo.
pub const ECHO_FRAME_LEN: usize = ETH_LEN + IPV4_LEN + UDP_LEN + EchoPacket::LEN;
/// TTL of echo packets we send (RFC 5881 §4: as control packets).
pub const ECHO_TTL: u8 = 255;
/// TTL of an echo packet back from one forwarding hop (the peer's): the
/// only one accepted on return, as FRR does.
pub const LOOPED_TTL: u8 = ECHO_TTL - 1;
/// TOS of our echo packets: precedence "internetwork control", as FRR.
pub const ECHO_TOS: u8 = 0xc0;
const IPPROTO_UDP: u8 = 17;
/// Bytes of a frame the filter passes to user space: more than a frame
/// with the longest IPv4 header (60 bytes) carrying an echo packet.
pub const FILTER_SNAPLEN: u32 = 256;

/// The addressing of the echo packets of one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EchoPath {
    /// Our MAC on the interface (Ethernet source).
    pub local_mac: MacAddr,
    /// The peer's MAC (Ethernet destination): its forwarding plane loops
    /// the packet back.
    pub peer_mac: MacAddr,
    /// Our address: IPv4 source and destination.
    pub address: Ipv4Addr,
    /// UDP source port (49152-65535).
    pub source_port: u16,
}

/// Builds the frame of one echo packet; `ip_id` is the IPv4
/// Identification (the sender counts it up).
pub fn encode(path: &EchoPath, ip_id: u16, echo: &EchoPacket) -> [u8; ECHO_FRAME_LEN] {
    let mut f = [0u8; ECHO_FRAME_LEN];
    f[0..6].copy_from_slice(&path.peer_mac);
    f[6..12].copy_from_slice(&path.local_mac);
    f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    let addr = path.address.octets();
    {
        let ip = &mut f[ETH_LEN..ETH_LEN + IPV4_LEN];
        ip[0] = 0x45; // version 4, IHL 5
        ip[1] = ECHO_TOS;
        let total = (IPV4_LEN + UDP_LEN + EchoPacket::LEN) as u16;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[4..6].copy_from_slice(&ip_id.to_be_bytes());
        // Flags and fragment offset 0.
        ip[8] = ECHO_TTL;
        ip[9] = IPPROTO_UDP;
        ip[12..16].copy_from_slice(&addr);
        ip[16..20].copy_from_slice(&addr);
        let sum = checksum(&[ip]);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
    }
    let udp_at = ETH_LEN + IPV4_LEN;
    let udp_len = (UDP_LEN + EchoPacket::LEN) as u16;
    f[udp_at..udp_at + 2].copy_from_slice(&path.source_port.to_be_bytes());
    f[udp_at + 2..udp_at + 4].copy_from_slice(&ECHO_PORT.to_be_bytes());
    f[udp_at + 4..udp_at + 6].copy_from_slice(&udp_len.to_be_bytes());
    f[udp_at + UDP_LEN..].copy_from_slice(&echo.to_bytes());
    let sum = udp_checksum(path.address, path.address, &f[udp_at..]);
    f[udp_at + 6..udp_at + 8].copy_from_slice(&sum.to_be_bytes());
    f
}

/// Why a frame caught on the echo socket is not one of our echo packets
/// back from the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum FrameError {
    #[error("frame of {0} bytes is too short")]
    Truncated(usize),
    #[error("not an IPv4 frame (ethertype {0:#06x})")]
    NotIpv4(u16),
    #[error("bad IPv4 header (version / IHL byte {0:#04x} or length)")]
    BadIpHeader(u8),
    #[error("bad IPv4 header checksum")]
    IpChecksum,
    #[error("IPv4 fragment")]
    Fragment,
    #[error("IP protocol {0}, not UDP")]
    NotUdp(u8),
    #[error("from {from} to {to}, not from and to our address")]
    Address { from: Ipv4Addr, to: Ipv4Addr },
    #[error("TTL {0}: not back from exactly one hop (254)")]
    Ttl(u8),
    #[error("UDP port {0}, not 3785")]
    Port(u16),
    #[error("bad UDP length {0}")]
    UdpLength(u16),
    #[error("bad UDP checksum")]
    UdpChecksum,
    #[error(transparent)]
    Echo(#[from] EchoError),
}

/// Checks a frame caught on the echo socket of the session whose address
/// is `address` and returns the echo packet it carries: Ethernet IPv4, a
/// valid IPv4 header (options allowed) with a correct checksum, not a
/// fragment, UDP, from and to `address`, TTL 254 (looped back by exactly
/// one forwarding hop), destination port 3785, a UDP length that fits and
/// a correct checksum (or none), and our echo format. Trailing bytes
/// (Ethernet padding) are ignored. Never panics.
pub fn decode_returned(frame: &[u8], address: Ipv4Addr) -> Result<EchoPacket, FrameError> {
    let truncated = || FrameError::Truncated(frame.len());
    let eth = frame.get(..ETH_LEN).ok_or_else(truncated)?;
    let ethertype = u16::from_be_bytes([eth[12], eth[13]]);
    if ethertype != ETHERTYPE_IPV4 {
        return Err(FrameError::NotIpv4(ethertype));
    }
    let packet = &frame[ETH_LEN..];
    let first = *packet.first().ok_or_else(truncated)?;
    let ihl = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || ihl < IPV4_LEN {
        return Err(FrameError::BadIpHeader(first));
    }
    let ip = packet.get(..ihl).ok_or_else(truncated)?;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if total < ihl || total > packet.len() {
        return Err(FrameError::BadIpHeader(first));
    }
    if checksum(&[ip]) != 0 {
        return Err(FrameError::IpChecksum);
    }
    if u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
        return Err(FrameError::Fragment);
    }
    if ip[9] != IPPROTO_UDP {
        return Err(FrameError::NotUdp(ip[9]));
    }
    let source = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let destination = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    if source != address || destination != address {
        return Err(FrameError::Address {
            from: source,
            to: destination,
        });
    }
    if ip[8] != LOOPED_TTL {
        return Err(FrameError::Ttl(ip[8]));
    }
    let datagram = &packet[ihl..total];
    let udp = datagram.get(..UDP_LEN).ok_or_else(truncated)?;
    let port = u16::from_be_bytes([udp[2], udp[3]]);
    if port != ECHO_PORT {
        return Err(FrameError::Port(port));
    }
    let udp_len = u16::from_be_bytes([udp[4], udp[5]]);
    if usize::from(udp_len) < UDP_LEN || usize::from(udp_len) > datagram.len() {
        return Err(FrameError::UdpLength(udp_len));
    }
    let datagram = &datagram[..usize::from(udp_len)];
    // 0: no checksum (IPv4 allows it).
    if u16::from_be_bytes([udp[6], udp[7]]) != 0 && udp_checksum(source, destination, datagram) != 0
    {
        return Err(FrameError::UdpChecksum);
    }
    Ok(EchoPacket::decode(&datagram[UDP_LEN..])?)
}

/// The Internet checksum (RFC 1071) over the concatenation of `parts`
/// (each of even length but the last).
fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum: u32 = 0;
    for part in parts {
        let mut chunks = part.chunks_exact(2);
        for c in &mut chunks {
            sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        if let [last] = chunks.remainder() {
            sum += u32::from(*last) << 8;
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The UDP checksum of `datagram` (checksum field included: 0 when
/// verifying a correct one, else the value to write over a zeroed field).
fn udp_checksum(source: Ipv4Addr, destination: Ipv4Addr, datagram: &[u8]) -> u16 {
    let len = (datagram.len() as u16).to_be_bytes();
    let mut pseudo = [0u8; 12];
    pseudo[0..4].copy_from_slice(&source.octets());
    pseudo[4..8].copy_from_slice(&destination.octets());
    pseudo[9] = IPPROTO_UDP;
    pseudo[10..12].copy_from_slice(&len);
    let sum = checksum(&[&pseudo, datagram]);
    // Transmitted as all ones when it computes to zero (RFC 768).
    if sum == 0 && datagram[6..8] == [0, 0] {
        0xffff
    } else {
        sum
    }
}

// Classic BPF opcodes (<linux/bpf_common.h>, <linux/filter.h>).
const LD_W_ABS: u16 = 0x20;
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const LD_H_IND: u16 = 0x48;
/// `X = 4 * (pkt[k] & 0x0f)`: the IPv4 header length.
const LDX_B_MSH: u16 = 0xb1;
const JEQ_K: u16 = 0x15;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
/// `SKF_AD_OFF + SKF_AD_PKTTYPE`: loads the frame's packet type.
const ANC_PKTTYPE: u32 = 0xffff_f000 + 4;
/// For our host: neither broadcast, multicast, another host's nor one we
/// send.
const PACKET_HOST: u32 = 0;

/// The socket filter of a session whose address is `address`: passes
/// (the first [`FILTER_SNAPLEN`] bytes of) frames for our host (not ones
/// we send, nor broadcast, multicast or another host's), IPv4, not a
/// fragment, UDP, from and to `address`, to port 3785; drops the rest
/// before any copy to user space. The TTL and the checksums are left to
/// [`decode_returned`].
pub fn echo_filter(address: Ipv4Addr) -> Vec<SockFilter> {
    let addr = u32::from(address);
    // Conditional jumps go on (0) or to the final `ret 0` (DROP, resolved
    // below).
    let mut prog = vec![
        SockFilter::stmt(LD_B_ABS, ANC_PKTTYPE),
        SockFilter::jump(JEQ_K, PACKET_HOST, 0, DROP),
        SockFilter::stmt(LD_H_ABS, 12),
        SockFilter::jump(JEQ_K, u32::from(ETHERTYPE_IPV4), 0, DROP),
        SockFilter::stmt(LD_B_ABS, (ETH_LEN + 9) as u32),
        SockFilter::jump(JEQ_K, u32::from(IPPROTO_UDP), 0, DROP),
        SockFilter::stmt(LD_H_ABS, (ETH_LEN + 6) as u32),
        // More Fragments or an offset: drop.
        SockFilter::jump(JSET_K, 0x3fff, DROP, 0),
        SockFilter::stmt(LD_W_ABS, (ETH_LEN + 12) as u32),
        SockFilter::jump(JEQ_K, addr, 0, DROP),
        SockFilter::stmt(LD_W_ABS, (ETH_LEN + 16) as u32),
        SockFilter::jump(JEQ_K, addr, 0, DROP),
        SockFilter::stmt(LDX_B_MSH, ETH_LEN as u32),
        // The UDP destination port, after the IPv4 header (X).
        SockFilter::stmt(LD_H_IND, (ETH_LEN + 2) as u32),
        SockFilter::jump(JEQ_K, u32::from(ECHO_PORT), 0, DROP),
        SockFilter::stmt(RET_K, FILTER_SNAPLEN),
        SockFilter::stmt(RET_K, 0),
    ];
    // Resolve the DROP marker: a jump to the last instruction.
    let last = prog.len() - 1;
    for (i, insn) in prog.iter_mut().enumerate() {
        if insn.code == JEQ_K || insn.code == JSET_K {
            let to_drop = u8::try_from(last - i - 1).expect("a short program");
            for j in [&mut insn.jt, &mut insn.jf] {
                if *j == DROP {
                    *j = to_drop;
                }
            }
        }
    }
    prog
}

/// Placeholder jump offset in [`echo_filter`] (no real jump there is this
/// long).
const DROP: u8 = u8::MAX;

#[cfg(test)]
mod tests;
