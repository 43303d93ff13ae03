//! IPv6 neighbour discovery (RFC 4861): the IPv6 header, Neighbor
//! Solicitation and Neighbor Advertisement with their link-layer address
//! options, the ICMPv6 checksum, solicited-node multicast addresses.
//!
//! ```text
//! IPv6 header (40)   | ver=6 | tclass | flow label | payload len | next hdr=58 | hop limit=255 | src (16) | dst (16) |
//! NS  (24 + options) | type=135 | code=0 | checksum | reserved (4)          | target (16) | options... |
//! NA  (24 + options) | type=136 | code=0 | checksum | R S O + 29 reserved   | target (16) | options... |
//! LLA option (8)     | type=1 (source) or 2 (target) | length=1 (units of 8 octets) | MAC (6) |
//! ```
//!
//! Between the IPv6 header and the ICMPv6 message there may be extension
//! headers (next header 0, 43 or 60 instead of 58); the decoders walk them
//! with [`upper_layer`].

use std::net::Ipv6Addr;

use thiserror::Error;

use super::DecodeError;
use super::ethernet::{ETH_HEADER_LEN, ETHERTYPE_IPV6, EthernetHeader, MacAddr};
use super::ext::upper_layer;

/// IPv6 fixed header length.
pub const IPV6_HEADER_LEN: usize = 40;
/// IP protocol number of ICMPv6 (the IPv6 next header value).
pub const IPPROTO_ICMPV6: u8 = 58;
/// ICMPv6 type of a Neighbor Solicitation.
pub const ICMPV6_NEIGHBOR_SOLICITATION: u8 = 135;
/// ICMPv6 type of a Neighbor Advertisement.
pub const ICMPV6_NEIGHBOR_ADVERTISEMENT: u8 = 136;
/// Hop limit every ND message is sent with and must arrive with (RFC 4861
/// 7.1.1: proof that it was not forwarded by a router).
pub const ND_HOP_LIMIT: u8 = 255;
/// Minimum ICMPv6 length of a Neighbor Solicitation (RFC 4861 7.1.1).
pub const NS_MIN_LEN: usize = 24;
/// Source link-layer address option type.
pub const OPT_SOURCE_LLA: u8 = 1;
/// Target link-layer address option type.
pub const OPT_TARGET_LLA: u8 = 2;
/// Length of the NA we send: 24 bytes plus one target link-layer option.
pub const NA_LEN: usize = 32;
/// Length of the whole NA frame we send.
pub const NA_FRAME_LEN: usize = ETH_HEADER_LEN + IPV6_HEADER_LEN + NA_LEN;
/// ff02::1, all nodes on the link.
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

const NA_FLAG_ROUTER: u8 = 0x80;
const NA_FLAG_SOLICITED: u8 = 0x40;
const NA_FLAG_OVERRIDE: u8 = 0x20;

/// The solicited-node multicast group of `addr`: `ff02::1:ffXX:XXXX` with
/// the low 24 bits of `addr` (RFC 4291 2.7.1).
pub fn solicited_node_multicast(addr: Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, o[13], o[14], o[15],
    ])
}

/// Whether `addr` is in `ff02::1:ff00:0/104`.
pub fn is_solicited_node_multicast(addr: Ipv6Addr) -> bool {
    addr.octets()[..13] == [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff]
}

/// The Ethernet multicast address of an IPv6 multicast group: `33:33`
/// followed by the group's low 32 bits (RFC 2464 section 7). For a
/// solicited-node group this is `33:33:ff:XX:XX:XX`.
pub fn ipv6_multicast_mac(group: Ipv6Addr) -> MacAddr {
    let o = group.octets();
    MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
}

/// The ICMPv6 checksum of `msg` over the IPv6 pseudo-header (RFC 8200
/// 8.1): the one's complement of the one's complement sum of source,
/// destination, upper-layer length (32 bits), three zero bytes, next header
/// 58, and the message. To fill the field, compute it with bytes 2..4 of
/// `msg` zeroed; summing a message whose field is already correct yields 0
/// (see [`icmpv6_checksum_ok`]).
pub fn icmpv6_checksum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    fn add_bytes(mut sum: u64, b: &[u8]) -> u64 {
        let mut chunks = b.chunks_exact(2);
        for c in &mut chunks {
            sum += u64::from(u16::from_be_bytes([c[0], c[1]]));
        }
        if let [last] = chunks.remainder() {
            sum += u64::from(u16::from_be_bytes([*last, 0]));
        }
        sum
    }
    let mut sum = 0u64;
    sum = add_bytes(sum, &src.octets());
    sum = add_bytes(sum, &dst.octets());
    // The upper-layer length is 32 bits; an IPv6 payload cannot exceed
    // u32 without jumbograms, and a longer slice would only be a caller
    // error, so widen rather than truncate.
    let len = msg.len() as u64;
    sum += (len >> 16) + (len & 0xffff);
    sum += u64::from(IPPROTO_ICMPV6);
    sum = add_bytes(sum, msg);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Whether `msg` (checksum field included) carries a correct checksum.
pub fn icmpv6_checksum_ok(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> bool {
    icmpv6_checksum(src, dst, msg) == 0
}

/// The IPv6 fixed header. `next_header` is the fixed header's own: the ND
/// decoders walk any extension headers after it with
/// [`upper_layer`](super::upper_layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Header {
    pub traffic_class: u8,
    pub flow_label: u32,
    pub payload_len: u16,
    pub next_header: u8,
    pub hop_limit: u8,
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
}

impl Ipv6Header {
    /// Decodes the header and returns the payload trimmed to the declared
    /// payload length (Ethernet padding dropped).
    pub fn decode(b: &[u8]) -> Result<(Ipv6Header, &[u8]), DecodeError> {
        if b.len() < IPV6_HEADER_LEN {
            return Err(DecodeError::Truncated {
                what: "IPv6 header",
                need: IPV6_HEADER_LEN,
                got: b.len(),
            });
        }
        let version = b[0] >> 4;
        if version != 6 {
            return Err(DecodeError::IpVersion(version));
        }
        let word = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let payload_len = u16::from_be_bytes([b[4], b[5]]);
        let mut src = [0u8; 16];
        src.copy_from_slice(&b[8..24]);
        let mut dst = [0u8; 16];
        dst.copy_from_slice(&b[24..40]);
        let h = Ipv6Header {
            traffic_class: ((word >> 20) & 0xff) as u8,
            flow_label: word & 0x000f_ffff,
            payload_len,
            next_header: b[6],
            hop_limit: b[7],
            src: Ipv6Addr::from(src),
            dst: Ipv6Addr::from(dst),
        };
        let rest = &b[IPV6_HEADER_LEN..];
        let declared = usize::from(payload_len);
        if declared > rest.len() {
            return Err(DecodeError::Ipv6PayloadLength {
                declared,
                available: rest.len(),
            });
        }
        Ok((h, &rest[..declared]))
    }

    /// Appends the 40 header bytes.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let word =
            (6u32 << 28) | (u32::from(self.traffic_class) << 20) | (self.flow_label & 0x000f_ffff);
        out.extend_from_slice(&word.to_be_bytes());
        out.extend_from_slice(&self.payload_len.to_be_bytes());
        out.push(self.next_header);
        out.push(self.hop_limit);
        out.extend_from_slice(&self.src.octets());
        out.extend_from_slice(&self.dst.octets());
    }
}

/// Builds an Ethernet + IPv6 + ICMPv6 frame, hop limit 255, filling in the
/// ICMPv6 checksum of `icmp` (whose bytes 2..4 are overwritten).
fn nd_frame(
    eth_dst: MacAddr,
    eth_src: MacAddr,
    ip_src: Ipv6Addr,
    ip_dst: Ipv6Addr,
    hop_limit: u8,
    mut icmp: Vec<u8>,
) -> Vec<u8> {
    icmp[2] = 0;
    icmp[3] = 0;
    let c = icmpv6_checksum(ip_src, ip_dst, &icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let mut out = Vec::with_capacity(ETH_HEADER_LEN + IPV6_HEADER_LEN + icmp.len());
    EthernetHeader {
        dst: eth_dst,
        src: eth_src,
        ethertype: ETHERTYPE_IPV6,
    }
    .encode_into(&mut out);
    Ipv6Header {
        traffic_class: 0,
        flow_label: 0,
        // ND messages are tiny; callers build at most a few options.
        payload_len: u16::try_from(icmp.len()).unwrap_or(u16::MAX),
        next_header: IPPROTO_ICMPV6,
        hop_limit,
        src: ip_src,
        dst: ip_dst,
    }
    .encode_into(&mut out);
    out.extend_from_slice(&icmp);
    out
}

/// Ethernet, IPv6 and any extension headers ([`upper_layer`]) down to an
/// ICMPv6 message (not yet checked).
fn decode_icmpv6(frame: &[u8]) -> Result<(EthernetHeader, Ipv6Header, &[u8]), DecodeError> {
    let (eth, payload) = EthernetHeader::decode_expect(frame, ETHERTYPE_IPV6)?;
    let (ip, payload) = Ipv6Header::decode(payload)?;
    let (proto, icmp) = upper_layer(ip.next_header, payload)?;
    if proto != IPPROTO_ICMPV6 {
        return Err(DecodeError::NextHeader(proto));
    }
    Ok((eth, ip, icmp))
}

/// Why a received Neighbor Solicitation is not valid (RFC 4861 7.1.1), or
/// not a Neighbor Solicitation at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum NsInvalid {
    /// The frame did not decode as Ethernet + IPv6 + ICMPv6 of type 135.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// Hop limit other than 255: the message crossed a router.
    #[error("hop limit {0}, must be 255")]
    HopLimit(u8),
    /// ICMP code other than 0.
    #[error("ICMP code {0}, must be 0")]
    Code(u8),
    /// ICMP length below 24 octets.
    #[error("ICMP length {0}, must be at least 24")]
    TooShort(usize),
    /// Checksum mismatch.
    #[error("bad ICMPv6 checksum")]
    Checksum,
    /// The target address is multicast.
    #[error("target address {0} is multicast")]
    MulticastTarget(Ipv6Addr),
    /// An option with length 0, or one running past the message.
    #[error("option of type {kind} has length {len} (units of 8 octets), invalid here")]
    OptionLength { kind: u8, len: u8 },
    /// A link-layer address option whose length is not 1 (8 octets) on
    /// Ethernet (Linux drops these too).
    #[error("link-layer address option of length {0} (units of 8 octets), expected 1")]
    LinkLayerOptionLength(u8),
    /// Source unspecified (DAD) but the destination is not a solicited-node
    /// multicast address.
    #[error("unspecified source but destination {0} is not a solicited-node multicast address")]
    DadNotToSolicitedNode(Ipv6Addr),
    /// Source unspecified (DAD) but a source link-layer option is present.
    #[error("unspecified source with a source link-layer address option")]
    DadWithSourceLla,
}

/// Walks the options and returns the first link-layer address option of
/// type `kind`. Every option must have a length above 0 that fits.
fn find_lla_option(mut opts: &[u8], kind: u8) -> Result<Option<MacAddr>, NsInvalid> {
    let mut found = None;
    while !opts.is_empty() {
        if opts.len() < 2 {
            return Err(NsInvalid::OptionLength {
                kind: opts[0],
                len: 0,
            });
        }
        let (t, units) = (opts[0], opts[1]);
        let len = usize::from(units) * 8;
        if units == 0 || len > opts.len() {
            return Err(NsInvalid::OptionLength {
                kind: t,
                len: units,
            });
        }
        if t == kind && found.is_none() {
            if units != 1 {
                return Err(NsInvalid::LinkLayerOptionLength(units));
            }
            found = Some(MacAddr::from_slice(&opts[2..8]));
        }
        opts = &opts[len..];
    }
    Ok(found)
}

fn target_at(icmp: &[u8]) -> Ipv6Addr {
    let mut t = [0u8; 16];
    t.copy_from_slice(&icmp[8..24]);
    Ipv6Addr::from(t)
}

/// A Neighbor Solicitation (the ICMPv6 message only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighborSolicitation {
    pub target: Ipv6Addr,
    pub source_lla: Option<MacAddr>,
}

impl NeighborSolicitation {
    /// Encodes the ICMPv6 message with a zero checksum.
    pub fn encode_icmp(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(32);
        b.extend_from_slice(&[ICMPV6_NEIGHBOR_SOLICITATION, 0, 0, 0, 0, 0, 0, 0]);
        b.extend_from_slice(&self.target.octets());
        if let Some(mac) = self.source_lla {
            b.extend_from_slice(&[OPT_SOURCE_LLA, 1]);
            b.extend_from_slice(&mac.0);
        }
        b
    }

    /// A whole frame with a correct checksum and the given hop limit (255
    /// for anything real; other values exist for tests).
    pub fn encode_frame(
        &self,
        eth_dst: MacAddr,
        eth_src: MacAddr,
        ip_src: Ipv6Addr,
        ip_dst: Ipv6Addr,
        hop_limit: u8,
    ) -> Vec<u8> {
        nd_frame(
            eth_dst,
            eth_src,
            ip_src,
            ip_dst,
            hop_limit,
            self.encode_icmp(),
        )
    }

    /// A solicitation for `target` the way a resolving host sends it: to
    /// the target's solicited-node group, with a source link-layer option.
    pub fn resolve_frame(src_mac: MacAddr, src_ip: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
        let group = solicited_node_multicast(target);
        NeighborSolicitation {
            target,
            source_lla: Some(src_mac),
        }
        .encode_frame(
            ipv6_multicast_mac(group),
            src_mac,
            src_ip,
            group,
            ND_HOP_LIMIT,
        )
    }
}

/// A received, validated Neighbor Solicitation with the headers it came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceivedNs {
    pub eth: EthernetHeader,
    pub ip: Ipv6Header,
    pub ns: NeighborSolicitation,
}

impl ReceivedNs {
    /// Decodes an Ethernet frame and applies every RFC 4861 7.1.1 check:
    /// hop limit 255, checksum, code 0, ICMP length >= 24, target not
    /// multicast, every option's length > 0, and for an unspecified source
    /// a solicited-node destination and no source link-layer option.
    /// Extension headers before the ICMPv6 message are walked
    /// ([`upper_layer`]): Hop-by-Hop, Destination Options and a spent
    /// Routing header are fine, a Fragment header is not (RFC 6980). Not
    /// being a solicitation at all is reported as [`NsInvalid::Decode`]
    /// with [`DecodeError::NextHeader`] or [`DecodeError::Icmpv6Type`].
    pub fn decode(frame: &[u8]) -> Result<ReceivedNs, NsInvalid> {
        let (eth, ip, icmp) = decode_icmpv6(frame)?;
        let Some(&kind) = icmp.first() else {
            return Err(DecodeError::Truncated {
                what: "ICMPv6 message",
                need: 4,
                got: 0,
            }
            .into());
        };
        if kind != ICMPV6_NEIGHBOR_SOLICITATION {
            return Err(DecodeError::Icmpv6Type(kind).into());
        }
        if ip.hop_limit != ND_HOP_LIMIT {
            return Err(NsInvalid::HopLimit(ip.hop_limit));
        }
        if icmp.len() < NS_MIN_LEN {
            return Err(NsInvalid::TooShort(icmp.len()));
        }
        if !icmpv6_checksum_ok(ip.src, ip.dst, icmp) {
            return Err(NsInvalid::Checksum);
        }
        if icmp[1] != 0 {
            return Err(NsInvalid::Code(icmp[1]));
        }
        let target = target_at(icmp);
        if target.is_multicast() {
            return Err(NsInvalid::MulticastTarget(target));
        }
        let source_lla = find_lla_option(&icmp[NS_MIN_LEN..], OPT_SOURCE_LLA)?;
        if ip.src.is_unspecified() {
            if !is_solicited_node_multicast(ip.dst) {
                return Err(NsInvalid::DadNotToSolicitedNode(ip.dst));
            }
            if source_lla.is_some() {
                return Err(NsInvalid::DadWithSourceLla);
            }
        }
        Ok(ReceivedNs {
            eth,
            ip,
            ns: NeighborSolicitation { target, source_lla },
        })
    }

    /// Whether this is a duplicate address detection probe (unspecified
    /// source).
    pub fn is_dad(&self) -> bool {
        self.ip.src.is_unspecified()
    }
}

/// A Neighbor Advertisement (the ICMPv6 message only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighborAdvertisement {
    /// R: the sender is a router. Always false from us.
    pub router: bool,
    /// S: sent in response to a solicitation.
    pub solicited: bool,
    /// O: the receiver should replace a cached link-layer address.
    pub override_flag: bool,
    pub target: Ipv6Addr,
    pub target_lla: Option<MacAddr>,
}

impl NeighborAdvertisement {
    /// Encodes the ICMPv6 message with a zero checksum.
    pub fn encode_icmp(&self) -> Vec<u8> {
        let mut flags = 0u8;
        if self.router {
            flags |= NA_FLAG_ROUTER;
        }
        if self.solicited {
            flags |= NA_FLAG_SOLICITED;
        }
        if self.override_flag {
            flags |= NA_FLAG_OVERRIDE;
        }
        let mut b = Vec::with_capacity(NA_LEN);
        b.extend_from_slice(&[ICMPV6_NEIGHBOR_ADVERTISEMENT, 0, 0, 0, flags, 0, 0, 0]);
        b.extend_from_slice(&self.target.octets());
        if let Some(mac) = self.target_lla {
            b.extend_from_slice(&[OPT_TARGET_LLA, 1]);
            b.extend_from_slice(&mac.0);
        }
        b
    }

    /// A whole frame: hop limit 255 and a correct checksum.
    pub fn encode_frame(
        &self,
        eth_dst: MacAddr,
        eth_src: MacAddr,
        ip_src: Ipv6Addr,
        ip_dst: Ipv6Addr,
    ) -> Vec<u8> {
        nd_frame(
            eth_dst,
            eth_src,
            ip_src,
            ip_dst,
            ND_HOP_LIMIT,
            self.encode_icmp(),
        )
    }

    /// Decodes the ICMPv6 message (type 136). Checks the length, code and
    /// options, not the checksum (see [`decode_frame`](Self::decode_frame)).
    pub fn decode_icmp(icmp: &[u8]) -> Result<NeighborAdvertisement, NsInvalid> {
        let Some(&kind) = icmp.first() else {
            return Err(NsInvalid::TooShort(0));
        };
        if kind != ICMPV6_NEIGHBOR_ADVERTISEMENT {
            return Err(DecodeError::Icmpv6Type(kind).into());
        }
        if icmp.len() < 24 {
            return Err(NsInvalid::TooShort(icmp.len()));
        }
        if icmp[1] != 0 {
            return Err(NsInvalid::Code(icmp[1]));
        }
        let flags = icmp[4];
        Ok(NeighborAdvertisement {
            router: flags & NA_FLAG_ROUTER != 0,
            solicited: flags & NA_FLAG_SOLICITED != 0,
            override_flag: flags & NA_FLAG_OVERRIDE != 0,
            target: target_at(icmp),
            target_lla: find_lla_option(&icmp[24..], OPT_TARGET_LLA)?,
        })
    }

    /// Decodes a whole frame carrying an NA (extension headers walked as for
    /// a solicitation), checking hop limit 255 and the checksum as well.
    pub fn decode_frame(
        frame: &[u8],
    ) -> Result<(EthernetHeader, Ipv6Header, NeighborAdvertisement), NsInvalid> {
        let (eth, ip, icmp) = decode_icmpv6(frame)?;
        let na = Self::decode_icmp(icmp)?;
        if ip.hop_limit != ND_HOP_LIMIT {
            return Err(NsInvalid::HopLimit(ip.hop_limit));
        }
        if !icmpv6_checksum_ok(ip.src, ip.dst, icmp) {
            return Err(NsInvalid::Checksum);
        }
        Ok((eth, ip, na))
    }
}
