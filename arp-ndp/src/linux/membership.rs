//! Solicited-node multicast group membership.
//!
//! Joining a group with `IPV6_ADD_MEMBERSHIP` makes the kernel send MLD
//! reports (so snooping switches forward the solicitations to us) and
//! program the NIC's multicast filter for `33:33:ff:XX:XX:XX`. Any IPv6
//! socket can hold memberships; we use an unbound UDP socket, which never
//! receives anything (no port) and needs no privilege, one per interface:
//! the kernel charges each membership to its socket's option memory
//! (`net.core.optmem_max`), so one socket per interface keeps the limit per
//! interface rather than per host. The reference counting lives in
//! [`crate::state::L2State`], which emits a join for the first user of a
//! group on an interface and a leave for the last.

use std::collections::BTreeMap;
use std::io;
use std::net::Ipv6Addr;

use socket2::{Domain, Socket, Type};

use crate::state::MembershipChange;

/// Membership sockets by interface index.
#[derive(Debug, Default)]
pub struct Memberships {
    sockets: BTreeMap<u32, (Socket, usize)>,
}

impl Memberships {
    /// No memberships.
    pub fn new() -> Self {
        Self::default()
    }

    /// Carries out one change. A leave on an interface that is gone is not
    /// an error (the kernel dropped the membership with the interface).
    pub fn apply(&mut self, change: &MembershipChange) -> io::Result<()> {
        match change {
            MembershipChange::Join { ifindex, group, .. } => self.join(*ifindex, *group),
            MembershipChange::Leave { ifindex, group, .. } => self.leave(*ifindex, *group),
        }
    }

    fn join(&mut self, ifindex: u32, group: Ipv6Addr) -> io::Result<()> {
        let (sock, count) = match self.sockets.entry(ifindex) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let s = Socket::new(Domain::IPV6, Type::DGRAM.cloexec(), None)?;
                e.insert((s, 0))
            }
        };
        sock.join_multicast_v6(&group, ifindex)?;
        *count += 1;
        Ok(())
    }

    fn leave(&mut self, ifindex: u32, group: Ipv6Addr) -> io::Result<()> {
        let Some((sock, count)) = self.sockets.get_mut(&ifindex) else {
            return Ok(());
        };
        let r = sock.leave_multicast_v6(&group, ifindex);
        *count = count.saturating_sub(1);
        if *count == 0 {
            // Closing the socket drops whatever it still held.
            self.sockets.remove(&ifindex);
        }
        match r {
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => Ok(()),
            other => other,
        }
    }

    /// Drops every membership on `ifindex` (the interface went away).
    pub fn forget_interface(&mut self, ifindex: u32) {
        self.sockets.remove(&ifindex);
    }
}
