//! The system calls of the runtime, all through `nix`'s safe wrappers: the
//! clock, UDP sockets with their options, and `recvmsg` with the TTL / hop
//! limit and packet-info control messages.

use std::ffi::OsString;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;
use nix::sys::socket::{
    self, AddressFamily, ControlMessageOwned, MsgFlags, SockFlag, SockProtocol, SockType,
    SockaddrIn, SockaddrIn6, SockaddrLike, SockaddrStorage, sockopt,
};
use nix::time::ClockId;

use crate::path::{SINGLE_HOP_TTL, SOURCE_PORT_MAX, SOURCE_PORT_MIN, SessionKey};
use crate::rng::SplitMix64;

/// `CLOCK_MONOTONIC` in ns: the sessions' clock, and the clock of the
/// timerfd's absolute deadlines.
pub fn monotonic_ns() -> u64 {
    let ts = nix::time::clock_gettime(ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always readable");
    // Both fields are non-negative for CLOCK_MONOTONIC.
    (ts.tv_sec() as u64) * 1_000_000_000 + ts.tv_nsec() as u64
}

fn udp_socket(v6: bool) -> io::Result<OwnedFd> {
    let family = if v6 {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    };
    Ok(socket::socket(
        family,
        SockType::Datagram,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        SockProtocol::Udp,
    )?)
}

fn bind(fd: &OwnedFd, addr: SocketAddr) -> Result<(), Errno> {
    match addr {
        SocketAddr::V4(a) => socket::bind(fd.as_raw_fd(), &SockaddrIn::from(a)),
        SocketAddr::V6(a) => socket::bind(fd.as_raw_fd(), &SockaddrIn6::from(a)),
    }
}

/// A receiving socket on `port` (3784 or 4784) for every local address of
/// one family, delivering the TTL / hop limit, the destination address and
/// the ingress interface of each packet. IPv6 sockets are IPv6-only.
pub fn rx_socket(v6: bool, port: u16) -> io::Result<UdpSocket> {
    let fd = udp_socket(v6)?;
    let any: SocketAddr = if v6 {
        SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0).into()
    } else {
        SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port).into()
    };
    if v6 {
        socket::setsockopt(&fd, sockopt::Ipv6V6Only, &true)?;
        socket::setsockopt(&fd, sockopt::Ipv6RecvHopLimit, &true)?;
        socket::setsockopt(&fd, sockopt::Ipv6RecvPacketInfo, &true)?;
    } else {
        socket::setsockopt(&fd, sockopt::Ipv4RecvTtl, &true)?;
        socket::setsockopt(&fd, sockopt::Ipv4PacketInfo, &true)?;
    }
    bind(&fd, any)?;
    Ok(UdpSocket::from(fd))
}

/// The sending socket of a session (RFC 5881 §4, RFC 5883 §5): bound to the
/// local address and a free source port in 49152-65535 (`keep`, the port
/// of the session's previous socket, first: all control packets of a
/// session use one source port), TTL / hop limit 255, and bound to the
/// session's interface when it has one (`SO_BINDTODEVICE`, which needs
/// `CAP_NET_RAW`).
pub fn tx_socket(
    key: &SessionKey,
    rng: &mut SplitMix64,
    keep: Option<u16>,
) -> io::Result<UdpSocket> {
    let v6 = key.local.is_ipv6();
    let fd = udp_socket(v6)?;
    if let Some(interface) = &key.interface {
        socket::setsockopt(&fd, sockopt::BindToDevice, &OsString::from(interface))?;
    }
    let ttl = i32::from(SINGLE_HOP_TTL);
    if v6 {
        socket::setsockopt(&fd, sockopt::Ipv6V6Only, &true)?;
        socket::setsockopt(&fd, sockopt::Ipv6Ttl, &ttl)?;
    } else {
        socket::setsockopt(&fd, sockopt::Ipv4Ttl, &ttl)?;
    }
    // Nothing is ever read from it.
    socket::setsockopt(&fd, sockopt::RcvBuf, &1024)?;
    let span = u64::from(SOURCE_PORT_MAX - SOURCE_PORT_MIN) + 1;
    let mut last = Errno::EADDRINUSE;
    let kept = keep.filter(|p| (SOURCE_PORT_MIN..=SOURCE_PORT_MAX).contains(p));
    let random = std::iter::repeat_with(|| SOURCE_PORT_MIN + (rng.next_u64() % span) as u16);
    for port in kept.into_iter().chain(random).take(65) {
        match bind(&fd, SocketAddr::new(key.local, port)) {
            Ok(()) => return Ok(UdpSocket::from(fd)),
            Err(Errno::EADDRINUSE) => last = Errno::EADDRINUSE,
            Err(e) => return Err(e.into()),
        }
    }
    Err(last.into())
}

/// What `recvmsg` told about one datagram.
#[derive(Clone, Copy, Debug)]
pub struct Datagram {
    pub len: usize,
    pub source: IpAddr,
    /// Destination address of the IP header (`IP_PKTINFO` / `IPV6_PKTINFO`).
    pub destination: Option<IpAddr>,
    pub ifindex: Option<u32>,
    /// TTL / hop limit (`IP_RECVTTL` / `IPV6_RECVHOPLIMIT`).
    pub ttl: Option<u8>,
}

/// Control message space for the options [`rx_socket`] sets.
pub fn cmsg_buffer() -> Vec<u8> {
    nix::cmsg_space!(
        nix::libc::in6_pktinfo,
        nix::libc::c_int,
        nix::libc::in_pktinfo
    )
}

/// Receives one datagram without blocking (`WouldBlock` when none is
/// queued).
pub fn recv(sock: &UdpSocket, buf: &mut [u8], cmsg: &mut [u8]) -> io::Result<Datagram> {
    let mut iov = [IoSliceMut::new(buf)];
    let msg = socket::recvmsg::<SockaddrStorage>(
        sock.as_raw_fd(),
        &mut iov,
        Some(cmsg),
        MsgFlags::MSG_DONTWAIT,
    )?;
    let source = msg
        .address
        .as_ref()
        .and_then(storage_ip)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no source address"))?;
    let mut out = Datagram {
        len: msg.bytes,
        source,
        destination: None,
        ifindex: None,
        ttl: None,
    };
    for c in msg.cmsgs()? {
        match c {
            ControlMessageOwned::Ipv4Ttl(ttl) => out.ttl = u8::try_from(ttl).ok(),
            ControlMessageOwned::Ipv6HopLimit(ttl) => out.ttl = u8::try_from(ttl).ok(),
            ControlMessageOwned::Ipv4PacketInfo(info) => {
                out.destination = Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    info.ipi_addr.s_addr,
                ))));
                out.ifindex = u32::try_from(info.ipi_ifindex).ok();
            }
            ControlMessageOwned::Ipv6PacketInfo(info) => {
                out.destination = Some(IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr)));
                out.ifindex = Some(info.ipi6_ifindex);
            }
            _ => {}
        }
    }
    Ok(out)
}

fn storage_ip(addr: &SockaddrStorage) -> Option<IpAddr> {
    match addr.family()? {
        AddressFamily::Inet => addr.as_sockaddr_in().map(|a| IpAddr::V4(a.ip())),
        AddressFamily::Inet6 => addr.as_sockaddr_in6().map(|a| IpAddr::V6(a.ip())),
        _ => None,
    }
}

/// The name of an interface index.
pub fn interface_name(index: u32) -> Option<String> {
    nix::net::if_::if_indextoname(index)
        .ok()
        .map(|name| name.to_string_lossy().into_owned())
}

/// The index and MAC address of interface `name` in the calling thread's
/// network namespace (`getifaddrs`, which asks the kernel over netlink).
pub fn link(name: &str) -> io::Result<(u32, crate::frame::MacAddr)> {
    for entry in nix::ifaddrs::getifaddrs()? {
        if entry.interface_name != name {
            continue;
        }
        let Some(link) = entry.address.as_ref().and_then(|a| a.as_link_addr()) else {
            continue;
        };
        let Some(mac) = link.addr() else { continue };
        let index = u32::try_from(link.ifindex())
            .map_err(|_| io::Error::other(format!("interface {name}: index out of range")))?;
        return Ok((index, mac));
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("no interface {name} with a MAC address"),
    ))
}

/// Whether the kernel forwards IPv4 packets arriving on interface `name`
/// (`net.ipv4.conf.<name>.forwarding`, read in the calling thread's network
/// namespace: `/proc/sys/net` follows the reading thread's). `None` when it
/// cannot be read (no such interface).
pub fn ipv4_forwarding(name: &str) -> Option<bool> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return None;
    }
    let value =
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/conf/{name}/forwarding")).ok()?;
    Some(value.trim() != "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 5881 §4: a session's control packets keep one source port; a
    /// socket reopened after a send error binds the previous port again.
    #[test]
    fn a_reopened_tx_socket_keeps_its_source_port() {
        let key = SessionKey::multi_hop("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
        let mut rng = SplitMix64::new(7);
        let first = tx_socket(&key, &mut rng, None).unwrap();
        let port = first.local_addr().unwrap().port();
        assert!((SOURCE_PORT_MIN..=SOURCE_PORT_MAX).contains(&port));
        drop(first);
        for _ in 0..20 {
            let again = tx_socket(&key, &mut rng, Some(port)).unwrap();
            assert_eq!(again.local_addr().unwrap().port(), port);
        }
        // While the port is taken, another one in the range.
        let held = tx_socket(&key, &mut rng, Some(port)).unwrap();
        let other = tx_socket(&key, &mut rng, Some(port)).unwrap();
        let p = other.local_addr().unwrap().port();
        assert_ne!(p, port);
        assert!((SOURCE_PORT_MIN..=SOURCE_PORT_MAX).contains(&p));
        drop(held);
        // A port outside the range is not reused.
        let s = tx_socket(&key, &mut rng, Some(4000)).unwrap();
        assert!(s.local_addr().unwrap().port() >= SOURCE_PORT_MIN);
    }

    #[test]
    fn forwarding_of_odd_names_is_not_read() {
        for name in ["", ".", "..", "../../kernel/x", "a/b"] {
            assert_eq!(ipv4_forwarding(name), None, "{name:?}");
        }
        assert_eq!(ipv4_forwarding("no-such-interface0"), None);
    }

    /// The interface, its MAC and its forwarding flag are read in the
    /// calling thread's network namespace (the runtime thread enters the
    /// session's), not the process's: a thread with a namespace of its own
    /// and a veth pair there (both ends inside; nothing addressed, nothing
    /// up) sees it, the rest of the process does not. Needs root.
    #[test]
    fn links_and_sysctls_follow_the_thread_namespace() {
        const NAME: &str = "bfdtest0";
        let seen = std::thread::spawn(|| {
            match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
                Ok(()) => {}
                Err(Errno::EPERM) => return None,
                Err(e) => panic!("unshare: {e}"),
            }
            let ok = std::process::Command::new("ip")
                .args(["link", "add", NAME, "address", "02:00:00:00:00:42"])
                .args(["type", "veth", "peer", "name", "bfdtest1"])
                .status()
                .expect("`ip` runs")
                .success();
            assert!(ok, "ip link add {NAME} type veth");
            Some((link(NAME).expect("the dummy link"), ipv4_forwarding(NAME)))
        })
        .join()
        .expect("the test thread panicked");
        let Some(((index, mac), forwarding)) = seen else {
            super::super::skip_or_fail("no privilege for a network namespace");
            return;
        };
        assert!(index > 0);
        assert_eq!(mac, [0x02, 0, 0, 0, 0, 0x42]);
        assert_eq!(forwarding, Some(false), "a new namespace does not forward");
        // Not in this thread's namespace.
        assert!(link(NAME).is_err());
        assert_eq!(ipv4_forwarding(NAME), None);
    }
}
