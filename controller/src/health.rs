//! `/healthz` and `/readyz`: a minimal HTTP/1.1 server on a tokio listener
//! (one request per connection, `Connection: close`), enough for kubelet
//! probes and `curl`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The status line and body answering a request whose head is `head`.
/// `/healthz` is always 200; `/readyz` is 200 once `ready`, else 503.
pub fn respond(head: &[u8], ready: bool) -> (&'static str, &'static str) {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" && method != "HEAD" {
        return ("405 Method Not Allowed", "method not allowed\n");
    }
    match path {
        "/healthz" | "/livez" => ("200 OK", "ok\n"),
        "/readyz" if ready => ("200 OK", "ok\n"),
        "/readyz" => ("503 Service Unavailable", "not ready\n"),
        _ => ("404 Not Found", "not found\n"),
    }
}

async fn handle(mut stream: TcpStream, ready: bool) -> std::io::Result<()> {
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
    let (status, body) = respond(&buf, ready);
    let head_only = buf.starts_with(b"HEAD ");
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        body.len(),
        if head_only { "" } else { body }
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// Serves probes on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    ready: Arc<AtomicBool>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let ready = ready.load(Ordering::Acquire);
                    tokio::spawn(async move {
                        if let Err(e) = handle(stream, ready).await {
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

    #[test]
    fn routes() {
        let get = |p: &str| format!("GET {p} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes();
        assert_eq!(respond(&get("/healthz"), false).0, "200 OK");
        assert_eq!(respond(&get("/readyz"), false).0, "503 Service Unavailable");
        assert_eq!(respond(&get("/readyz"), true).0, "200 OK");
        assert_eq!(respond(&get("/readyz?verbose"), true).0, "200 OK");
        assert_eq!(respond(&get("/metrics"), true).0, "404 Not Found");
        assert_eq!(
            respond(b"POST /healthz HTTP/1.1\r\n\r\n", true).0,
            "405 Method Not Allowed"
        );
        assert_eq!(respond(b"", true).0, "405 Method Not Allowed");
    }

    #[tokio::test]
    async fn serves_over_tcp() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let ready = Arc::new(AtomicBool::new(false));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, ready.clone(), async {
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
        let r = get("/readyz").await;
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.ends_with("\r\n\r\nok\n"), "{r}");
        tx.send(()).unwrap();
        server.await.unwrap();
    }
}
