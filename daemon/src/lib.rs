//! What the metallb-rs daemons (the controller and the speaker) share, so each is
//! written once:
//!
//! - [`flags`]: the namespace, Go durations, "no effect yet" warnings;
//! - [`logging`]: MetalLB's `--log-level` and `--log-format` (JSON lines by default,
//!   text for people), and the subscriber they set up;
//! - [`metrics`]: the flags of the metrics port's TLS and its server (HTTPS authorised
//!   by the API server, or plain HTTP only when asked for);
//! - [`health`]: `/healthz` (failing when the daemon's loop stops beating its
//!   [`health::Heartbeat`]) and `/readyz`;
//! - [`events`]: Kubernetes events with a deadline, never blocking a loop;
//! - [`k8s_metrics`]: MetalLB's `metallb_k8s_client_*` metrics;
//! - [`heap`]: the allocator's free pages given back to the system now and then;
//! - [`shutdown_signal`]: SIGTERM or SIGINT.

pub mod events;
pub mod flags;
pub mod health;
pub mod heap;
pub mod k8s_metrics;
pub mod logging;
pub mod metrics;

/// Completes on SIGTERM or SIGINT (logging which).
pub async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => tracing::info!(signal = "SIGTERM", "shutting down"),
        _ = int.recv() => tracing::info!(signal = "SIGINT", "shutting down"),
    }
    Ok(())
}
