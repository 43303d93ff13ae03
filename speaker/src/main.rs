//! The metallb-rs speaker binary (one per node, hostNetwork).
//!
//! What it does so far: takes every flag and variable of MetalLB's speaker (`-flag`
//! and `--flag`), watches the configuration through the shared cluster view, parses it
//! as this node sees it (BGPPeers and BGPAdvertisements of other nodes left out), keeps
//! the last good configuration when a new one is invalid, and reports each attempt in
//! its `ConfigurationState speaker-<node>` and in `metallb_k8s_client_config_*`.
//! Announcing (BGP, L2) comes next.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{CommandFactory, FromArgMatches, Parser};
use cluster_view::{ClusterView, Kind};
use config::api::v1beta1::ConfigurationState;
use daemon::health::{Heartbeat, Probes};
use daemon::k8s_metrics::K8sClientMetrics;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client};
use speaker::config_state::{ConfigTracker, Loaded};
use status::configuration_state::{self, Component};
use status::{FIELD_MANAGER_SPEAKER, KubeStatusApi, StatusWriter, SystemClock, WriterConfig};
use tokio::sync::watch;

/// The flags of MetalLB's speaker (same names, defaults and variables).
#[derive(Debug, Parser)]
#[command(name = "speaker", version, about = "metallb-rs speaker")]
struct Args {
    /// The node this speaker runs on (required).
    #[arg(long, env = "METALLB_NODE_NAME", default_value = "")]
    node_name: String,
    /// The speaker's Pod: owner of its status objects.
    #[arg(long, env = "METALLB_POD_NAME", default_value = "")]
    pod_name: String,
    /// The uid of `--pod-name` (so that no Pod read is needed).
    #[arg(long, env = "METALLB_POD_UID", default_value = "", hide = true)]
    pod_uid: String,
    /// The namespace of the configuration (default: the ServiceAccount's namespace).
    #[arg(long, env = "METALLB_NAMESPACE", default_value = "")]
    namespace: String,
    /// The node's address (accepted; MetalLB does not use it either).
    #[arg(long, env = "METALLB_HOST", default_value = "")]
    host: String,
    /// Memberlist bind address (no effect yet: L2 failover comes with the L2 mode).
    #[arg(long, env = "METALLB_ML_BIND_ADDR", default_value = "")]
    ml_bindaddr: String,
    /// Memberlist bind port (no effect yet).
    #[arg(long, env = "METALLB_ML_BIND_PORT", default_value = "7946")]
    ml_bindport: String,
    /// Memberlist discovery labels (no effect yet).
    #[arg(long, env = "METALLB_ML_LABELS", default_value = "")]
    ml_labels: String,
    /// Memberlist secret key directory (no effect yet).
    #[arg(long, env = "METALLB_ML_SECRET_KEY_PATH", default_value = "")]
    ml_secret_key_path: String,
    /// Memberlist WAN timers (no effect yet).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    ml_wan_config: bool,
    /// HTTPS metrics port (0 disables metrics).
    #[arg(long, default_value_t = 9120)]
    port: u16,
    #[command(flatten)]
    metrics: daemon::metrics::MetricsArgs,
    /// Port of `/healthz` and `/readyz`.
    #[arg(long, default_value_t = 17472)]
    health_probe_port: u16,
    /// Address the probe port binds (MetalLB's speaker: loopback).
    #[arg(long, default_value = "127.0.0.1")]
    health_probe_bind_address: std::net::IpAddr,
    #[command(flatten)]
    log: daemon::logging::LogArgs,
    /// Only Services of this loadBalancerClass (default: only Services without one; no
    /// effect yet: the speaker announces nothing yet).
    #[arg(long, default_value = "")]
    lb_class: String,
    /// Announce from nodes labelled node.kubernetes.io/exclude-from-external-load-balancers
    /// (no effect yet: the speaker announces nothing yet).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    ignore_exclude_lb: bool,
    /// FRR mode's debounce in ms (validated as MetalLB does; no effect: no FRR here).
    #[arg(long, env = "METALLB_BGP_DEBOUNCE_TIMEOUT", default_value = "3000")]
    bgp_debounce_timeout: String,
    /// frr-k8s namespace (no effect: the native stack runs in every mode).
    #[arg(long, env = "FRRK8S_NAMESPACE", default_value = "")]
    frrk8s_namespace: String,
    /// frr-k8s secret passthrough (no effect).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    frrk8s_secret_passthrough: bool,
    /// pprof endpoint (no effect).
    #[arg(long, default_value = "")]
    pprof_bind_address: String,
    /// Periodic gratuitous ARP/NA in seconds, 0 = off (no effect yet).
    #[arg(long, env = "METALLB_GRATUITOUS_ARP_INTERVAL", default_value = "0")]
    gratuitous_arp_interval: String,
    /// `native`, `frr` or `frr-k8s`: all run the native stack.
    #[arg(long, env = "METALLB_BGP_TYPE", default_value = "native", hide = true)]
    bgp_type: String,
    /// Longest time the reconcile loop may go without turning before `/healthz` fails.
    #[arg(long, value_parser = daemon::flags::parse_duration, default_value = "60s")]
    liveness_max_stall: Duration,
}

/// Flags accepted for compatibility that do nothing yet: one warning each when given.
const NO_EFFECT_YET: &[&str] = &[
    "ml_bindaddr",
    "ml_bindport",
    "ml_labels",
    "ml_secret_key_path",
    "ml_wan_config",
    "ignore_exclude_lb",
    "lb_class",
    "frrk8s_namespace",
    "frrk8s_secret_passthrough",
    "pprof_bind_address",
    "gratuitous_arp_interval",
    "bgp_debounce_timeout",
    "tls_cipher_suites",
    "tls_curve_preferences",
];

fn main() -> Result<()> {
    let matches = Args::command().get_matches_from(speaker::flags::go_style(std::env::args()));
    let args = Args::from_arg_matches(&matches)?;
    daemon::logging::init(&args.log);
    daemon::flags::warn_no_effect(&matches, NO_EFFECT_YET);
    if args.node_name.is_empty() {
        tracing::error!("must specify --node-name or METALLB_NODE_NAME");
        bail!("must specify --node-name or METALLB_NODE_NAME");
    }
    if !matches!(args.bgp_type.as_str(), "native" | "frr" | "frr-k8s") {
        bail!(
            "METALLB_BGP_TYPE {:?}: must be native, frr or frr-k8s",
            args.bgp_type
        );
    }
    match args.bgp_debounce_timeout.parse::<i64>() {
        Ok(ms) if ms > 0 => {}
        _ => bail!(
            "invalid --bgp-debounce-timeout {:?}: a positive number of milliseconds",
            args.bgp_debounce_timeout
        ),
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let r = rt.block_on(run(args));
    if let Err(e) = &r {
        tracing::error!(error = format!("{e:#}"), "speaker failed");
    }
    r
}

async fn run(args: Args) -> Result<()> {
    let ns = daemon::flags::namespace(&args.namespace)?;
    let node = args.node_name.clone();
    let client = Client::try_default()
        .await
        .context("building a Kubernetes client (in-cluster or KUBECONFIG)")?;
    tracing::info!(namespace = ns, node, "speaker starting");

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let registry = prometheus::Registry::new();
    let metrics = K8sClientMetrics::register(&registry)?;
    let status_metrics = status::Metrics::register(&registry)?;
    let metrics_server =
        daemon::metrics::server(&args.metrics, args.port, &client, registry).await?;
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let heartbeat = Arc::new(Heartbeat::new());
    let health_addr =
        std::net::SocketAddr::new(args.health_probe_bind_address, args.health_probe_port);
    let health = daemon::health::start(
        health_addr,
        Probes {
            ready: ready.clone(),
            heartbeat: heartbeat.clone(),
            max_stall: args.liveness_max_stall,
        },
        stopped(),
    )
    .await?;
    let metrics_task = metrics_server.map(|s| tokio::spawn(s.run(stopped())));

    // Its ConfigurationState `speaker-<node>`.
    let component = Component::Speaker { node: node.clone() };
    let writer: StatusWriter<ConfigurationState> = StatusWriter::new(
        WriterConfig::default(),
        Arc::new(SystemClock),
        status_metrics,
    );
    let status_api =
        KubeStatusApi::<ConfigurationState>::new(client.clone(), FIELD_MANAGER_SPEAKER);
    let writer_task = tokio::spawn({
        let (writer, api, stopped) = (writer.clone(), status_api.clone(), stopped());
        async move { writer.run(api, stopped).await }
    });
    let state_watch = tokio::spawn(status::watch_into(
        writer.clone(),
        Api::<ConfigurationState>::namespaced(client.clone(), &ns),
        watcher::Config::default().fields(&format!("metadata.name={}", component.name())),
    ));
    let owner = status::own_pod_owner(client.clone(), &ns, &args.pod_name, &args.pod_uid).await;

    let view = ClusterView::builder(client.clone(), &ns)
        .kinds(Kind::SPEAKER)
        .start();
    let mut tracker = ConfigTracker::new();
    let reconcile = async {
        // Beat while the watches list (the API server may be slow or away).
        {
            let ready_fut = view.ready();
            tokio::pin!(ready_fut);
            loop {
                tokio::select! {
                    r = &mut ready_fut => { r?; break; }
                    _ = tokio::time::sleep(Duration::from_secs(5)) => heartbeat.beat(),
                }
            }
        }
        ready.store(true, std::sync::atomic::Ordering::Release);
        tracing::info!("watches ready");
        let nodes = view.nodes().context("the view watches Nodes")?.store();
        loop {
            heartbeat.beat();
            let Some(me) = nodes.get(&ObjectRef::new(&node)) else {
                tracing::warn!(node, "its Node object does not exist (yet): waiting");
                tokio::select! {
                    _ = view.config_changes().next() => {}
                    _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                }
                continue;
            };
            let parsed = speaker::node_config::for_node(view.resources(), &me)
                .and_then(|r| config::parse(&r).map_err(|e| e.to_string()));
            let outcome = tracker.load(parsed);
            match &outcome {
                Loaded::Accepted => {
                    metrics.update_ok();
                    let c = tracker.running().expect("accepted");
                    tracing::info!(
                        pools = c.pools.len(),
                        peers = c.peers.len(),
                        "configuration is valid and in force"
                    );
                }
                Loaded::Unchanged => {}
                Loaded::Invalid(e) => {
                    metrics.update_error();
                    if tracker.loaded() {
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
                }
            }
            metrics.config_loaded(tracker.loaded());
            metrics.config_stale(tracker.stale());
            let result: Result<(), &String> = match &outcome {
                Loaded::Invalid(e) => Err(e),
                _ => Ok(()),
            };
            writer.set_desired(
                component.key(&ns),
                configuration_state::desired(
                    &component,
                    &result,
                    owner.clone(),
                    configuration_state::now(),
                ),
            );
            // Wait for the next change, beating while idle.
            loop {
                tokio::select! {
                    _ = view.config_changes().next() => break,
                    _ = tokio::time::sleep(Duration::from_secs(5)) => heartbeat.beat(),
                }
            }
            // Let a burst (`kubectl apply` of many objects) settle.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        #[allow(unreachable_code)]
        anyhow::Ok(())
    };
    let outcome = tokio::select! {
        r = daemon::shutdown_signal() => r,
        r = reconcile => r.context("the speaker loop ended"),
    };
    let _ = stop_tx.send(true);
    drop(view);
    state_watch.abort();
    let deadline = Duration::from_secs(2);
    let _ = tokio::time::timeout(deadline, writer_task).await;
    let _ = tokio::time::timeout(deadline, health).await;
    if let Some(t) = metrics_task {
        let _ = tokio::time::timeout(deadline, t).await;
    }
    tracing::info!("speaker stopped");
    outcome
}
