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
//!   frame) and a writer task (a FIFO of encoded messages; `Close` flushes
//!   what was queued, bounded by [`CLOSE_FLUSH_TIMEOUT`], then closes);
//! - each [`Timer`] is one sleeping task tagged with a generation, so an
//!   expiry of a timer cancelled or restarted since is dropped;
//! - the next hops: the session's local address for its family; for the
//!   other family the first address of that family on the same interface
//!   (global IPv6 only); `sourceAddress` is the local address when set;
//!   no address means that family is not announced and the Adj-RIB-Out
//!   state says why ([`crate::state::FamilyDisabled::NoNextHop`]);
//! - the optional listener ([`PeerConfig::listen`]) is a registration on a
//!   [`Listeners`] set shared by every session on the same local address
//!   (see [`crate::listener`]): [`Session::spawn`] uses the process-wide
//!   set ([`Listeners::process`]), [`Session::spawn_with_listeners`] the
//!   caller's. The registration lives as long as the session task.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
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
use crate::transport::{self, ConnectOptions, InterfaceInfo, TransportError};
use crate::wire::{DecodeContext, EncodeContext, Message, MessageType, NextHop, frame};

/// How long closing a connection may take to flush what was queued.
pub const CLOSE_FLUSH_TIMEOUT: Duration = Duration::from_secs(3);

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

    /// The TTL / hop limit of this session's connections.
    pub fn ttl(&self) -> u8 {
        transport::ttl_for(self.is_ibgp(), self.ebgp_multihop)
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
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum SessionEvent {
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
        result: Result<TcpStream, TransportError>,
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
    events: broadcast::Sender<SessionEvent>,
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
        let fsm = fsm::Session::new(config.fsm.clone())?;
        let now = SystemTime::now();
        let state = SessionState::new(peer_label(config.peer), now);
        let (state_tx, state_rx) = watch::channel(state.clone());
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (events, _) = broadcast::channel(256);
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
            listen_guard: None,
            listener: None,
            closing: Vec::new(),
            stopping: false,
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

    /// Every state change, negotiation and error from now on.
    pub fn events(&self) -> broadcast::Receiver<SessionEvent> {
        self.events.subscribe()
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
    writer: mpsc::UnboundedSender<WriterMsg>,
    writer_task: JoinHandle<()>,
    reader_task: JoinHandle<()>,
}

struct Driver {
    config: PeerConfig,
    fsm: fsm::Session,
    rib: AdjRibOut,
    state: SessionState,
    state_tx: watch::Sender<SessionState>,
    metrics: Option<SessionMetrics>,
    events: broadcast::Sender<SessionEvent>,
    ev_tx: mpsc::Sender<Event>,
    conns: HashMap<ConnId, Conn>,
    connecting: HashMap<ConnId, JoinHandle<()>>,
    timers: HashMap<Timer, (u64, JoinHandle<()>)>,
    timer_generation: u64,
    established: Option<(ConnId, SessionContext)>,
    passive_seq: u64,
    listeners: Listeners,
    /// The registration on the shared listener; dropping it deregisters.
    listen_guard: Option<ListenGuard>,
    /// Forwards the registration's events to the session task.
    listener: Option<JoinHandle<()>>,
    /// Writer tasks flushing a closed connection.
    closing: Vec<JoinHandle<()>>,
    /// Shutting down or holding down: abandoned attempts are not errors.
    stopping: bool,
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
        // No follower is not an error.
        let _ = self.events.send(event);
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
                if let Some(c) = self.conns.get_mut(&params.conn) {
                    c.decode = params.decode;
                    c.encode = params.encode;
                    c.params = Some(*params);
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
        if let Some(iface) = &c.interface {
            match local_ip {
                IpAddr::V4(_) => {
                    ctx.next_hop_ipv6 = iface.ipv6.map(|a| NextHop::from(IpAddr::V6(a)));
                }
                IpAddr::V6(_) => {
                    ctx.next_hop_ipv4 = iface.ipv4.map(|a| NextHop::from(IpAddr::V4(a)));
                }
            }
        }
        Some(ctx)
    }

    /// Writes what the Adj-RIB-Out has pending, when Established.
    fn drain(&mut self) {
        let Some((conn, ctx)) = &self.established else {
            return;
        };
        let conn = *conn;
        if !self.rib.has_pending() && self.rib.initial_sync_done() {
            return;
        }
        if !self.rib.is_up() {
            return;
        }
        let messages = self.rib.drain(ctx);
        let mut updates = false;
        for m in messages {
            if self.state.sent.record_encoded(&m) == Some(MessageType::Update) {
                updates = true;
            }
            self.write(conn, m);
        }
        if updates {
            self.input(Input::UpdateSent { conn });
        }
    }

    fn write(&mut self, conn: ConnId, bytes: Bytes) {
        if let Some(c) = self.conns.get(&conn) {
            // A closed writer shows up as WriteFailed / ReadClosed.
            let _ = c.writer.send(WriterMsg::Data(bytes));
        }
    }

    fn send(&mut self, conn: ConnId, message: &Message) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
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
            timeout: self
                .config
                .connect_timeout
                .unwrap_or(transport::DEFAULT_CONNECT_TIMEOUT),
        }
    }

    fn connect(&mut self, conn: ConnId) {
        let opts = self.connect_options();
        let tx = self.ev_tx.clone();
        let h = tokio::spawn(async move {
            let result = transport::connect(&opts).await;
            let _ = tx.send(Event::Connected { conn, result }).await;
        });
        if let Some(old) = self.connecting.insert(conn, h) {
            old.abort();
        }
    }

    fn close(&mut self, conn: ConnId) {
        if let Some(h) = self.connecting.remove(&conn) {
            h.abort();
            if !self.stopping {
                let text = format!(
                    "connect to {}: no answer within the connect retry time{}{}",
                    self.config.peer,
                    self.multihop_hint(),
                    self.md5_hint()
                );
                self.set_error(LastError::session(text, SystemTime::now()));
            }
        }
        if let Some(c) = self.conns.remove(&conn) {
            c.reader_task.abort();
            let _ = c.writer.send(WriterMsg::Close);
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
        stream: TcpStream,
    ) -> Option<(SocketAddr, SocketAddr, Option<InterfaceInfo>)> {
        let addrs = stream
            .local_addr()
            .and_then(|l| Ok((l, stream.peer_addr()?)));
        let (local, remote) = match addrs {
            Ok(a) => a,
            Err(e) => {
                self.set_error(LastError::socket("getsockname", &e, SystemTime::now()));
                return None;
            }
        };
        let interface = match transport::interface_of(local.ip()) {
            Ok(i) => i,
            Err(e) => {
                self.set_error(LastError::session(e.to_string(), SystemTime::now()));
                None
            }
        };
        let (read, write) = stream.into_split();
        let (wtx, wrx) = mpsc::unbounded_channel();
        let writer_task = tokio::spawn(writer(conn, write, wrx, self.ev_tx.clone()));
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
            },
        );
        Some((local, remote, interface))
    }

    fn event(&mut self, ev: Event) {
        match ev {
            Event::Connected { conn, result } => {
                if self.connecting.remove(&conn).is_none() {
                    return; // abandoned attempt
                }
                match result {
                    Ok(stream) => match self.attach(conn, stream) {
                        Some((local, remote, iface)) => self.input(Input::TcpCrAcked {
                            conn,
                            local,
                            remote,
                            interface_v4: iface.and_then(|i| i.ipv4),
                        }),
                        None => self.input(Input::TcpConnectionFails { conn }),
                    },
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
                if let Err(e) = transport::configure_accepted(&stream, self.config.ttl()) {
                    self.set_error(LastError::session(e.to_string(), SystemTime::now()));
                    return;
                }
                self.passive_seq += 1;
                let conn = ConnId::passive(self.passive_seq);
                if let Some((local, remote, iface)) = self.attach(conn, stream) {
                    self.input(Input::TcpConnectionConfirmed {
                        conn,
                        local,
                        remote,
                        interface_v4: iface.and_then(|i| i.ipv4),
                    });
                }
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

async fn reader(conn: ConnId, mut read: OwnedReadHalf, tx: mpsc::Sender<Event>) {
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

async fn writer(
    conn: ConnId,
    mut write: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<WriterMsg>,
    tx: mpsc::Sender<Event>,
) {
    while let Some(msg) = rx.recv().await {
        match msg {
            WriterMsg::Data(bytes) => {
                if let Err(error) = write.write_all(&bytes).await {
                    let _ = tx.send(Event::WriteFailed { conn, error }).await;
                    return;
                }
            }
            WriterMsg::Close => {
                // Best effort: the connection is being dropped anyway.
                let _ = write.shutdown().await;
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
}
