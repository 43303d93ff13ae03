//! The only `unsafe` code of the crate (and of the workspace's socket
//! options): raw `setsockopt`/`getsockopt` calls, the construction of the
//! kernel's `struct tcp_md5sig`, and `bind(2)` of an `AF_PACKET` socket
//! with a `sockaddr_ll`. Everything here is `pub(crate)`; the safe,
//! validated API is in the crate root and in `packet`.
//!
//! Audit rules: every `unsafe` block carries a `// SAFETY:` argument; the
//! generic `setsockopt` takes plain-old-data types only ([`Pod`]: no
//! pointers); the two calls with a pointer-carrying or address argument
//! (`bind_packet`: a `sockaddr_ll`; `attach_filter`: a `sock_fprog`
//! pointing at a borrowed program) build it locally; every pointer handed
//! to the kernel points to a value that lives for the whole call, with its
//! exact size, and the kernel keeps no reference to it; every return value
//! is checked and turned into an `io::Error`.
#![allow(unsafe_code)]

use std::io;
use std::mem;
use std::net::{SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd};

/// `TCP_MD5SIG_MAXKEYLEN` of `<linux/tcp.h>`.
pub(crate) const TCP_MD5SIG_MAXKEYLEN: usize = 80;

/// Mirror of the kernel's `struct tcp_md5sig` (`<linux/tcp.h>`):
///
/// ```c
/// struct tcp_md5sig {
///     struct __kernel_sockaddr_storage tcpm_addr;
///     __u8  tcpm_flags;
///     __u8  tcpm_prefixlen;
///     __u16 tcpm_keylen;
///     int   tcpm_ifindex;
///     __u8  tcpm_key[TCP_MD5SIG_MAXKEYLEN];
/// };
/// ```
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct TcpMd5Sig {
    pub(crate) tcpm_addr: libc::sockaddr_storage,
    pub(crate) tcpm_flags: u8,
    pub(crate) tcpm_prefixlen: u8,
    pub(crate) tcpm_keylen: u16,
    pub(crate) tcpm_ifindex: u32,
    pub(crate) tcpm_key: [u8; TCP_MD5SIG_MAXKEYLEN],
}

// The kernel copies `sizeof(struct tcp_md5sig)` bytes: 128 + 8 + 80.
const _: () = assert!(mem::size_of::<TcpMd5Sig>() == 216);
// A sockaddr_in / sockaddr_in6 fits in, and is no more aligned than, the
// storage it is written into (see `write_sockaddr`).
const _: () =
    assert!(mem::size_of::<libc::sockaddr_in>() <= mem::size_of::<libc::sockaddr_storage>());
const _: () =
    assert!(mem::size_of::<libc::sockaddr_in6>() <= mem::size_of::<libc::sockaddr_storage>());
const _: () =
    assert!(mem::align_of::<libc::sockaddr_in>() <= mem::align_of::<libc::sockaddr_storage>());
const _: () =
    assert!(mem::align_of::<libc::sockaddr_in6>() <= mem::align_of::<libc::sockaddr_storage>());

/// Plain old data: `repr(C)` or primitive, every bit pattern valid, no
/// pointers. Only these are handed to `setsockopt`/`getsockopt`.
pub(crate) trait Pod: Copy + private::Sealed {}
impl Pod for libc::c_int {}
impl Pod for TcpMd5Sig {}
mod private {
    pub trait Sealed {}
    impl Sealed for libc::c_int {}
    impl Sealed for super::TcpMd5Sig {}
}

/// The peer address as the kernel reads it from `tcpm_addr`.
pub(crate) enum KernelAddr {
    V4(SocketAddrV4),
    V6(SocketAddrV6),
}

impl TcpMd5Sig {
    /// A zeroed struct holding `addr` and `key` (`key.len()` must be at
    /// most [`TCP_MD5SIG_MAXKEYLEN`]: checked by the caller, asserted
    /// here).
    pub(crate) fn new(addr: &KernelAddr, key: &[u8]) -> TcpMd5Sig {
        assert!(key.len() <= TCP_MD5SIG_MAXKEYLEN);
        // SAFETY: `TcpMd5Sig` is `repr(C)` made of integers, integer arrays
        // and `sockaddr_storage` (integers and padding arrays): the
        // all-zero bit pattern is a valid value of every field.
        let mut sig: TcpMd5Sig = unsafe { mem::zeroed() };
        write_sockaddr(&mut sig.tcpm_addr, addr);
        sig.tcpm_keylen = key.len() as u16; // <= 80, checked above
        sig.tcpm_key[..key.len()].copy_from_slice(key);
        sig
    }
}

fn write_sockaddr(storage: &mut libc::sockaddr_storage, addr: &KernelAddr) {
    let dst = (storage as *mut libc::sockaddr_storage).cast::<u8>();
    match addr {
        KernelAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: `dst` points to a live, exclusively borrowed
            // `sockaddr_storage`, which is larger than and at least as
            // aligned as `sockaddr_in` (const-asserted above); the bytes are
            // copied, the regions do not overlap (`sin` is a local).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (&sin as *const libc::sockaddr_in).cast::<u8>(),
                    dst,
                    mem::size_of::<libc::sockaddr_in>(),
                )
            }
        }
        KernelAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as for `sockaddr_in`: the destination is a live,
            // exclusively borrowed `sockaddr_storage`, large and aligned
            // enough for a `sockaddr_in6` (const-asserted), not overlapping
            // the local `sin6`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (&sin6 as *const libc::sockaddr_in6).cast::<u8>(),
                    dst,
                    mem::size_of::<libc::sockaddr_in6>(),
                )
            }
        }
    }
}

/// `setsockopt(fd, level, name, value, sizeof *value)`.
pub(crate) fn setsockopt<T: Pod>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `fd` is a borrowed, hence open, descriptor for the duration of
    // the call; `value` points to a live `T` of exactly the given length,
    // which the kernel only reads; `T: Pod` has no pointers or invariants.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast::<libc::c_void>(),
            mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `getsockopt(fd, level, name)` of an `int` option.
pub(crate) fn getsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` is open for the duration of the call (borrowed);
    // `value` and `len` are live locals, `len` holds the size of `value`,
    // so the kernel writes at most that many bytes; any bit pattern is a
    // valid `c_int`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut libc::c_int).cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if len as usize != mem::size_of::<libc::c_int>() {
        return Err(io::Error::other(format!(
            "getsockopt({level}, {name}): unexpected length {len}"
        )));
    }
    Ok(value)
}

/// `bind(2)` of the `AF_PACKET` socket `fd` to interface `ifindex` and
/// frames of `ethertype` (host order).
pub(crate) fn bind_packet(fd: BorrowedFd<'_>, ifindex: i32, ethertype: u16) -> io::Result<()> {
    let sll = libc::sockaddr_ll {
        sll_family: libc::AF_PACKET as libc::c_ushort,
        sll_protocol: ethertype.to_be(),
        sll_ifindex: ifindex,
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 0,
        sll_addr: [0; 8],
    };
    // SAFETY: `sll` is a fully initialised `sockaddr_ll` on our stack,
    // alive for the whole call; the length is its exact size; bind(2)
    // copies the address and keeps no reference to it. `fd` is borrowed,
    // hence open, for the duration of the call.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const sll).cast::<libc::sockaddr>(),
            mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `setsockopt(SO_ATTACH_FILTER)`: installs the classic BPF program `prog`
/// (at most `u16::MAX` instructions: checked by the caller, asserted here).
pub(crate) fn attach_filter(fd: BorrowedFd<'_>, prog: &[libc::sock_filter]) -> io::Result<()> {
    let len = u16::try_from(prog.len()).expect("program length checked by the caller");
    let fprog = libc::sock_fprog {
        len,
        // The kernel only reads through this pointer (the C type lacks
        // `const`).
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: `fprog` is a live local of exactly the size passed; its
    // `filter` points at `prog`, `len` instructions long, borrowed (so
    // alive and unchanged) for the whole call. The kernel only reads both,
    // copies the program (`sk_attach_filter`) and keeps no reference to
    // our memory. `fd` is borrowed, hence open, for the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&raw const fprog).cast::<libc::c_void>(),
            mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// glibc's `malloc_trim(0)`: every whole free page of every arena goes back to the
/// system (`madvise`); 1 if some memory was released. Elsewhere (musl, other systems)
/// nothing to call: false.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn malloc_trim() -> bool {
    // SAFETY: malloc_trim takes no pointer and has no precondition; glibc serialises it
    // with every other allocator call (it takes each arena's lock in turn).
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn malloc_trim() -> bool {
    false
}
