//! The TCP transport of BGP sessions: the ONE module of the crate that
//! touches socket options. Every option is set through a safe wrapper
//! (`socket2`, or the workspace's audited `netsys` crate for what no safe
//! crate wraps), every failure is returned as a [`TransportError`], none is
//! ignored.
//!
//! What an outgoing connection gets, in order (all before the handshake):
//!
//! 1. a socket of the peer's family, non-blocking;
//! 2. `SO_BINDTODEVICE` to the session's `vrf` (the VRF device name);
//! 3. the TTL (IPv4) or unicast hop limit (IPv6): [`ttl_for`] — 255 for
//!    iBGP, 1 for eBGP unless `ebgpMultiHop`, then 255;
//! 4. TCP MD5 (RFC 2385) when a password is configured: the key for the
//!    peer's address is installed with `TCP_MD5SIG` (`netsys::set_tcp_md5sig`;
//!    no safe wrapper exists in `socket2` 0.6, `rustix` 1 or `nix` 0.31). A
//!    failure (e.g. a key over 80 bytes, a kernel without
//!    `CONFIG_TCP_MD5SIG`) fails the attempt with the error as the session's
//!    last error: the session never connects without its key. The password
//!    never appears in an error or `Debug` output;
//! 5. GTSM (RFC 5082) when `ttl_security_hops` is set: `IP_MINTTL` /
//!    `IPV6_MINHOPCOUNT` ([`set_min_ttl`], `netsys`), the TTL being 255;
//! 6. `bind` to `sourceAddress` (port 0) when one is configured;
//! 7. `connect`, bounded by [`ConnectOptions::timeout`].
//!
//! The optional listener ([`listen`]) sets the same TTL and device,
//! `SO_REUSEADDR` and the MD5 key of each peer allowed to dial in (more
//! with [`set_listener_md5`]); a busy port is returned as an error for the session to
//! show (Calico's BIRD often holds :179), never a panic or an exit.
//! [`stop_listener`] stops one at once. Sessions share one listener per
//! local address through [`crate::listener`], which calls these
//! ([`listen_keyed`]: one refused key does not fail the others;
//! [`accept_pending`]: the connections queued when a key is added).
//!
//! [`interface_of`] reads the node's interface addresses (`getifaddrs`
//! through `nix`) for the next hop of the other address family and the
//! router ID rule.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, SockRef, Socket, TcpKeepalive, Type};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::wire::NextHop;

/// The TTL / hop limit of iBGP sessions and multihop eBGP sessions.
pub const TTL_MULTIHOP: u8 = 255;
/// The TTL / hop limit of directly connected eBGP sessions.
pub const TTL_DIRECT: u8 = 1;
/// The connect timeout when none is given.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// TCP keepalive of a connection on which no BGP KEEPALIVE is exchanged
/// (negotiated hold time 0, see [`set_dead_peer_detection`]): the first
/// probe after this much silence,
pub const HOLD_ZERO_KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// then one every this long,
pub const HOLD_ZERO_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// this many unanswered before the kernel resets the connection (a dead
/// peer is found 60 s after it last spoke);
pub const HOLD_ZERO_KEEPALIVE_PROBES: u32 = 3;
/// and `TCP_USER_TIMEOUT`: data unacknowledged this long resets the
/// connection too (the default hold time's 90 s).
pub const HOLD_ZERO_USER_TIMEOUT: Duration = Duration::from_secs(90);

/// The TTL (IPv4) or hop limit (IPv6) of a session: iBGP 255, eBGP 1 unless
/// `ebgp_multihop`, then 255.
pub fn ttl_for(ibgp: bool, ebgp_multihop: bool) -> u8 {
    if ibgp || ebgp_multihop {
        TTL_MULTIHOP
    } else {
        TTL_DIRECT
    }
}

/// How to open (or accept) the TCP connection of one session.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectOptions {
    /// `peerAddress:peerPort`.
    pub peer: SocketAddr,
    /// `sourceAddress`: bound before connecting.
    pub source: Option<IpAddr>,
    /// TTL / hop limit, see [`ttl_for`].
    pub ttl: u8,
    /// TCP MD5 key (RFC 2385). Never printed (see the `Debug` impl).
    pub password: Option<String>,
    /// `vrf`: the device bound with `SO_BINDTODEVICE`.
    pub vrf: Option<String>,
    /// Bound on the TCP handshake.
    pub timeout: Duration,
    /// GTSM (RFC 5082): segments from the peer with a lower TTL / hop
    /// limit are dropped by the kernel (`IP_MINTTL` /
    /// `IPV6_MINHOPCOUNT`); see [`min_ttl_for_hops`].
    pub min_ttl: Option<u8>,
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("peer", &self.peer)
            .field("source", &self.source)
            .field("ttl", &self.ttl)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("vrf", &self.vrf)
            .field("timeout", &self.timeout)
            .field("min_ttl", &self.min_ttl)
            .finish()
    }
}

impl ConnectOptions {
    /// Options for `peer` with eBGP direct TTL, no source, no password, no
    /// VRF and the default timeout.
    pub fn new(peer: SocketAddr) -> Self {
        Self {
            peer,
            source: None,
            ttl: TTL_DIRECT,
            password: None,
            vrf: None,
            timeout: DEFAULT_CONNECT_TIMEOUT,
            min_ttl: None,
        }
    }
}

/// What went wrong with a socket. The text never holds the password.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// A socket call failed; `op` names it (e.g. `"set IP_TTL 1"`).
    #[error("{op}: {source}")]
    Socket {
        op: String,
        #[source]
        source: io::Error,
    },
    #[error("sourceAddress {source_addr} is not of the peer's address family ({peer})")]
    SourceFamilyMismatch {
        source_addr: IpAddr,
        peer: SocketAddr,
    },
    #[error("connect to {peer}: timed out after {timeout:?}")]
    ConnectTimeout { peer: SocketAddr, timeout: Duration },
    #[error("listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
}

impl TransportError {
    fn socket(op: impl Into<String>) -> impl FnOnce(io::Error) -> TransportError {
        let op = op.into();
        move |source| TransportError::Socket { op, source }
    }
}

fn domain_of(addr: &SocketAddr) -> Domain {
    if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    }
}

/// Sets the TTL (IPv4) or unicast hop limit (IPv6) of `socket`.
fn set_ttl(socket: &Socket, ipv4: bool, ttl: u8) -> Result<(), TransportError> {
    if ipv4 {
        socket
            .set_ttl_v4(u32::from(ttl))
            .map_err(TransportError::socket(format!("set IP_TTL {ttl}")))
    } else {
        socket
            .set_unicast_hops_v6(u32::from(ttl))
            .map_err(TransportError::socket(format!(
                "set IPV6_UNICAST_HOPS {ttl}"
            )))
    }
}

fn set_device(socket: &Socket, vrf: Option<&str>) -> Result<(), TransportError> {
    if let Some(dev) = vrf {
        socket
            .bind_device(Some(dev.as_bytes()))
            .map_err(TransportError::socket(format!(
                "set SO_BINDTODEVICE {dev:?}"
            )))?;
    }
    Ok(())
}

/// Installs (or, with `None`, deletes) the TCP MD5 key for `peer`. The
/// error names the peer, never the key.
fn set_md5(socket: &impl AsFd, peer: IpAddr, password: Option<&str>) -> Result<(), TransportError> {
    netsys::set_tcp_md5sig(
        socket.as_fd(),
        SocketAddr::new(peer, 0),
        password.map(str::as_bytes),
    )
    .map_err(TransportError::socket(format!(
        "set TCP_MD5SIG for {peer} (TCP MD5 password)"
    )))
}

/// Creates the socket of an outgoing connection with every option set and
/// the source address bound, not connected yet. Public for tests.
pub fn prepare(opts: &ConnectOptions) -> Result<Socket, TransportError> {
    let ipv4 = opts.peer.is_ipv4();
    if let Some(src) = opts.source
        && src.is_ipv4() != ipv4
    {
        return Err(TransportError::SourceFamilyMismatch {
            source_addr: src,
            peer: opts.peer,
        });
    }
    let socket = Socket::new(domain_of(&opts.peer), Type::STREAM, Some(Protocol::TCP))
        .map_err(TransportError::socket("socket"))?;
    socket
        .set_nonblocking(true)
        .map_err(TransportError::socket("set O_NONBLOCK"))?;
    set_device(&socket, opts.vrf.as_deref())?;
    set_ttl(&socket, ipv4, opts.ttl)?;
    if let Some(min) = opts.min_ttl {
        set_min_ttl(&socket, opts.peer.ip(), min)?;
    }
    if let Some(password) = opts.password.as_deref() {
        set_md5(&socket, opts.peer.ip(), Some(password))?;
    }
    socket
        .set_tcp_nodelay(true)
        .map_err(TransportError::socket("set TCP_NODELAY"))?;
    if let Some(src) = opts.source {
        let addr = SocketAddr::new(src, 0);
        socket
            .bind(&SockAddr::from(addr))
            .map_err(TransportError::socket(format!("bind to {src}")))?;
    }
    Ok(socket)
}

/// Opens the TCP connection of a session (see the module documentation
/// for the order of the steps).
pub async fn connect(opts: &ConnectOptions) -> Result<TcpStream, TransportError> {
    let socket = prepare(opts)?;
    let socket = TcpSocket::from_std_stream(std::net::TcpStream::from(socket));
    match tokio::time::timeout(opts.timeout, socket.connect(opts.peer)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(TransportError::Socket {
            op: format!("connect to {}", opts.peer),
            source: e,
        }),
        Err(_) => Err(TransportError::ConnectTimeout {
            peer: opts.peer,
            timeout: opts.timeout,
        }),
    }
}

/// The byte streams of one session connection, as the session driver uses
/// them: a TCP connection ([`Connection::tcp`]), or any other transport
/// with addresses, e.g. an in-memory duplex in tests.
pub struct Connection {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub read: Box<dyn AsyncRead + Send + Unpin>,
    pub write: Box<dyn AsyncWrite + Send + Unpin>,
    /// The TCP socket (a duplicate of its descriptor), for the options
    /// the driver sets once the OPEN exchange is done
    /// ([`set_dead_peer_detection`] when the negotiated hold time is 0);
    /// `None` for other transports.
    pub tcp: Option<OwnedFd>,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("local", &self.local)
            .field("remote", &self.remote)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// A connected TCP stream, split.
    pub fn tcp(stream: TcpStream) -> Result<Self, TransportError> {
        let local = stream
            .local_addr()
            .map_err(TransportError::socket("getsockname"))?;
        let remote = stream
            .peer_addr()
            .map_err(TransportError::socket("getpeername"))?;
        let tcp = stream
            .as_fd()
            .try_clone_to_owned()
            .map_err(TransportError::socket("dup"))?;
        let (read, write) = stream.into_split();
        Ok(Self {
            local,
            remote,
            read: Box::new(read),
            write: Box::new(write),
            tcp: Some(tcp),
        })
    }
}

/// A future returned by [`Connector::connect`].
pub type ConnectFuture = Pin<Box<dyn Future<Output = Result<Connection, TransportError>> + Send>>;

/// Opens the outgoing connections of sessions: [`TcpConnector`] in
/// production; tests give the session driver an in-memory one.
pub trait Connector: Send + Sync + 'static {
    fn connect(&self, opts: ConnectOptions) -> ConnectFuture;
}

/// [`connect`]: real TCP with every option of the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpConnector;

impl Connector for TcpConnector {
    fn connect(&self, opts: ConnectOptions) -> ConnectFuture {
        Box::pin(async move { Connection::tcp(connect(&opts).await?) })
    }
}

/// Options of the optional listener for peers that dial in.
#[derive(Clone, PartialEq, Eq)]
pub struct ListenOptions {
    /// Address and port to bind (e.g. `192.0.2.11:179`).
    pub addr: SocketAddr,
    pub ttl: u8,
    /// TCP MD5 keys (RFC 2385) of the peers allowed on this listener, one
    /// per peer address. Never printed (see the `Debug` impl).
    pub md5: Vec<(IpAddr, String)>,
    pub vrf: Option<String>,
}

impl fmt::Debug for ListenOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenOptions")
            .field("addr", &self.addr)
            .field("ttl", &self.ttl)
            .field(
                "md5",
                &self
                    .md5
                    .iter()
                    .map(|(peer, _)| (peer, "<redacted>"))
                    .collect::<Vec<_>>(),
            )
            .field("vrf", &self.vrf)
            .finish()
    }
}

/// Installs (`Some`) or deletes (`None`) the TCP MD5 key of `peer` on a
/// running listener: connections from `peer` accepted afterwards use it.
pub fn set_listener_md5(
    listener: &TcpListener,
    peer: IpAddr,
    password: Option<&str>,
) -> Result<(), TransportError> {
    set_md5(listener, peer, password)
}

/// Stops a listener listening at once (`shutdown`): connections not
/// accepted yet are reset, new ones are refused, a pending `accept` fails.
/// The port is free for another listener right away (with SO_REUSEADDR,
/// which [`listen`] sets); the descriptor closes when the listener drops.
pub fn stop_listener(listener: &TcpListener) -> Result<(), TransportError> {
    socket2::SockRef::from(listener)
        .shutdown(std::net::Shutdown::Both)
        .map_err(TransportError::socket("shutdown the listener"))
}

/// Binds the listener. A busy port is an `Err` ([`TransportError::Listen`]
/// with `AddrInUse`) for the session to show.
pub fn listen(opts: &ListenOptions) -> Result<TcpListener, TransportError> {
    let (listener, mut key_errors) = bind_listener(opts, false)?;
    match key_errors.pop() {
        Some((_, e)) => Err(e),
        None => Ok(listener),
    }
}

/// [`listen`] for a listener shared by several peers: a key the kernel
/// refuses does not fail the others; it is returned with its peer (whose
/// connections are then unauthenticated: the caller must not take them).
/// Every key is installed before the socket listens.
pub fn listen_keyed(
    opts: &ListenOptions,
) -> Result<(TcpListener, Vec<(IpAddr, TransportError)>), TransportError> {
    bind_listener(opts, true)
}

fn bind_listener(
    opts: &ListenOptions,
    tolerate_key_errors: bool,
) -> Result<(TcpListener, Vec<(IpAddr, TransportError)>), TransportError> {
    let ipv4 = opts.addr.is_ipv4();
    let socket = Socket::new(domain_of(&opts.addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(TransportError::socket("socket"))?;
    socket
        .set_nonblocking(true)
        .map_err(TransportError::socket("set O_NONBLOCK"))?;
    socket
        .set_reuse_address(true)
        .map_err(TransportError::socket("set SO_REUSEADDR"))?;
    if !ipv4 {
        socket
            .set_only_v6(true)
            .map_err(TransportError::socket("set IPV6_V6ONLY"))?;
    }
    set_device(&socket, opts.vrf.as_deref())?;
    set_ttl(&socket, ipv4, opts.ttl)?;
    let mut key_errors = Vec::new();
    for (peer, password) in &opts.md5 {
        match set_md5(&socket, *peer, Some(password)) {
            Ok(()) => {}
            Err(e) if tolerate_key_errors => key_errors.push((*peer, e)),
            Err(e) => return Err(e),
        }
    }
    let listen_err = |source| TransportError::Listen {
        addr: opts.addr,
        source,
    };
    socket
        .bind(&SockAddr::from(opts.addr))
        .map_err(listen_err)?;
    socket.listen(16).map_err(listen_err)?;
    let listener =
        TcpListener::from_std(std::net::TcpListener::from(socket)).map_err(listen_err)?;
    Ok((listener, key_errors))
}

/// Accepts, without waiting, the connections the kernel has completed on
/// `listener` (at most `max`): after a key is installed on a running
/// listener, those from its peer may predate the key (unauthenticated).
pub fn accept_pending(listener: &TcpListener, max: usize) -> Vec<(TcpStream, SocketAddr)> {
    let sock = socket2::SockRef::from(listener);
    let mut out = Vec::new();
    while out.len() < max {
        let Ok((s, addr)) = sock.accept() else {
            break; // WouldBlock: none left (any other error: accept later)
        };
        let Some(addr) = addr.as_socket() else {
            continue;
        };
        if s.set_nonblocking(true).is_err() {
            continue; // dropped: closed
        }
        if let Ok(stream) = TcpStream::from_std(std::net::TcpStream::from(s)) {
            out.push((stream, addr));
        }
    }
    out
}

/// Sets TTL / hop limit on an accepted connection (the listener's value is
/// inherited on Linux; this makes it explicit and checked).
pub fn configure_accepted(stream: &TcpStream, ttl: u8) -> Result<(), TransportError> {
    let sock = socket2::SockRef::from(stream);
    let ipv4 = stream
        .local_addr()
        .map_err(TransportError::socket("getsockname"))?
        .is_ipv4();
    set_ttl(&sock, ipv4, ttl)?;
    sock.set_tcp_nodelay(true)
        .map_err(TransportError::socket("set TCP_NODELAY"))
}

/// The minimum TTL / hop limit GTSM (RFC 5082) accepts from a peer at
/// most `hops` hops away (1: directly connected): `256 - hops`, 255 for a
/// direct peer (as FRR's `ttl-security hops`); 0 is taken as 1.
pub fn min_ttl_for_hops(hops: u8) -> u8 {
    // 1..=255 hops: 255..=1.
    u8::MAX - (hops.max(1) - 1)
}

/// GTSM (RFC 5082) on a socket to or from `peer`: `IP_MINTTL` (IPv4) or
/// `IPV6_MINHOPCOUNT` (IPv6) `min`, through the workspace's audited
/// `netsys` (no safe crate wraps them). On a listener it drops the SYNs of
/// farther peers; on a connection every segment.
pub fn set_min_ttl(socket: impl AsFd, peer: IpAddr, min: u8) -> Result<(), TransportError> {
    let peer = match peer {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
        v4 => v4,
    };
    let op = match peer {
        IpAddr::V4(_) => "IP_MINTTL",
        IpAddr::V6(_) => "IPV6_MINHOPCOUNT",
    };
    netsys::set_min_ttl_for(socket.as_fd(), peer, min)
        .map_err(TransportError::socket(format!("set {op} {min} (GTSM)")))
}

/// Dead-peer detection for a connection on which no KEEPALIVE is exchanged
/// (negotiated hold time 0, RFC 4271 4.4): TCP keepalive
/// ([`HOLD_ZERO_KEEPALIVE_IDLE`], [`HOLD_ZERO_KEEPALIVE_INTERVAL`],
/// [`HOLD_ZERO_KEEPALIVE_PROBES`]) and `TCP_USER_TIMEOUT`
/// ([`HOLD_ZERO_USER_TIMEOUT`]), so that a peer gone without a FIN or RST
/// resets the connection instead of leaving the session Established for
/// ever. Not set otherwise: with a hold time the hold timer detects a
/// dead peer, and RFC 9687's SendHoldTimer a peer that stops reading
/// (which `TCP_USER_TIMEOUT` would cut short, losing its NOTIFICATION).
pub fn set_dead_peer_detection(socket: impl AsFd) -> Result<(), TransportError> {
    let sock = SockRef::from(&socket);
    let keepalive = TcpKeepalive::new()
        .with_time(HOLD_ZERO_KEEPALIVE_IDLE)
        .with_interval(HOLD_ZERO_KEEPALIVE_INTERVAL)
        .with_retries(HOLD_ZERO_KEEPALIVE_PROBES);
    sock.set_tcp_keepalive(&keepalive)
        .map_err(TransportError::socket("set SO_KEEPALIVE"))?;
    sock.set_tcp_user_timeout(Some(HOLD_ZERO_USER_TIMEOUT))
        .map_err(TransportError::socket("set TCP_USER_TIMEOUT"))
}

/// The interface that holds an address, with its first IPv4 address, its
/// first global IPv6 address, its first link-local IPv6 address, and every
/// address with its prefix length (to tell whether a peer is on the link).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InterfaceInfo {
    pub name: String,
    pub ipv4: Option<Ipv4Addr>,
    /// First IPv6 address that is not link-local.
    pub ipv6: Option<Ipv6Addr>,
    /// First link-local IPv6 address (fe80::/10).
    pub ipv6_link_local: Option<Ipv6Addr>,
    /// The interface's addresses with their prefix lengths.
    pub prefixes: Vec<(IpAddr, u8)>,
}

impl InterfaceInfo {
    /// Whether `peer` shares a subnet with this interface (a link-local
    /// IPv6 peer always does: it can only be reached on a link).
    pub fn on_link(&self, peer: IpAddr) -> bool {
        let peer = unmap(peer);
        if let IpAddr::V6(p) = peer
            && is_link_local_v6(&p)
        {
            return true;
        }
        self.prefixes
            .iter()
            .any(|(addr, len)| same_prefix(*addr, peer, *len))
    }

    /// The IPv6 next hop for a session from `local` to `peer` over this
    /// interface, per RFC 2545 section 3: the global address (`local`
    /// when it is a global IPv6 address, else the interface's first
    /// global IPv6 address) and, when the peer shares a subnet with the
    /// interface, the interface's link-local address too (a 32-byte next
    /// hop). A link-local address never goes in the global slot: with no
    /// global address there is no IPv6 next hop.
    pub fn ipv6_next_hop(&self, local: IpAddr, peer: IpAddr) -> Option<NextHop> {
        let global = match unmap(local) {
            IpAddr::V6(a) if !is_link_local_v6(&a) => a,
            _ => self.ipv6?,
        };
        let link_local = if self.on_link(peer) {
            match unmap(local) {
                IpAddr::V6(a) if is_link_local_v6(&a) => Some(a),
                _ => self.ipv6_link_local,
            }
        } else {
            None
        };
        Some(NextHop::V6 { global, link_local })
    }
}

/// The IPv6 next hop when no interface is known: `local` if it is a
/// global IPv6 address, never a link-local one.
pub fn ipv6_next_hop_without_interface(local: IpAddr) -> Option<NextHop> {
    match unmap(local) {
        IpAddr::V6(a) if !is_link_local_v6(&a) => Some(NextHop::V6 {
            global: a,
            link_local: None,
        }),
        _ => None,
    }
}

fn unmap(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(a),
        v4 => v4,
    }
}

fn same_prefix(a: IpAddr, b: IpAddr, len: u8) -> bool {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let len = u32::from(len.min(32));
            let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
            u32::from(a) & mask == u32::from(b) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let len = u32::from(len.min(128));
            let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
            u128::from(a) & mask == u128::from(b) & mask
        }
        _ => false,
    }
}

fn is_link_local_v6(a: &Ipv6Addr) -> bool {
    (a.segments()[0] & 0xffc0) == 0xfe80
}

fn prefix_len(mask: IpAddr) -> u8 {
    match mask {
        IpAddr::V4(m) => u32::from(m).count_ones() as u8,
        IpAddr::V6(m) => u128::from(m).count_ones() as u8,
    }
}

/// The interface holding `local` (via `getifaddrs`), or `None` when no
/// interface has it. IPv4-mapped IPv6 addresses are looked up as IPv4.
pub fn interface_of(local: IpAddr) -> Result<Option<InterfaceInfo>, TransportError> {
    let local = unmap(local);
    let sock_ip = |a: &nix::sys::socket::SockaddrStorage| -> Option<IpAddr> {
        if let Some(v4) = a.as_sockaddr_in() {
            Some(IpAddr::V4(v4.ip()))
        } else {
            Some(IpAddr::V6(a.as_sockaddr_in6()?.ip()))
        }
    };
    let addrs: Vec<(String, IpAddr, u8)> = nix::ifaddrs::getifaddrs()
        .map_err(|e| TransportError::Socket {
            op: "getifaddrs".into(),
            source: io::Error::from(e),
        })?
        .filter_map(|ifa| {
            let ip = sock_ip(ifa.address.as_ref()?)?;
            let len = ifa
                .netmask
                .as_ref()
                .and_then(sock_ip)
                .map_or(if ip.is_ipv4() { 32 } else { 128 }, prefix_len);
            Some((ifa.interface_name, ip, len))
        })
        .collect();
    let Some((name, _, _)) = addrs.iter().find(|(_, ip, _)| *ip == local) else {
        return Ok(None);
    };
    let on_iface = || {
        addrs
            .iter()
            .filter(|(n, _, _)| n == name)
            .map(|(_, ip, _)| *ip)
    };
    let ipv4 = on_iface().find_map(|ip| match ip {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(_) => None,
    });
    let ipv6 = on_iface().find_map(|ip| match ip {
        IpAddr::V6(a) if !is_link_local_v6(&a) => Some(a),
        _ => None,
    });
    let ipv6_link_local = on_iface().find_map(|ip| match ip {
        IpAddr::V6(a) if is_link_local_v6(&a) => Some(a),
        _ => None,
    });
    let prefixes = addrs
        .iter()
        .filter(|(n, _, _)| n == name)
        .map(|(_, ip, len)| (*ip, *len))
        .collect();
    Ok(Some(InterfaceInfo {
        name: name.clone(),
        ipv4,
        ipv6,
        ipv6_link_local,
        prefixes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(peer: &str) -> ConnectOptions {
        ConnectOptions::new(peer.parse().unwrap())
    }

    #[test]
    fn ttl_rule() {
        assert_eq!(ttl_for(true, false), 255);
        assert_eq!(ttl_for(true, true), 255);
        assert_eq!(ttl_for(false, false), 1);
        assert_eq!(ttl_for(false, true), 255);
    }

    #[test]
    fn ttl_and_hop_limit_are_set_before_connect() {
        let mut o = opts("192.0.2.1:179");
        let s = prepare(&o).unwrap();
        assert_eq!(s.ttl_v4().unwrap(), 1);
        o.ttl = 255;
        let s = prepare(&o).unwrap();
        assert_eq!(s.ttl_v4().unwrap(), 255);
        let mut o = opts("[2001:db8::1]:179");
        let s = prepare(&o).unwrap();
        assert_eq!(s.unicast_hops_v6().unwrap(), 1);
        o.ttl = 255;
        let s = prepare(&o).unwrap();
        assert_eq!(s.unicast_hops_v6().unwrap(), 255);
    }

    /// GTSM (RFC 5082) on the unconnected socket: `IP_MINTTL` /
    /// `IPV6_MINHOPCOUNT` set before the SYN, none without.
    #[test]
    fn gtsm_min_ttl_is_set_before_connect() {
        assert_eq!(min_ttl_for_hops(1), 255);
        assert_eq!(min_ttl_for_hops(0), 255);
        assert_eq!(min_ttl_for_hops(2), 254);
        assert_eq!(min_ttl_for_hops(255), 1);
        let mut o = opts("192.0.2.1:179");
        let s = prepare(&o).unwrap();
        assert_eq!(netsys::ip_minttl(s.as_fd()).unwrap(), 0);
        o.min_ttl = Some(254);
        let s = prepare(&o).unwrap();
        assert_eq!(netsys::ip_minttl(s.as_fd()).unwrap(), 254);
        let mut o = opts("[2001:db8::1]:179");
        o.min_ttl = Some(255);
        let s = prepare(&o).unwrap();
        assert_eq!(netsys::ipv6_minhopcount(s.as_fd()).unwrap(), 255);
    }

    #[test]
    fn source_address_is_bound_and_family_checked() {
        let mut o = opts("127.0.0.1:179");
        o.source = Some("127.0.0.1".parse().unwrap());
        let s = prepare(&o).unwrap();
        let local = s.local_addr().unwrap().as_socket().unwrap();
        assert_eq!(local.ip(), o.source.unwrap());
        o.source = Some("::1".parse().unwrap());
        assert!(matches!(
            prepare(&o),
            Err(TransportError::SourceFamilyMismatch { .. })
        ));
    }

    /// The key is installed on the unconnected socket (no packet sent); a
    /// key the kernel cannot take fails the attempt, and neither the error
    /// nor `Debug` shows the password.
    #[test]
    fn md5_key_is_installed_before_connect_and_never_printed() {
        let mut o = opts("192.0.2.1:179");
        o.password = Some("s3cret".into());
        prepare(&o).unwrap();
        assert!(!format!("{o:?}").contains("s3cret"));
        let mut o = opts("[2001:db8::1]:179");
        o.password = Some("s3cret".into());
        prepare(&o).unwrap();
        let long = "x".repeat(netsys::TCP_MD5SIG_MAXKEYLEN + 1);
        o.password = Some(long.clone());
        let err = prepare(&o).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("set TCP_MD5SIG for 2001:db8::1"), "{text}");
        assert!(text.contains("at most 80"), "{text}");
        assert!(!text.contains(&long[..10]), "{text}");
        assert!(!format!("{err:?}").contains(&long[..10]));
    }

    /// This kernel has no VRF devices: the option is checked on `lo`
    /// (SO_BINDTODEVICE needs CAP_NET_RAW; the tests run as root).
    #[test]
    fn vrf_binds_the_device() {
        let mut o = opts("127.0.0.1:179");
        o.vrf = Some("lo".into());
        let s = prepare(&o).unwrap();
        assert_eq!(s.device().unwrap().as_deref(), Some(&b"lo"[..]));
        o.vrf = Some("mlb-no-such-vrf".into());
        let err = prepare(&o).unwrap_err();
        assert!(err.to_string().contains("SO_BINDTODEVICE"), "{err}");
    }

    /// Binding only: no traffic leaves a test namespace (connections are
    /// exercised in `tests/interop.rs`, inside the lab's namespaces).
    #[tokio::test]
    async fn busy_listener_port_is_an_error_not_a_panic() {
        let o = |addr| ListenOptions {
            addr,
            ttl: 255,
            md5: Vec::new(),
            vrf: None,
        };
        let l = listen(&o("127.0.0.1:0".parse().unwrap())).unwrap();
        let addr = l.local_addr().unwrap();
        match listen(&o(addr)).unwrap_err() {
            TransportError::Listen { source, .. } => {
                assert_eq!(source.kind(), io::ErrorKind::AddrInUse)
            }
            other => panic!("{other}"),
        }
    }

    /// Keys on a listener, at bind time and later, per peer. Binding only.
    #[tokio::test]
    async fn listener_takes_md5_keys_per_peer() {
        let o = ListenOptions {
            addr: "127.0.0.1:0".parse().unwrap(),
            ttl: 255,
            md5: vec![("192.0.2.1".parse().unwrap(), "s3cret".into())],
            vrf: None,
        };
        assert!(!format!("{o:?}").contains("s3cret"));
        let l = listen(&o).unwrap();
        set_listener_md5(&l, "192.0.2.2".parse().unwrap(), Some("other")).unwrap();
        set_listener_md5(&l, "192.0.2.1".parse().unwrap(), None).unwrap();
        let err =
            set_listener_md5(&l, "192.0.2.3".parse().unwrap(), Some(&"y".repeat(81))).unwrap_err();
        assert!(!err.to_string().contains("yyyy"), "{err}");
    }

    #[test]
    fn loopback_interface_is_found() {
        let info = interface_of("127.0.0.1".parse().unwrap()).unwrap().unwrap();
        assert_eq!(info.name, "lo");
        assert_eq!(info.ipv4, Some(Ipv4Addr::LOCALHOST));
        assert_eq!(interface_of("192.0.2.254".parse().unwrap()).unwrap(), None);
    }

    #[test]
    fn loopback_prefixes_are_read_with_their_lengths() {
        let info = interface_of("127.0.0.1".parse().unwrap()).unwrap().unwrap();
        assert!(
            info.prefixes.contains(&("127.0.0.1".parse().unwrap(), 8)),
            "{info:?}"
        );
        assert!(info.on_link("127.0.0.42".parse().unwrap()));
        assert!(!info.on_link("192.0.2.1".parse().unwrap()));
    }

    fn eth0() -> InterfaceInfo {
        InterfaceInfo {
            name: "eth0".into(),
            ipv4: Some("192.0.2.11".parse().unwrap()),
            ipv6: Some("2001:db8:0:1::11".parse().unwrap()),
            ipv6_link_local: Some("fe80::11".parse().unwrap()),
            prefixes: vec![
                ("192.0.2.11".parse().unwrap(), 24),
                ("2001:db8:0:1::11".parse().unwrap(), 64),
                ("fe80::11".parse().unwrap(), 64),
            ],
        }
    }

    fn v6(global: &str, link_local: Option<&str>) -> Option<NextHop> {
        Some(NextHop::V6 {
            global: global.parse().unwrap(),
            link_local: link_local.map(|l| l.parse().unwrap()),
        })
    }

    /// RFC 2545 section 3: a peer on the link gets the global and the
    /// link-local address; one further away the global only.
    #[test]
    fn ipv6_next_hop_carries_the_link_local_address_to_a_peer_on_the_link() {
        let i = eth0();
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        // IPv6 session on the link.
        assert_eq!(
            i.ipv6_next_hop(ip("2001:db8:0:1::11"), ip("2001:db8:0:1::1")),
            v6("2001:db8:0:1::11", Some("fe80::11"))
        );
        // IPv4 session carrying IPv6, peer on the IPv4 subnet: same link.
        assert_eq!(
            i.ipv6_next_hop(ip("192.0.2.11"), ip("192.0.2.1")),
            v6("2001:db8:0:1::11", Some("fe80::11"))
        );
        // IPv4-mapped addresses count as IPv4.
        assert_eq!(
            i.ipv6_next_hop(ip("::ffff:192.0.2.11"), ip("::ffff:192.0.2.1")),
            v6("2001:db8:0:1::11", Some("fe80::11"))
        );
        // Multihop peers: global only (16 bytes).
        assert_eq!(
            i.ipv6_next_hop(ip("2001:db8:0:1::11"), ip("2001:db8:0:2::2")),
            v6("2001:db8:0:1::11", None)
        );
        assert_eq!(
            i.ipv6_next_hop(ip("192.0.2.11"), ip("203.0.113.2")),
            v6("2001:db8:0:1::11", None)
        );
    }

    #[test]
    fn a_link_local_address_never_goes_in_the_global_slot() {
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let i = eth0();
        // A session over link-local addresses: the interface's global
        // address first, the session's link-local address second.
        assert_eq!(
            i.ipv6_next_hop(ip("fe80::11"), ip("fe80::1")),
            v6("2001:db8:0:1::11", Some("fe80::11"))
        );
        // No global address on the interface: no IPv6 next hop at all.
        let bare = InterfaceInfo {
            ipv6: None,
            ..eth0()
        };
        assert_eq!(bare.ipv6_next_hop(ip("fe80::11"), ip("fe80::1")), None);
        assert_eq!(bare.ipv6_next_hop(ip("192.0.2.11"), ip("192.0.2.1")), None);
        // No interface known.
        assert_eq!(ipv6_next_hop_without_interface(ip("fe80::11")), None);
        assert_eq!(ipv6_next_hop_without_interface(ip("192.0.2.11")), None);
        assert_eq!(
            ipv6_next_hop_without_interface(ip("2001:db8::11")),
            v6("2001:db8::11", None)
        );
    }
}
