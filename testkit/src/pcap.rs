//! Reading the files the kit's captures write (tcpdump's classic pcap
//! format, Ethernet link type): records with their kernel time stamps, and
//! the IP packet inside an Ethernet frame. One reader for every test and
//! benchmark that looks at packets on the wire by their bytes (the text
//! view is [`crate::capture::read_pcap`]).

use std::net::IpAddr;
use std::path::Path;

use anyhow::{Context, Result, bail, ensure};

/// `LINKTYPE_ETHERNET`.
const LINKTYPE_ETHERNET: u32 = 1;

/// One captured packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Kernel time stamp, ns since the Unix epoch (`CLOCK_REALTIME`).
    pub ts_ns: u64,
    /// Length of the packet on the wire (more than `data.len()` when the
    /// capture's snap length cut it).
    pub orig_len: u32,
    /// The captured bytes (an Ethernet frame).
    pub data: Vec<u8>,
}

impl Record {
    /// Whether the capture kept the whole packet.
    pub fn is_complete(&self) -> bool {
        self.data.len() == self.orig_len as usize
    }
}

/// Reads a pcap file of Ethernet frames.
pub fn read(path: &Path) -> Result<Vec<Record>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&bytes).with_context(|| path.display().to_string())
}

/// Parses pcap bytes (either byte order, µs or ns time stamps) of Ethernet
/// frames. A last record cut short (tcpdump stopped while writing it) is
/// left out.
pub fn parse(bytes: &[u8]) -> Result<Vec<Record>> {
    ensure!(bytes.len() >= 24, "no pcap header");
    let magic = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let (le, nanos) = match magic {
        0xa1b2_c3d4 => (true, false),
        0xa1b2_3c4d => (true, true),
        0xd4c3_b2a1 => (false, false),
        0x4d3c_b2a1 => (false, true),
        m => bail!("not a pcap file (magic {m:#x})"),
    };
    let u32_at = |at: usize| {
        let a = [bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]];
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let link = u32_at(20);
    ensure!(
        link == LINKTYPE_ETHERNET,
        "link type {link}, Ethernet expected"
    );
    let mut records = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let sec = u64::from(u32_at(at));
        let frac = u64::from(u32_at(at + 4));
        let incl = u32_at(at + 8) as usize;
        let orig_len = u32_at(at + 12);
        let Some(data) = bytes.get(at + 16..at + 16 + incl) else {
            break;
        };
        at += 16 + incl;
        records.push(Record {
            ts_ns: sec * 1_000_000_000 + if nanos { frac } else { frac * 1_000 },
            orig_len,
            data: data.to_vec(),
        });
    }
    Ok(records)
}

/// The IP packet in an Ethernet frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpPacket<'a> {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// IPv4 protocol or IPv6 next header (extension headers are not
    /// walked: the kit's traffic has none).
    pub protocol: u8,
    /// What follows the IP header, up to the IP length (padding cut).
    pub payload: &'a [u8],
}

/// The IPv4 or IPv6 packet of an untagged Ethernet frame; `None` for any
/// other frame or a header cut short.
pub fn ip_in_ethernet(frame: &[u8]) -> Option<IpPacket<'_>> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let ip = frame.get(14..)?;
    match ethertype {
        0x0800 => {
            let ihl = usize::from(ip.first()? & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
            if ihl < 20 || total < ihl {
                return None;
            }
            let src: [u8; 4] = ip.get(12..16)?.try_into().ok()?;
            let dst: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
            Some(IpPacket {
                src: src.into(),
                dst: dst.into(),
                protocol: *ip.get(9)?,
                payload: ip.get(ihl..total.min(ip.len()))?,
            })
        }
        0x86dd => {
            let len = usize::from(u16::from_be_bytes([*ip.get(4)?, *ip.get(5)?]));
            let src: [u8; 16] = ip.get(8..24)?.try_into().ok()?;
            let dst: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
            Some(IpPacket {
                src: src.into(),
                dst: dst.into(),
                protocol: *ip.get(6)?,
                payload: ip.get(40..(40 + len).min(ip.len()))?,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(magic: u32, le: bool) -> Vec<u8> {
        let w = |v: u32| if le { v.to_le_bytes() } else { v.to_be_bytes() };
        let mut h = Vec::new();
        h.extend(w(magic));
        h.extend([0u8; 16]);
        h.extend(w(LINKTYPE_ETHERNET));
        h
    }

    fn record(le: bool, sec: u32, frac: u32, data: &[u8], orig: u32) -> Vec<u8> {
        let w = |v: u32| if le { v.to_le_bytes() } else { v.to_be_bytes() };
        let mut r = Vec::new();
        r.extend(w(sec));
        r.extend(w(frac));
        r.extend(w(data.len() as u32));
        r.extend(w(orig));
        r.extend(data);
        r
    }

    /// An Ethernet frame with an IPv4 UDP packet, 2 bytes of padding.
    fn ipv4_udp() -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend([0x08, 0x00]);
        f.extend([0x45, 0, 0, 30, 0, 0, 0, 0, 255, 17, 0, 0]);
        f.extend([192, 0, 2, 11, 192, 0, 2, 1]);
        f.extend([0xc0, 0, 0x0e, 0xc8, 0, 10, 0, 0, 0xaa, 0xbb]);
        f.extend([0, 0]);
        f
    }

    #[test]
    fn both_byte_orders_and_time_stamp_kinds() {
        for (magic, le, nanos) in [
            (0xa1b2_c3d4u32, true, false),
            (0xa1b2_3c4d, true, true),
            (0xa1b2_c3d4, false, false),
            (0xa1b2_3c4d, false, true),
        ] {
            let mut file = header(magic, le);
            file.extend(record(le, 7, 250, &[1, 2, 3], 3));
            file.extend(record(le, 8, 1, &[4], 60));
            let got = parse(&file).unwrap();
            let unit = if nanos { 1 } else { 1_000 };
            assert_eq!(got.len(), 2);
            assert_eq!(got[0].ts_ns, 7_000_000_000 + 250 * unit);
            assert_eq!(got[0].data, [1, 2, 3]);
            assert!(got[0].is_complete());
            assert_eq!(got[1].ts_ns, 8_000_000_000 + unit);
            assert!(!got[1].is_complete(), "snap length cut it");
        }
    }

    #[test]
    fn cut_last_record_is_left_out_and_bad_headers_refused() {
        let mut file = header(0xa1b2_c3d4, true);
        file.extend(record(true, 1, 0, &[9; 10], 10));
        let full = file.len();
        file.extend(record(true, 2, 0, &[9; 10], 10));
        assert_eq!(parse(&file[..file.len() - 3]).unwrap().len(), 1);
        assert_eq!(parse(&file[..full + 5]).unwrap().len(), 1);
        assert!(parse(&file[..20]).is_err());
        let mut other = header(0xa1b2_c3d4, true);
        other[20] = 113; // Linux cooked capture
        assert!(
            parse(&other)
                .unwrap_err()
                .to_string()
                .contains("link type 113")
        );
        assert!(parse(&[0u8; 24]).unwrap_err().to_string().contains("magic"));
    }

    #[test]
    fn ip_packets_in_frames() {
        let f = ipv4_udp();
        let p = ip_in_ethernet(&f).unwrap();
        assert_eq!(p.src, IpAddr::from([192, 0, 2, 11]));
        assert_eq!(p.dst, IpAddr::from([192, 0, 2, 1]));
        assert_eq!(p.protocol, 17);
        assert_eq!(p.payload.len(), 10, "padding cut: {:?}", p.payload);
        // Cut short, or not IP.
        assert_eq!(ip_in_ethernet(&f[..20]), None);
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(ip_in_ethernet(&arp), None);
        // IPv6 with 4 bytes of TCP-numbered payload.
        let mut v6 = vec![0u8; 12];
        v6.extend([0x86, 0xdd, 0x60, 0, 0, 0, 0, 4, 6, 64]);
        v6.extend([0x20, 0x01, 0x0d, 0xb8]);
        v6.extend([0u8; 11]);
        v6.push(1);
        v6.extend([0x20, 0x01, 0x0d, 0xb8]);
        v6.extend([0u8; 11]);
        v6.push(2);
        v6.extend([1, 2, 3, 4, 0, 0]);
        let p = ip_in_ethernet(&v6).unwrap();
        assert_eq!(p.src, "2001:db8::1".parse::<IpAddr>().unwrap());
        assert_eq!(p.dst, "2001:db8::2".parse::<IpAddr>().unwrap());
        assert_eq!((p.protocol, p.payload), (6, &[1, 2, 3, 4][..]));
    }
}
