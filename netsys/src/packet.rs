//! `AF_PACKET` sockets with a classic BPF filter, behind a safe API: what
//! a sender of hand-built Ethernet frames needs (the BFD echo function,
//! RFC 5880 §6.4, which must reach the peer's MAC with a packet addressed
//! to ourselves, and catch it on its way back before the IP stack drops it
//! as martian).
//!
//! The two system calls without a safe wrapper in `socket2`, `nix` or
//! `rustix`, `bind(2)` with a `sockaddr_ll` and
//! `setsockopt(SO_ATTACH_FILTER)`, are in the private `sys` module; this
//! module validates their inputs. Creating, reading and writing the socket
//! go through `socket2`.
//!
//! Privileges: `CAP_NET_RAW` (in the socket's network namespace).

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};

use socket2::{Domain, Socket, Type};

use crate::sys;

/// One classic BPF instruction, as the kernel's `struct sock_filter`
/// (`<linux/filter.h>`): opcode, jump offsets if true / if false (relative
/// to the next instruction), constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SockFilter {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

impl SockFilter {
    /// A non-jump instruction.
    pub const fn stmt(code: u16, k: u32) -> SockFilter {
        SockFilter {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }

    /// A conditional jump.
    pub const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> SockFilter {
        SockFilter { code, jt, jf, k }
    }
}

impl From<SockFilter> for libc::sock_filter {
    fn from(i: SockFilter) -> libc::sock_filter {
        libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        }
    }
}

/// The longest program the kernel accepts (`BPF_MAXINSNS`).
pub const MAX_FILTER_LEN: usize = 4096;

/// `ETH_P_IP`: IPv4 frames.
pub const ETHERTYPE_IPV4: u16 = 0x0800;

/// Attaches the classic BPF program `prog` to `fd` (`SO_ATTACH_FILTER`;
/// any socket type). The kernel checks the program (valid opcodes, jumps
/// in range, ends with a return) and refuses a bad one with `EINVAL`; an
/// empty program or one longer than [`MAX_FILTER_LEN`] is refused here
/// with `InvalidInput`. It replaces any filter attached before.
pub fn attach_filter(fd: BorrowedFd<'_>, prog: &[SockFilter]) -> io::Result<()> {
    if prog.is_empty() || prog.len() > MAX_FILTER_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a BPF program has 1 to {MAX_FILTER_LEN} instructions, not {}",
                prog.len()
            ),
        ));
    }
    let prog: Vec<libc::sock_filter> = prog.iter().copied().map(Into::into).collect();
    sys::attach_filter(fd, &prog)
}

/// Binds the `AF_PACKET` socket `fd` to interface `ifindex` (0: every
/// interface) and frames of `ethertype` (host order): from then on it
/// receives those frames (through its filter, if any), and a frame
/// written to it leaves through `ifindex`.
pub fn bind_packet(fd: BorrowedFd<'_>, ifindex: u32, ethertype: u16) -> io::Result<()> {
    let ifindex = i32::try_from(ifindex).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface index {ifindex} is out of range"),
        )
    })?;
    sys::bind_packet(fd, ifindex, ethertype)
}

/// A raw `AF_PACKET` socket bound to one interface and ethertype, with a
/// filter: it sends whole Ethernet frames out of that interface and
/// receives the frames its filter accepts. Non-blocking, close-on-exec.
#[derive(Debug)]
pub struct PacketSocket {
    socket: Socket,
    ifindex: u32,
}

impl PacketSocket {
    /// Opens the socket (needs `CAP_NET_RAW`). It is created with protocol
    /// 0, which receives nothing, then filtered, then bound: no unfiltered
    /// frame is ever queued to it. `ifindex` must be an interface (not 0).
    pub fn open(ifindex: u32, ethertype: u16, filter: &[SockFilter]) -> io::Result<PacketSocket> {
        if ifindex == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a packet socket that sends needs an interface (index 0)",
            ));
        }
        let socket = Socket::new(Domain::PACKET, Type::RAW.nonblocking().cloexec(), None)?;
        attach_filter(socket.as_fd(), filter)?;
        bind_packet(socket.as_fd(), ifindex, ethertype)?;
        Ok(PacketSocket { socket, ifindex })
    }

    /// The interface it is bound to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Sends one whole Ethernet frame (header included) out of the
    /// interface. Does not wait: a full queue is `WouldBlock` (the frame is
    /// dropped, as a congested link would drop it); a short write is
    /// `WriteZero`.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        let n = (&self.socket).write(frame)?;
        if n != frame.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short packet write: {n} of {} bytes", frame.len()),
            ));
        }
        Ok(())
    }

    /// Receives one frame into `buf` (truncated to its length, or to what
    /// the filter kept); returns the bytes written. `WouldBlock` when none
    /// is queued.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        (&self.socket).read(buf)
    }
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn sock_filter_mirrors_the_kernel() {
        assert_eq!(size_of::<libc::sock_filter>(), 8);
        assert_eq!(offset_of!(libc::sock_filter, jt), 2);
        assert_eq!(offset_of!(libc::sock_filter, k), 4);
        let i: libc::sock_filter = SockFilter::jump(0x15, 0x0800, 1, 2).into();
        assert_eq!((i.code, i.jt, i.jf, i.k), (0x15, 1, 2, 0x0800));
    }

    #[test]
    fn program_length_is_checked_before_the_kernel() {
        let u = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
        let e = attach_filter(u.as_fd(), &[]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let long = vec![SockFilter::stmt(0x06, 0); MAX_FILTER_LEN + 1];
        let e = attach_filter(u.as_fd(), &long).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        // Any socket takes a filter: `ret #0xffff` (accept), then one the
        // kernel's checker refuses (a jump past the end).
        attach_filter(u.as_fd(), &[SockFilter::stmt(0x06, 0xffff)]).unwrap();
        let bad = [SockFilter::jump(0x15, 0, 5, 5), SockFilter::stmt(0x06, 0)];
        let e = attach_filter(u.as_fd(), &bad).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
    }

    #[test]
    fn bind_refuses_what_the_kernel_cannot_take() {
        let u = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
        let e = bind_packet(u.as_fd(), u32::MAX, ETHERTYPE_IPV4).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        // Not a packet socket: the kernel says so.
        assert!(bind_packet(u.as_fd(), 1, ETHERTYPE_IPV4).is_err());
        let e = PacketSocket::open(0, ETHERTYPE_IPV4, &[SockFilter::stmt(0x06, 0)]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    /// An experimental ethertype (IEEE 802 local experimental 1), never IP.
    const TEST_ETHERTYPE: u16 = 0x88b5;

    /// `ethertype == TEST_ETHERTYPE && frame[14] == 0xaa`, whole frame.
    fn test_filter() -> Vec<SockFilter> {
        vec![
            SockFilter::stmt(0x28, 12),                              // ldh [12]
            SockFilter::jump(0x15, u32::from(TEST_ETHERTYPE), 0, 3), // jeq
            SockFilter::stmt(0x30, 14),                              // ldb [14]
            SockFilter::jump(0x15, 0xaa, 0, 1),                      // jeq #0xaa
            SockFilter::stmt(0x06, 0x0004_0000),                     // ret all
            SockFilter::stmt(0x06, 0),                               // ret 0
        ]
    }

    fn frame(first: u8) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&TEST_ETHERTYPE.to_be_bytes());
        f[14] = first;
        f[15] = 0x55;
        f
    }

    /// Bind, filter, send and receive on the loopback interface of a
    /// network namespace of its own (a thread that unshared one; `ip`
    /// brings its `lo` up), so nothing leaves the test. Needs root.
    #[test]
    fn a_filtered_packet_socket_sends_and_receives_in_a_private_namespace() {
        let result = std::thread::spawn(|| -> Result<(), String> {
            match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
                Ok(()) => {}
                // Not root (no CAP_SYS_ADMIN): nothing to test here.
                Err(nix::errno::Errno::EPERM) => {
                    return Err("no privilege for a network namespace".into());
                }
                Err(e) => panic!("unshare(CLONE_NEWNET): {e}"),
            }
            // A child forked from this thread is in its namespace.
            let up = std::process::Command::new("ip")
                .args(["link", "set", "lo", "up"])
                .status()
                .expect("`ip` (iproute2) runs");
            assert!(up.success(), "ip link set lo up");
            let lo = nix::net::if_::if_nametoindex("lo").expect("lo exists");
            let s = PacketSocket::open(lo, TEST_ETHERTYPE, &test_filter()).expect("open");
            assert_eq!(s.ifindex(), lo);
            s.send(&frame(0x01)).expect("send");
            s.send(&frame(0xaa)).expect("send");
            // On `lo` a sent frame comes straight back in, through the filter.
            let mut buf = [0u8; 128];
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            let n = loop {
                match s.recv(&mut buf) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        assert!(std::time::Instant::now() < deadline, "nothing received");
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                    Err(e) => panic!("recv: {e}"),
                }
            };
            assert_eq!(
                &buf[..n],
                &frame(0xaa)[..],
                "only the frame the filter takes"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
            let e = s.recv(&mut buf).unwrap_err();
            assert_eq!(
                e.kind(),
                io::ErrorKind::WouldBlock,
                "the other was filtered"
            );
            Ok(())
        })
        .join()
        .expect("the test thread panicked");
        if let Err(skip) = result {
            crate::tests::skip_or_fail(&skip);
        }
    }
}
