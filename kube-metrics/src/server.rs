//! The HTTP(S) server: accept, TLS handshake, HTTP/1.1, one route.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ALLOW, AUTHORIZATION, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use prometheus::{Encoder, Registry, TextEncoder};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::auth::{BearerToken, Decision, DynAuthorizer};
use crate::{Authorizer, Error, ServerTls};

/// The one path served.
pub const METRICS_PATH: &str = "/metrics";

/// How requests are secured.
pub struct Security(Mode);

enum Mode {
    Https {
        tls: ServerTls,
        authorizer: Arc<dyn DynAuthorizer>,
    },
    InsecureHttp,
}

impl Security {
    /// HTTPS, every request authenticated and authorised by `authorizer`, with at most
    /// [`crate::auth::MAX_REVIEWS`] decisions in flight (2 s to wait for a turn, 10 s
    /// for a decision).
    pub fn https(tls: ServerTls, authorizer: impl Authorizer) -> Security {
        Security(Mode::Https {
            tls,
            authorizer: Arc::new(crate::auth::Limited::new(
                authorizer,
                crate::auth::MAX_REVIEWS,
                std::time::Duration::from_secs(2),
                std::time::Duration::from_secs(10),
            )),
        })
    }

    /// Plain HTTP, no authentication: anyone who reaches the port reads the metrics. Only
    /// for a caller that asked for it explicitly.
    pub fn insecure_http() -> Security {
        Security(Mode::InsecureHttp)
    }

    /// Whether this is [`Security::insecure_http`].
    pub fn is_insecure(&self) -> bool {
        matches!(self.0, Mode::InsecureHttp)
    }
}

impl fmt::Debug for Security {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Mode::Https { tls, .. } => f.debug_tuple("Https").field(tls).finish(),
            Mode::InsecureHttp => f.write_str("InsecureHttp"),
        }
    }
}

/// Bounds on what clients may cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once; more are closed as soon as accepted.
    pub max_connections: usize,
    /// Time for a TLS handshake.
    pub handshake_timeout: Duration,
    /// Time for a request head to arrive, counted from when the server starts waiting for
    /// it: an idle keep-alive connection is closed after it too.
    pub header_timeout: Duration,
    /// Time for the authorisation of a request (beyond it: 500).
    pub auth_timeout: Duration,
    /// Time given to open connections to finish on shutdown, after which they are closed.
    pub shutdown_grace: Duration,
    /// How often a certificate directory is looked at for changes (the first look one
    /// interval after the start: the certificate was read when the server was made).
    pub cert_reload_interval: Duration,
}

impl Default for Limits {
    /// 64 connections, 10 s handshake, 30 s header/idle, 15 s authorisation, 5 s grace,
    /// certificate directory looked at every 10 s.
    fn default() -> Self {
        Limits {
            max_connections: 64,
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(30),
            auth_timeout: Duration::from_secs(15),
            shutdown_grace: Duration::from_secs(5),
            cert_reload_interval: Duration::from_secs(10),
        }
    }
}

/// The largest request head read (bytes).
const MAX_HEAD: usize = 16 * 1024;

/// The registry in Prometheus' text format, and its content type.
pub fn encode(registry: &Registry) -> Result<(String, Vec<u8>), prometheus::Error> {
    let encoder = TextEncoder::new();
    let mut body = Vec::new();
    encoder.encode(&registry.gather(), &mut body)?;
    Ok((encoder.format_type().to_string(), body))
}

struct Shared {
    registry: Registry,
    authorizer: Option<Arc<dyn DynAuthorizer>>,
    auth_timeout: Duration,
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn handle(req: Request<Incoming>, shared: Arc<Shared>) -> Response<Full<Bytes>> {
    if req.uri().path() != METRICS_PATH {
        return text(StatusCode::NOT_FOUND, "not found\n");
    }
    if req.method() != Method::GET {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET"));
        return r;
    }
    if let Some(authorizer) = &shared.authorizer {
        let Some(token) = req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| BearerToken::from_header(v.as_bytes()))
        else {
            let mut r = text(StatusCode::UNAUTHORIZED, "Unauthorized\n");
            r.headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        };
        let decision = tokio::time::timeout(
            shared.auth_timeout,
            authorizer.check_boxed(&token, METRICS_PATH),
        )
        .await
        .unwrap_or_else(|_| {
            tracing::warn!("metrics request: authorisation timed out");
            Decision::Error
        });
        match decision {
            Decision::Allow => {}
            Decision::Unauthenticated => {
                let mut r = text(StatusCode::UNAUTHORIZED, "Unauthorized\n");
                r.headers_mut()
                    .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return r;
            }
            Decision::Forbidden => return text(StatusCode::FORBIDDEN, "Forbidden\n"),
            Decision::Error => {
                return text(StatusCode::INTERNAL_SERVER_ERROR, "authorization failed\n");
            }
        }
    }
    match encode(&shared.registry) {
        Ok((content_type, body)) => {
            let mut r = Response::new(Full::new(Bytes::from(body)));
            if let Ok(v) = HeaderValue::from_str(&content_type) {
                r.headers_mut().insert(CONTENT_TYPE, v);
            }
            r
        }
        Err(e) => {
            tracing::warn!(error = %e, "encoding the metrics failed");
            text(StatusCode::INTERNAL_SERVER_ERROR, "encoding failed\n")
        }
    }
}

/// Serves HTTP/1.1 on one connection until it ends or the watcher says stop.
async fn serve_http<I>(io: I, shared: Arc<Shared>, limits: Limits, watcher: Watcher)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(handle(req, shared).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_HEAD)
        .max_headers(64);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    if let Err(e) = watcher.watch(conn).await {
        tracing::debug!(error = %e, "metrics connection ended with an error");
    }
}

/// The metrics server, bound and ready to [`run`](MetricsServer::run).
pub struct MetricsServer {
    listener: TcpListener,
    registry: Registry,
    security: Security,
    limits: Limits,
}

impl fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricsServer")
            .field("addr", &self.listener.local_addr().ok())
            .field("security", &self.security)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl MetricsServer {
    /// Binds `addr` (MetalLB's `--port` on all addresses is `0.0.0.0:port` or `[::]:port`).
    pub async fn bind(
        addr: SocketAddr,
        registry: Registry,
        security: Security,
    ) -> Result<MetricsServer, Error> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind { addr, source })?;
        Ok(MetricsServer::from_listener(listener, registry, security))
    }

    /// Serves on a listener bound by the caller.
    pub fn from_listener(
        listener: TcpListener,
        registry: Registry,
        security: Security,
    ) -> MetricsServer {
        MetricsServer {
            listener,
            registry,
            security,
            limits: Limits::default(),
        }
    }

    /// Replaces the default [`Limits`].
    pub fn with_limits(mut self, limits: Limits) -> MetricsServer {
        self.limits = limits;
        self
    }

    /// The address bound.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then stops accepting, lets the open connections
    /// finish their request (for [`Limits::shutdown_grace`] at most) and returns.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) {
        let MetricsServer {
            listener,
            registry,
            security,
            limits,
        } = self;
        let (tls, authorizer) = match security.0 {
            Mode::Https { tls, authorizer } => (Some(tls), Some(authorizer)),
            Mode::InsecureHttp => (None, None),
        };
        let addr = listener.local_addr().ok();
        match &tls {
            Some(_) => tracing::info!(addr = ?addr, "serving metrics over HTTPS"),
            None => tracing::warn!(
                addr = ?addr,
                "serving metrics over plain HTTP without authentication"
            ),
        }
        let acceptor = tls.as_ref().map(|t| TlsAcceptor::from(t.config()));
        let reload = tls.clone().filter(ServerTls::reloads);
        let shared = Arc::new(Shared {
            registry,
            authorizer,
            auth_timeout: limits.auth_timeout,
        });
        let graceful = GracefulShutdown::new();
        let mut tasks = JoinSet::new();
        let every = limits.cert_reload_interval.max(Duration::from_millis(10));
        let mut reload_tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        reload_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                _ = reload_tick.tick(), if reload.is_some() => {
                    if let Some(tls) = reload.clone() {
                        match tokio::task::spawn_blocking(move || tls.reload()).await {
                            Ok(Ok(_)) => {}
                            Ok(Err(e)) => tracing::warn!(
                                error = %e,
                                "reloading the metrics certificate failed; the previous one is kept"
                            ),
                            Err(e) => tracing::warn!(error = %e, "reloading the metrics certificate panicked"),
                        }
                    }
                }
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::warn!(error = %e, "accepting a metrics connection failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    };
                    if tasks.len() >= limits.max_connections {
                        tracing::debug!(%peer, "too many metrics connections: closing a new one");
                        drop(stream);
                        continue;
                    }
                    let shared = shared.clone();
                    let watcher = graceful.watcher();
                    let acceptor = acceptor.clone();
                    tasks.spawn(connection(stream, peer, acceptor, shared, limits, watcher));
                }
            }
        }
        drop(listener);
        let open = tasks.len();
        if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::debug!(
                open,
                "metrics connections still open after the grace period"
            );
        }
        tasks.shutdown().await;
        tracing::info!("metrics server stopped");
    }
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    acceptor: Option<TlsAcceptor>,
    shared: Arc<Shared>,
    limits: Limits,
    watcher: Watcher,
) {
    let _ = stream.set_nodelay(true);
    match acceptor {
        None => serve_http(stream, shared, limits, watcher).await,
        Some(acceptor) => {
            match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => serve_http(tls, shared, limits, watcher).await,
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "metrics TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "metrics TLS handshake timed out"),
            }
        }
    }
}
