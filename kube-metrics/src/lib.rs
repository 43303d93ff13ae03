//! Serves a Prometheus [`Registry`](prometheus::Registry) at `/metrics`, the way MetalLB's
//! controller and speaker do through controller-runtime's secure metrics server:
//!
//! - **HTTPS** ([`ServerTls`]): the certificate is `tls.crt`/`tls.key` of a directory
//!   (MetalLB's `--metrics-cert-dir`; re-read when the files change, as controller-runtime's
//!   certificate watcher does) or, without a directory, a self-signed one made at start for
//!   the names the caller gives. TLS 1.3 minimum unless `VersionTLS12` is asked for
//!   (MetalLB's `--tls-min-version`). HTTP/1.1 only.
//! - **Authentication and authorisation** ([`Authorizer`]): the request's bearer token is
//!   checked with a TokenReview and the user it names is authorised with a
//!   SubjectAccessReview for the non-resource URL (`get` on `/metrics`), both through the
//!   API server ([`KubeAuthorizer`], which caches decisions briefly so that a scrape every
//!   few seconds does not cost two API calls each). No token is 401, a token the API server
//!   does not authenticate is 401, a user not authorised is 403, an API failure is 500.
//!   Tokens appear in no log, error or `Debug` output ([`BearerToken`]).
//! - **Plain HTTP without authentication** only when asked for:
//!   [`Security::insecure_http`].
//! - **Bounded** ([`Limits`]): `GET /metrics` only (405 for another method, 404 for
//!   another path), a bounded number of connections, a TLS handshake and header timeout
//!   (which also closes idle keep-alive connections), a bounded request head, and a
//!   graceful stop when the caller's shutdown future completes.
//!
//! ```no_run
//! # async fn run(client: kube::Client) -> Result<(), kube_metrics::Error> {
//! use kube_metrics::{CertSource, KubeAuthorizer, MetricsServer, Security, ServerTls, TlsMinVersion, TlsOptions};
//! let registry = prometheus::Registry::new();
//! let tls = ServerTls::new(&TlsOptions {
//!     cert: CertSource::SelfSigned { names: vec!["localhost".into()] },
//!     min_version: TlsMinVersion::Tls13,
//! })?;
//! let server = MetricsServer::bind(
//!     "0.0.0.0:9120".parse().unwrap(),
//!     registry,
//!     Security::https(tls, KubeAuthorizer::new(client)),
//! )
//! .await?;
//! server.run(std::future::pending()).await;
//! # Ok(())
//! # }
//! ```
//!
//! Whoever scrapes needs RBAC for it: `get` on the non-resource URL `/metrics` (a
//! ClusterRole with `nonResourceURLs: [/metrics]`); the server's own ServiceAccount needs
//! `create` on `tokenreviews` (authentication.k8s.io) and `subjectaccessreviews`
//! (authorization.k8s.io).

mod auth;
mod error;
mod server;
mod tls;

pub use auth::{Authorizer, BearerToken, CacheConfig, Decision, KubeAuthorizer, Limited};
pub use error::Error;
pub use server::{Limits, METRICS_PATH, MetricsServer, Security, encode};
pub use tls::{CERT_FILE, CertSource, KEY_FILE, ServerTls, TlsMinVersion, TlsOptions};

/// The rustls types of the API ([`rustls::pki_types::CertificateDer`] for
/// [`ServerTls::certificate`]).
pub use tokio_rustls::rustls;
