//! Interface descriptions from rtnetlink: one dump of links and addresses,
//! then kept current by link and address notifications (no polling).
//!
//! [`LinkTable`] is the pure part: it folds `RTM_NEWLINK`, `RTM_DELLINK`,
//! `RTM_NEWADDR` and `RTM_DELADDR` messages into
//! [`InterfaceDescription`]s. [`InterfaceWatcher`] subscribes to the
//! notification groups *before* dumping, so no change between the dump and
//! the subscription is lost (a duplicate is harmless: applying a message is
//! idempotent).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::IpAddr;

use std::pin::Pin;

use futures_util::FutureExt;
use futures_util::stream::{Stream, StreamExt, TryStreamExt};
use rtnetlink::MulticastGroup;
use rtnetlink::packet_core::{NetlinkMessage, NetlinkPayload};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage,
};
use rtnetlink::packet_route::link::{LinkAttribute, LinkMessage};
use thiserror::Error;

use crate::interfaces::InterfaceDescription;
use crate::packet::MacAddr;

/// Errors talking to rtnetlink.
#[derive(Debug, Error)]
pub enum NetlinkError {
    /// Opening or binding the netlink socket.
    #[error("netlink socket: {0}")]
    Io(#[from] io::Error),
    /// A dump request failed.
    #[error("netlink dump: {0}")]
    Dump(#[from] rtnetlink::Error),
    /// The notification stream ended (the connection task died).
    #[error("netlink notification stream closed")]
    Closed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Link {
    name: String,
    mac: Option<MacAddr>,
    flags: u32,
    master: Option<u32>,
}

/// Links and their usable addresses, by interface index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkTable {
    links: BTreeMap<u32, Link>,
    addresses: BTreeMap<u32, BTreeSet<IpAddr>>,
}

fn link_from(msg: &LinkMessage) -> Link {
    let mut l = Link {
        name: String::new(),
        mac: None,
        flags: msg.header.flags.bits(),
        master: None,
    };
    for a in &msg.attributes {
        match a {
            LinkAttribute::IfName(n) => l.name.clone_from(n),
            LinkAttribute::Address(b) => {
                if let Ok(m) = <[u8; 6]>::try_from(b.as_slice()) {
                    l.mac = Some(MacAddr(m));
                }
            }
            LinkAttribute::Controller(m) if *m != 0 => l.master = Some(*m),
            _ => {}
        }
    }
    l
}

/// The address of an `RTM_NEWADDR`/`RTM_DELADDR` and whether it is usable
/// as a source (not tentative, DAD not failed).
fn address_from(msg: &AddressMessage) -> Option<(IpAddr, bool)> {
    let mut local = None;
    let mut address = None;
    let mut unusable = msg
        .header
        .flags
        .intersects(AddressHeaderFlags::Tentative | AddressHeaderFlags::Dadfailed);
    for a in &msg.attributes {
        match a {
            AddressAttribute::Local(ip) => local = Some(*ip),
            AddressAttribute::Address(ip) => address = Some(*ip),
            AddressAttribute::Flags(f) => {
                unusable |= f.intersects(AddressFlags::Tentative | AddressFlags::Dadfailed);
            }
            _ => {}
        }
    }
    // IPv4 puts the local address in IFA_LOCAL (IFA_ADDRESS is the peer on
    // point-to-point links); IPv6 only sends IFA_ADDRESS.
    local.or(address).map(|ip| (ip, !unusable))
}

impl LinkTable {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one message; returns whether the table changed.
    pub fn apply(&mut self, msg: &RouteNetlinkMessage) -> bool {
        match msg {
            RouteNetlinkMessage::NewLink(m) => {
                let l = link_from(m);
                if l.name.is_empty() {
                    return false;
                }
                self.links.insert(m.header.index, l.clone()) != Some(l)
            }
            RouteNetlinkMessage::DelLink(m) => {
                let a = self.addresses.remove(&m.header.index).is_some();
                self.links.remove(&m.header.index).is_some() || a
            }
            RouteNetlinkMessage::NewAddress(m) => {
                let Some((ip, usable)) = address_from(m) else {
                    return false;
                };
                let set = self.addresses.entry(m.header.index).or_default();
                if usable {
                    set.insert(ip)
                } else {
                    set.remove(&ip)
                }
            }
            RouteNetlinkMessage::DelAddress(m) => {
                let Some((ip, _)) = address_from(m) else {
                    return false;
                };
                self.addresses
                    .get_mut(&m.header.index)
                    .is_some_and(|s| s.remove(&ip))
            }
            _ => false,
        }
    }

    /// Every link, in index order.
    pub fn descriptions(&self) -> Vec<InterfaceDescription> {
        self.links
            .iter()
            .map(|(index, l)| InterfaceDescription {
                index: *index,
                name: l.name.clone(),
                mac: l.mac,
                flags: l.flags,
                master: l.master,
                addresses: self
                    .addresses
                    .get(index)
                    .map(|s| s.iter().copied().collect())
                    .unwrap_or_default(),
            })
            .collect()
    }
}

type Notifications = Pin<
    Box<
        dyn Stream<
                Item = (
                    NetlinkMessage<RouteNetlinkMessage>,
                    rtnetlink::sys::SocketAddr,
                ),
            > + Send,
    >,
>;

/// A [`LinkTable`] kept current from the kernel.
pub struct InterfaceWatcher {
    table: LinkTable,
    notifications: Notifications,
    connection: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for InterfaceWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterfaceWatcher")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl InterfaceWatcher {
    /// Subscribes to link and address notifications in the calling
    /// thread's network namespace, then dumps links and addresses. Must be
    /// called within a tokio runtime.
    pub async fn start() -> Result<InterfaceWatcher, NetlinkError> {
        let (conn, handle, notifications) = rtnetlink::new_multicast_connection(&[
            MulticastGroup::Link,
            MulticastGroup::Ipv4Ifaddr,
            MulticastGroup::Ipv6Ifaddr,
        ])?;
        let connection = tokio::spawn(conn);
        let mut table = LinkTable::new();
        let mut links = handle.link().get().execute();
        while let Some(m) = links.try_next().await? {
            table.apply(&RouteNetlinkMessage::NewLink(m));
        }
        let mut addrs = handle.address().get().execute();
        while let Some(m) = addrs.try_next().await? {
            table.apply(&RouteNetlinkMessage::NewAddress(m));
        }
        Ok(InterfaceWatcher {
            table,
            notifications: Box::pin(notifications),
            connection,
        })
    }

    /// The current table.
    pub fn table(&self) -> &LinkTable {
        &self.table
    }

    /// Waits for notifications and applies them until one changes the
    /// table (several queued ones are applied together).
    pub async fn changed(&mut self) -> Result<(), NetlinkError> {
        loop {
            let Some((msg, _)) = self.notifications.next().await else {
                return Err(NetlinkError::Closed);
            };
            let mut changed = self.apply(msg);
            while let Some(Some((msg, _))) = self.notifications.next().now_or_never() {
                changed |= self.apply(msg);
            }
            if changed {
                return Ok(());
            }
        }
    }

    fn apply(&mut self, msg: NetlinkMessage<RouteNetlinkMessage>) -> bool {
        match msg.payload {
            NetlinkPayload::InnerMessage(m) => self.table.apply(&m),
            _ => false,
        }
    }
}

impl Drop for InterfaceWatcher {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interfaces::{IFF_BROADCAST, IFF_UP};
    use rtnetlink::packet_route::link::LinkFlags;
    use std::net::Ipv6Addr;

    fn link(index: u32, name: &str, flags: u32, master: Option<u32>) -> RouteNetlinkMessage {
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.header.flags = LinkFlags::from_bits_retain(flags);
        m.attributes.push(LinkAttribute::IfName(name.into()));
        m.attributes
            .push(LinkAttribute::Address(vec![2, 0, 0, 0, 0, index as u8]));
        if let Some(c) = master {
            m.attributes.push(LinkAttribute::Controller(c));
        }
        RouteNetlinkMessage::NewLink(m)
    }

    fn addr(index: u32, ip: IpAddr, tentative: bool) -> AddressMessage {
        let mut m = AddressMessage::default();
        m.header.index = index;
        if tentative {
            m.header.flags = AddressHeaderFlags::Tentative;
        }
        m.attributes.push(AddressAttribute::Address(ip));
        m
    }

    const LL: IpAddr = IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2));

    #[test]
    fn links_and_addresses_fold_into_descriptions() {
        let mut t = LinkTable::new();
        assert!(t.apply(&link(2, "eth0", IFF_UP | IFF_BROADCAST, None)));
        assert!(
            !t.apply(&link(2, "eth0", IFF_UP | IFF_BROADCAST, None)),
            "idempotent"
        );
        assert!(t.apply(&link(3, "eth1", IFF_UP, Some(7))));
        // Tentative addresses are not usable yet; DAD completion re-sends
        // the address without the flag.
        assert!(!t.apply(&RouteNetlinkMessage::NewAddress(addr(2, LL, true))));
        assert!(t.apply(&RouteNetlinkMessage::NewAddress(addr(2, LL, false))));
        let d = t.descriptions();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].name, "eth0");
        assert_eq!(d[0].mac, Some(MacAddr([2, 0, 0, 0, 0, 2])));
        assert_eq!(d[0].flags, IFF_UP | IFF_BROADCAST);
        assert_eq!(d[0].addresses, [LL]);
        assert_eq!(d[1].master, Some(7));
        // IPv4 takes IFA_LOCAL over IFA_ADDRESS (the peer on p2p links).
        let mut v4 = addr(2, "198.51.100.9".parse().unwrap(), false);
        v4.attributes
            .push(AddressAttribute::Local("192.0.2.2".parse().unwrap()));
        assert!(t.apply(&RouteNetlinkMessage::NewAddress(v4.clone())));
        assert!(
            t.descriptions()[0]
                .addresses
                .contains(&"192.0.2.2".parse().unwrap())
        );
        assert!(t.apply(&RouteNetlinkMessage::DelAddress(v4)));
        // Removing the link removes its addresses.
        let mut del = LinkMessage::default();
        del.header.index = 2;
        assert!(t.apply(&RouteNetlinkMessage::DelLink(del)));
        assert_eq!(t.descriptions().len(), 1);
        assert!(!t.addresses.contains_key(&2));
    }
}
