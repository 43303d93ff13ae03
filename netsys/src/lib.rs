//! Socket options and calls that no safe crate wraps, behind a safe API:
//! the ONE audited place of `unsafe` for sockets (project rule: route such
//! options through one module; `unsafe_code = "forbid"` everywhere else).
//!
//! - [`set_tcp_md5sig`]: TCP MD5 signatures (RFC 2385, `TCP_MD5SIG`), not in
//!   `socket2` 0.6, `rustix` 1 or `nix` 0.31;
//! - [`set_ip_minttl`] / [`set_ipv6_minhopcount`]: GTSM (RFC 5082) receive
//!   checks, with their read-back getters;
//! - [`packet`]: `AF_PACKET` sockets bound to an interface and ethertype
//!   (`bind(2)` with a `sockaddr_ll`) with a classic BPF filter
//!   (`SO_ATTACH_FILTER`), for the BFD echo function.
//!
//! And the one allocator call the daemons make, [`release_free_heap`]
//! (glibc's `malloc_trim`), which no safe crate wraps either.
//!
//! All `unsafe` lives in the private `sys` module (every block argued with
//! a `// SAFETY:` comment); the crate denies `unsafe_code` elsewhere.
//! Errors never hold key material.

use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::BorrowedFd;

pub mod packet;
mod sys;

pub use packet::{PacketSocket, SockFilter};
use sys::{KernelAddr, TcpMd5Sig};

/// The longest TCP MD5 key the kernel accepts (`TCP_MD5SIG_MAXKEYLEN`).
pub const TCP_MD5SIG_MAXKEYLEN: usize = sys::TCP_MD5SIG_MAXKEYLEN;
/// `IP_MINTTL` on Linux.
pub const IP_MINTTL: i32 = 21;
/// `IPV6_MINHOPCOUNT` on Linux.
pub const IPV6_MINHOPCOUNT: i32 = 73;

const _: () = assert!(IP_MINTTL == libc::IP_MINTTL);
const _: () = assert!(IPV6_MINHOPCOUNT == libc::IPV6_MINHOPCOUNT);

/// Gives the pages the allocator holds free back to the system (glibc's
/// `malloc_trim(0)`); whether some memory was released. glibc returns freed memory
/// only from the top of a heap by itself: after the big transient buffers of a start
/// (list responses decoded, then dropped) the free pages below live data stay in the
/// process's RSS. Elsewhere (musl, other systems) nothing happens: false. It walks
/// every arena under its lock: call it at a quiet moment, off the async workers.
pub fn release_free_heap() -> bool {
    sys::malloc_trim()
}

/// The address family of a socket (`SO_DOMAIN`).
fn domain(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN)
}

/// The peer address as the kernel must see it on a socket of `domain`: an
/// IPv4 peer on an IPv6 socket is IPv4-mapped (`::ffff:a.b.c.d`), the only
/// form the kernel matches there.
fn kernel_addr(domain: libc::c_int, peer: SocketAddr) -> io::Result<KernelAddr> {
    match (domain, peer) {
        (libc::AF_INET, SocketAddr::V4(a)) => Ok(KernelAddr::V4(a)),
        (libc::AF_INET, SocketAddr::V6(a)) => match a.ip().to_ipv4_mapped() {
            Some(v4) => Ok(KernelAddr::V4(SocketAddrV4::new(v4, a.port()))),
            None => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("TCP MD5 peer {peer} is IPv6 but the socket is IPv4"),
            )),
        },
        (libc::AF_INET6, SocketAddr::V4(a)) => Ok(KernelAddr::V6(SocketAddrV6::new(
            a.ip().to_ipv6_mapped(),
            a.port(),
            0,
            0,
        ))),
        (libc::AF_INET6, SocketAddr::V6(a)) => Ok(KernelAddr::V6(a)),
        (d, _) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("TCP MD5 needs an AF_INET or AF_INET6 socket, not family {d}"),
        )),
    }
}

/// Installs (`Some` non-empty key) or deletes (`None` or empty key) the TCP
/// MD5 key (RFC 2385) used with `peer` on `fd` (a TCP socket, listening or
/// not yet connected). Only the peer's address counts, not its port.
///
/// A key longer than [`TCP_MD5SIG_MAXKEYLEN`] bytes is refused with
/// `InvalidInput`, never truncated. Deleting a key that is not installed
/// succeeds (the kernel's `ENOENT` is not an error here). IPv4 peers on an
/// IPv6 socket are installed IPv4-mapped. Error texts never hold the key.
pub fn set_tcp_md5sig(fd: BorrowedFd<'_>, peer: SocketAddr, key: Option<&[u8]>) -> io::Result<()> {
    let key = key.unwrap_or_default();
    if key.len() > TCP_MD5SIG_MAXKEYLEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "TCP MD5 key is {} bytes, the kernel takes at most {TCP_MD5SIG_MAXKEYLEN}",
                key.len()
            ),
        ));
    }
    let addr = kernel_addr(domain(fd)?, peer)?;
    let sig = TcpMd5Sig::new(&addr, key);
    match sys::setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_MD5SIG, &sig) {
        Err(e) if key.is_empty() && e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        r => r,
    }
}

/// `IP_MINTTL`: IPv4 segments with a lower TTL are dropped (GTSM, RFC 5082).
/// 0 disables the check.
pub fn set_ip_minttl(fd: BorrowedFd<'_>, ttl: u8) -> io::Result<()> {
    sys::setsockopt(fd, libc::IPPROTO_IP, IP_MINTTL, &libc::c_int::from(ttl))
}

/// The `IP_MINTTL` of `fd`.
pub fn ip_minttl(fd: BorrowedFd<'_>) -> io::Result<u8> {
    let v = sys::getsockopt_int(fd, libc::IPPROTO_IP, IP_MINTTL)?;
    u8::try_from(v).map_err(|_| io::Error::other(format!("IP_MINTTL out of range: {v}")))
}

/// `IPV6_MINHOPCOUNT`: IPv6 packets with a lower hop limit are dropped
/// (GTSM). 0 disables the check.
pub fn set_ipv6_minhopcount(fd: BorrowedFd<'_>, hops: u8) -> io::Result<()> {
    sys::setsockopt(
        fd,
        libc::IPPROTO_IPV6,
        IPV6_MINHOPCOUNT,
        &libc::c_int::from(hops),
    )
}

/// The `IPV6_MINHOPCOUNT` of `fd`.
pub fn ipv6_minhopcount(fd: BorrowedFd<'_>) -> io::Result<u8> {
    let v = sys::getsockopt_int(fd, libc::IPPROTO_IPV6, IPV6_MINHOPCOUNT)?;
    u8::try_from(v).map_err(|_| io::Error::other(format!("IPV6_MINHOPCOUNT out of range: {v}")))
}

/// GTSM for a socket of `peer`'s family: [`set_ip_minttl`] for IPv4 peers,
/// [`set_ipv6_minhopcount`] for IPv6 peers.
pub fn set_min_ttl_for(fd: BorrowedFd<'_>, peer: IpAddr, ttl: u8) -> io::Result<()> {
    match peer {
        IpAddr::V4(_) => set_ip_minttl(fd, ttl),
        IpAddr::V6(_) => set_ipv6_minhopcount(fd, ttl),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::{Domain, Protocol, Socket, Type};
    use std::mem::{align_of, offset_of, size_of};
    use std::os::fd::AsFd;

    fn tcp(domain: Domain) -> Socket {
        Socket::new(domain, Type::STREAM, Some(Protocol::TCP)).unwrap()
    }

    fn v6_available() -> bool {
        Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP)).is_ok()
    }

    /// A test that cannot run here (no privilege for a network namespace,
    /// no IPv6) fails, unless `METALLB_TEST_ALLOW_SKIP=1` explicitly allows
    /// skipping it: a skipped test must not pass unnoticed.
    pub(crate) fn skip_or_fail(why: &str) {
        if std::env::var_os("METALLB_TEST_ALLOW_SKIP").is_some_and(|v| v == "1") {
            eprintln!("skipped ({why}): METALLB_TEST_ALLOW_SKIP=1");
        } else {
            panic!("cannot run: {why} (METALLB_TEST_ALLOW_SKIP=1 skips instead)");
        }
    }

    #[test]
    fn tcp_md5sig_layout_mirrors_the_kernel() {
        assert_eq!(size_of::<libc::sockaddr_storage>(), 128);
        assert_eq!(offset_of!(TcpMd5Sig, tcpm_addr), 0);
        assert_eq!(offset_of!(TcpMd5Sig, tcpm_flags), 128);
        assert_eq!(offset_of!(TcpMd5Sig, tcpm_prefixlen), 129);
        assert_eq!(offset_of!(TcpMd5Sig, tcpm_keylen), 130);
        assert_eq!(offset_of!(TcpMd5Sig, tcpm_ifindex), 132);
        assert_eq!(offset_of!(TcpMd5Sig, tcpm_key), 136);
        assert_eq!(size_of::<TcpMd5Sig>(), 216);
        assert_eq!(
            align_of::<TcpMd5Sig>(),
            align_of::<libc::sockaddr_storage>()
        );
    }

    #[test]
    fn tcp_md5sig_contents() {
        let sig = TcpMd5Sig::new(&KernelAddr::V4("192.0.2.1:179".parse().unwrap()), b"key");
        assert_eq!(sig.tcpm_addr.ss_family, libc::AF_INET as libc::sa_family_t);
        assert_eq!(sig.tcpm_keylen, 3);
        assert_eq!(&sig.tcpm_key[..4], b"key\0");
        assert_eq!(
            (sig.tcpm_flags, sig.tcpm_prefixlen, sig.tcpm_ifindex),
            (0, 0, 0)
        );
        let sig = TcpMd5Sig::new(
            &KernelAddr::V6("[2001:db8::1]:179".parse().unwrap()),
            &[7; 80],
        );
        assert_eq!(sig.tcpm_addr.ss_family, libc::AF_INET6 as libc::sa_family_t);
        assert_eq!(sig.tcpm_keylen, 80);
    }

    #[test]
    fn v4_peer_on_v6_socket_is_mapped() {
        let KernelAddr::V6(a) =
            kernel_addr(libc::AF_INET6, "192.0.2.1:179".parse().unwrap()).unwrap()
        else {
            panic!("not mapped")
        };
        assert_eq!(a.ip().to_string(), "::ffff:192.0.2.1");
        let KernelAddr::V4(a) =
            kernel_addr(libc::AF_INET, "[::ffff:192.0.2.1]:179".parse().unwrap()).unwrap()
        else {
            panic!("not unmapped")
        };
        assert_eq!(a.ip().to_string(), "192.0.2.1");
        let e = kernel_addr(libc::AF_INET, "[2001:db8::1]:179".parse().unwrap())
            .err()
            .unwrap();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn key_too_long_is_refused_not_truncated() {
        let s = tcp(Domain::IPV4);
        let key = [b'k'; TCP_MD5SIG_MAXKEYLEN + 1];
        let e =
            set_tcp_md5sig(s.as_fd(), "192.0.2.1:179".parse().unwrap(), Some(&key)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(!e.to_string().contains("kkkk"), "{e}");
        // Exactly the maximum is fine.
        set_tcp_md5sig(
            s.as_fd(),
            "192.0.2.1:179".parse().unwrap(),
            Some(&key[..TCP_MD5SIG_MAXKEYLEN]),
        )
        .unwrap();
    }

    /// A socket on loopback, bound and listening: no packet is sent.
    #[test]
    fn key_is_set_and_deleted_on_a_real_socket() {
        let s = tcp(Domain::IPV4);
        s.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        s.listen(1).unwrap();
        let peer: SocketAddr = "192.0.2.1:179".parse().unwrap();
        set_tcp_md5sig(s.as_fd(), peer, Some(b"s3cret")).unwrap();
        // Replacing a key is allowed.
        set_tcp_md5sig(s.as_fd(), peer, Some(b"other")).unwrap();
        set_tcp_md5sig(s.as_fd(), peer, None).unwrap();
        // Deleting again is not an error; an empty key deletes too.
        set_tcp_md5sig(s.as_fd(), peer, Some(b"")).unwrap();
        // Not connected yet: an active socket takes a key too.
        let a = tcp(Domain::IPV4);
        set_tcp_md5sig(a.as_fd(), peer, Some(b"s3cret")).unwrap();
    }

    #[test]
    fn keys_on_an_ipv6_socket_for_both_families() {
        if !v6_available() {
            skip_or_fail("no IPv6 sockets here");
            return;
        }
        let s = tcp(Domain::IPV6);
        set_tcp_md5sig(s.as_fd(), "[2001:db8::1]:179".parse().unwrap(), Some(b"k6")).unwrap();
        set_tcp_md5sig(s.as_fd(), "192.0.2.1:179".parse().unwrap(), Some(b"k4")).unwrap();
        set_tcp_md5sig(s.as_fd(), "192.0.2.1:179".parse().unwrap(), None).unwrap();
    }

    #[test]
    fn not_a_tcp_socket_is_an_error() {
        let u = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
        assert!(set_tcp_md5sig(u.as_fd(), "192.0.2.1:179".parse().unwrap(), Some(b"k")).is_err());
    }

    #[test]
    fn minttl_is_set_and_read_back() {
        let s = tcp(Domain::IPV4);
        assert_eq!(ip_minttl(s.as_fd()).unwrap(), 0);
        set_ip_minttl(s.as_fd(), 254).unwrap();
        assert_eq!(ip_minttl(s.as_fd()).unwrap(), 254);
        set_min_ttl_for(s.as_fd(), "192.0.2.1".parse().unwrap(), 255).unwrap();
        assert_eq!(ip_minttl(s.as_fd()).unwrap(), 255);
        if !v6_available() {
            skip_or_fail("no IPv6 sockets here");
            return;
        }
        let s = tcp(Domain::IPV6);
        set_ipv6_minhopcount(s.as_fd(), 255).unwrap();
        assert_eq!(ipv6_minhopcount(s.as_fd()).unwrap(), 255);
    }
}
