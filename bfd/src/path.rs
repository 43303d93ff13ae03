//! Paths and the encapsulation rules of RFC 5881 (single hop) and RFC 5883
//! (multihop) that can be checked without a socket: ports, source port
//! range, TTL / hop limit.

use std::fmt;
use std::net::IpAddr;
use std::ops::RangeInclusive;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Destination UDP port of single-hop control packets (RFC 5881 §4).
pub const CONTROL_PORT_SINGLE_HOP: u16 = 3784;
/// Destination UDP port of multihop control packets (RFC 5883 §5).
pub const CONTROL_PORT_MULTI_HOP: u16 = 4784;
/// Destination UDP port of echo packets (RFC 5881 §4).
pub const ECHO_PORT: u16 = 3785;
/// First source port a sender may use (RFC 5881 §4, RFC 5883 §5).
pub const SOURCE_PORT_MIN: u16 = 49152;
/// Last source port a sender may use.
pub const SOURCE_PORT_MAX: u16 = 65535;
/// The source ports a sender may use.
pub const SOURCE_PORTS: RangeInclusive<u16> = SOURCE_PORT_MIN..=SOURCE_PORT_MAX;
/// TTL / hop limit of every packet we send, and the only one accepted on a
/// single-hop session (RFC 5881 §5, GTSM).
pub const SINGLE_HOP_TTL: u8 = 255;
/// Default smallest TTL accepted on a multihop session (FRR's and MetalLB's).
pub const DEFAULT_MULTI_HOP_MIN_TTL: u8 = 254;

/// Whether a sender's source port is in the range the RFCs require. We do
/// not refuse received packets outside it (neither does FRR); our sockets
/// use it when sending.
pub fn is_valid_source_port(port: u16) -> bool {
    SOURCE_PORTS.contains(&port)
}

/// Single hop (RFC 5881) or multihop (RFC 5883).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Hop {
    SingleHop,
    MultiHop,
}

impl Hop {
    /// Destination port of control packets.
    pub const fn control_port(self) -> u16 {
        match self {
            Hop::SingleHop => CONTROL_PORT_SINGLE_HOP,
            Hop::MultiHop => CONTROL_PORT_MULTI_HOP,
        }
    }

    /// The path type a packet received on `port` belongs to.
    pub const fn from_control_port(port: u16) -> Option<Hop> {
        match port {
            CONTROL_PORT_SINGLE_HOP => Some(Hop::SingleHop),
            CONTROL_PORT_MULTI_HOP => Some(Hop::MultiHop),
            _ => None,
        }
    }
}

/// A received TTL / hop limit that the path's rules refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum TtlError {
    #[error("single-hop packet with TTL {0}, 255 required")]
    SingleHop(u8),
    #[error("multihop packet with TTL {ttl}, at least {minimum} required")]
    BelowMinimum { ttl: u8, minimum: u8 },
}

/// Checks a received TTL / hop limit: exactly 255 on a single-hop session
/// (RFC 5881 §5); at least `minimum_ttl` on a multihop one (RFC 5883 §2
/// leaves the value to configuration; `BFDProfile.minimumTtl`).
pub fn check_ttl(hop: Hop, ttl: u8, minimum_ttl: u8) -> Result<(), TtlError> {
    match hop {
        Hop::SingleHop if ttl != SINGLE_HOP_TTL => Err(TtlError::SingleHop(ttl)),
        Hop::MultiHop if ttl < minimum_ttl => Err(TtlError::BelowMinimum {
            ttl,
            minimum: minimum_ttl,
        }),
        _ => Ok(()),
    }
}

/// What identifies a path, and so a session, besides its discriminators.
///
/// Single hop: the interface towards the peer and both addresses. Multihop:
/// both addresses, and the interface only when the session is bound to one
/// (e.g. a VRF device); `None` matches packets from any interface.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SessionKey {
    pub interface: Option<String>,
    pub local: IpAddr,
    pub remote: IpAddr,
    pub hop: Hop,
}

impl SessionKey {
    /// A single-hop key.
    pub fn single_hop(interface: impl Into<String>, local: IpAddr, remote: IpAddr) -> SessionKey {
        SessionKey {
            interface: Some(interface.into()),
            local,
            remote,
            hop: Hop::SingleHop,
        }
    }

    /// A multihop key not bound to an interface.
    pub fn multi_hop(local: IpAddr, remote: IpAddr) -> SessionKey {
        SessionKey {
            interface: None,
            local,
            remote,
            hop: Hop::MultiHop,
        }
    }

    /// Whether the echo function may run on this path: single hop, IPv4.
    pub fn echo_capable(&self) -> bool {
        self.hop == Hop::SingleHop && self.local.is_ipv4() && self.remote.is_ipv4()
    }
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hop = match self.hop {
            Hop::SingleHop => "single-hop",
            Hop::MultiHop => "multihop",
        };
        write!(f, "{hop} {} -> {}", self.local, self.remote)?;
        if let Some(interface) = &self.interface {
            write!(f, " dev {interface}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports() {
        assert_eq!(Hop::SingleHop.control_port(), 3784);
        assert_eq!(Hop::MultiHop.control_port(), 4784);
        assert_eq!(ECHO_PORT, 3785);
        assert_eq!(Hop::from_control_port(3784), Some(Hop::SingleHop));
        assert_eq!(Hop::from_control_port(4784), Some(Hop::MultiHop));
        assert_eq!(Hop::from_control_port(3785), None);
        assert!(!is_valid_source_port(49151));
        assert!(is_valid_source_port(49152));
        assert!(is_valid_source_port(65535));
        assert!(!is_valid_source_port(3784));
    }

    #[test]
    fn single_hop_requires_ttl_255() {
        assert_eq!(check_ttl(Hop::SingleHop, 255, 1), Ok(()));
        assert_eq!(
            check_ttl(Hop::SingleHop, 254, 1),
            Err(TtlError::SingleHop(254))
        );
        assert_eq!(check_ttl(Hop::SingleHop, 1, 1), Err(TtlError::SingleHop(1)));
    }

    #[test]
    fn multihop_requires_minimum_ttl() {
        assert_eq!(check_ttl(Hop::MultiHop, 255, 254), Ok(()));
        assert_eq!(check_ttl(Hop::MultiHop, 254, 254), Ok(()));
        assert_eq!(
            check_ttl(Hop::MultiHop, 253, 254),
            Err(TtlError::BelowMinimum {
                ttl: 253,
                minimum: 254
            })
        );
        assert_eq!(check_ttl(Hop::MultiHop, 250, 250), Ok(()));
    }

    #[test]
    fn echo_only_on_single_hop_ipv4() {
        let v4 = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(SessionKey::single_hop("eth0", v4("10.0.0.1"), v4("10.0.0.2")).echo_capable());
        assert!(!SessionKey::multi_hop(v4("10.0.0.1"), v4("10.0.1.2")).echo_capable());
        assert!(!SessionKey::single_hop("eth0", v4("fd00::1"), v4("fd00::2")).echo_capable());
        assert_eq!(
            SessionKey::single_hop("eth0", v4("10.0.0.1"), v4("10.0.0.2")).to_string(),
            "single-hop 10.0.0.1 -> 10.0.0.2 dev eth0"
        );
    }
}
