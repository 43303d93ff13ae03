//! Against the lab's API server (built only with `--features lab-tests`):
//!
//! ```text
//! lab/cluster up
//! cargo test -p cluster-view --features lab-tests --test lab
//! ```
//!
//! Finds the lab as `lab/cluster` does: `KUBECONFIG`, else
//! `$LAB_STATE_DIR/kubeconfig`, else `lab/.state/kubeconfig`. Fails when the
//! lab is not up. Creates its own Namespace, Node and pool (names with the
//! process id) and deletes them at the end.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cluster_view::{Batch, Change, ClusterView, Kind, Reflector};
use config::api::v1beta1::{IPAddressPool, IPAddressPoolSpec};
use k8s_openapi::api::core::v1::{Namespace, Node, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointSlice};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

const NS: &str = "metallb-system";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

async fn lab_client() -> Result<Client> {
    let path = match std::env::var_os("KUBECONFIG") {
        Some(p) => PathBuf::from(p),
        None => match std::env::var_os("LAB_STATE_DIR") {
            Some(d) => PathBuf::from(d).join("kubeconfig"),
            None => repo().join("lab/.state/kubeconfig"),
        },
    };
    let up = "THE LAB IS NOT UP: run `lab/cluster up` (with the same LAB_* variables)";
    let kubeconfig = Kubeconfig::read_from(&path)
        .with_context(|| format!("{up}: reading {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .context(up)?;
    let client = Client::try_from(config)?;
    client.apiserver_version().await.context(up)?;
    Ok(client)
}

async fn wait_for<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> Result<T> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = probe() {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Collects the Service keys signalled until `key` shows up (a full pass
/// counts as every key).
async fn wait_for_key(view: &ClusterView, key: &str) -> Result<()> {
    let got = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match view.service_changes().next().await {
                Batch::All => return,
                Batch::Keys(keys) if keys.iter().any(|k| k == key) => return,
                Batch::Keys(_) => {}
            }
        }
    })
    .await;
    got.with_context(|| format!("no signal for {key}"))
}

fn meta(name: &str, ns: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: ns.map(Into::into),
        ..Default::default()
    }
}

#[derive(Clone)]
struct Cleanup {
    client: Client,
    ns: String,
    node: String,
    pool: String,
}

impl Cleanup {
    async fn run(&self) {
        let dp = DeleteParams::default();
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(&self.ns, &dp)
            .await;
        let nodes = Api::<Node>::all(self.client.clone());
        let _ = nodes.delete(&self.node, &dp).await;
        let _ = nodes
            .delete_collection(
                &dp,
                &kube::api::ListParams::default().labels(&format!("cv-lab={}", self.node)),
            )
            .await;
        let _ = Api::<IPAddressPool>::namespaced(self.client.clone(), NS)
            .delete(&self.pool, &dp)
            .await;
    }
}

#[tokio::test]
async fn view_ready_signals_filters_resources_and_relist() -> Result<()> {
    let client = lab_client().await?;
    let id = std::process::id();
    let cleanup = Cleanup {
        client: client.clone(),
        ns: format!("cv-lab-{id}"),
        node: format!("cv-lab-node-{id}"),
        pool: format!("cv-lab-pool-{id}"),
    };
    cleanup.run().await;
    // In a task of its own, so a failed assertion still cleans up.
    let r = tokio::spawn({
        let (client, names) = (client.clone(), cleanup.clone());
        async move { run(&client, &names).await }
    })
    .await;
    cleanup.run().await;
    match r {
        Ok(r) => r,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

async fn run(client: &Client, names: &Cleanup) -> Result<()> {
    let view = ClusterView::builder(client.clone(), NS)
        .kinds(Kind::SPEAKER)
        .start();

    // Readiness: every store's first list.
    tokio::time::timeout(Duration::from_secs(20), view.ready())
        .await
        .context("view not ready")??;
    assert!(view.is_ready());
    let health = view.health();
    assert_eq!(health.len(), Kind::SPEAKER.len());
    for h in &health {
        assert!(h.ready && h.lists_completed >= 1 && !h.failing, "{h:?}");
    }
    // The first lists signal a full pass of both queues.
    assert_eq!(view.config_changes().take(), Some(Batch::All));
    assert_eq!(view.service_changes().take(), Some(Batch::All));
    let lab_nodes = view.nodes().unwrap().store().len();
    assert!(
        lab_nodes >= 3,
        "the lab has node-1..node-3, saw {lab_nodes}"
    );

    // A Service: its key.
    let ns = names.ns.as_str();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: meta(ns, None),
                ..Default::default()
            },
        )
        .await?;
    let services = Api::<Service>::namespaced(client.clone(), ns);
    services
        .create(
            &PostParams::default(),
            &Service {
                metadata: meta("web", Some(ns)),
                spec: Some(ServiceSpec {
                    ports: Some(vec![ServicePort {
                        port: 80,
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await?;
    let key = format!("{ns}/web");
    wait_for_key(&view, &key).await?;

    // An EndpointSlice of that Service: the Service's key, and the index.
    let mut slice_meta = meta("web-1", Some(ns));
    slice_meta.labels = Some([("kubernetes.io/service-name".into(), "web".into())].into());
    Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &EndpointSlice {
                metadata: slice_meta,
                address_type: "IPv4".into(),
                endpoints: Some(vec![Endpoint {
                    addresses: vec!["192.0.2.11".into()],
                    node_name: Some("node-1".into()),
                    conditions: Some(EndpointConditions {
                        ready: Some(false),
                        serving: Some(true),
                        terminating: Some(true),
                    }),
                    ..Default::default()
                }]),
                ports: None,
            },
        )
        .await?;
    wait_for_key(&view, &key).await?;
    let slices = view.endpoint_slices_of(&key);
    assert_eq!(slices.len(), 1);
    assert_eq!(
        cluster_view::endpoints::nodes_with_serving_endpoints(
            &slices,
            cluster_view::Addresses::Required
        ),
        ["node-1".to_string()].into()
    );

    // A Node: created -> config signal. An update that changes no label and
    // no NetworkUnavailable: cached, not signalled.
    let nodes = Api::<Node>::all(client.clone());
    let node = names.node.as_str();
    let mut node_meta = meta(node, None);
    node_meta.labels = Some([("zone".into(), "a".into())].into());
    nodes
        .create(
            &PostParams::default(),
            &Node {
                metadata: node_meta,
                ..Default::default()
            },
        )
        .await?;
    let node_ref = ObjectRef::<Node>::new(node);
    let node_store = view.nodes().unwrap().store();
    wait_for("the new node in the cache", || node_store.get(&node_ref)).await?;
    assert_eq!(view.config_changes().take(), Some(Batch::All));
    let _ = view.service_changes().take();

    let pp = PatchParams::apply("cluster-view-lab");
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"touched": "1"}}})),
        )
        .await?;
    let patched = nodes
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "Lab", "message": "lab"}
            ]}})),
        )
        .await?;
    // The annotation is not cached (lean::node): wait for the status patch's version.
    wait_for("the annotated node with its condition in the cache", || {
        node_store.get(&node_ref).filter(|n| {
            n.resource_version() == patched.resource_version()
                && n.annotations().is_empty()
                && n.status.as_ref().is_some_and(|s| s.conditions.is_some())
        })
    })
    .await?;
    // The cache holds the update; the signal would have been sent before the
    // cache was visible to us (same callback), so none is pending.
    assert_eq!(
        view.config_changes().take(),
        None,
        "annotation/Ready update"
    );
    assert_eq!(
        view.service_changes().take(),
        None,
        "annotation/Ready update"
    );

    // A label change: signalled (config only).
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"zone": "b"}}})),
        )
        .await?;
    wait_for("a config signal for the label change", || {
        view.config_changes().take()
    })
    .await?;
    assert_eq!(view.service_changes().take(), None, "a label change");
    // NetworkUnavailable: config and a full Service pass.
    nodes
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "Lab", "message": "lab"},
                {"type": "NetworkUnavailable", "status": "True", "reason": "Lab", "message": "lab"}
            ]}})),
        )
        .await?;
    wait_for("a full Service pass for NetworkUnavailable", || {
        view.service_changes().take().filter(|b| *b == Batch::All)
    })
    .await?;
    assert_eq!(view.config_changes().take(), Some(Batch::All));

    // A pool: config signal, and resources() shares the cached objects.
    Api::<IPAddressPool>::namespaced(client.clone(), NS)
        .patch(
            &names.pool,
            &pp,
            &Patch::Apply(IPAddressPool {
                metadata: meta(&names.pool, Some(NS)),
                spec: IPAddressPoolSpec {
                    addresses: vec!["198.51.100.0/28".into()],
                    ..Default::default()
                },
                status: None,
            }),
        )
        .await?;
    let pool_store = view.pools().unwrap().store();
    let pool_ref = ObjectRef::<IPAddressPool>::new(&names.pool).within(NS);
    wait_for("the pool in the cache", || pool_store.get(&pool_ref)).await?;
    let res = view.resources();
    assert_eq!(res.nodes.len(), view.nodes().unwrap().store().len());
    assert_eq!(
        res.namespaces.len(),
        view.namespaces().unwrap().store().len()
    );
    let shared = |objs: Vec<Arc<Node>>| {
        objs.iter()
            .all(|n| Arc::ptr_eq(n, &node_store.get(&ObjectRef::from_obj(&**n)).unwrap()))
    };
    assert!(shared(res.nodes.clone()), "nodes are the cache's objects");
    let pool = res
        .pools
        .iter()
        .find(|p| p.name_any() == names.pool)
        .expect("the pool");
    assert!(Arc::ptr_eq(pool, &pool_store.get(&pool_ref).unwrap()));
    // Held by the cache and by `res` (the lookup's Arc above is dropped).
    assert_eq!(Arc::strong_count(pool), 2);
    let parsed = config::parse(&res).map_err(|e| anyhow::anyhow!("{e}"))?;
    assert!(parsed.pools.contains_key(&names.pool));
    drop(res);

    // relist(): completes after a list started after the call; every kind
    // lists again, and the Service queue gets a full pass.
    let before = view.health();
    let _ = view.service_changes().take();
    tokio::time::timeout(Duration::from_secs(20), view.relist())
        .await
        .context("relist did not complete")??;
    for (b, a) in before.iter().zip(view.health()) {
        assert!(a.lists_completed > b.lists_completed, "{b:?} -> {a:?}");
    }
    assert_eq!(view.service_changes().take(), Some(Batch::All));
    // The caches are still whole after the re-list.
    assert!(pool_store.get(&pool_ref).is_some());
    assert_eq!(view.endpoint_slices_of(&key).len(), 1);

    // Deletion of the Service: its key.
    services.delete("web", &DeleteParams::default()).await?;
    wait_for_key(&view, &key).await?;

    measure_resources(client, &view, names).await
}

/// resources() with a few hundred Nodes: every object is the cache's (two
/// holders: the cache and the Resources), and the time it takes against a
/// deep copy of the same objects (printed for the record).
async fn measure_resources(client: &Client, view: &ClusterView, names: &Cleanup) -> Result<()> {
    const EXTRA: usize = 300;
    let nodes = Api::<Node>::all(client.clone());
    let name = |i: usize| format!("{}-{i}", names.node);
    let before = view.nodes().unwrap().store().len();
    for i in 0..EXTRA {
        let mut m = meta(&name(i), None);
        let mut labels: std::collections::BTreeMap<String, String> = (0..10)
            .map(|l| (format!("lab.example/label-{l}"), format!("value-{i}")))
            .collect();
        labels.insert("cv-lab".into(), names.node.clone());
        m.labels = Some(labels);
        nodes
            .create(
                &PostParams::default(),
                &Node {
                    metadata: m,
                    ..Default::default()
                },
            )
            .await?;
    }
    let want = before + EXTRA;
    wait_for("the extra nodes in the cache", || {
        (view.resources().nodes.len() >= want).then_some(())
    })
    .await?;
    let res = view.resources();
    assert!(
        res.nodes.iter().all(|n| Arc::strong_count(n) == 2),
        "every Node held by the cache and the Resources only"
    );
    const RUNS: u32 = 200;
    let t = Instant::now();
    for _ in 0..RUNS {
        std::hint::black_box(view.resources());
    }
    let shared = t.elapsed() / RUNS;
    let t = Instant::now();
    for _ in 0..RUNS {
        let copies: Vec<Node> = res.nodes.iter().map(|n| (**n).clone()).collect();
        std::hint::black_box(copies);
    }
    let copied = t.elapsed() / RUNS;
    eprintln!(
        "resources() with {} Nodes and {} Namespaces: {shared:?} (sharing); deep copy of the Nodes alone: {copied:?}",
        res.nodes.len(),
        res.namespaces.len()
    );
    Ok(())
}

#[tokio::test]
async fn a_dropped_reflector_ends_its_task_and_fails_its_waiters() -> Result<()> {
    let client = lab_client().await?;
    let token = Arc::new(());
    let held = token.clone();
    let reflector = Reflector::new(
        Api::<Namespace>::all(client),
        watcher::Config::default(),
        move |change: Change<'_, Namespace>, _: &_| {
            let _ = (&held, change);
        },
    );
    tokio::time::timeout(Duration::from_secs(20), reflector.ready())
        .await
        .context("not ready")??;
    let first = reflector.lists_completed();
    tokio::time::timeout(Duration::from_secs(20), reflector.relist())
        .await
        .context("relist")??;
    assert_eq!(reflector.lists_completed(), first + 1);

    // A re-list asked for and the reflector dropped before it lists: the
    // waiter is told, and the task (holding the callback) is gone.
    let pending = reflector.relist();
    let store = reflector.store();
    drop(reflector);
    // (The test's runtime has one thread: the task cannot list between
    // the request and the drop.)
    let r = tokio::time::timeout(Duration::from_secs(5), pending).await?;
    assert_eq!(
        r.map_err(|e| e.to_string()),
        Err("the Namespace watch has stopped".to_string())
    );
    wait_for("the task to end", || {
        (Arc::strong_count(&token) == 1).then_some(())
    })
    .await?;
    // The cache stays readable after the task ended.
    assert!(!store.is_empty());
    Ok(())
}

/// The speaker's view (`load_balancer_services_only`) against the real API
/// server: it holds LoadBalancer Services only (the server filters by
/// `spec.type`), a LoadBalancer changed to ClusterIP leaves it as a deletion
/// with its key signalled, and a ClusterIP Service changed to LoadBalancer
/// enters it. The objects are stored without their managed fields.
#[tokio::test]
async fn a_speaker_view_holds_load_balancers_and_sees_a_type_change_as_a_deletion() -> Result<()> {
    let client = lab_client().await?;
    let ns = format!("cv-lab-lb-{}", std::process::id());
    let namespaces = Api::<Namespace>::all(client.clone());
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: meta(&ns, None),
                ..Default::default()
            },
        )
        .await?;
    let r = tokio::spawn({
        let (client, ns) = (client.clone(), ns.clone());
        async move { type_changes(&client, &ns).await }
    })
    .await;
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    match r {
        Ok(r) => r,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

async fn type_changes(client: &Client, ns: &str) -> Result<()> {
    let services = Api::<Service>::namespaced(client.clone(), ns);
    let service = |name: &str, type_: &str| Service {
        metadata: meta(name, Some(ns)),
        spec: Some(ServiceSpec {
            type_: Some(type_.into()),
            ports: Some(vec![ServicePort {
                port: 80,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    services
        .create(&PostParams::default(), &service("lb", "LoadBalancer"))
        .await?;
    services
        .create(&PostParams::default(), &service("cip", "ClusterIP"))
        .await?;

    let view = ClusterView::builder(client.clone(), NS)
        .kinds(Kind::SPEAKER)
        .load_balancer_services_only()
        .start();
    tokio::time::timeout(Duration::from_secs(20), view.ready())
        .await
        .context("view not ready")??;
    assert!(!view.failing(), "{:?}", view.health());
    let store = view.services().unwrap().store();
    let (lb, cip) = (
        ObjectRef::<Service>::new("lb").within(ns),
        ObjectRef::<Service>::new("cip").within(ns),
    );
    let cached = store.get(&lb).context("the LoadBalancer Service cached")?;
    assert_eq!(cached.metadata.managed_fields, None);
    assert!(store.get(&cip).is_none(), "a ClusterIP Service cached");
    assert!(
        store
            .state()
            .iter()
            .all(|s| cluster_view::services::is_load_balancer(s)),
        "only LoadBalancers are cached"
    );
    let _ = view.service_changes().take();

    // LoadBalancer -> ClusterIP: a deletion, its key signalled.
    let to = |type_: &str| Patch::Merge(json!({"spec": {"type": type_}}));
    services
        .patch("lb", &PatchParams::default(), &to("ClusterIP"))
        .await?;
    wait_for_key(&view, &format!("{ns}/lb")).await?;
    wait_for("lb gone from the cache", || {
        store.get(&lb).is_none().then_some(())
    })
    .await?;

    // ClusterIP -> LoadBalancer: it enters.
    services
        .patch("cip", &PatchParams::default(), &to("LoadBalancer"))
        .await?;
    wait_for_key(&view, &format!("{ns}/cip")).await?;
    wait_for("cip in the cache", || store.get(&cip)).await?;
    assert!(store.get(&lb).is_none());
    Ok(())
}
