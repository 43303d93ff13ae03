//! The harness itself: LoadBalancer Services whose backends are Pods and whose
//! EndpointSlices the lab's EndpointSlice controller makes, waits that report what they
//! saw, and a loud failure when the lab is not up (or a kubeconfig is not the lab's).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::{
    BACKEND_OF_LABEL, EndpointSpec, HOLD_FINALIZER, Lab, LabEnv, LbService, SERVICE_NAME_LABEL,
    unique_suffix, wait_until,
};
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams};

/// The cluster-wide objects the webhook tests change, which the tests run in parallel
/// share: the BGPPeer CRD's conversion (conversion.rs points it at its controller) and the
/// ValidatingWebhookConfiguration `metallb-webhook-configuration` (webhook.rs creates it).
///
/// - write: conversion.rs (the CRD, and its controller's rotator would patch the
///   configuration's `caBundle`); deploy.rs's dry runs of `deploy/` (against a live CRD or
///   configuration a test changed, the merge has both a URL and a Service: refused);
/// - read: webhook.rs (its rotator would patch the CRD's `caBundle`; its configuration
///   stays in its namespace), crds.rs (reads BGPPeers at v1beta1).
pub static WEBHOOK_OBJECTS: std::sync::LazyLock<tokio::sync::RwLock<()>> =
    std::sync::LazyLock::new(|| tokio::sync::RwLock::new(()));

fn slice_summary(slices: &[EndpointSlice]) -> Vec<(String, String, bool, bool, bool)> {
    let mut v: Vec<_> = slices
        .iter()
        .flat_map(|s| s.endpoints.clone().unwrap_or_default())
        .map(|e| {
            let c = e.conditions.unwrap_or_default();
            (
                e.node_name.unwrap_or_default(),
                e.addresses.join(","),
                c.ready.unwrap_or(false),
                c.serving.unwrap_or(false),
                c.terminating.unwrap_or(false),
            )
        })
        .collect();
    v.sort();
    v
}

/// The backend Pods of Service `svc`: (name, node, terminating, finalizers).
async fn backends(
    lab: &Lab,
    ns: &str,
    svc: &str,
) -> Result<Vec<(String, String, bool, Vec<String>)>> {
    let mut v: Vec<_> = Api::<Pod>::namespaced(lab.client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{BACKEND_OF_LABEL}={svc}")))
        .await?
        .items
        .into_iter()
        .map(|p| {
            (
                p.metadata.name.unwrap_or_default(),
                p.spec.and_then(|s| s.node_name).unwrap_or_default(),
                p.metadata.deletion_timestamp.is_some(),
                p.metadata.finalizers.unwrap_or_default(),
            )
        })
        .collect();
    v.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(v)
}

#[tokio::test]
async fn lb_service_backends_are_pods_and_the_endpointslice_controller_makes_the_slices()
-> Result<()> {
    let lab = Lab::connect().await?;
    let ns = lab.test_namespace("harness").await?;
    let spec = LbService::new("web")
        .port("UDP", 53, 5353)
        .local()
        .label("tier", "front")
        .endpoints(vec![
            EndpointSpec::ready("node-1"),
            EndpointSpec::not_ready("node-2"),
            EndpointSpec::terminating("node-3", true),
        ]);
    let (svc, slices) = lab.create_lb_service(&ns.name, &spec).await?;
    let s = svc.spec.clone().unwrap_or_default();
    ensure!(
        s.type_.as_deref() == Some("LoadBalancer"),
        "type {:?}",
        s.type_
    );
    ensure!(
        s.external_traffic_policy.as_deref() == Some("Local"),
        "ETP {:?}",
        s.external_traffic_policy
    );
    let cluster_ip: IpAddr = s.cluster_ip.clone().unwrap_or_default().parse()?;
    ensure!(
        matches!(cluster_ip, IpAddr::V4(v4) if v4.octets()[..3] == [203, 0, 113] && v4.octets()[3] >= 128),
        "cluster IP {cluster_ip} is not in 203.0.113.128/25 (lab/README.md)"
    );
    ensure!(
        s.ports
            .unwrap_or_default()
            .iter()
            .all(|p| p.node_port.is_some()),
        "a LoadBalancer Service gets node ports"
    );

    // The backends are Pods with the selector's labels, on their nodes; the terminating
    // one is deleted and held by the harness's finalizer.
    let pods = backends(&lab, &ns.name, "web").await?;
    let shape: Vec<(&str, bool, Vec<String>)> = pods
        .iter()
        .map(|(_, node, t, f)| (node.as_str(), *t, f.clone()))
        .collect();
    ensure!(
        shape
            == vec![
                ("node-1", false, vec![]),
                ("node-2", false, vec![]),
                ("node-3", true, vec![HOLD_FINALIZER.to_string()]),
            ],
        "backend Pods (node, terminating, finalizers) {shape:?}"
    );

    // The slices are the EndpointSlice controller's.
    ensure!(
        slices.len() == 1,
        "one slice (a single-stack IPv4 Service with 3 endpoints): {slices:?}"
    );
    let slice = &slices[0];
    let labels = slice.metadata.labels.clone().unwrap_or_default();
    ensure!(
        labels.get(SERVICE_NAME_LABEL).map(String::as_str) == Some("web"),
        "labels {labels:?}"
    );
    ensure!(
        labels
            .get("endpointslice.kubernetes.io/managed-by")
            .map(String::as_str)
            == Some("endpointslice-controller.k8s.io"),
        "labels {labels:?}"
    );
    ensure!(
        labels.get("tier").map(String::as_str) == Some("front"),
        "the Service's labels are copied: {labels:?}"
    );
    let owner = slice.metadata.owner_references.clone().unwrap_or_default();
    ensure!(
        owner.len() == 1
            && owner[0].uid == svc.metadata.uid.clone().unwrap_or_default()
            && owner[0].controller == Some(true),
        "owner {owner:?}"
    );
    ensure!(
        slice.address_type == "IPv4",
        "addressType {}",
        slice.address_type
    );
    let want = vec![
        (
            "node-1".to_string(),
            "192.0.2.11".to_string(),
            true,
            true,
            false,
        ),
        (
            "node-2".to_string(),
            "192.0.2.12".to_string(),
            false,
            false,
            false,
        ),
        (
            "node-3".to_string(),
            "192.0.2.13".to_string(),
            false,
            true,
            true,
        ),
    ];
    ensure!(
        slice_summary(&slices) == want,
        "endpoints {:?}, want {want:?}",
        slice_summary(&slices)
    );
    let targets: BTreeSet<String> = slice
        .endpoints
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| e.target_ref.and_then(|r| r.name))
        .collect();
    let pod_names: BTreeSet<String> = pods.iter().map(|p| p.0.clone()).collect();
    ensure!(
        targets == pod_names,
        "the endpoints' targetRefs {targets:?} are the backend Pods {pod_names:?}"
    );
    let mut ports: Vec<(Option<String>, Option<i32>, Option<String>)> = slice
        .ports
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|p| (p.name, p.port, p.protocol))
        .collect();
    ports.sort();
    ensure!(
        ports
            == vec![
                (Some("tcp-80".into()), Some(8080), Some("TCP".into())),
                (Some("udp-53".into()), Some(5353), Some("UDP".into()))
            ],
        "slice ports (the target ports) {ports:?}"
    );

    // Pods change: node-2's becomes ready (patched in place), node-1's starts
    // terminating (still serving), node-3's goes (released), one with another address
    // comes on node-2.
    let svc: Service = Api::namespaced(lab.client.clone(), &ns.name)
        .get("web")
        .await?;
    let updated = lab
        .set_endpoints(
            &svc,
            &[
                EndpointSpec::terminating("node-1", true),
                EndpointSpec::ready("node-2"),
                EndpointSpec::ready("node-2").with_address("192.0.2.99".parse()?),
            ],
        )
        .await?;
    ensure!(
        slice_summary(&updated)
            == vec![
                ("node-1".into(), "192.0.2.11".into(), false, true, true),
                ("node-2".into(), "192.0.2.12".into(), true, true, false),
                ("node-2".into(), "192.0.2.99".into(), true, true, false),
            ],
        "after the update: {:?}",
        slice_summary(&updated)
    );
    let after = backends(&lab, &ns.name, "web").await?;
    let kept: Vec<&String> = after
        .iter()
        .map(|p| &p.0)
        .filter(|n| pods.iter().any(|p| &p.0 == *n))
        .collect();
    ensure!(
        after.len() == 3 && kept.len() == 2 && !after.iter().any(|p| p.1 == "node-3"),
        "node-1's and node-2's Pods kept, node-3's gone, one new: before {pods:?}, after {after:?}"
    );
    ensure!(
        lab.set_endpoints(&svc, &[EndpointSpec::ready("node-9")])
            .await
            .is_err(),
        "an endpoint on a node that does not exist is refused"
    );
    let impossible = EndpointSpec {
        serving: false,
        ..EndpointSpec::ready("node-1")
    };
    ensure!(
        lab.set_endpoints(&svc, &[impossible]).await.is_err(),
        "conditions no Pod can have are refused"
    );

    // Deleting the Service: the garbage collector (kube-controller-manager in the lab)
    // deletes its slices, which shows the ownerReference is right.
    Api::<Service>::namespaced(lab.client.clone(), &ns.name)
        .delete("web", &DeleteParams::default())
        .await?;
    let slices_api = Api::<EndpointSlice>::namespaced(lab.client.clone(), &ns.name);
    wait_until(
        "the garbage collector to delete the slices of web",
        Duration::from_secs(60),
        || async {
            match slices_api
                .list(&ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}=web")))
                .await
            {
                Ok(l) if l.items.is_empty() => Ok(()),
                Ok(l) => Err(format!(
                    "{} slices left: {:?}",
                    l.items.len(),
                    l.items
                        .iter()
                        .map(|s| s.metadata.name.clone())
                        .collect::<Vec<_>>()
                )),
                Err(e) => Err(format!("list error: {e}")),
            }
        },
    )
    .await?;

    // The namespace goes entirely: the held Pod is released, the others have no
    // graceful deletion to wait for.
    let name = ns.name.clone();
    ns.delete().await?;
    let namespaces = Api::<Namespace>::all(lab.client.clone());
    wait_until(
        &format!("namespace {name} to be deleted"),
        Duration::from_secs(60),
        || async {
            match namespaces.get_opt(&name).await {
                Ok(None) => Ok(()),
                Ok(Some(n)) => Err(format!(
                    "still there: {:?}",
                    n.status.and_then(|s| s.conditions)
                )),
                Err(e) => Err(format!("get error: {e}")),
            }
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn wait_until_reports_what_it_saw() -> Result<()> {
    let mut n = 0;
    let err = wait_until("the answer", Duration::from_millis(600), || {
        n += 1;
        let seen = if n < 3 {
            "nothing yet".to_string()
        } else {
            "41".to_string()
        };
        async move { Err::<(), _>(seen) }
    })
    .await
    .expect_err("it cannot succeed");
    let msg = format!("{err:#}");
    ensure!(msg.contains("waiting for the answer"), "{msg}");
    ensure!(msg.contains("last observation: 41"), "{msg}");
    ensure!(
        msg.contains("nothing yet"),
        "the history of observations: {msg}"
    );

    let mut m = 0;
    let v = wait_until("the third try", Duration::from_secs(5), || {
        m += 1;
        let r = if m >= 3 {
            Ok(m)
        } else {
            Err(format!("try {m}"))
        };
        async move { r }
    })
    .await?;
    ensure!(v == 3, "returns the value: {v}");
    Ok(())
}

fn temp_dir(name: &str) -> Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("metallb-rs-e2e-{name}-{}", unique_suffix()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

fn env_for(kubeconfig: &Path) -> LabEnv {
    LabEnv {
        repo: Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("repo")
            .to_path_buf(),
        kubeconfig: kubeconfig.to_path_buf(),
        kubeconfig_from: "the test".into(),
        state_dir: kubeconfig.parent().expect("dir").to_path_buf(),
        apiserver_port: None,
        bin_dir: None,
    }
}

fn kubeconfig(cluster: &str, server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {cluster}\n  cluster:\n    server: {server}\n\
         users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context:\n    cluster: {cluster}\n    user: u\n\
         current-context: c\n"
    )
}

#[tokio::test]
async fn connect_fails_loudly_when_the_lab_is_not_up() -> Result<()> {
    // No kubeconfig at all.
    let dir = temp_dir("nolab")?;
    let err = Lab::connect_to(env_for(&dir.join("kubeconfig")))
        .await
        .expect_err("no lab there");
    let msg = format!("{err:#}");
    ensure!(
        msg.contains("THE LAB IS NOT UP") && msg.contains("lab/cluster up"),
        "{msg}"
    );

    // A lab kubeconfig whose API server is gone.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let kc = dir.join("kubeconfig");
    std::fs::write(
        &kc,
        kubeconfig("metallb-rs-lab", &format!("https://127.0.0.1:{port}")),
    )?;
    let err = Lab::connect_to(env_for(&kc))
        .await
        .expect_err("nothing listens there");
    let msg = format!("{err:#}");
    ensure!(
        msg.contains("THE LAB IS NOT UP") && msg.contains(&port.to_string()),
        "{msg}"
    );

    // Not a lab: refused before any request.
    std::fs::write(&kc, kubeconfig("production", "https://10.0.0.1:6443"))?;
    let err = Lab::connect_to(env_for(&kc)).await.expect_err("not a lab");
    let msg = format!("{err:#}");
    ensure!(
        msg.contains("refusing") && msg.contains("not a metallb-rs lab"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).context("removing the temp dir")?;
    Ok(())
}

/// kube and k8s-openapi are required as in the root workspace (this crate has a
/// workspace and lock file of its own).
#[test]
fn dependencies_match_the_main_workspace() -> Result<()> {
    let e2e = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read =
        |p: &Path| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()));
    let root_toml = read(&e2e.join("../Cargo.toml"))?;
    let own_toml = read(&e2e.join("Cargo.toml"))?;
    for dep in ["k8s-openapi = ", "kube = "] {
        let line = |t: &str| t.lines().find(|l| l.starts_with(dep)).map(str::to_string);
        ensure!(
            line(&root_toml).is_some() && line(&root_toml) == line(&own_toml),
            "e2e/Cargo.toml requires {:?}, the root workspace {:?}: keep them equal",
            line(&own_toml),
            line(&root_toml)
        );
    }
    // And the same locked versions.
    let locked = |lock: &str, name: &str| -> Option<String> {
        let mut it = lock.lines();
        while let Some(l) = it.next() {
            if l == format!("name = \"{name}\"") {
                return it.next().map(str::to_string);
            }
        }
        None
    };
    let root_lock = read(&e2e.join("../Cargo.lock"))?;
    let own_lock = read(&e2e.join("Cargo.lock"))?;
    for name in ["kube", "kube-client", "k8s-openapi"] {
        ensure!(
            locked(&root_lock, name) == locked(&own_lock, name),
            "{name}: {:?} in e2e/Cargo.lock, {:?} in Cargo.lock (cargo update -p {name} --manifest-path e2e/Cargo.toml --precise ...)",
            locked(&own_lock, name),
            locked(&root_lock, name)
        );
    }
    Ok(())
}
