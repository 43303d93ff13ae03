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
//!   packets carrying an ICMPv6 message of type 135 (Neighbor
//!   Solicitation), directly or behind up to four Hop-by-Hop, Routing or
//!   Destination Options headers (the filter walks them; a Fragment
//!   header drops the frame, RFC 6980).

use std::io::{self, Read, Write};
use std::os::fd::AsFd;

use socket2::{Domain, Socket, Type};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use netsys::packet::{SockFilter, attach_filter, bind_packet};

use super::sys::register_async;
use crate::packet::{
    ETHERTYPE_ARP, ETHERTYPE_IPV6, ICMPV6_NEIGHBOR_ADVERTISEMENT, ICMPV6_NEIGHBOR_SOLICITATION,
    IPPROTO_DSTOPTS, IPPROTO_HOPOPTS, IPPROTO_ICMPV6, IPPROTO_ROUTING, MAX_EXTENSION_HEADERS,
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
/// `A = pkt[X + k]` (byte).
const LD_B_IND: u16 = 0x50;
/// `X = k`.
const LDX_IMM: u16 = 0x01;
/// `M[k] = A`.
const ST: u16 = 0x02;
/// `A = M[k]`.
const LD_MEM: u16 = 0x60;
/// `A += k`.
const ADD_K: u16 = 0x04;
/// `A <<= k`.
const LSH_K: u16 = 0x64;
/// `A += X`.
const ADD_X: u16 = 0x0c;
/// `X = A`.
const TAX: u16 = 0x07;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
/// `SKF_AD_OFF + SKF_AD_PKTTYPE`: loads the skb's packet type.
const ANC_PKTTYPE: u32 = 0xffff_f000 + 4;
const PACKET_OTHERHOST: u32 = 3;
const PACKET_OUTGOING: u32 = 4;
/// Snap length: whole frames (jumbo frames included).
const ACCEPT: u32 = 0x0004_0000;
/// Offset of the IPv6 next header field in an Ethernet frame.
const IPV6_NEXT_HEADER_AT: u32 = 14 + 6;
/// Offset of the first byte after the IPv6 fixed header.
const IPV6_PAYLOAD_AT: u32 = 14 + 40;

/// Where a jump goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    /// The next instruction.
    Next,
    /// `ret 0`.
    Drop,
    /// `ret ACCEPT`.
    Accept,
    /// The ICMPv6 type check (X: offset of the ICMPv6 header).
    Icmp,
    /// Step `n` of the extension header walk.
    Step(usize),
}

/// A program with symbolic jump targets, resolved by [`Asm::finish`].
#[derive(Default)]
struct Asm {
    code: Vec<(u16, To, To, u32)>,
    labels: Vec<(To, usize)>,
}

impl Asm {
    fn op(&mut self, code: u16, k: u32) {
        self.code.push((code, To::Next, To::Next, k));
    }

    fn jeq(&mut self, k: u32, yes: To, no: To) {
        self.code.push((JEQ_K, yes, no, k));
    }

    fn label(&mut self, l: To) {
        self.labels.push((l, self.code.len()));
    }

    fn finish(self) -> Vec<SockFilter> {
        let at = |here: usize, to: To| -> u8 {
            if to == To::Next {
                return 0;
            }
            let target = self
                .labels
                .iter()
                .find(|(l, _)| *l == to)
                .map(|(_, i)| *i)
                .expect("every jump target is placed");
            // Classic BPF jumps forward only, by at most 255: the
            // programs are fixed and a unit test builds each one.
            u8::try_from(target - here - 1).expect("BPF jump within range")
        };
        self.code
            .iter()
            .enumerate()
            .map(|(i, &(code, jt, jf, k))| SockFilter {
                code,
                jt: at(i, jt),
                jf: at(i, jf),
                k,
            })
            .collect()
    }
}

/// The filter program for `proto`: drop OTHERHOST and OUTGOING; then for
/// ARP the ethertype and operation; for IPv6 the ethertype, then the walk
/// over up to [`MAX_EXTENSION_HEADERS`] Hop-by-Hop, Routing and
/// Destination Options headers (unrolled: classic BPF has no loops) to an
/// ICMPv6 header of the wanted type. A Fragment header, any other header,
/// or a load past the end of the frame drops. User space walks the headers
/// again with every rule ([`upper_layer`](crate::packet::upper_layer)); the
/// filter only has to let through every frame that could pass, and little
/// else.
pub(crate) fn filter_program(proto: Protocol) -> Vec<SockFilter> {
    let mut a = Asm::default();
    a.op(LD_B_ABS, ANC_PKTTYPE);
    a.jeq(PACKET_OTHERHOST, To::Drop, To::Next);
    a.jeq(PACKET_OUTGOING, To::Drop, To::Next);
    a.op(LD_H_ABS, 12);
    a.jeq(u32::from(proto.ethertype()), To::Next, To::Drop);
    let icmp_type = match proto {
        Protocol::Arp | Protocol::ArpReply => {
            a.op(LD_H_ABS, 20); // ARP operation
            let op = if proto == Protocol::Arp { 1 } else { 2 };
            a.jeq(op, To::Accept, To::Drop);
            None
        }
        Protocol::Ndp => Some(ICMPV6_NEIGHBOR_SOLICITATION),
        Protocol::NdpAdvertisement => Some(ICMPV6_NEIGHBOR_ADVERTISEMENT),
    };
    if let Some(icmp_type) = icmp_type {
        // A: the next header value; X: the offset of the header it names.
        a.op(LDX_IMM, IPV6_PAYLOAD_AT);
        a.op(LD_B_ABS, IPV6_NEXT_HEADER_AT);
        for step in 0..=MAX_EXTENSION_HEADERS {
            if step == MAX_EXTENSION_HEADERS {
                a.jeq(u32::from(IPPROTO_ICMPV6), To::Icmp, To::Drop);
                break;
            }
            a.jeq(u32::from(IPPROTO_ICMPV6), To::Icmp, To::Next);
            let advance = To::Step(step);
            a.jeq(u32::from(IPPROTO_HOPOPTS), advance, To::Next);
            a.jeq(u32::from(IPPROTO_ROUTING), advance, To::Next);
            a.jeq(u32::from(IPPROTO_DSTOPTS), advance, To::Drop);
            // Step over the header at X: A = its next header,
            // X += (its Hdr Ext Len + 1) * 8.
            a.label(advance);
            a.op(LD_B_IND, 0);
            a.op(ST, 0);
            a.op(LD_B_IND, 1);
            a.op(ADD_K, 1);
            a.op(LSH_K, 3);
            a.op(ADD_X, 0);
            a.op(TAX, 0);
            a.op(LD_MEM, 0);
        }
        a.label(To::Icmp);
        a.op(LD_B_IND, 0);
        a.jeq(u32::from(icmp_type), To::Accept, To::Drop);
    }
    a.label(To::Accept);
    a.op(RET_K, ACCEPT);
    a.label(To::Drop);
    a.op(RET_K, 0);
    a.finish()
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
        set_receive_buffer(&sock, ifindex, proto);
        attach_filter(sock.as_fd(), &filter_program(proto))?;
        bind_packet(sock.as_fd(), ifindex, proto.ethertype())?;
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

/// Receive buffer asked for: a burst of requests is queued rather than
/// dropped while the driver is busy (the default, about 200 KiB, overflowed
/// in the lab at tens of thousands of requests a second).
const RECEIVE_BUFFER: usize = 1 << 20;

/// Best effort: the kernel caps `SO_RCVBUF` at `net.core.rmem_max`, and a
/// failure leaves the default, which works, only with less headroom.
fn set_receive_buffer(sock: &Socket, ifindex: u32, proto: Protocol) {
    if let Err(e) = sock.set_recv_buffer_size(RECEIVE_BUFFER) {
        tracing::warn!(
            ifindex,
            ?proto,
            error = %e,
            "cannot enlarge the receive buffer; keeping the default"
        );
        return;
    }
    match sock.recv_buffer_size() {
        // Linux reports twice the size set (the doubling covers overhead).
        Ok(got) if got < RECEIVE_BUFFER => tracing::debug!(
            ifindex,
            ?proto,
            asked = RECEIVE_BUFFER,
            got,
            "receive buffer capped by net.core.rmem_max"
        ),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{ArpFrame, ArpOp, MacAddr, NeighborAdvertisement, NeighborSolicitation};
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// A classic BPF interpreter for the opcodes we use, with the kernel's
    /// semantics: a load past the end of the packet returns 0 (drop),
    /// arithmetic wraps, jumps are relative to the next instruction.
    fn run(prog: &[SockFilter], pkttype: u32, pkt: &[u8]) -> u32 {
        let byte = |off: u32| pkt.get(off as usize).map(|b| u32::from(*b));
        let mut pc = 0usize;
        let (mut a, mut x): (u32, u32) = (0, 0);
        let mut mem = [0u32; 16];
        loop {
            let i = prog[pc];
            match i.code {
                LD_B_ABS if i.k == ANC_PKTTYPE => a = pkttype,
                LD_B_ABS => match byte(i.k) {
                    Some(b) => a = b,
                    None => return 0,
                },
                LD_H_ABS => match (byte(i.k), byte(i.k.wrapping_add(1))) {
                    (Some(h), Some(l)) => a = (h << 8) | l,
                    _ => return 0,
                },
                LD_B_IND => match x.checked_add(i.k).and_then(byte) {
                    Some(b) => a = b,
                    None => return 0,
                },
                LDX_IMM => x = i.k,
                ST => mem[i.k as usize] = a,
                LD_MEM => a = mem[i.k as usize],
                ADD_K => a = a.wrapping_add(i.k),
                LSH_K => a = a.wrapping_shl(i.k),
                ADD_X => a = a.wrapping_add(x),
                TAX => x = a,
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

    /// `frame` with extension headers inserted after the IPv6 fixed
    /// header: each `(type, bytes from Hdr Ext Len on)`, the next header
    /// fields chained, the payload length fixed. (The ICMPv6 checksum does
    /// not cover extension headers.)
    fn with_ext(frame: &[u8], headers: &[(u8, Vec<u8>)]) -> Vec<u8> {
        let mut out = frame[..54].to_vec();
        let upper = frame[20];
        let mut added = 0;
        for (i, (kind, body)) in headers.iter().enumerate() {
            if i == 0 {
                out[20] = *kind;
            }
            out.push(headers.get(i + 1).map_or(upper, |h| h.0));
            out.extend_from_slice(body);
            added += 1 + body.len();
        }
        out.extend_from_slice(&frame[54..]);
        let len = u16::from_be_bytes([out[18], out[19]]) + added as u16;
        out[18..20].copy_from_slice(&len.to_be_bytes());
        out
    }

    /// Eight bytes: Hdr Ext Len 0, one PadN of four.
    fn padn() -> Vec<u8> {
        vec![0, 1, 4, 0, 0, 0, 0]
    }

    fn ns() -> Vec<u8> {
        let t = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
        NeighborSolicitation::resolve_frame(M, Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1), t)
    }

    #[test]
    fn ndp_filter_walks_extension_headers() {
        use crate::packet::ReceivedNs;
        let p = filter_program(Protocol::Ndp);
        let rh = vec![0, 0, 0, 0, 0, 0, 0];
        for (what, headers) in [
            ("hop-by-hop", vec![(0, padn())]),
            ("destination options", vec![(60, padn())]),
            ("routing, segments left 0", vec![(43, rh.clone())]),
            (
                "all four",
                vec![(0, padn()), (60, padn()), (43, rh), (60, padn())],
            ),
            (
                "a long one (Hdr Ext Len 2)",
                vec![(60, [vec![2, 1, 20], vec![0; 20]].concat())],
            ),
        ] {
            let f = with_ext(&ns(), &headers);
            assert!(ReceivedNs::decode(&f).is_ok(), "{what}: user space accepts");
            assert_eq!(run(&p, 2, &f), ACCEPT, "{what}");
        }
        let frag = vec![0, 0, 0, 0, 0, 0, 0];
        for (what, headers) in [
            ("fragment", vec![(44, frag.clone())]),
            ("fragment after hop-by-hop", vec![(0, padn()), (44, frag)]),
            ("five headers", vec![(60, padn()); 5]),
            ("ESP", vec![(50, padn())]),
        ] {
            let f = with_ext(&ns(), &headers);
            assert!(ReceivedNs::decode(&f).is_err(), "{what}: user space drops");
            assert_eq!(run(&p, 2, &f), 0, "{what}");
        }
        // Cut inside the extension header, or right after it.
        let f = with_ext(&ns(), &[(0, padn())]);
        for n in 54..=62 {
            assert_eq!(run(&p, 2, &f[..n]), 0, "cut at {n}");
        }
        // Another ICMPv6 message behind hop-by-hop (an MLD report, with
        // Router Alert), and UDP behind it.
        let mut mld = with_ext(&ns(), &[(0, vec![0, 5, 2, 0, 0, 1, 0])]);
        mld[62] = 143;
        assert_eq!(run(&p, 2, &mld), 0);
        let mut udp = with_ext(&ns(), &[(0, padn())]);
        udp[54] = 17;
        assert_eq!(run(&p, 2, &udp), 0);
    }

    #[test]
    fn advertisement_filter_walks_extension_headers() {
        let t = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
        let na = NeighborAdvertisement {
            router: false,
            solicited: true,
            override_flag: true,
            target: t,
            target_lla: Some(M),
        }
        .encode_frame(M, M, t, t);
        let na = with_ext(&na, &[(0, padn()), (60, padn())]);
        assert!(NeighborAdvertisement::decode_frame(&na).is_ok());
        assert_eq!(
            run(&filter_program(Protocol::NdpAdvertisement), 0, &na),
            ACCEPT
        );
        assert_eq!(run(&filter_program(Protocol::Ndp), 0, &na), 0);
    }

    #[test]
    fn every_program_assembles() {
        for proto in [
            Protocol::Arp,
            Protocol::Ndp,
            Protocol::ArpReply,
            Protocol::NdpAdvertisement,
        ] {
            let p = filter_program(proto);
            // The kernel's limit (BPF_MAXINSNS) is 4096; ours are small.
            assert!(p.len() < 100, "{proto:?}: {} instructions", p.len());
            assert_eq!(p.last().map(|i| (i.code, i.k)), Some((RET_K, 0)));
        }
    }

    fn header() -> impl proptest::strategy::Strategy<Value = (u8, Vec<u8>)> {
        use proptest::prelude::*;
        (
            prop_oneof![Just(0u8), Just(43), Just(44), Just(60), Just(17)],
            0u8..3,
            any::<bool>(),
            any::<u8>(),
        )
            .prop_map(|(kind, units, quirk, byte)| {
                // Body of (units + 1) * 8 - 1 bytes: Hdr Ext Len then
                // zeros (Pad1 options; routing type 0, segments left 0),
                // with a "quirk": a segment left, or an option to discard.
                let mut body = vec![0u8; (usize::from(units) + 1) * 8 - 1];
                body[0] = units;
                if quirk {
                    body[2] = byte;
                }
                (kind, body)
            })
    }

    proptest::proptest! {
        /// The filter lets through every frame user space accepts, and
        /// what it lets through beyond that fails only on rules it leaves
        /// to user space (not on fragments or depth).
        #[test]
        fn filter_and_decoder_agree(headers in proptest::collection::vec(header(), 0..7)) {
            use crate::packet::{DecodeError, NsInvalid, ReceivedNs};
            let f = with_ext(&ns(), &headers);
            let verdict = run(&filter_program(Protocol::Ndp), 2, &f);
            match ReceivedNs::decode(&f) {
                Ok(_) => proptest::prop_assert_eq!(verdict, ACCEPT),
                Err(e) => if verdict == ACCEPT {
                    proptest::prop_assert!(matches!(
                        e,
                        NsInvalid::Decode(
                            DecodeError::HopByHopNotFirst
                            | DecodeError::RoutingSegmentsLeft(_)
                            | DecodeError::UnrecognizedOption { .. }
                            | DecodeError::Truncated { what: "IPv6 option", .. }
                        )
                    ), "{:?}", e);
                }
            }
        }
    }
}
