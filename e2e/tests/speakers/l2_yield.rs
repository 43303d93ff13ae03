//! A MetalLB installed in another namespace than ours (issue 26): with
//! `--yield-to-metallb-namespaces=<it>` and a Role there to list and watch its Pods (what
//! the chart's `speaker.yieldToMetallbNamespaces` renders), our speakers leave a layer-2
//! Service to MetalLB's while one of its speaker Pods runs on a candidate node, and take
//! it back when the Pod goes. A MetalLB speaker Pod in a namespace not named changes
//! nothing. Ours run on node-2 and node-3, MetalLB's on node-1 (a candidate: the
//! advertisement selects every node, the Service's policy is Cluster). Pods are objects only (no kubelet): their status is written as a kubelet
//! would.

use std::time::Duration;

use anyhow::{Result, ensure};
use e2e::speakers::{SpeakerLab, SpeakerLabOptions, netns_available, pool_ip};
use e2e::{EndpointSpec, Lab, wait_until};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::l2::{WITHIN, arp_answers, l2_statuses, node_macs, wait_owner};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metallb_speaker_in_another_namespace_takes_the_layer_2_service() -> Result<()> {
    let test = "spk-l2-yield";
    if !netns_available(test)? {
        return Ok(());
    }
    let lab = Lab::connect().await?;
    let pid = std::process::id();
    let (named, unnamed) = (format!("e2e-mlb-{pid}"), format!("e2e-mlb-other-{pid}"));
    let mut sl = SpeakerLab::start(
        &lab,
        SpeakerLabOptions::new(test).membership().without_speakers(),
    )
    .await?;
    let r = scenario(&mut sl, &named, &unnamed).await;
    let namespaces = Api::<Namespace>::all(lab.client.clone());
    for ns in [&named, &unnamed] {
        let _ = namespaces.delete(ns, &DeleteParams::default()).await;
    }
    sl.finish(r).await
}

/// MetalLB's speaker Pod as its chart makes it, on `node`, Ready.
async fn metallb_speaker(sl: &SpeakerLab, ns: &str, node: &str) -> Result<()> {
    let pods = Api::<Pod>::namespaced(sl.lab.client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "metallb-speaker", "labels": {
            "app.kubernetes.io/name": "metallb",
            "app.kubernetes.io/component": "speaker",
        }},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "hostNetwork": true,
            "containers": [{"name": "speaker", "image": "quay.io/metallb/speaker:v0.15.2"}],
        },
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    pods.patch_status(
        "metallb-speaker",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        }})),
    )
    .await?;
    Ok(())
}

async fn scenario(sl: &mut SpeakerLab, named: &str, unnamed: &str) -> Result<()> {
    let client = sl.lab.client.clone();
    for ns in [named, unnamed] {
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
            )
            .await?;
    }
    // The chart's Role in the named namespace: Pods, list and watch, for the speakers'
    // ServiceAccount.
    Api::<Role>::namespaced(client.clone(), named)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "metallb-rs:speaker-yield"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}],
            }))?,
        )
        .await?;
    Api::<RoleBinding>::namespaced(client.clone(), named)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "metallb-rs:speaker-yield"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "metallb-rs:speaker-yield"},
                "subjects": [{"kind": "ServiceAccount", "name": "speaker",
                    "namespace": sl.namespace()}],
            }))?,
        )
        .await?;
    // node-1 runs MetalLB's speaker (below), not ours: a node whose speaker is a member
    // of ours counts as ours whatever its Pods look like.
    let flag = format!("--yield-to-metallb-namespaces={named}");
    for n in 2..=3 {
        sl.start_speaker(n, &[&flag]).await?;
    }
    let ip = pool_ip(91);
    let ip_s = ip.to_string();
    let macs = node_macs(sl)?;
    sl.l2_address_on_segment(ip).await?;
    sl.apply("L2Advertisement", "l2", json!({})).await?;
    wait_until(
        "the speakers of node-2 and node-3 say their configuration is Valid",
        WITHIN,
        || async {
            let mut states = Vec::new();
            for node in ["node-2", "node-3"] {
                states.push(
                    sl.configuration_state(node)
                        .await
                        .map_err(|e| format!("{e:#}"))?,
                );
            }
            if states
                .iter()
                .all(|s| s.as_ref().is_some_and(|(r, _)| r == "Valid"))
            {
                Ok(())
            } else {
                Err(format!("{states:?}"))
            }
        },
    )
    .await?;
    let svc = sl.service("web").endpoints(vec![
        EndpointSpec::ready("node-1"),
        EndpointSpec::ready("node-3"),
    ]);
    sl.create_service(svc, &[ip]).await?;
    let owner = wait_owner(sl, &ip_s, &macs, None).await?;

    // A MetalLB speaker in a namespace not named: nothing changes (every sample
    // answered by the owner alone, for 3 s).
    metallb_speaker(sl, unnamed, "node-1").await?;
    for _ in 0..3 {
        let answers = arp_answers(sl, &ip_s)?;
        let nodes: Vec<&String> = answers.iter().filter_map(|m| macs.get(m)).collect();
        ensure!(
            nodes == [&owner],
            "a MetalLB speaker in {unnamed} (not named): answered by {nodes:?}, want {owner}"
        );
    }

    // One in the named namespace, on a candidate node: ours let go, the status goes.
    metallb_speaker(sl, named, "node-1").await?;
    wait_until(
        "no node of ours answers, no ServiceL2Status",
        WITHIN,
        || async {
            let answers = arp_answers(sl, &ip_s).map_err(|e| format!("{e:#}"))?;
            let statuses = l2_statuses(sl).await.map_err(|e| format!("{e:#}"))?;
            if answers.is_empty() && statuses.is_empty() {
                Ok(())
            } else {
                Err(format!("answers {answers:?}, statuses {statuses:?}"))
            }
        },
    )
    .await?;
    // and stay away while it runs
    tokio::time::sleep(Duration::from_secs(1)).await;
    let answers = arp_answers(sl, &ip_s)?;
    ensure!(
        answers.is_empty(),
        "answered again by {answers:?} while MetalLB's speaker runs"
    );

    // MetalLB's speaker gone: ours take the Service back.
    Api::<Pod>::namespaced(client.clone(), named)
        .delete("metallb-speaker", &DeleteParams::default().grace_period(0))
        .await?;
    wait_owner(sl, &ip_s, &macs, None).await?;
    Ok(())
}
