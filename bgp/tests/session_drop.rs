//! Dropping a [`Session`] without shutting it down ends every task it
//! spawned: a connection attempt under way is abandoned, and the reader of
//! an Established connection lets go of its socket (the peer sees the
//! connection close). Over in-memory duplexes. Issue 13, Low list.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bgp::fsm::{Config, FsmState, PeerAs};
use bgp::listener::Listeners;
use bgp::session::{PeerConfig, Session};
use bgp::transport::{ConnectFuture, ConnectOptions, Connection, Connector};
use bgp::wire::{DecodeContext, EncodeContext, HoldTime, Message, Open, read_message};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;

const OUR_AS: u32 = 64513;
const PEER_AS: u32 = 64512;
const LOCAL: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 11);

/// Sets its flag when dropped.
struct Flag(Arc<AtomicBool>);

impl Drop for Flag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A connection attempt that never completes and says when it is dropped.
struct Hanging(Arc<AtomicBool>);

impl Connector for Hanging {
    fn connect(&self, _opts: ConnectOptions) -> ConnectFuture {
        let flag = Flag(self.0.clone());
        Box::pin(async move {
            let _flag = flag;
            std::future::pending().await
        })
    }
}

/// Hands the session a duplex, the test its other end.
struct Mem(mpsc::UnboundedSender<DuplexStream>);

impl Connector for Mem {
    fn connect(&self, opts: ConnectOptions) -> ConnectFuture {
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        let _ = self.0.send(theirs);
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

fn spawn(connector: impl Connector) -> Session {
    let mut fsm = Config::new(OUR_AS, PeerAs::Fixed(PEER_AS), "node-1");
    fsm.router_id = Some(LOCAL);
    fsm.families = vec![bgp::wire::Family::IPV4_UNICAST];
    // Long enough that no timer of the test's own making interferes.
    fsm.connect_time = Some(60);
    let config = PeerConfig::new(fsm, "192.0.2.1:179".parse().unwrap());
    Session::spawn_with_connector(config, None, Listeners::new(), Arc::new(connector)).unwrap()
}

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("in time")
}

#[tokio::test]
async fn a_connection_attempt_ends_with_the_session() {
    let dropped = Arc::new(AtomicBool::new(false));
    let session = spawn(Hanging(dropped.clone()));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!dropped.load(Ordering::SeqCst), "the attempt is under way");
    drop(session);
    within(async {
        while !dropped.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn an_established_connection_is_closed_when_the_session_is_dropped() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let session = spawn(Mem(tx));
    let mut stream = within(rx.recv()).await.expect("a connection");
    let mut buf = BytesMut::new();
    let decode = DecodeContext {
        four_octet_as: true,
        ..DecodeContext::default()
    };
    let next = async |stream: &mut DuplexStream, buf: &mut BytesMut| loop {
        if let Some(m) = read_message(buf, &decode).expect("valid") {
            return Some(m);
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    assert!(matches!(
        within(next(&mut stream, &mut buf)).await,
        Some(Message::Open(_))
    ));
    let mine = Config::new(PEER_AS, PeerAs::Fixed(OUR_AS), "router");
    let open = Open::new(
        PEER_AS,
        HoldTime::new(90).unwrap(),
        Ipv4Addr::new(192, 0, 2, 1),
        mine.local_capabilities().to_capabilities(),
    );
    for m in [Message::Open(open), Message::Keepalive] {
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
    let mut state = session.state();
    within(state.wait_for(|s| s.fsm_state == FsmState::Established))
        .await
        .unwrap();
    drop(state);
    drop(session);
    // Whatever was still written, then the end of the stream: nobody
    // holds our side any more.
    within(async { while next(&mut stream, &mut buf).await.is_some() {} }).await;
}
