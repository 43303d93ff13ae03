//! Properties of pool address parsing (`config::cidr`) and of `parse` on
//! arbitrary pools.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, Ipv6Addr};

use config::api::v1beta1;
use config::cidr::{overlaps, parse_addresses};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use proptest::prelude::*;

/// Inclusive start and end of a CIDR, as integers.
fn bounds(net: &IpNet) -> (u128, u128) {
    match net {
        IpNet::V4(n) => (
            u128::from(u32::from(n.network())),
            u128::from(u32::from(n.broadcast())),
        ),
        IpNet::V6(n) => (u128::from(n.network()), u128::from(n.broadcast())),
    }
}

/// The CIDRs are aligned, in increasing order, do not overlap, leave no
/// gap, and cover exactly [start, end].
fn assert_exact_cover(cidrs: &[IpNet], start: u128, end: u128, v4: bool) {
    assert!(!cidrs.is_empty());
    for c in cidrs {
        assert_eq!(*c, c.trunc(), "{c} is not a network address");
        assert_eq!(matches!(c, IpNet::V4(_)), v4, "{c} is of the wrong family");
    }
    assert_eq!(bounds(&cidrs[0]).0, start, "first CIDR starts the range");
    assert_eq!(
        bounds(cidrs.last().unwrap()).1,
        end,
        "last CIDR ends the range"
    );
    for w in cidrs.windows(2) {
        let (_, prev_end) = bounds(&w[0]);
        let (next_start, _) = bounds(&w[1]);
        assert_eq!(
            prev_end.checked_add(1),
            Some(next_start),
            "{} and {} are not adjacent",
            w[0],
            w[1]
        );
    }
}

/// An address, then a span, biased to small spans and to edges.
fn v4_range() -> impl Strategy<Value = (u32, u32)> {
    prop_oneof![
        (any::<u32>(), 0u32..300).prop_map(|(s, len)| (s, s.saturating_add(len))),
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| (a.min(b), a.max(b))),
        Just((0, u32::MAX)),
        (any::<u32>()).prop_map(|a| (a, u32::MAX)),
    ]
}

fn v6_range() -> impl Strategy<Value = (u128, u128)> {
    prop_oneof![
        (any::<u128>(), 0u128..300).prop_map(|(s, len)| (s, s.saturating_add(len))),
        (any::<u128>(), any::<u128>()).prop_map(|(a, b)| (a.min(b), a.max(b))),
        Just((0, u128::MAX)),
        (any::<u128>()).prop_map(|a| (0, a)),
    ]
}

/// Separators MetalLB accepts around the `-` (spaces are trimmed).
fn dash() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("-"), Just(" - "), Just("- "), Just(" -")]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn v4_range_summary_covers_exactly((start, end) in v4_range(), sep in dash()) {
        let text = format!("{}{sep}{}", Ipv4Addr::from(start), Ipv4Addr::from(end));
        let cidrs = parse_addresses(&text).unwrap();
        assert_exact_cover(&cidrs, u128::from(start), u128::from(end), true);
        prop_assert!(cidrs.len() <= 62);
    }

    #[test]
    fn v6_range_summary_covers_exactly((start, end) in v6_range(), sep in dash()) {
        let text = format!("{}{sep}{}", Ipv6Addr::from(start), Ipv6Addr::from(end));
        let cidrs = parse_addresses(&text).unwrap();
        assert_exact_cover(&cidrs, start, end, false);
        prop_assert!(cidrs.len() <= 254);
    }

    #[test]
    fn reversed_range_is_rejected(a in any::<u32>(), b in any::<u32>()) {
        prop_assume!(a != b);
        let (hi, lo) = (Ipv4Addr::from(a.max(b)), Ipv4Addr::from(a.min(b)));
        let text = format!("{hi}-{lo}");
        prop_assert_eq!(
            parse_addresses(&text).unwrap_err(),
            format!("invalid IP range \"{text}\": start IP \"{hi}\" is after the end IP \"{lo}\"")
        );
    }

    #[test]
    fn v4_cidr_roundtrips(addr in any::<u32>(), len in 0u8..=32) {
        let net = Ipv4Net::new(Ipv4Addr::from(addr), len).unwrap().trunc();
        let text = net.to_string();
        let parsed = parse_addresses(&text).unwrap();
        prop_assert_eq!(&parsed, &vec![IpNet::V4(net)]);
        prop_assert_eq!(parsed[0].to_string(), text);
        // Host bits set: Go's ParseCIDR returns the network.
        let host = format!("{}/{len}", Ipv4Addr::from(addr));
        prop_assert_eq!(parse_addresses(&host).unwrap(), vec![IpNet::V4(net)]);
    }

    #[test]
    fn v6_cidr_roundtrips(addr in any::<u128>(), len in 0u8..=128) {
        let net = Ipv6Net::new(Ipv6Addr::from(addr), len).unwrap().trunc();
        let text = net.to_string();
        let parsed = parse_addresses(&text).unwrap();
        prop_assert_eq!(&parsed, &vec![IpNet::V6(net)]);
        prop_assert_eq!(parsed[0].to_string(), text);
        let host = format!("{}/{len}", Ipv6Addr::from(addr));
        prop_assert_eq!(parse_addresses(&host).unwrap(), vec![IpNet::V6(net)]);
    }

    #[test]
    fn v4_overlap_matches_brute_force(
        a in any::<u8>(), la in 24u8..=32,
        b in any::<u8>(), lb in 24u8..=32,
    ) {
        let base = u32::from(Ipv4Addr::new(198, 51, 100, 0));
        let na = IpNet::V4(Ipv4Net::new(Ipv4Addr::from(base + u32::from(a)), la).unwrap().trunc());
        let nb = IpNet::V4(Ipv4Net::new(Ipv4Addr::from(base + u32::from(b)), lb).unwrap().trunc());
        let set = |n: &IpNet| -> BTreeSet<u128> { let (s, e) = bounds(n); (s..=e).collect() };
        let brute = !set(&na).is_disjoint(&set(&nb));
        prop_assert_eq!(overlaps(&na, &nb), brute, "{} vs {}", na, nb);
        prop_assert_eq!(overlaps(&nb, &na), brute, "{} vs {}", nb, na);
    }

    #[test]
    fn v6_overlap_matches_brute_force(
        a in any::<u8>(), la in 120u8..=128,
        b in any::<u8>(), lb in 120u8..=128,
    ) {
        let base = u128::from("2001:db8::".parse::<Ipv6Addr>().unwrap());
        let na = IpNet::V6(Ipv6Net::new(Ipv6Addr::from(base + u128::from(a)), la).unwrap().trunc());
        let nb = IpNet::V6(Ipv6Net::new(Ipv6Addr::from(base + u128::from(b)), lb).unwrap().trunc());
        let set = |n: &IpNet| -> BTreeSet<u128> { let (s, e) = bounds(n); (s..=e).collect() };
        let brute = !set(&na).is_disjoint(&set(&nb));
        prop_assert_eq!(overlaps(&na, &nb), brute, "{} vs {}", na, nb);
    }

    #[test]
    fn families_never_overlap(a in any::<u32>(), la in 0u8..=32, b in any::<u128>(), lb in 0u8..=128) {
        // ::ffff:a.b.c.d and friends are still IPv6 networks.
        let v4 = IpNet::V4(Ipv4Net::new(Ipv4Addr::from(a), la).unwrap());
        let v6 = IpNet::V6(Ipv6Net::new(Ipv6Addr::from(b), lb).unwrap());
        prop_assert!(!overlaps(&v4, &v6));
        prop_assert!(!overlaps(&v6, &v4));
    }

    #[test]
    fn garbage_never_panics(s in "[0-9a-fA-F:./ x-]{0,40}") {
        let _ = parse_addresses(&s);
    }

    #[test]
    fn parse_never_panics_on_random_pools(pools in proptest::collection::vec(pool(), 0..6), ad in bgp_ad()) {
        let resources = config::Resources {
            pools: pools.into_iter().map(std::sync::Arc::new).collect(),
            bgp_advertisements: ad.into_iter().map(std::sync::Arc::new).collect(),
            ..Default::default()
        };
        match config::parse(&resources) {
            Ok(cfg) => {
                // Valid pools never overlap, within or across pools.
                let all: Vec<IpNet> = cfg.pools.values().flat_map(|p| p.cidrs.iter().copied()).collect();
                for (i, x) in all.iter().enumerate() {
                    for y in &all[i + 1..] {
                        prop_assert!(!overlaps(x, y), "{} and {} overlap in a valid config", x, y);
                    }
                }
            }
            Err(e) => {
                prop_assert!(!e.message.is_empty());
                prop_assert!(e.object.is_some());
            }
        }
    }
}

/// One `spec.addresses` entry: valid CIDRs and ranges of both families
/// (often overlapping), and junk.
fn address() -> impl Strategy<Value = String> {
    prop_oneof![
        (any::<u8>(), 20u8..=33).prop_map(|(a, l)| format!("198.51.100.{a}/{l}")),
        (any::<u8>(), any::<u8>()).prop_map(|(a, b)| format!("203.0.113.{a}-203.0.113.{b}")),
        (any::<u16>(), 100u8..=129).prop_map(|(a, l)| format!("2001:db8::{a:x}/{l}")),
        (any::<u16>(), any::<u16>())
            .prop_map(|(a, b)| format!("2001:db8::{a:x} - 2001:db8::{b:x}")),
        (any::<u8>(), any::<u16>()).prop_map(|(a, b)| format!("192.0.2.{a}-2001:db8::{b:x}")),
        "[0-9a-f:./ -]{0,24}",
    ]
}

fn pool() -> impl Strategy<Value = v1beta1::IPAddressPool> {
    (
        "[a-c]{0,2}",
        proptest::collection::vec(address(), 0..4),
        any::<Option<bool>>(),
        any::<bool>(),
        proptest::option::of((any::<i32>(), proptest::collection::vec("[a-c]{1,2}", 0..3))),
    )
        .prop_map(
            |(name, addresses, auto_assign, avoid_buggy_ips, allocation)| {
                let mut p = v1beta1::IPAddressPool::new(
                    &name,
                    v1beta1::IPAddressPoolSpec {
                        addresses,
                        auto_assign,
                        avoid_buggy_ips,
                        allocate_to: allocation.map(|(priority, namespaces)| {
                            v1beta1::ServiceAllocation {
                                priority,
                                namespaces,
                                ..Default::default()
                            }
                        }),
                    },
                );
                if name.is_empty() {
                    p.metadata.name = None;
                }
                p
            },
        )
}

fn bgp_ad() -> impl Strategy<Value = Option<v1beta1::BGPAdvertisement>> {
    proptest::option::of(
        (
            proptest::option::of(any::<i32>()),
            proptest::option::of(any::<i32>()),
            any::<u32>(),
        )
            .prop_map(|(aggregation_length, aggregation_length_v6, local_pref)| {
                v1beta1::BGPAdvertisement::new(
                    "adv",
                    v1beta1::BGPAdvertisementSpec {
                        aggregation_length,
                        aggregation_length_v6,
                        local_pref,
                        ..Default::default()
                    },
                )
            }),
    )
}
