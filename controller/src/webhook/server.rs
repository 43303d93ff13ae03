//! The webhook's HTTPS server: MetalLB's paths (the validating webhooks and
//! the BGPPeer conversion on `/convert`), one review per request, each
//! with a deadline and a body size limit, a bounded number of connections.
//! Certificates come from a [`kube_metrics::ServerTls`] that the rotator
//! swaps in place (or that re-reads `--cert-dir`), so a new certificate is
//! served without a restart.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use config::Resources;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use kube_metrics::ServerTls;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use super::admission::{Endpoint, review};
use super::conversion;

/// Bounds on what a client may cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once; more are closed at accept.
    pub max_connections: usize,
    /// TLS handshake deadline.
    pub handshake_timeout: Duration,
    /// Deadline for the request head (also closes idle keep-alive connections).
    pub header_timeout: Duration,
    /// Deadline for reading the body and deciding.
    pub request_timeout: Duration,
    /// Largest body read (an AdmissionReview carries at most two objects of
    /// the API server's 1.5 MiB limit each; a ConversionReview carries every
    /// BGPPeer of a list read at the other version, a few thousand within
    /// the default 4 MiB).
    pub max_body: usize,
    /// How long open connections may finish after the stop.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 64,
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            // The API server's default webhook timeout is 10 s: answer before it.
            request_timeout: Duration::from_secs(8),
            max_body: 4 << 20,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// What the webhook validates against: the controller's view of the
/// configuration, `None` while it is not ready (the request is refused
/// with 500 rather than validated against nothing).
pub type View = Arc<dyn Fn() -> Option<Resources> + Send + Sync>;

/// The bound server.
pub struct WebhookServer {
    listener: TcpListener,
    tls: ServerTls,
    view: View,
    namespace: String,
    limits: Limits,
}

impl std::fmt::Debug for WebhookServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookServer")
            .field("addr", &self.listener.local_addr().ok())
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

struct Shared {
    view: View,
    namespace: String,
    limits: Limits,
}

/// What a path serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// A validating webhook.
    Admission(Endpoint),
    /// The BGPPeer conversion webhook (needs no view of the configuration).
    Convert,
}

fn route(path: &str) -> Option<Route> {
    if path == conversion::PATH {
        return Some(Route::Convert);
    }
    Endpoint::from_path(path).map(Route::Admission)
}

fn json(body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

async fn handle(req: Request<Incoming>, shared: Arc<Shared>) -> Response<Full<Bytes>> {
    let Some(route) = route(req.uri().path()) else {
        return text(StatusCode::NOT_FOUND, "not found\n".into());
    };
    if req.method() != Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "POST only\n".into());
    }
    let limits = shared.limits;
    let work = async {
        let body = match Limited::new(req.into_body(), limits.max_body)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                return text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("reading the request: {e}\n"),
                );
            }
        };
        let endpoint = match route {
            Route::Admission(e) => e,
            Route::Convert => {
                return match conversion::review(&body) {
                    Ok(r) => {
                        if let Some(reason) = &r.failure {
                            tracing::warn!(%reason, "BGPPeer conversion refused");
                        }
                        json(r.body)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "unreadable conversion request");
                        text(StatusCode::BAD_REQUEST, format!("{e}\n"))
                    }
                };
            }
        };
        let Some(resources) = (shared.view)() else {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the controller's view of the configuration is not ready\n".into(),
            );
        };
        match review(endpoint, &body, &resources, &shared.namespace) {
            Ok(out) => json(out),
            Err(e) => text(StatusCode::BAD_REQUEST, format!("{e}\n")),
        }
    };
    match tokio::time::timeout(limits.request_timeout, work).await {
        Ok(r) => r,
        Err(_) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "request deadline exceeded\n".into(),
        ),
    }
}

impl WebhookServer {
    /// Binds `addr` (MetalLB listens on `:9443`).
    pub async fn bind(
        addr: SocketAddr,
        tls: ServerTls,
        view: View,
        namespace: &str,
    ) -> std::io::Result<WebhookServer> {
        Ok(WebhookServer {
            listener: TcpListener::bind(addr).await?,
            tls,
            view,
            namespace: namespace.to_string(),
            limits: Limits::default(),
        })
    }

    /// Replaces the default [`Limits`].
    pub fn with_limits(mut self, limits: Limits) -> WebhookServer {
        self.limits = limits;
        self
    }

    /// The address bound.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes; open connections get
    /// [`Limits::shutdown_grace`] to finish. With a certificate directory,
    /// the files are re-read every 10 s.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) {
        let WebhookServer {
            listener,
            tls,
            view,
            namespace,
            limits,
        } = self;
        tracing::info!(addr = ?listener.local_addr().ok(), "serving the admission and conversion webhooks");
        let acceptor = TlsAcceptor::from(tls.config());
        let shared = Arc::new(Shared {
            view,
            namespace,
            limits,
        });
        let graceful = GracefulShutdown::new();
        let mut tasks = JoinSet::new();
        // The certificate was read when the server was made: the first look is one
        // interval later.
        let every = Duration::from_secs(10);
        let mut reload = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        reload.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                _ = reload.tick(), if tls.reloads() => {
                    let tls = tls.clone();
                    match tokio::task::spawn_blocking(move || tls.reload()).await {
                        Ok(Ok(true)) => tracing::info!("webhook certificate reloaded from --cert-dir"),
                        Ok(Ok(false)) => {}
                        Ok(Err(e)) => tracing::warn!(error = %e, "reloading the webhook certificate failed; the previous one is kept"),
                        Err(e) => tracing::warn!(error = %e, "reloading the webhook certificate panicked"),
                    }
                }
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::warn!(error = %e, "accepting a webhook connection failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    };
                    if tasks.len() >= limits.max_connections {
                        tracing::debug!(%peer, "too many webhook connections: closing a new one");
                        continue;
                    }
                    let acceptor = acceptor.clone();
                    let shared = shared.clone();
                    let watcher = graceful.watcher();
                    tasks.spawn(async move {
                        let _ = stream.set_nodelay(true);
                        let tls = match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream)).await {
                            Ok(Ok(tls)) => tls,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "webhook TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "webhook TLS handshake timed out");
                                return;
                            }
                        };
                        let service = hyper::service::service_fn(move |req| {
                            let shared = shared.clone();
                            async move { Ok::<_, Infallible>(handle(req, shared).await) }
                        });
                        let mut builder = hyper::server::conn::http1::Builder::new();
                        builder
                            .timer(TokioTimer::new())
                            .header_read_timeout(limits.header_timeout)
                            .max_buf_size(64 << 10);
                        let conn = builder.serve_connection(TokioIo::new(tls), service);
                        if let Err(e) = watcher.watch(conn).await {
                            tracing::debug!(%peer, error = %e, "webhook connection ended with an error");
                        }
                    });
                }
            }
        }
        drop(listener);
        let _ = tokio::time::timeout(limits.shutdown_grace, graceful.shutdown()).await;
        tasks.shutdown().await;
        tracing::info!("webhook server stopped");
    }
}
