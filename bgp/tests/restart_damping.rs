//! Restart damping and timer jitter in the session driver, over in-memory
//! duplexes with tokio's paused clock (no socket, no real waiting):
//!
//! - a peer that answers every Established session with a NOTIFICATION
//!   (as one that rejects our UPDATEs does) is reconnected after
//!   1, 2, 4, 8... s (each jittered to 75-100 %), not every second;
//! - RFC 4271 section 10: the ConnectRetry schedule is jittered to 75-100 %
//!   of its nominal delays.
//!
//! Issue 13, Low list.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use bgp::fsm::{Config, PeerAs};
use bgp::listener::Listeners;
use bgp::session::{PeerConfig, Session};
use bgp::transport::{ConnectFuture, ConnectOptions, Connection, Connector, TransportError};
use bgp::wire::{
    DecodeContext, EncodeContext, HoldTime, Message, Notification, Open, read_message,
};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

const OUR_AS: u32 = 64513;
const PEER_AS: u32 = 64512;
const PEER: &str = "192.0.2.1:179";
const LOCAL: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 11);

/// Hands the session a duplex per attempt (or refuses it), and the test
/// the other end with the attempt's time.
struct MemConnector {
    refuse: bool,
    peers: mpsc::UnboundedSender<(Instant, Option<DuplexStream>)>,
}

impl Connector for MemConnector {
    fn connect(&self, opts: ConnectOptions) -> ConnectFuture {
        let now = Instant::now();
        if self.refuse {
            let _ = self.peers.send((now, None));
            return Box::pin(async {
                Err(TransportError::Socket {
                    op: "connect".into(),
                    source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
                })
            });
        }
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        let _ = self.peers.send((now, Some(theirs)));
        Box::pin(async move {
            let (read, write) = tokio::io::split(ours);
            Ok(Connection {
                local: SocketAddr::new(IpAddr::V4(LOCAL), 40000),
                remote: opts.peer,
                read: Box::new(read),
                write: Box::new(write),
                tcp: None,
            })
        })
    }
}

fn spawn(
    refuse: bool,
) -> (
    Session,
    mpsc::UnboundedReceiver<(Instant, Option<DuplexStream>)>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut fsm = Config::new(OUR_AS, PeerAs::Fixed(PEER_AS), "node-1");
    fsm.router_id = Some(LOCAL);
    fsm.families = vec![bgp::wire::Family::IPV4_UNICAST];
    let config = PeerConfig::new(fsm, PEER.parse().unwrap());
    let connector = MemConnector { refuse, peers: tx };
    let session =
        Session::spawn_with_connector(config, None, Listeners::new(), Arc::new(connector)).unwrap();
    (session, rx)
}

async fn next(stream: &mut DuplexStream, buf: &mut BytesMut) -> Option<Message> {
    let decode = DecodeContext {
        four_octet_as: true,
        ..DecodeContext::default()
    };
    loop {
        if let Some(m) = read_message(buf, &decode).expect("valid message") {
            return Some(m);
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn send(stream: &mut DuplexStream, m: Message) {
    let mut out = BytesMut::new();
    m.encode(
        &EncodeContext {
            four_octet_as: true,
            ..EncodeContext::default()
        },
        &mut out,
    )
    .unwrap();
    stream.write_all(&out).await.unwrap();
}

/// Plays a peer that brings the session to Established and then rejects
/// it with UPDATE Message Error / Malformed Attribute List.
async fn establish_then_reject(mut stream: DuplexStream) {
    let mut buf = BytesMut::new();
    assert!(matches!(
        next(&mut stream, &mut buf).await,
        Some(Message::Open(_))
    ));
    let mine = Config::new(PEER_AS, PeerAs::Fixed(OUR_AS), "router");
    let open = Open::new(
        PEER_AS,
        HoldTime::new(90).unwrap(),
        Ipv4Addr::new(192, 0, 2, 1),
        mine.local_capabilities().to_capabilities(),
    );
    send(&mut stream, Message::Open(open)).await;
    send(&mut stream, Message::Keepalive).await;
    assert!(matches!(
        next(&mut stream, &mut buf).await,
        Some(Message::Keepalive)
    ));
    send(
        &mut stream,
        Message::Notification(Notification::MalformedAttributeList),
    )
    .await;
    drop(stream);
}

/// The gaps between consecutive connection attempts, in seconds.
fn gaps(times: &[Instant]) -> Vec<f64> {
    times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn restarts_after_notifications_back_off_exponentially() {
    let (session, mut rx) = spawn(false);
    let mut times = Vec::new();
    for _ in 0..7 {
        let (at, stream) = rx.recv().await.expect("a connection attempt");
        times.push(at);
        tokio::spawn(establish_then_reject(stream.expect("a stream")));
    }
    let g = gaps(&times);
    // Before damping each restart came 1 s after the NOTIFICATION.
    for (i, gap) in g.iter().enumerate() {
        let nominal = f64::from(1u32 << i);
        assert!(
            *gap >= nominal * 0.75 && *gap <= nominal + 0.1,
            "restart {} after {gap:.3} s, want 75-100 % of {nominal} s: {g:?}",
            i + 1
        );
    }
    // Jittered: not every gap is its nominal value.
    assert!(
        g.iter()
            .enumerate()
            .any(|(i, gap)| (gap - f64::from(1u32 << i)).abs() > 0.01),
        "no jitter: {g:?}"
    );
    session.shutdown("done").await;
}

#[tokio::test(start_paused = true)]
async fn the_connect_retry_schedule_is_jittered() {
    let (session, mut rx) = spawn(true);
    let mut times = Vec::new();
    for _ in 0..7 {
        let (at, _) = rx.recv().await.expect("a connection attempt");
        times.push(at);
    }
    let g = gaps(&times);
    // Attempt n waits 1, 2, 4, 8, 16, 30 s nominally (the 30 s cap).
    for (i, gap) in g.iter().enumerate() {
        let nominal = f64::from((1u32 << i).min(30));
        assert!(
            *gap >= nominal * 0.75 && *gap <= nominal + 0.1,
            "attempt {} after {gap:.3} s, want 75-100 % of {nominal} s: {g:?}",
            i + 2
        );
    }
    assert!(
        g.iter()
            .enumerate()
            .any(|(i, gap)| (gap - f64::from((1u32 << i).min(30))).abs() > 0.01),
        "no jitter: {g:?}"
    );
    session.shutdown("done").await;
}
