//! The Linux edge: one dedicated OS thread that owns the
//! [`Registry`](crate::Registry), every BFD socket and the timers, and runs
//! the pure core.
//!
//! # Design
//! The thread shares no lock and no executor with anything slow (Kubernetes
//! resyncs, BGP UPDATE bursts): it sleeps in `epoll_wait` on
//!
//! - an eventfd, written by [`BfdHandle`] after queueing a command on a
//!   channel (acquire, release, parameters, subscribe, shutdown);
//! - one timerfd on `CLOCK_MONOTONIC`, armed at the earliest absolute
//!   deadline of a heap of every session's timers (no relative sleeps, so
//!   no drift; a timerfd has no timer slack);
//! - four receiving UDP sockets: single hop on 3784 and multihop on 4784,
//!   IPv4 and IPv6, bound to the wildcard address, with `IP_RECVTTL` /
//!   `IPV6_RECVHOPLIMIT` (the TTL is checked by the pure core:
//!   [`crate::path::check_ttl`], exactly 255 on single hop, at least
//!   `minimumTtl` on multihop) and `IP_PKTINFO` / `IPV6_RECVPKTINFO` (the
//!   destination address and ingress interface the registry demultiplexes
//!   on);
//! - one `AF_PACKET` socket per session running the echo function (below).
//!
//! Each wakeup: read the clock, drain the sockets and the command queue,
//! deliver every deadline due within [`BATCH_SLACK_NS`] (so timers a few µs
//! apart cost one wakeup), send, re-arm the timerfd.
//!
//! Wakeups, not packets, are what the thread costs (being switched back in
//! is most of its CPU time on a VM), so two rules keep them fewer than the
//! packets at scale:
//! - a periodic transmission due within its early margin
//!   ([`crate::session::TX_EARLY_MAX_NS`], 2 ms at 50 ms; the session draws
//!   its jitter that far inside the 75-100 % band, so the interval on the
//!   wire stays inside it) is sent with the current wakeup instead of
//!   waking the thread again;
//! - a receiving socket that wakes the thread twice within [`RX_GATE_NS`]
//!   leaves the epoll set: it is drained first thing at every wakeup and at
//!   least every [`RX_GATE_NS`] (the timerfd is armed for it), and goes back
//!   into the set when such a drain finds it empty. A packet waits at most
//!   that long to be read (1.5 ms, against detection times of 30 ms and
//!   more), never past a timer: the drain comes before the deadlines.
//!
//! With 100 sessions at 50 ms that is about one wakeup per 1.5 ms instead
//! of one per packet; with a few sessions nothing changes (packets more
//! than 1.5 ms apart wake the thread as before). Each session has its
//! own sending socket (RFC 5881 §4, RFC 5883 §5): bound to the local
//! address and a random free source port in 49152-65535, TTL / hop limit
//! 255, and `SO_BINDTODEVICE` to the interface for single hop. A sending
//! socket that cannot be opened yet (address or interface missing) is
//! retried at each transmission.
//!
//! State leaves the thread through a `tokio::sync::watch` per session
//! (updated in place on every packet; receivers are woken only when
//! something other than counters and timestamps changes), an unbounded
//! event channel per subscriber (every transition, never dropped, never
//! blocking the thread), atomic counters ([`RuntimeStats`], and the
//! lateness of periodic transmissions, [`BfdHandle::tx_lateness`]) and,
//! when a Prometheus scrape asks through the command queue, a copy of every
//! session's counters ([`crate::metrics`]; nothing is counted for it on the
//! packet path beyond one integer per successful send).
//!
//! Times in [`SessionStatus`] and [`StateChange`] are ns of
//! `CLOCK_MONOTONIC` ([`monotonic_ns`]); [`to_system_time`] converts them.
//!
//! # Echo
//! The pure core decides when echo runs, when to send and when echo
//! detection expires; this thread does the I/O. While a single-hop IPv4
//! session runs echo it owns an `AF_PACKET` socket (`netsys::PacketSocket`,
//! the workspace's one audited place for `bind(2)` with a `sockaddr_ll`
//! and `SO_ATTACH_FILTER`) bound to its interface and IPv4, with a classic
//! BPF filter passing only frames for our host carrying UDP to port 3785
//! from and to the session's address ([`crate::frame::echo_filter`]). An
//! echo packet is sent on it as a whole frame to the peer's MAC, addressed
//! to ourselves ([`crate::frame::encode`]); the peer's forwarding plane
//! routes it back, and it is caught on the same socket, checked
//! ([`crate::frame::decode_returned`]) and handed to the session. The
//! peer's MAC comes from the kernel's neighbour table over rtnetlink (one
//! dump per second at most, shared by all sessions; our control packets
//! keep the entry fresh). The socket is closed when echo stops.
//!
//! A session in echo mode advertises a non-zero Required Min Echo RX only
//! while IPv4 forwarding is on for its interface (read from
//! `/proc/sys/net/ipv4/conf/<if>/forwarding` in the thread's namespace, at
//! start and every 5 s): without it the kernel would not return the peer's
//! echo packets.
//!
//! # Privileges
//! `SO_BINDTODEVICE` and the echo function's packet sockets need
//! `CAP_NET_RAW`; the ports are above 1024. No real-time priority is used
//! (see `bfd/README.md` for the measurements). [`Config::netns`] (entering
//! a network namespace, for tests and `metallbctl bfd-probe`) needs
//! `CAP_SYS_ADMIN`.

mod event_loop;
mod neigh;
mod stats;
mod sys;
mod timers;

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use nix::sys::eventfd::{EfdFlags, EventFd};
use serde::Serialize;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot, watch};

use crate::metrics::Sample;
use crate::params::Parameters;
use crate::path::SessionKey;
use crate::registry::{ClientId, RegistryError};
use crate::session::{ClientAction, SessionStatus, StateChange};

pub use stats::{Histogram, RuntimeStats};
pub use sys::monotonic_ns;

/// Deadlines due within this much of the current time are delivered in the
/// same wakeup.
pub const BATCH_SLACK_NS: u64 = 50_000;

/// A receiving socket that wakes the thread twice within this long is
/// taken out of the epoll set and drained at every wakeup and at least
/// this often, until a drain finds it empty (see the module docs).
pub const RX_GATE_NS: u64 = 1_500_000;

/// Errors of the runtime.
#[derive(Debug, Error)]
pub enum Error {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("the BFD runtime has stopped")]
    Stopped,
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
}

impl Error {
    fn io(what: impl Into<String>, source: impl Into<io::Error>) -> Error {
        Error::Io {
            what: what.into(),
            source: source.into(),
        }
    }
}

/// How to start the runtime.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// Seed of discriminators and jitter; `None` draws one from the OS.
    pub seed: Option<u64>,
    /// A network namespace (`/run/netns/NAME`) the runtime thread enters
    /// before opening its sockets; the rest of the process stays where it
    /// is. For tests and tools; the speaker leaves it `None`.
    pub netns: Option<PathBuf>,
    /// Whether failing to listen on IPv6 (IPv6 disabled on the host) is an
    /// error; by default IPv6 sessions then only send.
    pub require_ipv6: bool,
}

/// A session state transition, as sent to subscribers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BfdEvent {
    pub discriminator: u32,
    pub key: SessionKey,
    pub change: StateChange,
    /// What a client should do (RFC 5882): the speaker resets the BGP
    /// sessions of `clients` on [`ClientAction::Down`].
    pub client_action: ClientAction,
    /// The clients sharing the session.
    pub clients: Vec<ClientId>,
    /// The session right after the transition.
    pub status: SessionStatus,
}

type Reply<T> = oneshot::Sender<Result<T, Error>>;

/// What a client gets from [`BfdHandle::acquire`].
pub type Acquired = (ClientId, watch::Receiver<SessionStatus>);

enum Command {
    Acquire {
        key: SessionKey,
        params: Parameters,
        vrf: Option<String>,
        reply: Reply<Acquired>,
    },
    Release {
        client: ClientId,
        reply: Reply<()>,
    },
    SetParameters {
        client: ClientId,
        params: Parameters,
        reply: Reply<()>,
    },
    Subscribe(mpsc::UnboundedSender<BfdEvent>),
    /// A snapshot of every session's metrics (a scrape).
    MetricSamples(std_mpsc::SyncSender<Vec<Sample>>),
    Shutdown,
}

/// The running runtime. Dropping it (or [`Bfd::shutdown`]) takes every
/// session to AdminDown (one AdminDown packet each) and stops the thread.
#[derive(Debug)]
pub struct Bfd {
    handle: BfdHandle,
    thread: Option<JoinHandle<()>>,
}

/// A cheap, cloneable handle on the runtime, usable from any thread or
/// task.
#[derive(Clone, Debug)]
pub struct BfdHandle {
    commands: std_mpsc::Sender<Command>,
    wake: Arc<EventFd>,
    shared: Arc<stats::Shared>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Acquire { key, .. } => write!(f, "Acquire({key})"),
            Command::Release { client, .. } => write!(f, "Release({client})"),
            Command::SetParameters { client, .. } => write!(f, "SetParameters({client})"),
            Command::Subscribe(_) => f.write_str("Subscribe"),
            Command::MetricSamples(_) => f.write_str("MetricSamples"),
            Command::Shutdown => f.write_str("Shutdown"),
        }
    }
}

impl Bfd {
    /// Starts the thread and opens the receiving sockets; fails if they
    /// cannot be opened (e.g. another BFD daemon holds port 3784).
    pub fn start(config: Config) -> Result<Bfd, Error> {
        let wake = Arc::new(
            EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                .map_err(|e| Error::io("eventfd", e))?,
        );
        let shared = Arc::new(stats::Shared::new());
        let (commands, queue) = std_mpsc::channel();
        let (ready_tx, ready_rx) = std_mpsc::channel();
        let seed = config.seed.unwrap_or_else(os_seed);
        let netns = match &config.netns {
            Some(path) => Some(
                File::open(path)
                    .map_err(|e| Error::io(format!("opening {}", path.display()), e))?,
            ),
            None => None,
        };
        let setup = event_loop::Setup {
            seed,
            netns,
            require_ipv6: config.require_ipv6,
            queue,
            wake: Arc::clone(&wake),
            shared: Arc::clone(&shared),
        };
        let thread = std::thread::Builder::new()
            .name("bfd".into())
            .spawn(move || event_loop::run(setup, ready_tx))
            .map_err(|e| Error::io("spawning the BFD thread", e))?;
        let started = ready_rx.recv().unwrap_or(Err(Error::Stopped));
        if let Err(e) = started {
            let _ = thread.join();
            return Err(e);
        }
        Ok(Bfd {
            handle: BfdHandle {
                commands,
                wake,
                shared,
            },
            thread: Some(thread),
        })
    }

    pub fn handle(&self) -> BfdHandle {
        self.handle.clone()
    }

    /// AdminDown on every session, then stops the thread.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = self.handle.send(Command::Shutdown);
            let _ = thread.join();
        }
    }
}

impl Drop for Bfd {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::ops::Deref for Bfd {
    type Target = BfdHandle;

    fn deref(&self) -> &BfdHandle {
        &self.handle
    }
}

impl BfdHandle {
    fn send(&self, command: Command) -> Result<(), Error> {
        self.commands.send(command).map_err(|_| Error::Stopped)?;
        self.wake.write(1).map_err(|e| Error::io("eventfd", e))?;
        Ok(())
    }

    fn request<T>(
        &self,
        make: impl FnOnce(Reply<T>) -> Command,
    ) -> Result<oneshot::Receiver<Result<T, Error>>, Error> {
        let (tx, rx) = oneshot::channel();
        self.send(make(tx))?;
        Ok(rx)
    }

    /// Becomes a client of the session on `key`, creating and starting it
    /// if needed (sessions are shared, reference counted, with the most
    /// demanding parameters of their clients). Returns the client id and a
    /// watch of the session. The session is in the default VRF for its
    /// metrics; see [`BfdHandle::acquire_in_vrf`].
    pub async fn acquire(&self, key: SessionKey, params: Parameters) -> Result<Acquired, Error> {
        self.acquire_in_vrf(key, params, None).await
    }

    /// [`BfdHandle::acquire`] for a peer in a VRF: `vrf` is the session's
    /// `vrf` label in [`crate::metrics`] (`None` or `""`: the default VRF).
    /// It is a label only: the path is the key's (its interface, which for
    /// a VRF is the VRF's device or one of its ports). The client that
    /// creates a session names its VRF; later clients' `vrf` is not used.
    pub async fn acquire_in_vrf(
        &self,
        key: SessionKey,
        params: Parameters,
        vrf: Option<&str>,
    ) -> Result<Acquired, Error> {
        let vrf = vrf.map(str::to_owned);
        let rx = self.request(|reply| Command::Acquire {
            key,
            params,
            vrf,
            reply,
        })?;
        rx.await.unwrap_or(Err(Error::Stopped))
    }

    /// [`BfdHandle::acquire`] for synchronous callers (not from inside an
    /// async runtime).
    pub fn acquire_blocking(&self, key: SessionKey, params: Parameters) -> Result<Acquired, Error> {
        self.acquire_in_vrf_blocking(key, params, None)
    }

    /// [`BfdHandle::acquire_in_vrf`] for synchronous callers.
    pub fn acquire_in_vrf_blocking(
        &self,
        key: SessionKey,
        params: Parameters,
        vrf: Option<&str>,
    ) -> Result<Acquired, Error> {
        let vrf = vrf.map(str::to_owned);
        let rx = self.request(|reply| Command::Acquire {
            key,
            params,
            vrf,
            reply,
        })?;
        rx.blocking_recv().unwrap_or(Err(Error::Stopped))
    }

    /// Stops being a client; the last client's release sends AdminDown and
    /// removes the session (its watch then closes).
    pub async fn release(&self, client: ClientId) -> Result<(), Error> {
        let rx = self.request(|reply| Command::Release { client, reply })?;
        rx.await.unwrap_or(Err(Error::Stopped))
    }

    /// [`BfdHandle::release`] for synchronous callers.
    pub fn release_blocking(&self, client: ClientId) -> Result<(), Error> {
        let rx = self.request(|reply| Command::Release { client, reply })?;
        rx.blocking_recv().unwrap_or(Err(Error::Stopped))
    }

    /// Changes a client's parameters; the session applies the merged result
    /// with a Poll Sequence, without a flap.
    pub async fn set_parameters(&self, client: ClientId, params: Parameters) -> Result<(), Error> {
        let rx = self.request(|reply| Command::SetParameters {
            client,
            params,
            reply,
        })?;
        rx.await.unwrap_or(Err(Error::Stopped))
    }

    /// [`BfdHandle::set_parameters`] for synchronous callers.
    pub fn set_parameters_blocking(
        &self,
        client: ClientId,
        params: Parameters,
    ) -> Result<(), Error> {
        let rx = self.request(|reply| Command::SetParameters {
            client,
            params,
            reply,
        })?;
        rx.blocking_recv().unwrap_or(Err(Error::Stopped))
    }

    /// Every state transition of every session from now on.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<BfdEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        // If the runtime has stopped, the receiver just sees a closed channel.
        let _ = self.send(Command::Subscribe(tx));
        rx
    }

    /// Every session's metric values, from the runtime thread; `None` if it
    /// has stopped or does not answer within `timeout`. Blocks the caller
    /// (not the runtime thread), without panicking inside an async runtime.
    pub(crate) fn metric_samples(&self, timeout: Duration) -> Option<Vec<Sample>> {
        // Capacity 1: the thread's single send never blocks, even if this
        // side has given up waiting.
        let (tx, rx) = std_mpsc::sync_channel(1);
        self.send(Command::MetricSamples(tx)).ok()?;
        rx.recv_timeout(timeout).ok()
    }

    /// Counters of the runtime thread.
    pub fn stats(&self) -> RuntimeStats {
        self.shared.snapshot()
    }

    /// Lateness of periodic transmissions: time from a transmit deadline to
    /// the packet's `sendto` returning. Compare two snapshots with
    /// [`Histogram::since`].
    pub fn tx_lateness(&self) -> Histogram {
        self.shared.tx_lateness.snapshot()
    }
}

/// The wall-clock time of a [`monotonic_ns`] timestamp.
pub fn to_system_time(monotonic: u64) -> SystemTime {
    let now_mono = monotonic_ns();
    let now = SystemTime::now();
    if monotonic <= now_mono {
        now - Duration::from_nanos(now_mono - monotonic)
    } else {
        now + Duration::from_nanos(monotonic - now_mono)
    }
}

fn os_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is keyed from the OS's randomness.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(monotonic_ns());
    h.finish()
}
