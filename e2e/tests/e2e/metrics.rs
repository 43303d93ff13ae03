//! The controller's metrics over HTTPS, authorised by the lab's API server
//! (TokenReview + SubjectAccessReview): a scrape without a token is 401, with a token
//! not allowed `get /metrics` 403, and with the token of a ServiceAccount bound to
//! deploy/rbac's `metallb-rs:metrics-reader` 200 with MetalLB's metric names.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::process::free_port;
use e2e::{Lab, wait_until};
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use tokio::process::Command;

use crate::controller::{apply, pool};

/// `(HTTP status, body)` of `GET https://127.0.0.1:<port>/metrics` (the certificate is
/// the controller's self-signed one, hence -k).
async fn scrape(port: u16, token: Option<&str>) -> Result<(u16, String)> {
    let mut cmd = Command::new("curl");
    cmd.args(["-sk", "--max-time", "10", "-w", "\n%{http_code}"]);
    if let Some(t) = token {
        cmd.arg("-H").arg(format!("Authorization: Bearer {t}"));
    }
    cmd.arg(format!("https://127.0.0.1:{port}/metrics"));
    let out = cmd.output().await.context("running curl")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    Ok((code.trim().parse().unwrap_or(0), body.to_owned()))
}

#[tokio::test]
async fn controller_metrics_are_served_over_https_to_authorised_readers_only() -> Result<()> {
    let lab = Lab::connect().await?;
    let setup = lab.controller_setup("metrics").await?;
    let ns = setup.namespace().to_owned();
    let pools = lab.metallb(&lab.client, &ns, "IPAddressPool");
    apply(&pools, "a", pool("a", &["198.51.100.0/28"])).await?;
    // A reader: a ServiceAccount bound to the deployed metrics-reader ClusterRole.
    Api::<ServiceAccount>::namespaced(lab.client.clone(), &ns)
        .create(
            &PostParams::default(),
            &ServiceAccount {
                metadata: ObjectMeta {
                    name: Some("prometheus".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await?;
    let binding = format!("metallb-rs:metrics-reader:{ns}");
    Api::<ClusterRoleBinding>::all(lab.client.clone())
        .create(
            &PostParams::default(),
            &ClusterRoleBinding {
                metadata: ObjectMeta {
                    name: Some(binding.clone()),
                    ..Default::default()
                },
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "ClusterRole".into(),
                    name: "metallb-rs:metrics-reader".into(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: "prometheus".into(),
                    namespace: Some(ns.clone()),
                    ..Default::default()
                }]),
            },
        )
        .await?;
    let reader = lab
        .token(&ns, "prometheus", Duration::from_secs(600))
        .await?;
    let stranger = lab
        .token(&ns, "controller", Duration::from_secs(600))
        .await?;

    let port = free_port()?;
    let port_s = port.to_string();
    let mut ctl = setup
        .start(
            "controller",
            &["--port", &port_s, "--metrics-bind-address", "127.0.0.1"],
        )
        .await?;
    let body = async {
        lab.create_lb_service(&ns, &setup.service("web")).await?;
        let services: Api<Service> = Api::namespaced(lab.client.clone(), &ns);
        wait_until("web allocated", Duration::from_secs(30), || async {
            let s = services.get("web").await.map_err(|e| e.to_string())?;
            let has = s
                .status
                .and_then(|s| s.load_balancer)
                .and_then(|l| l.ingress)
                .is_some_and(|i| !i.is_empty());
            if has {
                Ok(())
            } else {
                Err("no ingress".to_owned())
            }
        })
        .await?;

        let (code, _) = scrape(port, None).await?;
        ensure!(code == 401, "no token: {code}");
        let (code, _) = scrape(port, Some("not-a-token")).await?;
        ensure!(code == 401, "an invalid token: {code}");
        let (code, _) = scrape(port, Some(&stranger)).await?;
        ensure!(code == 403, "a token not allowed get /metrics: {code}");
        let text = wait_until("the reader's scrape", Duration::from_secs(20), || async {
            match scrape(port, Some(&reader)).await {
                Ok((200, body))
                    if body.contains("metallb_allocator_addresses_in_use_total{pool=\"a\"} 1") =>
                {
                    Ok(body)
                }
                Ok((code, body)) => Err(format!(
                    "{code}: {}",
                    body.lines().take(3).collect::<Vec<_>>().join(" | ")
                )),
                Err(e) => Err(e.to_string()),
            }
        })
        .await?;
        for want in [
            "metallb_allocator_addresses_total{pool=\"a\"} 16",
            "metallb_allocator_ipv4_addresses_total{pool=\"a\"} 16",
            "metallb_allocator_ipv6_addresses_total{pool=\"a\"} 0",
            "metallb_allocator_ipv4_addresses_in_use_total{pool=\"a\"} 1",
            "metallb_k8s_client_config_loaded_bool 1",
            "metallb_k8s_client_config_stale_bool 0",
            "metallb_k8s_client_updates_total",
        ] {
            ensure!(text.contains(want), "metrics lack {want:?}:\n{text}");
        }
        ensure!(!text.contains(&reader), "the token leaked into the metrics");
        ensure!(
            !ctl.process.log_text().contains(&reader),
            "the token leaked into the log"
        );
        ctl.process.check_running()?;
        Ok(())
    };
    let result = body.await;
    let stopped = ctl.process.terminate(Duration::from_secs(10)).await;
    result.map_err(|e| e.context(format!("controller log:\n{}", ctl.process.log_text())))?;
    ensure!(stopped?.success(), "exit after SIGTERM");
    let _ = Api::<ClusterRoleBinding>::all(lab.client.clone())
        .delete(&binding, &DeleteParams::default())
        .await;
    setup.delete().await?;
    Ok(())
}
