//! The running responder: the interface watcher, one packet socket per
//! interface and protocol, the group memberships, and the pure
//! [`L2State`] with its announcement timer, in one tokio task.
//!
//! Frames are read by one small task per socket and handed to the main
//! task over a bounded channel (a full channel drops the frame rather than
//! queueing without limit). The main task owns every decision; the
//! [`L2Handle`] only sends it commands and reads the shared state.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use thiserror::Error;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

use super::membership::{Memberships, Outcome};
use super::netlink::{InterfaceWatcher, NetlinkError};
use super::socket::{PacketSocket, Protocol};
use crate::announce::AnnounceConfig;
use crate::groups::{FailedGroup, GroupAction, GroupTable};
use crate::interfaces::{AllowedInterfaces, ExcludeList, Interface};
use crate::metrics::Metrics;
use crate::packet::{ArpFrame, ArpOp, EthernetHeader, MacAddr, mld2_reports};
use crate::responder::{Decision, DropReason};
use crate::state::{IpCounters, L2State};

/// Largest frame read (jumbo frames); longer ones are truncated, which
/// no ARP or NS frame is.
const RX_BUFFER: usize = 9216;
/// Frames queued between the socket readers and the main task.
const RX_QUEUE: usize = 1024;
/// First retry of an interface whose sockets could not be opened; doubled
/// after each failure up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// See [`RETRY_FIRST`].
const RETRY_MAX: Duration = Duration::from_secs(60);

/// An eligible interface whose sockets could not be opened: not answered
/// on, retried with backoff ([`L2Handle::failed_interfaces`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedInterface {
    pub name: String,
    pub index: u32,
    /// The last error.
    pub error: String,
    /// Failed attempts in a row.
    pub attempts: u32,
    /// When it is tried again (or earlier, when its link changes).
    pub next_retry: Instant,
}

/// The delay before retry number `attempts` (1 after the first failure).
fn retry_delay(attempts: u32) -> Duration {
    RETRY_FIRST
        .saturating_mul(1u32 << attempts.saturating_sub(1).min(16))
        .min(RETRY_MAX)
}

/// How to run.
#[derive(Debug, Clone, Default)]
pub struct DriverConfig {
    /// Interfaces never used.
    pub exclude: ExcludeList,
    /// Gratuitous announcement timing.
    pub announce: AnnounceConfig,
    /// Counters to export, if any.
    pub metrics: Option<Metrics>,
    /// Tests only: an error to fail the opening of an interface's sockets
    /// with (called with the interface's name before each attempt).
    #[doc(hidden)]
    pub open_fault: Option<OpenFault>,
}

/// See [`OpenFault`].
#[doc(hidden)]
pub type OpenFaultFn = dyn Fn(&str) -> Option<io::Error> + Send + Sync;

/// See [`DriverConfig::open_fault`].
#[derive(Clone)]
#[doc(hidden)]
pub struct OpenFault(pub Arc<OpenFaultFn>);

impl std::fmt::Debug for OpenFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OpenFault")
    }
}

/// Why the driver could not start or stopped.
#[derive(Debug, Error)]
pub enum DriverError {
    /// rtnetlink failed.
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    /// A socket could not be opened (typically: not root / no CAP_NET_RAW).
    #[error("interface {interface}: {source}")]
    Socket {
        interface: String,
        #[source]
        source: io::Error,
    },
}

impl DriverError {
    /// A socket refused for want of privilege (`EPERM`, `EACCES`).
    fn is_permission(&self) -> bool {
        matches!(self, DriverError::Socket { source, .. }
            if source.kind() == io::ErrorKind::PermissionDenied)
    }
}

/// A request for an owned IP, as seen by the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestEvent {
    /// Interface it arrived on.
    pub interface: String,
    /// The owned IP asked for.
    pub ip: IpAddr,
    /// Ethernet source of the request.
    pub from: MacAddr,
    /// Why it was not answered, if it was not.
    pub dropped: Option<DropReason>,
}

/// Which form a gratuitous packet took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GratuitousKind {
    /// ARP request form (sender = target = the IP, to broadcast).
    ArpRequest,
    /// ARP reply form.
    ArpReply,
    /// Unsolicited Neighbor Advertisement to ff02::1, Override set.
    UnsolicitedNa,
}

impl GratuitousKind {
    /// Short name for logs and JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            GratuitousKind::ArpRequest => "arp-request",
            GratuitousKind::ArpReply => "arp-reply",
            GratuitousKind::UnsolicitedNa => "unsolicited-na",
        }
    }
}

/// A gratuitous packet the driver sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GratuitousEvent {
    /// Interface it went out of.
    pub interface: String,
    /// The owned IP announced.
    pub ip: IpAddr,
    /// Its form.
    pub kind: GratuitousKind,
    /// Whether the send succeeded (a failed send is still counted).
    pub sent: bool,
}

enum Command {
    Own(IpAddr, AllowedInterfaces),
    Disown(IpAddr),
    Claim(String, IpAddr, AllowedInterfaces),
    Release(String, IpAddr),
    ReleaseOwner(String),
    Reannounce,
}

/// The driver stopped: its task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("the layer-2 driver has stopped")]
pub struct Stopped;

/// Control of a running driver. Cheap to clone.
#[derive(Debug, Clone)]
pub struct L2Handle {
    commands: mpsc::UnboundedSender<Command>,
    state: Arc<Mutex<L2State>>,
    events: broadcast::Sender<RequestEvent>,
    gratuitous: broadcast::Sender<GratuitousEvent>,
    netlink_overflows: Arc<AtomicU64>,
    failed: Arc<Mutex<BTreeMap<String, FailedInterface>>>,
    groups: Arc<Mutex<GroupTable>>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Own(ip, a) => write!(f, "Own({ip}, {a:?})"),
            Command::Disown(ip) => write!(f, "Disown({ip})"),
            Command::Claim(o, ip, a) => write!(f, "Claim({o:?}, {ip}, {a:?})"),
            Command::Release(o, ip) => write!(f, "Release({o:?}, {ip})"),
            Command::ReleaseOwner(o) => write!(f, "ReleaseOwner({o:?})"),
            Command::Reannounce => write!(f, "Reannounce"),
        }
    }
}

fn lock_failed(
    failed: &Mutex<BTreeMap<String, FailedInterface>>,
) -> MutexGuard<'_, BTreeMap<String, FailedInterface>> {
    failed.lock().unwrap_or_else(|e| e.into_inner())
}

fn lock_groups(groups: &Mutex<GroupTable>) -> MutexGuard<'_, GroupTable> {
    groups.lock().unwrap_or_else(|e| e.into_inner())
}

fn lock(state: &Mutex<L2State>) -> MutexGuard<'_, L2State> {
    // The state has no invariant a panic half-way could break that matters
    // more than staying up.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl L2Handle {
    /// Owns `ip` on `allowed` (empty: every eligible interface). Repeating
    /// the same call sends nothing.
    pub fn own(&self, ip: IpAddr, allowed: AllowedInterfaces) -> Result<(), Stopped> {
        self.commands
            .send(Command::Own(ip, allowed))
            .map_err(|_| Stopped)
    }

    /// Stops owning `ip`, whoever claimed it.
    pub fn disown(&self, ip: IpAddr) -> Result<(), Stopped> {
        self.commands.send(Command::Disown(ip)).map_err(|_| Stopped)
    }

    /// `owner` (e.g. a Service's `namespace/name`) wants `ip` on `allowed`;
    /// the IP is owned while any owner claims it, on the union of their
    /// lists ([`L2State::claim`]).
    pub fn claim(
        &self,
        owner: impl Into<String>,
        ip: IpAddr,
        allowed: AllowedInterfaces,
    ) -> Result<(), Stopped> {
        self.commands
            .send(Command::Claim(owner.into(), ip, allowed))
            .map_err(|_| Stopped)
    }

    /// `owner` no longer wants `ip` ([`L2State::release`]).
    pub fn release(&self, owner: impl Into<String>, ip: IpAddr) -> Result<(), Stopped> {
        self.commands
            .send(Command::Release(owner.into(), ip))
            .map_err(|_| Stopped)
    }

    /// Announces every owned address again ([`L2State::reannounce`]) and
    /// restates every solicited-node group joined with an MLDv2 report per
    /// interface ([`crate::packet::mld2_reports`]): after a cut, a snooping
    /// switch may have forgotten this node's groups (its reports to the
    /// querier were lost), and would not forward solicitations for these
    /// addresses here until the next query (125 s by default).
    pub fn reannounce(&self) -> Result<(), Stopped> {
        self.commands.send(Command::Reannounce).map_err(|_| Stopped)
    }

    /// Releases every claim of `owner` ([`L2State::release_owner`]).
    pub fn release_owner(&self, owner: impl Into<String>) -> Result<(), Stopped> {
        self.commands
            .send(Command::ReleaseOwner(owner.into()))
            .map_err(|_| Stopped)
    }

    /// Owners claiming `ip`, sorted.
    pub fn owners(&self, ip: &IpAddr) -> Vec<String> {
        lock(&self.state).owners(ip)
    }

    /// Interfaces `ip` is announced on, sorted (for ServiceL2Status).
    pub fn announced_on(&self, ip: &IpAddr) -> Vec<String> {
        lock(&self.state).announced_on(ip)
    }

    /// Counters of `ip`.
    pub fn counters(&self, ip: &IpAddr) -> IpCounters {
        lock(&self.state).counters(ip)
    }

    /// Eligible interfaces right now.
    pub fn interfaces(&self) -> Vec<Interface> {
        lock(&self.state).interfaces().cloned().collect()
    }

    /// Requests for owned IPs from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<RequestEvent> {
        self.events.subscribe()
    }

    /// Gratuitous packets sent from now on.
    pub fn subscribe_gratuitous(&self) -> broadcast::Receiver<GratuitousEvent> {
        self.gratuitous.subscribe()
    }

    /// How many times the rtnetlink notification socket overflowed (the
    /// kernel dropped link or address notifications); each one made the
    /// driver re-dump links and addresses.
    pub fn netlink_overflows(&self) -> u64 {
        self.netlink_overflows.load(Ordering::Relaxed)
    }

    /// The eligible interfaces whose sockets could not be opened (not
    /// answered on, retried with backoff), by name.
    pub fn failed_interfaces(&self) -> Vec<FailedInterface> {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Solicited-node groups not joined although wanted (or not left
    /// although unwanted), each waiting for its retry (1 s doubling to
    /// 60 s, jittered). Empty when every owned IPv6 address has its group.
    pub fn failed_groups(&self) -> Vec<FailedGroup> {
        lock_groups(&self.groups).failed()
    }

    /// The solicited-node groups joined, as `(ifindex, interface, group)`
    /// with the number of the membership socket holding each.
    pub fn joined_groups(&self) -> Vec<((u32, String, std::net::Ipv6Addr), usize)> {
        lock_groups(&self.groups)
            .joined()
            .iter()
            .map(|(k, s)| (k.clone(), *s))
            .collect()
    }

    /// Failed solicited-node join attempts since start (also the metric
    /// `metallb_rs_layer2_group_join_failures_total` when metrics are on).
    pub fn group_join_failures(&self) -> u64 {
        lock_groups(&self.groups).join_failures()
    }
}

struct IfSockets {
    iface: Interface,
    arp: Option<Arc<PacketSocket>>,
    ndp: Option<Arc<PacketSocket>>,
    readers: Vec<JoinHandle<()>>,
}

impl Drop for IfSockets {
    fn drop(&mut self) {
        for r in &self.readers {
            r.abort();
        }
    }
}

struct Driver {
    state: Arc<Mutex<L2State>>,
    watcher: InterfaceWatcher,
    exclude: ExcludeList,
    sockets: BTreeMap<String, IfSockets>,
    memberships: Memberships,
    /// Which group is joined on which membership socket; shared with the
    /// handles.
    groups: Arc<Mutex<GroupTable>>,
    metrics: Option<Metrics>,
    frames_tx: mpsc::Sender<(String, Vec<u8>)>,
    frames_rx: mpsc::Receiver<(String, Vec<u8>)>,
    commands: mpsc::UnboundedReceiver<Command>,
    events: broadcast::Sender<RequestEvent>,
    gratuitous: broadcast::Sender<GratuitousEvent>,
    open_fault: Option<OpenFault>,
    /// Interfaces whose sockets could not be opened, shared with the
    /// handles.
    failed: Arc<Mutex<BTreeMap<String, FailedInterface>>>,
}

/// Starts the driver in the calling thread's network namespace (sockets
/// and the netlink subscription are created here). Fails when rtnetlink
/// fails, or when the sockets cannot be opened for want of privilege
/// (`EPERM`/`EACCES`: no `CAP_NET_RAW`, which no retry cures); any other
/// interface's socket error leaves that interface out, retried with
/// backoff (1 s doubling to 60 s, [`L2Handle::failed_interfaces`]), and
/// the others are answered on.
pub async fn start(
    cfg: DriverConfig,
) -> Result<(L2Handle, JoinHandle<Result<(), DriverError>>), DriverError> {
    let watcher = InterfaceWatcher::start().await?;
    let netlink_overflows = watcher.overflow_counter();
    let mut state = L2State::new(cfg.announce);
    let metrics = cfg.metrics.clone();
    if let Some(m) = cfg.metrics {
        state = state.with_metrics(m);
    }
    let state = Arc::new(Mutex::new(state));
    let (commands_tx, commands) = mpsc::unbounded_channel();
    let (frames_tx, frames_rx) = mpsc::channel(RX_QUEUE);
    let (events, _) = broadcast::channel(1024);
    let (gratuitous, _) = broadcast::channel(1024);
    let mut d = Driver {
        state: state.clone(),
        watcher,
        exclude: cfg.exclude,
        sockets: BTreeMap::new(),
        memberships: Memberships::new(),
        groups: Arc::new(Mutex::new(GroupTable::new(jitter_seed()))),
        metrics,
        frames_tx,
        frames_rx,
        commands,
        events: events.clone(),
        gratuitous: gratuitous.clone(),
        open_fault: cfg.open_fault,
        failed: Arc::default(),
    };
    if let Err(e) = d.reconcile(Instant::now())
        && e.is_permission()
    {
        return Err(e);
    }
    let handle = L2Handle {
        commands: commands_tx,
        state,
        events,
        gratuitous,
        netlink_overflows,
        failed: d.failed.clone(),
        groups: d.groups.clone(),
    };
    Ok((handle, tokio::spawn(d.run())))
}

async fn read_frames(sock: Arc<PacketSocket>, name: String, tx: mpsc::Sender<(String, Vec<u8>)>) {
    let mut buf = vec![0u8; RX_BUFFER];
    loop {
        match sock.recv(&mut buf).await {
            Ok(n) => match tx.try_send((name.clone(), buf[..n].to_vec())) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::debug!(interface = %name, "receive queue full, frame dropped");
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return,
            },
            Err(e) => {
                // ENETDOWN and friends while an interface goes away; the
                // netlink notification will remove this reader.
                tracing::debug!(interface = %name, error = %e, "packet socket receive failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

impl Driver {
    fn open(&self, iface: &Interface) -> Result<IfSockets, DriverError> {
        let err = |source| DriverError::Socket {
            interface: iface.name.clone(),
            source,
        };
        if let Some(e) = self.open_fault.as_ref().and_then(|f| (f.0)(&iface.name)) {
            return Err(err(e));
        }
        let mut s = IfSockets {
            iface: iface.clone(),
            arp: None,
            ndp: None,
            readers: Vec::new(),
        };
        for (want, proto) in [(iface.arp, Protocol::Arp), (iface.ndp, Protocol::Ndp)] {
            if !want {
                continue;
            }
            let sock = Arc::new(PacketSocket::open(iface.index, proto).map_err(err)?);
            s.readers.push(tokio::spawn(read_frames(
                sock.clone(),
                iface.name.clone(),
                self.frames_tx.clone(),
            )));
            if proto == Protocol::Arp {
                s.arp = Some(sock);
            } else {
                s.ndp = Some(sock);
            }
        }
        Ok(s)
    }

    /// Brings sockets and state in line with the link table. Returns the
    /// first socket error; the other interfaces are still set up. An
    /// interface that failed is tried again once its retry is due (or at
    /// once when its link was replaced, a new index).
    fn reconcile(&mut self, now: Instant) -> Result<(), DriverError> {
        let ifaces: Vec<Interface> = self
            .watcher
            .table()
            .descriptions()
            .iter()
            .filter_map(|d| Interface::from_description(d, &self.exclude).ok())
            .collect();
        let mut first_err = None;
        let mut usable = Vec::new();
        for iface in &ifaces {
            let keep = self.sockets.get(&iface.name).is_some_and(|s| {
                s.iface.index == iface.index && s.iface.arp == iface.arp && s.iface.ndp == iface.ndp
            });
            if keep {
                if let Some(s) = self.sockets.get_mut(&iface.name) {
                    s.iface = iface.clone();
                }
                usable.push(iface.clone());
                continue;
            }
            self.sockets.remove(&iface.name);
            let previous = lock_failed(&self.failed).get(&iface.name).cloned();
            if let Some(f) = &previous
                && f.index == iface.index
                && f.next_retry > now
            {
                continue; // not due yet
            }
            match self.open(iface) {
                Ok(s) => {
                    tracing::info!(interface = %iface.name, arp = iface.arp, ndp = iface.ndp, "responding on interface");
                    lock_failed(&self.failed).remove(&iface.name);
                    self.sockets.insert(iface.name.clone(), s);
                    usable.push(iface.clone());
                }
                Err(e) => {
                    let attempts = previous
                        .filter(|f| f.index == iface.index)
                        .map_or(1, |f| f.attempts.saturating_add(1));
                    let delay = retry_delay(attempts);
                    tracing::warn!(error = %e, attempts, retry_in = ?delay, "cannot respond on interface");
                    lock_failed(&self.failed).insert(
                        iface.name.clone(),
                        FailedInterface {
                            name: iface.name.clone(),
                            index: iface.index,
                            error: e.to_string(),
                            attempts,
                            next_retry: now + delay,
                        },
                    );
                    first_err.get_or_insert(e);
                }
            }
        }
        lock_failed(&self.failed).retain(|name, _| ifaces.iter().any(|i| &i.name == name));
        let gone: Vec<String> = self
            .sockets
            .keys()
            .filter(|n| !usable.iter().any(|i| &i.name == *n))
            .cloned()
            .collect();
        for name in gone {
            if let Some(s) = self.sockets.remove(&name) {
                tracing::info!(interface = %name, "no longer responding on interface");
                self.memberships.forget_interface(s.iface.index);
                lock_groups(&self.groups).forget_interface(s.iface.index);
            }
        }
        lock(&self.state).set_interfaces(now, usable);
        self.sync_groups(now);
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Brings the memberships in line with the groups the state wants.
    fn sync_groups(&mut self, now: Instant) {
        let wanted = lock(&self.state).memberships();
        let actions = lock_groups(&self.groups).set_wanted(now, wanted);
        self.carry_out(now, actions);
    }

    /// Carries out group actions, feeding each result back to the table
    /// and carrying out what it asks next (a join moved to another socket,
    /// a socket closed).
    fn carry_out(&mut self, now: Instant, actions: Vec<GroupAction>) {
        let mut queue = std::collections::VecDeque::from(actions);
        while let Some(a) = queue.pop_front() {
            let Some(a) = lock_groups(&self.groups).retarget(now, a) else {
                continue;
            };
            let outcome = self.memberships.apply(&a);
            let next = {
                let mut groups = lock_groups(&self.groups);
                match (&a, outcome) {
                    (GroupAction::Join { key, socket }, Outcome::Joined(r)) => {
                        if let Err(e) = &r {
                            tracing::warn!(interface = %key.1, group = %key.2, socket, error = %e, "solicited-node group join failed");
                            if let Some(m) = &self.metrics {
                                m.group_join_failed(&key.1);
                            }
                        }
                        groups.join_result(now, key, *socket, r)
                    }
                    (GroupAction::Leave { key, socket }, Outcome::Left(r)) => {
                        if let Err(e) = &r {
                            tracing::warn!(interface = %key.1, group = %key.2, socket, error = %e, "solicited-node group leave failed");
                        }
                        groups.leave_result(now, key, *socket, r)
                    }
                    _ => Vec::new(),
                }
            };
            queue.extend(next);
        }
    }

    /// Sends MLDv2 reports for every solicited-node group joined, per
    /// interface, from its link-local address. Returns the groups reported.
    fn report_groups(&self) -> usize {
        let mut by_iface: BTreeMap<String, Vec<Ipv6Addr>> = BTreeMap::new();
        for (_, name, group) in lock_groups(&self.groups).joined().keys() {
            by_iface.entry(name.clone()).or_default().push(*group);
        }
        let mut reported = 0;
        for (name, groups) in by_iface {
            let Some(s) = self.sockets.get(&name) else {
                continue;
            };
            let (Some(sock), Some(ll)) = (&s.ndp, s.iface.link_local) else {
                continue;
            };
            for frame in mld2_reports(s.iface.mac, ll, &groups) {
                if let Err(e) = sock.send(&frame) {
                    tracing::warn!(interface = %name, error = %e, "MLD report not sent");
                }
            }
            reported += groups.len();
        }
        reported
    }

    fn socket_for(&self, interface: &str, ip: IpAddr) -> Option<&Arc<PacketSocket>> {
        let s = self.sockets.get(interface)?;
        match ip {
            IpAddr::V4(_) => s.arp.as_ref(),
            IpAddr::V6(_) => s.ndp.as_ref(),
        }
    }

    fn send(&self, interface: &str, ip: IpAddr, frame: &[u8]) -> bool {
        let Some(sock) = self.socket_for(interface, ip) else {
            return false;
        };
        if let Err(e) = sock.send(frame) {
            tracing::warn!(interface, %ip, error = %e, "send failed");
            return false;
        }
        true
    }

    fn command(&mut self, c: Command, now: Instant) {
        let changes = match c {
            Command::Own(ip, allowed) => lock(&self.state).own(now, ip, allowed),
            Command::Disown(ip) => lock(&self.state).disown(&ip),
            Command::Claim(owner, ip, allowed) => lock(&self.state).claim(now, &owner, ip, allowed),
            Command::Release(owner, ip) => lock(&self.state).release(now, &owner, &ip),
            Command::ReleaseOwner(owner) => lock(&self.state).release_owner(now, &owner),
            Command::Reannounce => {
                let n = lock(&self.state).reannounce(now);
                let groups = self.report_groups();
                tracing::debug!(
                    addresses = n,
                    groups,
                    "announcing every owned address again, restating the groups"
                );
                Vec::new()
            }
        };
        if !changes.is_empty() {
            self.sync_groups(now);
        }
    }

    fn frame(&mut self, interface: &str, frame: &[u8]) {
        let decision = lock(&self.state).handle_frame(interface, frame);
        let from = EthernetHeader::decode(frame)
            .map(|(h, _)| h.src)
            .unwrap_or_default();
        let (ip, dropped) = match &decision {
            Decision::Reply { ip, frame } => {
                self.send(interface, *ip, frame);
                (Some(*ip), None)
            }
            Decision::Drop { reason, ip } => (*ip, Some(*reason)),
        };
        if let Some(ip) = ip
            && lock(&self.state).owned().contains(&ip)
        {
            // No subscriber is fine.
            let _ = self.events.send(RequestEvent {
                interface: interface.to_owned(),
                ip,
                from,
                dropped,
            });
        }
    }

    fn flush(&mut self, now: Instant) {
        let out = lock(&self.state).poll(now);
        for o in out {
            let sent = self.send(&o.interface, o.ip, &o.frame);
            let kind = match ArpFrame::decode(&o.frame) {
                Ok(f) if f.arp.op == ArpOp::Reply => GratuitousKind::ArpReply,
                Ok(_) => GratuitousKind::ArpRequest,
                Err(_) => GratuitousKind::UnsolicitedNa,
            };
            // No subscriber is fine.
            let _ = self.gratuitous.send(GratuitousEvent {
                interface: o.interface,
                ip: o.ip,
                kind,
                sent,
            });
        }
    }

    /// The earliest retry of a failed interface.
    fn next_retry(&self) -> Option<Instant> {
        lock_failed(&self.failed)
            .values()
            .map(|f| f.next_retry)
            .min()
    }

    async fn run(mut self) -> Result<(), DriverError> {
        loop {
            let retry = self.next_retry();
            let group_retry = lock_groups(&self.groups).next_retry();
            let wake = [lock(&self.state).next_wakeup(), retry, group_retry]
                .into_iter()
                .flatten()
                .min();
            tokio::select! {
                c = self.commands.recv() => match c {
                    Some(c) => self.command(c, Instant::now()),
                    None => return Ok(()),
                },
                r = self.watcher.changed() => {
                    r?;
                    // Socket errors were logged; keep serving the rest.
                    let _ = self.reconcile(Instant::now());
                }
                Some((name, frame)) = self.frames_rx.recv() => self.frame(&name, &frame),
                () = sleep_until(wake), if wake.is_some() => {}
            }
            let now = Instant::now();
            if retry.is_some_and(|r| r <= now) {
                // Errors were logged and recorded; keep serving the rest.
                let _ = self.reconcile(now);
            }
            if group_retry.is_some_and(|r| r <= now) {
                let actions = lock_groups(&self.groups).poll(now);
                self.carry_out(now, actions);
            }
            self.flush(now);
        }
    }
}

/// A seed for the group retry jitter: differs between processes and runs.
fn jitter_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32)
}

async fn sleep_until(wake: Option<Instant>) {
    match wake {
        Some(w) => tokio::time::sleep_until(tokio::time::Instant::from_std(w)).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_backoff_doubles_to_a_minute() {
        let secs: Vec<u64> = (1..=9).map(|a| retry_delay(a).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(retry_delay(u32::MAX), RETRY_MAX);
    }

    #[test]
    fn only_a_permission_error_is_fatal_at_start() {
        let e = |kind: io::ErrorKind| DriverError::Socket {
            interface: "eth0".into(),
            source: io::Error::from(kind),
        };
        assert!(e(io::ErrorKind::PermissionDenied).is_permission());
        assert!(!e(io::ErrorKind::OutOfMemory).is_permission());
        assert!(
            !DriverError::Socket {
                interface: "eth0".into(),
                source: io::Error::from_raw_os_error(nix::libc::ENODEV),
            }
            .is_permission()
        );
    }
}
