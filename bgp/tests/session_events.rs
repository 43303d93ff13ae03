//! A follower that subscribes to a session's events after the session has
//! moved loses nothing it needs: every subscription starts with the state
//! the session is in ([`SessionEvent::Current`]: FSM state, negotiation,
//! last error), taken atomically with the subscription, then every event
//! after it. The session task starts running as soon as it is spawned, so
//! an `events()` call right after `spawn` may come after the negotiation:
//! CI lost a `negotiated` event that way (issue 27, item 1). Over in-memory
//! duplexes.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bgp::fsm::{Config, FsmState, PeerAs};
use bgp::listener::Listeners;
use bgp::session::{PeerConfig, Session, SessionEvent};
use bgp::transport::{ConnectFuture, ConnectOptions, Connection, Connector};
use bgp::wire::{EncodeContext, HoldTime, Message, Open};
use bytes::BytesMut;
use tokio::io::{AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;

const OUR_AS: u32 = 64513;
const PEER_AS: u32 = 64512;
const LOCAL: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 11);

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

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("in time")
}

/// A session Established with a scripted peer (which never reads: the
/// duplex buffer takes what we send); returns the peer's end.
async fn established() -> (Session, DuplexStream) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut fsm = Config::new(OUR_AS, PeerAs::Fixed(PEER_AS), "node-1");
    fsm.router_id = Some(LOCAL);
    fsm.families = vec![bgp::wire::Family::IPV4_UNICAST];
    fsm.connect_time = Some(60);
    let config = PeerConfig::new(fsm, "192.0.2.1:179".parse().unwrap());
    let session =
        Session::spawn_with_connector(config, None, Listeners::new(), Arc::new(Mem(tx))).unwrap();
    let mut stream = within(rx.recv()).await.expect("a connection");
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
    (session, stream)
}

#[tokio::test]
async fn a_late_subscriber_is_told_the_negotiation_it_missed() {
    let (session, stream) = established().await;
    // Every event so far was sent before this subscription.
    let mut events = session.events();
    let first = within(events.recv()).await.unwrap();
    let SessionEvent::Current {
        state,
        negotiated,
        last_error,
    } = first
    else {
        panic!("the first event of a subscription is the current state: {first:?}");
    };
    assert_eq!(state, FsmState::Established);
    let n = negotiated.expect("the negotiation of the Established connection");
    assert_eq!(n.peer_as, PEER_AS);
    assert_eq!(n.local, SocketAddr::new(IpAddr::V4(LOCAL), 40000));
    assert_eq!(n.hold_time, 90);
    assert!(n.capabilities.route_refresh, "{n:?}");
    assert_eq!(last_error, None);
    // Nothing else is replayed: the next event is a new one.
    assert!(events.try_recv().is_err());

    // What happens after the subscription arrives as events: the peer
    // closes, the session leaves Established with an error.
    drop(stream);
    let mut left = false;
    let mut error = false;
    within(async {
        while !(left && error) {
            match events.recv().await.unwrap() {
                SessionEvent::StateChanged {
                    from: FsmState::Established,
                    ..
                } => left = true,
                SessionEvent::Error { .. } => error = true,
                _ => {}
            }
        }
    })
    .await;
    // A subscriber from now on: no negotiation (the connection is gone),
    // the error that ended it.
    let mut late = session.events();
    match within(late.recv()).await.unwrap() {
        SessionEvent::Current {
            state,
            negotiated,
            last_error,
        } => {
            assert_ne!(state, FsmState::Established);
            assert_eq!(negotiated, None);
            assert!(last_error.is_some());
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_early_subscriber_sees_every_transition_after_its_current_state() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut fsm = Config::new(OUR_AS, PeerAs::Fixed(PEER_AS), "node-1");
    fsm.router_id = Some(LOCAL);
    fsm.families = vec![bgp::wire::Family::IPV4_UNICAST];
    fsm.connect_time = Some(60);
    let config = PeerConfig::new(fsm, "192.0.2.1:179".parse().unwrap());
    let session =
        Session::spawn_with_connector(config, None, Listeners::new(), Arc::new(Mem(tx))).unwrap();
    let mut events = session.events();
    // The connection is handed out, but the peer has sent nothing: the
    // session cannot be past OpenSent.
    let _stream = within(rx.recv()).await.expect("a connection");
    let first = within(events.recv()).await.unwrap();
    let SessionEvent::Current {
        state, negotiated, ..
    } = first
    else {
        panic!("{first:?}");
    };
    assert!(
        matches!(
            state,
            FsmState::Idle | FsmState::Connect | FsmState::OpenSent
        ),
        "{state:?}"
    );
    assert_eq!(negotiated, None);
    // The transitions that follow chain from that state, none missing.
    let mut at = state;
    while at != FsmState::OpenSent {
        match within(events.recv()).await.unwrap() {
            SessionEvent::StateChanged { from, to, .. } => {
                assert_eq!(from, at, "a transition missing before {from:?} -> {to:?}");
                at = to;
            }
            other => panic!("{other:?}"),
        }
    }
}
