//! Shared test helpers (included with `mod common;`).
#![allow(dead_code)]

use std::net::{IpAddr, Ipv6Addr};

use arp_ndp::interfaces::Interface;
use arp_ndp::packet::MacAddr;

/// Parses hex with any whitespace and `|` separators.
pub fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    assert!(digits.len().is_multiple_of(2), "odd number of hex digits");
    digits
        .chunks(2)
        .map(|c| u8::from_str_radix(std::str::from_utf8(c).unwrap(), 16).unwrap())
        .collect()
}

pub const OUR_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0xaa]);
pub const CLIENT_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
pub const OTHER_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x77]);

pub fn ll(last: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, last)
}

pub fn v6(last: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, last)
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// An interface eligible for both protocols.
pub fn iface(name: &str, index: u32, mac: MacAddr) -> Interface {
    Interface {
        index,
        name: name.to_owned(),
        mac,
        link_local: Some(ll(0xaa)),
        arp: true,
        ndp: true,
    }
}

pub fn eth0() -> Interface {
    iface("eth0", 2, OUR_MAC)
}
