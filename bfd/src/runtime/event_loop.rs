//! The runtime thread: epoll over the command eventfd, the timerfd, the
//! receiving sockets and the echo sockets; the registry; the deadline heap.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc as std_mpsc;

use netsys::PacketSocket;
use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::EventFd;
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::sync::{mpsc, watch};

use super::stats::Shared;
use super::timers::TimerQueue;
use super::{Acquired, BATCH_SLACK_NS, BfdEvent, Command, Error, RX_GATE_NS, neigh, sys};
use crate::frame::{self, EchoPath};
use crate::metrics::{self, Sample};
use crate::packet::{ControlPacket, EchoPacket, MAX_PACKET_LEN, State};
use crate::params::Parameters;
use crate::path::{
    CONTROL_PORT_MULTI_HOP, CONTROL_PORT_SINGLE_HOP, Hop, SOURCE_PORT_MAX, SOURCE_PORT_MIN,
    SessionKey,
};
use crate::registry::{ClientId, Registry, RxDrop, RxMeta};
use crate::rng::SplitMix64;
use crate::session::{Action, Event, SessionStatus, StateChange, TX_EARLY_MAX_NS, Timer};

const TOKEN_WAKE: u64 = 0;
const TOKEN_TIMER: u64 = 1;
const TOKEN_RX: u64 = 2;
/// Echo sockets: this bit, and the session's discriminator below it.
const TOKEN_ECHO: u64 = 1 << 32;
/// How often a session in echo mode reads again whether IPv4 forwarding is
/// on for its interface (see [`EventLoop::check_loopback`]).
const LOOPBACK_RECHECK_NS: u64 = 5_000_000_000;
/// Bound on the deadlines delivered in one pass, against a session that
/// would keep arming timers at `now`.
const MAX_FIRES_PER_PASS: usize = 100_000;

pub(super) struct Setup {
    pub(super) seed: u64,
    pub(super) netns: Option<File>,
    pub(super) require_ipv6: bool,
    pub(super) queue: std_mpsc::Receiver<Command>,
    pub(super) wake: Arc<EventFd>,
    pub(super) shared: Arc<Shared>,
}

struct RxSocket {
    socket: UdpSocket,
    hop: Hop,
    /// Taken out of the epoll set while packets arrive faster than one per
    /// [`RX_GATE_NS`]; drained at every wakeup instead.
    gated: bool,
}

/// The edge's side of a session.
struct SessionIo {
    key: SessionKey,
    socket: Option<UdpSocket>,
    /// The source port of the session's control packets, kept when the
    /// socket is reopened (RFC 5881 §4).
    source_port: Option<u16>,
    status: watch::Sender<SessionStatus>,
    /// Control packets the kernel took (`sendto` succeeded).
    control_sent: u64,
    /// Metric labels, made once.
    peer_label: Arc<str>,
    vrf_label: Arc<str>,
    /// The echo socket, open while the session runs echo.
    echo: Option<EchoIo>,
    /// Echo packets the kernel took.
    echo_sent: u64,
    /// UDP source port of the session's echo packets (49152-65535).
    echo_source_port: u16,
    /// IPv4 Identification of the last echo packet.
    echo_ip_id: u16,
    /// When IPv4 forwarding on the interface was last read (echo mode).
    loopback_checked: Option<u64>,
}

/// The echo function's I/O of one session: an `AF_PACKET` socket on the
/// session's interface, filtered to our echo packets back from the peer.
struct EchoIo {
    socket: PacketSocket,
    ifindex: u32,
    peer: Ipv4Addr,
    /// Addressing of the frames; `peer_mac` is refreshed before each send.
    path: EchoPath,
}

struct EventLoop {
    registry: Registry,
    rng: SplitMix64,
    epoll: Epoll,
    timer: TimerFd,
    armed: Option<u64>,
    wake: Arc<EventFd>,
    queue: std_mpsc::Receiver<Command>,
    rx: Vec<RxSocket>,
    sessions: HashMap<u32, SessionIo>,
    /// Every armed timer: its deadline and how early it may be delivered
    /// ([`Action::ArmTimer`]).
    timers: TimerQueue,
    /// When the gated receiving sockets are next drained (and re-enabled
    /// if nothing came); `None` while no socket is gated.
    rx_gate: Option<u64>,
    /// The last wakeup that a receiving socket caused.
    last_rx_wake: Option<u64>,
    subscribers: Vec<mpsc::UnboundedSender<BfdEvent>>,
    shared: Arc<Shared>,
    ifnames: HashMap<u32, String>,
    /// The peers' MACs (echo).
    neighbours: neigh::Cache,
    cmsg: Vec<u8>,
    last_now: u64,
}

pub(super) fn run(setup: Setup, ready: std_mpsc::Sender<Result<(), Error>>) {
    match EventLoop::new(setup) {
        Ok(mut lp) => {
            let _ = ready.send(Ok(()));
            lp.run();
        }
        Err(e) => {
            let _ = ready.send(Err(e));
        }
    }
}

impl EventLoop {
    fn new(setup: Setup) -> Result<EventLoop, Error> {
        if let Some(ns) = &setup.netns {
            // Only this thread moves.
            nix::sched::setns(ns, CloneFlags::CLONE_NEWNET)
                .map_err(|e| Error::io("entering the network namespace", e))?;
        }
        setup
            .shared
            .tid
            .store(nix::unistd::gettid().as_raw(), Ordering::Relaxed);
        let epoll =
            Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(|e| Error::io("epoll", e))?;
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(|e| Error::io("timerfd", e))?;
        epoll
            .add(
                setup.wake.as_ref(),
                EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_WAKE),
            )
            .map_err(|e| Error::io("epoll", e))?;
        epoll
            .add(&timer, EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_TIMER))
            .map_err(|e| Error::io("epoll", e))?;
        let mut rx = Vec::new();
        for v6 in [false, true] {
            for (hop, port) in [
                (Hop::SingleHop, CONTROL_PORT_SINGLE_HOP),
                (Hop::MultiHop, CONTROL_PORT_MULTI_HOP),
            ] {
                let family = if v6 { "IPv6" } else { "IPv4" };
                match sys::rx_socket(v6, port) {
                    Ok(socket) => {
                        let token = TOKEN_RX + rx.len() as u64;
                        epoll
                            .add(&socket, EpollEvent::new(EpollFlags::EPOLLIN, token))
                            .map_err(|e| Error::io("epoll", e))?;
                        rx.push(RxSocket {
                            socket,
                            hop,
                            gated: false,
                        });
                    }
                    // IPv6 disabled on the host: IPv4 still works.
                    Err(e)
                        if v6
                            && !setup.require_ipv6
                            && matches!(
                                e.raw_os_error().map(Errno::from_raw),
                                Some(Errno::EAFNOSUPPORT | Errno::EADDRNOTAVAIL)
                            ) => {}
                    Err(e) => {
                        return Err(Error::io(
                            format!("listening on UDP port {port} ({family})"),
                            e,
                        ));
                    }
                }
            }
        }
        let mut rng = SplitMix64::new(setup.seed);
        Ok(EventLoop {
            registry: Registry::new(rng.next_u64()),
            rng,
            epoll,
            timer,
            armed: None,
            wake: setup.wake,
            queue: setup.queue,
            rx,
            sessions: HashMap::new(),
            timers: TimerQueue::default(),
            rx_gate: None,
            last_rx_wake: None,
            subscribers: Vec::new(),
            shared: setup.shared,
            ifnames: HashMap::new(),
            neighbours: neigh::Cache::default(),
            cmsg: sys::cmsg_buffer(),
            last_now: 0,
        })
    }

    /// The clock, never going backwards for the sessions.
    fn now(&mut self) -> u64 {
        self.last_now = self.last_now.max(sys::monotonic_ns());
        self.last_now
    }

    fn run(&mut self) {
        let mut events = [EpollEvent::empty(); 16];
        loop {
            let n = match self.epoll.wait(&mut events, EpollTimeout::NONE) {
                Ok(n) => n,
                Err(Errno::EINTR) => continue,
                Err(_) => {
                    // Cannot happen with valid descriptors; do not spin.
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    continue;
                }
            };
            Shared::bump(&self.shared.wakeups);
            // Packets queued on gated sockets are older than anything this
            // wakeup is for: handled first, before any timer.
            self.drain_gated();
            let mut commands = false;
            let mut rx_ready = false;
            for event in &events[..n] {
                match event.data() {
                    TOKEN_WAKE => commands = true,
                    TOKEN_TIMER => {
                        // Drain the expiration count; EAGAIN if already read.
                        let _ = self.timer.wait();
                    }
                    token if token & TOKEN_ECHO != 0 => self.drain_echo(token as u32),
                    token => {
                        rx_ready = true;
                        let index = (token - TOKEN_RX) as usize;
                        self.drain_socket(index);
                        self.maybe_gate(index);
                    }
                }
            }
            if rx_ready {
                self.last_rx_wake = Some(self.now());
            }
            if commands {
                let _ = self.wake.read();
                if !self.drain_commands() {
                    self.shutdown();
                    return;
                }
            }
            self.fire_due();
            self.rearm();
        }
    }

    // ---- receiving ----

    /// Reads every datagram queued on a receiving socket; returns how many.
    fn drain_socket(&mut self, index: usize) -> usize {
        let mut buf = [0u8; 512];
        let mut count = 0;
        let Some(rx) = self.rx.get(index) else {
            return 0;
        };
        let hop = rx.hop;
        loop {
            let Some(rx) = self.rx.get(index) else {
                return count;
            };
            let datagram = match sys::recv(&rx.socket, &mut buf, &mut self.cmsg) {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return count,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    Shared::bump(&self.shared.rx_errors);
                    return count;
                }
            };
            count += 1;
            Shared::bump(&self.shared.control_rx);
            let now = self.now();
            let interface = datagram.ifindex.and_then(|i| self.interface_name(i));
            let meta = RxMeta {
                hop,
                interface: interface.as_deref(),
                source: datagram.source,
                // Without packet info only the discriminator can match.
                destination: datagram.destination.unwrap_or(datagram.source),
                // Without the TTL the session refuses the packet.
                ttl: datagram.ttl.unwrap_or(0),
            };
            let len = datagram.len.min(buf.len());
            match self.registry.receive_control(&buf[..len], &meta, now) {
                Ok((discriminator, actions)) => self.apply(discriminator, actions, None),
                Err(RxDrop::RateLimited(_)) => Shared::bump(&self.shared.rx_rate_limited),
                Err(_) => Shared::bump(&self.shared.rx_unmatched),
            }
        }
    }

    /// After a receiving socket woke us: if it also did less than
    /// [`RX_GATE_NS`] ago, take it out of the epoll set; from now on it is
    /// drained at every wakeup and at least every [`RX_GATE_NS`]
    /// ([`drain_gated`](Self::drain_gated)), so a busy socket costs at most
    /// one wakeup per gate period, shared with the transmissions due then,
    /// instead of one per packet. Nothing waits longer than that to be
    /// read, far inside any detection time.
    fn maybe_gate(&mut self, index: usize) {
        let now = self.now();
        let busy = self
            .last_rx_wake
            .is_some_and(|last| now.saturating_sub(last) < RX_GATE_NS);
        if !busy {
            return;
        }
        let Some(rx) = self.rx.get_mut(index) else {
            return;
        };
        let token = TOKEN_RX + index as u64;
        if self
            .epoll
            .modify(&rx.socket, &mut EpollEvent::new(EpollFlags::empty(), token))
            .is_ok()
        {
            rx.gated = true;
            Shared::bump(&self.shared.rx_gated);
            self.rx_gate.get_or_insert(now + RX_GATE_NS);
        }
    }

    /// Drains the gated receiving sockets; when the gate period is over, a
    /// socket that had nothing goes back into the epoll set.
    fn drain_gated(&mut self) {
        let Some(gate) = self.rx_gate else {
            return;
        };
        let due = self.now() >= gate;
        let mut still_gated = false;
        for index in 0..self.rx.len() {
            if !self.rx[index].gated {
                continue;
            }
            let count = self.drain_socket(index);
            if due && count == 0 {
                let rx = &mut self.rx[index];
                let token = TOKEN_RX + index as u64;
                if self
                    .epoll
                    .modify(&rx.socket, &mut EpollEvent::new(EpollFlags::EPOLLIN, token))
                    .is_ok()
                {
                    rx.gated = false;
                    continue;
                }
            }
            still_gated = true;
        }
        let now = self.now();
        self.rx_gate = match (still_gated, due) {
            (false, _) => None,
            (true, true) => Some(now + RX_GATE_NS),
            (true, false) => Some(gate),
        };
    }

    /// Reads the frames queued on a session's echo socket: its echo
    /// packets back from the peer go to the session; anything else the
    /// filter let through (another session's echo on the same address, a
    /// wrong TTL or checksum) is counted and dropped.
    fn drain_echo(&mut self, discriminator: u32) {
        let mut buf = [0u8; frame::FILTER_SNAPLEN as usize];
        loop {
            let Some(echo) = self
                .sessions
                .get(&discriminator)
                .and_then(|io| io.echo.as_ref())
            else {
                return; // closed meanwhile (echo stopped, session gone)
            };
            let address = echo.path.address;
            let len = match echo.socket.recv(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    Shared::bump(&self.shared.rx_errors);
                    return;
                }
            };
            Shared::bump(&self.shared.echo_rx);
            let now = self.now();
            match frame::decode_returned(&buf[..len.min(buf.len())], address) {
                Ok(packet) if packet.discriminator == discriminator => {
                    if let Some(actions) =
                        self.registry
                            .handle(discriminator, Event::EchoReceived(packet), now)
                    {
                        self.apply(discriminator, actions, None);
                    }
                }
                _ => Shared::bump(&self.shared.echo_rx_ignored),
            }
        }
    }

    fn interface_name(&mut self, index: u32) -> Option<String> {
        if let Some(name) = self.ifnames.get(&index) {
            return Some(name.clone());
        }
        let name = sys::interface_name(index)?;
        self.ifnames.insert(index, name.clone());
        Some(name)
    }

    // ---- commands ----

    /// Returns false when the runtime must stop.
    fn drain_commands(&mut self) -> bool {
        loop {
            let command = match self.queue.try_recv() {
                Ok(c) => c,
                Err(std_mpsc::TryRecvError::Empty) => return true,
                Err(std_mpsc::TryRecvError::Disconnected) => return false,
            };
            match command {
                Command::Acquire {
                    key,
                    params,
                    vrf,
                    reply,
                } => {
                    let result = self.acquire(key, params, vrf.as_deref());
                    let _ = reply.send(result);
                }
                Command::Release { client, reply } => {
                    let result = self.release(client);
                    let _ = reply.send(result);
                }
                Command::SetParameters {
                    client,
                    params,
                    reply,
                } => {
                    let result = self.set_parameters(client, params);
                    let _ = reply.send(result);
                }
                Command::Subscribe(tx) => self.subscribers.push(tx),
                Command::MetricSamples(reply) => {
                    // The scraper may have given up: nothing to do then.
                    let _ = reply.try_send(self.metric_samples());
                }
                Command::Shutdown => return false,
            }
        }
    }

    fn acquire(
        &mut self,
        key: SessionKey,
        params: Parameters,
        vrf: Option<&str>,
    ) -> Result<Acquired, Error> {
        // Interfaces may have been renamed or created since the cache filled.
        self.ifnames.clear();
        let now = self.now();
        // Known before the first packet (see `check_loopback`).
        let loopback = (params.echo_mode && key.echo_capable()).then(|| loops_echo_back(&key));
        let initial: Vec<Event> = loopback.map(Event::EchoLoopback).into_iter().collect();
        let acquired = self
            .registry
            .acquire_with(key.clone(), params, &initial, now)?;
        let discriminator = acquired.discriminator;
        if acquired.created {
            let status = self
                .registry
                .session(discriminator)
                .expect("just created")
                .status();
            let (tx, _) = watch::channel(status);
            self.sessions.insert(
                discriminator,
                SessionIo {
                    peer_label: metrics::peer_label(key.remote).into(),
                    vrf_label: metrics::vrf_label(vrf).into(),
                    key,
                    socket: None,
                    source_port: None,
                    status: tx,
                    control_sent: 0,
                    echo: None,
                    echo_sent: 0,
                    echo_source_port: SOURCE_PORT_MIN
                        + (self.rng.next_u64() % (u64::from(SOURCE_PORT_MAX - SOURCE_PORT_MIN) + 1))
                            as u16,
                    echo_ip_id: self.rng.next_u32() as u16,
                    loopback_checked: loopback.map(|_| now),
                },
            );
            self.shared
                .sessions
                .store(self.sessions.len() as u64, Ordering::Relaxed);
        }
        let status = self.sessions[&discriminator].status.subscribe();
        self.apply(discriminator, acquired.actions, None);
        Ok((acquired.client, status))
    }

    fn release(&mut self, client: ClientId) -> Result<(), Error> {
        let discriminator = self
            .registry
            .client_session(client)
            .ok_or(crate::registry::RegistryError::UnknownClient(client))?;
        let now = self.now();
        if self.registry.client_count(discriminator) == 1 {
            // The last client: AdminDown first, so that the watch and the
            // subscribers see it before the session goes.
            if let Some(actions) = self.registry.handle(discriminator, Event::AdminDown, now) {
                self.apply(discriminator, actions, None);
            }
        }
        let released = self.registry.release(client, now)?;
        self.apply(discriminator, released.actions, None);
        if released.removed {
            self.sessions.remove(&discriminator);
            self.timers.remove_session(discriminator);
            self.shared
                .sessions
                .store(self.sessions.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Every session's counters, for a scrape: copies of what the sessions
    /// and the send path already count.
    fn metric_samples(&self) -> Vec<Sample> {
        self.sessions
            .iter()
            .filter_map(|(&discriminator, io)| {
                let session = self.registry.session(discriminator)?;
                let c = session.counters();
                Some(Sample {
                    peer: Arc::clone(&io.peer_label),
                    vrf: Arc::clone(&io.vrf_label),
                    up: session.state() == State::Up,
                    control_in: c.control_in,
                    control_out: io.control_sent,
                    echo_in: c.echo_in,
                    echo_out: io.echo_sent,
                    up_events: c.up_events,
                    down_events: c.down_events,
                })
            })
            .collect()
    }

    fn set_parameters(&mut self, client: ClientId, params: Parameters) -> Result<(), Error> {
        let now = self.now();
        let (discriminator, actions) = self.registry.set_parameters(client, params, now)?;
        self.apply(discriminator, actions, None);
        Ok(())
    }

    fn shutdown(&mut self) {
        let now = self.now();
        let all: Vec<u32> = self.sessions.keys().copied().collect();
        for discriminator in all {
            if let Some(actions) = self.registry.handle(discriminator, Event::AdminDown, now) {
                self.apply(discriminator, actions, None);
            }
        }
    }

    // ---- timers ----

    fn fire_due(&mut self) {
        for _ in 0..MAX_FIRES_PER_PASS {
            let Some(due) = self.timers.peek() else {
                break;
            };
            let now = self.now();
            if due.at > now + BATCH_SLACK_NS {
                break;
            }
            self.timers.pop();
            self.fire(due.discriminator, due.timer, due.at, now);
        }
        self.fire_early();
        self.shared
            .timer_queue_len
            .store(self.timers.len() as u64, Ordering::Relaxed);
    }

    /// Delivers the periodic transmissions due within their early margin
    /// (at most [`TX_EARLY_MAX_NS`] ahead), so they leave with this wakeup
    /// rather than each waking the thread on its own.
    fn fire_early(&mut self) {
        let now = self.now();
        let horizon = now + TX_EARLY_MAX_NS + BATCH_SLACK_NS;
        let mut later = Vec::new();
        while let Some(due) = self.timers.peek() {
            if due.at > horizon {
                break;
            }
            if due.at.saturating_sub(due.early) <= now + BATCH_SLACK_NS {
                self.timers.pop();
                self.fire(due.discriminator, due.timer, due.at, now);
            } else {
                // Still armed, out of the way of the ones behind it.
                self.timers.set_aside();
                later.push(due);
            }
        }
        for due in later {
            self.timers.put_back(&due);
        }
    }

    fn fire(&mut self, discriminator: u32, timer: Timer, at: u64, now: u64) {
        Shared::bump(&self.shared.timer_expiries);
        // A deadline delivered early is delivered at its time.
        let at_or_now = now.max(at);
        if let Some(actions) =
            self.registry
                .handle(discriminator, Event::TimerExpired(timer), at_or_now)
        {
            let periodic = (timer == Timer::Tx).then_some(at);
            self.apply(discriminator, actions, periodic);
        }
    }

    /// Arms the timerfd at the earliest live deadline.
    fn rearm(&mut self) {
        let next = self.timers.peek().map(|due| due.at);
        let next = match (next, self.rx_gate) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if next == self.armed {
            return;
        }
        let result = match next {
            Some(at) => self.timer.set(
                Expiration::OneShot(TimeSpec::from_duration(std::time::Duration::from_nanos(
                    at.max(1),
                ))),
                TimerSetTimeFlags::TFD_TIMER_ABSTIME,
            ),
            None => self.timer.unset(),
        };
        self.armed = if result.is_ok() { next } else { None };
    }

    // ---- actions ----

    /// Carries out a session's actions. `periodic` is the deadline of the
    /// Tx timer that produced them, for the lateness histogram.
    fn apply(&mut self, discriminator: u32, actions: Vec<Action>, periodic: Option<u64>) {
        let mut changes: Vec<StateChange> = Vec::new();
        for action in actions {
            match action {
                Action::SendControl(packet) => {
                    self.send(discriminator, &packet);
                    if let Some(at) = periodic {
                        let late = sys::monotonic_ns().saturating_sub(at);
                        self.shared.tx_lateness.record_ns(late);
                    }
                }
                Action::SendEcho(echo) => self.send_echo(discriminator, &echo),
                Action::ArmTimer {
                    timer,
                    at_ns,
                    early_ns,
                } => {
                    self.timers.arm(discriminator, timer, at_ns, early_ns);
                }
                Action::CancelTimer(timer) => {
                    self.timers.cancel(discriminator, timer);
                }
                Action::StateChanged(change) => changes.push(change),
            }
        }
        // Echo stopped (Down, the remote withdrew, echo mode off): close
        // its socket, so that no frame goes through its filter for nothing.
        if let (Some(session), Some(io)) = (
            self.registry.session(discriminator),
            self.sessions.get_mut(&discriminator),
        ) && !session.echo_active()
        {
            io.echo = None;
        }
        self.publish(discriminator, &changes);
        self.check_loopback(discriminator);
    }

    /// For a session in echo mode on an echo-capable path: whether our
    /// forwarding plane returns the peer's echo packets
    /// ([`loops_echo_back`]), read when the session is created (before its
    /// first packet), when echo mode comes on, and again every
    /// [`LOOPBACK_RECHECK_NS`]; the session advertises a Required Min Echo
    /// RX of 0 without it ([`Event::EchoLoopback`]).
    fn check_loopback(&mut self, discriminator: u32) {
        let now = self.now();
        let (Some(session), Some(io)) = (
            self.registry.session(discriminator),
            self.sessions.get_mut(&discriminator),
        ) else {
            return;
        };
        if !session.params().echo_mode
            || !session.key().echo_capable()
            || io
                .loopback_checked
                .is_some_and(|at| now.saturating_sub(at) < LOOPBACK_RECHECK_NS)
        {
            return;
        }
        io.loopback_checked = Some(now);
        let forwarding = loops_echo_back(&io.key);
        if forwarding != session.echo_loopback()
            && let Some(actions) =
                self.registry
                    .handle(discriminator, Event::EchoLoopback(forwarding), now)
        {
            self.apply(discriminator, actions, None);
        }
    }

    /// Sends one echo packet: opens the session's echo socket if needed,
    /// looks the peer's MAC up, sends the frame. Any failure (no MAC yet,
    /// the interface gone) is a transmit error: the packet is not sent, and
    /// echo detection will take the session down if that lasts.
    fn send_echo(&mut self, discriminator: u32, echo: &EchoPacket) {
        let now = self.now();
        let Some(io) = self.sessions.get_mut(&discriminator) else {
            return;
        };
        if io.echo.is_none() {
            let opened = open_echo(&io.key, io.echo_source_port).and_then(|e| {
                let token = TOKEN_ECHO | u64::from(discriminator);
                self.epoll
                    .add(&e.socket, EpollEvent::new(EpollFlags::EPOLLIN, token))?;
                Ok(e)
            });
            match opened {
                Ok(e) => io.echo = Some(e),
                Err(_) => {
                    Shared::bump(&self.shared.tx_errors);
                    return;
                }
            }
        }
        let e = io.echo.as_mut().expect("opened above");
        let Some(mac) = self.neighbours.lookup(e.ifindex, e.peer, now) else {
            Shared::bump(&self.shared.tx_errors);
            return;
        };
        e.path.peer_mac = mac;
        io.echo_ip_id = io.echo_ip_id.wrapping_add(1);
        let bytes = frame::encode(&e.path, io.echo_ip_id, echo);
        match e.socket.send(&bytes) {
            Ok(()) => {
                io.echo_sent += 1;
                Shared::bump(&self.shared.echo_tx);
            }
            Err(err) => {
                Shared::bump(&self.shared.tx_errors);
                // A full queue is transient; anything else (the interface
                // went away) reopens the socket next time.
                if err.kind() != io::ErrorKind::WouldBlock
                    && err.raw_os_error() != Some(Errno::ENOBUFS as i32)
                {
                    io.echo = None;
                }
            }
        }
    }

    fn send(&mut self, discriminator: u32, packet: &ControlPacket) {
        let Some(io) = self.sessions.get_mut(&discriminator) else {
            return;
        };
        if io.socket.is_none() {
            match sys::tx_socket(&io.key, &mut self.rng, io.source_port) {
                Ok(s) => {
                    io.source_port = s.local_addr().ok().map(|a| a.port());
                    io.socket = Some(s);
                }
                Err(_) => {
                    Shared::bump(&self.shared.tx_errors);
                    return;
                }
            }
        }
        let mut buf = [0u8; MAX_PACKET_LEN];
        let Ok(len) = packet.encode(&mut buf) else {
            return;
        };
        let to = SocketAddr::new(io.key.remote, io.key.hop.control_port());
        let socket = io.socket.as_ref().expect("opened above");
        match socket.send_to(&buf[..len], to) {
            Ok(_) => {
                io.control_sent += 1;
                Shared::bump(&self.shared.control_tx);
            }
            Err(e) => {
                Shared::bump(&self.shared.tx_errors);
                // A queue full is transient; anything else (the address or
                // the interface went away) reopens the socket next time.
                if e.kind() != io::ErrorKind::WouldBlock
                    && e.raw_os_error() != Some(Errno::ENOBUFS as i32)
                {
                    io.socket = None;
                }
            }
        }
    }

    /// Updates the session's watch (in place; receivers are woken when
    /// something other than counters and timestamps changed) and sends the
    /// transitions to the subscribers.
    fn publish(&mut self, discriminator: u32, changes: &[StateChange]) {
        let (Some(session), Some(io)) = (
            self.registry.session(discriminator),
            self.sessions.get(&discriminator),
        ) else {
            return;
        };
        let status = session.status();
        io.status.send_if_modified(|current| {
            let notify = !changes.is_empty() || significant(current) != significant(&status);
            *current = status.clone();
            notify
        });
        if changes.is_empty() {
            return;
        }
        let clients = self.registry.clients(discriminator);
        for change in changes {
            let event = BfdEvent {
                discriminator,
                key: io.key.clone(),
                change: *change,
                client_action: change.client_action(),
                clients: clients.clone(),
                status: status.clone(),
            };
            self.subscribers.retain(|s| s.send(event.clone()).is_ok());
        }
    }
}

/// Whether the kernel would return the peer's echo packets on `key`'s path
/// (addressed to the peer itself, they arrive at our MAC and are routed
/// back out of the same interface): IPv4 forwarding on the session's
/// interface, read in the thread's namespace. Unreadable (no such
/// interface yet) counts as no.
fn loops_echo_back(key: &SessionKey) -> bool {
    key.interface
        .as_deref()
        .and_then(sys::ipv4_forwarding)
        .unwrap_or(false)
}

/// The echo socket of a single-hop IPv4 session: our interface's index and
/// MAC, a packet socket filtered to our address.
fn open_echo(key: &SessionKey, source_port: u16) -> io::Result<EchoIo> {
    let (IpAddr::V4(local), IpAddr::V4(peer), Some(interface)) =
        (key.local, key.remote, key.interface.as_deref())
    else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{key}: echo runs on single-hop IPv4 sessions only"),
        ));
    };
    let (ifindex, local_mac) = sys::link(interface)?;
    let socket = PacketSocket::open(ifindex, frame::ETHERTYPE_IPV4, &frame::echo_filter(local))?;
    Ok(EchoIo {
        socket,
        ifindex,
        peer,
        path: EchoPath {
            local_mac,
            peer_mac: [0; 6],
            address: local,
            source_port,
        },
    })
}

/// What wakes a watch receiver: everything but counters and timestamps.
fn significant(
    s: &SessionStatus,
) -> (
    crate::packet::State,
    crate::packet::Diagnostic,
    crate::session::RemoteInfo,
    Parameters,
    [u64; 6],
    [bool; 3],
) {
    (
        s.state,
        s.local_diag,
        s.remote,
        s.params,
        [
            u64::from(s.advertised_min_tx_us),
            u64::from(s.advertised_min_rx_us),
            s.tx_interval_us,
            s.rx_interval_us,
            s.detection_time_us,
            u64::from(s.advertised_min_echo_rx_us),
        ],
        [s.transmitting, s.poll_in_progress, s.echo_active],
    )
}
