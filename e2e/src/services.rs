//! LoadBalancer Services and their backends. A backend is a real Pod (never run: the lab
//! has no scheduler and no kubelet) on a lab Node, with the Service's selector labels,
//! whose status the harness patches as a kubelet would (`Running`, its IPs, the `Ready`
//! condition); terminating backends are Pods deleted while a finalizer of the harness holds
//! them. The EndpointSlices come from the kube-controller-manager's EndpointSlice
//! controller, and the harness waits until they show what the test asked for.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::core::v1::{Node, Pod, Service, ServiceAccount, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::lab::Lab;

/// The label linking an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// What the kube-controller-manager's EndpointSlice controller puts in `managed-by`.
const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
/// The label of the harness's backend Pods: the Service they were made for (besides the
/// Service's selector labels, which are what the EndpointSlice controller matches).
pub const BACKEND_OF_LABEL: &str = "e2e.metallb-rs.io/backend-of";
/// The finalizer that keeps a terminating backend Pod (deleted, so it has a
/// `deletionTimestamp`) until the harness releases it ([`release_backends`]).
pub const HOLD_FINALIZER: &str = "e2e.metallb-rs.io/terminating";
/// How long the EndpointSlice controller may take to show a change of the Pods.
const SLICES_WITHIN: Duration = Duration::from_secs(30);
/// How often the slices are read while waiting for them.
const SLICES_POLL: Duration = Duration::from_millis(20);

/// One backend Pod of a Service, as its EndpointSlice entry. The conditions must be ones a
/// Pod can have: not terminating, `serving == ready` (its Ready condition); terminating,
/// `ready` false and `serving` its Ready condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointSpec {
    /// The Pod's `spec.nodeName` (must be a lab Node).
    pub node: String,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// The Pod's only address; default: the node's InternalIPs, one per family (as a
    /// hostNetwork Pod has), so that only addresses of the plan appear.
    pub address: Option<IpAddr>,
}

impl EndpointSpec {
    /// A running, ready Pod on `node`.
    pub fn ready(node: &str) -> EndpointSpec {
        EndpointSpec {
            node: node.into(),
            ready: true,
            serving: true,
            terminating: false,
            address: None,
        }
    }

    /// A Pod on `node` that is not ready (e.g. failing its readiness probe).
    pub fn not_ready(node: &str) -> EndpointSpec {
        EndpointSpec {
            ready: false,
            serving: false,
            ..EndpointSpec::ready(node)
        }
    }

    /// A terminating Pod on `node`, still `serving` or not (ready is always false while
    /// terminating).
    pub fn terminating(node: &str, serving: bool) -> EndpointSpec {
        EndpointSpec {
            ready: false,
            serving,
            terminating: true,
            ..EndpointSpec::ready(node)
        }
    }

    pub fn with_address(mut self, addr: IpAddr) -> EndpointSpec {
        self.address = Some(addr);
        self
    }
}

/// A LoadBalancer Service to create with [`Lab::create_lb_service`].
#[derive(Clone, Debug)]
pub struct LbService {
    pub name: String,
    /// `(protocol, port, targetPort)`.
    pub ports: Vec<(String, i32, i32)>,
    /// `Cluster` (default when `None`) or `Local`.
    pub external_traffic_policy: Option<String>,
    pub load_balancer_class: Option<String>,
    /// `spec.ipFamilyPolicy` (default: the server's, SingleStack).
    pub ip_family_policy: Option<String>,
    /// `spec.ipFamilies` (default: the server's, the cluster's first family).
    pub ip_families: Option<Vec<String>>,
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    /// Default: `app: <name>`. The backend Pods get these labels: keep selectors of the
    /// Services of one namespace disjoint, or the Pods of one back the other too.
    pub selector: BTreeMap<String, String>,
    pub endpoints: Vec<EndpointSpec>,
}

impl LbService {
    /// TCP 80 -> 8080, selector `app: <name>`, no endpoints.
    pub fn new(name: &str) -> LbService {
        LbService {
            name: name.into(),
            ports: vec![("TCP".into(), 80, 8080)],
            external_traffic_policy: None,
            load_balancer_class: None,
            ip_family_policy: None,
            ip_families: None,
            annotations: BTreeMap::new(),
            labels: BTreeMap::new(),
            selector: [("app".to_string(), name.to_string())].into(),
            endpoints: Vec::new(),
        }
    }

    pub fn port(mut self, protocol: &str, port: i32, target: i32) -> LbService {
        self.ports.push((protocol.into(), port, target));
        self
    }

    /// Only this port (instead of the default TCP 80).
    pub fn only_port(mut self, protocol: &str, port: i32, target: i32) -> LbService {
        self.ports = vec![(protocol.into(), port, target)];
        self
    }

    /// `spec.loadBalancerClass`.
    pub fn class(mut self, class: &str) -> LbService {
        self.load_balancer_class = Some(class.into());
        self
    }

    /// `spec.ipFamilyPolicy` and `spec.ipFamilies` (e.g. `RequireDualStack`,
    /// `["IPv4", "IPv6"]`).
    pub fn families(mut self, policy: &str, families: &[&str]) -> LbService {
        self.ip_family_policy = Some(policy.into());
        self.ip_families = Some(families.iter().map(|f| f.to_string()).collect());
        self
    }

    pub fn local(mut self) -> LbService {
        self.external_traffic_policy = Some("Local".into());
        self
    }

    pub fn annotation(mut self, k: &str, v: &str) -> LbService {
        self.annotations.insert(k.into(), v.into());
        self
    }

    pub fn label(mut self, k: &str, v: &str) -> LbService {
        self.labels.insert(k.into(), v.into());
        self
    }

    pub fn endpoints(mut self, eps: Vec<EndpointSpec>) -> LbService {
        self.endpoints = eps;
        self
    }
}

impl Lab {
    /// Creates a LoadBalancer Service with the selector of `spec`, and a backend Pod per
    /// endpoint of `spec`; returns once the EndpointSlice controller's slices show them
    /// ([`Lab::set_endpoints`]). The slices are the controller's: one or more per IP
    /// family, owned by the Service (the garbage collector deletes them with it).
    pub async fn create_lb_service(
        &self,
        ns: &str,
        spec: &LbService,
    ) -> Result<(Service, Vec<EndpointSlice>)> {
        let svc = Service {
            metadata: ObjectMeta {
                name: Some(spec.name.clone()),
                namespace: Some(ns.into()),
                labels: (!spec.labels.is_empty()).then(|| spec.labels.clone()),
                annotations: (!spec.annotations.is_empty()).then(|| spec.annotations.clone()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                selector: Some(spec.selector.clone()),
                external_traffic_policy: spec.external_traffic_policy.clone(),
                load_balancer_class: spec.load_balancer_class.clone(),
                ip_family_policy: spec.ip_family_policy.clone(),
                ip_families: spec.ip_families.clone(),
                ports: Some(
                    spec.ports
                        .iter()
                        .map(|(proto, port, target)| ServicePort {
                            name: Some(port_name(proto, *port)),
                            protocol: Some(proto.clone()),
                            port: *port,
                            target_port: Some(IntOrString::Int(*target)),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        let svc = Api::<Service>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &svc)
            .await
            .with_context(|| format!("creating LoadBalancer Service {ns}/{}", spec.name))?;
        let slices = self.set_endpoints(&svc, &spec.endpoints).await?;
        Ok((svc, slices))
    }

    /// Makes the Service's backend Pods match `endpoints` (Pods created, their status
    /// patched, made terminating or removed; a Pod is kept when it can become what is
    /// wanted), then waits until the EndpointSlice controller's slices of the Service hold
    /// exactly these endpoints, and returns those slices (ordered by the Service's
    /// families). Fails naming the Service when they do not within 30 s.
    pub async fn set_endpoints(
        &self,
        svc: &Service,
        endpoints: &[EndpointSpec],
    ) -> Result<Vec<EndpointSlice>> {
        let name = svc
            .metadata
            .name
            .clone()
            .context("Service without a name")?;
        let ns = svc
            .metadata
            .namespace
            .clone()
            .context("Service without a namespace")?;
        let spec = svc.spec.clone().unwrap_or_default();
        let selector = spec.selector.clone().unwrap_or_default();
        if selector.is_empty() && !endpoints.is_empty() {
            bail!(
                "Service {ns}/{name} has no selector: the EndpointSlice controller makes no \
                 slices for its Pods"
            );
        }
        let families = spec
            .ip_families
            .clone()
            .unwrap_or_else(|| vec!["IPv4".into()]);

        // What each Pod must be; the nodes' InternalIPs are the default addresses.
        let nodes = Api::<Node>::all(self.client.clone());
        let mut node_ips: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
        let mut wanted = Vec::new();
        for ep in endpoints {
            let ready = pod_ready(ep)?;
            if !node_ips.contains_key(&ep.node) {
                let node = nodes.get_opt(&ep.node).await?.with_context(|| {
                    format!("endpoint on node {:?}: there is no such Node", ep.node)
                })?;
                node_ips.insert(ep.node.clone(), internal_ips(&node));
            }
            let ips = match ep.address {
                Some(a) => vec![a],
                None => node_ips[&ep.node].clone(),
            };
            if ips.is_empty() {
                bail!("node {} has no InternalIP", ep.node);
            }
            wanted.push(Backend {
                node: ep.node.clone(),
                ips,
                ready,
                terminating: ep.terminating,
            });
        }

        let pods = Api::<Pod>::namespaced(self.client.clone(), &ns);
        let existing: Vec<ExistingPod> = pods
            .list(&ListParams::default().labels(&format!("{BACKEND_OF_LABEL}={name}")))
            .await
            .with_context(|| format!("listing the backend Pods of {ns}/{name}"))?
            .items
            .iter()
            .filter_map(existing_pod)
            .collect();
        let actions = plan_backends(&existing, &wanted);
        let started = Instant::now();
        let changes = actions
            .iter()
            .filter(|a| !matches!(a, PodAction::Keep { .. }))
            .count();
        if actions
            .iter()
            .any(|a| matches!(a, PodAction::Create { .. }))
        {
            self.wait_default_service_account(&ns).await?;
        }
        let mut names: Vec<String> = vec![String::new(); wanted.len()];
        for action in &actions {
            match action {
                PodAction::Keep { name: pod, want } => names[*want] = pod.clone(),
                PodAction::SetReady {
                    name: pod,
                    want,
                    ready,
                } => {
                    set_ready(&pods, pod, *ready).await?;
                    names[*want] = pod.clone();
                }
                PodAction::Terminate {
                    name: pod,
                    want,
                    ready,
                } => {
                    hold(&pods, pod).await?;
                    set_ready(&pods, pod, *ready).await?;
                    delete_pod(&pods, pod).await?;
                    names[*want] = pod.clone();
                }
                PodAction::Create { want } => {
                    let b = &wanted[*want];
                    names[*want] = create_backend(&pods, &name, &selector, b).await?;
                }
                PodAction::Remove { name: pod, held } => {
                    if *held {
                        release(&pods, pod).await?;
                    }
                    delete_pod(&pods, pod).await?;
                }
            }
        }

        let want = expected_endpoints(&families, &wanted, &names);
        let slices = self.wait_slices(&ns, &name, &families, &want).await?;
        if changes > 0 {
            eprintln!(
                "e2e: the EndpointSlices of Service {ns}/{name} show its {} endpoint(s) {} ms \
                 after the first of {changes} Pod change(s)",
                endpoints.len(),
                started.elapsed().as_millis()
            );
        }
        Ok(slices)
    }

    /// Releases the harness's terminating backend Pods of namespace `ns` (removes
    /// [`HOLD_FINALIZER`]), so that they go: namespace deletion would wait for them.
    pub async fn release_backends(&self, ns: &str) -> Result<()> {
        release_backends(&self.client, ns).await
    }

    /// Waits until namespace `ns` has its `default` ServiceAccount (the lab's
    /// serviceaccount-controller creates it; Pod admission refuses Pods without it).
    async fn wait_default_service_account(&self, ns: &str) -> Result<()> {
        let api = Api::<ServiceAccount>::namespaced(self.client.clone(), ns);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if api.get_opt("default").await?.is_some() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "namespace {ns} has no `default` ServiceAccount after 10 s: Pod admission \
                     needs it, and the lab's kube-controller-manager (serviceaccount-controller) \
                     makes it; is it running? (lab/cluster status)"
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Polls the EndpointSlice controller's slices of Service `ns/name` until their
    /// endpoints, per family, are `want`.
    async fn wait_slices(
        &self,
        ns: &str,
        name: &str,
        families: &[String],
        want: &BTreeMap<String, Vec<EndpointView>>,
    ) -> Result<Vec<EndpointSlice>> {
        let api = Api::<EndpointSlice>::namespaced(self.client.clone(), ns);
        let lp = ListParams::default().labels(&format!(
            "{SERVICE_NAME_LABEL}={name},{MANAGED_BY_LABEL}={MANAGED_BY}"
        ));
        let started = Instant::now();
        let mut last;
        loop {
            match api.list(&lp).await {
                Ok(list) => {
                    let have = observed_endpoints(families, &list.items);
                    if &have == want {
                        let mut slices = list.items;
                        slices.sort_by_key(|s| {
                            (
                                families.iter().position(|f| *f == s.address_type),
                                s.metadata.name.clone(),
                            )
                        });
                        return Ok(slices);
                    }
                    last = format!("{} slice(s) with endpoints {have:?}", list.items.len());
                }
                Err(e) => last = format!("listing them failed: {e}"),
            }
            if started.elapsed() > SLICES_WITHIN {
                return Err(anyhow!(
                    "the EndpointSlices of Service {ns}/{name} do not show its endpoints \
                     {SLICES_WITHIN:?} after its Pods were written: want {want:?}; the \
                     EndpointSlice controller's slices show {last}. The lab's \
                     kube-controller-manager must run the endpointslice-controller \
                     (lab/cluster status; its log is logs/kube-controller-manager.log in {})",
                    self.env.state_dir.display()
                ));
            }
            tokio::time::sleep(SLICES_POLL).await;
        }
    }
}

/// Removes [`HOLD_FINALIZER`] from every backend Pod of namespace `ns` that has it.
pub async fn release_backends(client: &kube::Client, ns: &str) -> Result<()> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels(BACKEND_OF_LABEL))
        .await
        .with_context(|| format!("listing the backend Pods of namespace {ns}"))?;
    for p in &list.items {
        let held = p
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == HOLD_FINALIZER));
        if let (true, Some(name)) = (held, &p.metadata.name) {
            release(&pods, name).await?;
        }
    }
    Ok(())
}

/// The Pod's Ready condition for `ep`, or why no Pod has its conditions.
fn pod_ready(ep: &EndpointSpec) -> Result<bool> {
    if ep.terminating {
        if ep.ready {
            bail!(
                "{ep:?}: a terminating Pod's endpoint is never ready (serving says whether it still serves)"
            );
        }
        Ok(ep.serving)
    } else {
        if ep.ready != ep.serving {
            bail!("{ep:?}: a Pod that is not terminating serves exactly when it is ready");
        }
        Ok(ep.ready)
    }
}

/// A node's InternalIPs, at most one per family, IPv4 first.
fn internal_ips(node: &Node) -> Vec<IpAddr> {
    let all: Vec<IpAddr> = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP")
        .filter_map(|a| a.address.parse().ok())
        .collect();
    let v4 = all.iter().find(|a| a.is_ipv4());
    let v6 = all.iter().find(|a| a.is_ipv6());
    v4.into_iter().chain(v6).copied().collect()
}

/// What one backend Pod is: its node, its IPs, its Ready condition, and whether it is
/// terminating.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Backend {
    node: String,
    ips: Vec<IpAddr>,
    ready: bool,
    terminating: bool,
}

/// A backend Pod that exists.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ExistingPod {
    name: String,
    backend: Backend,
    /// It carries [`HOLD_FINALIZER`].
    held: bool,
}

/// What to do to the Pods so that they are the wanted backends (`want` indexes them).
#[derive(Clone, Debug, PartialEq, Eq)]
enum PodAction {
    /// The Pod is already what is wanted.
    Keep { name: String, want: usize },
    /// Patch its Ready condition.
    SetReady {
        name: String,
        want: usize,
        ready: bool,
    },
    /// Hold it, set its Ready condition and delete it (it stays, terminating).
    Terminate {
        name: String,
        want: usize,
        ready: bool,
    },
    /// A new Pod.
    Create { want: usize },
    /// Delete a Pod nothing wants (releasing it first when it is held).
    Remove { name: String, held: bool },
}

/// Matches the existing Pods to the wanted backends (same node and IPs; a Pod never stops
/// terminating, and its IPs never change) and says what to do; pure.
fn plan_backends(existing: &[ExistingPod], wanted: &[Backend]) -> Vec<PodAction> {
    let mut used = vec![false; existing.len()];
    let mut plan: Vec<Option<PodAction>> = vec![None; wanted.len()];
    // Pass 0: exactly as wanted; 1: only the Ready condition differs; 2: a running Pod
    // that is to terminate.
    for pass in 0..3 {
        for (i, w) in wanted.iter().enumerate() {
            if plan[i].is_some() {
                continue;
            }
            let found = existing.iter().enumerate().find(|(j, e)| {
                let b = &e.backend;
                !used[*j]
                    && b.node == w.node
                    && b.ips == w.ips
                    && match pass {
                        0 => b.terminating == w.terminating && b.ready == w.ready,
                        1 => b.terminating == w.terminating,
                        _ => !b.terminating && w.terminating,
                    }
            });
            if let Some((j, e)) = found {
                used[j] = true;
                let name = e.name.clone();
                plan[i] = Some(match pass {
                    0 => PodAction::Keep { name, want: i },
                    1 => PodAction::SetReady {
                        name,
                        want: i,
                        ready: w.ready,
                    },
                    _ => PodAction::Terminate {
                        name,
                        want: i,
                        ready: w.ready,
                    },
                });
            }
        }
    }
    let mut actions: Vec<PodAction> = plan
        .into_iter()
        .enumerate()
        .map(|(i, a)| a.unwrap_or(PodAction::Create { want: i }))
        .collect();
    for (j, e) in existing.iter().enumerate() {
        if !used[j] {
            actions.push(PodAction::Remove {
                name: e.name.clone(),
                held: e.held,
            });
        }
    }
    actions
}

/// A backend Pod as the harness made it (`None` for a Pod it cannot read back).
fn existing_pod(p: &Pod) -> Option<ExistingPod> {
    let spec = p.spec.as_ref()?;
    let status = p.status.clone().unwrap_or_default();
    let ips = status
        .pod_ips
        .unwrap_or_default()
        .iter()
        .filter_map(|ip| ip.ip.parse().ok())
        .collect();
    let ready = status
        .conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    Some(ExistingPod {
        name: p.metadata.name.clone()?,
        backend: Backend {
            node: spec.node_name.clone()?,
            ips,
            ready,
            terminating: p.metadata.deletion_timestamp.is_some(),
        },
        held: p
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == HOLD_FINALIZER)),
    })
}

/// One endpoint as compared: (Pod, addresses, node, ready, serving, terminating).
type EndpointView = (String, String, String, bool, bool, bool);

/// The endpoints the EndpointSlice controller makes of the Pods `names[i]` = `wanted[i]`,
/// per family of the Service, sorted.
fn expected_endpoints(
    families: &[String],
    wanted: &[Backend],
    names: &[String],
) -> BTreeMap<String, Vec<EndpointView>> {
    families
        .iter()
        .map(|f| {
            let v6 = f == "IPv6";
            let mut eps: Vec<EndpointView> = wanted
                .iter()
                .zip(names)
                .filter_map(|(b, name)| {
                    let ip = b.ips.iter().find(|ip| ip.is_ipv6() == v6)?;
                    Some((
                        name.clone(),
                        ip.to_string(),
                        b.node.clone(),
                        b.ready && !b.terminating,
                        b.ready,
                        b.terminating,
                    ))
                })
                .collect();
            eps.sort();
            (f.clone(), eps)
        })
        .collect()
}

/// The endpoints of `slices`, per family of the Service, sorted.
fn observed_endpoints(
    families: &[String],
    slices: &[EndpointSlice],
) -> BTreeMap<String, Vec<EndpointView>> {
    families
        .iter()
        .map(|f| {
            let mut eps: Vec<EndpointView> = slices
                .iter()
                .filter(|s| &s.address_type == f)
                .flat_map(|s| s.endpoints.iter().flatten())
                .map(|e| {
                    let c = e.conditions.clone().unwrap_or_default();
                    (
                        e.target_ref
                            .as_ref()
                            .and_then(|r| r.name.clone())
                            .unwrap_or_default(),
                        e.addresses.join(","),
                        e.node_name.clone().unwrap_or_default(),
                        c.ready.unwrap_or(false),
                        c.serving.unwrap_or(false),
                        c.terminating.unwrap_or(false),
                    )
                })
                .collect();
            eps.sort();
            (f.clone(), eps)
        })
        .collect()
}

fn ready_condition(ready: bool) -> Value {
    json!([{
        "type": "Ready",
        "status": if ready { "True" } else { "False" },
        "reason": "E2eHarness",
        "message": "set by the metallb-rs e2e harness (the lab has no kubelet)",
    }])
}

/// Creates a backend Pod of Service `svc` (never run: the lab has no kubelet) and writes
/// the status a kubelet would; a terminating one is created held and deleted. Returns
/// its name.
async fn create_backend(
    pods: &Api<Pod>,
    svc: &str,
    selector: &BTreeMap<String, String>,
    b: &Backend,
) -> Result<String> {
    let mut labels = selector.clone();
    labels.insert(BACKEND_OF_LABEL.into(), svc.into());
    let mut metadata = json!({"generateName": format!("{svc}-{}-", b.node), "labels": labels});
    if b.terminating {
        metadata["finalizers"] = json!([HOLD_FINALIZER]);
    }
    let pod: Pod = serde_json::from_value(json!({
        "metadata": metadata,
        "spec": {
            "nodeName": b.node,
            // Deleted at once (there is no kubelet to confirm a graceful deletion), so
            // that namespace deletion completes.
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "containers": [{"name": "backend", "image": "e2e.invalid/backend:never-run"}],
        },
    }))?;
    let created = pods
        .create(&PostParams::default(), &pod)
        .await
        .with_context(|| format!("creating a backend Pod of {svc} on {}", b.node))?;
    let name = created.metadata.name.context("a created Pod has a name")?;
    let ips: Vec<Value> = b
        .ips
        .iter()
        .map(|ip| json!({"ip": ip.to_string()}))
        .collect();
    pods.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "phase": "Running",
            "podIP": b.ips[0].to_string(),
            "podIPs": ips,
            "conditions": ready_condition(b.ready),
        }})),
    )
    .await
    .with_context(|| format!("writing the status of backend Pod {name}"))?;
    if b.terminating {
        delete_pod(pods, &name).await?;
    }
    Ok(name)
}

async fn set_ready(pods: &Api<Pod>, name: &str, ready: bool) -> Result<()> {
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": ready_condition(ready)}})),
    )
    .await
    .with_context(|| format!("setting the Ready condition of backend Pod {name}"))?;
    Ok(())
}

async fn hold(pods: &Api<Pod>, name: &str) -> Result<()> {
    pods.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": [HOLD_FINALIZER]}})),
    )
    .await
    .with_context(|| format!("adding finalizer {HOLD_FINALIZER} to backend Pod {name}"))?;
    Ok(())
}

async fn release(pods: &Api<Pod>, name: &str) -> Result<()> {
    match pods
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("releasing backend Pod {name}")),
    }
}

async fn delete_pod(pods: &Api<Pod>, name: &str) -> Result<()> {
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    match pods.delete(name, &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("deleting backend Pod {name}")),
    }
}

fn port_name(proto: &str, port: i32) -> String {
    format!("{}-{port}", proto.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(node: &str, ready: bool, terminating: bool) -> Backend {
        Backend {
            node: node.into(),
            ips: vec!["192.0.2.11".parse().unwrap()],
            ready,
            terminating,
        }
    }

    fn pod(name: &str, backend: Backend, held: bool) -> ExistingPod {
        ExistingPod {
            name: name.into(),
            backend,
            held,
        }
    }

    #[test]
    fn nothing_changes_when_the_pods_are_as_wanted() {
        let existing = [pod("a", b("node-1", true, false), false)];
        assert_eq!(
            plan_backends(&existing, &[b("node-1", true, false)]),
            [PodAction::Keep {
                name: "a".into(),
                want: 0
            }]
        );
    }

    #[test]
    fn a_ready_change_patches_and_a_terminating_one_reuses_the_running_pod() {
        let existing = [
            pod("a", b("node-1", true, false), false),
            pod("c", b("node-3", true, false), false),
        ];
        let wanted = [b("node-1", false, false), b("node-3", true, true)];
        assert_eq!(
            plan_backends(&existing, &wanted),
            [
                PodAction::SetReady {
                    name: "a".into(),
                    want: 0,
                    ready: false
                },
                PodAction::Terminate {
                    name: "c".into(),
                    want: 1,
                    ready: true
                },
            ]
        );
    }

    #[test]
    fn a_terminating_pod_never_comes_back_and_what_is_not_wanted_goes() {
        let existing = [
            pod("t", b("node-1", false, true), true),
            pod("x", b("node-2", true, false), false),
        ];
        // node-1 running again: a new Pod; the held one released; node-2's removed.
        assert_eq!(
            plan_backends(&existing, &[b("node-1", true, false)]),
            [
                PodAction::Create { want: 0 },
                PodAction::Remove {
                    name: "t".into(),
                    held: true
                },
                PodAction::Remove {
                    name: "x".into(),
                    held: false
                },
            ]
        );
    }

    #[test]
    fn an_exact_match_wins_over_one_needing_a_patch_and_ips_must_be_equal() {
        let other_ip = Backend {
            ips: vec!["192.0.2.99".parse().unwrap()],
            ..b("node-1", true, false)
        };
        let existing = [
            pod("not-ready", b("node-1", false, false), false),
            pod("ready", b("node-1", true, false), false),
            pod("other-ip", other_ip, false),
        ];
        let wanted = [b("node-1", true, false), b("node-1", true, false)];
        assert_eq!(
            plan_backends(&existing, &wanted),
            [
                PodAction::Keep {
                    name: "ready".into(),
                    want: 0
                },
                PodAction::SetReady {
                    name: "not-ready".into(),
                    want: 1,
                    ready: true
                },
                PodAction::Remove {
                    name: "other-ip".into(),
                    held: false
                },
            ]
        );
    }

    #[test]
    fn only_conditions_a_pod_can_have_are_accepted() {
        assert!(pod_ready(&EndpointSpec::ready("node-1")).unwrap());
        assert!(!pod_ready(&EndpointSpec::not_ready("node-1")).unwrap());
        assert!(pod_ready(&EndpointSpec::terminating("node-1", true)).unwrap());
        let bad = EndpointSpec {
            serving: false,
            ..EndpointSpec::ready("node-1")
        };
        assert!(pod_ready(&bad).is_err());
        let bad = EndpointSpec {
            ready: true,
            ..EndpointSpec::terminating("node-1", true)
        };
        assert!(pod_ready(&bad).is_err());
    }

    #[test]
    fn expected_endpoints_follow_the_families_and_the_conditions() {
        let dual = Backend {
            ips: vec![
                "192.0.2.12".parse().unwrap(),
                "2001:db8:0:1::12".parse().unwrap(),
            ],
            ..b("node-2", true, true)
        };
        let want = expected_endpoints(
            &["IPv6".into()],
            &[b("node-1", true, false), dual],
            &["a".into(), "t".into()],
        );
        assert_eq!(
            want["IPv6"],
            [(
                "t".to_string(),
                "2001:db8:0:1::12".to_string(),
                "node-2".to_string(),
                false,
                true,
                true
            )]
        );
    }
}
