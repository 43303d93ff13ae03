//! The shared listener ([`bgp::listener::Listeners`]) on the loopback
//! interface of the test's namespace: 127.0.0.1 and ::1 on ports the
//! kernel picked free, peers told apart by their source address
//! (127.0.0.2, 127.0.0.3 ... are local on `lo`). No packet leaves `lo`.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bgp::listener::{
    ListenError, ListenEvent, ListenKey, ListenRequest, Listeners, Registration, RetryPolicy,
};
use bgp::transport::{self, ConnectOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const WAIT: Duration = Duration::from_secs(5);

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A port free on `addr` right now.
fn free_port(addr: &str) -> SocketAddr {
    let l = std::net::TcpListener::bind(SocketAddr::new(ip(addr), 0)).unwrap();
    l.local_addr().unwrap()
}

fn request(addr: SocketAddr, peer: &str, password: Option<&str>) -> ListenRequest {
    ListenRequest {
        key: ListenKey::new(addr, None),
        peer: ip(peer),
        password: password.map(str::to_owned),
        min_ttl: None,
    }
}

async fn next(reg: &mut Registration) -> ListenEvent {
    tokio::time::timeout(WAIT, reg.events.recv())
        .await
        .expect("no listener event in time")
        .expect("the registration's queue closed")
}

/// No event within a short while.
async fn quiet(reg: &mut Registration) {
    if let Ok(ev) = tokio::time::timeout(Duration::from_millis(300), reg.events.recv()).await {
        panic!("unexpected event {ev:?}");
    }
}

async fn listening(reg: &mut Registration) -> SocketAddr {
    match next(reg).await {
        ListenEvent::Listening(a) => a,
        other => panic!("want Listening, got {other:?}"),
    }
}

async fn accepted(reg: &mut Registration) -> TcpStream {
    match next(reg).await {
        ListenEvent::Accepted(s) => s,
        other => panic!("want Accepted, got {other:?}"),
    }
}

async fn failed(reg: &mut Registration) -> ListenError {
    match next(reg).await {
        ListenEvent::Failed(e) => e,
        other => panic!("want Failed, got {other:?}"),
    }
}

/// Connects to `to` from `from` (port picked by the kernel).
async fn connect_from(from: &str, to: SocketAddr) -> io::Result<TcpStream> {
    connect_within(from, to, WAIT).await
}

async fn connect_within(from: &str, to: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let socket = if to.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.bind(SocketAddr::new(ip(from), 0))?;
    tokio::time::timeout(timeout, socket.connect(to))
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
}

/// The accepted end is the client's connection: same addresses, and
/// bytes go through.
async fn same_connection(client: &mut TcpStream, server: &mut TcpStream) {
    assert_eq!(server.peer_addr().unwrap(), client.local_addr().unwrap());
    assert_eq!(server.local_addr().unwrap(), client.peer_addr().unwrap());
    client.write_all(b"open").await.unwrap();
    let mut buf = [0u8; 4];
    tokio::time::timeout(WAIT, server.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf, b"open");
}

/// The listener closed `client` at once: end of stream or reset.
async fn closed_by_listener(client: &mut TcpStream) {
    let mut buf = [0u8; 1];
    match tokio::time::timeout(WAIT, client.read(&mut buf)).await {
        Ok(Ok(0)) => {}
        Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionReset => {}
        other => panic!("the connection was not closed: {other:?}"),
    }
}

/// Two sessions' registrations on one address: each peer's connection
/// reaches its own receiver, an unknown source is closed and counted, the
/// same peer cannot register twice, and the listener closes (connection
/// refused) when the last guard drops; registering again binds again.
#[tokio::test]
async fn two_sessions_share_one_listener() {
    let listeners = Listeners::new();
    let addr = free_port("127.0.0.1");
    let mut a = listeners
        .register(request(addr, "127.0.0.2", None))
        .unwrap();
    assert_eq!(listening(&mut a).await, addr);
    let mut b = listeners
        .register(request(addr, "127.0.0.3", None))
        .unwrap();
    assert_eq!(listening(&mut b).await, addr);
    quiet(&mut a).await;

    let mut c2 = connect_from("127.0.0.2", addr).await.unwrap();
    let mut s2 = accepted(&mut a).await;
    same_connection(&mut c2, &mut s2).await;
    let mut c3 = connect_from("127.0.0.3", addr).await.unwrap();
    let mut s3 = accepted(&mut b).await;
    same_connection(&mut c3, &mut s3).await;
    quiet(&mut a).await;

    let mut unknown = connect_from("127.0.0.4", addr).await.unwrap();
    closed_by_listener(&mut unknown).await;
    quiet(&mut a).await;
    quiet(&mut b).await;
    let stats = listeners.stats();
    assert_eq!(stats.len(), 1, "{stats:?}");
    assert_eq!(stats[0].local, Some(addr));
    assert_eq!(stats[0].peers, vec![ip("127.0.0.2"), ip("127.0.0.3")]);
    assert_eq!(stats[0].rejected, 1);
    assert_eq!(listeners.rejected_total(), 1);

    let dup = listeners
        .register(request(addr, "127.0.0.2", None))
        .unwrap_err();
    assert!(matches!(dup, ListenError::Duplicate { .. }), "{dup}");

    // The first session goes: its peer is a stranger now, the other
    // session still gets its connections.
    drop(a);
    let mut c2 = connect_from("127.0.0.2", addr).await.unwrap();
    closed_by_listener(&mut c2).await;
    let mut c3 = connect_from("127.0.0.3", addr).await.unwrap();
    let mut s3 = accepted(&mut b).await;
    same_connection(&mut c3, &mut s3).await;
    assert_eq!(listeners.rejected_total(), 2);

    // The last one goes: nothing listens any more.
    drop(b);
    let err = connect_from("127.0.0.3", addr).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
    assert!(listeners.stats().is_empty());

    // A new session binds the same address again at once.
    let mut again = listeners
        .register(request(addr, "127.0.0.2", None))
        .unwrap();
    assert_eq!(listening(&mut again).await, addr);
    let mut c2 = connect_from("127.0.0.2", addr).await.unwrap();
    let mut s2 = accepted(&mut again).await;
    same_connection(&mut c2, &mut s2).await;
}

/// The same over IPv6 (`::1` is the only loopback address: one peer).
#[tokio::test]
async fn ipv6_listener_dispatches_by_peer() {
    let listeners = Listeners::new();
    let addr = free_port("::1");
    let mut a = listeners.register(request(addr, "::1", None)).unwrap();
    assert_eq!(listening(&mut a).await, addr);
    let mut c = connect_from("::1", addr).await.unwrap();
    let mut s = accepted(&mut a).await;
    same_connection(&mut c, &mut s).await;
    // An IPv4 session on the IPv6 address's port is another listener.
    let v4 = SocketAddr::new(ip("127.0.0.1"), addr.port());
    let mut b = listeners.register(request(v4, "127.0.0.2", None)).unwrap();
    assert_eq!(listening(&mut b).await, v4);
    assert_eq!(listeners.stats().len(), 2);
}

/// A busy port is an error on every registration (never a panic), is
/// retried in the background, and every registration hears when the
/// listener is bound at last.
#[tokio::test]
async fn busy_port_is_reported_to_each_registration_and_retried() {
    let listeners = Listeners::with_retry(RetryPolicy {
        first: Duration::from_millis(50),
        max: Duration::from_millis(200),
    });
    let blocker = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = blocker.local_addr().unwrap();
    let mut a = listeners
        .register(request(addr, "127.0.0.2", None))
        .unwrap();
    let mut b = listeners
        .register(request(addr, "127.0.0.3", None))
        .unwrap();
    for reg in [&mut a, &mut b] {
        match failed(reg).await {
            ListenError::Bind { kind, text, .. } => {
                assert_eq!(kind, Some(io::ErrorKind::AddrInUse));
                assert!(text.starts_with(&format!("listen on {addr}")), "{text}");
            }
            other => panic!("{other}"),
        }
    }
    // The same failure again is not repeated to those who saw it.
    tokio::time::sleep(Duration::from_millis(400)).await;
    quiet(&mut a).await;
    let stats = listeners.stats();
    assert_eq!(stats[0].local, None);
    assert!(
        stats[0]
            .last_error
            .as_ref()
            .unwrap()
            .to_string()
            .starts_with("listener disabled: listen on"),
        "{stats:?}"
    );

    drop(blocker);
    assert_eq!(listening(&mut a).await, addr);
    assert_eq!(listening(&mut b).await, addr);
    assert_eq!(listeners.stats()[0].last_error, None);
    let mut c = connect_from("127.0.0.3", addr).await.unwrap();
    let mut s = accepted(&mut b).await;
    same_connection(&mut c, &mut s).await;
}

/// Without waiting for the background retry (an hour away here), a new
/// registration on the address binds it again at once.
#[tokio::test]
async fn a_new_registration_retries_the_bind() {
    let listeners = Listeners::with_retry(RetryPolicy {
        first: Duration::from_secs(3600),
        max: Duration::from_secs(3600),
    });
    let blocker = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = blocker.local_addr().unwrap();
    let mut a = listeners
        .register(request(addr, "127.0.0.2", None))
        .unwrap();
    assert!(matches!(failed(&mut a).await, ListenError::Bind { .. }));
    drop(blocker);
    quiet(&mut a).await;
    let mut b = listeners
        .register(request(addr, "127.0.0.3", None))
        .unwrap();
    assert_eq!(listening(&mut b).await, addr);
    assert_eq!(listening(&mut a).await, addr);
    let mut c = connect_from("127.0.0.2", addr).await.unwrap();
    let mut s = accepted(&mut a).await;
    same_connection(&mut c, &mut s).await;
}

/// An address the node does not have is a bind error like a busy port.
#[tokio::test]
async fn an_address_not_on_the_node_is_an_error() {
    let listeners = Listeners::new();
    let addr: SocketAddr = "192.0.2.254:179".parse().unwrap();
    let mut a = listeners
        .register(request(addr, "192.0.2.1", None))
        .unwrap();
    match failed(&mut a).await {
        ListenError::Bind { kind, .. } => {
            assert_eq!(kind, Some(io::ErrorKind::AddrNotAvailable))
        }
        other => panic!("{other}"),
    }
}

/// Each registered peer's TCP MD5 key is on the shared listener: its
/// signed connection is taken, an unsigned one from it never completes;
/// the other session's peer (no password) is unaffected; when the
/// session goes its key goes too (an unsigned connection from the address
/// completes and is closed as a stranger's). A key the kernel refuses is
/// that session's error, without the password, and its peer's
/// connections are closed.
#[tokio::test]
async fn md5_keys_per_peer_on_the_shared_listener() {
    let listeners = Listeners::new();
    let addr = free_port("127.0.0.1");
    let mut a = listeners
        .register(request(addr, "127.0.0.2", Some("key-of-a")))
        .unwrap();
    assert_eq!(listening(&mut a).await, addr);
    let mut b = listeners
        .register(request(addr, "127.0.0.3", None))
        .unwrap();
    assert_eq!(listening(&mut b).await, addr);

    let signed_from = |from: &str, password: &str| {
        let mut o = ConnectOptions::new(addr);
        o.source = Some(ip(from));
        o.ttl = 255;
        o.password = Some(password.to_owned());
        o.timeout = Duration::from_secs(2);
        o
    };
    let signed = |password: &str| signed_from("127.0.0.2", password);
    let mut c = transport::connect(&signed("key-of-a")).await.unwrap();
    let mut s = accepted(&mut a).await;
    same_connection(&mut c, &mut s).await;
    // Unsigned or wrongly signed SYNs from the peer are dropped by the
    // kernel: no answer.
    let err = connect_from("127.0.0.2", addr).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    let err = transport::connect(&signed("other")).await.unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
    let mut c = connect_from("127.0.0.3", addr).await.unwrap();
    let mut s = accepted(&mut b).await;
    same_connection(&mut c, &mut s).await;

    // A peer registering on the running listener: its key is added.
    let mut e = listeners
        .register(request(addr, "127.0.0.5", Some("key-of-e")))
        .unwrap();
    assert_eq!(listening(&mut e).await, addr);
    let mut c = transport::connect(&signed_from("127.0.0.5", "key-of-e"))
        .await
        .unwrap();
    let mut s = accepted(&mut e).await;
    same_connection(&mut c, &mut s).await;
    let err = connect_within("127.0.0.5", addr, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    quiet(&mut e).await;

    drop(a);
    let mut c = connect_from("127.0.0.2", addr).await.unwrap();
    closed_by_listener(&mut c).await;

    let long = format!("s3cret{}", "x".repeat(80));
    let mut d = listeners
        .register(request(addr, "127.0.0.4", Some(&long)))
        .unwrap();
    assert_eq!(listening(&mut d).await, addr);
    let err = failed(&mut d).await;
    let text = err.to_string();
    assert!(
        text.starts_with("listener disabled for 127.0.0.4: set TCP_MD5SIG"),
        "{text}"
    );
    assert!(!text.contains("s3cret"), "{text}");
    assert!(!format!("{err:?}").contains("s3cret"));
    assert!(!format!("{listeners:?}").contains("s3cret"));
    let rejected = listeners.rejected_total();
    let mut c = connect_from("127.0.0.4", addr).await.unwrap();
    closed_by_listener(&mut c).await;
    assert_eq!(listeners.rejected_total(), rejected + 1);
    quiet(&mut d).await;
}

/// Two sessions listening on the same address (before the shared
/// listener the second got "address in use"): each one is handed its own
/// peer's connection and answers it with its OPEN.
#[tokio::test]
async fn two_sessions_on_one_listen_address() {
    use bgp::fsm::{Config, FsmState, PeerAs};
    use bgp::session::{PeerConfig, Session};

    let listeners = Listeners::new();
    let addr = free_port("127.0.0.1");
    let spawn = |peer: &str| {
        let mut fsm = Config::new(64513, PeerAs::Fixed(64512), "node");
        fsm.passive_tcp_establishment = true;
        let mut p = PeerConfig::new(fsm, SocketAddr::new(ip(peer), 179));
        p.listen = Some(addr);
        Session::spawn_with_listeners(p, None, listeners.clone()).unwrap()
    };
    let a = spawn("127.0.0.2");
    let b = spawn("127.0.0.3");
    let both = || {
        listeners
            .stats()
            .first()
            .is_some_and(|s| s.local == Some(addr) && s.peers.len() == 2)
    };
    tokio::time::timeout(WAIT, async {
        while !both() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{:?}", listeners.stats()));

    for (session, other, from) in [(&a, &b, "127.0.0.2"), (&b, &a, "127.0.0.3")] {
        let mut c = connect_from(from, addr).await.unwrap();
        let mut header = [0u8; 19];
        tokio::time::timeout(WAIT, c.read_exact(&mut header))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(header[..16], [0xff; 16]);
        assert_eq!(header[18], 1, "an OPEN");
        let mut state = session.state();
        tokio::time::timeout(WAIT, state.wait_for(|s| s.fsm_state == FsmState::OpenSent))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(other.state().borrow().fsm_state, FsmState::Active);
    }
    // The only error is the test's clients closing.
    for s in [&a, &b] {
        let st = s.state().borrow().clone();
        let text = st.last_error.map(|e| e.text).unwrap_or_default();
        assert!(!text.contains("listener"), "{text}");
    }
    a.shutdown("done").await;
    b.shutdown("done").await;
    assert!(listeners.stats().is_empty());
    let err = connect_from("127.0.0.2", addr).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
}

/// The connections the kernel completed and nobody accepted yet are taken
/// at once (what the listener closes when a peer's key arrives late).
#[tokio::test]
async fn pending_connections_are_taken_without_waiting() {
    let l = transport::listen(&transport::ListenOptions {
        addr: "127.0.0.1:0".parse().unwrap(),
        ttl: 255,
        md5: Vec::new(),
        vrf: None,
    })
    .unwrap();
    let addr = l.local_addr().unwrap();
    assert!(transport::accept_pending(&l, 8).is_empty());
    let c2 = connect_from("127.0.0.2", addr).await.unwrap();
    let c3 = connect_from("127.0.0.3", addr).await.unwrap();
    let pending = transport::accept_pending(&l, 8);
    let mut from: Vec<SocketAddr> = pending.iter().map(|(_, a)| *a).collect();
    from.sort();
    let mut want = vec![c2.local_addr().unwrap(), c3.local_addr().unwrap()];
    want.sort();
    assert_eq!(from, want);
    assert!(transport::accept_pending(&l, 8).is_empty());
}
