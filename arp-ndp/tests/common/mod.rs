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

/// `frame` (Ethernet + IPv6 fixed header + upper layer) with IPv6
/// extension headers inserted after the fixed header: each
/// `(type, bytes from Hdr Ext Len on)`, the next header fields chained,
/// the payload length adjusted. The ICMPv6 checksum does not cover
/// extension headers, so it stays right.
pub fn with_ext_headers(frame: &[u8], headers: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let upper = frame[20];
    let mut out = frame[..54].to_vec();
    let mut added = 0usize;
    for (i, (kind, body)) in headers.iter().enumerate() {
        if i == 0 {
            out[20] = *kind;
        }
        out.push(headers.get(i + 1).map_or(upper, |h| h.0));
        out.extend_from_slice(body);
        added += 1 + body.len();
    }
    out.extend_from_slice(&frame[54..]);
    let len = usize::from(u16::from_be_bytes([out[18], out[19]])) + added;
    out[18..20].copy_from_slice(&u16::try_from(len).unwrap().to_be_bytes());
    out
}

/// An 8-byte Hop-by-Hop or Destination Options body (after the next
/// header byte): Hdr Ext Len 0, one PadN option of four zero bytes.
pub fn padn_body() -> Vec<u8> {
    vec![0, 1, 4, 0, 0, 0, 0]
}
