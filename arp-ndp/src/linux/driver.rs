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
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use thiserror::Error;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

use super::membership::Memberships;
use super::netlink::{InterfaceWatcher, NetlinkError};
use super::socket::{PacketSocket, Protocol};
use crate::announce::AnnounceConfig;
use crate::interfaces::{AllowedInterfaces, ExcludeList, Interface};
use crate::metrics::Metrics;
use crate::packet::{ArpFrame, ArpOp, EthernetHeader, MacAddr};
use crate::responder::{Decision, DropReason};
use crate::state::{IpCounters, L2State, MembershipChange};

/// Largest frame read (jumbo frames); longer ones are truncated, which
/// no ARP or NS frame is.
const RX_BUFFER: usize = 9216;
/// Frames queued between the socket readers and the main task.
const RX_QUEUE: usize = 1024;

/// How to run.
#[derive(Debug, Clone, Default)]
pub struct DriverConfig {
    /// Interfaces never used.
    pub exclude: ExcludeList,
    /// Gratuitous announcement timing.
    pub announce: AnnounceConfig,
    /// Counters to export, if any.
    pub metrics: Option<Metrics>,
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
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Own(ip, a) => write!(f, "Own({ip}, {a:?})"),
            Command::Disown(ip) => write!(f, "Disown({ip})"),
            Command::Claim(o, ip, a) => write!(f, "Claim({o:?}, {ip}, {a:?})"),
            Command::Release(o, ip) => write!(f, "Release({o:?}, {ip})"),
            Command::ReleaseOwner(o) => write!(f, "ReleaseOwner({o:?})"),
        }
    }
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
    frames_tx: mpsc::Sender<(String, Vec<u8>)>,
    frames_rx: mpsc::Receiver<(String, Vec<u8>)>,
    commands: mpsc::UnboundedReceiver<Command>,
    events: broadcast::Sender<RequestEvent>,
    gratuitous: broadcast::Sender<GratuitousEvent>,
}

/// Starts the driver in the calling thread's network namespace (sockets
/// and the netlink subscription are created here). Fails if the sockets
/// cannot be opened on an eligible interface.
pub async fn start(
    cfg: DriverConfig,
) -> Result<(L2Handle, JoinHandle<Result<(), DriverError>>), DriverError> {
    let watcher = InterfaceWatcher::start().await?;
    let netlink_overflows = watcher.overflow_counter();
    let mut state = L2State::new(cfg.announce);
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
        frames_tx,
        frames_rx,
        commands,
        events: events.clone(),
        gratuitous: gratuitous.clone(),
    };
    d.reconcile(Instant::now())?;
    let handle = L2Handle {
        commands: commands_tx,
        state,
        events,
        gratuitous,
        netlink_overflows,
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
    /// first socket error; the other interfaces are still set up.
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
            match self.open(iface) {
                Ok(s) => {
                    tracing::info!(interface = %iface.name, arp = iface.arp, ndp = iface.ndp, "responding on interface");
                    self.sockets.insert(iface.name.clone(), s);
                    usable.push(iface.clone());
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot respond on interface");
                    first_err.get_or_insert(e);
                }
            }
        }
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
            }
        }
        let changes = lock(&self.state).set_interfaces(now, usable);
        self.apply_memberships(&changes);
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn apply_memberships(&mut self, changes: &[MembershipChange]) {
        for c in changes {
            if let Err(e) = self.memberships.apply(c) {
                tracing::warn!(change = ?c, error = %e, "solicited-node membership change failed");
            }
        }
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
        };
        self.apply_memberships(&changes);
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

    async fn run(mut self) -> Result<(), DriverError> {
        loop {
            let wake = lock(&self.state).next_wakeup();
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
            self.flush(Instant::now());
        }
    }
}

async fn sleep_until(wake: Option<Instant>) {
    match wake {
        Some(w) => tokio::time::sleep_until(tokio::time::Instant::from_std(w)).await,
        None => std::future::pending().await,
    }
}
