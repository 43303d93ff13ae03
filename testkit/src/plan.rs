//! The project's address and AS plan, as used by the default lab topology
//! (the prose version, shared with the demo, is `lab/README.md`).
//!
//! Only documentation ranges are used: 192.0.2.0/24, 198.51.100.0/24,
//! 203.0.113.0/24 and 2001:db8::/32; ASNs from 64512-65534.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// The L2 segment all lab namespaces share (IPv4).
pub const L2_V4: &str = "192.0.2.0/24";
/// The L2 segment all lab namespaces share (IPv6).
pub const L2_V6: &str = "2001:db8:0:1::/64";
pub const L2_V4_PREFIX_LEN: u8 = 24;
pub const L2_V6_PREFIX_LEN: u8 = 64;

/// The router (FRR) on the L2 segment.
pub const ROUTER_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub const ROUTER_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 1);
/// The second router (BIRD 2 or GoBGP 3) on the L2 segment.
pub const ROUTER2_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
pub const ROUTER2_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 2);
/// The client namespace (arping, ndisc6, traffic to services).
pub const CLIENT_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);
pub const CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 0x100);

/// Number of node namespaces in the default lab (node-1..node-3).
pub const NODES: usize = 3;

/// Node `n` (1-based: node-1 is 192.0.2.11).
pub fn node_v4(n: usize) -> Ipv4Addr {
    assert!((1..=99).contains(&n), "node index {n} out of range");
    Ipv4Addr::new(192, 0, 2, 10 + n as u8)
}

/// Node `n` (1-based: node-1 is 2001:db8:0:1::11).
pub fn node_v6(n: usize) -> Ipv6Addr {
    assert!((1..=99).contains(&n), "node index {n} out of range");
    // ::11, ::12, ... written as hex digits that read like the IPv4 host part.
    let hex = u16::from_str_radix(&format!("{}", 10 + n), 16).expect("decimal digits are hex");
    Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, hex)
}

/// Name of node `n`'s namespace (without the run prefix).
pub fn node_name(n: usize) -> String {
    format!("node-{n}")
}

/// Service address pools.
pub const POOL_V4: &str = "198.51.100.0/24";
pub const POOL_V6: &str = "2001:db8:100::/120";

/// The routed segment between `router` and `far` (multihop peers). Only the
/// first half of 203.0.113.0/24 is used by the kit; the second half may hold
/// the lab API server's cluster IPs.
pub const ROUTED_V4: &str = "203.0.113.0/25";
pub const ROUTED_V6: &str = "2001:db8:0:2::/64";
pub const ROUTED_V4_PREFIX_LEN: u8 = 25;
pub const ROUTED_V6_PREFIX_LEN: u8 = 64;
pub const ROUTER_ROUTED_V4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
pub const ROUTER_ROUTED_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 2, 0, 0, 0, 1);
pub const FAR_V4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 2);
pub const FAR_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 2, 0, 0, 0, 2);

/// AS numbers.
pub const ROUTER_AS: u32 = 64512;
pub const NODE_AS: u32 = 64513;
/// The second router's AS (eBGP to both the router and the nodes).
pub const ROUTER2_AS: u32 = 64514;
/// The multihop peer in `far`.
pub const FAR_AS: u32 = 64515;

/// The ranges the kit accepts for any address or route it configures.
pub const ALLOWED_RANGES: [&str; 4] = [
    "192.0.2.0/24",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "2001:db8::/32",
];

/// Whether `net` lies entirely inside one of [`ALLOWED_RANGES`].
pub fn is_allowed_net(net: &IpNet) -> bool {
    ALLOWED_RANGES
        .iter()
        .map(|r| r.parse::<IpNet>().expect("static range"))
        .any(|r| r.contains(net))
}

/// Whether `addr` lies inside one of [`ALLOWED_RANGES`].
pub fn is_allowed_addr(addr: IpAddr) -> bool {
    is_allowed_net(&IpNet::from(addr))
}

/// Whether `asn` is in the private range the lab may use (64512-65534).
pub fn is_allowed_asn(asn: u32) -> bool {
    (64512..=65534).contains(&asn)
}

/// The lab-plan check every router config runs before it starts: its own
/// AS, each neighbour's address and AS, and each announced prefix must be in
/// the lab's ranges.
pub fn check_router(
    asn: u32,
    neighbors: impl IntoIterator<Item = (IpAddr, u32)>,
    prefixes: &[String],
) -> anyhow::Result<()> {
    use anyhow::{Context, ensure};
    ensure!(is_allowed_asn(asn), "AS {asn} is not in 64512-65534");
    for (addr, remote_as) in neighbors {
        ensure!(
            is_allowed_addr(addr),
            "neighbor {addr} is outside the lab's ranges"
        );
        ensure!(
            is_allowed_asn(remote_as),
            "neighbor {addr} AS {remote_as} is not in 64512-65534"
        );
    }
    for p in prefixes {
        let net: IpNet = p.parse().with_context(|| format!("bad prefix {p}"))?;
        ensure!(
            is_allowed_net(&net),
            "prefix {p} is outside the lab's ranges"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_addresses_follow_the_plan() {
        assert_eq!(node_v4(1).to_string(), "192.0.2.11");
        assert_eq!(node_v4(3).to_string(), "192.0.2.13");
        assert_eq!(node_v6(1).to_string(), "2001:db8:0:1::11");
        assert_eq!(node_v6(3).to_string(), "2001:db8:0:1::13");
        assert_eq!(CLIENT_V6.to_string(), "2001:db8:0:1::100");
    }

    #[test]
    fn router_configs_are_checked_against_the_plan() {
        let ok = |asn, n: (&str, u32), p: &str| {
            check_router(asn, [(n.0.parse().unwrap(), n.1)], &[p.to_string()])
        };
        assert!(ok(64512, ("192.0.2.11", 64513), "198.51.100.0/24").is_ok());
        let e = ok(65000, ("10.0.0.1", 64513), "198.51.100.0/24").unwrap_err();
        assert_eq!(
            e.to_string(),
            "neighbor 10.0.0.1 is outside the lab's ranges"
        );
        let e = ok(64512, ("192.0.2.11", 65535), "198.51.100.0/24").unwrap_err();
        assert_eq!(
            e.to_string(),
            "neighbor 192.0.2.11 AS 65535 is not in 64512-65534"
        );
        let e = ok(64512, ("192.0.2.11", 64513), "10.0.0.0/8").unwrap_err();
        assert_eq!(
            e.to_string(),
            "prefix 10.0.0.0/8 is outside the lab's ranges"
        );
        assert!(ok(100, ("192.0.2.11", 64513), "198.51.100.0/24").is_err());
    }

    #[test]
    fn allowed_ranges() {
        assert!(is_allowed_net(&"198.51.100.0/24".parse().unwrap()));
        assert!(is_allowed_net(&"2001:db8:100::/120".parse().unwrap()));
        assert!(!is_allowed_net(&"0.0.0.0/0".parse().unwrap()));
        assert!(!is_allowed_net(&"192.0.0.0/16".parse().unwrap()));
        assert!(!is_allowed_addr("10.0.0.1".parse().unwrap()));
        assert!(is_allowed_asn(64512) && is_allowed_asn(65534));
        assert!(!is_allowed_asn(65535) && !is_allowed_asn(64511));
    }
}
