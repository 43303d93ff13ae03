//! GTSM (RFC 5082, `PeerConfig::ttl_security_hops`) in the session driver,
//! against the kernel on the loopback interface (127.0.0.1; no packet
//! leaves `lo`, where the TTL is not decremented, so the test plays a
//! router one hop away by sending with TTL 255 and one two hops away with
//! TTL 254).
//!
//! - Outgoing: the router does GTSM too (`IP_MINTTL` 255 on its listener),
//!   so our SYN must carry TTL 255; its SYN-ACK with TTL 254 is dropped by
//!   our socket (no connection), with TTL 255 the session comes up.
//! - Incoming: our listener drops the SYN of a router sending with TTL
//!   254; with 255 the connection is accepted and the session comes up.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::time::Duration;

use bgp::fsm::{Config, PeerAs};
use bgp::listener::Listeners;
use bgp::session::{PeerConfig, Session};
use bgp::state::SessionState;
use bgp::wire::{
    BytesMut, Capability, EncodeContext, Family, HoldTime, Message, MessageType, Open, frame,
};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

const WAIT: Duration = Duration::from_secs(10);
const OUR_AS: u32 = 64513;
const ROUTER_AS: u32 = 64512;
const ROUTER_ID: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

fn localhost(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// The router's listener: sends with `ttl`, drops segments below 255.
fn router_listener(ttl: u32) -> (TcpListener, Socket) {
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
    s.set_ttl_v4(ttl).unwrap();
    netsys::set_ip_minttl(s.as_fd(), 255).unwrap();
    s.set_nonblocking(true).unwrap();
    s.bind(&localhost(0).into()).unwrap();
    s.listen(8).unwrap();
    let control = s.try_clone().unwrap();
    let l = TcpListener::from_std(std::net::TcpListener::from(s)).unwrap();
    (l, control)
}

/// Connects to `to` sending with `ttl`; `None` when no connection within
/// `wait`.
async fn dial(to: SocketAddr, ttl: u32, wait: Duration) -> Option<TcpStream> {
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
    s.set_ttl_v4(ttl).unwrap();
    s.set_nonblocking(true).unwrap();
    let s = TcpSocket::from_std_stream(std::net::TcpStream::from(s));
    tokio::time::timeout(wait, s.connect(to)).await.ok()?.ok()
}

fn session(
    peer: SocketAddr,
    listen: Option<SocketAddr>,
    listeners: Listeners,
) -> (Session, watch::Receiver<SessionState>) {
    let mut fsm = Config::new(OUR_AS, PeerAs::Fixed(ROUTER_AS), "node-1");
    // Incoming only when we listen.
    fsm.passive_tcp_establishment = listen.is_some();
    let mut config = PeerConfig::new(fsm, peer);
    config.listen = listen;
    config.ttl_security_hops = Some(1);
    let session = Session::spawn_with_listeners(config, None, listeners).unwrap();
    let state = session.state();
    (session, state)
}

/// Plays the router's side of the OPEN exchange up to Established.
async fn handshake(mut stream: TcpStream, state: &mut watch::Receiver<SessionState>) {
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 4096];
    let first = loop {
        if let Some(f) = frame(&mut buf, 4096).unwrap() {
            break f.message_type();
        }
        let n = tokio::time::timeout(WAIT, stream.read(&mut chunk))
            .await
            .expect("our OPEN in time")
            .unwrap();
        assert!(n > 0, "closed before our OPEN");
        buf.extend_from_slice(&chunk[..n]);
    };
    assert_eq!(first, MessageType::Open);
    let caps = vec![
        Capability::Multiprotocol(Family::IPV4_UNICAST),
        Capability::FourOctetAs(ROUTER_AS),
    ];
    let open = Open::new(ROUTER_AS, HoldTime::new(90).unwrap(), ROUTER_ID, caps);
    let ctx = EncodeContext {
        four_octet_as: true,
        ..EncodeContext::default()
    };
    for m in [Message::Open(open), Message::Keepalive] {
        stream.write_all(&m.to_bytes(&ctx).unwrap()).await.unwrap();
    }
    tokio::time::timeout(WAIT, state.wait_for(|s| s.is_up()))
        .await
        .expect("Established in time")
        .unwrap();
}

#[tokio::test]
async fn gtsm_outgoing_refuses_a_router_two_hops_away_and_sends_ttl_255() {
    let (router, control) = router_listener(254);
    let (session, mut state) = session(router.local_addr().unwrap(), None, Listeners::new());
    // Our SYN (TTL 255) passes the router's check; its SYN-ACK (254) does
    // not pass ours: no connection.
    let refused = tokio::time::timeout(Duration::from_secs(3), router.accept()).await;
    assert!(refused.is_err(), "connected to a router two hops away");
    assert!(!state.borrow().is_up());
    // One hop away: the next attempt comes up.
    control.set_ttl_v4(255).unwrap();
    let (stream, _) = tokio::time::timeout(WAIT, router.accept())
        .await
        .expect("a connection from the session (TTL 255 past the router's GTSM)")
        .unwrap();
    handshake(stream, &mut state).await;
    tokio::time::timeout(WAIT, session.shutdown("done"))
        .await
        .unwrap();
}

#[tokio::test]
async fn gtsm_incoming_refuses_a_router_two_hops_away() {
    let listen = {
        let l = std::net::TcpListener::bind(localhost(0)).unwrap();
        l.local_addr().unwrap()
    };
    // The router's own port is never dialled (passive session).
    let listeners = Listeners::new();
    let (session, mut state) = session(localhost(9), Some(listen), listeners.clone());
    // The listener binds in the background (GTSM set under the same lock).
    tokio::time::timeout(WAIT, async {
        while !listeners.stats().iter().any(|l| l.local.is_some()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the listener is bound");
    assert!(
        dial(listen, 254, Duration::from_secs(2)).await.is_none(),
        "a SYN with TTL 254 was accepted"
    );
    let stream = dial(listen, 255, WAIT)
        .await
        .expect("a SYN with TTL 255 is accepted");
    handshake(stream, &mut state).await;
    tokio::time::timeout(WAIT, session.shutdown("done"))
        .await
        .unwrap();
}
