//! The speaker's metrics as deployed: HTTPS on the node's address (`--port`,
//! `--metrics-bind-address`), every scrape authorised by the lab's API server
//! (TokenReview + SubjectAccessReview through the speaker's own credentials): no token
//! 401, a token not allowed `get /metrics` 403, and the token of a ServiceAccount bound
//! to deploy/rbac's `metallb-rs:metrics-reader` 200 with MetalLB's metric names and
//! the values of what the speaker does.

use std::time::Duration;

use anyhow::{Result, ensure};
use e2e::speakers::{SpeakerLab, SpeakerLabOptions, netns_available, pool_ip};
use e2e::{EndpointSpec, Lab, wait_until};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use serde_json::json;

/// A line of `body` for `series` (a name with some of its labels, e.g.
/// `metallb_bgp_session_up{`) whose value is `value`.
fn has_series(body: &str, series: &str, label: &str, value: &str) -> bool {
    body.lines()
        .any(|l| l.starts_with(series) && l.contains(label) && l.rsplit(' ').next() == Some(value))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speaker_metrics_are_served_over_https_on_the_node_address_to_authorised_readers_only()
-> Result<()> {
    if !netns_available("spk-metrics")? {
        return Ok(());
    }
    let lab = Lab::connect().await?;
    let sl = SpeakerLab::start(&lab, SpeakerLabOptions::new("spk-metrics").metrics_https()).await?;
    let ns = sl.namespace().to_owned();
    let binding = format!("metallb-rs:metrics-reader:{ns}");
    let body = async {
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
        let stranger = lab.token(&ns, "speaker", Duration::from_secs(600)).await?;

        sl.apply_basic_config(json!({})).await?;
        sl.wait_sessions(&[1, 2, 3], Duration::from_secs(30))
            .await?;
        sl.create_service(
            sl.service("web")
                .endpoints(vec![EndpointSpec::ready("node-1")]),
            &[pool_ip(20)],
        )
        .await?;
        let prefix = format!("{}/32", pool_ip(20));
        sl.wait_next_hops(&prefix, &[1, 2, 3], Duration::from_secs(10))
            .await?;

        let sp = sl.speaker(1);
        let (code, _) = sp.scrape_https(None).await?;
        ensure!(code == 401, "no token: {code}");
        let (code, _) = sp.scrape_https(Some("not-a-token")).await?;
        ensure!(code == 401, "an invalid token: {code}");
        let (code, _) = sp.scrape_https(Some(&stranger)).await?;
        ensure!(code == 403, "a token not allowed get /metrics: {code}");
        let ip = pool_ip(20).to_string();
        let text = wait_until("the reader's scrape", Duration::from_secs(20), || async {
            match sp.scrape_https(Some(&reader)).await {
                Ok((200, body))
                    if has_series(&body, "metallb_speaker_announced{", &ip, "1")
                        && has_series(&body, "metallb_bgp_session_up{", "192.0.2.1", "1") =>
                {
                    Ok(body)
                }
                Ok((code, body)) => Err(format!(
                    "{code}: {}",
                    body.lines()
                        .filter(|l| l.starts_with("metallb_speaker_announced")
                            || l.starts_with("metallb_bgp_session_up"))
                        .collect::<Vec<_>>()
                        .join(" | ")
                )),
                Err(e) => Err(e.to_string()),
            }
        })
        .await?;
        for (series, label, value) in [
            ("metallb_speaker_announced{", "protocol=\"bgp\"", "1"),
            ("metallb_bgp_announced_prefixes_total{", "192.0.2.1", "1"),
            ("metallb_bgp_pending_prefixes_total{", "192.0.2.1", "0"),
            ("metallb_k8s_client_config_loaded_bool", "", "1"),
            ("metallb_k8s_client_config_stale_bool", "", "0"),
        ] {
            ensure!(
                has_series(&text, series, label, value),
                "no {series}..{label}..}} {value} in:\n{text}"
            );
        }
        for name in [
            "metallb_bgp_updates_total{",
            "metallb_k8s_client_updates_total",
        ] {
            ensure!(
                text.lines().any(|l| l.starts_with(name)),
                "no {name} in:\n{text}"
            );
        }
        anyhow::Ok(())
    };
    let r = body.await;
    let _ = Api::<ClusterRoleBinding>::all(lab.client.clone())
        .delete(&binding, &DeleteParams::default())
        .await;
    sl.finish(r).await
}
