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

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bgp::listener::Listeners;
use clap::{CommandFactory, FromArgMatches, Parser};
use cluster_view::{ClusterView, Kind};
use config::api::LABEL_NODE;
use config::api::v1beta1::{
    BGPSessionStatus, ConfigurationState, NodeBGPStatus, ServiceBGPStatus, ServiceL2Status,
};
use daemon::events::{Events, Note};
use daemon::health::{Heartbeat, Probes};
use daemon::k8s_metrics::K8sClientMetrics;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::watcher;
use kube::{Api, Client};
use speaker::bgp_edge::{BgpFactory, RuntimeBfd};
use speaker::bgp_speaker::BgpSpeaker;
use speaker::bgp_status::{BgpStatusOutput, Mode as BgpStatusMode, SUMMARY_MIN_WRITE_INTERVAL};
use speaker::decide::bgp::Options;
use speaker::driver::{Driver, Join, L2Start, L2Task, Member, Outputs, Parts};
use speaker::l2_edge::EdgeL2;
use speaker::node::NodeSpeaker;
use status::configuration_state::Component;
use status::{
    FIELD_MANAGER_SPEAKER, KubeStatusApi, LabelScope, StatusWriter, SystemClock, WriteBudget,
    WriterConfig,
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
    /// With membership on, leave the layer-2 Services a running MetalLB speaker
    /// Pod of this namespace (labelled a speaker, without `metallb-rs/component`, its
    /// image `.../metallb/speaker`) is a candidate of to MetalLB's speakers, which elect among themselves: no
    /// address answered by both implementations during a migration.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "true")]
    yield_to_metallb: bool,
    /// Other namespaces whose MetalLB speaker Pods count for `--yield-to-metallb`, besides
    /// the speaker's own (a MetalLB installed in another namespace than ours),
    /// comma-separated. The speaker needs `list` and `watch` on Pods there.
    #[arg(
        long,
        env = "METALLB_YIELD_NAMESPACES",
        value_delimiter = ',',
        default_value = ""
    )]
    yield_to_metallb_namespaces: Vec<String>,
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
    let bfd_events = match &bfd_runtime {
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
    tasks.push(daemon::heap::spawn_release_free_heap(stopped()));
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
    let (peer_tx, peer_rx) = tokio::sync::mpsc::channel(1024);
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
    // The other speakers' addresses (`--ml-labels`), found by a task of their own.
    let (seeds_tx, seeds_rx) = watch::channel::<Option<Vec<std::net::SocketAddr>>>(None);
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
    // MetalLB's speakers (a migration in progress): watched only with membership on,
    // where the two implementations elect apart.
    let (metallb_speakers, _metallb_watch) = if args.yield_to_metallb && ml_pending.is_some() {
        let (tx, rx) = watch::channel(std::collections::BTreeSet::new());
        let namespaces =
            speaker::discovery::yield_namespaces(&ns, &args.yield_to_metallb_namespaces);
        tracing::info!(
            ?namespaces,
            "yielding layer-2 Services to MetalLB's speakers of these namespaces"
        );
        let w = speaker::discovery::watch_metallb_speakers(client.clone(), &namespaces, tx);
        (Some(rx), Some(w))
    } else {
        (None, None)
    };
    let join = ml_pending.take().map(|(bind, key)| EdgeJoin {
        args: &args,
        node: &node,
        bind,
        key,
        registry: &registry,
        seeds: seeds_rx,
    });
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
    let out = Outputs {
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
    let mut driver = Driver::new(Parts {
        node: node.clone(),
        ns: ns.clone(),
        view,
        speaker,
        l2_start: EdgeL2Start(l2_driver_config),
        join,
        peer_events: peer_rx,
        bfd_events,
        out,
        state_writer: writer.clone(),
        metrics,
        probes: speaker::driver::Probes {
            ready: ready.clone(),
            heartbeat: heartbeat.clone(),
        },
        metallb_speakers,
    });
    let outcome = tokio::select! {
        r = daemon::shutdown_signal() => r,
        r = driver.run() => r.context("the speaker loop ended"),
    };
    // Layer 2 first, then the sessions (`Driver::shutdown`).
    let (view, out) = driver.shutdown().await;
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

/// Waits until this speaker has joined the other members (`speaker::join`), and says
/// how.
async fn wait_joined(
    m: &membership::Membership,
    seeds: &mut watch::Receiver<Option<Vec<std::net::SocketAddr>>>,
) {
    let started = std::time::Instant::now();
    let how = speaker::join::wait_joined(
        m.synced(),
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

/// The membership as the loop joins it: [`start_membership`] then
/// [`wait_joined`].
struct EdgeJoin<'a> {
    args: &'a Args,
    node: &'a str,
    bind: std::net::SocketAddr,
    key: Option<membership::SecretKey>,
    registry: &'a prometheus::Registry,
    seeds: watch::Receiver<Option<Vec<std::net::SocketAddr>>>,
}

impl Join for EdgeJoin<'_> {
    type Member = EdgeMember;
    async fn join(mut self) -> Result<EdgeMember> {
        let m = start_membership(self.args, self.node, self.bind, self.key, self.registry).await?;
        wait_joined(&m, &mut self.seeds).await;
        Ok(EdgeMember {
            m,
            seeds: Some(self.seeds),
        })
    }
}

/// The membership once joined, with the discovery's seeds handed to it as
/// they change.
struct EdgeMember {
    m: membership::Membership,
    /// `None` once the discovery ended.
    seeds: Option<watch::Receiver<Option<Vec<std::net::SocketAddr>>>>,
}

impl Member for EdgeMember {
    fn live(&self) -> watch::Receiver<std::collections::BTreeSet<String>> {
        self.m.live()
    }
    fn fenced(&self) -> watch::Receiver<bool> {
        self.m.fenced()
    }
    fn watch_owners(&self, owners: std::collections::BTreeSet<String>) {
        self.m.watch_owners(owners)
    }
    async fn next_event(&mut self) -> Option<membership::Event> {
        loop {
            let seeds = async {
                match self.seeds.as_mut() {
                    Some(s) => s.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                ev = self.m.next_event() => return ev,
                ok = seeds => {
                    let rx = self.seeds.as_mut().expect("polled");
                    if !ok {
                        self.seeds = None;
                    } else if let Some(seeds) = rx.borrow_and_update().clone() {
                        self.m.set_seeds(seeds);
                    }
                }
            }
        }
    }
    async fn leave(self, deadline: Duration) {
        self.m.leave(deadline).await
    }
}

/// Starts the `arp-ndp` responder (`arp_ndp::linux::start`) and hands it to
/// [`EdgeL2`].
struct EdgeL2Start(arp_ndp::linux::DriverConfig);

impl L2Start<EdgeL2> for EdgeL2Start {
    async fn start(&mut self, ops: &mut EdgeL2) -> std::result::Result<L2Task, String> {
        let (handle, task) = arp_ndp::linux::start(self.0.clone())
            .await
            .map_err(|e| e.to_string())?;
        ops.set_handle(handle);
        Ok(task)
    }
}
