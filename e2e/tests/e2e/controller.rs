//! The controller binary (`cargo build -p controller` first) against the lab, with the
//! deployed RBAC rules (deploy/rbac): its `ConfigurationState` follows the pools
//! (Valid -> Invalid on an overlap -> Valid), it writes nothing while nothing changes, and
//! it exits 0 on SIGTERM.
//!
//! Other tests of this binary run in parallel and create pools and the `controller`
//! ConfigurationState in metallb-system, so this one runs the controller with
//! `--namespace` set to a namespace of its own, holding a copy of deploy/rbac's
//! `metallb-rs:controller` Role (read from the API, so the deployed rules are what is
//! tested) and the deployed ClusterRole, bound to a `controller` ServiceAccount of that
//! namespace, whose writes the audit log tells from those of the other tests.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use e2e::process::{Process, free_port, workspace_binary};
use e2e::{AuditFilter, Lab, METALLB_NAMESPACE, wait_until};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const POOLS: [&str; 2] = ["a", "b"];

fn pool(name: &str, addresses: &[&str]) -> serde_json::Value {
    json!({
        "apiVersion": "metallb.io/v1beta1",
        "kind": "IPAddressPool",
        "metadata": { "name": name },
        "spec": { "addresses": addresses },
    })
}

async fn apply(api: &Api<DynamicObject>, name: &str, obj: serde_json::Value) -> Result<()> {
    api.patch(
        name,
        &PatchParams::apply(e2e::FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
    .with_context(|| format!("applying IPAddressPool {name}"))?;
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

async fn http_get(port: u16, path: &str) -> Result<String> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
        .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}

#[tokio::test]
async fn controller_reports_its_configuration_state_and_writes_nothing_when_idle() -> Result<()> {
    let started = Instant::now();
    let lab = Lab::connect().await?;
    let bin = workspace_binary(lab.repo(), "controller", "controller")?;
    lab.apply_deploy_rbac().await?;
    let test_ns = lab.test_namespace("controller").await?;
    let ns = test_ns.name.clone();
    let role_name = "metallb-rs:controller";
    let deployed = Api::<Role>::namespaced(lab.client.clone(), METALLB_NAMESPACE)
        .get(role_name)
        .await?;
    let meta = || ObjectMeta {
        name: Some(role_name.into()),
        namespace: Some(ns.clone()),
        ..Default::default()
    };
    Api::<Role>::namespaced(lab.client.clone(), &ns)
        .create(
            &PostParams::default(),
            &Role {
                metadata: meta(),
                rules: deployed.rules,
            },
        )
        .await?;
    // The controller runs as a ServiceAccount of its own in the test
    // namespace, bound to the deployed Role's rules and the deployed
    // ClusterRole, so that the audit log tells its writes from those of the
    // other tests, which use metallb-system's `controller` in parallel.
    Api::<ServiceAccount>::namespaced(lab.client.clone(), &ns)
        .create(
            &PostParams::default(),
            &ServiceAccount {
                metadata: ObjectMeta {
                    name: Some("controller".into()),
                    namespace: Some(ns.clone()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await?;
    let user = format!("system:serviceaccount:{ns}:controller");
    let subject = || Subject {
        kind: "ServiceAccount".into(),
        name: "controller".into(),
        namespace: Some(ns.clone()),
        ..Default::default()
    };
    Api::<ClusterRoleBinding>::all(lab.client.clone())
        .create(
            &PostParams::default(),
            &ClusterRoleBinding {
                metadata: ObjectMeta {
                    name: Some(format!("metallb-rs:controller:{ns}")),
                    ..Default::default()
                },
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "ClusterRole".into(),
                    name: role_name.into(),
                },
                subjects: Some(vec![subject()]),
            },
        )
        .await?;
    Api::<RoleBinding>::namespaced(lab.client.clone(), &ns)
        .create(
            &PostParams::default(),
            &RoleBinding {
                metadata: meta(),
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "Role".into(),
                    name: role_name.into(),
                },
                subjects: Some(vec![subject()]),
            },
        )
        .await?;
    lab.wait_allowed(&user, "list", "ipaddresspools.metallb.io", Some(&ns))
        .await?;
    lab.wait_allowed(&user, "create", "configurationstates.metallb.io", Some(&ns))
        .await?;
    let pools = lab.metallb(&lab.client, &ns, "IPAddressPool");
    let states = lab.metallb(&lab.client, &ns, "ConfigurationState");

    let dir = Process::scratch_dir("controller")?;
    let kubeconfig = lab
        .service_account_kubeconfig(&dir, &ns, "controller")
        .await?;
    let health = free_port()?;
    let health_s = health.to_string();
    let mut ctl = Process::spawn(
        &bin,
        &["--log-format", "text", "--health-probe-port", &health_s],
        &[
            (
                "KUBECONFIG",
                kubeconfig.to_str().context("kubeconfig path")?,
            ),
            ("METALLB_NAMESPACE", ns.as_str()),
        ],
        &dir,
        "controller",
    )?;

    let result = async {
        // Ready once the first configuration pass is done.
        wait_until("/readyz 200", Duration::from_secs(20), || async {
            match http_get(health, "/readyz").await {
                Ok(r) if r.starts_with("HTTP/1.1 200 ") => Ok(()),
                Ok(r) => Err(r.lines().next().unwrap_or_default().to_owned()),
                Err(e) => Err(e.to_string()),
            }
        })
        .await?;
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

        // Nothing changes for 10 s: no write by the controller.
        let audit = lab.audit();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mark = audit.mark().await?;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let idle = audit.count(Some(mark), &AuditFilter::user(&user)).await?;
        ensure!(
            idle.total == 0,
            "writes by the idle controller: {:?}",
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
        test_ns.delete().await?;
    }
    eprintln!(
        "controller e2e took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    result
}
