use super::*;

const OURS: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 11);
const LOCAL_MAC: MacAddr = [0x02, 0, 0, 0, 0, 0x11];
const PEER_MAC: MacAddr = [0x02, 0, 0, 0, 0, 0x01];

fn path() -> EchoPath {
    EchoPath {
        local_mac: LOCAL_MAC,
        peer_mac: PEER_MAC,
        address: OURS,
        source_port: 49_999,
    }
}

fn echo() -> EchoPacket {
    EchoPacket {
        discriminator: 0x1234_5678,
        sequence: 7,
        tx_time_ns: 123_456_789,
    }
}

/// Our frame as the peer's forwarding plane sends it back: MACs swapped,
/// TTL 254, header checksum updated (RFC 1624 style: recomputed).
fn looped(mut f: Vec<u8>) -> Vec<u8> {
    let (dst, src) = (f[0..6].to_vec(), f[6..12].to_vec());
    f[0..6].copy_from_slice(&src);
    f[6..12].copy_from_slice(&dst);
    f[22] -= 1;
    fix_ip_checksum(&mut f);
    f
}

fn fix_ip_checksum(f: &mut [u8]) {
    let ihl = usize::from(f[14] & 0x0f) * 4;
    f[24..26].fill(0);
    let sum = checksum(&[&f[14..14 + ihl]]);
    f[24..26].copy_from_slice(&sum.to_be_bytes());
}

fn fix_udp_checksum(f: &mut [u8]) {
    let ihl = usize::from(f[14] & 0x0f) * 4;
    let at = 14 + ihl;
    f[at + 6..at + 8].fill(0);
    let src = Ipv4Addr::new(f[26], f[27], f[28], f[29]);
    let dst = Ipv4Addr::new(f[30], f[31], f[32], f[33]);
    let len = usize::from(u16::from_be_bytes([f[at + 4], f[at + 5]]));
    let sum = udp_checksum(src, dst, &f[at..at + len]);
    f[at + 6..at + 8].copy_from_slice(&sum.to_be_bytes());
}

#[test]
fn the_frame_is_addressed_to_ourselves_through_the_peer() {
    let f = encode(&path(), 0xbeef, &echo());
    assert_eq!(f.len(), 66);
    assert_eq!(&f[0..6], &PEER_MAC, "Ethernet destination: the peer");
    assert_eq!(&f[6..12], &LOCAL_MAC);
    assert_eq!(&f[12..14], &[0x08, 0x00]);
    let ip = &f[14..34];
    assert_eq!(ip[0], 0x45);
    assert_eq!(ip[1], 0xc0);
    assert_eq!(u16::from_be_bytes([ip[2], ip[3]]), 52);
    assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), 0xbeef);
    assert_eq!(&ip[6..8], &[0, 0], "no fragmentation flags");
    assert_eq!(ip[8], 255, "TTL 255 (RFC 5881 §4)");
    assert_eq!(ip[9], 17);
    assert_eq!(&ip[12..16], &OURS.octets(), "source: us");
    assert_eq!(&ip[16..20], &OURS.octets(), "destination: us");
    assert_eq!(checksum(&[ip]), 0, "header checksum");
    let udp = &f[34..42];
    assert_eq!(u16::from_be_bytes([udp[0], udp[1]]), 49_999);
    assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), 3785);
    assert_eq!(u16::from_be_bytes([udp[4], udp[5]]), 32);
    assert_ne!(&udp[6..8], &[0, 0], "a UDP checksum is sent");
    assert_eq!(udp_checksum(OURS, OURS, &f[34..]), 0);
    assert_eq!(EchoPacket::decode(&f[42..]), Ok(echo()));
}

#[test]
fn a_looped_frame_decodes_and_everything_else_is_refused() {
    let sent = encode(&path(), 1, &echo()).to_vec();
    let back = looped(sent.clone());
    assert_eq!(decode_returned(&back, OURS), Ok(echo()));
    // Ethernet padding after the datagram is ignored.
    let mut padded = back.clone();
    padded.extend_from_slice(&[0; 20]);
    assert_eq!(decode_returned(&padded, OURS), Ok(echo()));
    // Not looped (TTL 255), or through two hops.
    assert_eq!(decode_returned(&sent, OURS), Err(FrameError::Ttl(255)));
    let mut twice = looped(back.clone());
    twice[0..12].copy_from_slice(&back[0..12]);
    assert_eq!(decode_returned(&twice, OURS), Err(FrameError::Ttl(253)));
    // Another session's address.
    let other = Ipv4Addr::new(192, 0, 2, 12);
    assert!(matches!(
        decode_returned(&back, other),
        Err(FrameError::Address { .. })
    ));

    type Mutation = fn(&mut Vec<u8>);
    let cases: [(&str, Mutation, FrameError); 9] = [
        (
            "IPv6",
            |f| f[12..14].copy_from_slice(&[0x86, 0xdd]),
            FrameError::NotIpv4(0x86dd),
        ),
        ("IHL 4", |f| f[14] = 0x44, FrameError::BadIpHeader(0x44)),
        ("version 6", |f| f[14] = 0x65, FrameError::BadIpHeader(0x65)),
        ("IP checksum", |f| f[24] ^= 1, FrameError::IpChecksum),
        (
            "more fragments",
            |f| {
                f[20] = 0x20;
                fix_ip_checksum(f);
            },
            FrameError::Fragment,
        ),
        (
            "TCP",
            |f| {
                f[23] = 6;
                fix_ip_checksum(f);
            },
            FrameError::NotUdp(6),
        ),
        (
            "port 3784",
            |f| {
                f[36..38].copy_from_slice(&3784u16.to_be_bytes());
                fix_udp_checksum(f);
            },
            FrameError::Port(3784),
        ),
        ("UDP checksum", |f| f[50] ^= 1, FrameError::UdpChecksum),
        (
            "echo magic",
            |f| {
                f[42] = b'X';
                fix_udp_checksum(f);
            },
            FrameError::Echo(EchoError::BadMagic),
        ),
    ];
    for (what, mutate, want) in cases {
        let mut f = back.clone();
        mutate(&mut f);
        assert_eq!(decode_returned(&f, OURS), Err(want), "{what}");
    }
    // No UDP checksum is accepted (IPv4).
    let mut f = back.clone();
    f[40..42].fill(0);
    assert_eq!(decode_returned(&f, OURS), Ok(echo()));
    // UDP length beyond the IP datagram, or below the header.
    for len in [33u16, 7] {
        let mut f = back.clone();
        f[38..40].copy_from_slice(&len.to_be_bytes());
        assert_eq!(
            decode_returned(&f, OURS),
            Err(FrameError::UdpLength(len)),
            "{len}"
        );
    }
    // IP total length beyond the frame.
    let mut f = back.clone();
    f[16..18].copy_from_slice(&200u16.to_be_bytes());
    fix_ip_checksum(&mut f);
    assert_eq!(
        decode_returned(&f, OURS),
        Err(FrameError::BadIpHeader(0x45))
    );
    // Every truncation is an error, never a panic.
    for n in 0..back.len() {
        assert!(decode_returned(&back[..n], OURS).is_err(), "cut at {n}");
    }
}

/// `back` with an IPv4 option (a 4-byte NOP / End list): IHL 6.
fn with_ip_option(back: &[u8]) -> Vec<u8> {
    let mut f = back[..34].to_vec();
    f.extend_from_slice(&[1, 1, 1, 0]);
    f.extend_from_slice(&back[34..]);
    f[14] = 0x46;
    f[16..18].copy_from_slice(&56u16.to_be_bytes());
    fix_ip_checksum(&mut f);
    f
}

#[test]
fn ip_options_are_stepped_over() {
    let back = looped(encode(&path(), 1, &echo()).to_vec());
    let f = with_ip_option(&back);
    assert_eq!(decode_returned(&f, OURS), Ok(echo()));
}

// ---- the socket filter, run by a classic BPF interpreter ----

const PACKET_BROADCAST: u32 = 1;
const PACKET_OTHERHOST: u32 = 3;
const PACKET_OUTGOING: u32 = 4;

/// The kernel's semantics for the opcodes we use: loads past the end
/// return 0 (drop), jumps are relative to the next instruction.
fn run(prog: &[SockFilter], pkttype: u32, pkt: &[u8]) -> u32 {
    let byte = |off: u32| pkt.get(off as usize).map(|b| u32::from(*b));
    let half = |off: u32| Some((byte(off)? << 8) | byte(off + 1)?);
    let word = |off: u32| Some((half(off)? << 16) | half(off + 2)?);
    let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
    loop {
        let i = prog[pc];
        let loaded = match i.code {
            LD_B_ABS if i.k == ANC_PKTTYPE => Some(pkttype),
            LD_B_ABS => byte(i.k),
            LD_H_ABS => half(i.k),
            LD_W_ABS => word(i.k),
            LD_H_IND => half(x + i.k),
            LDX_B_MSH => {
                match byte(i.k) {
                    Some(b) => x = 4 * (b & 0x0f),
                    None => return 0,
                }
                Some(a)
            }
            JEQ_K => {
                pc += usize::from(if a == i.k { i.jt } else { i.jf });
                Some(a)
            }
            JSET_K => {
                pc += usize::from(if a & i.k != 0 { i.jt } else { i.jf });
                Some(a)
            }
            RET_K => return i.k,
            other => panic!("unexpected opcode {other:#x}"),
        };
        match loaded {
            Some(v) => a = v,
            None => return 0,
        }
        pc += 1;
    }
}

#[test]
fn the_filter_passes_our_looped_echoes_only() {
    let prog = echo_filter(OURS);
    assert!(prog.len() < 32);
    assert_eq!(prog.last().map(|i| (i.code, i.k)), Some((RET_K, 0)));
    let back = looped(encode(&path(), 1, &echo()).to_vec());
    assert_eq!(run(&prog, PACKET_HOST, &back), FILTER_SNAPLEN);
    assert_eq!(
        run(&prog, PACKET_HOST, &with_ip_option(&back)),
        FILTER_SNAPLEN
    );
    // What user space refuses but the filter leaves to it: the TTL.
    let sent = encode(&path(), 1, &echo());
    assert_eq!(run(&prog, PACKET_HOST, &sent), FILTER_SNAPLEN);
    // Our own transmissions, and frames not for our host.
    for t in [PACKET_OUTGOING, PACKET_OTHERHOST, PACKET_BROADCAST] {
        assert_eq!(run(&prog, t, &back), 0, "packet type {t}");
    }
    type Mutation = fn(&mut Vec<u8>);
    let drops: [(&str, Mutation); 8] = [
        ("IPv6", |f| f[12..14].copy_from_slice(&[0x86, 0xdd])),
        ("TCP", |f| f[23] = 6),
        ("first fragment", |f| f[20] = 0x20),
        ("later fragment", |f| f[21] = 0x01),
        ("another source", |f| f[29] = 99),
        ("another destination", |f| f[33] = 99),
        ("control port", |f| {
            f[36..38].copy_from_slice(&3784u16.to_be_bytes())
        }),
        ("truncated", |f| f.truncate(36)),
    ];
    for (what, mutate) in drops {
        let mut f = back.clone();
        mutate(&mut f);
        assert_eq!(run(&prog, PACKET_HOST, &f), 0, "{what}");
    }
    // Another session's filter does not take our echoes.
    let theirs = echo_filter(Ipv4Addr::new(192, 0, 2, 12));
    assert_eq!(run(&theirs, PACKET_HOST, &back), 0);
}

proptest::proptest! {
    /// Arbitrary bytes, and our frame with arbitrary bytes changed: the
    /// decoder never panics, and whatever it accepts the filter passes.
    #[test]
    fn decode_never_panics_and_the_filter_passes_what_it_accepts(
        junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120),
        flips in proptest::collection::vec((0usize..66, proptest::prelude::any::<u8>()), 0..4),
    ) {
        let _ = decode_returned(&junk, OURS);
        let mut f = looped(encode(&path(), 9, &echo()).to_vec());
        for (at, v) in flips {
            f[at] = v;
        }
        if decode_returned(&f, OURS).is_ok() {
            proptest::prop_assert_eq!(run(&echo_filter(OURS), PACKET_HOST, &f), FILTER_SNAPLEN);
        }
    }
}
