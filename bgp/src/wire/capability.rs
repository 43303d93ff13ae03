//! Capabilities (RFC 5492) and their negotiation.

use bytes::{BufMut, Bytes, BytesMut};

use super::context::{
    AddPath, DecodeContext, EncodeContext, MAX_EXTENDED_MESSAGE_LEN, MAX_MESSAGE_LEN,
};
use super::encode::EncodeError;
use super::notification::Notification;
use super::reader::Reader;
use super::types::{Afi, Family, Safi};

/// Capability codes (IANA "Capability Codes").
pub mod capability_code {
    pub const MULTIPROTOCOL: u8 = 1;
    pub const ROUTE_REFRESH: u8 = 2;
    pub const EXTENDED_NEXT_HOP: u8 = 5;
    pub const EXTENDED_MESSAGE: u8 = 6;
    pub const GRACEFUL_RESTART: u8 = 64;
    pub const FOUR_OCTET_AS: u8 = 65;
    pub const ADD_PATH: u8 = 69;
    pub const ENHANCED_ROUTE_REFRESH: u8 = 70;
    /// The pre-standard route refresh code some routers still send.
    pub const ROUTE_REFRESH_OLD: u8 = 128;
}

/// AS_TRANS (RFC 6793): sent in 2-octet fields in place of a larger AS.
pub const AS_TRANS: u16 = 23456;

/// One capability of an OPEN message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capability {
    /// 1: multiprotocol extensions for one AFI/SAFI (RFC 4760).
    Multiprotocol(Family),
    /// 2: route refresh (RFC 2918).
    RouteRefresh,
    /// 128: pre-standard route refresh.
    RouteRefreshOld,
    /// 70: enhanced route refresh (RFC 7313).
    EnhancedRouteRefresh,
    /// 65: 4-octet AS numbers, with our AS (RFC 6793).
    FourOctetAs(u32),
    /// 64: graceful restart (RFC 4724, RFC 8538).
    GracefulRestart(GracefulRestart),
    /// 6: extended messages (RFC 8654).
    ExtendedMessage,
    /// 5: extended next hop encoding (RFC 8950).
    ExtendedNextHop(Vec<ExtendedNextHop>),
    /// Anything else, kept so that state can show it.
    Unknown(UnknownCapability),
}

/// A capability this codec does not interpret.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UnknownCapability {
    pub code: u8,
    pub value: Bytes,
}

/// One tuple of the extended next hop capability (RFC 8950): NLRI of
/// `nlri_afi`/`nlri_safi` may carry a next hop of `next_hop_afi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExtendedNextHop {
    pub nlri_afi: Afi,
    /// Two octets on the wire.
    pub nlri_safi: u16,
    pub next_hop_afi: Afi,
}

impl ExtendedNextHop {
    pub fn new(family: Family, next_hop_afi: Afi) -> Self {
        Self {
            nlri_afi: family.afi,
            nlri_safi: u16::from(family.safi.0),
            next_hop_afi,
        }
    }

    /// The NLRI family, when its SAFI fits the one-octet SAFI space.
    pub fn family(&self) -> Option<Family> {
        u8::try_from(self.nlri_safi)
            .ok()
            .map(|safi| Family::new(self.nlri_afi, Safi(safi)))
    }
}

/// The graceful restart capability (RFC 4724), with the N bit of RFC 8538.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GracefulRestart {
    /// The four Restart Flags bits (the high nibble of the first octet),
    /// as a value 0..=15: see [`GracefulRestart::RESTART_STATE`] and
    /// [`GracefulRestart::NOTIFICATION`].
    pub flags: u8,
    /// Restart Time in seconds, 0..=4095.
    pub restart_time: u16,
    pub families: Vec<GracefulRestartFamily>,
}

impl GracefulRestart {
    /// R: the sender has restarted.
    pub const RESTART_STATE: u8 = 0x8;
    /// N: the sender supports graceful restart on NOTIFICATION (RFC 8538).
    pub const NOTIFICATION: u8 = 0x4;

    pub fn restart_state(&self) -> bool {
        self.flags & Self::RESTART_STATE != 0
    }

    pub fn notification(&self) -> bool {
        self.flags & Self::NOTIFICATION != 0
    }
}

/// One address family of the graceful restart capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GracefulRestartFamily {
    pub family: Family,
    /// Flags for Address Family: see [`GracefulRestartFamily::FORWARDING_STATE`].
    pub flags: u8,
}

impl GracefulRestartFamily {
    /// F: forwarding state was preserved across the restart.
    pub const FORWARDING_STATE: u8 = 0x80;

    pub fn forwarding_state(&self) -> bool {
        self.flags & Self::FORWARDING_STATE != 0
    }
}

impl Capability {
    pub fn code(&self) -> u8 {
        use capability_code::*;
        match self {
            Capability::Multiprotocol(_) => MULTIPROTOCOL,
            Capability::RouteRefresh => ROUTE_REFRESH,
            Capability::RouteRefreshOld => ROUTE_REFRESH_OLD,
            Capability::EnhancedRouteRefresh => ENHANCED_ROUTE_REFRESH,
            Capability::FourOctetAs(_) => FOUR_OCTET_AS,
            Capability::GracefulRestart(_) => GRACEFUL_RESTART,
            Capability::ExtendedMessage => EXTENDED_MESSAGE,
            Capability::ExtendedNextHop(_) => EXTENDED_NEXT_HOP,
            Capability::Unknown(u) => u.code,
        }
    }

    /// Decodes one capability value. A known capability with a malformed
    /// value is an OPEN Message Error (unspecific): RFC 5492 names no
    /// subcode for it.
    pub(crate) fn decode(code: u8, value: Bytes) -> Result<Capability, Notification> {
        use capability_code::*;
        let malformed = || Notification::OpenUnspecific;
        let mut r = Reader::new(value.clone());
        let cap = match code {
            MULTIPROTOCOL => {
                let [a0, a1, _reserved, safi] = r.array::<4>().ok_or_else(malformed)?;
                Capability::Multiprotocol(Family::new(
                    Afi(u16::from_be_bytes([a0, a1])),
                    Safi(safi),
                ))
            }
            ROUTE_REFRESH => Capability::RouteRefresh,
            ROUTE_REFRESH_OLD => Capability::RouteRefreshOld,
            ENHANCED_ROUTE_REFRESH => Capability::EnhancedRouteRefresh,
            EXTENDED_MESSAGE => Capability::ExtendedMessage,
            FOUR_OCTET_AS => {
                let asn = r.u32().ok_or_else(malformed)?;
                if asn == 0 {
                    // RFC 7607: AS 0 in OPEN is a Bad Peer AS.
                    return Err(Notification::BadPeerAs);
                }
                Capability::FourOctetAs(asn)
            }
            GRACEFUL_RESTART => {
                let word = r.u16().ok_or_else(malformed)?;
                if !r.remaining().is_multiple_of(4) {
                    return Err(malformed());
                }
                let mut families = Vec::new();
                while let Some([a0, a1, safi, flags]) = r.array::<4>() {
                    families.push(GracefulRestartFamily {
                        family: Family::new(Afi(u16::from_be_bytes([a0, a1])), Safi(safi)),
                        flags,
                    });
                }
                Capability::GracefulRestart(GracefulRestart {
                    flags: (word >> 12) as u8,
                    restart_time: word & 0x0fff,
                    families,
                })
            }
            EXTENDED_NEXT_HOP => {
                if !r.remaining().is_multiple_of(6) {
                    return Err(malformed());
                }
                let mut tuples = Vec::new();
                while let Some([a0, a1, s0, s1, n0, n1]) = r.array::<6>() {
                    tuples.push(ExtendedNextHop {
                        nlri_afi: Afi(u16::from_be_bytes([a0, a1])),
                        nlri_safi: u16::from_be_bytes([s0, s1]),
                        next_hop_afi: Afi(u16::from_be_bytes([n0, n1])),
                    });
                }
                Capability::ExtendedNextHop(tuples)
            }
            _ => {
                return Ok(Capability::Unknown(UnknownCapability { code, value }));
            }
        };
        if !r.is_empty() {
            return Err(malformed());
        }
        Ok(cap)
    }

    /// Writes code, length and value.
    pub(crate) fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        let start = out.len();
        out.put_u8(self.code());
        out.put_u8(0);
        match self {
            Capability::Multiprotocol(f) => {
                out.put_u16(f.afi.0);
                out.put_u8(0);
                out.put_u8(f.safi.0);
            }
            Capability::RouteRefresh
            | Capability::RouteRefreshOld
            | Capability::EnhancedRouteRefresh
            | Capability::ExtendedMessage => {}
            Capability::FourOctetAs(asn) => out.put_u32(*asn),
            Capability::GracefulRestart(gr) => {
                out.put_u16((u16::from(gr.flags & 0x0f) << 12) | (gr.restart_time & 0x0fff));
                for f in &gr.families {
                    out.put_u16(f.family.afi.0);
                    out.put_u8(f.family.safi.0);
                    out.put_u8(f.flags);
                }
            }
            Capability::ExtendedNextHop(tuples) => {
                for t in tuples {
                    out.put_u16(t.nlri_afi.0);
                    out.put_u16(t.nlri_safi);
                    out.put_u16(t.next_hop_afi.0);
                }
            }
            Capability::Unknown(u) => out.put_slice(&u.value),
        }
        let length = out.len() - start - 2;
        match u8::try_from(length) {
            Ok(l) => {
                out[start + 1] = l;
                Ok(())
            }
            Err(_) => {
                out.truncate(start);
                Err(EncodeError::CapabilityTooLong {
                    code: self.code(),
                    length,
                })
            }
        }
    }
}

/// What one side advertised, summarised. Build it from a received OPEN
/// with [`Capabilities::from_capabilities`], or fill it in and turn it into
/// a list with [`Capabilities::to_capabilities`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// Multiprotocol families, in advertised order.
    pub multiprotocol: Vec<Family>,
    pub route_refresh: bool,
    pub route_refresh_old: bool,
    pub enhanced_route_refresh: bool,
    pub four_octet_as: Option<u32>,
    pub graceful_restart: Option<GracefulRestart>,
    pub extended_message: bool,
    pub extended_next_hop: Vec<ExtendedNextHop>,
    pub unknown: Vec<UnknownCapability>,
}

impl Capabilities {
    /// Summarises a list of capabilities. For a capability sent more than
    /// once, the first instance counts (multiprotocol and extended next hop
    /// accumulate).
    pub fn from_capabilities<'a>(caps: impl IntoIterator<Item = &'a Capability>) -> Self {
        let mut s = Capabilities::default();
        for cap in caps {
            match cap {
                Capability::Multiprotocol(f) => {
                    if !s.multiprotocol.contains(f) {
                        s.multiprotocol.push(*f);
                    }
                }
                Capability::RouteRefresh => s.route_refresh = true,
                Capability::RouteRefreshOld => s.route_refresh_old = true,
                Capability::EnhancedRouteRefresh => s.enhanced_route_refresh = true,
                Capability::FourOctetAs(asn) => {
                    s.four_octet_as.get_or_insert(*asn);
                }
                Capability::GracefulRestart(gr) => {
                    s.graceful_restart.get_or_insert_with(|| gr.clone());
                }
                Capability::ExtendedMessage => s.extended_message = true,
                Capability::ExtendedNextHop(tuples) => {
                    for t in tuples {
                        if !s.extended_next_hop.contains(t) {
                            s.extended_next_hop.push(*t);
                        }
                    }
                }
                Capability::Unknown(u) => s.unknown.push(u.clone()),
            }
        }
        s
    }

    /// The capability list to advertise, in a fixed order.
    pub fn to_capabilities(&self) -> Vec<Capability> {
        let mut caps: Vec<Capability> = self
            .multiprotocol
            .iter()
            .copied()
            .map(Capability::Multiprotocol)
            .collect();
        if self.route_refresh {
            caps.push(Capability::RouteRefresh);
        }
        if self.route_refresh_old {
            caps.push(Capability::RouteRefreshOld);
        }
        if self.enhanced_route_refresh {
            caps.push(Capability::EnhancedRouteRefresh);
        }
        if let Some(asn) = self.four_octet_as {
            caps.push(Capability::FourOctetAs(asn));
        }
        if let Some(gr) = &self.graceful_restart {
            caps.push(Capability::GracefulRestart(gr.clone()));
        }
        if self.extended_message {
            caps.push(Capability::ExtendedMessage);
        }
        if !self.extended_next_hop.is_empty() {
            caps.push(Capability::ExtendedNextHop(self.extended_next_hop.clone()));
        }
        caps.extend(self.unknown.iter().cloned().map(Capability::Unknown));
        caps
    }

    /// The families this side can exchange: the multiprotocol ones, or IPv4
    /// unicast alone when none was advertised (RFC 4760 section 8).
    pub fn families(&self) -> Vec<Family> {
        if self.multiprotocol.is_empty() {
            vec![Family::IPV4_UNICAST]
        } else {
            self.multiprotocol.clone()
        }
    }

    /// Route refresh in either encoding.
    pub fn any_route_refresh(&self) -> bool {
        self.route_refresh || self.route_refresh_old
    }
}

/// Graceful restart as both sides advertised it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NegotiatedGracefulRestart {
    /// How long the peer asks us to keep its routes when it restarts.
    pub peer_restart_time: u16,
    /// The peer says it has just restarted (R bit).
    pub peer_restart_state: bool,
    /// Both sides set the N bit: NOTIFICATIONs other than Hard Reset keep
    /// the routes too (RFC 8538).
    pub notification: bool,
    /// The families the peer preserves, with its forwarding-state flags.
    pub peer_families: Vec<GracefulRestartFamily>,
}

/// The outcome of capability negotiation, and the codec contexts it implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// Families both sides support, in our order.
    pub families: Vec<Family>,
    /// Families we offered that the peer did not: nothing of these is sent.
    pub local_only_families: Vec<Family>,
    pub four_octet_as: bool,
    pub route_refresh: bool,
    pub enhanced_route_refresh: bool,
    pub extended_message: bool,
    pub graceful_restart: Option<NegotiatedGracefulRestart>,
    /// Extended next hop tuples both sides advertised.
    pub extended_next_hop: Vec<ExtendedNextHop>,
    /// The peer's capabilities we do not interpret.
    pub peer_unknown: Vec<UnknownCapability>,
}

impl Negotiated {
    pub fn max_message_len(&self) -> usize {
        if self.extended_message {
            MAX_EXTENDED_MESSAGE_LEN
        } else {
            MAX_MESSAGE_LEN
        }
    }

    pub fn decode_context(&self, ibgp: bool) -> DecodeContext {
        DecodeContext {
            four_octet_as: self.four_octet_as,
            extended_message: self.extended_message,
            ibgp,
            add_path: AddPath::None,
        }
    }

    pub fn encode_context(&self) -> EncodeContext {
        EncodeContext {
            four_octet_as: self.four_octet_as,
            extended_message: self.extended_message,
            add_path: AddPath::None,
        }
    }

    pub fn has_family(&self, family: Family) -> bool {
        self.families.contains(&family)
    }

    /// Whether NLRI of `family` may carry a next hop of `next_hop_afi`
    /// (always for the family's own AFI; otherwise RFC 8950 must have been
    /// negotiated for that tuple).
    pub fn next_hop_allowed(&self, family: Family, next_hop_afi: Afi) -> bool {
        family.afi == next_hop_afi
            || self
                .extended_next_hop
                .contains(&ExtendedNextHop::new(family, next_hop_afi))
    }
}

/// Pure capability negotiation: what both sides support.
pub fn negotiate(local: &Capabilities, remote: &Capabilities) -> Negotiated {
    let remote_families = remote.families();
    let (families, local_only_families) = local
        .families()
        .into_iter()
        .partition(|f| remote_families.contains(f));
    let graceful_restart = match (&local.graceful_restart, &remote.graceful_restart) {
        (Some(l), Some(r)) => Some(NegotiatedGracefulRestart {
            peer_restart_time: r.restart_time,
            peer_restart_state: r.restart_state(),
            notification: l.notification() && r.notification(),
            peer_families: r.families.clone(),
        }),
        _ => None,
    };
    Negotiated {
        families,
        local_only_families,
        four_octet_as: local.four_octet_as.is_some() && remote.four_octet_as.is_some(),
        route_refresh: local.any_route_refresh() && remote.any_route_refresh(),
        enhanced_route_refresh: local.enhanced_route_refresh && remote.enhanced_route_refresh,
        extended_message: local.extended_message && remote.extended_message,
        graceful_restart,
        extended_next_hop: local
            .extended_next_hop
            .iter()
            .filter(|t| remote.extended_next_hop.contains(t))
            .copied()
            .collect(),
        peer_unknown: remote.unknown.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(cap: Capability) {
        let mut out = BytesMut::new();
        cap.encode(&mut out).unwrap();
        assert_eq!(usize::from(out[1]), out.len() - 2);
        let back = Capability::decode(out[0], Bytes::copy_from_slice(&out[2..])).unwrap();
        assert_eq!(back, cap);
    }

    #[test]
    fn every_capability_round_trips() {
        roundtrip(Capability::Multiprotocol(Family::IPV6_UNICAST));
        roundtrip(Capability::RouteRefresh);
        roundtrip(Capability::RouteRefreshOld);
        roundtrip(Capability::EnhancedRouteRefresh);
        roundtrip(Capability::FourOctetAs(4_200_000_000));
        roundtrip(Capability::ExtendedMessage);
        roundtrip(Capability::ExtendedNextHop(vec![ExtendedNextHop::new(
            Family::IPV4_UNICAST,
            Afi::IPV6,
        )]));
        roundtrip(Capability::GracefulRestart(GracefulRestart {
            flags: GracefulRestart::RESTART_STATE | GracefulRestart::NOTIFICATION,
            restart_time: 4095,
            families: vec![
                GracefulRestartFamily {
                    family: Family::IPV4_UNICAST,
                    flags: GracefulRestartFamily::FORWARDING_STATE,
                },
                GracefulRestartFamily {
                    family: Family::IPV6_UNICAST,
                    flags: 0,
                },
            ],
        }));
        roundtrip(Capability::Unknown(UnknownCapability {
            code: 73,
            value: Bytes::from_static(b"\x04node"),
        }));
    }

    #[test]
    fn graceful_restart_bits() {
        let cap = Capability::decode(64, Bytes::from_static(&[0xc0, 0x78, 0, 1, 1, 0x80])).unwrap();
        let Capability::GracefulRestart(gr) = cap else {
            panic!("not GR")
        };
        assert!(gr.restart_state());
        assert!(gr.notification());
        assert_eq!(gr.restart_time, 120);
        assert!(gr.families[0].forwarding_state());
        assert_eq!(gr.families[0].family, Family::IPV4_UNICAST);
    }

    #[test]
    fn malformed_known_capabilities_are_open_errors() {
        for (code, value) in [
            (1u8, &[0u8, 1, 0][..]),
            (65, &[0, 0, 1][..]),
            (64, &[0, 120, 0, 1, 1][..]),
            (5, &[0, 1, 0, 1, 0][..]),
            (2, &[0][..]),
            (6, &[1][..]),
        ] {
            assert_eq!(
                Capability::decode(code, Bytes::copy_from_slice(value)),
                Err(Notification::OpenUnspecific),
                "code {code}"
            );
        }
        assert_eq!(
            Capability::decode(65, Bytes::from_static(&[0, 0, 0, 0])),
            Err(Notification::BadPeerAs)
        );
    }

    #[test]
    fn negotiation_intersects() {
        let local = Capabilities {
            multiprotocol: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
            route_refresh: true,
            four_octet_as: Some(65001),
            extended_message: true,
            graceful_restart: Some(GracefulRestart {
                flags: GracefulRestart::NOTIFICATION,
                restart_time: 120,
                families: vec![],
            }),
            extended_next_hop: vec![ExtendedNextHop::new(Family::IPV4_UNICAST, Afi::IPV6)],
            ..Default::default()
        };
        let remote = Capabilities {
            multiprotocol: vec![Family::IPV4_UNICAST],
            route_refresh_old: true,
            four_octet_as: Some(4_200_000_000),
            graceful_restart: Some(GracefulRestart {
                flags: GracefulRestart::RESTART_STATE | GracefulRestart::NOTIFICATION,
                restart_time: 90,
                families: vec![GracefulRestartFamily {
                    family: Family::IPV4_UNICAST,
                    flags: GracefulRestartFamily::FORWARDING_STATE,
                }],
            }),
            extended_next_hop: vec![ExtendedNextHop::new(Family::IPV4_UNICAST, Afi::IPV6)],
            unknown: vec![UnknownCapability {
                code: 69,
                value: Bytes::from_static(&[0, 1, 1, 1]),
            }],
            ..Default::default()
        };
        let n = negotiate(&local, &remote);
        assert_eq!(n.families, vec![Family::IPV4_UNICAST]);
        assert_eq!(n.local_only_families, vec![Family::IPV6_UNICAST]);
        assert!(n.four_octet_as);
        assert!(n.route_refresh);
        assert!(!n.enhanced_route_refresh);
        assert!(!n.extended_message);
        assert_eq!(n.max_message_len(), 4096);
        let gr = n.graceful_restart.as_ref().unwrap();
        assert_eq!(gr.peer_restart_time, 90);
        assert!(gr.peer_restart_state);
        assert!(gr.notification);
        assert!(gr.peer_families[0].forwarding_state());
        assert!(n.next_hop_allowed(Family::IPV4_UNICAST, Afi::IPV6));
        assert!(!n.next_hop_allowed(Family::IPV6_UNICAST, Afi::IPV4));
        assert_eq!(n.peer_unknown.len(), 1);
        let ctx = n.decode_context(false);
        assert!(ctx.four_octet_as && !ctx.extended_message && !ctx.ibgp);

        // No multiprotocol capability at all means IPv4 unicast only.
        let bare = negotiate(&local, &Capabilities::default());
        assert_eq!(bare.families, vec![Family::IPV4_UNICAST]);
        assert!(!bare.four_octet_as);
        assert!(bare.graceful_restart.is_none());
        assert!(bare.extended_next_hop.is_empty());
    }

    #[test]
    fn summary_round_trips_through_a_list() {
        let caps = Capabilities {
            multiprotocol: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
            route_refresh: true,
            route_refresh_old: true,
            enhanced_route_refresh: true,
            four_octet_as: Some(65001),
            graceful_restart: Some(GracefulRestart::default()),
            extended_message: true,
            extended_next_hop: vec![ExtendedNextHop::new(Family::IPV4_UNICAST, Afi::IPV6)],
            unknown: vec![UnknownCapability {
                code: 200,
                value: Bytes::new(),
            }],
        };
        assert_eq!(
            Capabilities::from_capabilities(&caps.to_capabilities()),
            caps
        );
    }
}
