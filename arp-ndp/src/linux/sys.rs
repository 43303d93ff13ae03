//! The crate's only unsafe code: registering a packet socket with the tokio
//! reactor. (Binding it with a `sockaddr_ll` and attaching its BPF filter
//! are `netsys::packet`'s audited calls.)
#![allow(unsafe_code)]

use std::io;

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
