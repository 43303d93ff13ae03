//! `AF_PACKET` sockets, one per interface and protocol, with a classic BPF
//! filter so the kernel hands us only what we answer.
//!
//! Why packet sockets for NDP too (and not an `IPPROTO_ICMPV6` raw
//! socket): a raw ICMPv6 socket never shows the link-layer source of a
//! solicitation, and one without a source link-layer option must be
//! answered to that address; it also cannot choose the destination MAC of
//! the answer. On a packet socket we read the hop limit straight from the
//! IPv6 header (the job `IPV6_RECVHOPLIMIT` would do), write 255 into the
//! ones we send, and compute the checksum ourselves. Multicast group
//! membership, which makes the kernel send MLD reports and program the
//! NIC's filter, is a separate concern: see [`super::Memberships`].
//!
//! The filter drops, before any copy to user space:
//! - frames marked `PACKET_OTHERHOST`. Besides promiscuous-mode traffic for
//!   other hosts, this is how Linux delivers to the parent interface a
//!   VLAN-tagged frame whose VLAN has no local device (it strips the tag,
//!   marks the frame OTHERHOST, and carries on), so an ARP request from
//!   another VLAN would otherwise look like one from ours;
//! - frames marked `PACKET_OUTGOING` (our own transmissions);
//! - for ARP, anything but ARP requests; for NDP, anything but IPv6
//!   packets whose next header is ICMPv6 and whose ICMPv6 type is 135
//!   (Neighbor Solicitation). Packets with extension headers are not
//!   matched: ND messages do not carry them in practice.

use std::io::{self, Read, Write};

use socket2::{Domain, Socket, Type};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::sys::{SockFilter, attach_filter, bind_packet, register_async};
use crate::packet::{
    ETHERTYPE_ARP, ETHERTYPE_IPV6, ICMPV6_NEIGHBOR_ADVERTISEMENT, ICMPV6_NEIGHBOR_SOLICITATION,
    IPPROTO_ICMPV6,
};

/// Which frames a socket receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// ARP requests.
    Arp,
    /// IPv6 Neighbor Solicitations.
    Ndp,
    /// ARP replies (what a probe for an address waits for).
    ArpReply,
    /// IPv6 Neighbor Advertisements (what a probe for an address waits for).
    NdpAdvertisement,
}

impl Protocol {
    /// The ethertype the socket is bound to.
    pub const fn ethertype(self) -> u16 {
        match self {
            Protocol::Arp | Protocol::ArpReply => ETHERTYPE_ARP,
            Protocol::Ndp | Protocol::NdpAdvertisement => ETHERTYPE_IPV6,
        }
    }
}

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
const LD_B_ABS: u16 = 0x30;
const LD_H_ABS: u16 = 0x28;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
/// `SKF_AD_OFF + SKF_AD_PKTTYPE`: loads the skb's packet type.
const ANC_PKTTYPE: u32 = 0xffff_f000 + 4;
const PACKET_OTHERHOST: u32 = 3;
const PACKET_OUTGOING: u32 = 4;
/// Snap length: whole frames (jumbo frames included).
const ACCEPT: u32 = 0x0004_0000;

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> SockFilter {
    SockFilter { code, jt, jf, k }
}

/// The filter program for `proto`: drop OTHERHOST and OUTGOING, then
/// require each `(load, offset or ancillary, value)` to match.
pub(crate) fn filter_program(proto: Protocol) -> Vec<SockFilter> {
    // (load opcode, offset, value it must equal)
    let checks: &[(u16, u32, u32)] = match proto {
        Protocol::Arp => &[
            (LD_H_ABS, 12, ETHERTYPE_ARP as u32),
            (LD_H_ABS, 20, 1), // ARP operation: request
        ],
        Protocol::Ndp => &[
            (LD_H_ABS, 12, ETHERTYPE_IPV6 as u32),
            (LD_B_ABS, 20, IPPROTO_ICMPV6 as u32), // IPv6 next header
            (LD_B_ABS, 54, ICMPV6_NEIGHBOR_SOLICITATION as u32),
        ],
        Protocol::ArpReply => &[
            (LD_H_ABS, 12, ETHERTYPE_ARP as u32),
            (LD_H_ABS, 20, 2), // ARP operation: reply
        ],
        Protocol::NdpAdvertisement => &[
            (LD_H_ABS, 12, ETHERTYPE_IPV6 as u32),
            (LD_B_ABS, 20, IPPROTO_ICMPV6 as u32),
            (LD_B_ABS, 54, ICMPV6_NEIGHBOR_ADVERTISEMENT as u32),
        ],
    };
    // Layout: ld pkttype; jeq OTHERHOST->drop; jeq OUTGOING->drop;
    // (ld; jeq else drop)*; ret ACCEPT; drop: ret 0.
    let n = 3 + 2 * checks.len() + 2;
    let drop_at = n - 1;
    let mut p = Vec::with_capacity(n);
    p.push(insn(LD_B_ABS, 0, 0, ANC_PKTTYPE));
    for k in [PACKET_OTHERHOST, PACKET_OUTGOING] {
        let here = p.len();
        p.push(insn(JEQ_K, (drop_at - here - 1) as u8, 0, k));
    }
    for &(load, off, value) in checks {
        p.push(insn(load, 0, 0, off));
        let here = p.len();
        p.push(insn(JEQ_K, 0, (drop_at - here - 1) as u8, value));
    }
    p.push(insn(RET_K, 0, 0, ACCEPT));
    p.push(insn(RET_K, 0, 0, 0));
    debug_assert_eq!(p.len(), n);
    p
}

/// A packet socket bound to one interface, receiving ARP requests or
/// Neighbor Solicitations, and sending whole Ethernet frames out of that
/// interface.
#[derive(Debug)]
pub struct PacketSocket {
    fd: AsyncFd<Socket>,
    ifindex: u32,
    proto: Protocol,
}

impl PacketSocket {
    /// Opens the socket (needs `CAP_NET_RAW`). It is created with protocol
    /// 0, which receives nothing, then filtered, then bound: so no
    /// unfiltered frame is ever queued. Must be called within a tokio
    /// runtime.
    pub fn open(ifindex: u32, proto: Protocol) -> io::Result<PacketSocket> {
        let sock = Socket::new(Domain::PACKET, Type::RAW.nonblocking().cloexec(), None)?;
        attach_filter(&sock, &filter_program(proto))?;
        bind_packet(&sock, ifindex, proto.ethertype())?;
        Ok(PacketSocket {
            fd: register_async(sock, Interest::READABLE)?,
            ifindex,
            proto,
        })
    }

    /// The interface index it is bound to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// What it receives.
    pub fn protocol(&self) -> Protocol {
        self.proto
    }

    /// Receives one frame into `buf`; returns its length.
    pub async fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|s| (&mut s.get_ref()).read(buf)) {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
    }

    /// Sends one whole Ethernet frame out of the interface. Does not wait:
    /// a full transmit queue is reported as `WouldBlock` (the frame is
    /// dropped, as the network would drop it).
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        let n = (&mut self.fd.get_ref()).write(frame)?;
        if n != frame.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short packet write: {n} of {} bytes", frame.len()),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{ArpFrame, ArpOp, MacAddr, NeighborAdvertisement, NeighborSolicitation};
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// A classic BPF interpreter for the few opcodes we use.
    fn run(prog: &[SockFilter], pkttype: u32, pkt: &[u8]) -> u32 {
        let mut pc = 0usize;
        let mut a: u32 = 0;
        loop {
            let i = prog[pc];
            match i.code {
                LD_B_ABS if i.k == ANC_PKTTYPE => a = pkttype,
                LD_B_ABS => match pkt.get(i.k as usize) {
                    Some(b) => a = u32::from(*b),
                    None => return 0,
                },
                LD_H_ABS => match pkt.get(i.k as usize..i.k as usize + 2) {
                    Some(b) => a = u32::from(u16::from_be_bytes([b[0], b[1]])),
                    None => return 0,
                },
                JEQ_K => {
                    pc += usize::from(if a == i.k { i.jt } else { i.jf });
                }
                RET_K => return i.k,
                other => panic!("unexpected opcode {other:#x}"),
            }
            pc += 1;
        }
    }

    const M: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);

    #[test]
    fn arp_filter() {
        let p = filter_program(Protocol::Arp);
        let req = ArpFrame::request(M, Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 10))
            .encode();
        assert_eq!(run(&p, 1, &req), ACCEPT); // broadcast
        assert_eq!(run(&p, 0, &req), ACCEPT); // to us
        assert_eq!(run(&p, PACKET_OTHERHOST, &req), 0);
        assert_eq!(run(&p, PACKET_OUTGOING, &req), 0);
        let rep = ArpFrame::gratuitous(ArpOp::Reply, M, Ipv4Addr::new(192, 0, 2, 10)).encode();
        assert_eq!(run(&p, 1, &rep), 0);
        let mut tagged = req.clone();
        tagged.splice(12..12, [0x81, 0, 0, 100]);
        assert_eq!(run(&p, 1, &tagged), 0);
    }

    #[test]
    fn ndp_filter() {
        let p = filter_program(Protocol::Ndp);
        let t = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
        let ns = NeighborSolicitation::resolve_frame(M, Ipv6Addr::LOCALHOST, t);
        assert_eq!(run(&p, 2, &ns), ACCEPT);
        assert_eq!(run(&p, PACKET_OTHERHOST, &ns), 0);
        assert_eq!(run(&p, PACKET_OUTGOING, &ns), 0);
        let na = NeighborAdvertisement {
            router: false,
            solicited: false,
            override_flag: true,
            target: t,
            target_lla: Some(M),
        }
        .encode_frame(M, M, t, t);
        assert_eq!(run(&p, 0, &na), 0);
        assert_eq!(run(&p, 0, &ns[..40]), 0, "short frames are dropped");
    }

    #[test]
    fn probe_filters_pass_answers_only() {
        let t = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
        let na = NeighborAdvertisement {
            router: false,
            solicited: true,
            override_flag: true,
            target: t,
            target_lla: Some(M),
        }
        .encode_frame(M, M, t, t);
        let ns = NeighborSolicitation::resolve_frame(M, Ipv6Addr::LOCALHOST, t);
        let p = filter_program(Protocol::NdpAdvertisement);
        assert_eq!(run(&p, 0, &na), ACCEPT);
        assert_eq!(run(&p, 0, &ns), 0);
        assert_eq!(run(&p, PACKET_OUTGOING, &na), 0);
        let p = filter_program(Protocol::ArpReply);
        let v4 = Ipv4Addr::new(192, 0, 2, 10);
        let rep = ArpFrame::gratuitous(ArpOp::Reply, M, v4).encode();
        let req = ArpFrame::gratuitous(ArpOp::Request, M, v4).encode();
        assert_eq!(run(&p, 0, &rep), ACCEPT);
        assert_eq!(run(&p, 0, &req), 0);
    }
}
