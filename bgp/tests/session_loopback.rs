//! The session driver ([`bgp::session::Session`]) against a scripted peer
//! on the loopback interface: the test is the router, on a port the kernel
//! picked free on 127.0.0.1, and reads and writes raw BGP messages. No
//! packet leaves `lo`.
//!
//! What it shows: a hold-down ([`Session::hold_down`]) keeps the session
//! Idle (no reconnection, an incoming connection closed without an OPEN)
//! until [`Session::release`], which brings it back with the same
//! advertisements; the NOTIFICATION on the wire is Cease/Hard Reset
//! wrapping the caller's Cease subcode when the RFC 8538 N bit was
//! negotiated, the plain Cease otherwise; [`Session::reset`], by contrast,
//! comes back by itself about a second later. A router that negotiated
//! graceful restart and dials in again while its old session is still
//! Established (it restarted) gets the new session at once (RFC 4724
//! section 4.2), not after our hold timer.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use bgp::fsm::{CeaseSubcode, Config, FsmState, PeerAs};
use bgp::listener::Listeners;
use bgp::rib_out::Advertisement;
use bgp::session::{PeerConfig, Session};
use bgp::state::SessionState;
use bgp::wire::{
    BytesMut, Capability, DecodeContext, EncodeContext, Family, GracefulRestart,
    GracefulRestartFamily, HoldTime, Message, MessageType, Open, Prefix, frame,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const WAIT: Duration = Duration::from_secs(10);
const OUR_AS: u32 = 64513;
const ROUTER_AS: u32 = 64512;
const ROUTER_ID: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const PREFIX: &str = "198.51.100.7/32";

/// The router's end of one connection.
struct Peer {
    stream: TcpStream,
    buf: BytesMut,
}

impl Peer {
    async fn accept(listener: &TcpListener) -> Peer {
        let (stream, _) = tokio::time::timeout(WAIT, listener.accept())
            .await
            .expect("the session did not connect in time")
            .unwrap();
        Peer {
            stream,
            buf: BytesMut::new(),
        }
    }

    /// The next message's type and bytes (header included); `None` when
    /// the session closed the connection.
    async fn next(&mut self) -> Option<(MessageType, Vec<u8>)> {
        loop {
            if let Some(f) = frame(&mut self.buf, 4096).expect("a well-framed message") {
                return Some((f.message_type(), f.bytes().to_vec()));
            }
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout(WAIT, self.stream.read(&mut chunk))
                .await
                .expect("nothing from the session in time")
                .expect("read");
            if n == 0 {
                assert!(self.buf.is_empty(), "a truncated message");
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    async fn send(&mut self, message: &Message) {
        let ctx = EncodeContext {
            four_octet_as: true,
            ..EncodeContext::default()
        };
        let bytes = message.to_bytes(&ctx).unwrap();
        self.stream.write_all(&bytes).await.unwrap();
    }

    /// Answers the session's OPEN (graceful restart offered with the N bit
    /// as given, or not at all), confirms it and returns the prefixes of
    /// the session's first round of UPDATEs, up to its End-of-RIB.
    async fn handshake(&mut self, gr_n_bit: Option<bool>) -> Vec<Prefix> {
        let (t, _) = self.next().await.expect("the session's OPEN");
        assert_eq!(t, MessageType::Open);
        let mut caps = vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::RouteRefresh,
            Capability::FourOctetAs(ROUTER_AS),
        ];
        if let Some(n) = gr_n_bit {
            caps.push(Capability::GracefulRestart(GracefulRestart {
                flags: if n { GracefulRestart::NOTIFICATION } else { 0 },
                restart_time: 120,
                families: vec![GracefulRestartFamily {
                    family: Family::IPV4_UNICAST,
                    flags: 0,
                }],
            }));
        }
        let open = Open::new(ROUTER_AS, HoldTime::new(90).unwrap(), ROUTER_ID, caps);
        self.send(&Message::Open(open)).await;
        self.send(&Message::Keepalive).await;
        let ctx = DecodeContext {
            four_octet_as: true,
            ..DecodeContext::default()
        };
        let mut prefixes = Vec::new();
        loop {
            let (t, bytes) = self.next().await.expect("the session's UPDATEs");
            match t {
                MessageType::Keepalive => continue,
                MessageType::Update => {}
                other => panic!("unexpected {other:?}"),
            }
            let mut buf = BytesMut::from(&bytes[..]);
            let update = match frame(&mut buf, 4096).unwrap().unwrap().decode(&ctx) {
                Ok(Message::Update(u)) => u,
                other => panic!("{other:?}"),
            };
            if update.end_of_rib_family() == Some(Family::IPV4_UNICAST) {
                return prefixes;
            }
            prefixes.extend(update.nlri);
        }
    }

    /// The NOTIFICATION the session sends, as (code, subcode, data) read
    /// from the bytes on the wire; then the session closes.
    async fn notification(&mut self) -> (u8, u8, Vec<u8>) {
        let bytes = loop {
            match self.next().await.expect("a NOTIFICATION before the close") {
                (MessageType::Keepalive, _) => continue,
                (MessageType::Notification, bytes) => break bytes,
                (other, _) => panic!("unexpected {other:?}"),
            }
        };
        assert!(self.next().await.is_none(), "the session closes after it");
        (bytes[19], bytes[20], bytes[21..].to_vec())
    }
}

struct Setup {
    session: Session,
    state: watch::Receiver<SessionState>,
    router: TcpListener,
}

/// A router listening on 127.0.0.1 and an eBGP session to it offering
/// graceful restart with the N bit, announcing [`PREFIX`]; `listen`: the
/// session also accepts connections on this address.
async fn setup(listen: Option<SocketAddr>) -> Setup {
    let router = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut fsm = Config::new(OUR_AS, PeerAs::Fixed(ROUTER_AS), "node-1");
    fsm.enable_graceful_restart(120, true, false);
    let mut peer = PeerConfig::new(fsm, router.local_addr().unwrap());
    peer.listen = listen;
    let session = Session::spawn_with_listeners(peer, None, Listeners::new()).unwrap();
    session
        .set_advertisements(vec![Advertisement::new(PREFIX.parse().unwrap())])
        .unwrap();
    let state = session.state();
    Setup {
        session,
        state,
        router,
    }
}

async fn wait_for(
    state: &mut watch::Receiver<SessionState>,
    what: &str,
    f: impl Fn(&SessionState) -> bool,
) -> SessionState {
    let waited = tokio::time::timeout(WAIT, state.wait_for(|s| f(s)))
        .await
        .map(|r| r.unwrap().clone());
    waited.unwrap_or_else(|_| panic!("not {what} in time: {:?}", state.borrow()))
}

fn prefix() -> Vec<Prefix> {
    vec![PREFIX.parse().unwrap()]
}

/// A port free on 127.0.0.1 right now.
fn free_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

#[tokio::test]
async fn hold_down_keeps_the_session_idle_until_released() {
    let listen = free_port();
    let Setup {
        session,
        mut state,
        router,
    } = setup(Some(listen)).await;
    let mut peer = Peer::accept(&router).await;
    assert_eq!(peer.handshake(Some(true)).await, prefix());
    wait_for(&mut state, "Established", |s| s.is_up()).await;

    session
        .hold_down("BFD down", CeaseSubcode::BfdDown)
        .unwrap();
    // N bit negotiated: Cease/Hard Reset (6/9) whose data is the caller's
    // Cease (6/10, BFD Down) with no data of its own.
    assert_eq!(peer.notification().await, (6, 9, vec![6, 10]));
    let held = wait_for(&mut state, "held down", |s| {
        s.held_down && s.fsm_state == FsmState::Idle
    })
    .await;
    let opens = held.sent.opens;
    // The advertisements stay (the peer has none of them now).
    let desired: usize = held
        .rib_out
        .families
        .iter()
        .map(|f| f.prefixes_desired)
        .sum();
    assert_eq!(desired, 1, "{:?}", held.rib_out);
    assert_eq!(held.rib_out.prefixes_advertised(), 0);

    // Held: no connection attempt where a reset would have come back
    // after a second (and again after two).
    let attempt = tokio::time::timeout(Duration::from_secs(4), router.accept()).await;
    assert!(attempt.is_err(), "the session connected while held down");
    // The peer dialling in is accepted by the shared listener and closed at
    // once, without our OPEN.
    let mut inbound = tokio::time::timeout(WAIT, async {
        loop {
            match TcpStream::connect(listen).await {
                Ok(s) => return s,
                // The listener binds in the background.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await
    .expect("the listener is kept while held down");
    let mut byte = [0u8; 1];
    let n = tokio::time::timeout(WAIT, inbound.read(&mut byte))
        .await
        .expect("the incoming connection is closed")
        .unwrap_or(0);
    assert_eq!(n, 0, "no OPEN on an incoming connection while held down");
    let s = state.borrow().clone();
    assert_eq!(s.fsm_state, FsmState::Idle);
    assert!(s.held_down);
    assert_eq!(s.sent.opens, opens, "no OPEN sent while held down");

    // Released: it connects at once and announces the same prefix again.
    let released = tokio::time::Instant::now();
    session.release().unwrap();
    let mut peer = Peer::accept(&router).await;
    assert!(released.elapsed() < Duration::from_secs(2));
    assert_eq!(peer.handshake(Some(true)).await, prefix());
    let s = wait_for(&mut state, "Established again", |s| s.is_up()).await;
    assert!(!s.held_down);
    wait_for(&mut state, "the prefix advertised", |s| {
        s.rib_out.prefixes_advertised() == 1
    })
    .await;
    tokio::time::timeout(WAIT, session.shutdown("done"))
        .await
        .unwrap();
}

#[tokio::test]
async fn hold_down_without_the_n_bit_sends_the_callers_plain_cease() {
    let Setup {
        session,
        mut state,
        router,
    } = setup(None).await;
    let mut peer = Peer::accept(&router).await;
    // Graceful restart negotiated, but the router has no N bit.
    assert_eq!(peer.handshake(Some(false)).await, prefix());
    wait_for(&mut state, "Established", |s| s.is_up()).await;
    session
        .hold_down("maintenance", CeaseSubcode::OtherConfigurationChange)
        .unwrap();
    assert_eq!(peer.notification().await, (6, 6, vec![]));
    wait_for(&mut state, "held down", |s| s.held_down).await;
    // A second hold-down while held sends nothing and changes nothing.
    session
        .hold_down("again", CeaseSubcode::PeerDeconfigured)
        .unwrap();
    session.release().unwrap();
    let mut peer = Peer::accept(&router).await;
    assert_eq!(peer.handshake(None).await, prefix());
    wait_for(&mut state, "Established again", |s| s.is_up()).await;
    tokio::time::timeout(WAIT, session.shutdown("done"))
        .await
        .unwrap();
}

#[tokio::test]
async fn reset_sends_hard_reset_with_the_n_bit_and_comes_back_by_itself() {
    let Setup {
        session,
        mut state,
        router,
    } = setup(None).await;
    let mut peer = Peer::accept(&router).await;
    assert_eq!(peer.handshake(Some(true)).await, prefix());
    wait_for(&mut state, "Established", |s| s.is_up()).await;
    session.reset("BFD down").unwrap();
    assert_eq!(peer.notification().await, (6, 9, vec![6, 10]));
    // Not held: back after the IdleHold delay (1 s).
    let reset = tokio::time::Instant::now();
    let mut peer = Peer::accept(&router).await;
    assert!(reset.elapsed() < Duration::from_secs(4));
    assert!(!state.borrow().held_down);
    assert_eq!(peer.handshake(Some(true)).await, prefix());
    wait_for(&mut state, "Established again", |s| s.is_up()).await;
    tokio::time::timeout(WAIT, session.shutdown("done"))
        .await
        .unwrap();
}

/// RFC 4724 4.2: the router restarts while our session is Established (its
/// old connection still open as far as we know, our hold timer of 90 s
/// running) and dials in: the new connection wins at once, the old one is
/// closed with Cease/Connection Collision Resolution, and the prefix is
/// announced on the new session. Before, the new connection was refused
/// until the hold timer expired.
#[tokio::test]
async fn a_restarted_graceful_restart_router_gets_its_new_session_at_once() {
    let listen = free_port();
    let Setup {
        session,
        mut state,
        router,
    } = setup(Some(listen)).await;
    let mut old = Peer::accept(&router).await;
    assert_eq!(old.handshake(Some(false)).await, prefix());
    wait_for(&mut state, "Established", |s| s.is_up()).await;

    // The restarted router dials in; its old connection stays open.
    let stream = tokio::time::timeout(WAIT, async {
        loop {
            match TcpStream::connect(listen).await {
                Ok(s) => return s,
                // The listener binds in the background.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await
    .expect("the listener accepts");
    let mut new = Peer {
        stream,
        buf: BytesMut::new(),
    };
    let started = tokio::time::Instant::now();
    assert_eq!(new.handshake(Some(false)).await, prefix());
    assert!(started.elapsed() < Duration::from_secs(5));
    // No N bit negotiated: the plain Cease (6/7) on the old connection.
    assert_eq!(old.notification().await, (6, 7, vec![]));
    let s = wait_for(&mut state, "Established on the new connection", |s| {
        s.is_up() && s.rib_out.prefixes_advertised() == 1
    })
    .await;
    assert_eq!(s.fsm_state, FsmState::Established);
    tokio::time::timeout(WAIT, session.shutdown("done"))
        .await
        .unwrap();
}
