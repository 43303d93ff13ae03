//! Address arithmetic: one CIDR of a pool with the set of its used
//! addresses as maximal runs, so that the lowest free address is one range
//! query away, however large the CIDR and however many addresses are used.
//!
//! With avoidBuggyIPs, an IPv4 CIDR is indexed in a "rank" space that
//! leaves out every `.0` and `.255` (254 ranks per /24), so used runs merge
//! across the skipped addresses and the search stays O(log n).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::types::IpFamily;

/// `ip` as a number (IPv4 in the low 32 bits).
pub(crate) fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// The address `v` of `family`.
pub(crate) fn from_u128(family: IpFamily, v: u128) -> IpAddr {
    match family {
        // Only ever called with values taken from IPv4 CIDRs.
        IpFamily::V4 => IpAddr::V4(Ipv4Addr::from(v as u32)),
        IpFamily::V6 => IpAddr::V6(Ipv6Addr::from(v)),
    }
}

/// Whether an IPv4 address (as a number) ends in .0 or .255
/// (`ipConfusesBuggyFirmwares`).
pub(crate) fn is_buggy_v4(v: u128) -> bool {
    matches!(v & 0xff, 0 | 0xff)
}

/// Maximal runs of used ranks: start -> end (inclusive), never adjacent.
#[derive(Clone, Debug, Default)]
pub(crate) struct Runs {
    map: BTreeMap<u128, u128>,
}

impl Runs {
    /// The run containing `r`.
    fn run_of(&self, r: u128) -> Option<(u128, u128)> {
        self.map
            .range(..=r)
            .next_back()
            .filter(|(_, e)| **e >= r)
            .map(|(s, e)| (*s, *e))
    }

    pub(crate) fn insert(&mut self, r: u128) {
        if self.run_of(r).is_some() {
            return;
        }
        let mut start = r;
        let mut end = r;
        if let Some(prev) = r.checked_sub(1)
            && let Some((s, _)) = self.run_of(prev)
        {
            self.map.remove(&s);
            start = s;
        }
        if let Some(next) = r.checked_add(1)
            && let Some(e) = self.map.remove(&next)
        {
            end = e;
        }
        self.map.insert(start, end);
    }

    pub(crate) fn remove(&mut self, r: u128) {
        let Some((s, e)) = self.run_of(r) else {
            return;
        };
        self.map.remove(&s);
        if s < r {
            self.map.insert(s, r - 1);
        }
        if r < e {
            self.map.insert(r + 1, e);
        }
    }

    /// The lowest rank in `lo..=hi` not in a run.
    pub(crate) fn first_free(&self, lo: u128, hi: u128) -> Option<u128> {
        let candidate = match self.run_of(lo) {
            Some((_, e)) => e.checked_add(1)?,
            None => lo,
        };
        (candidate <= hi).then_some(candidate)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// One CIDR of a pool, with its used addresses.
#[derive(Clone, Debug)]
pub(crate) struct CidrIndex {
    pub(crate) family: IpFamily,
    /// First and last address of the CIDR.
    pub(crate) first: u128,
    pub(crate) last: u128,
    /// .0/.255 are not part of the pool (IPv4 with avoidBuggyIPs).
    pub(crate) avoid: bool,
    /// First and last usable rank, None when the CIDR has no usable address.
    ranks: Option<(u128, u128)>,
    used: Runs,
}

impl CidrIndex {
    pub(crate) fn new(net: IpNet, avoid_buggy_ips: bool) -> CidrIndex {
        let family = match net {
            IpNet::V4(_) => IpFamily::V4,
            IpNet::V6(_) => IpFamily::V6,
        };
        let first = to_u128(net.network());
        let last = to_u128(net.broadcast());
        let avoid = avoid_buggy_ips && family == IpFamily::V4;
        let ranks = if avoid {
            let lo = match first & 0xff {
                0 => first + 1,
                0xff => first + 2,
                _ => first,
            };
            let hi = match last & 0xff {
                0xff => last.checked_sub(1),
                0 => last.checked_sub(2),
                _ => Some(last),
            };
            match hi {
                Some(hi) if lo <= hi && lo <= last && hi >= first => {
                    Some((rank(true, lo), rank(true, hi)))
                }
                _ => None,
            }
        } else {
            Some((first, last))
        };
        CidrIndex {
            family,
            first,
            last,
            avoid,
            ranks,
            used: Runs::default(),
        }
    }

    /// Whether the address `v` of `family` is one of this CIDR's usable
    /// addresses.
    pub(crate) fn holds(&self, family: IpFamily, v: u128) -> bool {
        family == self.family
            && self.first <= v
            && v <= self.last
            && !(self.avoid && is_buggy_v4(v))
    }

    pub(crate) fn mark_used(&mut self, v: u128) {
        self.used.insert(rank(self.avoid, v));
    }

    pub(crate) fn mark_free(&mut self, v: u128) {
        self.used.remove(rank(self.avoid, v));
    }

    /// The lowest usable address not in use.
    pub(crate) fn first_free(&self) -> Option<u128> {
        let (lo, hi) = self.ranks?;
        self.used.first_free(lo, hi).map(|r| unrank(self.avoid, r))
    }

    #[cfg(test)]
    pub(crate) fn runs(&self) -> usize {
        self.used.len()
    }
}

/// The rank of a usable address.
fn rank(avoid: bool, v: u128) -> u128 {
    if avoid {
        (v >> 8) * 254 + (v & 0xff) - 1
    } else {
        v
    }
}

fn unrank(avoid: bool, r: u128) -> u128 {
    if avoid {
        ((r / 254) << 8) | (r % 254 + 1)
    } else {
        r
    }
}

/// The number of usable addresses of a CIDR, exact (u128, saturating for
/// an IPv6 /0). With avoidBuggyIPs this is MetalLB's `poolCount` formula for
/// IPv4 (prefixes <= /24 lose 2 per /24; a smaller CIDR loses 1 if its first
/// address is .0/.255 and 1 if its last is), which is exact, except that a
/// /32 on .0 or .255 counts 0 here where MetalLB's subtracts twice (-1).
pub(crate) fn capacity(net: &IpNet, avoid_buggy_ips: bool) -> u128 {
    let host_bits = u32::from(net.max_prefix_len() - net.prefix_len());
    let size = 1u128.checked_shl(host_bits).unwrap_or(u128::MAX);
    if !avoid_buggy_ips || !matches!(net, IpNet::V4(_)) {
        return size;
    }
    let prefix = u32::from(net.prefix_len());
    if prefix <= 24 {
        return size - 2 * (1u128 << (24 - prefix));
    }
    let first = to_u128(net.network());
    let last = to_u128(net.broadcast());
    if first == last {
        return u128::from(!is_buggy_v4(first));
    }
    size - u128::from(is_buggy_v4(first)) - u128::from(is_buggy_v4(last))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn brute_capacity(n: &IpNet, avoid: bool) -> u128 {
        let c = CidrIndex::new(*n, avoid);
        (c.first..=c.last).filter(|v| c.holds(c.family, *v)).count() as u128
    }

    #[test]
    fn runs_merge_and_split() {
        let mut r = Runs::default();
        assert_eq!(r.first_free(0, 10), Some(0));
        r.insert(0);
        r.insert(2);
        assert_eq!(r.len(), 2);
        assert_eq!(r.first_free(0, 10), Some(1));
        r.insert(1);
        assert_eq!(r.len(), 1);
        assert_eq!(r.first_free(0, 10), Some(3));
        assert_eq!(r.first_free(0, 2), None);
        assert_eq!(r.first_free(5, 10), Some(5));
        r.remove(1);
        assert_eq!(r.len(), 2);
        assert_eq!(r.first_free(0, 10), Some(1));
        r.remove(0);
        r.remove(2);
        assert_eq!(r.len(), 0);
        // The top of the space.
        r.insert(u128::MAX);
        r.insert(u128::MAX - 1);
        assert_eq!(r.first_free(u128::MAX - 1, u128::MAX), None);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn rank_roundtrip_skips_buggy() {
        for v in [1u128, 2, 254, 257, 0x0a00_01fe, 0x0a00_0201] {
            assert_eq!(unrank(true, rank(true, v)), v);
        }
        // .254 and the next /24's .1 are adjacent ranks.
        assert_eq!(rank(true, 0x0a00_01fe) + 1, rank(true, 0x0a00_0201));
    }

    #[test]
    fn first_free_with_avoid_buggy() {
        let mut c = CidrIndex::new(net("10.0.0.0/23"), true);
        assert_eq!(c.first_free(), Some(0x0a00_0001));
        for last in 1..=254u128 {
            c.mark_used(0x0a00_0000 + last);
        }
        assert_eq!(c.first_free(), Some(0x0a00_0101));
        assert_eq!(c.runs(), 1);
        c.mark_used(0x0a00_0101);
        assert_eq!(c.runs(), 1);
        assert_eq!(c.first_free(), Some(0x0a00_0102));
        // No usable address: a /32 on .0, a /31 on .255 gives .254 only.
        assert_eq!(CidrIndex::new(net("10.0.0.0/32"), true).first_free(), None);
        assert_eq!(
            CidrIndex::new(net("10.0.0.255/32"), true).first_free(),
            None
        );
        let c = CidrIndex::new(net("10.0.0.254/31"), true);
        assert_eq!(c.first_free(), Some(0x0a00_00fe));
        // IPv6 never skips.
        let c = CidrIndex::new(net("fd00::/120"), true);
        assert_eq!(c.first_free(), Some(to_u128("fd00::".parse().unwrap())));
    }

    #[test]
    fn capacity_matches_brute_force() {
        for s in [
            "10.0.0.0/22",
            "10.0.0.0/24",
            "10.0.0.0/25",
            "10.0.0.128/25",
            "10.0.0.0/31",
            "10.0.0.254/31",
            "10.0.0.0/32",
            "10.0.0.255/32",
            "10.0.0.7/32",
            "10.0.0.16/28",
            "fd00::/120",
        ] {
            for avoid in [false, true] {
                let n = net(s);
                assert_eq!(
                    capacity(&n, avoid),
                    brute_capacity(&n, avoid),
                    "{s} {avoid}"
                );
            }
        }
        assert_eq!(
            capacity(&net("10.0.0.0/8"), true),
            (1 << 24) - 2 * (1 << 16)
        );
        assert_eq!(capacity(&net("10.0.0.0/8"), false), 1 << 24);
        assert_eq!(capacity(&net("fd00::/64"), true), 1 << 64);
        assert_eq!(capacity(&net("::/0"), false), u128::MAX);
        assert_eq!(capacity(&net("0.0.0.0/0"), true), (1 << 32) - 2 * (1 << 24));
    }
}
