//! The metallb-rs controller binary.
//!
//! What it does so far: watches the `IPAddressPool`s and `Community`s of its
//! namespace and the cluster's Namespaces, parses the pool configuration on
//! every change (as MetalLB's PoolReconciler: pools, communities and
//! namespaces only), keeps the last valid configuration when a new one is
//! invalid, and reports the result in the `ConfigurationState` `controller`
//! (condition `poolReconcilerValid`) through the status writer. Serves
//! `/healthz` and `/readyz` (ready after the first configuration pass) on
//! `127.0.0.1:<--health-probe-port>`; exits 0 on SIGTERM/SIGINT.
//!
//! Not yet: Service allocation (the `alloc` library exists but is not wired
//! to Services), Service and IPAddressPool status, events, the Lease,
//! metrics on `--port`, the webhook.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, ValueEnum};
use config::api::v1beta1::{Community, ConfigurationState, IPAddressPool};
use controller::pool_reconciler::{self, Pass, PoolReconciler};
use futures_util::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use status::configuration_state::{self, Component};
use status::{FIELD_MANAGER_CONTROLLER, KubeStatusApi, StatusWriter, SystemClock, WriterConfig};
use tokio::sync::{Notify, watch};

const SA_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LogLevel {
    All,
    Debug,
    Info,
    Warn,
    Error,
    None,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Json,
    Text,
}

/// The flags of MetalLB's controller (same names, defaults and variables).
#[derive(Debug, Parser)]
#[command(name = "controller", version, about = "metallb-rs controller")]
struct Args {
    /// HTTPS metrics port (0 disables metrics). Metrics are not served yet.
    #[arg(long, default_value_t = 9120)]
    port: u16,
    /// The namespace of the configuration (default: the ServiceAccount's namespace).
    #[arg(long, env = "METALLB_NAMESPACE", default_value = "")]
    namespace: String,
    /// Memberlist secret to create (no effect yet).
    #[arg(long, env = "METALLB_ML_SECRET_NAME", default_value = "")]
    ml_secret_name: String,
    /// The controller's Deployment (no effect yet).
    #[arg(long, env = "METALLB_DEPLOYMENT", default_value = "")]
    deployment: String,
    /// Log level.
    #[arg(long, value_enum, default_value = "info")]
    log_level: LogLevel,
    /// Log format: JSON lines, or text for humans.
    #[arg(long, value_enum, default_value = "json")]
    log_format: LogFormat,
    /// pprof endpoint (no effect).
    #[arg(long, default_value = "")]
    pprof_bind_address: String,
    /// Port of `/healthz` and `/readyz` (bound on 127.0.0.1).
    #[arg(long, default_value_t = 17472)]
    health_probe_port: u16,
    /// Disable webhook certificate rotation (no effect yet).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    disable_cert_rotation: bool,
    /// Webhook certificate directory (no effect yet).
    #[arg(long, default_value = "/tmp/k8s-webhook-server/serving-certs")]
    cert_dir: String,
    /// Webhook certificate DNS name (no effect yet).
    #[arg(long, default_value = "metallb-webhook-service")]
    cert_service_name: String,
    /// Only Services of this loadBalancerClass (no effect yet: no allocation).
    #[arg(long, default_value = "")]
    lb_class: String,
    /// `enabled`, `disabled` or `onlywebhook` (no effect yet).
    #[arg(long, default_value = "enabled")]
    webhook_mode: String,
    /// Webhook certificate secret (no effect yet).
    #[arg(long, default_value = "metallb-webhook-cert")]
    webhook_secret: String,
    /// The controller's Pod: owner of its ConfigurationState.
    #[arg(long, env = "METALLB_POD_NAME", default_value = "")]
    pod_name: String,
    /// The uid of `--pod-name` (so that no Pod read is needed).
    #[arg(long, env = "METALLB_POD_UID", default_value = "", hide = true)]
    pod_uid: String,
    /// Webhook HTTP/2 (no effect yet).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    webhook_http2: bool,
    /// Minimum TLS version (no effect yet).
    #[arg(long, default_value = "")]
    tls_min_version: String,
    /// TLS 1.2 cipher suites (no effect yet).
    #[arg(long, default_value = "")]
    tls_cipher_suites: String,
    /// TLS curve preferences (no effect yet).
    #[arg(long, default_value = "")]
    tls_curve_preferences: String,
    /// Metrics TLS certificate directory (no effect yet).
    #[arg(long, default_value = "")]
    metrics_cert_dir: String,
}

/// Flags accepted for compatibility that do nothing yet: one warning each
/// when given.
const NO_EFFECT_YET: &[&str] = &[
    "port",
    "ml_secret_name",
    "deployment",
    "pprof_bind_address",
    "disable_cert_rotation",
    "cert_dir",
    "cert_service_name",
    "lb_class",
    "webhook_mode",
    "webhook_secret",
    "webhook_http2",
    "tls_min_version",
    "tls_cipher_suites",
    "tls_curve_preferences",
    "metrics_cert_dir",
];

fn init_logging(args: &Args) {
    let level = match args.log_level {
        LogLevel::All => "trace",
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warn => "warn",
        LogLevel::Error => "error",
        LogLevel::None => "off",
    };
    let filter = tracing_subscriber::EnvFilter::new(level);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

fn warn_no_effect(matches: &ArgMatches) {
    for id in NO_EFFECT_YET {
        if matches!(
            matches.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            let flag = format!("--{}", id.replace('_', "-"));
            tracing::warn!(
                flag,
                "flag accepted for compatibility; it has no effect yet"
            );
        }
    }
}

fn main() -> Result<()> {
    let matches = Args::command().get_matches();
    let args = Args::from_arg_matches(&matches)?;
    init_logging(&args);
    warn_no_effect(&matches);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let r = rt.block_on(run(args));
    if let Err(e) = &r {
        tracing::error!(error = format!("{e:#}"), "controller failed");
    }
    r
}

async fn shutdown_signal() -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => tracing::info!(signal = "SIGTERM", "shutting down"),
        _ = int.recv() => tracing::info!(signal = "SIGINT", "shutting down"),
    }
    Ok(())
}

/// A reflector over `api`, waking `changed` on every event. Runs until the
/// stream ends (never: the watcher retries with backoff).
fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
    changed: Arc<Notify>,
) -> (Store<K>, impl Stream<Item = ()> + Send)
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + for<'de> k8s_openapi::serde::Deserialize<'de>
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let kind = K::kind(&()).into_owned();
    let stream =
        reflector::reflector(writer, watcher(api, config).default_backoff()).map(move |event| {
            match event {
                Ok(_) => changed.notify_one(),
                Err(e) => tracing::warn!(kind, error = %e, "watch failed; retrying with backoff"),
            }
        });
    (store, stream)
}

async fn owner_reference(client: &Client, args: &Args, ns: &str) -> Option<OwnerReference> {
    if args.pod_name.is_empty() {
        return None;
    }
    if !args.pod_uid.is_empty() {
        // From the downward API: the Pod exists (it is us), no read needed.
        return Some(OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: args.pod_name.clone(),
            uid: args.pod_uid.clone(),
            ..OwnerReference::default()
        });
    }
    match status::pod_owner_reference(client.clone(), ns, &args.pod_name).await {
        Ok(Some(o)) => Some(o),
        Ok(None) => {
            tracing::warn!(
                pod = args.pod_name,
                "--pod-name names no existing Pod; the ConfigurationState gets no owner"
            );
            None
        }
        Err(e) => {
            tracing::warn!(pod = args.pod_name, error = %e, "reading the controller's Pod failed (set METALLB_POD_UID to need no read); the ConfigurationState gets no owner");
            None
        }
    }
}

fn namespace(args: &Args) -> Result<String> {
    if !args.namespace.is_empty() {
        return Ok(args.namespace.clone());
    }
    let ns = std::fs::read_to_string(SA_NAMESPACE_FILE).with_context(|| {
        format!("no --namespace / METALLB_NAMESPACE, and reading {SA_NAMESPACE_FILE}")
    })?;
    Ok(ns.trim().to_owned())
}

async fn run(args: Args) -> Result<()> {
    let ns = namespace(&args)?;
    let client = Client::try_default()
        .await
        .context("building a Kubernetes client (in-cluster or KUBECONFIG)")?;
    tracing::info!(
        namespace = ns,
        "controller starting (configuration state only; no Service allocation yet)"
    );

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };

    let ready = Arc::new(AtomicBool::new(false));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.health_probe_port))
        .await
        .with_context(|| format!("binding 127.0.0.1:{}", args.health_probe_port))?;
    let health = tokio::spawn(controller::health::serve(
        listener,
        ready.clone(),
        stopped(),
    ));

    // The status writer of the ConfigurationState, and its view of the server.
    let writer: StatusWriter<ConfigurationState> = StatusWriter::new(
        WriterConfig::default(),
        Arc::new(SystemClock),
        status::Metrics::unregistered(),
    );
    let status_api =
        KubeStatusApi::<ConfigurationState>::new(client.clone(), FIELD_MANAGER_CONTROLLER);
    let component = Component::Controller;
    let key = component.key(&ns);
    let writer_task = tokio::spawn({
        let writer = writer.clone();
        let api = status_api.clone();
        let stopped = stopped();
        async move { writer.run(api, stopped).await }
    });
    // RBAC allows list/watch of its own object only: select it by name.
    let state_watch = tokio::spawn(status::watch_into(
        writer.clone(),
        Api::<ConfigurationState>::namespaced(client.clone(), &ns),
        watcher::Config::default().fields(&format!("metadata.name={}", component.name())),
    ));

    // The configuration.
    let changed = Arc::new(Notify::new());
    let (pools, pools_stream) = reflect(
        Api::<IPAddressPool>::namespaced(client.clone(), &ns),
        watcher::Config::default(),
        changed.clone(),
    );
    let (communities, communities_stream) = reflect(
        Api::<Community>::namespaced(client.clone(), &ns),
        watcher::Config::default(),
        changed.clone(),
    );
    let (namespaces, namespaces_stream) = reflect(
        Api::<Namespace>::all(client.clone()),
        watcher::Config::default(),
        changed.clone(),
    );
    let watches = tokio::spawn(async move {
        let all = futures_util::stream::select(
            pools_stream,
            futures_util::stream::select(communities_stream, namespaces_stream),
        );
        all.for_each(|()| async {}).await;
    });

    let owner = owner_reference(&client, &args, &ns).await;
    let reconcile = {
        let writer = writer.clone();
        let ready = ready.clone();
        async move {
            pools.wait_until_ready().await?;
            communities.wait_until_ready().await?;
            namespaces.wait_until_ready().await?;
            let mut reconciler = PoolReconciler::new();
            loop {
                let resources = pool_reconciler::resources(
                    pools.state().iter().map(|p| (**p).clone()).collect(),
                    communities.state().iter().map(|c| (**c).clone()).collect(),
                    namespaces.state().iter().map(|n| (**n).clone()).collect(),
                );
                let result = match reconciler.reconcile(&resources) {
                    Pass::Unchanged => None,
                    Pass::Valid => {
                        let pools = reconciler.last_valid().map_or(0, |c| c.pools.len());
                        tracing::info!(pools, "configuration is valid");
                        Some(Ok(()))
                    }
                    Pass::Invalid(e) => {
                        if reconciler.last_valid().is_some() {
                            tracing::error!(
                                error = e,
                                "configuration is invalid; keeping the last valid configuration"
                            );
                        } else {
                            tracing::error!(
                                error = e,
                                "configuration is invalid; no valid configuration seen yet"
                            );
                        }
                        Some(Err(e))
                    }
                };
                if let Some(result) = result {
                    writer.set_desired(
                        key.clone(),
                        configuration_state::desired(
                            &component,
                            &result,
                            owner.clone(),
                            configuration_state::now(),
                        ),
                    );
                }
                if !ready.swap(true, Ordering::AcqRel) {
                    tracing::info!("first configuration pass done: ready");
                }
                changed.notified().await;
                // Let a burst of events (e.g. a `kubectl apply` of many
                // objects) settle into one pass.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            #[allow(unreachable_code)]
            Ok::<(), anyhow::Error>(())
        }
    };

    let outcome = tokio::select! {
        r = shutdown_signal() => r,
        r = reconcile => r.context("waiting for the configuration watches"),
    };

    // Stop serving, then give pending status writes a moment.
    let _ = stop_tx.send(true);
    watches.abort();
    state_watch.abort();
    let _ = writer_task.await;
    let flush = async {
        while writer.pending() > 0 {
            writer.step(&status_api).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(2), flush)
        .await
        .is_err()
    {
        tracing::warn!("exiting with status writes still pending");
    }
    let _ = health.await;
    tracing::info!("controller stopped");
    outcome
}
