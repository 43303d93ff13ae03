//! Against the lab's API server (built only with `--features lab-tests`):
//!
//! ```text
//! lab/cluster up
//! cargo test -p status --features lab-tests --test lab
//! ```
//!
//! Finds the lab as `lab/cluster` does: `KUBECONFIG`, else
//! `$LAB_STATE_DIR/kubeconfig`, else `lab/.state/kubeconfig`; the audit log
//! through `lab/audit-count` (which reads `LAB_STATE_DIR` too). Fails when
//! the lab is not up.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use config::api::v1beta1::{
    BGPSessionStatus, BGPSessionStatusStatus, ConfigurationResult, ConfigurationState,
    ConfigurationStateStatus, InterfaceInfo, MetalLBServiceL2Status, ServiceL2Status,
};
use config::api::{LABEL_NODE, LABEL_PEER, LABEL_SERVICE_NAME, LABEL_SERVICE_NAMESPACE};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use status::configuration_state::{self, Component};
use status::{
    Desired, FIELD_MANAGER_SPEAKER, KubeStatusApi, LabelScope, Labels, Metrics, StatusWriter,
    SystemClock, WriteBudget, WriterConfig, watch_into,
};

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

/// The lab's administrator, the user these tests write as. Counts of writes are filtered by
/// it: the garbage collector and the namespace controller delete other tests' objects of
/// the same kinds at any time.
const LAB_USER: &str = "admin";

/// The writes of [`LAB_USER`] to `resource` since `mark`: their total, or the
/// per-verb lines (for a failure message).
fn own_writes(mark: &str, resource: &str, total: bool) -> Result<String> {
    let mut args = vec!["--since", mark, "--user", LAB_USER, "--resource", resource];
    if total {
        args.push("--total");
    }
    audit(&args)
}

fn audit(args: &[&str]) -> Result<String> {
    let out = Command::new(repo().join("lab/audit-count"))
        .args(args)
        .output()
        .context("running lab/audit-count")?;
    if !out.status.success() {
        bail!(
            "lab/audit-count {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

async fn wait_for<T>(what: &str, mut probe: impl AsyncFnMut() -> Result<Option<T>>) -> Result<T> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = probe().await? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn configuration_state_valid_invalid_valid_and_no_write_when_unchanged() -> Result<()> {
    let client = lab_client().await?;
    let node = format!("status-lab-{}", std::process::id());
    let comp = Component::Speaker { node: node.clone() };
    let key = comp.key(NS);
    let name = comp.name();
    let api: Api<ConfigurationState> = Api::namespaced(client.clone(), NS);
    let _ = api.delete(&name, &DeleteParams::default()).await;

    let writer: StatusWriter<ConfigurationState> = StatusWriter::new(
        WriterConfig::default(),
        Arc::new(SystemClock),
        Metrics::unregistered(),
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let runner = tokio::spawn({
        let writer = writer.clone();
        let kapi = KubeStatusApi::<ConfigurationState>::new(client.clone(), FIELD_MANAGER_SPEAKER);
        async move {
            writer
                .run(kapi, async {
                    let _ = stop_rx.await;
                })
                .await
        }
    });
    let watch = tokio::spawn(watch_into(
        writer.clone(),
        api.clone(),
        watcher::Config::default().labels(&format!("metallb.io/node-name={node}")),
    ));

    let status_of =
        async |api: &Api<ConfigurationState>| -> Result<Option<ConfigurationStateStatus>> {
            Ok(api.get_opt(&name).await?.and_then(|o| o.status))
        };
    let report = |result: Result<(), &str>| {
        writer.set_desired(
            key.clone(),
            configuration_state::desired(&comp, &result, None, configuration_state::now()),
        );
    };

    // Valid -> Invalid -> Valid.
    let start = audit(&["--mark"])?;
    for (result, want) in [
        (Ok(()), ConfigurationResult::Valid),
        (Err("bad pool"), ConfigurationResult::Invalid),
        (Ok(()), ConfigurationResult::Valid),
    ] {
        report(result);
        let s = wait_for(&format!("{want:?}"), async || {
            Ok(status_of(&api).await?.filter(|s| s.result == Some(want)))
        })
        .await?;
        let c = &s.conditions[0];
        assert_eq!(c.type_, "configReconcilerValid");
        match want {
            ConfigurationResult::Invalid => {
                assert_eq!(s.last_error, "configuration error: bad pool");
                assert_eq!(s.error_summary, "configuration error: bad pool");
                assert_eq!(
                    (c.status.as_str(), c.reason.as_str()),
                    ("False", "ConfigurationError")
                );
            }
            _ => {
                assert_eq!((s.last_error.as_str(), s.error_summary.as_str()), ("", ""));
                assert_eq!(
                    (c.status.as_str(), c.reason.as_str()),
                    ("True", "Reconciled")
                );
            }
        }
    }
    // Exactly one write per change: the create (object, then status) and
    // two status patches. (The audit log is written when a request completes.)
    wait_for("4 audited writes", async || {
        let n = audit(&["--since", &start, "--name", &name, "--total"])?;
        Ok((n == "4").then_some(()))
    })
    .await?;
    let obj = api.get(&name).await?;
    assert_eq!(obj.labels()["metallb.io/component-type"], "speaker");
    assert_eq!(obj.labels()["metallb.io/node-name"], node);
    let managers: Vec<_> = obj
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers.iter().all(|m| m == FIELD_MANAGER_SPEAKER),
        "{managers:?}"
    );

    // Unchanged (Valid at later times): no write, by the audit log and the
    // resourceVersion.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    while writer.pending() > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rv = api.get(&name).await?.resource_version();
    let mark = audit(&["--mark"])?;
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        report(Ok(()));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(api.get(&name).await?.resource_version(), rv);
    let writes = audit(&["--since", &mark, "--name", &name, "--total"])?;
    assert_eq!(writes, "0", "writes of {name} while nothing changed");

    // Deleted by someone else: re-created by the writer, Valid.
    api.delete(&name, &DeleteParams::default()).await?;
    wait_for("re-creation", async || {
        Ok(status_of(&api)
            .await?
            .filter(|s| s.result == Some(ConfigurationResult::Valid)))
    })
    .await?;

    // No longer wanted: deleted.
    writer.remove(&key);
    wait_for("deletion", async || {
        Ok(api.get_opt(&name).await?.is_none().then_some(()))
    })
    .await?;

    let _ = stop_tx.send(());
    runner.await?;
    watch.abort();
    Ok(())
}

/// An owner standing in for a speaker Pod (the lab has no kubelet nor
/// service accounts to create Pods with; the garbage collector treats every
/// kind alike).
async fn stand_in_owner(client: &Client, name: &str) -> Result<OwnerReference> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let _ = api.delete(name, &DeleteParams::default()).await;
    wait_for("the old stand-in to go", async || {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await?;
    let cm = api
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            },
        )
        .await?;
    Ok(OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: name.into(),
        uid: cm.uid().context("a uid")?,
        ..OwnerReference::default()
    })
}

struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    runner: tokio::task::JoinHandle<()>,
    watch: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn stop(self) -> Result<()> {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(5), self.runner)
            .await
            .context("the writer stops")??;
        self.watch.abort();
        Ok(())
    }
}

fn start_l2_writer(client: &Client, node: &str) -> (StatusWriter<ServiceL2Status>, Running) {
    let writer: StatusWriter<ServiceL2Status> = StatusWriter::labeled(
        WriterConfig::default(),
        LabelScope::node(NS, node),
        Arc::new(SystemClock),
        Metrics::unregistered(),
        WriteBudget::default(),
    );
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let runner = tokio::spawn({
        let writer = writer.clone();
        let kapi = KubeStatusApi::<ServiceL2Status>::new(client.clone(), FIELD_MANAGER_SPEAKER);
        async move {
            writer
                .run(kapi, async {
                    let _ = stop_rx.await;
                })
                .await
        }
    });
    let watch = tokio::spawn(watch_into(
        writer.clone(),
        Api::namespaced(client.clone(), NS),
        watcher::Config::default().labels(&format!("{LABEL_NODE}={node}")),
    ));
    (
        writer,
        Running {
            stop,
            runner,
            watch,
        },
    )
}

fn l2_identity(svc: &str) -> Labels {
    Labels::from([
        (LABEL_SERVICE_NAME.to_owned(), svc.to_owned()),
        (LABEL_SERVICE_NAMESPACE.to_owned(), "demo".to_owned()),
    ])
}

fn l2_desired(node: &str, svc: &str, owner: &OwnerReference) -> Desired<MetalLBServiceL2Status> {
    Desired::new(MetalLBServiceL2Status {
        node: node.into(),
        service_name: svc.into(),
        service_namespace: "demo".into(),
        interfaces: vec![InterfaceInfo {
            name: "eth0".into(),
        }],
    })
    .owner(Some(owner.clone()))
}

#[tokio::test]
async fn service_l2_status_by_labels_adopted_after_a_restart_pruned_and_reowned_in_place()
-> Result<()> {
    let client = lab_client().await?;
    let node = format!("status-lab-l2-{}", std::process::id());
    let api: Api<ServiceL2Status> = Api::namespaced(client.clone(), NS);
    let mine = ListParams::default().labels(&format!("{LABEL_NODE}={node}"));
    api.delete_collection(&DeleteParams::default(), &mine)
        .await?;
    let old_pod = stand_in_owner(&client, &format!("{node}-old")).await?;
    let new_pod = stand_in_owner(&client, &format!("{node}-new")).await?;

    // First speaker: three services, created with generateName `l2-`, each
    // in two writes (a POST with labels and owner, the status).
    let mark = audit(&["--mark"])?;
    let (writer, running) = start_l2_writer(&client, &node);
    for svc in ["web", "api", "stray"] {
        writer.set_labeled(l2_identity(svc), l2_desired(&node, svc, &old_pod));
    }
    writer.initial_sync_done();
    let first = wait_for("3 ServiceL2Status with their status", async || {
        let list = api.list(&mine).await?.items;
        Ok((list.len() == 3
            && list
                .iter()
                .all(|o| o.status.as_ref().is_some_and(|s| s.node == node)))
        .then_some(list))
    })
    .await?;
    for o in &first {
        assert!(o.name_any().starts_with("l2-"), "{}", o.name_any());
        let svc = &o.labels()[LABEL_SERVICE_NAME];
        assert_eq!(o.status.as_ref().unwrap().service_name, *svc);
        assert_eq!(o.labels()[LABEL_SERVICE_NAMESPACE], "demo");
        assert_eq!(o.owner_references(), std::slice::from_ref(&old_pod));
    }
    while writer.pending() > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let writes = wait_for("six audited writes", async || {
        let n = own_writes(&mark, "servicel2statuses", true)?;
        Ok((n == "6").then_some(n))
    })
    .await;
    assert!(
        writes.is_ok(),
        "writes creating 3 objects: {}",
        own_writes(&mark, "servicel2statuses", false)?
    );
    let uid_of = |list: &[ServiceL2Status], svc: &str| {
        list.iter()
            .find(|o| o.labels()[LABEL_SERVICE_NAME] == svc)
            .and_then(|o| o.uid())
    };
    running.stop().await?;

    // The speaker restarts (a new Pod): web and api still wanted, stray not.
    let mark = audit(&["--mark"])?;
    let (writer, running) = start_l2_writer(&client, &node);
    for svc in ["web", "api"] {
        writer.set_labeled(l2_identity(svc), l2_desired(&node, svc, &new_pod));
    }
    writer.initial_sync_done();
    let second = wait_for(
        "stray pruned, the others owned by the new Pod",
        async || {
            let list = api.list(&mine).await?.items;
            let done = list.len() == 2
                && list
                    .iter()
                    .all(|o| o.owner_references().iter().any(|r| r.uid == new_pod.uid));
            Ok(done.then_some(list))
        },
    )
    .await?;
    for svc in ["web", "api"] {
        let uid = uid_of(&second, svc);
        assert!(uid.is_some());
        assert_eq!(
            uid,
            uid_of(&first, svc),
            "{svc} adopted in place, not re-created"
        );
        let key = writer.labeled_key(&l2_identity(svc)).expect("adopted");
        let obj = second.iter().find(|o| o.name_any() == key.name).unwrap();
        assert_eq!(
            obj.owner_references(),
            std::slice::from_ref(&new_pod),
            "{svc}: old owner gone"
        );
    }
    // No create and no delete of web or api: the ownerReference changed
    // by one metadata apply each.
    while writer.pending() > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for o in &second {
        let name = o.name_any();
        let writes = wait_for("one audited write", async || {
            let n = audit(&["--since", &mark, "--name", &name, "--total"])?;
            Ok((n == "1").then_some(n))
        })
        .await;
        assert!(
            writes.is_ok(),
            "writes of {name} after the restart: {writes:?}"
        );
    }

    // Withdrawn: deleted.
    for svc in ["web", "api"] {
        writer.remove_labeled(l2_identity(svc));
    }
    wait_for("deletion", async || {
        Ok(api.list(&mine).await?.items.is_empty().then_some(()))
    })
    .await?;
    running.stop().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    for pod in [old_pod, new_pod] {
        let _ = cms.delete(&pod.name, &DeleteParams::default()).await;
    }
    Ok(())
}

/// BGPSessionStatus objects are named `<node>-<peer>` (a pair whose name is
/// taken by another pair's object gets a generated one), keep their name
/// across a restart of the writer, and cost two writes each to create.
#[tokio::test]
async fn bgp_session_status_named_node_dash_peer_and_kept_across_a_restart() -> Result<()> {
    let client = lab_client().await?;
    let pid = std::process::id();
    // Node `<n>-x` with peer `y` and node `<n>` with peer `x-y` both read
    // `<n>-x-y`.
    let node_a = format!("status-lab-sess-{pid}-x");
    let node_b = format!("status-lab-sess-{pid}");
    let api: Api<BGPSessionStatus> = Api::namespaced(client.clone(), NS);
    for node in [&node_a, &node_b] {
        api.delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&format!("{LABEL_NODE}={node}")),
        )
        .await?;
    }
    let start = |node: &str| {
        let writer: StatusWriter<BGPSessionStatus> = StatusWriter::labeled(
            WriterConfig::default(),
            LabelScope::node(NS, node),
            Arc::new(SystemClock),
            Metrics::unregistered(),
            WriteBudget::default(),
        );
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let runner = tokio::spawn({
            let writer = writer.clone();
            let kapi =
                KubeStatusApi::<BGPSessionStatus>::new(client.clone(), FIELD_MANAGER_SPEAKER);
            async move {
                writer
                    .run(kapi, async {
                        let _ = stop_rx.await;
                    })
                    .await
            }
        });
        let watch = tokio::spawn(watch_into(
            writer.clone(),
            Api::namespaced(client.clone(), NS),
            watcher::Config::default().labels(&format!("{LABEL_NODE}={node}")),
        ));
        (
            writer,
            Running {
                stop,
                runner,
                watch,
            },
        )
    };
    let peer = |p: &str| Labels::from([(LABEL_PEER.to_owned(), p.to_owned())]);
    let desired = |node: &str, p: &str| {
        Desired::new(BGPSessionStatusStatus {
            node: node.into(),
            peer: p.into(),
            bgp_status: "Established".into(),
            bfd_status: "N/A".into(),
            ..BGPSessionStatusStatus::default()
        })
    };
    let settled = async |writer: &StatusWriter<BGPSessionStatus>| {
        while writer.pending() > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };

    let mark = audit(&["--mark"])?;
    let (a, running_a) = start(&node_a);
    a.set_labeled(peer("y"), desired(&node_a, "y"));
    a.initial_sync_done();
    wait_for("created", async || Ok(a.labeled_key(&peer("y")))).await?;
    settled(&a).await;
    let key_a = a.labeled_key(&peer("y")).context("created")?;
    assert_eq!(key_a.name, format!("{node_a}-y"));
    let (b, running_b) = start(&node_b);
    b.set_labeled(peer("x-y"), desired(&node_b, "x-y"));
    b.initial_sync_done();
    wait_for("created", async || Ok(b.labeled_key(&peer("x-y")))).await?;
    settled(&b).await;
    let key_b = b.labeled_key(&peer("x-y")).context("created")?;
    assert!(
        key_b.name.starts_with(&format!("{node_a}-y-")),
        "{key_b}: a generated name after the taken one"
    );
    let obj = api.get(&key_a.name).await?;
    assert_eq!(obj.labels()[LABEL_PEER], "y");
    assert_eq!(obj.status.context("status")?.bgp_status, "Established");
    // Writes: a's POST and status; b's refused POST, its POST and status.
    let writes = wait_for("five audited writes", async || {
        let n = own_writes(&mark, "bgpsessionstatuses", true)?;
        Ok((n == "5").then_some(n))
    })
    .await;
    assert!(
        writes.is_ok(),
        "{}",
        own_writes(&mark, "bgpsessionstatuses", false)?
    );
    running_a.stop().await?;

    // A restart keeps the object and its name, with no write.
    let mark = audit(&["--mark"])?;
    let (a, running) = start(&node_a);
    a.set_labeled(peer("y"), desired(&node_a, "y"));
    a.initial_sync_done();
    wait_for("adopted", async || Ok(a.labeled_key(&peer("y")))).await?;
    settled(&a).await;
    assert_eq!(a.labeled_key(&peer("y")), Some(key_a.clone()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(own_writes(&mark, "bgpsessionstatuses", true)?, "0");

    for (w, p) in [(&a, "y"), (&b, "x-y")] {
        w.remove_labeled(peer(p));
        settled(w).await;
    }
    running.stop().await?;
    running_b.stop().await?;
    Ok(())
}
