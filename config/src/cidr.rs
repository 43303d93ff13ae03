//! Pool address entries: CIDRs and inclusive ranges, parsed like MetalLB
//! (Go's `net.ParseCIDR`, ranges summarised into CIDRs).

use std::net::IpAddr;

use ipnet::{IpNet, Ipv4Subnets, Ipv6Subnets};

use crate::gofmt::quote;

/// Parses an IP address the way Go's `net.ParseIP` does (no zones, no
/// surrounding spaces).
pub fn parse_ip(s: &str) -> Option<IpAddr> {
    if s.contains('%') {
        return None;
    }
    s.parse().ok()
}

/// Parses one `spec.addresses` entry into the CIDRs it stands for, with
/// MetalLB's error texts (the part after `invalid CIDR %q in pool %q: `).
pub fn parse_addresses(cidr: &str) -> Result<Vec<IpNet>, String> {
    if !cidr.contains('-') {
        return parse_go_cidr(cidr)
            .map(|n| vec![n])
            .ok_or_else(|| format!("invalid CIDR {}", quote(cidr)));
    }
    let Some((first, last)) = cidr.split_once('-') else {
        return Err(format!("invalid IP range {}", quote(cidr)));
    };
    let Some(start) = parse_ip(first.trim()) else {
        return Err(format!(
            "invalid IP range {}: invalid start IP {}",
            quote(cidr),
            quote(first)
        ));
    };
    let Some(end) = parse_ip(last.trim()) else {
        return Err(format!(
            "invalid IP range {}: invalid end IP {}",
            quote(cidr),
            quote(last)
        ));
    };
    match (start, end) {
        (IpAddr::V4(s), IpAddr::V4(e)) => {
            if s > e {
                return Err(after(cidr, start, end));
            }
            Ok(Ipv4Subnets::new(s, e, 0).map(IpNet::V4).collect())
        }
        (IpAddr::V6(s), IpAddr::V6(e)) => {
            if s > e {
                return Err(after(cidr, start, end));
            }
            Ok(Ipv6Subnets::new(s, e, 0).map(IpNet::V6).collect())
        }
        // MetalLB silently yields no addresses for a mixed-family range; we
        // refuse it rather than accept a pool entry that means nothing.
        _ => Err(format!(
            "invalid IP range {}: start IP {} and end IP {} are of different address families",
            quote(cidr),
            quote(&start.to_string()),
            quote(&end.to_string())
        )),
    }
}

fn after(cidr: &str, start: IpAddr, end: IpAddr) -> String {
    format!(
        "invalid IP range {}: start IP {} is after the end IP {}",
        quote(cidr),
        quote(&start.to_string()),
        quote(&end.to_string())
    )
}

/// Go's `net.ParseCIDR`, returning the network (host bits cleared).
fn parse_go_cidr(s: &str) -> Option<IpNet> {
    let (addr, len) = s.split_once('/')?;
    let ip = parse_ip(addr)?;
    if len.is_empty() || len.len() > 3 || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let len: u8 = len.parse().ok()?;
    IpNet::new(ip, len).ok().map(|n| n.trunc())
}

/// Whether two CIDRs share an address (MetalLB's `cidrsOverlap`).
pub fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// The number of addresses in `cidr`, exact up to 2^63-1 and clamped to it
/// above (pool status counts are int64).
pub fn size_clamped(cidr: &IpNet) -> i64 {
    let host_bits = u32::from(cidr.max_prefix_len() - cidr.prefix_len());
    if host_bits >= 63 {
        i64::MAX
    } else {
        1i64 << host_bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(v: &[&str]) -> Vec<IpNet> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn cidrs_like_go() {
        assert_eq!(
            parse_addresses("198.51.100.7/24").unwrap(),
            nets(&["198.51.100.0/24"])
        );
        assert_eq!(
            parse_addresses("2001:db8::1/64").unwrap(),
            nets(&["2001:db8::/64"])
        );
        assert_eq!(
            parse_addresses("198.51.100.1").unwrap_err(),
            r#"invalid CIDR "198.51.100.1""#
        );
        assert_eq!(
            parse_addresses("198.51.100.0/33").unwrap_err(),
            r#"invalid CIDR "198.51.100.0/33""#
        );
        assert_eq!(
            parse_addresses("198.51.100.0/").unwrap_err(),
            r#"invalid CIDR "198.51.100.0/""#
        );
        assert_eq!(
            parse_addresses(" 198.51.100.0/24").unwrap_err(),
            r#"invalid CIDR " 198.51.100.0/24""#
        );
    }

    #[test]
    fn ranges_are_summarised() {
        assert_eq!(
            parse_addresses("198.51.100.10 - 198.51.100.20").unwrap(),
            nets(&[
                "198.51.100.10/31",
                "198.51.100.12/30",
                "198.51.100.16/30",
                "198.51.100.20/32"
            ])
        );
        assert_eq!(
            parse_addresses("192.0.2.0-192.0.2.255").unwrap(),
            nets(&["192.0.2.0/24"])
        );
        assert_eq!(
            parse_addresses("2001:db8::-2001:db8::1").unwrap(),
            nets(&["2001:db8::/127"])
        );
    }

    #[test]
    fn range_errors_like_metallb() {
        assert_eq!(
            parse_addresses("x-198.51.100.1").unwrap_err(),
            r#"invalid IP range "x-198.51.100.1": invalid start IP "x""#
        );
        assert_eq!(
            parse_addresses("198.51.100.1-y").unwrap_err(),
            r#"invalid IP range "198.51.100.1-y": invalid end IP "y""#
        );
        assert_eq!(
            parse_addresses("198.51.100.9-198.51.100.1").unwrap_err(),
            r#"invalid IP range "198.51.100.9-198.51.100.1": start IP "198.51.100.9" is after the end IP "198.51.100.1""#
        );
        assert!(parse_addresses("198.51.100.1-2001:db8::1").is_err());
    }

    #[test]
    fn sizes_clamp() {
        assert_eq!(size_clamped(&"198.51.100.0/24".parse().unwrap()), 256);
        assert_eq!(size_clamped(&"10.0.0.0/8".parse().unwrap()), 1 << 24);
        assert_eq!(size_clamped(&"2001:db8::/64".parse().unwrap()), i64::MAX);
        assert_eq!(size_clamped(&"2001:db8::/66".parse().unwrap()), 1 << 62);
    }
}
