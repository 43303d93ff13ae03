//! The metallb-rs speaker binary (one per node, hostNetwork).
//!
//! Takes every flag and variable of MetalLB's speaker (`-flag` and `--flag`), watches
//! the configuration, Nodes, Services and EndpointSlices through the shared cluster
//! view, parses the configuration as this node sees it (BGPPeers and BGPAdvertisements
//! of other nodes left out), keeps the last good configuration when a new one is
//! invalid, and reports each attempt in its `ConfigurationState speaker-<node>` and in
//! `metallb_k8s_client_config_*`. BGP mode: one session per BGPPeer of this node, the
//! routes of every Service this node announces (MetalLB's decisions, in
//! [`speaker::decide`]), BFD gating, `BGPSessionStatus` and `ServiceBGPStatus` objects,
//! `metallb_speaker_announced` and `metallb_bgp_*` / `metallb_bfd_*` metrics,
//! `nodeAssigned` events. Layer 2 mode: MetalLB's election ([`speaker::decide::l2`]),
//! the `arp-ndp` responder (started when the first L2Advertisement appears), claims per
//! Service, `ServiceL2Status` objects, `announceFailed` / `nodeAssigned` events. The live
//! speakers come from the `membership` crate (SWIM on `--ml-bindaddr`:`--ml-bindport`,
//! peers found by `--ml-labels`, with the fast path watching the owners this node would
//! take over from) when `--ml-bindaddr` and `--ml-labels` are both set, as MetalLB;
//! otherwise they are "every known Node" (MetalLB with memberlist disabled).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bgp::listener::Listeners;
use clap::{CommandFactory, FromArgMatches, Parser};
use cluster_view::{Batch, ClusterView, Kind};
use config::api::v1beta1::{
    BGPSessionStatus, ConfigurationState, InterfaceInfo, MetalLBServiceL2Status, NodeBGPStatus,
    ServiceBGPStatus, ServiceL2Status,
};
use config::api::{LABEL_NODE, LABEL_PEER, LABEL_SERVICE_NAME, LABEL_SERVICE_NAMESPACE};
use daemon::events::{Events, Note};
use daemon::health::{Heartbeat, Probes};
use daemon::k8s_metrics::K8sClientMetrics;
use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client};
use speaker::bgp_edge::{BgpFactory, RuntimeBfd};
use speaker::bgp_speaker::{BfdState, BgpSpeaker};
use speaker::bgp_status::{BgpStatusOutput, Mode as BgpStatusMode, SUMMARY_MIN_WRITE_INTERVAL};
use speaker::config_state::Loaded;
use speaker::decide::NodeFacts;
use speaker::decide::bgp::Options;
use speaker::l2_edge::EdgeL2;
use speaker::liveness::Liveness;
use speaker::node::{LoadOutcome, NodeSpeaker};
use speaker::warnings::{NodeWarnings, REASON_NOT_ANNOUNCEABLE};
use status::configuration_state::{self, Component};
use status::{
    Desired, FIELD_MANAGER_SPEAKER, KubeStatusApi, LabelScope, Labels, StatusWriter, SystemClock,
    WriteBudget, WriterConfig,
};
use tokio::sync::watch;

/// The flags of MetalLB's speaker (same names, defaults and variables).
#[derive(Debug, Parser)]
#[command(name = "speaker", version, about = "metallb-rs speaker")]
struct Args {
    /// The node this speaker runs on (required).
    #[arg(long, env = "METALLB_NODE_NAME", default_value = "")]
    node_name: String,
    /// The speaker's Pod: owner of its ConfigurationState (the per-node status objects
    /// belong to its Node).
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
    /// Membership bind address: the address other speakers reach this one at (its Pod
    /// IP). Membership runs when this and --ml-labels are set.
    #[arg(long, env = "METALLB_ML_BIND_ADDR", default_value = "")]
    ml_bindaddr: String,
    /// Membership UDP port (MetalLB's memberlist port).
    #[arg(long, env = "METALLB_ML_BIND_PORT", default_value = "7946")]
    ml_bindport: String,
    /// Label selector of the speaker Pods to join (e.g. app=metallb,component=speaker).
    #[arg(long, env = "METALLB_ML_LABELS", default_value = "")]
    ml_labels: String,
    /// Directory holding `secretkey`: membership datagrams are authenticated and
    /// encrypted with it (MetalLB's memberlist Secret).
    #[arg(long, env = "METALLB_ML_SECRET_KEY_PATH", default_value = "")]
    ml_secret_key_path: String,
    /// Membership WAN timers (memberlist's WAN defaults).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    ml_wan_config: bool,
    /// Stop answering layer-2 addresses while fewer than half of the speakers answer
    /// this one (a partition's minority side), before the other side takes over. Off by
    /// default, as MetalLB (which has no such fence).
    #[arg(long, env = "METALLB_ML_SELF_FENCE", num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    ml_self_fence: bool,
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
    /// Only Services of this loadBalancerClass (default: only Services without one).
    #[arg(long, default_value = "")]
    lb_class: String,
    /// Announce from nodes labelled node.kubernetes.io/exclude-from-external-load-balancers.
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
    /// Periodic gratuitous ARP/NA after the takeover burst, in seconds (or a duration), 0 = off.
    #[arg(long, env = "METALLB_GRATUITOUS_ARP_INTERVAL", default_value = "0")]
    gratuitous_arp_interval: String,
    /// `native`, `frr` or `frr-k8s`: all run the native stack.
    #[arg(long, env = "METALLB_BGP_TYPE", default_value = "native", hide = true)]
    bgp_type: String,
    /// Longest time the reconcile loop may go without turning before `/healthz` fails.
    #[arg(long, value_parser = daemon::flags::parse_duration, default_value = "60s")]
    liveness_max_stall: Duration,
    /// How BGP announcements are reported: `per-service`, one ServiceBGPStatus per
    /// (Service, node) as MetalLB; `summary`, one NodeBGPStatus per node, for large
    /// clusters (speaker::bgp_status).
    #[arg(long, env = "METALLB_SERVICE_BGP_STATUS", value_enum, default_value_t = BgpStatusMode::PerService)]
    service_bgp_status: BgpStatusMode,
    /// per-service: past this many ServiceBGPStatus objects on this node, switch to
    /// the summary (logged, and said in its ConfigurationState) instead of filling etcd.
    #[arg(long, env = "METALLB_SERVICE_BGP_STATUS_MAX_PER_NODE", default_value_t = speaker::bgp_status::DEFAULT_MAX_PER_NODE)]
    service_bgp_status_max_per_node: usize,
    /// BGP `nodeAssigned` events: `one` per Service transition (the first announcing
    /// node in sha256(node#ip) order; none for Services announced before a restart),
    /// or `every` announcing node, also after a restart (MetalLB).
    #[arg(long, value_enum, default_value_t = speaker::node::AssignedEvents::One)]
    bgp_node_assigned_events: speaker::node::AssignedEvents,
    /// summary: the most Services a NodeBGPStatus lists one by one (then cut, flagged).
    #[arg(long, default_value_t = speaker::bgp_status::DEFAULT_MAX_EXCEPTIONS)]
    node_bgp_status_max_services: usize,
}

/// Flags accepted for compatibility that do nothing yet: one warning each when given.
const NO_EFFECT_YET: &[&str] = &[
    "frrk8s_namespace",
    "frrk8s_secret_passthrough",
    "pprof_bind_address",
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
    if let Err(e) = speaker::l2_edge::parse_gratuitous_interval(&args.gratuitous_arp_interval) {
        bail!("--gratuitous-arp-interval: {e}");
    }
    // As MetalLB: the key is read before anything else runs, and a bad one is fatal.
    let ml_key = if args.ml_secret_key_path.is_empty() {
        None
    } else {
        match membership::SecretKey::read_dir(std::path::Path::new(&args.ml_secret_key_path)) {
            Ok(k) => Some(k),
            Err(e) => {
                tracing::error!(error = %e, "failed to read memberlist secret key file");
                bail!("failed to read memberlist secret key file: {e}");
            }
        }
    };
    let ml_settings = membership_settings(&args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let r = rt.block_on(run(args, ml_settings.map(|s| (s, ml_key))));
    if let Err(e) = &r {
        tracing::error!(error = format!("{e:#}"), "speaker failed");
    }
    r
}

/// The membership's bind address and discovery labels, when it runs (`--ml-bindaddr`
/// and `--ml-labels` both set, as MetalLB).
struct MlSettings {
    bind: std::net::SocketAddr,
    labels: String,
}

fn membership_settings(args: &Args) -> Result<Option<MlSettings>> {
    if args.ml_bindaddr.is_empty() || args.ml_labels.is_empty() {
        if !args.ml_bindaddr.is_empty() || !args.ml_labels.is_empty() {
            tracing::warn!(
                ml_bindaddr = args.ml_bindaddr,
                ml_labels = args.ml_labels,
                "membership needs both --ml-bindaddr and --ml-labels: it is off, every known Node counts as a live speaker"
            );
        }
        return Ok(None);
    }
    let ip: std::net::IpAddr = args.ml_bindaddr.parse().with_context(|| {
        format!(
            "--ml-bindaddr {:?}: an IP address (the speaker Pod's IP)",
            args.ml_bindaddr
        )
    })?;
    let port: u16 = args
        .ml_bindport
        .parse()
        .with_context(|| format!("--ml-bindport {:?}: a port number", args.ml_bindport))?;
    Ok(Some(MlSettings {
        bind: std::net::SocketAddr::new(ip, port),
        labels: args.ml_labels.clone(),
    }))
}

/// Starts the membership protocol (binds `bind`). Called once this speaker can claim
/// its layer-2 addresses: before that, other members must not count it live (they keep
/// answering for it, e.g. while the API server is away and a restarted speaker cannot
/// list), so the socket is not bound earlier (MetalLB binds first; its speaker crash-loops
/// while the API server is away instead).
async fn start_membership(
    args: &Args,
    node: &str,
    bind: std::net::SocketAddr,
    key: Option<membership::SecretKey>,
    registry: &prometheus::Registry,
) -> Result<membership::Membership> {
    let generation = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut cfg = membership::Config::new(node, bind, generation);
    cfg.wan = args.ml_wan_config;
    cfg.self_fence = args.ml_self_fence;
    let encrypted = key.is_some();
    let m = membership::Membership::start(
        membership::EdgeConfig::new(cfg, Vec::new(), key),
        Some(registry),
    )
    .await
    .context("starting the membership protocol")?;
    tracing::info!(
        bind = %m.local_addr(),
        encrypted,
        self_fence = args.ml_self_fence,
        "membership started: this speaker can claim its layer-2 addresses"
    );
    Ok(m)
}

async fn run(args: Args, ml: Option<(MlSettings, Option<membership::SecretKey>)>) -> Result<()> {
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
    let bgp_metrics = bgp::metrics::BgpMetrics::register(&registry)?;
    let announced_metric = speaker::metrics::Announced::register(&registry, &node)?;
    let l2_metrics = arp_ndp::metrics::Metrics::register(&registry)?;
    // Membership starts only once this speaker can claim (see `start_membership`): a
    // process that cannot answer yet must not be a candidate, or the successors that
    // answer for it meanwhile release its addresses to nobody.
    let (mut ml_pending, ml_labels, ml_bind) = match ml {
        Some((settings, key)) => {
            let bind = settings.bind;
            (
                Some((settings.bind, key)),
                Some(settings.labels),
                Some(bind),
            )
        }
        None => {
            tracing::info!(
                "membership off (--ml-bindaddr and --ml-labels not both set): every known Node counts as a live speaker"
            );
            (None, None, None)
        }
    };
    let mut ml: Option<membership::Membership> = None;
    let l2_driver_config = arp_ndp::linux::DriverConfig {
        exclude: arp_ndp::interfaces::ExcludeList::load_or_default(std::path::Path::new(
            arp_ndp::interfaces::DEFAULT_EXCLUDE_PATH,
        ))?,
        announce: speaker::l2_edge::announce_config(
            speaker::l2_edge::parse_gratuitous_interval(&args.gratuitous_arp_interval)
                .map_err(anyhow::Error::msg)?,
        ),
        metrics: Some(l2_metrics),
        open_fault: None,
    };
    // The BFD runtime: its own thread; without it BFD peers report why.
    let bfd_runtime = match bfd::Bfd::start(bfd::Config::default()) {
        Ok(b) => {
            bfd::metrics::register(&registry, &b.handle())?;
            Ok(b)
        }
        Err(e) => {
            tracing::error!(error = %e, "BFD could not start; peers with a BFD profile will say so");
            Err(e.to_string())
        }
    };
    let mut bfd_events = match &bfd_runtime {
        Ok(b) => b.handle().subscribe(),
        Err(_) => tokio::sync::mpsc::unbounded_channel().1,
    };
    let bfd_ops = RuntimeBfd::new(
        bfd_runtime
            .as_ref()
            .map(|b| b.handle())
            .map_err(Clone::clone),
    );

    let metrics_server =
        daemon::metrics::server(&args.metrics, args.port, &client, registry.clone()).await?;
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let heartbeat = Arc::new(Heartbeat::new());
    let health_addr =
        std::net::SocketAddr::new(args.health_probe_bind_address, args.health_probe_port);
    let health = daemon::health::start(
        health_addr,
        Probes {
            ready: ready.clone(),
            gates: Vec::new(),
            heartbeat: heartbeat.clone(),
            max_stall: args.liveness_max_stall,
        },
        stopped(),
    )
    .await?;
    let metrics_task = metrics_server.map(|s| tokio::spawn(s.run(stopped())));

    // Its ConfigurationState `speaker-<node>`.
    let component = Component::Speaker { node: node.clone() };
    // One request budget for every status writer of the process: controller-runtime's
    // client default (20 requests/s, bursts of 30), which MetalLB's speaker runs with
    // (a ServiceBGPStatus costs three requests to create; 5/s made a node with 1,200
    // Services take 4 minutes to show them all, bench-bgp in BENCHMARKS.md).
    let budget = WriteBudget::new(20.0, 30);
    let writer: StatusWriter<ConfigurationState> = StatusWriter::with_budget(
        WriterConfig::default(),
        Arc::new(SystemClock),
        status_metrics.clone(),
        budget.clone(),
    );
    let status_api =
        KubeStatusApi::<ConfigurationState>::new(client.clone(), FIELD_MANAGER_SPEAKER);
    let mut tasks = Vec::new();
    tasks.push(tokio::spawn({
        let (writer, api, stopped) = (writer.clone(), status_api.clone(), stopped());
        async move { writer.run(api, stopped).await }
    }));
    let state_watch = tokio::spawn(status::watch_into(
        writer.clone(),
        Api::<ConfigurationState>::namespaced(client.clone(), &ns),
        watcher::Config::default().fields(&format!("metadata.name={}", component.name())),
    ));
    // This node's ServiceBGPStatus and BGPSessionStatus objects.
    let scope = LabelScope::node(&ns, &node);
    let node_selector = format!("{LABEL_NODE}={node}");
    let svc_status: StatusWriter<ServiceBGPStatus> = StatusWriter::labeled(
        WriterConfig::default(),
        scope.clone(),
        Arc::new(SystemClock),
        status_metrics.clone(),
        budget.clone(),
    );
    let session_status: StatusWriter<BGPSessionStatus> = StatusWriter::labeled(
        WriterConfig::default(),
        scope.clone(),
        Arc::new(SystemClock),
        status_metrics.clone(),
        budget.clone(),
    );
    let l2_status: StatusWriter<ServiceL2Status> = StatusWriter::labeled(
        WriterConfig::default(),
        scope.clone(),
        Arc::new(SystemClock),
        status_metrics.clone(),
        budget.clone(),
    );
    // Its NodeBGPStatus (`--service-bgp-status=summary`, or past the cap).
    let node_bgp_status: StatusWriter<NodeBGPStatus> = StatusWriter::labeled(
        WriterConfig {
            min_write_interval: SUMMARY_MIN_WRITE_INTERVAL,
            ..WriterConfig::default()
        },
        scope.clone(),
        Arc::new(SystemClock),
        status_metrics,
        budget,
    );
    let mut watches = vec![state_watch];
    {
        let w = svc_status.clone();
        let api = KubeStatusApi::<ServiceBGPStatus>::new(client.clone(), FIELD_MANAGER_SPEAKER);
        let stop = stopped();
        tasks.push(tokio::spawn(async move { w.run(api, stop).await }));
        watches.push(tokio::spawn(status::watch_into(
            svc_status.clone(),
            Api::<ServiceBGPStatus>::namespaced(client.clone(), &ns),
            watcher::Config::default().labels(&node_selector),
        )));
        let w = l2_status.clone();
        let api = KubeStatusApi::<ServiceL2Status>::new(client.clone(), FIELD_MANAGER_SPEAKER);
        let stop = stopped();
        tasks.push(tokio::spawn(async move { w.run(api, stop).await }));
        watches.push(tokio::spawn(status::watch_into(
            l2_status.clone(),
            Api::<ServiceL2Status>::namespaced(client.clone(), &ns),
            watcher::Config::default().labels(&node_selector),
        )));
        let w = node_bgp_status.clone();
        let api = KubeStatusApi::<NodeBGPStatus>::new(client.clone(), FIELD_MANAGER_SPEAKER);
        let stop = stopped();
        tasks.push(tokio::spawn(async move { w.run(api, stop).await }));
        watches.push(tokio::spawn(status::watch_into(
            node_bgp_status.clone(),
            Api::<NodeBGPStatus>::namespaced(client.clone(), &ns),
            watcher::Config::default().labels(&node_selector),
        )));
        let w = session_status.clone();
        let api = KubeStatusApi::<BGPSessionStatus>::new(client.clone(), FIELD_MANAGER_SPEAKER);
        let stop = stopped();
        tasks.push(tokio::spawn(async move { w.run(api, stop).await }));
        watches.push(tokio::spawn(status::watch_into(
            session_status.clone(),
            Api::<BGPSessionStatus>::namespaced(client.clone(), &ns),
            watcher::Config::default().labels(&node_selector),
        )));
    }
    let owner = status::own_pod_owner(client.clone(), &ns, &args.pod_name, &args.pod_uid).await;

    // Events (`nodeAssigned`, `announceFailed`, `NotAnnounceable`): sent by a task of their own, never by
    // the loop.
    let (event_tx, mut event_rx) = tokio::sync::mpsc::channel::<(ObjectReference, Note)>(1024);
    tasks.push(tokio::spawn({
        let events = Events::new(client.clone(), "metallb-speaker", Some(node.clone()));
        async move {
            while let Some((r, note)) = event_rx.recv().await {
                // A message of its own is an event of its own (a warning that changes
                // is not a repeat of the old one).
                events
                    .publish_distinct(&r, &note, Duration::from_secs(5))
                    .await;
            }
        }
    }));

    // Services of type LoadBalancer only (every other type is withdrawn alike:
    // leaving the selection is a deletion), where the API server can select them.
    let view = ClusterView::builder(client.clone(), &ns)
        .kinds(Kind::SPEAKER)
        .load_balancer_services_only()
        .start();
    let (peer_tx, mut peer_rx) = tokio::sync::mpsc::channel(1024);
    let factory = BgpFactory::new(Listeners::new(), Some(bgp_metrics));
    let mut speaker = NodeSpeaker::new(
        Options {
            lb_class: args.lb_class.clone(),
            ignore_exclude_lb: args.ignore_exclude_lb,
        },
        BgpSpeaker::new(&node, factory, bfd_ops, peer_tx),
    )
    .with_l2(EdgeL2::new());
    speaker.set_summary_cap(args.node_bgp_status_max_services);
    speaker.set_assigned_events(args.bgp_node_assigned_events);
    let mut l2_driver: Option<tokio::task::JoinHandle<Result<(), arp_ndp::linux::DriverError>>> =
        None;
    // The live speakers: the membership's once joined (none before: this node claims
    // nothing until it joins), or "every known Node" without it.
    let (_live_tx, mut liveness) = if ml_pending.is_some() {
        let (tx, l) = Liveness::joining();
        (Some(tx), l)
    } else {
        let (tx, l) = Liveness::memberlist_disabled();
        (Some(tx), l)
    };
    // The other speakers' addresses (`--ml-labels`), found by a task of their own.
    let (seeds_tx, mut seeds_rx) = watch::channel::<Option<Vec<std::net::SocketAddr>>>(None);
    if let (Some(bind), Some(labels)) = (ml_bind, ml_labels) {
        tasks.push(tokio::spawn(speaker::discovery::run(
            client.clone(),
            ns.clone(),
            labels,
            bind,
            seeds_tx,
            stopped(),
        )));
    } else {
        drop(seeds_tx);
    }
    let mut watched_owners = std::collections::BTreeSet::new();
    let mut bgp_status = BgpStatusOutput::new(
        &node,
        args.service_bgp_status,
        args.service_bgp_status_max_per_node,
        svc_status.clone(),
        node_bgp_status.clone(),
    );
    bgp_status.set_owner(owner.clone());
    tracing::info!(
        mode = args.service_bgp_status.as_str(),
        "BGP announcements reported per {}",
        if args.service_bgp_status == BgpStatusMode::PerService {
            "(Service, node): ServiceBGPStatus"
        } else {
            "node: NodeBGPStatus"
        }
    );
    let mut out = Outputs {
        node: node.clone(),
        ns: ns.clone(),
        owner: owner.clone(),
        bgp_status,
        l2_status: l2_status.clone(),
        session_status: session_status.clone(),
        sessions_down: Default::default(),
        announced: announced_metric.clone(),
        events: event_tx,
    };
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
        speaker.set_live(liveness.current());
        let nodes = view.nodes().context("the view watches Nodes")?.store();
        let services = view
            .services()
            .context("the view watches Services")?
            .store();
        let mut synced = false;
        let mut config_pending = true;
        // The whole configuration (every node's share): Service warnings are judged on it.
        let mut whole: Option<config::Config> = None;
        let mut node_warnings = NodeWarnings::default();
        let mut state = StateReport {
            component: component.clone(),
            ns: ns.clone(),
            owner: owner.clone(),
            result: Ok(()),
            config_warnings: Vec::new(),
            bgp_status_note: None,
            membership: None,
        };
        let mut batch: Option<Batch> = None;
        loop {
            heartbeat.beat();
            let mut all = false;
            let mut keys: Vec<String> = Vec::new();
            let mut refresh_nodes = false;
            if config_pending {
                config_pending = false;
                refresh_nodes = true;
                match nodes.get(&ObjectRef::new(&node)) {
                    None => {
                        tracing::warn!(node, "its Node object does not exist (yet): waiting");
                    }
                    Some(me) => {
                        // The per-node status objects belong to the Node: a restart
                        // changes no owner, the Node's deletion collects them.
                        if let Some(o) = speaker::bgp_status::node_owner(&me)
                            && out.owner.as_ref() != Some(&o)
                        {
                            out.owner = Some(o.clone());
                            out.bgp_status.set_owner(Some(o));
                        }
                        let parsed = speaker::node_config::for_node(view.resources(), &me)
                            .and_then(|r| config::parse(&r).map_err(|e| e.to_string()));
                        let outcome = speaker.load(parsed, NodeFacts::of(&me));
                        report_config(&speaker, &outcome, &metrics);
                        // The responder starts with the first L2Advertisement.
                        let wants_l2 = speaker
                            .config()
                            .is_some_and(|c| !c.l2_advertisements.is_empty());
                        if wants_l2 && l2_driver.is_none() {
                            // Tried again on the next configuration change when it fails.
                            let start = tokio::time::timeout(
                                Duration::from_secs(10),
                                arp_ndp::linux::start(l2_driver_config.clone()),
                            )
                            .await;
                            match start {
                                Ok(Ok((handle, task))) => {
                                    tracing::info!("layer-2 responder started");
                                    speaker.l2().ops().set_handle(handle);
                                    l2_driver = Some(task);
                                    all = true;
                                }
                                // Fatal, as MetalLB's speaker: a node that cannot answer
                                // must not stay a live member that wins addresses (its
                                // share would go dark); it leaves, the others answer.
                                Ok(Err(e)) => anyhow::bail!(
                                    "the layer-2 responder cannot start (CAP_NET_RAW?): {e}"
                                ),
                                Err(_) => {
                                    anyhow::bail!("the layer-2 responder did not start within 10 s")
                                }
                            }
                        }
                        // This speaker can claim now (watches listed, a configuration,
                        // its responder running when layer 2 is wanted): it becomes a
                        // member, and a candidate, only from here.
                        if ml.is_none()
                            && speaker.config().is_some()
                            && let Some((bind, key)) = ml_pending.take()
                        {
                            let m = start_membership(&args, &node, bind, key, &registry).await?;
                            wait_joined(&m, &mut seeds_rx).await;
                            liveness = Liveness::membership(m.live(), m.fenced());
                            speaker.set_live(liveness.current());
                            ml = Some(m);
                            all = true;
                        }
                        for s in &outcome.skipped {
                            tracing::error!(
                                peer = s.peer,
                                reason = s.why,
                                "BGPPeer cannot run on this node"
                            );
                        }
                        // Ended sessions flush their Cease on their own (bounded).
                        for c in outcome.closing {
                            tokio::spawn(c);
                        }
                        state.result = match &outcome.loaded {
                            Loaded::Invalid(e) => Err(e.clone()),
                            _ => Ok(()),
                        };
                        // Selector combinations that cannot overlap, judged on the
                        // whole configuration (not this node's share of it), which
                        // also judges the Services (`speaker::warnings`).
                        if state.result.is_ok() {
                            let all_objects = view.resources();
                            let parsed = config::parse(&all_objects).ok();
                            let warnings = parsed
                                .as_ref()
                                .map(|c| config::overlap::selector_warnings(c, &all_objects.nodes))
                                .unwrap_or_default();
                            state.config_warnings =
                                warnings.iter().map(ToString::to_string).collect();
                            if !state.config_warnings.is_empty() {
                                tracing::warn!(warnings = ?state.config_warnings, "configuration warnings");
                            }
                            if parsed != whole {
                                whole = parsed;
                                speaker.set_whole_config(whole.clone());
                                all = true;
                            }
                        } else {
                            state.config_warnings.clear();
                        }
                        state.write(&writer, &node_warnings);
                        all |= outcome.reprocess_all;
                    }
                }
            }
            // The batch the wait took, and whatever came since.
            for b in [batch.take(), view.service_changes().take()]
                .into_iter()
                .flatten()
            {
                match b {
                    Batch::All => all = true,
                    Batch::Keys(k) => keys.extend(k),
                }
            }
            keys.sort();
            keys.dedup();
            if all || refresh_nodes {
                all |= speaker.set_nodes(node_facts(&nodes));
            }
            if speaker.config().is_some() {
                let started = std::time::Instant::now();
                let every: Vec<String>;
                let todo: &[String] = if all {
                    let mut v: Vec<String> = services
                        .state()
                        .iter()
                        .map(|s| cluster_view::service_key(s))
                        .collect();
                    // Services this node holds anything for or warned about, gone
                    // from the cache (deleted, or no longer LoadBalancers).
                    v.extend(speaker.tracked().map(str::to_owned));
                    v.extend(node_warnings.keys().map(str::to_owned));
                    v.sort();
                    v.dedup();
                    every = v;
                    &every
                } else {
                    &keys
                };
                let mut judge = Judge {
                    node: &node,
                    whole: whole.as_ref(),
                    warnings: &mut node_warnings,
                    events: &out.events,
                    changed: false,
                };
                let n = decide_services(&mut speaker, &view, &services, todo, &mut judge);
                if judge.changed {
                    state.write(&writer, &node_warnings);
                }
                let sent = speaker.publish();
                if n > 0 {
                    tracing::debug!(
                        services = n,
                        sessions_updated = sent,
                        took_us = started.elapsed().as_micros() as u64,
                        "services decided"
                    );
                }
                out.apply(&mut speaker);
                let note = out.bgp_status.switched().map(str::to_owned);
                if note != state.bgp_status_note {
                    state.bgp_status_note = note;
                    state.write(&writer, &node_warnings);
                }
                if let Some(m) = ml.as_ref() {
                    let owners = speaker.watched_owners();
                    if owners != watched_owners {
                        tracing::debug!(?owners, "watching the owners this node takes over from");
                        m.watch_owners(owners.clone());
                        watched_owners = owners;
                    }
                }
                if n > 0 && speaker.refused_for_announced() {
                    // The refused configuration may fit now that Services moved: it is
                    // loaded again at the next change (MetalLB retries it too).
                    config_pending = true;
                }
                if all && !synced {
                    // The first full pass: objects of this node nobody wants go.
                    synced = true;
                    out.bgp_status.initial_sync_done();
                    speaker.initial_pass_done();
                    session_status.initial_sync_done();
                    l2_status.initial_sync_done();
                }
            }
            // The membership view explain elects with, on changes (coalesced by
            // the writer: one write a second at most).
            // (Not before a configuration: the state written would claim one.)
            let membership = liveness.report();
            if speaker.config().is_some() && membership != state.membership {
                state.membership = membership;
                state.write(&writer, &node_warnings);
            }
            // Wait for the next change, beating while idle.
            loop {
                tokio::select! {
                    _ = view.config_changes().next() => {
                        // Let a burst (`kubectl apply` of many objects) settle.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        config_pending = true;
                        break;
                    }
                    b = view.service_changes().next() => {
                        batch = Some(b);
                        break;
                    }
                    Some(ev) = peer_rx.recv() => {
                        speaker.bgp().on_event(ev);
                        while let Ok(ev) = peer_rx.try_recv() {
                            speaker.bgp().on_event(ev);
                        }
                        out.apply(&mut speaker);
                    }
                    Some(ev) = bfd_events.recv() => {
                        on_bfd(&mut speaker, &ev);
                        out.apply(&mut speaker);
                    }
                    live = liveness.changed() => {
                        tracing::debug!(?live, "live speakers");
                        let changed = speaker.set_live(live);
                        if changed {
                            batch = Some(Batch::All);
                        }
                        // (a change while fenced changes no decision, but the view)
                        if changed || liveness.report() != state.membership {
                            break;
                        }
                    }
                    ev = async { ml.as_mut().expect("guarded").next_event().await }, if ml.is_some() => {
                        let Some(ev) = ev else {
                            anyhow::bail!("the membership protocol stopped");
                        };
                        if let membership::Event::WatcherUp { node: watcher } = &ev {
                            // It may have answered for this node's addresses meanwhile.
                            let n = speaker.l2().reannounce();
                            if n > 0 {
                                tracing::info!(watcher, addresses = n, "a speaker watching this one is back: announcing its layer-2 addresses again");
                            }
                        }
                        // the live set and the fence come through `liveness`
                        on_membership(ev);
                    }
                    r = seeds_rx.changed(), if ml.is_some() => {
                        if r.is_ok()
                            && let (Some(m), Some(seeds)) = (ml.as_ref(), seeds_rx.borrow_and_update().clone())
                        {
                            m.set_seeds(seeds);
                        }
                    }
                    r = async { l2_driver.as_mut().expect("guarded").await }, if l2_driver.is_some() => {
                        l2_driver = None;
                        tracing::error!(result = ?r.map(|r| r.map_err(|e| e.to_string())), "the layer-2 responder stopped");
                        anyhow::bail!("the layer-2 responder stopped");
                    }
                    _ = tokio::time::sleep(Duration::from_secs(5)) => heartbeat.beat(),
                }
            }
        }
        #[allow(unreachable_code)]
        anyhow::Ok(())
    };
    let outcome = tokio::select! {
        r = daemon::shutdown_signal() => r,
        r = reconcile => r.context("the speaker loop ended"),
    };
    // Layer 2 first: stop answering, then tell the other speakers, whose next candidate
    // takes over at once (no moment with two nodes answering).
    if let Some(m) = ml.take() {
        if let Some(t) = l2_driver.take() {
            t.abort();
        }
        let started = std::time::Instant::now();
        m.leave(Duration::from_millis(500)).await;
        tracing::info!(
            took_ms = started.elapsed().as_millis() as u64,
            "left the membership"
        );
    }
    // Sessions first: graceful-restart peers keep our routes, the others get a Cease
    // (bounded: MetalLB's manifests give the Pod 2 s after SIGTERM).
    let ending = speaker.shutdown();
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        futures_util::future::join_all(ending),
    )
    .await;
    let _ = stop_tx.send(true);
    // The event task ends when its queue's sender goes.
    drop(out);
    drop(view);
    for w in watches {
        w.abort();
    }
    let deadline = Duration::from_secs(2);
    for t in tasks {
        let _ = tokio::time::timeout(deadline, t).await;
    }
    let _ = tokio::time::timeout(deadline, health).await;
    if let Some(t) = metrics_task {
        let _ = tokio::time::timeout(deadline, t).await;
    }
    if let Ok(b) = bfd_runtime {
        b.shutdown();
    }
    tracing::info!("speaker stopped");
    outcome
}

type Speaker = NodeSpeaker<BgpFactory, RuntimeBfd, EdgeL2>;

/// Waits until this speaker has joined the other members (`speaker::join`), and says
/// how.
async fn wait_joined(
    m: &membership::Membership,
    seeds: &mut watch::Receiver<Option<Vec<std::net::SocketAddr>>>,
) {
    let started = std::time::Instant::now();
    let how = speaker::join::wait_joined(
        m.live(),
        seeds,
        |s| m.set_seeds(s),
        speaker::join::INITIAL_JOIN_WAIT,
    )
    .await;
    let members = m.live().borrow().clone();
    let took_ms = started.elapsed().as_millis() as u64;
    match how {
        speaker::join::Joined::Members => {
            tracing::info!(?members, took_ms, "membership joined")
        }
        speaker::join::Joined::Alone => {
            tracing::info!(took_ms, "membership: no other speaker found")
        }
        speaker::join::Joined::TimedOut => tracing::warn!(
            ?members,
            "no other speaker answered within {:?}: deciding with the members known",
            speaker::join::INITIAL_JOIN_WAIT
        ),
    }
}

/// Logs a membership event (the live set and the fence, the state, come through
/// [`Liveness`]'s watches).
fn on_membership(ev: membership::Event) {
    use membership::Event;
    match ev {
        Event::OwnerDown { node, after_ns } => {
            tracing::info!(
                owner = node,
                detected_after_ms = after_ns / 1_000_000,
                "owner down (heartbeat lost, no helper reached it): taking over its layer-2 addresses"
            );
        }
        Event::PathFault { node } => {
            tracing::warn!(
                owner = node,
                "heartbeat with the owner lost but another speaker reaches it: path fault, nothing moves"
            );
        }
        Event::HeartbeatUp { node } => {
            tracing::debug!(owner = node, "heartbeat with the owner up");
        }
        Event::OwnerBack { node } => {
            tracing::info!(owner = node, "owner back");
        }
        Event::WatcherUp { node } => {
            tracing::debug!(
                watcher = node,
                "heartbeat with a speaker watching this one up"
            );
        }
        Event::Rejoined { generation } => {
            tracing::warn!(
                generation,
                "the other speakers had declared this one down: rejoined"
            );
        }
        Event::Fence(on) => {
            // the state itself comes through the membership's fence watch
            // (`Liveness`); this is the log line
            if on {
                tracing::warn!(
                    "no majority of the speakers answers: self-fenced, layer-2 addresses are not answered"
                );
            } else {
                tracing::info!("a majority of the speakers answers again: fence lifted");
            }
        }
        Event::LiveChanged(_) => {}
    }
}

/// Every known Node's facts (the layer-2 candidates).
fn node_facts(nodes: &Store<k8s_openapi::api::core::v1::Node>) -> BTreeMap<String, NodeFacts> {
    nodes
        .state()
        .iter()
        .map(|n| {
            let f = NodeFacts::of(n);
            (f.name.clone(), f)
        })
        .collect()
}

/// Decides each Service of `keys` again; returns how many.
/// Reports the Service warnings of this node ([`speaker::warnings`]): a Warning
/// event on the Service when one appears or changes, and whether the set changed
/// (the ConfigurationState follows).
struct Judge<'a> {
    node: &'a str,
    whole: Option<&'a config::Config>,
    warnings: &'a mut NodeWarnings,
    events: &'a tokio::sync::mpsc::Sender<(ObjectReference, Note)>,
    changed: bool,
}

impl Judge<'_> {
    fn service(&mut self, key: &str, svc: Option<&Service>, slices: &[Arc<EndpointSlice>]) {
        let found = match (self.whole, svc) {
            (Some(whole), Some(svc)) => {
                speaker::warnings::local_endpoints_unselected(whole, key, svc, slices)
            }
            _ => None,
        };
        // Reported by the nodes that host the endpoints.
        let here = found
            .filter(|w| w.endpoint_nodes.contains(self.node))
            .map(|w| w.message);
        let (new, changed) = self.warnings.set(key, here);
        self.changed |= changed;
        if let Some(message) = new {
            tracing::warn!(service = key, warning = message, "Service not announceable");
            let note = Note {
                warning: true,
                reason: REASON_NOT_ANNOUNCEABLE.into(),
                message,
            };
            if self.events.try_send((service_ref(key), note)).is_err() {
                tracing::debug!(service = key, "event queue full: event dropped");
            }
        }
    }
}

/// What `speaker-<node>`'s ConfigurationState says: the configuration's outcome,
/// its warnings, and this node's Service warnings.
struct StateReport {
    component: Component,
    ns: String,
    owner: Option<OwnerReference>,
    result: Result<(), String>,
    config_warnings: Vec<String>,
    /// Why BGP announcements are reported otherwise than configured.
    bgp_status_note: Option<String>,
    /// Its layer-2 membership view (membership on).
    membership: Option<config::api::v1beta1::Layer2Membership>,
}

impl StateReport {
    fn write(&self, writer: &StatusWriter<ConfigurationState>, services: &NodeWarnings) {
        let mut desired = configuration_state::desired(
            &self.component,
            &self.result,
            self.owner.clone(),
            configuration_state::now(),
        );
        let mut warnings = if self.result.is_ok() {
            self.config_warnings.clone()
        } else {
            Vec::new()
        };
        warnings.extend(self.bgp_status_note.clone());
        warnings.extend(services.messages());
        desired.status = configuration_state::with_warnings(
            desired.status,
            &warnings,
            configuration_state::now(),
        );
        desired.status.layer2_membership = self.membership.clone();
        writer.set_desired(self.component.key(&self.ns), desired);
    }
}

fn decide_services(
    speaker: &mut Speaker,
    view: &ClusterView,
    services: &Store<Service>,
    keys: &[String],
    judge: &mut Judge<'_>,
) -> usize {
    for key in keys {
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let svc = services.get(&ObjectRef::new(name).within(ns));
        let slices = view.endpoint_slices_of(key);
        // MetalLB's log lines, on changes only.
        if let Some(d) = speaker.service(key, svc.as_deref(), &slices) {
            log_decision(key, "bgp", &d.result, d.changed);
            log_decision(key, "layer2", &d.l2, d.l2_changed);
        }
        judge.service(key, svc.as_deref(), &slices);
    }
    keys.len()
}

fn log_decision(
    key: &str,
    protocol: &str,
    result: &Result<(), speaker::decide::bgp::Reason>,
    changed: bool,
) {
    match (result, changed) {
        (Err(reason), true) => {
            tracing::info!(service = key, protocol, reason = %reason, "serviceWithdrawn")
        }
        (Ok(()), true) => tracing::info!(service = key, protocol, "serviceAnnounced"),
        (r, false) => tracing::debug!(service = key, protocol, result = ?r, "unchanged"),
    }
}

fn on_bfd(speaker: &mut Speaker, ev: &bfd::BfdEvent) {
    let state = match ev.status.state {
        bfd::State::Up => BfdState::Up,
        bfd::State::Down => BfdState::Down,
        bfd::State::Init => BfdState::Init,
        bfd::State::AdminDown => BfdState::AdminDown,
    };
    let clients: Vec<u64> = ev.clients.iter().map(|c| c.0).collect();
    let down = ev.client_action == bfd::ClientAction::Down;
    speaker.bgp().on_bfd(&clients, state, down);
}

fn report_config(speaker: &Speaker, outcome: &LoadOutcome, metrics: &K8sClientMetrics) {
    match &outcome.loaded {
        Loaded::Accepted => {
            metrics.update_ok();
            if let Some(c) = speaker.config() {
                tracing::info!(
                    pools = c.pools.len(),
                    peers = c.peers.len(),
                    "configuration is valid and in force"
                );
            }
        }
        Loaded::Unchanged => {}
        Loaded::Invalid(e) => {
            metrics.update_error();
            if speaker.tracker().loaded() {
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
    metrics.config_loaded(speaker.tracker().loaded());
    metrics.config_stale(speaker.tracker().stale());
}

/// Where the effects of a step go.
struct Outputs {
    node: String,
    ns: String,
    owner: Option<OwnerReference>,
    bgp_status: BgpStatusOutput,
    l2_status: StatusWriter<ServiceL2Status>,
    session_status: StatusWriter<BGPSessionStatus>,
    /// Sessions whose last status handed to `session_status` was not
    /// Established.
    sessions_down: std::collections::BTreeSet<String>,
    announced: speaker::metrics::Announced,
    events: tokio::sync::mpsc::Sender<(ObjectReference, Note)>,
}

fn service_ref(key: &str) -> ObjectReference {
    let (svc_ns, name) = key.split_once('/').unwrap_or(("", key));
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Service".into()),
        namespace: Some(svc_ns.to_owned()),
        name: Some(name.to_owned()),
        ..Default::default()
    }
}

fn service_identity(key: &str) -> Labels {
    let (svc_ns, name) = key.split_once('/').unwrap_or(("", key));
    Labels::from([
        (LABEL_SERVICE_NAME.to_owned(), name.to_owned()),
        (LABEL_SERVICE_NAMESPACE.to_owned(), svc_ns.to_owned()),
    ])
}

impl Outputs {
    fn apply(&mut self, speaker: &mut Speaker) {
        let fx = speaker.take_effects();
        self.bgp_status
            .apply(fx.service_status, || speaker.bgp_summary());
        for (key, ip, on) in fx.announced_metric {
            self.announced.set(&key, "bgp", ip, on);
        }
        for (key, ip, on) in fx.l2_announced_metric {
            self.announced.set(&key, "layer2", ip, on);
        }
        for (key, interfaces) in fx.l2_status {
            let identity = service_identity(&key);
            match interfaces {
                Some(interfaces) => {
                    let (svc_ns, name) = key.split_once('/').unwrap_or(("", &key));
                    self.l2_status.set_labeled(
                        identity.clone(),
                        Desired::new(MetalLBServiceL2Status {
                            node: self.node.clone(),
                            service_name: name.to_owned(),
                            service_namespace: svc_ns.to_owned(),
                            interfaces: interfaces
                                .into_iter()
                                .map(|name| InterfaceInfo { name })
                                .collect(),
                        })
                        .owner(self.owner.clone()),
                    );
                    // The node field is immutable: the former owner's object goes.
                    self.l2_status.delete_others(identity);
                }
                None => self.l2_status.remove_labeled(identity),
            }
        }
        let assigned = |protocol: &str| Note {
            warning: false,
            reason: "nodeAssigned".into(),
            message: format!(
                "announcing from node {} with protocol {}",
                config::gofmt::quote(&self.node),
                config::gofmt::quote(protocol)
            ),
        };
        let notes = fx
            .node_assigned
            .into_iter()
            .map(|k| (k, assigned("bgp")))
            .chain(
                fx.l2_node_assigned
                    .into_iter()
                    .map(|k| (k, assigned("layer2"))),
            )
            .chain(fx.announce_failed.into_iter().map(|(k, ip)| {
                let note = Note {
                    warning: true,
                    reason: "announceFailed".into(),
                    message: format!(
                        "the interfaces specified by LB IP {} doesn't exist in assigned node {} with protocol \"layer2\"",
                        config::gofmt::quote(&config::gofmt::ip(ip)),
                        config::gofmt::quote(&self.node)
                    ),
                };
                tracing::warn!(service = k, %ip, "the interfaces of the address do not exist on this node");
                (k, note)
            }));
        for (key, note) in notes {
            if self.events.try_send((service_ref(&key), note)).is_err() {
                tracing::debug!(service = key, "event queue full: event dropped");
            }
        }
        for (peer, status) in speaker.bgp().take_status_changes() {
            let identity = Labels::from([(LABEL_PEER.to_owned(), peer.clone())]);
            match status {
                Some(s) => {
                    let pace =
                        speaker::bgp_speaker::status_pace(&mut self.sessions_down, &peer, &s);
                    let mut desired = Desired::new(s).owner(self.owner.clone());
                    if let Some(interval) = pace {
                        desired = desired.min_interval(interval);
                    }
                    self.session_status.set_labeled(identity, desired)
                }
                None => {
                    self.sessions_down.remove(&peer);
                    self.session_status.remove_labeled(identity)
                }
            }
        }
        let _ = &self.ns;
    }
}
