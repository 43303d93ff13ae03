//! The session driver: one tokio task per peer wiring the pure
//! [`crate::fsm::Session`], the [`crate::transport`], the
//! [`crate::rib_out::AdjRibOut`], the published [`SessionState`] (a
//! `tokio::sync::watch`) and, optionally, the [`SessionMetrics`].
//!
//! [`Session::spawn`] starts the task and the session (ManualStart); the
//! [`Session`] handle is the API: [`Session::set_advertisements`],
//! [`Session::reset`] and [`Session::hold_down`] / [`Session::release`]
//! (BFD coupling), [`Session::shutdown`] (Cease /
//! Administrative Shutdown), [`Session::deconfigure`] (Cease / Peer
//! De-configured) and [`Session::planned_restart`] (graceful restart,
//! RFC 4724 / RFC 8538), [`Session::state`] and [`Session::events`].
//!
//! Inside the task:
//! - each connection has a reader task (raw bytes to the session task,
//!   which frames and decodes them with the connection's current
//!   [`DecodeContext`], so a `Negotiated` output applies before the next
//!   frame) and a writer task (a FIFO of encoded messages, every write
//!   bounded in time, each one reported when the socket has taken it;
//!   `Close` flushes what was queued, bounded by [`CLOSE_FLUSH_TIMEOUT`],
//!   then closes);
//! - send-side backpressure: the session task hands the writer at most
//!   [`WRITE_BUDGET`] bytes more than the socket has taken. What waits
//!   beyond that stays with the session task, the FSM's messages (OPEN,
//!   KEEPALIVE, NOTIFICATION; one KEEPALIVE waiting is enough) before the
//!   UPDATEs; and the Adj-RIB-Out is drained again only once the socket
//!   has taken everything of its previous drain. While a peer does not
//!   read, changes therefore coalesce in the Adj-RIB-Out, one state per
//!   prefix, and only the latest is sent when it reads again. The
//!   markers of a drain (End-of-RIB, BoRR/EoRR) stay after its UPDATEs:
//!   moved ahead, they would make the peer drop routes still on the way;
//! - the RFC 9687 SendHoldTimer is the FSM's ([`Timer::SendHold`]): the
//!   task reports output waiting and every message the socket takes
//!   ([`Input::SendProgress`]); a peer that stops reading for the
//!   SendHoldTime (`fsm::Config::send_hold_time`) gets Send Hold Timer
//!   Expired (best effort) and the session goes Idle. The writer's own
//!   bound on one write, [`write_deadline`], is a backstop behind it;
//! - connections come from a [`Connector`]: [`TcpConnector`] unless
//!   [`Session::spawn_with_connector`] gives another (tests run the whole
//!   task over in-memory duplex streams);
//! - each [`Timer`] is one sleeping task tagged with a generation, so an
//!   expiry of a timer cancelled or restarted since is dropped;
//! - the next hops: the session's local address for its family; for the
//!   other family the first address of that family on the same interface;
//!   for IPv6 (RFC 2545 section 3) the global address (the local one, or
//!   the interface's first global IPv6 address when the local one is IPv4
//!   or link-local) plus the interface's link-local address when the peer
//!   shares a subnet with the interface (a 32-byte next hop), never a
//!   link-local address in the global slot; `sourceAddress` is the local
//!   address when set;
//!   no address means that family is not announced and the Adj-RIB-Out
//!   state says why ([`crate::state::FamilyDisabled::NoNextHop`]);
//! - the optional listener ([`PeerConfig::listen`]) is a registration on a
//!   [`Listeners`] set shared by every session on the same local address
//!   (see [`crate::listener`]): [`Session::spawn`] uses the process-wide
//!   set ([`Listeners::process`]), [`Session::spawn_with_listeners`] the
//!   caller's. The registration lives as long as the session task.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::fsm::{
    self, CeaseSubcode, ConnId, FsmEvent, FsmState, Input, Output, PeerAs, ResendCause,
    SessionParams, Timer,
};
use crate::listener::{ListenError, ListenEvent, ListenGuard, ListenKey, ListenRequest, Listeners};
use crate::metrics::{SessionMetrics, peer_label};
use crate::rib_out::{AdjRibOut, Advertisement, SessionContext};
use crate::state::{CapabilitiesState, LastError, SessionState};
use crate::transport::{
    self, ConnectOptions, Connection, Connector, InterfaceInfo, TcpConnector, TransportError,
};
use crate::wire::{DecodeContext, EncodeContext, Message, MessageType, NextHop, frame};

/// How long closing a connection may take to flush what was queued.
pub const CLOSE_FLUSH_TIMEOUT: Duration = Duration::from_secs(3);

/// Bytes handed to a connection's writer beyond what its socket has taken
/// (the bounded buffer in front of the socket send buffer).
pub const WRITE_BUDGET: usize = 64 * 1024;

/// Messages the writer's channel holds (the byte budget is the real bound).
const WRITER_CHANNEL: usize = 1024;

/// The writer's bound on one message write: the SendHoldTime (RFC 9687) of
/// `fsm` before negotiation (never shorter than the negotiated one) plus
/// [`CLOSE_FLUSH_TIMEOUT`], so that the FSM's SendHoldTimer, which also
/// sends the NOTIFICATION, normally fires first.
pub fn write_deadline(fsm: &fsm::Config) -> Duration {
    fsm.send_hold_duration(fsm.hold_time().seconds()) + CLOSE_FLUSH_TIMEOUT
}

/// One peer's configuration for the driver.
#[derive(Clone, PartialEq, Eq)]
pub struct PeerConfig {
    /// The FSM's configuration (ASNs, timers, capabilities, router ID).
    pub fsm: fsm::Config,
    /// `peerAddress:peerPort`.
    pub peer: SocketAddr,
    /// `sourceAddress`.
    pub source: Option<IpAddr>,
    /// `ebgpMultiHop`.
    pub ebgp_multihop: bool,
    /// TCP MD5 password (RFC 2385), installed for the peer on every
    /// connecting socket and on the listener. Never printed.
    pub password: Option<String>,
    /// `vrf`.
    pub vrf: Option<String>,
    /// Bound on one TCP handshake; `None`: the ConnectRetry delay bounds it.
    pub connect_timeout: Option<Duration>,
    /// Optional listener for the peer dialling in (off by default): the
    /// local `addr:port`, shared with every other session listening there
    /// (in the same `vrf`), see [`crate::listener`].
    pub listen: Option<SocketAddr>,
    /// GTSM (RFC 5082, TTL security): the peer is at most this many hops
    /// away (1: directly connected). Our connections send with TTL / hop
    /// limit 255, and the kernel drops segments of the peer's connections
    /// arriving with less than `256 - hops` (`IP_MINTTL` /
    /// `IPV6_MINHOPCOUNT` on the connecting and the accepted sockets).
    /// `None` (the default): no check.
    pub ttl_security_hops: Option<u8>,
}

impl std::fmt::Debug for PeerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerConfig")
            .field("fsm", &self.fsm)
            .field("peer", &self.peer)
            .field("source", &self.source)
            .field("ebgp_multihop", &self.ebgp_multihop)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("vrf", &self.vrf)
            .field("connect_timeout", &self.connect_timeout)
            .field("listen", &self.listen)
            .field("ttl_security_hops", &self.ttl_security_hops)
            .finish()
    }
}

impl PeerConfig {
    pub fn new(fsm: fsm::Config, peer: SocketAddr) -> Self {
        Self {
            fsm,
            peer,
            source: None,
            ebgp_multihop: false,
            password: None,
            vrf: None,
            connect_timeout: None,
            listen: None,
            ttl_security_hops: None,
        }
    }

    /// Whether the session is iBGP as far as it is known before the OPEN
    /// (a dynamic external peer is eBGP; dynamic internal is iBGP).
    pub fn is_ibgp(&self) -> bool {
        let local = self.fsm.effective_local_as();
        match self.fsm.peer_as {
            PeerAs::Fixed(asn) => asn == local,
            PeerAs::Internal => true,
            PeerAs::External => false,
        }
    }

    /// The TTL / hop limit of this session's connections: 255 with GTSM
    /// ([`PeerConfig::ttl_security_hops`]), else [`transport::ttl_for`].
    pub fn ttl(&self) -> u8 {
        if self.ttl_security_hops.is_some() {
            return transport::TTL_MULTIHOP;
        }
        transport::ttl_for(self.is_ibgp(), self.ebgp_multihop)
    }

    /// The smallest TTL / hop limit accepted from the peer with GTSM
    /// ([`transport::min_ttl_for_hops`]); `None` without.
    pub fn min_ttl(&self) -> Option<u8> {
        self.ttl_security_hops.map(transport::min_ttl_for_hops)
    }
}

/// The session could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("invalid session configuration: {0}")]
    Config(#[from] fsm::ConfigError),
    #[error("the session task has ended")]
    Gone,
}

/// Something that happened to the session, for followers such as
/// `metallbctl bgp-probe` (the watch of [`SessionState`] may skip
/// intermediate states; this does not, unless the follower lags).
///
/// Every subscription ([`Session::events`]) starts with one
/// [`SessionEvent::Current`]: what the events before it established, taken
/// atomically with the subscription, so that a follower that subscribes
/// after the session has moved (the task runs as soon as it is spawned)
/// misses nothing it needs: the events it receives are exactly those after
/// that state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum SessionEvent {
    /// The state when the subscription was taken (first event of every
    /// subscription, and again after the follower lagged): the FSM state,
    /// the negotiation of the current connection (OpenConfirm and
    /// Established only) and the last error recorded, if any.
    Current {
        state: FsmState,
        negotiated: Option<Box<NegotiatedEvent>>,
        last_error: Option<String>,
    },
    StateChanged {
        from: FsmState,
        to: FsmState,
        reason: FsmEvent,
    },
    /// The OPEN exchange settled (OpenConfirm).
    Negotiated(Box<NegotiatedEvent>),
    /// An error was recorded as the session's last error.
    Error { text: String },
}

/// What [`SessionEvent::Negotiated`] carries.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NegotiatedEvent {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub local_as: u32,
    pub peer_as: u32,
    pub ibgp: bool,
    pub local_id: std::net::Ipv4Addr,
    pub peer_id: std::net::Ipv4Addr,
    pub hold_time: u16,
    pub keepalive_time: u16,
    pub capabilities: CapabilitiesState,
    pub families_disabled: Vec<String>,
}

/// Broadcast capacity: a follower this far behind lags (and is given a
/// [`SessionEvent::Current`] again).
const EVENT_CAPACITY: usize = 256;

/// The session's event broadcast and the state its events add up to,
/// under one lock so that a subscription and its [`SessionEvent::Current`]
/// are taken atomically with respect to the events sent.
#[derive(Debug)]
struct EventHub(Mutex<HubState>);

#[derive(Debug)]
struct HubState {
    tx: broadcast::Sender<SessionEvent>,
    state: FsmState,
    negotiated: Option<Box<NegotiatedEvent>>,
    last_error: Option<String>,
}

impl EventHub {
    fn new() -> Self {
        let (tx, _) = broadcast::channel(EVENT_CAPACITY);
        Self(Mutex::new(HubState {
            tx,
            state: FsmState::Idle,
            negotiated: None,
            last_error: None,
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HubState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records what `event` changes and sends it to every follower.
    fn emit(&self, event: SessionEvent) {
        let mut hub = self.lock();
        match &event {
            SessionEvent::StateChanged { to, .. } => {
                hub.state = *to;
                if !to.is_negotiated() {
                    hub.negotiated = None;
                }
            }
            SessionEvent::Negotiated(n) => hub.negotiated = Some(n.clone()),
            SessionEvent::Error { text } => hub.last_error = Some(text.clone()),
            SessionEvent::Current { .. } => {}
        }
        // No follower is not an error.
        let _ = hub.tx.send(event);
    }

    /// A new receiver and the state it starts from.
    fn subscribe(&self) -> (SessionEvent, broadcast::Receiver<SessionEvent>) {
        let hub = self.lock();
        let current = SessionEvent::Current {
            state: hub.state,
            negotiated: hub.negotiated.clone(),
            last_error: hub.last_error.clone(),
        };
        (current, hub.tx.subscribe())
    }
}

/// A follower's subscription to a session's events ([`Session::events`]):
/// first a [`SessionEvent::Current`], then every event after it. A follower
/// that falls [`EVENT_CAPACITY`] events behind gets
/// [`broadcast::error::RecvError::Lagged`] once, then a fresh
/// [`SessionEvent::Current`] and the events after it. Ends
/// ([`broadcast::error::RecvError::Closed`]) when the session task has
/// ended and the [`Session`] is dropped.
#[derive(Debug)]
pub struct SessionEvents {
    first: Option<SessionEvent>,
    rx: broadcast::Receiver<SessionEvent>,
    /// Weak: a follower must not keep the broadcast open.
    hub: Weak<EventHub>,
}

impl SessionEvents {
    fn new(hub: &Arc<EventHub>) -> Self {
        let (current, rx) = hub.subscribe();
        Self {
            first: Some(current),
            rx,
            hub: Arc::downgrade(hub),
        }
    }

    /// The next event (cancel safe).
    pub async fn recv(&mut self) -> Result<SessionEvent, broadcast::error::RecvError> {
        if let Some(first) = self.first.take() {
            return Ok(first);
        }
        let received = self.rx.recv().await;
        self.after(received)
    }

    /// The next event if one is waiting.
    pub fn try_recv(&mut self) -> Result<SessionEvent, broadcast::error::TryRecvError> {
        if let Some(first) = self.first.take() {
            return Ok(first);
        }
        match self.rx.try_recv() {
            Err(broadcast::error::TryRecvError::Lagged(n)) => {
                self.resubscribe();
                Err(broadcast::error::TryRecvError::Lagged(n))
            }
            other => other,
        }
    }

    fn after(
        &mut self,
        received: Result<SessionEvent, broadcast::error::RecvError>,
    ) -> Result<SessionEvent, broadcast::error::RecvError> {
        if let Err(broadcast::error::RecvError::Lagged(_)) = &received {
            self.resubscribe();
        }
        received
    }

    /// After a lag: the current state again, and the events after it.
    fn resubscribe(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            let (current, rx) = hub.subscribe();
            self.first = Some(current);
            self.rx = rx;
        }
    }
}

enum Command {
    SetAdvertisements(Vec<Advertisement>),
    Reset(String),
    HoldDown {
        reason: String,
        cease: CeaseSubcode,
    },
    Release,
    Stop {
        how: Close,
        done: oneshot::Sender<()>,
    },
}

/// How [`Session`] closes for good.
enum Close {
    /// Cease/Administrative Shutdown with an RFC 9003 message.
    AdminShutdown(String),
    /// Cease/Peer De-configured.
    Deconfigured,
    /// [`Input::PlannedRestart`]: the peer keeps our routes when graceful
    /// restart was negotiated.
    PlannedRestart(String),
}

enum Event {
    Connected {
        conn: ConnId,
        result: Result<Connection, TransportError>,
    },
    Accepted(TcpStream),
    ListenFailed(ListenError),
    Data {
        conn: ConnId,
        bytes: Bytes,
    },
    ReadClosed {
        conn: ConnId,
        error: Option<std::io::Error>,
    },
    WriteFailed {
        conn: ConnId,
        error: std::io::Error,
    },
    /// The socket took a message of `bytes` bytes.
    Written {
        conn: ConnId,
        bytes: usize,
    },
    TimerFired {
        timer: Timer,
        generation: u64,
    },
}

enum WriterMsg {
    Data(Bytes),
    Close,
}

/// A handle on one running session. Dropping it stops the task without a
/// NOTIFICATION (the connection just closes); use [`Session::shutdown`] or
/// [`Session::deconfigure`] to close properly.
#[derive(Debug)]
pub struct Session {
    commands: mpsc::UnboundedSender<Command>,
    state: watch::Receiver<SessionState>,
    events: Arc<EventHub>,
    task: Option<JoinHandle<()>>,
}

impl Session {
    /// Starts the session task (on the current tokio runtime) and the
    /// session. `metrics`: the session's series, moved with each state.
    /// The listener, when [`PeerConfig::listen`] is set, is shared through
    /// the process-wide [`Listeners::process`].
    pub fn spawn(
        config: PeerConfig,
        metrics: Option<SessionMetrics>,
    ) -> Result<Self, SessionError> {
        Self::spawn_with_listeners(config, metrics, Listeners::process())
    }

    /// [`Session::spawn`] with the listener registered on `listeners`
    /// (the speaker's set, shared by all its sessions).
    pub fn spawn_with_listeners(
        config: PeerConfig,
        metrics: Option<SessionMetrics>,
        listeners: Listeners,
    ) -> Result<Self, SessionError> {
        Self::spawn_with_connector(config, metrics, listeners, Arc::new(TcpConnector))
    }

    /// [`Session::spawn_with_listeners`] with outgoing connections opened
    /// by `connector` (e.g. in-memory streams in tests) instead of TCP.
    pub fn spawn_with_connector(
        config: PeerConfig,
        metrics: Option<SessionMetrics>,
        listeners: Listeners,
        connector: Arc<dyn Connector>,
    ) -> Result<Self, SessionError> {
        let fsm = fsm::Session::new(config.fsm.clone())?;
        let now = SystemTime::now();
        let peer_addr = config.peer;
        let state = SessionState::new(peer_label(config.peer), now);
        let (state_tx, state_rx) = watch::channel(state.clone());
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let events = Arc::new(EventHub::new());
        let (ev_tx, ev_rx) = mpsc::channel(256);
        let driver = Driver {
            config,
            fsm,
            rib: AdjRibOut::new(),
            state,
            state_tx,
            metrics,
            events: events.clone(),
            ev_tx,
            conns: HashMap::new(),
            connecting: HashMap::new(),
            timers: HashMap::new(),
            timer_generation: 0,
            established: None,
            passive_seq: 0,
            listeners,
            connector,
            listen_guard: None,
            listener: None,
            closing: Vec::new(),
            stopping: false,
            jitter: jitter_seed(peer_addr),
        };
        let task = tokio::spawn(driver.run(cmd_rx, ev_rx));
        Ok(Self {
            commands: cmd_tx,
            state: state_rx,
            events,
            task: Some(task),
        })
    }

    /// Replaces the prefixes announced to the peer (sent at once when
    /// Established, else at the next Established).
    pub fn set_advertisements(
        &self,
        advertisements: Vec<Advertisement>,
    ) -> Result<(), SessionError> {
        self.commands
            .send(Command::SetAdvertisements(advertisements))
            .map_err(|_| SessionError::Gone)
    }

    /// Drops the session at once (BFD down): Cease/BFD Down best effort,
    /// inside Hard Reset when the RFC 8538 N bit was negotiated; it
    /// restarts by itself after the IdleHold delay. To keep it down until
    /// BFD is Up again, use [`Session::hold_down`].
    pub fn reset(&self, reason: impl Into<String>) -> Result<(), SessionError> {
        self.commands
            .send(Command::Reset(reason.into()))
            .map_err(|_| SessionError::Gone)
    }

    /// Takes the session down and keeps it down until [`Session::release`]
    /// (RFC 4271 ManualStop), e.g. while BFD says the path is down: sends
    /// Cease with the subcode `cease` ([`CeaseSubcode::BfdDown`] for BFD),
    /// inside Cease/Hard Reset when the RFC 8538 N bit was negotiated so
    /// that the peer drops our routes at once instead of keeping them as
    /// stale; closes every connection and stays Idle: no connection
    /// attempts, and a connection from the peer (listener) is closed as
    /// soon as it is accepted, without an OPEN. The task, the
    /// advertisements, the metrics and the listener registration stay;
    /// [`SessionState::held_down`] says so. `reason` is for the log. On a
    /// session already held down it changes nothing.
    pub fn hold_down(
        &self,
        reason: impl Into<String>,
        cease: CeaseSubcode,
    ) -> Result<(), SessionError> {
        self.commands
            .send(Command::HoldDown {
                reason: reason.into(),
                cease,
            })
            .map_err(|_| SessionError::Gone)
    }

    /// Ends a hold-down (RFC 4271 ManualStart): the session connects again
    /// at once (fresh connect retry schedule) and, once Established, sends
    /// every advertisement again. Does nothing when not held down.
    pub fn release(&self) -> Result<(), SessionError> {
        self.commands
            .send(Command::Release)
            .map_err(|_| SessionError::Gone)
    }

    /// The published state.
    pub fn state(&self) -> watch::Receiver<SessionState> {
        self.state.clone()
    }

    /// The current state ([`SessionEvent::Current`]), then every state
    /// change, negotiation and error from then on: nothing is lost between
    /// the session's start and the subscription.
    pub fn events(&self) -> SessionEvents {
        SessionEvents::new(&self.events)
    }

    /// Closes with Cease/Administrative Shutdown and `message` (RFC 9003),
    /// waits for it to be flushed (bounded) and ends the task. With the
    /// RFC 8538 N bit negotiated it is wrapped in Hard Reset: the peer
    /// drops our routes at once either way.
    pub async fn shutdown(mut self, message: impl Into<String>) {
        self.stop(Close::AdminShutdown(message.into())).await;
    }

    /// Closes with Cease/Peer De-configured and ends the task.
    pub async fn deconfigure(mut self) {
        self.stop(Close::Deconfigured).await;
    }

    /// A planned restart of this speaker (RFC 4724): with graceful restart
    /// negotiated the connection closes without NOTIFICATION, or with
    /// Cease/Administrative Reset carrying `message` when the RFC 8538 N
    /// bit was negotiated, so the peer keeps our routes (as stale) for the
    /// restart time we advertised; nothing is withdrawn. The speaker that
    /// comes back announces its prefixes and End-of-RIB, after which the
    /// peer removes the stale routes it did not get again. Without graceful
    /// restart this is Cease/Administrative Reset and the peer drops our
    /// routes. Waits for the close to be flushed (bounded) and ends the
    /// task.
    pub async fn planned_restart(mut self, message: impl Into<String>) {
        self.stop(Close::PlannedRestart(message.into())).await;
    }

    async fn stop(&mut self, how: Close) {
        let (done, wait) = oneshot::channel();
        if self.commands.send(Command::Stop { how, done }).is_ok() {
            let _ = wait.await;
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

struct Conn {
    local: SocketAddr,
    interface: Option<InterfaceInfo>,
    buf: BytesMut,
    decode: DecodeContext,
    encode: EncodeContext,
    params: Option<SessionParams>,
    writer: mpsc::Sender<WriterMsg>,
    writer_task: JoinHandle<()>,
    reader_task: JoinHandle<()>,
    out: Outbox,
    /// The TCP socket ([`Connection::tcp`]).
    tcp: Option<OwnedFd>,
}

/// What waits to be written on one connection (see the module
/// documentation).
#[derive(Debug, Default)]
struct Outbox {
    /// The FSM's messages: handed to the writer first.
    control: VecDeque<Bytes>,
    /// The rest of the Adj-RIB-Out's last drain, in order.
    updates: VecDeque<Bytes>,
    /// Bytes handed to the writer and not taken by the socket yet.
    in_flight: usize,
    /// The FSM was told that output waits ([`Input::SendProgress`]).
    waiting: bool,
}

/// A KEEPALIVE is the bare 19-byte header of type 4.
fn is_keepalive(m: &Bytes) -> bool {
    m.len() == 19 && m[18] == 4
}

impl Outbox {
    /// Nothing waits and the socket has taken everything.
    fn is_idle(&self) -> bool {
        self.control.is_empty() && self.updates.is_empty() && self.in_flight == 0
    }

    /// Hands messages to the writer, control first, while under
    /// [`WRITE_BUDGET`].
    fn feed(&mut self, writer: &mpsc::Sender<WriterMsg>) {
        while self.in_flight < WRITE_BUDGET {
            let queue = if self.control.is_empty() {
                &mut self.updates
            } else {
                &mut self.control
            };
            let Some(m) = queue.pop_front() else {
                return;
            };
            let len = m.len();
            match writer.try_send(WriterMsg::Data(m)) {
                Ok(()) => self.in_flight += len,
                Err(TrySendError::Full(WriterMsg::Data(m))) => {
                    queue.push_front(m);
                    return;
                }
                // The writer is gone: WriteFailed or ReadClosed says why.
                Err(_) => return,
            }
        }
    }
}

struct Driver {
    config: PeerConfig,
    fsm: fsm::Session,
    rib: AdjRibOut,
    state: SessionState,
    state_tx: watch::Sender<SessionState>,
    metrics: Option<SessionMetrics>,
    events: Arc<EventHub>,
    ev_tx: mpsc::Sender<Event>,
    conns: HashMap<ConnId, Conn>,
    connecting: HashMap<ConnId, JoinHandle<()>>,
    timers: HashMap<Timer, (u64, JoinHandle<()>)>,
    timer_generation: u64,
    established: Option<(ConnId, SessionContext)>,
    passive_seq: u64,
    listeners: Listeners,
    connector: Arc<dyn Connector>,
    /// The registration on the shared listener; dropping it deregisters.
    listen_guard: Option<ListenGuard>,
    /// Forwards the registration's events to the session task.
    listener: Option<JoinHandle<()>>,
    /// Writer tasks flushing a closed connection.
    closing: Vec<JoinHandle<()>>,
    /// Shutting down or holding down: abandoned attempts are not errors.
    stopping: bool,
    /// xorshift64 state of the timer jitter.
    jitter: u64,
}

/// RFC 4271 section 10: ConnectRetry, IdleHold and Keepalive run for
/// `duration` times a factor drawn uniformly from 0.75 to 1.0 (`draw` is
/// any random number), so that sessions do not synchronise; the other
/// timers are exact.
pub fn jittered(timer: Timer, duration: Duration, draw: u64) -> Duration {
    match timer {
        Timer::ConnectRetry | Timer::IdleHold | Timer::Keepalive { .. } => {
            let permille = 750 + (draw % 251) as u32;
            duration * permille / 1000
        }
        Timer::Hold { .. } | Timer::SendHold { .. } | Timer::Stable => duration,
    }
}

/// A seed for the timer jitter: differs between sessions and processes.
fn jitter_seed(peer: SocketAddr) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    peer.hash(&mut h);
    SystemTime::now().hash(&mut h);
    h.finish() | 1
}

/// The session task ends by being aborted when its [`Session`] is dropped
/// without a shutdown: the tasks it spawned (readers, writers, connection
/// attempts, timers, the listener forwarder) end with it instead of
/// holding sockets open.
impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(l) = self.listener.take() {
            l.abort();
        }
        for (_, h) in self.connecting.drain() {
            h.abort();
        }
        for (_, (_, h)) in self.timers.drain() {
            h.abort();
        }
        for (_, c) in self.conns.drain() {
            c.reader_task.abort();
            c.writer_task.abort();
        }
        for h in self.closing.drain(..) {
            h.abort();
        }
    }
}

impl Driver {
    async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut events: mpsc::Receiver<Event>,
    ) {
        self.start_listener();
        self.input(Input::ManualStart);
        self.publish();
        loop {
            tokio::select! {
                cmd = commands.recv() => match cmd {
                    Some(Command::SetAdvertisements(ads)) => {
                        self.rib.set_advertisements(ads);
                        self.drain();
                    }
                    Some(Command::Reset(reason)) => self.input(Input::Reset { reason }),
                    Some(Command::HoldDown { reason, cease }) => self.hold_down(reason, cease),
                    Some(Command::Release) => {
                        if self.fsm.held_down() {
                            tracing::info!(peer = %self.config.peer, "BGP session released");
                        }
                        self.input(Input::Release);
                        self.state.held_down = self.fsm.held_down();
                    }
                    Some(Command::Stop { how, done }) => {
                        self.stopping = true;
                        self.input(match how {
                            Close::AdminShutdown(message) => Input::AdminShutdown { message },
                            Close::Deconfigured => Input::Deconfigured,
                            Close::PlannedRestart(message) => Input::PlannedRestart {
                                message,
                                hard: false,
                            },
                        });
                        self.publish();
                        self.finish().await;
                        let _ = done.send(());
                        return;
                    }
                    None => {
                        self.stopping = true;
                        self.finish().await;
                        return;
                    }
                },
                Some(ev) = events.recv() => self.event(ev),
            }
            self.publish();
        }
    }

    fn hold_down(&mut self, reason: String, cease: CeaseSubcode) {
        if !self.fsm.held_down() {
            tracing::info!(
                peer = %self.config.peer,
                %reason,
                cease = cease.subcode(),
                "BGP session held down"
            );
        }
        // The attempt under way is abandoned on purpose: not an error.
        self.stopping = true;
        self.input(Input::HoldDown { reason, cease });
        self.stopping = false;
        self.state.held_down = self.fsm.held_down();
    }

    /// Ends every task of the session, letting closing writers flush.
    async fn finish(&mut self) {
        self.listen_guard = None;
        if let Some(l) = self.listener.take() {
            l.abort();
        }
        for (_, h) in self.connecting.drain() {
            h.abort();
        }
        for (_, (_, h)) in self.timers.drain() {
            h.abort();
        }
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            self.close(id);
        }
        let closing = std::mem::take(&mut self.closing);
        let all = async {
            for h in closing {
                let _ = h.await;
            }
        };
        let _ = tokio::time::timeout(CLOSE_FLUSH_TIMEOUT, all).await;
    }

    fn publish(&mut self) {
        self.state.rib_out = self.rib.state();
        if let Some(m) = &mut self.metrics {
            m.update(&self.state);
        }
        let state = &self.state;
        self.state_tx.send_if_modified(|s| {
            if s == state {
                false
            } else {
                *s = state.clone();
                true
            }
        });
    }

    fn emit(&self, event: SessionEvent) {
        self.events.emit(event);
    }

    fn set_error(&mut self, error: LastError) {
        let error = match &self.config.password {
            Some(p) => error.redact(p),
            None => error,
        };
        self.emit(SessionEvent::Error {
            text: error.text.clone(),
        });
        self.state.set_error(error);
    }

    fn start_listener(&mut self) {
        let Some(addr) = self.config.listen else {
            return;
        };
        let request = ListenRequest {
            key: ListenKey::new(addr, self.config.vrf.clone()),
            peer: self.config.peer.ip(),
            password: self.config.password.clone(),
            min_ttl: self.config.min_ttl(),
        };
        let registration = match self.listeners.register(request) {
            Ok(r) => r,
            Err(e) => {
                // Never fatal: the session still connects out.
                self.set_error(LastError::session(e.to_string(), SystemTime::now()));
                return;
            }
        };
        let mut events = registration.events;
        self.listen_guard = Some(registration.guard);
        let tx = self.ev_tx.clone();
        self.listener = Some(tokio::spawn(async move {
            while let Some(ev) = events.recv().await {
                let ev = match ev {
                    ListenEvent::Accepted(stream) => Event::Accepted(stream),
                    // A busy port is a session error, never fatal; the
                    // listener retries the bind by itself.
                    ListenEvent::Failed(e) => Event::ListenFailed(e),
                    ListenEvent::Listening(_) => continue,
                };
                if tx.send(ev).await.is_err() {
                    return;
                }
            }
        }));
    }

    /// Feeds the FSM and carries out what it asks, in order.
    fn input(&mut self, input: Input) {
        let outputs = self.fsm.process(input);
        for output in outputs {
            self.output(output);
        }
    }

    fn output(&mut self, output: Output) {
        match output {
            Output::Connect { conn } => self.connect(conn),
            Output::CloseConnection { conn } => self.close(conn),
            Output::Send { conn, message } => self.send(conn, &message),
            Output::SetTimer { timer, duration } => self.set_timer(timer, duration),
            Output::CancelTimer { timer } => {
                if let Some((_, h)) = self.timers.remove(&timer) {
                    h.abort();
                }
            }
            Output::Negotiated(params) => {
                self.state.set_negotiated(
                    &params.negotiated,
                    params.peer_as,
                    params.peer_id,
                    params.hold_time,
                    params.keepalive_time,
                );
                self.emit(SessionEvent::Negotiated(Box::new(NegotiatedEvent {
                    local: params.local,
                    remote: params.remote,
                    local_as: params.local_as,
                    peer_as: params.peer_as,
                    ibgp: params.ibgp,
                    local_id: params.local_id,
                    peer_id: params.peer_id,
                    hold_time: params.hold_time,
                    keepalive_time: params.keepalive_time,
                    capabilities: CapabilitiesState::from(&params.negotiated),
                    families_disabled: params
                        .families_disabled
                        .iter()
                        .map(|d| format!("{}: {}", d.family, d.text))
                        .collect(),
                })));
                let mut failed = None;
                if let Some(c) = self.conns.get_mut(&params.conn) {
                    // No KEEPALIVE will come: TCP watches the peer.
                    if params.hold_time == 0
                        && let Some(tcp) = &c.tcp
                        && let Err(e) = transport::set_dead_peer_detection(tcp)
                    {
                        failed = Some(e);
                    }
                    c.decode = params.decode;
                    c.encode = params.encode;
                    c.params = Some(*params);
                }
                if let Some(e) = failed {
                    let now = SystemTime::now();
                    let err = match &e {
                        TransportError::Socket { op, source } => LastError::socket(op, source, now),
                        other => LastError::session(other.to_string(), now),
                    };
                    self.set_error(err);
                }
            }
            Output::Established { conn } => {
                if let Some(ctx) = self.session_context(conn) {
                    self.established = Some((conn, ctx));
                }
            }
            Output::StateChanged { from, to, reason } => {
                self.state.transition(to, SystemTime::now());
                self.emit(SessionEvent::StateChanged { from, to, reason });
            }
            Output::SessionDown {
                conn,
                reason,
                notification,
                was_established,
            } => {
                let now = SystemTime::now();
                let err = match notification {
                    Some(n) => match n.direction {
                        fsm::Direction::Sent => LastError::notification_sent(&n.notification, now),
                        fsm::Direction::Received => {
                            LastError::notification_received(&n.notification, now)
                        }
                    },
                    None => LastError::session(format!("session down: {reason}"), now),
                };
                self.set_error(err);
                if self.established.as_ref().is_some_and(|(c, _)| *c == conn) {
                    self.established = None;
                }
                if was_established {
                    self.rib.reset();
                }
            }
            Output::SendInitialUpdates {
                conn,
                families,
                cause,
            } => {
                if self.established.as_ref().map(|(c, _)| *c) != Some(conn) {
                    return;
                }
                match cause {
                    ResendCause::Established => self.rib.on_session_up(),
                    ResendCause::RouteRefresh => {
                        for f in families {
                            self.rib.route_refresh(f);
                        }
                    }
                }
                self.drain();
            }
        }
    }

    /// The Adj-RIB-Out context of the Established connection `conn`.
    fn session_context(&self, conn: ConnId) -> Option<SessionContext> {
        let c = self.conns.get(&conn)?;
        let params = c.params.as_ref()?;
        let local_ip = self.config.source.unwrap_or(c.local.ip());
        let local_ip = match local_ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(local_ip),
            v4 => v4,
        };
        let mut ctx = SessionContext::new(
            params.negotiated.clone(),
            params.local_as,
            params.ibgp,
            local_ip,
        );
        let peer = self.config.peer.ip();
        match &c.interface {
            Some(iface) => {
                // RFC 2545 section 3: global, plus link-local on a shared
                // link; never a link-local address as the global one.
                ctx.next_hop_ipv6 = iface.ipv6_next_hop(local_ip, peer);
                if local_ip.is_ipv6() {
                    ctx.next_hop_ipv4 = iface.ipv4.map(|a| NextHop::from(IpAddr::V4(a)));
                }
            }
            None => ctx.next_hop_ipv6 = transport::ipv6_next_hop_without_interface(local_ip),
        }
        Some(ctx)
    }

    /// Writes what the Adj-RIB-Out has pending, when Established and the
    /// socket has taken everything of the previous drain (otherwise the
    /// changes wait, coalesced, for [`Event::Written`]).
    fn drain(&mut self) {
        if let Some((conn, _)) = &self.established {
            self.pump(*conn);
        }
    }

    /// Moves output of `conn` towards the socket: drains the Adj-RIB-Out
    /// when nothing of its previous drain waits (Established connection
    /// only), hands the writer what the budget allows and tells the FSM
    /// when output starts or stops waiting.
    fn pump(&mut self, conn: ConnId) {
        let idle = self.conns.get(&conn).is_some_and(|c| c.out.is_idle());
        if idle
            && let Some((est, ctx)) = &self.established
            && *est == conn
            && self.rib.has_pending()
        {
            let messages = self.rib.drain(ctx);
            let mut updates = false;
            for m in &messages {
                if self.state.sent.record_encoded(m) == Some(MessageType::Update) {
                    updates = true;
                }
            }
            if let Some(c) = self.conns.get_mut(&conn) {
                c.out.updates.extend(messages);
            }
            if updates {
                self.input(Input::UpdateSent { conn });
            }
        }
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.out.feed(&c.writer);
        let waiting = !c.out.is_idle();
        if waiting != c.out.waiting {
            c.out.waiting = waiting;
            self.input(Input::SendProgress { conn, waiting });
        }
    }

    /// The socket of `conn` took `bytes`: progress (the SendHoldTimer
    /// restarts while output still waits), and room for more.
    fn written(&mut self, conn: ConnId, bytes: usize) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.out.in_flight = c.out.in_flight.saturating_sub(bytes);
        let was_waiting = c.out.waiting;
        self.pump(conn);
        if was_waiting && self.conns.get(&conn).is_some_and(|c| c.out.waiting) {
            self.input(Input::SendProgress {
                conn,
                waiting: true,
            });
        }
    }

    /// Queues one of the FSM's messages (ahead of UPDATEs).
    fn write(&mut self, conn: ConnId, bytes: Bytes) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.out.control.push_back(bytes);
            self.pump(conn);
        }
    }

    fn send(&mut self, conn: ConnId, message: &Message) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        if matches!(message, Message::Keepalive) && c.out.control.iter().any(is_keepalive) {
            // One KEEPALIVE waiting for the socket is enough.
            return;
        }
        let mut out = BytesMut::new();
        if let Err(e) = message.encode(&c.encode, &mut out) {
            self.set_error(LastError::session(
                format!("encoding {:?}: {e}", message.message_type()),
                SystemTime::now(),
            ));
            return;
        }
        self.state.sent.record(message.message_type());
        self.write(conn, out.freeze());
    }

    fn connect_options(&self) -> ConnectOptions {
        ConnectOptions {
            peer: self.config.peer,
            source: self.config.source,
            ttl: self.config.ttl(),
            password: self.config.password.clone(),
            vrf: self.config.vrf.clone(),
            min_ttl: self.config.min_ttl(),
            timeout: self
                .config
                .connect_timeout
                .unwrap_or(transport::DEFAULT_CONNECT_TIMEOUT),
        }
    }

    fn connect(&mut self, conn: ConnId) {
        let opts = self.connect_options();
        let tx = self.ev_tx.clone();
        let connector = Arc::clone(&self.connector);
        let h = tokio::spawn(async move {
            let result = connector.connect(opts).await;
            let _ = tx.send(Event::Connected { conn, result }).await;
        });
        if let Some(old) = self.connecting.insert(conn, h) {
            old.abort();
        }
    }

    fn close(&mut self, conn: ConnId) {
        if let Some(h) = self.connecting.remove(&conn) {
            h.abort();
            // An attempt abandoned because another connection (the peer's)
            // carries the session is no error; one abandoned at the
            // ConnectRetry expiry (the session still connecting) is.
            let connecting = matches!(self.fsm.state(), FsmState::Connect | FsmState::Active);
            if !self.stopping && connecting {
                let text = format!(
                    "connect to {}: no answer within the connect retry time{}{}",
                    self.config.peer,
                    self.multihop_hint(),
                    self.md5_hint()
                );
                self.set_error(LastError::session(text, SystemTime::now()));
            }
        }
        if let Some(mut c) = self.conns.remove(&conn) {
            c.reader_task.abort();
            // The FSM's last messages (a NOTIFICATION) still go, best
            // effort; UPDATEs not handed to the writer are dropped.
            for m in c.out.control.drain(..) {
                let _ = c.writer.try_send(WriterMsg::Data(m));
            }
            // When full, the writer ends once it has written what it has
            // (the channel closes with `c`), or is aborted below.
            let _ = c.writer.try_send(WriterMsg::Close);
            let writer = c.writer_task;
            // Bounded flush: abort a writer stuck on a full socket.
            let abort = writer.abort_handle();
            tokio::spawn(async move {
                tokio::time::sleep(CLOSE_FLUSH_TIMEOUT).await;
                abort.abort();
            });
            self.closing.retain(|h| !h.is_finished());
            self.closing.push(writer);
        }
    }

    fn set_timer(&mut self, timer: Timer, duration: Duration) {
        let mut x = self.jitter;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.jitter = x;
        let duration = jittered(timer, duration, x);
        self.timer_generation += 1;
        let generation = self.timer_generation;
        let tx = self.ev_tx.clone();
        let h = tokio::spawn(async move {
            tokio::time::sleep(duration).await;
            let _ = tx.send(Event::TimerFired { timer, generation }).await;
        });
        if let Some((_, old)) = self.timers.insert(timer, (generation, h)) {
            old.abort();
        }
    }

    fn attach(
        &mut self,
        conn: ConnId,
        connection: Connection,
    ) -> (SocketAddr, SocketAddr, Option<InterfaceInfo>) {
        let Connection {
            local,
            remote,
            read,
            write,
            tcp,
        } = connection;
        let interface = match transport::interface_of(local.ip()) {
            Ok(i) => i,
            Err(e) => {
                self.set_error(LastError::session(e.to_string(), SystemTime::now()));
                None
            }
        };
        let (wtx, wrx) = mpsc::channel(WRITER_CHANNEL);
        let deadline = write_deadline(&self.config.fsm);
        let writer_task = tokio::spawn(writer(conn, write, wrx, self.ev_tx.clone(), deadline));
        let reader_task = tokio::spawn(reader(conn, read, self.ev_tx.clone()));
        self.conns.insert(
            conn,
            Conn {
                local,
                interface: interface.clone(),
                buf: BytesMut::new(),
                decode: DecodeContext::default(),
                encode: EncodeContext::default(),
                params: None,
                writer: wtx,
                writer_task,
                reader_task,
                out: Outbox::default(),
                tcp,
            },
        );
        (local, remote, interface)
    }

    fn event(&mut self, ev: Event) {
        match ev {
            Event::Connected { conn, result } => {
                if self.connecting.remove(&conn).is_none() {
                    return; // abandoned attempt
                }
                match result {
                    Ok(connection) => {
                        let (local, remote, iface) = self.attach(conn, connection);
                        self.input(Input::TcpCrAcked {
                            conn,
                            local,
                            remote,
                            interface_v4: iface.and_then(|i| i.ipv4),
                        });
                    }
                    Err(e) => {
                        let now = SystemTime::now();
                        let mut err = match &e {
                            TransportError::Socket { op, source } => {
                                LastError::socket(op, source, now)
                            }
                            other => LastError::session(other.to_string(), now),
                        };
                        if matches!(
                            e,
                            TransportError::ConnectTimeout { .. } | TransportError::Socket { .. }
                        ) {
                            err.text.push_str(self.multihop_hint());
                        }
                        let handshake_failed = match &e {
                            TransportError::ConnectTimeout { .. } => true,
                            TransportError::Socket { op, .. } => op.starts_with("connect"),
                            _ => false,
                        };
                        if handshake_failed {
                            err.text.push_str(self.md5_hint());
                        }
                        self.set_error(err);
                        self.input(Input::TcpConnectionFails { conn });
                    }
                }
            }
            Event::Accepted(stream) => {
                let peer = self.config.peer.ip();
                let connection = transport::configure_accepted(&stream, self.config.ttl())
                    .and_then(|()| match self.config.min_ttl() {
                        Some(min) => transport::set_min_ttl(&stream, peer, min),
                        None => Ok(()),
                    })
                    .and_then(|()| Connection::tcp(stream));
                let connection = match connection {
                    Ok(c) => c,
                    Err(e) => {
                        self.set_error(LastError::session(e.to_string(), SystemTime::now()));
                        return;
                    }
                };
                self.passive_seq += 1;
                let conn = ConnId::passive(self.passive_seq);
                let (local, remote, iface) = self.attach(conn, connection);
                self.input(Input::TcpConnectionConfirmed {
                    conn,
                    local,
                    remote,
                    interface_v4: iface.and_then(|i| i.ipv4),
                });
            }
            Event::ListenFailed(e) => {
                self.set_error(LastError::session(e.to_string(), SystemTime::now()));
            }
            Event::Data { conn, bytes } => self.data(conn, bytes),
            Event::ReadClosed { conn, error } => {
                if !self.conns.contains_key(&conn) {
                    return;
                }
                let now = SystemTime::now();
                match error {
                    Some(e) => self.set_error(LastError::socket("read", &e, now)),
                    None => {
                        self.set_error(LastError::session("connection closed by the peer", now))
                    }
                }
                self.input(Input::TcpConnectionFails { conn });
            }
            Event::WriteFailed { conn, error } => {
                if !self.conns.contains_key(&conn) {
                    return;
                }
                self.set_error(LastError::socket("write", &error, SystemTime::now()));
                self.input(Input::TcpConnectionFails { conn });
            }
            Event::Written { conn, bytes } => self.written(conn, bytes),
            Event::TimerFired { timer, generation } => {
                if self.timers.get(&timer).map(|(g, _)| *g) != Some(generation) {
                    return; // cancelled or restarted since
                }
                self.timers.remove(&timer);
                self.input(Input::timer_expired(timer));
            }
        }
    }

    /// For a direct eBGP peer that cannot be reached, the hint to set
    /// `ebgpMultiHop` when it is on no connected subnet ("" otherwise).
    fn multihop_hint(&self) -> &'static str {
        if !self.config.is_ibgp()
            && !self.config.ebgp_multihop
            && !on_connected_subnet(self.config.peer.ip())
        {
            " (the eBGP peer is not on a connected subnet and TTL is 1: set ebgpMultiHop)"
        } else {
            ""
        }
    }

    /// A peer with another (or no) TCP MD5 key drops our SYNs without an
    /// answer: a timeout is all we see, so say what to check.
    fn md5_hint(&self) -> &'static str {
        if self.config.password.is_some() {
            " (TCP MD5 is configured: a peer with a different or no password drops \
             the connection silently; check the password on both sides)"
        } else {
            ""
        }
    }

    fn data(&mut self, conn: ConnId, bytes: Bytes) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.buf.extend_from_slice(&bytes);
        loop {
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            let decode = c.decode;
            let framed = frame(&mut c.buf, decode.max_message_len());
            let input = match framed {
                Ok(None) => return,
                Ok(Some(f)) => {
                    self.state.received.record(f.message_type());
                    match f.decode(&decode) {
                        Ok(message) => Input::MessageReceived { conn, message },
                        Err(notification) => Input::DecodeError { conn, notification },
                    }
                }
                Err(notification) => {
                    c.buf.clear();
                    Input::DecodeError { conn, notification }
                }
            };
            let fatal = matches!(input, Input::DecodeError { .. });
            self.input(input);
            if fatal {
                return;
            }
        }
    }
}

fn on_connected_subnet(peer: IpAddr) -> bool {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return true; // unknown: no hint
    };
    for ifa in addrs {
        let (Some(a), Some(m)) = (ifa.address, ifa.netmask) else {
            continue;
        };
        match (peer, a.as_sockaddr_in(), m.as_sockaddr_in()) {
            (IpAddr::V4(p), Some(a), Some(m)) => {
                let mask = u32::from(m.ip());
                if u32::from(p) & mask == u32::from(a.ip()) & mask {
                    return true;
                }
                continue;
            }
            (IpAddr::V4(_), _, _) => continue,
            _ => {}
        }
        if let (IpAddr::V6(p), Some(a), Some(m)) = (peer, a.as_sockaddr_in6(), m.as_sockaddr_in6())
        {
            let mask = u128::from(m.ip());
            if u128::from(p) & mask == u128::from(a.ip()) & mask {
                return true;
            }
        }
    }
    false
}

async fn reader(
    conn: ConnId,
    mut read: Box<dyn AsyncRead + Send + Unpin>,
    tx: mpsc::Sender<Event>,
) {
    let mut buf = vec![0u8; 65536];
    loop {
        match read.read(&mut buf).await {
            Ok(0) => {
                let _ = tx.send(Event::ReadClosed { conn, error: None }).await;
                return;
            }
            Ok(n) => {
                let bytes = Bytes::copy_from_slice(&buf[..n]);
                if tx.send(Event::Data { conn, bytes }).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                let _ = tx
                    .send(Event::ReadClosed {
                        conn,
                        error: Some(e),
                    })
                    .await;
                return;
            }
        }
    }
}

/// Writes each message within `deadline`, reporting it once the socket
/// has taken it.
async fn writer(
    conn: ConnId,
    mut write: Box<dyn AsyncWrite + Send + Unpin>,
    mut rx: mpsc::Receiver<WriterMsg>,
    tx: mpsc::Sender<Event>,
    deadline: Duration,
) {
    while let Some(msg) = rx.recv().await {
        match msg {
            WriterMsg::Data(bytes) => {
                let error = match tokio::time::timeout(deadline, write.write_all(&bytes)).await {
                    Ok(Ok(())) => {
                        let written = Event::Written {
                            conn,
                            bytes: bytes.len(),
                        };
                        if tx.send(written).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    Ok(Err(error)) => error,
                    Err(_) => std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("one message not written within {deadline:?}"),
                    ),
                };
                let _ = tx.send(Event::WriteFailed { conn, error }).await;
                return;
            }
            WriterMsg::Close => {
                // Best effort: the connection is being dropped anyway.
                let _ = tokio::time::timeout(CLOSE_FLUSH_TIMEOUT, write.shutdown()).await;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(my: u32, peer_as: PeerAs) -> PeerConfig {
        PeerConfig::new(
            fsm::Config::new(my, peer_as, "node"),
            "192.0.2.1:179".parse().unwrap(),
        )
    }

    #[test]
    fn ttl_follows_the_session_type() {
        assert_eq!(peer(64512, PeerAs::Fixed(64512)).ttl(), 255);
        assert_eq!(peer(64512, PeerAs::Internal).ttl(), 255);
        assert_eq!(peer(64512, PeerAs::Fixed(64513)).ttl(), 1);
        assert_eq!(peer(64512, PeerAs::External).ttl(), 1);
        let mut p = peer(64512, PeerAs::Fixed(64513));
        p.ebgp_multihop = true;
        assert_eq!(p.ttl(), 255);
        // localASN decides, not myASN.
        let mut p = peer(64512, PeerAs::Fixed(64600));
        p.fsm.local_as = Some(64600);
        assert!(p.is_ibgp());
    }

    fn message(len: usize, t: u8) -> Bytes {
        let mut m = vec![0xffu8; 16];
        m.extend_from_slice(&u16::try_from(len).unwrap().to_be_bytes());
        m.push(t);
        m.resize(len, 0);
        Bytes::from(m)
    }

    fn taken(rx: &mut mpsc::Receiver<WriterMsg>) -> Vec<Bytes> {
        let mut out = Vec::new();
        while let Ok(WriterMsg::Data(m)) = rx.try_recv() {
            out.push(m);
        }
        out
    }

    /// The writer gets at most [`WRITE_BUDGET`] (plus one message) beyond
    /// what the socket took, the FSM's messages before waiting UPDATEs.
    #[test]
    fn outbox_feeds_control_first_within_the_budget() {
        let (tx, mut rx) = mpsc::channel(WRITER_CHANNEL);
        let mut out = Outbox::default();
        let update = message(4096, 2);
        out.updates.extend(std::iter::repeat_n(update.clone(), 40));
        out.feed(&tx);
        assert_eq!(out.in_flight, WRITE_BUDGET);
        assert_eq!(taken(&mut rx).len(), WRITE_BUDGET / 4096);
        assert_eq!(out.updates.len(), 40 - WRITE_BUDGET / 4096);
        // Blocked: a KEEPALIVE waits, ahead of the UPDATEs.
        let keepalive = message(19, 4);
        assert!(is_keepalive(&keepalive) && !is_keepalive(&update));
        out.control.push_back(keepalive.clone());
        out.feed(&tx);
        assert!(taken(&mut rx).is_empty());
        // The socket takes one UPDATE: the KEEPALIVE goes first.
        out.in_flight -= 4096;
        out.feed(&tx);
        let sent = taken(&mut rx);
        assert_eq!(sent[0], keepalive);
        assert!(sent[1..].iter().all(|m| *m == update));
        assert!(out.in_flight >= WRITE_BUDGET && out.in_flight < WRITE_BUDGET + 4096);
        assert!(out.control.is_empty());
        assert!(!out.is_idle());
    }

    #[test]
    fn password_is_never_printed() {
        let mut p = peer(64512, PeerAs::Fixed(64513));
        p.password = Some("s3cret".into());
        assert!(!format!("{p:?}").contains("s3cret"));
    }

    /// A TCP MD5 key the kernel refuses (over 80 bytes) is the session's
    /// error, without the password; the session does not connect without
    /// the key, and shuts down on request. No packet is sent: the socket
    /// fails before `connect`.
    #[tokio::test]
    async fn md5_key_error_is_a_session_error_and_shutdown_ends_the_task() {
        let mut p = peer(64512, PeerAs::Fixed(64513));
        let secret = format!("s3cret{}", "x".repeat(80));
        p.password = Some(secret.clone());
        let session = Session::spawn(p, None).unwrap();
        let mut state = session.state();
        let s = tokio::time::timeout(
            Duration::from_secs(10),
            state.wait_for(|s| s.last_error.is_some()),
        )
        .await
        .unwrap()
        .unwrap()
        .clone();
        let err = s.last_error.clone().unwrap();
        assert!(err.text.contains("TCP_MD5SIG"), "{}", err.text);
        assert!(err.text.contains("at most 80"), "{}", err.text);
        assert!(!err.text.contains("s3cret"), "{}", err.text);
        assert!(!format!("{s:?}").contains("s3cret"));
        assert_ne!(s.fsm_state, FsmState::Established);
        session.set_advertisements(vec![]).unwrap();
        tokio::time::timeout(Duration::from_secs(10), session.shutdown("bye"))
            .await
            .unwrap();
    }

    #[test]
    fn invalid_configuration_is_refused() {
        let mut p = peer(64512, PeerAs::Fixed(64513));
        p.fsm.hold_time = Some(2);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _g = rt.enter();
        assert!(matches!(
            Session::spawn(p, None),
            Err(SessionError::Config(_))
        ));
    }

    /// A follower that falls behind is told so once, then given the
    /// current state again and the events after it.
    #[tokio::test]
    async fn a_lagging_follower_gets_the_current_state_again() {
        let hub = Arc::new(EventHub::new());
        let mut events = SessionEvents::new(&hub);
        assert!(matches!(
            events.recv().await,
            Ok(SessionEvent::Current {
                state: FsmState::Idle,
                ..
            })
        ));
        let states = [FsmState::Connect, FsmState::Active];
        for i in 0..EVENT_CAPACITY + 10 {
            hub.emit(SessionEvent::StateChanged {
                from: states[i % 2],
                to: states[(i + 1) % 2],
                reason: FsmEvent::ManualStart,
            });
        }
        hub.emit(SessionEvent::Error { text: "e".into() });
        assert!(matches!(
            events.recv().await,
            Err(broadcast::error::RecvError::Lagged(_))
        ));
        // The state after the last move.
        match events.recv().await {
            Ok(SessionEvent::Current {
                state, last_error, ..
            }) => {
                assert_eq!(state, states[(EVENT_CAPACITY + 10) % 2]);
                assert_eq!(last_error.as_deref(), Some("e"));
            }
            other => panic!("{other:?}"),
        }
        hub.emit(SessionEvent::Error { text: "f".into() });
        assert!(matches!(
            events.recv().await,
            Ok(SessionEvent::Error { text }) if text == "f"
        ));
        // The follower does not keep the broadcast open.
        drop(hub);
        assert!(matches!(
            events.recv().await,
            Err(broadcast::error::RecvError::Closed)
        ));
    }
}
