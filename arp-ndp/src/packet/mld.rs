//! MLDv2 Multicast Listener Reports (RFC 3810 section 5.2), as the kernel
//! sends when a socket joins a group: to all MLDv2-capable routers
//! (`ff02::16`), hop limit 1, a Hop-by-Hop header with the Router Alert
//! option (RFC 2711, value 0: MLD), and one `CHANGE_TO_EXCLUDE` record with
//! no sources per group (listening to every source).
//!
//! Why we send them ourselves: a snooping switch forwards a solicited-node
//! group's solicitations only to the ports that reported the group. The
//! kernel reports when it joins and when the querier asks; a node whose
//! link was cut while the querier asked (twice, with Linux's defaults)
//! is forgotten by the switch, and nothing tells the kernel to report
//! again before the next query (125 s by default). The driver restates its
//! groups with these reports when it announces its addresses again after
//! such a cut ([`crate::linux::L2Handle::reannounce`]).

use std::net::Ipv6Addr;

use super::ethernet::{ETH_HEADER_LEN, ETHERTYPE_IPV6, EthernetHeader, MacAddr};
use super::ext::IPPROTO_HOPOPTS;
use super::ndp::{
    IPPROTO_ICMPV6, IPV6_HEADER_LEN, Ipv6Header, icmpv6_checksum, ipv6_multicast_mac,
};

/// ICMPv6 type of an MLDv2 report.
pub const ICMPV6_MLD2_REPORT: u8 = 143;
/// All MLDv2-capable routers, where reports go.
pub const ALL_MLDV2_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x16);
/// Record type 4: the filter mode changed to EXCLUDE (with no source: every source).
pub const MLD2_CHANGE_TO_EXCLUDE: u8 = 4;
/// The Hop-by-Hop header: next header ICMPv6, length 0 (8 bytes), Router
/// Alert (type 5, length 2, value 0 = MLD), PadN of 0 bytes.
const HOP_BY_HOP: [u8; 8] = [IPPROTO_ICMPV6, 0, 5, 2, 0, 0, 1, 0];
/// One group record without sources.
const RECORD_LEN: usize = 20;
/// The report's own header: type, code, checksum, reserved, record count.
const REPORT_HEADER_LEN: usize = 8;
/// Records per report: as many as fit in IPv6's minimum MTU (1,280 bytes).
pub const MLD2_RECORDS_PER_REPORT: usize =
    (1280 - IPV6_HEADER_LEN - HOP_BY_HOP.len() - REPORT_HEADER_LEN) / RECORD_LEN;

/// Whole Ethernet frames reporting `groups` (in order, at most
/// [`MLD2_RECORDS_PER_REPORT`] per frame) from `src_mac` and the interface's
/// link-local address `src_ip` (RFC 3810 section 5.2.13). None for no group.
pub fn mld2_reports(src_mac: MacAddr, src_ip: Ipv6Addr, groups: &[Ipv6Addr]) -> Vec<Vec<u8>> {
    groups
        .chunks(MLD2_RECORDS_PER_REPORT)
        .map(|chunk| report_frame(src_mac, src_ip, chunk))
        .collect()
}

fn report_frame(src_mac: MacAddr, src_ip: Ipv6Addr, groups: &[Ipv6Addr]) -> Vec<u8> {
    let mut icmp = Vec::with_capacity(REPORT_HEADER_LEN + RECORD_LEN * groups.len());
    icmp.extend_from_slice(&[ICMPV6_MLD2_REPORT, 0, 0, 0, 0, 0]);
    // At most MLD2_RECORDS_PER_REPORT (61) records: fits a u16.
    icmp.extend_from_slice(&(groups.len() as u16).to_be_bytes());
    for g in groups {
        icmp.extend_from_slice(&[MLD2_CHANGE_TO_EXCLUDE, 0, 0, 0]);
        icmp.extend_from_slice(&g.octets());
    }
    let c = icmpv6_checksum(src_ip, ALL_MLDV2_ROUTERS, &icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let payload = HOP_BY_HOP.len() + icmp.len();
    let mut out = Vec::with_capacity(ETH_HEADER_LEN + IPV6_HEADER_LEN + payload);
    EthernetHeader {
        dst: ipv6_multicast_mac(ALL_MLDV2_ROUTERS),
        src: src_mac,
        ethertype: ETHERTYPE_IPV6,
    }
    .encode_into(&mut out);
    Ipv6Header {
        traffic_class: 0,
        flow_label: 0,
        // At most 1,240 bytes (the MTU bound above).
        payload_len: payload as u16,
        next_header: IPPROTO_HOPOPTS,
        hop_limit: 1,
        src: src_ip,
        dst: ALL_MLDV2_ROUTERS,
    }
    .encode_into(&mut out);
    out.extend_from_slice(&HOP_BY_HOP);
    out.extend_from_slice(&icmp);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{icmpv6_checksum_ok, solicited_node_multicast};

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    /// The kernel's own report (Linux 6.x, captured with tcpdump) when a
    /// socket on an interface with MAC 02:00:00:00:00:01 and link-local
    /// fe80::1 joined ff02::1:ff00:10: ours is byte for byte the same.
    #[test]
    fn a_report_is_the_kernels_for_the_same_join() {
        let kernel = hex("3333 0000 0016 0200 0000 0001 86dd 6000
             0000 0024 0001 fe80 0000 0000 0000 0000
             0000 0000 0001 ff02 0000 0000 0000 0000
             0000 0000 0016 3a00 0502 0000 0100 8f00
             70f8 0000 0001 0400 0000 ff02 0000 0000
             0000 0000 0001 ff00 0010");
        let mac = MacAddr([2, 0, 0, 0, 0, 1]);
        let ll: Ipv6Addr = "fe80::1".parse().unwrap();
        let group = solicited_node_multicast("2001:db8:100::10".parse().unwrap());
        assert_eq!(mld2_reports(mac, ll, &[group]), vec![kernel]);
    }

    #[test]
    fn many_groups_are_split_into_reports_that_fit_the_minimum_mtu() {
        let mac = MacAddr([2, 0, 0, 0, 0, 1]);
        let ll: Ipv6Addr = "fe80::1".parse().unwrap();
        assert!(mld2_reports(mac, ll, &[]).is_empty());
        let groups: Vec<Ipv6Addr> = (0..150u32)
            .map(|i| {
                solicited_node_multicast(Ipv6Addr::from(
                    0x2001_0db8_0000_0000_0000_0000_0000_0000u128 | u128::from(i),
                ))
            })
            .collect();
        let frames = mld2_reports(mac, ll, &groups);
        assert_eq!(MLD2_RECORDS_PER_REPORT, 61);
        assert_eq!(frames.len(), 3);
        let mut seen = Vec::new();
        for f in &frames {
            assert!(f.len() - ETH_HEADER_LEN <= 1280, "{} bytes", f.len());
            let (ip, payload) = Ipv6Header::decode(&f[ETH_HEADER_LEN..]).unwrap();
            assert_eq!((ip.hop_limit, ip.next_header), (1, IPPROTO_HOPOPTS));
            assert_eq!(&payload[..8], &HOP_BY_HOP);
            let icmp = &payload[8..];
            assert!(icmpv6_checksum_ok(ll, ALL_MLDV2_ROUTERS, icmp));
            let n = usize::from(u16::from_be_bytes([icmp[6], icmp[7]]));
            assert_eq!(icmp.len(), REPORT_HEADER_LEN + n * RECORD_LEN);
            for r in icmp[REPORT_HEADER_LEN..].chunks(RECORD_LEN) {
                assert_eq!(&r[..4], &[MLD2_CHANGE_TO_EXCLUDE, 0, 0, 0]);
                let mut g = [0u8; 16];
                g.copy_from_slice(&r[4..]);
                seen.push(Ipv6Addr::from(g));
            }
        }
        assert_eq!(seen, groups);
    }
}
