//! The UDP edge: one tokio task owns the socket and the [`Core`], runs it
//! with real timers, and talks to the speaker through a [`Membership`]
//! handle. Every send is non-blocking (`try_send_to`; a full socket buffer
//! drops and counts). The task ends when the handle is dropped (silently,
//! as a crash looks to the others) or after [`Membership::leave`].

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use prometheus::Registry;
use thiserror::Error;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::core::{Config, Core, Event, Output};
use crate::metrics::Metrics;
use crate::wire::{MAX_DATAGRAM, SecretKey};

/// Events kept for a slow reader; beyond, events are dropped and counted
/// (the live set and the fence state are never lost: they are watches, and
/// the events that carry state, [`Event::Fence`] and [`Event::WatcherUp`],
/// wait for room instead, coalesced: the last fence state, each watcher
/// once).
pub const EVENT_QUEUE: usize = 1024;

/// Datagrams read per wake-up of the task before its timers run: a flood
/// on the port delays a heartbeat by one batch at most.
pub const MAX_DRAIN: usize = 64;

/// What the edge needs besides the core's settings.
#[derive(Clone, Debug)]
pub struct EdgeConfig {
    /// The core's settings. `core.addr` is the address to bind
    /// (`--ml-bindaddr`:`--ml-bindport`); port 0 binds an ephemeral port,
    /// which then becomes the advertised one.
    pub core: Config,
    /// Addresses to announce to at start and every `rejoin_interval`
    /// (speaker Pod IPs found by `--ml-labels`, with the bind port).
    pub seeds: Vec<SocketAddr>,
    /// Seeds that are not members are announced to this often (1 min, as
    /// MetalLB).
    pub rejoin_interval: Duration,
    pub key: Option<SecretKey>,
}

impl EdgeConfig {
    pub fn new(core: Config, seeds: Vec<SocketAddr>, key: Option<SecretKey>) -> EdgeConfig {
        EdgeConfig {
            core,
            seeds,
            rejoin_interval: Duration::from_secs(60),
            key,
        }
    }
}

#[derive(Debug, Error)]
pub enum StartError {
    #[error("binding the membership socket on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(
        "the membership bind address {0} is unspecified; give the address other speakers reach"
    )]
    Unspecified(SocketAddr),
    #[error("registering the membership metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// The speaker's handle. Dropping it ends the task without leaving (the
/// others detect a crash); [`Membership::leave`] leaves gracefully.
#[derive(Debug)]
pub struct Membership {
    live: watch::Receiver<BTreeSet<String>>,
    fenced: watch::Receiver<bool>,
    synced: watch::Receiver<bool>,
    events: mpsc::Receiver<Event>,
    watched: watch::Sender<BTreeSet<String>>,
    seeds: watch::Sender<Vec<SocketAddr>>,
    leave: Option<oneshot::Sender<oneshot::Sender<()>>>,
    local: SocketAddr,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Membership {
    /// Binds the socket, joins the seeds and starts the task.
    pub async fn start(
        mut cfg: EdgeConfig,
        registry: Option<&Registry>,
    ) -> Result<Membership, StartError> {
        let bind = cfg.core.addr;
        if bind.ip().is_unspecified() {
            return Err(StartError::Unspecified(bind));
        }
        let io = |source| StartError::Bind { addr: bind, source };
        // tokio's try_send_to refuses until the reactor has seen the socket
        // writable; a non-blocking std clone sends at once and never waits
        let std_socket = std::net::UdpSocket::bind(bind).map_err(io)?;
        std_socket.set_nonblocking(true).map_err(io)?;
        let sender = std_socket.try_clone().map_err(io)?;
        let local = std_socket.local_addr().map_err(io)?;
        let socket = UdpSocket::from_std(std_socket).map_err(io)?;
        cfg.core.addr = local;
        let metrics = registry.map(Metrics::register).transpose()?;
        // the core's randomness (helpers, discriminators, nonce prefix);
        // the clock is a fallback only if the OS has no entropy to give
        let seed = rand::TryRng::try_next_u64(&mut rand::rngs::SysRng).unwrap_or_else(|_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
                ^ u64::from(std::process::id())
        });
        let core = Core::new(cfg.core.clone(), cfg.key.clone(), seed);
        let (live_tx, live_rx) = watch::channel(core.live().clone());
        let (fenced_tx, fenced_rx) = watch::channel(core.fenced());
        let (synced_tx, synced_rx) = watch::channel(core.synced());
        let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
        let (watched_tx, watched_rx) = watch::channel(BTreeSet::new());
        let (seeds_tx, seeds_rx) = watch::channel(cfg.seeds.clone());
        let (leave_tx, leave_rx) = oneshot::channel();
        let task = Task {
            core,
            socket,
            sender,
            start: Instant::now(),
            live: live_tx,
            fenced: fenced_tx,
            synced: synced_tx,
            events: events_tx,
            pending: Pending::default(),
            watched: watched_rx,
            seeds: seeds_rx,
            leave: leave_rx,
            rejoin_interval: cfg.rejoin_interval,
            metrics,
        };
        let task = tokio::spawn(task.run());
        Ok(Membership {
            live: live_rx,
            fenced: fenced_rx,
            synced: synced_rx,
            events: events_rx,
            watched: watched_tx,
            seeds: seeds_tx,
            leave: Some(leave_tx),
            local,
            task: Some(task),
        })
    }

    /// The address the socket is bound to (and advertised).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The live speakers, this node included.
    pub fn live(&self) -> watch::Receiver<BTreeSet<String>> {
        self.live.clone()
    }

    /// Whether this node is self-fenced (the state [`Event::Fence`]
    /// reports), as a watch: never lost, whatever the event queue does.
    pub fn fenced(&self) -> watch::Receiver<bool> {
        self.fenced.clone()
    }

    /// Whether this node has applied another member's whole state
    /// ([`crate::Core::synced`]), as a watch. It turns true after the live
    /// set that state brought was published.
    pub fn synced(&self) -> watch::Receiver<bool> {
        self.synced.clone()
    }

    /// The next event (owner down, path fault, fence ...); `None` once the
    /// task has ended.
    pub async fn next_event(&mut self) -> Option<Event> {
        self.events.recv().await
    }

    /// An event if one is waiting.
    pub fn try_next_event(&mut self) -> Option<Event> {
        self.events.try_recv().ok()
    }

    /// The owners this node watches (it is their next candidate); replaces
    /// the previous set. Coalesced: only the last set matters.
    pub fn watch_owners(&self, owners: BTreeSet<String>) {
        self.watched.send_replace(owners);
    }

    /// New seed addresses (the speaker's periodic Pod IP discovery).
    pub fn set_seeds(&self, seeds: Vec<SocketAddr>) {
        self.seeds.send_replace(seeds);
    }

    /// Leaves the cluster (every member is told at once) and waits for the
    /// task to end, at most `deadline`.
    pub async fn leave(mut self, deadline: Duration) {
        if let Some(leave) = self.leave.take() {
            let (done_tx, done_rx) = oneshot::channel();
            if leave.send(done_tx).is_ok() {
                let _ = tokio::time::timeout(deadline, done_rx).await;
            }
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(deadline, task).await;
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        // dropping the senders ends the task; abort covers a task that is
        // not scheduled again soon
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

struct Task {
    core: Core,
    socket: UdpSocket,
    sender: std::net::UdpSocket,
    start: Instant,
    live: watch::Sender<BTreeSet<String>>,
    fenced: watch::Sender<bool>,
    synced: watch::Sender<bool>,
    events: mpsc::Sender<Event>,
    /// State-carrying events waiting for room in `events`.
    pending: Pending,
    watched: watch::Receiver<BTreeSet<String>>,
    seeds: watch::Receiver<Vec<SocketAddr>>,
    leave: oneshot::Receiver<oneshot::Sender<()>>,
    rejoin_interval: Duration,
    metrics: Option<Metrics>,
}

/// How often a node that no member has answered yet asks other seeds.
const ALONE_REJOIN: Duration = Duration::from_secs(1);

impl Task {
    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    async fn run(mut self) {
        let mut buf = vec![0u8; MAX_DATAGRAM + 1];
        let seeds = self.seeds.borrow_and_update().clone();
        let now = self.now();
        self.core.set_peers(seeds.iter().copied());
        self.core.join(&seeds, now);
        self.flush();
        let mut rejoin = tokio::time::interval(self.rejoin_interval);
        rejoin.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        rejoin.tick().await;
        // A join asks a few seeds only: while none has answered (seeds
        // listed but not running yet), others are asked every second.
        let mut alone = tokio::time::interval(ALONE_REJOIN);
        alone.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        alone.tick().await;
        loop {
            let deadline = self
                .core
                .next_deadline()
                .map(|at| self.start + Duration::from_nanos(at));
            let sleep = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                // timers before the socket: a datagram flood must not
                // starve the heartbeats and the detection (polled first,
                // and run below whatever woke the task)
                () = sleep => {}
                done = &mut self.leave => {
                    // an error: the handle was dropped, stop silently
                    if let Ok(done) = done {
                        let now = self.now();
                        self.core.leave(now);
                        self.flush();
                        let _ = done.send(());
                    }
                    return;
                }
                changed = self.watched.changed() => {
                    if changed.is_err() {
                        debug!("membership handle dropped: stopping without leave");
                        return;
                    }
                    let owners = self.watched.borrow_and_update().clone();
                    let now = self.now();
                    self.core.watch_owners(owners, now);
                }
                received = self.socket.recv_from(&mut buf) => match received {
                    Ok((len, from)) => {
                        let now = self.now();
                        self.core.handle_datagram(from, &buf[..len], now);
                        self.drain(&mut buf);
                    }
                    Err(error) => debug!(%error, "membership receive"),
                },
                changed = self.seeds.changed() => {
                    if changed.is_ok() {
                        let peers = self.seeds.borrow().clone();
                        self.core.set_peers(peers);
                        self.join_non_members();
                    }
                }
                _ = rejoin.tick() => self.join_non_members(),
                _ = alone.tick(), if self.core.live().len() <= 1 => self.join_non_members(),
            }
            let now = self.now();
            if self.core.next_deadline().is_some_and(|at| at <= now) {
                self.core.tick(now);
            }
            self.flush();
        }
    }

    /// Reads the datagrams already waiting, at most [`MAX_DRAIN`] in all
    /// per wake-up, so that the timers run between batches.
    fn drain(&mut self, buf: &mut [u8]) {
        for _ in 1..MAX_DRAIN {
            match self.socket.try_recv_from(buf) {
                Ok((len, from)) => {
                    let now = self.now();
                    self.core.handle_datagram(from, &buf[..len], now);
                }
                Err(error) => {
                    if error.kind() != std::io::ErrorKind::WouldBlock {
                        debug!(%error, "membership receive");
                    }
                    return;
                }
            }
        }
    }

    fn join_non_members(&mut self) {
        let members: BTreeSet<SocketAddr> = self
            .core
            .members()
            .into_iter()
            .filter(|(_, state, _)| *state != foca::State::Down)
            .map(|(id, ..)| id.addr)
            .collect();
        let seeds: Vec<SocketAddr> = self
            .seeds
            .borrow_and_update()
            .iter()
            .filter(|seed| !members.contains(seed))
            .copied()
            .collect();
        let now = self.now();
        self.core.join(&seeds, now);
    }

    fn flush(&mut self) {
        self.pending.deliver(&self.events);
        for output in self.core.take_outputs() {
            match output {
                Output::Send { to, datagram, .. } => {
                    if let Err(error) = self.sender.send_to(&datagram, to) {
                        if let Some(metrics) = &self.metrics {
                            metrics.send_errors.inc();
                        }
                        debug!(%to, %error, "membership send dropped");
                    }
                }
                Output::Event(Event::LiveChanged(live)) => {
                    self.live.send_replace(live);
                }
                Output::Event(event) => {
                    if let Some(metrics) = &self.metrics {
                        metrics.observe_event(&event);
                    }
                    if let Event::Fence(on) = event {
                        self.fenced.send_replace(on);
                    }
                    if Pending::keeps(&event) {
                        self.pending.push(event);
                        self.pending.deliver(&self.events);
                    } else if self.events.try_send(event).is_err() {
                        if let Some(metrics) = &self.metrics {
                            metrics.events_dropped.inc();
                        }
                        warn!("membership event queue full: event dropped");
                    }
                }
            }
        }
        // after the outputs: the live set a whole state brought is out first
        let synced = self.core.synced();
        self.synced
            .send_if_modified(|s| std::mem::replace(s, synced) != synced);
        if let Some(metrics) = &mut self.metrics {
            metrics.update(&self.core);
        }
    }
}

/// The events that carry state ([`Event::Fence`], [`Event::WatcherUp`]),
/// waiting for room in the event queue rather than dropped: a lost
/// `Fence(false)` left the speaker fenced for good, a lost `WatcherUp` its
/// addresses not announced again after a cut. Coalesced: the last fence
/// state, each watcher once. Delivered before any later one of them.
#[derive(Debug, Default)]
struct Pending {
    fence: Option<bool>,
    watchers_up: BTreeSet<String>,
}

impl Pending {
    fn keeps(event: &Event) -> bool {
        matches!(event, Event::Fence(_) | Event::WatcherUp { .. })
    }

    fn push(&mut self, event: Event) {
        match event {
            Event::Fence(on) => self.fence = Some(on),
            Event::WatcherUp { node } => {
                self.watchers_up.insert(node);
            }
            _ => {}
        }
    }

    /// Sends what fits, the fence state first.
    fn deliver(&mut self, events: &mpsc::Sender<Event>) {
        if let Some(on) = self.fence {
            if events.try_send(Event::Fence(on)).is_err() {
                return;
            }
            self.fence = None;
        }
        while let Some(node) = self.watchers_up.pop_first() {
            if let Err(error) = events.try_send(Event::WatcherUp { node }) {
                if let Event::WatcherUp { node } = error.into_inner() {
                    self.watchers_up.insert(node);
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(node: &str) -> Event {
        Event::WatcherUp { node: node.into() }
    }

    #[test]
    fn state_events_wait_for_room_instead_of_being_dropped() {
        let (tx, mut rx) = mpsc::channel(2);
        let mut pending = Pending::default();
        // a slow reader: the queue is full of other events
        for node in ["a", "b"] {
            tx.try_send(Event::PathFault { node: node.into() }).unwrap();
        }
        for event in [
            Event::Fence(true),
            up("w1"),
            Event::Fence(false),
            up("w1"),
            up("w2"),
        ] {
            pending.push(event);
            pending.deliver(&tx);
        }
        assert!(matches!(rx.try_recv(), Ok(Event::PathFault { .. })));
        assert!(matches!(rx.try_recv(), Ok(Event::PathFault { .. })));
        assert!(rx.try_recv().is_err());
        // room again: the last fence state first, then each watcher once
        pending.deliver(&tx);
        assert_eq!(rx.try_recv().ok(), Some(Event::Fence(false)));
        assert_eq!(rx.try_recv().ok(), Some(up("w1")));
        assert!(rx.try_recv().is_err());
        pending.deliver(&tx);
        assert_eq!(rx.try_recv().ok(), Some(up("w2")));
        pending.deliver(&tx);
        assert!(rx.try_recv().is_err());
        assert!(pending.fence.is_none() && pending.watchers_up.is_empty());
    }
}
