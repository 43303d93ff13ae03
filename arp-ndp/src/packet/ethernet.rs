//! Ethernet II header and MAC addresses.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use super::DecodeError;

/// Ethernet II header length (no 802.1Q tag).
pub const ETH_HEADER_LEN: usize = 14;
/// ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// 802.1Q customer VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// 802.1ad service VLAN tag (Q-in-Q).
pub const ETHERTYPE_QINQ: u16 = 0x88a8;
/// Pre-standard Q-in-Q tag still seen on some switches.
pub const ETHERTYPE_VLAN_9100: u16 = 0x9100;

/// Whether `ethertype` introduces a VLAN tag.
pub const fn is_vlan_ethertype(ethertype: u16) -> bool {
    matches!(
        ethertype,
        ETHERTYPE_VLAN | ETHERTYPE_QINQ | ETHERTYPE_VLAN_9100
    )
}

/// A 48-bit IEEE 802 MAC address.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// 00:00:00:00:00:00
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// The six octets.
    pub const fn octets(&self) -> [u8; 6] {
        self.0
    }

    /// ff:ff:ff:ff:ff:ff
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// Group bit set (includes broadcast).
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }

    /// Neither a group address nor all zeros: usable as a frame source.
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast() && *self != Self::ZERO
    }

    /// Reads six bytes at the start of `b` (the caller checked the length).
    pub(crate) fn from_slice(b: &[u8]) -> MacAddr {
        let mut m = [0u8; 6];
        m.copy_from_slice(&b[..6]);
        MacAddr(m)
    }
}

impl From<[u8; 6]> for MacAddr {
    fn from(b: [u8; 6]) -> Self {
        MacAddr(b)
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A MAC address string that is not six colon-separated hex octets.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid MAC address {0:?}: expected six hex octets separated by ':'")]
pub struct ParseMacError(pub String);

impl FromStr for MacAddr {
    type Err = ParseMacError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseMacError(s.to_owned());
        let mut out = [0u8; 6];
        let mut parts = s.split(':');
        for o in &mut out {
            let p = parts.next().ok_or_else(err)?;
            if p.is_empty() || p.len() > 2 {
                return Err(err());
            }
            *o = u8::from_str_radix(p, 16).map_err(|_| err())?;
        }
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(MacAddr(out))
    }
}

/// An Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetHeader {
    pub dst: MacAddr,
    pub src: MacAddr,
    pub ethertype: u16,
}

impl EthernetHeader {
    /// Splits a frame into its header and payload. A VLAN-tagged frame is
    /// returned as is (its ethertype is the tag's TPID); callers decide.
    pub fn decode(frame: &[u8]) -> Result<(EthernetHeader, &[u8]), DecodeError> {
        if frame.len() < ETH_HEADER_LEN {
            return Err(DecodeError::Truncated {
                what: "Ethernet header",
                need: ETH_HEADER_LEN,
                got: frame.len(),
            });
        }
        let h = EthernetHeader {
            dst: MacAddr::from_slice(&frame[0..6]),
            src: MacAddr::from_slice(&frame[6..12]),
            ethertype: u16::from_be_bytes([frame[12], frame[13]]),
        };
        Ok((h, &frame[ETH_HEADER_LEN..]))
    }

    /// Like [`decode`](Self::decode) but requires `ethertype`, and reports
    /// VLAN tags as [`DecodeError::VlanTagged`].
    pub fn decode_expect(
        frame: &[u8],
        ethertype: u16,
    ) -> Result<(EthernetHeader, &[u8]), DecodeError> {
        let (h, rest) = Self::decode(frame)?;
        if is_vlan_ethertype(h.ethertype) {
            return Err(DecodeError::VlanTagged(h.ethertype));
        }
        if h.ethertype != ethertype {
            return Err(DecodeError::Ethertype(h.ethertype));
        }
        Ok((h, rest))
    }

    /// Appends the 14 header bytes.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.dst.0);
        out.extend_from_slice(&self.src.0);
        out.extend_from_slice(&self.ethertype.to_be_bytes());
    }
}
