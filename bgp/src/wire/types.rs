//! Address families, prefixes and next hops as they appear on the wire.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use bytes::{BufMut, BytesMut};

/// Address Family Identifier (IANA; RFC 4760).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Afi(pub u16);

impl Afi {
    pub const IPV4: Afi = Afi(1);
    pub const IPV6: Afi = Afi(2);
}

/// Subsequent Address Family Identifier (IANA; RFC 4760).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Safi(pub u8);

impl Safi {
    pub const UNICAST: Safi = Safi(1);
    pub const MULTICAST: Safi = Safi(2);
}

/// An AFI/SAFI pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Family {
    pub afi: Afi,
    pub safi: Safi,
}

impl Family {
    pub const IPV4_UNICAST: Family = Family::new(Afi::IPV4, Safi::UNICAST);
    pub const IPV6_UNICAST: Family = Family::new(Afi::IPV6, Safi::UNICAST);

    pub const fn new(afi: Afi, safi: Safi) -> Self {
        Self { afi, safi }
    }

    /// Whether this codec decodes the NLRI of this family into [`Prefix`]es
    /// (IPv4 and IPv6, unicast and multicast: RFC 4760 plain prefixes).
    pub fn has_prefix_nlri(&self) -> bool {
        matches!(self.afi, Afi::IPV4 | Afi::IPV6)
            && matches!(self.safi, Safi::UNICAST | Safi::MULTICAST)
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let afi = match self.afi {
            Afi::IPV4 => "ipv4",
            Afi::IPV6 => "ipv6",
            Afi(other) => return write!(f, "afi{other}/safi{}", self.safi.0),
        };
        match self.safi {
            Safi::UNICAST => write!(f, "{afi}-unicast"),
            Safi::MULTICAST => write!(f, "{afi}-multicast"),
            Safi(other) => write!(f, "{afi}/safi{other}"),
        }
    }
}

/// Why a prefix could not be built or parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    #[error("prefix length {len} is longer than {max}")]
    TooLong { len: u8, max: u8 },
    #[error("invalid prefix {0:?}: expected ADDRESS/LENGTH")]
    Syntax(String),
}

/// An IPv4 or IPv6 prefix. Host bits beyond the length are always zero
/// (RFC 4271: trailing bits are irrelevant; they are cleared on decode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

impl Prefix {
    /// A prefix of `len` bits of `addr`; host bits are cleared.
    pub fn new(addr: IpAddr, len: u8) -> Result<Self, PrefixError> {
        let max = max_len(&addr);
        if len > max {
            return Err(PrefixError::TooLong { len, max });
        }
        Ok(Self {
            addr: mask(addr, len),
            len,
        })
    }

    /// The host route of `addr` (/32 or /128).
    pub fn host(addr: IpAddr) -> Self {
        Self {
            len: max_len(&addr),
            addr,
        }
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    pub fn afi(&self) -> Afi {
        match self.addr {
            IpAddr::V4(_) => Afi::IPV4,
            IpAddr::V6(_) => Afi::IPV6,
        }
    }

    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }

    /// Bytes this prefix takes in an NLRI field: a length octet and the
    /// significant octets.
    pub fn wire_len(&self) -> usize {
        1 + octets_for(self.len)
    }

    pub(crate) fn encode(&self, out: &mut BytesMut) {
        out.put_u8(self.len);
        let n = octets_for(self.len);
        match self.addr {
            IpAddr::V4(a) => out.put_slice(&a.octets()[..n]),
            IpAddr::V6(a) => out.put_slice(&a.octets()[..n]),
        }
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for Prefix {
    type Err = PrefixError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let syntax = || PrefixError::Syntax(s.to_owned());
        let (addr, len) = s.split_once('/').ok_or_else(syntax)?;
        let addr: IpAddr = addr.parse().map_err(|_| syntax())?;
        let len: u8 = len.parse().map_err(|_| syntax())?;
        Prefix::new(addr, len)
    }
}

fn max_len(addr: &IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

fn octets_for(len: u8) -> usize {
    usize::from(len).div_ceil(8)
}

fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(bits & m))
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let m = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(bits & m))
        }
    }
}

/// A syntax error in an NLRI or withdrawn-routes field (RFC 7606 section 5.3).
#[derive(Debug)]
pub(crate) struct NlriError;

/// Decodes a run of `length, prefix` pairs of the given AFI (1 or 2),
/// appending to `out`. Stops at the first syntax error (a length beyond the
/// address size, or a prefix overrunning the field).
pub(crate) fn decode_prefixes(
    buf: &[u8],
    afi: Afi,
    out: &mut Vec<Prefix>,
) -> Result<(), NlriError> {
    let max = if afi == Afi::IPV6 { 128 } else { 32 };
    let mut rest = buf;
    while let Some((&len, tail)) = rest.split_first() {
        if len > max {
            return Err(NlriError);
        }
        let n = octets_for(len);
        let Some(significant) = tail.get(..n) else {
            return Err(NlriError);
        };
        let mut octets = [0u8; 16];
        octets[..n].copy_from_slice(significant);
        let addr = if afi == Afi::IPV6 {
            IpAddr::V6(Ipv6Addr::from(octets))
        } else {
            IpAddr::V4(Ipv4Addr::new(octets[0], octets[1], octets[2], octets[3]))
        };
        out.push(Prefix {
            addr: mask(addr, len),
            len,
        });
        rest = &tail[n..];
    }
    Ok(())
}

/// A next hop carried in MP_REACH_NLRI: IPv4, or IPv6 with an optional
/// link-local address (RFC 4760 / RFC 2545; a 32-byte next hop). IPv4 NLRI
/// may carry an IPv6 next hop when RFC 8950 extended next hop is negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NextHop {
    V4(Ipv4Addr),
    V6 {
        global: Ipv6Addr,
        link_local: Option<Ipv6Addr>,
    },
}

impl NextHop {
    pub fn wire_len(&self) -> usize {
        match self {
            NextHop::V4(_) => 4,
            NextHop::V6 {
                link_local: None, ..
            } => 16,
            NextHop::V6 {
                link_local: Some(_),
                ..
            } => 32,
        }
    }

    pub(crate) fn encode(&self, out: &mut BytesMut) {
        match self {
            NextHop::V4(a) => out.put_slice(&a.octets()),
            NextHop::V6 { global, link_local } => {
                out.put_slice(&global.octets());
                if let Some(ll) = link_local {
                    out.put_slice(&ll.octets());
                }
            }
        }
    }

    /// Decodes a next hop by its length: 4, 16 or 32 bytes.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let v6 =
            |b: &[u8]| -> Option<Ipv6Addr> { <[u8; 16]>::try_from(b).ok().map(Ipv6Addr::from) };
        match bytes.len() {
            4 => <[u8; 4]>::try_from(bytes)
                .ok()
                .map(|b| NextHop::V4(Ipv4Addr::from(b))),
            16 => Some(NextHop::V6 {
                global: v6(bytes)?,
                link_local: None,
            }),
            32 => Some(NextHop::V6 {
                global: v6(&bytes[..16])?,
                link_local: Some(v6(&bytes[16..])?),
            }),
            _ => None,
        }
    }
}

impl From<IpAddr> for NextHop {
    fn from(addr: IpAddr) -> Self {
        match addr {
            IpAddr::V4(a) => NextHop::V4(a),
            IpAddr::V6(a) => NextHop::V6 {
                global: a,
                link_local: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_masks_host_bits_and_rejects_long_lengths() {
        let p: Prefix = "10.1.2.3/8".parse().unwrap();
        assert_eq!(p.to_string(), "10.0.0.0/8");
        assert_eq!(p.wire_len(), 2);
        assert_eq!(
            "10.0.0.0/33".parse::<Prefix>(),
            Err(PrefixError::TooLong { len: 33, max: 32 })
        );
        assert!("2001:db8::1/129".parse::<Prefix>().is_err());
        assert!("nonsense".parse::<Prefix>().is_err());
        let zero: Prefix = "1.2.3.4/0".parse().unwrap();
        assert_eq!(zero.to_string(), "0.0.0.0/0");
        assert_eq!(zero.wire_len(), 1);
        let host = Prefix::host("2001:db8::1".parse().unwrap());
        assert_eq!(host.prefix_len(), 128);
        assert_eq!(host.wire_len(), 17);
    }

    #[test]
    fn decode_prefixes_clears_trailing_bits_and_finds_errors() {
        let mut out = Vec::new();
        decode_prefixes(&[9, 10, 0xff, 0, 32, 1, 2, 3, 4], Afi::IPV4, &mut out).unwrap();
        assert_eq!(out[0].to_string(), "10.128.0.0/9");
        assert_eq!(out[1].to_string(), "0.0.0.0/0");
        assert_eq!(out[2].to_string(), "1.2.3.4/32");
        assert!(decode_prefixes(&[33, 1, 2, 3, 4, 5], Afi::IPV4, &mut Vec::new()).is_err());
        assert!(decode_prefixes(&[24, 1, 2], Afi::IPV4, &mut Vec::new()).is_err());
        assert!(decode_prefixes(&[129], Afi::IPV6, &mut Vec::new()).is_err());
    }

    #[test]
    fn families_display() {
        assert_eq!(Family::IPV4_UNICAST.to_string(), "ipv4-unicast");
        assert_eq!(Family::IPV6_UNICAST.to_string(), "ipv6-unicast");
        assert_eq!(Family::new(Afi::IPV4, Safi(4)).to_string(), "ipv4/safi4");
        assert_eq!(Family::new(Afi(25), Safi(70)).to_string(), "afi25/safi70");
    }
}
