//! The pure answering logic: given the owned IPs, the interface a frame
//! arrived on and the frame, reply or drop (with a reason).
//!
//! ## ARP
//! Answers who-has requests (Ethernet destination broadcast or our MAC)
//! for an owned IPv4 address with a unicast reply from the interface MAC to
//! the requester's hardware address. Replies, other addresses and frames
//! that still carry an 802.1Q/802.1ad tag (another VLAN seen on the parent
//! interface) are dropped. The Linux edge also drops, in its socket filter,
//! frames the kernel marks `PACKET_OTHERHOST`: that is how a frame of a
//! VLAN with no local VLAN device reaches a socket on the parent once the
//! NIC has stripped the tag.
//!
//! ## NDP
//! Answers valid (RFC 4861 7.1.1) Neighbor Solicitations for an owned IPv6
//! address with a Neighbor Advertisement carrying a target link-layer
//! address option. A solicitation behind Hop-by-Hop, Destination Options
//! or spent Routing headers is answered like a plain one; a fragmented one,
//! one behind more than four extension headers or with a malformed one is
//! dropped as invalid (see [`crate::packet::upper_layer`]).
//! - **The source address is the target itself**, as Linux does for its
//!   own addresses (RFC 4861 7.2.4 wants "an address assigned to the
//!   interface", which is what the service IP looks like from the link).
//!   MetalLB sends from the interface's link-local address instead; some
//!   receivers then drop the answer: `ndisc6` for one discards an NA for a
//!   global target that comes from a link-local source (its scope-id check),
//!   and we found that out the hard way.
//! - **Override is set** (and Solicited). MetalLB leaves Override clear, as
//!   RFC 4861 7.2.4 suggests for proxies and anycast. But exactly one node
//!   answers for a service IP, so ours is not a proxy answer; and with
//!   Override clear a client that still caches the previous owner's MAC
//!   keeps it (RFC 4861 7.2.5: the entry only goes STALE) until its own
//!   unreachability detection gives up, seconds after a failover. With it
//!   set the client switches at once.
//! - A solicitation **with** a source link-layer option is answered unicast
//!   to that address. One **without** (a unicast reachability probe) is
//!   answered unicast to the frame's source MAC: RFC 4861 7.2.4 leaves the
//!   link-layer destination to the sender's knowledge, and the frame's
//!   source is exactly that, which saves the client a resolution round
//!   trip (MetalLB drops such solicitations).
//! - A duplicate address detection probe (unspecified source) is answered,
//!   as RFC 4861 7.2.4 requires, with Solicited clear, to the all-nodes
//!   group ff02::1: the prober then sees the address is taken.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use crate::interfaces::{AllowedInterfaces, Interface};
use crate::packet::{
    ALL_NODES, ArpFrame, ArpOp, DecodeError, ETHERTYPE_ARP, ETHERTYPE_IPV6, EthernetHeader,
    MacAddr, NeighborAdvertisement, NsInvalid, ReceivedNs, ipv6_multicast_mac, is_vlan_ethertype,
    solicited_node_multicast,
};

/// The IPs we own, each with the interfaces it may be answered on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnedIps(BTreeMap<IpAddr, AllowedInterfaces>);

impl OwnedIps {
    /// No IPs.
    pub fn new() -> Self {
        Self::default()
    }

    /// Owns `ip` on `allowed` (replacing a previous allow-list). Returns
    /// whether anything changed.
    pub fn insert(&mut self, ip: IpAddr, allowed: AllowedInterfaces) -> bool {
        self.0.insert(ip, allowed.clone()).as_ref() != Some(&allowed)
    }

    /// Stops owning `ip`; returns whether it was owned.
    pub fn remove(&mut self, ip: &IpAddr) -> bool {
        self.0.remove(ip).is_some()
    }

    /// The allow-list of `ip` if owned.
    pub fn get(&self, ip: &IpAddr) -> Option<&AllowedInterfaces> {
        self.0.get(ip)
    }

    /// Whether `ip` is owned.
    pub fn contains(&self, ip: &IpAddr) -> bool {
        self.0.contains_key(ip)
    }

    /// Owned IPs in order.
    pub fn iter(&self) -> impl Iterator<Item = (&IpAddr, &AllowedInterfaces)> {
        self.0.iter()
    }

    /// Number of owned IPs.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether nothing is owned.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Why a received frame was not answered. Each is a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DropReason {
    /// The requested address is not one we own.
    NotOwned,
    /// Owned, but not on this interface (allow-list).
    InterfaceNotAllowed,
    /// This interface runs no responder for the protocol.
    InterfaceNotEligible,
    /// An ARP reply, or an IPv6 packet that is not a Neighbor Solicitation.
    NotRequest,
    /// The Ethernet destination is neither broadcast (ARP), the matching
    /// IPv6 multicast address (NDP) nor our MAC; or an NS went to a
    /// multicast group other than the target's solicited-node group.
    WrongDestination,
    /// Still carries a VLAN tag: it belongs to another VLAN.
    OtherVlan,
    /// Sent by this interface itself (its source MAC is ours).
    FromSelf,
    /// Malformed, or fails RFC 4861 7.1.1 validation.
    Invalid,
}

impl DropReason {
    /// Every reason, for counter tables.
    pub const ALL: [DropReason; 8] = [
        DropReason::NotOwned,
        DropReason::InterfaceNotAllowed,
        DropReason::InterfaceNotEligible,
        DropReason::NotRequest,
        DropReason::WrongDestination,
        DropReason::OtherVlan,
        DropReason::FromSelf,
        DropReason::Invalid,
    ];

    /// A stable snake_case name (log fields, metric labels).
    pub const fn as_str(self) -> &'static str {
        match self {
            DropReason::NotOwned => "not_owned",
            DropReason::InterfaceNotAllowed => "interface_not_allowed",
            DropReason::InterfaceNotEligible => "interface_not_eligible",
            DropReason::NotRequest => "not_request",
            DropReason::WrongDestination => "wrong_destination",
            DropReason::OtherVlan => "other_vlan",
            DropReason::FromSelf => "from_self",
            DropReason::Invalid => "invalid",
        }
    }

    const fn index(self) -> usize {
        match self {
            DropReason::NotOwned => 0,
            DropReason::InterfaceNotAllowed => 1,
            DropReason::InterfaceNotEligible => 2,
            DropReason::NotRequest => 3,
            DropReason::WrongDestination => 4,
            DropReason::OtherVlan => 5,
            DropReason::FromSelf => 6,
            DropReason::Invalid => 7,
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One counter per [`DropReason`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DropCounters([u64; 8]);

impl DropCounters {
    /// Counts one drop.
    pub fn record(&mut self, reason: DropReason) {
        self.0[reason.index()] += 1;
    }

    /// The count for `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.0[reason.index()]
    }

    /// `(reason, count)` for every reason.
    pub fn iter(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.iter().map(|r| (*r, self.get(*r)))
    }
}

/// What the responder decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Send `frame` on the interface the request came in on. `ip` is the
    /// owned address asked for.
    Reply { ip: IpAddr, frame: Vec<u8> },
    /// Send nothing. `ip` is the requested address when the frame got far
    /// enough to name one (used to count requests for owned IPs).
    Drop {
        reason: DropReason,
        ip: Option<IpAddr>,
    },
}

impl Decision {
    fn drop(reason: DropReason, ip: Option<IpAddr>) -> Decision {
        Decision::Drop { reason, ip }
    }

    /// The drop reason, if dropped.
    pub fn drop_reason(&self) -> Option<DropReason> {
        match self {
            Decision::Drop { reason, .. } => Some(*reason),
            Decision::Reply { .. } => None,
        }
    }

    /// The reply frame, if any.
    pub fn reply_frame(&self) -> Option<&[u8]> {
        match self {
            Decision::Reply { frame, .. } => Some(frame),
            Decision::Drop { .. } => None,
        }
    }
}

/// Decides what to do with `frame`, an ARP or IPv6 Ethernet frame received
/// on `iface`.
pub fn respond(owned: &OwnedIps, iface: &Interface, frame: &[u8]) -> Decision {
    let eth = match EthernetHeader::decode(frame) {
        Ok((eth, _)) => eth,
        Err(_) => return Decision::drop(DropReason::Invalid, None),
    };
    if is_vlan_ethertype(eth.ethertype) {
        return Decision::drop(DropReason::OtherVlan, None);
    }
    if eth.src == iface.mac {
        return Decision::drop(DropReason::FromSelf, None);
    }
    match eth.ethertype {
        ETHERTYPE_ARP => respond_arp(owned, iface, frame),
        ETHERTYPE_IPV6 => respond_ndp(owned, iface, frame),
        _ => Decision::drop(DropReason::NotRequest, None),
    }
}

/// Owned, eligible and allowed; or the reason not.
fn check_owner(
    owned: &OwnedIps,
    iface: &Interface,
    ip: IpAddr,
    eligible: bool,
) -> Result<(), DropReason> {
    let Some(allowed) = owned.get(&ip) else {
        return Err(DropReason::NotOwned);
    };
    if !eligible {
        return Err(DropReason::InterfaceNotEligible);
    }
    if !allowed.allows(&iface.name) {
        return Err(DropReason::InterfaceNotAllowed);
    }
    Ok(())
}

fn respond_arp(owned: &OwnedIps, iface: &Interface, frame: &[u8]) -> Decision {
    let f = match ArpFrame::decode(frame) {
        Ok(f) => f,
        Err(DecodeError::VlanTagged(_)) => return Decision::drop(DropReason::OtherVlan, None),
        Err(_) => return Decision::drop(DropReason::Invalid, None),
    };
    if f.arp.op != ArpOp::Request {
        return Decision::drop(DropReason::NotRequest, None);
    }
    if !(f.eth_dst.is_broadcast() || f.eth_dst == iface.mac) {
        return Decision::drop(DropReason::WrongDestination, None);
    }
    // A reply to a group address would be a broadcast storm in the making.
    if !f.arp.sender_mac.is_unicast() {
        return Decision::drop(DropReason::Invalid, None);
    }
    let ip = IpAddr::V4(f.arp.target_ip);
    if let Err(reason) = check_owner(owned, iface, ip, iface.arp) {
        return Decision::drop(reason, Some(ip));
    }
    Decision::Reply {
        ip,
        frame: ArpFrame::reply_to(&f.arp, iface.mac).encode(),
    }
}

fn respond_ndp(owned: &OwnedIps, iface: &Interface, frame: &[u8]) -> Decision {
    let rx = match ReceivedNs::decode(frame) {
        Ok(rx) => rx,
        Err(NsInvalid::Decode(DecodeError::NextHeader(_) | DecodeError::Icmpv6Type(_))) => {
            return Decision::drop(DropReason::NotRequest, None);
        }
        Err(NsInvalid::Decode(DecodeError::VlanTagged(_))) => {
            return Decision::drop(DropReason::OtherVlan, None);
        }
        Err(_) => return Decision::drop(DropReason::Invalid, None),
    };
    let target = rx.ns.target;
    let ip = IpAddr::V6(target);
    // Where the answer would go must be a plausible unicast host.
    if !rx.is_dad()
        && (rx.ip.src.is_multicast() || !rx.ns.source_lla.unwrap_or(rx.eth.src).is_unicast())
    {
        return Decision::drop(DropReason::Invalid, Some(ip));
    }
    // Destination: unicast to our MAC, or the multicast MAC of the IPv6
    // destination, which if multicast must be the target's solicited-node
    // group (a DAD probe always is, 7.1.1 checked that).
    if rx.ip.dst.is_multicast() {
        if rx.eth.dst != ipv6_multicast_mac(rx.ip.dst)
            || rx.ip.dst != solicited_node_multicast(target)
        {
            return Decision::drop(DropReason::WrongDestination, Some(ip));
        }
    } else if rx.eth.dst != iface.mac {
        return Decision::drop(DropReason::WrongDestination, Some(ip));
    }
    if let Err(reason) = check_owner(owned, iface, ip, iface.ndp) {
        return Decision::drop(reason, Some(ip));
    }
    Decision::Reply {
        ip,
        frame: neighbor_advertisement(iface, &rx),
    }
}

fn neighbor_advertisement(iface: &Interface, rx: &ReceivedNs) -> Vec<u8> {
    let target = rx.ns.target;
    let (solicited, ip_dst, eth_dst): (bool, Ipv6Addr, MacAddr) = if rx.is_dad() {
        (false, ALL_NODES, ipv6_multicast_mac(ALL_NODES))
    } else {
        (true, rx.ip.src, rx.ns.source_lla.unwrap_or(rx.eth.src))
    };
    NeighborAdvertisement {
        router: false,
        solicited,
        override_flag: true,
        target,
        target_lla: Some(iface.mac),
    }
    .encode_frame(eth_dst, iface.mac, target, ip_dst)
}

/// The unsolicited NA announcing `target` on `iface`: from `target` to
/// ff02::1, Override set, Solicited clear, target link-layer option.
pub fn unsolicited_na(iface: &Interface, target: Ipv6Addr) -> Vec<u8> {
    NeighborAdvertisement {
        router: false,
        solicited: false,
        override_flag: true,
        target,
        target_lla: Some(iface.mac),
    }
    .encode_frame(ipv6_multicast_mac(ALL_NODES), iface.mac, target, ALL_NODES)
}
