//! Solicited-node multicast group membership sockets.
//!
//! Joining a group with `IPV6_ADD_MEMBERSHIP` makes the kernel send MLD
//! reports (so snooping switches forward the solicitations to us) and
//! program the NIC's multicast filter for `33:33:ff:XX:XX:XX`. Any IPv6
//! socket can hold memberships; we use unbound UDP sockets, which never
//! receive anything (no port) and need no privilege. The kernel charges
//! each membership to its socket's option memory (`net.core.optmem_max`,
//! per network namespace), so an interface may need several sockets: which
//! group sits on which socket, and what to do when a join fails, is
//! decided by the pure [`crate::groups::GroupTable`]; this module only
//! carries out its actions.

use std::collections::BTreeMap;
use std::io;

use socket2::{Domain, Socket, Type};

use crate::groups::{GroupAction, JoinError};

/// Membership sockets by interface index and slot number.
#[derive(Debug, Default)]
pub struct Memberships {
    sockets: BTreeMap<(u32, usize), Socket>,
}

/// The outcome of one [`GroupAction`].
#[derive(Debug)]
pub enum Outcome {
    Joined(Result<(), JoinError>),
    Left(Result<(), String>),
    Closed,
}

impl Memberships {
    /// No memberships.
    pub fn new() -> Self {
        Self::default()
    }

    /// Carries out one action.
    pub fn apply(&mut self, action: &GroupAction) -> Outcome {
        match action {
            GroupAction::Join {
                key: (ifindex, _, group),
                socket,
            } => Outcome::Joined(self.join(*ifindex, *socket, group).map_err(join_error)),
            GroupAction::Leave {
                key: (ifindex, _, group),
                socket,
            } => Outcome::Left(
                self.leave(*ifindex, *socket, group)
                    .map_err(|e| e.to_string()),
            ),
            GroupAction::Close { ifindex, socket } => {
                self.sockets.remove(&(*ifindex, *socket));
                Outcome::Closed
            }
        }
    }

    fn join(&mut self, ifindex: u32, slot: usize, group: &std::net::Ipv6Addr) -> io::Result<()> {
        let sock = match self.sockets.entry((ifindex, slot)) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(Socket::new(Domain::IPV6, Type::DGRAM.cloexec(), None)?)
            }
        };
        sock.join_multicast_v6(group, ifindex)
    }

    /// A leave on an interface that is gone, or of a group the socket does
    /// not hold, is not an error: nothing is held either way.
    fn leave(&mut self, ifindex: u32, slot: usize, group: &std::net::Ipv6Addr) -> io::Result<()> {
        let Some(sock) = self.sockets.get(&(ifindex, slot)) else {
            return Ok(());
        };
        match sock.leave_multicast_v6(group, ifindex) {
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => Ok(()),
            other => other,
        }
    }

    /// Closes every membership socket of `ifindex` (the interface went
    /// away, and the kernel dropped its memberships with it).
    pub fn forget_interface(&mut self, ifindex: u32) {
        self.sockets.retain(|(i, _), _| *i != ifindex);
    }

    /// Open membership sockets of `ifindex`.
    pub fn sockets_on(&self, ifindex: u32) -> usize {
        self.sockets.keys().filter(|(i, _)| *i == ifindex).count()
    }
}

/// IPv6 answers a join past the socket's option memory with `ENOMEM`
/// (IPv4 with `ENOBUFS`); both mean "this socket is full".
fn join_error(e: io::Error) -> JoinError {
    if matches!(e.raw_os_error(), Some(libc::ENOMEM | libc::ENOBUFS)) {
        JoinError::NoBuffers
    } else {
        JoinError::Other(e.to_string())
    }
}
