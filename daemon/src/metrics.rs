//! The metrics port of a daemon: its TLS flags and its server.

use anyhow::{Context, Result};
use clap::Args;
use kube_metrics::{CertSource, KubeAuthorizer, MetricsServer, Security, ServerTls, TlsOptions};

/// The metrics flags every daemon takes (the port is the daemon's own: its default
/// differs).
#[derive(Clone, Debug, Args)]
pub struct MetricsArgs {
    /// Address the metrics port binds (default: every address, as MetalLB).
    #[arg(long, default_value = "0.0.0.0")]
    pub metrics_bind_address: std::net::IpAddr,
    /// Serve metrics over plain HTTP without authentication (explicit opt-in).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    pub metrics_insecure_http: bool,
    /// Minimum TLS version of the metrics port: VersionTLS12 or VersionTLS13 (default).
    #[arg(long, default_value = "")]
    pub tls_min_version: String,
    /// TLS 1.2 cipher suites (no effect yet: rustls' safe defaults apply).
    #[arg(long, default_value = "")]
    pub tls_cipher_suites: String,
    /// TLS curve preferences (no effect yet: rustls' safe defaults apply).
    #[arg(long, default_value = "")]
    pub tls_curve_preferences: String,
    /// Metrics TLS certificate directory (tls.crt, tls.key); default: self-signed.
    #[arg(long, default_value = "")]
    pub metrics_cert_dir: String,
}

/// The metrics server on `port` (None when 0): HTTPS with the API server's
/// TokenReview/SubjectAccessReview, or plain HTTP when explicitly asked.
pub async fn server(
    args: &MetricsArgs,
    port: u16,
    client: &kube::Client,
    registry: prometheus::Registry,
) -> Result<Option<MetricsServer>> {
    if port == 0 {
        return Ok(None);
    }
    let addr = std::net::SocketAddr::new(args.metrics_bind_address, port);
    let security = if args.metrics_insecure_http {
        tracing::warn!(%addr, "metrics served over plain HTTP without authentication (--metrics-insecure-http)");
        Security::insecure_http()
    } else {
        let cert = if args.metrics_cert_dir.is_empty() {
            let mut names = vec!["localhost".to_owned()];
            if !args.metrics_bind_address.is_unspecified() {
                names.push(args.metrics_bind_address.to_string());
            }
            if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
                names.push(host.trim().to_owned());
            }
            CertSource::SelfSigned { names }
        } else {
            CertSource::Dir(args.metrics_cert_dir.clone().into())
        };
        let tls = ServerTls::new(&TlsOptions {
            cert,
            min_version: args.tls_min_version.parse().context("--tls-min-version")?,
        })
        .context("metrics TLS")?;
        Security::https(tls, KubeAuthorizer::new(client.clone()))
    };
    let server = MetricsServer::bind(addr, registry, security)
        .await
        .with_context(|| format!("binding the metrics port {addr}"))?;
    tracing::info!(%addr, "serving metrics");
    Ok(Some(server))
}
