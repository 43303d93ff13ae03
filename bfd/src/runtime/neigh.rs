//! The peers' MAC addresses for the echo function, from the kernel's IPv4
//! neighbour (ARP) table, dumped over rtnetlink (`RTM_GETNEIGH`) in the
//! runtime thread's network namespace. The control packets we send every
//! interval keep the peer's entry in the table.
//!
//! One dump serves every session: the table is fetched again when it is
//! older than [`REFRESH_NS`], or [`RETRY_NS`] after a miss, so a changed
//! MAC (a replaced router) is followed within a second, at a cost of at
//! most one small dump per second whatever the number of sessions.

use std::collections::HashMap;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;

use nix::sys::socket::{
    self, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, sockopt,
};
use nix::sys::time::TimeVal;

use crate::frame::MacAddr;

/// Age after which the table is fetched again.
pub(super) const REFRESH_NS: u64 = 1_000_000_000;
/// Age after which a miss fetches the table again.
pub(super) const RETRY_NS: u64 = 100_000_000;

const NLMSG_HDR_LEN: usize = 16;
const NDMSG_LEN: usize = 12;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NLM_F_REQUEST: u16 = 0x01;
/// `NLM_F_ROOT | NLM_F_MATCH`.
const NLM_F_DUMP: u16 = 0x300;
const AF_INET: u8 = 2;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
/// `NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_NOARP |
/// NUD_PERMANENT`: an entry with a usable link-layer address (not
/// `INCOMPLETE`, `FAILED` or `NONE`).
const NUD_VALID: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80;

/// The IPv4 neighbours with a usable MAC, by (interface index, address).
pub(super) type Table = HashMap<(u32, Ipv4Addr), MacAddr>;

/// A cached copy of the neighbour table.
#[derive(Debug, Default)]
pub(super) struct Cache {
    table: Table,
    fetched_at: Option<u64>,
}

impl Cache {
    /// The MAC of `addr` on interface `ifindex`, fetching the table again
    /// if it is stale (see the module documentation).
    pub(super) fn lookup(&mut self, ifindex: u32, addr: Ipv4Addr, now: u64) -> Option<MacAddr> {
        let age = self.fetched_at.map(|at| now.saturating_sub(at));
        let hit = self.table.get(&(ifindex, addr)).copied();
        let fetch = match (age, hit) {
            (None, _) => true,
            (Some(age), Some(_)) => age >= REFRESH_NS,
            (Some(age), None) => age >= RETRY_NS,
        };
        if !fetch {
            return hit;
        }
        // A failed dump keeps the old table and waits as after a fetch.
        self.fetched_at = Some(now);
        if let Ok(table) = dump() {
            self.table = table;
        }
        self.table.get(&(ifindex, addr)).copied()
    }
}

/// `RTM_GETNEIGH` dump request for IPv4 neighbours.
fn request(seq: u32) -> [u8; NLMSG_HDR_LEN + NDMSG_LEN] {
    let mut m = [0u8; NLMSG_HDR_LEN + NDMSG_LEN];
    m[0..4].copy_from_slice(&((NLMSG_HDR_LEN + NDMSG_LEN) as u32).to_ne_bytes());
    m[4..6].copy_from_slice(&RTM_GETNEIGH.to_ne_bytes());
    m[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    m[8..12].copy_from_slice(&seq.to_ne_bytes());
    // Port id 0: the kernel. ndmsg: family AF_INET, the rest 0.
    m[NLMSG_HDR_LEN] = AF_INET;
    m
}

fn ne16(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn ne32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Parses one `recv` of the dump's answer into `table`; `Ok(true)` at its
/// end (`NLMSG_DONE`). Messages of another sequence number are skipped;
/// a malformed message ends the parse with an error. Never panics.
fn parse(buf: &[u8], seq: u32, table: &mut Table) -> io::Result<bool> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("netlink: {what}"));
    let mut at = 0;
    while at + NLMSG_HDR_LEN <= buf.len() {
        let len = ne32(buf, at) as usize;
        if len < NLMSG_HDR_LEN || at + len > buf.len() {
            return Err(bad("message length"));
        }
        let kind = ne16(buf, at + 4);
        let msg = &buf[at + NLMSG_HDR_LEN..at + len];
        let ours = ne32(buf, at + 8) == seq;
        at += align4(len);
        if !ours {
            continue;
        }
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let code = msg
                    .get(..4)
                    .map(|e| i32::from_ne_bytes([e[0], e[1], e[2], e[3]]));
                return match code {
                    Some(0) => Ok(true),
                    Some(e) => Err(io::Error::from_raw_os_error(e.saturating_neg())),
                    None => Err(bad("short error message")),
                };
            }
            RTM_NEWNEIGH => {
                if let Some((key, mac)) = neighbour(msg) {
                    table.insert(key, mac);
                }
            }
            _ => {}
        }
    }
    Ok(false)
}

/// One `RTM_NEWNEIGH` body (`ndmsg` and attributes): an IPv4 neighbour in
/// a valid state with a 6-byte link-layer address, or `None`.
fn neighbour(msg: &[u8]) -> Option<((u32, Ipv4Addr), MacAddr)> {
    let nd = msg.get(..NDMSG_LEN)?;
    if nd[0] != AF_INET || ne16(nd, 8) & NUD_VALID == 0 {
        return None;
    }
    let ifindex = u32::try_from(i32::from_ne_bytes([nd[4], nd[5], nd[6], nd[7]])).ok()?;
    let (mut dst, mut lladdr) = (None, None);
    let mut at = NDMSG_LEN;
    while at + 4 <= msg.len() {
        let len = usize::from(ne16(msg, at));
        if len < 4 || at + len > msg.len() {
            return None;
        }
        let data = &msg[at + 4..at + len];
        match ne16(msg, at + 2) {
            NDA_DST => dst = <[u8; 4]>::try_from(data).ok().map(Ipv4Addr::from),
            NDA_LLADDR => lladdr = MacAddr::try_from(data).ok(),
            _ => {}
        }
        at += align4(len);
    }
    Some(((ifindex, dst?), lladdr?))
}

/// Dumps the IPv4 neighbour table of the calling thread's network
/// namespace (safe `nix` calls; no privilege needed).
fn dump() -> io::Result<Table> {
    let fd = socket::socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    // The kernel answers at once; never hang the BFD thread on it.
    socket::setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(0, 200_000))?;
    let kernel = NetlinkAddr::new(0, 0);
    socket::bind(fd.as_raw_fd(), &kernel)?;
    const SEQ: u32 = 1;
    socket::sendto(fd.as_raw_fd(), &request(SEQ), &kernel, MsgFlags::empty())?;
    let mut buf = vec![0u8; 32 * 1024];
    let mut table = Table::new();
    // Bounded: a dump of this many parts would be a table far beyond any
    // node's.
    for _ in 0..1_000 {
        let n = socket::recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty())?;
        if parse(&buf[..n], SEQ, &mut table)? {
            return Ok(table);
        }
    }
    Err(io::Error::other("netlink: neighbour dump without an end"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(len: usize, kind: u16, seq: u32) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(&(len as u32).to_ne_bytes());
        h.extend_from_slice(&kind.to_ne_bytes());
        h.extend_from_slice(&0x2u16.to_ne_bytes()); // NLM_F_MULTI
        h.extend_from_slice(&seq.to_ne_bytes());
        h.extend_from_slice(&0u32.to_ne_bytes());
        h
    }

    fn attr(kind: u16, data: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(data);
        a.resize(align4(a.len()), 0);
        a
    }

    /// An RTM_NEWNEIGH message.
    fn neigh(seq: u32, family: u8, ifindex: i32, state: u16, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut body = vec![family, 0, 0, 0];
        body.extend_from_slice(&ifindex.to_ne_bytes());
        body.extend_from_slice(&state.to_ne_bytes());
        body.extend_from_slice(&[0, 1]); // flags, type
        for a in attrs {
            body.extend_from_slice(a);
        }
        let mut m = header(NLMSG_HDR_LEN + body.len(), RTM_NEWNEIGH, seq);
        m.extend_from_slice(&body);
        m
    }

    const MAC: MacAddr = [0x02, 0, 0, 0, 0, 0x01];

    #[test]
    fn the_request_is_an_ipv4_neighbour_dump() {
        let r = request(7);
        assert_eq!(ne32(&r, 0), 28);
        assert_eq!(ne16(&r, 4), RTM_GETNEIGH);
        assert_eq!(ne16(&r, 6), 0x301);
        assert_eq!(ne32(&r, 8), 7);
        assert_eq!(r[16], AF_INET);
        assert!(r[17..].iter().all(|b| *b == 0));
    }

    #[test]
    fn usable_ipv4_entries_are_kept() {
        let dst = |a: [u8; 4]| attr(NDA_DST, &a);
        let ll = |m: &[u8]| attr(NDA_LLADDR, m);
        let mut buf = Vec::new();
        // Reachable, with an unknown attribute (NDA_CACHEINFO) between.
        buf.extend(neigh(
            1,
            AF_INET,
            4,
            0x02,
            &[dst([192, 0, 2, 1]), attr(3, &[0; 16]), ll(&MAC)],
        ));
        // Stale counts; so does permanent.
        buf.extend(neigh(
            1,
            AF_INET,
            4,
            0x04,
            &[dst([192, 0, 2, 2]), ll(&[2; 6])],
        ));
        buf.extend(neigh(
            1,
            AF_INET,
            5,
            0x80,
            &[dst([192, 0, 2, 1]), ll(&[5; 6])],
        ));
        // Incomplete / failed: no usable MAC.
        buf.extend(neigh(
            1,
            AF_INET,
            4,
            0x01,
            &[dst([192, 0, 2, 3]), ll(&[3; 6])],
        ));
        buf.extend(neigh(
            1,
            AF_INET,
            4,
            0x20,
            &[dst([192, 0, 2, 4]), ll(&[4; 6])],
        ));
        // No link-layer address (a point-to-point device), IPv6, another
        // request's sequence number.
        buf.extend(neigh(1, AF_INET, 4, 0x40, &[dst([192, 0, 2, 5])]));
        buf.extend(neigh(
            1,
            10,
            4,
            0x02,
            &[attr(NDA_DST, &[0x20; 16]), ll(&MAC)],
        ));
        buf.extend(neigh(9, AF_INET, 4, 0x02, &[dst([192, 0, 2, 6]), ll(&MAC)]));
        let mut table = Table::new();
        assert!(!parse(&buf, 1, &mut table).unwrap(), "no end yet");
        let ip = |d| Ipv4Addr::new(192, 0, 2, d);
        assert_eq!(table.len(), 3, "{table:?}");
        assert_eq!(table[&(4, ip(1))], MAC);
        assert_eq!(table[&(4, ip(2))], [2; 6]);
        assert_eq!(table[&(5, ip(1))], [5; 6]);
        // The end of the dump.
        let done = [header(20, NLMSG_DONE, 1), vec![0; 4]].concat();
        assert!(parse(&done, 1, &mut table).unwrap());
    }

    #[test]
    fn errors_and_malformed_messages_are_errors_not_panics() {
        let mut table = Table::new();
        let err = [header(20, NLMSG_ERROR, 1), (-13i32).to_ne_bytes().to_vec()].concat();
        let e = parse(&err, 1, &mut table).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(13));
        let ack = [header(20, NLMSG_ERROR, 1), 0i32.to_ne_bytes().to_vec()].concat();
        assert!(parse(&ack, 1, &mut table).unwrap());
        // A length beyond the buffer.
        let mut m = neigh(1, AF_INET, 4, 0x02, &[attr(NDA_DST, &[192, 0, 2, 1])]);
        m[0..4].copy_from_slice(&500u32.to_ne_bytes());
        assert!(parse(&m, 1, &mut table).is_err());
        // Every truncation of a valid message: an error or a partial parse.
        let m = neigh(
            1,
            AF_INET,
            4,
            0x02,
            &[attr(NDA_DST, &[192, 0, 2, 1]), attr(NDA_LLADDR, &MAC)],
        );
        for n in 0..m.len() {
            let mut t = Table::new();
            let _ = parse(&m[..n], 1, &mut t);
            assert!(t.is_empty(), "cut at {n}");
        }
        // A bad attribute length inside a message drops that entry.
        let mut m = m.clone();
        m[NLMSG_HDR_LEN + NDMSG_LEN..][..2].copy_from_slice(&300u16.to_ne_bytes());
        let mut t = Table::new();
        assert!(!parse(&m, 1, &mut t).unwrap());
        assert!(t.is_empty());
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = parse(&bytes, 1, &mut Table::new());
        }
    }

    /// The real dump in this (test) process's namespace: no privilege is
    /// needed, and whatever the table holds, the answer parses to its end.
    #[test]
    fn the_kernel_answers_the_dump() {
        dump().expect("neighbour dump");
    }

    /// In a network namespace of a thread of its own (needs root): a
    /// permanent neighbour added with `ip neigh` is in the dump, on its
    /// interface, with its MAC; one on another interface is apart.
    #[test]
    fn a_neighbour_added_to_the_kernel_is_parsed_from_the_dump() {
        let seen = std::thread::spawn(|| {
            match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
                Ok(()) => {}
                Err(nix::errno::Errno::EPERM) => return None,
                Err(e) => panic!("unshare: {e}"),
            }
            let ip = |args: &[&str]| {
                let ok = std::process::Command::new("ip")
                    .args(args)
                    .status()
                    .expect("`ip` runs")
                    .success();
                assert!(ok, "ip {args:?}");
            };
            ip(&[
                "link", "add", "bfdn0", "type", "veth", "peer", "name", "bfdn1",
            ]);
            ip(&["link", "set", "bfdn0", "up"]);
            ip(&["link", "set", "bfdn1", "up"]);
            for (dev, addr, mac) in [
                ("bfdn0", "192.0.2.7", "02:00:00:00:00:07"),
                ("bfdn1", "198.51.100.9", "02:00:00:00:00:09"),
            ] {
                ip(&[
                    "neigh",
                    "add",
                    addr,
                    "lladdr",
                    mac,
                    "dev",
                    dev,
                    "nud",
                    "permanent",
                ]);
            }
            let index = |dev| nix::net::if_::if_nametoindex(dev).expect("the veth");
            Some((dump().expect("dump"), index("bfdn0"), index("bfdn1")))
        })
        .join()
        .expect("the test thread panicked");
        let Some((table, i0, i1)) = seen else {
            super::super::skip_or_fail("no privilege for a network namespace");
            return;
        };
        assert_eq!(
            table.get(&(i0, Ipv4Addr::new(192, 0, 2, 7))),
            Some(&[0x02, 0, 0, 0, 0, 0x07]),
            "{table:?}"
        );
        assert_eq!(
            table.get(&(i1, Ipv4Addr::new(198, 51, 100, 9))),
            Some(&[0x02, 0, 0, 0, 0, 0x09])
        );
        assert_eq!(table.get(&(i1, Ipv4Addr::new(192, 0, 2, 7))), None);
        assert_eq!(table.len(), 2, "{table:?}");
    }
}
