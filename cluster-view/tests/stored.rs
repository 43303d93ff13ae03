//! What the caches keep of each kind (`cluster_view::lean`), through the
//! real view, reflectors and kube watcher, against a fake API server (kube's
//! `Client` over a `tower` service answering lists, and watches that never
//! send anything).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cluster_view::endpoints::{self, Addresses, LeanEndpoint, LeanSlice};
use cluster_view::lean::LAST_APPLIED;
use cluster_view::nodes::{excluded_from_lb, network_unavailable};
use cluster_view::{ClusterView, Kind, services};
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, Node, NodeCondition, NodeStatus, Secret, Service,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::ObjectMeta;
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};

const NS: &str = "metallb-system";

fn managed_fields() -> Value {
    json!([{
        "manager": "kubectl-client-side-apply",
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2026-11-29T08:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:zone": {}}}},
    }])
}

/// The Ready condition's status and transition time (what the controller's
/// sweep of NotReady nodes reads).
fn controller_not_ready_since(node: &Node) -> Option<(String, String)> {
    let c = node
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), format!("{:?}", c.last_transition_time)))
}

/// A Node as a kubelet reports it.
fn node() -> Value {
    json!({
        "metadata": {
            "name": "node-1",
            "uid": "0b4e5d1c-0000-4000-8000-000000000001",
            "resourceVersion": "42",
            "labels": {
                "kubernetes.io/hostname": "node-1",
                "zone": "a",
                "node.kubernetes.io/exclude-from-external-load-balancers": "",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                LAST_APPLIED: "{\"apiVersion\":\"v1\",\"kind\":\"Node\"}",
            },
            "managedFields": managed_fields(),
        },
        "spec": {
            "podCIDR": "10.244.1.0/24",
            "podCIDRs": ["10.244.1.0/24"],
            "providerID": "lab://node-1",
            "taints": [{"key": "example.com/maintenance", "effect": "NoSchedule"}],
        },
        "status": {
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                 "message": "lab", "lastHeartbeatTime": "2026-11-29T08:00:00Z",
                 "lastTransitionTime": "2026-11-29T07:00:00Z"},
                {"type": "NetworkUnavailable", "status": "True", "reason": "NoRoute",
                 "message": "lab", "lastTransitionTime": "2026-11-29T07:30:00Z"},
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                 "message": "lab", "lastTransitionTime": "2026-11-29T07:00:00Z"},
            ],
            "addresses": [{"type": "InternalIP", "address": "192.0.2.11"},
                          {"type": "Hostname", "address": "node-1"}],
            "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "3Gi", "pods": "110"},
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6.1.0",
                "osImage": "Debian", "containerRuntimeVersion": "containerd://2.0.0",
                "kubeletVersion": "v1.37.2", "kubeProxyVersion": "v1.37.2",
                "operatingSystem": "linux", "architecture": "amd64",
            },
            "images": [
                {"names": ["registry.example/app@sha256:0123", "registry.example/app:v1"], "sizeBytes": 123456},
                {"names": ["registry.example/db:v2"], "sizeBytes": 654321},
            ],
            "volumesInUse": ["kubernetes.io/csi/example^vol-1"],
        },
    })
}

/// A LoadBalancer Service as MetalLB's controller left it.
fn web() -> Value {
    json!({
        "metadata": {
            "name": "web", "namespace": "demo",
            "uid": "0b4e5d1c-0000-4000-8000-000000000002",
            "resourceVersion": "43",
            "labels": {"app": "web"},
            "annotations": {
                "metallb.io/allow-shared-ip": "k",
                "metallb.io/ip-allocated-from-pool": "pool",
                "metallb.io/loadBalancerIPs": "198.51.100.7",
                LAST_APPLIED: "{\"apiVersion\":\"v1\",\"kind\":\"Service\"}",
            },
            "managedFields": managed_fields(),
        },
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": "web"},
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080, "nodePort": 30080}],
            "clusterIP": "10.96.0.10",
            "clusterIPs": ["10.96.0.10"],
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "externalTrafficPolicy": "Local",
            "healthCheckNodePort": 31000,
            "loadBalancerClass": "metallb.io/lab",
            "sessionAffinity": "None",
            "internalTrafficPolicy": "Cluster",
        },
        "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.7", "ipMode": "VIP"}]}},
    })
}

/// A ClusterIP Service.
fn internal() -> Value {
    json!({
        "metadata": {"name": "internal", "namespace": "demo", "uid": "u3", "resourceVersion": "44",
                     "managedFields": managed_fields()},
        "spec": {"type": "ClusterIP", "ports": [{"port": 53, "protocol": "UDP"}],
                 "clusterIP": "10.96.0.53", "clusterIPs": ["10.96.0.53"]},
        "status": {"loadBalancer": {}},
    })
}

/// An EndpointSlice of `web` as the EndpointSlice controller writes it.
fn slice() -> Value {
    let endpoint = |ip: &str, node: &str, ready: bool| {
        json!({
            "addresses": [ip],
            "conditions": {"ready": ready, "serving": true, "terminating": !ready},
            "nodeName": node,
            "hostname": "web-0",
            "zone": "zone-a",
            "targetRef": {"kind": "Pod", "namespace": "demo", "name": format!("web-{node}"),
                          "uid": "0b4e5d1c-0000-4000-8000-000000000009"},
            "hints": {"forZones": [{"name": "zone-a"}]},
        })
    };
    json!({
        "metadata": {
            "name": "web-abcde", "namespace": "demo",
            "generateName": "web-",
            "resourceVersion": "45",
            "labels": {"kubernetes.io/service-name": "web",
                       "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"},
            "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-29T08:00:00Z"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "web",
                                 "uid": "0b4e5d1c-0000-4000-8000-000000000002",
                                 "controller": true, "blockOwnerDeletion": true}],
            "managedFields": managed_fields(),
        },
        "addressType": "IPv4",
        "endpoints": [endpoint("192.0.2.101", "node-1", true), endpoint("192.0.2.102", "node-2", false)],
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
    })
}

fn config_map(name: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": NS, "managedFields": managed_fields()},
        "data": {"key": "value"},
    })
}

fn secret() -> Value {
    json!({
        "metadata": {"name": "bgp-password", "namespace": NS, "managedFields": managed_fields(),
                     "annotations": {LAST_APPLIED: "{\"data\":{\"password\":\"c2VjcmV0\"}}"}},
        "type": "kubernetes.io/basic-auth",
        "data": {"password": "c2VjcmV0"},
    })
}

fn namespace() -> Value {
    json!({
        "metadata": {"name": "demo", "labels": {"team": "a"}, "managedFields": managed_fields()},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    })
}

/// The fake API server: lists from the fixtures, watches that stay silent.
#[derive(Default)]
struct Fake {
    /// Answer a Service list filtered by `spec.type` with 400, as API
    /// servers without that field selector do.
    rejects_type_selector: bool,
    /// Every request, `path?query`.
    requests: Mutex<Vec<String>>,
}

const TYPE_SELECTOR: &str = "fieldSelector=spec.type%3DLoadBalancer";

impl Fake {
    fn items(&self, path: &str, query: &str) -> Result<Vec<Value>, Value> {
        Ok(match path {
            "/api/v1/nodes" => vec![node()],
            "/api/v1/services" => {
                if query.contains(TYPE_SELECTOR) {
                    if self.rejects_type_selector {
                        return Err(json!({
                            "kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure", "message": "field label not supported: spec.type",
                            "reason": "BadRequest", "code": 400,
                        }));
                    }
                    vec![web()]
                } else {
                    vec![web(), internal()]
                }
            }
            "/apis/discovery.k8s.io/v1/endpointslices" => vec![slice()],
            "/api/v1/namespaces" => vec![namespace()],
            "/api/v1/namespaces/metallb-system/configmaps" => {
                vec![config_map("bgpextras"), config_map("kube-root-ca.crt")]
            }
            "/api/v1/namespaces/metallb-system/secrets" => vec![secret()],
            _ => vec![],
        })
    }

    async fn answer(
        self: Arc<Self>,
        req: http::Request<kube::client::Body>,
    ) -> Result<http::Response<kube::client::Body>, std::convert::Infallible> {
        let path = req.uri().path().to_owned();
        let query = req.uri().query().unwrap_or_default().to_owned();
        self.requests
            .lock()
            .unwrap()
            .push(format!("{path}?{query}"));
        if query.split('&').any(|p| p == "watch=true") {
            // A watch that never says anything (the lists are what is tested).
            return std::future::pending().await;
        }
        let (status, body) = match self.items(&path, &query) {
            Ok(items) => (
                200,
                json!({"kind": "List", "apiVersion": "v1",
                       "metadata": {"resourceVersion": "100"}, "items": items}),
            ),
            Err(status) => (400, status),
        };
        let mut resp = http::Response::new(kube::client::Body::from(
            serde_json::to_vec(&body).expect("JSON"),
        ));
        *resp.status_mut() = http::StatusCode::from_u16(status).expect("status");
        Ok(resp)
    }

    fn requests_to(&self, path: &str) -> Vec<String> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.starts_with(&format!("{path}?")))
            .cloned()
            .collect()
    }
}

fn client(fake: &Arc<Fake>) -> Client {
    let fake = fake.clone();
    let service = tower::service_fn(move |req| fake.clone().answer(req));
    Client::new(service, "default")
}

async fn ready(view: &ClusterView) {
    tokio::time::timeout(Duration::from_secs(10), view.ready())
        .await
        .expect("the view lists within 10 s")
        .expect("the view runs");
}

fn without_managed_fields_and_last_applied(meta: &mut kube::api::ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

#[tokio::test]
async fn the_caches_keep_every_field_the_daemons_read_and_drop_the_rest() {
    let fake = Arc::new(Fake::default());
    let view = ClusterView::builder(client(&fake), NS)
        .kinds(Kind::SPEAKER)
        .kinds(Kind::CONTROLLER)
        .start();
    ready(&view).await;
    assert!(!fake.requests_to("/api/v1/nodes").is_empty());

    // Node: metadata (labels, uid) and the conditions; nothing else.
    let full: Node = serde_json::from_value(node()).unwrap();
    let status = full.status.clone().unwrap();
    assert!(
        full.metadata.managed_fields.is_some()
            && full.spec.is_some()
            && status.images.is_some()
            && status.node_info.is_some()
            && status.addresses.is_some(),
        "the fixture has what is to be dropped"
    );
    let stored = view
        .nodes()
        .unwrap()
        .store()
        .get(&ObjectRef::new("node-1"))
        .expect("node-1 cached");
    assert_eq!(
        stored.metadata,
        ObjectMeta {
            name: full.metadata.name.clone(),
            uid: full.metadata.uid.clone(),
            resource_version: full.metadata.resource_version.clone(),
            labels: full.metadata.labels.clone(),
            ..ObjectMeta::default()
        },
        "name, uid, resourceVersion and labels kept; annotations dropped"
    );
    assert_eq!(stored.spec, None);
    // Ready and NetworkUnavailable, without reason, message or heartbeat.
    let kept: Vec<NodeCondition> = status
        .conditions
        .iter()
        .flatten()
        .filter(|c| c.type_ != "MemoryPressure")
        .map(|c| NodeCondition {
            type_: c.type_.clone(),
            status: c.status.clone(),
            last_transition_time: c.last_transition_time.clone(),
            ..NodeCondition::default()
        })
        .collect();
    assert_eq!(kept.len(), 2);
    assert_eq!(
        stored.status,
        Some(NodeStatus {
            conditions: Some(kept),
            ..NodeStatus::default()
        })
    );
    assert_eq!(
        controller_not_ready_since(&stored),
        controller_not_ready_since(&full)
    );
    // What the decisions read of it reads the same.
    assert!(network_unavailable(&stored) && network_unavailable(&full));
    assert!(excluded_from_lb(&stored) && excluded_from_lb(&full));

    // Service: everything but the managed fields and the last-applied annotation.
    let full: Service = serde_json::from_value(web()).unwrap();
    let stored = view
        .services()
        .unwrap()
        .store()
        .get(&ObjectRef::new("web").within("demo"))
        .expect("demo/web cached");
    let mut expected = full.clone();
    without_managed_fields_and_last_applied(&mut expected.metadata);
    assert_eq!(*stored, expected);
    assert!(
        full.metadata
            .annotations
            .as_ref()
            .unwrap()
            .contains_key(LAST_APPLIED)
    );
    assert_eq!(stored.metadata.annotations.as_ref().unwrap().len(), 3);
    assert_eq!(services::ingress_ips(&stored), services::ingress_ips(&full));
    assert!(services::is_load_balancer(&stored));
    assert!(services::traffic_policy_local(&stored));
    assert!(services::handles_class(&stored, "metallb.io/lab"));

    // EndpointSlice: metadata, address type, per endpoint addresses, conditions, node.
    let full: EndpointSlice = serde_json::from_value(slice()).unwrap();
    let stored = view
        .endpoint_slices()
        .unwrap()
        .store()
        .get(&ObjectRef::new("web-abcde").within("demo"))
        .expect("the slice cached");
    // Name, namespace and resourceVersion of the metadata; the Service's name; per
    // endpoint whether it has an address, ready, serving and the node.
    assert_eq!(
        stored.metadata,
        ObjectMeta {
            name: Some("web-abcde".into()),
            namespace: Some("demo".into()),
            resource_version: Some("45".into()),
            ..ObjectMeta::default()
        }
    );
    assert_eq!(stored.service.as_deref(), Some("web"));
    let kept: Vec<LeanEndpoint> = full
        .endpoints
        .iter()
        .flatten()
        .map(|e| LeanEndpoint {
            node_name: e.node_name.as_deref().map(Into::into),
            has_address: !e.addresses.is_empty(),
            ready: e.conditions.as_ref().and_then(|c| c.ready),
            serving: e.conditions.as_ref().and_then(|c| c.serving),
        })
        .collect();
    assert_eq!(*stored.endpoints, *kept);
    assert_eq!(*stored, LeanSlice::from(&full));
    assert!(
        full.endpoints
            .iter()
            .flatten()
            .all(|e| e.target_ref.is_some()
                && e.hints.is_some()
                && e.zone.is_some()
                && e.hostname.is_some())
    );
    let full = [Arc::new(LeanSlice::from(&full))];
    let indexed = view.endpoint_slices_of("demo/web");
    assert_eq!(indexed.len(), 1);
    assert_eq!(*indexed[0], *stored);
    for addresses in [Addresses::Required, Addresses::NotRequired] {
        assert_eq!(
            endpoints::nodes_with_serving_endpoints(&indexed, addresses),
            endpoints::nodes_with_serving_endpoints(&full, addresses),
        );
        assert_eq!(
            endpoints::has_serving_endpoint(&indexed, addresses),
            endpoints::has_serving_endpoint(&full, addresses),
        );
        for node in ["node-1", "node-2", "node-3"] {
            assert_eq!(
                endpoints::has_serving_endpoint_on(&indexed, node, addresses),
                endpoints::has_serving_endpoint_on(&full, node, addresses),
            );
        }
    }

    // ConfigMaps: the data of bgpextras only.
    let cms = view.config_maps().unwrap().store();
    let extras = cms.get(&ObjectRef::new("bgpextras").within(NS)).unwrap();
    assert!(extras.data.is_some() && extras.metadata.managed_fields.is_none());
    let other: Arc<ConfigMap> = cms
        .get(&ObjectRef::new("kube-root-ca.crt").within(NS))
        .unwrap();
    assert_eq!(other.data, None);
    assert!(view.resources().bgp_extras.is_some());

    // Secrets and Namespaces: all but the managed fields (and last-applied).
    let cached: Arc<Secret> = view
        .secrets()
        .unwrap()
        .store()
        .get(&ObjectRef::new("bgp-password").within(NS))
        .unwrap();
    let mut expected: Secret = serde_json::from_value(secret()).unwrap();
    without_managed_fields_and_last_applied(&mut expected.metadata);
    assert_eq!(*cached, expected);
    assert!(
        cached.metadata.annotations.as_ref().unwrap().is_empty(),
        "the Secret's data in clear in last-applied is gone"
    );
    let ns: Arc<Namespace> = view
        .namespaces()
        .unwrap()
        .store()
        .get(&ObjectRef::new("demo"))
        .unwrap();
    let mut expected: Namespace = serde_json::from_value(namespace()).unwrap();
    expected.metadata.managed_fields = None;
    assert_eq!(*ns, expected);
}

fn service_names(view: &ClusterView) -> Vec<String> {
    let mut names: Vec<String> = view
        .services()
        .unwrap()
        .store()
        .state()
        .iter()
        .map(|s| cluster_view::service_key(s))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_speaker_view_asks_for_load_balancer_services_only() {
    let fake = Arc::new(Fake::default());
    let view = ClusterView::builder(client(&fake), NS)
        .kinds(Kind::SPEAKER)
        .load_balancer_services_only()
        .start();
    ready(&view).await;
    assert_eq!(service_names(&view), ["demo/web"]);
    let asked = fake.requests_to("/api/v1/services");
    assert!(!asked.is_empty());
    assert!(asked.iter().all(|r| r.contains(TYPE_SELECTOR)), "{asked:?}");
    assert!(!view.failing());
}

#[tokio::test]
async fn an_api_server_without_the_selector_gets_every_service_watched() {
    let fake = Arc::new(Fake {
        rejects_type_selector: true,
        ..Fake::default()
    });
    let view = ClusterView::builder(client(&fake), NS)
        .kinds(Kind::SPEAKER)
        .load_balancer_services_only()
        .start();
    ready(&view).await;
    assert_eq!(service_names(&view), ["demo/internal", "demo/web"]);
    let asked = fake.requests_to("/api/v1/services");
    // One refused list, then lists and watches without the selector.
    assert!(asked[0].contains(TYPE_SELECTOR), "{asked:?}");
    assert!(
        asked[1..].iter().all(|r| !r.contains("fieldSelector")),
        "{asked:?}"
    );
    assert!(!view.failing());
    // A re-list stays unfiltered.
    tokio::time::timeout(Duration::from_secs(10), view.relist())
        .await
        .unwrap()
        .unwrap();
    let asked = fake.requests_to("/api/v1/services");
    assert!(asked[1..].iter().all(|r| !r.contains("fieldSelector")));
    assert_eq!(service_names(&view), ["demo/internal", "demo/web"]);
}

#[tokio::test]
async fn the_controller_view_watches_every_service() {
    let fake = Arc::new(Fake::default());
    let view = ClusterView::builder(client(&fake), NS)
        .kinds(Kind::CONTROLLER)
        .start();
    ready(&view).await;
    assert_eq!(service_names(&view), ["demo/internal", "demo/web"]);
    assert!(
        fake.requests_to("/api/v1/services")
            .iter()
            .all(|r| !r.contains("fieldSelector"))
    );
}
