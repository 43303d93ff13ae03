//! The metallb-rs controller binary.
//!
//! Watches the `IPAddressPool`s and `Community`s of its namespace, the
//! cluster's Namespaces and every Service; parses the pool configuration on
//! every change (as MetalLB's PoolReconciler), keeps the last valid one when a
//! new one is invalid and reports the result in the `ConfigurationState`
//! `controller`; allocates LoadBalancer addresses ([`driver`]: MetalLB's
//! Service logic over the pure allocator) while it holds the Lease, writing
//! `status.loadBalancer.ingress`, the `metallb.io/ip-allocated-from-pool`
//! annotation, MetalLB's events and the pools' status. Serves `/healthz` and
//! `/readyz` (ready after the first full pass over the Services) on
//! `--health-probe-port`, metrics on `--port` (HTTPS, authorised by the API
//! server); exits 0 on SIGTERM/SIGINT, releasing the Lease.
//!
//! Not yet: the webhook (its flags are accepted with a warning).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, ValueEnum};
use config::api::v1beta1::{Community, ConfigurationState, IPAddressPool};
use controller::edge::ServiceEdge;
use controller::leader::{self, LEASE_NAME, LeaderElector, LeaseConfig};
use controller::metrics::ControllerMetrics;
use futures_util::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use status::configuration_state::Component;
use status::{FIELD_MANAGER_CONTROLLER, KubeStatusApi, StatusWriter, SystemClock, WriterConfig};
use tokio::sync::{Notify, mpsc, watch};

mod driver;
use driver::{Driver, Inputs, Outputs, ServiceEvent};

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
    /// HTTPS metrics port (0 disables metrics): TokenReview/SubjectAccessReview
    /// authorisation, as MetalLB.
    #[arg(long, default_value_t = 9120)]
    port: u16,
    /// Address the metrics port binds (default: every address, as MetalLB).
    #[arg(long, default_value = "0.0.0.0")]
    metrics_bind_address: std::net::IpAddr,
    /// Serve metrics over plain HTTP without authentication (explicit opt-in).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    metrics_insecure_http: bool,
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
    /// Port of `/healthz` and `/readyz`.
    #[arg(long, default_value_t = 17472)]
    health_probe_port: u16,
    /// Address the probe port binds (default: every address, so the kubelet
    /// reaches it on the Pod IP, as MetalLB's `:port`).
    #[arg(long, default_value = "0.0.0.0")]
    health_probe_bind_address: std::net::IpAddr,
    /// Disable webhook certificate rotation (no effect yet).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    disable_cert_rotation: bool,
    /// Webhook certificate directory (no effect yet).
    #[arg(long, default_value = "/tmp/k8s-webhook-server/serving-certs")]
    cert_dir: String,
    /// Webhook certificate DNS name (no effect yet).
    #[arg(long, default_value = "metallb-webhook-service")]
    cert_service_name: String,
    /// Only Services of this loadBalancerClass (default: only Services without one).
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
    /// Minimum TLS version of the metrics port: VersionTLS12 or VersionTLS13 (default).
    #[arg(long, default_value = "")]
    tls_min_version: String,
    /// TLS 1.2 cipher suites (no effect yet).
    #[arg(long, default_value = "")]
    tls_cipher_suites: String,
    /// TLS curve preferences (no effect yet).
    #[arg(long, default_value = "")]
    tls_curve_preferences: String,
    /// Metrics TLS certificate directory (tls.crt, tls.key); default: self-signed.
    #[arg(long, default_value = "")]
    metrics_cert_dir: String,
}

/// Flags accepted for compatibility that do nothing yet: one warning each
/// when given.
const NO_EFFECT_YET: &[&str] = &[
    "ml_secret_name",
    "deployment",
    "pprof_bind_address",
    "disable_cert_rotation",
    "cert_dir",
    "cert_service_name",
    "webhook_mode",
    "webhook_secret",
    "webhook_http2",
    "tls_cipher_suites",
    "tls_curve_preferences",
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

/// The metrics server of `--port` (None when 0): HTTPS with the API server's
/// TokenReview/SubjectAccessReview, or plain HTTP when explicitly asked.
async fn metrics_server(
    args: &Args,
    client: &Client,
    registry: prometheus::Registry,
) -> Result<Option<kube_metrics::MetricsServer>> {
    use kube_metrics::{
        CertSource, KubeAuthorizer, MetricsServer, Security, ServerTls, TlsOptions,
    };
    if args.port == 0 {
        return Ok(None);
    }
    let addr = std::net::SocketAddr::new(args.metrics_bind_address, args.port);
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

async fn run(args: Args) -> Result<()> {
    let ns = namespace(&args)?;
    let client = Client::try_default()
        .await
        .context("building a Kubernetes client (in-cluster or KUBECONFIG)")?;
    tracing::info!(namespace = ns, "controller starting");

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };

    let registry = prometheus::Registry::new();
    let metrics = ControllerMetrics::register(&registry)?;
    let status_metrics = status::Metrics::register(&registry)?;
    let metrics_server = metrics_server(&args, &client, registry).await?;

    let ready = Arc::new(AtomicBool::new(false));
    let health_addr =
        std::net::SocketAddr::new(args.health_probe_bind_address, args.health_probe_port);
    let listener = tokio::net::TcpListener::bind(health_addr)
        .await
        .with_context(|| format!("binding the probe port {health_addr}"))?;
    let health = tokio::spawn(controller::health::serve(
        listener,
        ready.clone(),
        stopped(),
    ));
    let metrics_task = metrics_server.map(|server| tokio::spawn(server.run(stopped())));

    // The status writer of the ConfigurationState, and its view of the server.
    let writer: StatusWriter<ConfigurationState> = StatusWriter::new(
        WriterConfig::default(),
        Arc::new(SystemClock),
        status_metrics.clone(),
    );
    let status_api =
        KubeStatusApi::<ConfigurationState>::new(client.clone(), FIELD_MANAGER_CONTROLLER);
    let component = Component::Controller;
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

    // The status writer of the pools (status only; pools belong to the user).
    let pool_writer: StatusWriter<IPAddressPool> = StatusWriter::new(
        WriterConfig::default(),
        Arc::new(SystemClock),
        status_metrics.clone(),
    );
    let pool_status_api =
        KubeStatusApi::<IPAddressPool>::new(client.clone(), FIELD_MANAGER_CONTROLLER);
    let pool_writer_task = tokio::spawn({
        let writer = pool_writer.clone();
        let api = pool_status_api.clone();
        let stopped = stopped();
        async move { writer.run(api, stopped).await }
    });
    let pool_status_watch = tokio::spawn(status::watch_into(
        pool_writer.clone(),
        Api::<IPAddressPool>::namespaced(client.clone(), &ns),
        watcher::Config::default(),
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
    // The Services, in every namespace: a key per change, a full pass per re-list.
    let (service_tx, service_rx) = mpsc::unbounded_channel();
    let (services, services_writer) = reflector::store::<Service>();
    let services_stream = reflector::reflector(
        services_writer,
        watcher(
            Api::<Service>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff(),
    )
    .map(move |event| match event {
        Ok(watcher::Event::Apply(s) | watcher::Event::Delete(s)) => {
            let _ = service_tx.send(ServiceEvent::Changed(controller::service::key_of(&s)));
        }
        Ok(watcher::Event::InitDone) => {
            let _ = service_tx.send(ServiceEvent::Relisted);
        }
        Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
        Err(e) => {
            tracing::warn!(kind = "Service", error = %e, "watch failed; retrying with backoff")
        }
    });
    let watches = tokio::spawn(async move {
        let all = futures_util::stream::select(
            futures_util::stream::select(pools_stream, services_stream),
            futures_util::stream::select(communities_stream, namespaces_stream),
        );
        all.for_each(|()| async {}).await;
    });

    // Only one controller allocates: the holder of the Lease.
    let (leader_tx, leader_rx) = watch::channel(false);
    let elector = LeaderElector::new(
        client.clone(),
        &ns,
        LEASE_NAME,
        leader::identity(&args.pod_name),
        LeaseConfig::default(),
    )?;
    tracing::info!(
        lease = LEASE_NAME,
        identity = elector.identity(),
        "competing for the lease"
    );
    let elector_task = tokio::spawn(elector.run(leader_tx, stopped()));

    let owner = owner_reference(&client, &args, &ns).await;
    let instance = (!args.pod_name.is_empty()).then(|| args.pod_name.clone());
    let driver = Driver::new(
        Inputs {
            pools,
            communities,
            namespaces,
            services,
            config_changed: changed,
            service_events: service_rx,
            leader: leader_rx,
        },
        Outputs {
            namespace: ns.clone(),
            owner,
            state_writer: writer.clone(),
            pool_writer: pool_writer.clone(),
            edge: ServiceEdge::new(client.clone(), instance),
            ready: ready.clone(),
            lb_class: args.lb_class.clone(),
            metrics,
        },
    );
    let reconcile = driver.run();

    let outcome = tokio::select! {
        r = shutdown_signal() => r,
        r = reconcile => r.context("the controller loop ended"),
    };

    // Stop serving, then give pending status writes a moment.
    let _ = stop_tx.send(true);
    watches.abort();
    state_watch.abort();
    pool_status_watch.abort();
    // The elector releases the Lease on stop, so a successor takes over at once.
    if tokio::time::timeout(Duration::from_secs(12), elector_task)
        .await
        .is_err()
    {
        tracing::warn!("releasing the lease took too long");
    }
    let _ = writer_task.await;
    let _ = pool_writer_task.await;
    let flush = async {
        while writer.pending() > 0 || pool_writer.pending() > 0 {
            writer.step(&status_api).await;
            pool_writer.step(&pool_status_api).await;
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
    if let Some(task) = metrics_task {
        let _ = task.await;
    }
    tracing::info!("controller stopped");
    outcome
}
