//! Wire codecs: Ethernet II, ARP (RFC 826) and the two ICMPv6 neighbour
//! discovery messages we need (RFC 4861 Neighbor Solicitation and Neighbor
//! Advertisement), with the IPv6 header they ride in and the extension
//! headers that may come before them ([`upper_layer`]); and the MLDv2
//! report the driver sends to restate its solicited-node groups
//! ([`mld2_reports`], encode only).
//!
//! Decoders take a byte slice, never panic, never allocate, and ignore
//! trailing bytes beyond what the headers say (Ethernet pads short frames
//! to 60 bytes). Encoders return whole Ethernet frames ready for an
//! `AF_PACKET` socket.
//!
//! ## The ICMPv6 checksum
//! We compute it ourselves ([`icmpv6_checksum`]) because every NDP frame
//! we send is a complete Ethernet frame written to an `AF_PACKET` socket:
//! the kernel's IPv6 stack never sees it, so nothing else would fill the
//! field in. (For the record: on an `IPPROTO_ICMPV6` raw socket Linux
//! always computes and verifies the checksum itself, RFC 3542 section 3.1,
//! and rejects `IPV6_CHECKSUM` on such sockets; `IPV6_CHECKSUM` is for
//! other raw IPv6 protocols.) Received solicitations are checked with
//! [`icmpv6_checksum_ok`] as part of the RFC 4861 7.1.1 validation.

mod arp;
mod ethernet;
mod ext;
mod mld;
mod ndp;

pub use arp::{ARP_FRAME_LEN, ARP_LEN, ArpFrame, ArpOp, ArpPacket};
pub use ethernet::{
    ETH_HEADER_LEN, ETHERTYPE_ARP, ETHERTYPE_IPV6, ETHERTYPE_QINQ, ETHERTYPE_VLAN,
    ETHERTYPE_VLAN_9100, EthernetHeader, MacAddr, ParseMacError, is_vlan_ethertype,
};
pub use ext::{
    IPPROTO_DSTOPTS, IPPROTO_FRAGMENT, IPPROTO_HOPOPTS, IPPROTO_ROUTING, MAX_EXTENSION_HEADERS,
    is_walked_extension_header, upper_layer,
};
pub use mld::{
    ALL_MLDV2_ROUTERS, ICMPV6_MLD2_REPORT, MLD2_CHANGE_TO_EXCLUDE, MLD2_RECORDS_PER_REPORT,
    mld2_reports,
};
pub use ndp::{
    ALL_NODES, ICMPV6_NEIGHBOR_ADVERTISEMENT, ICMPV6_NEIGHBOR_SOLICITATION, IPPROTO_ICMPV6,
    IPV6_HEADER_LEN, Ipv6Header, NA_FRAME_LEN, NA_LEN, ND_HOP_LIMIT, NS_MIN_LEN,
    NeighborAdvertisement, NeighborSolicitation, NsInvalid, OPT_SOURCE_LLA, OPT_TARGET_LLA,
    ReceivedNs, icmpv6_checksum, icmpv6_checksum_ok, ipv6_multicast_mac,
    is_solicited_node_multicast, solicited_node_multicast,
};

use thiserror::Error;

/// Why a frame could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// Fewer bytes than the layout needs.
    #[error("truncated {what}: need {need} bytes, got {got}")]
    Truncated {
        what: &'static str,
        need: usize,
        got: usize,
    },
    /// The frame carries an 802.1Q / 802.1ad tag: it belongs to a VLAN, not
    /// to the interface it was seen on.
    #[error("VLAN-tagged frame (ethertype {0:#06x})")]
    VlanTagged(u16),
    /// Not the ethertype the decoder was asked for.
    #[error("unexpected ethertype {0:#06x}")]
    Ethertype(u16),
    /// ARP hardware type other than Ethernet (1).
    #[error("ARP hardware type {0} is not Ethernet")]
    ArpHardwareType(u16),
    /// ARP protocol type other than IPv4 (0x0800).
    #[error("ARP protocol type {0:#06x} is not IPv4")]
    ArpProtocolType(u16),
    /// ARP address lengths other than 6 and 4.
    #[error("ARP address lengths {hlen}/{plen}, expected 6/4")]
    ArpAddressLength { hlen: u8, plen: u8 },
    /// ARP operation other than request (1) or reply (2).
    #[error("ARP operation {0} is neither request nor reply")]
    ArpOperation(u16),
    /// IP version field is not 6.
    #[error("IP version {0}, expected 6")]
    IpVersion(u8),
    /// The IPv6 payload length runs past the end of the frame.
    #[error("IPv6 payload length {declared} exceeds the {available} bytes present")]
    Ipv6PayloadLength { declared: usize, available: usize },
    /// The upper-layer protocol (after any extension headers) is not
    /// ICMPv6.
    #[error("IPv6 next header {0} is not ICMPv6")]
    NextHeader(u8),
    /// A Fragment header: neighbour discovery messages must not be
    /// fragmented (RFC 6980), and we do not reassemble.
    #[error("IPv6 Fragment header")]
    Fragmented,
    /// More extension headers than [`MAX_EXTENSION_HEADERS`].
    #[error("more than {0} IPv6 extension headers")]
    TooManyExtensionHeaders(usize),
    /// A Hop-by-Hop Options header not directly after the fixed header.
    #[error("IPv6 Hop-by-Hop Options header not first")]
    HopByHopNotFirst,
    /// A Routing header with segments left: not for us yet.
    #[error("IPv6 Routing header with {0} segments left")]
    RoutingSegmentsLeft(u8),
    /// An option we do not know whose type says to discard the packet
    /// (RFC 8200 4.2).
    #[error("unrecognised IPv6 option {option:#04x} in extension header {header}")]
    UnrecognizedOption { header: u8, option: u8 },
    /// ICMPv6 type other than the one asked for.
    #[error("ICMPv6 type {0} is not the expected message")]
    Icmpv6Type(u8),
}
