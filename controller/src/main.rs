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
//! `/readyz` (ready after the first full pass over the Services, and once
//! the webhook serves when it runs) on
//! `--health-probe-port`, metrics on `--port` (HTTPS, authorised by the API
//! server); exits 0 on SIGTERM/SIGINT, releasing the Lease.
//!
//! With `--webhook-mode enabled` (the default) or `onlywebhook` (the webhook
//! and no allocation), serves MetalLB's validating admission webhooks and the
//! BGPPeer conversion webhook (`/convert`) on `--webhook-port` (HTTPS,
//! [`controller::webhook`]), validating against the cluster view; unless
//! `--disable-cert-rotation`, keeps their certificate in the Secret
//! `--webhook-secret` and the `caBundle` of `metallb-webhook-configuration`
//! and of the BGPPeer CRD's conversion current, and serves a rotated
//! certificate without a restart.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{CommandFactory, FromArgMatches, Parser};
use cluster_view::{Batch, ClusterView, Kind};
use config::api::v1beta1::{ConfigurationState, IPAddressPool};
use controller::driver::{Changes, Driver, Inputs, Outputs, OverlapInputs, ServiceChanges, Timing};
use controller::edge::ServiceEdge;
use controller::leader::{self, LEASE_NAME, LeaderElector, Leadership, LeaseConfig};
use controller::metrics::ControllerMetrics;
use daemon::health::{Heartbeat, Probes};
use kube::runtime::watcher;
use kube::{Api, Client};
use status::configuration_state::Component;
use status::{FIELD_MANAGER_CONTROLLER, KubeStatusApi, StatusWriter, SystemClock, WriterConfig};
use tokio::sync::watch;

/// The flags of MetalLB's controller (same names, defaults and variables).
#[derive(Debug, Parser)]
#[command(name = "controller", version, about = "metallb-rs controller")]
struct Args {
    /// HTTPS metrics port (0 disables metrics): TokenReview/SubjectAccessReview
    /// authorisation, as MetalLB.
    #[arg(long, default_value_t = 9120)]
    port: u16,
    #[command(flatten)]
    metrics: daemon::metrics::MetricsArgs,
    /// The namespace of the configuration (default: the ServiceAccount's namespace).
    #[arg(long, env = "METALLB_NAMESPACE", default_value = "")]
    namespace: String,
    /// The speakers' membership key: this Secret is created (16 random bytes under
    /// `secretkey`) when it does not exist.
    #[arg(long, env = "METALLB_ML_SECRET_NAME", default_value = "")]
    ml_secret_name: String,
    /// The controller's Deployment: the owner of the memberlist Secret.
    #[arg(long, env = "METALLB_DEPLOYMENT", default_value = "")]
    deployment: String,
    #[command(flatten)]
    log: daemon::logging::LogArgs,
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
    /// Disable webhook certificate rotation: the webhook serves `tls.crt` and
    /// `tls.key` of `--cert-dir` (re-read when they change).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    disable_cert_rotation: bool,
    /// Webhook certificate directory (with `--disable-cert-rotation`).
    #[arg(long, default_value = "/tmp/k8s-webhook-server/serving-certs")]
    cert_dir: String,
    /// The webhook Service: the certificate is for `<name>.<namespace>.svc`.
    #[arg(long, default_value = "metallb-webhook-service")]
    cert_service_name: String,
    /// Only Services of this loadBalancerClass (default: only Services without one).
    #[arg(long, default_value = "")]
    lb_class: String,
    /// `enabled` (allocate and serve the webhook), `disabled` (no webhook) or
    /// `onlywebhook` (serve the webhook, allocate nothing).
    #[arg(long, default_value = "enabled", value_parser = ["enabled", "disabled", "onlywebhook"])]
    webhook_mode: String,
    /// The Secret holding the webhook's CA and certificate.
    #[arg(long, default_value = "metallb-webhook-cert")]
    webhook_secret: String,
    /// The controller's Pod: owner of its ConfigurationState.
    #[arg(long, env = "METALLB_POD_NAME", default_value = "")]
    pod_name: String,
    /// The uid of `--pod-name` (so that no Pod read is needed).
    #[arg(long, env = "METALLB_POD_UID", default_value = "", hide = true)]
    pod_uid: String,
    /// Webhook HTTP/2 (no effect: the webhook speaks HTTP/1.1 only, MetalLB's default).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    webhook_http2: bool,
    /// The webhook's port (MetalLB's is always 9443).
    #[arg(long, default_value_t = 9443)]
    webhook_port: u16,
    /// Address the webhook binds (default: every address, for the Service).
    #[arg(long, default_value = "0.0.0.0")]
    webhook_bind_address: std::net::IpAddr,
    /// The ValidatingWebhookConfiguration whose caBundle is kept current.
    #[arg(long, default_value = controller::webhook::rotator::WEBHOOK_CONFIGURATION, hide = true)]
    webhook_configuration_name: String,
    /// More names (DNS or IP) for the webhook certificate, comma-separated
    /// (tests that call the webhook by URL).
    #[arg(long, value_delimiter = ',', hide = true)]
    cert_extra_names: Vec<String>,
    /// Hold a Lease so that only one controller allocates (client-go's
    /// leader election flags, as Kubernetes' own controllers take them).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "true")]
    leader_elect: bool,
    /// How long a standby waits before taking over an unrenewed Lease.
    #[arg(long, value_parser = daemon::flags::parse_duration, default_value = "15s")]
    leader_elect_lease_duration: Duration,
    /// How long the leader keeps allocating without a successful renewal.
    #[arg(long, value_parser = daemon::flags::parse_duration, default_value = "10s")]
    leader_elect_renew_deadline: Duration,
    /// Interval between attempts to acquire or renew the Lease.
    #[arg(long, value_parser = daemon::flags::parse_duration, default_value = "2s")]
    leader_elect_retry_period: Duration,
    /// Name of the Lease.
    #[arg(long, default_value = LEASE_NAME)]
    leader_elect_resource_name: String,
    /// Namespace of the Lease (default: the controller's namespace).
    #[arg(long, default_value = "")]
    leader_elect_resource_namespace: String,
    /// Longest time the reconcile loop may go without turning before
    /// `/healthz` fails.
    #[arg(long, value_parser = daemon::flags::parse_duration, default_value = "60s")]
    liveness_max_stall: Duration,
    /// Time the whole shutdown may take (keep it below the Pod's
    /// terminationGracePeriodSeconds, 30 s by default).
    #[arg(long, value_parser = daemon::flags::parse_duration, default_value = "20s")]
    shutdown_timeout: Duration,
    /// The speakers' per-node status objects (ServiceBGPStatus, ServiceL2Status,
    /// BGPSessionStatus, NodeBGPStatus) of a node NotReady for longer than this are
    /// deleted (by the leader; a deleted Node's go with it, their owner).
    #[arg(long, value_parser = daemon::flags::parse_duration, default_value = "5m")]
    node_status_grace_period: Duration,
}

/// Flags accepted for compatibility that do nothing yet: one warning each
/// when given.
const NO_EFFECT_YET: &[&str] = &[
    "pprof_bind_address",
    "webhook_http2",
    "tls_cipher_suites",
    "tls_curve_preferences",
];

fn main() -> Result<()> {
    let matches = Args::command().get_matches();
    let args = Args::from_arg_matches(&matches)?;
    daemon::logging::init(&args.log);
    daemon::flags::warn_no_effect(&matches, NO_EFFECT_YET);
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

/// The Service changes of the cluster view (coalesced by key, collapsed into a full
/// pass past its bound), and fresh lists of the Services on demand.
struct ViewServices {
    view: Arc<ClusterView>,
}

impl ServiceChanges for ViewServices {
    async fn next(&mut self) -> Option<Changes> {
        Some(match self.view.service_changes().next().await {
            Batch::All => Changes {
                keys: Default::default(),
                full: true,
            },
            Batch::Keys(keys) => Changes {
                keys: keys.into_iter().collect(),
                full: false,
            },
        })
    }

    async fn relist(&mut self) {
        let Some(services) = self.view.services() else {
            return;
        };
        if let Err(e) = services.relist().await {
            tracing::error!(error = %e, "listing the Services again failed");
            std::future::pending::<()>().await;
        }
    }
}

/// What the webhooks validate against, besides what the controller watches.
/// What the `NotAnnounceable` warnings on Services are computed from, besides
/// the controller's own kinds.
const OVERLAP_KINDS: &[Kind] = &[
    Kind::BGPPeer,
    Kind::BFDProfile,
    Kind::BGPAdvertisement,
    Kind::L2Advertisement,
    Kind::Node,
];

const WEBHOOK_KINDS: &[Kind] = &[
    Kind::IPAddressPool,
    Kind::BGPPeer,
    Kind::BFDProfile,
    Kind::BGPAdvertisement,
    Kind::L2Advertisement,
    Kind::Community,
    Kind::Node,
];

/// Binds the webhook and starts it (once its certificate is served) and,
/// unless `--disable-cert-rotation`, the certificate rotator.
async fn start_webhook(
    args: &Args,
    client: &Client,
    ns: &str,
    view: Arc<ClusterView>,
    serving: Arc<AtomicBool>,
    stopped: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<Vec<tokio::task::JoinHandle<()>>> {
    use controller::webhook::rotator::{BGPPEER_CRD, Rotator, RotatorConfig};
    use controller::webhook::server::{View, WebhookServer};
    use kube_metrics::{CertSource, ServerTls, TlsMinVersion, TlsOptions};

    let min_version: TlsMinVersion = args
        .metrics
        .tls_min_version
        .parse()
        .context("--tls-min-version")?;
    let (tls, ready_rx, rotator) = if args.disable_cert_rotation {
        let tls = ServerTls::new(&TlsOptions {
            cert: CertSource::Dir(args.cert_dir.clone().into()),
            min_version,
        })
        .context("--cert-dir (with --disable-cert-rotation)")?;
        (tls, watch::channel(true).1, None)
    } else {
        // A placeholder until the rotator hands over the Secret's certificate:
        // nothing is served before that.
        let tls = ServerTls::new(&TlsOptions {
            cert: CertSource::SelfSigned { names: vec![] },
            min_version,
        })?;
        let mut names = vec![format!("{}.{ns}.svc", args.cert_service_name)];
        names.extend(
            args.cert_extra_names
                .iter()
                .filter(|n| !n.is_empty())
                .cloned(),
        );
        let rotator = Rotator::new(
            client.clone(),
            RotatorConfig {
                namespace: ns.to_string(),
                secret: args.webhook_secret.clone(),
                names,
                webhook_configuration: args.webhook_configuration_name.clone(),
                crd: BGPPEER_CRD.to_string(),
                lifetimes: Default::default(),
                interval: Duration::from_secs(30),
                call_timeout: Duration::from_secs(10),
            },
            tls.clone(),
        );
        let (tx, rx) = watch::channel(false);
        (tls, rx, Some((rotator, tx)))
    };
    let addr = std::net::SocketAddr::new(args.webhook_bind_address, args.webhook_port);
    let view_fn: View = Arc::new(move || view.is_ready().then(|| view.resources()));
    let server = WebhookServer::bind(addr, tls, view_fn, ns)
        .await
        .with_context(|| format!("binding the webhook to {addr}"))?;
    let stopped = futures_util::FutureExt::shared(Box::pin(stopped));
    let mut tasks = Vec::new();
    if let Some((rotator, tx)) = rotator {
        tasks.push(tokio::spawn(rotator.run(tx, stopped.clone())));
    }
    tasks.push(tokio::spawn(async move {
        let mut ready = ready_rx;
        tokio::select! {
            r = ready.wait_for(|r| *r) => if r.is_err() { return },
            () = stopped.clone() => return,
        }
        // the listener is bound and the certificate in place: it answers
        serving.store(true, std::sync::atomic::Ordering::Release);
        server.run(stopped).await;
    }));
    Ok(tasks)
}

async fn run(args: Args) -> Result<()> {
    let ns = daemon::flags::namespace(&args.namespace)?;
    let client = Client::try_default()
        .await
        .context("building a Kubernetes client (in-cluster or KUBECONFIG)")?;
    if !args.ml_secret_name.is_empty() {
        tokio::spawn(controller::memberlist::ensure_with_retries(
            client.clone(),
            ns.clone(),
            args.ml_secret_name.clone(),
            args.deployment.clone(),
        ));
    }
    tracing::info!(
        namespace = ns,
        lb_class = args.lb_class,
        "controller starting"
    );

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
    let metrics_server =
        daemon::metrics::server(&args.metrics, args.port, &client, registry).await?;

    let ready = Arc::new(AtomicBool::new(false));
    // Ready only once the webhook serves, when it runs (upstream's
    // StartedChecker): a rollout must not remove the old Pod from the
    // webhook Service before the new one answers.
    let webhook_serving = Arc::new(AtomicBool::new(false));
    let webhook_enabled = args.webhook_mode != "disabled";
    let heartbeat = Arc::new(Heartbeat::new());
    let health_addr =
        std::net::SocketAddr::new(args.health_probe_bind_address, args.health_probe_port);
    let health = daemon::health::start(
        health_addr,
        Probes {
            ready: ready.clone(),
            gates: if webhook_enabled {
                vec![webhook_serving.clone()]
            } else {
                Vec::new()
            },
            heartbeat: heartbeat.clone(),
            max_stall: args.liveness_max_stall,
        },
        stopped(),
    )
    .await?;
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
    let trim_task = daemon::heap::spawn_release_free_heap(stopped());
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

    // The status writer of the pools (status only; pools belong to the user). What
    // the server holds comes from the cluster view's cache of the pools.
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

    // What the controller reads: pools and communities of its namespace, the cluster's
    // Namespaces (label changes only) and Services, one watch each.
    const WATCHED: &str = "the cluster view watches it";
    let allocating = args.webhook_mode != "onlywebhook";
    let mut builder = ClusterView::builder(client.clone(), &ns);
    if allocating {
        builder = builder.kinds(Kind::CONTROLLER);
        // The NotAnnounceable warnings on Services: the rest of the configuration
        // and the Nodes (which the webhooks watch too).
        builder = builder.kinds(OVERLAP_KINDS);
    }
    if webhook_enabled {
        // What MetalLB's webhooks validate against (MetalLB lists it on each request).
        builder = builder.kinds(WEBHOOK_KINDS);
    }
    let view = Arc::new(builder.start());
    let webhook_tasks = if webhook_enabled {
        start_webhook(
            &args,
            &client,
            &ns,
            view.clone(),
            webhook_serving.clone(),
            stopped(),
        )
        .await?
    } else {
        Vec::new()
    };

    type Loop = std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + Send>>;
    let (elector_task, reconcile) = if allocating {
        let pools = view.pools().context(WATCHED)?.store();
        let communities = view.communities().context(WATCHED)?.store();
        let namespaces = view.namespaces().context(WATCHED)?.store();
        let services = view.services().context(WATCHED)?.store();
        // Only one controller allocates: the holder of the Lease.
        let (leader_tx, leader_rx) = watch::channel(Leadership::default());
        let elector_task = if args.leader_elect {
            let lease_ns = if args.leader_elect_resource_namespace.is_empty() {
                ns.clone()
            } else {
                args.leader_elect_resource_namespace.clone()
            };
            let elector = LeaderElector::new(
                client.clone(),
                &lease_ns,
                &args.leader_elect_resource_name,
                leader::identity(&args.pod_name),
                LeaseConfig {
                    lease_duration: args.leader_elect_lease_duration,
                    renew_deadline: args.leader_elect_renew_deadline,
                    retry_period: args.leader_elect_retry_period,
                },
            )
            .context("--leader-elect-*")?;
            tracing::info!(
                lease = format!("{lease_ns}/{}", args.leader_elect_resource_name),
                identity = elector.identity(),
                "competing for the lease"
            );
            Some(tokio::spawn(elector.run(leader_tx, stopped())))
        } else {
            tracing::warn!(
                "--leader-elect=false: allocating without a lease (run one controller only)"
            );
            // One endless term.
            leader_tx.send_replace(Leadership {
                term: 1,
                until: Some(std::time::Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)),
            });
            None
        };

        let owner = status::own_pod_owner(client.clone(), &ns, &args.pod_name, &args.pod_uid).await;
        tokio::spawn(controller::node_sweep::run(
            controller::node_sweep::KubeNodeStatusApi::new(client.clone(), ns.clone()),
            {
                let nodes = view.nodes().context(WATCHED)?.store();
                move || nodes.state()
            },
            leader_rx.clone(),
            args.node_status_grace_period,
            controller::node_sweep::PERIOD,
            stopped(),
        ));
        let instance = (!args.pod_name.is_empty()).then(|| args.pod_name.clone());
        let driver = Driver::new(
            Inputs {
                pools,
                communities,
                namespaces,
                services,
                config_changed: view.config_changes().clone(),
                service_changes: ViewServices { view: view.clone() },
                leader: leader_rx,
                overlap: Some(OverlapInputs {
                    peers: view.peers().context(WATCHED)?.store(),
                    bfd_profiles: view.bfd_profiles().context(WATCHED)?.store(),
                    bgp_advertisements: view.bgp_advertisements().context(WATCHED)?.store(),
                    l2_advertisements: view.l2_advertisements().context(WATCHED)?.store(),
                    nodes: view.nodes().context(WATCHED)?.store(),
                }),
            },
            Outputs {
                namespace: ns.clone(),
                owner,
                state_writer: writer.clone(),
                pool_writer: pool_writer.clone(),
                api: ServiceEdge::new(client.clone(), instance),
                ready: ready.clone(),
                heartbeat,
                lb_class: args.lb_class.clone(),
                metrics,
            },
            Timing::default(),
        );
        (elector_task, Box::pin(driver.run()) as Loop)
    } else {
        // Only the webhook: nothing allocates; ready once the view is, alive while
        // the process runs.
        let loop_: Loop = Box::pin({
            let view = view.clone();
            let ready = ready.clone();
            async move {
                loop {
                    heartbeat.beat();
                    ready.store(view.is_ready(), std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
            }
        });
        (None, loop_)
    };

    let outcome = tokio::select! {
        r = daemon::shutdown_signal() => r,
        r = reconcile => r.context("the controller loop ended"),
    };
    // The loop (and any Service write in flight) is dropped here: nothing
    // more is allocated or written for a term.

    // Bounded shutdown: each stage gets a share of --shutdown-timeout, the
    // whole fits the Pod's grace period.
    let deadline = tokio::time::Instant::now() + args.shutdown_timeout;
    let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
    let _ = stop_tx.send(true);
    drop(view);
    state_watch.abort();
    // The elector releases the Lease on stop, so a successor takes over at once.
    if let Some(task) = elector_task
        && tokio::time::timeout(left() / 2, task).await.is_err()
    {
        tracing::warn!("releasing the lease took too long; it expires on its own");
    }
    // ends with `stopped` (between two trims); nothing to wait for
    trim_task.abort();
    for task in [writer_task, pool_writer_task] {
        if tokio::time::timeout(left() / 4, task).await.is_err() {
            tracing::warn!("a status writer did not stop in time");
        }
    }
    let flush = async {
        while writer.pending() > 0 || pool_writer.pending() > 0 {
            writer.step(&status_api).await;
            pool_writer.step(&pool_status_api).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    if tokio::time::timeout(left() / 2, flush).await.is_err() {
        tracing::warn!("exiting with status writes still pending");
    }
    let servers = async {
        let _ = health.await;
        if let Some(task) = metrics_task {
            let _ = task.await;
        }
        for task in webhook_tasks {
            let _ = task.await;
        }
    };
    if tokio::time::timeout(left(), servers).await.is_err() {
        tracing::warn!("the probe or metrics server did not stop in time");
    }
    tracing::info!("controller stopped");
    outcome
}
