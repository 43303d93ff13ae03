//! Interface descriptions from rtnetlink: one dump of links and addresses,
//! then kept current by link and address notifications (no polling).
//!
//! [`LinkTable`] is the pure part: it folds `RTM_NEWLINK`, `RTM_DELLINK`,
//! `RTM_NEWADDR` and `RTM_DELADDR` messages into
//! [`InterfaceDescription`]s. [`InterfaceWatcher`] subscribes to the
//! notification groups *before* dumping, so no change between the dump and
//! the subscription is lost (a duplicate is harmless: applying a message is
//! idempotent).
//!
//! ## Overflow
//! The kernel does not wait for a notification socket to be read: when
//! its receive buffer is full, notifications are dropped and the next
//! `recv` fails with `ENOBUFS`. netlink-proto (under rtnetlink 0.24) turns
//! that error into an `NLMSG_OVERRUN` message (`NetlinkPayload::Overrun`)
//! on the notification stream, where [`classify`] finds it. The table may
//! then be stale in any way (a link gone, a new one, changed flags or
//! addresses), so [`WatchState`] schedules a re-dump of links and
//! addresses; [`LinkTable::reconcile`] replaces the table by the dump and
//! reports what differed; notifications that queued up meanwhile are
//! applied on top, as after the first dump. Each overflow is counted
//! ([`InterfaceWatcher::overflows`], [`super::L2Handle::netlink_overflows`])
//! and logged at warn level with the changes the re-dump found.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::stream::{Stream, StreamExt, TryStreamExt};
use rtnetlink::MulticastGroup;
use rtnetlink::packet_core::{NetlinkMessage, NetlinkPayload};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage,
};
use rtnetlink::packet_route::link::{LinkAttribute, LinkMessage};
use rtnetlink::sys::AsyncSocket;
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

    /// The table a dump describes: every link, and the addresses of those
    /// links (an address whose link is not in the dump belongs to a link
    /// that came or went between the two dumps; the notifications queued
    /// meanwhile settle it).
    pub fn from_dump(
        links: impl IntoIterator<Item = LinkMessage>,
        addresses: impl IntoIterator<Item = AddressMessage>,
    ) -> LinkTable {
        let mut t = LinkTable::new();
        for m in links {
            t.apply(&RouteNetlinkMessage::NewLink(m));
        }
        for m in addresses {
            if t.links.contains_key(&m.header.index) {
                t.apply(&RouteNetlinkMessage::NewAddress(m));
            }
        }
        t.addresses.retain(|_, set| !set.is_empty());
        t
    }

    /// Replaces the table by `dump` (the kernel's word after lost
    /// notifications) and returns how the two differ, in index order:
    /// links that vanished, new links, and links whose name, MAC, flags,
    /// master or usable addresses changed.
    pub fn reconcile(&mut self, dump: LinkTable) -> Vec<LinkChange> {
        let old = std::mem::replace(self, dump);
        let no_addresses = BTreeSet::new();
        let addresses =
            |t: &LinkTable, index: &u32| t.addresses.get(index).unwrap_or(&no_addresses).clone();
        let mut changes = Vec::new();
        let indexes: BTreeSet<u32> = old.links.keys().chain(self.links.keys()).copied().collect();
        for index in indexes {
            let change = match (old.links.get(&index), self.links.get(&index)) {
                (Some(was), None) => LinkChange::Removed {
                    index,
                    name: was.name.clone(),
                },
                (None, Some(now)) => LinkChange::Added {
                    index,
                    name: now.name.clone(),
                },
                (Some(was), Some(now))
                    if was != now || addresses(&old, &index) != addresses(self, &index) =>
                {
                    LinkChange::Updated {
                        index,
                        name: now.name.clone(),
                    }
                }
                _ => continue,
            };
            changes.push(change);
        }
        changes
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

/// How a re-dump changed the table, for one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkChange {
    /// In the table, gone from the kernel.
    Removed { index: u32, name: String },
    /// New in the kernel.
    Added { index: u32, name: String },
    /// Name, MAC, flags, master or usable addresses differ (`name`: the
    /// current one).
    Updated { index: u32, name: String },
}

/// What one message from the notification stream means for the table.
#[derive(Debug, PartialEq, Eq)]
pub enum Notification<'a> {
    /// A link or address message to fold in.
    Apply(&'a RouteNetlinkMessage),
    /// Notifications were lost: `ENOBUFS` on the socket, which
    /// netlink-proto reports as an `NLMSG_OVERRUN` message (or, should
    /// the kernel ever send it so, an `NLMSG_ERROR` carrying `-ENOBUFS`).
    Overrun,
    /// Nothing to do (acks, `NLMSG_DONE`, `NLMSG_NOOP`, other errors).
    Ignore,
}

/// Sorts a message from the notification stream.
pub fn classify(msg: &NetlinkMessage<RouteNetlinkMessage>) -> Notification<'_> {
    match &msg.payload {
        NetlinkPayload::InnerMessage(m) => Notification::Apply(m),
        NetlinkPayload::Overrun(_) => Notification::Overrun,
        NetlinkPayload::Error(e) if e.raw_code() == -libc::ENOBUFS => Notification::Overrun,
        _ => Notification::Ignore,
    }
}

/// The watcher's decisions, without I/O: the table, whether the caller
/// has yet to hear of a change, and whether a re-dump is due.
#[derive(Debug, Default)]
pub struct WatchState {
    table: LinkTable,
    /// The table changed since [`take_change`](Self::take_change) last
    /// said so.
    changed: bool,
    /// An overflow was seen and no re-dump has completed since.
    redump_due: bool,
    overflows: u64,
}

impl WatchState {
    /// Starts from the first dump.
    pub fn new(table: LinkTable) -> Self {
        WatchState {
            table,
            ..Default::default()
        }
    }

    /// The current table.
    pub fn table(&self) -> &LinkTable {
        &self.table
    }

    /// Takes one message from the notification stream. An overrun makes a
    /// re-dump due (several before it runs need only one).
    pub fn on_message(&mut self, msg: &NetlinkMessage<RouteNetlinkMessage>) {
        match classify(msg) {
            Notification::Apply(m) => self.changed |= self.table.apply(m),
            Notification::Overrun => {
                self.overflows += 1;
                self.redump_due = true;
                tracing::warn!(
                    overflows = self.overflows,
                    "rtnetlink notification socket overflowed (ENOBUFS): the kernel dropped \
                     link or address notifications; re-dumping links and addresses"
                );
            }
            Notification::Ignore => {}
        }
    }

    /// Whether a re-dump is due: the caller dumps links and addresses and
    /// hands the result to [`on_dump`](Self::on_dump), then goes on
    /// applying the notifications queued meanwhile.
    pub fn redump_due(&self) -> bool {
        self.redump_due
    }

    /// Takes a completed re-dump: the table becomes the dump; returns the
    /// differences (also logged).
    pub fn on_dump(&mut self, dump: LinkTable) -> Vec<LinkChange> {
        self.redump_due = false;
        let changes = self.table.reconcile(dump);
        self.changed |= !changes.is_empty();
        let count = |f: fn(&LinkChange) -> bool| changes.iter().filter(|c| f(c)).count();
        tracing::warn!(
            removed = count(|c| matches!(c, LinkChange::Removed { .. })),
            added = count(|c| matches!(c, LinkChange::Added { .. })),
            updated = count(|c| matches!(c, LinkChange::Updated { .. })),
            changes = ?changes,
            "links and addresses re-dumped after the netlink overflow"
        );
        changes
    }

    /// Whether the table changed since the last call that returned true.
    pub fn take_change(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// Overflows seen so far.
    pub fn overflows(&self) -> u64 {
        self.overflows
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

type Dump = Pin<Box<dyn Future<Output = Result<LinkTable, rtnetlink::Error>> + Send>>;

/// Options of [`InterfaceWatcher::start_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WatchOptions {
    /// `SO_RCVBUF` of the notification socket, in bytes (the kernel
    /// doubles it and enforces a minimum of a few KiB); `None` keeps the
    /// kernel default (`net.core.rmem_default`). Tests set a tiny one to
    /// provoke an overflow.
    pub receive_buffer: Option<usize>,
}

/// Wait before retrying a re-dump that failed.
const REDUMP_RETRY: Duration = Duration::from_secs(1);

/// Dumps links, then addresses.
async fn dump(handle: rtnetlink::Handle) -> Result<LinkTable, rtnetlink::Error> {
    let links: Vec<LinkMessage> = handle.link().get().execute().try_collect().await?;
    let addresses: Vec<AddressMessage> = handle.address().get().execute().try_collect().await?;
    Ok(LinkTable::from_dump(links, addresses))
}

/// A [`LinkTable`] kept current from the kernel.
pub struct InterfaceWatcher {
    state: WatchState,
    notifications: Notifications,
    handle: rtnetlink::Handle,
    /// The re-dump in flight, kept here so that cancelling
    /// [`changed`](Self::changed) (the driver's `select!`) does not lose
    /// it.
    redump: Option<Dump>,
    overflows: Arc<AtomicU64>,
    connection: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for InterfaceWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterfaceWatcher")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl InterfaceWatcher {
    /// Subscribes to link and address notifications in the calling
    /// thread's network namespace, then dumps links and addresses. Must be
    /// called within a tokio runtime.
    pub async fn start() -> Result<InterfaceWatcher, NetlinkError> {
        Self::start_with(WatchOptions::default()).await
    }

    /// [`start`](Self::start) with options.
    pub async fn start_with(opts: WatchOptions) -> Result<InterfaceWatcher, NetlinkError> {
        let (mut conn, handle, notifications) = rtnetlink::new_multicast_connection(&[
            MulticastGroup::Link,
            MulticastGroup::Ipv4Ifaddr,
            MulticastGroup::Ipv6Ifaddr,
        ])?;
        if let Some(bytes) = opts.receive_buffer {
            conn.socket_mut().socket_mut().set_rx_buf_sz(bytes)?;
        }
        let connection = tokio::spawn(conn);
        let table = dump(handle.clone()).await?;
        Ok(InterfaceWatcher {
            state: WatchState::new(table),
            notifications: Box::pin(notifications),
            handle,
            redump: None,
            overflows: Arc::new(AtomicU64::new(0)),
            connection,
        })
    }

    /// The current table.
    pub fn table(&self) -> &LinkTable {
        self.state.table()
    }

    /// Notification overflows seen so far (each followed by a re-dump).
    pub fn overflows(&self) -> u64 {
        self.overflows.load(Ordering::Relaxed)
    }

    /// The same count, shared (for the driver's handle).
    pub(crate) fn overflow_counter(&self) -> Arc<AtomicU64> {
        self.overflows.clone()
    }

    /// Waits for notifications and applies them until one changes the
    /// table (several queued ones are applied together). After an
    /// overflow it re-dumps first; a re-dump that fails is retried after a
    /// second. Cancel-safe: dropping the future loses neither a change nor
    /// a re-dump in flight.
    pub async fn changed(&mut self) -> Result<(), NetlinkError> {
        loop {
            if let Some(redump) = self.redump.as_mut() {
                let result = redump.await;
                self.redump = None;
                match result {
                    Ok(table) => {
                        self.state.on_dump(table);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "re-dump of links and addresses failed; retrying");
                        let handle = self.handle.clone();
                        self.redump = Some(Box::pin(async move {
                            tokio::time::sleep(REDUMP_RETRY).await;
                            dump(handle).await
                        }));
                        continue;
                    }
                }
            }
            if self.state.take_change() {
                return Ok(());
            }
            let Some((msg, _)) = self.notifications.next().await else {
                return Err(NetlinkError::Closed);
            };
            self.on_message(&msg);
            while let Some(Some((msg, _))) = self.notifications.next().now_or_never() {
                self.on_message(&msg);
            }
            if self.state.redump_due() && self.redump.is_none() {
                self.redump = Some(Box::pin(dump(self.handle.clone())));
            }
        }
    }

    fn on_message(&mut self, msg: &NetlinkMessage<RouteNetlinkMessage>) {
        self.state.on_message(msg);
        self.overflows
            .store(self.state.overflows(), Ordering::Relaxed);
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

    fn table(msgs: &[RouteNetlinkMessage]) -> LinkTable {
        let mut t = LinkTable::new();
        for m in msgs {
            t.apply(m);
        }
        t
    }

    fn new_addr(index: u32, ip: &str) -> RouteNetlinkMessage {
        RouteNetlinkMessage::NewAddress(addr(index, ip.parse().unwrap(), false))
    }

    fn link_msg(m: RouteNetlinkMessage) -> LinkMessage {
        match m {
            RouteNetlinkMessage::NewLink(l) => l,
            other => panic!("not a link: {other:?}"),
        }
    }

    const UP: u32 = IFF_UP | IFF_BROADCAST;

    #[test]
    fn from_dump_drops_addresses_of_links_not_in_it() {
        let t = LinkTable::from_dump(
            [link_msg(link(2, "eth0", UP, None))],
            [
                addr(2, "192.0.2.2".parse().unwrap(), false),
                addr(9, "192.0.2.9".parse().unwrap(), false),
                addr(2, LL, true),
            ],
        );
        assert_eq!(
            t,
            table(&[link(2, "eth0", UP, None), new_addr(2, "192.0.2.2")])
        );
        assert!(!t.addresses.contains_key(&9));
    }

    #[test]
    fn reconcile_reports_every_kind_of_difference() {
        let old = table(&[
            link(2, "eth0", UP, None),
            new_addr(2, "192.0.2.2"),
            link(3, "gone0", UP, None),
            new_addr(3, "198.51.100.3"),
            link(4, "eth1", UP, None),
            link(5, "eth2", UP, None),
            new_addr(5, "203.0.113.5"),
            link(6, "same0", UP, None),
            new_addr(6, "203.0.113.6"),
            link(8, "old-name", UP, None),
        ]);
        let dump = LinkTable::from_dump(
            [
                link_msg(link(2, "eth0", UP, None)),
                // eth1 went down and was enslaved.
                link_msg(link(4, "eth1", IFF_BROADCAST, Some(10))),
                link_msg(link(5, "eth2", UP, None)),
                link_msg(link(6, "same0", UP, None)),
                link_msg(link(7, "new0", UP, None)),
                link_msg(link(8, "new-name", UP, None)),
            ],
            [
                addr(2, "192.0.2.2".parse().unwrap(), false),
                // eth2 lost its address and gained another.
                addr(5, "203.0.113.55".parse().unwrap(), false),
                addr(6, "203.0.113.6".parse().unwrap(), false),
                addr(7, LL, false),
            ],
        );
        let mut t = old.clone();
        let changes = t.reconcile(dump.clone());
        assert_eq!(t, dump, "the dump is the new table");
        assert_eq!(
            changes,
            [
                LinkChange::Removed {
                    index: 3,
                    name: "gone0".into()
                },
                LinkChange::Updated {
                    index: 4,
                    name: "eth1".into()
                },
                LinkChange::Updated {
                    index: 5,
                    name: "eth2".into()
                },
                LinkChange::Added {
                    index: 7,
                    name: "new0".into()
                },
                LinkChange::Updated {
                    index: 8,
                    name: "new-name".into()
                },
            ]
        );
        // The descriptions follow: gone0 and its address are gone.
        let names: Vec<String> = t.descriptions().into_iter().map(|d| d.name).collect();
        assert_eq!(names, ["eth0", "eth1", "eth2", "same0", "new0", "new-name"]);
        assert!(!t.addresses.contains_key(&3));
        // Reconciling with an identical dump changes nothing.
        assert_eq!(t.reconcile(dump.clone()), []);
        assert_eq!(t, dump);
    }

    /// The message netlink-proto 0.14 (rtnetlink 0.24) puts on the
    /// notification stream when `recv` fails with ENOBUFS
    /// (`NetlinkFramed::poll_next`): an `NLMSG_OVERRUN` header and an
    /// empty `Overrun` payload, from port 0.
    fn overrun() -> NetlinkMessage<RouteNetlinkMessage> {
        use rtnetlink::packet_core::{NLMSG_OVERRUN, NetlinkHeader};
        let mut hdr = NetlinkHeader::default();
        hdr.length = size_of::<NetlinkHeader>() as u32;
        hdr.message_type = NLMSG_OVERRUN;
        NetlinkMessage::new(hdr, NetlinkPayload::Overrun(Vec::new()))
    }

    fn notification(m: RouteNetlinkMessage) -> NetlinkMessage<RouteNetlinkMessage> {
        NetlinkMessage::from(m)
    }

    fn error(code: i32) -> NetlinkMessage<RouteNetlinkMessage> {
        use rtnetlink::packet_core::ErrorMessage;
        let mut e = ErrorMessage::default();
        e.code = std::num::NonZeroI32::new(code);
        NetlinkMessage::new(Default::default(), NetlinkPayload::Error(e))
    }

    #[test]
    fn classify_finds_overruns() {
        assert_eq!(classify(&overrun()), Notification::Overrun);
        assert_eq!(classify(&error(-libc::ENOBUFS)), Notification::Overrun);
        assert_eq!(classify(&error(-libc::EINVAL)), Notification::Ignore);
        assert_eq!(classify(&error(0)), Notification::Ignore, "an ack");
        assert_eq!(
            classify(&NetlinkMessage::new(
                Default::default(),
                NetlinkPayload::Noop
            )),
            Notification::Ignore
        );
        let m = link(2, "eth0", UP, None);
        assert_eq!(classify(&notification(m.clone())), Notification::Apply(&m));
    }

    #[test]
    fn an_overrun_makes_a_redump_due_and_the_dump_wins() {
        let mut st = WatchState::new(table(&[
            link(2, "eth0", UP, None),
            link(3, "gone0", UP, None),
        ]));
        assert!(!st.take_change());
        // A notification that arrived before the loss is applied.
        st.on_message(&notification(new_addr(2, "192.0.2.2")));
        assert!(!st.redump_due());
        assert!(st.take_change());
        assert!(!st.take_change(), "reported once");
        // Then the kernel drops some (say: gone0 deleted, new0 created),
        // and the stream says so, twice before we get to dump.
        st.on_message(&overrun());
        st.on_message(&overrun());
        assert!(st.redump_due());
        assert_eq!(st.overflows(), 2);
        assert!(!st.take_change(), "an overrun alone changes nothing yet");
        let dump = LinkTable::from_dump(
            [
                link_msg(link(2, "eth0", UP, None)),
                link_msg(link(4, "new0", UP, None)),
            ],
            [addr(2, "192.0.2.2".parse().unwrap(), false)],
        );
        let changes = st.on_dump(dump.clone());
        assert_eq!(
            changes,
            [
                LinkChange::Removed {
                    index: 3,
                    name: "gone0".into()
                },
                LinkChange::Added {
                    index: 4,
                    name: "new0".into()
                },
            ]
        );
        assert!(!st.redump_due(), "one dump for both overruns");
        assert!(st.take_change());
        assert_eq!(st.table(), &dump);
        // Notifications queued during the dump are applied on top.
        st.on_message(&notification(new_addr(4, "198.51.100.4")));
        assert!(st.take_change());
        assert_eq!(
            st.table().descriptions()[1].addresses,
            ["198.51.100.4".parse::<IpAddr>().unwrap()]
        );
    }

    #[test]
    fn a_redump_that_finds_nothing_new_is_no_change() {
        let t = table(&[link(2, "eth0", UP, None), new_addr(2, "192.0.2.2")]);
        let mut st = WatchState::new(t.clone());
        st.on_message(&overrun());
        assert_eq!(st.on_dump(t), []);
        assert!(!st.take_change());
        assert!(!st.redump_due());
        assert_eq!(st.overflows(), 1);
    }
}
