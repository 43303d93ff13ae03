//! The speaker as it runs in a cluster, in the lab: one `speaker` process per node, each
//! INSIDE its node's network namespace (as the DaemonSet's hostNetwork Pods), reaching the
//! lab's API server through the node's own 127.0.0.1 ([`testkit::apiproxy::ApiProxy`]),
//! with the `speaker` ServiceAccount's token and the deployed RBAC; FRR in `router`
//! (AS 64512, 192.0.2.1) peering with every node (AS 64513), optionally with BFD, and
//! optionally a second FRR in `router2` (192.0.2.2) in the nodes' own AS (iBGP, where
//! LOCAL_PREF is sent).
//!
//! [`SpeakerLab::start`] builds it all for one test: a namespace of its own (the
//! configuration namespace of its speakers, `METALLB_NAMESPACE`), a `loadBalancerClass`
//! of its own (`--lb-class`, so that no other test's speaker or controller touches its
//! Services), a Pod object per speaker (never run: the owner of its status objects, as
//! the DaemonSet's Pod is), the lab's Nodes checked (created when missing) with their
//! InternalIPs. Dropping it (also on a panic) kills the speakers and the routers and
//! removes the network namespaces; [`SpeakerLab::finish`] also deletes the test's
//! namespace, node labels and ClusterRoleBindings, and attaches the speakers' and the
//! router's logs to an error.
//!
//! The assertions at the router ([`RouterPath`], [`paths`], [`next_hops`],
//! [`sessions`], [`router_summary`]) read FRR's JSON (`show bgp ipv4 unicast <prefix>
//! json`, `show bgp neighbors json`); the waits ([`SpeakerLab::wait_next_hops`], ...)
//! report, on timeout, what the router had.
//!
//! Needs root (network namespaces). Without root a test fails, unless
//! `METALLB_E2E_SKIP_NETNS=1` says to skip it ([`netns_available`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::Family;
use testkit::frr::{BfdProfile, Frr, FrrConfig, FrrNeighbor};
use testkit::{LabOptions, NsChild, plan};

use crate::controller::ControllerSetup;
use crate::lab::Lab;
use crate::nodes::NodeNetwork;
use crate::services::LbService;
use crate::wait::wait_until;

/// Set to `1` to let the tests that need network namespaces pass without running where
/// there is no root (they fail otherwise: nothing is skipped silently).
pub const SKIP_NETNS_VAR: &str = "METALLB_E2E_SKIP_NETNS";

/// The speakers' `/healthz` / `/readyz` port, inside each node namespace.
pub const SPEAKER_HEALTH_PORT: u16 = 17472;
/// The speakers' metrics port (plain HTTP on 127.0.0.1), inside each node namespace.
pub const SPEAKER_METRICS_PORT: u16 = 7472;
/// The speaker Pods' labels, MetalLB's manifests' (`--ml-labels` in the lab).
pub const MEMBERSHIP_LABELS: &str = "app=metallb,component=speaker";
/// The second router's AS when it runs iBGP with the nodes: the nodes' own.
pub const IBGP_AS: u32 = plan::NODE_AS;

/// Whether a network test can run: `Ok(true)` as root; `Ok(false)` (with a line on
/// stderr) without root when [`SKIP_NETNS_VAR`]=1; an error otherwise.
pub fn netns_available(test: &str) -> Result<bool> {
    let Err(no_root) = testkit::require_root() else {
        return Ok(true);
    };
    if std::env::var(SKIP_NETNS_VAR).is_ok_and(|v| v == "1") {
        eprintln!("{test}: NOT RUN: needs root (network namespaces) and {SKIP_NETNS_VAR}=1");
        return Ok(false);
    }
    bail!(
        "{test}: {no_root:#}; it runs one speaker per node in network namespaces with a real \
         FRR router (run the tests as root, or set {SKIP_NETNS_VAR}=1 to skip them \
         explicitly)"
    )
}

/// What [`SpeakerLab::start`] builds.
#[derive(Clone, Debug)]
pub struct SpeakerLabOptions {
    /// The test's name (namespace `e2e-<test>-<suffix>`, log directory).
    pub test: String,
    /// Node namespaces and speakers node-1..node-N (default 3, the lab's Nodes).
    pub nodes: usize,
    /// BFD on the router's side of every node session, with this profile.
    pub bfd: Option<BfdProfile>,
    /// FRR in `router2` (192.0.2.2) in AS [`IBGP_AS`], an iBGP neighbour of every node.
    pub ibgp_router: bool,
    /// Extra arguments of every speaker (e.g. `--ignore-exclude-lb`).
    pub speaker_args: Vec<String>,
    /// Start the speakers (default); without, [`SpeakerLab::start_speaker`] does it.
    pub start_speakers: bool,
    /// Metrics over HTTPS on the node's address with TokenReview/SubjectAccessReview
    /// (as deployed) instead of plain HTTP on 127.0.0.1: [`NodeSpeaker::scrape_https`].
    pub metrics_https: bool,
    /// IPv6 sessions too: the router (FRR, AS 64512) also peers with every node's
    /// IPv6 address (2001:db8:0:1::1N) from 2001:db8:0:1::1, IPv6 unicast only, ECMP.
    pub ipv6_peers: bool,
    /// Membership among the speakers (as deployed): each speaker's Pod gets its node's
    /// address as `status.podIP`, and every speaker runs with `--ml-bindaddr <node
    /// address>`, `--ml-labels app=metallb,component=speaker` and
    /// `--ml-secret-key-path` (a key shared by the test's speakers).
    pub membership: bool,
}

impl SpeakerLabOptions {
    pub fn new(test: &str) -> SpeakerLabOptions {
        SpeakerLabOptions {
            test: test.into(),
            nodes: plan::NODES,
            bfd: None,
            ibgp_router: false,
            speaker_args: Vec::new(),
            start_speakers: true,
            metrics_https: false,
            ipv6_peers: false,
            membership: false,
        }
    }

    pub fn membership(mut self) -> Self {
        self.membership = true;
        self
    }

    pub fn nodes(mut self, nodes: usize) -> Self {
        self.nodes = nodes;
        self
    }

    pub fn ipv6_peers(mut self) -> Self {
        self.ipv6_peers = true;
        self
    }

    pub fn metrics_https(mut self) -> Self {
        self.metrics_https = true;
        self
    }

    pub fn bfd(mut self, profile: BfdProfile) -> Self {
        self.bfd = Some(profile);
        self
    }

    pub fn ibgp_router(mut self) -> Self {
        self.ibgp_router = true;
        self
    }

    pub fn speaker_arg(mut self, arg: &str) -> Self {
        self.speaker_args.push(arg.into());
        self
    }

    pub fn without_speakers(mut self) -> Self {
        self.start_speakers = false;
        self
    }
}

/// One speaker process in its node namespace.
pub struct NodeSpeaker {
    /// 1-based node index.
    pub n: usize,
    /// `node-N`.
    pub node: String,
    /// The node namespace's full name (`mlb<N>-node-N`).
    pub netns: String,
    /// Its Pod object's name (the owner of its status objects).
    pub pod: String,
    pub log: PathBuf,
    pub child: NsChild,
}

impl NodeSpeaker {
    /// Its log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET `path` on its health port, from inside its namespace.
    pub async fn health(&self, path: &str) -> Result<String> {
        http_get_in(&self.netns, SPEAKER_HEALTH_PORT, path).await
    }

    /// Its `/metrics` (plain HTTP), from inside its namespace.
    pub async fn metrics(&self) -> Result<String> {
        http_get_in(&self.netns, SPEAKER_METRICS_PORT, "/metrics").await
    }

    /// `(HTTP status, body)` of `GET https://<node address>:<metrics port>/metrics`
    /// from inside its namespace, with `token` as the bearer token (speakers started
    /// with [`SpeakerLabOptions::metrics_https`]; the certificate is the speaker's
    /// self-signed one, hence `-k`).
    pub async fn scrape_https(&self, token: Option<&str>) -> Result<(u16, String)> {
        let mut cmd = tokio::process::Command::new("ip");
        cmd.args([
            "netns",
            "exec",
            &self.netns,
            "curl",
            "-sk",
            "--max-time",
            "10",
        ])
        .args(["-w", "\n%{http_code}"]);
        if let Some(t) = token {
            cmd.arg("-H").arg(format!("Authorization: Bearer {t}"));
        }
        cmd.arg(format!(
            "https://{}:{SPEAKER_METRICS_PORT}/metrics",
            plan::node_v4(self.n)
        ));
        let out = cmd.output().await.context("running curl")?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        Ok((code.trim().parse().unwrap_or(0), body.to_owned()))
    }
}

/// The speakers, the routers and the network of one test. Field order is drop order:
/// speakers, then routers, then the namespaces (and the test kit's lock).
pub struct SpeakerLab {
    pub speakers: Vec<Option<NodeSpeaker>>,
    /// FRR in `router`: AS 64512, 192.0.2.1, eBGP with every node.
    pub router: Frr,
    /// FRR in `router2` (192.0.2.2, AS 64513, iBGP) when asked for.
    pub ibgp: Option<Frr>,
    pub net: NodeNetwork,
    /// The test's namespace, the speakers' ServiceAccount, RBAC and kubeconfig.
    pub setup: ControllerSetup,
    pub lab: Lab,
    opts: SpeakerLabOptions,
    pods: Vec<(String, String)>,
    labels: Vec<(String, String)>,
}

impl SpeakerLab {
    /// Builds the lab of one test (see the module doc) and, unless
    /// [`SpeakerLabOptions::without_speakers`], starts a speaker per node and waits
    /// until each answers `/readyz` 200.
    pub async fn start(lab: &Lab, opts: SpeakerLabOptions) -> Result<SpeakerLab> {
        let setup = lab.speaker_setup(&opts.test).await?;
        let ns = setup.namespace().to_owned();
        ensure_nodes(lab, opts.nodes).await?;
        // The speakers' Pods: objects only (no kubelet), each on its node.
        let pods_api = Api::<Pod>::namespaced(lab.client.clone(), &ns);
        let mut pods = Vec::new();
        for n in 1..=opts.nodes {
            let name = format!("speaker-{}", plan::node_name(n));
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"app": "metallb", "component": "speaker"}},
                "spec": {
                    "nodeName": plan::node_name(n),
                    // Deleted at once with the namespace: a graceful deletion of a Pod
                    // on a node waits for a kubelet, and the lab has none.
                    "terminationGracePeriodSeconds": 0,
                    "hostNetwork": true,
                    "serviceAccountName": "speaker",
                    "containers": [{"name": "speaker", "image": "metallb-rs/speaker:e2e"}],
                },
            }))?;
            let pod = pods_api
                .create(&PostParams::default(), &pod)
                .await
                .with_context(|| format!("creating Pod {ns}/{name}"))?;
            if opts.membership {
                // A hostNetwork Pod's IP is its node's: what --ml-labels discovery finds.
                let ip = plan::node_v4(n).to_string();
                pods_api
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": {
                            "phase": "Running",
                            "podIP": ip,
                            "podIPs": [{"ip": ip}],
                        }})),
                    )
                    .await
                    .with_context(|| format!("writing the Pod IP of {ns}/{name}"))?;
            }
            pods.push((name, pod.metadata.uid.unwrap_or_default()));
        }
        if opts.membership {
            // MetalLB's memberlist Secret holds 22 base64 characters (16 random bytes).
            let dir = setup.dir.join("memberlist");
            std::fs::create_dir_all(&dir)?;
            let mut key = [0u8; 16];
            std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
            let key: String = key.iter().map(|b| format!("{b:02x}")).collect();
            std::fs::write(dir.join("secretkey"), &key[..22])?;
        }
        let net = lab.node_network(&LabOptions {
            nodes: opts.nodes,
            far: false,
        })?;
        let mut rc = FrrConfig::new("router", plan::ROUTER_AS, plan::ROUTER_V4);
        if let Some(p) = &opts.bfd {
            rc = rc.bfd_profile(p.clone());
        }
        for n in 1..=opts.nodes {
            let mut nb = FrrNeighbor::new(plan::node_v4(n).into(), plan::NODE_AS).timers(3, 9);
            if let Some(p) = &opts.bfd {
                nb = nb.bfd_profile(&p.name);
            }
            rc = rc.neighbor(nb);
            if opts.ipv6_peers {
                let mut nb = FrrNeighbor::new(plan::node_v6(n).into(), plan::NODE_AS)
                    .timers(3, 9)
                    .families(&[Family::Ipv6]);
                if let Some(p) = &opts.bfd {
                    nb = nb.bfd_profile(&p.name);
                }
                rc = rc.neighbor(nb);
            }
        }
        // ECMP: one path per node in the FIB.
        let rc = rc.extra(
            "router bgp 64512\n address-family ipv4 unicast\n  maximum-paths 16\n \
             exit-address-family\n address-family ipv6 unicast\n  maximum-paths 16\n \
             exit-address-family\nexit",
        );
        let router = Frr::start(net.net.router(), &rc)?;
        let ibgp = if opts.ibgp_router {
            let mut c = FrrConfig::new("router2", IBGP_AS, plan::ROUTER2_V4);
            for n in 1..=opts.nodes {
                c = c.neighbor(FrrNeighbor::new(plan::node_v4(n).into(), IBGP_AS).timers(3, 9));
            }
            let c = c.extra(&format!(
                "router bgp {IBGP_AS}\n address-family ipv4 unicast\n  maximum-paths ibgp 16\n \
                 exit-address-family\nexit"
            ));
            Some(Frr::start(net.net.router2(), &c)?)
        } else {
            None
        };
        let mut sl = SpeakerLab {
            speakers: (0..opts.nodes).map(|_| None).collect(),
            router,
            ibgp,
            net,
            setup,
            lab: lab.clone(),
            opts,
            pods,
            labels: Vec::new(),
        };
        if sl.opts.start_speakers {
            for n in 1..=sl.opts.nodes {
                let extra: Vec<String> = sl.opts.speaker_args.clone();
                let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
                sl.start_speaker(n, &extra).await?;
            }
        }
        Ok(sl)
    }

    /// The test's namespace: the speakers' configuration namespace.
    pub fn namespace(&self) -> &str {
        self.setup.namespace()
    }

    /// `(result, the ConfigurationWarnings condition)` of speaker-`node`'s
    /// ConfigurationState.
    pub async fn configuration_warnings(&self, node: &str) -> Result<(String, Option<Value>)> {
        let o = self
            .lab
            .metallb(&self.lab.client, self.namespace(), "ConfigurationState")
            .get(&format!("speaker-{node}"))
            .await?;
        let s = &o.data["status"];
        let cond = s["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "ConfigurationWarnings")
            .cloned();
        Ok((s["result"].as_str().unwrap_or_default().to_owned(), cond))
    }

    /// The speakers' `--lb-class`.
    pub fn lb_class(&self) -> &str {
        &self.setup.lb_class
    }

    /// A LoadBalancer Service of the speakers' class.
    pub fn service(&self, name: &str) -> LbService {
        self.setup.service(name)
    }

    /// The node names, node-1..node-N.
    pub fn node_names(&self) -> Vec<String> {
        (1..=self.opts.nodes).map(plan::node_name).collect()
    }

    /// The MACs (deduplicated) of every ARP reply for `ip` the client receives within
    /// 1 s: two answering nodes show as two MACs.
    pub fn l2_answers(&self, ip: Ipv4Addr) -> Result<Vec<String>> {
        let iface = self.net.net.l2_iface("client").to_owned();
        let mut macs = self
            .net
            .net
            .client()
            .arp_replies(&iface, Some(plan::CLIENT_V4), ip, 1)?;
        macs.sort();
        macs.dedup();
        Ok(macs)
    }

    /// Node `n`'s speaker (panics when it is not running).
    pub fn speaker(&self, n: usize) -> &NodeSpeaker {
        self.speakers[n - 1]
            .as_ref()
            .unwrap_or_else(|| panic!("the speaker of node-{n} is not running"))
    }

    /// Starts node `n`'s speaker as [`SpeakerLab::start_speaker`] does, without waiting
    /// for it to be ready (e.g. while the API server is away).
    pub fn launch_speaker(&mut self, n: usize, extra: &[&str]) -> Result<()> {
        if let Some(mut old) = self.speakers[n - 1].take() {
            let _ = old
                .child
                .stop_with(testkit::process::Signal::TERM, Duration::from_secs(5));
        }
        let node = plan::node_name(n);
        let netns = self.net.net.node(n).name().to_owned();
        let (pod, uid) = self.pods[n - 1].clone();
        let log = self.setup.dir.join(format!("speaker-{node}.log"));
        let health = SPEAKER_HEALTH_PORT.to_string();
        let metrics = SPEAKER_METRICS_PORT.to_string();
        let node_v4 = plan::node_v4(n).to_string();
        let mut cmd = self.net.net.node(n).command(&self.setup.bin);
        cmd.args([
            "--log-format",
            "text",
            "--log-level",
            "debug",
            "--node-name",
            &node,
            "--lb-class",
            &self.setup.lb_class,
            "--health-probe-port",
            &health,
            "--health-probe-bind-address",
            "127.0.0.1",
            "--port",
            &metrics,
        ])
        .args(if self.opts.metrics_https {
            vec!["--metrics-bind-address".to_owned(), node_v4.clone()]
        } else {
            [
                "--metrics-bind-address",
                "127.0.0.1",
                "--metrics-insecure-http",
            ]
            .map(str::to_owned)
            .to_vec()
        })
        .args(if self.opts.membership {
            vec![
                "--ml-bindaddr".to_owned(),
                node_v4.clone(),
                "--ml-labels".to_owned(),
                MEMBERSHIP_LABELS.to_owned(),
                "--ml-secret-key-path".to_owned(),
                self.setup.dir.join("memberlist").display().to_string(),
            ]
        } else {
            Vec::new()
        })
        .args(extra)
        .env("KUBECONFIG", &self.setup.kubeconfig)
        .env("METALLB_NAMESPACE", self.setup.namespace())
        .env("METALLB_NODE_NAME", &node)
        .env("METALLB_POD_NAME", &pod)
        .env("METALLB_POD_UID", &uid)
        .env("METALLB_HOST", plan::node_v4(n).to_string());
        let child = NsChild::spawn_logged(cmd, &log)
            .with_context(|| format!("starting the speaker in {netns}"))?;
        let sp = NodeSpeaker {
            n,
            node: node.clone(),
            netns,
            pod,
            log,
            child,
        };
        self.speakers[n - 1] = Some(sp);
        Ok(())
    }

    /// Starts node `n`'s speaker in its namespace with `extra` arguments (after the
    /// harness's: `--node-name`, `--lb-class`, probe and metrics ports, text logs) and
    /// waits (30 s) until its `/readyz` answers 200. Its log is
    /// `<scratch dir>/speaker-node-N.log` (appended across restarts).
    pub async fn start_speaker(&mut self, n: usize, extra: &[&str]) -> Result<()> {
        self.launch_speaker(n, extra)?;
        let node = plan::node_name(n);
        let sp = self.speakers[n - 1].as_mut().context("just launched")?;
        let child = &mut sp.child;
        let ns_name = sp.netns.clone();
        let ready = wait_until(
            &format!("the speaker of {node} /readyz 200 (inside its namespace)"),
            Duration::from_secs(30),
            || {
                let running = child.is_running();
                let ns_name = ns_name.clone();
                async move {
                    if !running {
                        return Err("exited".to_string());
                    }
                    match http_get_in(&ns_name, SPEAKER_HEALTH_PORT, "/readyz").await {
                        Ok(r) if r.starts_with("HTTP/1.1 200 ") => Ok(()),
                        Ok(r) => Err(r.lines().next().unwrap_or_default().to_owned()),
                        Err(e) => Err(format!("{e:#}")),
                    }
                }
            },
        )
        .await;
        if let Err(e) = ready {
            let log = sp.log_text();
            return Err(e.context(format!("the speaker of {node}; its log:\n{log}")));
        }
        Ok(())
    }

    /// Kills node `n`'s speaker with SIGKILL (a crash: nothing is said to anyone) and
    /// waits until it is gone.
    pub fn kill_speaker(&mut self, n: usize) -> Result<()> {
        if let Some(mut sp) = self.speakers[n - 1].take() {
            sp.child
                .stop_with(testkit::process::Signal::KILL, Duration::from_secs(5))
                .with_context(|| format!("killing the speaker of node-{n}"))?;
        }
        Ok(())
    }

    /// Stops node `n`'s speaker with SIGTERM (then SIGKILL after `grace`).
    pub fn stop_speaker(&mut self, n: usize, grace: Duration) -> Result<()> {
        if let Some(mut sp) = self.speakers[n - 1].take() {
            sp.child
                .stop_with(testkit::process::Signal::TERM, grace)
                .with_context(|| format!("stopping the speaker of node-{n}"))?;
        }
        Ok(())
    }

    /// A metallb.io object `kind`/`name` with `spec` in the test namespace, applied
    /// server-side (created or replaced).
    pub async fn apply(&self, kind: &str, name: &str, spec: Value) -> Result<()> {
        let res = crate::metallb_resource(kind);
        let api = self.lab.metallb(&self.lab.client, self.namespace(), kind);
        let obj = json!({
            "apiVersion": res.api_version,
            "kind": kind,
            "metadata": {"name": name},
            "spec": spec,
        });
        api.patch(
            name,
            &PatchParams::apply(crate::FIELD_MANAGER).force(),
            &Patch::Apply(obj),
        )
        .await
        .with_context(|| format!("applying {kind} {}/{name}", self.namespace()))?;
        Ok(())
    }

    /// Deletes a metallb.io object of the test namespace.
    pub async fn delete(&self, kind: &str, name: &str) -> Result<()> {
        self.lab
            .metallb(&self.lab.client, self.namespace(), kind)
            .delete(name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting {kind} {name}"))?;
        Ok(())
    }

    /// A layer-2 address on the nodes' segment: the client reaches `ip` there (a /32 route
    /// on its interface, no router in between) and the IPAddressPool `pool` holds the
    /// test's IPv4 pool (`plan::POOL_V4`).
    pub async fn l2_address_on_segment(&self, ip: impl Into<IpAddr>) -> Result<()> {
        let ip = ip.into();
        let client_if = self.net.net.l2_iface("client").to_owned();
        self.net
            .net
            .client()
            .ip(&["route", "add", &format!("{ip}/32"), "dev", &client_if])?;
        self.apply(
            "IPAddressPool",
            "pool",
            json!({"addresses": [plan::POOL_V4]}),
        )
        .await
    }

    /// The usual configuration: IPAddressPool `pool` (198.51.100.0/24, no auto-assign
    /// needed: the tests set the Service's address), BGPPeer `router` (192.0.2.1, AS
    /// 64512 from 64513) and BGPAdvertisement `adv` with `adv_spec` (e.g. `{}`).
    pub async fn apply_basic_config(&self, adv_spec: Value) -> Result<()> {
        self.apply(
            "IPAddressPool",
            "pool",
            json!({"addresses": [plan::POOL_V4]}),
        )
        .await?;
        self.apply("BGPPeer", "router", router_peer_spec()).await?;
        self.apply("BGPAdvertisement", "adv", adv_spec).await
    }

    /// Creates `svc` (its class set to the speakers') with its backend Pods (returning once
    /// the lab's EndpointSlice controller's slices show them), and sets
    /// its `status.loadBalancer.ingress` to `ips` with the pool annotation, as the
    /// controller would (no controller runs: the addresses are the test's choice).
    pub async fn create_service(&self, svc: LbService, ips: &[IpAddr]) -> Result<Service> {
        let svc = svc
            .class(self.lb_class())
            .annotation("metallb.io/ip-allocated-from-pool", "pool");
        let (created, _) = self.lab.create_lb_service(self.namespace(), &svc).await?;
        self.set_ingress(&svc.name, ips).await?;
        Ok(created)
    }

    /// Sets a Service's `status.loadBalancer.ingress` (the controller's write).
    pub async fn set_ingress(&self, name: &str, ips: &[IpAddr]) -> Result<()> {
        let ingress: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip.to_string()})).collect();
        Api::<Service>::namespaced(self.lab.client.clone(), self.namespace())
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": ingress}}})),
            )
            .await
            .with_context(|| format!("setting the ingress of Service {name}"))?;
        Ok(())
    }

    /// Deletes a Service of the test namespace.
    pub async fn delete_service(&self, name: &str) -> Result<()> {
        Api::<Service>::namespaced(self.lab.client.clone(), self.namespace())
            .delete(name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting Service {name}"))?;
        Ok(())
    }

    /// A label key of this test's own (for node selectors): set on Nodes with
    /// [`Self::label_node`], removed by [`Self::finish`].
    pub fn label_key(&self) -> String {
        let ns = self.namespace();
        let suffix = ns.rsplit('-').next().unwrap_or(ns);
        format!("e2e.metallb-rs.io/sel-{suffix}")
    }

    /// Sets (Some) or removes (None) label `key` on Node `node` (merge patch).
    pub async fn label_node(&mut self, node: &str, key: &str, value: Option<&str>) -> Result<()> {
        Api::<Node>::all(self.lab.client.clone())
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {key: value}}})),
            )
            .await
            .with_context(|| format!("labelling Node {node} {key}={value:?}"))?;
        if value.is_some() {
            self.labels.push((node.into(), key.into()));
        }
        Ok(())
    }

    /// The speaker ConfigurationState `speaker-<node>`: `(result, errorSummary)`.
    pub async fn configuration_state(&self, node: &str) -> Result<Option<(String, String)>> {
        let o = self
            .lab
            .metallb(&self.lab.client, self.namespace(), "ConfigurationState")
            .get_opt(&format!("speaker-{node}"))
            .await?;
        Ok(o.map(|o| {
            let s = &o.data["status"];
            (
                s["result"].as_str().unwrap_or_default().to_owned(),
                s["errorSummary"].as_str().unwrap_or_default().to_owned(),
            )
        }))
    }

    /// Waits until every speaker's ConfigurationState is `Valid`.
    pub async fn wait_configuration_valid(&self, timeout: Duration) -> Result<()> {
        self.wait_configuration_state("Valid", "", timeout).await
    }

    /// Waits until every speaker's ConfigurationState has result `result` and an
    /// error summary containing `needle` (empty: any).
    pub async fn wait_configuration_state(
        &self,
        result: &str,
        needle: &str,
        timeout: Duration,
    ) -> Result<()> {
        wait_until(
            &format!("every speaker's ConfigurationState speaker-<node> {result} ({needle})"),
            timeout,
            || async {
                let mut seen = Vec::new();
                let mut ok = true;
                for node in self.node_names() {
                    let s = self
                        .configuration_state(&node)
                        .await
                        .map_err(|e| format!("{e:#}"))?;
                    ok &= matches!(&s, Some((r, e)) if r == result && e.contains(needle));
                    seen.push(format!("{node}: {s:?}"));
                }
                if ok { Ok(()) } else { Err(seen.join("; ")) }
            },
        )
        .await
    }

    /// The metallb.io objects of `kind` in the test namespace, optionally by label.
    pub async fn list(&self, kind: &str, labels: Option<&str>) -> Result<Vec<DynamicObject>> {
        let mut lp = ListParams::default();
        if let Some(l) = labels {
            lp = lp.labels(l);
        }
        Ok(self
            .lab
            .metallb(&self.lab.client, self.namespace(), kind)
            .list(&lp)
            .await?
            .items)
    }

    /// Waits until the router's paths for `prefix` come from exactly the nodes
    /// `nodes` (1-based; empty: withdrawn), one path each. Returns the paths and how
    /// long it took. On timeout the error holds what the router had.
    pub async fn wait_next_hops(
        &self,
        prefix: &str,
        nodes: &[usize],
        timeout: Duration,
    ) -> Result<(Vec<RouterPath>, Duration)> {
        wait_paths_from(&self.router, "router", prefix, nodes, timeout).await
    }

    /// [`Self::wait_next_hops`] at the iBGP router (`router2`).
    pub async fn wait_ibgp_next_hops(
        &self,
        prefix: &str,
        nodes: &[usize],
        timeout: Duration,
    ) -> Result<(Vec<RouterPath>, Duration)> {
        let r = self
            .ibgp
            .as_ref()
            .context("no iBGP router (ibgp_router())")?;
        wait_paths_from(r, "router2 (iBGP)", prefix, nodes, timeout).await
    }

    /// Waits until the router's session with each node of `nodes` is Established.
    pub async fn wait_sessions(&self, nodes: &[usize], timeout: Duration) -> Result<()> {
        let want: BTreeSet<IpAddr> = nodes.iter().map(|n| plan::node_v4(*n).into()).collect();
        wait_until(
            &format!(
                "the router's sessions with {} Established",
                show_nodes(nodes)
            ),
            timeout,
            || async {
                let s = sessions(&self.router).map_err(|e| format!("{e:#}"))?;
                if want
                    .iter()
                    .all(|a| s.get(a).map(String::as_str) == Some("Established"))
                {
                    Ok(())
                } else {
                    Err(format!("router sessions: {}", show_sessions(&s)))
                }
            },
        )
        .await
    }

    /// What everything logged, for a failure: each speaker's log tail, the router's
    /// state and FRR's logs.
    pub fn diagnostics(&self) -> String {
        let mut s = String::new();
        for sp in self.speakers.iter().flatten() {
            let log = sp.log_text();
            // Debug lines of the project's crates only (not the HTTP client's).
            let lines: Vec<&str> = log.lines().filter(|l| ours_or_not_debug(l)).collect();
            let tail = &lines[lines.len().saturating_sub(60)..];
            s.push_str(&format!(
                "--- speaker {} ({}), last {} lines:\n{}\n",
                sp.node,
                sp.log.display(),
                tail.len(),
                tail.join("\n")
            ));
        }
        s.push_str(&format!(
            "--- router: {}\n",
            router_summary(&self.router).unwrap_or_else(|e| format!("{e:#}"))
        ));
        s.push_str(&self.router.logs(15));
        if let Some(r) = &self.ibgp {
            s.push_str(&format!(
                "--- router2 (iBGP): {}\n",
                router_summary(r).unwrap_or_else(|e| format!("{e:#}"))
            ));
        }
        s
    }

    /// What the speakers say through their metrics (`metallb_speaker_announced`,
    /// `metallb_bgp_*`) and the status objects of the test namespace, for a failure.
    pub async fn api_diagnostics(&self) -> String {
        let mut s = String::new();
        for sp in self.speakers.iter().flatten() {
            match sp.metrics().await {
                Ok(body) => {
                    let lines: Vec<&str> = body
                        .lines()
                        .filter(|l| {
                            (l.starts_with("metallb_speaker_announced")
                                || l.starts_with("metallb_bgp_session_up")
                                || l.starts_with("metallb_bgp_announced_prefixes_total")
                                || l.starts_with("metallb_bgp_updates_total"))
                                && !l.starts_with('#')
                        })
                        .collect();
                    s.push_str(&format!(
                        "--- speaker {} metrics:\n{}\n",
                        sp.node,
                        lines.join("\n")
                    ));
                }
                Err(e) => s.push_str(&format!("--- speaker {} metrics: {e:#}\n", sp.node)),
            }
        }
        for kind in [
            "BGPSessionStatus",
            "ServiceBGPStatus",
            "ServiceL2Status",
            "ConfigurationState",
        ] {
            match self.list(kind, None).await {
                Ok(l) => {
                    s.push_str(&format!("--- {kind} in {}:\n", self.namespace()));
                    for o in l {
                        s.push_str(&format!(
                            "  {} labels {:?} status {}\n",
                            o.metadata.name.unwrap_or_default(),
                            o.metadata.labels.unwrap_or_default(),
                            o.data["status"]
                        ));
                    }
                }
                Err(e) => s.push_str(&format!("--- {kind}: {e:#}\n")),
            }
        }
        s
    }

    /// Ends the test: on `Err` attaches [`Self::diagnostics`]; stops the speakers
    /// (SIGTERM) and routers, removes the namespaces, the node labels the test set, its
    /// API namespace and ClusterRoleBindings.
    pub async fn finish(mut self, result: Result<()>) -> Result<()> {
        let result = match result {
            Ok(()) => Ok(()),
            Err(e) => {
                let mut d = self.diagnostics();
                d.push_str(&self.api_diagnostics().await);
                Err(e.context(format!("diagnostics:\n{d}")))
            }
        };
        for n in 1..=self.speakers.len() {
            let _ = self.stop_speaker(n, Duration::from_secs(5));
        }
        let labels = std::mem::take(&mut self.labels);
        let nodes = Api::<Node>::all(self.lab.client.clone());
        for (node, key) in labels {
            let _ = nodes
                .patch(
                    &node,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {key: null}}})),
                )
                .await;
        }
        let SpeakerLab {
            speakers,
            router,
            ibgp,
            net,
            setup,
            ..
        } = self;
        drop(speakers);
        drop(router);
        drop(ibgp);
        drop(net);
        let cleanup = setup.delete().await;
        result?;
        cleanup
    }
}

/// Whether a text log line is not DEBUG/TRACE, or comes from one of the project's crates.
fn ours_or_not_debug(line: &str) -> bool {
    let plain: String = strip_ansi(line);
    let mut words = plain.split_whitespace().skip(1);
    let level = words.next().unwrap_or_default();
    if level != "DEBUG" && level != "TRACE" {
        return true;
    }
    let target = words.next().unwrap_or_default();
    [
        "speaker",
        "bgp",
        "bfd",
        "arp_ndp",
        "status",
        "cluster_view",
        "daemon",
        "kube_edge",
    ]
    .iter()
    .any(|c| target == *c || target.starts_with(&format!("{c}:")))
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `router`'s BGPPeer spec: 192.0.2.1, AS 64512, from the nodes' AS 64513.
pub fn router_peer_spec() -> Value {
    json!({"myASN": plan::NODE_AS, "peerASN": plan::ROUTER_AS,
           "peerAddress": plan::ROUTER_V4.to_string()})
}

/// `router6`'s BGPPeer spec: the router's IPv6 address 2001:db8:0:1::1, AS 64512, from
/// the nodes' AS 64513 (with [`SpeakerLabOptions::ipv6_peers`]).
pub fn router_v6_peer_spec() -> Value {
    json!({"myASN": plan::NODE_AS, "peerASN": plan::ROUTER_AS,
           "peerAddress": plan::ROUTER_V6.to_string()})
}

/// The iBGP router's BGPPeer spec: 192.0.2.2, AS 64513 on both sides.
pub fn ibgp_peer_spec() -> Value {
    json!({"myASN": IBGP_AS, "peerASN": IBGP_AS,
           "peerAddress": plan::ROUTER2_V4.to_string()})
}

/// Node `n`'s IPv4 address.
pub fn node_addr(n: usize) -> IpAddr {
    plan::node_v4(n).into()
}

/// An address of the pool, 198.51.100.`host`.
pub fn pool_ip(host: u8) -> IpAddr {
    Ipv4Addr::new(198, 51, 100, host).into()
}

/// Makes sure Nodes node-1..node-N exist with their InternalIPs and `Ready` (the lab
/// creates them; a test that deleted one gets it back).
pub async fn ensure_nodes(lab: &Lab, nodes: usize) -> Result<()> {
    let api = Api::<Node>::all(lab.client.clone());
    for n in 1..=nodes {
        let name = plan::node_name(n);
        let v4 = plan::node_v4(n).to_string();
        let v6 = plan::node_v6(n).to_string();
        let node = match api.get_opt(&name).await? {
            Some(node) => node,
            None => {
                let node: Node = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {
                        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}},
                }))?;
                api.create(&PostParams::default(), &node)
                    .await
                    .with_context(|| format!("creating Node {name}"))?
            }
        };
        let has = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .is_some_and(|a| a.iter().any(|a| a.type_ == "InternalIP" && a.address == v4));
        if !has {
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {
                    "addresses": [
                        {"type": "InternalIP", "address": v4},
                        {"type": "InternalIP", "address": v6},
                        {"type": "Hostname", "address": name},
                    ],
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Lab",
                                    "message": "lab node",
                                    "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                                    "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                }})),
            )
            .await
            .with_context(|| format!("writing the status of Node {name}"))?;
        }
    }
    Ok(())
}

/// One path of a prefix at an FRR router (`show bgp ipv4 unicast <prefix> json`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterPath {
    /// The neighbour it came from.
    pub peer: String,
    /// Its (first) next hop.
    pub next_hop: String,
    pub as_path: String,
    pub local_pref: Option<u64>,
    /// Standard communities as FRR prints them (`64512:100`, `no-export`), sorted.
    pub communities: Vec<String>,
    /// Large communities (`64512:1:2`), sorted.
    pub large_communities: Vec<String>,
    pub valid: bool,
    pub best: bool,
    pub multipath: bool,
}

/// The paths FRR holds for `prefix` (empty when it has none).
pub fn paths(frr: &Frr, prefix: &str) -> Result<Vec<RouterPath>> {
    let afi = if prefix.contains(':') { "ipv6" } else { "ipv4" };
    let out = match frr.vtysh(&[&format!("show bgp {afi} unicast {prefix} json")]) {
        Ok(o) => o,
        Err(e) if format!("{e:#}").contains("Network not in table") => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let v: Value = match serde_json::from_str(&out) {
        Ok(v) => v,
        Err(_) if out.trim().is_empty() => return Ok(Vec::new()),
        Err(e) => {
            return Err(anyhow!(
                "parsing `show bgp {afi} unicast {prefix} json`: {e}: {out}"
            ));
        }
    };
    // FRR answers the longest match: only the exact prefix counts.
    if v["prefix"].as_str().is_some_and(|p| p != prefix) {
        return Ok(Vec::new());
    }
    let words = |x: &Value| -> Vec<String> {
        let mut w: Vec<String> = x["string"]
            .as_str()
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        w.sort();
        w
    };
    Ok(v["paths"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| RouterPath {
            peer: p["peer"]["peerId"].as_str().unwrap_or_default().to_owned(),
            next_hop: p["nexthops"][0]["ip"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            as_path: p["aspath"]["string"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            local_pref: p["locPrf"].as_u64().or_else(|| p["localpref"].as_u64()),
            communities: words(&p["community"]),
            large_communities: words(&p["largeCommunity"]),
            valid: p["valid"].as_bool().unwrap_or(false),
            best: p["bestpath"]["overall"].as_bool().unwrap_or(false),
            multipath: p["multipath"].as_bool().unwrap_or(false),
        })
        .collect())
}

/// The next hops of `prefix`'s valid paths, sorted.
pub fn next_hops(frr: &Frr, prefix: &str) -> Result<BTreeSet<String>> {
    Ok(paths(frr, prefix)?
        .into_iter()
        .filter(|p| p.valid)
        .map(|p| p.next_hop)
        .collect())
}

/// The next hops zebra installed for `prefix` (`show ip route <prefix> json`): ECMP
/// shows one per node.
pub fn fib_next_hops(frr: &Frr, prefix: &str) -> Result<BTreeSet<String>> {
    let ip = if prefix.contains(':') { "ipv6" } else { "ip" };
    let v = frr.show_json(&format!("show {ip} route {prefix} json"))?;
    let mut r = BTreeSet::new();
    for route in v[prefix].as_array().into_iter().flatten() {
        if route["selected"].as_bool() != Some(true) {
            continue;
        }
        for nh in route["nexthops"].as_array().into_iter().flatten() {
            if nh["active"].as_bool() == Some(true)
                && let Some(a) = nh["ip"].as_str()
            {
                r.insert(a.to_owned());
            }
        }
    }
    Ok(r)
}

/// The router's BGP sessions: neighbour address -> state.
pub fn sessions(frr: &Frr) -> Result<BTreeMap<IpAddr, String>> {
    Ok(frr
        .bgp_neighbors()?
        .into_iter()
        .map(|n| (n.addr, n.state))
        .collect())
}

/// One line of what an FRR router has: its sessions and every route of the pools with
/// next hops, LOCAL_PREF and communities (for failure messages).
pub fn router_summary(frr: &Frr) -> Result<String> {
    let s = sessions(frr)?;
    let mut routes = Vec::new();
    for r in frr.routes_v4()? {
        routes.push(format!(
            "{} via {}{}",
            r.prefix,
            r.nexthops.join(","),
            r.local_pref.map(|l| format!(" lp {l}")).unwrap_or_default()
        ));
    }
    Ok(format!(
        "sessions: {}; IPv4 table: {}",
        show_sessions(&s),
        if routes.is_empty() {
            "empty".to_string()
        } else {
            routes.join("; ")
        }
    ))
}

fn show_sessions(s: &BTreeMap<IpAddr, String>) -> String {
    s.iter()
        .map(|(a, st)| format!("{a} {st}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn show_nodes(nodes: &[usize]) -> String {
    if nodes.is_empty() {
        return "no node".into();
    }
    nodes
        .iter()
        .map(|n| format!("node-{n} ({})", plan::node_v4(*n)))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn wait_paths_from(
    frr: &Frr,
    who: &str,
    prefix: &str,
    nodes: &[usize],
    timeout: Duration,
) -> Result<(Vec<RouterPath>, Duration)> {
    let want: BTreeSet<String> = nodes
        .iter()
        .map(|n| plan::node_v4(*n).to_string())
        .collect();
    let start = Instant::now();
    let what = if nodes.is_empty() {
        format!("{prefix} withdrawn at the {who}")
    } else {
        format!(
            "{prefix} at the {who} from exactly {} (one path each)",
            show_nodes(nodes)
        )
    };
    let p = wait_until(&what, timeout, || async {
        let p = paths(frr, prefix).map_err(|e| format!("{e:#}"))?;
        let valid: Vec<&RouterPath> = p.iter().filter(|p| p.valid).collect();
        let hops: BTreeSet<String> = valid.iter().map(|p| p.next_hop.clone()).collect();
        if hops == want && valid.len() == want.len() {
            Ok(p)
        } else {
            Err(format!(
                "{prefix}: {} ; {}",
                if p.is_empty() {
                    "no path".to_string()
                } else {
                    p.iter()
                        .map(|p| format!("via {} from {} valid={}", p.next_hop, p.peer, p.valid))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
                router_summary(frr).unwrap_or_else(|e| format!("{e:#}"))
            ))
        }
    })
    .await?;
    Ok((p, start.elapsed()))
}

/// A plain HTTP/1.1 GET of 127.0.0.1:`port``path` from inside network namespace
/// `netns` (a thread enters it; 5 s deadline).
pub async fn http_get_in(netns: &str, port: u16, path: &str) -> Result<String> {
    let (netns, path) = (netns.to_owned(), path.to_owned());
    tokio::task::spawn_blocking(move || http_get_in_blocking(&netns, port, &path))
        .await
        .context("the namespace thread panicked")?
}

/// [`http_get_in`] for callers without a runtime (the demo): a thread of its own
/// enters the namespace, so the caller's namespace never changes.
pub fn http_get_in_blocking(netns: &str, port: u16, path: &str) -> Result<String> {
    let (netns, path) = (netns.to_owned(), path.to_owned());
    std::thread::spawn(move || -> Result<String> {
        testkit::netns::enter_thread(&netns)?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            .with_context(|| format!("connecting to {addr} in {netns}"))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.set_write_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )?;
        let mut out = Vec::new();
        s.read_to_end(&mut out)
            .with_context(|| format!("reading GET {addr}{path} in {netns}"))?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    })
    .join()
    .map_err(|_| anyhow!("the namespace thread panicked"))?
}

/// The value of metric line `name{labels}` (exact text before the value) in an
/// exposition `body`.
pub fn metric_value(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l[series.len()..].trim().parse().ok())
}
