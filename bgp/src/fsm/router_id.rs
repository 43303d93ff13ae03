//! The router ID rule of MetalLB's native speaker, and the CRC32 it needs.

use std::net::{IpAddr, Ipv4Addr};

/// The BGP Identifier of a session: `configured` (`routerID`), else the
/// session's local address when it is IPv4 (an IPv4-mapped IPv6 address
/// counts), else the first IPv4 address of the interface holding it, else
/// the CRC32 (IEEE) of `node_name` laid out little-endian, as MetalLB does
/// (`binary.LittleEndian.PutUint32`). Never 0.0.0.0 (RFC 6286): unspecified
/// candidates are skipped, and a CRC of 0 becomes 1.
pub fn router_id(
    configured: Option<Ipv4Addr>,
    session_local: Option<IpAddr>,
    interface_v4: Option<Ipv4Addr>,
    node_name: &str,
) -> Ipv4Addr {
    let usable = |a: &Ipv4Addr| !a.is_unspecified();
    let local_v4 = session_local.and_then(|a| match a {
        IpAddr::V4(v4) => Some(v4),
        IpAddr::V6(v6) => v6.to_ipv4_mapped(),
    });
    configured
        .filter(usable)
        .or(local_v4.filter(usable))
        .or(interface_v4.filter(usable))
        .unwrap_or_else(|| {
            let crc = match crc32(node_name.as_bytes()) {
                0 => 1,
                c => c,
            };
            Ipv4Addr::from(crc.to_le_bytes())
        })
}

/// CRC-32 (IEEE 802.3; reflected polynomial 0xEDB88320), as zlib and Go's
/// `crc32.ChecksumIEEE` compute it.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = u32::MAX;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_check_value() {
        // The standard check value of CRC-32/ISO-HDLC.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn unspecified_candidates_are_skipped() {
        let id = router_id(
            Some(Ipv4Addr::UNSPECIFIED),
            Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            Some(Ipv4Addr::new(10, 0, 0, 7)),
            "n",
        );
        assert_eq!(id, Ipv4Addr::new(10, 0, 0, 7));
        // The empty name has CRC 0: 1 instead, laid out little-endian.
        assert_eq!(router_id(None, None, None, ""), Ipv4Addr::new(1, 0, 0, 0));
    }
}
