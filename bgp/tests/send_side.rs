//! Send-side liveness and backpressure of the session driver, run over
//! in-memory duplex streams (no sockets): the peer is this test, speaking
//! BGP with the crate's codec, and it can stop reading so that the
//! session's output blocks (the duplex buffer is small).
//!
//! - a peer that stops reading but keeps sending KEEPALIVEs is closed with
//!   Send Hold Timer Expired (RFC 9687) after the SendHoldTime;
//! - 10,000 announce/withdraw flips of one prefix while the output is
//!   blocked send only the final state once the peer reads again.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use bgp::fsm::{Config, FsmState, PeerAs};
use bgp::listener::Listeners;
use bgp::rib_out::Advertisement;
use bgp::session::{PeerConfig, Session};
use bgp::state::SessionState;
use bgp::transport::{ConnectFuture, ConnectOptions, Connection, Connector};
use bgp::wire::{
    Community, DecodeContext, EncodeContext, Message, Notification, Prefix, negotiate, read_message,
};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::{mpsc, watch};

const OUR_AS: u32 = 64513;
const PEER_AS: u32 = 64512;
const PEER: &str = "192.0.2.1:179";
const LOCAL: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 11);

/// Hands the session one end of a duplex of `buffer` bytes per connection
/// and the test the other.
struct MemConnector {
    buffer: usize,
    port: AtomicU16,
    peers: mpsc::UnboundedSender<DuplexStream>,
}

impl Connector for MemConnector {
    fn connect(&self, opts: ConnectOptions) -> ConnectFuture {
        let (ours, theirs) = tokio::io::duplex(self.buffer);
        let port = self.port.fetch_add(1, Ordering::Relaxed);
        let sent = self.peers.send(theirs);
        Box::pin(async move {
            if sent.is_err() {
                return Err(bgp::transport::TransportError::ConnectTimeout {
                    peer: opts.peer,
                    timeout: opts.timeout,
                });
            }
            let (read, write) = tokio::io::split(ours);
            Ok(Connection {
                local: SocketAddr::new(IpAddr::V4(LOCAL), port),
                remote: opts.peer,
                read: Box::new(read),
                write: Box::new(write),
                tcp: None,
            })
        })
    }
}

fn our_config(send_hold_time: Option<u32>) -> Config {
    let mut c = Config::new(OUR_AS, PeerAs::Fixed(PEER_AS), "node-1");
    c.router_id = Some(LOCAL);
    c.families = vec![bgp::wire::Family::IPV4_UNICAST];
    c.hold_time = Some(30);
    c.send_hold_time = send_hold_time;
    c
}

fn spawn(fsm: Config, buffer: usize) -> (Session, mpsc::UnboundedReceiver<DuplexStream>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let connector = MemConnector {
        buffer,
        port: AtomicU16::new(40000),
        peers: tx,
    };
    let config = PeerConfig::new(fsm, PEER.parse().unwrap());
    let session =
        Session::spawn_with_connector(config, None, Listeners::new(), Arc::new(connector)).unwrap();
    (session, rx)
}

/// The test's side of one connection.
struct Peer {
    stream: DuplexStream,
    buf: BytesMut,
    decode: DecodeContext,
    encode: EncodeContext,
}

impl Peer {
    /// Takes the session's connection and brings it to Established.
    async fn establish(
        peers: &mut mpsc::UnboundedReceiver<DuplexStream>,
        ours: &Config,
        state: &mut watch::Receiver<SessionState>,
    ) -> Peer {
        let stream = within(10, peers.recv()).await.expect("a connection");
        let mine = Config::new(PEER_AS, PeerAs::Fixed(OUR_AS), "router");
        let negotiated = negotiate(&mine.local_capabilities(), &ours.local_capabilities());
        let mut peer = Peer {
            stream,
            buf: BytesMut::new(),
            decode: DecodeContext::default(),
            encode: EncodeContext::default(),
        };
        assert!(matches!(peer.next().await, Some(Message::Open(_))));
        peer.send(&Message::Open(
            mine.open_message(Ipv4Addr::new(192, 0, 2, 1)),
        ))
        .await;
        peer.send(&Message::Keepalive).await;
        peer.decode = negotiated.decode_context(false);
        peer.encode = negotiated.encode_context();
        assert!(matches!(peer.next().await, Some(Message::Keepalive)));
        within(10, state.wait_for(|s| s.fsm_state == FsmState::Established))
            .await
            .unwrap();
        // The initial round: nothing to announce, End-of-RIB.
        match peer.next().await {
            Some(Message::Update(u)) => assert!(u.end_of_rib_family().is_some(), "{u:?}"),
            other => panic!("expected End-of-RIB, got {other:?}"),
        }
        peer
    }

    async fn send(&mut self, m: &Message) {
        self.try_send(m).await.unwrap();
    }

    async fn try_send(&mut self, m: &Message) -> std::io::Result<()> {
        let mut out = BytesMut::new();
        m.encode(&self.encode, &mut out).unwrap();
        self.stream.write_all(&out).await
    }

    /// The next message, `None` at the end of the stream; 10 s at most.
    async fn next(&mut self) -> Option<Message> {
        self.next_within(Duration::from_secs(10))
            .await
            .expect("a message within 10 s")
    }

    /// `Err` when nothing comes within `wait`.
    async fn next_within(&mut self, wait: Duration) -> Result<Option<Message>, ()> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(m) = read_message(&mut self.buf, &self.decode).expect("valid message") {
                return Ok(Some(m));
            }
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout_at(deadline, self.stream.read(&mut chunk))
                .await
                .map_err(|_| ())?
                .unwrap_or(0);
            if n == 0 {
                return Ok(None);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

async fn within<F: std::future::Future>(secs: u64, f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .expect("in time")
}

fn host(a: u8, b: u8, c: u8, d: u8) -> Advertisement {
    Advertisement::host(IpAddr::V4(Ipv4Addr::new(a, b, c, d)))
}

/// `n` host routes of 198.51.100.0/24, each with its own community, so
/// that each takes an UPDATE of its own.
fn bulk(n: u8) -> Vec<Advertisement> {
    (0..n)
        .map(|i| host(198, 51, 100, i).with_communities([Community::new(64513, u16::from(i))]))
        .collect()
}

/// A peer that stops reading (while its KEEPALIVEs keep our hold timer
/// running) is closed with Send Hold Timer Expired once the session's
/// output has waited the SendHoldTime (2 s here): the session leaves
/// Established, goes Idle and says why; the NOTIFICATION (8/0) is queued
/// after what was waiting, so a peer that reads again in time gets it.
#[tokio::test]
async fn a_peer_that_stops_reading_is_closed_with_send_hold_timer_expired() {
    let ours = our_config(Some(2));
    let (session, mut peers) = spawn(ours.clone(), 1024);
    let mut state = session.state();
    let mut peer = Peer::establish(&mut peers, &ours, &mut state).await;

    // Stop reading; more output than the duplex holds.
    session.set_advertisements(bulk(200)).unwrap();
    let blocked = tokio::time::Instant::now();
    // Keep sending KEEPALIVEs (every 500 ms, hold time 30 s): the hold
    // timer never expires, only the send hold timer can end the session.
    let left = loop {
        // The session may be gone already (checked just below).
        let _ = peer.try_send(&Message::Keepalive).await;
        let s = state.borrow().clone();
        if s.fsm_state != FsmState::Established {
            break s;
        }
        assert!(
            blocked.elapsed() < Duration::from_secs(10),
            "still Established 10 s after the peer stopped reading"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let after = blocked.elapsed();
    assert!(
        after >= Duration::from_millis(1900),
        "left Established after {after:?}, before the send hold time"
    );
    let error = left.last_error.expect("an error").text;
    assert!(error.contains("Send Hold Timer Expired"), "{error}");
    within(10, state.wait_for(|s| s.fsm_state != FsmState::Established))
        .await
        .unwrap();

    // Reading again (within the close's flush bound): what was waiting,
    // then the NOTIFICATION, then the end of the stream.
    let mut updates = 0;
    let notification = loop {
        match peer.next().await {
            Some(Message::Update(_)) => updates += 1,
            Some(Message::Keepalive) => {}
            Some(Message::Notification(n)) => break n,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(notification, Notification::SendHoldTimerExpired);
    assert!(updates > 0);
    assert!(peer.next().await.is_none(), "the connection is closed");
    assert_eq!(session.state().borrow().sent.notifications, 1);
}

/// While the peer does not read, 10,000 announce/withdraw flips of one
/// prefix coalesce in the Adj-RIB-Out: when it reads again it gets what
/// was already on the way, then that prefix once, in its final state.
#[tokio::test]
async fn flips_while_blocked_send_only_the_final_state() {
    let ours = our_config(None);
    let (session, mut peers) = spawn(ours.clone(), 512);
    let mut state = session.state();
    let mut peer = Peer::establish(&mut peers, &ours, &mut state).await;

    // The peer stops reading; 100 UPDATEs fill the duplex and block.
    let base = bulk(100);
    session.set_advertisements(base.clone()).unwrap();
    let flip = host(192, 0, 2, 10);
    let last = host(192, 0, 2, 20);
    for i in 0..10_000 {
        let mut set = base.clone();
        if i % 2 == 0 {
            set.push(flip.clone());
        }
        session.set_advertisements(set).unwrap();
    }
    // The final state: the flipped prefix announced, and one more (which
    // tells when the session task has taken every change).
    let mut set = base.clone();
    set.push(flip.clone());
    set.push(last.clone());
    session.set_advertisements(set).unwrap();
    let s = within(
        60,
        state.wait_for(|s| s.rib_out.families[0].prefixes_desired == 102),
    )
    .await
    .unwrap()
    .clone();
    assert_eq!(s.fsm_state, FsmState::Established);
    assert!(
        s.sent.updates <= 101,
        "{} UPDATEs drained while the peer was not reading",
        s.sent.updates
    );

    // Read again, until nothing more comes.
    let flip_prefix = Prefix::host(flip.prefix.addr());
    let last_prefix = Prefix::host(last.prefix.addr());
    let (mut announced, mut withdrawn, mut last_seen) = (0, 0, 0);
    let mut bulk_seen = 0;
    while let Ok(Some(m)) = peer.next_within(Duration::from_secs(2)).await {
        let Message::Update(u) = m else {
            continue;
        };
        announced += u.nlri.iter().filter(|p| **p == flip_prefix).count();
        withdrawn += u.withdrawn.iter().filter(|p| **p == flip_prefix).count();
        last_seen += u.nlri.iter().filter(|p| **p == last_prefix).count();
        bulk_seen += u
            .nlri
            .iter()
            .filter(|p| *p != &flip_prefix && *p != &last_prefix)
            .count();
    }
    assert_eq!(bulk_seen, 100, "every bulk prefix once");
    assert_eq!(
        (announced, withdrawn, last_seen),
        (1, 0, 1),
        "the flipped prefix once, announced (its final state)"
    );
    let s = session.state().borrow().clone();
    assert_eq!(s.fsm_state, FsmState::Established);
    assert_eq!(s.rib_out.families[0].prefixes_advertised, 102);
    session.shutdown("done").await;
}
