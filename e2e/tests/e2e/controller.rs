//! The controller binary (`cargo build -p controller` first) against the lab, with the
//! deployed RBAC rules (deploy/rbac): its `ConfigurationState` follows the pools
//! (Valid -> Invalid on an overlap -> Valid), it writes nothing while nothing changes, and
//! it exits 0 on SIGTERM. It runs isolated from the other tests
//! ([`e2e::controller`]: a namespace, ServiceAccount and `--lb-class` of its own).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use e2e::controller::http_get;
use e2e::{AuditFilter, Lab, RunningController, wait_until};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

const POOLS: [&str; 2] = ["a", "b"];

pub fn pool(name: &str, addresses: &[&str]) -> serde_json::Value {
    json!({
        "apiVersion": "metallb.io/v1beta1",
        "kind": "IPAddressPool",
        "metadata": { "name": name },
        "spec": { "addresses": addresses },
    })
}

pub async fn apply(api: &Api<DynamicObject>, name: &str, obj: serde_json::Value) -> Result<()> {
    api.patch(
        name,
        &PatchParams::apply(e2e::FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
    .with_context(|| format!("applying {name}"))?;
    Ok(())
}

/// `(result, lastError)` of the ConfigurationState `controller`.
async fn state(api: &Api<DynamicObject>) -> Result<Option<(String, String)>, String> {
    let obj = api
        .get_opt("controller")
        .await
        .map_err(|e| format!("get: {e}"))?;
    Ok(obj.map(|o| {
        let s = &o.data["status"];
        (
            s["result"].as_str().unwrap_or_default().to_owned(),
            s["lastError"].as_str().unwrap_or_default().to_owned(),
        )
    }))
}

async fn wait_state(api: &Api<DynamicObject>, result: &str, last_error: &str) -> Result<()> {
    let want = Some((result.to_owned(), last_error.to_owned()));
    wait_until(
        &format!("ConfigurationState controller {want:?}"),
        Duration::from_secs(20),
        || async {
            let got = state(api).await?;
            if got == want {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        },
    )
    .await
}

#[tokio::test]
async fn controller_reports_its_configuration_state_and_writes_nothing_when_idle() -> Result<()> {
    let started = Instant::now();
    let lab = Lab::connect().await?;
    let setup = lab.controller_setup("controller").await?;
    let ns = setup.namespace().to_owned();
    let user = setup.user.clone();
    let pools = lab.metallb(&lab.client, &ns, "IPAddressPool");
    let states = lab.metallb(&lab.client, &ns, "ConfigurationState");
    let RunningController {
        process: mut ctl,
        health,
    } = setup.start("controller", &[]).await?;

    let result = async {
        ensure!(http_get(health, "/healthz").await?.starts_with("HTTP/1.1 200 "));
        ctl.check_running()?;

        // A valid pool.
        apply(&pools, POOLS[0], pool(POOLS[0], &["198.51.100.0/24"])).await?;
        wait_state(&states, "Valid", "").await?;
        let cs = states.get("controller").await?;
        ensure!(
            cs.metadata.owner_references.unwrap_or_default().is_empty(),
            "no --pod-name: no ownerReference"
        );
        let table = lab
            .kubectl_ok(&["get", "configurationstates", "-n", &ns], None)
            .await?;
        ensure!(
            table.lines().any(|l| l.split_whitespace().take(2).eq(["controller", "Valid"])),
            "kubectl get configurationstates:\n{table}"
        );

        // An overlapping pool: Invalid, with MetalLB's message.
        apply(&pools, POOLS[1], pool(POOLS[1], &["198.51.100.128/25"])).await?;
        let msg = format!(
            "configuration error: CIDR \"198.51.100.128/25\" in pool \"{}\" overlaps with already defined CIDR \"198.51.100.0/24\"",
            POOLS[1]
        );
        wait_state(&states, "Invalid", &msg).await?;
        let table = lab
            .kubectl_ok(&["get", "configurationstates", "-n", &ns], None)
            .await?;
        ensure!(
            table.lines().any(|l| l.split_whitespace().take(2).eq(["controller", "Invalid"])
                && l.contains("overlaps")),
            "kubectl get configurationstates:\n{table}"
        );

        // Fixed: Valid again.
        apply(&pools, POOLS[0], pool(POOLS[0], &["198.51.100.0/25"])).await?;
        wait_state(&states, "Valid", "").await?;
        ctl.check_running()?;
        ensure!(
            ctl.log_text().contains("keeping the last valid configuration"),
            "the log says the last valid configuration is kept:\n{}",
            ctl.log_text()
        );

        // Nothing changes for 10 s: no write by the controller but its Lease renewals.
        let audit = lab.audit();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mark = audit.mark().await?;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let idle = audit.count(Some(mark), &AuditFilter::user(&user)).await?;
        let writes = idle.rows_except("leases");
        ensure!(
            writes.is_empty(),
            "writes by the idle controller (its Lease renewals aside): {writes:?}"
        );
        ensure!(
            !idle.rows().is_empty(),
            "the leading controller renews its Lease while idle: {:?}",
            idle.rows()
        );
        ctl.check_running()?;
        Ok(())
    }
    .await;
    let result = match result {
        Ok(()) => {
            let status = ctl.terminate(Duration::from_secs(10)).await?;
            ensure!(
                status.success(),
                "exit after SIGTERM: {status}; log:\n{}",
                ctl.log_text()
            );
            Ok(())
        }
        Err(e) => Err(e.context(format!("controller log:\n{}", ctl.log_text()))),
    };
    if result.is_ok() {
        setup.delete().await?;
    }
    eprintln!(
        "controller e2e took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    result
}

/// `--ml-secret-name` / `--deployment` (as deployed): the controller creates the
/// speakers' membership key when it is missing (22 base64 characters under `secretkey`,
/// owned by its Deployment), with the deployed RBAC, and never changes an existing one.
#[tokio::test]
async fn controller_creates_the_memberlist_secret_once() -> Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Secret;
    let lab = Lab::connect().await?;
    let setup = lab.controller_setup("ml-secret").await?;
    let ns = setup.namespace().to_owned();
    // The Deployment object only (the lab runs no Deployment controller).
    let d: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "metallb-rs-controller"},
        "spec": {"selector": {"matchLabels": {"app": "c"}},
                 "template": {"metadata": {"labels": {"app": "c"}},
                              "spec": {"containers": [{"name": "c", "image": "e2e.invalid/c"}]}}},
    }))?;
    let d = Api::<Deployment>::namespaced(lab.client.clone(), &ns)
        .create(&kube::api::PostParams::default(), &d)
        .await?;
    let secrets = Api::<Secret>::namespaced(lab.client.clone(), &ns);
    // The names deploy/ uses (its RBAC names them).
    let args = [
        "--ml-secret-name",
        "metallb-rs-memberlist",
        "--deployment",
        "metallb-rs-controller",
    ];
    let run = setup.start("controller", &args).await?;
    let result = async {
        let s = wait_until("the memberlist Secret", Duration::from_secs(20), || async {
            secrets
                .get_opt("metallb-rs-memberlist")
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "absent".to_string())
        })
        .await?;
        let key = s
            .data
            .as_ref()
            .and_then(|d| d.get("secretkey"))
            .map(|v| v.0.clone())
            .unwrap_or_default();
        ensure!(
            key.len() == 22
                && key
                    .iter()
                    .all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/'),
            "secretkey is {} bytes of base64 without padding? {:?}",
            key.len(),
            String::from_utf8_lossy(&key).len()
        );
        let owners = s.metadata.owner_references.clone().unwrap_or_default();
        ensure!(
            owners.len() == 1
                && owners[0].kind == "Deployment"
                && owners[0].name == "metallb-rs-controller"
                && Some(&owners[0].uid) == d.metadata.uid.as_ref(),
            "owner references {owners:?}"
        );
        anyhow::Ok((key, s.metadata.resource_version.clone()))
    }
    .await;
    let mut process = run.process;
    process.terminate(Duration::from_secs(10)).await?;
    let (key, rv) = result?;
    // A second start keeps the Secret as it is.
    let run = setup.start("controller", &args).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut process = run.process;
    process.terminate(Duration::from_secs(10)).await?;
    let s = secrets.get("metallb-rs-memberlist").await?;
    ensure!(
        s.metadata.resource_version == rv
            && s.data.and_then(|d| d.get("secretkey").map(|v| v.0.clone())) == Some(key),
        "the existing Secret was changed by a second controller start"
    );
    setup.delete().await
}
