use std::collections::BTreeMap;
use std::net::IpAddr;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};

use crate::lab::Lab;

/// The label linking an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// What the kube-controller-manager's EndpointSlice controller puts in `managed-by`.
const MANAGED_BY: &str = "endpointslice-controller.k8s.io";

/// One backend Pod of a Service, as its EndpointSlice entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointSpec {
    /// `nodeName` (must be a lab Node).
    pub node: String,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// The Pod's address; default: the node's InternalIP of the slice's family (a
    /// hostNetwork Pod), so that only addresses of the plan appear.
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
    /// Default: `app: <name>`.
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
    /// Creates a LoadBalancer Service and the EndpointSlices the kube-controller-manager
    /// would make for it (the lab runs no EndpointSlice controller): one slice per IP
    /// family of the Service, owned by it (so the garbage collector deletes them with it).
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

    /// Makes the Service's EndpointSlices hold exactly `endpoints`, as the
    /// kube-controller-manager would after Pods changed: one slice per IP family,
    /// updated in place when it exists.
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
        let uid = svc.metadata.uid.clone().context("Service without a uid")?;
        let spec = svc.spec.clone().unwrap_or_default();
        let families = spec
            .ip_families
            .clone()
            .unwrap_or_else(|| vec!["IPv4".into()]);

        // The nodes' InternalIPs, per family.
        let nodes = Api::<Node>::all(self.client.clone());
        let mut node_ips: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
        for ep in endpoints {
            if node_ips.contains_key(&ep.node) {
                continue;
            }
            let node = nodes.get_opt(&ep.node).await?.with_context(|| {
                format!("endpoint on node {:?}: there is no such Node", ep.node)
            })?;
            let ips = node
                .status
                .and_then(|s| s.addresses)
                .unwrap_or_default()
                .into_iter()
                .filter(|a| a.type_ == "InternalIP")
                .filter_map(|a| a.address.parse().ok())
                .collect();
            node_ips.insert(ep.node.clone(), ips);
        }

        let ports: Vec<EndpointPort> = spec
            .ports
            .unwrap_or_default()
            .into_iter()
            .map(|p| EndpointPort {
                name: p.name,
                protocol: p.protocol,
                port: match p.target_port {
                    Some(IntOrString::Int(t)) => Some(t),
                    _ => Some(p.port),
                },
                app_protocol: p.app_protocol,
            })
            .collect();

        let api = Api::<EndpointSlice>::namespaced(self.client.clone(), &ns);
        let existing = api
            .list(&ListParams::default().labels(&format!(
                "{SERVICE_NAME_LABEL}={name},{MANAGED_BY_LABEL}={MANAGED_BY}"
            )))
            .await?
            .items;
        let mut labels = svc.metadata.labels.clone().unwrap_or_default();
        labels.insert(SERVICE_NAME_LABEL.into(), name.clone());
        labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());

        let mut result = Vec::new();
        for family in &families {
            let v6 = family == "IPv6";
            let mut eps = Vec::new();
            for (i, ep) in endpoints.iter().enumerate() {
                let addr = match ep.address {
                    Some(a) if a.is_ipv6() == v6 => a,
                    Some(_) => continue,
                    None => match node_ips[&ep.node].iter().find(|a| a.is_ipv6() == v6) {
                        Some(a) => *a,
                        None => bail!("node {} has no {family} InternalIP", ep.node),
                    },
                };
                eps.push(Endpoint {
                    addresses: vec![addr.to_string()],
                    conditions: Some(EndpointConditions {
                        ready: Some(ep.ready),
                        serving: Some(ep.serving),
                        terminating: Some(ep.terminating),
                    }),
                    node_name: Some(ep.node.clone()),
                    target_ref: Some(ObjectReference {
                        kind: Some("Pod".into()),
                        namespace: Some(ns.clone()),
                        name: Some(format!("{name}-{}-{i}", ep.node)),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
            }
            let current = existing.iter().find(|s| &s.address_type == family);
            let slice = EndpointSlice {
                metadata: ObjectMeta {
                    name: current.and_then(|s| s.metadata.name.clone()),
                    generate_name: Some(format!("{name}-")),
                    namespace: Some(ns.clone()),
                    resource_version: current.and_then(|s| s.metadata.resource_version.clone()),
                    labels: Some(labels.clone()),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Service".into(),
                        name: name.clone(),
                        uid: uid.clone(),
                        controller: Some(true),
                        block_owner_deletion: Some(true),
                    }]),
                    ..Default::default()
                },
                address_type: family.clone(),
                endpoints: Some(eps),
                ports: Some(ports.clone()),
            };
            let written = match current.and_then(|s| s.metadata.name.clone()) {
                Some(slice_name) => api
                    .replace(&slice_name, &PostParams::default(), &slice)
                    .await
                    .with_context(|| format!("updating EndpointSlice {ns}/{slice_name}"))?,
                None => api
                    .create(&PostParams::default(), &slice)
                    .await
                    .with_context(|| format!("creating an EndpointSlice for {ns}/{name}"))?,
            };
            result.push(written);
        }
        // Slices of a family the Service no longer has, or duplicates.
        for s in &existing {
            let keep = result.iter().any(|r| r.metadata.name == s.metadata.name);
            if !keep && let Some(n) = &s.metadata.name {
                api.delete(n, &DeleteParams::default()).await?;
            }
        }
        Ok(result)
    }
}

fn port_name(proto: &str, port: i32) -> String {
    format!("{}-{port}", proto.to_lowercase())
}
