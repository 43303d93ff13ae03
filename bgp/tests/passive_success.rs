//! A session whose own connection attempt hangs, while the peer connects
//! to our listener and the session is Established over that connection:
//! the abandoned attempt leaves no "no answer within the connect retry
//! time" as the session's last error. Loopback TCP for the peer's side
//! (127.0.0.2 to our listener on 127.0.0.1), a connector that never
//! answers for ours. Issue 13, Low list.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bgp::fsm::{Config, FsmState, PeerAs};
use bgp::listener::Listeners;
use bgp::session::{PeerConfig, Session};
use bgp::transport::{ConnectFuture, ConnectOptions, Connector};
use bgp::wire::{DecodeContext, EncodeContext, HoldTime, Message, Open, read_message};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const OUR_AS: u32 = 64513;
const PEER_AS: u32 = 64512;

/// Our attempts never complete.
struct Hanging;

impl Connector for Hanging {
    fn connect(&self, _opts: ConnectOptions) -> ConnectFuture {
        Box::pin(std::future::pending())
    }
}

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("in time")
}

async fn next(stream: &mut TcpStream, buf: &mut BytesMut) -> Option<Message> {
    let decode = DecodeContext {
        four_octet_as: true,
        ..DecodeContext::default()
    };
    loop {
        if let Some(m) = read_message(buf, &decode).expect("valid") {
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

#[tokio::test]
async fn an_attempt_abandoned_for_the_peers_connection_is_no_error() {
    let listen = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut fsm = Config::new(OUR_AS, PeerAs::Fixed(PEER_AS), "node-1");
    fsm.router_id = Some(Ipv4Addr::new(192, 0, 2, 11));
    fsm.families = vec![bgp::wire::Family::IPV4_UNICAST];
    // Our attempt stays under way the whole test.
    fsm.connect_time = Some(60);
    let mut config = PeerConfig::new(fsm, "127.0.0.2:179".parse().unwrap());
    config.listen = Some(listen);
    let session =
        Session::spawn_with_connector(config, None, Listeners::new(), Arc::new(Hanging)).unwrap();
    // The peer dials in (the listener may need a moment to bind).
    let mut stream = within(async {
        loop {
            let s = TcpSocket::new_v4().unwrap();
            s.bind(SocketAddr::new("127.0.0.2".parse().unwrap(), 0))
                .unwrap();
            match s.connect(listen).await {
                Ok(c) => return c,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    })
    .await;
    let mut buf = BytesMut::new();
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
    // Let the driver carry out the FSM's outputs of that transition.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let s = session.state().borrow().clone();
    assert_eq!(s.fsm_state, FsmState::Established);
    assert_eq!(s.last_error, None, "{:?}", s.last_error);
    within(session.shutdown("done")).await;
}
