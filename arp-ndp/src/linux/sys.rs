//! The crate's only unsafe code: two system calls that no safe wrapper we
//! use (socket2, nix, rustix) offers for packet sockets.
//!
//! - `bind(2)` with a `sockaddr_ll`: ties an `AF_PACKET` socket to one
//!   interface and ethertype.
//! - `setsockopt(SO_ATTACH_FILTER)`: installs a classic BPF program.
//!
//! Audit notes: both pass a pointer to a stack value that lives for the
//! whole call, with its exact size; the kernel copies what it needs and
//! keeps no pointer. No memory is shared with the kernel afterwards.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsRawFd;

/// One classic BPF instruction (`struct sock_filter`).
pub(crate) type SockFilter = libc::sock_filter;

fn socklen<T>() -> libc::socklen_t {
    // The structs passed here are a few dozen bytes.
    size_of::<T>() as libc::socklen_t
}

/// Binds packet socket `sock` to interface `ifindex` for frames of
/// `ethertype` (host order).
pub(crate) fn bind_packet(sock: &impl AsRawFd, ifindex: u32, ethertype: u16) -> io::Result<()> {
    let ifindex = i32::try_from(ifindex)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface index too large"))?;
    let sll = libc::sockaddr_ll {
        sll_family: libc::AF_PACKET as libc::c_ushort,
        sll_protocol: ethertype.to_be(),
        sll_ifindex: ifindex,
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 0,
        sll_addr: [0; 8],
    };
    // SAFETY: `sll` is a fully initialised sockaddr_ll on our stack, valid
    // for the duration of the call; the length is its exact size; bind(2)
    // copies the address and keeps no reference. The fd is owned by `sock`
    // and open for the call.
    let rc = unsafe {
        libc::bind(
            sock.as_raw_fd(),
            (&raw const sll).cast::<libc::sockaddr>(),
            socklen::<libc::sockaddr_ll>(),
        )
    };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Attaches the classic BPF program `prog` to `sock`.
pub(crate) fn attach_filter(sock: &impl AsRawFd, prog: &[SockFilter]) -> io::Result<()> {
    let len = u16::try_from(prog.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "BPF program too long"))?;
    let fprog = libc::sock_fprog {
        len,
        // The kernel only reads through this pointer (the C type lacks
        // `const`).
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: `fprog` points at `prog`, `len` instructions long, both alive
    // for the call; the option length is the exact size of sock_fprog; the
    // kernel copies the program (sk_attach_filter) and keeps no reference
    // to our memory. The fd is owned by `sock` and open for the call.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&raw const fprog).cast::<libc::c_void>(),
            socklen::<libc::sock_fprog>(),
        )
    };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Registers `sock` with the tokio reactor. (tokio 1.54 deprecated the
/// safe `AsyncFd::new`/`with_interest` as unsound for types without I/O
/// safety; the replacement is this unsafe constructor.)
pub(crate) fn register_async(
    sock: socket2::Socket,
    interest: tokio::io::Interest,
) -> io::Result<tokio::io::unix::AsyncFd<socket2::Socket>> {
    // SAFETY: `socket2::Socket` owns its file descriptor (an `OwnedFd`
    // inside): it is valid and open from creation until the `Socket` is
    // dropped, which happens only when the `AsyncFd` that now owns it is
    // dropped; `as_raw_fd` always returns that same descriptor, and we
    // never call `into_inner` or forget the `AsyncFd`.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(sock, interest) }
        .map_err(|e| e.into_parts().1)
}
