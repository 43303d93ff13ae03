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
use config::api::v1beta1::{ConfigurationResult, ConfigurationState, ConfigurationStateStatus};
use kube::api::{Api, DeleteParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use status::configuration_state::{self, Component};
use status::{
    FIELD_MANAGER_SPEAKER, KubeStatusApi, Metrics, StatusWriter, SystemClock, WriterConfig,
    watch_into,
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
