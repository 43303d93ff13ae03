//! The server end to end on 127.0.0.1: a real TLS listener, a rustls client that trusts
//! (or not) the server's certificate, and a fake authorizer.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube_metrics::rustls::client::ClientConfig;
use kube_metrics::rustls::crypto::ring;
use kube_metrics::rustls::pki_types::{CertificateDer, ServerName};
use kube_metrics::rustls::{RootCertStore, SupportedProtocolVersion, version};
use kube_metrics::{
    Authorizer, BearerToken, CertSource, Decision, Limits, MetricsServer, Security, ServerTls,
    TlsMinVersion, TlsOptions,
};
use prometheus::{IntCounter, Registry};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

/// Decides by the token's value, and records what it was asked.
#[derive(Clone, Default)]
struct FakeAuth {
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

impl Authorizer for FakeAuth {
    async fn check(&self, token: &BearerToken, path: &str) -> Decision {
        self.seen
            .lock()
            .unwrap()
            .push((token.expose().to_string(), path.to_string()));
        match token.expose() {
            "good" => Decision::Allow,
            "denied" => Decision::Forbidden,
            "boom" => Decision::Error,
            "slow" => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Decision::Allow
            }
            _ => Decision::Unauthenticated,
        }
    }
}

fn registry() -> Registry {
    let registry = Registry::new();
    let c = IntCounter::new("kube_metrics_test_scrapes_total", "A counter of the test.").unwrap();
    c.inc_by(3);
    registry.register(Box::new(c)).unwrap();
    registry
}

fn self_signed(min: TlsMinVersion) -> ServerTls {
    ServerTls::new(&TlsOptions {
        cert: CertSource::SelfSigned {
            names: vec!["localhost".into(), "127.0.0.1".into()],
        },
        min_version: min,
    })
    .unwrap()
}

struct Running {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Running {
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the server stops")
            .unwrap();
    }
}

async fn start(security: Security, limits: Limits) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = MetricsServer::from_listener(listener, registry(), security).with_limits(limits);
    let addr = server.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    let task = tokio::spawn(server.run(async {
        let _ = rx.await;
    }));
    Running {
        addr,
        stop: Some(tx),
        task,
    }
}

fn connector(
    trust: &[CertificateDer<'static>],
    versions: &[&'static SupportedProtocolVersion],
) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for c in trust {
        roots.add(c.clone()).unwrap();
    }
    let config = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// A parsed response.
#[derive(Debug)]
struct Resp {
    status: u16,
    head: String,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

/// Sends one request and reads one response (by Content-Length).
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    method: &str,
    path: &str,
    auth: Option<&str>,
) -> std::io::Result<Resp> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n");
    if let Some(a) = auth {
        req.push_str(&format!("Authorization: {a}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await?;
    s.flush().await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            // A response to HEAD has no body, whatever its Content-Length.
            let len: usize = if method == "HEAD" { Some(0) } else { None }
                .or_else(|| {
                    head.lines().find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().unwrap())
                    })
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
                let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).to_string();
                return Ok(Resp { status, head, body });
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut chunk))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn tls_connect(
    addr: SocketAddr,
    trust: &[CertificateDer<'static>],
    versions: &[&'static SupportedProtocolVersion],
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").unwrap();
    tokio::time::timeout(
        Duration::from_secs(10),
        connector(trust, versions).connect(name, tcp),
    )
    .await
    .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))?
}

/// Connects, retrying while the server is still at its connection limit.
async fn connect_retry(
    addr: SocketAddr,
    trust: &CertificateDer<'static>,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    for _ in 0..100 {
        if let Ok(s) = tls_connect(addr, std::slice::from_ref(trust), &[&version::TLS13]).await {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no connection accepted in 5 s");
}

async fn https(
    addr: SocketAddr,
    trust: &CertificateDer<'static>,
    method: &str,
    path: &str,
    auth: Option<&str>,
) -> Resp {
    let mut s = tls_connect(addr, std::slice::from_ref(trust), &[&version::TLS13])
        .await
        .unwrap();
    exchange(&mut s, method, path, auth).await.unwrap()
}

#[tokio::test]
async fn https_authenticates_and_authorises_every_scrape() {
    let tls = self_signed(TlsMinVersion::Tls13);
    let cert = tls.certificate();
    let auth = FakeAuth::default();
    let server = start(Security::https(tls, auth.clone()), Limits::default()).await;
    let a = server.addr;

    let r = https(a, &cert, "GET", "/metrics", None).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(r.header("www-authenticate").as_deref(), Some("Bearer"));
    let r = https(a, &cert, "GET", "/metrics", Some("Basic dXNlcjpwYXNz")).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert!(auth.seen.lock().unwrap().is_empty(), "no token, no review");

    let r = https(a, &cert, "GET", "/metrics", Some("Bearer unknown")).await;
    assert_eq!(r.status, 401, "{r:?}");
    let r = https(a, &cert, "GET", "/metrics", Some("Bearer denied")).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(!r.body.contains("kube_metrics_test"), "{r:?}");
    let r = https(a, &cert, "GET", "/metrics", Some("Bearer boom")).await;
    assert_eq!(r.status, 500, "{r:?}");
    assert!(!r.body.contains("kube_metrics_test"), "{r:?}");

    let r = https(a, &cert, "GET", "/metrics", Some("Bearer good")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.body.contains(
            "# TYPE kube_metrics_test_scrapes_total counter\nkube_metrics_test_scrapes_total 3\n"
        ),
        "{r:?}"
    );
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("text/plain; version=0.0.4")
    );
    let r = https(a, &cert, "GET", "/metrics?name[]=x", Some("bearer good")).await;
    assert_eq!(r.status, 200, "{r:?}");

    let seen = auth.seen.lock().unwrap().clone();
    let want: Vec<(String, String)> = ["unknown", "denied", "boom", "good", "good"]
        .iter()
        .map(|t| (t.to_string(), "/metrics".to_string()))
        .collect();
    assert_eq!(seen, want);

    // One route, GET only, checked before any authentication.
    let r = https(a, &cert, "GET", "/", Some("Bearer good")).await;
    assert_eq!(r.status, 404, "{r:?}");
    let r = https(a, &cert, "GET", "/metrics/x", None).await;
    assert_eq!(r.status, 404, "{r:?}");
    let r = https(a, &cert, "POST", "/metrics", Some("Bearer good")).await;
    assert_eq!(r.status, 405, "{r:?}");
    assert_eq!(r.header("allow").as_deref(), Some("GET"));
    let r = https(a, &cert, "HEAD", "/metrics", Some("Bearer good")).await;
    assert_eq!(r.status, 405, "{r:?}");

    // Keep-alive: several requests on one connection.
    let mut s = tls_connect(a, std::slice::from_ref(&cert), &[&version::TLS13])
        .await
        .unwrap();
    for _ in 0..3 {
        let r = exchange(&mut s, "GET", "/metrics", Some("Bearer good"))
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{r:?}");
    }
    server.stop().await;
}

#[tokio::test]
async fn tls_is_real_and_tls13_is_the_default_minimum() {
    let tls = self_signed(TlsMinVersion::Tls13);
    let cert = tls.certificate();
    let server = start(Security::https(tls, FakeAuth::default()), Limits::default()).await;

    // A client that does not trust the certificate refuses it.
    let other = self_signed(TlsMinVersion::Tls13).certificate();
    let err = tls_connect(server.addr, &[other], &[&version::TLS13])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");
    // TLS 1.2 is refused by default.
    let err = tls_connect(server.addr, std::slice::from_ref(&cert), &[&version::TLS12])
        .await
        .unwrap_err();
    assert!(err.to_string().to_lowercase().contains("version"), "{err}");
    // Plain HTTP gets no HTTP answer.
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    let r = exchange(&mut tcp, "GET", "/metrics", None).await;
    assert!(r.is_err() || r.as_ref().unwrap().status != 200, "{r:?}");
    server.stop().await;

    // VersionTLS12 lets TLS 1.2 in.
    let tls = self_signed("VersionTLS12".parse().unwrap());
    let cert = tls.certificate();
    let server = start(Security::https(tls, FakeAuth::default()), Limits::default()).await;
    let mut s = tls_connect(server.addr, std::slice::from_ref(&cert), &[&version::TLS12])
        .await
        .unwrap();
    assert_eq!(
        s.get_ref().1.protocol_version(),
        Some(kube_metrics::rustls::ProtocolVersion::TLSv1_2)
    );
    let r = exchange(&mut s, "GET", "/metrics", Some("Bearer good"))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    server.stop().await;
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("kube-metrics-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes a new self-signed certificate for localhost into `dir`; returns its DER.
fn write_cert(dir: &std::path::Path) -> CertificateDer<'static> {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    // Written aside and renamed, as the kubelet's atomic writer swaps a Secret volume.
    for (name, pem) in [
        ("tls.crt", c.cert.pem()),
        ("tls.key", c.signing_key.serialize_pem()),
    ] {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, pem).unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }
    c.cert.der().clone()
}

#[tokio::test]
async fn certificate_from_a_directory_and_reloaded_when_it_changes() {
    let dir = TempDir::new("certdir");
    let first = write_cert(&dir.0);
    let tls = ServerTls::new(&TlsOptions {
        cert: CertSource::Dir(dir.0.clone()),
        min_version: TlsMinVersion::Tls13,
    })
    .unwrap();
    assert!(tls.reloads());
    assert_eq!(tls.certificate(), first);
    let handle = tls.clone();
    // The server's own looks are left out here (they would race the explicit reloads
    // below: a look that took the broken key first leaves `reload` nothing new); see
    // `the_server_reloads_a_changed_directory_by_itself`.
    let limits = Limits {
        cert_reload_interval: Duration::from_secs(3600),
        ..Limits::default()
    };
    let server = start(Security::https(tls, FakeAuth::default()), limits).await;
    let r = https(server.addr, &first, "GET", "/metrics", Some("Bearer good")).await;
    assert_eq!(r.status, 200, "{r:?}");

    // Nothing changed: nothing reloaded.
    assert!(!handle.reload().unwrap());
    // A broken key: the old certificate stays.
    std::fs::write(dir.0.join("tls.key"), "not a key").unwrap();
    assert!(handle.reload().is_err());
    assert_eq!(handle.certificate(), first);
    let r = https(server.addr, &first, "GET", "/metrics", Some("Bearer good")).await;
    assert_eq!(r.status, 200, "{r:?}");

    // A new certificate: served from the next handshake on.
    let second = write_cert(&dir.0);
    assert!(handle.reload().unwrap());
    assert_eq!(handle.certificate(), second);
    let r = https(server.addr, &second, "GET", "/metrics", Some("Bearer good")).await;
    assert_eq!(r.status, 200, "{r:?}");
    let err = tls_connect(server.addr, &[first], &[&version::TLS13])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");
    server.stop().await;
}

#[tokio::test]
async fn the_server_reloads_a_changed_directory_by_itself() {
    let dir = TempDir::new("certdir-auto");
    let first = write_cert(&dir.0);
    let tls = ServerTls::new(&TlsOptions {
        cert: CertSource::Dir(dir.0.clone()),
        min_version: TlsMinVersion::Tls13,
    })
    .unwrap();
    let limits = Limits {
        cert_reload_interval: Duration::from_millis(100),
        ..Limits::default()
    };
    let server = start(Security::https(tls, FakeAuth::default()), limits).await;
    let r = https(server.addr, &first, "GET", "/metrics", Some("Bearer good")).await;
    assert_eq!(r.status, 200, "{r:?}");

    // A broken key is not taken: the first certificate is still served after several looks.
    std::fs::write(dir.0.join("tls.key"), "not a key").unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = https(server.addr, &first, "GET", "/metrics", Some("Bearer good")).await;
    assert_eq!(r.status, 200, "{r:?}");

    // A new pair is served without any call, within a few looks (20 s: a loaded machine).
    let second = write_cert(&dir.0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if tls_connect(
            server.addr,
            std::slice::from_ref(&second),
            &[&version::TLS13],
        )
        .await
        .is_ok()
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new certificate was not served within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = https(server.addr, &second, "GET", "/metrics", Some("Bearer good")).await;
    assert_eq!(r.status, 200, "{r:?}");
    server.stop().await;
}

#[tokio::test]
async fn insecure_http_only_when_asked_for() {
    let security = Security::insecure_http();
    assert!(security.is_insecure());
    let server = start(security, Limits::default()).await;
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    let r = exchange(&mut tcp, "GET", "/metrics", None).await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.body.contains("kube_metrics_test_scrapes_total 3"),
        "{r:?}"
    );
    let r = exchange(&mut tcp, "DELETE", "/metrics", None)
        .await
        .unwrap();
    assert_eq!(r.status, 405, "{r:?}");
    let r = exchange(&mut tcp, "GET", "/healthz", None).await.unwrap();
    assert_eq!(r.status, 404, "{r:?}");
    server.stop().await;

    assert!(!Security::https(self_signed(TlsMinVersion::Tls13), FakeAuth::default()).is_insecure());
}

#[tokio::test]
async fn bounded_connections_timeouts_and_graceful_stop() {
    let tls = self_signed(TlsMinVersion::Tls13);
    let cert = tls.certificate();
    let limits = Limits {
        max_connections: 1,
        header_timeout: Duration::from_secs(2),
        auth_timeout: Duration::from_millis(300),
        handshake_timeout: Duration::from_millis(300),
        shutdown_grace: Duration::from_secs(2),
        ..Limits::default()
    };
    let server = start(Security::https(tls, FakeAuth::default()), limits).await;
    let a = server.addr;

    // An authorizer that does not answer in time is a 500.
    let r = https(a, &cert, "GET", "/metrics", Some("Bearer slow")).await;
    assert_eq!(r.status, 500, "{r:?}");

    // One connection at a time: while one is open, another is closed at once. (The
    // previous connection may take a moment to be seen closed.)
    let mut held = connect_retry(a, &cert).await;
    let second = tls_connect(a, std::slice::from_ref(&cert), &[&version::TLS13]).await;
    assert!(second.is_err(), "a second connection was served");
    // The held one idles past the header timeout and is closed by the server.
    let mut byte = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(5), held.read(&mut byte))
        .await
        .expect("the idle connection is closed");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    drop(held);
    // Then new connections are served again.
    let mut ok = false;
    for _ in 0..50 {
        if let Ok(mut s) = tls_connect(a, std::slice::from_ref(&cert), &[&version::TLS13]).await
            && let Ok(r) = exchange(&mut s, "GET", "/metrics", Some("Bearer good")).await
        {
            assert_eq!(r.status, 200, "{r:?}");
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok, "no connection served after the idle one was closed");

    // A silent client that never completes the handshake is dropped too.
    let mut silent = TcpStream::connect(a).await.unwrap();
    let n = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut byte))
        .await
        .expect("the silent connection is closed");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");

    // Stop: run returns, and the port is closed.
    server.stop().await;
    assert!(TcpStream::connect(a).await.is_err());
}

#[tokio::test]
async fn graceful_stop_closes_keep_alive_connections() {
    let tls = self_signed(TlsMinVersion::Tls13);
    let cert = tls.certificate();
    // A shared authorizer works as well.
    let auth = Arc::new(FakeAuth::default());
    let server = start(Security::https(tls, auth.clone()), Limits::default()).await;
    let mut s = tls_connect(server.addr, std::slice::from_ref(&cert), &[&version::TLS13])
        .await
        .unwrap();
    let r = exchange(&mut s, "GET", "/metrics", Some("Bearer good"))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(auth.seen.lock().unwrap().len(), 1);
    // The connection is idle in keep-alive: the stop closes it well before the 30 s header
    // timeout (and within the 5 s grace).
    let started = std::time::Instant::now();
    server.stop().await;
    assert!(started.elapsed() < Duration::from_secs(6));
    let mut byte = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut byte))
        .await
        .expect("closed");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
}

#[tokio::test]
async fn bind_errors_name_the_address() {
    let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = taken.local_addr().unwrap();
    let err = MetricsServer::bind(addr, Registry::new(), Security::insecure_http())
        .await
        .unwrap_err();
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    let server = MetricsServer::bind(
        "127.0.0.1:0".parse().unwrap(),
        Registry::new(),
        Security::insecure_http(),
    )
    .await
    .unwrap();
    assert_ne!(server.local_addr().unwrap().port(), 0);
    let shown = format!("{server:?}");
    assert!(shown.contains("InsecureHttp"), "{shown}");
}
