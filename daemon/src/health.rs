//! `/healthz` and `/readyz`: a minimal HTTP/1.1 server on a tokio listener
//! (one request per connection, `Connection: close`), enough for kubelet
//! probes and `curl`. `/healthz` fails when the loop's [`Heartbeat`] has not
//! beaten for `max_stall` (a wedged loop is restarted by the kubelet).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// When a loop last showed it is turning.
#[derive(Debug)]
pub struct Heartbeat {
    start: Instant,
    /// Milliseconds since `start` of the last beat.
    last: AtomicU64,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Self::new()
    }
}

impl Heartbeat {
    /// A heartbeat that beat just now.
    pub fn new() -> Self {
        Self {
            start: tokio::time::Instant::now().into_std(),
            last: AtomicU64::new(0),
        }
    }

    fn since_start(&self) -> u64 {
        let elapsed = tokio::time::Instant::now()
            .into_std()
            .saturating_duration_since(self.start);
        u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
    }

    /// The loop turned.
    pub fn beat(&self) {
        self.last.fetch_max(self.since_start(), Ordering::AcqRel);
    }

    /// Time since the last beat.
    pub fn age(&self) -> Duration {
        Duration::from_millis(
            self.since_start()
                .saturating_sub(self.last.load(Ordering::Acquire)),
        )
    }
}

/// What the probes answer from.
#[derive(Clone, Debug)]
pub struct Probes {
    /// `/readyz` is 200 once set and every one of `gates` is set too.
    pub ready: Arc<AtomicBool>,
    /// More conditions of readiness (e.g. the controller's webhook serving,
    /// as upstream's `StartedChecker`).
    pub gates: Vec<Arc<AtomicBool>>,
    /// `/healthz` is 200 while this beat within `max_stall`.
    pub heartbeat: Arc<Heartbeat>,
    /// Longest time without a beat that is still healthy.
    pub max_stall: Duration,
}

impl Probes {
    /// `ready` and every gate set.
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire) && self.gates.iter().all(|g| g.load(Ordering::Acquire))
    }

    fn live(&self) -> bool {
        self.heartbeat.age() <= self.max_stall
    }
}

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The status line and body answering a request whose head is `head`.
/// `/healthz` is 200 while `live`, else 500; `/readyz` is 200 once `ready`,
/// else 503.
pub fn respond(head: &[u8], ready: bool, live: bool) -> (&'static str, &'static str) {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" && method != "HEAD" {
        return ("405 Method Not Allowed", "method not allowed\n");
    }
    match path {
        "/healthz" | "/livez" if live => ("200 OK", "ok\n"),
        "/healthz" | "/livez" => (
            "500 Internal Server Error",
            "the reconcile loop has not turned within its deadline\n",
        ),
        "/readyz" if ready => ("200 OK", "ok\n"),
        "/readyz" => ("503 Service Unavailable", "not ready\n"),
        _ => ("404 Not Found", "not found\n"),
    }
}

async fn handle(mut stream: TcpStream, ready: bool, live: bool) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    // Read the request head (bounded in size and time).
    let read = async {
        loop {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.len() > 8192 {
                break;
            }
        }
        Ok::<_, std::io::Error>(())
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    let (status, body) = respond(&buf, ready, live);
    let head_only = buf.starts_with(b"HEAD ");
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        body.len(),
        if head_only { "" } else { body }
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// Binds `addr` and serves probes there until `shutdown` completes (an error names the
/// address when it cannot be bound).
pub async fn start(
    addr: std::net::SocketAddr,
    probes: Probes,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(e.kind(), format!("binding the probe port {addr}: {e}"))
    })?;
    Ok(tokio::spawn(serve(listener, probes, shutdown)))
}

/// Serves probes on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, probes: Probes, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let ready = probes.ready();
                    let live = probes.live();
                    if !live {
                        tracing::error!(stalled_for = ?probes.heartbeat.age(), "liveness probe failed: the reconcile loop is not turning");
                    }
                    tokio::spawn(async move {
                        if let Err(e) = handle(stream, ready, live).await {
                            tracing::debug!(error = %e, "health probe connection failed");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a health probe connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn heartbeat_ages_until_it_beats() {
        let h = Heartbeat::new();
        assert_eq!(h.age(), Duration::ZERO);
        tokio::time::advance(Duration::from_secs(7)).await;
        assert_eq!(h.age(), Duration::from_secs(7));
        h.beat();
        assert_eq!(h.age(), Duration::ZERO);
    }

    #[test]
    fn routes() {
        let get = |p: &str| format!("GET {p} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes();
        assert_eq!(respond(&get("/healthz"), false, true).0, "200 OK");
        assert_eq!(
            respond(&get("/healthz"), true, false).0,
            "500 Internal Server Error"
        );
        assert_eq!(
            respond(&get("/readyz"), false, true).0,
            "503 Service Unavailable"
        );
        assert_eq!(respond(&get("/readyz"), true, true).0, "200 OK");
        assert_eq!(respond(&get("/readyz?verbose"), true, true).0, "200 OK");
        assert_eq!(respond(&get("/metrics"), true, true).0, "404 Not Found");
        assert_eq!(
            respond(b"POST /healthz HTTP/1.1\r\n\r\n", true, true).0,
            "405 Method Not Allowed"
        );
        assert_eq!(respond(b"", true, true).0, "405 Method Not Allowed");
    }

    #[tokio::test]
    async fn serves_over_tcp() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let ready = Arc::new(AtomicBool::new(false));
        let heartbeat = Arc::new(Heartbeat::new());
        let webhook = Arc::new(AtomicBool::new(false));
        let probes = Probes {
            ready: ready.clone(),
            gates: vec![webhook.clone()],
            heartbeat: heartbeat.clone(),
            max_stall: Duration::from_millis(300),
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, probes, async {
            let _ = rx.await;
        }));
        let get = async |path: &str| {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        assert!(get("/healthz").await.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(get("/readyz").await.starts_with("HTTP/1.1 503 "));
        ready.store(true, Ordering::Release);
        // ready only once every gate is set too
        assert!(get("/readyz").await.starts_with("HTTP/1.1 503 "));
        webhook.store(true, Ordering::Release);
        let r = get("/readyz").await;
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.ends_with("\r\n\r\nok\n"), "{r}");
        // A loop that stops beating fails the liveness probe; beating again
        // heals it.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(get("/healthz").await.starts_with("HTTP/1.1 500 "));
        heartbeat.beat();
        assert!(get("/healthz").await.starts_with("HTTP/1.1 200 OK\r\n"));
        tx.send(()).unwrap();
        server.await.unwrap();
    }
}
