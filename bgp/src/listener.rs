//! The listener for peers that dial in, shared by every session on one
//! local address.
//!
//! A [`Listeners`] handle (cheap to clone; one per process, owned by the
//! speaker) keeps at most one bound [`TcpListener`] per [`ListenKey`] (the
//! local `addr:port` and the VRF device), refcounted by the sessions
//! registered on it. A session registers its peer's address and optional
//! TCP MD5 password ([`ListenRequest`]) and gets a [`Registration`]: a
//! receiver of [`ListenEvent`]s (the connections accepted from that peer,
//! binding failures, (re)binds) and a [`ListenGuard`] whose `Drop`
//! deregisters: it deletes the peer's MD5 key from the listener and closes
//! the listener when the last registration on it goes.
//!
//! - Dispatch: an accepted connection goes to the session registered for
//!   its source address; a connection from any other address is closed at
//!   once, counted ([`ListenerStats::rejected`]) and logged at debug level
//!   with the address only. Two sessions registering the same peer on the
//!   same key is an error for the second ([`ListenError::Duplicate`]).
//! - Binding: the first registration on a key binds it (SO_REUSEADDR, TTL
//!   [`LISTENER_TTL`]; each accepted connection then gets its session's own
//!   TTL, see [`crate::transport::configure_accepted`]). A failure (busy
//!   port: Calico's BIRD often holds :179; an address not on the node; a
//!   missing VRF) is a [`ListenError::Bind`] event to every registration on
//!   the key, never fatal: the sessions still connect out. The bind is
//!   retried at once whenever another session registers on the key, and
//!   in the background with a doubling delay ([`RetryPolicy`]: 1 s, 2 s,
//!   4 s ... capped at 60 s) for as long as a registration remains: at most
//!   one `bind` per minute per address in the long run. A repeated failure
//!   with the same text is not sent again (a new registration always gets
//!   it). When the bind succeeds every registration gets
//!   [`ListenEvent::Listening`]. A listener whose `accept` fails for good
//!   is closed, reported ([`ListenError::Accept`]) and rebound the same way.
//! - TCP MD5 (RFC 2385): the key of each registered peer with a password is
//!   installed on the listener socket through [`crate::transport`], which
//!   sets every socket option: before the socket listens when it is bound,
//!   on the running listener when the peer registers later (connections
//!   from that peer the kernel completed before the key was there are then
//!   taken from its queue and closed). A peer's connections are handed
//!   over only once its key is installed: a key the kernel refuses is a
//!   [`ListenError::Md5`] event for that session only, and connections
//!   from its peer are closed (never handed over unauthenticated).
//!   Passwords never appear in `Debug`, errors or logs.
//!
//! Tasks: the accept loop of a bound listener and the retry loop of an
//! unbound one run on the tokio runtime of the call that started them
//! ([`Listeners::register`] must be called within a runtime). When that
//! runtime ends, the listener is closed and the next registration binds it
//! again.
//!
//! The dispatch table ([`Table`]) is pure and tested without sockets.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::transport::{self, ListenOptions, TransportError};

/// The TTL / hop limit of the shared listener socket (its SYN-ACKs): the
/// multihop value, so that any registered session's peer can be answered;
/// each accepted connection then gets its own session's TTL.
pub const LISTENER_TTL: u8 = transport::TTL_MULTIHOP;

/// Events queued per registration before further accepted connections
/// from that peer are closed.
pub const EVENT_QUEUE: usize = 16;

/// Connections taken from the kernel's queue at once when a key is
/// installed on a running listener (its backlog is 16).
const PENDING_MAX: usize = 64;

/// Which listener: the local address and port, and the VRF device bound
/// with `SO_BINDTODEVICE`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ListenKey {
    pub addr: SocketAddr,
    pub vrf: Option<String>,
}

impl ListenKey {
    pub fn new(addr: SocketAddr, vrf: Option<String>) -> Self {
        Self { addr, vrf }
    }
}

impl fmt::Display for ListenKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.vrf {
            Some(vrf) => write!(f, "{} (vrf {vrf})", self.addr),
            None => write!(f, "{}", self.addr),
        }
    }
}

/// What a session registers: where it listens and which peer it accepts.
#[derive(Clone, PartialEq, Eq)]
pub struct ListenRequest {
    pub key: ListenKey,
    /// The peer's address; connections from it go to this session.
    pub peer: IpAddr,
    /// TCP MD5 password (RFC 2385) of the peer. Never printed.
    pub password: Option<String>,
    /// GTSM (RFC 5082): the smallest TTL / hop limit accepted from the
    /// peer. The listener drops SYNs below the smallest of its peers'
    /// (none when one of them has no GTSM); every accepted connection of
    /// the peer then gets its own (see [`crate::transport::set_min_ttl`]).
    pub min_ttl: Option<u8>,
}

impl fmt::Debug for ListenRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenRequest")
            .field("key", &self.key)
            .field("peer", &self.peer)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("min_ttl", &self.min_ttl)
            .finish()
    }
}

/// A listener problem, as a session shows it (`lastError`). The texts
/// come from [`TransportError`] and never hold a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListenError {
    /// Another session already registered this peer on this key.
    #[error("listener disabled: {key}: peer {peer} is already registered by another session")]
    Duplicate { key: ListenKey, peer: IpAddr },
    /// The key could not be bound; retried (see the module documentation).
    #[error("listener disabled: {text}")]
    Bind {
        key: ListenKey,
        /// The kind of the OS error (e.g. `AddrInUse`), when there is one.
        kind: Option<io::ErrorKind>,
        text: String,
    },
    /// The peer's TCP MD5 key could not be installed on the listener:
    /// connections from the peer are closed.
    #[error("listener disabled for {peer}: {text}")]
    Md5 { peer: IpAddr, text: String },
    /// `accept` failed for good: the listener was closed and is rebound.
    #[error("listener stopped: {text}")]
    Accept { key: ListenKey, text: String },
}

impl ListenError {
    fn bind(key: &ListenKey, e: &TransportError) -> Self {
        let kind = match e {
            TransportError::Listen { source, .. } | TransportError::Socket { source, .. } => {
                Some(source.kind())
            }
            _ => None,
        };
        ListenError::Bind {
            key: key.clone(),
            kind,
            text: e.to_string(),
        }
    }
}

/// What a registration receives.
#[derive(Debug)]
pub enum ListenEvent {
    /// The listener is bound (at registration when it already was, and at
    /// every successful (re)bind), at this address (the actual port when
    /// the key's port is 0).
    Listening(SocketAddr),
    /// A connection from the registered peer.
    Accepted(TcpStream),
    /// A listener problem for the session to show.
    Failed(ListenError),
}

/// The background retry of a bind that failed: the first delay, doubled
/// after each failure up to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub first: Duration,
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            first: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }
}

/// One listener as seen from outside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerStats {
    pub key: ListenKey,
    /// The bound address, `None` while not bound.
    pub local: Option<SocketAddr>,
    /// The registered peers, sorted.
    pub peers: Vec<IpAddr>,
    /// Connections closed at once: from no registered peer, from a peer
    /// whose key is not installed, or with the peer's queue full.
    pub rejected: u64,
    /// The last failure reported, cleared by a successful bind.
    pub last_error: Option<ListenError>,
}

// ---------------------------------------------------------------- pure table

/// Where [`Table::dispatch`] sends a connection.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Dispatch<'a, S> {
    /// To this registration.
    To(&'a S),
    /// No registration for the source address: close.
    Unknown,
    /// The peer has a password whose key is not installed: close.
    NoKey,
}

/// What [`Table::remove`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Removed {
    /// The peer's MD5 key was installed on the listener (delete it).
    pub key_installed: bool,
    /// It was the last registration on the key (close the listener).
    pub last: bool,
}

struct Peer<S> {
    id: u64,
    password: Option<String>,
    key_installed: bool,
    /// GTSM ([`ListenRequest::min_ttl`]).
    min_ttl: Option<u8>,
    sink: S,
}

struct Entry<S> {
    peers: HashMap<IpAddr, Peer<S>>,
    rejected: u64,
    last_failure: Option<ListenError>,
}

/// The registrations of every key and the dispatch of accepted
/// connections, without sockets. `S` is what receives a peer's events.
pub(crate) struct Table<S> {
    entries: HashMap<ListenKey, Entry<S>>,
    next_id: u64,
}

impl<S> fmt::Debug for Table<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (key, e) in &self.entries {
            let mut peers: Vec<_> = e.peers.keys().collect();
            peers.sort();
            m.entry(&key.to_string(), &peers);
        }
        m.finish()
    }
}

impl<S> Default for Table<S> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            next_id: 0,
        }
    }
}

/// IPv4-mapped IPv6 addresses as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

impl<S> Table<S> {
    /// Registers `peer` on `key`; returns its id. A second registration of
    /// the same peer on the same key is refused.
    pub fn insert(
        &mut self,
        key: &ListenKey,
        peer: IpAddr,
        password: Option<String>,
        sink: S,
    ) -> Result<u64, ListenError> {
        let peer = canonical(peer);
        let entry = self.entries.entry(key.clone()).or_insert_with(|| Entry {
            peers: HashMap::new(),
            rejected: 0,
            last_failure: None,
        });
        if entry.peers.contains_key(&peer) {
            return Err(ListenError::Duplicate {
                key: key.clone(),
                peer,
            });
        }
        self.next_id += 1;
        let id = self.next_id;
        entry.peers.insert(
            peer,
            Peer {
                id,
                password,
                key_installed: false,
                min_ttl: None,
                sink,
            },
        );
        Ok(id)
    }

    /// Sets `peer`'s GTSM minimum TTL on `key`.
    pub fn set_min_ttl(&mut self, key: &ListenKey, peer: IpAddr, min_ttl: Option<u8>) {
        if let Some(p) = self
            .entries
            .get_mut(key)
            .and_then(|e| e.peers.get_mut(&canonical(peer)))
        {
            p.min_ttl = min_ttl;
        }
    }

    /// The listener's GTSM minimum TTL: the smallest of its peers', 0 (no
    /// check) when one of them has none or there is no peer.
    pub fn min_ttl(&self, key: &ListenKey) -> u8 {
        let Some(e) = self.entries.get(key) else {
            return 0;
        };
        e.peers
            .values()
            .map(|p| p.min_ttl.unwrap_or(0))
            .min()
            .unwrap_or(0)
    }

    /// Removes registration `id` of `peer` on `key` (nothing when it is no
    /// longer there); the key goes with its last registration.
    pub fn remove(&mut self, key: &ListenKey, peer: IpAddr, id: u64) -> Option<Removed> {
        let peer = canonical(peer);
        let entry = self.entries.get_mut(key)?;
        if entry.peers.get(&peer).map(|p| p.id) != Some(id) {
            return None;
        }
        let p = entry.peers.remove(&peer)?;
        let last = entry.peers.is_empty();
        if last {
            self.entries.remove(key);
        }
        Some(Removed {
            key_installed: p.key_installed,
            last,
        })
    }

    /// Where a connection from `remote` accepted on `key` goes; a rejected
    /// one is counted.
    pub fn dispatch(&mut self, key: &ListenKey, remote: IpAddr) -> Dispatch<'_, S> {
        let Some(entry) = self.entries.get_mut(key) else {
            return Dispatch::Unknown;
        };
        match entry.peers.get(&canonical(remote)) {
            Some(p) if p.password.is_none() || p.key_installed => Dispatch::To(&p.sink),
            Some(_) => {
                entry.rejected += 1;
                Dispatch::NoKey
            }
            None => {
                entry.rejected += 1;
                Dispatch::Unknown
            }
        }
    }

    /// Counts a connection closed for another reason (queue full).
    pub fn count_rejected(&mut self, key: &ListenKey) {
        if let Some(e) = self.entries.get_mut(key) {
            e.rejected += 1;
        }
    }

    pub fn contains(&self, key: &ListenKey) -> bool {
        self.entries.contains_key(key)
    }

    /// Records whether `peer`'s MD5 key is installed on the listener.
    pub fn set_key_installed(&mut self, key: &ListenKey, peer: IpAddr, installed: bool) {
        if let Some(p) = self
            .entries
            .get_mut(key)
            .and_then(|e| e.peers.get_mut(&canonical(peer)))
        {
            p.key_installed = installed;
        }
    }

    /// The peers of `key` with a password, for a fresh listener socket.
    pub fn passwords(&self, key: &ListenKey) -> Vec<(IpAddr, String)> {
        let mut v: Vec<_> = self
            .entries
            .get(key)
            .into_iter()
            .flat_map(|e| e.peers.iter())
            .filter_map(|(ip, p)| p.password.clone().map(|pw| (*ip, pw)))
            .collect();
        v.sort_by_key(|(ip, _)| *ip);
        v
    }

    /// The password of `peer` on `key`.
    pub fn password(&self, key: &ListenKey, peer: IpAddr) -> Option<&str> {
        self.entries
            .get(key)?
            .peers
            .get(&canonical(peer))?
            .password
            .as_deref()
    }

    /// The event receiver of `peer` on `key`.
    pub fn sink(&self, key: &ListenKey, peer: IpAddr) -> Option<&S> {
        Some(&self.entries.get(key)?.peers.get(&canonical(peer))?.sink)
    }

    /// Every event receiver on `key`.
    pub fn sinks(&self, key: &ListenKey) -> impl Iterator<Item = &S> {
        self.entries
            .get(key)
            .into_iter()
            .flat_map(|e| e.peers.values().map(|p| &p.sink))
    }

    /// Records a failure of `key`; `true` when it differs from the last
    /// one reported (then every registration is told).
    pub fn fail(&mut self, key: &ListenKey, error: &ListenError) -> bool {
        let Some(e) = self.entries.get_mut(key) else {
            return false;
        };
        if e.last_failure.as_ref() == Some(error) {
            return false;
        }
        e.last_failure = Some(error.clone());
        true
    }

    /// A successful bind: the next failure is reported again.
    pub fn clear_failure(&mut self, key: &ListenKey) {
        if let Some(e) = self.entries.get_mut(key) {
            e.last_failure = None;
        }
    }

    /// The keys with registrations.
    pub fn keys(&self) -> impl Iterator<Item = &ListenKey> {
        self.entries.keys()
    }

    /// Peers (sorted), rejected count and last failure of `key`.
    pub fn summary(&self, key: &ListenKey) -> Option<(Vec<IpAddr>, u64, Option<ListenError>)> {
        let e = self.entries.get(key)?;
        let mut peers: Vec<IpAddr> = e.peers.keys().copied().collect();
        peers.sort();
        Some((peers, e.rejected, e.last_failure.clone()))
    }
}

// ---------------------------------------------------------------- sockets

type Sink = mpsc::Sender<ListenEvent>;

enum Socket {
    Bound {
        listener: Arc<TcpListener>,
        local: SocketAddr,
        generation: u64,
        task: JoinHandle<()>,
    },
    Unbound {
        retry: Option<JoinHandle<()>>,
    },
}

struct Inner {
    table: Table<Sink>,
    sockets: HashMap<ListenKey, Socket>,
    retry: RetryPolicy,
    generation: u64,
    rejected_total: u64,
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sends `event` without waiting; a full or closed queue drops it (a
/// dropped connection is closed).
fn offer(sink: &Sink, event: ListenEvent) -> bool {
    sink.try_send(event).is_ok()
}

/// The shared listeners of one process (see the module documentation).
/// Cheap to clone: every clone is the same set of listeners.
#[derive(Clone)]
pub struct Listeners {
    inner: Arc<Mutex<Inner>>,
}

impl fmt::Debug for Listeners {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = lock(&self.inner);
        f.debug_struct("Listeners")
            .field("registrations", &inner.table)
            .finish_non_exhaustive()
    }
}

impl Default for Listeners {
    fn default() -> Self {
        Self::new()
    }
}

impl Listeners {
    /// An empty set with the default [`RetryPolicy`].
    pub fn new() -> Self {
        Self::with_retry(RetryPolicy::default())
    }

    /// An empty set retrying failed binds with `retry`.
    pub fn with_retry(retry: RetryPolicy) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                table: Table::default(),
                sockets: HashMap::new(),
                retry,
                generation: 0,
                rejected_total: 0,
            })),
        }
    }

    /// The process-wide instance [`crate::session::Session::spawn`] uses.
    pub fn process() -> Self {
        static PROCESS: OnceLock<Listeners> = OnceLock::new();
        PROCESS.get_or_init(Listeners::new).clone()
    }

    /// Registers a session's peer on a listener, binding it when it is not
    /// bound yet. Must be called within a tokio runtime. The only error is
    /// [`ListenError::Duplicate`]; binding and key problems arrive as
    /// [`ListenEvent::Failed`] on the registration.
    pub fn register(&self, request: ListenRequest) -> Result<Registration, ListenError> {
        let ListenRequest {
            key,
            peer,
            password,
            min_ttl,
        } = request;
        let peer = canonical(peer);
        let (tx, rx) = mpsc::channel(EVENT_QUEUE);
        let weak = Arc::downgrade(&self.inner);
        let mut inner = lock(&self.inner);
        let id = inner.table.insert(&key, peer, password, tx)?;
        inner.table.set_min_ttl(&key, peer, min_ttl);
        match inner.sockets.get(&key) {
            Some(Socket::Bound {
                listener, local, ..
            }) => {
                let (listener, local) = (listener.clone(), *local);
                if let Some(sink) = inner.table.sink(&key, peer) {
                    offer(sink, ListenEvent::Listening(local));
                }
                inner.install_key(&key, &listener, peer);
                inner.apply_min_ttl(&key);
            }
            _ => {
                inner.bind(&key, &weak, Some(peer), false);
            }
        }
        drop(inner);
        Ok(Registration {
            events: rx,
            guard: ListenGuard {
                inner: weak,
                key,
                peer,
                id,
            },
        })
    }

    /// Every listener with registrations, sorted by key.
    pub fn stats(&self) -> Vec<ListenerStats> {
        let inner = lock(&self.inner);
        let mut v: Vec<ListenerStats> = inner
            .table
            .keys()
            .filter_map(|key| {
                let (peers, rejected, last_error) = inner.table.summary(key)?;
                let local = match inner.sockets.get(key) {
                    Some(Socket::Bound { local, .. }) => Some(*local),
                    _ => None,
                };
                Some(ListenerStats {
                    key: key.clone(),
                    local,
                    peers,
                    rejected,
                    last_error,
                })
            })
            .collect();
        v.sort_by(|a, b| (a.key.addr, &a.key.vrf).cmp(&(b.key.addr, &b.key.vrf)));
        v
    }

    /// Connections rejected since this set was created, over every key.
    pub fn rejected_total(&self) -> u64 {
        lock(&self.inner).rejected_total
    }
}

impl Inner {
    /// Sets the running listener of `key` to drop SYNs below its peers'
    /// GTSM minimum ([`Table::min_ttl`]).
    fn apply_min_ttl(&self, key: &ListenKey) {
        let Some(Socket::Bound { listener, .. }) = self.sockets.get(key) else {
            return;
        };
        let min = self.table.min_ttl(key);
        if let Err(e) = transport::set_min_ttl(listener.as_ref(), key.addr.ip(), min) {
            tracing::warn!(listener = %key, error = %e, "GTSM on the listener");
        }
    }

    /// Installs `peer`'s key (when it has a password) on the running
    /// `listener`; a failure is that registration's error. Connections
    /// from the peer that the kernel completed before the key was there
    /// (unauthenticated) are closed; the others pending are dispatched.
    fn install_key(&mut self, key: &ListenKey, listener: &TcpListener, peer: IpAddr) {
        let Some(password) = self.table.password(key, peer) else {
            return;
        };
        match transport::set_listener_md5(listener, peer, Some(password)) {
            Ok(()) => {
                for (stream, remote) in transport::accept_pending(listener, PENDING_MAX) {
                    if canonical(remote.ip()) == peer {
                        self.table.count_rejected(key);
                        self.reject(
                            key,
                            &remote,
                            "accepted before its TCP MD5 key was installed",
                        );
                        drop(stream);
                    } else {
                        self.dispatch(key, stream, remote);
                    }
                }
                self.table.set_key_installed(key, peer, true);
            }
            Err(e) => {
                self.table.set_key_installed(key, peer, false);
                self.key_failed(key, peer, &e);
            }
        }
    }

    fn key_failed(&mut self, key: &ListenKey, peer: IpAddr, e: &TransportError) {
        if let Some(sink) = self.table.sink(key, peer) {
            offer(
                sink,
                ListenEvent::Failed(ListenError::Md5 {
                    peer,
                    text: e.to_string(),
                }),
            );
        }
    }

    /// Counts a connection closed by the listener (logged at debug level
    /// with the address only).
    fn reject(&mut self, key: &ListenKey, remote: &SocketAddr, why: &str) {
        self.rejected_total += 1;
        tracing::debug!(listener = %key, peer = %remote.ip(), "connection closed: {why}");
    }

    /// Hands `stream` to the session registered for its source address,
    /// or closes it.
    fn dispatch(&mut self, key: &ListenKey, stream: TcpStream, remote: SocketAddr) {
        let ip = canonical(remote.ip());
        let why = match self.table.dispatch(key, ip) {
            Dispatch::To(sink) => {
                if offer(sink, ListenEvent::Accepted(stream)) {
                    return;
                }
                self.table.count_rejected(key);
                "its session does not take it"
            }
            Dispatch::Unknown => "no session is configured for the address",
            Dispatch::NoKey => "the peer's TCP MD5 key is not installed",
        };
        self.reject(key, &remote, why);
    }

    /// Binds `key` (unbound, with registrations). On failure every
    /// registration is told when the error is new, else only `new_peer`
    /// (a registration that has not seen it); the retry loop is started
    /// unless this is it (`from_retry`). Returns whether it is bound.
    fn bind(
        &mut self,
        key: &ListenKey,
        weak: &Weak<Mutex<Inner>>,
        new_peer: Option<IpAddr>,
        from_retry: bool,
    ) -> bool {
        let opts = ListenOptions {
            addr: key.addr,
            ttl: LISTENER_TTL,
            md5: self.table.passwords(key),
            vrf: key.vrf.clone(),
        };
        match transport::listen_keyed(&opts) {
            Ok((listener, key_errors)) => {
                let local = listener.local_addr().unwrap_or(key.addr);
                let listener = Arc::new(listener);
                for (peer, _) in &opts.md5 {
                    let failed = key_errors.iter().find(|(p, _)| p == peer);
                    self.table.set_key_installed(key, *peer, failed.is_none());
                    if let Some((_, e)) = failed {
                        self.key_failed(key, *peer, e);
                    }
                }
                self.generation += 1;
                let generation = self.generation;
                let task = tokio::spawn(accept_loop(
                    weak.clone(),
                    key.clone(),
                    generation,
                    listener.clone(),
                ));
                let old = self.sockets.insert(
                    key.clone(),
                    Socket::Bound {
                        listener,
                        local,
                        generation,
                        task,
                    },
                );
                if let Some(Socket::Unbound { retry: Some(h) }) = old
                    && !from_retry
                {
                    h.abort();
                }
                self.table.clear_failure(key);
                self.apply_min_ttl(key);
                for sink in self.table.sinks(key) {
                    offer(sink, ListenEvent::Listening(local));
                }
                tracing::debug!(listener = %key, %local, "BGP listener bound");
                true
            }
            Err(e) => {
                let error = ListenError::bind(key, &e);
                self.report(key, error, new_peer);
                self.ensure_retry(key, weak, from_retry);
                false
            }
        }
    }

    /// Tells the registrations of `key` about `error` (see [`Inner::bind`]).
    fn report(&mut self, key: &ListenKey, error: ListenError, new_peer: Option<IpAddr>) {
        tracing::debug!(listener = %key, %error, "BGP listener");
        if self.table.fail(key, &error) {
            for sink in self.table.sinks(key) {
                offer(sink, ListenEvent::Failed(error.clone()));
            }
        } else if let Some(sink) = new_peer.and_then(|p| self.table.sink(key, p)) {
            offer(sink, ListenEvent::Failed(error));
        }
    }

    /// Marks `key` unbound, with a retry loop unless `from_retry` (the
    /// loop itself) or one already runs.
    fn ensure_retry(&mut self, key: &ListenKey, weak: &Weak<Mutex<Inner>>, from_retry: bool) {
        if from_retry {
            if !matches!(self.sockets.get(key), Some(Socket::Unbound { .. })) {
                self.sockets
                    .insert(key.clone(), Socket::Unbound { retry: None });
            }
            return;
        }
        if let Some(Socket::Unbound { retry: Some(h) }) = self.sockets.get(key)
            && !h.is_finished()
        {
            return;
        }
        let retry = tokio::spawn(retry_loop(weak.clone(), key.clone(), self.retry));
        self.sockets
            .insert(key.clone(), Socket::Unbound { retry: Some(retry) });
    }

    /// Closes the listener of `key` when it is generation `generation`.
    /// Returns whether it was.
    fn close_if_current(&mut self, key: &ListenKey, generation: u64) -> bool {
        let current = matches!(
            self.sockets.get(key),
            Some(Socket::Bound { generation: g, .. }) if *g == generation
        );
        if current && let Some(Socket::Bound { listener, .. }) = self.sockets.remove(key) {
            stop(key, &listener);
        }
        current
    }

    fn deregister(&mut self, key: &ListenKey, peer: IpAddr, id: u64) {
        let Some(removed) = self.table.remove(key, peer, id) else {
            return;
        };
        if removed.last {
            match self.sockets.remove(key) {
                Some(Socket::Bound { listener, task, .. }) => {
                    stop(key, &listener);
                    task.abort();
                    tracing::debug!(listener = %key, "BGP listener closed: no session left");
                }
                Some(Socket::Unbound { retry: Some(h) }) => h.abort(),
                Some(Socket::Unbound { retry: None }) | None => {}
            }
        } else {
            self.apply_min_ttl(key);
            if removed.key_installed
                && let Some(Socket::Bound { listener, .. }) = self.sockets.get(key)
                && let Err(e) = transport::set_listener_md5(listener, peer, None)
            {
                tracing::debug!(listener = %key, %peer, error = %e, "deleting the TCP MD5 key");
            }
        }
    }
}

/// Stops `listener` listening now (its descriptor closes when the last
/// reference goes).
fn stop(key: &ListenKey, listener: &TcpListener) {
    if let Err(e) = transport::stop_listener(listener) {
        tracing::debug!(listener = %key, error = %e, "stopping the BGP listener");
    }
}

/// `accept` errors that concern one connection, not the listener.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

/// Out of descriptors or memory: wait a little, then accept again.
fn resource_shortage(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(nix::libc::EMFILE | nix::libc::ENFILE | nix::libc::ENOBUFS | nix::libc::ENOMEM)
    )
}

/// Closes the listener of its generation when the accept loop ends
/// without closing it (its runtime shut down): the next registration
/// binds again.
struct AcceptLoopGuard {
    inner: Weak<Mutex<Inner>>,
    key: ListenKey,
    generation: u64,
}

impl Drop for AcceptLoopGuard {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            let mut inner = lock(&inner);
            if inner.close_if_current(&self.key, self.generation) {
                inner
                    .sockets
                    .insert(self.key.clone(), Socket::Unbound { retry: None });
            }
        }
    }
}

async fn accept_loop(
    weak: Weak<Mutex<Inner>>,
    key: ListenKey,
    generation: u64,
    listener: Arc<TcpListener>,
) {
    let _guard = AcceptLoopGuard {
        inner: weak.clone(),
        key: key.clone(),
        generation,
    };
    loop {
        let result = listener.accept().await;
        match handle_accepted(&weak, &key, generation, result) {
            AcceptNext::Accept => {}
            AcceptNext::Pause => tokio::time::sleep(Duration::from_millis(100)).await,
            AcceptNext::Stop => return,
        }
    }
}

/// What the accept loop does next.
enum AcceptNext {
    Accept,
    /// Out of descriptors or memory: wait a little first.
    Pause,
    Stop,
}

/// Dispatches one `accept` result of listener `generation` of `key`.
fn handle_accepted(
    weak: &Weak<Mutex<Inner>>,
    key: &ListenKey,
    generation: u64,
    result: io::Result<(TcpStream, SocketAddr)>,
) -> AcceptNext {
    let Some(inner) = weak.upgrade() else {
        return AcceptNext::Stop;
    };
    let mut inner = lock(&inner);
    if !matches!(
        inner.sockets.get(key),
        Some(Socket::Bound { generation: g, .. }) if *g == generation
    ) {
        return AcceptNext::Stop; // closed or rebound since
    }
    match result {
        Ok((stream, remote)) => {
            inner.dispatch(key, stream, remote);
            AcceptNext::Accept
        }
        Err(e) if transient(&e) => AcceptNext::Accept,
        Err(e) if resource_shortage(&e) => {
            tracing::debug!(listener = %key, error = %e, "accept");
            AcceptNext::Pause
        }
        Err(e) => {
            let error = ListenError::Accept {
                key: key.clone(),
                text: TransportError::Listen {
                    addr: key.addr,
                    source: e,
                }
                .to_string(),
            };
            inner.close_if_current(key, generation);
            inner.report(key, error, None);
            inner.ensure_retry(key, weak, false);
            AcceptNext::Stop
        }
    }
}

async fn retry_loop(weak: Weak<Mutex<Inner>>, key: ListenKey, policy: RetryPolicy) {
    let mut delay = policy.first;
    loop {
        tokio::time::sleep(delay).await;
        let Some(inner) = weak.upgrade() else {
            return;
        };
        let mut inner = lock(&inner);
        if !inner.table.contains(&key)
            || matches!(inner.sockets.get(&key), Some(Socket::Bound { .. }))
        {
            return;
        }
        if inner.bind(&key, &weak, None, true) {
            return;
        }
        delay = (delay * 2).min(policy.max);
    }
}

/// One session's place on a listener: its events and the guard that
/// deregisters it.
#[derive(Debug)]
pub struct Registration {
    pub events: mpsc::Receiver<ListenEvent>,
    pub guard: ListenGuard,
}

/// Deregisters its session when dropped: deletes the peer's TCP MD5 key
/// from the listener, and closes the listener when it was the last.
pub struct ListenGuard {
    inner: Weak<Mutex<Inner>>,
    key: ListenKey,
    peer: IpAddr,
    id: u64,
}

impl fmt::Debug for ListenGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenGuard")
            .field("key", &self.key)
            .field("peer", &self.peer)
            .finish()
    }
}

impl ListenGuard {
    pub fn key(&self) -> &ListenKey {
        &self.key
    }

    pub fn peer(&self) -> IpAddr {
        self.peer
    }
}

impl Drop for ListenGuard {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            lock(&inner).deregister(&self.key, self.peer, self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> ListenKey {
        ListenKey::new(s.parse().unwrap(), None)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn peers_are_dispatched_by_source_address() {
        let k = key("192.0.2.11:179");
        let mut t: Table<&str> = Table::default();
        t.insert(&k, ip("192.0.2.1"), None, "frr").unwrap();
        t.insert(&k, ip("192.0.2.2"), None, "bird").unwrap();
        assert_eq!(t.dispatch(&k, ip("192.0.2.1")), Dispatch::To(&"frr"));
        assert_eq!(t.dispatch(&k, ip("192.0.2.2")), Dispatch::To(&"bird"));
        // IPv4-mapped sources are their IPv4 address.
        assert_eq!(
            t.dispatch(&k, ip("::ffff:192.0.2.2")),
            Dispatch::To(&"bird")
        );
        assert_eq!(t.summary(&k).unwrap().1, 0);
        assert_eq!(t.dispatch(&k, ip("192.0.2.3")), Dispatch::Unknown);
        assert_eq!(t.dispatch(&k, ip("192.0.2.4")), Dispatch::Unknown);
        let (peers, rejected, _) = t.summary(&k).unwrap();
        assert_eq!(peers, vec![ip("192.0.2.1"), ip("192.0.2.2")]);
        assert_eq!(rejected, 2);
        // Another key does not see these peers.
        assert_eq!(
            t.dispatch(&key("192.0.2.12:179"), ip("192.0.2.1")),
            Dispatch::Unknown
        );
    }

    #[test]
    fn a_peer_registers_once_per_key() {
        let k = key("192.0.2.11:179");
        let mut t: Table<u8> = Table::default();
        t.insert(&k, ip("192.0.2.1"), None, 1).unwrap();
        let err = t.insert(&k, ip("192.0.2.1"), None, 2).unwrap_err();
        assert_eq!(
            err,
            ListenError::Duplicate {
                key: k.clone(),
                peer: ip("192.0.2.1")
            }
        );
        assert!(err.to_string().contains("already registered"), "{err}");
        assert_eq!(t.dispatch(&k, ip("192.0.2.1")), Dispatch::To(&1));
        // The same peer on another port or in a VRF is another listener.
        t.insert(&key("192.0.2.11:1179"), ip("192.0.2.1"), None, 3)
            .unwrap();
        let vrf = ListenKey::new("192.0.2.11:179".parse().unwrap(), Some("red".into()));
        t.insert(&vrf, ip("192.0.2.1"), None, 4).unwrap();
        assert_eq!(t.dispatch(&vrf, ip("192.0.2.1")), Dispatch::To(&4));
        assert_eq!(vrf.to_string(), "192.0.2.11:179 (vrf red)");
    }

    #[test]
    fn the_key_goes_with_its_last_registration() {
        let k = key("[2001:db8::11]:179");
        let mut t: Table<u8> = Table::default();
        let a = t.insert(&k, ip("2001:db8::1"), None, 1).unwrap();
        let b = t
            .insert(&k, ip("2001:db8::2"), Some("pw".into()), 2)
            .unwrap();
        t.set_key_installed(&k, ip("2001:db8::2"), true);
        // A stale id (an older registration of the peer) removes nothing.
        assert_eq!(t.remove(&k, ip("2001:db8::1"), b), None);
        assert_eq!(
            t.remove(&k, ip("2001:db8::2"), b),
            Some(Removed {
                key_installed: true,
                last: false
            })
        );
        assert_eq!(t.dispatch(&k, ip("2001:db8::2")), Dispatch::Unknown);
        // The peer may register again (a new session).
        let c = t.insert(&k, ip("2001:db8::2"), None, 3).unwrap();
        assert_ne!(c, b);
        assert!(t.remove(&k, ip("2001:db8::2"), c).is_some());
        assert_eq!(
            t.remove(&k, ip("2001:db8::1"), a),
            Some(Removed {
                key_installed: false,
                last: true
            })
        );
        assert!(!t.contains(&k));
        assert_eq!(t.remove(&k, ip("2001:db8::1"), a), None);
    }

    /// A peer with a password is handed connections only once its key is
    /// on the listener: never an unauthenticated connection.
    #[test]
    fn a_peer_whose_key_is_not_installed_gets_nothing() {
        let k = key("192.0.2.11:179");
        let mut t: Table<u8> = Table::default();
        t.insert(&k, ip("192.0.2.1"), Some("s3cret".into()), 1)
            .unwrap();
        t.insert(&k, ip("192.0.2.2"), None, 2).unwrap();
        assert_eq!(t.dispatch(&k, ip("192.0.2.1")), Dispatch::NoKey);
        t.set_key_installed(&k, ip("192.0.2.1"), true);
        assert_eq!(t.dispatch(&k, ip("192.0.2.1")), Dispatch::To(&1));
        assert_eq!(
            t.passwords(&k),
            vec![(ip("192.0.2.1"), "s3cret".to_string())]
        );
        assert_eq!(t.summary(&k).unwrap().1, 1);
        assert!(!format!("{t:?}").contains("s3cret"));
        let req = ListenRequest {
            key: k,
            peer: ip("192.0.2.1"),
            password: Some("s3cret".into()),
            min_ttl: None,
        };
        assert!(!format!("{req:?}").contains("s3cret"));
    }

    /// The listener's GTSM minimum is the smallest of its peers', none as
    /// soon as one peer has none.
    #[test]
    fn listener_min_ttl_is_the_smallest_of_its_peers() {
        let mut t: Table<u8> = Table::default();
        let k = key("192.0.2.11:179");
        assert_eq!(t.min_ttl(&k), 0);
        let a = t.insert(&k, ip("192.0.2.1"), None, 1).unwrap();
        t.set_min_ttl(&k, ip("192.0.2.1"), Some(255));
        assert_eq!(t.min_ttl(&k), 255);
        t.insert(&k, ip("192.0.2.2"), None, 2).unwrap();
        t.set_min_ttl(&k, ip("192.0.2.2"), Some(253));
        assert_eq!(t.min_ttl(&k), 253);
        let c = t.insert(&k, ip("192.0.2.3"), None, 3).unwrap();
        assert_eq!(t.min_ttl(&k), 0, "a peer without GTSM");
        t.remove(&k, ip("192.0.2.3"), c);
        assert_eq!(t.min_ttl(&k), 253);
        t.remove(&k, ip("192.0.2.1"), a);
        assert_eq!(t.min_ttl(&k), 253);
    }

    /// Each registration sees a failure once; a new one, or a different
    /// failure, is told again; a bind clears it.
    #[test]
    fn failures_are_reported_once_until_they_change() {
        let k = key("192.0.2.11:179");
        let mut t: Table<u8> = Table::default();
        t.insert(&k, ip("192.0.2.1"), None, 1).unwrap();
        let busy = ListenError::Bind {
            key: k.clone(),
            kind: Some(io::ErrorKind::AddrInUse),
            text: "listen on 192.0.2.11:179: Address in use".into(),
        };
        assert!(t.fail(&k, &busy));
        assert!(!t.fail(&k, &busy));
        let gone = ListenError::Bind {
            key: k.clone(),
            kind: Some(io::ErrorKind::AddrNotAvailable),
            text: "listen on 192.0.2.11:179: Cannot assign requested address".into(),
        };
        assert!(t.fail(&k, &gone));
        assert_eq!(t.summary(&k).unwrap().2, Some(gone.clone()));
        t.clear_failure(&k);
        assert!(t.fail(&k, &gone));
        assert!(!t.fail(&key("192.0.2.12:179"), &gone));
        assert_eq!(
            gone.to_string(),
            "listener disabled: listen on 192.0.2.11:179: Cannot assign requested address"
        );
    }

    #[test]
    fn bind_errors_keep_the_os_error_kind() {
        let k = key("192.0.2.11:179");
        let e = TransportError::Listen {
            addr: k.addr,
            source: io::Error::from(io::ErrorKind::AddrInUse),
        };
        match ListenError::bind(&k, &e) {
            ListenError::Bind { kind, text, .. } => {
                assert_eq!(kind, Some(io::ErrorKind::AddrInUse));
                assert!(text.starts_with("listen on 192.0.2.11:179"), "{text}");
            }
            other => panic!("{other}"),
        }
    }
}
