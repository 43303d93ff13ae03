//! Hold time 0 (RFC 4271 4.4: no KEEPALIVE is exchanged) in the session
//! driver, over an in-memory duplex (no packet anywhere): the session's
//! connection carries, besides the duplex, a TCP socket the test created
//! and never connects, standing for the connection's socket; the test
//! reads the options the driver set on it (`getsockopt` on its own
//! descriptor of the same socket).
//!
//! - hold time 0 negotiated: TCP keepalive and `TCP_USER_TIMEOUT` on;
//! - a hold time negotiated: neither (the hold timer and RFC 9687's
//!   SendHoldTimer watch the peer).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use bgp::fsm::{Config, FsmState, PeerAs};
use bgp::listener::Listeners;
use bgp::session::{PeerConfig, Session};
use bgp::transport::{
    ConnectFuture, ConnectOptions, Connection, Connector, HOLD_ZERO_KEEPALIVE_IDLE,
    HOLD_ZERO_KEEPALIVE_INTERVAL, HOLD_ZERO_KEEPALIVE_PROBES, HOLD_ZERO_USER_TIMEOUT,
};
use bgp::wire::{DecodeContext, EncodeContext, HoldTime, Message, Open, negotiate, read_message};
use bytes::BytesMut;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;

const OUR_AS: u32 = 64513;
const PEER_AS: u32 = 64512;
const PEER: &str = "192.0.2.1:179";
const LOCAL: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 11);

/// Hands the session a duplex and a duplicate of `socket`.
struct MemConnector {
    socket: Socket,
    peers: mpsc::UnboundedSender<DuplexStream>,
}

impl Connector for MemConnector {
    fn connect(&self, opts: ConnectOptions) -> ConnectFuture {
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        let sent = self.peers.send(theirs);
        let tcp = self.socket.try_clone().map(OwnedFd::from);
        Box::pin(async move {
            let tcp = tcp.map_err(|source| bgp::transport::TransportError::Socket {
                op: "dup".into(),
                source,
            })?;
            assert!(sent.is_ok());
            let (read, write) = tokio::io::split(ours);
            Ok(Connection {
                local: SocketAddr::new(IpAddr::V4(LOCAL), 40000),
                remote: opts.peer,
                read: Box::new(read),
                write: Box::new(write),
                tcp: Some(tcp),
            })
        })
    }
}

/// Brings a session with our hold time `ours` to Established against a
/// peer offering `theirs`; returns the socket standing for its connection.
async fn established(ours: u16, theirs: u16) -> (Session, Socket, DuplexStream) {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
    assert!(!socket.keepalive().unwrap());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let connector = MemConnector {
        socket: socket.try_clone().unwrap(),
        peers: tx,
    };
    let mut fsm = Config::new(OUR_AS, PeerAs::Fixed(PEER_AS), "node-1");
    fsm.router_id = Some(LOCAL);
    fsm.families = vec![bgp::wire::Family::IPV4_UNICAST];
    fsm.hold_time = Some(ours);
    let caps = fsm.local_capabilities();
    let config = PeerConfig::new(fsm, PEER.parse().unwrap());
    let session =
        Session::spawn_with_connector(config, None, Listeners::new(), Arc::new(connector)).unwrap();
    let mut stream = within(rx.recv()).await.expect("a connection");
    let mine = Config::new(PEER_AS, PeerAs::Fixed(OUR_AS), "router");
    let negotiated = negotiate(&mine.local_capabilities(), &caps);
    let mut buf = BytesMut::new();
    let decode = DecodeContext::default();
    assert!(matches!(
        next(&mut stream, &mut buf, &decode).await,
        Some(Message::Open(_))
    ));
    let open = Open::new(
        PEER_AS,
        HoldTime::new(theirs).unwrap(),
        Ipv4Addr::new(192, 0, 2, 1),
        mine.local_capabilities().to_capabilities(),
    );
    for m in [Message::Open(open), Message::Keepalive] {
        let mut out = BytesMut::new();
        m.encode(&EncodeContext::default(), &mut out).unwrap();
        stream.write_all(&out).await.unwrap();
    }
    let decode = negotiated.decode_context(false);
    assert!(matches!(
        next(&mut stream, &mut buf, &decode).await,
        Some(Message::Keepalive)
    ));
    let mut state = session.state();
    within(state.wait_for(|s| s.fsm_state == FsmState::Established))
        .await
        .unwrap();
    (session, socket, stream)
}

async fn next(
    stream: &mut DuplexStream,
    buf: &mut BytesMut,
    decode: &DecodeContext,
) -> Option<Message> {
    loop {
        if let Some(m) = read_message(buf, decode).expect("valid message") {
            return Some(m);
        }
        let mut chunk = [0u8; 4096];
        let n = within(stream.read(&mut chunk)).await.unwrap_or(0);
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("in time")
}

#[tokio::test]
async fn hold_time_zero_turns_tcp_keepalive_and_user_timeout_on() {
    let (session, socket, _stream) = established(0, 90).await;
    // The options are set when the OPENs are exchanged, before
    // Established.
    assert!(socket.keepalive().unwrap(), "SO_KEEPALIVE");
    assert_eq!(
        socket.tcp_keepalive_time().unwrap(),
        HOLD_ZERO_KEEPALIVE_IDLE
    );
    assert_eq!(
        socket.tcp_keepalive_interval().unwrap(),
        HOLD_ZERO_KEEPALIVE_INTERVAL
    );
    assert_eq!(
        socket.tcp_keepalive_retries().unwrap(),
        HOLD_ZERO_KEEPALIVE_PROBES
    );
    assert_eq!(
        socket.tcp_user_timeout().unwrap(),
        Some(HOLD_ZERO_USER_TIMEOUT)
    );
    assert_eq!(session.state().borrow().last_error, None);
    within(session.shutdown("done")).await;
}

#[tokio::test]
async fn a_negotiated_hold_time_leaves_tcp_keepalive_off() {
    let (session, socket, _stream) = established(90, 30).await;
    assert!(!socket.keepalive().unwrap());
    assert_eq!(socket.tcp_user_timeout().unwrap(), None);
    within(session.shutdown("done")).await;
}
